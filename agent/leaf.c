/*
 * leaf.c - caller recovery for frameless leaves. See leaf.h.
 */
#include "leaf.h"

#include <stdbool.h>
#include <string.h>
#include <sys/uio.h>

#include "common/hash.h"

#if defined(__x86_64__)

#define PROLOGUE_BYTES 8
#define CALL_REL32 0xe8
#define RET 0xc3

static bool read_mem(pid_t pid, uint64_t addr, void *buf, size_t len) {
    struct iovec local = {buf, len};
    struct iovec remote = {(void *)(uintptr_t)addr, len};
    return process_vm_readv(pid, &local, 1, &remote, 1, 0) == (ssize_t)len;
}

static int32_t load_i32(const uint8_t *p) {
    uint32_t v = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
    int32_t out;
    memcpy(&out, &v, sizeof out);
    return out;
}

/* The runtime entry of the function holding pc, or 0 if it has no symbol. */
static uint64_t function_entry(agent_symcache *cache, const agent_proc *proc, uint64_t pc) {
    const agent_mapping *m = agent_proc_find_mapping(proc, pc);
    if (m == NULL)
        return 0;
    agent_elf *elf = agent_symcache_get(cache, proc, m);
    uint64_t vaddr, start;
    if (elf == NULL || !agent_elf_offset_to_vaddr(elf, pc - m->start + m->offset, &vaddr) ||
        !agent_elf_function_start(elf, vaddr, &start))
        return 0;
    return pc - (vaddr - start);
}

/* Where a PLT stub at addr jumps: `[endbr64] [bnd] jmp *rel32(%rip)` reads its GOT slot. */
static uint64_t plt_target(pid_t pid, uint64_t addr) {
    uint8_t b[11];
    if (!read_mem(pid, addr, b, sizeof b))
        return 0;
    size_t i = 0;
    if (b[0] == 0xf3 && b[1] == 0x0f && b[2] == 0x1e && b[3] == 0xfa)
        i = 4;
    if (b[i] == 0xf2)
        i++;
    if (b[i] != 0xff || b[i + 1] != 0x25)
        return 0;
    uint64_t slot = addr + i + 6 + (uint64_t)(int64_t)load_i32(b + i + 2), target;
    return read_mem(pid, slot, &target, sizeof target) ? target : 0;
}

/* True if ret is the return address of a `call rel32` to entry (directly or through a PLT). */
static bool is_call_to(const agent_proc *proc, uint64_t ret, uint64_t entry) {
    uint8_t call[5];
    if (ret < 5 || agent_proc_find_mapping(proc, ret - 5) == NULL ||
        !read_mem(proc->pid, ret - 5, call, sizeof call) || call[0] != CALL_REL32)
        return false;
    uint64_t target = ret + (uint64_t)(int64_t)load_i32(call + 1);
    return target == entry || plt_target(proc->pid, target) == entry;
}

/* Offset past endbr64, and whether `push %rbp; mov %rsp,%rbp` follows. */
static bool standard_prologue(const uint8_t *b, size_t *push_at) {
    size_t i = b[0] == 0xf3 && b[1] == 0x0f && b[2] == 0x1e && b[3] == 0xfa ? 4 : 0;
    *push_at = i;
    return b[i] == 0x55 && b[i + 1] == 0x48 && b[i + 2] == 0x89 && b[i + 3] == 0xe5;
}

/* What the code at a pc says about its caller, which does not change while the process lives:
 * the same hot leaves are sampled over and over, and each sample read their code again (two
 * process_vm_readv calls), a tenth of the agent's CPU on a busy node. */
typedef enum leaf_kind {
    LEAF_UNKNOWN = 0, /* not looked at (an empty slot) */
    LEAF_COMPLETE,    /* the chain is complete, or nothing can be checked */
    LEAF_AT_SP,       /* standard prologue, before the push or at a ret: the caller is at [sp] */
    LEAF_AT_SP8,      /* right after the push: at [sp+8] */
    LEAF_FRAMELESS,   /* no standard prologue: a verified call to entry among the words */
} leaf_kind;

#define LEAF_CACHE_SLOTS 4096 /* direct-mapped: 96 KiB */

typedef struct leaf_slot {
    uint64_t tag; /* hash of (pid, start time, the mapping at pc, pc); 0 = empty */
    uint64_t entry;
    leaf_kind kind;
} leaf_slot;

/* The agent's main loop is this module's only caller. */
static leaf_slot leaf_cache[LEAF_CACHE_SLOTS];

static leaf_kind classify(agent_symcache *cache, const agent_proc *proc, uint64_t pc,
                          uint64_t *entry) {
    *entry = function_entry(cache, proc, pc);
    uint8_t code[PROLOGUE_BYTES], at_pc;
    if (*entry == 0 || !read_mem(proc->pid, *entry, code, sizeof code) ||
        !read_mem(proc->pid, pc, &at_pc, 1))
        return LEAF_COMPLETE;
    size_t push_at;
    if (!standard_prologue(code, &push_at))
        return LEAF_FRAMELESS;
    uint64_t off = pc - *entry;
    if (off <= push_at || at_pc == RET)
        return LEAF_AT_SP;
    return off == push_at + 1 ? LEAF_AT_SP8 : LEAF_COMPLETE;
}

/* The return address into the leaf's caller, or 0 if the chain is complete or nothing checks. */
static uint64_t missing_caller(agent_symcache *cache, const agent_proc *proc,
                               const struct agent_sample *s, uint64_t pc) {
    /* the file mapped at pc is part of the key: a library unmapped and another mapped in its
     * place must not inherit its classification */
    const agent_mapping *m = agent_proc_find_mapping(proc, pc);
    if (m == NULL)
        return 0;
    uint64_t tag = strata_hash_combine((uint64_t)proc->pid, proc->start_time);
    tag = strata_hash_combine(strata_hash_combine(tag, m->inode), m->start - m->offset);
    tag = strata_hash_combine(tag, pc) | 1;
    leaf_slot *slot = &leaf_cache[tag % LEAF_CACHE_SLOTS];
    if (slot->tag != tag || slot->kind == LEAF_UNKNOWN) {
        slot->kind = classify(cache, proc, pc, &slot->entry);
        slot->tag = tag;
    }
    switch (slot->kind) {
        case LEAF_AT_SP:
            return s->sp_words[0];
        case LEAF_AT_SP8:
            return s->sp_words[1];
        case LEAF_FRAMELESS:
            for (size_t i = 0; i < AGENT_SP_WORDS; i++)
                if (is_call_to(proc, s->sp_words[i], slot->entry))
                    return s->sp_words[i];
            return 0;
        default:
            return 0;
    }
}

bool agent_leaf_fixup(agent_symcache *cache, const agent_proc *proc, const struct agent_sample *s,
                      uint64_t *u, size_t *n, size_t cap) {
    if (*n == 0 || *n >= cap || !(s->flags & AGENT_SAMPLE_SP_WORDS_VALID))
        return false;
    uint64_t caller = missing_caller(cache, proc, s, u[0]);
    if (caller == 0 || (*n > 1 && u[1] == caller) || agent_proc_find_mapping(proc, caller) == NULL)
        return false;
    memmove(u + 2, u + 1, (*n - 1) * sizeof *u);
    u[1] = caller;
    (*n)++;
    return true;
}

#else

bool agent_leaf_fixup(agent_symcache *cache, const agent_proc *proc, const struct agent_sample *s,
                      uint64_t *u, size_t *n, size_t cap) {
    (void)cache, (void)proc, (void)s, (void)u, (void)n, (void)cap;
    return false;
}

#endif
