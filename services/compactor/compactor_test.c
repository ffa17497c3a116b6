/*
 * compactor_test.c - compaction cycles on a real FILESYSTEM bucket with the real merger: merged
 * blocks, marks, deletion, idempotency after a crash, retention, corrupt blocks, memory splits,
 * unfinished uploads, jobs that fail every cycle, blocks whose locations have no lines, and the
 * bucket index. What a querier would answer is checked through the
 * querier's own block index (services/querier/block_index.h), which hides replaced blocks.
 */
#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "block/block_format.h"
#include "block/block_writer.h"
#include "block/bucket_index.h"
#include "block_index.h"
#include "common/clock.h"
#include "common/log.h"
#include "compactor.h"
#include "engine.h"
#include "metrics/metrics.h"

#define MIN_MS INT64_C(60000)
#define HOUR_MS (60 * MIN_MS)
#define CPU "process_cpu:samples:count:cpu:nanoseconds:delta"

static const char *const TENANT = "team-a";

/* ---- fixture ----------------------------------------------------------------------------- */

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

typedef struct fixture {
    char dir[64];
    bucket *store;
    compactor_config config;
    char *ranges[3];
    compactor_tenant_override overrides[1];
    int64_t base_ms; /* a 5-minute-aligned time two days ago */
} fixture;

static int setup(void **state) {
    fixture *fx = calloc(1, sizeof *fx);
    assert_non_null(fx);
    snprintf(fx->dir, sizeof fx->dir, "/tmp/strata-compactor-test-XXXXXX");
    assert_non_null(mkdtemp(fx->dir));
    strata_error err;
    assert_int_equal(bucket_open_filesystem(fx->dir, NULL, &fx->store, &err), 0);
    fx->ranges[0] = "5m";
    fx->ranges[1] = "2h";
    fx->ranges[2] = "24h";
    fx->config = (compactor_config){.enabled = true,
                                    .compaction_interval_ns = STRATA_NS_PER_SEC,
                                    .block_ranges = {.items = fx->ranges, .count = 3},
                                    .consistency_delay_ns = 60 * STRATA_NS_PER_SEC,
                                    .delete_delay_ns = 0,
                                    .retention_ns = 0,
                                    .max_job_memory = 256u << 20,
                                    .progress_interval_ns = STRATA_NS_PER_SEC};
    int64_t now = strata_now_ns() / STRATA_NS_PER_MS;
    fx->base_ms = (now - 48 * HOUR_MS) / (5 * MIN_MS) * (5 * MIN_MS);
    *state = fx;
    return 0;
}

static int teardown(void **state) {
    fixture *fx = *state;
    bucket_close(fx->store);
    nftw(fx->dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(fx);
    return 0;
}

static compactor *new_compactor(fixture *fx) {
    compactor *c;
    strata_error err;
    if (compactor_new(&fx->config, fx->store, NULL, &c, &err) != 0)
        fail_msg("compactor_new: %s", err.message);
    return c;
}

static void run_cycle(compactor *c) {
    strata_error err;
    if (compactor_run_once(c, &err) != 0)
        fail_msg("compactor_run_once: %s", err.message);
}

/* ---- blocks ------------------------------------------------------------------------------ */

/* Writes a level-1 block of `profiles` CPU profiles of job=<job> at time_ms + 10 ms * i, each one
 * sample main;work of value `value`, and returns its ULID. */
static ulid write_block(fixture *fx, const char *tenant, const char *job, int64_t time_ms,
                        int profiles, int64_t value) {
    strata_error err;
    block_writer_options opts;
    block_writer_options_default(&opts);
    opts.tenant = tenant;
    block_writer *w = block_writer_new(&opts, &err);
    assert_non_null(w);
    label_set labels = LABEL_SET_INIT;
    profile_type type;
    char text[64];
    snprintf(text, sizeof text, "{job=\"%s\"}", job);
    assert_int_equal(label_set_from_text(text, &labels, &err), 0);
    assert_int_equal(profile_type_parse(CPU, strlen(CPU), &type, &err), 0);
    for (int i = 0; i < profiles; i++) {
        assert_int_equal(block_writer_begin_profile(w, &labels, &type,
                                                    (time_ms + 10 * i) * STRATA_NS_PER_MS,
                                                    10 * STRATA_NS_PER_SEC, 10000000, &err),
                         0);
        block_frame frames[2] = {{.function_name = "work", .mapping_file = "/bin/app"},
                                 {.function_name = "main", .mapping_file = "/bin/app"}};
        assert_int_equal(block_writer_add_sample(w, frames, 2, value, &err), 0);
        assert_int_equal(block_writer_end_profile(w, &err), 0);
    }
    strata_buffer data = STRATA_BUFFER_INIT, json = STRATA_BUFFER_INIT;
    block_meta meta;
    block_meta_init(&meta);
    assert_int_equal(block_writer_finish(w, &data, &meta, &err), 0);
    assert_int_equal(block_meta_encode(&meta, &json, &err), 0);
    char id[ULID_STRING_LEN + 1], key[256];
    ulid_format(&meta.id, id);
    snprintf(key, sizeof key, "%s/%s/%s", tenant, id, BLOCK_DATA_FILE);
    assert_int_equal(bucket_upload(fx->store, key, data.data, data.len, &err), 0);
    snprintf(key, sizeof key, "%s/%s/%s", tenant, id, BLOCK_META_FILE);
    assert_int_equal(bucket_upload(fx->store, key, json.data, json.len, &err), 0);
    ulid out = meta.id;
    block_meta_free(&meta);
    strata_buffer_free(&data);
    strata_buffer_free(&json);
    label_set_free(&labels);
    profile_type_free(&type);
    block_writer_free(w);
    return out;
}

static bool object_exists(fixture *fx, const char *tenant, const ulid *id, const char *file) {
    char text[ULID_STRING_LEN + 1], key[256];
    ulid_format(id, text);
    snprintf(key, sizeof key, "%s/%s/%s", tenant, text, file);
    bool exists = false;
    strata_error err;
    assert_int_equal(bucket_exists(fx->store, key, &exists, &err), 0);
    return exists;
}

static void read_object(fixture *fx, const char *tenant, const ulid *id, const char *file,
                        strata_buffer *out) {
    char text[ULID_STRING_LEN + 1], key[256];
    ulid_format(id, text);
    snprintf(key, sizeof key, "%s/%s/%s", tenant, text, file);
    strata_error err;
    assert_int_equal(bucket_get(fx->store, key, out, &err), 0);
}

/* What a querier sees: blocks (not marked, not replaced) and the sum of their profile totals and
 * profile counts. */
typedef struct view {
    size_t blocks;
    int64_t total;
    size_t profiles;
    int max_level;
} view;

static view query_view(fixture *fx, const char *tenant) {
    block_index_options opts;
    block_index_options_default(&opts);
    block_index *ix;
    strata_error err;
    assert_int_equal(block_index_new(&opts, fx->store, &ix, &err), 0);
    assert_int_equal(block_index_sync(ix, &err), 0);
    indexed_block **blocks;
    size_t n;
    assert_int_equal(
        block_index_acquire(ix, tenant, INT64_MIN / 2, INT64_MAX / 2, &blocks, &n, &err), 0);
    view v = {.blocks = n};
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(block_index_open_reader(ix, blocks[i], &err), 0);
        block_profile *profiles = NULL;
        size_t np = 0;
        assert_int_equal(block_reader_profiles(blocks[i]->reader, NULL, 0, INT64_MIN, INT64_MAX,
                                               &profiles, &np, &err),
                         0);
        for (size_t p = 0; p < np; p++)
            v.total += profiles[p].total;
        v.profiles += np;
        if (blocks[i]->meta.compaction_level > v.max_level)
            v.max_level = blocks[i]->meta.compaction_level;
        free(profiles);
    }
    block_index_release_all(ix, blocks, n);
    block_index_free(ix);
    return v;
}

/* ---- tests ------------------------------------------------------------------------------- */

static void test_merges_window_marks_and_deletes(void **state) {
    fixture *fx = *state;
    ulid src[4];
    for (int i = 0; i < 4; i++)
        src[i] = write_block(fx, TENANT, "api", fx->base_ms + i * 1000, 5, 10 + i);
    /* A block alone in its windows of every range stays as it is. */
    ulid lone = write_block(fx, TENANT, "api", fx->base_ms + 25 * HOUR_MS, 2, 100);
    view before = query_view(fx, TENANT);
    assert_int_equal(before.blocks, 5);
    assert_int_equal(before.total, 5 * (10 + 11 + 12 + 13) + 2 * 100);

    fx->config.delete_delay_ns = 3600 * STRATA_NS_PER_SEC; /* keep the marked sources a while */
    compactor *c = new_compactor(fx);
    run_cycle(c);
    compactor_stats st;
    compactor_get_stats(c, &st);
    assert_int_equal(st.jobs, 1);
    assert_int_equal(st.blocks_in, 4);
    assert_int_equal(st.blocks_out, 1);
    assert_int_equal(st.deletion_marks, 4);
    assert_int_equal(st.blocks_deleted, 0);
    for (int i = 0; i < 4; i++) {
        assert_true(object_exists(fx, TENANT, &src[i], BLOCK_DELETION_MARK_FILE));
        assert_true(object_exists(fx, TENANT, &src[i], BLOCK_META_FILE));
    }
    assert_false(object_exists(fx, TENANT, &lone, BLOCK_DELETION_MARK_FILE));
    view after = query_view(fx, TENANT);
    assert_int_equal(after.blocks, 2);
    assert_int_equal(after.total, before.total);
    assert_int_equal(after.profiles, before.profiles);
    assert_int_equal(after.max_level, 2);

    /* The bucket index lists all six blocks and the four marks. */
    strata_buffer json = STRATA_BUFFER_INIT;
    char key[256];
    snprintf(key, sizeof key, "%s/%s", TENANT, BUCKET_INDEX_FILE);
    strata_error err;
    assert_int_equal(bucket_get(fx->store, key, &json, &err), 0);
    bucket_index bi;
    assert_int_equal(bucket_index_decode((const char *)json.data, json.len, &bi, &err), 0);
    assert_int_equal(bi.n_blocks, 6);
    assert_int_equal(bi.n_marks, 4);
    for (int i = 0; i < 4; i++)
        assert_true(bucket_index_mark_time(&bi, &src[i]) > 0);
    size_t level2 = 0;
    for (size_t i = 0; i < bi.n_blocks; i++)
        if (bi.blocks[i].compaction_level == 2) {
            level2++;
            assert_int_equal(bi.blocks[i].n_sources, 4);
            assert_int_equal(bi.blocks[i].n_parents, 4);
        }
    assert_int_equal(level2, 1);
    bucket_index_free(&bi);
    strata_buffer_free(&json);
    compactor_free(c);

    /* With no delay, the next cycle deletes the sources entirely; the answer stays the same. */
    fx->config.delete_delay_ns = 0;
    c = new_compactor(fx);
    run_cycle(c);
    compactor_get_stats(c, &st);
    assert_int_equal(st.jobs, 0);
    assert_int_equal(st.blocks_deleted, 4);
    for (int i = 0; i < 4; i++) {
        assert_false(object_exists(fx, TENANT, &src[i], BLOCK_META_FILE));
        assert_false(object_exists(fx, TENANT, &src[i], BLOCK_DATA_FILE));
        assert_false(object_exists(fx, TENANT, &src[i], BLOCK_DELETION_MARK_FILE));
    }
    view last = query_view(fx, TENANT);
    assert_int_equal(last.blocks, 2);
    assert_int_equal(last.total, before.total);
    compactor_free(c);
}

static void test_resumes_after_crash_without_merging_again(void **state) {
    fixture *fx = *state;
    ulid src[3];
    for (int i = 0; i < 3; i++)
        src[i] = write_block(fx, TENANT, "db", fx->base_ms + 60000 + i * 500, 4, 7);
    view before = query_view(fx, TENANT);
    /* The compactor died after the merged block's meta.json was stored, before any mark. */
    block_merge_options opts;
    block_merge_options_default(&opts);
    opts.compaction_level = 2;
    block_merge_result res;
    strata_error err;
    assert_int_equal(block_merge(fx->store, TENANT, src, 3, &opts, &res, &err), 0);
    ulid merged = res.id;
    block_merge_result_free(&res);
    /* Queriers already count the data once: the sources are hidden by the merged block. */
    view crashed = query_view(fx, TENANT);
    assert_int_equal(crashed.blocks, 1);
    assert_int_equal(crashed.total, before.total);
    /* A merge killed before its meta.json leaves an invisible data object. */
    ulid partial;
    assert_int_equal(ulid_new(&partial, &err), 0);
    char text[ULID_STRING_LEN + 1], key[256];
    ulid_format(&partial, text);
    snprintf(key, sizeof key, "%s/%s/%s", TENANT, text, BLOCK_DATA_FILE);
    assert_int_equal(bucket_upload(fx->store, key, "junk", 4, &err), 0);

    fx->config.delete_delay_ns = 3600 * STRATA_NS_PER_SEC;
    compactor *c = new_compactor(fx);
    run_cycle(c);
    compactor_stats st;
    compactor_get_stats(c, &st);
    assert_int_equal(st.jobs, 0); /* recognised by its sources, not merged again */
    assert_int_equal(st.deletion_marks, 3);
    assert_int_equal(st.partial_deleted, 0); /* too young to be abandoned */
    for (int i = 0; i < 3; i++)
        assert_true(object_exists(fx, TENANT, &src[i], BLOCK_DELETION_MARK_FILE));
    assert_false(object_exists(fx, TENANT, &merged, BLOCK_DELETION_MARK_FILE));
    assert_true(object_exists(fx, TENANT, &partial, BLOCK_DATA_FILE));
    view after = query_view(fx, TENANT);
    assert_int_equal(after.blocks, 1);
    assert_int_equal(after.total, before.total);
    compactor_free(c);
}

static void test_finishes_interrupted_deletion_and_old_partials(void **state) {
    fixture *fx = *state;
    ulid a = write_block(fx, TENANT, "x", fx->base_ms, 1, 1);
    ulid b = write_block(fx, TENANT, "x", fx->base_ms + 6 * MIN_MS, 1, 2);
    strata_error err;
    /* a: killed half-way through its deletion: meta.json gone, data and mark left. */
    char text[ULID_STRING_LEN + 1], key[256];
    ulid_format(&a, text);
    block_deletion_mark mark = {.id = a, .deletion_time = 1};
    strata_buffer json = STRATA_BUFFER_INIT;
    assert_int_equal(block_deletion_mark_encode(&mark, &json, &err), 0);
    snprintf(key, sizeof key, "%s/%s/%s", TENANT, text, BLOCK_DELETION_MARK_FILE);
    assert_int_equal(bucket_upload(fx->store, key, json.data, json.len, &err), 0);
    snprintf(key, sizeof key, "%s/%s/%s", TENANT, text, BLOCK_META_FILE);
    assert_int_equal(bucket_delete(fx->store, key, &err), 0);
    strata_buffer_free(&json);
    /* An upload abandoned two hours ago (no meta.json). */
    ulid old;
    assert_int_equal(ulid_new_at(strata_now_ns() / STRATA_NS_PER_MS - 2 * HOUR_MS, &old, &err), 0);
    ulid_format(&old, text);
    snprintf(key, sizeof key, "%s/%s/%s", TENANT, text, BLOCK_DATA_FILE);
    assert_int_equal(bucket_upload(fx->store, key, "junk", 4, &err), 0);

    fx->config.delete_delay_ns = 3600 * STRATA_NS_PER_SEC;
    compactor *c = new_compactor(fx);
    run_cycle(c);
    compactor_stats st;
    compactor_get_stats(c, &st);
    assert_int_equal(st.blocks_deleted, 1);
    assert_int_equal(st.partial_deleted, 1);
    assert_false(object_exists(fx, TENANT, &a, BLOCK_DATA_FILE));
    assert_false(object_exists(fx, TENANT, &a, BLOCK_DELETION_MARK_FILE));
    assert_false(object_exists(fx, TENANT, &old, BLOCK_DATA_FILE));
    assert_true(object_exists(fx, TENANT, &b, BLOCK_META_FILE));
    compactor_free(c);
}

static void test_retention_marks_exactly_the_expired_blocks(void **state) {
    fixture *fx = *state;
    int64_t now = strata_now_ns() / STRATA_NS_PER_MS;
    /* Ages of the blocks' last profile: 5h, 3h (expired with 2h retention), 90m, 10m (kept). Each
     * block holds one profile so its maxTime is that time + 1 ms. */
    int64_t ages[] = {5 * HOUR_MS, 3 * HOUR_MS, 90 * MIN_MS, 10 * MIN_MS};
    ulid ids[4], other[2];
    /* Blocks lie in distinct 5m windows so nothing merges. */
    for (int i = 0; i < 4; i++)
        ids[i] = write_block(fx, TENANT, "r", now - ages[i], 1, 5);
    for (int i = 0; i < 2; i++)
        other[i] = write_block(fx, "team-b", "r", now - ages[i], 1, 5);
    fx->config.retention_ns = 0; /* off by default ... */
    fx->overrides[0] = (compactor_tenant_override){.tenant = (char *)TENANT,
                                                   .retention_ns = 2 * HOUR_MS * STRATA_NS_PER_MS};
    fx->config.tenant_overrides = (config_struct_list){.items = fx->overrides, .count = 1};
    fx->config.delete_delay_ns = 3600 * STRATA_NS_PER_SEC;
    /* Recent windows stay unmerged whatever the time of day, so only retention marks. */
    fx->config.consistency_delay_ns = 6 * HOUR_MS * STRATA_NS_PER_MS;
    compactor *c = new_compactor(fx);
    run_cycle(c);
    compactor_stats st;
    compactor_get_stats(c, &st);
    assert_int_equal(st.jobs, 0);
    assert_int_equal(st.deletion_marks, 2);
    assert_true(object_exists(fx, TENANT, &ids[0], BLOCK_DELETION_MARK_FILE));
    assert_true(object_exists(fx, TENANT, &ids[1], BLOCK_DELETION_MARK_FILE));
    assert_false(object_exists(fx, TENANT, &ids[2], BLOCK_DELETION_MARK_FILE));
    assert_false(object_exists(fx, TENANT, &ids[3], BLOCK_DELETION_MARK_FILE));
    for (int i = 0; i < 2; i++) /* ... and team-b has no override */
        assert_false(object_exists(fx, "team-b", &other[i], BLOCK_DELETION_MARK_FILE));
    view v = query_view(fx, TENANT);
    assert_int_equal(v.blocks, 2);
    assert_int_equal(v.total, 10);
    compactor_free(c);
    /* After the delay (here: none), exactly those two are deleted. */
    fx->config.delete_delay_ns = 0;
    c = new_compactor(fx);
    run_cycle(c);
    compactor_get_stats(c, &st);
    assert_int_equal(st.blocks_deleted, 2);
    assert_false(object_exists(fx, TENANT, &ids[0], BLOCK_DATA_FILE));
    assert_false(object_exists(fx, TENANT, &ids[1], BLOCK_DATA_FILE));
    assert_true(object_exists(fx, TENANT, &ids[2], BLOCK_META_FILE));
    assert_true(object_exists(fx, TENANT, &ids[3], BLOCK_META_FILE));
    compactor_free(c);
}

static void test_corrupt_blocks_marked_no_compact_and_compaction_goes_on(void **state) {
    fixture *fx = *state;
    ulid src[4];
    for (int i = 0; i < 4; i++)
        src[i] = write_block(fx, TENANT, "c", fx->base_ms + i * 1000, 3, 4);
    /* src[1]: damaged data object (a flipped byte in the middle: a page CRC fails). */
    strata_buffer data = STRATA_BUFFER_INIT;
    read_object(fx, TENANT, &src[1], BLOCK_DATA_FILE, &data);
    data.data[data.len / 2] ^= 0x5a;
    char text[ULID_STRING_LEN + 1], key[256];
    ulid_format(&src[1], text);
    snprintf(key, sizeof key, "%s/%s/%s", TENANT, text, BLOCK_DATA_FILE);
    strata_error err;
    assert_int_equal(bucket_upload(fx->store, key, data.data, data.len, &err), 0);
    strata_buffer_free(&data);
    /* src[2]: meta.json that is not JSON. */
    ulid_format(&src[2], text);
    snprintf(key, sizeof key, "%s/%s/%s", TENANT, text, BLOCK_META_FILE);
    assert_int_equal(bucket_upload(fx->store, key, "{\"ulid\":", 8, &err), 0);

    compactor *c = new_compactor(fx);
    run_cycle(c);
    compactor_stats st;
    compactor_get_stats(c, &st);
    assert_int_equal(st.no_compact_marks, 2);
    assert_int_equal(st.jobs_failed, 1);
    assert_int_equal(st.jobs, 1);
    assert_int_equal(st.blocks_in, 2); /* src[0] and src[3] */
    assert_true(object_exists(fx, TENANT, &src[1], BLOCK_NO_COMPACT_MARK_FILE));
    assert_true(object_exists(fx, TENANT, &src[2], BLOCK_NO_COMPACT_MARK_FILE));
    strata_buffer mark = STRATA_BUFFER_INIT;
    read_object(fx, TENANT, &src[1], BLOCK_NO_COMPACT_MARK_FILE, &mark);
    block_no_compact_mark nc;
    assert_int_equal(block_no_compact_mark_decode((const char *)mark.data, mark.len, &nc, &err), 0);
    assert_string_equal(nc.reason, "corrupt");
    ulid_format(&src[1], text);
    assert_non_null(strstr(nc.details, text));
    /* caught by the page checksum when the merger read it */
    assert_non_null(strstr(nc.details, "checksum mismatch"));
    block_no_compact_mark_free(&nc);
    strata_buffer_free(&mark);
    assert_true(object_exists(fx, TENANT, &src[0], BLOCK_DELETION_MARK_FILE));
    assert_true(object_exists(fx, TENANT, &src[3], BLOCK_DELETION_MARK_FILE));
    assert_false(object_exists(fx, TENANT, &src[1], BLOCK_DELETION_MARK_FILE));
    /* The next cycle does not try again. */
    run_cycle(c);
    compactor_get_stats(c, &st);
    assert_int_equal(st.jobs_failed, 1);
    assert_int_equal(st.no_compact_marks, 2);
    compactor_free(c);
}

/* The real merger, failing like an over-limit merge whenever a job has more than two sources. */
static int merge_at_most_two(bucket *store, const char *tenant, const ulid *sources, size_t n,
                             const block_merge_options *opts, block_merge_result *out,
                             strata_error *err) {
    if (n > 2) {
        memset(out, 0, sizeof *out);
        block_meta_init(&out->meta);
        return strata_error_set(err, STRATA_RESOURCE_EXHAUSTED,
                                "merge needs about 3GiB, memory_limit is %zu bytes",
                                opts->memory_limit);
    }
    return block_merge(store, tenant, sources, n, opts, out, err);
}

static void test_memory_limit_splits_jobs(void **state) {
    fixture *fx = *state;
    for (int i = 0; i < 4; i++)
        write_block(fx, TENANT, "m", fx->base_ms + i * 1000, 2, 3);
    view before = query_view(fx, TENANT);
    compactor *c = new_compactor(fx);
    compactor_set_merge_fn(c, merge_at_most_two);
    run_cycle(c);
    compactor_stats st;
    compactor_get_stats(c, &st);
    /* Four sources split into two level-2 merges of two; their 5-minute window is not planned
     * again, but the 2-hour range then merges the two halves (two sources: under the limit). */
    assert_int_equal(st.splits, 1);
    assert_int_equal(st.jobs_failed, 1);
    assert_int_equal(st.jobs, 3);
    assert_int_equal(st.blocks_in, 6);
    assert_int_equal(st.blocks_out, 3);
    run_cycle(c);
    compactor_get_stats(c, &st);
    assert_int_equal(st.jobs, 3);
    assert_int_equal(st.splits, 1);
    view after = query_view(fx, TENANT);
    assert_int_equal(after.blocks, 1);
    assert_int_equal(after.total, before.total);
    assert_int_equal(after.max_level, 3);
    compactor_free(c);
}

static void test_levels_climb_and_duplicates_collapse(void **state) {
    fixture *fx = *state;
    /* Two 5-minute windows of one 2h window, two blocks each; the second pair is a retried write
     * (identical profiles in two blocks). */
    write_block(fx, TENANT, "l", fx->base_ms, 3, 2);
    write_block(fx, TENANT, "l", fx->base_ms + 1000, 3, 2);
    write_block(fx, TENANT, "l", fx->base_ms + 5 * MIN_MS, 3, 9);
    write_block(fx, TENANT, "l", fx->base_ms + 5 * MIN_MS, 3, 9);
    compactor *c = new_compactor(fx);
    run_cycle(c);
    compactor_stats st;
    compactor_get_stats(c, &st);
    /* Two level-2 jobs, then one job over the 2h window (level 3) if both lie in it, else over
     * the 24h window (level 4) if both lie in that. */
    int64_t second = fx->base_ms + 5 * MIN_MS;
    bool same_2h = fx->base_ms / (2 * HOUR_MS) == second / (2 * HOUR_MS);
    bool same_24h = fx->base_ms / (24 * HOUR_MS) == second / (24 * HOUR_MS);
    assert_int_equal(st.jobs, same_2h || same_24h ? 3 : 2);
    view v = query_view(fx, TENANT);
    assert_int_equal(v.total, 3 * 2 + 3 * 2 + 3 * 9); /* the retried write counted once */
    assert_int_equal(v.blocks, same_2h || same_24h ? 1 : 2);
    assert_int_equal(v.max_level, same_2h ? 3 : same_24h ? 4 : 2);
    compactor_free(c);
}

/* Totals through one long-lived querier index (as a running querier has it). */
static view index_view(block_index *ix, const char *tenant) {
    indexed_block **blocks;
    size_t n;
    strata_error err;
    assert_int_equal(
        block_index_acquire(ix, tenant, INT64_MIN / 2, INT64_MAX / 2, &blocks, &n, &err), 0);
    view v = {.blocks = n};
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(block_index_open_reader(ix, blocks[i], &err), 0);
        block_profile *profiles = NULL;
        size_t np = 0;
        assert_int_equal(block_reader_profiles(blocks[i]->reader, NULL, 0, INT64_MIN, INT64_MAX,
                                               &profiles, &np, &err),
                         0);
        for (size_t p = 0; p < np; p++)
            v.total += profiles[p].total;
        free(profiles);
    }
    block_index_release_all(ix, blocks, n);
    return v;
}

static void write_mark(fixture *fx, const ulid *id, const char *details) {
    block_deletion_mark mark = {.id = *id, .deletion_time = 1, .details = (char *)details};
    strata_buffer json = STRATA_BUFFER_INIT;
    strata_error err;
    assert_int_equal(block_deletion_mark_encode(&mark, &json, &err), 0);
    char text[ULID_STRING_LEN + 1], key[256];
    ulid_format(id, text);
    snprintf(key, sizeof key, "%s/%s/%s", TENANT, text, BLOCK_DELETION_MARK_FILE);
    assert_int_equal(bucket_upload(fx->store, key, json.data, json.len, &err), 0);
    strata_buffer_free(&json);
}

/* bucket-index.json naming ids as marked, as the compactor writes it at the end of the cycle that
 * marked them (queriers learn marks from it). */
static void write_index_marks(fixture *fx, const ulid *ids, size_t n) {
    bucket_index bi;
    bucket_index_init(&bi);
    strata_error err;
    for (size_t i = 0; i < n; i++)
        assert_int_equal(bucket_index_add_mark(&bi, &ids[i], 1700000000, &err), 0);
    strata_buffer json = STRATA_BUFFER_INIT;
    assert_int_equal(bucket_index_encode(&bi, &json, &err), 0);
    char key[256];
    snprintf(key, sizeof key, "%s/%s", TENANT, BUCKET_INDEX_FILE);
    assert_int_equal(bucket_upload(fx->store, key, json.data, json.len, &err), 0);
    strata_buffer_free(&json);
    bucket_index_free(&bi);
}

static void sync_n(block_index *ix, int n) {
    strata_error err;
    for (int i = 0; i < n; i++)
        assert_int_equal(block_index_sync(ix, &err), 0);
}

/* A querier keeps a block marked "compacted into Y" until it has Y (here: Y's meta.json is held
 * back, as if the listing had missed it), while a retention-marked block goes at once. */
static void test_querier_keeps_replaced_block_until_replacement_is_visible(void **state) {
    fixture *fx = *state;
    ulid src[2];
    src[0] = write_block(fx, TENANT, "q", fx->base_ms, 2, 3);
    src[1] = write_block(fx, TENANT, "q", fx->base_ms + 1000, 2, 5);
    ulid expiring = write_block(fx, TENANT, "q", fx->base_ms + 25 * HOUR_MS, 1, 100);
    block_index_options opts;
    block_index_options_default(&opts);
    block_index *ix;
    strata_error err;
    assert_int_equal(block_index_new(&opts, fx->store, &ix, &err), 0);
    sync_n(ix, 1);
    assert_int_equal(index_view(ix, TENANT).total, 2 * 3 + 2 * 5 + 100);

    block_merge_result res;
    assert_int_equal(block_merge(fx->store, TENANT, src, 2, NULL, &res, &err), 0);
    char merged[ULID_STRING_LEN + 1], details[64], key[256];
    ulid_format(&res.id, merged);
    block_merge_result_free(&res);
    strata_buffer meta = STRATA_BUFFER_INIT;
    snprintf(key, sizeof key, "%s/%s/%s", TENANT, merged, BLOCK_META_FILE);
    assert_int_equal(bucket_get(fx->store, key, &meta, &err), 0);
    assert_int_equal(bucket_delete(fx->store, key, &err), 0);
    snprintf(details, sizeof details, "%s%s", BLOCK_DELETION_COMPACTED_INTO, merged);
    write_mark(fx, &src[0], details);
    write_mark(fx, &src[1], details);
    write_mark(fx, &expiring, "past the tenant's retention");
    const ulid marked[3] = {src[0], src[1], expiring};
    write_index_marks(fx, marked, 3);

    sync_n(ix, 10); /* the tenth listing re-reads marks */
    view v = index_view(ix, TENANT);
    assert_int_equal(v.blocks, 2);
    assert_int_equal(v.total, 2 * 3 + 2 * 5);

    assert_int_equal(bucket_upload(fx->store, key, meta.data, meta.len, &err), 0);
    sync_n(ix, 1);
    v = index_view(ix, TENANT);
    assert_int_equal(v.blocks, 1); /* the merged block; its sources hidden */
    assert_int_equal(v.total, 2 * 3 + 2 * 5);
    block_index_stats st;
    sync_n(ix, 10);
    block_index_get_stats(ix, &st);
    assert_int_equal(st.blocks, 1); /* and dropped once marks were re-read */
    /* Dropped marked blocks are not fetched again by later listings while they await deletion. */
    uint64_t reads = st.meta_reads;
    sync_n(ix, 12);
    block_index_get_stats(ix, &st);
    assert_int_equal(st.meta_reads, reads);
    assert_int_equal(st.blocks, 1);
    assert_int_equal(index_view(ix, TENANT).total, 2 * 3 + 2 * 5);
    strata_buffer_free(&meta);
    block_index_free(ix);
}

/* A querier that never saw the merged block loses its sources under a query (deleted after the
 * delay while it could not list): the query notices, lists again and answers from the merged
 * block, exactly as before. */
static void test_query_retries_when_a_block_vanishes(void **state) {
    fixture *fx = *state;
    ulid src[2];
    src[0] = write_block(fx, TENANT, "v", fx->base_ms, 2, 3);
    src[1] = write_block(fx, TENANT, "v", fx->base_ms + 1000, 2, 5);
    block_index_options opts;
    block_index_options_default(&opts);
    block_index *ix;
    strata_error err;
    assert_int_equal(block_index_new(&opts, fx->store, &ix, &err), 0);
    sync_n(ix, 1);
    query_engine_options eo;
    query_engine_options_default(&eo);
    eo.parallelism = 1;
    query_engine *e;
    assert_int_equal(query_engine_new(&eo, ix, &e, &err), 0);
    selector sel;
    assert_int_equal(selector_parse(CPU "{job=\"v\"}", &sel, &err), 0);

    block_merge_result res;
    assert_int_equal(block_merge(fx->store, TENANT, src, 2, NULL, &res, &err), 0);
    block_merge_result_free(&res);
    for (int i = 0; i < 2; i++) {
        char text[ULID_STRING_LEN + 1], key[256];
        ulid_format(&src[i], text);
        snprintf(key, sizeof key, "%s/%s/%s", TENANT, text, BLOCK_META_FILE);
        assert_int_equal(bucket_delete(fx->store, key, &err), 0);
        snprintf(key, sizeof key, "%s/%s/%s", TENANT, text, BLOCK_DATA_FILE);
        assert_int_equal(bucket_delete(fx->store, key, &err), 0);
    }
    calltree *tree;
    assert_int_equal(calltree_create(&tree, 16, &err), 0);
    merge_result mr;
    if (query_merge(e, TENANT, &sel, INT64_MIN / 2, INT64_MAX / 2, tree, false, &mr, &err) != 0)
        fail_msg("query_merge: %s", err.message);
    assert_int_equal(mr.profiles, 4);
    assert_int_equal(mr.total, (2 * 3 + 2 * 5) * 10000000); /* samples:count x period */
    calltree_free(tree);
    selector_free(&sel);
    query_engine_free(e);
    block_index_free(ix);
}

/* ---- jobs that keep failing -------------------------------------------------------------- */

/* How fail_merge fails, per call in order; past the end, the real merger runs. */
typedef struct injected_failure {
    strata_status code;
    bool bucket_error;
} injected_failure;

static const injected_failure *g_failures;
static size_t g_n_failures, g_merge_calls;

static int fail_merge(bucket *store, const char *tenant, const ulid *sources, size_t n,
                      const block_merge_options *opts, block_merge_result *out, strata_error *err) {
    size_t call = g_merge_calls++;
    if (call >= g_n_failures)
        return block_merge(store, tenant, sources, n, opts, out, err);
    memset(out, 0, sizeof *out);
    block_meta_init(&out->meta);
    out->bucket_error = g_failures[call].bucket_error;
    /* what the writer said of a location without lines before they were accepted: no block named */
    return strata_error_set(err, g_failures[call].code,
                            "block writer: a location needs at least one line");
}

static void expect_metric(metrics_registry *r, const char *line) {
    strata_buffer text = STRATA_BUFFER_INIT;
    strata_error err;
    assert_int_equal(metrics_registry_render(r, &text, &err), 0);
    assert_int_equal(strata_buffer_append_byte(&text, 0), 0);
    char want[256];
    snprintf(want, sizeof want, "\n%s\n", line);
    if (strstr((const char *)text.data, want) == NULL)
        fail_msg("metric line \"%s\" not in:\n%s", line, (const char *)text.data);
    strata_buffer_free(&text);
}

static void expect_no_compact_mark(fixture *fx, const ulid *id, const char *reason,
                                   const char *detail) {
    strata_buffer mark = STRATA_BUFFER_INIT;
    read_object(fx, TENANT, id, BLOCK_NO_COMPACT_MARK_FILE, &mark);
    block_no_compact_mark nc;
    strata_error err;
    assert_int_equal(block_no_compact_mark_decode((const char *)mark.data, mark.len, &nc, &err), 0);
    assert_string_equal(nc.reason, reason);
    if (strstr(nc.details, detail) == NULL)
        fail_msg("no-compact details \"%s\" lack \"%s\"", nc.details, detail);
    block_no_compact_mark_free(&nc);
    strata_buffer_free(&mark);
}

/* A job that fails every cycle with an error in the data (not naming a source, not the bucket) is
 * given up on its third failure: every source is marked no-compact, counted and visible in
 * /metrics, and it is not tried again; the blocks stay queryable. */
static void test_repeatedly_failing_job_marked_no_compact(void **state) {
    fixture *fx = *state;
    ulid src[3];
    for (int i = 0; i < 3; i++)
        src[i] = write_block(fx, TENANT, "f", fx->base_ms + i * 1000, 2, 5);
    static const injected_failure always[] = {{STRATA_INVALID_ARGUMENT, false},
                                              {STRATA_INVALID_ARGUMENT, false},
                                              {STRATA_INVALID_ARGUMENT, false},
                                              {STRATA_INVALID_ARGUMENT, false}};
    g_failures = always;
    g_n_failures = 4;
    g_merge_calls = 0;
    strata_error err;
    metrics_registry *reg = metrics_registry_new(&err);
    assert_non_null(reg);
    compactor *c;
    assert_int_equal(compactor_new(&fx->config, fx->store, reg, &c, &err), 0);
    compactor_set_merge_fn(c, fail_merge);
    compactor_stats st;
    for (int cycle = 1; cycle <= 2; cycle++) {
        run_cycle(c);
        compactor_get_stats(c, &st);
        assert_int_equal(st.jobs_failed, cycle);
        assert_int_equal(st.no_compact_marks, 0);
        assert_int_equal(st.failing_jobs, 1);
        expect_metric(reg, "strata_compactor_failing_jobs 1");
        assert_false(object_exists(fx, TENANT, &src[0], BLOCK_NO_COMPACT_MARK_FILE));
    }
    run_cycle(c);
    compactor_get_stats(c, &st);
    assert_int_equal(st.jobs_failed, 3);
    assert_int_equal(st.jobs, 0);
    assert_int_equal(st.jobs_given_up, 1);
    assert_int_equal(st.repeated_failure_marks, 3);
    assert_int_equal(st.no_compact_marks, 3);
    assert_int_equal(st.failing_jobs, 0);
    for (int i = 0; i < 3; i++)
        expect_no_compact_mark(fx, &src[i], "repeated-failure",
                               "merge failed 3 cycles in a row: INVALID_ARGUMENT: block writer: a "
                               "location needs at least one line");
    expect_metric(reg, "strata_compactor_jobs_failed_total 3");
    expect_metric(reg, "strata_compactor_jobs_given_up_total 1");
    expect_metric(reg, "strata_compactor_repeated_failure_marks_total 3");
    expect_metric(reg, "strata_compactor_no_compact_marks_total 3");
    expect_metric(reg, "strata_compactor_failing_jobs 0");
    expect_metric(reg, "strata_compactor_blocks_out_total 0");
    /* Not tried again. */
    run_cycle(c);
    compactor_get_stats(c, &st);
    assert_int_equal(st.jobs_failed, 3);
    assert_int_equal(g_merge_calls, 3);
    view v = query_view(fx, TENANT);
    assert_int_equal(v.blocks, 3);
    assert_int_equal(v.total, 3 * 2 * 5);
    compactor_free(c);
    metrics_registry_free(reg);
}

/* Failures that retrying can cure (a bucket error, UNAVAILABLE, DEADLINE_EXCEEDED) neither count
 * nor reset a count in progress: data, bucket, unavailable, deadline, data is two failures, so
 * nothing is marked, and the sixth cycle's real merge succeeds and forgets the job. Each cycle
 * tries the job once (not again over the 2-hour and 24-hour windows that hold the same blocks). */
static void test_transient_failures_never_mark(void **state) {
    fixture *fx = *state;
    ulid src[2];
    for (int i = 0; i < 2; i++)
        src[i] = write_block(fx, TENANT, "t", fx->base_ms + i * 1000, 2, 3);
    static const injected_failure mixed[] = {{STRATA_INTERNAL, false},
                                             {STRATA_INTERNAL, true}, /* a bucket error */
                                             {STRATA_UNAVAILABLE, false},
                                             {STRATA_DEADLINE_EXCEEDED, false},
                                             {STRATA_DATA_LOSS, false}};
    g_failures = mixed;
    g_n_failures = 5;
    g_merge_calls = 0;
    compactor *c = new_compactor(fx);
    compactor_set_merge_fn(c, fail_merge);
    compactor_stats st;
    for (int cycle = 1; cycle <= 5; cycle++) {
        run_cycle(c);
        compactor_get_stats(c, &st);
        assert_int_equal(st.jobs_failed, cycle);
        assert_int_equal(st.no_compact_marks, 0);
        assert_int_equal(st.failing_jobs, 1); /* INTERNAL counted once, then DATA_LOSS */
    }
    assert_false(object_exists(fx, TENANT, &src[0], BLOCK_NO_COMPACT_MARK_FILE));
    assert_int_equal(g_merge_calls, 5);
    run_cycle(c); /* the real merger */
    compactor_get_stats(c, &st);
    assert_int_equal(st.jobs, 1);
    assert_int_equal(st.blocks_out, 1);
    assert_int_equal(st.jobs_given_up, 0);
    assert_int_equal(st.failing_jobs, 0);
    assert_true(object_exists(fx, TENANT, &src[0], BLOCK_DELETION_MARK_FILE));
    view v = query_view(fx, TENANT);
    assert_int_equal(v.blocks, 1);
    assert_int_equal(v.max_level, 2);
    assert_int_equal(v.total, 2 * 2 * 3);
    compactor_free(c);
}

/* ---- locations without lines ------------------------------------------------------------- */

/* A level-1 block as the ingester writes one from an eBPF agent's push for a stripped binary: the
 * pprof (decoded from its wire form) has locations with an address and a mapping but no line.
 * `value` is the one sample [0x401234, main]'s value. */
static ulid write_lineless_block(fixture *fx, int64_t time_ms, int64_t value) {
    static const char *const strings[] = {
        "", "samples", "count", "cpu", "nanoseconds", "main", "main.go", "/usr/bin/stripped"};
    pprof_string strs[8];
    for (int i = 0; i < 8; i++)
        strs[i] = (pprof_string){strings[i], (uint32_t)strlen(strings[i])};
    pprof_value_type types[1] = {{1, 2}};
    pprof_mapping maps[1] = {
        {.id = 1, .memory_start = 0x400000, .memory_limit = 0x500000, .filename = 7}};
    pprof_function fns[1] = {{1, 5, 5, 6, 3}};
    pprof_line lines[1] = {{1, 7, 0}};
    pprof_location locs[2] = {{.id = 1, .mapping_id = 1, .address = 0x401234},
                              {.id = 2, .mapping_id = 1, .address = 0x400100, .line_count = 1}};
    uint64_t loc_ids[2] = {1, 2};
    int64_t values[1] = {value};
    pprof_sample samples[1] = {{0, 2, 0, 0, 0}};
    pprof_profile p = {.sample_types = types,
                       .n_sample_types = 1,
                       .samples = samples,
                       .n_samples = 1,
                       .sample_location_ids = loc_ids,
                       .n_sample_location_ids = 2,
                       .sample_values = values,
                       .mappings = maps,
                       .n_mappings = 1,
                       .locations = locs,
                       .n_locations = 2,
                       .lines = lines,
                       .n_lines = 1,
                       .functions = fns,
                       .n_functions = 1,
                       .strings = strs,
                       .n_strings = 8,
                       .period_type = {3, 4},
                       .period = 10000000};
    strata_buffer raw = STRATA_BUFFER_INIT;
    strata_error err;
    assert_int_equal(pprof_encode(&p, true, &raw, &err), 0);
    pprof_profile decoded;
    assert_int_equal(pprof_decode(raw.data, raw.len, NULL, &decoded, &err), 0);
    block_writer_options opts;
    block_writer_options_default(&opts);
    opts.tenant = TENANT;
    block_writer *w = block_writer_new(&opts, &err);
    assert_non_null(w);
    label_set labels = LABEL_SET_INIT;
    profile_type type;
    assert_int_equal(label_set_from_text("{comm=\"stripped\"}", &labels, &err), 0);
    assert_int_equal(profile_type_parse(CPU, strlen(CPU), &type, &err), 0);
    size_t column = 0;
    assert_int_equal(
        block_writer_add_profile_types(w, &labels, &type, &column, 1, time_ms * STRATA_NS_PER_MS,
                                       10 * STRATA_NS_PER_SEC, 10000000, &decoded, &err),
        0);
    strata_buffer data = STRATA_BUFFER_INIT, json = STRATA_BUFFER_INIT;
    block_meta meta;
    block_meta_init(&meta);
    assert_int_equal(block_writer_finish(w, &data, &meta, &err), 0);
    assert_int_equal(block_meta_encode(&meta, &json, &err), 0);
    char id[ULID_STRING_LEN + 1], key[256];
    ulid_format(&meta.id, id);
    snprintf(key, sizeof key, "%s/%s/%s", TENANT, id, BLOCK_DATA_FILE);
    assert_int_equal(bucket_upload(fx->store, key, data.data, data.len, &err), 0);
    snprintf(key, sizeof key, "%s/%s/%s", TENANT, id, BLOCK_META_FILE);
    assert_int_equal(bucket_upload(fx->store, key, json.data, json.len, &err), 0);
    ulid out = meta.id;
    block_meta_free(&meta);
    strata_buffer_free(&data);
    strata_buffer_free(&json);
    strata_buffer_free(&raw);
    pprof_profile_free(&decoded);
    label_set_free(&labels);
    profile_type_free(&type);
    block_writer_free(w);
    return out;
}

/* Blocks whose locations have no lines compact to the next level like any other, with nothing
 * failed or marked, and the merged block keeps the address and its mapping. */
static void test_lineless_blocks_compact_to_next_level(void **state) {
    fixture *fx = *state;
    ulid src[3];
    for (int i = 0; i < 3; i++)
        src[i] = write_lineless_block(fx, fx->base_ms + i * 10000, 4 + i);
    compactor *c = new_compactor(fx);
    run_cycle(c);
    compactor_stats st;
    compactor_get_stats(c, &st);
    assert_int_equal(st.jobs_failed, 0);
    assert_int_equal(st.no_compact_marks, 0);
    assert_int_equal(st.jobs, 1); /* one 5-minute window; alone in its 2-hour window after */
    assert_int_equal(st.blocks_in, 3);
    assert_int_equal(st.blocks_out, 1);
    for (int i = 0; i < 3; i++) {
        assert_true(object_exists(fx, TENANT, &src[i], BLOCK_DELETION_MARK_FILE));
        assert_false(object_exists(fx, TENANT, &src[i], BLOCK_NO_COMPACT_MARK_FILE));
    }
    block_index_options opts;
    block_index_options_default(&opts);
    block_index *ix;
    strata_error err;
    assert_int_equal(block_index_new(&opts, fx->store, &ix, &err), 0);
    assert_int_equal(block_index_sync(ix, &err), 0);
    indexed_block **blocks;
    size_t n;
    assert_int_equal(
        block_index_acquire(ix, TENANT, INT64_MIN / 2, INT64_MAX / 2, &blocks, &n, &err), 0);
    assert_int_equal(n, 1);
    assert_int_equal(blocks[0]->meta.compaction_level, 2);
    assert_int_equal(blocks[0]->meta.n_sources, 3);
    assert_int_equal(block_index_open_reader(ix, blocks[0], &err), 0);
    block_reader *r = blocks[0]->reader;
    assert_int_equal(block_reader_row_count(r, BLOCK_TABLE_LOCATIONS), 2);
    assert_int_equal(block_reader_row_count(r, BLOCK_TABLE_LINES), 1);
    bool seen = false;
    for (uint32_t i = 0; i < 2; i++) {
        block_location loc;
        assert_int_equal(block_reader_location(r, i, &loc, &err), 0);
        if (loc.address != 0x401234)
            continue;
        seen = true;
        assert_int_equal(loc.n_lines, 0);
        assert_true(loc.has_mapping);
        block_mapping m;
        assert_int_equal(block_reader_mapping(r, loc.mapping_id, &m, &err), 0);
        assert_string_equal(m.file, "/usr/bin/stripped");
        assert_int_equal(m.memory_start, 0x400000);
        assert_int_equal(m.memory_limit, 0x500000);
    }
    assert_true(seen);
    block_profile *profiles = NULL;
    size_t np = 0;
    assert_int_equal(block_reader_profiles(r, NULL, 0, INT64_MIN, INT64_MAX, &profiles, &np, &err),
                     0);
    assert_int_equal(np, 3);
    assert_int_equal(profiles[0].total + profiles[1].total + profiles[2].total, 4 + 5 + 6);
    free(profiles);
    block_index_release_all(ix, blocks, n);
    block_index_free(ix);
    compactor_free(c);
}

static void test_config_validation(void **state) {
    fixture *fx = *state;
    compactor *c;
    strata_error err;
    fx->ranges[1] = "7m";
    assert_int_equal(compactor_new(&fx->config, fx->store, NULL, &c, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "block_ranges[1]"));
    fx->ranges[1] = "often";
    assert_int_equal(compactor_new(&fx->config, fx->store, NULL, &c, &err), -1);
    assert_non_null(strstr(err.message, "often"));
    fx->ranges[1] = "2h";
    fx->config.max_job_memory = 1000;
    assert_int_equal(compactor_new(&fx->config, fx->store, NULL, &c, &err), -1);
    assert_non_null(strstr(err.message, "max_job_memory"));
}

int main(void) {
    strata_log_set_level(STRATA_LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_merges_window_marks_and_deletes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_resumes_after_crash_without_merging_again, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_finishes_interrupted_deletion_and_old_partials, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_retention_marks_exactly_the_expired_blocks, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            test_corrupt_blocks_marked_no_compact_and_compaction_goes_on, setup, teardown),
        cmocka_unit_test_setup_teardown(test_memory_limit_splits_jobs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_levels_climb_and_duplicates_collapse, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_querier_keeps_replaced_block_until_replacement_is_visible, setup, teardown),
        cmocka_unit_test_setup_teardown(test_query_retries_when_a_block_vanishes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_repeatedly_failing_job_marked_no_compact, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_transient_failures_never_mark, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lineless_blocks_compact_to_next_level, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_config_validation, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
