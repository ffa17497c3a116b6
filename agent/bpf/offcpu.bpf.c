// SPDX-License-Identifier: GPL-2.0
/*
 * offcpu.bpf.c - Strata's off-CPU tracer, kernel side. See oncpu.h ("Off-CPU") for the design and
 * the record it shares with the on-CPU sampler.
 *
 * One raw tracepoint program on sched_switch does it all, so the kernel needs nothing but
 * tracepoints (no kprobes, no BPF trampolines: some kernels are built without either), and it
 * reads no kernel structure, so it needs no CO-RE relocation either (libbpf would read the
 * kernel's whole BTF for one, 10 MB of the agent's peak memory). `current` in sched_switch is the
 * thread leaving the CPU:
 *  - it leaves because it blocked and a random draw falls under offcpu_threshold: its record
 *    (the stacks of the place it blocked) goes into `pending`, keyed by thread id;
 *  - it has a pending record from an earlier blocking: it blocked from the record's time until it
 *    was switched in on this CPU, which is when this CPU last switched (`last_switch`, per CPU:
 *    the switch that brought it in). The record goes to the ring buffer. So a blocking is reported
 *    when the thread next leaves the CPU, at most a time slice after it ran again.
 * `pending` is an LRU hash of whole records, so threads that block for hours and threads that
 * exit while blocked give way when it is full, and its size (the loader's, 1024 by default) bounds
 * the kernel memory: 1024 records of 2.3 KB.
 */
#include "vmlinux.h"

#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "oncpu.h"
#include "sample.bpf.h"

char LICENSE[] SEC("license") = "GPL";

/* Set by the loader before load. */
const volatile __u32 agent_pid = 0;
const volatile __u32 offcpu_threshold = 0; /* of 2^32: the fraction of blockings timed */

/* Off-CPU records; its own ring, sized by the loader, so they never crowd out CPU ticks. */
struct {
    __uint(type, BPF_MAP_TYPE_RINGBUF);
    __uint(max_entries, 1024 * 1024);
} samples SEC(".maps");

/* Thread id -> the record of its timed blocking, time_ns the switch-out. */
struct {
    __uint(type, BPF_MAP_TYPE_LRU_HASH);
    __uint(max_entries, 1024); /* set by the loader */
    __type(key, __u32);
    __type(value, struct agent_sample);
} pending SEC(".maps");

/* A record is too large for the BPF stack: it is built here, then copied into pending. */
struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct agent_sample);
} scratch SEC(".maps");

/* Task states of a thread that blocked (include/linux/sched.h): TASK_INTERRUPTIBLE and
 * TASK_UNINTERRUPTIBLE. A preempted thread is still runnable: waiting for a CPU is not off-CPU. */
#define BLOCKED_STATES 0x3

/* When this CPU last switched threads: the time `current` was switched in. */
struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, __u64);
} last_switch SEC(".maps");

/* current ran again after a timed blocking: report it (blocked until switched_in_ns). */
static __always_inline void report_blocking(__u32 tid, __u64 switched_in_ns,
                                            struct agent_counters *c) {
    struct agent_sample *rec = bpf_map_lookup_elem(&pending, &tid);
    if (rec == NULL)
        return;
    if (switched_in_ns > rec->time_ns) {
        rec->value_ns = switched_in_ns - rec->time_ns;
        rec->flags |= AGENT_SAMPLE_OFF_CPU;
        if (bpf_ringbuf_output(&samples, rec, sizeof *rec, BPF_RB_NO_WAKEUP) == 0)
            __sync_fetch_and_add(&c->off_cpu_events, 1);
        else
            __sync_fetch_and_add(&c->ring_full, 1);
    }
    bpf_map_delete_elem(&pending, &tid);
}

/* current blocks now: time it, one blocking in 2^32 / offcpu_threshold. */
static __always_inline void time_blocking(void *ctx, __u32 pid, __u32 tid,
                                          struct agent_counters *c) {
    if (bpf_get_prandom_u32() >= offcpu_threshold)
        return;
    __u32 zero = 0;
    struct agent_sample *s = bpf_map_lookup_elem(&scratch, &zero);
    if (s == NULL)
        return;
    fill_sample(ctx, s, pid, tid, c);
    if (bpf_map_update_elem(&pending, &tid, s, BPF_ANY) == 0)
        __sync_fetch_and_add(&c->off_cpu_timed, 1);
}

/* sched_switch(bool preempt, struct task_struct *prev, struct task_struct *next,
 * unsigned int prev_state): prev_state is the fourth argument since Linux 5.18; on older kernels
 * the attach fails and the agent says so. */
SEC("raw_tp/sched_switch")
int offcpu_switch(void *ctx) {
    /* The arguments as the u64 array they are: struct bpf_raw_tracepoint_args from vmlinux.h would
     * make each access a CO-RE relocation. */
    const __u64 *args = ctx;
    __u32 zero = 0;
    struct agent_counters *c = this_cpu_counters();
    __u64 *last = bpf_map_lookup_elem(&last_switch, &zero);
    if (c == NULL || last == NULL)
        return 0;
    __u64 now = bpf_ktime_get_ns(), switched_in = *last;
    *last = now;
    __u64 id = bpf_get_current_pid_tgid();
    __u32 pid = id >> 32, tid = (__u32)id;
    if (tid == 0 || pid == agent_pid)
        return 0;
    if (switched_in != 0)
        report_blocking(tid, switched_in, c);
    if (args[0] == 0 && (args[3] & BLOCKED_STATES) != 0)
        time_blocking(ctx, pid, tid, c);
    return 0;
}
