/*
 * sample.bpf.h - what the on-CPU sampler (oncpu.bpf.c) and the off-CPU tracer (offcpu.bpf.c)
 * share: each object's per-CPU `counters` map (oncpu.h's agent_counters; user space sums both) and
 * filling an agent_sample record for the current thread, its user stack walked with CFI tables
 * where the process has them (unwind.bpf.h), else through frame pointers by the kernel. BPF side
 * only; included once per object.
 */
#ifndef STRATA_AGENT_SAMPLE_BPF_H
#define STRATA_AGENT_SAMPLE_BPF_H

#include "vmlinux.h"

#include <bpf/bpf_helpers.h>

#include "oncpu.h"
#include "python.bpf.h"

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

#include "unwind.bpf.h"

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

/* Fills a record for the current thread, its kernel and user stacks included; errors reading a
 * stack are counted in c. */
static __always_inline void fill_sample(void *ctx, struct agent_sample *s, __u32 pid, __u32 tid,
                                        struct agent_counters *c) {
    s->pid = pid;
    s->tid = tid;
    s->time_ns = bpf_ktime_get_ns();
    s->cpu = bpf_get_smp_processor_id();
    s->flags = 0;
    s->value_ns = 0;
    s->user_sp = 0;
    bpf_get_current_comm(s->comm, sizeof s->comm);
    s->kstack_bytes = bpf_get_stack(ctx, s->kstack, sizeof s->kstack, 0);
    if (s->kstack_bytes < 0)
        __sync_fetch_and_add(&c->kstack_errors, 1);
    if (unwind_user_stack(s, pid)) {
        __sync_fetch_and_add(&c->unwind_dwarf, 1);
        if (s->flags & AGENT_SAMPLE_COMPLETE)
            __sync_fetch_and_add(&c->unwind_complete, 1);
        read_user_sp_words(s); /* a leaf in code without a table took a frame-pointer step */
    } else {
        s->ustack_bytes = bpf_get_stack(ctx, s->ustack, sizeof s->ustack, BPF_F_USER_STACK);
        if (s->ustack_bytes < 0)
            __sync_fetch_and_add(&c->ustack_errors, 1);
        if (s->ustack_bytes > 0)
            read_user_sp_words(s);
    }
    read_python_frames(s);
}

#endif
