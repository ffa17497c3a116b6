/*
 * procinfo.h - what the agent learns about a process from /proc: its command name, executable,
 * cgroup and container id, start time, and executable memory mappings.
 *
 * Design. A process is read once, when its first sample arrives (the ring is drained every
 * 250 ms), and the snapshot is kept by the aggregator until the process has been silent for a
 * whole window. That is what lets a process that exits within a window still be reported with
 * its labels and mappings. The start time (field 22 of /proc/PID/stat) tells a reused pid from
 * the process the snapshot describes.
 *
 * Only executable mappings are kept (the ones stack addresses can fall in). Files are named as
 * the process sees them; the symbolizer opens them through /proc/PID/map_files or
 * /proc/PID/root so that processes in other mount namespaces (containers) resolve correctly.
 *
 * Container ids come from /proc/PID/cgroup: each line (cgroup v1 `N:controllers:/path` and v2
 * `0::/path`) is split into path components, and a component that is, after removing a runtime
 * prefix (docker-, cri-containerd-, crio-, containerd-, libpod-) and a `.scope` suffix, exactly 64
 * hex digits is the id. That covers docker (`/docker/<id>`, `docker-<id>.scope`), containerd and
 * CRI-O under systemd or cgroupfs drivers, and kubepods paths
 * (`/kubepods/burstable/pod<uid>/<id>`). CRI-O's `crio-conmon-<id>` (the monitor, not the
 * container) is not matched.
 *
 * The parsers take text so the unit tests drive them with fixtures; agent_proc_read does the I/O.
 */
#ifndef STRATA_AGENT_PROCINFO_H
#define STRATA_AGENT_PROCINFO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/error.h"

#define AGENT_CONTAINER_ID_LEN 64

typedef struct agent_mapping {
    uint64_t start;
    uint64_t end;
    uint64_t offset;
    uint64_t inode;
    uint32_t dev_major;
    uint32_t dev_minor;
    char *path; /* "" for anonymous memory; "[vdso]" and the like for special mappings */
} agent_mapping;

typedef struct agent_proc {
    pid_t pid;
    uint64_t start_time; /* clock ticks after boot */
    char comm[16];
    char *executable; /* readlink of /proc/PID/exe, "" if unreadable (kernel threads) */
    char *cgroup;     /* the cgroup v2 path, else the first non-root v1 path; "" if none */
    char container_id[AGENT_CONTAINER_ID_LEN + 1]; /* "" when not in a container */
    agent_mapping *mappings;                       /* executable mappings, sorted by start */
    size_t n_mappings;
} agent_proc;

/* Parses one /proc/PID/maps line. Returns 0 and fills *out (path owned, NULL for anonymous),
 * sets *executable; -1 (INVALID_ARGUMENT) for a malformed line. */
int agent_parse_maps_line(const char *line, agent_mapping *out, bool *executable,
                          strata_error *err);

/* Finds the container id in /proc/PID/cgroup text; writes it (or "") to out. Returns true if
 * found. Also returns the cgroup path as described above in cgroup_out (may be NULL). */
bool agent_container_id_from_cgroup(const char *text, char out[AGENT_CONTAINER_ID_LEN + 1],
                                    char *cgroup_out, size_t cgroup_out_len);

/* Parses /proc/PID/stat text: comm and start time. -1 (INVALID_ARGUMENT) if malformed. */
int agent_parse_stat(const char *text, char comm[16], uint64_t *start_time, strata_error *err);

/* Reads /proc/PID's stat, exe, cgroup and maps under proc_root ("/proc" normally). NOT_FOUND if
 * the process is gone. *out is overwritten; on failure it is left empty. */
int agent_proc_read(const char *proc_root, pid_t pid, agent_proc *out, strata_error *err);

/* Reads only the start time (to detect pid reuse); NOT_FOUND if the process is gone. */
int agent_proc_start_time(const char *proc_root, pid_t pid, uint64_t *start_time,
                          strata_error *err);

/* Re-reads the executable mappings (after a dlopen, say). */
int agent_proc_reload_maps(const char *proc_root, agent_proc *p, strata_error *err);

/* The mapping holding addr, or NULL. */
const agent_mapping *agent_proc_find_mapping(const agent_proc *p, uint64_t addr);

void agent_proc_free(agent_proc *p);

#endif
