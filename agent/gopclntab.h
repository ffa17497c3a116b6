/*
 * gopclntab.h - function names from a Go binary's .gopclntab, which Go keeps even in stripped
 * binaries (the runtime needs it for tracebacks), so Go frames symbolize without .symtab.
 *
 * Design. Only the function table is read: for each function its entry address and name. Layouts
 * by magic (little-endian only, the amd64/arm64 case):
 *   0xfffffffb  Go 1.2-1.15:  functab {entry uintptr, funcoff uintptr} right after the header;
 *                              _func {entry uintptr, nameoff int32}; names relative to the table
 *   0xfffffffa  Go 1.16-1.17: header with offsets of funcnametab and functab; absolute entries
 *   0xfffffff0  Go 1.18-1.19, 0xfffffff1 Go 1.20+: entries are 32-bit offsets from textStart
 * textStart may read 0 in a PIE binary (the linker leaves it to a dynamic relocation), so the
 * caller passes the .text section's address as the fallback. Every offset is bounds-checked: a
 * corrupt table yields INVALID_ARGUMENT, never a read out of range.
 */
#ifndef STRATA_AGENT_GOPCLNTAB_H
#define STRATA_AGENT_GOPCLNTAB_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

/* Called for each function in table order; returns 0 to continue, -1 to stop with an error. */
typedef int (*agent_gofunc_fn)(void *ctx, uint64_t entry, const char *name, size_t name_len);

int agent_gopclntab_parse(const uint8_t *data, size_t len, uint64_t text_start_fallback,
                          agent_gofunc_fn fn, void *ctx, strata_error *err);

#endif
