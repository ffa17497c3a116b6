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

char LICENSE[] SEC("license") = "GPL";

/* Set by the loader before load: the agent's own pid, whose ticks are skipped. */
const volatile __u32 agent_pid = 0;

struct {
    __uint(type, BPF_MAP_TYPE_RINGBUF);
    __uint(max_entries, 512 * 1024); /* resized by the loader before load */
} samples SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct agent_counters);
} counters SEC(".maps");

static __always_inline struct agent_counters *this_cpu_counters(void) {
    __u32 zero = 0;
    return bpf_map_lookup_elem(&counters, &zero);
}

/* Where struct pt_regs keeps the user stack pointer. pt_regs is the architecture's ptrace ABI
 * (x86_64: the user_regs_struct order; arm64: user_pt_regs), which never changes, so the one
 * kernel field this program reads is read at a constant offset instead of through a CO-RE
 * relocation. A program without relocations spares libbpf parsing the whole vmlinux BTF at load:
 * two copies of /sys/kernel/btf/vmlinux (11 MB of the agent's peak RSS) and 70 ms of start-up CPU.
 * The assertion checks the constant against the running kernel's BTF at build time. */
#if defined(__TARGET_ARCH_x86)
#define PT_REGS_SP_OFFSET (19 * 8)
#elif defined(__TARGET_ARCH_arm64)
#define PT_REGS_SP_OFFSET (31 * 8)
#else
#error "oncpu.bpf.c: the user stack pointer's place in struct pt_regs is unknown on this arch"
#endif
_Static_assert(__builtin_offsetof(struct pt_regs, sp) == PT_REGS_SP_OFFSET,
               "struct pt_regs moved its stack pointer");

/* Copies the top of the user stack, where a frameless leaf keeps its return address. */
static __always_inline void read_user_sp_words(struct agent_sample *s) {
    struct task_struct *task = bpf_get_current_task_btf();
    struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(task);
    if (regs == NULL)
        return;
    if (bpf_probe_read_kernel(&s->user_sp, sizeof s->user_sp,
                              (const char *)regs + PT_REGS_SP_OFFSET) != 0)
        s->user_sp = 0;
    if (s->user_sp == 0)
        return;
    if (bpf_probe_read_user(s->sp_words, sizeof s->sp_words, (void *)s->user_sp) == 0)
        s->flags |= AGENT_SAMPLE_SP_WORDS_VALID;
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
    struct agent_sample *s = bpf_ringbuf_reserve(&samples, sizeof *s, 0);
    if (s == NULL) {
        __sync_fetch_and_add(&c->ring_full, 1);
        return 0;
    }
    s->pid = pid;
    s->tid = tid;
    s->time_ns = bpf_ktime_get_ns();
    s->cpu = bpf_get_smp_processor_id();
    s->flags = 0;
    s->user_sp = 0;
    bpf_get_current_comm(s->comm, sizeof s->comm);
    s->kstack_bytes = bpf_get_stack(ctx, s->kstack, sizeof s->kstack, 0);
    s->ustack_bytes = bpf_get_stack(ctx, s->ustack, sizeof s->ustack, BPF_F_USER_STACK);
    if (s->kstack_bytes < 0)
        __sync_fetch_and_add(&c->kstack_errors, 1);
    if (s->ustack_bytes < 0)
        __sync_fetch_and_add(&c->ustack_errors, 1);
    if (s->ustack_bytes > 0)
        read_user_sp_words(s);
    __sync_fetch_and_add(&c->samples, 1);
    bpf_ringbuf_submit(s, BPF_RB_NO_WAKEUP);
    return 0;
}
