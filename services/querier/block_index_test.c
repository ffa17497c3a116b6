/*
 * block_index_test.c - the querier's reader cache: its byte bound, its count bound, accounting
 * of readers that grow as queries decode them, and the guarantee that a reader a query holds is
 * never closed under it.
 *
 * Six blocks in a FILESYSTEM bucket, a minute each, whose stacks use functions of their own, so
 * every block's reader decodes symbol tables of its own. A reference index with no bounds gives
 * the expected answers and the largest fully decoded reader (`biggest`); the bounded indexes are
 * sized in multiples of it, so the tests do not depend on the block format's exact sizes. Each
 * test builds its own indexes: the cache state one test leaves does not reach the next.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ftw.h>
#include <pthread.h>
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
#include "engine.h"

#define TENANT "t1"
#define SEC STRATA_NS_PER_SEC
#define T0 (INT64_C(1700000000) * SEC)
#define N_BLOCKS 6
#define N_PODS 2
#define PROFILES_PER_BLOCK 6 /* one every 10 s per pod */
#define FUNCTIONS_PER_BLOCK 400
#define END (T0 + 60 * N_BLOCKS * SEC)
#define CPU "process_cpu:samples:count:cpu:nanoseconds:delta"

typedef struct test_data {
    char dir[64];
    bucket *store;
    size_t biggest; /* bytes of the largest reader after a full merge */
    size_t all;     /* of all readers after a full merge */
} test_data;

static test_data data;

static uint64_t lcg(uint64_t *s) {
    *s = *s * 6364136223846793005u + 1442695040888963407u;
    return *s >> 33;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* ---- blocks ------------------------------------------------------------------------------- */

/* One profile of random stacks over block b's own functions. */
static void add_profile(block_writer *w, int b, const label_set *labels, int64_t time_ns,
                        uint64_t *seed) {
    static const profile_type cpu = {"process_cpu", "samples", "count", "cpu", "nanoseconds", true};
    strata_error err;
    assert_int_equal(block_writer_begin_profile(w, labels, &cpu, time_ns, 10 * SEC, 1000, &err), 0);
    for (int i = 0; i < 60; i++) {
        char names[8][32];
        block_frame frames[8];
        size_t depth = 2 + lcg(seed) % 6;
        for (size_t f = 0; f < depth; f++) {
            snprintf(names[f], sizeof names[f], "b%d_fn%llu", b,
                     (unsigned long long)(lcg(seed) % FUNCTIONS_PER_BLOCK));
            frames[f] =
                (block_frame){names[f], names[f], "x.c", 1, 1, "/bin/app", "b1", 0x1000 + f};
        }
        assert_int_equal(
            block_writer_add_sample(w, frames, depth, (int64_t)(lcg(seed) % 100) + 1, &err), 0);
    }
    assert_int_equal(block_writer_end_profile(w, &err), 0);
}

static void upload_block(block_writer *w) {
    strata_buffer bytes = STRATA_BUFFER_INIT, json = STRATA_BUFFER_INIT;
    block_meta meta;
    strata_error err;
    assert_int_equal(block_writer_finish(w, &bytes, &meta, &err), 0);
    assert_int_equal(block_meta_encode(&meta, &json, &err), 0);
    char id[ULID_STRING_LEN + 1], key[256];
    ulid_format(&meta.id, id);
    snprintf(key, sizeof key, "%s/%s/%s", TENANT, id, BLOCK_DATA_FILE);
    assert_int_equal(bucket_upload(data.store, key, bytes.data, bytes.len, &err), 0);
    snprintf(key, sizeof key, "%s/%s/%s", TENANT, id, BLOCK_META_FILE);
    assert_int_equal(bucket_upload(data.store, key, json.data, json.len, &err), 0);
    strata_buffer_free(&bytes);
    strata_buffer_free(&json);
    block_meta_free(&meta);
}

/* Block b covers [T0 + 60 b s, T0 + 60 (b + 1) s). */
static void write_block(int b, uint64_t *seed) {
    static const char *const pods[N_PODS] = {"p0", "p1"};
    block_writer_options o;
    block_writer_options_default(&o);
    o.tenant = TENANT;
    strata_error err;
    block_writer *w = block_writer_new(&o, &err);
    assert_non_null(w);
    for (int t = 0; t < PROFILES_PER_BLOCK; t++)
        for (int p = 0; p < N_PODS; p++) {
            label_set l = LABEL_SET_INIT;
            assert_int_equal(label_set_add(&l, "pod", 3, pods[p], 2, &err), 0);
            add_profile(w, b, &l, T0 + (60 * b + 10 * t) * SEC, seed);
            label_set_free(&l);
        }
    upload_block(w);
    block_writer_free(w);
}

/* ---- indexes and engines ------------------------------------------------------------------ */

typedef struct fixture {
    block_index *index;
    query_engine *engine;
} fixture;

/* An engine over its own synced index with these cache bounds (0: none). */
static void fixture_open(fixture *f, size_t max_readers, uint64_t max_bytes) {
    strata_error err;
    block_index_options io;
    block_index_options_default(&io);
    io.max_open_readers = max_readers;
    io.max_open_reader_bytes = max_bytes;
    assert_int_equal(block_index_new(&io, data.store, &f->index, &err), 0);
    assert_int_equal(block_index_sync(f->index, &err), 0);
    query_engine_options eo;
    query_engine_options_default(&eo);
    eo.parallelism = 2;
    assert_int_equal(query_engine_new(&eo, f->index, &f->engine, &err), 0);
}

static void fixture_close(fixture *f) {
    query_engine_free(f->engine);
    block_index_free(f->index);
}

static block_index_stats stats_of(fixture *f) {
    block_index_stats s;
    block_index_get_stats(f->index, &s);
    return s;
}

/* A merge of CPU{extra} over [start, end]; the caller frees *tree. */
static merge_result merge(fixture *f, const char *matchers, int64_t start, int64_t end,
                          calltree **tree) {
    char text[256];
    snprintf(text, sizeof text, "%s%s", CPU, matchers);
    strata_error err;
    selector sel;
    assert_int_equal(selector_parse(text, &sel, &err), 0);
    assert_int_equal(calltree_create(tree, 0, &err), 0);
    merge_result res;
    if (query_merge(f->engine, TENANT, &sel, start, end, *tree, false, &res, &err) != 0)
        fail_msg("merge %s: %s", text, err.message);
    assert_int_equal(calltree_finalize(*tree, &err), 0);
    selector_free(&sel);
    return res;
}

/* What the open readers hold, read from the readers themselves, against what the index has
 * accounted for them (read while the census holds every block, so before its own release
 * accounts anything). Takes each block's lock: no query may run meanwhile on another thread. */
typedef struct reader_census {
    size_t sum;         /* block_reader_memory_bytes over open readers */
    size_t largest;     /* of one reader */
    size_t open;        /* readers */
    uint64_t accounted; /* block_index_stats.reader_bytes */
} reader_census;

static reader_census census(fixture *f) {
    strata_error err;
    indexed_block **blocks;
    size_t n;
    assert_int_equal(block_index_acquire(f->index, TENANT, T0, END, &blocks, &n, &err), 0);
    assert_int_equal(n, N_BLOCKS);
    reader_census c = {0};
    for (size_t i = 0; i < n; i++) {
        pthread_mutex_lock(&blocks[i]->mu);
        if (blocks[i]->reader != NULL) {
            size_t m = block_reader_memory_bytes(blocks[i]->reader);
            c.sum += m;
            c.largest = m > c.largest ? m : c.largest;
            c.open++;
        }
        pthread_mutex_unlock(&blocks[i]->mu);
    }
    c.accounted = stats_of(f).reader_bytes;
    block_index_release_all(f->index, blocks, n);
    return c;
}

/* ---- comparing answers -------------------------------------------------------------------- */

typedef struct node_lines {
    char **lines;
    size_t n, cap;
} node_lines;

/* One line per node: "root-first;path self total". */
static void collect_nodes(const calltree *tree, uint32_t node, const char *path, node_lines *out) {
    calltree_node_values v = calltree_node_get(tree, node);
    char line[4096];
    snprintf(line, sizeof line, "%s %lld %lld", path, (long long)v.self, (long long)v.total);
    if (out->n == out->cap) {
        out->cap = out->cap ? out->cap * 2 : 256;
        out->lines = realloc(out->lines, out->cap * sizeof *out->lines);
        assert_non_null(out->lines);
    }
    assert_non_null(out->lines[out->n++] = strdup(line));
    for (size_t i = 0; i < calltree_child_count(tree, node); i++) {
        uint32_t child = calltree_child_at(tree, node, i);
        calltree_frame fr = calltree_frame_get(tree, calltree_node_frame(tree, child));
        char child_path[2048];
        snprintf(child_path, sizeof child_path, "%s;%s", path, fr.name);
        collect_nodes(tree, child, child_path, out);
    }
}

static int compare_lines(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void expect_same_trees(const calltree *a, const calltree *b) {
    node_lines la = {0}, lb = {0};
    collect_nodes(a, CALLTREE_ROOT, "", &la);
    collect_nodes(b, CALLTREE_ROOT, "", &lb);
    assert_int_equal(la.n, lb.n);
    qsort(la.lines, la.n, sizeof *la.lines, compare_lines);
    qsort(lb.lines, lb.n, sizeof *lb.lines, compare_lines);
    for (size_t i = 0; i < la.n; i++) {
        if (strcmp(la.lines[i], lb.lines[i]) != 0)
            fail_msg("node differs:\n  cached:   %s\n  reopened: %s", la.lines[i], lb.lines[i]);
        free(la.lines[i]);
        free(lb.lines[i]);
    }
    free(la.lines);
    free(lb.lines);
}

static void expect_same_results(const merge_result *a, const merge_result *b) {
    assert_int_equal(a->profiles, b->profiles);
    assert_int_equal(a->samples, b->samples);
    assert_int_equal(a->total, b->total);
    assert_int_equal(a->min_time_ns, b->min_time_ns);
    assert_int_equal(a->max_time_ns, b->max_time_ns);
    assert_int_equal(a->duration_ns, b->duration_ns);
}

/* The same merge on both fixtures must agree on every field and every node. */
static void expect_same_merge(fixture *a, fixture *b, const char *matchers, int64_t start,
                              int64_t end) {
    calltree *ta, *tb;
    merge_result ra = merge(a, matchers, start, end, &ta);
    merge_result rb = merge(b, matchers, start, end, &tb);
    assert_true(ra.profiles > 0);
    expect_same_results(&ra, &rb);
    expect_same_trees(ta, tb);
    calltree_free(ta);
    calltree_free(tb);
}

/* ---- setup -------------------------------------------------------------------------------- */

static int setup(void **state) {
    (void)state;
    memset(&data, 0, sizeof data);
    snprintf(data.dir, sizeof data.dir, "/tmp/strata-block-index-test-XXXXXX");
    assert_non_null(mkdtemp(data.dir));
    strata_error err;
    assert_int_equal(bucket_open_filesystem(data.dir, NULL, &data.store, &err), 0);
    uint64_t seed = 7;
    for (int b = 0; b < N_BLOCKS; b++)
        write_block(b, &seed);
    fixture f;
    fixture_open(&f, 0, 0);
    calltree *tree;
    merge(&f, "", T0, END, &tree);
    calltree_free(tree);
    reader_census c = census(&f);
    assert_int_equal(c.open, N_BLOCKS);
    data.all = c.sum;
    data.biggest = c.largest;
    print_message("readers after a full merge: %zu bytes, largest %zu\n", c.sum, c.largest);
    fixture_close(&f);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    bucket_close(data.store);
    nftw(data.dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}

/* ---- tests -------------------------------------------------------------------------------- */

/* A reader grows as a merge decodes its symbols; the index's figure follows, both through the
 * engine (accounted after each use) and through a caller that only releases the block. */
static void test_growth_is_accounted(void **state) {
    (void)state;
    fixture f;
    fixture_open(&f, 0, 0);
    strata_error err;
    indexed_block **blocks;
    size_t n;
    assert_int_equal(block_index_acquire(f.index, TENANT, T0, END, &blocks, &n, &err), 0);
    for (size_t i = 0; i < n; i++) {
        pthread_mutex_lock(&blocks[i]->mu);
        assert_int_equal(block_index_open_reader(f.index, blocks[i], &err), 0);
        pthread_mutex_unlock(&blocks[i]->mu);
    }
    block_index_release_all(f.index, blocks, n);
    reader_census at_open = census(&f);
    assert_int_equal(at_open.open, N_BLOCKS);
    assert_int_equal(at_open.accounted, at_open.sum);

    calltree *tree;
    merge(&f, "", T0, END, &tree);
    calltree_free(tree);
    reader_census after_merge = census(&f);
    assert_true(after_merge.sum > at_open.sum + N_BLOCKS * 1024); /* symbol tables decoded */
    assert_int_equal(after_merge.accounted, after_merge.sum);
    assert_int_equal(after_merge.largest, data.biggest);
    fixture_close(&f);

    /* Without block_index_reader_used (as the compactor's tests and benchmarks use readers):
     * accounted when the block is released. */
    fixture_open(&f, 0, 0);
    assert_int_equal(block_index_acquire(f.index, TENANT, T0, END, &blocks, &n, &err), 0);
    pthread_mutex_lock(&blocks[0]->mu);
    assert_int_equal(block_index_open_reader(f.index, blocks[0], &err), 0);
    size_t opened = stats_of(&f).reader_bytes;
    block_function fn;
    assert_int_equal(block_reader_function(blocks[0]->reader, 1, &fn, &err), 0);
    pthread_mutex_unlock(&blocks[0]->mu);
    assert_int_equal(stats_of(&f).reader_bytes, opened);
    block_index_release_all(f.index, blocks, n);
    assert_true(stats_of(&f).reader_bytes > opened);
    reader_census c = census(&f);
    assert_int_equal(c.accounted, c.sum);
    fixture_close(&f);
}

/* Queries over more blocks than the byte bound holds: once they finish, the readers left open
 * hold at most the bound; while one runs, at most the bound plus the readers it holds. */
static void test_byte_bound_holds(void **state) {
    (void)state;
    uint64_t budget = data.biggest * 5 / 2;
    assert_true(data.all > budget); /* not every reader fits */
    fixture f;
    fixture_open(&f, 0, budget);
    for (int round = 0; round < 2; round++)
        for (int b = 0; b < N_BLOCKS; b++) {
            calltree *tree;
            int64_t start = T0 + 60 * b * SEC;
            merge(&f, "", start, start + 59 * SEC, &tree);
            calltree_free(tree);
            block_index_stats s = stats_of(&f);
            assert_true(s.reader_bytes <= budget);
            assert_true(s.readers_open >= 1 && s.readers_open < N_BLOCKS);
        }
    /* Blocks in a cycle longer than the cache: every query opened its reader. */
    block_index_stats s = stats_of(&f);
    assert_int_equal(s.reader_evictions_bytes, 2 * N_BLOCKS - s.readers_open);
    assert_int_equal(s.reader_evictions_count, 0);
    reader_census c = census(&f);
    assert_int_equal(c.accounted, c.sum);

    /* One query over every block: it holds all six readers until it ends (over the bound), and
     * the bound holds again after. Step by step, as a query over one block at a time: */
    strata_error err;
    indexed_block **blocks;
    size_t n;
    assert_int_equal(block_index_acquire(f.index, TENANT, T0, END, &blocks, &n, &err), 0);
    for (size_t i = 0; i < n; i++) {
        pthread_mutex_lock(&blocks[i]->mu);
        assert_int_equal(block_index_open_reader(f.index, blocks[i], &err), 0);
        block_function fn;
        assert_int_equal(block_reader_function(blocks[i]->reader, 1, &fn, &err), 0);
        block_index_reader_used(f.index, blocks[i]);
        pthread_mutex_unlock(&blocks[i]->mu);
        c = census(&f);
        assert_int_equal(c.accounted, c.sum); /* the growth counted before any release */
        assert_true(c.accounted <= budget + (i + 1) * data.biggest);
    }
    assert_int_equal(stats_of(&f).readers_open, N_BLOCKS);
    block_index_release_all(f.index, blocks, n);
    assert_true(stats_of(&f).reader_bytes <= budget);
    assert_true(stats_of(&f).readers_open < N_BLOCKS);
    fixture_close(&f);
}

/* A bound below one reader closes every reader once its query ends; the next queries reopen them
 * and answer exactly as an index that keeps them all. */
static void test_evicted_readers_reopen_with_same_answers(void **state) {
    (void)state;
    fixture cached, tight;
    fixture_open(&cached, 0, 0);
    fixture_open(&tight, 0, 1);
    for (int round = 0; round < 2; round++) {
        expect_same_merge(&cached, &tight, "", T0, END);
        assert_int_equal(stats_of(&tight).readers_open, 0);
        assert_int_equal(stats_of(&tight).reader_bytes, 0);
        expect_same_merge(&cached, &tight, "{pod=\"p1\"}", T0 + 30 * SEC, END - 90 * SEC);
        expect_same_merge(&cached, &tight, "{pod!=\"p1\"}", T0 + 60 * SEC, T0 + 119 * SEC);
    }
    block_index_stats s = stats_of(&tight);
    assert_true(s.reader_evictions_bytes >= 2 * (N_BLOCKS + 2));
    assert_int_equal(s.readers_open, 0);
    assert_int_equal(stats_of(&cached).readers_open, N_BLOCKS);
    assert_int_equal(stats_of(&cached).reader_evictions_bytes, 0);

    /* Label queries reopen the readers too. */
    char **names_a, **names_b;
    size_t na, nb;
    strata_error err;
    assert_int_equal(
        query_labels(cached.engine, TENANT, "pod", NULL, 0, NULL, T0, END, &names_a, &na, &err), 0);
    assert_int_equal(
        query_labels(tight.engine, TENANT, "pod", NULL, 0, NULL, T0, END, &names_b, &nb, &err), 0);
    assert_int_equal(na, N_PODS);
    assert_int_equal(nb, na);
    for (size_t i = 0; i < na; i++)
        assert_string_equal(names_a[i], names_b[i]);
    query_strings_free(names_a, na);
    query_strings_free(names_b, nb);
    assert_int_equal(stats_of(&tight).readers_open, 0);
    fixture_close(&cached);
    fixture_close(&tight);
}

/* Readers a query holds stay open (the same readers, still usable) while other queries run and
 * release blocks over the bound; they close when that query gives them back. */
static void test_held_readers_are_not_closed(void **state) {
    (void)state;
    fixture f;
    fixture_open(&f, 1, 1);
    strata_error err;
    indexed_block **held;
    size_t n;
    assert_int_equal(block_index_acquire(f.index, TENANT, T0, END, &held, &n, &err), 0);
    assert_int_equal(n, N_BLOCKS);
    block_reader *readers[N_BLOCKS];
    size_t profiles[N_BLOCKS] = {0};
    for (size_t i = 0; i < n; i++) {
        pthread_mutex_lock(&held[i]->mu);
        assert_int_equal(block_index_open_reader(f.index, held[i], &err), 0);
        readers[i] = held[i]->reader;
        block_profile *p = NULL;
        assert_int_equal(block_reader_profiles(readers[i], NULL, 0, INT64_MIN, INT64_MAX, &p,
                                               &profiles[i], &err),
                         0);
        free(p);
        block_index_reader_used(f.index, held[i]);
        pthread_mutex_unlock(&held[i]->mu);
    }
    /* Other queries over the same blocks, each over both bounds when it ends. */
    for (int q = 0; q < 3; q++) {
        calltree *tree;
        merge(&f, "", T0, END, &tree);
        calltree_free(tree);
    }
    block_index_stats s = stats_of(&f);
    assert_int_equal(s.readers_open, N_BLOCKS);
    assert_true(s.reader_bytes > 1);
    assert_int_equal(s.reader_evictions_bytes + s.reader_evictions_count, 0);
    for (size_t i = 0; i < n; i++) {
        pthread_mutex_lock(&held[i]->mu);
        assert_ptr_equal(held[i]->reader, readers[i]);
        block_profile *p = NULL;
        size_t np = 0;
        assert_int_equal(
            block_reader_profiles(held[i]->reader, NULL, 0, INT64_MIN, INT64_MAX, &p, &np, &err),
            0);
        assert_int_equal(np, profiles[i]);
        free(p);
        pthread_mutex_unlock(&held[i]->mu);
    }
    block_index_release_all(f.index, held, n);
    s = stats_of(&f);
    assert_int_equal(s.readers_open, 0);
    assert_int_equal(s.reader_bytes, 0);
    assert_int_equal(s.reader_evictions_count + s.reader_evictions_bytes, N_BLOCKS);
    fixture_close(&f);
}

/* max_open_blocks alone still bounds the cache, and counts its evictions apart. */
static void test_count_bound_holds(void **state) {
    (void)state;
    fixture f;
    fixture_open(&f, 2, 0);
    for (int b = 0; b < N_BLOCKS; b++) {
        calltree *tree;
        int64_t start = T0 + 60 * b * SEC;
        merge(&f, "", start, start + 59 * SEC, &tree);
        calltree_free(tree);
        assert_true(stats_of(&f).readers_open <= 2);
    }
    calltree *tree;
    merge(&f, "", T0, END, &tree);
    calltree_free(tree);
    block_index_stats s = stats_of(&f);
    assert_true(s.readers_open <= 2);
    assert_true(s.reader_evictions_count >= N_BLOCKS - 2);
    assert_int_equal(s.reader_evictions_bytes, 0);
    fixture_close(&f);
}

/* Queries on several threads over a bound of about two readers: evictions race with opens and
 * releases, and every answer is still the cached index's. */
typedef struct racer {
    fixture *f;
    int64_t want_total;
    uint64_t want_profiles;
    int failures;
} racer;

static void *race(void *arg) {
    racer *r = arg;
    for (int i = 0; i < 8; i++) {
        int64_t start = T0 + 60 * (i % N_BLOCKS) * SEC;
        char text[] = CPU;
        strata_error err;
        selector sel;
        calltree *tree;
        merge_result res;
        if (selector_parse(text, &sel, &err) != 0 || calltree_create(&tree, 0, &err) != 0) {
            r->failures++;
            continue;
        }
        /* alternately everything and two blocks from start (wrapping is fine: fewer blocks) */
        int64_t end = i % 2 == 0 ? END : start + 119 * SEC;
        int rc = query_merge(r->f->engine, TENANT, &sel, i % 2 == 0 ? T0 : start, end, tree, false,
                             &res, &err);
        if (rc != 0 ||
            (i % 2 == 0 && (res.total != r->want_total || res.profiles != r->want_profiles)))
            r->failures++;
        calltree_free(tree);
        selector_free(&sel);
    }
    return NULL;
}

static void test_concurrent_queries_over_a_small_bound(void **state) {
    (void)state;
    fixture cached, tight;
    fixture_open(&cached, 0, 0);
    fixture_open(&tight, 0, data.biggest * 2);
    calltree *tree;
    merge_result want = merge(&cached, "", T0, END, &tree);
    calltree_free(tree);
    racer racers[4];
    pthread_t threads[4];
    for (int t = 0; t < 4; t++) {
        racers[t] = (racer){&tight, want.total, want.profiles, 0};
        assert_int_equal(pthread_create(&threads[t], NULL, race, &racers[t]), 0);
    }
    for (int t = 0; t < 4; t++) {
        assert_int_equal(pthread_join(threads[t], NULL), 0);
        assert_int_equal(racers[t].failures, 0);
    }
    block_index_stats s = stats_of(&tight);
    assert_true(s.reader_bytes <= data.biggest * 2);
    assert_true(s.reader_evictions_bytes > 0);
    reader_census c = census(&tight);
    assert_int_equal(c.accounted, c.sum);
    assert_int_equal(c.open, s.readers_open);
    fixture_close(&cached);
    fixture_close(&tight);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_growth_is_accounted),
        cmocka_unit_test(test_byte_bound_holds),
        cmocka_unit_test(test_evicted_readers_reopen_with_same_answers),
        cmocka_unit_test(test_held_readers_are_not_closed),
        cmocka_unit_test(test_count_bound_holds),
        cmocka_unit_test(test_concurrent_queries_over_a_small_bound),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
