/*
 * cfi.h - call frame information: an ELF file's .eh_frame (or .debug_frame) turned into the
 * sorted unwind rows of bpf/unwind.h, for the BPF walker to binary-search by pc.
 *
 * Design. The CFI of a file is a list of CIEs (common prologues: alignment factors, the return
 * address column, the pointer encoding, initial instructions) and FDEs (one per function range:
 * a start, a length, and a small program of DW_CFA_* instructions that says how the rules for the
 * CFA and the saved registers change as the pc advances). The parser runs each FDE's program
 * (after its CIE's initial instructions) once and keeps, per address range, only what the x86-64
 * walker needs: the CFA rule (rsp + N, rbp + N, the PLT expression), the return address's rule
 * (CFA - 8, or undefined for the outermost frame) and %rbp's rule (unchanged, or saved at
 * CFA + N). Anything else becomes AGENT_CFA_FP (the walker takes a frame-pointer step) or
 * AGENT_RBP_LOST; the mapping is spelled out in unwind.h.
 *
 * The table. FDEs are sorted by start address (ties by their offset in the section) and their
 * rows appended in that order; an FDE that starts before the previous one ended overrides it from
 * its start on (the rows at or past its start are dropped), which keeps the table a function of
 * the section alone. Where an FDE ends and no other starts, a row of AGENT_CFA_FP marks the gap.
 * Consecutive rows with identical rules are merged (the first pc is kept), so pcs are strictly
 * increasing and no two neighbours are equal. A row with cfa_type FP or END carries zeros in the
 * other fields.
 *
 * Order and memory. The FDEs are taken in the order of the linker's .eh_frame_hdr table where the
 * file has one (version 1, datarel sdata4 entries with strictly increasing starts: what GNU ld,
 * gold, lld and mold write), each FDE read where the table points; otherwise the whole section is
 * walked and its FDEs sorted. With the table, an FDE listed there must start where it says
 * (INVALID_ARGUMENT otherwise) and FDEs it does not list are not read, as the runtime's unwinder
 * does not read them. Rows reach the caller in chunks as soon as no later FDE can override them,
 * so a streaming caller holds a chunk, not the table (agent_cfi_stream).
 *
 * What is refused. The parser is fed arbitrary files: every read is bounds-checked, and a
 * structurally broken section (an entry past the end, a truncated CIE, a CIE pointer that points
 * nowhere, an overlong LEB128, an unknown DW_CFA opcode, a remember_state stack deeper than
 * AGENT_CFI_MAX_STATE_DEPTH, a restore_state on an empty stack, a pc that goes backwards) is
 * INVALID_ARGUMENT with the offset in the section. What is well-formed but not supported here
 * (a datarel/textrel/funcrel/aligned pointer encoding, an unknown augmentation, an address size
 * other than 8, segment selectors) skips the FDEs concerned: their ranges become gaps.
 */
#ifndef STRATA_AGENT_CFI_H
#define STRATA_AGENT_CFI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bpf/unwind.h"
#include "common/error.h"

/* The deepest DW_CFA_remember_state stack accepted (GCC nests one or two). */
#define AGENT_CFI_MAX_STATE_DEPTH 16

typedef struct agent_cfi_table {
    struct agent_unwind_row *rows; /* sorted by pc, strictly increasing */
    size_t n_rows;
    size_t n_fdes; /* the FDEs that contributed rows (skipped and empty ones not counted) */
} agent_cfi_table;

/* A chunk sink: rows in order of pc, strictly increasing across calls. Nonzero stops the parse
 * (the error is the sink's, in err). */
typedef int (*agent_cfi_rows_fn)(void *ctx, const struct agent_unwind_row *rows, size_t n,
                                 strata_error *err);

/* Rows handed to a sink come in chunks of at most this many (more only where one FDE's rows
 * overlap the next FDE's start by more than a chunk). */
#define AGENT_CFI_CHUNK_ROWS 4096

/* The bytes a table is made from. hdr (.eh_frame_hdr, optional, .eh_frame only) gives the FDEs
 * sorted; without a usable one the section is walked. */
typedef struct agent_cfi_source {
    const uint8_t *frame;
    size_t frame_size;
    uint64_t frame_vaddr; /* link-time address: resolves pc-relative pointers */
    bool is_debug_frame;
    const uint8_t *hdr;
    size_t hdr_size;
    uint64_t hdr_vaddr;
} agent_cfi_source;

typedef struct agent_cfi_counts {
    size_t rows; /* handed to the sink */
    size_t fdes; /* FDEs that contributed rows */
} agent_cfi_counts;

/* Runs the CFI of src and hands its rows, in order, to out in chunks; *counts says how many. The
 * rows are those agent_cfi_parse_section would return (the same table, in pieces). Errors as
 * agent_cfi_read_fd's, or the sink's; rows already handed on stay the caller's concern. */
int agent_cfi_stream(const agent_cfi_source *src, size_t max_rows, agent_cfi_rows_fn out, void *ctx,
                     agent_cfi_counts *counts, strata_error *err);

/* agent_cfi_stream over the ELF file open at fd (sections as agent_cfi_read_fd finds them; the
 * .eh_frame_hdr is used when use_hdr). */
int agent_cfi_stream_fd(int fd, size_t max_rows, bool use_hdr, agent_cfi_rows_fn out, void *ctx,
                        agent_cfi_counts *counts, strata_error *err);

/* Reads the CFI of the ELF file open at fd with libelf (the caller keeps fd): .eh_frame, or
 * .debug_frame when the file has no .eh_frame with contents. Returns 0 and fills *out (no rows
 * when the file has no CFI), or -1 with err set: INVALID_ARGUMENT for a file that is not ELF or
 * malformed CFI, UNIMPLEMENTED for a file that is not x86-64 (ELFCLASS64, EM_X86_64),
 * RESOURCE_EXHAUSTED when the table would exceed max_rows (0: no bound). *out is the caller's to
 * free with agent_cfi_table_free; on failure it holds no rows. */
int agent_cfi_read_fd(int fd, size_t max_rows, agent_cfi_table *out, strata_error *err);

/* agent_cfi_read_fd on the file at path (NOT_FOUND when it cannot be opened). */
int agent_cfi_read_file(const char *path, size_t max_rows, agent_cfi_table *out, strata_error *err);

/* The parser over one section's bytes: data[0..size) is .eh_frame (is_debug_frame false; its
 * link-time address section_vaddr resolves pc-relative pointers) or .debug_frame. Same results as
 * agent_cfi_read_fd. */
int agent_cfi_parse_section(const uint8_t *data, size_t size, uint64_t section_vaddr,
                            bool is_debug_frame, size_t max_rows, agent_cfi_table *out,
                            strata_error *err);

/* Frees the rows; t may be NULL. Leaves an empty table. */
void agent_cfi_table_free(agent_cfi_table *t);

#endif
