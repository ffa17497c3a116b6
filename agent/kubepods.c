/*
 * kubepods.c - container id -> pod labels from the node's pods. See kubepods.h.
 */
#include "kubepods.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/thread.h"
#include "common/array.h"
#include "kubernetes/kubernetes.h"

#define META_POD "__meta_kubernetes_pod_"
#define CONTAINER_ID_LABEL META_POD "container_id"

typedef struct container_entry {
    char *id;     /* runtime prefix dropped */
    char *source; /* the pod's source, to forget its containers when it changes */
    label_set labels;
} container_entry;

struct agent_kubepods {
    pthread_mutex_t mu;
    container_entry *entries;
    size_t n_entries, cap_entries;
    kubernetes_discovery *discovery; /* NULL for a map fed by hand */
};

static void entry_free(container_entry *e) {
    free(e->id);
    free(e->source);
    label_set_free(&e->labels);
}

/* Drops every container of source (the pod changed or went). Called with mu held. */
static void forget_source(agent_kubepods *k, const char *source) {
    size_t kept = 0;
    for (size_t i = 0; i < k->n_entries; i++) {
        if (strcmp(k->entries[i].source, source) == 0)
            entry_free(&k->entries[i]);
        else
            k->entries[kept++] = k->entries[i];
    }
    k->n_entries = kept;
}

static bool has_entry(const agent_kubepods *k, const char *id) {
    for (size_t i = 0; i < k->n_entries; i++)
        if (strcmp(k->entries[i].id, id) == 0)
            return true;
    return false;
}

/* "containerd://abc" -> "abc". */
static const char *strip_runtime(const char *id) {
    const char *sep = strstr(id, "://");
    return sep != NULL ? sep + 3 : id;
}

/* The labels kept for a container: the target's, less the address and port labels. */
static int container_labels(const target_group *g, size_t t, label_set *out, strata_error *err) {
    if (target_group_merge_labels(g, t, out, err) != 0)
        return -1;
    label_set_remove(out, DISCOVERY_ADDRESS_LABEL);
    label_set_remove(out, META_POD "container_port_name");
    label_set_remove(out, META_POD "container_port_number");
    label_set_remove(out, META_POD "container_port_protocol");
    return 0;
}

/* Adds the containers of one group. Called with mu held. */
static int add_group(agent_kubepods *k, const target_group *g, strata_error *err) {
    for (size_t t = 0; t < g->n_targets; t++) {
        const char *raw = label_set_get(&g->targets[t], CONTAINER_ID_LABEL);
        if (raw == NULL || raw[0] == '\0')
            continue; /* not started yet */
        const char *id = strip_runtime(raw);
        if (has_entry(k, id))
            continue; /* one target per port: the first says it all */
        if (STRATA_ARRAY_RESERVE_OR_OOM(k->entries, k->cap_entries, k->n_entries + 1, err) != 0)
            return -1;
        container_entry *e = &k->entries[k->n_entries];
        memset(e, 0, sizeof *e);
        int rc = (e->id = strdup(id)) == NULL || (e->source = strdup(g->source)) == NULL
                     ? strata_error_oom(err)
                     : container_labels(g, t, &e->labels, err);
        if (rc != 0) {
            entry_free(e);
            return -1;
        }
        k->n_entries++;
    }
    return 0;
}

void agent_kubepods_update(void *ctx, const target_group *groups, size_t n_groups) {
    agent_kubepods *k = ctx;
    pthread_mutex_lock(&k->mu);
    for (size_t i = 0; i < n_groups; i++) {
        forget_source(k, groups[i].source);
        /* On allocation failure the pod's containers stay unlabelled until its next change. */
        (void)add_group(k, &groups[i], NULL);
    }
    pthread_mutex_unlock(&k->mu);
}

agent_kubepods *agent_kubepods_new_empty(strata_error *err) {
    agent_kubepods *k = calloc(1, sizeof *k);
    if (k == NULL) {
        strata_error_oom(err);
        return NULL;
    }
    if (strata_mutex_init(&k->mu, err) != 0) {
        free(k);
        return NULL;
    }
    return k;
}

agent_kubepods *agent_kubepods_new(const agent_kubepods_options *options, strata_error *err) {
    agent_kubepods *k = agent_kubepods_new_empty(err);
    if (k == NULL)
        return NULL;
    char field[512];
    snprintf(field, sizeof field, "spec.nodeName=%s", options->node);
    kubernetes_selector node_pods = {.role = "pod", .field = field};
    kubernetes_sd_config config = {
        .role = "pod",
        .api_server = (char *)options->api_server,
        .kubeconfig_file = options->api_server == NULL ? (char *)options->kubeconfig : NULL,
        .selectors = {.items = &node_pods, .count = 1},
    };
    k->discovery = kubernetes_discovery_new(&config, agent_kubepods_update, k, err);
    if (k->discovery == NULL) {
        agent_kubepods_free(k);
        return NULL;
    }
    return k;
}

void agent_kubepods_free(agent_kubepods *k) {
    if (k == NULL)
        return;
    kubernetes_discovery_free(k->discovery); /* no update runs after this */
    for (size_t i = 0; i < k->n_entries; i++)
        entry_free(&k->entries[i]);
    free(k->entries);
    pthread_mutex_destroy(&k->mu);
    free(k);
}

bool agent_kubepods_synced(agent_kubepods *k) {
    if (k->discovery == NULL)
        return true;
    kubernetes_discovery_stats st;
    kubernetes_discovery_get_stats(k->discovery, &st);
    return st.synced;
}

bool agent_kubepods_wait_synced(agent_kubepods *k, int timeout_ms) {
    for (int waited = 0; !agent_kubepods_synced(k) && waited < timeout_ms; waited += 20)
        usleep(20000);
    return agent_kubepods_synced(k);
}

void agent_kubepods_last_error(agent_kubepods *k, char *out, size_t out_len) {
    out[0] = '\0';
    if (k->discovery == NULL)
        return;
    kubernetes_discovery_stats st;
    kubernetes_discovery_get_stats(k->discovery, &st);
    snprintf(out, out_len, "%s", st.last_error);
}

static int copy_labels(const container_entry *e, label_set *labels, strata_error *err) {
    for (size_t i = 0; i < e->labels.count; i++)
        if (label_set_set(labels, e->labels.labels[i].name, e->labels.labels[i].value, err) != 0)
            return -1;
    const char *ns = label_set_get(&e->labels, "__meta_kubernetes_namespace");
    const char *pod = label_set_get(&e->labels, META_POD "name");
    const char *container = label_set_get(&e->labels, META_POD "container_name");
    if (label_set_set(labels, "namespace", ns != NULL ? ns : "", err) != 0 ||
        label_set_set(labels, "pod", pod != NULL ? pod : "", err) != 0 ||
        label_set_set(labels, "container", container != NULL ? container : "", err) != 0)
        return -1;
    return 0;
}

int agent_kubepods_add_labels(agent_kubepods *k, const char *container_id, label_set *labels,
                              bool *found, strata_error *err) {
    *found = false;
    if (container_id == NULL || container_id[0] == '\0')
        return 0;
    pthread_mutex_lock(&k->mu);
    int rc = 0;
    for (size_t i = 0; i < k->n_entries; i++) {
        if (strcmp(k->entries[i].id, container_id) == 0) {
            *found = true;
            rc = copy_labels(&k->entries[i], labels, err);
            break;
        }
    }
    pthread_mutex_unlock(&k->mu);
    return rc;
}
