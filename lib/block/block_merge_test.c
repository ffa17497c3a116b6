/*
 * block_merge_test.c - the block merger against a real FILESYSTEM bucket: a merged block must
 * answer exactly as its sources together (profiles, per-series and per-stack totals with function
 * names), minus identical profiles, which are counted; lineage in meta.json; corrupt, missing and
 * too-big inputs fail with a clear error and leave nothing visible. (That the querier's engine
 * answers the same on the merged block as on its sources is services/querier's
 * merged_block_test, over the same sources: block_merge_testdata.h.)
 *
 * Sources are written with the block writer exactly as the ingester does (data object, then
 * meta.json). Answers are compared as "summaries": sorted `key=value` lines read back through
 * block_reader, so a failure shows the differing line.
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
#include <sys/stat.h>

#include "block/block_format.h"
#include "block/block_merge.h"
#include "block/block_merge_testdata.h"
#include "block/block_meta.h"
#include "block/block_reader.h"
#include "block/block_writer.h"
#include "bucket/bucket.h"
#include "bucket/bucket_backend.h"

/* ---- summaries --------------------------------------------------------------------------- */

typedef struct entry {
    char *key;
    int64_t value;
} entry;

typedef struct summary {
    entry *entries;
    size_t n, cap;
} summary;

static void summary_add(summary *s, const char *key, int64_t value) {
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 64;
        s->entries = realloc(s->entries, s->cap * sizeof *s->entries);
        assert_non_null(s->entries);
    }
    s->entries[s->n].key = strdup(key);
    assert_non_null(s->entries[s->n].key);
    s->entries[s->n].value = value;
    s->n++;
}

static int compare_entries(const void *a, const void *b) {
    return strcmp(((const entry *)a)->key, ((const entry *)b)->key);
}

/* Sorts, sums equal keys and renders "key=value\n" lines. */
static char *summary_render(summary *s) {
    qsort(s->entries, s->n, sizeof *s->entries, compare_entries);
    strata_buffer out = STRATA_BUFFER_INIT;
    for (size_t i = 0; i < s->n;) {
        int64_t sum = 0;
        size_t j = i;
        for (; j < s->n && strcmp(s->entries[j].key, s->entries[i].key) == 0; j++)
            sum += s->entries[j].value;
        assert_int_equal(strata_buffer_appendf(&out, "%s=%" PRId64 "\n", s->entries[i].key, sum),
                         0);
        i = j;
    }
    assert_int_equal(strata_buffer_append_byte(&out, 0), 0);
    for (size_t i = 0; i < s->n; i++)
        free(s->entries[i].key);
    free(s->entries);
    memset(s, 0, sizeof *s);
    return (char *)out.data;
}

typedef struct fetch_ctx {
    bucket *store;
    char key[256];
} fetch_ctx;

static int fetch_range(void *ctx, uint64_t offset, uint64_t length, strata_buffer *out,
                       strata_error *err) {
    fetch_ctx *f = ctx;
    strata_buffer_reset(out);
    return bucket_get_range(f->store, f->key, offset, length, out, err);
}

static void stack_text(block_reader *r, uint32_t stack, strata_buffer *out) {
    strata_error err;
    uint32_t locations[64];
    size_t depth;
    assert_int_equal(block_reader_stack(r, stack, locations, 64, &depth, &err), 0);
    assert_true(depth <= 64);
    for (size_t i = depth; i-- > 0;) { /* root first */
        block_location loc;
        assert_int_equal(block_reader_location(r, locations[i], &loc, &err), 0);
        if (loc.n_lines == 0) /* an unsymbolized address */
            assert_int_equal(
                strata_buffer_appendf(out, "%s0x%" PRIx64, out->len > 0 ? ";" : "", loc.address),
                0);
        for (uint32_t l = loc.n_lines; l-- > 0;) {
            block_function fn;
            assert_int_equal(block_reader_function(r, loc.lines[l].function_id, &fn, &err), 0);
            assert_int_equal(strata_buffer_appendf(&out[0], "%s%s:%" PRId64,
                                                   out->len > 0 ? ";" : "", fn.name,
                                                   loc.lines[l].line),
                             0);
        }
        if (loc.has_mapping) {
            block_mapping m;
            assert_int_equal(block_reader_mapping(r, loc.mapping_id, &m, &err), 0);
            assert_int_equal(strata_buffer_appendf(out, "@%s", m.file), 0);
        }
    }
}

/* Adds one block's answers to s: per profile "P <series> t=<ms> d=<dur> p=<period>
 * total=<total>" (value: count), per series "T <series>" (value: total) and per stack
 * "S <series> <frames root first>[ <sample labels>]" (value: sum); a frame is function:line per
 * line, or 0x<address> for a location without lines, then @<mapping file>. */
static void summarize_block(bucket *store, const ulid *id, summary *s) {
    strata_error err;
    fetch_ctx f = {store, {0}};
    block_key(id, BLOCK_DATA_FILE, f.key, sizeof f.key);
    bucket_object_attributes attrs;
    assert_int_equal(bucket_attributes(store, f.key, &attrs, &err), 0);
    block_reader *r;
    assert_int_equal(block_reader_open(fetch_range, &f, attrs.size, NULL, &r, &err), 0);
    block_profile *profiles = NULL;
    size_t n = 0;
    assert_int_equal(block_reader_profiles(r, NULL, 0, INT64_MIN, INT64_MAX, &profiles, &n, &err),
                     0);
    for (size_t i = 0; i < n; i++) {
        const block_profile *p = &profiles[i];
        strata_buffer series = STRATA_BUFFER_INIT, key = STRATA_BUFFER_INIT;
        assert_int_equal(profile_type_format(block_reader_series_type(r, p->series_id), &series),
                         0);
        assert_int_equal(label_set_format(block_reader_series_labels(r, p->series_id), &series), 0);
        assert_int_equal(strata_buffer_append_byte(&series, 0), 0);
        const char *sname = (const char *)series.data;
        assert_int_equal(strata_buffer_appendf(
                             &key, "P %s t=%" PRId64 " d=%" PRId64 " p=%" PRId64 " total=%" PRId64,
                             sname, (p->time_ns - BASE_NS) / 1000000, p->duration_ns, p->period,
                             p->total),
                         0);
        assert_int_equal(strata_buffer_append_byte(&key, 0), 0);
        summary_add(s, (const char *)key.data, 1);
        strata_buffer_reset(&key);
        assert_int_equal(strata_buffer_appendf(&key, "T %s", sname), 0);
        assert_int_equal(strata_buffer_append_byte(&key, 0), 0);
        summary_add(s, (const char *)key.data, p->total);
        block_samples samples = {0};
        assert_int_equal(block_reader_read_samples(r, p, 1, &samples, &err), 0);
        assert_int_equal(samples.len, p->sample_count);
        int64_t total = 0;
        for (size_t j = 0; j < samples.len; j++) {
            strata_buffer frames = STRATA_BUFFER_INIT;
            stack_text(r, samples.stacks[j], &frames);
            if (samples.label_sets != NULL && samples.label_sets[j] != 0) {
                const label_set *set;
                assert_int_equal(block_reader_label_set(r, samples.label_sets[j], &set, &err), 0);
                assert_int_equal(strata_buffer_append_byte(&frames, ' '), 0);
                assert_int_equal(label_set_format(set, &frames), 0);
            }
            assert_int_equal(strata_buffer_append_byte(&frames, 0), 0);
            strata_buffer_reset(&key);
            assert_int_equal(
                strata_buffer_appendf(&key, "S %s %s", sname, (const char *)frames.data), 0);
            assert_int_equal(strata_buffer_append_byte(&key, 0), 0);
            summary_add(s, (const char *)key.data, samples.values[j]);
            total += samples.values[j];
            strata_buffer_free(&frames);
        }
        assert_int_equal(total, p->total);
        block_samples_free(&samples);
        strata_buffer_free(&series);
        strata_buffer_free(&key);
    }
    free(profiles);
    block_reader_close(r);
}

static char *summarize(bucket *store, const ulid *ids, size_t n) {
    summary s = {0};
    for (size_t i = 0; i < n; i++)
        summarize_block(store, &ids[i], &s);
    return summary_render(&s);
}

/* The value of one line of a rendered summary, or -1 when absent. */
static int64_t summary_value(const char *rendered, const char *key) {
    size_t len = strlen(key);
    for (const char *line = rendered; *line != '\0';) {
        const char *end = strchr(line, '\n');
        if (strncmp(line, key, len) == 0 && line[len] == '=')
            return strtoll(line + len + 1, NULL, 10);
        line = end + 1;
    }
    return -1;
}

static size_t count_lines(const char *rendered, const char *prefix) {
    size_t n = 0;
    for (const char *line = rendered; *line != '\0'; line = strchr(line, '\n') + 1)
        n += strncmp(line, prefix, strlen(prefix)) == 0;
    return n;
}

static void read_meta(bucket *store, const ulid *id, block_meta *meta) {
    strata_error err;
    char key[256];
    block_key(id, BLOCK_META_FILE, key, sizeof key);
    strata_buffer json = STRATA_BUFFER_INIT;
    assert_int_equal(bucket_get(store, key, &json, &err), 0);
    block_meta_init(meta);
    assert_int_equal(block_meta_decode((const char *)json.data, json.len, meta, &err), 0);
    strata_buffer_free(&json);
}

typedef struct count_ctx {
    size_t metas;
    size_t objects;
} count_ctx;

static int count_key(const char *key, void *ctx, strata_error *err) {
    (void)err;
    count_ctx *c = ctx;
    c->objects++;
    size_t len = strlen(key), m = strlen(BLOCK_META_FILE);
    c->metas += len >= m && strcmp(key + len - m, BLOCK_META_FILE) == 0;
    return 0;
}

static count_ctx count_objects(bucket *store) {
    count_ctx c = {0, 0};
    strata_error err;
    assert_int_equal(bucket_iterate(store, TENANT, true, count_key, &c, &err), 0);
    return c;
}

/* ---- tests ------------------------------------------------------------------------------- */

/* The merged block carries rollups (block_writer_finish writes them): one rollup_series row per
 * series, and rows for the series with two or more profiles. */
static void expect_rollups(bucket *store, const ulid *id, size_t n_series) {
    strata_error err;
    fetch_ctx f = {store, {0}};
    block_key(id, BLOCK_DATA_FILE, f.key, sizeof f.key);
    bucket_object_attributes attrs;
    assert_int_equal(bucket_attributes(store, f.key, &attrs, &err), 0);
    block_reader *r;
    assert_int_equal(block_reader_open(fetch_range, &f, attrs.size, NULL, &r, &err), 0);
    assert_true(block_reader_has_rollups(r));
    assert_int_equal(block_reader_row_count(r, BLOCK_TABLE_ROLLUP_SERIES), n_series);
    assert_true(block_reader_row_count(r, BLOCK_TABLE_ROLLUP_STACKS) > 0);
    block_reader_close(r);
}

static void test_merged_block_answers_as_sources(void **state) {
    (void)state;
    fixture fx;
    fixture_open(&fx);
    ulid ids[3] = {write_source(fx.store, block_a, 4), write_source(fx.store, block_b, 4),
                   write_source(fx.store, block_c, 2)};
    char *before = summarize(fx.store, ids, 3);
    block_merge_result result;
    merge_ok(fx.store, ids, 3, NULL, &result);
    char *after = summarize(fx.store, &result.id, 1);
    assert_string_equal(after, before);

    /* Concrete answers, so that a summary that lost data on both sides still fails. */
    assert_int_equal(count_lines(after, "P "), 10);
    assert_int_equal(summary_value(after, "T " API_CPU), 8 + 7 + 10 + 1 + 2);
    expect_rollups(fx.store, &result.id, 4);
    assert_int_equal(summary_value(after, "S " API_CPU " main:12@/usr/bin/app;work:11@/usr/bin/"
                                          "app;leaf:10@/usr/bin/app"),
                     5 + 7 + 6 + 1);
    assert_int_equal(summary_value(after, "P " API_CPU " t=6000 d=10000000000 p=10000000 total=10"),
                     1);

    assert_int_equal(result.stats.sources, 3);
    assert_int_equal(result.stats.profiles_in, 10);
    assert_int_equal(result.stats.profiles_out, 10);
    assert_int_equal(result.stats.duplicates, 0);
    assert_int_equal(result.stats.samples_in, result.stats.samples_out);
    assert_int_equal(result.stats.samples_out, 15);
    assert_int_equal(result.stats.series_in, 3 + 4 + 1);
    assert_int_equal(result.stats.series_out, 4);
    assert_true(result.stats.bytes_read > 0);
    char mkey[256], dkey[256];
    block_key(&result.id, BLOCK_META_FILE, mkey, sizeof mkey);
    block_key(&result.id, BLOCK_DATA_FILE, dkey, sizeof dkey);
    bucket_object_attributes ma, da;
    strata_error err;
    assert_int_equal(bucket_attributes(fx.store, mkey, &ma, &err), 0);
    assert_int_equal(bucket_attributes(fx.store, dkey, &da, &err), 0);
    assert_int_equal(result.stats.bytes_written, ma.size + da.size);
    assert_true(result.stats.peak_memory_bytes > 0);

    /* meta.json as uploaded: level, lineage, stats, time range. */
    block_meta meta;
    read_meta(fx.store, &result.id, &meta);
    assert_int_equal(meta.compaction_level, 2);
    assert_int_equal(meta.num_profiles, 10);
    assert_int_equal(meta.num_samples, 15);
    assert_int_equal(meta.num_series, 4);
    assert_int_equal(meta.min_time_ms, BASE_NS / 1000000 + 500);
    assert_int_equal(meta.max_time_ms, BASE_NS / 1000000 + 21000 + 1);
    assert_int_equal(meta.n_sources, 3);
    ulid sorted[3] = {ids[0], ids[1], ids[2]};
    for (size_t i = 0; i < 3; i++)
        for (size_t j = i + 1; j < 3; j++)
            if (ulid_compare(&sorted[j], &sorted[i]) < 0) {
                ulid t = sorted[i];
                sorted[i] = sorted[j];
                sorted[j] = t;
            }
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(ulid_compare(&meta.sources[i], &sorted[i]), 0);
    }
    assert_int_equal(meta.n_parents, 3);
    assert_int_equal(ulid_compare(&meta.parents[1].id, &ids[1]), 0);
    assert_int_equal(meta.parents[2].min_time_ms, BASE_NS / 1000000 + 16000);
    assert_int_equal(meta.parents[2].max_time_ms, BASE_NS / 1000000 + 21001);
    assert_int_equal(ulid_compare(&meta.id, &result.id), 0);
    assert_string_equal(meta.tenant, TENANT);
    block_meta_free(&meta);
    assert_int_equal(count_objects(fx.store).metas, 4);

    free(before);
    free(after);
    block_merge_result_free(&result);
    fixture_close(&fx);
}

/* A retried write stores the same profile twice, here in two blocks (and once twice in one). */
static void test_identical_profiles_deduplicated(void **state) {
    (void)state;
    fixture fx;
    fixture_open(&fx);
    const tprofile first[] = {
        block_a[0],
        block_a[2],
    };
    const tprofile retry[] = {
        block_a[2], /* identical: dropped */
        block_a[0], /* identical: dropped */
        /* same series and time, different content: kept */
        {CPU, "{job=\"api\", pod=\"a-1\"}", 1000, {{{"leaf", "work", "main", NULL}, 5}}},
        /* same content, other time: kept */
        {CPU,
         "{job=\"db\", pod=\"d-1\"}",
         2000,
         {{{"query", "serve", "main", NULL}, 11}, {{"fsync", "query", "serve", "main", NULL}, 3}}},
    };
    ulid ids[2] = {write_source(fx.store, first, 2), write_source(fx.store, retry, 4)};
    block_merge_result result;
    merge_ok(fx.store, ids, 2, NULL, &result);
    assert_int_equal(result.stats.profiles_in, 6);
    assert_int_equal(result.stats.duplicates, 2);
    assert_int_equal(result.stats.profiles_out, 4);
    assert_int_equal(result.stats.samples_in, 3 + 2 + 2 + 3 + 1 + 2);
    assert_int_equal(result.stats.samples_out, 3 + 2 + 1 + 2);

    char *after = summarize(fx.store, &result.id, 1);
    char *expected = summarize(fx.store, &ids[0], 1);
    assert_int_equal(count_lines(after, "P "), 4);
    /* The retried profile is present once, the variant with different content too. */
    assert_int_equal(summary_value(after, "P " API_CPU " t=1000 d=10000000000 p=10000000 total=8"),
                     1);
    assert_int_equal(summary_value(after, "P " API_CPU " t=1000 d=10000000000 p=10000000 total=5"),
                     1);
    assert_int_equal(summary_value(after, "T " API_CPU), 8 + 5);
    assert_int_equal(summary_value(expected, "T " API_CPU), 8);
    assert_int_equal(summary_value(after, "T process_cpu:samples:count:cpu:nanoseconds:delta"
                                          "{job=\"db\", pod=\"d-1\"}"),
                     2 * 14);
    free(after);
    free(expected);

    /* One block holding the same profile twice: a merge of that block alone drops the copy. */
    const tprofile twice[] = {block_a[3], block_a[3]};
    ulid single = write_source(fx.store, twice, 2);
    block_merge_result one;
    merge_ok(fx.store, &single, 1, NULL, &one);
    assert_int_equal(one.stats.profiles_in, 2);
    assert_int_equal(one.stats.duplicates, 1);
    assert_int_equal(one.stats.profiles_out, 1);
    block_merge_result_free(&one);
    block_merge_result_free(&result);
    fixture_close(&fx);
}

/* ---- sample labels ------------------------------------------------------------------------ */

typedef struct lsample {
    const char *frames[MAX_FRAMES]; /* leaf first, NULL-terminated */
    const char *labels;             /* pprof sample labels, `{endpoint="/a"}`; NULL for none */
    int64_t value;
} lsample;

/* A block of one cpu{job="api"} profile at time_ms with labelled samples (n of them). */
static ulid write_labelled_source(bucket *store, int64_t time_ms, const lsample *samples,
                                  size_t n) {
    strata_error err;
    block_writer *w = block_writer_new(NULL, &err);
    assert_non_null(w);
    label_set labels = LABEL_SET_INIT;
    profile_type type;
    assert_int_equal(label_set_from_text("{job=\"api\"}", &labels, &err), 0);
    assert_int_equal(profile_type_parse(CPU, strlen(CPU), &type, &err), 0);
    assert_int_equal(block_writer_begin_profile(w, &labels, &type, BASE_NS + time_ms * 1000000,
                                                10 * SEC, 10000000, &err),
                     0);
    for (size_t i = 0; i < n; i++) {
        block_frame frames[MAX_FRAMES];
        size_t k = 0;
        for (; k < MAX_FRAMES && samples[i].frames[k] != NULL; k++) {
            memset(&frames[k], 0, sizeof frames[k]);
            frames[k].function_name = samples[i].frames[k];
            frames[k].line = (int64_t)(10 + k);
        }
        label_set sl = LABEL_SET_INIT;
        if (samples[i].labels != NULL)
            assert_int_equal(label_set_from_text(samples[i].labels, &sl, &err), 0);
        assert_int_equal(block_writer_add_sample_labels(w, frames, k, &sl, samples[i].value, &err),
                         0);
        label_set_free(&sl);
    }
    assert_int_equal(block_writer_end_profile(w, &err), 0);
    label_set_free(&labels);
    profile_type_free(&type);
    ulid id;
    upload_writer(store, w, &id);
    return id;
}

static uint32_t block_version(bucket *store, const ulid *id) {
    strata_error err;
    fetch_ctx f = {store, {0}};
    block_key(id, BLOCK_DATA_FILE, f.key, sizeof f.key);
    bucket_object_attributes attrs;
    assert_int_equal(bucket_attributes(store, f.key, &attrs, &err), 0);
    block_reader *r;
    assert_int_equal(block_reader_open(fetch_range, &f, attrs.size, NULL, &r, &err), 0);
    uint32_t version = block_reader_format_version(r);
    block_reader_close(r);
    return version;
}

/* The merge carries sample label sets through (re-interned, from version 2 and version 1 sources
 * alike), and its duplicate rule includes them: a profile that differs from another only in its
 * samples' labels is kept; an exact copy is dropped. */
static void test_merge_keeps_sample_labels(void **state) {
    (void)state;
    fixture fx;
    fixture_open(&fx);
    const lsample a[] = {{{"work", "main", NULL}, "{endpoint=\"/a\"}", 5},
                         {{"work", "main", NULL}, "{endpoint=\"/b\"}", 3},
                         {{"idle", "main", NULL}, NULL, 1}};
    /* same series, time, stacks and values, total 9: only one sample's labels differ */
    const lsample b[] = {{{"work", "main", NULL}, "{endpoint=\"/a\"}", 5},
                         {{"work", "main", NULL}, "{endpoint=\"/c\"}", 3},
                         {{"idle", "main", NULL}, NULL, 1}};
    ulid ids[4] = {write_labelled_source(fx.store, 1000, a, 3),
                   write_labelled_source(fx.store, 1000, b, 3),
                   write_labelled_source(fx.store, 1000, a, 3), /* a retry of a: dropped */
                   write_source(fx.store, block_c, 1)};         /* version 1, no labels */
    assert_int_equal(block_version(fx.store, &ids[0]), 2);
    assert_int_equal(block_version(fx.store, &ids[3]), 1);
    block_merge_result result;
    merge_ok(fx.store, ids, 4, NULL, &result);
    assert_int_equal(result.stats.profiles_in, 4);
    assert_int_equal(result.stats.duplicates, 1);
    assert_int_equal(result.stats.profiles_out, 3);
    assert_int_equal(result.meta.format_version, 2);
    assert_int_equal(block_version(fx.store, &result.id), 2);
    char *after = summarize(fx.store, &result.id, 1);
    char *before = summarize(fx.store, ids, 2);
    char *c = summarize(fx.store, &ids[3], 1);
    const char *series = "process_cpu:samples:count:cpu:nanoseconds:delta{job=\"api\"}";
    char key[512];
    snprintf(key, sizeof key, "S %s main:11;work:10 {endpoint=\"/a\"}", series);
    assert_int_equal(summary_value(after, key), 5 + 5);
    snprintf(key, sizeof key, "S %s main:11;work:10 {endpoint=\"/b\"}", series);
    assert_int_equal(summary_value(after, key), 3);
    snprintf(key, sizeof key, "S %s main:11;work:10 {endpoint=\"/c\"}", series);
    assert_int_equal(summary_value(after, key), 3);
    snprintf(key, sizeof key, "S %s main:11;idle:10", series);
    assert_int_equal(summary_value(after, key), 2);
    snprintf(key, sizeof key, "P %s t=1000 d=10000000000 p=10000000 total=9", series);
    assert_int_equal(summary_value(after, key), 2);
    /* everything else is as in the sources without the retry */
    size_t n_after = count_lines(after, "S "), n_before = count_lines(before, "S ");
    assert_int_equal(n_after, n_before + count_lines(c, "S "));
    free(after);
    free(before);
    free(c);

    /* merging the merged block again keeps the sets (a version 2 source) */
    block_merge_result again;
    merge_ok(fx.store, &result.id, 1, NULL, &again);
    assert_int_equal(again.stats.duplicates, 0);
    char *first = summarize(fx.store, &result.id, 1), *second = summarize(fx.store, &again.id, 1);
    assert_string_equal(first, second);
    free(first);
    free(second);
    block_merge_result_free(&again);
    block_merge_result_free(&result);
    fixture_close(&fx);
}

/* Merging merged blocks: level max + 1, sources the union of level-1 blocks, data preserved. */
static void test_levels_and_lineage(void **state) {
    (void)state;
    fixture fx;
    fixture_open(&fx);
    ulid l1[3] = {write_source(fx.store, block_a, 4), write_source(fx.store, block_b, 4),
                  write_source(fx.store, block_c, 2)};
    char *before = summarize(fx.store, l1, 3);
    block_merge_result ab, abc;
    merge_ok(fx.store, l1, 2, NULL, &ab);
    ulid second[2] = {l1[2], ab.id};
    merge_ok(fx.store, second, 2, NULL, &abc);
    char *after = summarize(fx.store, &abc.id, 1);
    assert_string_equal(after, before);
    assert_int_equal(abc.meta.compaction_level, 3);
    assert_int_equal(abc.meta.n_sources, 3);
    assert_int_equal(abc.meta.n_parents, 2);
    assert_int_equal(ulid_compare(&abc.meta.parents[1].id, &ab.id), 0);

    /* An explicit level wins. */
    block_merge_options opts;
    block_merge_options_default(&opts);
    opts.compaction_level = 7;
    block_merge_result seven;
    merge_ok(fx.store, &abc.id, 1, &opts, &seven);
    block_meta meta;
    read_meta(fx.store, &seven.id, &meta);
    assert_int_equal(meta.compaction_level, 7);
    assert_int_equal(meta.n_sources, 3);
    block_meta_free(&meta);
    free(before);
    free(after);
    block_merge_result_free(&ab);
    block_merge_result_free(&abc);
    block_merge_result_free(&seven);
    fixture_close(&fx);
}

/* Locations with inlined lines and several mappings survive translation exactly. */
static void test_inline_frames_and_mappings(void **state) {
    (void)state;
    fixture fx;
    fixture_open(&fx);
    strata_error err;
    ulid ids[2];
    for (int b = 0; b < 2; b++) {
        block_writer *w = block_writer_new(NULL, &err);
        assert_non_null(w);
        uint32_t s[8];
        const char *texts[] = {"libc.so", "bid-libc", "app",  "bid-app",
                               "inlined", "outer",    "main", "x.c"};
        /* the second block interns strings in the opposite order */
        for (int i = 0; i < 8; i++) {
            int k = b == 0 ? i : 7 - i;
            assert_int_equal(block_writer_intern_string(w, texts[k], strlen(texts[k]), &s[k], &err),
                             0);
        }
        block_writer_mapping libc = {0x7f0000, 0x7f8000, 0x1000, s[0], s[1], 1};
        block_writer_mapping app = {0x400000, 0x500000, 0, s[2], s[3], 3};
        uint32_t m_libc, m_app, f_inl, f_out, f_main, loc_io, loc_main, st_main, st_leaf;
        assert_int_equal(
            block_writer_intern_mapping(w, b == 0 ? &libc : &app, b == 0 ? &m_libc : &m_app, &err),
            0);
        assert_int_equal(
            block_writer_intern_mapping(w, b == 0 ? &app : &libc, b == 0 ? &m_app : &m_libc, &err),
            0);
        assert_int_equal(block_writer_intern_function(w, s[4], s[4], s[7], 3, &f_inl, &err), 0);
        assert_int_equal(block_writer_intern_function(w, s[5], s[5], s[7], 9, &f_out, &err), 0);
        assert_int_equal(block_writer_intern_function(w, s[6], s[6], s[7], 1, &f_main, &err), 0);
        block_writer_line io[2] = {{f_inl, 4}, {f_out, 12}};
        block_writer_line ml[1] = {{f_main, 2}};
        assert_int_equal(
            block_writer_intern_location(w, 0x7f1234, m_libc + 1, 0, io, 2, &loc_io, &err), 0);
        assert_int_equal(
            block_writer_intern_location(w, 0x401000, m_app + 1, 0, ml, 1, &loc_main, &err), 0);
        assert_int_equal(block_writer_intern_stack(w, 0, loc_main, &st_main, &err), 0);
        assert_int_equal(block_writer_intern_stack(w, st_main, loc_io, &st_leaf, &err), 0);
        label_set labels = LABEL_SET_INIT;
        profile_type type;
        assert_int_equal(label_set_from_text("{job=\"c\"}", &labels, &err), 0);
        assert_int_equal(profile_type_parse(CPU, strlen(CPU), &type, &err), 0);
        uint32_t stacks[2] = {st_leaf, st_main};
        int64_t values[2] = {b == 0 ? 3 : 30, 1};
        assert_int_equal(block_writer_add_profile_stacks(w, &labels, &type, BASE_NS + b * SEC, SEC,
                                                         1, stacks, values, 2, &err),
                         0);
        label_set_free(&labels);
        profile_type_free(&type);
        upload_writer(fx.store, w, &ids[b]);
    }
    char *before = summarize(fx.store, ids, 2);
    block_merge_result result;
    merge_ok(fx.store, ids, 2, NULL, &result);
    char *after = summarize(fx.store, &result.id, 1);
    assert_string_equal(after, before);
    assert_int_equal(summary_value(after, "S process_cpu:samples:count:cpu:nanoseconds:delta"
                                          "{job=\"c\"} main:2@app;outer:12;inlined:4@libc.so"),
                     33);

    /* The mapping's other fields are copied as well. */
    fetch_ctx f = {fx.store, {0}};
    block_key(&result.id, BLOCK_DATA_FILE, f.key, sizeof f.key);
    bucket_object_attributes attrs;
    assert_int_equal(bucket_attributes(fx.store, f.key, &attrs, &err), 0);
    block_reader *r;
    assert_int_equal(block_reader_open(fetch_range, &f, attrs.size, NULL, &r, &err), 0);
    assert_int_equal(block_reader_row_count(r, BLOCK_TABLE_MAPPINGS), 2);
    assert_int_equal(block_reader_row_count(r, BLOCK_TABLE_FUNCTIONS), 3);
    assert_int_equal(block_reader_row_count(r, BLOCK_TABLE_LOCATIONS), 2);
    assert_int_equal(block_reader_row_count(r, BLOCK_TABLE_STACKS), 2);
    bool seen_libc = false;
    for (uint32_t i = 0; i < 2; i++) {
        block_mapping m;
        assert_int_equal(block_reader_mapping(r, i, &m, &err), 0);
        if (strcmp(m.file, "libc.so") == 0) {
            seen_libc = true;
            assert_int_equal(m.memory_start, 0x7f0000);
            assert_int_equal(m.memory_limit, 0x7f8000);
            assert_int_equal(m.file_offset, 0x1000);
            assert_string_equal(m.build_id, "bid-libc");
            assert_int_equal(m.flags, 1);
        }
    }
    assert_true(seen_libc);
    block_reader_close(r);
    free(before);
    free(after);
    block_merge_result_free(&result);
    fixture_close(&fx);
}

/* ---- locations without lines ------------------------------------------------------------- */

/* What the eBPF agent pushes for code it cannot symbolize: locations with an address and a mapping
 * but no line (a stripped binary, [vdso]) or not even a mapping, encoded as on the wire. One
 * sample type (samples/count). Stacks (leaf first): [0x401234, main] = 5,
 * [vdso 0x7fff0a10, 0x401234, main] = 7, [0xdead] = 2. */
static void encode_lineless_pprof(strata_buffer *out) {
    static const char *const strings[] = {
        "",        "samples",           "count", "cpu",   "nanoseconds", "main",
        "main.go", "/usr/bin/stripped", "bid1",  "[vdso]"};
    pprof_string strs[10];
    for (int i = 0; i < 10; i++)
        strs[i] = (pprof_string){strings[i], (uint32_t)strlen(strings[i])};
    pprof_value_type types[1] = {{1, 2}};
    pprof_mapping maps[2] = {
        {.id = 1,
         .memory_start = 0x400000,
         .memory_limit = 0x500000,
         .file_offset = 0x1000,
         .filename = 7,
         .build_id = 8},
        {.id = 2, .memory_start = 0x7fff0000, .memory_limit = 0x7fff2000, .filename = 9}};
    pprof_function fns[1] = {{1, 5, 5, 6, 3}};
    pprof_line lines[1] = {{1, 7, 0}};
    pprof_location locs[4] = {{.id = 1, .mapping_id = 1, .address = 0x401234},
                              {.id = 2, .mapping_id = 2, .address = 0x7fff0a10},
                              {.id = 3, .mapping_id = 1, .address = 0x400100, .line_count = 1},
                              {.id = 4, .address = 0xdead}};
    uint64_t loc_ids[6] = {1, 3, 2, 1, 3, 4};
    int64_t values[3] = {5, 7, 2};
    pprof_sample samples[3] = {{0, 2, 0, 0, 0}, {2, 3, 1, 0, 0}, {5, 1, 2, 0, 0}};
    pprof_profile p;
    memset(&p, 0, sizeof p);
    p.sample_types = types;
    p.n_sample_types = 1;
    p.samples = samples;
    p.n_samples = 3;
    p.sample_location_ids = loc_ids;
    p.n_sample_location_ids = 6;
    p.sample_values = values;
    p.mappings = maps;
    p.n_mappings = 2;
    p.locations = locs;
    p.n_locations = 4;
    p.lines = lines;
    p.n_lines = 1;
    p.functions = fns;
    p.n_functions = 1;
    p.strings = strs;
    p.n_strings = 10;
    p.duration_nanos = 10 * SEC;
    p.period_type = (pprof_value_type){3, 4};
    p.period = 10000000;
    strata_error err;
    assert_int_equal(pprof_encode(&p, true, out, &err), 0);
}

/* A level-1 block written as the ingester writes one (the pprof decoded, then added with
 * block_writer_add_profile_types): the line-less pprof at each of the given times. */
static ulid write_lineless_source(bucket *store, const int64_t *times_ms, size_t n) {
    strata_error err;
    strata_buffer raw = STRATA_BUFFER_INIT;
    encode_lineless_pprof(&raw);
    pprof_profile p;
    assert_int_equal(pprof_decode(raw.data, raw.len, NULL, &p, &err), 0);
    block_writer *w = block_writer_new(NULL, &err);
    assert_non_null(w);
    label_set labels = LABEL_SET_INIT;
    profile_type type;
    assert_int_equal(label_set_from_text("{comm=\"stripped\"}", &labels, &err), 0);
    assert_int_equal(profile_type_parse(CPU, strlen(CPU), &type, &err), 0);
    size_t column = 0;
    for (size_t i = 0; i < n; i++)
        assert_int_equal(block_writer_add_profile_types(w, &labels, &type, &column, 1,
                                                        BASE_NS + times_ms[i] * 1000000, 10 * SEC,
                                                        10000000, &p, &err),
                         0);
    ulid id;
    upload_writer(store, w, &id);
    label_set_free(&labels);
    profile_type_free(&type);
    pprof_profile_free(&p);
    strata_buffer_free(&raw);
    return id;
}

/* Locations without lines (address and mapping only) merge like any other: the merged block holds
 * them with their addresses and mappings, and answers exactly as its sources. (The id path used to
 * refuse them: "a location needs at least one line", so such blocks never compacted.) */
static void test_locations_without_lines_merge(void **state) {
    (void)state;
    fixture fx;
    fixture_open(&fx);
    strata_error err;
    const int64_t times_a[2] = {0, 10000}, times_b[2] = {10000, 20000}; /* 10 s twice: a retry */
    ulid ids[2] = {write_lineless_source(fx.store, times_a, 2),
                   write_lineless_source(fx.store, times_b, 2)};
    char *before = summarize(fx.store, ids, 2);
    block_merge_result result;
    merge_ok(fx.store, ids, 2, NULL, &result);
    assert_int_equal(result.stats.profiles_in, 4);
    assert_int_equal(result.stats.profiles_out, 3);
    assert_int_equal(result.stats.duplicates, 1);
    assert_false(result.bucket_error);
    char *after = summarize(fx.store, &result.id, 1);
#define STRIPPED_SERIES "process_cpu:samples:count:cpu:nanoseconds:delta{comm=\"stripped\"}"
    /* the duplicate is counted once more by the sources' summary, so compare per line */
    assert_int_equal(summary_value(after, "S " STRIPPED_SERIES " main:7@/usr/bin/stripped;"
                                          "0x401234@/usr/bin/stripped;0x7fff0a10@[vdso]"),
                     3 * 7);
    assert_int_equal(summary_value(after, "S " STRIPPED_SERIES " main:7@/usr/bin/stripped;"
                                          "0x401234@/usr/bin/stripped"),
                     3 * 5);
    assert_int_equal(summary_value(after, "S " STRIPPED_SERIES " 0xdead"), 3 * 2);
    assert_int_equal(summary_value(after, "T " STRIPPED_SERIES), 3 * 14);
    assert_int_equal(summary_value(before, "T " STRIPPED_SERIES), 4 * 14);
    assert_int_equal(summary_value(before, "S " STRIPPED_SERIES " 0xdead"), 4 * 2);
    assert_int_equal(count_lines(after, "P "), 3);
#undef STRIPPED_SERIES

    /* The merged block's tables: four locations, one line, both mappings with every field. */
    fetch_ctx f = {fx.store, {0}};
    block_key(&result.id, BLOCK_DATA_FILE, f.key, sizeof f.key);
    bucket_object_attributes attrs;
    assert_int_equal(bucket_attributes(fx.store, f.key, &attrs, &err), 0);
    block_reader *r;
    assert_int_equal(block_reader_open(fetch_range, &f, attrs.size, NULL, &r, &err), 0);
    assert_int_equal(block_reader_row_count(r, BLOCK_TABLE_LOCATIONS), 4);
    assert_int_equal(block_reader_row_count(r, BLOCK_TABLE_LINES), 1);
    assert_int_equal(block_reader_row_count(r, BLOCK_TABLE_MAPPINGS), 2);
    int seen = 0;
    for (uint32_t i = 0; i < 4; i++) {
        block_location loc;
        assert_int_equal(block_reader_location(r, i, &loc, &err), 0);
        block_mapping m = {0};
        if (loc.has_mapping)
            assert_int_equal(block_reader_mapping(r, loc.mapping_id, &m, &err), 0);
        if (loc.address == 0x401234) {
            seen |= 1;
            assert_int_equal(loc.n_lines, 0);
            assert_true(loc.has_mapping);
            assert_string_equal(m.file, "/usr/bin/stripped");
            assert_string_equal(m.build_id, "bid1");
            assert_int_equal(m.memory_start, 0x400000);
            assert_int_equal(m.memory_limit, 0x500000);
            assert_int_equal(m.file_offset, 0x1000);
        } else if (loc.address == 0x7fff0a10) {
            seen |= 2;
            assert_int_equal(loc.n_lines, 0);
            assert_true(loc.has_mapping);
            assert_string_equal(m.file, "[vdso]");
            assert_int_equal(m.memory_start, 0x7fff0000);
            assert_int_equal(m.memory_limit, 0x7fff2000);
        } else if (loc.address == 0xdead) {
            seen |= 4;
            assert_int_equal(loc.n_lines, 0);
            assert_false(loc.has_mapping);
        } else {
            assert_int_equal(loc.address, 0x400100);
            seen |= 8;
            assert_int_equal(loc.n_lines, 1);
            assert_int_equal(loc.lines[0].line, 7);
        }
    }
    assert_int_equal(seen, 15);
    block_reader_close(r);

    /* And it merges again, one level up, unchanged. */
    block_merge_result again;
    merge_ok(fx.store, &result.id, 1, NULL, &again);
    assert_int_equal(again.meta.compaction_level, 3);
    char *twice = summarize(fx.store, &again.id, 1);
    assert_string_equal(twice, after);
    free(twice);
    block_merge_result_free(&again);
    free(before);
    free(after);
    block_merge_result_free(&result);
    fixture_close(&fx);
}

/* ---- bucket failures --------------------------------------------------------------------- */

/* A FILESYSTEM bucket whose reads or uploads can be made to fail as an unhealthy store does. */
typedef struct faulty_bucket {
    void *fs;
    bool fail_reads, fail_uploads;
} faulty_bucket;

static int faulty_upload(void *impl, const char *key, const bucket_upload_body *body,
                         strata_error *err) {
    faulty_bucket *f = impl;
    if (f->fail_uploads)
        return strata_error_set(err, STRATA_INTERNAL, "injected: disk said no");
    return bucket_filesystem_ops.upload(f->fs, key, body, err);
}

static int faulty_get_range(void *impl, const char *key, uint64_t offset, uint64_t length,
                            strata_buffer *out, strata_error *err) {
    faulty_bucket *f = impl;
    if (f->fail_reads && strstr(key, BLOCK_DATA_FILE) != NULL)
        return strata_error_set(err, STRATA_INTERNAL, "injected: read failed");
    return bucket_filesystem_ops.get_range(f->fs, key, offset, length, out, err);
}

static int faulty_attributes(void *impl, const char *key, bucket_object_attributes *out,
                             strata_error *err) {
    return bucket_filesystem_ops.attributes(((faulty_bucket *)impl)->fs, key, out, err);
}

static int faulty_exists(void *impl, const char *key, bool *out, strata_error *err) {
    return bucket_filesystem_ops.exists(((faulty_bucket *)impl)->fs, key, out, err);
}

static int faulty_delete(void *impl, const char *key, strata_error *err) {
    return bucket_filesystem_ops.delete_object(((faulty_bucket *)impl)->fs, key, err);
}

static int faulty_iterate(void *impl, bucket_list_request *req, bucket_iter_fn fn, void *ctx,
                          strata_error *err) {
    return bucket_filesystem_ops.iterate(((faulty_bucket *)impl)->fs, req, fn, ctx, err);
}

static void faulty_close(void *impl) {
    bucket_filesystem_ops.close(((faulty_bucket *)impl)->fs);
}

static const bucket_backend_ops faulty_ops = {.type = "FILESYSTEM",
                                              .upload = faulty_upload,
                                              .get_range = faulty_get_range,
                                              .attributes = faulty_attributes,
                                              .exists = faulty_exists,
                                              .delete_object = faulty_delete,
                                              .iterate = faulty_iterate,
                                              .close = faulty_close};

/* A merge that fails in a bucket call says so (bucket_error), so the compactor retries it rather
 * than counting it against the sources; a merge that fails on the data does not (see
 * expect_merge_failure). */
static void test_bucket_failures_flagged(void **state) {
    (void)state;
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/strata-merge-test-XXXXXX");
    assert_non_null(mkdtemp(dir));
    strata_error err;
    faulty_bucket fb = {0};
    assert_int_equal(bucket_filesystem_new(dir, &fb.fs, &err), 0);
    bucket *store;
    assert_int_equal(bucket_new(&faulty_ops, &fb, NULL, &store, &err), 0);
    ulid ids[2] = {write_source(store, block_a, 4), write_source(store, block_b, 4)};
    block_merge_result result;

    fb.fail_reads = true;
    assert_int_equal(block_merge(store, TENANT, ids, 2, NULL, &result, &err), -1);
    assert_int_equal(err.code, STRATA_INTERNAL);
    assert_non_null(strstr(err.message, "injected: read failed"));
    assert_true(result.bucket_error);
    block_merge_result_free(&result);

    fb.fail_reads = false;
    fb.fail_uploads = true;
    assert_int_equal(block_merge(store, TENANT, ids, 2, NULL, &result, &err), -1);
    assert_int_equal(err.code, STRATA_INTERNAL);
    assert_non_null(strstr(err.message, "uploading"));
    assert_true(result.bucket_error);
    block_merge_result_free(&result);

    fb.fail_uploads = false;
    merge_ok(store, ids, 2, NULL, &result);
    assert_false(result.bucket_error);
    assert_int_equal(result.stats.profiles_out, 8);
    block_merge_result_free(&result);
    bucket_close(store);
    remove_tree(dir);
}

/* Flips one byte of a stored object. */
static void corrupt_object(bucket *store, const char *key, size_t offset) {
    strata_error err;
    strata_buffer data = STRATA_BUFFER_INIT;
    assert_int_equal(bucket_get(store, key, &data, &err), 0);
    assert_true(offset < data.len);
    data.data[offset] ^= 0x5a;
    assert_int_equal(bucket_upload(store, key, data.data, data.len, &err), 0);
    strata_buffer_free(&data);
}

static void expect_merge_failure(bucket *store, const ulid *ids, size_t n, const ulid *culprit,
                                 strata_status code, const char *fragment) {
    count_ctx before = count_objects(store);
    strata_error err;
    strata_error_clear(&err);
    block_merge_result result;
    assert_int_equal(block_merge(store, TENANT, ids, n, NULL, &result, &err), -1);
    if (err.code != code)
        fail_msg("want %s, got %s: %s", strata_status_name(code), strata_status_name(err.code),
                 err.message);
    if (culprit != NULL) {
        char text[ULID_STRING_LEN + 1], name[64];
        ulid_format(culprit, text);
        snprintf(name, sizeof name, "block %s/%s: ", TENANT, text);
        if (strncmp(err.message, name, strlen(name)) != 0)
            fail_msg("message does not start with \"%s\": %s", name, err.message);
    }
    if (strstr(err.message, fragment) == NULL)
        fail_msg("message lacks \"%s\": %s", fragment, err.message);
    count_ctx after = count_objects(store);
    assert_int_equal(after.metas, before.metas);
    assert_int_equal(after.objects, before.objects);
    assert_false(result.bucket_error); /* the data failed, not the bucket */
    block_merge_result_free(&result);
}

static void test_corrupt_or_missing_source(void **state) {
    (void)state;
    fixture fx;
    fixture_open(&fx);
    ulid ids[3] = {write_source(fx.store, block_a, 4), write_source(fx.store, block_b, 4),
                   write_source(fx.store, block_c, 2)};
    char key[256];

    /* A damaged page (the first one after the header): DATA_LOSS naming the block and the table. */
    block_key(&ids[1], BLOCK_DATA_FILE, key, sizeof key);
    strata_buffer good = STRATA_BUFFER_INIT;
    strata_error err;
    assert_int_equal(bucket_get(fx.store, key, &good, &err), 0);
    corrupt_object(fx.store, key, BLOCK_HEADER_SIZE + 2);
    expect_merge_failure(fx.store, ids, 3, &ids[1], STRATA_DATA_LOSS, "checksum mismatch");

    /* A truncated object (meta.json promises more bytes than there are). */
    assert_int_equal(bucket_upload(fx.store, key, good.data, good.len / 2, &err), 0);
    expect_merge_failure(fx.store, ids, 3, &ids[1], STRATA_DATA_LOSS, "");
    assert_int_equal(bucket_upload(fx.store, key, good.data, good.len, &err), 0);
    strata_buffer_free(&good);

    /* An unparsable meta.json: INVALID_ARGUMENT naming the block and the file. */
    block_key(&ids[2], BLOCK_META_FILE, key, sizeof key);
    strata_buffer meta = STRATA_BUFFER_INIT;
    assert_int_equal(bucket_get(fx.store, key, &meta, &err), 0);
    assert_int_equal(bucket_upload(fx.store, key, "{\"ulid\":", 8, &err), 0);
    expect_merge_failure(fx.store, ids, 3, &ids[2], STRATA_INVALID_ARGUMENT, "meta.json");

    /* A missing block: NOT_FOUND naming it. */
    assert_int_equal(bucket_delete(fx.store, key, &err), 0);
    expect_merge_failure(fx.store, ids, 3, &ids[2], STRATA_NOT_FOUND, "");
    assert_int_equal(bucket_upload(fx.store, key, meta.data, meta.len, &err), 0);
    strata_buffer_free(&meta);

    /* Bad arguments. */
    ulid twice[2] = {ids[0], ids[0]};
    expect_merge_failure(fx.store, twice, 2, NULL, STRATA_INVALID_ARGUMENT, "given twice");
    expect_merge_failure(fx.store, ids, 0, NULL, STRATA_INVALID_ARGUMENT, "no source");

    /* Repaired, the same merge succeeds. */
    block_merge_result result;
    merge_ok(fx.store, ids, 3, NULL, &result);
    assert_int_equal(result.stats.profiles_out, 10);
    block_merge_result_free(&result);
    fixture_close(&fx);
}

/* A block of another tenant cannot be merged into this tenant's block. */
static void test_other_tenant_rejected(void **state) {
    (void)state;
    fixture fx;
    fixture_open(&fx);
    strata_error err;
    block_writer_options wo;
    block_writer_options_default(&wo);
    wo.tenant = "team-b";
    block_writer *w = block_writer_new(&wo, &err);
    assert_non_null(w);
    add_tprofile(w, &block_a[0]);
    ulid id; /* uploaded under "anonymous/" although its meta.json says team-b */
    upload_writer(fx.store, w, &id);
    expect_merge_failure(fx.store, &id, 1, &id, STRATA_INVALID_ARGUMENT, "team-b");
    fixture_close(&fx);
}

typedef struct progress_log {
    size_t calls;
    uint64_t last_done, last_total;
} progress_log;

static void record_progress(void *ctx, const block_merge_stats *stats, uint64_t done,
                            uint64_t total) {
    progress_log *log = ctx;
    assert_true(done <= total);
    assert_true(stats->series_out == done);
    log->calls++;
    log->last_done = done;
    log->last_total = total;
}

/* Past the memory limit: RESOURCE_EXHAUSTED with the figures, nothing written. Within it, the
 * progress callback reports the series. */
static void test_memory_limit_and_progress(void **state) {
    (void)state;
    fixture fx;
    fixture_open(&fx);
    ulid ids[2] = {write_source(fx.store, block_a, 4), write_source(fx.store, block_b, 4)};
    block_merge_options opts;
    block_merge_options_default(&opts);
    opts.memory_limit = 200; /* below even the meta.json prediction */
    count_ctx before = count_objects(fx.store);
    block_merge_result result;
    strata_error err;
    assert_int_equal(block_merge(fx.store, TENANT, ids, 2, &opts, &result, &err), -1);
    assert_int_equal(err.code, STRATA_RESOURCE_EXHAUSTED);
    assert_non_null(strstr(err.message, "over the limit of 200 bytes"));
    block_merge_result_free(&result);

    opts.memory_limit = 64 * 1024; /* passes the prediction, not the writer's tables */
    assert_int_equal(block_merge(fx.store, TENANT, ids, 2, &opts, &result, &err), -1);
    assert_int_equal(err.code, STRATA_RESOURCE_EXHAUSTED);
    assert_non_null(strstr(err.message, "exceeds the limit of 65536 bytes"));
    assert_true(result.stats.peak_memory_bytes > 64 * 1024);
    block_merge_result_free(&result);
    count_ctx after = count_objects(fx.store);
    assert_int_equal(after.objects, before.objects);

    progress_log log = {0, 0, 0};
    block_merge_options_default(&opts);
    opts.progress = record_progress;
    opts.progress_ctx = &log;
    merge_ok(fx.store, ids, 2, &opts, &result);
    assert_true(log.calls >= 1);
    assert_int_equal(log.last_total, 4);
    assert_int_equal(log.last_done, 4);
    assert_true(result.stats.peak_memory_bytes > 64 * 1024);
    assert_true(result.stats.peak_memory_bytes < opts.memory_limit);
    block_merge_result_free(&result);
    fixture_close(&fx);
}

/* A source of one series with `profiles` profiles of `per_profile` distinct stacks each, drawn
 * from 2,000 stacks of 3 frames over 91 functions (a small dictionary, many samples), starting at
 * time_ms. */
static ulid write_busy_source(bucket *store, int64_t time_ms, int profiles, int per_profile) {
    strata_error err;
    block_writer *w = block_writer_new(NULL, &err);
    assert_non_null(w);
    label_set labels = LABEL_SET_INIT;
    profile_type type;
    assert_int_equal(label_set_from_text("{job=\"busy\"}", &labels, &err), 0);
    assert_int_equal(profile_type_parse(CPU, strlen(CPU), &type, &err), 0);
    char names[90][16];
    for (int i = 0; i < 90; i++)
        snprintf(names[i], sizeof names[i], "fn%d", i);
    for (int p = 0; p < profiles; p++) {
        assert_int_equal(block_writer_begin_profile(w, &labels, &type,
                                                    BASE_NS + (time_ms + p * 10000) * 1000000,
                                                    10 * SEC, 10000000, &err),
                         0);
        for (int i = 0; i < per_profile; i++) {
            int k = (i * 7 + p) % 2000;
            const char *chain[3] = {names[k % 50], names[50 + (k / 50) % 40], "main"};
            block_frame frames[3];
            memset(frames, 0, sizeof frames);
            for (int f = 0; f < 3; f++) {
                frames[f].function_name = chain[f];
                frames[f].mapping_file = "/usr/bin/app";
                frames[f].address = 0x401000 + 16 * (uint64_t)(k % 50) + 4096 * (uint64_t)f;
            }
            assert_int_equal(block_writer_add_sample(w, frames, 3, 1 + (i % 7), &err), 0);
        }
        assert_int_equal(block_writer_end_profile(w, &err), 0);
    }
    label_set_free(&labels);
    profile_type_free(&type);
    ulid id;
    upload_writer(store, w, &id);
    return id;
}

/* Merges two busy sources of `profiles` profiles of 400 samples each within limit; returns the
 * merge's peak memory estimate. The merged block answers as its sources. */
static size_t merge_busy(int profiles, size_t limit) {
    fixture fx;
    fixture_open(&fx);
    ulid ids[2] = {write_busy_source(fx.store, 0, profiles, 400),
                   write_busy_source(fx.store, (int64_t)profiles * 10000, profiles, 400)};
    char *before = summarize(fx.store, ids, 2);
    block_merge_options opts;
    block_merge_options_default(&opts);
    opts.reader_cache_bytes = 64 * 1024;
    opts.memory_limit = limit;
    block_merge_result result;
    merge_ok(fx.store, ids, 2, &opts, &result);
    assert_int_equal(result.stats.samples_out, (uint64_t)2 * (uint64_t)profiles * 400);
    assert_true(result.stats.peak_memory_bytes <= limit);
    char *after = summarize(fx.store, &result.id, 1);
    assert_string_equal(after, before);
    expect_rollups(fx.store, &result.id, 1);
    size_t peak = result.stats.peak_memory_bytes;
    free(before);
    free(after);
    block_merge_result_free(&result);
    fixture_close(&fx);
    return peak;
}

/* The output's samples stream to the spool (block_writer_new_spooled): a merge whose samples
 * alone would take more than the memory limit in a writer's arrays (480,000 samples, 12 bytes
 * each: 5.8 MB) succeeds within 4 MiB, and twice the profiles (the same dictionary) costs about
 * the same memory, not twice as much. */
static void test_samples_do_not_count_against_memory(void **state) {
    (void)state;
    size_t limit = (size_t)4 << 20;
    assert_true((size_t)2 * 600 * 400 * 12 > limit);
    size_t peak_half = merge_busy(300, limit);
    size_t peak = merge_busy(600, limit);
    assert_true(peak < peak_half + peak_half / 4);
}

/* Writes k blocks cut (block_writer_detach) from one long-lived dictionary writer, as the ingester
 * does: block i holds the profiles sets[i][0, ns[i]). */
static void write_detached_sources(bucket *store, const tprofile *const *sets, const size_t *ns,
                                   size_t k, ulid *ids) {
    strata_error err;
    block_writer *dict = block_writer_new(NULL, &err);
    assert_non_null(dict);
    for (size_t i = 0; i < k; i++) {
        for (size_t j = 0; j < ns[i]; j++)
            add_tprofile(dict, &sets[i][j]);
        block_writer *cut = NULL;
        assert_int_equal(block_writer_detach(dict, &cut, &err), 0);
        upload_writer(store, cut, &ids[i]);
    }
    block_writer_free(dict);
}

static const tprofile block_d[] = {
    {CPU, "{job=\"api\", pod=\"a-2\"}", 3000, {{{"leaf", "work", "main", NULL}, 2}}},
    {CPU, "{job=\"db\", pod=\"d-1\"}", 31000, {{{"scan", "query", "serve", "main", NULL}, 4}}},
};

/* Sources cut from one ingester dictionary share one translation of its stacks and locations
 * (block-format 6.12 origins); a plain source beside them keeps its own. The merged block answers
 * exactly as the sources do. */
static void test_dictionary_sources_share_translation(void **state) {
    (void)state;
    fixture fx;
    fixture_open(&fx);
    const tprofile *sets[] = {block_a, block_b, block_c};
    const size_t ns[] = {4, 4, 2};
    ulid ids[4];
    write_detached_sources(fx.store, sets, ns, 3, ids);
    ids[3] = write_source(fx.store, block_d, 2);
    char *before = summarize(fx.store, ids, 4);
    block_merge_result result;
    merge_ok(fx.store, ids, 4, NULL, &result);
    assert_int_equal(result.stats.dictionary_sources, 3);
    char *after = summarize(fx.store, &result.id, 1);
    assert_string_equal(after, before);
    assert_int_equal(summary_value(after, "T " API_CPU), 8 + 7 + 10 + 1 + 2);
    assert_int_equal(summary_value(after, "S " API_CPU " main:12@/usr/bin/app;work:11@/usr/bin/"
                                          "app;leaf:10@/usr/bin/app"),
                     5 + 7 + 6 + 1);
    block_merge_result_free(&result);

    /* The same data from plain blocks merges to the same answers, without a shared dictionary. */
    ulid plain[4] = {write_source(fx.store, block_a, 4), write_source(fx.store, block_b, 4),
                     write_source(fx.store, block_c, 2), ids[3]};
    merge_ok(fx.store, plain, 4, NULL, &result);
    assert_int_equal(result.stats.dictionary_sources, 0);
    char *again = summarize(fx.store, &result.id, 1);
    assert_string_equal(again, after);
    free(before);
    free(after);
    free(again);
    block_merge_result_free(&result);
    fixture_close(&fx);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_merged_block_answers_as_sources),
        cmocka_unit_test(test_identical_profiles_deduplicated),
        cmocka_unit_test(test_levels_and_lineage),
        cmocka_unit_test(test_inline_frames_and_mappings),
        cmocka_unit_test(test_locations_without_lines_merge),
        cmocka_unit_test(test_bucket_failures_flagged),
        cmocka_unit_test(test_corrupt_or_missing_source),
        cmocka_unit_test(test_other_tenant_rejected),
        cmocka_unit_test(test_memory_limit_and_progress),
        cmocka_unit_test(test_samples_do_not_count_against_memory),
        cmocka_unit_test(test_dictionary_sources_share_translation),
        cmocka_unit_test(test_merge_keeps_sample_labels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
