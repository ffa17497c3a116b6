/*
 * buffer.c - see buffer.h.
 */
#include "common/buffer.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void strata_buffer_init(strata_buffer *b) {
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
}

void strata_buffer_free(strata_buffer *b) {
    free(b->data);
    strata_buffer_init(b);
}

void strata_buffer_reset(strata_buffer *b) {
    b->len = 0;
}

int strata_buffer_reserve(strata_buffer *b, size_t extra) {
    if (extra > SIZE_MAX - b->len)
        return -1;
    size_t need = b->len + extra;
    if (need <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 64;
    while (cap < need) {
        if (cap > SIZE_MAX / 2) {
            cap = need;
            break;
        }
        cap *= 2;
    }
    uint8_t *data = realloc(b->data, cap);
    if (data == NULL)
        return -1;
    b->data = data;
    b->cap = cap;
    return 0;
}

int strata_buffer_append(strata_buffer *b, const void *data, size_t len) {
    if (len == 0)
        return 0;
    if (strata_buffer_reserve(b, len) != 0)
        return -1;
    memcpy(b->data + b->len, data, len);
    b->len += len;
    return 0;
}

int strata_buffer_append_byte(strata_buffer *b, uint8_t byte) {
    if (b->len == b->cap && strata_buffer_reserve(b, 1) != 0)
        return -1;
    b->data[b->len++] = byte;
    return 0;
}

int strata_buffer_append_str(strata_buffer *b, const char *s) {
    return strata_buffer_append(b, s, strlen(s));
}

int strata_buffer_appendf(strata_buffer *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char small[256];
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0)
        return -1;
    if ((size_t)n < sizeof small)
        return strata_buffer_append(b, small, (size_t)n);
    if (strata_buffer_reserve(b, (size_t)n + 1) != 0)
        return -1;
    va_start(ap, fmt);
    vsnprintf((char *)b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

int strata_buffer_append_u32le(strata_buffer *b, uint32_t v) {
    uint8_t tmp[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    return strata_buffer_append(b, tmp, sizeof tmp);
}

int strata_buffer_append_u64le(strata_buffer *b, uint64_t v) {
    if (strata_buffer_append_u32le(b, (uint32_t)v) != 0)
        return -1;
    if (strata_buffer_append_u32le(b, (uint32_t)(v >> 32)) != 0) {
        b->len -= 4;
        return -1;
    }
    return 0;
}

int strata_buffer_append_svarint(strata_buffer *b, int64_t v) {
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    return strata_buffer_append_uvarint(b, strata_zigzag_encode(bits));
}

char *strata_buffer_detach(strata_buffer *b, size_t *len_out) {
    if (strata_buffer_append_byte(b, 0) != 0)
        return NULL;
    b->len--;
    char *s = (char *)b->data;
    if (len_out != NULL)
        *len_out = b->len;
    strata_buffer_init(b);
    return s;
}
