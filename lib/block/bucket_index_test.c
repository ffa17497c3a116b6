/*
 * bucket_index_test.c - bucket-index.json: round trip of block metas and deletion marks, ordering,
 * and strict decoding.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "block/bucket_index.h"

/* A meta as the ingester (level 1) or compactor (level 2, with sources) writes it. */
static void make_meta(block_meta *m, int64_t time_ms, int level, const ulid *sources,
                      size_t n_sources) {
    strata_error err;
    block_meta_init(m);
    assert_int_equal(ulid_new_at(time_ms, &m->id, &err), 0);
    m->min_time_ms = time_ms;
    m->max_time_ms = time_ms + 1000;
    m->num_samples = 100 + (uint64_t)level;
    m->num_series = 2;
    m->num_profiles = 3;
    m->compaction_level = level;
    m->version = BLOCK_META_VERSION;
    m->format_version = 1;
    m->tenant = strdup("team-a");
    assert_non_null(m->tenant);
    if (n_sources > 0)
        assert_int_equal(block_meta_set_sources(m, sources, n_sources, &err), 0);
    else
        assert_int_equal(block_meta_set_sources(m, &m->id, 1, &err), 0);
}

static void test_roundtrip(void **state) {
    (void)state;
    strata_error err;
    block_meta a, b, c;
    make_meta(&a, 3000, 1, NULL, 0);
    make_meta(&b, 1000, 1, NULL, 0);
    ulid srcs[2] = {a.id, b.id};
    make_meta(&c, 2000, 2, srcs, 2);
    bucket_index ix;
    bucket_index_init(&ix);
    ix.updated_at = 1700000123;
    assert_int_equal(bucket_index_add_block(&ix, &a, &err), 0);
    assert_int_equal(bucket_index_add_block(&ix, &b, &err), 0);
    assert_int_equal(bucket_index_add_block(&ix, &c, &err), 0);
    assert_int_equal(bucket_index_add_mark(&ix, &a.id, 1700000100, &err), 0);
    assert_int_equal(bucket_index_add_mark(&ix, &b.id, 1700000050, &err), 0);
    strata_buffer json = STRATA_BUFFER_INIT;
    assert_int_equal(bucket_index_encode(&ix, &json, &err), 0);
    assert_non_null(memmem(json.data, json.len, "\"version\":1,\"updated_at\":1700000123", 35));

    bucket_index back;
    assert_int_equal(bucket_index_decode((const char *)json.data, json.len, &back, &err), 0);
    assert_int_equal(back.updated_at, 1700000123);
    assert_int_equal(back.n_blocks, 3);
    /* Sorted by ULID, i.e. by time: b (1000), c (2000), a (3000). */
    assert_int_equal(ulid_compare(&back.blocks[0].id, &b.id), 0);
    assert_int_equal(ulid_compare(&back.blocks[1].id, &c.id), 0);
    assert_int_equal(ulid_compare(&back.blocks[2].id, &a.id), 0);
    assert_int_equal(back.blocks[1].compaction_level, 2);
    assert_int_equal(back.blocks[1].n_sources, 2);
    assert_int_equal(ulid_compare(&back.blocks[1].sources[1], &b.id), 0);
    assert_int_equal(back.blocks[1].num_samples, 102);
    assert_string_equal(back.blocks[2].tenant, "team-a");
    assert_int_equal(back.blocks[2].max_time_ms, 4000);
    assert_int_equal(back.n_marks, 2);
    assert_int_equal(bucket_index_mark_time(&back, &a.id), 1700000100);
    assert_int_equal(bucket_index_mark_time(&back, &b.id), 1700000050);
    assert_int_equal(bucket_index_mark_time(&back, &c.id), -1);
    bucket_index_free(&back);
    bucket_index_free(&ix);
    strata_buffer_free(&json);
    block_meta_free(&a);
    block_meta_free(&b);
    block_meta_free(&c);
}

static void test_many_blocks(void **state) {
    (void)state;
    strata_error err;
    bucket_index ix;
    bucket_index_init(&ix);
    for (int i = 0; i < 100; i++) {
        block_meta m;
        make_meta(&m, 100000 - i * 10, 1, NULL, 0);
        assert_int_equal(bucket_index_add_block(&ix, &m, &err), 0);
        assert_int_equal(bucket_index_add_mark(&ix, &m.id, i, &err), 0);
        block_meta_free(&m);
    }
    strata_buffer json = STRATA_BUFFER_INIT;
    assert_int_equal(bucket_index_encode(&ix, &json, &err), 0);
    bucket_index back;
    assert_int_equal(bucket_index_decode((const char *)json.data, json.len, &back, &err), 0);
    assert_int_equal(back.n_blocks, 100);
    assert_int_equal(back.n_marks, 100);
    assert_int_equal(back.blocks[0].min_time_ms, 100000 - 99 * 10);
    assert_int_equal(back.blocks[99].min_time_ms, 100000);
    assert_int_equal(back.marks[0].deletion_time, 99);
    bucket_index_free(&back);
    bucket_index_free(&ix);
    strata_buffer_free(&json);
}

static void test_rejects(void **state) {
    (void)state;
    strata_error err;
    bucket_index ix;
    const char *bad[] = {
        "[]",
        "{\"version\":2,\"updated_at\":1,\"blocks\":[]}",
        "{\"version\":1,\"blocks\":[]}",
        "{\"version\":1,\"updated_at\":1,\"blocks\":{}}",
        "{\"version\":1,\"updated_at\":1,\"blocks\":[{\"version\":1}]}",
        "{\"version\":1,\"updated_at\":1,\"blocks\":[],\"block_deletion_marks\":[{\"id\":\"x\"}]}",
        "{\"version\":1,",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        strata_error_clear(&err);
        assert_int_equal(bucket_index_decode(bad[i], strlen(bad[i]), &ix, &err), -1);
        assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    }
    assert_non_null(strstr(err.message, "bucket-index.json"));
    const char *ok = "{\"version\":1,\"updated_at\":5,\"blocks\":[],\"future\":true}";
    assert_int_equal(bucket_index_decode(ok, strlen(ok), &ix, &err), 0);
    assert_int_equal(ix.updated_at, 5);
    assert_int_equal(ix.n_blocks, 0);
    bucket_index_free(&ix);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_many_blocks),
        cmocka_unit_test(test_rejects),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
