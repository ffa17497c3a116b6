/*
 * engine_select_test.c - the answers users must be able to trust, through the engine:
 *   - a profile stored twice (a client retrying after a lost acknowledgement) counts once, in
 *     merges and ranges, whether the copies sit in two blocks or one, and a profile that only
 *     looks alike (same series, time and total, other stacks) still counts;
 *   - two builds of one program merge by function name (Parca's default group-by), so a diff of
 *     v1 against v2 lines up function by function, while an exact tree keeps them apart;
 *   - a block whose data fails its checksum is left out of merges and ranges, which say so;
 *   - pprof sample labels (Go's pprof.Do): group_by labels.<name> puts each endpoint's stacks
 *     under a `endpoint="/a"` frame, a selector matcher on a sample label keeps only its samples
 *     (merge, single, range), and the Labels and Values APIs list them, as Parca does;
 *   - a tenant's max_query_bytes (querier.limits, querier.overrides) bounds its merges only.
 * Blocks are written with block_writer into a FILESYSTEM bucket in a temporary directory.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "block/block_format.h"
#include "block/block_writer.h"
#include "block/ulid.h"
#include "block_index.h"
#include "bucket/bucket.h"
#include "calltree/calltree.h"
#include "common/clock.h"
#include "config/config.h"
#include "engine.h"
#include "fanout_loopback.h"
#include "metrics/metrics.h"
#include "querier.h"
#include "querier_internal.h"

#define TENANT "t1"
#define SEC STRATA_NS_PER_SEC
#define T0 (INT64_C(1700000000) * SEC)
#define CPU "process_cpu:samples:count:cpu:nanoseconds:delta"
#define PERIOD 10

typedef struct fixture {
    char dir[64];
    bucket *store;
    block_index *index;
    query_engine *engine;
} fixture;

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void fixture_open(fixture *f) {
    memset(f, 0, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/strata-select-test-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    strata_error err;
    assert_int_equal(bucket_open_filesystem(f->dir, NULL, &f->store, &err), 0);
}

/* Opens the index and engine over what was uploaded so far, with max_query_bytes when not 0. */
static void fixture_engine_limited(fixture *f, uint64_t max_query_bytes) {
    strata_error err;
    block_index_options io;
    block_index_options_default(&io);
    assert_int_equal(block_index_new(&io, f->store, &f->index, &err), 0);
    assert_int_equal(block_index_sync(f->index, &err), 0);
    query_engine_options eo;
    query_engine_options_default(&eo);
    eo.parallelism = 2;
    if (max_query_bytes != 0)
        eo.max_query_bytes = max_query_bytes;
    assert_int_equal(query_engine_new(&eo, f->index, &f->engine, &err), 0);
}

static void fixture_engine(fixture *f) {
    fixture_engine_limited(f, 0);
}

static void fixture_close(fixture *f) {
    query_engine_free(f->engine);
    block_index_free(f->index);
    bucket_close(f->store);
    nftw(f->dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static block_writer *writer_new(void) {
    block_writer_options o;
    block_writer_options_default(&o);
    o.tenant = TENANT;
    strata_error err;
    block_writer *w = block_writer_new(&o, &err);
    assert_non_null(w);
    return w;
}

/* One profile of job=app at time_ns: main > work > leaf (value) and main > other (value2), with
 * `binary` as mapping and addresses that differ per binary, as two builds' do; the two samples
 * carry the pprof labels labels_a and labels_b (`{endpoint="/a"}`; NULL for none). */
static void add_labelled_profile(block_writer *w, int64_t time_ns, const char *binary,
                                 const char *leaf, int64_t value, int64_t value2,
                                 const char *labels_a, const char *labels_b) {
    strata_error err;
    label_set sa = LABEL_SET_INIT, sb = LABEL_SET_INIT;
    if (labels_a != NULL)
        assert_int_equal(label_set_from_text(labels_a, &sa, &err), 0);
    if (labels_b != NULL)
        assert_int_equal(label_set_from_text(labels_b, &sb, &err), 0);
    label_set l = LABEL_SET_INIT;
    assert_int_equal(label_set_add(&l, "job", 3, "app", 3, &err), 0);
    profile_type t = {"process_cpu", "samples", "count", "cpu", "nanoseconds", true};
    assert_int_equal(block_writer_begin_profile(w, &l, &t, time_ns, 10 * SEC, PERIOD, &err), 0);
    uint64_t base = strcmp(binary, "/v1/app") == 0 ? 0x400000 : 0x500000;
    block_frame a[3] = {{leaf, leaf, "dep.go", 12, 10, binary, binary, base + 0x300},
                        {"work", "work", "main.go", 22, 20, binary, binary, base + 0x200},
                        {"main", "main", "main.go", 32, 30, binary, binary, base + 0x100}};
    block_frame b[2] = {{"other", "other", "main.go", 42, 40, binary, binary, base + 0x400},
                        {"main", "main", "main.go", 33, 30, binary, binary, base + 0x108}};
    assert_int_equal(block_writer_add_sample_labels(w, a, 3, &sa, value, &err), 0);
    assert_int_equal(block_writer_add_sample_labels(w, b, 2, &sb, value2, &err), 0);
    assert_int_equal(block_writer_end_profile(w, &err), 0);
    label_set_free(&l);
    label_set_free(&sa);
    label_set_free(&sb);
}

static void add_profile(block_writer *w, int64_t time_ns, const char *binary, const char *leaf,
                        int64_t value, int64_t value2) {
    add_labelled_profile(w, time_ns, binary, leaf, value, value2, NULL, NULL);
}

/* Finishes w into the bucket; returns the block's ULID text in id. */
static int upload_level = 1; /* the compaction level upload() gives the next block */

/* Finishes w into the bucket as a block of each of tenants[0..n). */
static void upload_for(fixture *f, block_writer *w, const char *const *tenants, size_t n,
                       char id[ULID_STRING_LEN + 1]) {
    strata_buffer bytes = STRATA_BUFFER_INIT, json = STRATA_BUFFER_INIT;
    block_meta meta;
    strata_error err;
    assert_int_equal(block_writer_finish(w, &bytes, &meta, &err), 0);
    meta.compaction_level = upload_level;
    assert_int_equal(block_meta_encode(&meta, &json, &err), 0);
    char key[256];
    ulid_format(&meta.id, id);
    for (size_t i = 0; i < n; i++) {
        snprintf(key, sizeof key, "%s/%s/%s", tenants[i], id, BLOCK_DATA_FILE);
        assert_int_equal(bucket_upload(f->store, key, bytes.data, bytes.len, &err), 0);
        snprintf(key, sizeof key, "%s/%s/%s", tenants[i], id, BLOCK_META_FILE);
        assert_int_equal(bucket_upload(f->store, key, json.data, json.len, &err), 0);
    }
    strata_buffer_free(&bytes);
    strata_buffer_free(&json);
    block_meta_free(&meta);
    block_writer_free(w);
}

static void upload(fixture *f, block_writer *w, char id[ULID_STRING_LEN + 1]) {
    const char *tenant = TENANT;
    upload_for(f, w, &tenant, 1, id);
}

static calltree *merge(fixture *f, unsigned group_by, const char *query, merge_result *res,
                       strata_error *err) {
    selector sel;
    assert_int_equal(selector_parse(query, &sel, err), 0);
    calltree *t;
    assert_int_equal(calltree_create(&t, 0, err), 0);
    assert_int_equal(calltree_set_group_by(t, group_by, err), 0);
    int rc =
        query_merge(f->engine, TENANT, &sel, T0 - 60 * SEC, T0 + 600 * SEC, t, false, res, err);
    selector_free(&sel);
    if (rc != 0) {
        calltree_free(t);
        return NULL;
    }
    assert_int_equal(calltree_finalize(t, err), 0);
    return t;
}

/* The range's points for job=app with a step covering everything. */
static void range(fixture *f, int64_t *value, int32_t *count, query_stats *stats) {
    strata_error err;
    selector sel;
    assert_int_equal(selector_parse(CPU, &sel, &err), 0);
    range_series *s;
    size_t n;
    if (query_range(f->engine, TENANT, &sel, T0 - 60 * SEC, T0 + 600 * SEC, 3600 * SEC, NULL, 0, &s,
                    &n, stats, &err) != 0)
        fail_msg("%s", err.message);
    assert_int_equal(n, 1);
    *value = *count = 0;
    for (size_t i = 0; i < s[0].n_points; i++) {
        *value += s[0].points[i].value;
        *count += s[0].points[i].count;
    }
    query_range_free(s, n);
    selector_free(&sel);
}

/* The points of a range query over [T0 - 60 s, T0 + 600 s] at step, as "time=value/count" lines. */
static void range_points(fixture *f, int64_t step, char *out, size_t cap) {
    strata_error err;
    selector sel;
    assert_int_equal(selector_parse(CPU, &sel, &err), 0);
    range_series *s;
    size_t n;
    query_stats stats;
    if (query_range(f->engine, TENANT, &sel, T0 - 60 * SEC, T0 + 600 * SEC, step, NULL, 0, &s, &n,
                    &stats, &err) != 0)
        fail_msg("%s", err.message);
    assert_int_equal(n, 1);
    out[0] = '\0';
    for (size_t i = 0; i < s[0].n_points; i++) {
        size_t len = strlen(out);
        snprintf(out + len, cap - len, "%lld=%lld/%d\n",
                 (long long)((s[0].points[i].time_ns - T0) / 1000000),
                 (long long)(s[0].points[i].value / PERIOD), (int)s[0].points[i].count);
    }
    query_range_free(s, n);
    selector_free(&sel);
}

/* Few buckets (dense cells, one per step) and very many (sparse: 660,001 of 1 ms) give the points
 * of the same profiles, in time order, across two blocks written out of time order. */
static void test_range_points_dense_and_sparse(void **state) {
    (void)state;
    fixture f;
    fixture_open(&f);
    char id[ULID_STRING_LEN + 1];
    block_writer *w = writer_new();
    add_profile(w, T0 + 70 * SEC, "/v1/app", "leaf", 5, 3);
    add_profile(w, T0 + 130 * SEC, "/v1/app", "leaf", 2, 2);
    upload(&f, w, id);
    w = writer_new();
    add_profile(w, T0, "/v1/app", "leaf", 1, 1);
    add_profile(w, T0 + 10 * SEC, "/v1/app", "leaf", 7, 1);
    upload(&f, w, id);
    fixture_engine(&f);
    char dense[512], sparse[512];
    range_points(&f, 60 * SEC, dense, sizeof dense);
    assert_string_equal(dense,
                        "-20000=10/2\n40000=8/1\n100000=4/1\n"); /* buckets align to the epoch */
    range_points(&f, 1000000, sparse, sizeof sparse);
    assert_string_equal(sparse, "0=2/1\n10000=8/1\n70000=8/1\n130000=4/1\n");
    fixture_close(&f);
}

static void test_twice_pushed_profile_counts_once(void **state) {
    (void)state;
    fixture f;
    fixture_open(&f);
    char id[ULID_STRING_LEN + 1];
    block_writer *w = writer_new(); /* the first push, and one unrelated profile */
    add_profile(w, T0, "/v1/app", "leaf", 5, 3);
    add_profile(w, T0 + 10 * SEC, "/v1/app", "leaf", 7, 1);
    upload(&f, w, id);
    w = writer_new(); /* the retry, a second copy in the same flush, and a look-alike */
    add_profile(w, T0, "/v1/app", "leaf", 5, 3);
    add_profile(w, T0, "/v1/app", "leaf", 5, 3);
    add_profile(w, T0 + 20 * SEC, "/v1/app", "leaf", 5, 3);
    add_profile(w, T0 + 20 * SEC, "/v1/app", "leaf", 3, 5); /* same total, other samples */
    upload(&f, w, id);
    fixture_engine(&f);
    merge_result res;
    strata_error err;
    calltree *t = merge(&f, CALLTREE_GROUP_DEFAULT, CPU, &res, &err);
    assert_non_null(t);
    int64_t want = (8 + 8 + 8 + 8) * PERIOD; /* T0 once, T0+10, both look-alikes at T0+20 */
    assert_int_equal(calltree_node_get(t, CALLTREE_ROOT).total, want);
    assert_int_equal(res.total, want);
    assert_int_equal(res.profiles, 4);
    assert_int_equal(res.stats.duplicates, 2);
    calltree_free(t);
    int64_t value;
    int32_t count;
    query_stats stats;
    range(&f, &value, &count, &stats);
    assert_int_equal(value, want);
    assert_int_equal(count, 4);
    assert_int_equal(stats.duplicates, 2);
    fixture_close(&f);
}

/* The duplicate rule includes pprof sample labels, as the compactor's: a retried labelled profile
 * counts once, one that differs from it only in a sample's labels counts too. */
static void test_labelled_copies_count_once(void **state) {
    (void)state;
    fixture f;
    fixture_open(&f);
    char id[ULID_STRING_LEN + 1];
    block_writer *w = writer_new();
    add_labelled_profile(w, T0, "/v1/app", "leaf", 5, 3, "{endpoint=\"/a\"}", "{endpoint=\"/c\"}");
    upload(&f, w, id);
    w = writer_new(); /* the retry, and a look-alike whose second sample has other labels */
    add_labelled_profile(w, T0, "/v1/app", "leaf", 5, 3, "{endpoint=\"/a\"}", "{endpoint=\"/c\"}");
    add_labelled_profile(w, T0, "/v1/app", "leaf", 5, 3, "{endpoint=\"/a\"}", "{endpoint=\"/d\"}");
    upload(&f, w, id);
    fixture_engine(&f);
    merge_result res;
    strata_error err;
    calltree *t = merge(&f, CALLTREE_GROUP_DEFAULT, CPU, &res, &err);
    assert_non_null(t);
    assert_int_equal(calltree_node_get(t, CALLTREE_ROOT).total, (8 + 8) * PERIOD);
    assert_int_equal(res.profiles, 2);
    assert_int_equal(res.stats.duplicates, 1);
    calltree_free(t);
    fixture_close(&f);
}

static uint32_t child_named(const calltree *t, uint32_t node, const char *name) {
    for (size_t i = 0; i < calltree_child_count(t, node); i++) {
        uint32_t c = calltree_child_at(t, node, i);
        if (strcmp(calltree_frame_get(t, calltree_node_frame(t, c)).name, name) == 0)
            return c;
    }
    fail_msg("no child %s", name);
    return 0;
}

static void test_two_builds_line_up_by_function(void **state) {
    (void)state;
    fixture f;
    fixture_open(&f);
    char id[ULID_STRING_LEN + 1];
    block_writer *w = writer_new();
    add_profile(w, T0, "/v1/app", "dep.Fib", 90, 10);
    upload(&f, w, id);
    w = writer_new();
    add_profile(w, T0 + 10 * SEC, "/v2/app", "dep.Fib", 20, 10);
    upload(&f, w, id);
    fixture_engine(&f);
    merge_result res;
    strata_error err;
    calltree *t = merge(&f, CALLTREE_GROUP_DEFAULT, CPU, &res, &err);
    assert_non_null(t);
    assert_int_equal(calltree_child_count(t, CALLTREE_ROOT), 1); /* one main, not one per build */
    uint32_t main = child_named(t, CALLTREE_ROOT, "main");
    uint32_t fib = child_named(t, child_named(t, main, "work"), "dep.Fib");
    assert_int_equal(calltree_node_get(t, fib).total, 110 * PERIOD);
    calltree_free(t);

    /* Exact: every location apart (main has two call sites per build), builds apart. */
    t = merge(&f, CALLTREE_GROUP_EXACT, CPU, &res, &err);
    assert_non_null(t);
    assert_int_equal(calltree_child_count(t, CALLTREE_ROOT), 4);
    calltree_frame leaf = calltree_frame_get(t, calltree_node_frame(t, calltree_node_count(t) - 1));
    assert_true(leaf.loc.address != 0);
    calltree_free(t);
    fixture_close(&f);
}

/* A merge with Parca's group_by (frame fields and labels); query the selector text. */
static calltree *merge_grouped(fixture *f, const char *group_by, const char *query,
                               merge_result *res, strata_error *err) {
    selector sel;
    assert_int_equal(selector_parse(query, &sel, err), 0);
    calltree_grouping g;
    assert_int_equal(calltree_group_by_parse_list(group_by, &g, err), 0);
    calltree *t;
    assert_int_equal(calltree_create(&t, 0, err), 0);
    assert_int_equal(calltree_set_grouping(t, &g, err), 0);
    calltree_grouping_free(&g);
    int rc =
        query_merge(f->engine, TENANT, &sel, T0 - 60 * SEC, T0 + 600 * SEC, t, false, res, err);
    selector_free(&sel);
    if (rc != 0) {
        calltree_free(t);
        return NULL;
    }
    assert_int_equal(calltree_finalize(t, err), 0);
    return t;
}

/* "name=total" for each child of the root, in order, joined by spaces. */
static void root_children(const calltree *t, char *out, size_t cap) {
    out[0] = '\0';
    for (size_t i = 0; i < calltree_child_count(t, CALLTREE_ROOT); i++) {
        uint32_t c = calltree_child_at(t, CALLTREE_ROOT, i);
        size_t len = strlen(out);
        snprintf(out + len, cap - len, "%s%s=%lld", i ? " " : "",
                 calltree_frame_get(t, calltree_node_frame(t, c)).name,
                 (long long)calltree_node_get(t, c).total);
    }
}

static void labels_of(fixture *f, const char *name, const char *match, char *out, size_t cap) {
    strata_error err;
    selector sel;
    assert_int_equal(selector_parse(match != NULL ? match : CPU, &sel, &err), 0);
    char **list;
    size_t n;
    if (query_labels(f->engine, TENANT, name, &sel, 1, NULL, T0 - 60 * SEC, T0 + 600 * SEC, &list,
                     &n, &err) != 0)
        fail_msg("%s", err.message);
    out[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(out);
        snprintf(out + len, cap - len, "%s%s", i ? "," : "", list[i]);
    }
    query_strings_free(list, n);
    selector_free(&sel);
}

/* Blocks: two labelled profiles of job=app (leaf under endpoint=/a, other under endpoint=/b or
 * none; one sample also labelled job=batch, which the series has too: exported_job), and a block
 * written before labels existed (version 1) with one profile of job=app. */
static void write_labelled_blocks(fixture *f) {
    char id[ULID_STRING_LEN + 1];
    block_writer *w = writer_new();
    add_labelled_profile(w, T0, "/v1/app", "leaf", 5, 3, "{endpoint=\"/a\"}",
                         "{endpoint=\"/b\", job=\"batch\"}");
    add_labelled_profile(w, T0 + 10 * SEC, "/v1/app", "leaf", 2, 4, "{endpoint=\"/a\"}", NULL);
    upload(f, w, id);
    w = writer_new();
    add_profile(w, T0 + 20 * SEC, "/v1/app", "leaf", 100, 0);
    upload(f, w, id);
    fixture_engine(f);
}

/* group_by labels.<name>: one frame per value above its stacks; samples without the label stay
 * under the root (as Parca); a series label groups as well (one namespace); bare `labels` groups
 * by every sample label. */
static void test_group_by_sample_label(void **state) {
    (void)state;
    fixture f;
    fixture_open(&f);
    write_labelled_blocks(&f);
    merge_result res;
    strata_error err;
    char text[512];
    calltree *t = merge_grouped(&f, "labels.endpoint", CPU, &res, &err);
    if (t == NULL)
        fail_msg("%s", err.message);
    root_children(t, text, sizeof text);
    assert_string_equal(text, "endpoint=\"/a\"=70 endpoint=\"/b\"=30 main=1040");
    assert_int_equal(res.total, (5 + 3 + 2 + 4 + 100) * PERIOD);
    uint32_t a = calltree_child_at(t, CALLTREE_ROOT, 0);
    uint32_t leaf = child_named(t, child_named(t, child_named(t, a, "main"), "work"), "leaf");
    assert_int_equal(calltree_node_get(t, leaf).total, 7 * PERIOD);
    assert_int_equal(calltree_child_count(t, a), 1);
    calltree_free(t);

    /* two names: one frame per combination present */
    t = merge_grouped(&f, "labels.endpoint,labels.exported_job", CPU, &res, &err);
    assert_non_null(t);
    root_children(t, text, sizeof text);
    assert_string_equal(text, "endpoint=\"/a\"=70 endpoint=\"/b\", exported_job=\"batch\"=30 "
                              "main=1040");
    calltree_free(t);
    /* a series label: every sample has it */
    t = merge_grouped(&f, "labels.job", CPU, &res, &err);
    assert_non_null(t);
    root_children(t, text, sizeof text);
    assert_string_equal(text, "job=\"app\"=1140");
    calltree_free(t);
    /* bare labels: every sample label, clashing names as exported_ */
    t = merge_grouped(&f, "labels", CPU, &res, &err);
    assert_non_null(t);
    root_children(t, text, sizeof text);
    assert_string_equal(text, "endpoint=\"/a\"=70 endpoint=\"/b\", exported_job=\"batch\"=30 "
                              "main=1040");
    calltree_free(t);
    /* the same through rows instead of rollups: one profile at a time */
    selector sel;
    assert_int_equal(selector_parse(CPU, &sel, &err), 0);
    calltree_grouping g = {.mask = CALLTREE_GROUP_DEFAULT};
    assert_int_equal(calltree_grouping_add_label(&g, "endpoint", &err), 0);
    assert_int_equal(calltree_create(&t, 0, &err), 0);
    assert_int_equal(calltree_set_grouping(t, &g, &err), 0);
    assert_int_equal(query_single(f.engine, TENANT, &sel, T0, t, false, &res, &err), 0);
    assert_int_equal(calltree_finalize(t, &err), 0);
    root_children(t, text, sizeof text);
    assert_string_equal(text, "endpoint=\"/a\"=50 endpoint=\"/b\"=30");
    calltree_free(t);
    calltree_grouping_free(&g);
    selector_free(&sel);
    fixture_close(&f);
}

/* A matcher naming a sample label keeps only the samples it matches, in merges, singles and
 * ranges; a series without the label (the version 1 block) has none; nothing matching is
 * NOT_FOUND. The Labels and Values APIs list sample labels. */
static void test_filter_by_sample_label(void **state) {
    (void)state;
    fixture f;
    fixture_open(&f);
    write_labelled_blocks(&f);
    merge_result res;
    strata_error err;
    char text[512];
    calltree *t = merge_grouped(&f, "function_name", CPU "{endpoint=\"/a\"}", &res, &err);
    if (t == NULL)
        fail_msg("%s", err.message);
    assert_int_equal(calltree_node_get(t, CALLTREE_ROOT).total, 7 * PERIOD);
    uint32_t main = child_named(t, CALLTREE_ROOT, "main");
    assert_int_equal(calltree_child_count(t, main), 1); /* work > leaf only, no other */
    calltree_free(t);
    t = merge_grouped(&f, "function_name", CPU "{endpoint!=\"/a\", job=\"app\"}", &res, &err);
    assert_non_null(t);
    assert_int_equal(calltree_node_get(t, CALLTREE_ROOT).total, (3 + 4 + 100) * PERIOD);
    calltree_free(t);
    t = merge_grouped(&f, "function_name", CPU "{exported_job=\"batch\"}", &res, &err);
    assert_non_null(t);
    assert_int_equal(calltree_node_get(t, CALLTREE_ROOT).total, 3 * PERIOD);
    calltree_free(t);
    assert_null(merge_grouped(&f, "function_name", CPU "{endpoint=\"/nowhere\"}", &res, &err));
    assert_int_equal(err.code, STRATA_NOT_FOUND);

    /* range: only the matching samples' values, only profiles with one */
    selector sel;
    assert_int_equal(selector_parse(CPU "{endpoint=\"/a\"}", &sel, &err), 0);
    range_series *rs;
    size_t n;
    query_stats stats;
    assert_int_equal(query_range(f.engine, TENANT, &sel, T0 - 60 * SEC, T0 + 600 * SEC, 3600 * SEC,
                                 NULL, 0, &rs, &n, &stats, &err),
                     0);
    assert_int_equal(n, 1);
    assert_int_equal(rs[0].n_points, 1);
    assert_int_equal(rs[0].points[0].value, 7 * PERIOD);
    assert_int_equal(rs[0].points[0].count, 2);
    query_range_free(rs, n);
    selector_free(&sel);

    labels_of(&f, NULL, NULL, text, sizeof text);
    assert_string_equal(text, "endpoint,exported_job,job");
    labels_of(&f, "endpoint", NULL, text, sizeof text);
    assert_string_equal(text, "/a,/b");
    labels_of(&f, "exported_job", NULL, text, sizeof text);
    assert_string_equal(text, "batch");
    labels_of(&f, "endpoint", CPU "{exported_job=\"batch\"}", text, sizeof text);
    assert_string_equal(text, "/b");
    fixture_close(&f);
}

/* Flips a byte in the middle of the block's data object. */
static void corrupt(fixture *f, const char *id) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s/%s/%s", f->dir, TENANT, id, BLOCK_DATA_FILE);
    FILE *fp = fopen(path, "r+b");
    assert_non_null(fp);
    assert_int_equal(fseek(fp, 0, SEEK_END), 0);
    long size = ftell(fp);
    assert_true(size > 64);
    for (long at = 16; at < size - 16; at += 64) { /* every page gets hit */
        assert_int_equal(fseek(fp, at, SEEK_SET), 0);
        int c = fgetc(fp);
        assert_int_equal(fseek(fp, at, SEEK_SET), 0);
        assert_int_not_equal(fputc(c ^ 0x5a, fp), EOF);
    }
    assert_int_equal(fclose(fp), 0);
}

static void test_corrupt_block_left_out(void **state) {
    (void)state;
    fixture f;
    fixture_open(&f);
    char good[ULID_STRING_LEN + 1], bad[ULID_STRING_LEN + 1];
    block_writer *w = writer_new();
    add_profile(w, T0, "/v1/app", "leaf", 5, 3);
    upload(&f, w, good);
    w = writer_new();
    add_profile(w, T0 + 10 * SEC, "/v1/app", "leaf", 50, 30);
    upload(&f, w, bad);
    corrupt(&f, bad);
    fixture_engine(&f);
    merge_result res;
    strata_error err;
    calltree *t = merge(&f, CALLTREE_GROUP_DEFAULT, CPU, &res, &err);
    if (t == NULL)
        fail_msg("%s", err.message);
    assert_int_equal(calltree_node_get(t, CALLTREE_ROOT).total, 8 * PERIOD);
    assert_int_equal(res.stats.skipped_blocks, 1);
    assert_non_null(strstr(res.stats.skipped_block, bad));
    assert_true(res.stats.skipped_error[0] != '\0');
    calltree_free(t);
    int64_t value;
    int32_t count;
    query_stats stats;
    range(&f, &value, &count, &stats);
    assert_int_equal(value, 8 * PERIOD);
    assert_int_equal(count, 1);
    assert_int_equal(stats.skipped_blocks, 1);
    /* Nothing readable left: DATA_LOSS naming the block, not an empty answer. */
    selector sel;
    assert_int_equal(selector_parse(CPU, &sel, &err), 0);
    calltree *empty;
    assert_int_equal(calltree_create(&empty, 0, &err), 0);
    assert_int_equal(
        query_merge(f.engine, TENANT, &sel, T0 + 5 * SEC, T0 + 15 * SEC, empty, false, &res, &err),
        -1);
    assert_int_equal(err.code, STRATA_DATA_LOSS);
    assert_non_null(strstr(err.message, bad));
    calltree_free(empty);
    selector_free(&sel);
    fixture_close(&f);
}

/* 150,000 distinct functions make a tree of tens of MiB: with max_query_bytes 20 MiB the merge
 * fails with RESOURCE_EXHAUSTED while the tree grows, instead of growing the process; with the
 * default limit the same merge answers. */
static void test_tree_memory_bounded(void **state) {
    (void)state;
    fixture f;
    fixture_open(&f);
    char id[ULID_STRING_LEN + 1];
    block_writer *w = writer_new();
    strata_error err;
    label_set l = LABEL_SET_INIT;
    assert_int_equal(label_set_add(&l, "job", 3, "app", 3, &err), 0);
    profile_type t = {"process_cpu", "samples", "count", "cpu", "nanoseconds", true};
    assert_int_equal(block_writer_begin_profile(w, &l, &t, T0, 10 * SEC, PERIOD, &err), 0);
    for (int i = 0; i < 150000; i++) {
        char name[32];
        snprintf(name, sizeof name, "pkg.function_%06d", i);
        block_frame fr[2] = {{name, name, "f.go", 1, 1, "/bin/app", "b", 0x1000 + (uint64_t)i},
                             {"main", "main", "m.go", 1, 1, "/bin/app", "b", 0x10}};
        assert_int_equal(block_writer_add_sample(w, fr, 2, 1, &err), 0);
    }
    assert_int_equal(block_writer_end_profile(w, &err), 0);
    label_set_free(&l);
    upload(&f, w, id);
    fixture_engine_limited(&f, (uint64_t)20 << 20);
    merge_result res;
    calltree *tree = merge(&f, CALLTREE_GROUP_DEFAULT, CPU, &res, &err);
    assert_null(tree);
    assert_int_equal(err.code, STRATA_RESOURCE_EXHAUSTED);
    assert_non_null(strstr(err.message, "max_query_bytes"));
    query_engine_free(f.engine);
    block_index_free(f.index);
    fixture_engine(&f);
    tree = merge(&f, CALLTREE_GROUP_DEFAULT, CPU, &res, &err);
    assert_non_null(tree);
    assert_int_equal(calltree_node_count(tree), 150002);
    assert_true(calltree_memory_bytes(tree) > ((size_t)20 << 20));
    calltree_free(tree);
    fixture_close(&f);
}

/* A limit per query (query_options) replaces the engine's: a merge over 1 MiB is refused by its
 * up-front estimate (a batch of samples alone is 12 MiB), naming max_query_bytes and its value;
 * the same merge without options answers under the engine's 1 GiB. */
static void test_per_query_limit(void **state) {
    (void)state;
    fixture f;
    fixture_open(&f);
    char id[ULID_STRING_LEN + 1];
    block_writer *w = writer_new();
    add_profile(w, T0, "/v1/app", "leaf", 5, 3);
    upload(&f, w, id);
    fixture_engine(&f);
    strata_error err;
    selector sel;
    assert_int_equal(selector_parse(CPU, &sel, &err), 0);
    calltree *t;
    assert_int_equal(calltree_create(&t, 0, &err), 0);
    merge_result res;
    query_options small = {.max_query_bytes = (uint64_t)1 << 20};
    assert_int_equal(query_merge_opts(f.engine, TENANT, &small, &sel, T0 - 60 * SEC, T0 + 600 * SEC,
                                      t, false, &res, &err),
                     -1);
    assert_int_equal(err.code, STRATA_RESOURCE_EXHAUSTED);
    assert_string_equal(err.message,
                        "query needs about 12 MiB, more than the limit of 1 MiB (max_query_bytes); "
                        "narrow the time range or the selector");
    small.max_query_bytes = 512 << 10; /* under a MiB: in KiB */
    assert_int_equal(query_single_opts(f.engine, TENANT, &small, &sel, T0, t, false, &res, &err),
                     -1);
    assert_non_null(strstr(err.message, "more than the limit of 512 KiB (max_query_bytes)"));
    query_options none = {0}; /* zero: the engine's */
    assert_int_equal(query_merge_opts(f.engine, TENANT, &none, &sel, T0 - 60 * SEC, T0 + 600 * SEC,
                                      t, false, &res, &err),
                     0);
    assert_int_equal(res.total, 8 * PERIOD);
    assert_int_equal(query_single_opts(f.engine, TENANT, NULL, &sel, T0, t, false, &res, &err), 0);
    assert_int_equal(res.total, 8 * PERIOD);
    calltree_free(t);
    selector_free(&sel);
    fixture_close(&f);
}

/* querier.limits and querier.overrides: the same block for two tenants; the tenant whose
 * override is 1 MiB is refused with its name and limit in the message, and counted in
 * strata_querier_limited_queries_total; the other (querier.limits' 64 MiB) is answered. */
static void test_querier_tenant_limit(void **state) {
    (void)state;
    fixture f;
    fixture_open(&f);
    char id[ULID_STRING_LEN + 1];
    block_writer *w = writer_new();
    add_profile(w, T0, "/v1/app", "leaf", 5, 3);
    const char *tenants[] = {"small", "big"};
    upload_for(&f, w, tenants, 2, id);
    static const char yaml[] = "max_query_bytes: 1GiB\n"
                               "limits: {max_query_bytes: 64MiB}\n"
                               "overrides:\n"
                               "  small: {max_query_bytes: 1MiB}\n"
                               "  other: {ingestion_rate_samples: 5}\n";
    strata_error err;
    config_document *doc;
    assert_int_equal(config_load_string("querier.yaml", yaml, strlen(yaml), &doc, &err), 0);
    querier_config config;
    assert_int_equal(config_decode_document(doc, querier_config_fields, &config, &err), 0);
    config_document_free(doc);
    metrics_registry *registry = metrics_registry_new(&err);
    assert_non_null(registry);
    querier *q;
    assert_int_equal(querier_new(&config, f.store, registry, &q, &err), 0);
    config_free(querier_config_fields, &config); /* the querier keeps its own copy */
    assert_int_equal(block_index_sync(q->index, &err), 0);
    assert_true(querier_tenant_max_query_bytes(q, "small") == (uint64_t)1 << 20);
    assert_true(querier_tenant_max_query_bytes(q, "big") == (uint64_t)64 << 20);
    assert_true(querier_tenant_max_query_bytes(q, "other") == (uint64_t)64 << 20);

    profile_selection sel = {
        .mode = SELECTION_MERGE, .query = CPU, .start_ns = T0 - 60 * SEC, .end_ns = T0 + 600 * SEC};
    calltree_grouping group_by = {.mask = CALLTREE_GROUP_DEFAULT};
    query_tree_result r;
    assert_int_equal(querier_build_tree(q, "small", NULL, &sel, false, &group_by, &r, &err), -1);
    assert_int_equal(err.code, STRATA_RESOURCE_EXHAUSTED);
    assert_string_equal(err.message,
                        "tenant small: query needs about 12 MiB, more than the limit of 1 MiB "
                        "(max_query_bytes); narrow the time range or the selector");
    assert_true(metrics_counter_value(q->limited) == 1.0);
    /* A diff's side is bounded too. */
    assert_int_equal(querier_build_tree(q, "small", &sel, &sel, false, &group_by, &r, &err), -1);
    assert_int_equal(err.code, STRATA_RESOURCE_EXHAUSTED);
    assert_true(metrics_counter_value(q->limited) == 2.0);

    assert_int_equal(querier_build_tree(q, "big", NULL, &sel, false, &group_by, &r, &err), 0);
    assert_int_equal(r.main.total, 8 * PERIOD);
    query_tree_result_free(&r);
    assert_true(metrics_counter_value(q->limited) == 2.0);
    querier_free(q);
    metrics_registry_free(registry);
    fixture_close(&f);
}

/* Copies are looked for where they can be: compacted blocks whose time ranges overlap are
 * compared (a late level-2 block beside another), a compacted block alone in its range is not
 * (the compactor de-duplicated it: two copies inside it are taken as written). */
static void test_copies_in_compacted_blocks(void **state) {
    (void)state;
    fixture f;
    fixture_open(&f);
    char id[ULID_STRING_LEN + 1];
    upload_level = 2;
    block_writer *w = writer_new(); /* [T0, T0 + 10 s] */
    add_profile(w, T0, "/v1/app", "leaf", 5, 3);
    add_profile(w, T0 + 10 * SEC, "/v1/app", "leaf", 7, 1);
    upload(&f, w, id);
    w = writer_new(); /* overlaps the first: the copy at T0 is found */
    add_profile(w, T0, "/v1/app", "leaf", 5, 3);
    upload(&f, w, id);
    w = writer_new(); /* alone at T0 + 100 s: its two copies are not looked for */
    add_profile(w, T0 + 100 * SEC, "/v1/app", "leaf", 1, 1);
    add_profile(w, T0 + 100 * SEC, "/v1/app", "leaf", 1, 1);
    upload(&f, w, id);
    upload_level = 1;
    fixture_engine(&f);
    merge_result res;
    strata_error err;
    calltree *t = merge(&f, CALLTREE_GROUP_DEFAULT, CPU, &res, &err);
    assert_non_null(t);
    assert_int_equal(res.total, (8 + 8 + 2 + 2) * PERIOD);
    assert_int_equal(res.stats.duplicates, 1);
    calltree_free(t);
    fixture_close(&f);
}

/* A second querier over f's bucket (its own index, synced, and engine), installed as f's one
 * fan-out peer through lb. */
static void open_peer(fixture *f, fixture *peer, loopback_fanout *lb) {
    *peer = *f;
    strata_error err;
    block_index_options io;
    block_index_options_default(&io);
    assert_int_equal(block_index_new(&io, f->store, &peer->index, &err), 0);
    assert_int_equal(block_index_sync(peer->index, &err), 0);
    query_engine_options eo;
    query_engine_options_default(&eo);
    assert_int_equal(query_engine_new(&eo, peer->index, &peer->engine, &err), 0);
    *lb = (loopback_fanout){.peers = {peer->engine}, .n_peers = 1};
    loopback_fanout_install(f->engine, lb);
}

/* The merge of CPU over the fixture's whole range through f's engine as a fan-out coordinator
 * (the selector's text given, so shares can go out), grouped by time when by_time. */
static calltree *fanned_merge(fixture *f, bool by_time, merge_result *res) {
    strata_error err;
    selector sel;
    assert_int_equal(selector_parse(CPU, &sel, &err), 0);
    query_options opts = {.query_text = CPU};
    calltree *t;
    assert_int_equal(calltree_create(&t, 0, &err), 0);
    calltree_grouping grouping = {.mask = CALLTREE_GROUP_DEFAULT, .by_timestamp = by_time};
    assert_int_equal(calltree_set_grouping(t, &grouping, &err), 0);
    assert_int_equal(query_merge_opts(f->engine, TENANT, &opts, &sel, T0 - 60 * SEC, T0 + 600 * SEC,
                                      t, false, res, &err),
                     0);
    assert_int_equal(calltree_finalize(t, &err), 0);
    selector_free(&sel);
    return t;
}

/* A merge shared out between queriers counts a retried profile once too: the copies have the same
 * time, so they fall in one shard of time, and whichever querier merges that shard (the coordinator
 * or the peer) drops the copies exactly as a lone querier does. */
static void test_fanout_counts_copies_once(void **state) {
    (void)state;
    fixture f;
    fixture_open(&f);
    char id[ULID_STRING_LEN + 1];
    block_writer *w = writer_new();
    add_profile(w, T0, "/v1/app", "leaf", 5, 3);
    add_profile(w, T0 + 10 * SEC, "/v1/app", "leaf", 7, 1);
    upload(&f, w, id);
    w = writer_new(); /* the retry, a second copy in the same flush, and a look-alike */
    add_profile(w, T0, "/v1/app", "leaf", 5, 3);
    add_profile(w, T0, "/v1/app", "leaf", 5, 3);
    add_profile(w, T0 + 20 * SEC, "/v1/app", "leaf", 3, 5);
    upload(&f, w, id);
    w = writer_new(); /* a later block: the merge is cut in two shards of time at its start */
    add_profile(w, T0 + 300 * SEC, "/v1/app", "leaf", 5, 3);
    upload(&f, w, id);
    fixture_engine(&f);
    fixture peer;
    static loopback_fanout lb;
    open_peer(&f, &peer, &lb);
    for (size_t offset = 0; offset < 2; offset++) {
        lb.offset = offset;
        merge_result res;
        calltree *t = fanned_merge(&f, false, &res);
        /* T0 once, T0+10, the look-alike at T0+20, and T0+300 in the other shard */
        int64_t want = (8 + 8 + 8 + 8) * PERIOD;
        assert_int_equal(calltree_node_get(t, CALLTREE_ROOT).total, want);
        assert_int_equal(res.total, want);
        assert_int_equal(res.profiles, 4);
        assert_int_equal(res.stats.duplicates, 2);
        calltree_free(t);
    }
    assert_int_equal(atomic_load(&lb.shares), 2);
    /* Grouped by time (the flame chart), the peer's share keeps its profiles' time frames: one per
     * profile time under the root, each with that profile's value, the copy still counted once. */
    for (size_t offset = 0; offset < 2; offset++) {
        lb.offset = offset;
        merge_result res;
        calltree *t = fanned_merge(&f, true, &res);
        assert_int_equal(calltree_child_count(t, CALLTREE_ROOT), 4);
        for (size_t i = 0; i < 4; i++) {
            uint32_t node = calltree_child_at(t, CALLTREE_ROOT, i);
            int64_t time = 0, duration = 0;
            assert_true(calltree_frame_time(t, calltree_node_frame(t, node), &time, &duration));
            assert_true(time == T0 || time == T0 + 10 * SEC || time == T0 + 20 * SEC ||
                        time == T0 + 300 * SEC);
            assert_int_equal(calltree_node_get(t, node).total, 8 * PERIOD);
        }
        calltree_free(t);
    }
    assert_int_equal(atomic_load(&lb.shares), 4);
    query_engine_free(peer.engine);
    block_index_free(peer.index);
    fixture_close(&f);
}

/* A fanned-out merge is cut into shards of time at a block's start, never inside a compacted
 * block's range when another cut will do (its series' rollups answer only for all of their
 * profiles): here the start of the level-1 block inside the compacted one would balance the rows
 * best, and the cut goes to the next block's start instead. The answer is a lone querier's. */
static void test_fanout_cuts_around_compacted_blocks(void **state) {
    (void)state;
    fixture f;
    fixture_open(&f);
    char id[ULID_STRING_LEN + 1];
    block_writer *w = writer_new(); /* compacted: T0 .. T0+210 s, 6 sample rows */
    for (int k = 0; k < 3; k++)
        add_profile(w, T0 + 100 * k * SEC, "/v1/app", "leaf", 5, 3);
    upload_level = 2;
    upload(&f, w, id);
    upload_level = 1;
    w = writer_new(); /* level 1, inside the compacted block's range: 2 rows */
    add_profile(w, T0 + 150 * SEC, "/v1/app", "leaf", 1, 1);
    upload(&f, w, id);
    w = writer_new(); /* level 1, after it: 2 rows */
    add_profile(w, T0 + 300 * SEC, "/v1/app", "leaf", 2, 2);
    upload(&f, w, id);
    fixture_engine(&f);
    merge_result alone;
    strata_error err;
    calltree *want = merge(&f, CALLTREE_GROUP_DEFAULT, CPU, &alone, &err);
    assert_non_null(want);
    assert_int_equal(alone.total, (3 * 8 + 2 + 4) * PERIOD);

    fixture peer;
    static loopback_fanout lb;
    open_peer(&f, &peer, &lb);
    for (size_t offset = 0; offset < 2; offset++) {
        lb.offset = offset; /* the peer merges the later shard, then the earlier one */
        merge_result res;
        calltree *t = fanned_merge(&f, false, &res);
        assert_int_equal(res.total, alone.total);
        assert_int_equal(res.profiles, 5);
        assert_int_equal(calltree_node_get(t, CALLTREE_ROOT).total,
                         calltree_node_get(want, CALLTREE_ROOT).total);
        if (offset == 0) {
            assert_int_equal(lb.last_start_ns[0], T0 + 300 * SEC);
            assert_int_equal(lb.last_end_ns[0], T0 + 600 * SEC);
        } else {
            assert_int_equal(lb.last_start_ns[0], T0 - 60 * SEC);
            assert_int_equal(lb.last_end_ns[0], T0 + 300 * SEC - 1);
        }
        calltree_free(t);
    }
    assert_int_equal(atomic_load(&lb.shares), 2);
    calltree_free(want);
    query_engine_free(peer.engine);
    block_index_free(peer.index);
    fixture_close(&f);
}

/* The blocks the next tests upload are compacted (level 2) and each alone in its time range: no
 * copy can hide in them, so a range query selects their profiles as it reads them
 * (block_reader_visit_profiles) instead of from the selection's arrays; the answers must not
 * change, nor must a damaged block be counted in part. */
static int compacted_uploads(void **state) {
    (void)state;
    upload_level = 2;
    return 0;
}

static int level1_uploads(void **state) {
    (void)state;
    upload_level = 1;
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_twice_pushed_profile_counts_once),
        cmocka_unit_test(test_fanout_counts_copies_once),
        cmocka_unit_test(test_fanout_cuts_around_compacted_blocks),
        cmocka_unit_test(test_range_points_dense_and_sparse),
        cmocka_unit_test(test_two_builds_line_up_by_function),
        cmocka_unit_test(test_corrupt_block_left_out),
        cmocka_unit_test(test_tree_memory_bounded),
        cmocka_unit_test(test_per_query_limit),
        cmocka_unit_test(test_querier_tenant_limit),
        cmocka_unit_test(test_copies_in_compacted_blocks),
        cmocka_unit_test(test_labelled_copies_count_once),
        cmocka_unit_test(test_group_by_sample_label),
        cmocka_unit_test(test_filter_by_sample_label),
        cmocka_unit_test_setup_teardown(test_range_points_dense_and_sparse, compacted_uploads,
                                        level1_uploads),
        cmocka_unit_test_setup_teardown(test_corrupt_block_left_out, compacted_uploads,
                                        level1_uploads),
        cmocka_unit_test_setup_teardown(test_filter_by_sample_label, compacted_uploads,
                                        level1_uploads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
