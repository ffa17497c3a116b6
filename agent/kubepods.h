/*
 * kubepods.h - Kubernetes labels for the agent's processes: container id -> pod.
 *
 * Design. The agent knows each process's container id from /proc/PID/cgroup (procinfo.h). On a
 * Kubernetes node it watches the pods of its own node through the API server - lib/kubernetes
 * pod discovery with the field selector spec.nodeName=NODE, in-cluster by default or from a
 * kubeconfig - and keeps, for every container of those pods, the labels Prometheus's role pod
 * gives its target: __meta_kubernetes_namespace, _pod_name, _pod_uid, _pod_label_*, ...,
 * _pod_container_name, _pod_container_id, _pod_container_image, _pod_container_init (port labels
 * are left out: a process is a container, not a port). The container id in a pod's status reads
 * "containerd://<id>" (or docker://, cri-o://); the runtime prefix is dropped to match the cgroup.
 *
 * For a process in a known container, kubepods adds those __meta_kubernetes_* labels (for
 * relabel_configs) and the target labels `namespace`, `pod` and `container`. The map is updated
 * on the discovery thread and read on the agent's thread under one mutex; a lookup copies labels
 * out, so nothing is shared after it returns.
 *
 * Limits: a process first labelled before its pod's status names the container (the first second
 * or so of a container's life) keeps the labels it got then.
 */
#ifndef STRATA_AGENT_KUBEPODS_H
#define STRATA_AGENT_KUBEPODS_H

#include <stdbool.h>
#include <stddef.h>

#include "common/error.h"
#include "discovery/discovery.h"
#include "labels/labels.h"

typedef struct agent_kubepods agent_kubepods;

typedef struct agent_kubepods_options {
    const char *node;       /* watch pods with spec.nodeName = node */
    const char *kubeconfig; /* NULL: in-cluster service account */
    const char *api_server; /* NULL: from the kubeconfig or in-cluster (tests point it here) */
} agent_kubepods_options;

/* Resolves the connection and starts watching; NULL with err on failure (no cluster, unreadable
 * kubeconfig). */
agent_kubepods *agent_kubepods_new(const agent_kubepods_options *options, strata_error *err);
void agent_kubepods_free(agent_kubepods *k);
/* True once the node's pods have been listed. */
bool agent_kubepods_synced(agent_kubepods *k);
/* Waits up to timeout_ms for the first list; returns agent_kubepods_synced. */
bool agent_kubepods_wait_synced(agent_kubepods *k, int timeout_ms);
/* The discovery's last error ("" if none), for logs. */
void agent_kubepods_last_error(agent_kubepods *k, char *out, size_t out_len);

/* Adds the pod labels of container_id (64 hex, as from the cgroup) to labels (not sorted after).
 * *found tells whether the container is known; unknown containers leave labels unchanged. */
int agent_kubepods_add_labels(agent_kubepods *k, const char *container_id, label_set *labels,
                              bool *found, strata_error *err);

/* The discovery_update_fn behind it, for tests that feed target groups directly (k as ctx). */
void agent_kubepods_update(void *ctx, const target_group *groups, size_t n_groups);
/* A map fed only through agent_kubepods_update (no API server). */
agent_kubepods *agent_kubepods_new_empty(strata_error *err);

#endif
