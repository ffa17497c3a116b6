/*
 * ulid.c - see ulid.h.
 */
#include "block/ulid.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/random.h>

#include "common/clock.h"

static const char crockford[] = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";

static pthread_mutex_t ulid_lock = PTHREAD_MUTEX_INITIALIZER;
static int64_t last_time_ms = -1;
static uint8_t last_random[10];

static int fill_random(uint8_t *out, size_t len, strata_error *err) {
    size_t done = 0;
    while (done < len) {
        ssize_t n = getrandom(out + done, len - done, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return strata_error_set(err, STRATA_UNAVAILABLE, "ulid: getrandom failed: %s",
                                    strerror(errno));
        }
        done += (size_t)n;
    }
    return 0;
}

/* Adds one to the 80-bit big-endian number; false on overflow. */
static bool increment_random(uint8_t r[10]) {
    for (int i = 9; i >= 0; i--) {
        if (++r[i] != 0)
            return true;
    }
    return false;
}

static int next_random(int64_t time_ms, uint8_t out[10], strata_error *err) {
    if (time_ms == last_time_ms) {
        if (!increment_random(last_random))
            return strata_error_set(err, STRATA_RESOURCE_EXHAUSTED,
                                    "ulid: random part exhausted within one millisecond");
    } else if (fill_random(last_random, sizeof last_random, err) != 0) {
        return -1;
    }
    last_time_ms = time_ms;
    memcpy(out, last_random, 10);
    return 0;
}

int ulid_new_at(int64_t time_ms, ulid *out, strata_error *err) {
    if (time_ms < 0 || time_ms >= (INT64_C(1) << 48))
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "ulid: time %lld ms is outside 0..2^48", (long long)time_ms);
    for (int i = 0; i < 6; i++)
        out->bytes[i] = (uint8_t)((uint64_t)time_ms >> (8 * (5 - i)));
    pthread_mutex_lock(&ulid_lock);
    int rc = next_random(time_ms, out->bytes + 6, err);
    pthread_mutex_unlock(&ulid_lock);
    return rc;
}

int ulid_new(ulid *out, strata_error *err) {
    return ulid_new_at(strata_now_ns() / STRATA_NS_PER_MS, out, err);
}

/* Bit i (0 = most significant) of the 130-bit string form, whose first 2 bits are zero. */
static unsigned bit_at(const ulid *u, int i) {
    if (i < 2)
        return 0;
    i -= 2;
    return (u->bytes[i / 8] >> (7 - i % 8)) & 1u;
}

void ulid_format(const ulid *u, char out[ULID_STRING_LEN + 1]) {
    for (int c = 0; c < ULID_STRING_LEN; c++) {
        unsigned v = 0;
        for (int b = 0; b < 5; b++)
            v = v << 1 | bit_at(u, c * 5 + b);
        out[c] = crockford[v];
    }
    out[ULID_STRING_LEN] = '\0';
}

static int crockford_value(char ch) {
    if (ch >= 'a' && ch <= 'z')
        ch = (char)(ch - 'a' + 'A');
    const char *p = ch == '\0' ? NULL : strchr(crockford, ch);
    return p == NULL ? -1 : (int)(p - crockford);
}

int ulid_parse(const char *text, size_t len, ulid *out, strata_error *err) {
    if (len != ULID_STRING_LEN)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "ulid: expected 26 characters, got %zu", len);
    ulid u;
    memset(&u, 0, sizeof u);
    for (size_t c = 0; c < ULID_STRING_LEN; c++) {
        int v = crockford_value(text[c]);
        if (v < 0)
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "ulid: character %zu is not Crockford base32", c + 1);
        if (c == 0 && v > 7)
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "ulid: first character must be 0-7 (value overflows 128 bits)");
        for (int b = 0; b < 5; b++) {
            int bit = (int)c * 5 + b - 2;
            if (bit >= 0 && ((v >> (4 - b)) & 1))
                u.bytes[bit / 8] |= (uint8_t)(1u << (7 - bit % 8));
        }
    }
    *out = u;
    return 0;
}

int ulid_compare(const ulid *a, const ulid *b) {
    return memcmp(a->bytes, b->bytes, sizeof a->bytes);
}

int64_t ulid_time_ms(const ulid *u) {
    uint64_t t = 0;
    for (int i = 0; i < 6; i++)
        t = t << 8 | u->bytes[i];
    return (int64_t)t;
}

bool ulid_is_zero(const ulid *u) {
    for (int i = 0; i < 16; i++) {
        if (u->bytes[i] != 0)
            return false;
    }
    return true;
}
