/*
 * block_index_test.c - the querier's reader cache: its byte bound, its count bound, accounting
 * of readers that grow as queries decode them, and the guarantee that a reader a query holds is
 * never closed under it. Then which blocks queries see while compaction climbs levels (the
 * lineage tests, each with a bucket of its own; see "lineage" below).
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
#include <time.h>

#include "block/block_format.h"
#include "block/block_meta.h"
#include "block/block_writer.h"
#include "block/bucket_index.h"
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

/* Sum of the page caches of the index's open readers. */
static uint64_t page_cache_bytes(fixture *f) {
    strata_error err;
    indexed_block **blocks;
    size_t n;
    assert_int_equal(block_index_acquire(f->index, TENANT, T0, END, &blocks, &n, &err), 0);
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++) {
        pthread_mutex_lock(&blocks[i]->mu);
        if (blocks[i]->reader != NULL)
            sum += block_reader_page_cache_bytes(blocks[i]->reader);
        pthread_mutex_unlock(&blocks[i]->mu);
    }
    block_index_release_all(f->index, blocks, n);
    return sum;
}

/* Over the byte bound, idle readers drop their cached pages before any reader is closed: a bound
 * that holds every reader's symbols but not every page cache keeps every reader open, and the
 * answers stay the same. */
static void test_page_caches_shed_before_readers_close(void **state) {
    (void)state;
    fixture all, shed;
    fixture_open(&all, 0, 0);
    calltree *tree;
    merge_result want = merge(&all, "", T0, END, &tree);
    calltree_free(tree);
    uint64_t held = stats_of(&all).reader_bytes, caches = page_cache_bytes(&all);
    assert_true(caches > 0 && caches < held);
    uint64_t budget = held - caches / 2;
    fixture_open(&shed, 0, budget);
    for (int round = 0; round < 2; round++) {
        merge_result got = merge(&shed, "", T0, END, &tree);
        calltree_free(tree);
        assert_int_equal(got.total, want.total);
        assert_int_equal(got.samples, want.samples);
        block_index_stats s = stats_of(&shed);
        assert_int_equal(s.readers_open, N_BLOCKS);
        assert_int_equal(s.reader_evictions_bytes, 0);
        assert_true(s.page_cache_sheds > 0);
        assert_true(s.reader_bytes <= budget);
    }
    assert_int_equal(stats_of(&all).page_cache_sheds, 0);
    fixture_close(&all);
    fixture_close(&shed);
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

/* ---- lineage: what a querier sees while L1 -> L2 -> L3 -> L4 compaction runs --------------- */

/* Blocks as the compactor makes them: two level-1 blocks per timestamp (one per pod), a level-2
 * block per timestamp from its two, a level-3 block per four level-2 blocks, one level-4 block
 * from the two level-3 ones. Real data objects, so merges run through the engine; each step is
 * the compactor's (commit the merged block, then mark its parents "compacted into" it, delete
 * marked blocks meta.json first and the mark last). After every step, a fresh index (as a
 * querier that starts then), a fresh index that first reads a bucket-index.json one compactor
 * cycle old, and one long-lived index (synced at every step) each see every level-1 block exactly
 * once, and a merge counts every profile once. */
#define LTENANT "lineage"
#define LSTEPS 8 /* timestamps, 30 minutes apart */
#define LPODS 2
#define LGROUP 4 /* level-2 blocks per level-3 block */
#define LPERIOD 10
#define LT0 (INT64_C(1700006400) * SEC + 600 * SEC) /* a day's start plus 10 minutes */
#define LSTEP (1800 * SEC)
#define LEND (LT0 + LSTEPS * LSTEP)
#define LPROFILES (LSTEPS * LPODS)

/* A temporary directory for a bucket, in memory where the machine has /dev/shm: the filesystem
 * bucket fsyncs every object, and the lineage tests write thousands. */
static void temp_bucket_dir(char *dir, size_t cap, const char *name) {
    struct stat st;
    const char *base = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp";
    snprintf(dir, cap, "%s/strata-%s-XXXXXX", base, name);
    if (mkdtemp(dir) == NULL) {
        snprintf(dir, cap, "/tmp/strata-%s-XXXXXX", name);
        assert_non_null(mkdtemp(dir));
    }
}

/* A FILESYSTEM bucket in a new temporary directory (dir, 64 bytes), and its removal. */
static bucket *open_temp_bucket(char *dir, const char *name) {
    temp_bucket_dir(dir, 64, name);
    bucket *store;
    strata_error err;
    assert_int_equal(bucket_open_filesystem(dir, NULL, &store, &err), 0);
    return store;
}

static void close_temp_bucket(bucket *store, const char *dir) {
    bucket_close(store);
    nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

typedef struct lin_block {
    ulid id;
    char text[ULID_STRING_LEN + 1];
    int64_t min_ms, max_ms;
    ulid sources[LPROFILES]; /* sorted */
    size_t n_sources;
} lin_block;

typedef struct lineage_fx {
    char dir[64];
    bucket *store;
    lin_block l1[LSTEPS][LPODS], l2[LSTEPS], l3[LSTEPS / LGROUP], l4;
    block_index *live; /* a querier running all along */
    query_engine *live_engine;
    int checks;
} lineage_fx;

/* The samples of the profile of pod p at step t: two stacks with values of their own. */
static int64_t lin_work(int t, int p) {
    return (t + 1) * 100 + p * 10 + 1;
}
static int64_t lin_idle(int p) {
    return p + 3;
}

static int64_t lin_expected_total(void) {
    int64_t total = 0;
    for (int t = 0; t < LSTEPS; t++)
        for (int p = 0; p < LPODS; p++)
            total += (lin_work(t, p) + lin_idle(p)) * LPERIOD;
    return total;
}

static void lin_upload(lineage_fx *fx, const char *id, const char *file, const void *bytes,
                       size_t len) {
    char key[256];
    snprintf(key, sizeof key, "%s/%s/%s", LTENANT, id, file);
    strata_error err;
    assert_int_equal(bucket_upload(fx->store, key, bytes, len, &err), 0);
}

static void lin_delete(lineage_fx *fx, const char *id, const char *file) {
    char key[256];
    snprintf(key, sizeof key, "%s/%s/%s", LTENANT, id, file);
    strata_error err;
    assert_int_equal(bucket_delete(fx->store, key, &err), 0);
}

static int compare_ulids(const void *a, const void *b) {
    return ulid_compare(a, b);
}

/* Writes a block holding the profiles of steps [t0, t1) of pods [p0, p1), at `level`, whose
 * parents are parents[0..n) (none for level 1): sources are the sorted union of theirs, as
 * block_merge records them. Data object first, meta.json last. */
static void lin_write(lineage_fx *fx, lin_block *out, int level, int t0, int t1, int p0, int p1,
                      lin_block *const *parents, size_t n) {
    static const profile_type cpu = {"process_cpu", "samples", "count", "cpu", "nanoseconds", true};
    block_writer_options o;
    block_writer_options_default(&o);
    o.tenant = LTENANT;
    o.compaction_level = level;
    strata_error err;
    block_writer *w = block_writer_new(&o, &err);
    assert_non_null(w);
    for (int p = p0; p < p1; p++) {
        char pod[16];
        snprintf(pod, sizeof pod, "p%d", p);
        label_set l = LABEL_SET_INIT;
        assert_int_equal(label_set_add(&l, "pod", 3, pod, strlen(pod), &err), 0);
        for (int t = t0; t < t1; t++) {
            assert_int_equal(
                block_writer_begin_profile(w, &l, &cpu, LT0 + t * LSTEP, 10 * SEC, LPERIOD, &err),
                0);
            block_frame work[2] = {{.function_name = "work", .mapping_file = "/bin/app"},
                                   {.function_name = "main", .mapping_file = "/bin/app"}};
            block_frame idle[2] = {{.function_name = "idle", .mapping_file = "/bin/app"},
                                   {.function_name = "main", .mapping_file = "/bin/app"}};
            assert_int_equal(block_writer_add_sample(w, work, 2, lin_work(t, p), &err), 0);
            assert_int_equal(block_writer_add_sample(w, idle, 2, lin_idle(p), &err), 0);
            assert_int_equal(block_writer_end_profile(w, &err), 0);
        }
        label_set_free(&l);
    }
    strata_buffer bytes = STRATA_BUFFER_INIT, json = STRATA_BUFFER_INIT;
    block_meta meta;
    block_meta_init(&meta);
    assert_int_equal(block_writer_finish(w, &bytes, &meta, &err), 0);
    block_writer_free(w);
    memset(out, 0, sizeof *out);
    out->id = meta.id;
    ulid_format(&meta.id, out->text);
    out->min_ms = meta.min_time_ms;
    out->max_ms = meta.max_time_ms;
    if (n == 0) {
        out->sources[out->n_sources++] = meta.id;
    } else {
        block_meta_parent ps[LSTEPS];
        for (size_t i = 0; i < n; i++) {
            ps[i] = (block_meta_parent){parents[i]->id, parents[i]->min_ms, parents[i]->max_ms};
            for (size_t k = 0; k < parents[i]->n_sources; k++)
                out->sources[out->n_sources++] = parents[i]->sources[k];
        }
        qsort(out->sources, out->n_sources, sizeof *out->sources, compare_ulids);
        assert_int_equal(block_meta_set_sources(&meta, out->sources, out->n_sources, &err), 0);
        assert_int_equal(block_meta_set_parents(&meta, ps, n, &err), 0);
    }
    assert_int_equal(meta.compaction_level, level);
    assert_int_equal(block_meta_encode(&meta, &json, &err), 0);
    lin_upload(fx, out->text, BLOCK_DATA_FILE, bytes.data, bytes.len);
    lin_upload(fx, out->text, BLOCK_META_FILE, json.data, json.len);
    strata_buffer_free(&bytes);
    strata_buffer_free(&json);
    block_meta_free(&meta);
}

/* deletion-mark.json as the compactor writes it on a block that `into` replaces. */
static void lin_mark(lineage_fx *fx, const lin_block *b, const lin_block *into) {
    char details[64];
    snprintf(details, sizeof details, "%s%s", BLOCK_DELETION_COMPACTED_INTO, into->text);
    block_deletion_mark mark = {.id = b->id, .deletion_time = 1700000000, .details = details};
    strata_buffer json = STRATA_BUFFER_INIT;
    strata_error err;
    assert_int_equal(block_deletion_mark_encode(&mark, &json, &err), 0);
    lin_upload(fx, b->text, BLOCK_DELETION_MARK_FILE, json.data, json.len);
    strata_buffer_free(&json);
}

/* The compactor's deletion of a marked block, in its order. */
static void lin_delete_block(lineage_fx *fx, const lin_block *b) {
    lin_delete(fx, b->text, BLOCK_META_FILE);
    lin_delete(fx, b->text, BLOCK_DATA_FILE);
    lin_delete(fx, b->text, BLOCK_DELETION_MARK_FILE);
}

/* bucket-index.json of the tenant as it is now (the compactor writes it at the end of a cycle). */
static int collect_block_dir(const char *key, void *ctx, strata_error *err) {
    (void)err;
    char(*names)[ULID_STRING_LEN + 1] = ((void **)ctx)[0];
    size_t *n = ((void **)ctx)[1];
    const char *slash = strchr(key, '/');
    if (slash != NULL && strlen(slash + 1) == ULID_STRING_LEN + 1 && *n < 64)
        snprintf(names[(*n)++], ULID_STRING_LEN + 1, "%.*s", ULID_STRING_LEN, slash + 1);
    return 0;
}

/* Adds the meta.json stored at key to bi; false when there is none. */
static bool index_add_stored_meta(bucket *store, const char *key, bucket_index *bi) {
    strata_error err;
    strata_buffer json = STRATA_BUFFER_INIT;
    bool found = bucket_get(store, key, &json, &err) == 0;
    if (found) {
        block_meta meta;
        block_meta_init(&meta);
        assert_int_equal(block_meta_decode((const char *)json.data, json.len, &meta, &err), 0);
        assert_int_equal(bucket_index_add_block(bi, &meta, &err), 0);
        block_meta_free(&meta);
    }
    strata_buffer_free(&json);
    return found;
}

static void lin_write_bucket_index(lineage_fx *fx) {
    char names[64][ULID_STRING_LEN + 1];
    size_t n = 0;
    void *ctx[2] = {names, &n};
    strata_error err;
    assert_int_equal(bucket_iterate(fx->store, LTENANT, false, collect_block_dir, ctx, &err), 0);
    bucket_index bi;
    bucket_index_init(&bi);
    bi.updated_at = 1700000000;
    for (size_t i = 0; i < n; i++) {
        char key[256];
        snprintf(key, sizeof key, "%s/%s/%s", LTENANT, names[i], BLOCK_META_FILE);
        index_add_stored_meta(fx->store, key, &bi);
        bool marked = false;
        snprintf(key, sizeof key, "%s/%s/%s", LTENANT, names[i], BLOCK_DELETION_MARK_FILE);
        assert_int_equal(bucket_exists(fx->store, key, &marked, &err), 0);
        ulid id;
        assert_int_equal(ulid_parse(names[i], ULID_STRING_LEN, &id, &err), 0);
        if (marked)
            assert_int_equal(bucket_index_add_mark(&bi, &id, 1700000000, &err), 0);
    }
    strata_buffer json = STRATA_BUFFER_INIT;
    assert_int_equal(bucket_index_encode(&bi, &json, &err), 0);
    char key[256];
    snprintf(key, sizeof key, "%s/%s", LTENANT, BUCKET_INDEX_FILE);
    assert_int_equal(bucket_upload(fx->store, key, json.data, json.len, &err), 0);
    strata_buffer_free(&json);
    bucket_index_free(&bi);
}

/* The visible blocks of ix: every level-1 block of the dataset in exactly one visible block's
 * lineage (its sources; itself for a block without), nothing else; and a merge through the
 * engine counts each profile once. Returns the number of visible blocks. */
static size_t expect_each_source_once(lineage_fx *fx, block_index *ix, query_engine *e,
                                      const char *who, const char *step) {
    strata_error err;
    indexed_block **blocks;
    size_t n;
    assert_int_equal(block_index_acquire(ix, LTENANT, LT0 - SEC, LEND, &blocks, &n, &err), 0);
    int seen[LSTEPS][LPODS] = {{0}};
    size_t unknown = 0;
    for (size_t i = 0; i < n; i++) {
        const block_meta *m = &blocks[i]->meta;
        size_t ns = m->n_sources > 0 ? m->n_sources : 1;
        for (size_t k = 0; k < ns; k++) {
            const ulid *s = m->n_sources > 0 ? &m->sources[k] : &m->id;
            bool found = false;
            for (int t = 0; t < LSTEPS && !found; t++)
                for (int p = 0; p < LPODS && !found; p++)
                    if (ulid_compare(s, &fx->l1[t][p].id) == 0) {
                        seen[t][p]++;
                        found = true;
                    }
            unknown += found ? 0 : 1;
        }
    }
    for (int t = 0; t < LSTEPS; t++)
        for (int p = 0; p < LPODS; p++)
            if (seen[t][p] != 1) {
                char list[4096] = "";
                for (size_t i = 0; i < n; i++) {
                    size_t len = strlen(list);
                    snprintf(list + len, sizeof list - len, " %s(level %d)", blocks[i]->ulid_text,
                             blocks[i]->meta.compaction_level);
                }
                fail_msg("%s, %s: level-1 block of step %d pod %d seen %d times; visible:%s", step,
                         who, t, p, seen[t][p], list);
            }
    assert_int_equal(unknown, 0);
    block_index_release_all(ix, blocks, n);

    selector sel;
    assert_int_equal(selector_parse(CPU, &sel, &err), 0);
    calltree *tree;
    assert_int_equal(calltree_create(&tree, 0, &err), 0);
    merge_result res;
    if (query_merge(e, LTENANT, &sel, LT0, LEND, tree, false, &res, &err) != 0)
        fail_msg("%s, %s: merge: %s", step, who, err.message);
    if (res.total != lin_expected_total() || res.profiles != LPROFILES)
        fail_msg("%s, %s: merge counted %llu profiles, total %lld; want %d, %lld", step, who,
                 (unsigned long long)res.profiles, (long long)res.total, LPROFILES,
                 (long long)lin_expected_total());
    /* The engine folds identical profiles met in two blocks; none were stored twice here, so a
     * fold would mean a block read along with one holding its data. */
    if (res.stats.duplicates != 0)
        fail_msg("%s, %s: %llu profiles folded as duplicates", step, who,
                 (unsigned long long)res.stats.duplicates);
    calltree_free(tree);
    selector_free(&sel);
    return n;
}

static block_index *lin_index(lineage_fx *fx, bool bucket_indexes) {
    block_index_options io;
    block_index_options_default(&io);
    block_index *ix;
    strata_error err;
    assert_int_equal(block_index_new(&io, fx->store, &ix, &err), 0);
    if (bucket_indexes)
        assert_int_equal(block_index_load_bucket_indexes(ix, &err), 0);
    assert_int_equal(block_index_sync(ix, &err), 0);
    return ix;
}

static query_engine *lin_engine(block_index *ix) {
    query_engine_options eo;
    query_engine_options_default(&eo);
    eo.parallelism = 2;
    query_engine *e;
    strata_error err;
    assert_int_equal(query_engine_new(&eo, ix, &e, &err), 0);
    return e;
}

/* Every view of the bucket now. Returns what a fresh querier sees (visible blocks). */
static size_t lin_check(lineage_fx *fx, const char *step) {
    size_t visible = 0;
    for (int with_bucket_index = 0; with_bucket_index < 2; with_bucket_index++) {
        block_index *ix = lin_index(fx, with_bucket_index == 1);
        query_engine *e = lin_engine(ix);
        size_t n = expect_each_source_once(
            fx, ix, e, with_bucket_index ? "fresh index after bucket-index.json" : "fresh index",
            step);
        if (with_bucket_index == 0)
            visible = n;
        query_engine_free(e);
        block_index_free(ix);
    }
    strata_error err;
    assert_int_equal(block_index_sync(fx->live, &err), 0);
    expect_each_source_once(fx, fx->live, fx->live_engine, "long-lived index", step);
    fx->checks++;
    return visible;
}

static void lin_open(lineage_fx *fx) {
    memset(fx, 0, sizeof *fx);
    temp_bucket_dir(fx->dir, sizeof fx->dir, "lineage-test");
    strata_error err;
    assert_int_equal(bucket_open_filesystem(fx->dir, NULL, &fx->store, &err), 0);
    for (int t = 0; t < LSTEPS; t++)
        for (int p = 0; p < LPODS; p++)
            lin_write(fx, &fx->l1[t][p], 1, t, t + 1, p, p + 1, NULL, 0);
    fx->live = lin_index(fx, false);
    fx->live_engine = lin_engine(fx->live);
    assert_int_equal(lin_check(fx, "level 1 only"), LPROFILES);
}

static void lin_close(lineage_fx *fx) {
    query_engine_free(fx->live_engine);
    block_index_free(fx->live);
    bucket_close(fx->store);
    nftw(fx->dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Commits `out` from parents, checks, marks the parents, checks; with the merged block's meta.json
 * held back (a listing that does not show it yet, as an eventually consistent store may), the
 * marked parents still answer: no gap. */
static void lin_compact(lineage_fx *fx, lin_block *out, int level, int t0, int t1,
                        lin_block *const *parents, size_t n, const char *what) {
    char step[128];
    lin_write(fx, out, level, t0, t1, 0, LPODS, parents, n);
    snprintf(step, sizeof step, "%s committed, sources unmarked", what);
    lin_check(fx, step);
    for (size_t i = 0; i < n; i++)
        lin_mark(fx, parents[i], out);
    snprintf(step, sizeof step, "%s committed, sources marked", what);
    lin_check(fx, step);

    char key[256];
    snprintf(key, sizeof key, "%s/%s/%s", LTENANT, out->text, BLOCK_META_FILE);
    strata_buffer meta = STRATA_BUFFER_INIT;
    strata_error err;
    assert_int_equal(bucket_get(fx->store, key, &meta, &err), 0);
    assert_int_equal(bucket_delete(fx->store, key, &err), 0);
    snprintf(step, sizeof step, "%s marked, its meta.json not listed yet", what);
    block_index *ix = lin_index(fx, false);
    query_engine *e = lin_engine(ix);
    expect_each_source_once(fx, ix, e, "fresh index", step);
    query_engine_free(e);
    block_index_free(ix);
    assert_int_equal(bucket_upload(fx->store, key, meta.data, meta.len, &err), 0);
    strata_buffer_free(&meta);
}

/* Level 1 to level 4, every step checked; marks left in place (delete_delay not over). */
static void lin_build_to_level_4(lineage_fx *fx) {
    char what[64];
    for (int t = 0; t < LSTEPS; t++) {
        lin_block *parents[LPODS] = {&fx->l1[t][0], &fx->l1[t][1]};
        snprintf(what, sizeof what, "level 2 of step %d", t);
        lin_compact(fx, &fx->l2[t], 2, t, t + 1, parents, LPODS, what);
    }
    lin_write_bucket_index(fx);
    assert_int_equal(lin_check(fx, "every level-2 block"), LSTEPS);
    for (int h = 0; h < LSTEPS / LGROUP; h++) {
        lin_block *parents[LGROUP];
        for (int k = 0; k < LGROUP; k++)
            parents[k] = &fx->l2[h * LGROUP + k];
        snprintf(what, sizeof what, "level 3 number %d", h);
        lin_compact(fx, &fx->l3[h], 3, h * LGROUP, (h + 1) * LGROUP, parents, LGROUP, what);
    }
    lin_write_bucket_index(fx);
    assert_int_equal(lin_check(fx, "every level-3 block"), LSTEPS / LGROUP);
    lin_block *parents[LSTEPS / LGROUP];
    for (int h = 0; h < LSTEPS / LGROUP; h++)
        parents[h] = &fx->l3[h];
    lin_compact(fx, &fx->l4, 4, 0, LSTEPS, parents, LSTEPS / LGROUP, "level 4");
    lin_write_bucket_index(fx);
    /* The reported bug: level-2 blocks marked "compacted into" a level-3 block that is itself
     * hidden by (and marked into) the level-4 block were counted again by a querier that
     * started now. */
    assert_int_equal(lin_check(fx, "level 4 with every mark"), 1);
}

static void test_lineage_compaction_in_order(void **state) {
    (void)state;
    lineage_fx *fx = calloc(1, sizeof *fx);
    assert_non_null(fx);
    lin_open(fx);
    lin_build_to_level_4(fx);
    /* Deletions delete_delay after each mark: level 1 first (marked first), then 2, then 3. */
    for (int t = 0; t < LSTEPS; t++)
        for (int p = 0; p < LPODS; p++) {
            lin_delete(fx, fx->l1[t][p].text, BLOCK_META_FILE);
            if (t == 0 && p == 0)
                lin_check(fx, "a level-1 block half deleted");
            lin_delete(fx, fx->l1[t][p].text, BLOCK_DATA_FILE);
            lin_delete(fx, fx->l1[t][p].text, BLOCK_DELETION_MARK_FILE);
        }
    assert_int_equal(lin_check(fx, "level-1 blocks deleted"), 1);
    for (int t = 0; t < LSTEPS; t++) {
        lin_delete_block(fx, &fx->l2[t]);
        if (t == 0)
            lin_check(fx, "one level-2 block deleted");
    }
    lin_write_bucket_index(fx);
    assert_int_equal(lin_check(fx, "level-2 blocks deleted"), 1);
    lin_delete_block(fx, &fx->l3[0]);
    assert_int_equal(lin_check(fx, "one level-3 block deleted"), 1);
    lin_delete_block(fx, &fx->l3[1]);
    assert_int_equal(lin_check(fx, "only level 4 left"), 1);
    block_index_stats s;
    block_index_get_stats(fx->live, &s);
    assert_int_equal(s.blocks, 1);
    print_message("%d checks\n", fx->checks);
    lin_close(fx);
    free(fx);
}

/* Intermediate blocks gone before the blocks they replaced (another deletion order, an operator's
 * rm-block): level-3 blocks deleted while levels 1 and 2 still wait, marked; then level 2. */
static void test_lineage_intermediate_blocks_deleted_first(void **state) {
    (void)state;
    lineage_fx *fx = calloc(1, sizeof *fx);
    assert_non_null(fx);
    lin_open(fx);
    lin_build_to_level_4(fx);
    lin_delete_block(fx, &fx->l3[0]);
    assert_int_equal(lin_check(fx, "level 3 number 0 deleted, levels 1 and 2 marked"), 1);
    lin_delete_block(fx, &fx->l3[1]);
    assert_int_equal(lin_check(fx, "level 3 deleted, levels 1 and 2 marked"), 1);
    for (int t = 0; t < LSTEPS; t++)
        lin_delete_block(fx, &fx->l2[t]);
    assert_int_equal(lin_check(fx, "levels 2 and 3 deleted, level 1 marked"), 1);
    /* A querier holding the level-3 block's replacement only: its level-2 and level-1 marks name
     * blocks that are gone, and the level-4 block still hides them by their sources. */
    lin_write_bucket_index(fx);
    assert_int_equal(lin_check(fx, "levels 2 and 3 deleted, bucket index rewritten"), 1);
    lin_close(fx);
    free(fx);
}

/* ---- lineage rules on meta.json alone ------------------------------------------------------- */

/* A block's meta.json with no data object (an index never opens one unless a query reads it). */
static ulid put_meta(bucket *store, const char *tenant, int64_t time_ms, int level,
                     const ulid *sources, size_t n_sources, const ulid *parents, size_t n_parents) {
    strata_error err;
    block_meta m;
    block_meta_init(&m);
    assert_int_equal(ulid_new_at(time_ms, &m.id, &err), 0);
    m.min_time_ms = time_ms;
    m.max_time_ms = time_ms + 1000;
    m.num_samples = m.num_series = m.num_profiles = 1;
    m.compaction_level = level;
    m.version = BLOCK_META_VERSION;
    m.format_version = BLOCK_FORMAT_VERSION;
    assert_non_null(m.tenant = strdup(tenant));
    assert_non_null(m.files = calloc(1, sizeof *m.files));
    m.n_files = 1;
    assert_non_null(m.files[0].rel_path = strdup(BLOCK_DATA_FILE));
    m.files[0].size_bytes = 100;
    if (n_sources > 0)
        assert_int_equal(block_meta_set_sources(&m, sources, n_sources, &err), 0);
    else if (level == 1 && sources != NULL)
        assert_int_equal(block_meta_set_sources(&m, &m.id, 1, &err), 0);
    if (n_parents > 0) {
        block_meta_parent ps[32];
        assert_true(n_parents <= 32);
        for (size_t i = 0; i < n_parents; i++)
            ps[i] = (block_meta_parent){parents[i], time_ms, time_ms + 1000};
        assert_int_equal(block_meta_set_parents(&m, ps, n_parents, &err), 0);
    }
    strata_buffer json = STRATA_BUFFER_INIT;
    assert_int_equal(block_meta_encode(&m, &json, &err), 0);
    char id[ULID_STRING_LEN + 1], key[256];
    ulid_format(&m.id, id);
    snprintf(key, sizeof key, "%s/%s/%s", tenant, id, BLOCK_META_FILE);
    assert_int_equal(bucket_upload(store, key, json.data, json.len, &err), 0);
    strata_buffer_free(&json);
    ulid out = m.id;
    block_meta_free(&m);
    return out;
}

static void put_mark(bucket *store, const char *tenant, const ulid *id, const ulid *into) {
    char details[64], text[ULID_STRING_LEN + 1], key[256];
    ulid_format(into, text);
    snprintf(details, sizeof details, "%s%s", BLOCK_DELETION_COMPACTED_INTO, text);
    block_deletion_mark mark = {.id = *id, .deletion_time = 1700000000, .details = details};
    strata_buffer json = STRATA_BUFFER_INIT;
    strata_error err;
    assert_int_equal(block_deletion_mark_encode(&mark, &json, &err), 0);
    ulid_format(id, text);
    snprintf(key, sizeof key, "%s/%s/%s", tenant, text, BLOCK_DELETION_MARK_FILE);
    assert_int_equal(bucket_upload(store, key, json.data, json.len, &err), 0);
    strata_buffer_free(&json);
}

/* Stores bi as tenant's bucket-index.json and frees it. */
static void put_bucket_index(bucket *store, const char *tenant, bucket_index *bi) {
    strata_error err;
    strata_buffer json = STRATA_BUFFER_INIT;
    assert_int_equal(bucket_index_encode(bi, &json, &err), 0);
    char key[256];
    snprintf(key, sizeof key, "%s/%s", tenant, BUCKET_INDEX_FILE);
    assert_int_equal(bucket_upload(store, key, json.data, json.len, &err), 0);
    strata_buffer_free(&json);
    bucket_index_free(bi);
}

/* bucket-index.json as the compactor writes it at the end of a cycle, here with marks only (a
 * querier's recheck reads nothing else from it). */
static void put_bucket_index_marks(bucket *store, const char *tenant, const ulid *const *ids,
                                   const size_t *counts, size_t n_lists) {
    bucket_index bi;
    bucket_index_init(&bi);
    strata_error err;
    for (size_t l = 0; l < n_lists; l++)
        for (size_t i = 0; i < counts[l]; i++)
            assert_int_equal(bucket_index_add_mark(&bi, &ids[l][i], 1700000000, &err), 0);
    put_bucket_index(store, tenant, &bi);
}

static uint64_t bucket_requests(bucket *store) {
    bucket_stats st;
    bucket_get_stats(store, &st);
    uint64_t n = 0;
    for (int op = 0; op < BUCKET_OP_COUNT; op++)
        n += st.operations[op];
    return n;
}

static void drop_meta(bucket *store, const char *tenant, const ulid *id) {
    char text[ULID_STRING_LEN + 1], key[256];
    ulid_format(id, text);
    snprintf(key, sizeof key, "%s/%s/%s", tenant, text, BLOCK_META_FILE);
    strata_error err;
    assert_int_equal(bucket_delete(store, key, &err), 0);
}

static int compare_id_texts(const void *a, const void *b) {
    return strcmp(a, b);
}

/* The visible blocks of tenant, sorted by ULID, as text joined by spaces. */
static void visible_ids(block_index *ix, const char *tenant, char *out, size_t cap) {
    strata_error err;
    indexed_block **blocks;
    size_t n;
    assert_int_equal(block_index_acquire(ix, tenant, 0, INT64_MAX / 2, &blocks, &n, &err), 0);
    char(*ids)[ULID_STRING_LEN + 1] = calloc(n + 1, sizeof *ids);
    assert_non_null(ids);
    for (size_t i = 0; i < n; i++)
        snprintf(ids[i], sizeof ids[i], "%.26s", blocks[i]->ulid_text);
    block_index_release_all(ix, blocks, n);
    qsort(ids, n, sizeof *ids, compare_id_texts);
    out[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(out);
        snprintf(out + len, cap - len, "%s%s", i > 0 ? " " : "", ids[i]);
    }
    free(ids);
}

static void expected_ids(char *out, size_t cap, const ulid *ids, size_t n) {
    ulid sorted[16];
    assert_true(n <= 16);
    memcpy(sorted, ids, n * sizeof *ids);
    qsort(sorted, n, sizeof *sorted, compare_ulids);
    out[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        char text[ULID_STRING_LEN + 1];
        ulid_format(&sorted[i], text);
        size_t len = strlen(out);
        snprintf(out + len, cap - len, "%s%s", i > 0 ? " " : "", text);
    }
}

static void expect_visible(block_index *ix, const char *tenant, const ulid *ids, size_t n,
                           const char *what) {
    char got[1024], want[1024];
    visible_ids(ix, tenant, got, sizeof got);
    expected_ids(want, sizeof want, ids, n);
    if (strcmp(got, want) != 0)
        fail_msg("%s: visible [%s], want [%s]", what, got, want);
}

static const ulid *greater_ulid(const ulid *a, const ulid *b) {
    return ulid_compare(a, b) > 0 ? a : b;
}

/* Equal source sets: the higher level wins, then the greater ULID, whatever the order in which
 * blocks are found; a level-1 block without sources is its own source; another tenant's blocks
 * never hide a tenant's; removing the covering block shows the covered ones again. */
static void test_lineage_ties_and_removals(void **state) {
    (void)state;
    char dir[64];
    temp_bucket_dir(dir, sizeof dir, "lineage-ties");
    bucket *store;
    strata_error err;
    assert_int_equal(bucket_open_filesystem(dir, NULL, &store, &err), 0);
    const int64_t t = 1700006400000;
    ulid ab[2];
    ab[0] = put_meta(store, "ties", t, 1, ab, 0, NULL, 0); /* sources [self] */
    ab[1] = put_meta(store, "ties", t + 1, 1, ab, 0, NULL, 0);
    ulid c = put_meta(store, "ties", t + 2, 1, NULL, 0, NULL, 0); /* no sources at all */
    ulid x = put_meta(store, "ties", t, 2, ab, 2, ab, 2);
    ulid y = put_meta(store, "ties", t, 3, ab, 2, &x, 1);          /* x rewritten alone */
    ulid z = put_meta(store, "ties", t, 3, ab, 2, ab, 2);          /* the same merge done twice */
    ulid w = put_meta(store, "ties", t + 2, 2, &c, 1, &c, 1);      /* c rewritten alone */
    ulid other = put_meta(store, "ties-copy", t, 2, ab, 2, ab, 2); /* same sources, other tenant */
    const ulid *top = greater_ulid(&y, &z);
    ulid want[2] = {*top, w};

    block_index_options io;
    block_index_options_default(&io);
    block_index *ix;
    assert_int_equal(block_index_new(&io, store, &ix, &err), 0);
    assert_int_equal(block_index_sync(ix, &err), 0);
    expect_visible(ix, "ties", want, 2, "listed");
    expect_visible(ix, "ties-copy", &other, 1, "the other tenant");
    block_index_free(ix);

    /* Found one at a time, in both orders. */
    const ulid *orders[2][7] = {{&ab[0], &ab[1], &c, &x, &y, &z, &w},
                                {&w, &z, &y, &x, &c, &ab[1], &ab[0]}};
    for (int o = 0; o < 2; o++) {
        assert_int_equal(block_index_new(&io, store, &ix, &err), 0);
        for (int i = 0; i < 7; i++) {
            char text[ULID_STRING_LEN + 1];
            ulid_format(orders[o][i], text);
            assert_int_equal(block_index_announce(ix, "ties", text, &err), 0);
            if (o == 0 && i == 1)
                expect_visible(ix, "ties", ab, 2, "two level-1 blocks");
            if (o == 0 && i == 3) {
                ulid v[2] = {c, x};
                expect_visible(ix, "ties", v, 2, "the level-2 block and c");
            }
            if (o == 1 && i == 1)
                expect_visible(ix, "ties", (ulid[]){w, z}, 2, "w and z");
        }
        expect_visible(ix, "ties", want, 2, o == 0 ? "announced oldest first" : "newest first");
        block_index_free(ix);
    }

    /* Removals: the covering block goes, the next one in line shows. */
    assert_int_equal(block_index_new(&io, store, &ix, &err), 0);
    assert_int_equal(block_index_sync(ix, &err), 0);
    drop_meta(store, "ties", top);
    assert_int_equal(block_index_sync(ix, &err), 0);
    const ulid *second = top == &y ? &z : &y;
    expect_visible(ix, "ties", (ulid[]){*second, w}, 2, "the greater twin deleted");
    drop_meta(store, "ties", second);
    assert_int_equal(block_index_sync(ix, &err), 0);
    expect_visible(ix, "ties", (ulid[]){x, w}, 2, "both level-3 twins deleted");
    drop_meta(store, "ties", &w);
    drop_meta(store, "ties", &x);
    assert_int_equal(block_index_sync(ix, &err), 0);
    expect_visible(ix, "ties", (ulid[]){ab[0], ab[1], c}, 3, "every merged block deleted");
    block_index_stats s;
    block_index_get_stats(ix, &s);
    assert_int_equal(s.blocks, 4); /* three here, one of ties-copy */
    assert_int_equal(s.hidden, 0);
    block_index_free(ix);
    close_temp_bucket(store, dir);
}

/* 10,376 blocks of one tenant: 8,192 level-1 blocks, 2,048 level-2 (four each), 128 level-3
 * (sixteen each), 8 level-4 (sixteen each). First with no marks (every merge committed, no mark
 * written yet), then with every mark and half the level-3 blocks deleted: a fresh index shows the
 * eight level-4 blocks and nothing else; a long-lived one follows deletions of level-4 blocks. */
#define S_L1 8192
#define S_FAN2 4
#define S_FAN3 16
#define S_FAN4 16
#define S_L2 (S_L1 / S_FAN2)
#define S_L3 (S_L2 / S_FAN3)
#define S_L4 (S_L3 / S_FAN4)

static size_t visible_sources(block_index *ix, const char *tenant, size_t *blocks_out,
                              int *max_level) {
    strata_error err;
    indexed_block **blocks;
    size_t n, sources = 0;
    assert_int_equal(block_index_acquire(ix, tenant, 0, INT64_MAX / 2, &blocks, &n, &err), 0);
    *max_level = 0;
    int min_level = 99;
    for (size_t i = 0; i < n; i++) {
        sources += blocks[i]->meta.n_sources;
        if (blocks[i]->meta.compaction_level > *max_level)
            *max_level = blocks[i]->meta.compaction_level;
        if (blocks[i]->meta.compaction_level < min_level)
            min_level = blocks[i]->meta.compaction_level;
    }
    block_index_release_all(ix, blocks, n);
    *blocks_out = n;
    if (n > 0 && min_level != *max_level)
        *max_level = -min_level;
    return sources;
}

static void test_lineage_ten_thousand_blocks(void **state) {
    (void)state;
    char dir[64];
    temp_bucket_dir(dir, sizeof dir, "lineage-scale");
    bucket *store;
    strata_error err;
    assert_int_equal(bucket_open_filesystem(dir, NULL, &store, &err), 0);
    const int64_t t = 1700006400000;
    ulid *l1 = malloc(S_L1 * sizeof *l1), *l2 = malloc(S_L2 * sizeof *l2);
    ulid l3[S_L3], l4[S_L4];
    assert_non_null(l1);
    assert_non_null(l2);
    for (size_t i = 0; i < S_L1; i++)
        l1[i] = put_meta(store, "big", t + (int64_t)i * 1000, 1, l1, 0, NULL, 0);
    for (size_t i = 0; i < S_L2; i++)
        l2[i] = put_meta(store, "big", t + (int64_t)i * 4000, 2, &l1[i * S_FAN2], S_FAN2,
                         &l1[i * S_FAN2], S_FAN2);
    for (size_t i = 0; i < S_L3; i++)
        l3[i] = put_meta(store, "big", t + (int64_t)i * 64000, 3, &l1[i * S_FAN2 * S_FAN3],
                         S_FAN2 * S_FAN3, &l2[i * S_FAN3], S_FAN3);
    for (size_t i = 0; i < S_L4; i++)
        l4[i] =
            put_meta(store, "big", t + (int64_t)i * 1024000, 4, &l1[i * S_FAN2 * S_FAN3 * S_FAN4],
                     S_FAN2 * S_FAN3 * S_FAN4, &l3[i * S_FAN4], S_FAN4);

    block_index_options io;
    block_index_options_default(&io);
    block_index *live;
    assert_int_equal(block_index_new(&io, store, &live, &err), 0);
    assert_int_equal(block_index_sync(live, &err), 0);
    size_t n;
    int level;
    assert_int_equal(visible_sources(live, "big", &n, &level), S_L1);
    assert_int_equal(n, S_L4);
    assert_int_equal(level, 4);
    block_index_stats s;
    block_index_get_stats(live, &s);
    assert_int_equal(s.blocks, S_L1 + S_L2 + S_L3 + S_L4);
    assert_int_equal(s.hidden, S_L1 + S_L2 + S_L3);

    /* One level-4 block deleted (an operator's rm-block): its sixteen level-3 blocks show. */
    drop_meta(store, "big", &l4[S_L4 - 1]);
    assert_int_equal(block_index_sync(live, &err), 0);
    assert_int_equal(visible_sources(live, "big", &n, &level), S_L1);
    assert_int_equal(n, S_L4 - 1 + S_FAN4);
    assert_int_equal(level, -3);
    l4[S_L4 - 1] = put_meta(store, "big", t + (int64_t)(S_L4 - 1) * 1024000, 4,
                            &l1[(S_L4 - 1) * S_FAN2 * S_FAN3 * S_FAN4], S_FAN2 * S_FAN3 * S_FAN4,
                            &l3[(S_L4 - 1) * S_FAN4], S_FAN4);
    assert_int_equal(block_index_sync(live, &err), 0);
    assert_int_equal(visible_sources(live, "big", &n, &level), S_L1);
    assert_int_equal(n, S_L4);

    /* Every mark, and half the level-3 blocks deleted. */
    for (size_t i = 0; i < S_L1; i++)
        put_mark(store, "big", &l1[i], &l2[i / S_FAN2]);
    for (size_t i = 0; i < S_L2; i++)
        put_mark(store, "big", &l2[i], &l3[i / S_FAN3]);
    for (size_t i = 0; i < S_L3; i++) {
        put_mark(store, "big", &l3[i], &l4[i / S_FAN4]);
        if (i % 2 == 0)
            drop_meta(store, "big", &l3[i]);
    }
    /* Idle, a long-lived index costs one listing of the tenant per sync and, every tenth, one
     * of the tenants and one GET of bucket-index.json: no request per block. Without an index
     * (no compactor has run: nothing can be marked) the marks written above stay unread. */
    block_index_get_stats(live, &s);
    size_t blocks_before = s.blocks;
    uint64_t before = bucket_requests(store);
    for (int i = 0; i < 10; i++)
        assert_int_equal(block_index_sync(live, &err), 0);
    assert_int_equal(bucket_requests(store) - before, 10 + 1 + 1);
    block_index_get_stats(live, &s);
    assert_int_equal(s.blocks, blocks_before);

    /* The compactor's index names the marks: a fresh index drops the marked blocks at once, and
     * the tenth sync of the long-lived one reads the marks of the blocks it knows (once: they
     * are then retired); the next ten syncs cost what idle syncs cost again. */
    const ulid *marked[] = {l1, l2, l3};
    const size_t counts[] = {S_L1, S_L2, S_L3};
    put_bucket_index_marks(store, "big", marked, counts, 3);
    block_index *fresh;
    assert_int_equal(block_index_new(&io, store, &fresh, &err), 0);
    assert_int_equal(block_index_sync(fresh, &err), 0);
    assert_int_equal(visible_sources(fresh, "big", &n, &level), S_L1);
    assert_int_equal(n, S_L4);
    assert_int_equal(level, 4);
    block_index_get_stats(fresh, &s);
    assert_int_equal(s.blocks, S_L4); /* the others dropped at once, remembered as retired */
    assert_int_equal(s.hidden, 0);
    block_index_free(fresh);

    for (int i = 0; i < 10; i++)
        assert_int_equal(block_index_sync(live, &err), 0);
    assert_int_equal(visible_sources(live, "big", &n, &level), S_L1);
    assert_int_equal(n, S_L4);
    block_index_get_stats(live, &s);
    assert_int_equal(s.blocks, S_L4);
    assert_int_equal(s.hidden, 0);
    before = bucket_requests(store);
    for (int i = 0; i < 10; i++)
        assert_int_equal(block_index_sync(live, &err), 0);
    assert_int_equal(bucket_requests(store) - before, 10 + 1 + 1);

    /* After so many removals (the index's structure rebuilt meanwhile), new blocks still find
     * their place: two level-1 blocks, then the level-2 block over them. */
    const int64_t later = t + (int64_t)S_L1 * 1000;
    ulid fresh_l1[2];
    fresh_l1[0] = put_meta(store, "big", later, 1, fresh_l1, 0, NULL, 0);
    fresh_l1[1] = put_meta(store, "big", later + 1000, 1, fresh_l1, 0, NULL, 0);
    assert_int_equal(block_index_sync(live, &err), 0);
    assert_int_equal(visible_sources(live, "big", &n, &level), S_L1 + 2);
    assert_int_equal(n, S_L4 + 2);
    put_meta(store, "big", later, 2, fresh_l1, 2, fresh_l1, 2);
    assert_int_equal(block_index_sync(live, &err), 0);
    assert_int_equal(visible_sources(live, "big", &n, &level), S_L1 + 2);
    assert_int_equal(n, S_L4 + 1);
    block_index_get_stats(live, &s);
    assert_int_equal(s.blocks, S_L4 + 3);
    assert_int_equal(s.hidden, 2);
    block_index_free(live);
    free(l1);
    free(l2);
    bucket_close(store);
    nftw(dir, remove_entry, 64, FTW_DEPTH | FTW_PHYS);
}

/* The tenants are listed every tenth sync, and on the sync after a query asked for a tenant the
 * index knows no block of: a new tenant's first block is found within a sync of its first query. */
static void test_new_tenant_found_after_its_first_query(void **state) {
    (void)state;
    char dir[64];
    bucket *store = open_temp_bucket(dir, "new-tenant");
    strata_error err;
    const int64_t t = 1700006400000;
    put_meta(store, "old", t, 1, NULL, 0, NULL, 0);
    block_index_options io;
    block_index_options_default(&io);
    block_index *ix;
    assert_int_equal(block_index_new(&io, store, &ix, &err), 0);
    assert_int_equal(block_index_sync(ix, &err), 0); /* lists the tenants: "old" */
    put_meta(store, "new", t, 1, NULL, 0, NULL, 0);
    assert_int_equal(block_index_sync(ix, &err), 0);
    indexed_block **blocks;
    size_t n;
    assert_int_equal(block_index_acquire(ix, "new", 0, INT64_MAX / 2, &blocks, &n, &err), 0);
    block_index_release_all(ix, blocks, n);
    assert_int_equal(n, 0); /* not listed yet: the query asks for the tenants to be listed */
    uint64_t before = bucket_requests(store);
    assert_int_equal(block_index_sync(ix, &err), 0);
    assert_int_equal(block_index_acquire(ix, "new", 0, INT64_MAX / 2, &blocks, &n, &err), 0);
    block_index_release_all(ix, blocks, n);
    assert_int_equal(n, 1);
    /* that sync: the tenants, then each tenant, then the new block's meta.json and mark */
    assert_int_equal(bucket_requests(store) - before, 1 + 2 + 2);
    /* A tenant the index knows does not ask again. */
    assert_int_equal(block_index_acquire(ix, "old", 0, INT64_MAX / 2, &blocks, &n, &err), 0);
    block_index_release_all(ix, blocks, n);
    before = bucket_requests(store);
    assert_int_equal(block_index_sync(ix, &err), 0);
    assert_int_equal(bucket_requests(store) - before, 2);
    block_index_free(ix);
    close_temp_bucket(store, dir);
}

/* bucket-index.json naming the blocks ids (their meta read back from the bucket), no marks. */
static void put_bucket_index_blocks(bucket *store, const char *tenant, const ulid *ids, size_t n) {
    bucket_index bi;
    bucket_index_init(&bi);
    for (size_t i = 0; i < n; i++) {
        char text[ULID_STRING_LEN + 1], key[256];
        ulid_format(&ids[i], text);
        snprintf(key, sizeof key, "%s/%s/%s", tenant, text, BLOCK_META_FILE);
        assert_true(index_add_stored_meta(store, key, &bi));
    }
    put_bucket_index(store, tenant, &bi);
}

/* Between full listings the sync thread lists only the ULIDs of the last 15 minutes: a new block
 * is found, an old one that appears late and a deleted one are not, until a full listing (or the
 * compactor's index) tells; a recheck reads an unchanged bucket-index.json with one attributes
 * request. */
static void test_recent_listings(void **state) {
    (void)state;
    char dir[64];
    bucket *store = open_temp_bucket(dir, "recent");
    strata_error err;
    const int64_t now = strata_now_ns() / STRATA_NS_PER_MS;
    ulid a = put_meta(store, "t", now - 2 * 3600 * 1000, 1, NULL, 0, NULL, 0);
    block_index_options io;
    block_index_options_default(&io);
    block_index *ix;
    assert_int_equal(block_index_new(&io, store, &ix, &err), 0);
    assert_int_equal(block_index_sync(ix, &err), 0);
    expect_visible(ix, "t", &a, 1, "the first full listing");

    ulid b = put_meta(store, "t", now, 1, NULL, 0, NULL, 0);
    ulid c = put_meta(store, "t", now - 3600 * 1000, 1, NULL, 0, NULL, 0);
    drop_meta(store, "t", &a);
    uint64_t before = bucket_requests(store);
    assert_int_equal(block_index_sync_recent(ix, &err), 0);
    /* the listing, then b's meta.json and its (missing) deletion mark: nothing of a or c */
    assert_int_equal(bucket_requests(store) - before, 1 + 2);
    expect_visible(ix, "t", (ulid[]){a, b}, 2, "a recent listing");
    block_index_stats s;
    block_index_get_stats(ix, &s);
    assert_int_equal(s.full_listings, 1);
    assert_int_equal(block_index_sync(ix, &err), 0);
    expect_visible(ix, "t", (ulid[]){b, c}, 2, "the next full listing");

    /* A block only the compactor's index names, older than a recent listing reaches: found at
     * the next recheck (every tenth sync) without a full listing. */
    ulid d = put_meta(store, "t", now - 3 * 3600 * 1000, 1, NULL, 0, NULL, 0);
    put_bucket_index_blocks(store, "t", (ulid[]){b, c, d}, 3);
    block_index_get_stats(ix, &s);
    while (s.syncs % 10 != 0) {
        assert_int_equal(block_index_sync_recent(ix, &err), 0);
        block_index_get_stats(ix, &s);
    }
    expect_visible(ix, "t", (ulid[]){b, c}, 2, "before the recheck");
    assert_int_equal(block_index_sync_recent(ix, &err), 0);
    expect_visible(ix, "t", (ulid[]){b, c, d}, 3, "the index read at the recheck");
    block_index_get_stats(ix, &s);
    assert_int_equal(s.full_listings, 2);
    assert_int_equal(s.from_bucket_index, 1);
    /* Ten recent syncs more: ten listings, then at the recheck the tenants and one attributes
     * request for the unchanged index. */
    before = bucket_requests(store);
    for (int i = 0; i < 10; i++)
        assert_int_equal(block_index_sync_recent(ix, &err), 0);
    assert_int_equal(bucket_requests(store) - before, 10 + 1 + 1);
    block_index_free(ix);
    close_temp_bucket(store, dir);
}

/* An idle querier lists rarely (idle_sync_interval, here an hour), but a query arriving then
 * waits for a listing: it sees the block committed just before it. */
static void test_query_after_idle_waits_for_a_listing(void **state) {
    (void)state;
    char dir[64];
    bucket *store = open_temp_bucket(dir, "idle-wake");
    strata_error err;
    const int64_t now = strata_now_ns() / STRATA_NS_PER_MS;
    ulid a = put_meta(store, "t", now - 60 * 1000, 1, NULL, 0, NULL, 0);
    block_index_options io;
    block_index_options_default(&io);
    io.full_sync_interval_ns = 3600 * STRATA_NS_PER_SEC;
    io.sync_interval_ns = 20 * STRATA_NS_PER_MS;
    io.idle_sync_interval_ns = 3600 * STRATA_NS_PER_SEC;
    block_index *ix;
    assert_int_equal(block_index_new(&io, store, &ix, &err), 0);
    assert_int_equal(block_index_start(ix, &err), 0); /* its first sync finds a */
    ulid b = put_meta(store, "t", now - 2 * 3600 * 1000, 1, NULL, 0, NULL, 0); /* an old ULID */
    struct timespec pause = {0, 50 * 1000 * 1000}; /* past sync_interval since the last sync */
    nanosleep(&pause, NULL);
    block_index_stats s;
    block_index_get_stats(ix, &s);
    assert_int_equal(s.syncs, 1); /* idle (no query yet): the thread has not listed again */
    assert_int_equal(s.blocks, 1);
    indexed_block **blocks;
    size_t n;
    assert_int_equal(block_index_acquire(ix, "t", 0, INT64_MAX / 2, &blocks, &n, &err), 0);
    block_index_release_all(ix, blocks, n);
    assert_int_equal(n, 2);
    block_index_get_stats(ix, &s);
    assert_true(s.syncs >= 2); /* busy now: the thread lists every 20 ms */
    /* the first, and the one the query asked for (full: it also finds blocks under old ULIDs);
     * the busy ones since are recent */
    assert_int_equal(s.full_listings, 2);
    expect_visible(ix, "t", (ulid[]){a, b}, 2, "after the query's listing");
    block_index_free(ix);
    close_temp_bucket(store, dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_growth_is_accounted),
        cmocka_unit_test(test_byte_bound_holds),
        cmocka_unit_test(test_page_caches_shed_before_readers_close),
        cmocka_unit_test(test_evicted_readers_reopen_with_same_answers),
        cmocka_unit_test(test_held_readers_are_not_closed),
        cmocka_unit_test(test_count_bound_holds),
        cmocka_unit_test(test_concurrent_queries_over_a_small_bound),
        cmocka_unit_test(test_lineage_compaction_in_order),
        cmocka_unit_test(test_lineage_intermediate_blocks_deleted_first),
        cmocka_unit_test(test_lineage_ties_and_removals),
        cmocka_unit_test(test_lineage_ten_thousand_blocks),
        cmocka_unit_test(test_new_tenant_found_after_its_first_query),
        cmocka_unit_test(test_recent_listings),
        cmocka_unit_test(test_query_after_idle_waits_for_a_listing),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
