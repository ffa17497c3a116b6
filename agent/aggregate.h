/*
 * aggregate.h - per-process, per-window aggregation of the sampler's records.
 *
 * Design. The aggregator keeps a table of processes (pid -> agent_process) that outlives windows,
 * and for each process the distinct stacks of the current window with their sample counts.
 *
 *  - A process is read from /proc (procinfo.h) on its first sample. The snapshot is kept until
 *    the process has been silent for a whole window, so a process that exits within a window is
 *    still reported with its labels and mappings. A pid seen again after a silent window is
 *    checked against its start time, which catches pid reuse.
 *  - A user address outside every known executable mapping re-reads the process's maps once per
 *    window (a library loaded since), while the process is still alive; a CFI walk that left the
 *    listed mappings (AGENT_SAMPLE_OFF_LIST) re-reads at once, with a backoff that starts when a
 *    re-read finds the maps unchanged. A record flagged
 *    AGENT_SAMPLE_NEW_PROCESS for a pid already known (BPF saw an exec) re-reads the process.
 *  - A stack is the kernel frames then the user frames, leaf first, as the BPF program wrote
 *    them. Stacks are hashed; equal hashes are compared frame by frame, so distinct stacks are
 *    never merged. Frames of all processes live in one array for the window.
 *  - Memory is bounded by max_frames (frame words per window); a sample that does not fit is
 *    counted in stats.over_limit, never silently merged into another stack.
 *  - Samples with no frames at all (a kernel thread whose stack could not be read) are kept as a
 *    stack of zero frames, so counts still agree with the number of ticks.
 *  - Off-CPU records (AGENT_SAMPLE_OFF_CPU) are stacks of their own, even with the frames of an
 *    on-CPU stack: their count is the blocked time in nanoseconds, divided by off_cpu_rate (each
 *    timed switch-out stands for 1/rate of them), so profile_build.c writes them as a separate
 *    profile.
 *  - Per-sample labels (sample_labels, off by default for their cardinality, as in Parca's
 *    agent): with AGENT_LABEL_THREAD_ID, _THREAD_NAME or _CPU set, the thread id, the thread's
 *    name or the CPU of a sample are part of its stack's identity, so the same frames on two
 *    threads are two stacks; profile_build.c writes them as the pprof sample labels `thread_id`,
 *    `thread_name` and `cpu`. Thread names are kept only while that label is on.
 *
 * The agent's main loop is the only user; nothing here is thread-safe.
 */
#ifndef STRATA_AGENT_AGGREGATE_H
#define STRATA_AGENT_AGGREGATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "bpf/oncpu.h"
#include "common/error.h"
#include "common/hash.h"
#include "labels/labels.h"
#include "procinfo.h"

/* agent_aggregator.sample_labels */
#define AGENT_LABEL_THREAD_ID 1u
#define AGENT_LABEL_THREAD_NAME 2u
#define AGENT_LABEL_CPU 4u

typedef struct agent_stack {
    uint64_t hash;
    uint64_t count;
    uint32_t frames; /* offset into agent_aggregator.frames */
    uint16_t n_kernel;
    uint16_t n_user;
    uint32_t tid; /* with AGENT_LABEL_THREAD_ID, else 0 */
    uint32_t cpu; /* with AGENT_LABEL_CPU, else 0 */
    bool off_cpu; /* count is blocked nanoseconds (scaled by the rate), not CPU ticks */
} agent_stack;

typedef struct agent_process {
    pid_t pid;
    bool have_proc; /* proc holds a /proc snapshot */
    agent_proc proc;
    char comm[16]; /* from the latest sample (the thread's name) */
    /* Labels, computed once per snapshot by the agent; dropped = excluded by relabeling. */
    bool labeled;
    bool dropped;
    label_set labels;
    uint64_t last_window;             /* window index of the latest sample */
    bool maps_reloaded;               /* in this window */
    uint64_t maps_read_ns;            /* CLOCK_MONOTONIC when proc's mappings were last read */
    uint64_t next_off_list_reload_ns; /* AGENT_SAMPLE_OFF_LIST re-reads wait until then */
    uint64_t off_list_backoff_ns;
    /* This window's stacks. */
    agent_stack *stacks;
    char (*thread_names)[AGENT_COMM_LEN]; /* beside stacks, with AGENT_LABEL_THREAD_NAME */
    size_t n_stacks;
    size_t n_off_cpu; /* of them, off-CPU stacks */
    size_t cap_stacks;
    strata_u64_map stack_index; /* hash -> index + 1 (collisions probe with rehash) */
    uint64_t samples;
    int64_t first_sample_ns; /* CLOCK_MONOTONIC of the first sample in this window */
} agent_process;

typedef struct agent_aggregator_stats {
    uint64_t samples;      /* added */
    uint64_t over_limit;   /* did not fit in max_frames */
    uint64_t proc_errors;  /* /proc could not be read at first sight (process already gone) */
    uint64_t maps_reloads; /* maps re-read for an unknown address */
    uint64_t fixups;       /* samples whose user frames the fixup hook repaired */
} agent_aggregator_stats;

/* Optional hook that may repair a sample's user frames in place (see leaf.h); returns true if it
 * changed them. u has room for cap frames. */
typedef bool (*agent_stack_fixup_fn)(void *ctx, const agent_proc *proc,
                                     const struct agent_sample *s, uint64_t *u, size_t *n,
                                     size_t cap);

/* Optional hooks on a process's life: seen is called after each /proc snapshot (first sample,
 * pid reuse, exec, maps re-read), gone when the process is forgotten. */
typedef void (*agent_process_seen_fn)(void *ctx, const agent_process *p);
typedef void (*agent_process_gone_fn)(void *ctx, pid_t pid);

typedef struct agent_aggregator {
    const char *proc_root;
    agent_process_seen_fn process_seen; /* NULL = none; set after init, as the next two */
    agent_process_gone_fn process_gone;
    void *process_ctx;
    agent_stack_fixup_fn fixup; /* NULL = none; set after init */
    void *fixup_ctx;
    size_t max_frames;
    unsigned sample_labels; /* AGENT_LABEL_*; 0 (none) by default; set after init */
    double off_cpu_rate;    /* the sampler's; an off-CPU record's time is divided by it */
    strata_u64_map by_pid;  /* pid + 1 -> index + 1 into procs */
    agent_process **procs;
    size_t n_procs;
    size_t cap_procs;
    uint64_t *frames;
    size_t n_frames;
    size_t cap_frames;
    uint64_t window;
    agent_aggregator_stats stats;
    /* Optional hook run after fixup that puts interpreter frames among the user frames
     * (pyframes.h's agent_python_merge); NULL = none; set after init. */
    agent_stack_fixup_fn python;
    void *python_ctx;
} agent_aggregator;

/* proc_root NULL = "/proc"; max_frames 0 = 2M frame words (16 MiB). */
int agent_aggregator_init(agent_aggregator *a, const char *proc_root, size_t max_frames,
                          strata_error *err);

/* Adds one record. Fails only when out of memory. */
int agent_aggregator_add(agent_aggregator *a, const struct agent_sample *s, strata_error *err);

/* The frames of a stack (kernel frames first, then user frames). */
static inline const uint64_t *agent_stack_frames(const agent_aggregator *a, const agent_stack *s) {
    return a->frames + s->frames;
}

/* Ends the window: clears every process's stacks and the frames, forgets processes that had no
 * sample in the window that just ended, and starts the next one. */
void agent_aggregator_next_window(agent_aggregator *a);

void agent_aggregator_free(agent_aggregator *a);

#endif
