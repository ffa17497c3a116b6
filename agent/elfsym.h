/*
 * elfsym.h - symbols of one ELF file (an executable or shared library), for symbolizing user
 * frames in the agent.
 *
 * Design. An agent_elf holds what symbolization needs and nothing else: the file's build id,
 * its PT_LOAD segments (to turn a runtime address into a link-time virtual address) and a sorted
 * table of function symbols with their names in one arena. The file is read with libelf through
 * a private mapping and closed at once; a libc costs about 100 KB, a large binary a few MB.
 *
 * Where symbols come from, first found wins:
 *   1. the file's own .symtab;
 *   2. a separate debug file: <debug_dir>/.build-id/xx/yyyy.debug by build id, then
 *      .gnu_debuglink (the named file next to the binary, in its .debug/ directory, and under
 *      <debug_dir>/<binary's directory>), as gdb searches; a debug file whose build id differs
 *      from the binary's is ignored;
 *   3. Go's .gopclntab (kept in stripped Go binaries);
 *   4. the file's .dynsym (exported functions only; Debian's stripped libraries end here).
 * A file with none of these still yields an agent_elf (build id and segments), so its frames keep
 * address and mapping.
 *
 * PIE and ASLR. The kernel maps a file at a random base; /proc/PID/maps gives the mapping's start
 * and file offset. A runtime address becomes a file offset (addr - start + offset), and the file
 * offset becomes a virtual address through the PT_LOAD segment that contains it
 * (off - p_offset + p_vaddr); symbols are looked up by that virtual address. The same formula is
 * right for non-PIE executables (start == p_vaddr) and for libraries.
 *
 * Paths: `path` is opened as given; the caller passes /proc/PID/root/<file> or
 * /proc/PID/map_files/<range> for processes in other mount namespaces. `root` (may be "") prefixes
 * the debuglink locations next to the binary.
 */
#ifndef STRATA_AGENT_ELFSYM_H
#define STRATA_AGENT_ELFSYM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

#define AGENT_BUILD_ID_HEX_MAX 128

typedef enum agent_symbol_source {
    AGENT_SYMBOLS_NONE = 0,
    AGENT_SYMBOLS_SYMTAB,
    AGENT_SYMBOLS_DEBUG_FILE,
    AGENT_SYMBOLS_GOPCLNTAB,
    AGENT_SYMBOLS_DYNSYM,
} agent_symbol_source;

typedef struct agent_elf_segment {
    uint64_t offset;
    uint64_t vaddr;
    uint64_t filesz;
} agent_elf_segment;

/* 16 bytes: a large C++ library has a few hundred thousand of these. */
typedef struct agent_elf_symbol {
    uint64_t addr;
    uint32_t size; /* 0 if unknown: the symbol then extends to the next one (4 GB and up too) */
    uint32_t name; /* offset into names */
} agent_elf_symbol;

typedef struct agent_elf {
    char build_id[AGENT_BUILD_ID_HEX_MAX + 1]; /* GNU build id in hex, else Go's, else "" */
    agent_symbol_source source;
    agent_elf_segment *segments;
    size_t n_segments;
    agent_elf_symbol *symbols;
    size_t n_symbols;
    char *names;
    size_t names_len;
} agent_elf;

typedef struct agent_elf_options {
    const char *debug_dir; /* NULL = "/usr/lib/debug" */
    const char *root;      /* prefix for debuglink lookups next to the binary; NULL = "" */
    const char
        *logical_path; /* the path the process sees, for debuglink directories; NULL = path */
} agent_elf_options;

/* Reads path. NOT_FOUND if it cannot be opened, INVALID_ARGUMENT if it is not ELF. *out is
 * overwritten; on failure it is left empty. */
int agent_elf_load(const char *path, const agent_elf_options *options, agent_elf *out,
                   strata_error *err);

/* Only the build id (cheap: notes only). "" if the file has none. */
int agent_elf_read_build_id(const char *path, char out[AGENT_BUILD_ID_HEX_MAX + 1],
                            strata_error *err);

/* Link-time virtual address of a file offset; false if no PT_LOAD segment holds it. */
bool agent_elf_offset_to_vaddr(const agent_elf *e, uint64_t file_offset, uint64_t *vaddr);

/* The function containing vaddr (name and start), or NULL. */
const char *agent_elf_lookup(const agent_elf *e, uint64_t vaddr, uint64_t *start);

/* Heap bytes held. */
size_t agent_elf_bytes(const agent_elf *e);
void agent_elf_free(agent_elf *e);

#endif
