/*
 * buffer.h - a growable byte buffer, the one way Strata builds encoded output (protobuf, JSON,
 * block pages, HTTP bodies). Growth doubles capacity so appends are amortised O(1). Functions that
 * can allocate return 0 or -1 (out of memory); on failure the buffer is unchanged and still valid.
 *
 * Varint helpers use protobuf's encoding (little-endian base 128), shared by the pprof encoder and
 * the block format.
 */
#ifndef STRATA_COMMON_BUFFER_H
#define STRATA_COMMON_BUFFER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct strata_buffer {
    uint8_t *data;
    size_t len;
    size_t cap;
} strata_buffer;

#define STRATA_BUFFER_INIT                                                                         \
    { NULL, 0, 0 }

void strata_buffer_init(strata_buffer *b);
void strata_buffer_free(strata_buffer *b);
/* Sets len to 0, keeping the allocation for reuse. */
void strata_buffer_reset(strata_buffer *b);
/* Makes room for at least `extra` more bytes. */
int strata_buffer_reserve(strata_buffer *b, size_t extra);
int strata_buffer_append(strata_buffer *b, const void *data, size_t len);
int strata_buffer_append_byte(strata_buffer *b, uint8_t byte);
int strata_buffer_append_str(strata_buffer *b, const char *s);
int strata_buffer_appendf(strata_buffer *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
int strata_buffer_append_u32le(strata_buffer *b, uint32_t v);
int strata_buffer_append_u64le(strata_buffer *b, uint64_t v);
/* strata_buffer_append_uvarint (a varint) is defined inline below. */
/* Zig-zag encoded signed varint. */
int strata_buffer_append_svarint(strata_buffer *b, int64_t v);
/* Gives the caller ownership of the bytes (NUL-terminated for convenience, not counted in len) and
 * leaves the buffer empty. Returns NULL only if allocating the terminator fails. */
char *strata_buffer_detach(strata_buffer *b, size_t *len_out);

/* Writes v as a varint into out (at least 10 bytes); returns the byte count. Inline, as the
 * varint helpers below: block encoding and decoding call them once per value. */
static inline size_t strata_uvarint_put(uint8_t *out, uint64_t v) {
    size_t n = 0;
    while (v >= 0x80) {
        out[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    out[n++] = (uint8_t)v;
    return n;
}

static inline int strata_buffer_append_uvarint(strata_buffer *b, uint64_t v) {
    if (b->cap - b->len < 10 && strata_buffer_reserve(b, 10) != 0)
        return -1;
    b->len += strata_uvarint_put(b->data + b->len, v);
    return 0;
}

/* Reads a varint from [*p, end); advances *p. Returns false (and *out = 0) on truncation or
 * overlong input. */
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
bool strata_svarint_get(const uint8_t **p, const uint8_t *end, int64_t *out);

static inline uint32_t strata_load_u32le(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t strata_load_u64le(const uint8_t *p) {
    return (uint64_t)strata_load_u32le(p) | (uint64_t)strata_load_u32le(p + 4) << 32;
}

#endif
