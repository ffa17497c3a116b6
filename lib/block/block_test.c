/*
 * block_test.c - block writer, reader, meta, marks, ULIDs and dump.
 *
 * Profiles are assembled by hand as pprof_profile structs (one function and one location per
 * distinct frame name, ids offset per profile so de-duplication across profiles is exercised),
 * written into blocks and read back through an in-memory fetch callback.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "block/block_dump.h"
#include "block/block_format.h"
#include "block/block_meta.h"
#include "block/block_reader.h"
#include "block/block_writer.h"
#include "block/ulid.h"

#define SEC INT64_C(1000000000)
#define MAX_FRAMES 8
#define MAX_NAMES 32

typedef struct tsample {
    const char *frames[MAX_FRAMES]; /* leaf first, NULL-terminated */
    int64_t value;
} tsample;

/* ---- fixtures ---------------------------------------------------------------------------- */

static pprof_string str(const char *s) {
    pprof_string v = {s, (uint32_t)strlen(s)};
    return v;
}

static int64_t add_string(pprof_profile *p, const char *s) {
    for (size_t i = 0; i < p->n_strings; i++) {
        if (p->strings[i].len == strlen(s) && memcmp(p->strings[i].ptr, s, p->strings[i].len) == 0)
            return (int64_t)i;
    }
    p->strings[p->n_strings] = str(s);
    return (int64_t)p->n_strings++;
}

/* Builds a pprof with sample types (samples,count) and (cpu,nanoseconds); values v and v*1000.
 * pprof ids are offset by id_offset. */
static void build_pprof(pprof_profile *p, const tsample *samples, size_t n, uint64_t id_offset) {
    memset(p, 0, sizeof *p);
    p->strings = calloc(64, sizeof *p->strings);
    assert_non_null(p->strings);
    add_string(p, "");
    p->n_sample_types = 2;
    p->sample_types = calloc(2, sizeof *p->sample_types);
    p->sample_types[0].type = add_string(p, "samples");
    p->sample_types[0].unit = add_string(p, "count");
    p->sample_types[1].type = add_string(p, "cpu");
    p->sample_types[1].unit = add_string(p, "nanoseconds");
    int64_t file = add_string(p, "main.go");
    p->mappings = calloc(1, sizeof *p->mappings);
    p->n_mappings = 1;
    p->mappings[0] = (pprof_mapping){.id = 1 + id_offset,
                                     .memory_start = 0x400000,
                                     .memory_limit = 0x500000,
                                     .filename = add_string(p, "/usr/bin/app"),
                                     .build_id = add_string(p, "b1d"),
                                     .has_functions = true};
    const char *names[MAX_NAMES];
    size_t n_names = 0;
    size_t n_ids = 0;
    for (size_t i = 0; i < n; i++) {
        for (size_t f = 0; f < MAX_FRAMES && samples[i].frames[f] != NULL; f++, n_ids++) {
            size_t k = 0;
            while (k < n_names && strcmp(names[k], samples[i].frames[f]) != 0)
                k++;
            if (k == n_names)
                names[n_names++] = samples[i].frames[f];
        }
    }
    p->functions = calloc(n_names + 1, sizeof *p->functions);
    p->locations = calloc(n_names + 1, sizeof *p->locations);
    p->lines = calloc(n_names + 1, sizeof *p->lines);
    p->n_functions = p->n_locations = p->n_lines = n_names;
    for (size_t k = 0; k < n_names; k++) {
        int64_t name = add_string(p, names[k]);
        p->functions[k] = (pprof_function){k + 1 + id_offset, name, name, file, 10};
        p->lines[k] = (pprof_line){k + 1 + id_offset, (int64_t)(100 + k), 0};
        p->locations[k] = (pprof_location){.id = k + 1 + id_offset,
                                           .mapping_id = 1 + id_offset,
                                           .address = 0x401000 + 16 * k,
                                           .line_offset = (uint32_t)k,
                                           .line_count = 1};
    }
    p->samples = calloc(n + 1, sizeof *p->samples);
    p->sample_location_ids = calloc(n_ids + 1, sizeof *p->sample_location_ids);
    p->sample_values = calloc(2 * n + 1, sizeof *p->sample_values);
    p->n_samples = n;
    for (size_t i = 0; i < n; i++) {
        pprof_sample *s = &p->samples[i];
        s->location_offset = (uint32_t)p->n_sample_location_ids;
        s->value_offset = (uint32_t)(2 * i);
        for (size_t f = 0; f < MAX_FRAMES && samples[i].frames[f] != NULL; f++) {
            size_t k = 0;
            while (strcmp(names[k], samples[i].frames[f]) != 0)
                k++;
            p->sample_location_ids[p->n_sample_location_ids++] = k + 1 + id_offset;
            s->location_count++;
        }
        p->sample_values[2 * i] = samples[i].value;
        p->sample_values[2 * i + 1] = samples[i].value * 1000;
    }
    strata_error err;
    assert_int_equal(pprof_profile_build_indexes(p, &err), 0);
}

static profile_type cpu_type(void) {
    return (profile_type){"process_cpu", "samples", "count", "cpu", "nanoseconds", true};
}

static profile_type mem_type(void) {
    return (profile_type){"memory", "alloc_space", "bytes", "space", "bytes", false};
}

static void labels2(label_set *set, const char *n1, const char *v1, const char *n2,
                    const char *v2) {
    strata_error err;
    memset(set, 0, sizeof *set);
    assert_int_equal(label_set_add(set, n1, strlen(n1), v1, strlen(v1), &err), 0);
    if (n2 != NULL)
        assert_int_equal(label_set_add(set, n2, strlen(n2), v2, strlen(v2), &err), 0);
}

static const tsample profile_a[] = {
    {{"work", "handler", "main", NULL}, 5},
    {{"work", "handler", "main", NULL}, 3}, /* identical stack: summed to 8 */
    {{"idle", "main", NULL}, 0},            /* zero: dropped */
    {{"handler", "main", NULL}, 2},
};
static const tsample profile_b[] = {
    {{"work", "handler", "main", NULL}, 7},
    {{"gc", "runtime", NULL}, 1},
};
static const tsample profile_c[] = {
    {{"malloc", "alloc", "main", NULL}, 4096},
};

typedef struct fixture {
    strata_buffer data;
    block_meta meta;
    block_memory_source src;
} fixture;

/* Series after sorting: 0 memory{job=db}, 1 cpu{job=api,pod=api-1}, 2 cpu{job=api,pod=api-2}. */
static void write_fixture_rollups(fixture *fx, size_t page_size, bool rollups) {
    block_writer_options opt;
    block_writer_options_default(&opt);
    opt.page_size = page_size;
    opt.write_rollups = rollups;
    opt.tenant = "team-a";
    strata_error err;
    block_writer *w = block_writer_new(&opt, &err);
    assert_non_null(w);
    pprof_profile pa, pb, pc;
    build_pprof(&pa, profile_a, 4, 0);
    build_pprof(&pb, profile_b, 2, 100);
    build_pprof(&pc, profile_c, 1, 7);
    label_set api1, api2, db;
    labels2(&api1, "pod", "api-1", "job", "api"); /* unsorted on purpose */
    labels2(&api2, "job", "api", "pod", "api-2");
    labels2(&db, "job", "db", "empty", ""); /* empty value: ignored */
    profile_type cpu = cpu_type(), mem = mem_type();
    assert_int_equal(
        block_writer_add_profile(w, &api1, &cpu, 2000 * SEC, 10 * SEC, 1000, &pb, 0, &err), 0);
    assert_int_equal(
        block_writer_add_profile(w, &api1, &cpu, 1000 * SEC, 10 * SEC, 1000, &pa, 0, &err), 0);
    assert_int_equal(
        block_writer_add_profile(w, &api2, &cpu, 1500 * SEC, 10 * SEC, 1000, &pa, 1, &err), 0);
    assert_int_equal(block_writer_add_profile(w, &db, &mem, 1200 * SEC, 0, 512, &pc, 0, &err), 0);
    assert_int_equal(block_writer_profile_count(w), 4);
    assert_true(block_writer_memory_bytes(w) > 1000);
    strata_buffer_init(&fx->data);
    assert_int_equal(block_writer_finish(w, &fx->data, &fx->meta, &err), 0);
    block_writer_free(w);
    pprof_profile_free(&pa);
    pprof_profile_free(&pb);
    pprof_profile_free(&pc);
    label_set_free(&api1);
    label_set_free(&api2);
    label_set_free(&db);
    fx->src.data = fx->data.data;
    fx->src.len = fx->data.len;
}

static void write_fixture(fixture *fx, size_t page_size) {
    write_fixture_rollups(fx, page_size, true);
}

static void fixture_free(fixture *fx) {
    strata_buffer_free(&fx->data);
    block_meta_free(&fx->meta);
}

static block_reader *open_fixture(fixture *fx) {
    block_reader *r = NULL;
    strata_error err;
    int rc = block_reader_open(block_memory_fetch, &fx->src, fx->src.len, NULL, &r, &err);
    if (rc != 0)
        fail_msg("open failed: %s", err.message);
    return r;
}

/* "leaf;...;root" for a stack. */
static void stack_names(block_reader *r, uint32_t stack, char *out, size_t cap) {
    uint32_t locs[64];
    size_t depth;
    strata_error err;
    assert_int_equal(block_reader_stack(r, stack, locs, 64, &depth, &err), 0);
    out[0] = '\0';
    for (size_t i = 0; i < depth; i++) {
        block_location loc;
        assert_int_equal(block_reader_location(r, locs[i], &loc, &err), 0);
        assert_int_equal(loc.n_lines, 1);
        block_function f;
        assert_int_equal(block_reader_function(r, loc.lines[0].function_id, &f, &err), 0);
        if (i > 0)
            strncat(out, ";", cap - strlen(out) - 1);
        strncat(out, f.name, cap - strlen(out) - 1);
    }
}

/* ---- round trip -------------------------------------------------------------------------- */

static void test_roundtrip_series_and_profiles(void **state) {
    (void)state;
    fixture fx;
    write_fixture(&fx, 64 * 1024);
    block_reader *r = open_fixture(&fx);
    assert_int_equal(block_reader_series_count(r), 3);
    assert_string_equal(block_reader_series_type(r, 0)->name, "memory");
    assert_string_equal(block_reader_series_type(r, 0)->sample_type, "alloc_space");
    assert_false(block_reader_series_type(r, 0)->delta);
    assert_int_equal(block_reader_series_labels(r, 0)->count, 1);
    assert_string_equal(label_set_get(block_reader_series_labels(r, 0), "job"), "db");
    assert_null(label_set_get(block_reader_series_labels(r, 0), "empty"));
    assert_string_equal(block_reader_series_type(r, 1)->name, "process_cpu");
    assert_true(block_reader_series_type(r, 1)->delta);
    assert_string_equal(block_reader_series_type(r, 1)->period_unit, "nanoseconds");
    assert_string_equal(block_reader_series_labels(r, 1)->labels[0].name, "job");
    assert_string_equal(label_set_get(block_reader_series_labels(r, 1), "pod"), "api-1");
    assert_string_equal(label_set_get(block_reader_series_labels(r, 2), "pod"), "api-2");
    assert_null(block_reader_series_labels(r, 3));

    block_profile *p = NULL;
    size_t n = 0;
    strata_error err;
    assert_int_equal(block_reader_profiles(r, NULL, 0, INT64_MIN, INT64_MAX, &p, &n, &err), 0);
    assert_int_equal(n, 4);
    assert_int_equal(p[0].series_id, 0);
    assert_int_equal(p[0].time_ns, 1200 * SEC);
    assert_int_equal(p[0].total, 4096);
    assert_int_equal(p[0].period, 512);
    assert_int_equal(p[1].series_id, 1);
    assert_int_equal(p[1].time_ns, 1000 * SEC); /* sorted by time within the series */
    assert_int_equal(p[1].duration_ns, 10 * SEC);
    assert_int_equal(p[1].total, 10);
    assert_int_equal(p[1].sample_count, 2); /* 3 distinct stacks, one of them zero */
    assert_int_equal(p[2].series_id, 1);
    assert_int_equal(p[2].time_ns, 2000 * SEC);
    assert_int_equal(p[2].total, 8);
    assert_int_equal(p[3].series_id, 2);
    assert_int_equal(p[3].total, 10000); /* sample type index 1: values * 1000 */

    block_samples s = {0};
    assert_int_equal(block_reader_read_samples(r, &p[1], 1, &s, &err), 0);
    assert_int_equal(s.len, 2);
    assert_true(s.stacks[0] < s.stacks[1]);
    char names[256];
    int64_t work = 0, handler = 0;
    for (size_t i = 0; i < s.len; i++) {
        stack_names(r, s.stacks[i], names, sizeof names);
        if (strcmp(names, "work;handler;main") == 0)
            work = s.values[i];
        else if (strcmp(names, "handler;main") == 0)
            handler = s.values[i];
        else
            fail_msg("unexpected stack %s", names);
    }
    assert_int_equal(work, 8);
    assert_int_equal(handler, 2);

    /* a batch read appends in profile order */
    s.len = 0;
    assert_int_equal(block_reader_read_samples(r, p, n, &s, &err), 0);
    assert_int_equal(s.len, 1 + 2 + 2 + 2);
    stack_names(r, s.stacks[0], names, sizeof names);
    assert_string_equal(names, "malloc;alloc;main");
    assert_int_equal(s.values[0], 4096);
    /* dropped symbols are decoded again when asked for, and the memory goes with them */
    size_t with_symbols = block_reader_memory_bytes(r);
    block_reader_drop_symbols(r);
    assert_true(block_reader_memory_bytes(r) < with_symbols);
    stack_names(r, s.stacks[0], names, sizeof names);
    assert_string_equal(names, "malloc;alloc;main");
    block_samples_free(&s);
    free(p);
    block_reader_close(r);
    fixture_free(&fx);
}

static void test_symbols_deduplicated(void **state) {
    (void)state;
    fixture fx;
    write_fixture(&fx, 64 * 1024);
    block_reader *r = open_fixture(&fx);
    /* distinct frames: work handler main idle gc runtime malloc alloc */
    assert_int_equal(block_reader_row_count(r, BLOCK_TABLE_FUNCTIONS), 8);
    assert_int_equal(block_reader_row_count(r, BLOCK_TABLE_MAPPINGS), 1);
    /* locations: one per function per address; profile_c's start at different addresses for
     * main/alloc/malloc than a/b's (its own index order), so count what is distinct */
    uint64_t n_locations = block_reader_row_count(r, BLOCK_TABLE_LOCATIONS);
    assert_true(n_locations >= 8 && n_locations <= 11);
    /* stacks: main, main>handler, main>handler>work, main>idle, runtime, runtime>gc, and
     * profile c's main', main'>alloc, main'>alloc>malloc -- the tree shares prefixes */
    assert_int_equal(block_reader_row_count(r, BLOCK_TABLE_SAMPLES), 7);
    assert_int_equal(block_reader_row_count(r, BLOCK_TABLE_PROFILES), 4);
    strata_error err;
    block_mapping m;
    assert_int_equal(block_reader_mapping(r, 0, &m, &err), 0);
    assert_string_equal(m.file, "/usr/bin/app");
    assert_string_equal(m.build_id, "b1d");
    assert_int_equal(m.memory_start, 0x400000);
    assert_int_equal(m.flags, BLOCK_MAPPING_HAS_FUNCTIONS);
    block_function f;
    assert_int_equal(block_reader_function(r, 0, &f, &err), 0);
    assert_string_equal(f.file, "main.go");
    assert_int_equal(f.start_line, 10);
    assert_int_equal(block_reader_function(r, 99, &f, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    size_t depth;
    uint32_t loc;
    assert_int_equal(block_reader_stack(r, 0, &loc, 1, &depth, &err), 0);
    assert_int_equal(depth, 0);
    block_reader_close(r);
    fixture_free(&fx);
}

static void test_meta_from_writer(void **state) {
    (void)state;
    fixture fx;
    write_fixture(&fx, 64 * 1024);
    block_meta *m = &fx.meta;
    assert_int_equal(m->min_time_ms, 1000 * 1000);
    assert_int_equal(m->max_time_ms, 2000 * 1000 + 1);
    assert_int_equal(m->num_samples, 7);
    assert_int_equal(m->num_series, 3);
    assert_int_equal(m->num_profiles, 4);
    assert_int_equal(m->compaction_level, 1);
    assert_int_equal(m->n_sources, 1);
    assert_int_equal(ulid_compare(&m->sources[0], &m->id), 0);
    assert_string_equal(m->tenant, "team-a");
    assert_int_equal(m->n_files, 1);
    assert_string_equal(m->files[0].rel_path, "profiles.strata");
    assert_int_equal(m->files[0].size_bytes, fx.data.len);
    assert_int_equal(m->n_profile_types, 2);
    assert_string_equal(m->profile_types[0], "memory:alloc_space:bytes:space:bytes");
    assert_string_equal(m->profile_types[1], "process_cpu:samples:count:cpu:nanoseconds:delta");
    assert_int_equal(m->n_label_names, 2);
    assert_string_equal(m->label_names[0], "job");
    assert_string_equal(m->label_names[1], "pod");
    fixture_free(&fx);
}

/* ---- selection and pruning --------------------------------------------------------------- */

static void expect_select(block_reader *r, const char *text, const uint32_t *want, size_t n_want) {
    selector sel;
    strata_error err;
    if (selector_parse(text, &sel, &err) != 0)
        fail_msg("selector %s: %s", text, err.message);
    uint32_t *ids;
    size_t n;
    assert_int_equal(block_reader_select(r, &sel, &ids, &n, &err), 0);
    if (n != n_want)
        fail_msg("selector %s: %zu series, want %zu", text, n, n_want);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(ids[i], want[i]);
    free(ids);
    selector_free(&sel);
}

static void test_select(void **state) {
    (void)state;
    fixture fx;
    write_fixture(&fx, 64 * 1024);
    block_reader *r = open_fixture(&fx);
    expect_select(r, "{job=\"api\"}", (uint32_t[]){1, 2}, 2);
    expect_select(r, "{pod=~\"api-.*\"}", (uint32_t[]){1, 2}, 2);
    expect_select(r, "{pod=~\"api-2|api-3\"}", (uint32_t[]){2}, 1);
    expect_select(r, "{pod=\"\"}", (uint32_t[]){0}, 1);
    expect_select(r, "{pod!=\"\"}", (uint32_t[]){1, 2}, 2);
    expect_select(r, "{job!~\"a.*\"}", (uint32_t[]){0}, 1);
    expect_select(r, "{job=\"nope\"}", NULL, 0);
    expect_select(r, "{}", (uint32_t[]){0, 1, 2}, 3);
    expect_select(r, "process_cpu:samples:count:cpu:nanoseconds:delta{pod!=\"api-1\"}",
                  (uint32_t[]){2}, 1);
    expect_select(r, "memory:alloc_space:bytes:space:bytes", (uint32_t[]){0}, 1);
    block_reader_close(r);
    fixture_free(&fx);
}

/* 300 profiles of profile_a, one every 10 s, alternating between job=b (series 1: times 0, 20,
 * ..., 2980 s) and job=a (series 0: 10, 30, ... s), in 256-byte pages (many profile pages). */
static void write_timeline_block(strata_buffer *data, block_meta *meta) {
    block_writer_options opt;
    block_writer_options_default(&opt);
    opt.page_size = 256; /* many small pages */
    strata_error err;
    block_writer *w = block_writer_new(&opt, &err);
    assert_non_null(w);
    pprof_profile pa;
    build_pprof(&pa, profile_a, 4, 0);
    profile_type cpu = cpu_type();
    label_set l1, l2;
    labels2(&l1, "job", "a", NULL, NULL);
    labels2(&l2, "job", "b", NULL, NULL);
    for (int i = 0; i < 300; i++) {
        assert_int_equal(block_writer_add_profile(w, (i & 1) ? &l1 : &l2, &cpu, i * 10 * SEC,
                                                  10 * SEC, 1, &pa, 0, &err),
                         0);
    }
    assert_int_equal(block_writer_finish(w, data, meta, &err), 0);
    block_writer_free(w);
    pprof_profile_free(&pa);
    label_set_free(&l1);
    label_set_free(&l2);
}

static void test_range_query_reads_no_sample_pages(void **state) {
    (void)state;
    strata_error err;
    strata_buffer data = STRATA_BUFFER_INIT;
    block_meta meta;
    write_timeline_block(&data, &meta);
    block_memory_source src = {data.data, data.len};
    block_reader *r;
    assert_int_equal(block_reader_open(block_memory_fetch, &src, data.len, NULL, &r, &err), 0);
    assert_int_equal(block_reader_table_bytes_fetched(r, BLOCK_TABLE_SAMPLES), 0);
    assert_int_equal(block_reader_table_bytes_fetched(r, BLOCK_TABLE_PROFILES), 0);

    /* series 1 (job=b) in [1000 s, 1100 s]: profiles at 1000, 1020, ..., 1100 s */
    uint32_t series = 1;
    block_profile *p = NULL;
    size_t n = 0;
    assert_int_equal(block_reader_profiles(r, &series, 1, 1000 * SEC, 1100 * SEC, &p, &n, &err), 0);
    assert_int_equal(n, 6);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(p[i].series_id, 1);
        assert_int_equal(p[i].time_ns, (1000 + 20 * (int64_t)i) * SEC);
        assert_int_equal(p[i].total, 10);
    }
    assert_int_equal(block_reader_table_bytes_fetched(r, BLOCK_TABLE_SAMPLES), 0);
    uint64_t profile_bytes = block_reader_table_bytes_fetched(r, BLOCK_TABLE_PROFILES);
    assert_true(profile_bytes > 0);
    /* pruning by page min/max: far less than all profile pages were read */
    block_profile *all = NULL;
    size_t n_all = 0;
    block_reader *r2;
    assert_int_equal(block_reader_open(block_memory_fetch, &src, data.len, NULL, &r2, &err), 0);
    assert_int_equal(block_reader_profiles(r2, NULL, 0, INT64_MIN, INT64_MAX, &all, &n_all, &err),
                     0);
    assert_int_equal(n_all, 300);
    assert_true(profile_bytes * 2 < block_reader_table_bytes_fetched(r2, BLOCK_TABLE_PROFILES));

    block_samples s = {0};
    assert_int_equal(block_reader_read_samples(r, p, n, &s, &err), 0);
    assert_int_equal(s.len, 12);
    assert_true(block_reader_table_bytes_fetched(r, BLOCK_TABLE_SAMPLES) > 0);
    /* samples crossing page boundaries with 256-byte pages read back exactly */
    block_samples s_all = {0};
    assert_int_equal(block_reader_read_samples(r2, all, n_all, &s_all, &err), 0);
    assert_int_equal(s_all.len, 600);
    int64_t sum = 0;
    for (size_t i = 0; i < s_all.len; i++)
        sum += s_all.values[i];
    assert_int_equal(sum, 300 * 10);
    block_samples_free(&s);
    block_samples_free(&s_all);
    free(p);
    free(all);
    block_reader_close(r);
    block_reader_close(r2);
    strata_buffer_free(&data);
    block_meta_free(&meta);
}

/* Collects visited profiles; fails the visit at call fail_at (0: never). */
typedef struct visited_profiles {
    block_profile got[400];
    size_t n;
    size_t fail_at;
} visited_profiles;

static int collect_profile(void *arg, const block_profile *p, strata_error *err) {
    visited_profiles *v = arg;
    if (v->n == sizeof v->got / sizeof v->got[0])
        return strata_error_set(err, STRATA_INTERNAL, "too many profiles");
    v->got[v->n++] = *p;
    if (v->fail_at != 0 && v->n == v->fail_at)
        return strata_error_set(err, STRATA_CANCELLED, "stop");
    return 0;
}

/* A memory source that records the bytes fetched while `record` is set and, while `damage` is
 * set, hands out those bytes with one flipped. */
typedef struct damaging_source {
    block_memory_source src;
    bool record, damage;
    uint64_t lo, hi; /* recorded: [lo, hi) */
} damaging_source;

static int damaging_fetch(void *ctx, uint64_t offset, uint64_t length, strata_buffer *out,
                          strata_error *err) {
    damaging_source *d = ctx;
    size_t before = out->len;
    if (block_memory_fetch(&d->src, offset, length, out, err) != 0)
        return -1;
    if (d->record) {
        d->lo = d->hi == 0 || offset < d->lo ? offset : d->lo;
        d->hi = offset + length > d->hi ? offset + length : d->hi;
    }
    if (d->damage && offset < d->hi && offset + length > d->lo) {
        uint64_t at = d->lo > offset ? d->lo - offset : 0;
        out->data[before + at] ^= 0x10;
    }
    return 0;
}

/* block_reader_visit_profiles hands out exactly block_reader_profiles' profiles, in order; a
 * callback's error stops it; and a damaged profile page late in the block fails the visit before
 * any profile is handed out (a query then leaves the block out whole). */
static void test_visit_profiles(void **state) {
    (void)state;
    strata_error err;
    strata_buffer data = STRATA_BUFFER_INIT;
    block_meta meta;
    write_timeline_block(&data, &meta);
    block_reader_options o;
    block_reader_options_default(&o);
    o.tail_guess = 64; /* pages fetched one by one, not from the tail read at open */
    damaging_source d = {.src = {data.data, data.len}};
    block_reader *r;
    assert_int_equal(block_reader_open(damaging_fetch, &d, data.len, &o, &r, &err), 0);
    uint32_t series = 1;
    int64_t ranges[][2] = {{INT64_MIN, INT64_MAX}, {1000 * SEC, 1100 * SEC}, {5 * SEC, 6 * SEC}};
    for (size_t k = 0; k < 3; k++) {
        for (int all = 0; all < 2; all++) {
            block_profile *want = NULL;
            size_t n = 0;
            assert_int_equal(block_reader_profiles(r, all ? NULL : &series, all ? 0 : 1,
                                                   ranges[k][0], ranges[k][1], &want, &n, &err),
                             0);
            visited_profiles v = {.n = 0};
            assert_int_equal(block_reader_visit_profiles(r, all ? NULL : &series, all ? 0 : 1,
                                                         ranges[k][0], ranges[k][1],
                                                         collect_profile, &v, &err),
                             0);
            assert_int_equal(v.n, n);
            if (n > 0)
                assert_memory_equal(v.got, want, n * sizeof *want);
            free(want);
        }
    }
    visited_profiles v = {.fail_at = 3};
    assert_int_equal(
        block_reader_visit_profiles(r, NULL, 0, INT64_MIN, INT64_MAX, collect_profile, &v, &err),
        -1);
    assert_int_equal(err.code, STRATA_CANCELLED);
    assert_int_equal(v.n, 3);
    block_reader_close(r);

    /* the pages holding job=b's last profiles (time 2800-2980 s), read alone, then damaged */
    assert_int_equal(block_reader_open(damaging_fetch, &d, data.len, &o, &r, &err), 0);
    block_profile *late = NULL;
    size_t n_late = 0;
    d.record = true;
    assert_int_equal(
        block_reader_profiles(r, &series, 1, 2800 * SEC, 2980 * SEC, &late, &n_late, &err), 0);
    d.record = false;
    assert_int_equal(n_late, 10);
    assert_true(d.hi > d.lo);
    free(late);
    block_reader_close(r);
    d.damage = true;
    assert_int_equal(block_reader_open(damaging_fetch, &d, data.len, &o, &r, &err), 0);
    v = (visited_profiles){.n = 0};
    assert_int_equal(
        block_reader_visit_profiles(r, &series, 1, INT64_MIN, INT64_MAX, collect_profile, &v, &err),
        -1);
    assert_int_equal(err.code, STRATA_DATA_LOSS);
    assert_int_equal(v.n, 0);
    block_reader_close(r);
    strata_buffer_free(&data);
    block_meta_free(&meta);
}

/* ---- symbolized path and writer errors --------------------------------------------------- */

static void test_symbolized_path(void **state) {
    (void)state;
    strata_error err;
    block_writer *w = block_writer_new(NULL, &err);
    profile_type cpu = cpu_type();
    label_set l;
    labels2(&l, "node", "n1", NULL, NULL);
    block_frame leaf = {"inner", "_Z5innerv", "a.cc", 12, 10, "/lib/libx.so", "bid", 0x10};
    block_frame root = {"main", "main", "a.cc", 3, 1, "/lib/libx.so", "bid", 0x20};
    block_frame stack[2] = {leaf, root};
    block_frame kernel[1] = {{"__x64_sys_read", NULL, NULL, 0, 0, NULL, NULL, 0xffff}};
    assert_int_equal(block_writer_add_sample(w, stack, 2, 1, &err), -1);
    assert_int_equal(err.code, STRATA_FAILED_PRECONDITION);
    for (int p = 0; p < 2; p++) {
        assert_int_equal(block_writer_begin_profile(w, &l, &cpu, (5 + p) * SEC, SEC, 7, &err), 0);
        assert_int_equal(block_writer_begin_profile(w, &l, &cpu, 0, 0, 0, &err), -1);
        assert_int_equal(block_writer_add_sample(w, stack, 2, 4, &err), 0);
        assert_int_equal(block_writer_add_sample(w, stack, 2, 6, &err), 0);
        assert_int_equal(block_writer_add_sample(w, kernel, 1, 0, &err), 0); /* dropped */
        assert_int_equal(block_writer_add_sample(w, kernel, 1, -3, &err), 0);
        assert_int_equal(block_writer_add_sample(w, NULL, 0, 2, &err), 0); /* empty stack */
        assert_int_equal(block_writer_end_profile(w, &err), 0);
    }
    assert_int_equal(block_writer_sample_count(w), 6);
    strata_buffer data = STRATA_BUFFER_INIT;
    block_meta meta;
    assert_int_equal(block_writer_finish(w, &data, &meta, &err), 0);
    assert_int_equal(block_writer_finish(w, &data, &meta, &err), -1);
    assert_int_equal(err.code, STRATA_FAILED_PRECONDITION);
    block_writer_free(w);
    block_memory_source src = {data.data, data.len};
    block_reader *r;
    assert_int_equal(block_reader_open(block_memory_fetch, &src, data.len, NULL, &r, &err), 0);
    assert_int_equal(block_reader_row_count(r, BLOCK_TABLE_FUNCTIONS), 3);
    assert_int_equal(block_reader_row_count(r, BLOCK_TABLE_LOCATIONS), 3);
    assert_int_equal(block_reader_row_count(r, BLOCK_TABLE_MAPPINGS), 1);
    assert_int_equal(block_reader_row_count(r, BLOCK_TABLE_STACKS), 3);
    block_profile *p = NULL;
    size_t n = 0;
    assert_int_equal(block_reader_profiles(r, NULL, 0, 6 * SEC, 6 * SEC, &p, &n, &err), 0);
    assert_int_equal(n, 1);
    assert_int_equal(p[0].total, 10 - 3 + 2);
    assert_int_equal(p[0].period, 7);
    block_samples s = {0};
    assert_int_equal(block_reader_read_samples(r, p, 1, &s, &err), 0);
    assert_int_equal(s.len, 3);
    assert_int_equal(s.stacks[0], 0); /* the empty stack sorts first */
    assert_int_equal(s.values[0], 2);
    char names[128];
    for (size_t i = 1; i < 3; i++) {
        stack_names(r, s.stacks[i], names, sizeof names);
        if (s.values[i] == 10)
            assert_string_equal(names, "inner;main");
        else
            assert_string_equal(names, "__x64_sys_read");
    }
    uint32_t locs[2];
    size_t depth;
    block_location loc;
    block_function f;
    block_mapping m;
    for (size_t i = 1; i < 3; i++) {
        if (s.values[i] != 10)
            continue;
        assert_int_equal(block_reader_stack(r, s.stacks[i], locs, 1, &depth, &err), 0);
        assert_int_equal(depth, 2); /* full depth even when cap is smaller */
        assert_int_equal(block_reader_location(r, locs[0], &loc, &err), 0);
        assert_int_equal(loc.address, 0x10);
        assert_true(loc.has_mapping);
        assert_int_equal(loc.lines[0].line, 12);
        assert_int_equal(block_reader_function(r, loc.lines[0].function_id, &f, &err), 0);
        assert_string_equal(f.system_name, "_Z5innerv");
        assert_int_equal(f.start_line, 10);
        assert_int_equal(block_reader_mapping(r, loc.mapping_id, &m, &err), 0);
        assert_string_equal(m.file, "/lib/libx.so");
    }
    block_samples_free(&s);
    free(p);
    block_reader_close(r);
    strata_buffer_free(&data);
    block_meta_free(&meta);
    label_set_free(&l);
}

static void test_writer_errors(void **state) {
    (void)state;
    strata_error err;
    block_writer *w = block_writer_new(NULL, &err);
    profile_type cpu = cpu_type();
    label_set l;
    labels2(&l, "__name__", "x", NULL, NULL);
    pprof_profile pa;
    build_pprof(&pa, profile_a, 4, 0);
    assert_int_equal(block_writer_add_profile(w, &l, &cpu, 0, 0, 0, &pa, 0, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "__name__"));
    label_set_free(&l);
    labels2(&l, "job", "x", NULL, NULL);
    assert_int_equal(block_writer_add_profile(w, &l, &cpu, 0, 0, 0, &pa, 2, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    profile_type unnamed = {"", "", "", "", "", false};
    assert_int_equal(block_writer_add_profile(w, &l, &unnamed, 0, 0, 0, &pa, 0, &err), -1);
    /* an undefined location id in a sample */
    pa.sample_location_ids[0] = 999;
    assert_int_equal(block_writer_add_profile(w, &l, &cpu, 0, 0, 0, &pa, 0, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "location 999"));
    strata_buffer data = STRATA_BUFFER_INIT;
    block_meta meta;
    assert_int_equal(block_writer_finish(w, &data, &meta, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_int_equal(data.len, 0);
    assert_int_equal(block_writer_profile_count(w), 0);
    block_writer_free(w);
    pprof_profile_free(&pa);
    label_set_free(&l);
}

/* The id path (block merger) checks every id against what the writer holds, and a rejected call
 * leaves the writer usable. */
static void test_writer_id_path_errors(void **state) {
    (void)state;
    strata_error err;
    block_writer *w = block_writer_new(NULL, &err);
    assert_non_null(w);
    uint32_t name, fn, loc, stack, leaf;
    assert_int_equal(block_writer_intern_string(w, "main", 4, &name, &err), 0);
    assert_int_equal(block_writer_intern_function(w, name, name, 99, 0, &fn, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "function file string id 99"));
    assert_int_equal(block_writer_intern_function(w, name, name, 0, 7, &fn, &err), 0);
    block_writer_line bad = {fn + 1, 3}, good = {fn, 3};
    assert_int_equal(block_writer_intern_location(w, 0x10, 0, 0, &bad, 1, &loc, &err), -1);
    assert_non_null(strstr(err.message, "line function 1 out of range"));
    assert_int_equal(block_writer_intern_location(w, 0x10, 1, 0, &good, 1, &loc, &err), -1);
    assert_non_null(strstr(err.message, "mapping 1 out of range"));
    assert_int_equal(block_writer_intern_location(w, 0x10, 0, 0, NULL, 1, &loc, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "1 lines but no line array"));
    /* no lines: an unsymbolized address, accepted as the pprof path accepts it */
    uint32_t bare, bare_again;
    assert_int_equal(block_writer_intern_location(w, 0x20, 0, 0, NULL, 0, &bare, &err), 0);
    assert_int_equal(block_writer_intern_location(w, 0x20, 0, 0, &good, 0, &bare_again, &err), 0);
    assert_int_equal(bare_again, bare);
    assert_int_equal(block_writer_intern_location(w, 0x10, 0, 0, &good, 1, &loc, &err), 0);
    assert_int_not_equal(loc, bare);
    assert_int_equal(block_writer_intern_stack(w, 0, loc + 1, &stack, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_int_equal(block_writer_intern_stack(w, 5, loc, &stack, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_int_equal(block_writer_intern_stack(w, 0, loc, &stack, &err), 0);
    assert_int_equal(stack, 1);
    uint32_t path[2] = {loc, loc};
    assert_int_equal(block_writer_intern_stack_path(w, path, 2, &leaf, &err), 0);
    assert_int_equal(leaf, 2);
    path[0] = loc + 7;
    assert_int_equal(block_writer_intern_stack_path(w, path, 2, &leaf, &err), -1);
    profile_type cpu = cpu_type();
    label_set l;
    labels2(&l, "job", "x", NULL, NULL);
    uint32_t stacks[2] = {2, 3};
    int64_t values[2] = {5, 6};
    assert_int_equal(
        block_writer_add_profile_stacks(w, &l, &cpu, SEC, SEC, 1, stacks, values, 2, &err), -1);
    assert_non_null(strstr(err.message, "sample stack 3 out of range"));
    assert_int_equal(block_writer_profile_count(w), 0);
    /* still usable: the same stack twice is summed, as on the other paths */
    stacks[1] = 2;
    assert_int_equal(
        block_writer_add_profile_stacks(w, &l, &cpu, SEC, SEC, 1, stacks, values, 2, &err), 0);
    assert_int_equal(block_writer_profile_count(w), 1);
    assert_int_equal(block_writer_sample_count(w), 1);
    strata_buffer data = STRATA_BUFFER_INIT;
    block_meta meta;
    assert_int_equal(block_writer_finish(w, &data, &meta, &err), 0);
    block_memory_source src = {data.data, data.len};
    block_reader *r;
    assert_int_equal(block_reader_open(block_memory_fetch, &src, data.len, NULL, &r, &err), 0);
    block_profile *profiles = NULL;
    size_t n = 0;
    assert_int_equal(block_reader_profiles(r, NULL, 0, INT64_MIN, INT64_MAX, &profiles, &n, &err),
                     0);
    assert_int_equal(n, 1);
    assert_int_equal(profiles[0].total, 11);
    char names[256];
    block_samples samples = {0};
    assert_int_equal(block_reader_read_samples(r, profiles, 1, &samples, &err), 0);
    assert_int_equal(samples.len, 1);
    stack_names(r, samples.stacks[0], names, sizeof names);
    assert_string_equal(names, "main;main");
    block_samples_free(&samples);
    free(profiles);
    block_reader_close(r);
    block_meta_free(&meta);
    strata_buffer_free(&data);
    block_writer_free(w);
    label_set_free(&l);
}

/* ---- locations without lines ------------------------------------------------------------- */

/* The eBPF agent's pprof for code it cannot symbolize: locations with an address and a mapping but
 * no line (a stripped binary, [vdso]) or not even a mapping. Sample type samples/count; time_s
 * seconds after 2023-11-14. Encoded, so the test decodes it as the ingester does. Stacks (leaf
 * first): [0x401234, main] = 5, [vdso 0x7fff0a10, 0x401234, main] = 7, [0xdead] = 2. */
static void encode_lineless_pprof(strata_buffer *out, int64_t time_s) {
    static const char *const strings[] = {
        "",        "samples",           "count", "cpu",   "nanoseconds", "main",
        "main.go", "/usr/bin/stripped", "bid1",  "[vdso]"};
    pprof_string strs[10];
    for (int i = 0; i < 10; i++)
        strs[i] = str(strings[i]);
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
    p.time_nanos = (INT64_C(1700000000) + time_s) * SEC;
    p.duration_nanos = 10 * SEC;
    p.period_type = (pprof_value_type){3, 4};
    p.period = 10000000;
    strata_error err;
    assert_int_equal(pprof_encode(&p, true, out, &err), 0);
}

/* The leaf-first locations of a stack rendered as "0x401234@/usr/bin/stripped" for a location
 * without lines (with its mapping's file, or "-" without one) and the function name otherwise. */
static void stack_frames(block_reader *r, uint32_t stack, char *out, size_t cap) {
    uint32_t locs[16];
    size_t depth;
    strata_error err;
    assert_int_equal(block_reader_stack(r, stack, locs, 16, &depth, &err), 0);
    assert_true(depth <= 16);
    out[0] = '\0';
    for (size_t i = 0; i < depth; i++) {
        block_location loc;
        assert_int_equal(block_reader_location(r, locs[i], &loc, &err), 0);
        char frame[128];
        if (loc.n_lines == 0) {
            block_mapping m = {0};
            if (loc.has_mapping)
                assert_int_equal(block_reader_mapping(r, loc.mapping_id, &m, &err), 0);
            snprintf(frame, sizeof frame, "0x%llx@%s", (unsigned long long)loc.address,
                     loc.has_mapping ? m.file : "-");
        } else {
            block_function f;
            assert_int_equal(block_reader_function(r, loc.lines[0].function_id, &f, &err), 0);
            snprintf(frame, sizeof frame, "%s:%lld", f.name, (long long)loc.lines[0].line);
        }
        if (i > 0)
            strncat(out, ";", cap - strlen(out) - 1);
        strncat(out, frame, cap - strlen(out) - 1);
    }
}

/* A pprof whose locations have no lines goes in exactly as the ingester adds it (decoded, then
 * block_writer_add_profile_types) and reads back with each address and mapping intact. */
static void test_locations_without_lines_roundtrip(void **state) {
    (void)state;
    strata_error err;
    strata_buffer raw = STRATA_BUFFER_INIT;
    encode_lineless_pprof(&raw, 0);
    pprof_profile p;
    assert_int_equal(pprof_decode(raw.data, raw.len, NULL, &p, &err), 0);
    assert_int_equal(p.n_locations, 4);
    assert_int_equal(p.locations[0].line_count, 0);
    block_writer *w = block_writer_new(NULL, &err);
    assert_non_null(w);
    label_set l;
    labels2(&l, "comm", "stripped", NULL, NULL);
    profile_type cpu = cpu_type();
    size_t column = 0;
    for (int i = 0; i < 2; i++) /* twice: every symbol is de-duplicated */
        assert_int_equal(block_writer_add_profile_types(w, &l, &cpu, &column, 1, (10 + i) * SEC,
                                                        10 * SEC, 10000000, &p, &err),
                         0);
    strata_buffer data = STRATA_BUFFER_INIT;
    block_meta meta;
    assert_int_equal(block_writer_finish(w, &data, &meta, &err), 0);
    block_writer_free(w);
    block_memory_source src = {data.data, data.len};
    block_reader *r;
    assert_int_equal(block_reader_open(block_memory_fetch, &src, data.len, NULL, &r, &err), 0);
    assert_int_equal(block_reader_row_count(r, BLOCK_TABLE_LOCATIONS), 4);
    assert_int_equal(block_reader_row_count(r, BLOCK_TABLE_LINES), 1);
    assert_int_equal(block_reader_row_count(r, BLOCK_TABLE_MAPPINGS), 2);
    block_profile *profiles = NULL;
    size_t n = 0;
    assert_int_equal(block_reader_profiles(r, NULL, 0, INT64_MIN, INT64_MAX, &profiles, &n, &err),
                     0);
    assert_int_equal(n, 2);
    assert_int_equal(profiles[0].total, 14);
    block_samples s = {0};
    assert_int_equal(block_reader_read_samples(r, profiles, 1, &s, &err), 0);
    assert_int_equal(s.len, 3);
    int seen = 0;
    for (size_t i = 0; i < s.len; i++) {
        char frames[256];
        stack_frames(r, s.stacks[i], frames, sizeof frames);
        if (s.values[i] == 5) {
            assert_string_equal(frames, "0x401234@/usr/bin/stripped;main:7");
            seen |= 1;
        } else if (s.values[i] == 7) {
            assert_string_equal(frames, "0x7fff0a10@[vdso];0x401234@/usr/bin/stripped;main:7");
            seen |= 2;
        } else {
            assert_int_equal(s.values[i], 2);
            assert_string_equal(frames, "0xdead@-");
            seen |= 4;
        }
    }
    assert_int_equal(seen, 7);
    /* the stripped binary's mapping keeps every field */
    uint32_t locs[3];
    size_t depth;
    for (size_t i = 0; i < s.len; i++) {
        if (s.values[i] != 7)
            continue;
        assert_int_equal(block_reader_stack(r, s.stacks[i], locs, 3, &depth, &err), 0);
        block_location loc;
        block_mapping m;
        assert_int_equal(block_reader_location(r, locs[1], &loc, &err), 0);
        assert_int_equal(loc.address, 0x401234);
        assert_int_equal(loc.n_lines, 0);
        assert_false(loc.is_folded);
        assert_int_equal(block_reader_mapping(r, loc.mapping_id, &m, &err), 0);
        assert_int_equal(m.memory_start, 0x400000);
        assert_int_equal(m.memory_limit, 0x500000);
        assert_int_equal(m.file_offset, 0x1000);
        assert_string_equal(m.build_id, "bid1");
        assert_int_equal(block_reader_location(r, locs[0], &loc, &err), 0);
        assert_int_equal(block_reader_mapping(r, loc.mapping_id, &m, &err), 0);
        assert_int_equal(m.memory_start, 0x7fff0000);
        assert_string_equal(m.build_id, "");
    }
    block_samples_free(&s);
    free(profiles);
    block_reader_close(r);
    block_meta_free(&meta);
    strata_buffer_free(&data);
    strata_buffer_free(&raw);
    pprof_profile_free(&p);
    label_set_free(&l);
}

/* ---- corruption -------------------------------------------------------------------------- */

static int open_bytes(const uint8_t *data, size_t len, block_reader **r, strata_error *err) {
    static block_memory_source src;
    src.data = data;
    src.len = len;
    return block_reader_open(block_memory_fetch, &src, len, NULL, r, err);
}

static void test_corrupt_pages(void **state) {
    (void)state;
    fixture fx;
    write_fixture(&fx, 64 * 1024);
    uint8_t *copy = malloc(fx.data.len);
    size_t len = fx.data.len;
    strata_error err;
    block_reader *r;

    /* first page: the strings table, needed to open */
    memcpy(copy, fx.data.data, len);
    copy[BLOCK_HEADER_SIZE + 1] ^= 0x40;
    assert_int_equal(open_bytes(copy, len, &r, &err), -1);
    assert_int_equal(err.code, STRATA_DATA_LOSS);
    assert_non_null(strstr(err.message, "table strings, column value, page 0"));
    assert_non_null(strstr(err.message, "checksum"));

    /* last page before the footer: rollup_series.stack_count; open succeeds, reading a rollup
     * fails */
    memcpy(copy, fx.data.data, len);
    uint64_t footer_len = strata_load_u64le(copy + len - BLOCK_TRAILER_SIZE);
    size_t footer_start = len - BLOCK_TRAILER_SIZE - (size_t)footer_len;
    copy[footer_start - 1] ^= 0x01;
    assert_int_equal(open_bytes(copy, len, &r, &err), 0);
    block_samples s = {0};
    assert_int_equal(block_reader_series_rollup(r, 1, &s, &err), -1);
    assert_int_equal(err.code, STRATA_DATA_LOSS);
    assert_non_null(strstr(err.message, "table rollup_series, column stack_count, page 0"));
    block_reader_close(r);

    /* without rollups the last page is samples.value; reading samples fails */
    fixture plain;
    write_fixture_rollups(&plain, 64 * 1024, false);
    uint8_t *plain_copy = malloc(plain.data.len);
    size_t plain_len = plain.data.len;
    memcpy(plain_copy, plain.data.data, plain_len);
    uint64_t plain_footer = strata_load_u64le(plain_copy + plain_len - BLOCK_TRAILER_SIZE);
    plain_copy[plain_len - BLOCK_TRAILER_SIZE - (size_t)plain_footer - 1] ^= 0x01;
    assert_int_equal(open_bytes(plain_copy, plain_len, &r, &err), 0);
    block_profile *p = NULL;
    size_t n = 0;
    assert_int_equal(block_reader_profiles(r, NULL, 0, INT64_MIN, INT64_MAX, &p, &n, &err), 0);
    assert_int_equal(block_reader_read_samples(r, p, n, &s, &err), -1);
    assert_int_equal(err.code, STRATA_DATA_LOSS);
    assert_non_null(strstr(err.message, "table samples, column value, page 0"));
    block_samples_free(&s);
    free(p);
    block_reader_close(r);
    free(plain_copy);
    fixture_free(&plain);

    /* footer byte: checksum */
    memcpy(copy, fx.data.data, len);
    copy[footer_start + 2] ^= 0x10;
    assert_int_equal(open_bytes(copy, len, &r, &err), -1);
    assert_int_equal(err.code, STRATA_DATA_LOSS);
    assert_non_null(strstr(err.message, "footer checksum"));
    free(copy);
    fixture_free(&fx);
}

static void test_truncated_and_bad_trailer(void **state) {
    (void)state;
    fixture fx;
    write_fixture(&fx, 64 * 1024);
    size_t len = fx.data.len;
    uint8_t *copy = malloc(len);
    memcpy(copy, fx.data.data, len);
    strata_error err;
    block_reader *r;
    assert_int_equal(open_bytes(copy, 10, &r, &err), -1);
    assert_int_equal(err.code, STRATA_DATA_LOSS);
    assert_non_null(strstr(err.message, "minimum"));
    for (size_t cut = 1; cut < len; cut += (cut < 64 ? 1 : 97)) {
        assert_int_equal(open_bytes(copy, len - cut, &r, &err), -1);
        assert_int_equal(err.code, STRATA_DATA_LOSS);
    }
    copy[len - 1] ^= 0xff; /* magic */
    assert_int_equal(open_bytes(copy, len, &r, &err), -1);
    assert_int_equal(err.code, STRATA_DATA_LOSS);
    assert_non_null(strstr(err.message, "not a Strata block"));
    copy[len - 1] ^= 0xff;
    copy[len - 12] = 3; /* version */
    assert_int_equal(open_bytes(copy, len, &r, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "version 3 is not supported"));
    copy[len - 12] = 0;
    assert_int_equal(open_bytes(copy, len, &r, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    /* a block without sample labels claiming version 2 lacks its label set tables */
    copy[len - 12] = 2;
    assert_int_equal(open_bytes(copy, len, &r, &err), -1);
    assert_int_equal(err.code, STRATA_DATA_LOSS);
    assert_non_null(strstr(err.message, "label_set"));
    copy[len - 12] = 1;
    copy[len - 24] ^= 0x80; /* footer length */
    assert_int_equal(open_bytes(copy, len, &r, &err), -1);
    assert_int_equal(err.code, STRATA_DATA_LOSS);
    /* a tiny tail guess forces the second footer fetch */
    copy[len - 24] ^= 0x80;
    block_reader_options opt;
    block_reader_options_default(&opt);
    opt.tail_guess = 40;
    block_memory_source src = {copy, len};
    assert_int_equal(block_reader_open(block_memory_fetch, &src, len, &opt, &r, &err), 0);
    assert_int_equal(block_reader_series_count(r), 3);
    block_reader_close(r);
    free(copy);
    fixture_free(&fx);
}

/* ---- meta, marks, ulid, dump ------------------------------------------------------------- */

static void test_meta_json_roundtrip(void **state) {
    (void)state;
    fixture fx;
    write_fixture(&fx, 64 * 1024);
    block_meta_parent parents[2];
    strata_error err;
    for (int i = 0; i < 2; i++) {
        assert_int_equal(ulid_new_at(1000 + i, &parents[i].id, &err), 0);
        parents[i].min_time_ms = 10 * i;
        parents[i].max_time_ms = 10 * i + 5;
    }
    assert_int_equal(block_meta_set_parents(&fx.meta, parents, 2, &err), 0);
    fx.meta.compaction_level = 2;
    strata_buffer json = STRATA_BUFFER_INIT;
    assert_int_equal(block_meta_encode(&fx.meta, &json, &err), 0);
    assert_int_equal(strata_buffer_append_byte(&json, 0), 0);
    const char *text = (const char *)json.data;
    const char *fields[] = {"\"ulid\":\"",
                            "\"minTime\":1000000",
                            "\"maxTime\":2000001",
                            "\"stats\":{\"numSamples\":7",
                            "\"numSeries\":3",
                            "\"numProfiles\":4",
                            "\"compaction\":{\"level\":2,\"sources\":[\"",
                            "\"parents\":[{\"ulid\":\"",
                            "\"version\":1",
                            "\"strata\":{\"version\":1,\"tenant\":\"team-a\"",
                            "\"files\":[{\"rel_path\":\"profiles.strata\",\"size_bytes\":",
                            "\"profile_types\":[\"memory:alloc_space:bytes:space:bytes\"",
                            "\"label_names\":[\"job\",\"pod\"]"};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        if (strstr(text, fields[i]) == NULL)
            fail_msg("meta.json lacks %s: %s", fields[i], text);
    }
    block_meta back;
    assert_int_equal(block_meta_decode(text, json.len - 1, &back, &err), 0);
    assert_int_equal(ulid_compare(&back.id, &fx.meta.id), 0);
    assert_int_equal(back.min_time_ms, fx.meta.min_time_ms);
    assert_int_equal(back.max_time_ms, fx.meta.max_time_ms);
    assert_int_equal(back.num_samples, 7);
    assert_int_equal(back.compaction_level, 2);
    assert_int_equal(back.n_sources, 1);
    assert_int_equal(back.n_parents, 2);
    assert_int_equal(ulid_compare(&back.parents[1].id, &parents[1].id), 0);
    assert_int_equal(back.parents[1].max_time_ms, 15);
    assert_string_equal(back.tenant, "team-a");
    assert_int_equal(back.files[0].size_bytes, fx.data.len);
    assert_int_equal(back.n_profile_types, 2);
    assert_string_equal(back.label_names[1], "pod");
    block_meta copy;
    assert_int_equal(block_meta_copy(&copy, &back, &err), 0);
    assert_string_equal(copy.profile_types[1], back.profile_types[1]);
    block_meta_free(&copy);
    block_meta_free(&back);

    const char *bad[] = {
        "{}",
        "[1]",
        "{\"version\":2}",
        "{\"version\":1,\"ulid\":\"nope\"}",
        "{\"version\":1,\"ulid\":\"01ARZ3NDEKTSV4RRFFQ69G5FAV\",\"minTime\":\"x\"}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(block_meta_decode(bad[i], strlen(bad[i]), &back, &err), -1);
        assert_true(err.code == STRATA_INVALID_ARGUMENT);
    }
    /* an unknown strata format version */
    strata_buffer_reset(&json);
    fx.meta.format_version = 9;
    assert_int_equal(block_meta_encode(&fx.meta, &json, &err), 0);
    assert_int_equal(block_meta_decode((const char *)json.data, json.len, &back, &err), -1);
    assert_non_null(strstr(err.message, "format version 9"));
    strata_buffer_free(&json);
    fixture_free(&fx);
}

static void test_marks(void **state) {
    (void)state;
    strata_error err;
    block_deletion_mark dm = {.deletion_time = 1700000000, .details = "retention"};
    assert_int_equal(ulid_parse("01ARZ3NDEKTSV4RRFFQ69G5FAV", 26, &dm.id, &err), 0);
    strata_buffer json = STRATA_BUFFER_INIT;
    assert_int_equal(block_deletion_mark_encode(&dm, &json, &err), 0);
    assert_int_equal(strata_buffer_append_byte(&json, 0), 0);
    assert_string_equal((const char *)json.data,
                        "{\"id\":\"01ARZ3NDEKTSV4RRFFQ69G5FAV\",\"version\":1,\"details\":"
                        "\"retention\",\"deletion_time\":1700000000}");
    block_deletion_mark dm2;
    assert_int_equal(block_deletion_mark_decode((const char *)json.data, json.len - 1, &dm2, &err),
                     0);
    assert_int_equal(dm2.deletion_time, 1700000000);
    assert_string_equal(dm2.details, "retention");
    assert_int_equal(ulid_compare(&dm.id, &dm2.id), 0);
    block_deletion_mark_free(&dm2);
    const char *no_time = "{\"id\":\"01ARZ3NDEKTSV4RRFFQ69G5FAV\",\"version\":1}";
    assert_int_equal(block_deletion_mark_decode(no_time, strlen(no_time), &dm2, &err), -1);
    assert_non_null(strstr(err.message, "deletion_time"));

    block_no_compact_mark nc = {.id = dm.id, .no_compact_time = 42, .reason = "manual"};
    strata_buffer_reset(&json);
    assert_int_equal(block_no_compact_mark_encode(&nc, &json, &err), 0);
    assert_int_equal(strata_buffer_append_byte(&json, 0), 0);
    assert_non_null(strstr((const char *)json.data, "\"no_compact_time\":42"));
    assert_non_null(strstr((const char *)json.data, "\"reason\":\"manual\""));
    block_no_compact_mark nc2;
    assert_int_equal(
        block_no_compact_mark_decode((const char *)json.data, json.len - 1, &nc2, &err), 0);
    assert_int_equal(nc2.no_compact_time, 42);
    assert_string_equal(nc2.reason, "manual");
    block_no_compact_mark_free(&nc2);
    strata_buffer_free(&json);
}

static void test_ulid(void **state) {
    (void)state;
    strata_error err;
    ulid a, b;
    /* the ULID spec's example: ulid(1469918176385) = 01ARYZ6S41TSV4RRFFQ69G5FAV */
    assert_int_equal(ulid_parse("01ARYZ6S41TSV4RRFFQ69G5FAV", 26, &b, &err), 0);
    assert_int_equal(ulid_time_ms(&b), INT64_C(1469918176385));
    assert_int_equal(ulid_parse("01ARZ3NDEKTSV4RRFFQ69G5FAV", 26, &a, &err), 0);
    char text[ULID_STRING_LEN + 1];
    ulid_format(&a, text);
    assert_string_equal(text, "01ARZ3NDEKTSV4RRFFQ69G5FAV");
    assert_int_equal(ulid_parse("01arz3ndektsv4rrffq69g5fav", 26, &b, &err), 0);
    assert_int_equal(ulid_compare(&a, &b), 0);
    /* monotonic within one millisecond, ordered across */
    ulid prev;
    assert_int_equal(ulid_new_at(5000, &prev, &err), 0);
    for (int i = 0; i < 1000; i++) {
        ulid next;
        assert_int_equal(ulid_new_at(5000 + i / 100, &next, &err), 0);
        assert_true(ulid_compare(&prev, &next) < 0);
        char t1[27], t2[27];
        ulid_format(&prev, t1);
        ulid_format(&next, t2);
        assert_true(strcmp(t1, t2) < 0);
        assert_int_equal(ulid_time_ms(&next), 5000 + i / 100);
        prev = next;
    }
    assert_int_equal(ulid_new(&a, &err), 0);
    assert_false(ulid_is_zero(&a));
    assert_true(ulid_time_ms(&a) > INT64_C(1600000000000));
    assert_int_equal(ulid_parse("01ARZ3NDEKTSV4RRFFQ69G5FA", 25, &a, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_int_equal(ulid_parse("01ARZ3NDEKTSV4RRFFQ69G5FAU", 26, &a, &err), -1);
    assert_non_null(strstr(err.message, "character 26"));
    assert_int_equal(ulid_parse("81ARZ3NDEKTSV4RRFFQ69G5FAV", 26, &a, &err), -1);
    assert_int_equal(ulid_new_at(-1, &a, &err), -1);
    ulid zero;
    memset(&zero, 0, sizeof zero);
    ulid_format(&zero, text);
    assert_string_equal(text, "00000000000000000000000000");
    assert_true(ulid_is_zero(&zero));
}

static void test_dump(void **state) {
    (void)state;
    fixture fx;
    write_fixture(&fx, 64 * 1024);
    block_reader *r = open_fixture(&fx);
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    assert_non_null(out);
    strata_error err;
    assert_int_equal(block_dump(r, &fx.meta, out, NULL, &err), 0);
    fclose(out);
    const char *want[] = {"tenant: team-a",
                          "stats: 7 samples, 3 series, 4 profiles",
                          "process_cpu:samples:count:cpu:nanoseconds:delta {job=\"api\", "
                          "pod=\"api-1\"}",
                          "series 1 time 1000000000000 duration 10000000000 period 1000 total "
                          "10 samples 2",
                          "top stacks for process_cpu:samples:count:cpu:nanoseconds:delta",
                          "#1 value 8015",
                          "      work\n      handler\n      main\n",
                          "#1 value 4096",
                          "rollups: 3 series",
                          "series 1: 2 profiles, 3 stacks from row 0, total 18000",
                          "rollup_stacks              3 rows",
                          "data object format version: 1",
                          "label_sets            absent (no sample labels)",
                          "sample label sets: none"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        if (strstr(text, want[i]) == NULL)
            fail_msg("dump lacks \"%s\":\n%s", want[i], text);
    }
    free(text);
    block_reader_close(r);
    fixture_free(&fx);
}

/* ---- rollups ----------------------------------------------------------------------------- */

/* name -> value of a (stack, value) list, via the stack's "leaf;...;root" names. */
static int64_t value_of(block_reader *r, const block_samples *s, const char *want) {
    char names[256];
    for (size_t i = 0; i < s->len; i++) {
        stack_names(r, s->stacks[i], names, sizeof names);
        if (strcmp(names, want) == 0)
            return s->values[i];
    }
    fail_msg("no stack %s", want);
    return 0;
}

static void test_rollups_roundtrip(void **state) {
    (void)state;
    fixture fx;
    write_fixture(&fx, 64 * 1024);
    block_reader *r = open_fixture(&fx);
    strata_error err;
    assert_true(block_reader_has_rollups(r));
    assert_int_equal(block_reader_row_count(r, BLOCK_TABLE_ROLLUP_SERIES), 3);
    assert_int_equal(block_reader_row_count(r, BLOCK_TABLE_ROLLUP_STACKS), 3);
    assert_int_equal(block_reader_table_bytes_fetched(r, BLOCK_TABLE_ROLLUP_STACKS), 0);
    block_rollup_series info;
    /* only series 1 has two profiles; one-profile series have no rollup rows */
    const uint32_t want_profiles[] = {1, 2, 1}, want_stacks[] = {0, 3, 0}, want_first[] = {0, 0, 3};
    for (uint32_t i = 0; i < 3; i++) {
        assert_int_equal(block_reader_series_rollup_info(r, i, &info, &err), 0);
        assert_int_equal(info.profile_count, want_profiles[i]);
        assert_int_equal(info.stack_count, want_stacks[i]);
        assert_int_equal(info.first_stack, want_first[i]);
    }
    assert_int_equal(block_reader_series_rollup_info(r, 3, &info, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);

    block_samples s = {0};
    assert_int_equal(block_reader_series_rollup(r, 0, &s, &err), -1);
    assert_int_equal(err.code, STRATA_FAILED_PRECONDITION);
    /* cpu{pod=api-1}: two profiles of period 1000, samples:count, so values * period, summed */
    assert_int_equal(block_reader_series_rollup(r, 1, &s, &err), 0);
    assert_int_equal(s.len, 3);
    assert_true(s.stacks[0] < s.stacks[1] && s.stacks[1] < s.stacks[2]);
    assert_int_equal(value_of(r, &s, "work;handler;main"), (8 + 7) * 1000);
    assert_int_equal(value_of(r, &s, "handler;main"), 2 * 1000);
    assert_int_equal(value_of(r, &s, "gc;runtime"), 1 * 1000);
    assert_true(block_reader_table_bytes_fetched(r, BLOCK_TABLE_ROLLUP_STACKS) > 0);
    assert_int_equal(block_reader_table_bytes_fetched(r, BLOCK_TABLE_SAMPLES), 0);
    block_samples_free(&s);
    block_reader_close(r);
    fixture_free(&fx);
}

/* A block written without rollups (as before they existed) reads as before and says so. */
static void test_block_without_rollups(void **state) {
    (void)state;
    block_writer_options opt;
    block_writer_options_default(&opt);
    opt.write_rollups = false;
    strata_error err;
    block_writer *w = block_writer_new(&opt, &err);
    pprof_profile pa;
    build_pprof(&pa, profile_a, 4, 0);
    profile_type cpu = cpu_type();
    label_set l;
    labels2(&l, "job", "a", NULL, NULL);
    assert_int_equal(block_writer_add_profile(w, &l, &cpu, 5 * SEC, SEC, 3, &pa, 0, &err), 0);
    strata_buffer data = STRATA_BUFFER_INIT;
    block_meta meta;
    assert_int_equal(block_writer_finish(w, &data, &meta, &err), 0);
    block_writer_free(w);
    block_memory_source src = {data.data, data.len};
    block_reader *r;
    assert_int_equal(block_reader_open(block_memory_fetch, &src, data.len, NULL, &r, &err), 0);
    assert_false(block_reader_has_rollups(r));
    assert_int_equal(block_reader_row_count(r, BLOCK_TABLE_ROLLUP_STACKS), 0);
    block_rollup_series info;
    assert_int_equal(block_reader_series_rollup_info(r, 0, &info, &err), -1);
    assert_int_equal(err.code, STRATA_FAILED_PRECONDITION);
    block_samples s = {0};
    assert_int_equal(block_reader_series_rollup(r, 0, &s, &err), -1);
    block_profile *p = NULL;
    size_t n = 0;
    assert_int_equal(block_reader_profiles(r, NULL, 0, INT64_MIN, INT64_MAX, &p, &n, &err), 0);
    assert_int_equal(n, 1);
    assert_int_equal(block_reader_read_samples(r, p, n, &s, &err), 0);
    assert_int_equal(value_of(r, &s, "work;handler;main"), 8);
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    assert_int_equal(block_dump(r, NULL, out, NULL, &err), 0);
    fclose(out);
    assert_non_null(strstr(text, "rollups: none"));
    assert_non_null(strstr(text, "rollup_stacks         absent (optional)"));
    /* each present table's stored bytes, which add up to less than the object */
    uint64_t stored = 0;
    for (int id = 1; id <= BLOCK_TABLE_MAX; id++)
        stored += block_reader_table_stored_bytes(r, id);
    assert_true(block_reader_table_stored_bytes(r, BLOCK_TABLE_SAMPLES) > 0);
    assert_int_equal(block_reader_table_stored_bytes(r, BLOCK_TABLE_ROLLUP_STACKS), 0);
    assert_true(stored > 0 && stored < data.len);
    char line[128];
    snprintf(line, sizeof line, "samples           %10" PRIu64 " rows %12" PRIu64 " bytes",
             block_reader_row_count(r, BLOCK_TABLE_SAMPLES),
             block_reader_table_stored_bytes(r, BLOCK_TABLE_SAMPLES));
    assert_non_null(strstr(text, line));
    free(text);
    block_samples_free(&s);
    free(p);
    block_reader_close(r);
    strata_buffer_free(&data);
    block_meta_free(&meta);
    pprof_profile_free(&pa);
    label_set_free(&l);
}

/* Reading one series' rollup fetches only the pages holding its rows. */
static void test_rollup_reads_only_its_pages(void **state) {
    (void)state;
    block_writer_options opt;
    block_writer_options_default(&opt);
    opt.page_size = 256;
    strata_error err;
    block_writer *w = block_writer_new(&opt, &err);
    profile_type cpu = cpu_type();
    char name[32], fn[32];
    for (int series = 0; series < 40; series++) {
        label_set l;
        snprintf(name, sizeof name, "p%02d", series);
        labels2(&l, "pod", name, NULL, NULL);
        for (int t = 0; t < 3; t++) {
            assert_int_equal(
                block_writer_begin_profile(w, &l, &cpu, (series * 10 + t) * SEC, SEC, 2, &err), 0);
            for (int k = 0; k < 30; k++) {
                snprintf(fn, sizeof fn, "f%d_%d", series, k);
                block_frame frames[2] = {{fn, NULL, NULL, 0, 0, NULL, NULL, 0},
                                         {"main", NULL, NULL, 0, 0, NULL, NULL, 0}};
                assert_int_equal(block_writer_add_sample(w, frames, 2, k + t, &err), 0);
            }
            assert_int_equal(block_writer_end_profile(w, &err), 0);
        }
        label_set_free(&l);
    }
    strata_buffer data = STRATA_BUFFER_INIT;
    block_meta meta;
    assert_int_equal(block_writer_finish(w, &data, &meta, &err), 0);
    block_writer_free(w);
    block_memory_source src = {data.data, data.len};
    block_reader *r;
    assert_int_equal(block_reader_open(block_memory_fetch, &src, data.len, NULL, &r, &err), 0);
    /* stack f_k;main of series 7: k+0 + k+1 + k+2 over three profiles, times the period 2; k = 0
     * sums to 3 * 2 */
    block_samples s = {0};
    assert_int_equal(block_reader_series_rollup(r, 7, &s, &err), 0);
    assert_int_equal(s.len, 30);
    assert_int_equal(value_of(r, &s, "f7_0;main"), 6);
    assert_int_equal(value_of(r, &s, "f7_29;main"), (29 * 3 + 3) * 2);
    uint64_t one = block_reader_table_bytes_fetched(r, BLOCK_TABLE_ROLLUP_STACKS);
    assert_true(one > 0);
    for (uint32_t i = 0; i < 40; i++) {
        s.len = 0;
        assert_int_equal(block_reader_series_rollup(r, i, &s, &err), 0);
        assert_int_equal(s.len, 30);
    }
    uint64_t all = block_reader_table_bytes_fetched(r, BLOCK_TABLE_ROLLUP_STACKS);
    assert_true(one * 4 < all);
    assert_int_equal(block_reader_table_bytes_fetched(r, BLOCK_TABLE_SAMPLES), 0);
    block_samples_free(&s);
    block_reader_close(r);
    strata_buffer_free(&data);
    block_meta_free(&meta);
}

static int collect_row(void *ctx, uint32_t stack, uint32_t set, int64_t value, strata_error *err) {
    block_samples *s = ctx;
    (void)err;
    assert_true(s->len < s->cap);
    s->stacks[s->len] = stack;
    if (s->label_sets != NULL)
        s->label_sets[s->len] = set;
    else
        assert_int_equal(set, 0);
    s->values[s->len++] = value;
    return 0;
}

/* The builder: scaling, summing across profiles, dropping zero sums, wrapping like the merge. */
static void test_rollup_build(void **state) {
    (void)state;
    const uint32_t st_a[] = {1, 3, 4}, st_b[] = {3, 4}, st_c[] = {2};
    const int64_t v_a[] = {5, 7, INT64_MAX}, v_b[] = {-7, 2}, v_c[] = {9};
    block_rollup_profile in[] = {
        {0, 1, st_a, NULL, v_a, 3}, /* series 0: 1 -> 5, 3 -> 7 - 7 = 0 (dropped), 4 -> wraps */
        {0, 1, st_b, NULL, v_b, 2},
        {1, 3, st_c, NULL, v_c, 1},  /* series 1: one profile, no rollup */
        {3, 10, st_c, NULL, v_c, 1}, /* series 2: none; series 3: 9 * 10 twice */
        {3, 10, st_c, NULL, v_c, 1},
    };
    uint32_t stacks[8];
    int64_t values[8];
    block_samples rows = {stacks, values, NULL, 0, 8};
    block_rollup_series series[4];
    strata_error err;
    assert_int_equal(block_rollup_build(in, 5, 4, 5, collect_row, &rows, series, &err), 0);
    assert_int_equal(rows.len, 3);
    assert_int_equal(rows.stacks[0], 1);
    assert_int_equal(rows.values[0], 5);
    assert_int_equal(rows.stacks[1], 4);
    assert_int_equal(rows.values[1], INT64_MIN + 1); /* INT64_MAX + 2, wrapped */
    assert_int_equal(rows.stacks[2], 2);
    assert_int_equal(rows.values[2], 180);
    const uint32_t want_profiles[] = {2, 1, 0, 2}, want_stacks[] = {2, 0, 0, 1};
    const uint64_t want_first[] = {0, 2, 2, 2};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(series[i].profile_count, want_profiles[i]);
        assert_int_equal(series[i].stack_count, want_stacks[i]);
        assert_int_equal(series[i].first_stack, want_first[i]);
    }
    assert_true(block_rollup_scale("samples", "count"));
    assert_false(block_rollup_scale("cpu", "nanoseconds"));

    block_rollup_profile unsorted[] = {in[3], in[0]};
    rows.len = 0;
    assert_int_equal(block_rollup_build(unsorted, 2, 4, 5, collect_row, &rows, series, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_int_equal(block_rollup_build(in, 5, 4, 4, collect_row, &rows, series, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT); /* stack 4 out of range */
}

/* With BLOCK_FUZZ_SEED_DIR set, writes the fixture blocks there as the fuzzer's seed corpus:
 * fixture-N.strata without rollups (as blocks were before them), fixture-rollups-N.strata with. */
/* A pprof with thousands of samples in scrambled order (the writer radix-sorts them): the block
 * holds one sample per distinct stack, in ascending stack order, each with the sum of its
 * values. */
static void test_many_samples_sorted_and_summed(void **state) {
    (void)state;
    enum { DISTINCT = 3000, DUPLICATES = 100 };
    static char names[MAX_NAMES][8];
    for (int i = 0; i < MAX_NAMES; i++)
        snprintf(names[i], sizeof names[i], "f%02d", i);
    tsample *samples = calloc(DISTINCT + DUPLICATES, sizeof *samples);
    assert_non_null(samples);
    int64_t want_total = 0;
    for (size_t k = 0; k < DISTINCT + DUPLICATES; k++) {
        size_t i = k < DISTINCT ? (k * 1237) % DISTINCT : (k - DISTINCT) * 29; /* scrambled */
        samples[k].frames[0] = names[i % 32];
        samples[k].frames[1] = names[(i / 32) % 32];
        samples[k].frames[2] = names[i / 1024];
        samples[k].value = (int64_t)i + 1;
        want_total += samples[k].value;
    }
    pprof_profile pp;
    build_pprof(&pp, samples, DISTINCT + DUPLICATES, 0);
    strata_error err;
    block_writer *w = block_writer_new(NULL, &err);
    assert_non_null(w);
    profile_type cpu = cpu_type();
    assert_int_equal(block_writer_add_profile(w, NULL, &cpu, SEC, SEC, 1, &pp, 0, &err), 0);
    fixture fx;
    strata_buffer_init(&fx.data);
    assert_int_equal(block_writer_finish(w, &fx.data, &fx.meta, &err), 0);
    block_writer_free(w);
    fx.src.data = fx.data.data;
    fx.src.len = fx.data.len;
    block_reader *r = open_fixture(&fx);
    block_profile *p = NULL;
    size_t n = 0;
    assert_int_equal(block_reader_profiles(r, NULL, 0, INT64_MIN, INT64_MAX, &p, &n, &err), 0);
    assert_int_equal(n, 1);
    assert_int_equal(p[0].sample_count, DISTINCT);
    assert_int_equal(p[0].total, want_total);
    block_samples smp = {0};
    assert_int_equal(block_reader_read_samples(r, p, 1, &smp, &err), 0);
    assert_int_equal(smp.len, DISTINCT);
    for (size_t k = 0; k < smp.len; k++) {
        if (k > 0)
            assert_true(smp.stacks[k - 1] < smp.stacks[k]);
        char text[64];
        stack_names(r, smp.stacks[k], text, sizeof text);
        unsigned a, b, c;
        assert_int_equal(sscanf(text, "f%u;f%u;f%u", &a, &b, &c), 3);
        size_t i = a + 32 * b + 1024 * c;
        int64_t want = (int64_t)i + 1;
        if (i % 29 == 0 && i / 29 < DUPLICATES)
            want *= 2; /* the duplicates repeat stacks 0, 29, 58, ... */
        assert_int_equal(smp.values[k], want);
    }
    block_samples_free(&smp);
    free(p);
    block_reader_close(r);
    fixture_free(&fx);
    pprof_profile_free(&pp);
    free(samples);
}

/* ---- detach ------------------------------------------------------------------------------ */

static int compare_cstr_ptrs(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* One line per sample: its profile, then every frame (function, system name, file, lines,
 * mapping, address). Sorted, so blocks whose ids differ but whose content agrees render alike. */
static char *block_text(const strata_buffer *data) {
    block_memory_source src = {data->data, data->len};
    block_reader *r = NULL;
    strata_error err;
    if (block_reader_open(block_memory_fetch, &src, src.len, NULL, &r, &err) != 0)
        fail_msg("open failed: %s", err.message);
    block_profile *p = NULL;
    size_t n = 0;
    assert_int_equal(block_reader_profiles(r, NULL, 0, INT64_MIN, INT64_MAX, &p, &n, &err), 0);
    block_samples smp = {0};
    assert_int_equal(block_reader_read_samples(r, p, n, &smp, &err), 0);
    char **lines = calloc(smp.len + 1, sizeof *lines);
    assert_non_null(lines);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const profile_type *t = block_reader_series_type(r, p[i].series_id);
        const label_set *ls = block_reader_series_labels(r, p[i].series_id);
        for (uint32_t j = 0; j < p[i].sample_count; j++, k++) {
            strata_buffer b = STRATA_BUFFER_INIT;
            char head[512];
            snprintf(head, sizeof head,
                     "%s:%s %zu labels %s=%s t=%lld d=%lld p=%lld T=%lld v=%lld |", t->name,
                     t->sample_type, ls->count, ls->count ? ls->labels[0].name : "",
                     ls->count ? ls->labels[ls->count - 1].value : "", (long long)p[i].time_ns,
                     (long long)p[i].duration_ns, (long long)p[i].period, (long long)p[i].total,
                     (long long)smp.values[k]);
            assert_int_equal(strata_buffer_append(&b, head, strlen(head)), 0);
            uint32_t locs[64];
            size_t depth;
            assert_int_equal(block_reader_stack(r, smp.stacks[k], locs, 64, &depth, &err), 0);
            for (size_t d = 0; d < depth; d++) {
                block_location loc;
                block_mapping m = {0};
                assert_int_equal(block_reader_location(r, locs[d], &loc, &err), 0);
                if (loc.has_mapping)
                    assert_int_equal(block_reader_mapping(r, loc.mapping_id, &m, &err), 0);
                char frame[512];
                snprintf(frame, sizeof frame, " @%llx %s/%s/%llx", (unsigned long long)loc.address,
                         m.file ? m.file : "-", m.build_id ? m.build_id : "-",
                         (unsigned long long)m.memory_start);
                assert_int_equal(strata_buffer_append(&b, frame, strlen(frame)), 0);
                for (uint32_t l = 0; l < loc.n_lines; l++) {
                    block_function f;
                    assert_int_equal(block_reader_function(r, loc.lines[l].function_id, &f, &err),
                                     0);
                    snprintf(frame, sizeof frame, " %s/%s/%s:%lld:%lld", f.name, f.system_name,
                             f.file, (long long)f.start_line, (long long)loc.lines[l].line);
                    assert_int_equal(strata_buffer_append(&b, frame, strlen(frame)), 0);
                }
            }
            if (smp.label_sets != NULL && smp.label_sets[k] != 0) {
                const label_set *set;
                assert_int_equal(block_reader_label_set(r, smp.label_sets[k], &set, &err), 0);
                assert_int_equal(strata_buffer_append(&b, " ", 1), 0);
                assert_int_equal(label_set_format(set, &b), 0);
            }
            assert_int_equal(strata_buffer_append(&b, "", 1), 0);
            lines[k] = (char *)b.data;
        }
    }
    qsort(lines, k, sizeof *lines, compare_cstr_ptrs);
    strata_buffer out = STRATA_BUFFER_INIT;
    for (size_t i = 0; i < k; i++) {
        assert_int_equal(strata_buffer_append(&out, lines[i], strlen(lines[i])), 0);
        assert_int_equal(strata_buffer_append(&out, "\n", 1), 0);
        free(lines[i]);
    }
    assert_int_equal(strata_buffer_append(&out, "", 1), 0);
    free(lines);
    free(p);
    block_samples_free(&smp);
    block_reader_close(r);
    return (char *)out.data;
}

static uint64_t table_rows(const strata_buffer *data, int table) {
    block_memory_source src = {data->data, data->len};
    block_reader *r = NULL;
    strata_error err;
    assert_int_equal(block_reader_open(block_memory_fetch, &src, src.len, NULL, &r, &err), 0);
    uint64_t n = block_reader_row_count(r, table);
    block_reader_close(r);
    return n;
}

/* A detached block's locations are numbered by (mapping, address), those new to the dictionary
 * since the previous cut (origin above *known; 0 for the first block) after the others. Counts the
 * new ones in *added, sets *known to this block's dictionary location count, and returns how many
 * locations there are. */
/* known[0..2]: the dictionary's location, function and stack counts at the cut before (0 for
 * the first), updated to this block's. What is new since that cut comes last in each table, and
 * starts a row group of its own (a reader decodes groups whole). */
static uint64_t assert_locations_sorted(const strata_buffer *data, uint32_t known[3],
                                        uint64_t *added) {
    block_memory_source src = {data->data, data->len};
    block_reader *r = NULL;
    strata_error err;
    assert_int_equal(block_reader_open(block_memory_fetch, &src, src.len, NULL, &r, &err), 0);
    block_stack_origins o;
    assert_int_equal(block_reader_stack_origins(r, &o, &err), 0);
    assert_non_null(o.location_origin);
    uint64_t n = block_reader_row_count(r, BLOCK_TABLE_LOCATIONS), prev_mapping = 0, prev = 0;
    bool prev_new = false;
    uint64_t line_row = 0; /* the writer keeps lines in location order */
    *added = 0;
    for (uint32_t id = 0; id < n; id++) {
        block_location l;
        assert_int_equal(block_reader_location(r, id, &l, &err), 0);
        uint64_t mapping = l.has_mapping ? (uint64_t)l.mapping_id + 1 : 0;
        bool is_new = known[0] > 0 && o.location_origin[id] > known[0];
        *added += is_new;
        if (is_new && !prev_new && id > 0) {
            assert_true(block_reader_group_starts_at(r, BLOCK_TABLE_LOCATIONS, id));
            assert_true(block_reader_group_starts_at(r, BLOCK_TABLE_LINES, line_row));
        }
        line_row += l.n_lines;
        if (prev_new && !is_new)
            fail_msg("location %u, known to the dictionary before, after a new one", id);
        if (id > 0 && is_new == prev_new &&
            (mapping < prev_mapping || (mapping == prev_mapping && l.address < prev)))
            fail_msg("location %u (mapping %" PRIu64 ", address %#" PRIx64
                     ") after mapping %" PRIu64 ", address %#" PRIx64,
                     id, mapping, l.address, prev_mapping, prev);
        prev_mapping = mapping;
        prev = l.address;
        prev_new = is_new;
    }
    /* functions new since the cut before come after the others too */
    assert_non_null(o.function_origin);
    assert_int_equal(o.n_functions, block_reader_row_count(r, BLOCK_TABLE_FUNCTIONS));
    for (size_t f = 1; f < o.n_functions; f++) {
        if (known[1] > 0 && o.function_origin[f - 1] > known[1] && o.function_origin[f] <= known[1])
            fail_msg("function %zu, known to the dictionary before, after a new one", f);
        if (known[1] > 0 && o.function_origin[f - 1] <= known[1] && o.function_origin[f] > known[1])
            assert_true(block_reader_group_starts_at(r, BLOCK_TABLE_FUNCTIONS, f));
    }
    for (uint32_t s = 2; s <= o.n_stacks; s++) /* stack ids are 1-based, rows 0-based */
        if (known[2] > 0 && block_stack_origin(&o, s - 1) <= known[2] &&
            block_stack_origin(&o, s) > known[2])
            assert_true(block_reader_group_starts_at(r, BLOCK_TABLE_STACKS, s - 1));
    /* the first cut has groups only where pages filled (all three tables fit one page here) */
    if (known[0] == 0)
        assert_false(block_reader_group_starts_at(r, BLOCK_TABLE_FUNCTIONS, 1));
    known[0] = o.dictionary_locations;
    known[1] = o.dictionary_functions;
    known[2] = o.dictionary_stacks;
    block_reader_close(r);
    return n;
}

typedef struct detach_round {
    const tsample *samples;
    size_t n;
    uint64_t id_offset;
    const char *pod;
    int64_t time_s;
    size_t type_index;
} detach_round;

static void add_round(block_writer *w, const detach_round *rounds, size_t n) {
    strata_error err;
    profile_type cpu = cpu_type();
    for (size_t i = 0; i < n; i++) {
        pprof_profile pp;
        build_pprof(&pp, rounds[i].samples, rounds[i].n, rounds[i].id_offset);
        label_set ls;
        labels2(&ls, "pod", rounds[i].pod, "job", "api");
        assert_int_equal(block_writer_add_profile(w, &ls, &cpu, rounds[i].time_s * SEC, 10 * SEC,
                                                  1000, &pp, rounds[i].type_index, &err),
                         0);
        pprof_profile_free(&pp);
        label_set_free(&ls);
    }
}

static void finish_to(block_writer *w, strata_buffer *data) {
    block_meta meta;
    strata_error err;
    strata_buffer_init(data);
    if (block_writer_finish(w, data, &meta, &err) != 0)
        fail_msg("finish: %s", err.message);
    block_meta_free(&meta);
}

/* A long-lived writer cuts blocks with detach: each block reads exactly as a fresh writer's block
 * of the same profiles, holds no symbol, stack or series of the other blocks, and the dictionary
 * carries over (the second block's repeated symbols are not added again). */
static void test_detach_keeps_dictionary(void **state) {
    (void)state;
    static const tsample extra[] = {{{"flush", "storage", "main", NULL}, 6}};
    /* storage at a new address (build_pprof places frames by their order), in no location of
     * its block known before: a function known to the dictionary, first used after new ones */
    static const tsample late[] = {{{"zeta", "omega", "storage", NULL}, 2}};
    const detach_round first[] = {{profile_a, 4, 0, "api-1", 1000, 0},
                                  {profile_b, 2, 100, "api-2", 1001, 1}};
    const detach_round second[] = {{profile_b, 2, 300, "api-2", 1010, 0},
                                   {extra, 1, 50, "api-3", 1011, 0}};
    const detach_round third[] = {{profile_c, 1, 7, "api-1", 1020, 0},
                                  {late, 1, 70, "api-4", 1021, 0}};
    const detach_round *rounds[] = {first, second, third};
    const size_t counts[] = {2, 2, 2};
    strata_error err;
    block_writer *w = block_writer_new(NULL, &err);
    assert_non_null(w);
    block_writer *d = NULL;
    assert_int_equal(block_writer_detach(w, &d, &err), -1); /* nothing to detach */
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_null(d);
    uint32_t known[3] = {0, 0, 0};
    uint64_t added[3];
    for (size_t r = 0; r < 3; r++) {
        add_round(w, rounds[r], counts[r]);
        size_t before = block_writer_memory_bytes(w);
        assert_int_equal(block_writer_detach(w, &d, &err), 0);
        assert_non_null(d);
        assert_int_equal(block_writer_profile_count(w), 0);
        assert_int_equal(block_writer_sample_count(w), 0);
        assert_int_equal(block_writer_profile_count(d), counts[r]);
        assert_true(block_writer_memory_bytes(w) <= before);
        /* a detached block only finishes */
        profile_type cpu = cpu_type();
        assert_int_equal(block_writer_begin_profile(d, NULL, &cpu, 0, 0, 1, &err), -1);
        assert_int_equal(err.code, STRATA_FAILED_PRECONDITION);
        block_writer *again = NULL;
        assert_int_equal(block_writer_detach(d, &again, &err), -1);
        assert_null(again);
        strata_buffer detached, fresh;
        finish_to(d, &detached);
        block_writer_free(d);
        block_writer *f = block_writer_new(NULL, &err);
        assert_non_null(f);
        add_round(f, rounds[r], counts[r]);
        finish_to(f, &fresh);
        block_writer_free(f);
        char *a = block_text(&detached), *b = block_text(&fresh);
        assert_string_equal(a, b);
        assert_true(assert_locations_sorted(&detached, known, &added[r]) >= 2);
        assert_true(strlen(a) > 50);
        free(a);
        free(b);
        assert_int_equal(table_rows(&detached, BLOCK_TABLE_STACKS),
                         table_rows(&fresh, BLOCK_TABLE_STACKS));
        assert_int_equal(table_rows(&detached, BLOCK_TABLE_SERIES),
                         table_rows(&fresh, BLOCK_TABLE_SERIES));
        int tables[] = {BLOCK_TABLE_STRINGS, BLOCK_TABLE_MAPPINGS, BLOCK_TABLE_FUNCTIONS,
                        BLOCK_TABLE_LOCATIONS, BLOCK_TABLE_LINES};
        for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++)
            assert_true(table_rows(&detached, tables[t]) <= table_rows(&fresh, tables[t]));
        strata_buffer_free(&detached);
        strata_buffer_free(&fresh);
    }
    assert_int_equal(added[0], 0); /* the first cut: nothing is known before it */
    assert_true(added[1] > 0);     /* extra's frames */
    assert_true(added[2] > 0);     /* profile_c's */
    /* the third block names only profile_c's functions, although w holds every round's */
    add_round(w, third, 1);
    assert_int_equal(block_writer_detach(w, &d, &err), 0);
    strata_buffer data;
    finish_to(d, &data);
    block_writer_free(d);
    assert_int_equal(table_rows(&data, BLOCK_TABLE_FUNCTIONS), 3);
    assert_int_equal(table_rows(&data, BLOCK_TABLE_STACKS), 3);
    strata_buffer_free(&data);
    /* a finished writer does not detach */
    add_round(w, first, 1);
    finish_to(w, &data);
    strata_buffer_free(&data);
    assert_int_equal(block_writer_detach(w, &d, &err), -1);
    assert_int_equal(err.code, STRATA_FAILED_PRECONDITION);
    block_writer_free(w);
}

/* Blocks cut from one writer name one dictionary and, per stack, its origin there: stacks of two
 * blocks with one origin have the same frames, every block's origins rise with its stack ids, the
 * writer finishing itself names its own stacks, and a writer that never detached names none. */
static void test_detached_blocks_share_stack_origins(void **state) {
    (void)state;
    static const tsample extra[] = {{{"flush", "storage", "main", NULL}, 6}};
    const detach_round rounds[][2] = {
        {{profile_a, 4, 0, "api-1", 1000, 0}, {profile_b, 2, 100, "api-2", 1001, 0}},
        {{profile_b, 2, 300, "api-2", 1010, 0}, {extra, 1, 50, "api-3", 1011, 0}},
        {{profile_a, 4, 7, "api-1", 1020, 0}, {profile_b, 2, 9, "api-3", 1021, 0}},
    };
    strata_error err;
    block_writer *w = block_writer_new(NULL, &err);
    assert_non_null(w);
    strata_buffer data[4];
    block_memory_source src[4];
    block_reader *r[4];
    block_stack_origins o[4];
    for (size_t b = 0; b < 4; b++) {
        if (b < 3) {
            add_round(w, rounds[b], 2);
            block_writer *d = NULL;
            assert_int_equal(block_writer_detach(w, &d, &err), 0);
            finish_to(d, &data[b]);
            block_writer_free(d);
        } else { /* the dictionary writer itself, as the ingester finishes one that grew too big */
            add_round(w, rounds[0], 1);
            finish_to(w, &data[b]);
        }
        src[b] = (block_memory_source){data[b].data, data[b].len};
        assert_int_equal(
            block_reader_open(block_memory_fetch, &src[b], data[b].len, NULL, &r[b], &err), 0);
        assert_int_equal(block_reader_stack_origins(r[b], &o[b], &err), 0);
        assert_non_null(o[b].stacks);
        assert_int_equal(o[b].n_stacks, block_reader_row_count(r[b], BLOCK_TABLE_STACKS));
        assert_memory_equal(o[b].dictionary, o[0].dictionary, 16);
        assert_int_equal(block_stack_origin(&o[b], (uint32_t)(0)), 0);
        for (size_t s = 1; s <= o[b].n_stacks; s++) {
            assert_true(block_stack_origin(&o[b], (uint32_t)(s)) >
                        block_stack_origin(&o[b], (uint32_t)(s - 1)));
            assert_true(block_stack_origin(&o[b], (uint32_t)(s)) <= o[b].dictionary_stacks);
        }
    }
    assert_true(o[1].dictionary_stacks > o[0].dictionary_stacks); /* the dictionary grew */
    for (size_t s = 1; s <= o[3].n_stacks; s++)
        assert_int_equal(block_stack_origin(&o[3], (uint32_t)(s)), s); /* its own stacks */
    /* equal origins, equal frames; and blocks 0 and 2 (the same profiles) share every stack */
    size_t shared = 0;
    for (size_t a = 0; a < 4; a++) {
        for (size_t b = a + 1; b < 4; b++) {
            for (size_t i = 1; i <= o[a].n_stacks; i++) {
                for (size_t j = 1; j <= o[b].n_stacks; j++) {
                    if (block_stack_origin(&o[a], (uint32_t)(i)) !=
                        block_stack_origin(&o[b], (uint32_t)(j)))
                        continue;
                    char x[512], y[512];
                    stack_frames(r[a], (uint32_t)i, x, sizeof x);
                    stack_frames(r[b], (uint32_t)j, y, sizeof y);
                    assert_string_equal(x, y);
                    shared += a == 0 && b == 2;
                }
            }
        }
    }
    assert_int_equal(shared, o[0].n_stacks);
    assert_int_equal(o[2].n_stacks, o[0].n_stacks);
    /* locations: in range, distinct within a block, equal content under one origin */
    size_t shared_locations = 0;
    for (size_t a = 0; a < 4; a++) {
        assert_int_equal(o[a].n_locations, block_reader_row_count(r[a], BLOCK_TABLE_LOCATIONS));
        for (size_t b = a; b < 4; b++) {
            for (size_t i = 0; i < o[a].n_locations; i++) {
                assert_true(o[a].location_origin[i] >= 1);
                assert_true(o[a].location_origin[i] <= o[a].dictionary_locations);
                for (size_t j = a == b ? i + 1 : 0; j < o[b].n_locations; j++) {
                    if (o[a].location_origin[i] != o[b].location_origin[j])
                        continue;
                    assert_true(a != b); /* distinct within a block */
                    block_location x, y;
                    assert_int_equal(block_reader_location(r[a], (uint32_t)i, &x, &err), 0);
                    assert_int_equal(block_reader_location(r[b], (uint32_t)j, &y, &err), 0);
                    assert_int_equal(x.address, y.address);
                    assert_int_equal(x.n_lines, y.n_lines);
                    for (uint32_t l = 0; l < x.n_lines; l++) {
                        block_function fx, fy;
                        assert_int_equal(x.lines[l].line, y.lines[l].line);
                        assert_int_equal(
                            block_reader_function(r[a], x.lines[l].function_id, &fx, &err), 0);
                        assert_int_equal(
                            block_reader_function(r[b], y.lines[l].function_id, &fy, &err), 0);
                        assert_string_equal(fx.name, fy.name);
                    }
                    shared_locations += a == 0 && b == 2;
                }
            }
        }
    }
    assert_int_equal(shared_locations, o[0].n_locations);
    /* functions likewise; the dictionary writer itself names its own */
    size_t shared_functions = 0;
    for (size_t a = 0; a < 4; a++) {
        assert_non_null(o[a].function_origin);
        assert_int_equal(o[a].n_functions, block_reader_row_count(r[a], BLOCK_TABLE_FUNCTIONS));
        for (size_t b = a; b < 4; b++) {
            for (size_t i = 0; i < o[a].n_functions; i++) {
                assert_true(o[a].function_origin[i] >= 1);
                assert_true(o[a].function_origin[i] <= o[a].dictionary_functions);
                if (a == 3)
                    assert_int_equal(o[a].function_origin[i], i + 1);
                for (size_t j = a == b ? i + 1 : 0; j < o[b].n_functions; j++) {
                    if (o[a].function_origin[i] != o[b].function_origin[j])
                        continue;
                    assert_true(a != b);
                    block_function fx, fy;
                    assert_int_equal(block_reader_function(r[a], (uint32_t)i, &fx, &err), 0);
                    assert_int_equal(block_reader_function(r[b], (uint32_t)j, &fy, &err), 0);
                    assert_string_equal(fx.name, fy.name);
                    assert_string_equal(fx.system_name, fy.system_name);
                    assert_string_equal(fx.file, fy.file);
                    assert_int_equal(fx.start_line, fy.start_line);
                    shared_functions += a == 0 && b == 2;
                }
            }
        }
    }
    assert_int_equal(shared_functions, o[0].n_functions);
    assert_true(o[1].dictionary_functions > o[0].dictionary_functions);
    for (size_t b = 0; b < 4; b++) {
        block_reader_close(r[b]);
        strata_buffer_free(&data[b]);
    }
    block_writer_free(w);
    /* a writer that never detached: no origins */
    w = block_writer_new(NULL, &err);
    assert_non_null(w);
    add_round(w, rounds[0], 2);
    strata_buffer plain;
    finish_to(w, &plain);
    block_writer_free(w);
    block_reader *pr;
    assert_int_equal(open_bytes(plain.data, plain.len, &pr, &err), 0);
    block_stack_origins po;
    assert_int_equal(block_reader_stack_origins(pr, &po, &err), 0);
    assert_null(po.stacks);
    assert_int_equal(block_reader_row_count(pr, BLOCK_TABLE_STACK_ORIGINS), 0);
    block_reader_close(pr);
    strata_buffer_free(&plain);
}

/* Two blocks cut from one dictionary by the writer before function origins existed
 * (lib/block/testdata/detached-no-function-origins-{0,1}.strata, written at 5f8b45b by
 * test_detached_blocks_share_stack_origins): they read with their stack and location origins,
 * without function origins, and their dictionary's locations still name the same functions. */
static void test_blocks_without_function_origins(void **state) {
    (void)state;
    const char *root = getenv("STRATA_SOURCE_DIR");
    uint8_t bytes[2][4096];
    block_memory_source src[2];
    block_reader *r[2];
    block_stack_origins o[2];
    strata_error err;
    for (int b = 0; b < 2; b++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/lib/block/testdata/detached-no-function-origins-%d.strata",
                 root ? root : ".", b);
        FILE *f = fopen(path, "rb");
        if (f == NULL)
            fail_msg("cannot open %s (set STRATA_SOURCE_DIR)", path);
        size_t len = fread(bytes[b], 1, sizeof bytes[b], f);
        fclose(f);
        assert_true(len > 100 && len < sizeof bytes[b]);
        src[b] = (block_memory_source){bytes[b], len};
        assert_int_equal(block_reader_open(block_memory_fetch, &src[b], len, NULL, &r[b], &err), 0);
        assert_int_equal(block_reader_stack_origins(r[b], &o[b], &err), 0);
        assert_non_null(o[b].stacks);
        assert_non_null(o[b].location_origin);
        assert_null(o[b].function_origin);
        assert_int_equal(o[b].n_functions, 0);
        assert_int_equal(o[b].dictionary_functions, 0);
        assert_false(block_reader_has_table(r[b], BLOCK_TABLE_FUNCTION_ORIGINS));
    }
    assert_memory_equal(o[0].dictionary, o[1].dictionary, 16);
    size_t shared = 0;
    for (size_t i = 0; i < o[0].n_locations; i++) {
        for (size_t j = 0; j < o[1].n_locations; j++) {
            if (o[0].location_origin[i] != o[1].location_origin[j])
                continue;
            block_location x, y;
            block_function fx, fy;
            assert_int_equal(block_reader_location(r[0], (uint32_t)i, &x, &err), 0);
            assert_int_equal(block_reader_location(r[1], (uint32_t)j, &y, &err), 0);
            assert_int_equal(block_reader_function(r[0], x.lines[0].function_id, &fx, &err), 0);
            assert_int_equal(block_reader_function(r[1], y.lines[0].function_id, &fy, &err), 0);
            assert_string_equal(fx.name, fy.name);
            shared++;
        }
    }
    assert_true(shared >= 3); /* work, handler, main */
    for (int b = 0; b < 2; b++)
        block_reader_close(r[b]);
}

/* Cuts one block per round from writer w (add_round, then detach) into data[k]. */
static void detach_blocks(block_writer *w, const detach_round *rounds, size_t n,
                          strata_buffer *data) {
    strata_error err;
    for (size_t k = 0; k < n; k++) {
        add_round(w, &rounds[k], 1);
        block_writer *d = NULL;
        assert_int_equal(block_writer_detach(w, &d, &err), 0);
        finish_to(d, &data[k]);
        block_writer_free(d);
    }
}

/* Opens a block with origins over src and checks them: the empty stack's is 0, each stack's
 * above the one before and within the dictionary. */
static void open_with_origins(const strata_buffer *data, block_memory_source *src, block_reader **r,
                              block_stack_origins *o) {
    strata_error err;
    *src = (block_memory_source){data->data, data->len};
    assert_int_equal(block_reader_open(block_memory_fetch, src, data->len, NULL, r, &err), 0);
    assert_int_equal(block_reader_stack_origins(*r, o, &err), 0);
    assert_non_null(o->stacks);
    assert_int_equal(block_stack_origin(o, 0), 0);
    for (size_t s = 1; s <= o->n_stacks; s++) {
        assert_true(block_stack_origin(o, (uint32_t)s) > block_stack_origin(o, (uint32_t)(s - 1)));
        assert_true(block_stack_origin(o, (uint32_t)s) <= o->dictionary_stacks);
    }
}

/* Stacks i of [first, first + n): frames f<i % 10> > m<i / 10 % 10> > t<i / 100> > main, value 1
 * (names: f0..f9, m0..m9, t0..t9). */
static tsample *numbered_stacks(size_t first, size_t n, char names[][4]) {
    tsample *s = calloc(n, sizeof *s);
    assert_non_null(s);
    for (size_t i = 0; i < n; i++) {
        size_t k = first + i;
        s[i].frames[0] = names[k % 10];
        s[i].frames[1] = names[10 + k / 10 % 10];
        s[i].frames[2] = names[20 + k / 100];
        s[i].frames[3] = "main";
        s[i].value = 1;
    }
    return s;
}

/* Origins are read a page at a time (block_reader.c, load_origin_column): with 256-byte pages
 * the stack origins of blocks of some 600 stacks span several pages, and every origin still rises,
 * names the same frames in both blocks where the stacks are shared, and reads the same from a
 * second reader of the block. */
static void test_stack_origins_over_many_pages(void **state) {
    (void)state;
    static char names[30][4];
    for (int i = 0; i < 30; i++)
        snprintf(names[i], sizeof names[i], "%c%d", "fmt"[i / 10], i % 10);
    /* b: stacks 0..299 (as a's, whose names come first in both profiles: the fixture numbers
     * locations by first use) and 600..899 */
    tsample *a = numbered_stacks(0, 600, names), *b = numbered_stacks(0, 600, names);
    tsample *later = numbered_stacks(600, 300, names);
    memcpy(b + 300, later, 300 * sizeof *later);
    free(later);
    const detach_round rounds[2] = {{a, 600, 0, "api-1", 1000, 0}, {b, 600, 0, "api-1", 1010, 0}};
    block_writer_options wo;
    block_writer_options_default(&wo);
    wo.page_size = 256;
    strata_error err;
    block_writer *w = block_writer_new(&wo, &err);
    assert_non_null(w);
    strata_buffer data[2];
    block_memory_source src[3];
    block_reader *r[3];
    block_stack_origins o[3];
    detach_blocks(w, rounds, 2, data);
    for (size_t k = 0; k < 3; k++) {
        open_with_origins(&data[k < 2 ? k : 1], &src[k], &r[k], &o[k]);
        assert_true(o[k].n_stacks > 600); /* more than two pages of one-byte deltas */
    }
    assert_int_equal(o[2].n_stacks, o[1].n_stacks);
    for (size_t s = 0; s <= o[1].n_stacks; s++)
        assert_int_equal(block_stack_origin(&o[2], (uint32_t)s),
                         block_stack_origin(&o[1], (uint32_t)s));
    assert_memory_equal(o[2].location_origin, o[1].location_origin,
                        o[1].n_locations * sizeof *o[1].location_origin);
    /* the stacks both blocks hold (0..299) have one origin each, with the same frames */
    size_t shared = 0;
    for (size_t i = 1; i <= o[0].n_stacks; i++) {
        for (size_t j = 1; j <= o[1].n_stacks; j++) {
            if (block_stack_origin(&o[0], (uint32_t)(i)) !=
                block_stack_origin(&o[1], (uint32_t)(j)))
                continue;
            uint32_t pa, pb, ia, ib;
            block_location la, lb;
            block_function fa, fb;
            assert_int_equal(block_reader_stack_node(r[0], (uint32_t)i, &pa, &ia, &err), 0);
            assert_int_equal(block_reader_stack_node(r[1], (uint32_t)j, &pb, &ib, &err), 0);
            assert_int_equal(block_reader_location(r[0], ia, &la, &err), 0);
            assert_int_equal(block_reader_location(r[1], ib, &lb, &err), 0);
            assert_int_equal(block_reader_function(r[0], la.lines[0].function_id, &fa, &err), 0);
            assert_int_equal(block_reader_function(r[1], lb.lines[0].function_id, &fb, &err), 0);
            assert_string_equal(fa.name, fb.name);
            shared++;
        }
    }
    /* the 300 shared leaves, their 30 parents (t0..t2 > m0..m9), t0..t2 and main */
    assert_int_equal(shared, 300 + 30 + 3 + 1);
    for (size_t k = 0; k < 3; k++)
        block_reader_close(r[k]);
    for (size_t k = 0; k < 2; k++)
        strata_buffer_free(&data[k]);
    block_writer_free(w);
    free(a);
    free(b);
}

/* Stack origins are kept 16 bits from their chunk's first (block_reader.h); a chunk whose
 * origins spread wider keeps them whole. A dictionary of 111,111 stacks (every path of five
 * frames over ten names, under main), then a block holding one of its oldest stacks and stacks
 * new to it: that block's first chunk spans more than 65,535 dictionary ids. */
static void test_stack_origins_wide_chunks(void **state) {
    (void)state;
    static const char *const names[10] = {"n0", "n1", "n2", "n3", "n4",
                                          "n5", "n6", "n7", "n8", "n9"};
    size_t n = 100000;
    tsample *all = calloc(n, sizeof *all);
    assert_non_null(all);
    for (size_t i = 0; i < n; i++) {
        for (size_t d = 0, k = i; d < 5; d++, k /= 10)
            all[i].frames[d] = names[k % 10];
        all[i].frames[5] = "main";
        all[i].value = 1;
    }
    /* the oldest path (n0 x 5), then new leaves under it and under n9 x 4 */
    static const tsample later[] = {{{"n0", "n0", "n0", "n0", "n0", "main", NULL}, 5},
                                    {{"new", "n0", "n0", "n0", "n0", "n0", "main", NULL}, 7},
                                    {{"new", "n9", "n9", "n9", "n9", "n9", "main", NULL}, 11}};
    const detach_round rounds[2] = {{all, n, 0, "api-1", 1000, 0}, {later, 3, 0, "api-1", 1010, 0}};
    strata_error err;
    block_writer *w = block_writer_new(NULL, &err);
    assert_non_null(w);
    strata_buffer data[2];
    block_memory_source src[2];
    block_reader *r[2];
    block_stack_origins o[2];
    detach_blocks(w, rounds, 2, data);
    for (size_t k = 0; k < 2; k++)
        open_with_origins(&data[k], &src[k], &r[k], &o[k]);
    assert_int_equal(o[0].n_stacks, 111111);
    for (size_t s = 0; s <= o[0].n_stacks; s++) /* the dictionary's own order: dense, narrow */
        assert_int_equal(block_stack_origin(&o[0], (uint32_t)s), s);
    assert_int_equal(o[0].stacks->n_wide, 0);
    assert_int_equal(o[0].stacks->n_offsets, 111111 / BLOCK_ORIGIN_CHUNK + 1); /* one run a chunk */
    /* main, n0 x 5, n9 x 5 and the two new leaves: 13 stacks, whose origins run from 1 to past
     * 111,111 in one chunk */
    assert_int_equal(o[1].n_stacks, 13);
    assert_true(o[1].stacks->n_wide > 0);
    assert_true(o[1].stacks->chunks[0].first & BLOCK_ORIGIN_WIDE);
    assert_true(block_stack_origin(&o[1], 13) > 111111);
    size_t shared = 0;
    for (uint32_t j = 1; j <= o[1].n_stacks; j++) {
        uint32_t origin = block_stack_origin(&o[1], j);
        if (origin > o[0].n_stacks)
            continue; /* new to the dictionary */
        /* the same frames as the first block's stack with that origin (there, stack id = origin) */
        uint32_t la[8], lb[8];
        size_t da, db;
        assert_int_equal(block_reader_stack(r[0], origin, la, 8, &da, &err), 0);
        assert_int_equal(block_reader_stack(r[1], j, lb, 8, &db, &err), 0);
        assert_int_equal(da, db);
        for (size_t f = 0; f < da; f++) {
            block_location a, b;
            block_function fa, fb;
            assert_int_equal(block_reader_location(r[0], la[f], &a, &err), 0);
            assert_int_equal(block_reader_location(r[1], lb[f], &b, &err), 0);
            assert_int_equal(block_reader_function(r[0], a.lines[0].function_id, &fa, &err), 0);
            assert_int_equal(block_reader_function(r[1], b.lines[0].function_id, &fb, &err), 0);
            assert_string_equal(fa.name, fb.name);
        }
        shared++;
    }
    /* main and n0 x 5; n9 is another location here (the fixture numbers locations by first use,
     * and this profile uses n9 fourth), so its five stacks are new to the dictionary too */
    assert_int_equal(shared, 6);
    for (size_t k = 0; k < 2; k++) {
        block_reader_close(r[k]);
        strata_buffer_free(&data[k]);
    }
    block_writer_free(w);
    free(all);
}

/* ---- sample labels (format version 2) ------------------------------------------------------ */

/* Gives pprof sample i the labels kv: key, value pairs (a NULL value makes a numeric label
 * num=64 unit "bytes"), NULL-terminated. */
static void set_sample_labels(pprof_profile *p, size_t i, const char *const *kv) {
    if (p->sample_labels == NULL)
        p->sample_labels = calloc(64, sizeof *p->sample_labels);
    assert_non_null(p->sample_labels);
    pprof_sample *s = &p->samples[i];
    s->label_offset = (uint32_t)p->n_sample_labels;
    s->label_count = 0;
    for (size_t k = 0; kv[k] != NULL; k += 2) {
        pprof_label *l = &p->sample_labels[p->n_sample_labels++];
        l->key = add_string(p, kv[k]);
        if (kv[k + 1] != NULL) {
            l->str = add_string(p, kv[k + 1]);
        } else {
            l->num = 64;
            l->num_unit = add_string(p, "bytes");
        }
        s->label_count++;
    }
}

static const tsample profile_l[] = {
    {{"work", "handler", "main", NULL}, 5}, {{"work", "handler", "main", NULL}, 3},
    {{"work", "handler", "main", NULL}, 2}, {{"handler", "main", NULL}, 4},
    {{"work", "handler", "main", NULL}, 1}, {{"work", "handler", "main", NULL}, 9},
};

/* profile_l with labels: 0 and 2 endpoint=/a (summed: 7), 1 endpoint=/b, 3 none, 4 endpoint=/x
 * then endpoint=/b (the last wins) and span=7, plus a numeric label (dropped), 5 only a numeric
 * label and an empty value (no labels: with 3's stack? no, work's: 9 without labels). */
static void build_labelled_pprof(pprof_profile *p, uint64_t id_offset) {
    build_pprof(p, profile_l, 6, id_offset);
    const char *const a[] = {"endpoint", "/a", NULL};
    const char *const b[] = {"endpoint", "/b", NULL};
    const char *const none[] = {NULL};
    const char *const bs[] = {"endpoint", "/x", "span", "7", "bytes", NULL, "endpoint", "/b", NULL};
    const char *const numeric[] = {"bytes", NULL, "empty", "", NULL};
    set_sample_labels(p, 0, a);
    set_sample_labels(p, 1, b);
    set_sample_labels(p, 2, a);
    set_sample_labels(p, 3, none);
    set_sample_labels(p, 4, bs);
    set_sample_labels(p, 5, numeric);
}

/* label set text of id in r ("" for 0). */
static void set_text(block_reader *r, uint32_t id, char *out, size_t cap) {
    const label_set *set;
    strata_error err;
    assert_int_equal(block_reader_label_set(r, id, &set, &err), 0);
    strata_buffer b = STRATA_BUFFER_INIT;
    if (id != 0)
        assert_int_equal(label_set_format(set, &b), 0);
    assert_int_equal(strata_buffer_append(&b, "", 1), 0);
    snprintf(out, cap, "%s", (const char *)b.data);
    strata_buffer_free(&b);
}

/* Writes profile_l twice (two times) for cpu{job=api} through the pprof path (both sample types:
 * two series), and profile_a without labels for cpu{job=db}. */
static void write_labelled_block(strata_buffer *data, block_meta *meta) {
    strata_error err;
    block_writer *w = block_writer_new(NULL, &err);
    assert_non_null(w);
    pprof_profile pl, pa;
    build_labelled_pprof(&pl, 0);
    build_pprof(&pa, profile_a, 4, 50);
    label_set api, db;
    labels2(&api, "job", "api", NULL, NULL);
    labels2(&db, "job", "db", NULL, NULL);
    profile_type types[2] = {cpu_type(), cpu_type()};
    types[1].name = "process_cpu_ns";
    const size_t columns[2] = {0, 1};
    for (int64_t t = 1; t <= 2; t++)
        assert_int_equal(block_writer_add_profile_types(w, &api, types, columns, 2, t * 1000 * SEC,
                                                        10 * SEC, 1000, &pl, &err),
                         0);
    assert_int_equal(
        block_writer_add_profile(w, &db, &types[0], 1500 * SEC, 10 * SEC, 1000, &pa, 0, &err), 0);
    strata_buffer_init(data);
    assert_int_equal(block_writer_finish(w, data, meta, &err), 0);
    block_writer_free(w);
    pprof_profile_free(&pl);
    pprof_profile_free(&pa);
    label_set_free(&api);
    label_set_free(&db);
}

/* Sample labels survive a round trip: version 2, one label set per distinct combination (string
 * labels only, the last value of a repeated key), samples split by (stack, label set), the sets
 * per series, rollups kept apart per label set, label strings among the low string ids. */
static void test_sample_labels_roundtrip(void **state) {
    (void)state;
    strata_buffer data;
    block_meta meta;
    write_labelled_block(&data, &meta);
    assert_int_equal(meta.format_version, 2);
    block_memory_source src = {data.data, data.len};
    block_reader *r = NULL;
    strata_error err;
    assert_int_equal(block_reader_open(block_memory_fetch, &src, src.len, NULL, &r, &err), 0);
    assert_int_equal(block_reader_format_version(r), 2);
    assert_true(block_reader_has_sample_labels(r));
    assert_int_equal(block_reader_label_set_count(r), 3);
    char text[256];
    set_text(r, 1, text, sizeof text);
    assert_string_equal(text, "{endpoint=\"/a\"}");
    set_text(r, 2, text, sizeof text);
    assert_string_equal(text, "{endpoint=\"/b\"}");
    set_text(r, 3, text, sizeof text);
    assert_string_equal(text, "{endpoint=\"/b\", span=\"7\"}");
    const label_set *none;
    assert_int_equal(block_reader_label_set(r, 0, &none, &err), 0);
    assert_int_equal(none->count, 0);
    assert_int_equal(block_reader_label_set(r, 4, &none, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);

    /* series: 0 process_cpu{job=api}, 1 process_cpu{job=db}, 2 process_cpu_ns{job=api} */
    assert_int_equal(block_reader_series_count(r), 3);
    assert_string_equal(label_set_get(block_reader_series_labels(r, 1), "job"), "db");
    const uint32_t *ids;
    size_t n_ids;
    for (uint32_t s = 0; s < 3; s++) {
        assert_int_equal(block_reader_series_label_sets(r, s, &ids, &n_ids, &err), 0);
        assert_int_equal(n_ids, s == 1 ? 0 : 3);
        for (size_t i = 0; i < n_ids; i++)
            assert_int_equal(ids[i], i + 1);
    }
    block_profile *p = NULL;
    size_t n = 0;
    assert_int_equal(block_reader_profiles(r, NULL, 0, INT64_MIN, INT64_MAX, &p, &n, &err), 0);
    assert_int_equal(n, 5);
    assert_int_equal(p[0].series_id, 0);
    assert_int_equal(p[0].total, 24);
    assert_int_equal(p[0].sample_count, 5);
    block_samples s = {0};
    assert_int_equal(block_reader_read_samples(r, &p[0], 1, &s, &err), 0);
    assert_non_null(s.label_sets);
    char names[256], line[600];
    const char *want[] = {
        "handler;main 4", "work;handler;main 9", "work;handler;main{endpoint=\"/a\"} 7",
        "work;handler;main{endpoint=\"/b\"} 3", "work;handler;main{endpoint=\"/b\", span=\"7\"} 1"};
    bool seen[5] = {false};
    for (size_t i = 0; i < s.len; i++) {
        if (i > 0)
            assert_true(s.stacks[i - 1] < s.stacks[i] ||
                        (s.stacks[i - 1] == s.stacks[i] && s.label_sets[i - 1] < s.label_sets[i]));
        stack_names(r, s.stacks[i], names, sizeof names);
        set_text(r, s.label_sets[i], text, sizeof text);
        snprintf(line, sizeof line, "%s%s %lld", names, text, (long long)s.values[i]);
        size_t k = 0;
        while (k < 5 && strcmp(want[k], line) != 0)
            k++;
        if (k == 5)
            fail_msg("unexpected sample %s", line);
        seen[k] = true;
    }
    for (size_t k = 0; k < 5; k++)
        assert_true(seen[k]);
    /* a profile without labels in a version 2 block: every row's set is 0 */
    s.len = 0;
    assert_int_equal(p[2].series_id, 1);
    assert_int_equal(block_reader_read_samples(r, &p[2], 1, &s, &err), 0);
    assert_int_equal(s.len, 2);
    assert_int_equal(s.label_sets[0] + s.label_sets[1], 0);

    /* rollups: per (stack, label set), over both profiles, values * period (samples:count) */
    s.len = 0;
    assert_int_equal(block_reader_series_rollup(r, 0, &s, &err), 0);
    assert_int_equal(s.len, 5);
    for (size_t i = 0; i < s.len; i++) {
        stack_names(r, s.stacks[i], names, sizeof names);
        set_text(r, s.label_sets[i], text, sizeof text);
        if (strcmp(names, "work;handler;main") == 0 && strcmp(text, "{endpoint=\"/a\"}") == 0)
            assert_int_equal(s.values[i], 2 * 7 * 1000);
        if (strcmp(names, "handler;main") == 0)
            assert_int_equal(s.values[i], 2 * 4 * 1000);
    }
    block_samples_free(&s);
    /* sample label strings sort among the series' strings, before every symbol string */
    uint64_t endpoint = UINT64_MAX, work = UINT64_MAX;
    for (uint32_t id = 0; id < block_reader_row_count(r, BLOCK_TABLE_STRINGS); id++) {
        const char *str;
        assert_int_equal(block_reader_string(r, id, &str, NULL, &err), 0);
        if (strcmp(str, "/b") == 0)
            endpoint = id;
        if (strcmp(str, "work") == 0)
            work = id;
    }
    assert_true(endpoint < work);
    /* the dump shows the sets and the labelled top stacks */
    char *dump = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&dump, &len);
    assert_non_null(out);
    assert_int_equal(block_dump(r, &meta, out, NULL, &err), 0);
    fclose(out);
    const char *want_dump[] = {"data object format version: 2", "sample label sets: 3",
                               "  3 {endpoint=\"/b\", span=\"7\"}", "series 0 uses 1 2 3",
                               "labels {endpoint=\"/a\"}"};
    for (size_t i = 0; i < sizeof want_dump / sizeof want_dump[0]; i++)
        if (strstr(dump, want_dump[i]) == NULL)
            fail_msg("dump lacks \"%s\":\n%s", want_dump[i], dump);
    free(dump);
    free(p);
    block_reader_close(r);
    strata_buffer_free(&data);
    block_meta_free(&meta);
}

/* block_dump's text without the lines that count bytes (tables' stored sizes). */
static char *dump_without_bytes(block_reader *r) {
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    assert_non_null(out);
    strata_error err;
    assert_int_equal(block_dump(r, NULL, out, NULL, &err), 0);
    fclose(out);
    char *kept = malloc(len + 1), *w = kept;
    assert_non_null(kept);
    for (char *line = text; *line != '\0';) {
        char *end = strchr(line, '\n');
        size_t n = end == NULL ? strlen(line) : (size_t)(end - line + 1);
        char saved = line[n];
        line[n] = '\0';
        if (strstr(line, " bytes") == NULL) {
            memcpy(w, line, n);
            w += n;
        }
        line[n] = saved;
        line += n;
    }
    *w = '\0';
    free(text);
    return kept;
}

/* A block written by the version 1 writer (lib/block/testdata/v1-fixture.strata, the fixture block
 * with rollups as written before sample labels existed) reads as before, and today's writer writes
 * the same profiles, which have no sample labels, as the same version 1 content: no cost. (Until
 * the writer chose DELTA for three columns it wrote them byte for byte the same.) */
static void test_version1_block_readable_and_unchanged(void **state) {
    (void)state;
    const char *root = getenv("STRATA_SOURCE_DIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/lib/block/testdata/v1-fixture.strata", root ? root : ".");
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        fail_msg("cannot open %s (set STRATA_SOURCE_DIR)", path);
    uint8_t old[4096];
    size_t len = fread(old, 1, sizeof old, f);
    fclose(f);
    assert_true(len > 100 && len < sizeof old);
    block_memory_source src = {old, len};
    block_reader *r = NULL;
    strata_error err;
    assert_int_equal(block_reader_open(block_memory_fetch, &src, len, NULL, &r, &err), 0);
    assert_int_equal(block_reader_format_version(r), 1);
    assert_false(block_reader_has_sample_labels(r));
    assert_int_equal(block_reader_label_set_count(r), 0);
    assert_int_equal(block_reader_series_count(r), 3);
    const uint32_t *ids;
    size_t n_ids = 9;
    assert_int_equal(block_reader_series_label_sets(r, 1, &ids, &n_ids, &err), 0);
    assert_int_equal(n_ids, 0);
    block_profile *p = NULL;
    size_t n = 0;
    assert_int_equal(block_reader_profiles(r, NULL, 0, INT64_MIN, INT64_MAX, &p, &n, &err), 0);
    assert_int_equal(n, 4);
    block_samples s = {0};
    assert_int_equal(block_reader_read_samples(r, p, n, &s, &err), 0);
    assert_int_equal(s.len, 7);
    assert_null(s.label_sets);
    assert_int_equal(p[1].total, 10);
    s.len = 0;
    assert_int_equal(block_reader_series_rollup(r, 1, &s, &err), 0);
    assert_int_equal(s.len, 3);
    assert_null(s.label_sets);
    block_samples_free(&s);
    free(p);

    /* Today's writer writes the same content as version 1: the same dump, but for the tables'
     * byte counts (its column encodings, a writer's choice, have changed since). */
    fixture fx;
    write_fixture(&fx, 64 * 1024);
    assert_int_equal(fx.meta.format_version, 1);
    block_memory_source now_src = {fx.data.data, fx.data.len};
    block_reader *now = NULL;
    assert_int_equal(block_reader_open(block_memory_fetch, &now_src, fx.data.len, NULL, &now, &err),
                     0);
    char *then_text = dump_without_bytes(r), *now_text = dump_without_bytes(now);
    assert_string_equal(now_text, then_text);
    free(then_text);
    free(now_text);
    block_reader_close(now);
    block_reader_close(r);
    fixture_free(&fx);
}

/* Detached blocks carry exactly their samples' label sets; a block without labels after one with
 * them is version 1 again. */
static void test_detach_with_sample_labels(void **state) {
    (void)state;
    strata_error err;
    block_writer *w = block_writer_new(NULL, &err);
    assert_non_null(w);
    pprof_profile pl, pa;
    build_labelled_pprof(&pl, 0);
    build_pprof(&pa, profile_a, 4, 50);
    label_set api;
    labels2(&api, "job", "api", NULL, NULL);
    profile_type cpu = cpu_type();
    assert_int_equal(block_writer_add_profile(w, &api, &cpu, 1000 * SEC, 0, 1, &pl, 0, &err), 0);
    block_writer *d;
    assert_int_equal(block_writer_detach(w, &d, &err), 0);
    strata_buffer first, fresh;
    finish_to(d, &first);
    block_writer_free(d);
    block_writer *f = block_writer_new(NULL, &err);
    assert_int_equal(block_writer_add_profile(f, &api, &cpu, 1000 * SEC, 0, 1, &pl, 0, &err), 0);
    finish_to(f, &fresh);
    block_writer_free(f);
    char *a = block_text(&first), *b = block_text(&fresh);
    assert_string_equal(a, b);
    assert_non_null(strstr(a, "{endpoint=\"/b\", span=\"7\"}"));
    free(a);
    free(b);
    assert_int_equal(table_rows(&first, BLOCK_TABLE_LABEL_SETS), 3);
    strata_buffer_free(&first);
    strata_buffer_free(&fresh);

    assert_int_equal(block_writer_add_profile(w, &api, &cpu, 2000 * SEC, 0, 1, &pa, 0, &err), 0);
    assert_int_equal(block_writer_detach(w, &d, &err), 0);
    strata_buffer second;
    block_meta meta;
    strata_buffer_init(&second);
    assert_int_equal(block_writer_finish(d, &second, &meta, &err), 0);
    assert_int_equal(meta.format_version, 1);
    block_meta_free(&meta);
    block_writer_free(d);
    block_memory_source src = {second.data, second.len};
    block_reader *r;
    assert_int_equal(block_reader_open(block_memory_fetch, &src, src.len, NULL, &r, &err), 0);
    assert_false(block_reader_has_sample_labels(r));
    block_reader_close(r);
    strata_buffer_free(&second);
    block_writer_free(w);
    pprof_profile_free(&pl);
    pprof_profile_free(&pa);
    label_set_free(&api);
}

/* The id path: sets by string ids, checked; samples with sets, summed per (stack, set). */
static void test_label_sets_id_path(void **state) {
    (void)state;
    strata_error err;
    block_writer *w = block_writer_new(NULL, &err);
    assert_non_null(w);
    uint32_t ep, a, b, region, eu, loc, fn, stack;
    assert_int_equal(block_writer_intern_string(w, "endpoint", 8, &ep, &err), 0);
    assert_int_equal(block_writer_intern_string(w, "/a", 2, &a, &err), 0);
    assert_int_equal(block_writer_intern_string(w, "/b", 2, &b, &err), 0);
    assert_int_equal(block_writer_intern_string(w, "region", 6, &region, &err), 0);
    assert_int_equal(block_writer_intern_string(w, "eu", 2, &eu, &err), 0);
    uint32_t set_a, set_b, set_ab, again, empty;
    const uint32_t pa[] = {ep, a}, pb[] = {ep, b};
    const uint32_t pab[] = {region, eu, ep, a}, pba[] = {ep, a, region, eu}; /* any order */
    assert_int_equal(block_writer_intern_label_set(w, pa, 1, &set_a, &err), 0);
    assert_int_equal(block_writer_intern_label_set(w, pb, 1, &set_b, &err), 0);
    assert_int_equal(block_writer_intern_label_set(w, pab, 2, &set_ab, &err), 0);
    assert_int_equal(block_writer_intern_label_set(w, pba, 2, &again, &err), 0);
    assert_int_equal(block_writer_intern_label_set(w, NULL, 0, &empty, &err), 0);
    assert_int_equal(set_a, 1);
    assert_int_equal(set_b, 2);
    assert_int_equal(set_ab, 3);
    assert_int_equal(again, 3);
    assert_int_equal(empty, 0);
    const uint32_t dup[] = {ep, a, ep, b}, blank[] = {ep, 0}, out_of_range[] = {ep, 999};
    assert_int_equal(block_writer_intern_label_set(w, dup, 2, &again, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_int_equal(block_writer_intern_label_set(w, blank, 1, &again, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_int_equal(block_writer_intern_label_set(w, out_of_range, 1, &again, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_int_equal(block_writer_intern_string(w, "f", 1, &fn, &err), 0);
    assert_int_equal(block_writer_intern_function(w, fn, fn, 0, 1, &fn, &err), 0);
    block_writer_line line = {fn, 3};
    assert_int_equal(block_writer_intern_location(w, 0x10, 0, 0, &line, 1, &loc, &err), 0);
    assert_int_equal(block_writer_intern_stack(w, 0, loc, &stack, &err), 0);
    const uint32_t stacks[] = {stack, stack, stack, stack};
    const uint32_t sets[] = {set_b, set_a, set_b, 0};
    const int64_t values[] = {1, 2, 3, 4};
    label_set api;
    labels2(&api, "job", "api", NULL, NULL);
    profile_type cpu = cpu_type();
    const uint32_t bad[] = {set_b, 7, 0, 0};
    assert_int_equal(
        block_writer_add_profile_samples(w, &api, &cpu, 1, 0, 1, stacks, bad, values, 4, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_int_equal(
        block_writer_add_profile_samples(w, &api, &cpu, 1, 0, 1, stacks, sets, values, 4, &err), 0);
    strata_buffer data;
    finish_to(w, &data);
    block_writer_free(w);
    block_memory_source src = {data.data, data.len};
    block_reader *r;
    assert_int_equal(block_reader_open(block_memory_fetch, &src, src.len, NULL, &r, &err), 0);
    assert_int_equal(block_reader_label_set_count(r), 2); /* set_ab is used by no sample */
    block_profile *p = NULL;
    size_t n = 0;
    assert_int_equal(block_reader_profiles(r, NULL, 0, INT64_MIN, INT64_MAX, &p, &n, &err), 0);
    block_samples s = {0};
    assert_int_equal(block_reader_read_samples(r, p, 1, &s, &err), 0);
    assert_int_equal(s.len, 3);
    char text[128];
    const char *want[] = {"4", "{endpoint=\"/a\"} 2", "{endpoint=\"/b\"} 4"};
    for (size_t i = 0; i < 3; i++) {
        char row[160];
        set_text(r, s.label_sets[i], text, sizeof text);
        snprintf(row, sizeof row, "%s%s%lld", text, text[0] ? " " : "", (long long)s.values[i]);
        assert_string_equal(row, want[i]);
    }
    block_samples_free(&s);
    free(p);
    block_reader_close(r);
    strata_buffer_free(&data);
    label_set_free(&api);
}

/* The builder keeps (stack, label set) rows apart, sorted, and sums each across profiles. */
/* ---- spooled writer ---------------------------------------------------------------------- */

/* Adds the same input to w: three series in block order (job=a, b, c), each with profiles in time
 * order (one of them twice at one time), some with sample labels when labelled. */
static void add_spool_input(block_writer *w, bool labelled) {
    const char *jobs[] = {"a", "b", "c"};
    profile_type cpu = cpu_type();
    strata_error err;
    for (int j = 0; j < 3; j++) {
        label_set l;
        labels2(&l, "job", jobs[j], NULL, NULL);
        for (int t = 0; t < 5; t++) {
            pprof_profile p;
            if (labelled && (t + j) % 2 == 0)
                build_labelled_pprof(&p, (uint64_t)t * 100);
            else
                build_pprof(&p, t % 2 ? profile_a : profile_b, t % 2 ? 4 : 2, (uint64_t)t * 100);
            int64_t at = (1000 + (t < 4 ? t : 3)) * SEC;
            assert_int_equal(block_writer_add_profile(w, &l, &cpu, at, 10 * SEC, 7, &p, 0, &err),
                             0);
            pprof_profile_free(&p);
        }
        label_set_free(&l);
    }
}

static void read_file(int fd, strata_buffer *out) {
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    assert_int_equal(strata_buffer_reserve(out, (size_t)st.st_size), 0);
    assert_int_equal(pread(fd, out->data, (size_t)st.st_size, 0), st.st_size);
    out->len = (size_t)st.st_size;
}

static void assert_same_samples(const block_samples *a, const block_samples *b) {
    assert_int_equal(a->len, b->len);
    assert_memory_equal(a->stacks, b->stacks, a->len * sizeof *a->stacks);
    assert_memory_equal(a->values, b->values, a->len * sizeof *a->values);
    assert_int_equal(a->label_sets == NULL, b->label_sets == NULL);
    if (a->label_sets != NULL)
        assert_memory_equal(a->label_sets, b->label_sets, a->len * sizeof *a->label_sets);
}

/* Everything a reader can see of the two blocks is the same. */
static void assert_same_blocks(block_reader *x, block_reader *y) {
    strata_error err;
    assert_int_equal(block_reader_format_version(x), block_reader_format_version(y));
    assert_int_equal(block_reader_series_count(x), block_reader_series_count(y));
    assert_int_equal(block_reader_label_set_count(x), block_reader_label_set_count(y));
    block_profile *px = NULL, *py = NULL;
    size_t nx = 0, ny = 0;
    assert_int_equal(block_reader_profiles(x, NULL, 0, INT64_MIN, INT64_MAX, &px, &nx, &err), 0);
    assert_int_equal(block_reader_profiles(y, NULL, 0, INT64_MIN, INT64_MAX, &py, &ny, &err), 0);
    assert_int_equal(nx, ny);
    assert_memory_equal(px, py, nx * sizeof *px);
    block_samples sx = {0}, sy = {0};
    assert_int_equal(block_reader_read_samples(x, px, nx, &sx, &err), 0);
    assert_int_equal(block_reader_read_samples(y, py, ny, &sy, &err), 0);
    assert_same_samples(&sx, &sy);
    for (uint32_t i = 0; i < block_reader_series_count(x); i++) {
        assert_int_equal(
            label_set_compare(block_reader_series_labels(x, i), block_reader_series_labels(y, i)),
            0);
        sx.len = sy.len = 0;
        assert_int_equal(block_reader_series_rollup(x, i, &sx, &err), 0);
        assert_int_equal(block_reader_series_rollup(y, i, &sy, &err), 0);
        assert_same_samples(&sx, &sy);
        const uint32_t *ix, *iy;
        size_t kx = 0, ky = 0;
        assert_int_equal(block_reader_series_label_sets(x, i, &ix, &kx, &err), 0);
        assert_int_equal(block_reader_series_label_sets(y, i, &iy, &ky, &err), 0);
        assert_int_equal(kx, ky);
        if (kx > 0)
            assert_memory_equal(ix, iy, kx * sizeof *ix);
    }
    for (uint32_t id = 1; id <= block_reader_label_set_count(x); id++) {
        char tx[256], ty[256];
        set_text(x, id, tx, sizeof tx);
        set_text(y, id, ty, sizeof ty);
        assert_string_equal(tx, ty);
    }
    char *dx = dump_without_bytes(x), *dy = dump_without_bytes(y);
    assert_string_equal(dx, dy);
    free(dx);
    free(dy);
    block_samples_free(&sx);
    block_samples_free(&sy);
    free(px);
    free(py);
}

/* A spooled writer (small pages, so every table has many row groups) writes a block a reader
 * cannot tell from the one the in-memory writer writes of the same input, with and without
 * sample labels; without them it is version 1 although its label_set pages were spooled. */
static void test_spooled_writer_writes_the_same_block(void **state) {
    (void)state;
    for (int labelled = 0; labelled <= 1; labelled++) {
        strata_error err;
        block_writer_options o;
        block_writer_options_default(&o);
        o.page_size = 256;
        block_writer *mem = block_writer_new(&o, &err);
        assert_non_null(mem);
        FILE *spool = tmpfile();
        assert_non_null(spool);
        block_writer *sp = block_writer_new_spooled(&o, fileno(spool), &err);
        assert_non_null(sp);
        add_spool_input(mem, labelled);
        add_spool_input(sp, labelled);
        strata_buffer a = STRATA_BUFFER_INIT, b = STRATA_BUFFER_INIT;
        block_meta ma, mb;
        assert_int_equal(block_writer_finish(mem, &a, &ma, &err), 0);
        assert_int_equal(block_writer_finish(sp, &b, &mb, &err), 0);
        assert_int_equal(b.len, 0); /* the spooled block is in the file */
        read_file(fileno(spool), &b);
        assert_int_equal(mb.files[0].size_bytes, b.len);
        assert_int_equal(mb.format_version, labelled ? 2 : 1);
        assert_int_equal(ma.format_version, mb.format_version);
        assert_int_equal(ma.num_samples, mb.num_samples);
        assert_int_equal(ma.num_profiles, mb.num_profiles);
        assert_int_equal(ma.num_series, mb.num_series);
        assert_int_equal(ma.min_time_ms, mb.min_time_ms);
        assert_int_equal(ma.max_time_ms, mb.max_time_ms);
        block_memory_source sa = {a.data, a.len}, sb = {b.data, b.len};
        block_reader *ra = NULL, *rb = NULL;
        assert_int_equal(block_reader_open(block_memory_fetch, &sa, a.len, NULL, &ra, &err), 0);
        assert_int_equal(block_reader_open(block_memory_fetch, &sb, b.len, NULL, &rb, &err), 0);
        assert_same_blocks(ra, rb);
        block_reader_close(ra);
        block_reader_close(rb);
        block_meta_free(&ma);
        block_meta_free(&mb);
        strata_buffer_free(&a);
        strata_buffer_free(&b);
        block_writer_free(mem);
        block_writer_free(sp);
        fclose(spool);
    }
}

/* Rows visited in place, appended for comparison. */
typedef struct visited_rows {
    block_samples rows;
    size_t last_profile;
    size_t runs;
} visited_rows;

static int append_run(void *arg, size_t profile, const block_row_run *run, strata_error *err) {
    visited_rows *v = arg;
    (void)err;
    assert_true(profile >= v->last_profile);
    v->last_profile = profile;
    v->runs++;
    for (size_t i = 0; i < run->n; i++) {
        size_t at = v->rows.len++;
        assert_true(at < v->rows.cap);
        v->rows.stacks[at] = (uint32_t)run->stacks[i];
        v->rows.values[at] = (int64_t)run->values[i];
        v->rows.label_sets[at] = run->label_sets != NULL ? (uint32_t)run->label_sets[i] : 0;
    }
    return 0;
}

/* block_reader_visit_samples gives the rows block_reader_read_samples copies, run by run (pages
 * of 256 bytes), in the profiles' order. */
static void test_visit_samples_matches_read_samples(void **state) {
    (void)state;
    strata_error err;
    block_writer_options o;
    block_writer_options_default(&o);
    o.page_size = 256;
    block_writer *w = block_writer_new(&o, &err);
    assert_non_null(w);
    add_spool_input(w, 1);
    strata_buffer data = STRATA_BUFFER_INIT;
    block_meta meta;
    assert_int_equal(block_writer_finish(w, &data, &meta, &err), 0);
    block_writer_free(w);
    block_memory_source src = {data.data, data.len};
    block_reader *r = NULL;
    assert_int_equal(block_reader_open(block_memory_fetch, &src, data.len, NULL, &r, &err), 0);
    block_profile *p = NULL;
    size_t n = 0;
    assert_int_equal(block_reader_profiles(r, NULL, 0, INT64_MIN, INT64_MAX, &p, &n, &err), 0);
    assert_true(n > 1);
    block_samples want = {0};
    assert_int_equal(block_reader_read_samples(r, p, n, &want, &err), 0);
    assert_non_null(want.label_sets);
    visited_rows got = {.rows = {.cap = want.len}};
    got.rows.stacks = calloc(want.len + 1, sizeof *got.rows.stacks);
    got.rows.values = calloc(want.len + 1, sizeof *got.rows.values);
    got.rows.label_sets = calloc(want.len + 1, sizeof *got.rows.label_sets);
    assert_int_equal(block_reader_visit_samples(r, p, n, append_run, &got, &err), 0);
    assert_int_equal(got.rows.len, want.len);
    assert_true(got.runs >= n);
    assert_memory_equal(got.rows.stacks, want.stacks, want.len * sizeof *want.stacks);
    assert_memory_equal(got.rows.values, want.values, want.len * sizeof *want.values);
    assert_memory_equal(got.rows.label_sets, want.label_sets, want.len * sizeof *want.label_sets);
    block_samples_free(&got.rows);
    block_samples_free(&want);
    free(p);
    block_reader_close(r);
    block_meta_free(&meta);
    strata_buffer_free(&data);
}

/* A fetch callback over memory that counts its calls and the bytes it returned. */
typedef struct counting_source {
    block_memory_source src;
    size_t calls;
    uint64_t bytes;
} counting_source;

static int counting_fetch(void *ctx, uint64_t offset, uint64_t length, strata_buffer *out,
                          strata_error *err) {
    counting_source *c = ctx;
    c->calls++;
    c->bytes += length;
    return block_memory_fetch(&c->src, offset, length, out, err);
}

/* Read-ahead (options.readahead) reads the same block with fewer, larger fetches: with windows
 * of a few pages, of one byte more than a page, and of the whole block (then the tail read at
 * open holds every page: one fetch in all). Dropping the windows mid-read only costs fetches. */
static void test_readahead_reads_the_same_with_fewer_fetches(void **state) {
    (void)state;
    strata_error err;
    block_writer_options o;
    block_writer_options_default(&o);
    o.page_size = 256;
    block_writer *w = block_writer_new(&o, &err);
    assert_non_null(w);
    add_spool_input(w, 1);
    strata_buffer data = STRATA_BUFFER_INIT;
    block_meta meta;
    assert_int_equal(block_writer_finish(w, &data, &meta, &err), 0);
    block_writer_free(w);
    counting_source plain = {{data.data, data.len}, 0, 0};
    block_reader *base = NULL;
    assert_int_equal(block_reader_open(counting_fetch, &plain, data.len, NULL, &base, &err), 0);
    assert_same_blocks(base, base); /* reads every page */
    assert_true(plain.calls > 50);
    const size_t sizes[] = {257, 4096, 1u << 20};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        counting_source ahead = {{data.data, data.len}, 0, 0};
        block_reader_options ro;
        block_reader_options_default(&ro);
        ro.readahead = sizes[k];
        ro.tail_guess = sizes[k] > ro.tail_guess ? sizes[k] : ro.tail_guess;
        block_reader *r = NULL;
        assert_int_equal(block_reader_open(counting_fetch, &ahead, data.len, &ro, &r, &err), 0);
        assert_same_blocks(base, r);
        if (sizes[k] >= data.len)
            assert_int_equal(ahead.calls, 1);
        else
            assert_true(ahead.calls < plain.calls);
        size_t before = ahead.calls;
        block_reader_drop_readahead(r);
        block_reader_drop_page_cache(r);
        assert_same_blocks(base, r);
        assert_true(ahead.calls >= before);
        block_reader_close(r);
    }
    block_reader_close(base);
    block_meta_free(&meta);
    strata_buffer_free(&data);
}

/* A spool file that cannot be written fails the writer with UNAVAILABLE (the disk, not the data).
 */
static void test_spooled_writer_unwritable_spool(void **state) {
    (void)state;
    FILE *spool = tmpfile();
    assert_non_null(spool);
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fileno(spool));
    int ro = open(path, O_RDONLY | O_CLOEXEC);
    assert_true(ro >= 0);
    strata_error err;
    assert_null(block_writer_new_spooled(NULL, ro, &err));
    assert_int_equal(err.code, STRATA_UNAVAILABLE);
    assert_non_null(strstr(err.message, "spool file"));
    close(ro);
    fclose(spool);
}

/* A spooled writer refuses profiles out of (series, time) order, and stays usable. */
static void test_spooled_writer_refuses_disorder(void **state) {
    (void)state;
    strata_error err;
    FILE *spool = tmpfile();
    assert_non_null(spool);
    block_writer *w = block_writer_new_spooled(NULL, fileno(spool), &err);
    assert_non_null(w);
    pprof_profile p;
    build_pprof(&p, profile_a, 4, 0);
    profile_type cpu = cpu_type();
    label_set a, b;
    labels2(&a, "job", "a", NULL, NULL);
    labels2(&b, "job", "b", NULL, NULL);
    assert_int_equal(block_writer_add_profile(w, &b, &cpu, 2 * SEC, 0, 1, &p, 0, &err), 0);
    assert_int_equal(block_writer_add_profile(w, &b, &cpu, 1 * SEC, 0, 1, &p, 0, &err), -1);
    assert_int_equal(err.code, STRATA_FAILED_PRECONDITION);
    assert_non_null(strstr(err.message, "time order"));
    assert_int_equal(block_writer_add_profile(w, &a, &cpu, 3 * SEC, 0, 1, &p, 0, &err), -1);
    assert_int_equal(err.code, STRATA_FAILED_PRECONDITION);
    assert_non_null(strstr(err.message, "order"));
    label_set c;
    labels2(&c, "job", "c", NULL, NULL);
    assert_int_equal(block_writer_add_profile(w, &c, &cpu, 1 * SEC, 0, 1, &p, 0, &err), 0);
    assert_int_equal(block_writer_add_profile(w, &b, &cpu, 9 * SEC, 0, 1, &p, 0, &err), -1);
    block_writer *d = NULL;
    assert_int_equal(block_writer_detach(w, &d, &err), -1);
    strata_buffer data = STRATA_BUFFER_INIT;
    block_meta meta;
    assert_int_equal(block_writer_finish(w, &data, &meta, &err), 0);
    assert_int_equal(meta.num_profiles, 2);
    assert_int_equal(meta.num_series, 2);
    read_file(fileno(spool), &data);
    block_memory_source src = {data.data, data.len};
    block_reader *r = NULL;
    assert_int_equal(block_reader_open(block_memory_fetch, &src, data.len, NULL, &r, &err), 0);
    assert_int_equal(block_reader_series_count(r), 2);
    block_reader_close(r);
    block_meta_free(&meta);
    strata_buffer_free(&data);
    pprof_profile_free(&p);
    label_set_free(&a);
    label_set_free(&b);
    label_set_free(&c);
    block_writer_free(w);
    fclose(spool);
}

static void test_rollup_build_with_label_sets(void **state) {
    (void)state;
    const uint32_t st[] = {2, 2, 1, 2}, sets_a[] = {5, 0, 3, 5};
    const int64_t v[] = {1, 2, 3, 4};
    block_rollup_profile in[] = {{0, 10, st, sets_a, v, 4}, {0, 10, st, NULL, v, 3}};
    uint32_t stacks[8], sets[8];
    int64_t values[8];
    block_samples rows = {stacks, values, sets, 0, 8};
    block_rollup_series series[1];
    strata_error err;
    assert_int_equal(block_rollup_build(in, 2, 1, 3, collect_row, &rows, series, &err), 0);
    /* (1,0) 30  (1,3) 30  (2,0) 20+10+20=50  (2,5) 10+40=50 */
    const uint32_t want_stack[] = {1, 1, 2, 2}, want_set[] = {0, 3, 0, 5};
    const int64_t want_value[] = {30, 30, 50, 50};
    assert_int_equal(rows.len, 4);
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(rows.stacks[i], want_stack[i]);
        assert_int_equal(rows.label_sets[i], want_set[i]);
        assert_int_equal(rows.values[i], want_value[i]);
    }
    assert_int_equal(series[0].stack_count, 4);
}

static void write_seeds(const char *dir) {
    size_t page_sizes[] = {64 * 1024, 256};
    for (size_t i = 0; i < 4; i++) {
        fixture fx;
        bool rollups = i >= 2;
        write_fixture_rollups(&fx, page_sizes[i % 2], rollups);
        char path[4096];
        snprintf(path, sizeof path, "%s/fixture-%s%zu.strata", dir, rollups ? "rollups-" : "",
                 page_sizes[i % 2]);
        FILE *f = fopen(path, "wb");
        if (f != NULL) {
            fwrite(fx.data.data, 1, fx.data.len, f);
            fclose(f);
        }
        fixture_free(&fx);
    }
    strata_buffer data;
    block_meta meta;
    write_labelled_block(&data, &meta);
    char path[4096];
    snprintf(path, sizeof path, "%s/fixture-labels-65536.strata", dir);
    FILE *f = fopen(path, "wb");
    if (f != NULL) {
        fwrite(data.data, 1, data.len, f);
        fclose(f);
    }
    strata_buffer_free(&data);
    block_meta_free(&meta);
    /* a block cut from a dictionary (tables 18-21), and the dictionary finished itself */
    static const detach_round round[] = {{profile_a, 4, 0, "api-1", 1000, 0},
                                         {profile_b, 2, 100, "api-2", 1001, 0}};
    strata_error err;
    block_writer *w = block_writer_new(NULL, &err);
    block_writer *d = NULL;
    if (w == NULL)
        return;
    add_round(w, round, 2);
    if (block_writer_detach(w, &d, &err) == 0) {
        finish_to(d, &data);
        snprintf(path, sizeof path, "%s/fixture-detached-65536.strata", dir);
        f = fopen(path, "wb");
        if (f != NULL) {
            fwrite(data.data, 1, data.len, f);
            fclose(f);
        }
        strata_buffer_free(&data);
        block_writer_free(d);
    }
    block_writer_free(w);
}

int main(void) {
    if (getenv("BLOCK_FUZZ_SEED_DIR") != NULL) {
        write_seeds(getenv("BLOCK_FUZZ_SEED_DIR"));
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_series_and_profiles),
        cmocka_unit_test(test_symbols_deduplicated),
        cmocka_unit_test(test_meta_from_writer),
        cmocka_unit_test(test_select),
        cmocka_unit_test(test_range_query_reads_no_sample_pages),
        cmocka_unit_test(test_visit_profiles),
        cmocka_unit_test(test_symbolized_path),
        cmocka_unit_test(test_writer_errors),
        cmocka_unit_test(test_writer_id_path_errors),
        cmocka_unit_test(test_locations_without_lines_roundtrip),
        cmocka_unit_test(test_corrupt_pages),
        cmocka_unit_test(test_truncated_and_bad_trailer),
        cmocka_unit_test(test_meta_json_roundtrip),
        cmocka_unit_test(test_marks),
        cmocka_unit_test(test_ulid),
        cmocka_unit_test(test_dump),
        cmocka_unit_test(test_rollups_roundtrip),
        cmocka_unit_test(test_block_without_rollups),
        cmocka_unit_test(test_rollup_reads_only_its_pages),
        cmocka_unit_test(test_rollup_build),
        cmocka_unit_test(test_detach_keeps_dictionary),
        cmocka_unit_test(test_detached_blocks_share_stack_origins),
        cmocka_unit_test(test_blocks_without_function_origins),
        cmocka_unit_test(test_stack_origins_over_many_pages),
        cmocka_unit_test(test_stack_origins_wide_chunks),
        cmocka_unit_test(test_many_samples_sorted_and_summed),
        cmocka_unit_test(test_sample_labels_roundtrip),
        cmocka_unit_test(test_version1_block_readable_and_unchanged),
        cmocka_unit_test(test_detach_with_sample_labels),
        cmocka_unit_test(test_label_sets_id_path),
        cmocka_unit_test(test_rollup_build_with_label_sets),
        cmocka_unit_test(test_spooled_writer_writes_the_same_block),
        cmocka_unit_test(test_readahead_reads_the_same_with_fewer_fetches),
        cmocka_unit_test(test_visit_samples_matches_read_samples),
        cmocka_unit_test(test_spooled_writer_refuses_disorder),
        cmocka_unit_test(test_spooled_writer_unwritable_spool),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
