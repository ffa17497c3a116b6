/*
 * ulid.h - Universally Unique Lexicographically Sortable Identifiers, the names of blocks.
 *
 * A ULID is 128 bits: a 48-bit big-endian Unix time in milliseconds followed by 80 random bits
 * (from getrandom(2)), written as 26 characters of Crockford base32 (0-9, A-Z without I L O U).
 * Because the time comes first, sorting ULIDs as strings or as bytes sorts blocks by creation time,
 * which is what bucket listings and the compactor rely on.
 *
 * Within one process, ULIDs made in the same millisecond are strictly increasing: the second one
 * reuses the first one's random part plus one (as the ULID spec's monotonic mode does), so two
 * blocks cut in the same millisecond by one ingester still sort in creation order. Generation is
 * thread-safe.
 */
#ifndef STRATA_BLOCK_ULID_H
#define STRATA_BLOCK_ULID_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

#define ULID_STRING_LEN 26

typedef struct ulid {
    uint8_t bytes[16]; /* big-endian: bytes 0-5 time (ms), 6-15 randomness */
} ulid;

/* A new ULID for the current wall-clock time. Fails (UNAVAILABLE) only if getrandom fails, or
 * (RESOURCE_EXHAUSTED) if 2^80 ULIDs were made within one millisecond. */
int ulid_new(ulid *out, strata_error *err);
/* A new ULID for the given time (ms since the epoch, 0 <= time_ms < 2^48). */
int ulid_new_at(int64_t time_ms, ulid *out, strata_error *err);

/* Writes the 26-character form plus a NUL into out. */
void ulid_format(const ulid *u, char out[ULID_STRING_LEN + 1]);
/* Parses exactly 26 Crockford base32 characters (either case). INVALID_ARGUMENT otherwise, naming
 * the offending position. */
int ulid_parse(const char *text, size_t len, ulid *out, strata_error *err);
/* Orders by time, then randomness: <0, 0, >0. */
int ulid_compare(const ulid *a, const ulid *b);
/* The embedded time, ms since the epoch. */
int64_t ulid_time_ms(const ulid *u);
/* True if all 16 bytes are zero (an unset ULID). */
bool ulid_is_zero(const ulid *u);

#endif
