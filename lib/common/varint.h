/*
 * varint.h - protobuf's base-128 varints and zigzag, the one implementation every reader and
 * writer uses (the pprof decoder, the block format's pages and footer, WriteRaw's envelope walk,
 * the hand-written protobuf encoders).
 *
 * A varint is 1 to 10 bytes, 7 bits each, least significant first, the high bit set on every byte
 * but the last. Decoders refuse a varint that runs past 10 bytes or past 64 bits (a tenth byte
 * above 1): no encoder writes one, and accepting it would make two byte strings mean one value.
 *
 * Three decoders for three situations, all with the same answer:
 * - strata_uvarint_get checks every byte against the end (footers, short fields, tests);
 * - strata_uvarint_get_unchecked needs 10 readable bytes and checks none (the inner loops of
 *   packed runs and pages, where all but the last 10 bytes go this way);
 * - strata_uvarint_next picks between them: a one-byte varint at once, the unchecked decoder where
 *   10 bytes remain, the checked one near the end. It is the one to call per value.
 * Everything is inline: the callers decode one value per sample, location or row.
 *
 * Zigzag maps signed values to unsigned so that small magnitudes stay short (0, -1, 1, -2 ->
 * 0, 1, 2, 3). The functions work on the two's complement bit pattern in uint64_t, so delta
 * decoding may wrap without signed overflow; strata_u64_as_i64 gives the signed view.
 */
#ifndef STRATA_COMMON_VARINT_H
#define STRATA_COMMON_VARINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The most bytes a 64-bit varint takes. */
#define STRATA_VARINT_MAX 10

/* Writes v as a varint into out (room for STRATA_VARINT_MAX bytes); returns the byte count. */
static inline size_t strata_uvarint_put(uint8_t *out, uint64_t v) {
    size_t n = 0;
    while (v >= 0x80) {
        out[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    out[n++] = (uint8_t)v;
    return n;
}

/* Reads a varint from [*p, end); advances *p. Returns false (and *out = 0, *p unchanged) when it
 * is truncated or overlong. */
static inline bool strata_uvarint_get(const uint8_t **p, const uint8_t *end, uint64_t *out) {
    const uint8_t *q = *p;
    uint64_t v = 0;
    for (unsigned shift = 0; shift < 64; shift += 7) {
        if (q >= end)
            break;
        uint8_t byte = *q++;
        if (shift == 63 && byte > 1)
            break;
        v |= (uint64_t)(byte & 0x7f) << shift;
        if (byte < 0x80) {
            *p = q;
            *out = v;
            return true;
        }
    }
    *out = 0; /* never read by callers; set so that inlined callers are seen to initialise */
    return false;
}

/* Decodes one varint at q, which has at least STRATA_VARINT_MAX readable bytes, without bounds
 * checks. Returns the byte after it, or NULL if it is overlong. */
static inline const uint8_t *strata_uvarint_get_unchecked(const uint8_t *q, uint64_t *out) {
    uint64_t b = *q++;
    if (b < 0x80) {
        *out = b;
        return q;
    }
    uint64_t v = b & 0x7f;
    for (unsigned shift = 7; shift <= 63; shift += 7) {
        b = *q++;
        if (shift == 63 && b > 1)
            return NULL;
        v |= (b & 0x7f) << shift;
        if (b < 0x80) {
            *out = v;
            return q;
        }
    }
    return NULL;
}

/* strata_uvarint_get's contract, fastest for a value at a time: one-byte varints (most ids and
 * counts) at once, the unchecked decoder where 10 bytes remain. */
static inline bool strata_uvarint_next(const uint8_t **p, const uint8_t *end, uint64_t *out) {
    const uint8_t *q = *p;
    if (q < end && q[0] < 0x80) {
        *out = q[0];
        *p = q + 1;
        return true;
    }
    if (end - q >= STRATA_VARINT_MAX) {
        q = strata_uvarint_get_unchecked(q, out);
        if (q == NULL)
            return false;
        *p = q;
        return true;
    }
    return strata_uvarint_get(p, end, out);
}

/* Zigzag on the bit pattern of a two's complement 64-bit value. */
static inline uint64_t strata_zigzag_encode(uint64_t v) {
    return (v << 1) ^ (0 - (v >> 63));
}

static inline uint64_t strata_zigzag_decode(uint64_t v) {
    return (v >> 1) ^ (0 - (v & 1));
}

/* The signed value whose two's complement bit pattern is v (protobuf's int64 from a varint). */
static inline int64_t strata_u64_as_i64(uint64_t v) {
    int64_t s;
    memcpy(&s, &v, sizeof s);
    return s;
}

/* A zigzag-encoded signed varint (protobuf's sint64). */
static inline bool strata_svarint_get(const uint8_t **p, const uint8_t *end, int64_t *out) {
    uint64_t u;
    if (!strata_uvarint_get(p, end, &u))
        return false;
    *out = strata_u64_as_i64(strata_zigzag_decode(u));
    return true;
}

#endif
