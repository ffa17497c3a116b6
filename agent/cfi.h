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
