/*
 * ksyms.h - kernel symbols from /proc/kallsyms, for symbolizing kernel frames in the agent.
 *
 * Design. Kernel frames are always symbolized in the agent: the kernel's layout (KASLR, modules,
 * BPF JIT images) is known only on the node. The table keeps text symbols only (types t, T, w, W),
 * sorted by address, with their names in one arena. Kernels with function padding (6.2+) list a
 * "__pfx_NAME" before every function; those are folded into NAME, which then starts at its
 * padding: 64,000 symbols and 2.3 MB for a distribution kernel instead of 122,000 and 5 MB. A
 * lookup is a binary search for the last symbol at or below the address. When kptr_restrict hides
 * addresses (every address reads 0) the table is empty and kernel frames keep their raw addresses.
 *
 * The table is loaded once at start-up; agent_ksyms_lookup misses for addresses past the last
 * symbol, and the agent reloads the table (at most once a minute) when misses show that modules
 * or BPF programs were loaded since.
 */
#ifndef STRATA_AGENT_KSYMS_H
#define STRATA_AGENT_KSYMS_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

typedef struct agent_ksym {
    uint64_t addr;
    uint32_t name; /* offset into names */
} agent_ksym;

typedef struct agent_ksyms {
    agent_ksym *syms;
    size_t count;
    char *names;
    size_t names_len;
    size_t names_cap;
} agent_ksyms;

/* Parses kallsyms text from a file ("/proc/kallsyms"). *out is overwritten. */
int agent_ksyms_load(const char *path, agent_ksyms *out, strata_error *err);
/* Parses kallsyms-format text already in memory (for tests). */
int agent_ksyms_parse(const char *text, size_t len, agent_ksyms *out, strata_error *err);
/* The function containing addr, or NULL (empty table, or addr outside the kernel's text). */
const char *agent_ksyms_lookup(const agent_ksyms *k, uint64_t addr);
/* Heap bytes held. */
size_t agent_ksyms_bytes(const agent_ksyms *k);
void agent_ksyms_free(agent_ksyms *k);

#endif
