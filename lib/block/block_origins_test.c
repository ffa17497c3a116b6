/*
 * block_origins_test.c - the compact stack-origin table against a plain array: dense runs, runs
 * broken at random, chunks that turn wide part-way (a gap past 16 bits from the chunk's first
 * origin), values at the top of the 32-bit range, sequences that are not increasing, and what it
 * costs per stack on run-shaped data.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "block/block_origins.h"

/* Appends v[0..n) and checks every lookup, before and after shrinking. */
static void check_table(const uint32_t *v, size_t n, block_origin_table *t) {
    memset(t, 0, sizeof *t);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(block_origin_table_append(t, v[i]), 0);
    assert_int_equal(t->n, n);
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < n; i++)
            if (block_origin_table_get(t, (uint32_t)i) != v[i])
                fail_msg("pass %d: origin of %zu is %u, appended %u", pass, i,
                         block_origin_table_get(t, (uint32_t)i), v[i]);
        block_origin_table_shrink(t);
    }
}

static uint64_t next_random(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* 0, 1, 2, ...: one run per chunk, nothing wide. */
static void test_dense(void **state) {
    (void)state;
    size_t n = 10000;
    uint32_t *v = malloc(n * sizeof *v);
    assert_non_null(v);
    for (size_t i = 0; i < n; i++)
        v[i] = (uint32_t)i;
    block_origin_table t;
    check_table(v, n, &t);
    assert_int_equal(t.n_offsets, (n + BLOCK_ORIGIN_CHUNK - 1) / BLOCK_ORIGIN_CHUNK);
    assert_int_equal(t.n_wide, 0);
    for (size_t c = 0; c * BLOCK_ORIGIN_CHUNK < n; c++)
        assert_int_equal(t.chunks[c].starts, 1);
    block_origin_table_free(&t);
    free(v);
}

/* Increasing runs of random length 1-40 with random gaps, one gap in 50 past 16 bits: every
 * lookup right, some chunks wide, and on such data far under the 2 bytes a stack of a 16-bit
 * offset each. */
static void test_random_runs(void **state) {
    (void)state;
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    for (int round = 0; round < 20; round++) {
        size_t n = 1 + (size_t)(next_random(&seed) % 200000);
        uint32_t *v = malloc(n * sizeof *v);
        assert_non_null(v);
        uint32_t next = (uint32_t)(next_random(&seed) % 1000), runs = 0;
        for (size_t i = 0; i < n;) {
            size_t len = 1 + (size_t)(next_random(&seed) % 40);
            runs++;
            for (size_t k = 0; k < len && i < n; k++)
                v[i++] = next++;
            next +=
                1 + (next_random(&seed) % 50 == 0 ? 70000 : (uint32_t)(next_random(&seed) % 300));
        }
        block_origin_table t;
        check_table(v, n, &t);
        if (n > 100000)
            assert_true(t.n_wide > 0);
        /* a chunk's bit-0 start plus the runs: never more starts than that */
        assert_true(t.n_offsets + t.n_wide <= runs + n / BLOCK_ORIGIN_CHUNK + 1);
        if (n > 10000)
            assert_true(block_origin_table_bytes(&t) < n); /* under a byte a stack */
        block_origin_table_free(&t);
        free(v);
    }
}

/* A chunk turns wide after some narrow starts, and the next chunk starts narrow again; origins up
 * to UINT32_MAX, where the run cannot continue by wrapping to 0. */
static void test_wide_and_top_of_range(void **state) {
    (void)state;
    uint32_t v[200];
    size_t n = 0;
    for (uint32_t i = 0; i < 10; i++)
        v[n++] = 100 + 2 * i; /* ten narrow starts */
    v[n++] = 100000;          /* past 16 bits: the chunk goes wide with its ten starts */
    for (; n < BLOCK_ORIGIN_CHUNK + 5; n++)
        v[n] = v[n - 1] + 1; /* the chunk's rest and the next chunk's first five: one run */
    v[n] = v[n - 1] + 3;
    n++;
    v[n++] = UINT32_MAX - 2;
    v[n++] = UINT32_MAX - 1;
    v[n++] = UINT32_MAX;
    v[n++] = 0; /* not increasing: the reader refuses that, the table still holds it */
    v[n++] = 1;
    v[n++] = 7;
    v[n++] = 5;
    block_origin_table t;
    check_table(v, n, &t);
    assert_true(t.chunks[0].first & BLOCK_ORIGIN_WIDE);
    /* chunk 0: the ten starts and 100000; chunk 1, wide from UINT32_MAX - 2 on: its first, the
     * jump by 3, UINT32_MAX - 2, 0 (no wrap from UINT32_MAX), 7 and 5 */
    assert_true(t.chunks[1].first & BLOCK_ORIGIN_WIDE);
    assert_int_equal(t.n_wide, 11 + 6);
    assert_int_equal(t.n_offsets, 0);
    block_origin_table_free(&t);
}

/* The portable popcount against a bit-by-bit count. */
static void test_popcount(void **state) {
    (void)state;
    uint64_t seed = 12345;
    for (int i = 0; i < 10000; i++) {
        uint64_t x = next_random(&seed);
        if (i < 65) /* 0, 1, 3, ... UINT64_MAX */
            x = i == 64 ? UINT64_MAX : ((uint64_t)1 << i) - 1;
        else if (i < 129) /* each single bit */
            x = (uint64_t)1 << (i - 65);
        unsigned bits = 0;
        for (uint64_t y = x; y != 0; y >>= 1)
            bits += (unsigned)(y & 1);
        assert_int_equal(block_origin_popcount(x), bits);
    }
}

/* The empty table and one origin. */
static void test_small(void **state) {
    (void)state;
    block_origin_table t;
    memset(&t, 0, sizeof t);
    assert_int_equal(block_origin_table_bytes(&t), 0);
    block_origin_table_shrink(&t);
    block_origin_table_free(&t);
    uint32_t one = 42;
    check_table(&one, 1, &t);
    assert_int_equal(block_origin_table_get(&t, 0), 42);
    block_origin_table_free(&t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dense),
        cmocka_unit_test(test_random_runs),
        cmocka_unit_test(test_wide_and_top_of_range),
        cmocka_unit_test(test_small),
        cmocka_unit_test(test_popcount),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
