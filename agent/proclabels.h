/*
 * proclabels.h - the label pipeline that names each process's series.
 *
 * Design, as Prometheus service discovery does it:
 *   1. Discovery labels: for every process the agent builds
 *        __meta_process_pid, __meta_process_comm, __meta_process_executable,
 *        __meta_process_executable_name (basename), __meta_process_cgroup,
 *        __meta_process_container_id, __meta_system_node
 *      plus the default target labels node, pid, comm, executable and (when non-empty)
 *      container_id.
 *   2. Relabeling: an agent_relabel_fn (NULL = none) rewrites that set, or drops the process.
 *      lib/relabel (Prometheus relabel_configs, `strata agent -relabel-config FILE`) plugs in
 *      here through agent_relabel_with_rules (agent_cli.h).
 *      Kubernetes discovery, when added, contributes __meta_kubernetes_* labels at step 1.
 *   3. Finalisation: every label starting with "__" is removed, then __name__ is set to the
 *      profile name ("strata_agent"), and the set is sorted and validated.
 * Labels are computed once per process snapshot and kept with it, not per window.
 */
#ifndef STRATA_AGENT_PROCLABELS_H
#define STRATA_AGENT_PROCLABELS_H

#include <stdbool.h>

#include "common/error.h"
#include "labels/labels.h"
#include "procinfo.h"

/* The profile name: series land under strata_agent:samples:count:cpu:nanoseconds:delta. */
#define AGENT_PROFILE_NAME "strata_agent"

/* Rewrites *labels in place (sorted on entry); sets *drop to exclude the process. */
typedef int (*agent_relabel_fn)(void *ctx, label_set *labels, bool *drop, strata_error *err);

typedef struct agent_label_options {
    const char *node;
    agent_relabel_fn relabel; /* may be NULL */
    void *relabel_ctx;
} agent_label_options;

/* Builds the discovery + default labels of step 1 into *out (overwritten, sorted). proc may be
 * NULL for a process that was gone before /proc could be read; pid and comm then come from the
 * sample. */
int agent_discovery_labels(const agent_proc *proc, pid_t pid, const char *comm, const char *node,
                           label_set *out, strata_error *err);

/* Runs the whole pipeline; *drop tells the caller to exclude the process. */
int agent_process_labels(const agent_proc *proc, pid_t pid, const char *comm,
                         const agent_label_options *options, label_set *out, bool *drop,
                         strata_error *err);

#endif
