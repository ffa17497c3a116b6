/*
 * base64.c - see base64.h.
 */
#include "common/base64.h"

#include <stdbool.h>
#include <stdint.h>

static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

int strata_base64_encode(strata_buffer *out, const void *data, size_t len) {
    const uint8_t *p = data;
    if (strata_buffer_reserve(out, (len + 2) / 3 * 4) != 0)
        return -1;
    char quad[4];
    for (size_t i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16;
        if (i + 1 < len)
            v |= (uint32_t)p[i + 1] << 8;
        if (i + 2 < len)
            v |= p[i + 2];
        quad[0] = alphabet[v >> 18 & 63];
        quad[1] = alphabet[v >> 12 & 63];
        quad[2] = i + 1 < len ? alphabet[v >> 6 & 63] : '=';
        quad[3] = i + 2 < len ? alphabet[v & 63] : '=';
        if (strata_buffer_append(out, quad, 4) != 0)
            return -1;
    }
    return 0;
}

static int value_of(char c) {
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

int strata_base64_decode(const char *text, size_t len, strata_buffer *out, strata_error *err) {
    uint32_t acc = 0;
    int bits = 0;
    bool padding = false;
    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        if (c == ' ' || c == '\n' || c == '\r' || c == '\t')
            continue;
        if (c == '=') {
            padding = true;
            continue;
        }
        int v = value_of(c);
        if (v < 0 || padding)
            return strata_error_set(err, STRATA_INVALID_ARGUMENT, "invalid base64 data");
        acc = acc << 6 | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (strata_buffer_append_byte(out, (uint8_t)(acc >> bits)) != 0)
                return strata_error_oom(err);
        }
    }
    if (bits >= 6)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "truncated base64 data");
    return 0;
}
