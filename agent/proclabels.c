/*
 * proclabels.c - discovery labels, relabeling hook and finalisation. See proclabels.h.
 *
 * Values come from the kernel and the file system (process names cut at 15 bytes, possibly in
 * the middle of a character; paths in any encoding), and the ingester refuses a push whose
 * strings are not valid UTF-8: values are repaired (each bad byte becomes U+FFFD) as they are
 * added, so one odd process never costs the node its whole push.
 */
#include "proclabels.h"

#include <stdio.h>
#include <string.h>

#include "common/utf8.h"

static int add(label_set *set, const char *name, const char *value, strata_error *err) {
    size_t len = strlen(value);
    if (strata_utf8_is_valid(value, len))
        return label_set_add(set, name, strlen(name), value, len, err);
    strata_buffer fixed = STRATA_BUFFER_INIT;
    int rc = strata_utf8_append_sanitized(&fixed, value, len) == 0
                 ? label_set_add(set, name, strlen(name), (const char *)fixed.data, fixed.len, err)
                 : strata_error_oom(err);
    strata_buffer_free(&fixed);
    return rc;
}

static const char *basename_of(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash != NULL ? slash + 1 : path;
}

int agent_discovery_labels(const agent_proc *proc, pid_t pid, const char *comm, const char *node,
                           label_set *out, strata_error *err) {
    *out = (label_set)LABEL_SET_INIT;
    char pid_text[16];
    snprintf(pid_text, sizeof pid_text, "%d", (int)pid);
    const char *exe = proc != NULL ? proc->executable : "";
    const char *cgroup = proc != NULL ? proc->cgroup : "";
    const char *container = proc != NULL ? proc->container_id : "";
    const char *name = proc != NULL && proc->comm[0] != '\0' ? proc->comm : comm;
    int rc = add(out, "__meta_process_pid", pid_text, err) ||
             add(out, "__meta_process_comm", name, err) ||
             add(out, "__meta_process_executable", exe, err) ||
             add(out, "__meta_process_executable_name", basename_of(exe), err) ||
             add(out, "__meta_process_cgroup", cgroup, err) ||
             add(out, "__meta_process_container_id", container, err) ||
             add(out, "__meta_system_node", node, err) || add(out, "node", node, err) ||
             add(out, "pid", pid_text, err) || add(out, "comm", name, err) ||
             add(out, "executable", exe, err) ||
             (container[0] != '\0' && add(out, "container_id", container, err));
    if (rc != 0) {
        label_set_free(out);
        return -1;
    }
    label_set_sort(out);
    return 0;
}

/* Removes every "__" label (discovery and other internal labels). */
static void drop_internal(label_set *set) {
    size_t i = 0;
    while (i < set->count) {
        if (strncmp(set->labels[i].name, "__", 2) == 0)
            label_set_remove(set, set->labels[i].name);
        else
            i++;
    }
}

int agent_process_labels(const agent_proc *proc, pid_t pid, const char *comm,
                         const agent_label_options *options, label_set *out, bool *drop,
                         strata_error *err) {
    *drop = false;
    if (agent_discovery_labels(proc, pid, comm, options->node, out, err) != 0)
        return -1;
    if (options->pods != NULL && proc != NULL) {
        bool in_pod;
        if (agent_kubepods_add_labels(options->pods, proc->container_id, out, &in_pod, err) != 0)
            goto fail;
        label_set_sort(out);
    }
    if (options->relabel != NULL) {
        if (options->relabel(options->relabel_ctx, out, drop, err) != 0)
            goto fail;
        if (*drop)
            return 0;
        label_set_sort(out);
    }
    drop_internal(out);
    if (label_set_set(out, STRATA_LABEL_NAME, AGENT_PROFILE_NAME, err) != 0)
        goto fail;
    label_set_sort(out);
    if (label_set_validate(out, err) != 0)
        goto fail;
    return 0;
fail:
    label_set_free(out);
    return -1;
}
