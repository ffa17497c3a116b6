/*
 * buffer.h - a growable byte buffer, the one way Strata builds encoded output (protobuf, JSON,
 * block pages, HTTP bodies). Growth doubles capacity so appends are amortised O(1). Functions that
 * can allocate return 0 or -1 (out of memory); on failure the buffer is unchanged and still valid.
 *
 * Varints are appended with common/varint.h's encoding (protobuf's), which this header includes.
 */
#ifndef STRATA_COMMON_BUFFER_H
#define STRATA_COMMON_BUFFER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/varint.h"

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

static inline int strata_buffer_append_uvarint(strata_buffer *b, uint64_t v) {
    if (b->cap - b->len < 10 && strata_buffer_reserve(b, 10) != 0)
        return -1;
    b->len += strata_uvarint_put(b->data + b->len, v);
    return 0;
}

static inline uint32_t strata_load_u32le(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t strata_load_u64le(const uint8_t *p) {
    return (uint64_t)strata_load_u32le(p) | (uint64_t)strata_load_u32le(p + 4) << 32;
}

#endif
