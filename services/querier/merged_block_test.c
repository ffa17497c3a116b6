/*
 * merged_block_test.c - the querier's engine gives the same answers over a merged block as over
 * its sources: a merged flame graph per selector (every node's total) and the metrics graph of
 * every series, over block_merge_testdata.h's sources A, B and C and over their merge alone. The
 * merger's own checks (profiles, totals, lineage, failures) are lib/block's block_merge_test.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block/block_format.h"
#include "block/block_merge_testdata.h"
#include "calltree/calltree.h"
#include "engine.h"

/* Renders a calltree as "frame;frame;...=total" lines (finalized tree, all nodes). */
static void render_tree(const calltree *tree, uint32_t node, strata_buffer *path,
                        strata_buffer *out) {
    size_t at = path->len;
    if (node != CALLTREE_ROOT) {
        calltree_frame f = calltree_frame_get(tree, calltree_node_frame(tree, node));
        assert_int_equal(strata_buffer_appendf(path, ";%s", f.name), 0);
        assert_int_equal(strata_buffer_append(out, path->data, path->len), 0);
        assert_int_equal(
            strata_buffer_appendf(out, "=%" PRId64 "\n", calltree_node_get(tree, node).total), 0);
    }
    for (size_t i = 0; i < calltree_child_count(tree, node); i++)
        render_tree(tree, calltree_child_at(tree, node, i), path, out);
    path->len = at;
}

/* What the querier answers over every block of a bucket: a merged flame graph per selector and
 * the metrics graph of every series. */
static char *query_answers(bucket *store) {
    strata_error err;
    block_index_options io;
    block_index_options_default(&io);
    block_index *ix;
    assert_int_equal(block_index_new(&io, store, &ix, &err), 0);
    assert_int_equal(block_index_sync(ix, &err), 0);
    query_engine_options eo;
    query_engine_options_default(&eo);
    eo.parallelism = 2;
    query_engine *e;
    assert_int_equal(query_engine_new(&eo, ix, &e, &err), 0);
    strata_buffer out = STRATA_BUFFER_INIT;
    const char *selectors[] = {"process_cpu:samples:count:cpu:nanoseconds:delta{}",
                               "process_cpu:samples:count:cpu:nanoseconds:delta{job=\"api\"}",
                               "memory:inuse_space:bytes:space:bytes{}"};
    for (size_t i = 0; i < 3; i++) {
        selector sel;
        assert_int_equal(selector_parse(selectors[i], &sel, &err), 0);
        calltree *tree;
        assert_int_equal(calltree_create(&tree, 0, &err), 0);
        merge_result mr;
        memset(&mr, 0, sizeof mr);
        if (query_merge(e, TENANT, &sel, BASE_NS, BASE_NS + 60 * SEC, tree, false, &mr, &err) != 0)
            fail_msg("query_merge %s: %s", selectors[i], err.message);
        assert_int_equal(calltree_finalize(tree, &err), 0);
        assert_int_equal(strata_buffer_appendf(&out,
                                               "merge %s profiles=%" PRIu64 " total=%" PRId64
                                               " min=%" PRId64 " max=%" PRId64 "\n",
                                               selectors[i], mr.profiles, mr.total,
                                               mr.min_time_ns - BASE_NS, mr.max_time_ns - BASE_NS),
                         0);
        strata_buffer path = STRATA_BUFFER_INIT;
        render_tree(tree, CALLTREE_ROOT, &path, &out);
        strata_buffer_free(&path);
        calltree_free(tree);

        range_series *rs;
        size_t n_rs;
        assert_int_equal(query_range(e, TENANT, &sel, BASE_NS, BASE_NS + 60 * SEC, 5 * SEC, NULL, 0,
                                     &rs, &n_rs, NULL, &err),
                         0);
        for (size_t s = 0; s < n_rs; s++) {
            assert_int_equal(label_set_format(&rs[s].labels, &out), 0);
            for (size_t p = 0; p < rs[s].n_points; p++)
                assert_int_equal(strata_buffer_appendf(&out, " %" PRId64 ":%" PRId64 "/%d",
                                                       rs[s].points[p].time_ns - BASE_NS,
                                                       rs[s].points[p].value,
                                                       (int)rs[s].points[p].count),
                                 0);
            assert_int_equal(strata_buffer_append_byte(&out, '\n'), 0);
        }
        query_range_free(rs, n_rs);
        selector_free(&sel);
    }
    assert_int_equal(strata_buffer_append_byte(&out, 0), 0);
    query_engine_free(e);
    block_index_free(ix);
    return (char *)out.data;
}

/* Copies one block (data object, then meta.json) into another bucket. */
static void copy_block(bucket *from, bucket *to, const ulid *id) {
    strata_error err;
    const char *files[] = {BLOCK_DATA_FILE, BLOCK_META_FILE};
    for (size_t i = 0; i < 2; i++) {
        char key[256];
        block_key(id, files[i], key, sizeof key);
        strata_buffer data = STRATA_BUFFER_INIT;
        assert_int_equal(bucket_get(from, key, &data, &err), 0);
        assert_int_equal(bucket_upload(to, key, data.data, data.len, &err), 0);
        strata_buffer_free(&data);
    }
}

static void test_querier_answers_same_on_merged_block(void **state) {
    (void)state;
    fixture fx, merged;
    fixture_open(&fx);
    fixture_open(&merged);
    ulid ids[3] = {write_source(fx.store, block_a, 4), write_source(fx.store, block_b, 4),
                   write_source(fx.store, block_c, 2)};
    char *before = query_answers(fx.store);
    block_merge_result result;
    merge_ok(fx.store, ids, 3, NULL, &result);
    copy_block(fx.store, merged.store, &result.id);
    char *after = query_answers(merged.store);
    assert_string_equal(after, before);
    /* samples:count values are scaled by the period (10 ms) in merges. */
    assert_non_null(strstr(after,
                           "merge process_cpu:samples:count:cpu:nanoseconds:delta{job=\"api\"}"
                           " profiles=5 total=280000000 "));
    assert_non_null(strstr(after, ";main;work;leaf=190000000\n"));
    free(before);
    free(after);
    block_merge_result_free(&result);
    fixture_close(&merged);
    fixture_close(&fx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_querier_answers_same_on_merged_block),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
