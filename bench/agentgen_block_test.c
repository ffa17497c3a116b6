/*
 * agentgen_block_test.c - the direct path (agentgen_block.h) writes what the pprof path writes.
 *
 * Each case writes the same windows of a few processes into two blocks: through agentgen_profile +
 * block_writer_add_profile (the reference), and through agentgen_writer_add. The blocks are read
 * back with block_reader and compared by content, not by ids: the same series (labels, type), the
 * same profiles in order (series, time, duration, period, total, sample count) and, per profile,
 * the same multiset of (stack, value) samples, where a stack is compared frame by frame as what
 * it resolves to (address, mapping fields, folding, and each line's function name, system name,
 * file, start line and line). Stacks are resolved into one canonical id space shared by both
 * blocks (exact: location descriptions are interned byte strings, stacks (parent, location)
 * pairs), so the comparison costs a lookup per stack, not per frame.
 *
 * A comparison that could not fail would prove nothing: the last case alters one profile on the
 * direct side (another window; the other sample type) and checks that the comparison reports it.
 * Whether the two data objects are also byte-identical (same ids, same order) is printed, not
 * asserted: that depends on the writer's interning order, not on the content.
 *
 * Both paths could share a mistake in agentgen's model calls, so one case also checks a pprof
 * against the model directly: its samples' locations are the stacks' frames.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "agentgen.h"
#include "agentgen_block.h"
#include "block/block_reader.h"
#include "block/block_writer.h"
#include "common/hash.h"

#define SEC INT64_C(1000000000)
#define T0 (INT64_C(1699999200) * SEC)

/* ---- writing both ways ---------------------------------------------------------------------- */

typedef struct plan {
    agentgen_options options;
    size_t processes;
    uint64_t first_window, windows; /* windows before first_window are a warm-up: see below */
    size_t sample_type_index;
    /* an altered profile on the direct side (process alter_process, window first_window): another
     * window, or another sample type; for the test that the comparison can fail */
    bool alter;
    size_t alter_process;
    uint64_t alter_window;
    size_t alter_type_index;
} plan;

static int64_t profile_time(size_t process, uint64_t window) {
    return T0 + (int64_t)window * 10 * SEC + (int64_t)(process % 10) * SEC;
}

static block_writer *new_writer(void) {
    block_writer_options o;
    block_writer_options_default(&o);
    o.compaction_level = 2;
    o.tenant = "agentgen-test";
    strata_error err;
    block_writer *w = block_writer_new(&o, &err);
    assert_non_null(w);
    return w;
}

static void finish(block_writer *w, strata_buffer *data) {
    strata_error err;
    block_meta meta;
    if (block_writer_finish(w, data, &meta, &err) != 0)
        fail_msg("block_writer_finish: %s", err.message);
    block_meta_free(&meta);
    block_writer_free(w);
}

static void labels_of(agentgen *g, size_t process, label_set *out) {
    strata_error err;
    memset(out, 0, sizeof *out);
    if (agentgen_labels(g, process, out, &err) != 0)
        fail_msg("agentgen_labels: %s", err.message);
}

/* The reference: pprof profiles through block_writer_add_profile. The warm-up windows are
 * generated and dropped, so that the generator has made the same calls on both sides (the order
 * of a profile's samples depends on its draws table's history). */
static void write_pprof_path(const plan *pl, strata_buffer *data) {
    strata_error err;
    agentgen *g = agentgen_new(&pl->options, &err);
    assert_non_null(g);
    for (uint64_t win = 0; win < pl->first_window; win++) {
        for (size_t i = 0; i < pl->processes; i++) {
            pprof_profile p;
            if (agentgen_profile(g, i, win, &p, &err) != 0)
                fail_msg("warm-up: %s", err.message);
            pprof_profile_free(&p);
        }
    }
    profile_type type = agentgen_profile_type();
    block_writer *w = new_writer();
    for (uint64_t win = pl->first_window; win < pl->first_window + pl->windows; win++) {
        for (size_t i = 0; i < pl->processes; i++) {
            pprof_profile p;
            label_set labels;
            labels_of(g, i, &labels);
            if (agentgen_profile(g, i, win, &p, &err) != 0 ||
                block_writer_add_profile(w, &labels, &type, profile_time(i, win), 10 * SEC,
                                         p.period, &p, pl->sample_type_index, &err) != 0)
                fail_msg("pprof path: %s", err.message);
            pprof_profile_free(&p);
            label_set_free(&labels);
        }
    }
    finish(w, data);
    agentgen_free(g);
}

/* Adds the warm-up windows to a block writer that is then dropped: the block written next must
 * not reuse its ids (agentgen_writer_start forgets them). */
static void direct_warm_up(const plan *pl, agentgen *g, agentgen_writer *aw) {
    strata_error err;
    profile_type type = agentgen_profile_type();
    block_writer *w = new_writer();
    agentgen_writer_start(aw, w);
    for (uint64_t win = 0; win < pl->first_window; win++) {
        for (size_t i = 0; i < pl->processes; i++) {
            label_set labels;
            labels_of(g, i, &labels);
            if (agentgen_writer_add(aw, i, win, &labels, &type, profile_time(i, win), 10 * SEC, 0,
                                    &err) != 0)
                fail_msg("warm-up: %s", err.message);
            label_set_free(&labels);
        }
    }
    block_writer_free(w);
}

static void write_direct_path(const plan *pl, strata_buffer *data) {
    strata_error err;
    agentgen *g = agentgen_new(&pl->options, &err);
    assert_non_null(g);
    agentgen_writer *aw = agentgen_writer_new(g, &err);
    assert_non_null(aw);
    direct_warm_up(pl, g, aw);
    profile_type type = agentgen_profile_type();
    block_writer *w = new_writer();
    agentgen_writer_start(aw, w);
    for (uint64_t win = pl->first_window; win < pl->first_window + pl->windows; win++) {
        for (size_t i = 0; i < pl->processes; i++) {
            bool altered = pl->alter && i == pl->alter_process && win == pl->first_window;
            label_set labels;
            labels_of(g, i, &labels);
            if (agentgen_writer_add(
                    aw, i, altered ? pl->alter_window : win, &labels, &type, profile_time(i, win),
                    10 * SEC, altered ? pl->alter_type_index : pl->sample_type_index, &err) != 0)
                fail_msg("direct path: %s", err.message);
            label_set_free(&labels);
        }
    }
    finish(w, data);
    agentgen_writer_free(aw);
    agentgen_free(g);
}

/* ---- canonical stacks ------------------------------------------------------------------------ */

/* One id space for stacks of both blocks: a location is its interned description, a stack the
 * (parent, location) pair of canonical ids. */
typedef struct canon {
    strata_intern locations;
    strata_u64_map stacks; /* ((parent << 32) | location) + 1 -> canonical stack id */
    uint32_t n_stacks;
} canon;

static void put_u64(strata_buffer *b, uint64_t v) {
    assert_int_equal(strata_buffer_append(b, &v, sizeof v), 0);
}

static void put_str(strata_buffer *b, const char *s) {
    put_u64(b, strlen(s));
    assert_int_equal(strata_buffer_append(b, s, strlen(s)), 0);
}

/* Everything a location resolves to, as bytes. */
static void describe_location(block_reader *r, uint32_t id, strata_buffer *out) {
    strata_error err;
    block_location loc;
    if (block_reader_location(r, id, &loc, &err) != 0)
        fail_msg("location %u: %s", id, err.message);
    out->len = 0;
    put_u64(out, loc.address);
    put_u64(out, (uint64_t)loc.has_mapping << 1 | (uint64_t)loc.is_folded);
    if (loc.has_mapping) {
        block_mapping m;
        if (block_reader_mapping(r, loc.mapping_id, &m, &err) != 0)
            fail_msg("mapping %u: %s", loc.mapping_id, err.message);
        put_u64(out, m.memory_start);
        put_u64(out, m.memory_limit);
        put_u64(out, m.file_offset);
        put_str(out, m.file);
        put_str(out, m.build_id);
        put_u64(out, m.flags);
    }
    put_u64(out, loc.n_lines);
    for (uint32_t i = 0; i < loc.n_lines; i++) {
        block_function f;
        if (block_reader_function(r, loc.lines[i].function_id, &f, &err) != 0)
            fail_msg("function %u: %s", loc.lines[i].function_id, err.message);
        put_str(out, f.name);
        put_str(out, f.system_name);
        put_str(out, f.file);
        put_u64(out, (uint64_t)f.start_line);
        put_u64(out, (uint64_t)loc.lines[i].line);
    }
}

/* canonical[stack id] for every stack of the block (parents have smaller ids). */
static uint32_t *canonical_stacks(canon *c, block_reader *r) {
    strata_error err;
    size_t n = block_reader_row_count(r, BLOCK_TABLE_STACKS);
    uint64_t n_locations = block_reader_row_count(r, BLOCK_TABLE_LOCATIONS);
    uint32_t *out = calloc(n + 1, sizeof *out);
    uint32_t *location_canon = calloc(n_locations + 1, sizeof *location_canon);
    assert_non_null(out);
    assert_non_null(location_canon);
    strata_buffer desc = STRATA_BUFFER_INIT;
    for (uint32_t l = 0; l < n_locations; l++) {
        describe_location(r, l, &desc);
        assert_int_equal(
            strata_intern_add(&c->locations, (const char *)desc.data, desc.len, &location_canon[l]),
            0);
    }
    for (uint32_t s = 1; s <= n; s++) {
        uint32_t parent, location;
        if (block_reader_stack_node(r, s, &parent, &location, &err) != 0)
            fail_msg("stack %u: %s", s, err.message);
        assert_true(parent < s && location < n_locations);
        uint64_t key = ((uint64_t)out[parent] << 32 | location_canon[location]) + 1;
        bool inserted;
        uint64_t *v = strata_u64_map_upsert(&c->stacks, key, 0, &inserted);
        assert_non_null(v);
        if (inserted)
            *v = ++c->n_stacks;
        out[s] = (uint32_t)*v;
    }
    strata_buffer_free(&desc);
    free(location_canon);
    return out;
}

/* ---- comparing two blocks -------------------------------------------------------------------- */

typedef struct opened {
    strata_buffer data;
    block_memory_source src;
    block_reader *r;
    block_profile *profiles;
    size_t n_profiles;
    block_samples samples; /* of every profile, in order */
    size_t *first;         /* profile -> its first sample in `samples` */
    uint32_t *canonical;
} opened;

static void open_block(canon *c, strata_buffer *data, opened *o) {
    strata_error err;
    memset(o, 0, sizeof *o);
    o->data = *data;
    o->src = (block_memory_source){o->data.data, o->data.len};
    if (block_reader_open(block_memory_fetch, &o->src, o->data.len, NULL, &o->r, &err) != 0 ||
        block_reader_profiles(o->r, NULL, 0, INT64_MIN, INT64_MAX, &o->profiles, &o->n_profiles,
                              &err) != 0 ||
        block_reader_read_samples(o->r, o->profiles, o->n_profiles, &o->samples, &err) != 0)
        fail_msg("reading a block: %s", err.message);
    o->first = calloc(o->n_profiles + 1, sizeof *o->first);
    assert_non_null(o->first);
    for (size_t k = 0; k < o->n_profiles; k++)
        o->first[k + 1] = o->first[k] + o->profiles[k].sample_count;
    assert_int_equal(o->first[o->n_profiles], o->samples.len);
    o->canonical = canonical_stacks(c, o->r);
}

static void close_block(opened *o) {
    free(o->canonical);
    free(o->first);
    block_samples_free(&o->samples);
    free(o->profiles);
    block_reader_close(o->r);
    strata_buffer_free(&o->data);
}

static bool same_series(opened *a, opened *b, char *why, size_t cap) {
    size_t n = block_reader_series_count(a->r);
    if (n != block_reader_series_count(b->r)) {
        snprintf(why, cap, "series count %zu vs %zu", n, block_reader_series_count(b->r));
        return false;
    }
    for (uint32_t s = 0; s < n; s++) {
        const profile_type *ta = block_reader_series_type(a->r, s);
        const profile_type *tb = block_reader_series_type(b->r, s);
        bool same_type = strcmp(ta->name, tb->name) == 0 &&
                         strcmp(ta->sample_type, tb->sample_type) == 0 &&
                         strcmp(ta->sample_unit, tb->sample_unit) == 0 &&
                         strcmp(ta->period_type, tb->period_type) == 0 &&
                         strcmp(ta->period_unit, tb->period_unit) == 0 && ta->delta == tb->delta;
        if (!same_type || label_set_compare(block_reader_series_labels(a->r, s),
                                            block_reader_series_labels(b->r, s)) != 0) {
            snprintf(why, cap, "series %u differs", s);
            return false;
        }
    }
    return true;
}

typedef struct pair {
    uint32_t stack;
    int64_t value;
} pair;

static int compare_pairs(const void *x, const void *y) {
    const pair *a = x, *b = y;
    if (a->stack != b->stack)
        return a->stack < b->stack ? -1 : 1;
    return a->value < b->value ? -1 : a->value > b->value;
}

/* The profile's samples as sorted (canonical stack, value) pairs into out. */
static void canonical_samples(const opened *o, size_t k, pair *out) {
    const block_profile *p = &o->profiles[k];
    size_t first = o->first[k];
    for (uint32_t i = 0; i < p->sample_count; i++) {
        out[i].stack = o->canonical[o->samples.stacks[first + i]];
        out[i].value = o->samples.values[first + i];
    }
    qsort(out, p->sample_count, sizeof *out, compare_pairs);
}

static bool same_profile(const opened *a, const opened *b, size_t k, char *why, size_t cap) {
    const block_profile *x = &a->profiles[k], *y = &b->profiles[k];
    if (x->series_id != y->series_id || x->time_ns != y->time_ns ||
        x->duration_ns != y->duration_ns || x->period != y->period || x->total != y->total ||
        x->sample_count != y->sample_count) {
        snprintf(why, cap, "profile %zu: header differs (total %lld vs %lld)", k,
                 (long long)x->total, (long long)y->total);
        return false;
    }
    pair *pa = calloc(x->sample_count + 1, sizeof *pa),
         *pb = calloc(x->sample_count + 1, sizeof *pb);
    assert_non_null(pa);
    assert_non_null(pb);
    canonical_samples(a, k, pa);
    canonical_samples(b, k, pb);
    bool same = memcmp(pa, pb, x->sample_count * sizeof *pa) == 0;
    if (!same)
        snprintf(why, cap, "profile %zu: samples differ", k);
    free(pa);
    free(pb);
    return same;
}

/* True when the blocks hold the same content; otherwise *why says where they first differ. Takes
 * over both buffers. */
static bool same_content(strata_buffer *a_data, strata_buffer *b_data, uint64_t *n_samples,
                         char *why, size_t cap) {
    canon c;
    memset(&c, 0, sizeof c);
    assert_int_equal(strata_intern_init(&c.locations), 0);
    opened a, b;
    open_block(&c, a_data, &a);
    open_block(&c, b_data, &b);
    bool same = same_series(&a, &b, why, cap);
    if (same && a.n_profiles != b.n_profiles) {
        snprintf(why, cap, "profile count %zu vs %zu", a.n_profiles, b.n_profiles);
        same = false;
    }
    for (size_t k = 0; same && k < a.n_profiles; k++)
        same = same_profile(&a, &b, k, why, cap);
    *n_samples = a.samples.len;
    close_block(&a);
    close_block(&b);
    strata_intern_free(&c.locations);
    strata_u64_map_free(&c.stacks);
    return same;
}

/* Writes both ways and compares; returns whether the content is the same. */
static bool run_plan(const plan *pl, const char *what, char *why, size_t cap) {
    strata_buffer ref = STRATA_BUFFER_INIT, direct = STRATA_BUFFER_INIT;
    write_pprof_path(pl, &ref);
    write_direct_path(pl, &direct);
    bool identical = ref.len == direct.len && memcmp(ref.data, direct.data, ref.len) == 0;
    size_t ref_len = ref.len;
    uint64_t n_samples = 0;
    bool same = same_content(&ref, &direct, &n_samples, why, cap);
    print_message("%s: %zu profiles, %llu samples, %zu bytes; content %s; data objects %s\n", what,
                  pl->processes * pl->windows, (unsigned long long)n_samples, ref_len,
                  same ? "the same" : why, identical ? "byte-identical" : "differ in bytes");
    assert_true(n_samples > 0);
    return same;
}

/* ---- cases ----------------------------------------------------------------------------------- */

static void small_options(agentgen_options *o) {
    agentgen_options_default(o);
    o->samples_per_profile = 300;
    o->stacks_per_process = 3000;
    o->functions_per_binary = 200;
}

/* query_bench's shape: default generator (2,000 stacks per profile), sample type 0, 12 processes
 * (two per binary for two binaries), windows 2-4 after a warm-up block of windows 0-1. */
static void test_default_shape(void **state) {
    (void)state;
    plan pl = {.processes = 12, .first_window = 2, .windows = 3};
    agentgen_options_default(&pl.options);
    char why[256] = "";
    assert_true(run_plan(&pl, "default options, samples/count", why, sizeof why));
}

/* Another seed, smaller symbol tables (so stacks and locations repeat across processes a lot), 25
 * processes over 12 windows, cpu/nanoseconds values, no warm-up. */
static void test_small_options_cpu(void **state) {
    (void)state;
    plan pl = {.processes = 25, .first_window = 0, .windows = 12, .sample_type_index = 1};
    small_options(&pl.options);
    pl.options.seed = 7;
    char why[256] = "";
    assert_true(run_plan(&pl, "small options, cpu/nanoseconds", why, sizeof why));
}

/* The sample count and total of a process's profile. */
static void draw_totals(agentgen *g, size_t process, uint64_t window, size_t *n, int64_t *total) {
    strata_error err;
    const agentgen_draw *draws;
    if (agentgen_draws(g, process, window, &draws, n, &err) != 0)
        fail_msg("agentgen_draws: %s", err.message);
    *total = 0;
    for (size_t i = 0; i < *n; i++)
        *total += draws[i].count;
}

/* A window whose profile of `process` has as many samples and the same total as window 0's, so
 * that swapping it in changes only the samples. */
static uint64_t twin_window(const agentgen_options *o, size_t process) {
    strata_error err;
    agentgen *g = agentgen_new(o, &err);
    assert_non_null(g);
    size_t n0, n;
    int64_t total0, total;
    draw_totals(g, process, 0, &n0, &total0);
    uint64_t w = 1;
    for (; w < 10000; w++) {
        draw_totals(g, process, w, &n, &total);
        if (n == n0 && total == total0)
            break;
    }
    agentgen_free(g);
    assert_true(w < 10000);
    return w;
}

/* The comparison sees a changed profile: another window's samples with the same header, another
 * window altogether, or the other sample type. */
static void test_comparison_can_fail(void **state) {
    (void)state;
    plan pl = {.processes = 5, .first_window = 0, .windows = 3, .alter = true, .alter_process = 3};
    small_options(&pl.options);
    char why[256] = "";
    pl.alter_window = twin_window(&pl.options, pl.alter_process);
    assert_false(run_plan(&pl, "altered samples, same header (must differ)", why, sizeof why));
    assert_non_null(strstr(why, "samples differ"));
    pl.alter_window = 1;
    assert_false(run_plan(&pl, "altered window (must differ)", why, sizeof why));
    pl.alter_window = 0;
    pl.alter_type_index = 1;
    assert_false(run_plan(&pl, "altered sample type (must differ)", why, sizeof why));
}

/* agentgen_profile's locations are the frames of agentgen_stack, one location per distinct
 * address. Process 55's profile of window 2 (default options) has two frames whose location keys
 * collided when agentgen keyed locations by a 64-bit hash of (binary, function, address): one of
 * them then carried the other's function and address. */
static void test_pprof_frames_are_the_stacks(void **state) {
    (void)state;
    strata_error err;
    agentgen *g = agentgen_new(NULL, &err);
    assert_non_null(g);
    const agentgen_draw *draws;
    size_t n;
    /* The first call grows the draws table; later calls list samples in one order. */
    assert_int_equal(agentgen_draws(g, 0, 0, &draws, &n, &err), 0);
    pprof_profile p;
    assert_int_equal(agentgen_profile(g, 55, 2, &p, &err), 0);
    assert_int_equal(agentgen_draws(g, 55, 2, &draws, &n, &err), 0);
    assert_int_equal(n, p.n_samples);
    size_t frames_checked = 0;
    for (size_t i = 0; i < n; i++) {
        agentgen_frame frames[AGENTGEN_MAX_STACK];
        size_t depth = agentgen_stack(g, agentgen_binary(g, 55), draws[i].rank, frames);
        const pprof_sample *s = &p.samples[i];
        assert_int_equal(s->location_count, depth);
        for (size_t j = 0; j < depth; j++) {
            const pprof_location *loc =
                pprof_find_location(&p, p.sample_location_ids[s->location_offset + j]);
            assert_non_null(loc);
            assert_int_equal(loc->address, frames[j].address);
            assert_int_equal(loc->line_count, 1);
            const pprof_line *line = &p.lines[loc->line_offset];
            assert_int_equal(line->line, agentgen_frame_line(&frames[j]));
            const pprof_function *fn = pprof_find_function(&p, line->function_id);
            assert_non_null(fn);
            agentgen_function want;
            agentgen_frame_function(g, &frames[j], &want);
            const pprof_string *name = &p.strings[fn->name];
            assert_int_equal(name->len, strlen(want.name));
            assert_memory_equal(name->ptr, want.name, name->len);
            frames_checked++;
        }
    }
    assert_true(frames_checked > 10000);
    pprof_profile_free(&p);
    agentgen_free(g);
}

static void test_errors(void **state) {
    (void)state;
    strata_error err;
    agentgen *g = agentgen_new(NULL, &err);
    assert_non_null(g);
    agentgen_writer *aw = agentgen_writer_new(g, &err);
    assert_non_null(aw);
    profile_type type = agentgen_profile_type();
    label_set labels;
    labels_of(g, 0, &labels);
    assert_int_equal(agentgen_writer_add(aw, 0, 0, &labels, &type, T0, 10 * SEC, 0, &err), -1);
    assert_int_equal(err.code, STRATA_FAILED_PRECONDITION);
    block_writer *w = new_writer();
    agentgen_writer_start(aw, w);
    assert_int_equal(agentgen_writer_add(aw, 0, 0, &labels, &type, T0, 10 * SEC, 2, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_int_equal(agentgen_writer_add(aw, 0, 0, &labels, &type, T0, 10 * SEC, 0, &err), 0);
    assert_int_equal(block_writer_profile_count(w), 1);
    block_writer_free(w);
    label_set_free(&labels);
    agentgen_writer_free(aw);
    agentgen_free(g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_default_shape),
        cmocka_unit_test(test_small_options_cpu),
        cmocka_unit_test(test_comparison_can_fail),
        cmocka_unit_test(test_pprof_frames_are_the_stacks),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
