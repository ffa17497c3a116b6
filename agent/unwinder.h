/*
 * unwinder.h - gives the BPF stack walker (bpf/unwind.bpf.h) the unwind tables of the processes
 * it samples: one table per file, shared, built lazily, within a fixed budget of rows.
 *
 * Design. When the agent first reads a process (its first sample, or the first after an exec),
 * agent_unwinder_add_process looks at each of its executable file mappings. A file is known by
 * its identity (device, inode) and, once read, by its build id: a file seen before (the same
 * libc in every process, in every container) costs a lookup; a new one is opened through the
 * process's view (/proc/PID/root, map_files), its CFI turned into rows (cfi.h) and the rows
 * written once into the one row array BPF searches. The process then gets its list - each
 * mapping's range, load bias and slice of rows - in the pid-keyed map. Files without CFI, and
 * files that cannot be read, are remembered as such (retried after a while) and left out of the
 * list, so their frames take frame-pointer steps.
 *
 * Budget. The row array has a fixed size (kernel memory, -unwind-table-rows). A file's rows are
 * streamed from the parser straight into the longest free range, a chunk at a time (no table is
 * ever held here whole); a table longer than that range is counted, room is made, and it is read
 * again into the room. Room is made by freeing tables no process lists and none has listed in
 * the current window, least recently listed first; a table that still does not fit is refused
 * (counted) and that file's frames fall back to frame pointers. Its size is remembered, so a
 * refused or evicted table is not read again until there is room for it, and tables of
 * processes that come and go (a compiler run every second) are never evicted for each other
 * within a window, which would have them read in turns. User-space memory is small: a table
 * keeps its slice, its identity, its load segments and the pc of every 64th row (the index a
 * stack copy's walk uses to read back one block of rows in one call).
 *
 * Stack copies. The ticks of a process before it is listed carry a copy of the top of its stack
 * (bpf/unwind.h); agent_unwinder_walk_copy walks them in user space with the same rows and the same
 * steps as the BPF walker, once the process is listed, so a process's first samples are as whole
 * as the rest. Each add_process ends with `decided`, which stops the copies.
 *
 * Changing mappings. A list that differs from the process's previous one (or is its first) asks
 * BPF to wake user space at once when a walk leaves it (AGENT_UNWIND_WAKE_OFF_LIST): the loader
 * may still be mapping libraries. A list found the same as before does not.
 *
 * Where rows and lists go is a set of callbacks (the sampler's BPF maps in the agent, arrays in
 * the tests), so everything here runs without BPF. Not thread-safe: the agent's main loop is the
 * only user.
 */
#ifndef STRATA_AGENT_UNWINDER_H
#define STRATA_AGENT_UNWINDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "bpf/unwind.h"
#include "common/error.h"
#include "procinfo.h"

typedef struct agent_unwinder agent_unwinder;

typedef struct agent_unwinder_sink {
    /* Writes rows[0..n) at first, first + 1, ... of the row array. */
    int (*write_rows)(void *ctx, uint32_t first, const struct agent_unwind_row *rows, uint32_t n,
                      strata_error *err);
    /* Sets (replaces) the list of process pid. */
    int (*write_process)(void *ctx, uint32_t pid, const struct agent_unwind_proc *list,
                         strata_error *err);
    /* Removes the list of process pid (absent is fine). */
    void (*delete_process)(void *ctx, uint32_t pid);
    /* Tells BPF that user space has decided about pid (listed or not): no more stack copies. */
    void (*decided)(void *ctx, uint32_t pid);
    /* Reads rows first .. first + n - 1 back (for walking stack copies); 0 or -1. */
    int (*read_rows)(void *ctx, uint32_t first, uint32_t n, struct agent_unwind_row *rows);
    void *ctx;
} agent_unwinder_sink;

typedef struct agent_unwinder_options {
    const char *proc_root;  /* NULL = "/proc" */
    uint32_t max_rows;      /* the row array's size; 0 = AGENT_UNWIND_DEFAULT_ROWS */
    size_t max_files;       /* identities remembered; 0 = 20,000 (more reset the cache) */
    unsigned retry_windows; /* a file that could not be read is retried after this; 0 = 6 */
    agent_unwinder_sink sink;
} agent_unwinder_options;

/* 32 MiB of kernel memory. Rows per file here: libc 24,000, python3.11 60,000, node 371,000,
 * gcc's cc1 437,000, libLLVM-14 837,000. */
#define AGENT_UNWIND_DEFAULT_ROWS (1u << 21)

typedef struct agent_unwinder_stats {
    uint64_t files_read;     /* files whose CFI was parsed */
    uint64_t files_failed;   /* files that could not be read or parsed */
    uint64_t tables_evicted; /* tables freed to make room */
    uint64_t tables_refused; /* tables that did not fit even after evicting */
    uint64_t processes_added;
    size_t tables;    /* loaded now */
    size_t rows_used; /* of max_rows */
    size_t max_rows;
    size_t processes; /* listed now */
} agent_unwinder_stats;

agent_unwinder *agent_unwinder_new(const agent_unwinder_options *options, strata_error *err);

/* Loads or shares the tables of p's executable mappings and lists them for BPF (replacing any
 * earlier list of p->pid), every executable mapping, with or without a table, so that BPF tells
 * a pc in code without CFI (a frame-pointer step) from one in something mapped since. Returns the
 * number of mappings with a table (0: p has none but the vDSO's, and no list is kept), or -1 with
 * err set when the sink fails or memory runs out. */
int agent_unwinder_add_process(agent_unwinder *u, const agent_proc *p, strata_error *err);

/* Walks a stack copy of process pid (bpf/unwind.h) with its listed tables, as the BPF walker
 * does: the frames, leaf first, go to frames (room for cap); *complete tells whether the walk
 * reached the outermost frame. Returns the number of frames (0: pid is not listed). Words outside
 * the copy end the walk. */
size_t agent_unwinder_walk_copy(agent_unwinder *u, uint32_t pid, const struct agent_stack_copy *c,
                                uint64_t *frames, size_t cap, bool *complete);

/* Whether pc of listed process pid lies in a mapping with a table (else the walker took a
 * frame-pointer step there). */
bool agent_unwinder_has_table(agent_unwinder *u, uint32_t pid, uint64_t pc);

/* Forgets process pid: its list is removed and its tables may be evicted. */
void agent_unwinder_remove_process(agent_unwinder *u, pid_t pid);

/* Ends a window (failed files become due for a retry). */
void agent_unwinder_end_window(agent_unwinder *u);

void agent_unwinder_stats_get(const agent_unwinder *u, agent_unwinder_stats *out);
void agent_unwinder_free(agent_unwinder *u);

#endif
