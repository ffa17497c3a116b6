/*
 * unwind.h - the contract between the agent's user space (cfi.c builds the tables, unwinder.c
 * loads them) and the BPF programs that walk user stacks with them (unwind.bpf.h): one compact
 * unwind row, the per-process list of mappings, and the maps' sizes.
 *
 * Design. Code built without frame pointers (Debian's libc, -O2 builds, most release binaries)
 * cannot be walked through %rbp. Its .eh_frame (or .debug_frame) says, for every instruction,
 * where the caller's frame starts (the CFA) and where the return address and the caller's %rbp
 * were saved. User space executes those CFI programs once per file and flattens them into rows
 * sorted by address: a row holds from its pc up to the next row's pc. On x86-64 the return
 * address is always at CFA - 8, so a row needs only the CFA rule and %rbp's rule: 16 bytes.
 *
 *   cfa_type    the caller's stack pointer (the CFA) is
 *     AGENT_CFA_RSP      rsp + cfa_offset
 *     AGENT_CFA_RBP      rbp + cfa_offset
 *     AGENT_CFA_PLT      rsp + 8, plus 8 more when (pc & 15) >= 11: the expression every x86-64
 *                        PLT section's FDE uses (the stub pushed a word once past that point)
 *     AGENT_CFA_FP       unknown here (no FDE covers pc, a DWARF expression, a register other
 *                        than rsp or rbp, a return address not at CFA - 8): the walk takes one
 *                        step through the frame pointer instead
 *     AGENT_CFA_END      the return address is undefined: the outermost frame (_start, clone's
 *                        child), the walk ends here, complete
 *   rbp_type    the caller's %rbp is
 *     AGENT_RBP_SAME     this frame's %rbp (never saved, or not yet)
 *     AGENT_RBP_AT_CFA   the word at CFA + rbp_offset
 *     AGENT_RBP_LOST     unknown (an expression or another register): a later frame whose CFA
 *                        is %rbp-based ends the walk
 *
 * The pc of a row is a link-time virtual address of the file (ELF p_vaddr space); the unwinder
 * subtracts each mapping's load bias. Rows come from every FDE; where no FDE covers an address a
 * row of AGENT_CFA_FP starts, and consecutive rows with the same rules are merged.
 *
 * Processes. unwind_procs maps a pid to the mappings of that process that have a table: where
 * each is (start, end), its load bias (runtime address - link-time address) and its slice of the
 * one shared row array (first_row, n_rows). A table is loaded once per build id and shared by
 * every process mapping that file. A pid absent from the map is walked through frame pointers by
 * the kernel (bpf_get_stack), as before; a pc of a listed process outside every listed mapping
 * (JIT code, a file without CFI) takes a frame-pointer step.
 *
 * This header is included from both sides, so it uses only fixed-width kernel types.
 */
#ifndef STRATA_AGENT_UNWIND_H
#define STRATA_AGENT_UNWIND_H

#ifndef __VMLINUX_H__ /* user space; the BPF side gets these types from vmlinux.h */
#include <linux/types.h>
#endif

#define AGENT_CFA_FP 0
#define AGENT_CFA_RSP 1
#define AGENT_CFA_RBP 2
#define AGENT_CFA_PLT 3
#define AGENT_CFA_END 4

#define AGENT_RBP_SAME 0
#define AGENT_RBP_AT_CFA 1
#define AGENT_RBP_LOST 2

struct agent_unwind_row {
    __u64 pc;
    __s32 cfa_offset;
    __s16 rbp_offset;
    __u8 cfa_type;
    __u8 rbp_type;
};

/* At most this many mappings with tables per process (sorted by start); more are dropped, and
 * their frames take frame-pointer steps. */
#define AGENT_UNWIND_MAX_MAPPINGS 128

struct agent_unwind_mapping {
    __u64 start; /* runtime addresses [start, end) */
    __u64 end;
    __u64 bias; /* runtime address - link-time address */
    __u32 first_row;
    __u32 n_rows;
};

/* agent_unwind_proc.flags: a walk that meets a pc outside the list wakes user space at once
 * (AGENT_SAMPLE_WAKE_UP) instead of waiting for its next poll, and its on-CPU sample carries a
 * copy of the stack (AGENT_SAMPLE_STACK_COPY), walked again once the process is listed anew. Set
 * while the process's executable mappings are changing (its first list, often taken while the
 * dynamic loader is still mapping libraries, and every list that differs from the one before); a
 * list that a re-read found unchanged clears it, so a process whose walks keep going off the list
 * for another reason (a garbage return address, JIT code mapped later) costs one wake-up and one
 * copy per change, not per sample. */
#define AGENT_UNWIND_WAKE_OFF_LIST 1u

struct agent_unwind_proc {
    __u32 n_mappings;
    __u32 flags;
    struct agent_unwind_mapping mappings[AGENT_UNWIND_MAX_MAPPINGS];
};

/* A process BPF has no list for yet is "pending" in unwind_seen until user space has decided
 * (listed it, or found it has no tables): its on-CPU samples carry a copy of the top of the user
 * stack, so user space can walk them with the same tables once it has listed the process
 * (agent_unwinder_walk_copy). The copy starts at the 1 KiB boundary at or below sp and takes
 * 1 KiB blocks up to AGENT_STACK_COPY_BYTES, stopping at the first block that cannot be read (the
 * end of the stack mapping is page-aligned, so no readable block is lost). */
#define AGENT_SEEN_PENDING 1
#define AGENT_SEEN_DECIDED 2

#define AGENT_STACK_COPY_BLOCK 1024
#define AGENT_STACK_COPY_BLOCKS 16
#define AGENT_STACK_COPY_BYTES (AGENT_STACK_COPY_BLOCK * AGENT_STACK_COPY_BLOCKS)

struct agent_stack_copy {
    __u64 pc, sp, bp; /* the thread's user registers */
    __u64 base;       /* user address of data[0] */
    __u32 len;        /* bytes of data copied */
    __u32 reserved;
    __u8 data[AGENT_STACK_COPY_BYTES];
};

#endif
