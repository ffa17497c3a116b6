// SPDX-License-Identifier: GPL-2.0
/*
 * oncpu.bpf.c - Strata's on-CPU sampler, kernel side. See oncpu.h for the design and the record.
 *
 * Attached to one PERF_COUNT_SW_CPU_CLOCK event per CPU. Every tick that does not hit the idle
 * task or the agent becomes one ring-buffer record with the kernel and user stacks, written with
 * BPF_RB_NO_WAKEUP. Counters are per CPU so the hot path never contends.
 */
#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "oncpu.h"
#include "sample.bpf.h"

char LICENSE[] SEC("license") = "GPL";

/* Set by the loader before load: the agent's own pid, whose ticks are skipped. */
const volatile __u32 agent_pid = 0;

struct {
    __uint(type, BPF_MAP_TYPE_RINGBUF);
    __uint(max_entries, 512 * 1024); /* resized by the loader before load */
} samples SEC(".maps");

SEC("perf_event")
int oncpu_sample(struct bpf_perf_event_data *ctx) {
    __u64 id = bpf_get_current_pid_tgid();
    __u32 pid = id >> 32;
    __u32 tid = (__u32)id;
    if (tid == 0)
        return 0;
    struct agent_counters *c = this_cpu_counters();
    if (c == NULL)
        return 0;
    if (pid == agent_pid) {
        __sync_fetch_and_add(&c->skipped_self, 1);
        return 0;
    }
    struct agent_sample *s = bpf_ringbuf_reserve(&samples, sizeof *s, 0);
    if (s == NULL) {
        __sync_fetch_and_add(&c->ring_full, 1);
        return 0;
    }
    fill_sample(ctx, s, pid, tid, c);
    __sync_fetch_and_add(&c->samples, 1);
    bpf_ringbuf_submit(s, (s->flags & AGENT_SAMPLE_NEW_PROCESS) ? BPF_RB_FORCE_WAKEUP
                                                                : BPF_RB_NO_WAKEUP);
    return 0;
}

#ifdef AGENT_HAVE_DWARF_UNWIND
SEC("raw_tp/sched_process_exec")
int unwind_exec(void *ctx) {
    (void)ctx;
    forget_process((__u32)(bpf_get_current_pid_tgid() >> 32));
    return 0;
}

SEC("raw_tp/sched_process_exit")
int unwind_exit(void *ctx) {
    (void)ctx;
    __u64 id = bpf_get_current_pid_tgid();
    if ((__u32)(id >> 32) == (__u32)id) /* the process, not one of its threads */
        forget_process((__u32)id);
    return 0;
}
#endif
