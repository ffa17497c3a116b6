/*
 * leaf.h - recovers the caller of a leaf function that the frame-pointer walk skipped.
 *
 * The problem. bpf_get_stack walks the user stack through the frame-pointer chain. A function
 * that has not (yet) pushed %rbp - a frameless leaf (Go leaves, GCC leaves even with
 * -fno-omit-frame-pointer), or any function sampled on its first instruction or right after
 * `push %rbp`, or at its final `ret` - is not on that chain, so its caller vanishes: the walk goes
 * from the leaf straight to the caller's caller.
 *
 * The fix (x86-64). The BPF program records the user stack pointer and the four words above it.
 * With the leaf's symbol (from the symcache) the agent reads the leaf's first bytes and the byte
 * at the pc from the process (process_vm_readv, one call):
 *   - standard prologue [endbr64] push %rbp; mov %rsp,%rbp: the return address is at [sp] when
 *     the pc is at the push or at a `ret`, at [sp+8] right after the push; past the prologue the
 *     chain is complete and nothing is done;
 *   - no standard prologue (frameless): the first of the four words that is a return address of
 *     a call to this very function - the 5 bytes before it are `call rel32` whose target is the
 *     leaf's entry, directly or through a PLT stub `jmp *GOT` whose GOT slot holds the entry -
 *     is taken as the caller.
 * The recovered address is inserted after the leaf unless the chain already has it. Nothing is
 * guessed: a candidate that cannot be verified is ignored, and the stack stays as the kernel gave
 * it. Other architectures: no-op.
 */
#ifndef STRATA_AGENT_LEAF_H
#define STRATA_AGENT_LEAF_H

#include <stddef.h>
#include <stdint.h>

#include "bpf/oncpu.h"
#include "procinfo.h"
#include "symcache.h"

/* Fixes the user frames u[0..*n) of sample s in place (capacity cap); returns true if a frame
 * was inserted. */
bool agent_leaf_fixup(agent_symcache *cache, const agent_proc *proc, const struct agent_sample *s,
                      uint64_t *u, size_t *n, size_t cap);

#endif
