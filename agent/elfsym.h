/*
 * elfsym.h - symbols of one ELF file (an executable or shared library), for symbolizing user
 * frames in the agent.
 *
 * Design. An agent_elf holds what symbolization needs and nothing else: the file's build id,
 * its PT_LOAD segments (to turn a runtime address into a link-time virtual address) and a sorted
 * table of function symbols, 16 bytes each. The file is read with libelf through a private
 * mapping and closed at once.
 *
 * Names are not copied at load: a symbol keeps where its name lies in the file (its string
 * table, or Go's .gopclntab), and agent_elf_lookup reads a name from the file the first time it
 * is asked for and keeps it. A process's samples touch a few hundred of a binary's functions, and
 * the names are most of a table's size (node: 110,000 functions, 7.5 MB of names against 1.7 MB
 * of symbols), so a table costs 16 bytes per function plus the names its samples used. The file
 * is opened on the first lookup and stays open until agent_elf_close_names_file; where the file
 * cannot be opened again (the process left and took its mount namespace with it), names already
 * read still resolve and new ones are unknown. agent_elf_set_names_path points a table at another
 * path to the same file (another process mapping it). Names that are not NUL-terminated in the
 * file (old Go tables) are copied at load instead.
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
    uint32_t name; /* AGENT_ELF_NAME_COPIED set: offset into names; else offset from names_base
                      in the names file */
} agent_elf_symbol;

#define AGENT_ELF_NAME_COPIED 0x80000000u

typedef struct agent_elf {
    char build_id[AGENT_BUILD_ID_HEX_MAX + 1]; /* GNU build id in hex, else Go's, else "" */
    agent_symbol_source source;
    agent_elf_segment *segments;
    size_t n_segments;
    agent_elf_symbol *symbols;
    size_t n_symbols;
    char *names; /* names copied at load, and names read from the file so far */
    size_t names_len;
    size_t names_cap;
    char *names_path;    /* the file the names are read from (NULL: every name was copied) */
    uint64_t names_base; /* its string table's offset in that file */
    int names_fd;        /* the names file while names_open */
    bool names_open;
    uint64_t names_dev, names_ino;     /* that file's identity (0, 0: take it at the next open) */
    struct strata_u64_map *read_names; /* symbol index + 1 -> offset into names + 1 */
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

/* The function containing vaddr (name and start), or NULL: the name is read from the file on
 * first use (NULL if it cannot be read). The name is valid until the next lookup in e. */
const char *agent_elf_lookup(agent_elf *e, uint64_t vaddr, uint64_t *start);
/* The start of the function containing vaddr, without its name; false if none contains it. */
bool agent_elf_function_start(const agent_elf *e, uint64_t vaddr, uint64_t *start);

/* Whether the names file is open (names are being read). */
bool agent_elf_names_file_open(const agent_elf *e);
/* Closes the names file (reopened by the next lookup that needs a name not read yet). */
void agent_elf_close_names_file(agent_elf *e);
/* Reads the names that are still needed from path from now on (the same file, seen through
 * another process); false on OOM, the table unchanged. Only for tables whose names are in the
 * mapped file itself (agent_elf_names_in_mapped_file). */
bool agent_elf_set_names_path(agent_elf *e, const char *path);
/* True when the names come from the file that was loaded (not from a separate debug file). */
bool agent_elf_names_in_mapped_file(const agent_elf *e);

/* Heap bytes held (the names read so far included). */
size_t agent_elf_bytes(const agent_elf *e);
void agent_elf_free(agent_elf *e);

#endif
