/*
 * common_test.c - tests for errors, buffers, varints, hashing, the u64 map, the interner, the UTF-8
 * validator, the tenant rule, the radix sort and prefaulting.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/array.h"
#include "common/auth.h"
#include "common/base64.h"
#include "common/buffer.h"
#include "common/clock.h"
#include "common/error.h"
#include "common/hash.h"
#include "common/log.h"
#include "common/prefault.h"
#include "common/protobuf_writer.h"
#include "common/radix_sort.h"
#include "common/random_id.h"
#include "common/tenant.h"
#include "common/textfile.h"
#include "common/thread.h"
#include "common/varint.h"
#include "common/utf8.h"

/* Arrays grow to 16, then double, or straight to what is needed; a size whose bytes overflow
 * size_t is refused with the array and its capacity untouched. */
static void test_array_grow(void **state) {
    (void)state;
    uint32_t *ids = NULL;
    size_t cap = 0, n = 0;
    for (uint32_t i = 0; i < 100; i++) {
        assert_int_equal(STRATA_ARRAY_RESERVE(ids, cap, n + 1), 0);
        ids[n++] = i;
        if (i == 0)
            assert_int_equal(cap, 16);
        if (i == 16)
            assert_int_equal(cap, 32);
    }
    assert_int_equal(cap, 128);
    for (uint32_t i = 0; i < 100; i++)
        assert_int_equal(ids[i], i);                           /* moved with their values */
    assert_int_equal(STRATA_ARRAY_RESERVE(ids, cap, 1000), 0); /* more than double: exactly that */
    assert_int_equal(cap, 1000);
    assert_int_equal(STRATA_ARRAY_RESERVE(ids, cap, 10), 0); /* room already: nothing moves */
    assert_int_equal(cap, 1000);
    uint32_t *before = ids;
    assert_int_equal(STRATA_ARRAY_RESERVE(ids, cap, SIZE_MAX / 2), -1); /* 4 x that overflows */
    assert_ptr_equal(ids, before);
    assert_int_equal(cap, 1000);
    size_t big_cap = 0;
    assert_null(strata_array_grow(NULL, &big_cap, 2, SIZE_MAX / 2 + 1));
    assert_int_equal(big_cap, 0);
    size_t small_cap = 9; /* past half the minimum: doubles */
    char *bytes = malloc(9);
    assert_non_null(bytes);
    bytes = strata_array_grow(bytes, &small_cap, 10, 1);
    assert_non_null(bytes);
    assert_int_equal(small_cap, 18);
    free(bytes);
    free(ids);
}

/* Parallel arrays: one capacity computed as strata_array_grow computes it, each array moved to
 * exactly that; an overflowing size is refused with the array untouched. */
static void test_array_capacity_and_resize(void **state) {
    (void)state;
    assert_int_equal(strata_array_capacity(0, 1), 16);
    assert_int_equal(strata_array_capacity(16, 17), 32);
    assert_int_equal(strata_array_capacity(9, 10), 18);
    assert_int_equal(strata_array_capacity(32, 1000), 1000);
    assert_int_equal(strata_array_capacity(64, 10), 64); /* room already */
    assert_true(strata_array_capacity(SIZE_MAX / 2 + 1, SIZE_MAX / 2 + 2) == SIZE_MAX);
    uint32_t *a = NULL;
    int64_t *b = NULL;
    size_t cap = 0;
    for (uint32_t i = 0; i < 40; i++) {
        if (i + 1 > cap) {
            size_t grown_cap = strata_array_capacity(cap, i + 1);
            uint32_t *ga = strata_array_resize(a, grown_cap, sizeof *ga);
            assert_non_null(ga);
            a = ga;
            int64_t *gb = strata_array_resize(b, grown_cap, sizeof *gb);
            assert_non_null(gb);
            b = gb;
            cap = grown_cap;
        }
        a[i] = i;
        b[i] = -(int64_t)i;
    }
    assert_int_equal(cap, 64);
    for (uint32_t i = 0; i < 40; i++) {
        assert_int_equal(a[i], i);
        assert_int_equal(b[i], -(int64_t)i);
    }
    assert_null(strata_array_resize(a, SIZE_MAX / 2, sizeof *a)); /* n x 4 overflows */
    assert_int_equal(a[39], 39);                                  /* untouched, still ours */
    void *one = strata_array_resize(NULL, 0, 8);                  /* zero bytes: still a block */
    assert_non_null(one);
    free(one);
    free(a);
    free(b);
}

static void test_error_set_and_wrap(void **state) {
    (void)state;
    strata_error err;
    strata_error_clear(&err);
    assert_int_equal(err.code, STRATA_OK);
    assert_int_equal(strata_error_set(&err, STRATA_INVALID_ARGUMENT, "bad %s %d", "thing", 7), -1);
    assert_string_equal(err.message, "bad thing 7");
    strata_error_wrap(&err, "file %s", "x.yaml");
    assert_string_equal(err.message, "file x.yaml: bad thing 7");
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_string_equal(strata_status_name(STRATA_RESOURCE_EXHAUSTED), "RESOURCE_EXHAUSTED");
    assert_int_equal(strata_error_set(NULL, STRATA_INTERNAL, "ignored"), -1);
}

static void test_buffer_append_and_varints(void **state) {
    (void)state;
    strata_buffer b = STRATA_BUFFER_INIT;
    uint64_t values[] = {0, 1, 127, 128, 300, UINT32_MAX, UINT64_MAX};
    for (size_t i = 0; i < 7; i++)
        assert_int_equal(strata_buffer_append_uvarint(&b, values[i]), 0);
    assert_int_equal(strata_buffer_append_svarint(&b, -5), 0);
    assert_int_equal(strata_buffer_append_svarint(&b, INT64_MIN), 0);
    const uint8_t *p = b.data, *end = b.data + b.len;
    for (size_t i = 0; i < 7; i++) {
        uint64_t v;
        assert_true(strata_uvarint_get(&p, end, &v));
        assert_true(v == values[i]);
    }
    int64_t s;
    assert_true(strata_svarint_get(&p, end, &s));
    assert_int_equal(s, -5);
    assert_true(strata_svarint_get(&p, end, &s));
    assert_true(s == INT64_MIN);
    assert_ptr_equal(p, end);
    uint64_t v;
    assert_false(strata_uvarint_get(&p, end, &v)); /* truncated */
    uint8_t overlong[11] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
    p = overlong;
    assert_false(strata_uvarint_get(&p, overlong + 11, &v));

    strata_buffer_reset(&b);
    assert_int_equal(strata_buffer_appendf(&b, "%s=%d", "a", 1), 0);
    char big[1000];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    assert_int_equal(strata_buffer_appendf(&b, "%s", big), 0);
    assert_int_equal(b.len, 3 + 999);
    size_t len;
    char *s2 = strata_buffer_detach(&b, &len);
    assert_non_null(s2);
    assert_int_equal(strlen(s2), len);
    assert_memory_equal(s2, "a=1x", 4);
    free(s2);
    assert_int_equal(b.len, 0);
    strata_buffer_free(&b);
}

/* The three decoders give the same answer for every length, at every distance from the end. */
static void test_varint_decoders_agree(void **state) {
    (void)state;
    const uint64_t values[] = {0,          1,          127,         128,        16383,
                               16384,      UINT32_MAX, 1ull << 49,  1ull << 56, INT64_MAX,
                               1ull << 63, UINT64_MAX, 0x123456789, 300};
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        uint8_t buf[32];
        memset(buf, 0xee, sizeof buf);
        size_t n = strata_uvarint_put(buf, values[i]);
        assert_true(n >= 1 && n <= STRATA_VARINT_MAX);
        assert_int_equal(n, strata_pb_varint_size(values[i]));
        uint64_t v = 1;
        assert_ptr_equal(strata_uvarint_get_unchecked(buf, &v), buf + n);
        assert_true(v == values[i]);
        /* every end from exactly n bytes to 20: the checked and the next decoder agree */
        for (size_t end = n; end <= 20; end++) {
            const uint8_t *p = buf;
            v = 1;
            assert_true(strata_uvarint_get(&p, buf + end, &v));
            assert_ptr_equal(p, buf + n);
            assert_true(v == values[i]);
            p = buf;
            v = 1;
            assert_true(strata_uvarint_next(&p, buf + end, &v));
            assert_ptr_equal(p, buf + n);
            assert_true(v == values[i]);
        }
        /* one byte short: refused, nothing consumed */
        const uint8_t *p = buf;
        assert_false(strata_uvarint_get(&p, buf + n - 1, &v));
        assert_false(strata_uvarint_next(&p, buf + n - 1, &v));
        assert_ptr_equal(p, buf);
    }
    /* past 64 bits (a tenth byte above 1) and past 10 bytes: refused by all three */
    uint8_t over64[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02};
    uint8_t over10[16] = {0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01};
    uint8_t *bad[] = {over64, over10};
    for (size_t i = 0; i < 2; i++) {
        uint64_t v;
        const uint8_t *p = bad[i];
        assert_null(strata_uvarint_get_unchecked(p, &v));
        assert_false(strata_uvarint_get(&p, bad[i] + 16, &v));
        assert_false(strata_uvarint_next(&p, bad[i] + 16, &v));
        assert_false(strata_uvarint_next(&p, bad[i] + 11, &v)); /* the checked path */
        assert_ptr_equal(p, bad[i]);
    }
}

static void test_zigzag(void **state) {
    (void)state;
    const int64_t values[] = {0, -1, 1, -2, 2, INT64_MAX, INT64_MIN, -300, 300};
    const uint64_t encoded[] = {0, 1, 2, 3, 4, UINT64_MAX - 1, UINT64_MAX, 599, 600};
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        uint64_t bits;
        memcpy(&bits, &values[i], sizeof bits);
        assert_true(strata_zigzag_encode(bits) == encoded[i]);
        assert_true(strata_u64_as_i64(strata_zigzag_decode(encoded[i])) == values[i]);
    }
    /* a delta decoder may wrap: the sum of decoded deltas is the value, without signed overflow */
    uint64_t sum = strata_zigzag_decode(strata_zigzag_encode((uint64_t)INT64_MAX)) +
                   strata_zigzag_decode(strata_zigzag_encode(2));
    assert_true(strata_u64_as_i64(sum) == INT64_MIN + 1);
}

static void test_protobuf_append_fields(void **state) {
    (void)state;
    strata_buffer b = STRATA_BUFFER_INIT;
    assert_int_equal(strata_pb_append_varint_field(&b, 3, 0), 0); /* omitted */
    assert_int_equal(b.len, 0);
    assert_int_equal(strata_pb_append_varint_field(&b, 3, 300), 0);
    assert_int_equal(strata_pb_append_len_field(&b, 20, "ab", 2), 0);
    assert_int_equal(strata_pb_append_len_field(&b, 1, "", 0), 0); /* written: key, length 0 */
    const uint8_t want[] = {3 << 3, 0xac, 0x02, 0xa2, 0x01, 2, 'a', 'b', 1 << 3 | 2, 0};
    assert_int_equal(b.len, sizeof want);
    assert_memory_equal(b.data, want, sizeof want);
    strata_buffer_free(&b);
}

/* A monotonic condition variable takes CLOCK_MONOTONIC deadlines: a wait 20 ms ahead times out
 * after about 20 ms (a realtime one would take the deadline as 1970 and return at once). */
static void test_thread_init(void **state) {
    (void)state;
    pthread_mutex_t mu;
    pthread_cond_t cv, plain;
    strata_error err;
    assert_int_equal(strata_mutex_init(&mu, &err), 0);
    assert_int_equal(strata_cond_init(&cv, true, &err), 0);
    assert_int_equal(strata_cond_init(&plain, false, &err), 0);
    int64_t start = strata_monotonic_ns();
    int64_t deadline = start + 20 * STRATA_NS_PER_MS;
    struct timespec ts = {.tv_sec = deadline / STRATA_NS_PER_SEC,
                          .tv_nsec = deadline % STRATA_NS_PER_SEC};
    pthread_mutex_lock(&mu);
    int rc = 0;
    while (rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&cv, &mu, &ts);
    pthread_mutex_unlock(&mu);
    assert_true(strata_monotonic_ns() - start >= 19 * STRATA_NS_PER_MS);
    pthread_cond_destroy(&plain);
    pthread_cond_destroy(&cv);
    pthread_mutex_destroy(&mu);
}

static void test_hash_is_stable(void **state) {
    (void)state;
    /* Stored in blocks, so it must never change: pin two values. */
    uint64_t h1 = strata_hash_bytes("", 0, 0);
    uint64_t h2 = strata_hash_bytes("hello world, strata", 19, 0);
    assert_true(h1 != h2);
    assert_true(strata_hash_bytes("hello world, strata", 19, 0) == h2);
    assert_true(strata_hash_bytes("hello world, strata", 19, 1) != h2);
    assert_true(strata_hash_bytes("abc", 3, 0) != strata_hash_bytes("abd", 3, 0));
    /* the pair: deterministic, two different chains, and every byte and the length count, at
     * every length around its 16-byte blocks */
    const char *text = "a fingerprint of thirty-odd bytes and then some more";
    uint64_t seen_a[64], seen_b[64];
    size_t n_seen = 0;
    for (size_t len = 0; len <= strlen(text); len++) {
        uint64_t a, b, a2, b2;
        strata_hash_bytes_pair(text, len, 7, 1234567, &a, &b);
        strata_hash_bytes_pair(text, len, 7, 1234567, &a2, &b2);
        assert_true(a == a2 && b == b2);
        assert_true(a != b);
        for (size_t i = 0; i < n_seen; i++)
            assert_true(seen_a[i] != a && seen_b[i] != b);
        seen_a[n_seen] = a;
        seen_b[n_seen++] = b;
        char flipped[64];
        memcpy(flipped, text, len);
        for (size_t i = 0; i < len; i++) {
            flipped[i] ^= 1;
            strata_hash_bytes_pair(flipped, len, 7, 1234567, &a2, &b2);
            assert_true(a2 != a && b2 != b);
            flipped[i] ^= 1;
        }
    }
    /* zero bytes are not padding: "", "\0" and "\0\0" differ */
    uint64_t z[3][2];
    for (size_t len = 0; len < 3; len++)
        strata_hash_bytes_pair("\0\0", len, 0, 0, &z[len][0], &z[len][1]);
    assert_true(z[0][0] != z[1][0] && z[1][0] != z[2][0] && z[0][0] != z[2][0]);
    /* word fingerprints: order and every word count */
    strata_fingerprint f1, f2;
    strata_fingerprint_init(&f1, 2);
    strata_fingerprint_add(&f1, 1);
    strata_fingerprint_add(&f1, 2);
    strata_fingerprint_init(&f2, 2);
    strata_fingerprint_add(&f2, 2);
    strata_fingerprint_add(&f2, 1);
    uint64_t k1, k2;
    uint32_t c1, c2;
    strata_fingerprint_finish(&f1, &k1, &c1);
    strata_fingerprint_finish(&f2, &k2, &c2);
    assert_true(k1 != k2 && c1 != c2);
}

static void test_u64_map(void **state) {
    (void)state;
    strata_u64_map m;
    assert_int_equal(strata_u64_map_init(&m, 4), 0);
    for (uint64_t k = 1; k <= 10000; k++) {
        bool inserted;
        uint64_t *v = strata_u64_map_upsert(&m, k * 7919, k, &inserted);
        assert_non_null(v);
        assert_true(inserted);
    }
    assert_int_equal(m.count, 10000);
    for (uint64_t k = 1; k <= 10000; k++) {
        uint64_t *v = strata_u64_map_get(&m, k * 7919);
        assert_non_null(v);
        assert_true(*v == k);
    }
    assert_null(strata_u64_map_get(&m, 3));
    bool inserted = true;
    uint64_t *v = strata_u64_map_upsert(&m, 7919, 99, &inserted);
    assert_false(inserted);
    assert_true(*v == 1);
    strata_u64_map_clear(&m);
    assert_null(strata_u64_map_get(&m, 7919));
    strata_u64_map_free(&m);
}

static int compare_records(const void *a, const void *b) {
    const strata_sort_record *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return x->payload < y->payload ? -1 : x->payload > y->payload; /* payload = input position */
}

/* The radix sort against qsort on keys of every shape it special-cases: few records (insertion
 * sort), keys that vary only in high bits, in low bits, in every bit, and all equal. The payload
 * is the input position, so equal keys must come out in input order (stability). */
static void test_radix_sort(void **state) {
    (void)state;
    const size_t sizes[] = {0, 1, 2, 63, 64, 65, 1000, 100000};
    const uint64_t masks[] = {UINT64_MAX, 0xffff, 0xff00000000000000ULL, 0x7ff800, 0, 0x3};
    uint64_t rng = 88172645463325252ULL;
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        for (size_t mi = 0; mi < sizeof masks / sizeof *masks; mi++) {
            size_t n = sizes[si];
            strata_sort_record *r = malloc((n + 1) * sizeof *r);
            strata_sort_record *want = malloc((n + 1) * sizeof *want);
            strata_sort_record *tmp = malloc((n + 1) * sizeof *tmp);
            assert_non_null(r);
            assert_non_null(want);
            assert_non_null(tmp);
            for (size_t i = 0; i < n; i++) {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                r[i] = (strata_sort_record){(rng & masks[mi]) | 0x100000000ULL, i};
            }
            memcpy(want, r, n * sizeof *r);
            qsort(want, n, sizeof *want, compare_records);
            strata_radix_sort(r, tmp, n);
            for (size_t i = 0; i < n; i++) {
                assert_true(r[i].key == want[i].key);
                assert_true(r[i].payload == want[i].payload);
            }
            free(r);
            free(want);
            free(tmp);
        }
    }
}

/* Past 4 MiB per array the map uses huge-page-advised arrays: the same answers, zeroed keys. */
static void test_u64_map_large(void **state) {
    (void)state;
    strata_u64_map m;
    assert_int_equal(strata_u64_map_init(&m, 16), 0);
    const uint64_t n = 1000000; /* grows to 2^21 slots (at most 3/4 full): 32 MiB */
    for (uint64_t k = 1; k <= n; k++)
        assert_non_null(strata_u64_map_upsert(&m, k << 20 | 5, k, NULL));
    assert_true(m.mask + 1 >= (1u << 21));
    assert_int_equal(m.count, n);
    for (uint64_t k = 1; k <= n; k++) {
        uint64_t *v = strata_u64_map_get(&m, k << 20 | 5);
        assert_non_null(v);
        assert_true(*v == k);
    }
    assert_null(strata_u64_map_get(&m, (n + 1) << 20 | 5));
    strata_u64_map_free(&m);
}

/* A reserved map takes that many keys without growing, and keeps the keys it had. */
static void test_u64_map_reserve(void **state) {
    (void)state;
    strata_u64_map m = {0};
    for (uint64_t k = 1; k <= 100; k++)
        assert_non_null(strata_u64_map_upsert(&m, k * 7919, k, NULL));
    assert_int_equal(strata_u64_map_reserve(&m, 100000), 0);
    size_t mask = m.mask;
    assert_true((mask + 1) * 3 >= 100000 * 4);
    for (uint64_t k = 101; k <= 100000; k++)
        assert_non_null(strata_u64_map_upsert(&m, k * 7919, k, NULL));
    assert_int_equal(m.mask, mask);
    assert_int_equal(m.count, 100000);
    for (uint64_t k = 1; k <= 100000; k++)
        assert_true(*strata_u64_map_get(&m, k * 7919) == k);
    assert_int_equal(strata_u64_map_reserve(&m, 10), 0); /* never shrinks */
    assert_int_equal(m.mask, mask);
    strata_u64_map_free(&m);
}

/* A slot map starts at 4,096 slots on the first claim, doubles before it passes half full, keeps
 * every key's value across growth, and finds a claimed key's slot again. */
static void test_slot_map(void **state) {
    (void)state;
    strata_slot_map m = {0};
    assert_int_equal(strata_slot_map_bytes(&m), 0);
    bool inserted = false;
    strata_u64_slot *slot = strata_slot_map_claim(&m, 42, &inserted);
    assert_non_null(slot);
    assert_true(inserted);
    assert_true(slot->key == 42 && slot->value == UINT64_MAX);
    slot->value = 7;
    assert_int_equal(m.mask + 1, 4096);
    assert_int_equal(strata_slot_map_bytes(&m), 4096 * sizeof(strata_u64_slot));
    slot = strata_slot_map_claim(&m, 42, &inserted);
    assert_false(inserted);
    assert_true(slot->value == 7);
    const uint64_t n = 10000;
    for (uint64_t k = 1; k <= n; k++) {
        slot = strata_slot_map_claim(&m, k * 7919 + 1000000, &inserted);
        assert_non_null(slot);
        assert_true(inserted);
        slot->value = k;
        assert_true(m.count * 2 <= m.mask + 1);
    }
    assert_int_equal(m.count, n + 1);
    assert_int_equal(m.mask + 1, 32768); /* 10,001 keys: past 8,192, at most half full */
    for (uint64_t k = 1; k <= n; k++) {
        slot = strata_slot_map_claim(&m, k * 7919 + 1000000, &inserted);
        assert_false(inserted);
        assert_true(slot->value == k);
    }
    /* a caller's own probe finds a key where claim put it */
    size_t i = strata_hash_u64(42) & m.mask;
    while (m.slots[i].key != 42)
        i = (i + 1) & m.mask;
    assert_true(m.slots[i].value == 7);
    assert_int_equal(m.count, n + 1);
    strata_slot_map_free(&m);
    assert_null(m.slots);
    assert_int_equal(m.count, 0);
}

static void test_intern(void **state) {
    (void)state;
    strata_intern t;
    assert_int_equal(strata_intern_init(&t), 0);
    char name[32];
    for (int i = 0; i < 5000; i++) {
        snprintf(name, sizeof name, "function_%d", i);
        uint32_t id;
        assert_int_equal(strata_intern_add(&t, name, strlen(name), &id), 0);
        assert_int_equal(id, (uint32_t)i);
    }
    uint32_t id;
    assert_int_equal(strata_intern_add(&t, "function_42", 11, &id), 0);
    assert_int_equal(id, 42);
    assert_true(strata_intern_find(&t, "function_4999", 13, &id));
    assert_int_equal(id, 4999);
    assert_false(strata_intern_find(&t, "function_5000", 13, &id));
    assert_string_equal(t.strings[123], "function_123");
    assert_int_equal(strata_intern_add(&t, "", 0, &id), 0);
    assert_int_equal(id, 5000);
    assert_int_equal(t.count, 5001);
    strata_intern_free(&t);
}

static void test_log_quote(void **state) {
    (void)state;
    char out[64];
    assert_string_equal(strata_log_quote("a \"b\"\nc", out, sizeof out), "\"a \\\"b\\\"\\nc\"");
    strata_log_level level;
    assert_int_equal(strata_log_parse_level("WARN", &level), 0);
    assert_int_equal(level, STRATA_LOG_WARN);
    assert_int_equal(strata_log_parse_level("loud", &level), -1);
}

static void test_utf8_sequences(void **state) {
    (void)state;
    static const struct {
        const char *bytes;
        size_t len;
        size_t want; /* strata_utf8_sequence_length */
    } cases[] = {
        {"a", 1, 1},
        {"\0", 1, 1},
        {"\xc3\xa9", 2, 2},         /* U+00E9 */
        {"\xe2\x82\xac", 3, 3},     /* U+20AC */
        {"\xf0\x9f\x94\xa5", 4, 4}, /* U+1F525 */
        {"\xf4\x8f\xbf\xbf", 4, 4}, /* U+10FFFF, the last code point */
        {"\xc3", 1, 0},             /* truncated */
        {"\xe2\x82", 2, 0},         /* truncated */
        {"\xc0\xaf", 2, 0},         /* overlong '/' */
        {"\xc1\xbf", 2, 0},         /* overlong */
        {"\xe0\x80\xaf", 3, 0},     /* overlong */
        {"\xf0\x80\x80\xaf", 4, 0}, /* overlong */
        {"\xed\xa0\x80", 3, 0},     /* surrogate U+D800 */
        {"\xed\xbf\xbf", 3, 0},     /* surrogate U+DFFF */
        {"\xf4\x90\x80\x80", 4, 0}, /* U+110000 */
        {"\xf5\x80\x80\x80", 4, 0}, /* no such lead byte */
        {"\xff", 1, 0},
        {"\x80", 1, 0},     /* lone continuation */
        {"\xc3\x28", 2, 0}, /* lead then ASCII */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        assert_int_equal(
            strata_utf8_sequence_length((const unsigned char *)cases[i].bytes, cases[i].len),
            cases[i].want);
}

static void test_utf8_check_text(void **state) {
    (void)state;
    strata_error err;
    static const struct {
        const char *bytes;
        size_t len;
        size_t valid_prefix;
        const char *check; /* strata_utf8_check_text's message, NULL if it passes */
    } cases[] = {
        {"", 0, 0, NULL},
        {"process_cpu", 11, 11, NULL},
        {"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x94\xa5", 14, 14, NULL},
        {"victim\0evil", 11, 11, "NUL byte at offset 6"},
        {"\0", 1, 1, "NUL byte at offset 0"},
        {"abc\xff"
         "def",
         7, 3, "invalid UTF-8 at offset 3"},
        {"abc\xc3", 4, 3, "invalid UTF-8 at offset 3"},
        {"\xed\xa0\x80", 3, 0, "invalid UTF-8 at offset 0"},
        /* Past the eight-byte ASCII fast path, and the first problem wins. */
        {"0123456789abcdef\x80", 17, 16, "invalid UTF-8 at offset 16"},
        {"0123456789abcd\0f\x80", 17, 16, "NUL byte at offset 14"},
        {"01234567\xc3\xa9"
         "89abcdef\0",
         19, 19, "NUL byte at offset 18"},
        {"\xc3\xa9\xff\0", 4, 2, "invalid UTF-8 at offset 2"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *s = cases[i].bytes;
        size_t len = cases[i].len;
        assert_int_equal(strata_utf8_valid_prefix(s, len), cases[i].valid_prefix);
        assert_int_equal(strata_utf8_is_valid(s, len), cases[i].valid_prefix == len);
        strata_error_clear(&err);
        if (cases[i].check == NULL) {
            assert_int_equal(strata_utf8_check_text(s, len, &err), 0);
        } else {
            assert_int_equal(strata_utf8_check_text(s, len, &err), -1);
            assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
            assert_string_equal(err.message, cases[i].check);
        }
    }
    /* Repair: each NUL and each byte that starts no valid sequence becomes U+FFFD. */
    static const struct {
        const char *in;
        size_t len;
        const char *out;
    } repairs[] = {
        {"", 0, ""},
        {"plain", 5, "plain"},
        {"caf\xc3\xa9", 5, "caf\xc3\xa9"},
        {"victim\0evil", 11,
         "victim\xef\xbf\xbd"
         "evil"},
        {"gnome-termin\xc3", 13, "gnome-termin\xef\xbf\xbd"}, /* comm cut mid-character */
        {"\xed\xa0\x80x", 4, "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbdx"},
        {"\xff\0", 2, "\xef\xbf\xbd\xef\xbf\xbd"},
    };
    for (size_t i = 0; i < sizeof repairs / sizeof repairs[0]; i++) {
        strata_buffer b = STRATA_BUFFER_INIT;
        assert_int_equal(strata_utf8_append_sanitized(&b, repairs[i].in, repairs[i].len), 0);
        assert_int_equal(b.len, strlen(repairs[i].out));
        assert_memory_equal(b.data, repairs[i].out, b.len);
        assert_int_equal(strata_utf8_check_text((const char *)b.data, b.len, NULL), 0);
        strata_buffer_free(&b);
    }
    /* Every single byte: ASCII and NUL pass validation, nothing from 0x80 up does alone. */
    for (int c = 0; c < 256; c++) {
        char b = (char)c;
        assert_int_equal(strata_utf8_is_valid(&b, 1), c < 0x80);
        assert_int_equal(strata_utf8_check_text(&b, 1, NULL), c > 0 && c < 0x80 ? 0 : -1);
    }
}

static void test_tenant_rule(void **state) {
    (void)state;
    char long_ok[151], too_long[301];
    memset(long_ok, 'a', 150);
    long_ok[150] = '\0';
    memset(too_long, 'b', 300);
    too_long[300] = '\0';
    static const char rule[] =
        "; a tenant is 1-150 characters of [A-Za-z0-9_.-], not \".\" or \"..\"";
    const struct {
        const char *value; /* NULL: header absent */
        size_t len;
        const char *tenant; /* resolved tenant, or NULL when refused */
        const char *why;    /* the message's reason when refused */
    } cases[] = {
        {NULL, 0, "anonymous", NULL},
        {"", 0, "anonymous", NULL},
        {"team-a", 6, "team-a", NULL},
        {"A.b_c-9", 7, "A.b_c-9", NULL},
        {"...", 3, "...", NULL},
        {"team-abc", 4, "team", NULL}, /* gRPC values are not NUL-terminated */
        {long_ok, 150, long_ok, NULL},
        {too_long, 151, NULL, "151 characters, more than 150"},
        {too_long, 300, NULL, "300 characters, more than 150"},
        {".", 1, NULL, "\".\" is not allowed"},
        {"..", 2, NULL, "\"..\" is not allowed"},
        {"../etc", 6, NULL, "'/' at offset 2 is not allowed"},
        {"a b", 3, NULL, "byte 0x20 at offset 1 is not allowed"},
        {"team\0a", 6, NULL, "byte 0x00 at offset 4 is not allowed"},
        {"t\xc3\xa9", 3, NULL, "byte 0xc3 at offset 1 is not allowed"},
        {"a|b", 3, NULL, "'|' at offset 1 is not allowed"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        strata_tenant t;
        strata_error err;
        strata_error_clear(&err);
        int rc = strata_tenant_from_header(cases[i].value, cases[i].len, &t, &err);
        bool valid = cases[i].value != NULL && strata_tenant_is_valid(cases[i].value, cases[i].len);
        if (cases[i].tenant != NULL) {
            assert_int_equal(rc, 0);
            assert_string_equal(t.name, cases[i].tenant);
            assert_int_equal(valid, cases[i].len > 0);
            continue;
        }
        assert_int_equal(rc, -1);
        assert_false(valid);
        assert_string_equal(t.name, "");
        assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
        char want[STRATA_ERROR_MESSAGE_MAX];
        snprintf(want, sizeof want, "invalid tenant in x-scope-orgid: %s%s", cases[i].why, rule);
        assert_string_equal(err.message, want);
    }
}

static int check(const strata_auth *a, const char *authorization, const char *subject,
                 const char *tenant, strata_error *err) {
    return strata_auth_check(a, authorization, authorization ? strlen(authorization) : 0, subject,
                             tenant, err);
}

static void test_auth_tenant_map(void **state) {
    (void)state;
    const char *ab[] = {"team-a", "team-b"}, *star[] = {"*"}, *c[] = {"team-c"};
    strata_auth_credential creds[] = {
        {.token = "secret-a", .tenants = ab, .n_tenants = 2},
        {.token = "secret-all", .tenants = star, .n_tenants = 1},
        {.subject = "CN=agent", .tenants = c, .n_tenants = 1},
    };
    strata_error err;
    strata_auth *a = strata_auth_new(creds, 3, &err);
    assert_non_null(a);
    assert_int_equal(check(a, "Bearer secret-a", NULL, "team-a", &err), 0);
    assert_int_equal(check(a, "bearer secret-a", NULL, "team-b", &err), 0);
    assert_int_equal(check(a, "Bearer secret-all", NULL, "anyone", &err), 0);
    assert_int_equal(check(a, NULL, "CN=agent", "team-c", &err), 0);
    /* either credential of a request may allow the tenant */
    assert_int_equal(check(a, "Bearer secret-a", "CN=agent", "team-c", &err), 0);
    const struct {
        const char *authorization, *subject, *tenant;
        strata_status code;
    } refused[] = {
        {NULL, NULL, "team-a", STRATA_UNAUTHENTICATED},
        {"Bearer secret-", NULL, "team-a", STRATA_UNAUTHENTICATED},       /* a prefix */
        {"Bearer secret-aa", NULL, "team-a", STRATA_UNAUTHENTICATED},     /* longer */
        {"Bearer Secret-a", NULL, "team-a", STRATA_UNAUTHENTICATED},      /* case */
        {"Basic secret-a", NULL, "team-a", STRATA_UNAUTHENTICATED},       /* scheme */
        {"secret-a", NULL, "team-a", STRATA_UNAUTHENTICATED},             /* no scheme */
        {"Bearer ", NULL, "team-a", STRATA_UNAUTHENTICATED},              /* empty */
        {NULL, "CN=agent2", "team-c", STRATA_UNAUTHENTICATED},            /* other subject */
        {"Bearer secret-a", NULL, "team-c", STRATA_PERMISSION_DENIED},    /* not its tenant */
        {"Bearer secret-a", NULL, "anonymous", STRATA_PERMISSION_DENIED}, /* the default */
        {NULL, "CN=agent", "team-a", STRATA_PERMISSION_DENIED},
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        strata_error_clear(&err);
        assert_int_equal(
            check(a, refused[i].authorization, refused[i].subject, refused[i].tenant, &err), -1);
        assert_int_equal(err.code, refused[i].code);
    }
    assert_non_null(strstr(err.message, "team-a"));
    strata_auth_free(a);

    /* bad credentials */
    const char *bad_tenant[] = {"../x"};
    strata_auth_credential bad[] = {
        {.token = "", .tenants = ab, .n_tenants = 2},
        {.token = "t", .subject = "CN=x", .tenants = ab, .n_tenants = 2},
        {.tenants = ab, .n_tenants = 2},
        {.token = "t", .tenants = ab, .n_tenants = 0},
        {.token = "t", .tenants = bad_tenant, .n_tenants = 1},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_null(strata_auth_new(&bad[i], 1, &err));
        assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    }
    assert_null(strata_auth_new(creds, 0, &err));
}

static void test_textfile_read(void **state) {
    (void)state;
    char path[] = "/tmp/strata-textfile-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    assert_non_null(f);
    fputs("token\n", f);
    fclose(f);
    char *text = NULL;
    size_t len = 0;
    strata_error err;
    assert_int_equal(strata_textfile_read(path, "t", &text, &len, &err), 0);
    assert_string_equal(text, "token\n");
    assert_int_equal(len, 6);
    free(text);
    f = fopen(path, "w");
    assert_non_null(f);
    fclose(f);
    assert_int_equal(strata_textfile_read(path, "t", &text, &len, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_null(text);
    unlink(path);
    assert_int_equal(strata_textfile_read(path, "t", &text, &len, &err), -1);
    assert_int_equal(err.code, STRATA_NOT_FOUND);
}

/* Pages of [p, p + pages * page) resident now, by mincore. */
static size_t resident_pages(void *p, size_t pages, size_t page) {
    unsigned char vec[64];
    assert_true(pages <= sizeof vec);
    assert_int_equal(mincore(p, pages * page, vec), 0);
    size_t n = 0;
    for (size_t i = 0; i < pages; i++)
        n += vec[i] & 1;
    return n;
}

static void test_prefault_write(void **state) {
    (void)state;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t pages = 64;
    char *p = mmap(NULL, pages * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(p != MAP_FAILED);
    assert_int_equal(resident_pages(p, pages, page), 0);
    /* too little to be worth a call: nothing asked, nothing mapped */
    assert_false(strata_prefault_write(p, 15 * page));
    assert_false(strata_prefault_write(NULL, pages * page));
    assert_int_equal(resident_pages(p, pages, page), 0);
    /* from the middle of page 1 to the middle of page 40: whole pages 2..39 only */
    bool asked = strata_prefault_write(p + page + page / 2, 39 * page);
    if (!asked) { /* a kernel before 5.14: the hint is refused and nothing else happens */
        assert_int_equal(resident_pages(p, pages, page), 0);
    } else {
        unsigned char vec[64];
        assert_int_equal(mincore(p, pages * page, vec), 0);
        for (size_t i = 0; i < pages; i++)
            assert_int_equal(vec[i] & 1, i >= 2 && i < 40 ? 1 : 0);
    }
    /* the memory reads as zeros and takes writes either way */
    for (size_t i = 0; i < pages * page; i += page)
        assert_int_equal(p[i], 0);
    memset(p, 7, pages * page);
    assert_int_equal(p[pages * page - 1], 7);
    /* read-only memory is refused, not written */
    assert_int_equal(mprotect(p, pages * page, PROT_READ), 0);
    assert_false(strata_prefault_write(p, pages * page));
    assert_int_equal(munmap(p, pages * page), 0);
}

static void test_base64(void **state) {
    (void)state;
    strata_buffer b = STRATA_BUFFER_INIT;
    strata_error err;
    assert_int_equal(strata_base64_decode("aGVs\nbG8=", 9, &b, &err), 0);
    assert_int_equal(b.len, 5);
    assert_memory_equal(b.data, "hello", 5);
    strata_buffer_reset(&b);
    assert_int_equal(strata_base64_decode("aGVsbG8", 7, &b, &err), 0); /* padding optional */
    assert_int_equal(b.len, 5);
    strata_buffer_reset(&b);
    assert_int_equal(strata_base64_decode("aGVsb=G8", 8, &b, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_int_equal(strata_base64_decode("a", 1, &b, &err), -1);
    assert_int_equal(strata_base64_decode("aG!s", 4, &b, &err), -1);
    /* every length mod 3, every byte value, back and forth */
    uint8_t bytes[256];
    for (int i = 0; i < 256; i++)
        bytes[i] = (uint8_t)(255 - i);
    for (size_t n = 0; n <= 7; n++) {
        strata_buffer text = STRATA_BUFFER_INIT;
        assert_int_equal(strata_base64_encode(&text, bytes, n == 7 ? 256 : n), 0);
        assert_int_equal(text.len % 4, 0);
        strata_buffer_reset(&b);
        assert_int_equal(strata_base64_decode((const char *)text.data, text.len, &b, &err), 0);
        assert_int_equal(b.len, n == 7 ? 256 : n);
        assert_memory_equal(b.data, bytes, b.len);
        strata_buffer_free(&text);
    }
    strata_buffer text = STRATA_BUFFER_INIT;
    assert_int_equal(strata_base64_encode(&text, "hello", 5), 0);
    assert_int_equal(text.len, 8);
    assert_memory_equal(text.data, "aGVsbG8=", 8);
    strata_buffer_free(&text);
    strata_buffer_free(&b);
}

/* Random ids: 32 lowercase hex digits, and two never alike. */
static void test_random_id(void **state) {
    (void)state;
    char a[STRATA_RANDOM_ID_LEN + 1], b[STRATA_RANDOM_ID_LEN + 1];
    strata_error err;
    assert_int_equal(strata_random_id(a, &err), 0);
    assert_int_equal(strata_random_id(b, &err), 0);
    assert_int_equal(strlen(a), STRATA_RANDOM_ID_LEN);
    for (size_t i = 0; i < STRATA_RANDOM_ID_LEN; i++)
        assert_true((a[i] >= '0' && a[i] <= '9') || (a[i] >= 'a' && a[i] <= 'f'));
    assert_string_not_equal(a, b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_array_grow),
        cmocka_unit_test(test_array_capacity_and_resize),
        cmocka_unit_test(test_error_set_and_wrap),
        cmocka_unit_test(test_random_id),
        cmocka_unit_test(test_buffer_append_and_varints),
        cmocka_unit_test(test_varint_decoders_agree),
        cmocka_unit_test(test_zigzag),
        cmocka_unit_test(test_protobuf_append_fields),
        cmocka_unit_test(test_thread_init),
        cmocka_unit_test(test_hash_is_stable),
        cmocka_unit_test(test_u64_map),
        cmocka_unit_test(test_u64_map_large),
        cmocka_unit_test(test_u64_map_reserve),
        cmocka_unit_test(test_slot_map),
        cmocka_unit_test(test_radix_sort),
        cmocka_unit_test(test_intern),
        cmocka_unit_test(test_log_quote),
        cmocka_unit_test(test_utf8_sequences),
        cmocka_unit_test(test_utf8_check_text),
        cmocka_unit_test(test_tenant_rule),
        cmocka_unit_test(test_auth_tenant_map),
        cmocka_unit_test(test_textfile_read),
        cmocka_unit_test(test_base64),
        cmocka_unit_test(test_prefault_write),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
