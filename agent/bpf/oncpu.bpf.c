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

/* Set by the loader before load: the agent's own pid, whose ticks are skipped; whether user space
 * lists unwind tables (a process not listed yet then gets stack copies, unwind.h). */
const volatile __u32 agent_pid = 0;
const volatile __u32 unwind_tables_on = 0;

/* A record with a copy of the user stack, for a process user space has not decided about. */
struct agent_sample_copy {
    struct agent_sample s;
    struct agent_stack_copy copy;
};

static __always_inline void submit(void *record, const struct agent_sample *s,
                                   struct agent_counters *c) {
    __sync_fetch_and_add(&c->samples, 1);
    bpf_ringbuf_submit(record, (s->flags & (AGENT_SAMPLE_NEW_PROCESS | AGENT_SAMPLE_WAKE_UP))
                                   ? BPF_RB_FORCE_WAKEUP
                                   : BPF_RB_NO_WAKEUP);
}

struct {
    __uint(type, BPF_MAP_TYPE_RINGBUF);
    __uint(max_entries, 512 * 1024); /* resized by the loader before load */
} samples SEC(".maps");

/* Where a sample that went off its process's fresh list is given its stack copy (one per CPU: a
 * record this size does not fit the BPF stack). */
struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct agent_sample_copy);
} copy_scratch SEC(".maps");

/* A walk that left the list of a process listed or changed since its mappings last settled
 * (AGENT_SAMPLE_WAKE_UP: the loader is likely still mapping libraries) is resubmitted with a copy
 * of the stack, so that user space walks it again once it has listed the new mappings instead of
 * keeping the stack cut short; true when it was, and s is then discarded. Only such walks pay for
 * the copy: they end as soon as the agent has re-read the process. */
static __always_inline bool submit_with_copy(struct agent_sample *s, struct agent_counters *c) {
    __u32 zero = 0;
    struct agent_sample_copy *r = bpf_map_lookup_elem(&copy_scratch, &zero);
    if (r == NULL || bpf_probe_read_kernel(&r->s, sizeof r->s, s) != 0)
        return false;
    r->s.flags |= AGENT_SAMPLE_STACK_COPY;
    copy_user_stack(&r->copy);
    if (bpf_ringbuf_output(&samples, r, sizeof *r, BPF_RB_FORCE_WAKEUP) != 0)
        return false; /* the ring has no room for it: the sample goes as it is */
    __sync_fetch_and_add(&c->samples, 1);
    bpf_ringbuf_discard(s, 0);
    return true;
}

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
    if (unwind_tables_on && unwind_wants_copy(pid)) {
        struct agent_sample_copy *r = bpf_ringbuf_reserve(&samples, sizeof *r, 0);
        if (r == NULL) {
            __sync_fetch_and_add(&c->ring_full, 1);
            return 0;
        }
        fill_sample(ctx, &r->s, pid, tid, c);
        if (r->s.flags & AGENT_SAMPLE_STACK_COPY)
            copy_user_stack(&r->copy);
        else
            r->copy.len = 0;
        submit(r, &r->s, c);
        return 0;
    }
    struct agent_sample *s = bpf_ringbuf_reserve(&samples, sizeof *s, 0);
    if (s == NULL) {
        __sync_fetch_and_add(&c->ring_full, 1);
        return 0;
    }
    fill_sample(ctx, s, pid, tid, c);
    s->flags &= ~AGENT_SAMPLE_STACK_COPY; /* no room for one in this record */
    if ((s->flags & AGENT_SAMPLE_WAKE_UP) && submit_with_copy(s, c))
        return 0;
    submit(s, s, c);
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
