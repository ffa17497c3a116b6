/*
 * utf8.c - see utf8.h.
 */
#include "common/utf8.h"

#include <stdint.h>
#include <string.h>

#define HIGH_BITS 0x8080808080808080ull
#define LOW_BITS 0x0101010101010101ull

size_t strata_utf8_sequence_length(const unsigned char *s, size_t len) {
    unsigned char c = s[0];
    size_t n;
    uint32_t cp;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf) {
        n = 2;
        cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
        cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        cp = c & 0x07;
    } else {
        return 0; /* a continuation byte, an overlong lead (c0, c1) or beyond U+10FFFF (f5-ff) */
    }
    if (len < n)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) || cp > 0x10ffff ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

/* Offset of the first byte that is not ASCII or, when stop_at_nul, is NUL; len if none. */
static size_t ascii_prefix(const unsigned char *p, size_t len, bool stop_at_nul) {
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, sizeof w);
        bool has_zero = ((w - LOW_BITS) & ~w & HIGH_BITS) != 0;
        if ((w & HIGH_BITS) != 0 || (stop_at_nul && has_zero))
            break;
    }
    while (i < len && p[i] < 0x80 && !(stop_at_nul && p[i] == 0))
        i++;
    return i;
}

/* Offset of the first byte that is not valid UTF-8 or, when stop_at_nul, is NUL; len if none. */
static size_t scan(const char *s, size_t len, bool stop_at_nul) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < len) {
        i += ascii_prefix(p + i, len - i, stop_at_nul);
        if (i == len || p[i] < 0x80) /* the end, or a NUL that stops the scan */
            return i;
        size_t n = strata_utf8_sequence_length(p + i, len - i);
        if (n == 0)
            return i;
        i += n;
    }
    return len;
}

size_t strata_utf8_valid_prefix(const char *s, size_t len) {
    return scan(s, len, false);
}

bool strata_utf8_is_valid(const char *s, size_t len) {
    return scan(s, len, false) == len;
}

int strata_utf8_check_text(const char *s, size_t len, strata_error *err) {
    size_t at = scan(s, len, true);
    if (at == len)
        return 0;
    if (s[at] == '\0')
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "NUL byte at offset %zu", at);
    return strata_error_set(err, STRATA_INVALID_ARGUMENT, "invalid UTF-8 at offset %zu", at);
}

int strata_utf8_append_sanitized(strata_buffer *out, const char *s, size_t len) {
    static const char replacement[] = "\xef\xbf\xbd"; /* U+FFFD */
    size_t i = 0;
    while (i < len) {
        size_t good = scan(s + i, len - i, true);
        if (strata_buffer_append(out, s + i, good) != 0)
            return -1;
        i += good;
        if (i == len)
            break;
        if (strata_buffer_append(out, replacement, 3) != 0)
            return -1;
        i++;
    }
    return 0;
}
