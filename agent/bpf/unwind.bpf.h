/*
 * unwind.bpf.h - walks a user stack with the CFI tables user space loaded (unwind.h), for code
 * built without frame pointers. BPF side only; included once per object.
 *
 * Design. The walk starts from the thread's user registers (pc, sp, rbp: the pt_regs the kernel
 * saved on entry, whether the tick hit user or kernel mode) and takes one step per frame inside
 * bpf_loop, so the verifier checks one step, not 127:
 *   1. find the mapping holding pc in the process's list (binary search, at most 8 probes);
 *   2. find the last row at or below (pc - bias) in the mapping's slice of the row array (binary
 *      search, at most 24 probes; a return address is looked up at pc - 1, as the call it returns
 *      from may be the function's last instruction);
 *   3. compute the CFA from the row, read the return address at CFA - 8 and the caller's rbp if
 *      the row says where it was saved, and continue with pc = return address, sp = CFA.
 * A pc outside every listed mapping flags the sample (AGENT_SAMPLE_OFF_LIST: the process has mapped
 * something since it was listed, and user space re-reads it; at once while the list asks for it,
 * AGENT_UNWIND_WAKE_OFF_LIST). A pc in a mapping without a table,
 * or in a row that says "frame pointer", takes a frame-pointer step
 * (return address at [rbp + 8], caller's rbp at [rbp]). The walk ends at a row marking the
 * outermost frame (complete), a zero return address (complete), a failed read, a stack pointer
 * that does not grow, or 127 frames.
 *
 * The state lives in a per-CPU scratch map rather than on the BPF stack: the loop callback reads
 * and writes it through a map lookup, which the verifier accepts without tracking pointers
 * across frames, and the frames are copied into the ring-buffer record in one helper call.
 */
#ifndef STRATA_AGENT_UNWIND_BPF_H
#define STRATA_AGENT_UNWIND_BPF_H

#include "vmlinux.h"

#include <bpf/bpf_helpers.h>

#include "oncpu.h"
#include "unwind.h"

/* Sized by the loader before load (agent -unwind-table-rows); shared by both objects. */
struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct agent_unwind_row);
} unwind_rows SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 4096);
    __uint(map_flags, BPF_F_NO_PREALLOC);
    __type(key, __u32);
    __type(value, struct agent_unwind_proc);
} unwind_procs SEC(".maps");

/* Processes BPF has submitted a first sample for (with a wake-up) and has no list for yet. */
struct {
    __uint(type, BPF_MAP_TYPE_LRU_HASH);
    __uint(max_entries, 16384);
    __type(key, __u32);
    __type(value, __u8);
} unwind_seen SEC(".maps");

struct agent_walk_state {
    __u64 pc;
    __u64 sp;
    __u64 bp;
    __u32 pid;
    __u32 n;
    __u32 complete;
    __u32 off_list; /* a pc fell outside every listed mapping (something mapped since) */
    __u64 frames[AGENT_MAX_FRAMES];
};

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct agent_walk_state);
} unwind_scratch SEC(".maps");

#if defined(__TARGET_ARCH_x86)
#define PT_REGS_BP_OFFSET (4 * 8)
#define PT_REGS_IP_OFFSET (16 * 8)
_Static_assert(__builtin_offsetof(struct pt_regs, bp) == PT_REGS_BP_OFFSET,
               "struct pt_regs moved its frame pointer");
_Static_assert(__builtin_offsetof(struct pt_regs, ip) == PT_REGS_IP_OFFSET,
               "struct pt_regs moved its instruction pointer");
#define AGENT_HAVE_DWARF_UNWIND 1
#endif

#ifdef AGENT_HAVE_DWARF_UNWIND

/* The index of the mapping holding pc, or -1. */
static __always_inline int find_mapping(const struct agent_unwind_proc *proc, __u64 pc) {
    __u32 lo = 0, hi = proc->n_mappings;
    if (hi > AGENT_UNWIND_MAX_MAPPINGS)
        hi = AGENT_UNWIND_MAX_MAPPINGS;
    for (int i = 0; i < 8 && lo < hi; i++) { /* 2^8 > AGENT_UNWIND_MAX_MAPPINGS */
        __u32 mid = (lo + hi) / 2;
        if (mid >= AGENT_UNWIND_MAX_MAPPINGS)
            return -1;
        const struct agent_unwind_mapping *m = &proc->mappings[mid];
        if (pc < m->start)
            hi = mid;
        else if (pc >= m->end)
            lo = mid + 1;
        else
            return (int)mid;
    }
    return -1;
}

/* The last row of [first, first + n) whose pc is <= addr, or NULL. */
static __always_inline const struct agent_unwind_row *find_row(__u32 first, __u32 n, __u64 addr) {
    __u32 lo = first, hi = first + n; /* answer: the last index < hi with row.pc <= addr */
    for (int i = 0; i < 24 && lo < hi; i++) {
        __u32 mid = lo + (hi - lo) / 2;
        const struct agent_unwind_row *r = bpf_map_lookup_elem(&unwind_rows, &mid);
        if (r == NULL)
            return NULL;
        if (r->pc <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == first || lo < hi) /* nothing at or below addr, or the search did not finish */
        return NULL;
    __u32 found = lo - 1;
    return bpf_map_lookup_elem(&unwind_rows, &found);
}

static __always_inline int read_word(__u64 addr, __u64 *out) {
    return bpf_probe_read_user(out, sizeof *out, (const void *)addr);
}

/* One frame-pointer step; 1 ends the walk. */
static __always_inline long frame_pointer_step(struct agent_walk_state *st) {
    __u64 ra = 0, bp = 0;
    if (st->bp == 0 || st->bp < st->sp || read_word(st->bp + 8, &ra) != 0 ||
        read_word(st->bp, &bp) != 0)
        return 1;
    st->sp = st->bp + 16;
    st->bp = bp;
    st->pc = ra;
    if (ra == 0)
        st->complete = 1;
    return ra == 0;
}

static long unwind_step(__u64 index, void *ctx) {
    (void)ctx;
    __u32 zero = 0;
    struct agent_walk_state *st = bpf_map_lookup_elem(&unwind_scratch, &zero);
    if (st == NULL)
        return 1;
    __u32 n = st->n;
    if (n >= AGENT_MAX_FRAMES)
        return 1;
    st->frames[n] = st->pc;
    st->n = n + 1;
    if (n + 1 >= AGENT_MAX_FRAMES)
        return 1;
    const struct agent_unwind_proc *proc = bpf_map_lookup_elem(&unwind_procs, &st->pid);
    if (proc == NULL)
        return 1;
    int mi = find_mapping(proc, st->pc);
    if (mi < 0 || mi >= AGENT_UNWIND_MAX_MAPPINGS) {
        st->off_list = 1;
        return frame_pointer_step(st);
    }
    const struct agent_unwind_mapping *m = &proc->mappings[mi];
    __u64 lookup = (index == 0 ? st->pc : st->pc - 1) - m->bias;
    const struct agent_unwind_row *row = find_row(m->first_row, m->n_rows, lookup);
    if (row == NULL)
        return frame_pointer_step(st);
    __u64 cfa;
    switch (row->cfa_type) {
        case AGENT_CFA_RSP:
            cfa = st->sp + (__s64)row->cfa_offset;
            break;
        case AGENT_CFA_RBP:
            if (st->bp == 0)
                return 1;
            cfa = st->bp + (__s64)row->cfa_offset;
            break;
        case AGENT_CFA_PLT:
            cfa = st->sp + 8 + ((st->pc & 15) >= 11 ? 8 : 0);
            break;
        case AGENT_CFA_END:
            st->complete = 1;
            return 1;
        default:
            return frame_pointer_step(st);
    }
    __u64 ra = 0, bp = st->bp;
    if (cfa <= st->sp || read_word(cfa - 8, &ra) != 0)
        return 1;
    if (row->rbp_type == AGENT_RBP_AT_CFA) {
        if (read_word(cfa + (__s64)row->rbp_offset, &bp) != 0)
            return 1;
    } else if (row->rbp_type == AGENT_RBP_LOST) {
        bp = 0;
    }
    st->pc = ra;
    st->sp = cfa;
    st->bp = bp;
    if (ra == 0) {
        st->complete = 1;
        return 1;
    }
    return 0;
}

/* A sample of a process BPF has no list for: the first one is flagged AGENT_SAMPLE_NEW_PROCESS
 * (submitted with a wake-up, so user space lists it at once), and every one while user space has
 * not decided is flagged AGENT_SAMPLE_STACK_COPY (the caller appends a copy of the stack). */
static __always_inline void note_unlisted(struct agent_sample *s, __u32 pid) {
    __u8 pending = AGENT_SEEN_PENDING;
    __u8 *seen = bpf_map_lookup_elem(&unwind_seen, &pid);
    if (seen == NULL) {
        if (bpf_map_update_elem(&unwind_seen, &pid, &pending, BPF_NOEXIST) == 0)
            s->flags |= AGENT_SAMPLE_NEW_PROCESS | AGENT_SAMPLE_STACK_COPY;
    } else if (*seen == AGENT_SEEN_PENDING) {
        s->flags |= AGENT_SAMPLE_STACK_COPY;
    }
}

/* Walks the current thread's user stack with the tables of process pid, if it has any: fills
 * s->ustack and s->ustack_bytes and returns true; false leaves s alone (no tables: the caller
 * uses bpf_get_stack). */
static __always_inline bool unwind_user_stack(struct agent_sample *s, __u32 pid) {
    const struct agent_unwind_proc *proc = bpf_map_lookup_elem(&unwind_procs, &pid);
    if (proc == NULL) {
        note_unlisted(s, pid);
        return false;
    }
    __u32 zero = 0;
    struct agent_walk_state *st = bpf_map_lookup_elem(&unwind_scratch, &zero);
    if (st == NULL)
        return false;
    struct task_struct *task = bpf_get_current_task_btf();
    const char *regs = (const char *)bpf_task_pt_regs(task);
    if (regs == NULL)
        return false;
    st->pc = st->sp = st->bp = 0;
    if (bpf_probe_read_kernel(&st->pc, sizeof st->pc, regs + PT_REGS_IP_OFFSET) != 0 ||
        bpf_probe_read_kernel(&st->sp, sizeof st->sp, regs + PT_REGS_SP_OFFSET) != 0 ||
        bpf_probe_read_kernel(&st->bp, sizeof st->bp, regs + PT_REGS_BP_OFFSET) != 0)
        return false;
    if (st->pc == 0 || st->sp == 0)
        return false; /* a kernel thread: no user stack */
    st->pid = pid;
    st->n = 0;
    st->complete = 0;
    st->off_list = 0;
    bpf_loop(AGENT_MAX_FRAMES, unwind_step, NULL, 0);
    __u32 n = st->n;
    if (n > AGENT_MAX_FRAMES)
        n = AGENT_MAX_FRAMES;
    if (bpf_probe_read_kernel(s->ustack, sizeof s->ustack, st->frames) != 0)
        return false;
    s->ustack_bytes = (__s32)(n * sizeof(__u64));
    s->flags |= AGENT_SAMPLE_DWARF;
    if (st->complete)
        s->flags |= AGENT_SAMPLE_COMPLETE;
    if (st->off_list)
        s->flags |= AGENT_SAMPLE_OFF_LIST |
                    ((proc->flags & AGENT_UNWIND_WAKE_OFF_LIST) ? AGENT_SAMPLE_WAKE_UP : 0);
    return true;
}

/* An exec replaced the process's mappings and an exit ends them: its list is dropped, and its
 * next sample is a first one again. */
static __always_inline void forget_process(__u32 pid) {
    bpf_map_delete_elem(&unwind_procs, &pid);
    bpf_map_delete_elem(&unwind_seen, &pid);
}

/* Whether a sample of pid would take a stack copy: no list, and user space has not decided. */
static __always_inline bool unwind_wants_copy(__u32 pid) {
    if (bpf_map_lookup_elem(&unwind_procs, &pid) != NULL)
        return false;
    __u8 *seen = bpf_map_lookup_elem(&unwind_seen, &pid);
    return seen == NULL || *seen == AGENT_SEEN_PENDING;
}

/* Copies the current thread's user registers and the top of its stack (unwind.h). */
static __always_inline void copy_user_stack(struct agent_stack_copy *c) {
    c->pc = c->sp = c->bp = c->base = 0;
    c->len = 0;
    c->reserved = 0;
    struct task_struct *task = bpf_get_current_task_btf();
    const char *regs = (const char *)bpf_task_pt_regs(task);
    if (regs == NULL ||
        bpf_probe_read_kernel(&c->pc, sizeof c->pc, regs + PT_REGS_IP_OFFSET) != 0 ||
        bpf_probe_read_kernel(&c->sp, sizeof c->sp, regs + PT_REGS_SP_OFFSET) != 0 ||
        bpf_probe_read_kernel(&c->bp, sizeof c->bp, regs + PT_REGS_BP_OFFSET) != 0 || c->sp == 0)
        return;
    c->base = c->sp & ~(__u64)(AGENT_STACK_COPY_BLOCK - 1);
    for (int i = 0; i < AGENT_STACK_COPY_BLOCKS; i++) {
        if (bpf_probe_read_user(&c->data[i * AGENT_STACK_COPY_BLOCK], AGENT_STACK_COPY_BLOCK,
                                (const void *)(c->base + (__u64)i * AGENT_STACK_COPY_BLOCK)) != 0)
            break;
        c->len += AGENT_STACK_COPY_BLOCK;
    }
}

#else /* no tables on this architecture: every stack is walked by the kernel */

static __always_inline bool unwind_user_stack(struct agent_sample *s, __u32 pid) {
    (void)s;
    (void)pid;
    return false;
}

static __always_inline bool unwind_wants_copy(__u32 pid) {
    (void)pid;
    return false;
}

static __always_inline void copy_user_stack(struct agent_stack_copy *c) {
    c->len = 0;
}

#endif

#endif
