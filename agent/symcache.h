/*
 * symcache.h - the agent's cache of ELF symbol tables, shared by every process on the node.
 *
 * Design. A mapping is identified by the file identity /proc/PID/maps gives (device, inode,
 * path). The first time an identity is seen its build id is read (notes only, cheap); if a file
 * with the same build id is already loaded (the same libc in another container, a binary
 * exec'ed again) the identity becomes an alias of that entry, so symbols are loaded once per
 * build id. Otherwise the file is loaded (agent_elf_load), through /proc/PID/root/<path> so
 * containers resolve in their own mount namespace, falling back to /proc/PID/map_files/<range>
 * (deleted files) and finally to the plain path (the process already exited).
 *
 * A file that cannot be read is remembered as failed and retried after `retry_windows` windows,
 * so a missing file costs one open per retry period, not one per sample.
 *
 * Memory is bounded at every load, not once per window: when a table just loaded takes the
 * tables together past max_bytes, the least recently used others are freed until they fit again
 * (their entries stay and reload on next use). So a busy node whose window touches more tables
 * than the budget holds stays within it and pays in reloads, which the loads and evictions
 * counters show; the table just loaded is kept even when it alone is larger than the budget.
 * Recency is counted per lookup, so the tables every process maps (libc, the loader) stay while
 * one-off binaries go first. Tables hold names only once read (elfsym.h), so what a table costs
 * grows with the lookups made in it; that growth is counted at its next use and at the end of
 * each window, when the budget is enforced again.
 *
 * Names are read from the mapped file through the path of the process that loaded the table;
 * when that process has gone, the next process mapping the same build gives the path.
 * More than max_entries identities reset the cache.
 *
 * Not thread-safe: the agent's main loop is its only user.
 */
#ifndef STRATA_AGENT_SYMCACHE_H
#define STRATA_AGENT_SYMCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "elfsym.h"
#include "procinfo.h"

typedef struct agent_symcache agent_symcache;

typedef struct agent_symcache_options {
    const char *proc_root;  /* NULL = "/proc" */
    const char *debug_dir;  /* NULL = "/usr/lib/debug" */
    size_t max_bytes;       /* 0 = 6 MiB */
    size_t max_entries;     /* 0 = 20,000 */
    unsigned retry_windows; /* 0 = 6 */
} agent_symcache_options;

typedef struct agent_symcache_stats {
    uint64_t loads;     /* files parsed */
    uint64_t failures;  /* files that could not be read */
    uint64_t evictions; /* tables freed to stay under max_bytes */
    size_t entries;
    size_t bytes;
    size_t peak_bytes; /* the most the tables ever held together */
} agent_symcache_stats;

agent_symcache *agent_symcache_new(const agent_symcache_options *options, strata_error *err);

/* The symbols of mapping m of process p, loading them on first use; NULL when the mapping has no
 * file or the file cannot be read. Valid until the next agent_symcache_get (which may free it to
 * stay within max_bytes) or agent_symcache_end_window: copy what must outlive that. */
agent_elf *agent_symcache_get(agent_symcache *c, const agent_proc *p, const agent_mapping *m);

/* Ends a window: the names files the window's lookups opened are closed, the names they read
 * are counted, the budget is enforced again, and failed files are retried after retry_windows
 * windows. */
void agent_symcache_end_window(agent_symcache *c);

/* Finds a readable path to the file of mapping m of process p - /proc/PID/root/<path> (the
 * process's mount namespace), then /proc/PID/map_files/<range> (a deleted file), then the plain
 * path - and reads its build id ("" if none) into build_id (AGENT_BUILD_ID_HEX_MAX + 1 bytes).
 * -1 if none can be read. Shared with the unwinder, which opens the same files. */
int agent_mapped_file_path(const char *proc_root, const agent_proc *p, const agent_mapping *m,
                           char *path, size_t cap, char *build_id);

void agent_symcache_stats_get(const agent_symcache *c, agent_symcache_stats *out);
void agent_symcache_free(agent_symcache *c);

#endif
