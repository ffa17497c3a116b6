/*
 * oncpu.h - the contract between the on-CPU sampler's BPF program (oncpu.bpf.c) and user space
 * (sampler.c): the record each sample writes into the ring buffer and the per-CPU counters.
 *
 * Design. The program runs on every tick of a PERF_COUNT_SW_CPU_CLOCK event (one per online CPU,
 * 19 Hz by default). It skips the idle task (tid 0) and the agent itself, then reserves one
 * fixed-size record in a BPF ring buffer, fills it (pid, tid, CPU, time, comm, the kernel and the
 * user stack from bpf_get_stack, plus a few words from the top of the user stack) and submits it
 * with BPF_RB_NO_WAKEUP: user space polls every 250 ms instead of being woken per sample, which
 * keeps the agent's own CPU use near zero. Nothing is aggregated in the kernel, so no stack-id map
 * can collide or fill up; a sample is lost only when the ring is full, and then it is counted.
 *
 * The words at the user stack pointer let user space recover the caller of a leaf function that
 * set up no frame (GCC omits the frame in leaf functions even with -fno-omit-frame-pointer): the
 * frame-pointer chain skips that caller, but its return address is at [sp] or [sp+8].
 *
 * Off-CPU (bpf/offcpu.bpf.c, loaded only when asked for) writes the same record for a thread that
 * blocked: its stacks are taken when it leaves the CPU (the place it blocked), value_ns is how long
 * until it ran again, and flags has AGENT_SAMPLE_OFF_CPU. A fixed fraction of blockings is timed
 * (offcpu_threshold), which bounds the cost on a node that switches a million times a second;
 * user space scales the times back by that fraction.
 *
 * A process whose binaries user space has turned into unwind tables (unwind.h) gets its user stack
 * walked with them (AGENT_SAMPLE_DWARF); sp_words are then not needed and not read.
 *
 * This header is included from both sides, so it uses only fixed-width kernel types.
 */
#ifndef STRATA_AGENT_ONCPU_H
#define STRATA_AGENT_ONCPU_H

#ifndef __VMLINUX_H__ /* user space; the BPF side gets these types from vmlinux.h */
#include <linux/types.h>
#endif

#include "python.h"

/* perf_event_max_stack's default; bpf_get_stack never returns more. */
#define AGENT_MAX_FRAMES 127
#define AGENT_COMM_LEN 16
#define AGENT_SP_WORDS 4

/* agent_sample.flags */
#define AGENT_SAMPLE_SP_WORDS_VALID 1u
#define AGENT_SAMPLE_OFF_CPU 2u      /* a thread that blocked for value_ns, not a CPU tick */
#define AGENT_SAMPLE_DWARF 4u        /* ustack was walked with CFI tables (unwind.bpf.h) */
#define AGENT_SAMPLE_COMPLETE 8u     /* ... and the walk reached the outermost frame */
#define AGENT_SAMPLE_NEW_PROCESS 16u /* the first of a process with no unwind tables listed */
/* ... or a later one before user space decided: a struct agent_stack_copy follows the record */
#define AGENT_SAMPLE_STACK_COPY 32u
#define AGENT_SAMPLE_OFF_LIST 64u /* the CFI walk met a pc outside every listed mapping */
/* ... and the list asked for a wake-up then (AGENT_UNWIND_WAKE_OFF_LIST): submitted at once */
#define AGENT_SAMPLE_WAKE_UP 128u

/* The off-CPU switch-out rate is a fraction of 2^32 (offcpu_threshold). */
#define AGENT_OFF_CPU_SCALE 4294967296.0

struct agent_sample {
    __u32 pid; /* thread group id (the process) */
    __u32 tid;
    __u64 time_ns; /* CLOCK_MONOTONIC (bpf_ktime_get_ns) */
    __u32 cpu;
    __u32 flags;
    __u64 value_ns;     /* AGENT_SAMPLE_OFF_CPU: how long the thread was blocked; else 0 */
    __s32 kstack_bytes; /* bpf_get_stack's result: bytes written, or a negative errno */
    __s32 ustack_bytes;
    __u64 user_sp;
    __u64 sp_words[AGENT_SP_WORDS]; /* user memory at user_sp, when SP_WORDS_VALID */
    char comm[AGENT_COMM_LEN];
    __u64 kstack[AGENT_MAX_FRAMES]; /* leaf first */
    __u64 ustack[AGENT_MAX_FRAMES]; /* leaf first; ustack[0] is the user pc */
    /* Python frames (python.h), innermost first; only for processes in python_procs. */
    __u32 py_n;
    __u32 py_flags; /* AGENT_PY_TRUNCATED, ... */
    struct agent_py_frame py[AGENT_PY_MAX_FRAMES];
};

/* Per-CPU counters in the `counters` map (one slot). */
struct agent_counters {
    __u64 samples;      /* records submitted */
    __u64 ring_full;    /* ticks lost because the ring buffer was full */
    __u64 skipped_self; /* ticks that hit the agent itself */
    __u64 kstack_errors;
    __u64 ustack_errors;
    __u64 off_cpu_timed;   /* voluntary switch-outs chosen for timing */
    __u64 off_cpu_events;  /* off-CPU records submitted (the thread ran again) */
    __u64 unwind_dwarf;    /* user stacks walked with CFI tables */
    __u64 unwind_complete; /* of them, walks that reached the outermost frame */
};

#endif
