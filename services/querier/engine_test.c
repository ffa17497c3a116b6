/*
 * engine_test.c - merges through block rollups against the same merges over sample rows.
 *
 * Three blocks in a FILESYSTEM bucket, a minute each, of three CPU series (samples:count, so
 * values are scaled by each profile's period, which varies) and one memory series (unscaled); the
 * third block is written without rollups, as older blocks are. Every query runs on two engines,
 * one using rollups and one made to scan sample rows, each over its own block index, and the
 * answers must agree on every merge_result field and every node of the tree; totals are also
 * checked against sums kept while writing. Which path a block took is read from its reader's
 * byte counters: a block whose series the range covers completely reads rollup pages and no
 * sample page; a block the range cuts reads samples.
 *
 * Tenant t2 holds the same profiles cut as the ingester cuts them: one long-lived writer whose
 * dictionary every block comes from (block_writer_detach), so its blocks carry stack origins
 * (docs/block-format.md 6.12) and a merge translates each dictionary stack once across blocks;
 * every merge over t2 must equal the same merge over t1, node for node.
 *
 * The block driver's threads: queries one after another start none (the engine's helpers, made
 * by the first query, run every later pass), queries at once agree with a query alone, and a
 * block's error fails its pass while a block's DATA_LOSS only leaves that block out.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ftw.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "block/block_format.h"
#include "block/block_writer.h"
#include "block/ulid.h"
#include "block_index.h"
#include "bucket/bucket.h"
#include "calltree/calltree.h"
#include "common/clock.h"
#include "engine.h"
#include "engine_internal.h"
#include "fanout_loopback.h"

#define TENANT "t1"
#define TENANT_DICTIONARY "t2"
/* t2's blocks again, cut from two dictionaries (even and odd blocks), as two ingesters write: a
 * query's shared sums then hold two dictionaries, the second added while a worker may be adding
 * to the first */
#define TENANT_TWO_DICTIONARIES "t5"
#define SEC STRATA_NS_PER_SEC
#define T0 (INT64_C(1700000000) * SEC)
#define N_PODS 3
#define N_BLOCKS 3
#define PROFILES_PER_BLOCK 6 /* one every 10 s per series */

static const char *const pod_names[N_PODS] = {"p0", "p1", "p2"};
static const char *const fn_names[] = {"main", "serve", "parse", "encode", "gc",   "alloc",
                                       "read", "write", "hash",  "sort",   "lock", "poll"};

typedef struct test_data {
    char dir[64];
    bucket *store;
    /* expected merge totals, kept while writing */
    int64_t cpu_total;                 /* every CPU profile, scaled by period */
    int64_t cpu_pod_total[N_PODS];     /* per pod */
    int64_t cpu_block_total[N_BLOCKS]; /* per block */
    int64_t mem_total;
    block_writer *dictionary; /* tenant t2's long-lived writer */
    block_writer *two[2];     /* tenant t5's, one for the even blocks and one for the odd */
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

/* One profile of random stacks from a small function pool, so stacks repeat across profiles and
 * series. Returns the sum of its values. */
static int64_t add_profile(block_writer *w, const label_set *labels, const profile_type *type,
                           int64_t time_ns, int64_t period, uint64_t *seed) {
    strata_error err;
    assert_int_equal(block_writer_begin_profile(w, labels, type, time_ns, 10 * SEC, period, &err),
                     0);
    int64_t sum = 0;
    for (int i = 0; i < 40; i++) {
        block_frame frames[6];
        size_t depth = 1 + lcg(seed) % 5;
        for (size_t f = 0; f < depth; f++) {
            const char *name = fn_names[lcg(seed) % (sizeof fn_names / sizeof fn_names[0])];
            frames[f] = (block_frame){name, name, "x.c", 1, 1, "/bin/app", "b1", 0x1000 + f};
        }
        frames[depth] = (block_frame){"main", "main", "x.c", 1, 1, "/bin/app", "b1", 0x10};
        int64_t value = (int64_t)(lcg(seed) % 100) + 1;
        assert_int_equal(block_writer_add_sample(w, frames, depth + 1, value, &err), 0);
        sum += value;
    }
    assert_int_equal(block_writer_end_profile(w, &err), 0);
    return sum;
}

static void upload_block(block_writer *w, const char *tenant) {
    strata_buffer bytes = STRATA_BUFFER_INIT, json = STRATA_BUFFER_INIT;
    block_meta meta;
    strata_error err;
    assert_int_equal(block_writer_finish(w, &bytes, &meta, &err), 0);
    assert_int_equal(block_meta_encode(&meta, &json, &err), 0);
    char id[ULID_STRING_LEN + 1], key[256];
    ulid_format(&meta.id, id);
    snprintf(key, sizeof key, "%s/%s/%s", tenant, id, BLOCK_DATA_FILE);
    assert_int_equal(bucket_upload(data.store, key, bytes.data, bytes.len, &err), 0);
    snprintf(key, sizeof key, "%s/%s/%s", tenant, id, BLOCK_META_FILE);
    assert_int_equal(bucket_upload(data.store, key, json.data, json.len, &err), 0);
    strata_buffer_free(&bytes);
    strata_buffer_free(&json);
    block_meta_free(&meta);
}

static profile_type cpu_type(void) {
    return (profile_type){"process_cpu", "samples", "count", "cpu", "nanoseconds", true};
}

static profile_type mem_type(void) {
    return (profile_type){"memory", "alloc_space", "bytes", "space", "bytes", false};
}

/* Block b covers [T0 + 60 b s, T0 + 60 (b + 1) s); the last one has no rollups. */
static void write_block(int b, uint64_t *seed) {
    block_writer_options o;
    block_writer_options_default(&o);
    o.tenant = TENANT;
    o.page_size = 1024; /* several pages per table */
    o.write_rollups = b != N_BLOCKS - 1;
    strata_error err;
    block_writer *w = block_writer_new(&o, &err);
    assert_non_null(w);
    profile_type cpu = cpu_type(), mem = mem_type();
    for (int t = 0; t < PROFILES_PER_BLOCK; t++) {
        int64_t time_ns = T0 + (60 * b + 10 * t) * SEC;
        for (int p = 0; p < N_PODS; p++) {
            label_set l = LABEL_SET_INIT;
            assert_int_equal(label_set_add(&l, "pod", 3, pod_names[p], 2, &err), 0);
            int64_t period = 1000 + 7 * ((t + p) % 3); /* varies per profile */
            uint64_t replay = *seed;
            int64_t v = add_profile(w, &l, &cpu, time_ns, period, seed) * period;
            uint64_t replay_two = replay;
            assert_int_equal(add_profile(data.dictionary, &l, &cpu, time_ns, period, &replay),
                             v / period);
            add_profile(data.two[b % 2], &l, &cpu, time_ns, period, &replay_two);
            data.cpu_total += v;
            data.cpu_pod_total[p] += v;
            data.cpu_block_total[b] += v;
            if (p == 0) {
                replay = *seed;
                replay_two = *seed;
                data.mem_total += add_profile(w, &l, &mem, time_ns, 512, seed);
                add_profile(data.dictionary, &l, &mem, time_ns, 512, &replay);
                add_profile(data.two[b % 2], &l, &mem, time_ns, 512, &replay_two);
            }
            label_set_free(&l);
        }
    }
    upload_block(w, TENANT);
    block_writer_free(w);
    block_writer *cut;
    assert_int_equal(block_writer_detach(data.dictionary, &cut, &err), 0);
    upload_block(cut, TENANT_DICTIONARY);
    block_writer_free(cut);
    assert_int_equal(block_writer_detach(data.two[b % 2], &cut, &err), 0);
    upload_block(cut, TENANT_TWO_DICTIONARIES);
    block_writer_free(cut);
}

static int setup(void **state) {
    (void)state;
    memset(&data, 0, sizeof data);
    snprintf(data.dir, sizeof data.dir, "/tmp/strata-engine-test-XXXXXX");
    assert_non_null(mkdtemp(data.dir));
    strata_error err;
    assert_int_equal(bucket_open_filesystem(data.dir, NULL, &data.store, &err), 0);
    block_writer_options o;
    block_writer_options_default(&o);
    o.tenant = TENANT_DICTIONARY;
    o.page_size = 1024;
    data.dictionary = block_writer_new(&o, &err);
    assert_non_null(data.dictionary);
    o.tenant = TENANT_TWO_DICTIONARIES;
    for (int i = 0; i < 2; i++) {
        data.two[i] = block_writer_new(&o, &err);
        assert_non_null(data.two[i]);
    }
    uint64_t seed = 42;
    for (int b = 0; b < N_BLOCKS; b++)
        write_block(b, &seed);
    block_writer_free(data.dictionary);
    data.dictionary = NULL;
    for (int i = 0; i < 2; i++) {
        block_writer_free(data.two[i]);
        data.two[i] = NULL;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    bucket_close(data.store);
    nftw(data.dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}

/* An engine over its own index, so reader byte counters show what its queries read. */
typedef struct engine_fixture {
    block_index *index;
    query_engine *engine;
} engine_fixture;

static void engine_open(engine_fixture *f, bool use_rollups) {
    strata_error err;
    block_index_options io;
    block_index_options_default(&io);
    assert_int_equal(block_index_new(&io, data.store, &f->index, &err), 0);
    assert_int_equal(block_index_sync(f->index, &err), 0);
    query_engine_options eo;
    query_engine_options_default(&eo);
    eo.parallelism = 2;
    eo.use_rollups = use_rollups;
    assert_int_equal(query_engine_new(&eo, f->index, &f->engine, &err), 0);
}

static void engine_close(engine_fixture *f) {
    query_engine_free(f->engine);
    block_index_free(f->index);
}

/* ---- comparing trees ---------------------------------------------------------------------- */

typedef struct node_lines {
    char **lines;
    size_t n, cap;
} node_lines;

/* One line per node: "root-first;path self total self_base total_base". */
static void collect_nodes(const calltree *tree, uint32_t node, const char *path, node_lines *out) {
    calltree_node_values v = calltree_node_get(tree, node);
    char line[4096];
    snprintf(line, sizeof line, "%s %lld %lld %lld %lld", path, (long long)v.self,
             (long long)v.total, (long long)v.self_base, (long long)v.total_base);
    if (out->n == out->cap) {
        out->cap = out->cap ? out->cap * 2 : 256;
        out->lines = realloc(out->lines, out->cap * sizeof *out->lines);
        assert_non_null(out->lines);
    }
    out->lines[out->n++] = strdup(line);
    for (size_t i = 0; i < calltree_child_count(tree, node); i++) {
        uint32_t child = calltree_child_at(tree, node, i);
        calltree_frame f = calltree_frame_get(tree, calltree_node_frame(tree, child));
        char child_path[2048];
        snprintf(child_path, sizeof child_path, "%s;%s@%s", path, f.name, f.mapping_file);
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
    assert_int_equal(calltree_node_count(a), calltree_node_count(b));
    qsort(la.lines, la.n, sizeof *la.lines, compare_lines);
    qsort(lb.lines, lb.n, sizeof *lb.lines, compare_lines);
    for (size_t i = 0; i < la.n; i++) {
        if (strcmp(la.lines[i], lb.lines[i]) != 0)
            fail_msg("node differs:\n  rollups: %s\n  rows:    %s", la.lines[i], lb.lines[i]);
        free(la.lines[i]);
        free(lb.lines[i]);
    }
    free(la.lines);
    free(lb.lines);
}

typedef struct merge_case {
    const char *selector;
    int64_t start_ns, end_ns;
    bool single; /* query_single at start_ns */
    bool base;
    int64_t want_period; /* the result's period (the earliest profile's), when non-zero */
} merge_case;

static void run_case(query_engine *e, const char *tenant, const merge_case *c, calltree **tree,
                     merge_result *res) {
    strata_error err;
    selector sel;
    assert_int_equal(selector_parse(c->selector, &sel, &err), 0);
    assert_int_equal(calltree_create(tree, 0, &err), 0);
    /* the selector's text lets an engine with fan-out share the merge out */
    query_options opts = {.query_text = c->selector};
    int rc = c->single
                 ? query_single_opts(e, tenant, &opts, &sel, c->start_ns, *tree, c->base, res, &err)
                 : query_merge_opts(e, tenant, &opts, &sel, c->start_ns, c->end_ns, *tree, c->base,
                                    res, &err);
    if (rc != 0)
        fail_msg("%s: %s", c->selector, err.message);
    assert_int_equal(calltree_finalize(*tree, &err), 0);
    selector_free(&sel);
}

static void expect_same_results(const merge_result *ra, const merge_result *rb) {
    assert_int_equal(ra->profiles, rb->profiles);
    assert_int_equal(ra->samples, rb->samples);
    assert_int_equal(ra->total, rb->total);
    assert_int_equal(ra->min_time_ns, rb->min_time_ns);
    assert_int_equal(ra->max_time_ns, rb->max_time_ns);
    assert_int_equal(ra->period, rb->period);
    assert_int_equal(ra->duration_ns, rb->duration_ns);
}

/* Runs c on both engines, checks they agree exactly, and with the same merge over the dictionary
 * tenants' blocks on each, and returns the rollup side's root total. */
static int64_t expect_same_merge(engine_fixture *rollups, engine_fixture *rows,
                                 const merge_case *c) {
    calltree *ta, *tb;
    merge_result ra, rb;
    engine_fixture *engines[] = {rollups, rows};
    for (int i = 0; i < 2; i++) {
        run_case(engines[i]->engine, TENANT, c, &ta, &ra);
        /* the dictionary tenants' blocks went through the dictionary memo, t1's did not */
        assert_int_equal(ra.dictionary_blocks, 0);
        const char *cut_tenants[] = {TENANT_DICTIONARY, TENANT_TWO_DICTIONARIES};
        for (int k = 0; k < 2; k++) {
            run_case(engines[i]->engine, cut_tenants[k], c, &tb, &rb);
            expect_same_results(&ra, &rb);
            assert_true(rb.dictionary_blocks >= 1 && rb.dictionary_blocks <= N_BLOCKS);
            expect_same_trees(ta, tb);
            calltree_free(tb);
        }
        calltree_free(ta);
    }
    run_case(rollups->engine, TENANT, c, &ta, &ra);
    run_case(rows->engine, TENANT, c, &tb, &rb);
    assert_int_equal(ra.profiles, rb.profiles);
    assert_int_equal(ra.samples, rb.samples);
    assert_int_equal(ra.total, rb.total);
    assert_int_equal(ra.min_time_ns, rb.min_time_ns);
    assert_int_equal(ra.max_time_ns, rb.max_time_ns);
    assert_int_equal(ra.period, rb.period);
    if (c->want_period != 0)
        assert_int_equal(ra.period, c->want_period);
    assert_int_equal(ra.duration_ns, rb.duration_ns);
    expect_same_trees(ta, tb);
    calltree_node_values root = calltree_node_get(ta, CALLTREE_ROOT);
    int64_t total = c->base ? root.total_base : root.total;
    assert_int_equal(total, ra.total);
    calltree_free(ta);
    calltree_free(tb);
    return total;
}

/* Bytes of samples and rollup pages each block's reader has fetched, in block time order. */
static void block_bytes(engine_fixture *f, uint64_t samples[N_BLOCKS], uint64_t rollup[N_BLOCKS]) {
    strata_error err;
    indexed_block **blocks;
    size_t n;
    assert_int_equal(block_index_acquire(f->index, TENANT, INT64_MIN, INT64_MAX, &blocks, &n, &err),
                     0);
    assert_int_equal(n, N_BLOCKS);
    for (size_t i = 0; i < n; i++) {
        int b = (int)((blocks[i]->meta.min_time_ms * STRATA_NS_PER_MS - T0) / (60 * SEC));
        assert_true(b >= 0 && b < N_BLOCKS);
        samples[b] = rollup[b] = 0;
        pthread_mutex_lock(&blocks[i]->mu);
        if (blocks[i]->reader != NULL) {
            samples[b] = block_reader_table_bytes_fetched(blocks[i]->reader, BLOCK_TABLE_SAMPLES);
            rollup[b] =
                block_reader_table_bytes_fetched(blocks[i]->reader, BLOCK_TABLE_ROLLUP_STACKS);
        }
        pthread_mutex_unlock(&blocks[i]->mu);
    }
    block_index_release_all(f->index, blocks, n);
}

#define CPU "process_cpu:samples:count:cpu:nanoseconds:delta"
#define MEM "memory:alloc_space:bytes:space:bytes"
#define END (T0 + 60 * N_BLOCKS * SEC)

/* ---- tests -------------------------------------------------------------------------------- */

/* A merge over everything: rollups for the two blocks that have them, rows for the third. */
static void test_full_range_uses_rollups(void **state) {
    (void)state;
    engine_fixture a, b;
    engine_open(&a, true);
    engine_open(&b, false);
    merge_case c = {CPU, T0, END, false, false, 1000};
    assert_int_equal(expect_same_merge(&a, &b, &c), data.cpu_total);
    uint64_t samples[N_BLOCKS], rollup[N_BLOCKS];
    block_bytes(&a, samples, rollup);
    assert_int_equal(samples[0], 0);
    assert_int_equal(samples[1], 0);
    assert_true(rollup[0] > 0 && rollup[1] > 0);
    assert_true(samples[2] > 0); /* no rollups in that block */
    assert_int_equal(rollup[2], 0);
    block_bytes(&b, samples, rollup);
    for (int i = 0; i < N_BLOCKS; i++) {
        assert_true(samples[i] > 0);
        assert_int_equal(rollup[i], 0);
    }
    engine_close(&a);
    engine_close(&b);
}

/* A range starting inside block 0 cuts its series: rows there, the rollup in block 1. */
static void test_range_cutting_a_block_scans_rows(void **state) {
    (void)state;
    engine_fixture a, b;
    engine_open(&a, true);
    engine_open(&b, false);
    merge_case c = {CPU, T0 + 25 * SEC, T0 + 119 * SEC, false, false, 0};
    int64_t total = expect_same_merge(&a, &b, &c);
    assert_true(total < data.cpu_block_total[0] + data.cpu_block_total[1]);
    assert_true(total > data.cpu_block_total[1]);
    uint64_t samples[N_BLOCKS], rollup[N_BLOCKS];
    block_bytes(&a, samples, rollup);
    assert_true(samples[0] > 0);
    assert_int_equal(rollup[0], 0);
    assert_int_equal(samples[1], 0);
    assert_true(rollup[1] > 0);
    /* the range's end cuts block 1 (its last profiles are at 110 s; 119 s includes them, 105 s
     * does not) */
    merge_case cut_end = {CPU, T0, T0 + 105 * SEC, false, false, 0};
    total = expect_same_merge(&a, &b, &cut_end);
    assert_true(total > data.cpu_block_total[0]);
    assert_true(total < data.cpu_block_total[0] + data.cpu_block_total[1]);
    /* exactly block 0's profiles: its rollups alone */
    merge_case block0 = {CPU, T0, T0 + 50 * SEC, false, false, 0};
    assert_int_equal(expect_same_merge(&a, &b, &block0), data.cpu_block_total[0]);
    engine_close(&a);
    engine_close(&b);
}

/* Selectors, another (unscaled) type, single mode and the diff base side agree too. */
static void test_other_merges_agree(void **state) {
    (void)state;
    engine_fixture a, b;
    engine_open(&a, true);
    engine_open(&b, false);
    /* Periods vary per profile (1000 + 7 ((t + pod) % 3)): p1's earliest has 1007; from 5 s, the
     * earliest profiles (10 s) are p0's with 1007 and p2's with 1000, and the smaller wins. */
    merge_case pod = {CPU "{pod=\"p1\"}", T0, END, false, false, 1007};
    assert_int_equal(expect_same_merge(&a, &b, &pod), data.cpu_pod_total[1]);
    merge_case not_pod = {CPU "{pod!=\"p1\"}", T0 + 5 * SEC, END, false, false, 1000};
    int64_t rest = expect_same_merge(&a, &b, &not_pod);
    assert_true(rest > 0 && rest < data.cpu_pod_total[0] + data.cpu_pod_total[2]);
    merge_case mem = {MEM, T0, END, false, false, 512};
    assert_int_equal(expect_same_merge(&a, &b, &mem), data.mem_total);
    merge_case single = {CPU "{pod=\"p2\"}", T0 + 70 * SEC, 0, true, false, 1000};
    int64_t one = expect_same_merge(&a, &b, &single);
    assert_true(one > 0 && one < data.cpu_pod_total[2]);
    merge_case base = {CPU, T0, END, false, true, 1000};
    assert_int_equal(expect_same_merge(&a, &b, &base), data.cpu_total);
    engine_close(&a);
    engine_close(&b);
}

/* A cold merge over small blocks fetches each block once: the reader's first read (the object's
 * tail, the whole of a small block) serves both the selection pass and the merge pass (the
 * selection's read-ahead is kept for the query: readahead_keep). Dropped after the selection, it
 * was fetched again page by page. */
static uint64_t reads_of(bucket *store) {
    bucket_stats st;
    bucket_get_stats(store, &st);
    return st.operations[BUCKET_OP_GET] + st.operations[BUCKET_OP_GET_RANGE];
}

static void test_cold_merge_reads_each_small_block_once(void **state) {
    (void)state;
    for (int rollups = 0; rollups < 2; rollups++) {
        engine_fixture f;
        engine_open(&f, rollups == 1);
        uint64_t before = reads_of(data.store);
        calltree *t;
        merge_result res;
        merge_case c = {CPU, T0, END, false, false, 0};
        run_case(f.engine, TENANT, &c, &t, &res);
        assert_int_equal(calltree_node_get(t, CALLTREE_ROOT).total, data.cpu_total);
        assert_int_equal(reads_of(data.store) - before, N_BLOCKS);
        calltree_free(t);
        /* warm: nothing fetched, and nothing kept after the query */
        before = reads_of(data.store);
        run_case(f.engine, TENANT, &c, &t, &res);
        assert_int_equal(reads_of(data.store) - before, 0);
        calltree_free(t);
        engine_close(&f);
    }
}

/* ---- fan-out ------------------------------------------------------------------------------ */

/* c on a lone engine and on one that shares it out must agree on every result field and node. */
static void expect_fanout_agrees(engine_fixture *alone, engine_fixture *coordinator,
                                 const char *tenant, const merge_case *c) {
    calltree *ta, *tb;
    merge_result ra, rb;
    run_case(alone->engine, tenant, c, &ta, &ra);
    run_case(coordinator->engine, tenant, c, &tb, &rb);
    expect_same_results(&ra, &rb);
    expect_same_trees(ta, tb);
    calltree_free(ta);
    calltree_free(tb);
}

/* Merges shared out over two peers (other engines; partial trees through the wire format) answer
 * what one engine answers, node for node: whichever querier gets which shard of time, over blocks
 * cut from one or two writer dictionaries, over a range that cuts blocks, with a peer whose index
 * has not seen the blocks yet (it looks them up in the bucket), and with a peer down (the
 * coordinator merges its shard). */
static void test_fanout_agrees(void **state) {
    (void)state;
    engine_fixture alone, coordinator, peer1, peer2;
    engine_open(&alone, true);
    engine_open(&coordinator, true);
    engine_open(&peer1, true);
    strata_error err;
    block_index_options io;
    block_index_options_default(&io);
    assert_int_equal(block_index_new(&io, data.store, &peer2.index, &err), 0); /* never synced */
    query_engine_options eo;
    query_engine_options_default(&eo);
    eo.parallelism = 2;
    assert_int_equal(query_engine_new(&eo, peer2.index, &peer2.engine, &err), 0);
    static loopback_fanout lb;
    lb = (loopback_fanout){.peers = {peer1.engine, peer2.engine}, .n_peers = 2};
    loopback_fanout_install(coordinator.engine, &lb);
    const merge_case cases[] = {
        {CPU, T0, END, false, false, 1000},
        {CPU, T0 + 25 * SEC, T0 + 119 * SEC, false, false, 0},
        {CPU "{pod=\"p1\"}", T0, END, false, false, 1007},
        {MEM, T0, END, false, false, 512},
        {CPU, T0, END, false, true, 1000},
    };
    const char *tenants[] = {TENANT, TENANT_DICTIONARY, TENANT_TWO_DICTIONARIES};
    for (size_t offset = 0; offset < 3; offset++) {
        lb.offset = offset;
        for (size_t t = 0; t < 3; t++)
            for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
                expect_fanout_agrees(&alone, &coordinator, tenants[t], &cases[c]);
    }
    /* The four cases over all three blocks make three shards, one per member: a share to each
     * peer (4 cases x 3 tenants x 3 offsets x 2 peers). The cut range meets two blocks, so two
     * shards, for members 0 and 1: one share when the coordinator is one of them, two when it is
     * member 2 (3 tenants x (1 + 1 + 2)). */
    assert_int_equal(atomic_load(&lb.shares), 4 * 3 * 3 * 2 + 3 * 4);
    assert_int_equal(atomic_load(&lb.blocks_missing), 0);
    lb.failing[1] = true;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        expect_fanout_agrees(&alone, &coordinator, TENANT_TWO_DICTIONARIES, &cases[c]);
    assert_true(atomic_load(&lb.shares_failed) >= 5);
    engine_close(&alone);
    engine_close(&coordinator);
    engine_close(&peer1);
    engine_close(&peer2);
}

/* ---- deep stacks ------------------------------------------------------------------------ */

#define TENANT_DEEP "t3"
#define TENANT_DEEP_DICTIONARY "t4"
#define DEEP_STACKS 12
#define DEEP_T0 (T0 + 3600 * SEC)
static const char *const deep_names[] = {"d0", "d1", "d2", "d3", "d4", "d5", "d6",
                                         "d7", "d8", "e0", "e1", "e2", "e3"};

/* Stack k, root first: 250 + 23 k frames (deeper than the 255 levels a merge tells apart, so
 * its plan clamps), a prefix shared with the other stacks, then frames shared with every fourth
 * one; recursion throughout. Each name has one address, so one frame per name. */
static size_t deep_stack(int k, const char **names) {
    size_t depth = 250 + 23 * (size_t)k, prefix = (size_t)(40 * k % 300);
    for (size_t j = 0; j < depth; j++)
        names[j] = j < prefix ? deep_names[j % 9] : deep_names[9 + (k % 4 + j) % 4];
    return depth;
}

static void add_deep_profile(block_writer *w, int n_stacks, int64_t time_ns, int64_t scale) {
    strata_error err;
    label_set l = LABEL_SET_INIT;
    profile_type mem = mem_type();
    assert_int_equal(label_set_add(&l, "pod", 3, "deep", 4, &err), 0);
    assert_int_equal(block_writer_begin_profile(w, &l, &mem, time_ns, 10 * SEC, 512, &err), 0);
    for (int k = 0; k < n_stacks; k++) {
        const char *names[600];
        block_frame frames[600];
        size_t depth = deep_stack(k, names);
        for (size_t j = 0; j < depth; j++) { /* leaf first */
            const char *name = names[depth - 1 - j];
            frames[j] = (block_frame){
                name, name,       "x.c", 1,
                1,    "/bin/app", "b1",  0x1000 + 16 * (uint64_t)(name[0] * 10 + name[1])};
        }
        assert_int_equal(block_writer_add_sample(w, frames, depth, (k + 1) * scale, &err), 0);
    }
    assert_int_equal(block_writer_end_profile(w, &err), 0);
    label_set_free(&l);
}

/* Two blocks of deep stacks, the second repeating the first's and adding deeper ones: written
 * apart (t3) and cut from one dictionary (t4, so the second block's stacks continue nodes the
 * first made). Merges of either equal the tree the stacks make inserted one by one. */
static void test_deep_stacks(void **state) {
    (void)state;
    strata_error err;
    block_writer_options o;
    block_writer_options_default(&o);
    o.tenant = TENANT_DEEP_DICTIONARY;
    o.page_size = 1024;
    block_writer *dictionary = block_writer_new(&o, &err);
    assert_non_null(dictionary);
    for (int b = 0; b < 2; b++) {
        o.tenant = TENANT_DEEP;
        block_writer *w = block_writer_new(&o, &err);
        assert_non_null(w);
        int n = b == 0 ? DEEP_STACKS / 2 : DEEP_STACKS;
        add_deep_profile(w, n, DEEP_T0 + 60 * b * SEC, b + 1);
        add_deep_profile(dictionary, n, DEEP_T0 + 60 * b * SEC, b + 1);
        upload_block(w, TENANT_DEEP);
        block_writer_free(w);
        block_writer *cut;
        assert_int_equal(block_writer_detach(dictionary, &cut, &err), 0);
        upload_block(cut, TENANT_DEEP_DICTIONARY);
        block_writer_free(cut);
    }
    block_writer_free(dictionary);

    calltree *want;
    assert_int_equal(calltree_create(&want, 0, &err), 0);
    int64_t want_total = 0;
    for (int b = 0; b < 2; b++) {
        for (int k = 0; k < (b == 0 ? DEEP_STACKS / 2 : DEEP_STACKS); k++) {
            const char *names[600];
            size_t depth = deep_stack(k, names);
            uint32_t node = CALLTREE_ROOT;
            for (size_t j = 0; j < depth; j++) {
                calltree_frame_desc d = {calltree_cstr(names[j]),
                                         calltree_cstr(names[j]),
                                         calltree_cstr("x.c"),
                                         calltree_cstr("/bin/app"),
                                         calltree_cstr("b1"),
                                         1,
                                         {0}};
                uint32_t f;
                assert_int_equal(calltree_intern_frame(want, &d, &f, &err), 0);
                assert_int_equal(calltree_child(want, node, f, &node, &err), 0);
            }
            calltree_add(want, node, (k + 1) * (b + 1));
            want_total += (k + 1) * (b + 1);
        }
    }
    assert_int_equal(calltree_finalize(want, &err), 0);
    assert_true(calltree_node_count(want) > 2000);

    engine_fixture e;
    engine_open(&e, true);
    const char *tenants[] = {TENANT_DEEP, TENANT_DEEP_DICTIONARY};
    for (int t = 0; t < 2; t++) {
        merge_case c = {MEM "{pod=\"deep\"}", DEEP_T0, DEEP_T0 + 120 * SEC, false, false, 512};
        calltree *got;
        merge_result res;
        run_case(e.engine, tenants[t], &c, &got, &res);
        assert_int_equal(res.total, want_total);
        assert_int_equal(res.dictionary_blocks, t == 0 ? 0 : 2);
        expect_same_trees(want, got);
        calltree_free(got);
    }
    engine_close(&e);
    calltree_free(want);
}

/* ---- the block driver's threads ----------------------------------------------------------- */

/* What one merge, one range and one label query over t1 answered, read without asserting (the
 * queries may run on a thread of the test's own). */
typedef struct query_set {
    int rc;
    int64_t merge_total;
    size_t merge_nodes;
    int64_t range_sum;
    size_t range_series;
    size_t range_points;
    size_t label_names;
    calltree *tree; /* the merge's (NULL when not kept) */
} query_set;

static void run_query_set(query_engine *e, bool keep_tree, query_set *out) {
    memset(out, 0, sizeof *out);
    strata_error err;
    selector sel;
    calltree *tree = NULL;
    merge_result res;
    out->rc = selector_parse(CPU "{}", &sel, &err);
    if (out->rc == 0)
        out->rc = calltree_create(&tree, 0, &err);
    if (out->rc == 0)
        out->rc = query_merge(e, TENANT, &sel, T0, END - 1, tree, false, &res, &err);
    if (out->rc == 0)
        out->rc = calltree_finalize(tree, &err);
    if (out->rc == 0) {
        out->merge_total = res.total;
        out->merge_nodes = calltree_node_count(tree);
    }
    const char *by[] = {"pod"};
    range_series *series = NULL;
    size_t n = 0;
    query_stats stats;
    if (out->rc == 0)
        out->rc =
            query_range(e, TENANT, &sel, T0, END - 1, 60 * SEC, by, 1, &series, &n, &stats, &err);
    for (size_t i = 0; out->rc == 0 && i < n; i++) {
        out->range_series++;
        for (size_t k = 0; k < series[i].n_points; k++) {
            out->range_sum += series[i].points[k].value;
            out->range_points++;
        }
    }
    query_range_free(series, n);
    char **names = NULL;
    if (out->rc == 0)
        out->rc = query_labels(e, TENANT, NULL, NULL, 0, NULL, T0, END - 1, &names, &n, &err);
    if (out->rc == 0)
        out->label_names = n;
    query_strings_free(names, out->rc == 0 ? n : 0);
    selector_free(&sel);
    if (keep_tree && out->rc == 0)
        out->tree = tree;
    else
        calltree_free(tree);
}

static void expect_query_set(const query_set *got, const query_set *want) {
    assert_int_equal(got->rc, 0);
    assert_int_equal(got->merge_total, data.cpu_total);
    assert_int_equal(got->merge_total, want->merge_total);
    assert_int_equal(got->merge_nodes, want->merge_nodes);
    assert_int_equal(got->range_sum, data.cpu_total); /* delta: every profile's total x period */
    assert_int_equal(got->range_series, N_PODS);
    assert_int_equal(got->range_points, want->range_points);
    assert_int_equal(got->label_names, want->label_names);
}

/* Queries one after another start no thread: the driver's helpers, started by the first, do
 * every later pass (the driver used to start its workers for each pass of each query). Answers
 * do not depend on which thread read which block. */
static void test_queries_reuse_the_block_threads(void **state) {
    (void)state;
    engine_fixture f;
    engine_open(&f, true);
    assert_int_equal(engine_block_threads_started(f.engine), 0);
    query_set first, again;
    run_query_set(f.engine, true, &first);
    expect_query_set(&first, &first);
    assert_true(first.range_points >= N_PODS * N_BLOCKS); /* minutes cut by 60 s steps */
    assert_int_equal(first.label_names, 1);               /* pod (__name__ is not listed) */
    size_t started = engine_block_threads_started(f.engine);
    /* three blocks: a pass asks for two helpers at most */
    assert_true(started >= 1 && started <= N_BLOCKS - 1);
    for (int i = 0; i < 30; i++) {
        run_query_set(f.engine, true, &again);
        expect_query_set(&again, &first);
        expect_same_trees(first.tree, again.tree);
        calltree_free(again.tree);
        assert_int_equal(engine_block_threads_started(f.engine), started);
    }
    calltree_free(first.tree);
    engine_close(&f);
}

typedef struct query_caller {
    query_engine *e;
    query_set sets[8];
} query_caller;

static void *call_queries(void *arg) {
    query_caller *c = arg;
    for (size_t i = 0; i < sizeof c->sets / sizeof c->sets[0]; i++)
        run_query_set(c->e, false, &c->sets[i]);
    return NULL;
}

/* Queries at once share the engine's helpers and each gets the answer it gets alone. */
static void test_concurrent_queries_agree(void **state) {
    (void)state;
    enum { CALLERS = 4 };
    engine_fixture f;
    engine_open(&f, true);
    query_set want;
    run_query_set(f.engine, false, &want);
    expect_query_set(&want, &want);
    static query_caller callers[CALLERS];
    pthread_t threads[CALLERS];
    for (int i = 0; i < CALLERS; i++) {
        callers[i].e = f.engine;
        assert_int_equal(pthread_create(&threads[i], NULL, call_queries, &callers[i]), 0);
    }
    for (int i = 0; i < CALLERS; i++) {
        assert_int_equal(pthread_join(threads[i], NULL), 0);
        for (size_t k = 0; k < sizeof callers[i].sets / sizeof callers[i].sets[0]; k++)
            expect_query_set(&callers[i].sets[k], &want);
    }
    /* at most two helpers per pass, and as many passes at once as callers */
    assert_true(engine_block_threads_started(f.engine) <= CALLERS * (N_BLOCKS - 1));
    engine_close(&f);
}

/* A per-block function that fails at one block and counts its calls. */
typedef struct block_probe {
    atomic_int calls;
    size_t fail_at;
    strata_status code;
    long sleep_us; /* per block that does not fail */
} block_probe;

static int probe_block(indexed_block *b, size_t index, block_reader *r, void *partial,
                       strata_error *err) {
    block_probe *p = partial;
    (void)b;
    (void)r;
    atomic_fetch_add(&p->calls, 1);
    if (index == p->fail_at)
        return strata_error_set(err, p->code, "block %zu is broken", index);
    if (p->sleep_us > 0) {
        struct timespec ts = {0, p->sleep_us * 1000L};
        nanosleep(&ts, NULL);
    }
    return 0;
}

/* One block's error fails the pass with that error and the workers stop taking blocks; a block
 * whose data fails its checks (DATA_LOSS) is left out instead, the others all done. */
static void test_block_error_stops_the_pass(void **state) {
    (void)state;
    enum { N = 120, WORKERS = 4 };
    engine_fixture f;
    engine_open(&f, true);
    strata_error err;
    indexed_block **blocks;
    size_t n_blocks;
    assert_int_equal(
        block_index_acquire(f.index, TENANT, INT64_MIN, INT64_MAX, &blocks, &n_blocks, &err), 0);
    assert_int_equal(n_blocks, N_BLOCKS);
    indexed_block *pass[N]; /* t1's blocks over and over: a long pass */
    for (size_t i = 0; i < N; i++)
        pass[i] = blocks[i % n_blocks];
    block_probe probe = {.fail_at = 0, .code = STRATA_INTERNAL, .sleep_us = 1000};
    void *partials[WORKERS] = {&probe, &probe, &probe, &probe};
    strata_error_clear(&err);
    assert_int_equal(
        engine_for_each_block(f.engine, pass, N, probe_block, partials, WORKERS, NULL, NULL, &err),
        -1);
    assert_int_equal(err.code, STRATA_INTERNAL);
    assert_string_equal(err.message, "block 0 is broken");
    /* the first block taken failed: the others stopped at the blocks they had taken */
    assert_true(atomic_load(&probe.calls) < N / 2);

    bool skipped[N] = {false};
    query_stats stats = {0};
    block_probe lossy = {.fail_at = 7, .code = STRATA_DATA_LOSS};
    for (size_t w = 0; w < WORKERS; w++)
        partials[w] = &lossy;
    assert_int_equal(engine_for_each_block(f.engine, pass, N, probe_block, partials, WORKERS,
                                           skipped, &stats, &err),
                     0);
    assert_int_equal(atomic_load(&lossy.calls), N);
    for (size_t i = 0; i < N; i++)
        assert_int_equal(skipped[i], i == 7);
    assert_int_equal(stats.skipped_blocks, 1);
    assert_string_equal(stats.skipped_error, "block 7 is broken");
    assert_true(engine_block_threads_started(f.engine) <= WORKERS - 1);
    block_index_release_all(f.index, blocks, n_blocks);
    engine_close(&f);
}

/* ---- the engine as a table: request in, answer or error code out ------------------------------
 */

typedef enum want_total {
    WANT_NONE, /* an error: no total */
    WANT_CPU,
    WANT_POD1,
    WANT_POD0_AND_POD2,
    WANT_BLOCK1,
    WANT_MEM,
} want_total;

typedef enum engine_op { OP_MERGE, OP_SINGLE, OP_RANGE } engine_op;

typedef struct engine_row {
    const char *name;
    engine_op op;
    const char *tenant;
    const char *selector;
    int64_t start_ns, end_ns; /* single: start_ns is the time */
    int64_t step_ns;          /* range */
    const char *sum_by;       /* range: one label name, or NULL */
    uint64_t max_query_bytes; /* merge: 0 = the engine's */
    strata_status code;
    const char *message; /* a substring of the error, when code is not OK */
    want_total total;    /* merge: the tree's total; range: the sum of every point */
    uint64_t profiles;   /* merge: profiles merged; range: series */
} engine_row;

static int64_t total_of(want_total w) {
    switch (w) {
        case WANT_CPU:
            return data.cpu_total;
        case WANT_POD1:
            return data.cpu_pod_total[1];
        case WANT_POD0_AND_POD2:
            return data.cpu_pod_total[0] + data.cpu_pod_total[2];
        case WANT_BLOCK1:
            return data.cpu_block_total[1];
        case WANT_MEM:
            return data.mem_total;
        case WANT_NONE:
            break;
    }
    return 0;
}

#define ALL_PROFILES (N_BLOCKS * PROFILES_PER_BLOCK * N_PODS)

static const engine_row engine_rows[] = {
    {"merge of everything", OP_MERGE, TENANT, CPU, T0, END, 0, NULL, 0, STRATA_OK, NULL, WANT_CPU,
     ALL_PROFILES},
    {"merge of one pod", OP_MERGE, TENANT, CPU "{pod=\"p1\"}", T0, END, 0, NULL, 0, STRATA_OK, NULL,
     WANT_POD1, ALL_PROFILES / N_PODS},
    {"merge under a regex matcher", OP_MERGE, TENANT, CPU "{pod=~\"p[02]\"}", T0, END, 0, NULL, 0,
     STRATA_OK, NULL, WANT_POD0_AND_POD2, 2 * ALL_PROFILES / N_PODS},
    {"merge of the second block's minute", OP_MERGE, TENANT, CPU, T0 + 60 * SEC, T0 + 119 * SEC, 0,
     NULL, 0, STRATA_OK, NULL, WANT_BLOCK1, PROFILES_PER_BLOCK *N_PODS},
    {"merge of another type (not scaled by the period)", OP_MERGE, TENANT, MEM, T0, END, 0, NULL, 0,
     STRATA_OK, NULL, WANT_MEM, N_BLOCKS *PROFILES_PER_BLOCK},
    {"merge of what matches nothing", OP_MERGE, TENANT, CPU "{pod=\"nobody\"}", T0, END, 0, NULL, 0,
     STRATA_NOT_FOUND, "", WANT_NONE, 0},
    {"merge before the data", OP_MERGE, TENANT, CPU, T0 - 600 * SEC, T0 - 1, 0, NULL, 0,
     STRATA_NOT_FOUND, "", WANT_NONE, 0},
    {"merge for a tenant with no blocks", OP_MERGE, "nobody", CPU, T0, END, 0, NULL, 0,
     STRATA_NOT_FOUND, "", WANT_NONE, 0},
    {"merge over its memory bound", OP_MERGE, TENANT, CPU, T0, END, 0, NULL, 1024,
     STRATA_RESOURCE_EXHAUSTED, "max_query_bytes", WANT_NONE, 0},
    {"single profile at its time", OP_SINGLE, TENANT, CPU "{pod=\"p1\"}", T0 + 70 * SEC, 0, 0, NULL,
     0, STRATA_OK, NULL, WANT_NONE, 1},
    {"single where there is none", OP_SINGLE, TENANT, CPU "{pod=\"p1\"}", T0 + 75 * SEC, 0, 0, NULL,
     0, STRATA_NOT_FOUND, "", WANT_NONE, 0},
    {"range summed by pod", OP_RANGE, TENANT, CPU, T0, END, 60 * SEC, "pod", 0, STRATA_OK, NULL,
     WANT_CPU, N_PODS},
    {"range of one pod, one series", OP_RANGE, TENANT, CPU "{pod=\"p1\"}", T0, END, 60 * SEC, NULL,
     0, STRATA_OK, NULL, WANT_POD1, 1},
    {"range of what matches nothing", OP_RANGE, TENANT, CPU "{pod=\"nobody\"}", T0, END, 60 * SEC,
     NULL, 0, STRATA_NOT_FOUND, "", WANT_NONE, 0},
};

static void run_engine_row(query_engine *e, const engine_row *r) {
    strata_error err;
    strata_error_clear(&err);
    selector sel;
    assert_int_equal(selector_parse(r->selector, &sel, &err), 0);
    int rc;
    int64_t total = 0;
    uint64_t count = 0;
    if (r->op == OP_RANGE) {
        range_series *rs = NULL;
        size_t n = 0;
        rc = query_range(e, r->tenant, &sel, r->start_ns, r->end_ns, r->step_ns,
                         r->sum_by != NULL ? &r->sum_by : NULL, r->sum_by != NULL ? 1 : 0, &rs, &n,
                         NULL, &err);
        for (size_t i = 0; rc == 0 && i < n; i++)
            for (size_t k = 0; k < rs[i].n_points; k++)
                total += rs[i].points[k].value;
        count = n;
        if (rc == 0)
            query_range_free(rs, n);
    } else {
        calltree *tree;
        assert_int_equal(calltree_create(&tree, 0, &err), 0);
        merge_result res;
        memset(&res, 0, sizeof res);
        query_options opts = {.max_query_bytes = r->max_query_bytes};
        rc = r->op == OP_SINGLE ? query_single_opts(e, r->tenant, &opts, &sel, r->start_ns, tree,
                                                    false, &res, &err)
                                : query_merge_opts(e, r->tenant, &opts, &sel, r->start_ns,
                                                   r->end_ns, tree, false, &res, &err);
        if (rc == 0) {
            assert_int_equal(calltree_finalize(tree, &err), 0);
            total = calltree_node_get(tree, CALLTREE_ROOT).total;
            assert_int_equal(total, res.total);
        }
        count = res.profiles;
        calltree_free(tree);
    }
    selector_free(&sel);
    strata_status code = rc == 0 ? STRATA_OK : err.code;
    if (code != r->code)
        fail_msg("%s: %s \"%s\", want %s", r->name, strata_status_name(code),
                 rc == 0 ? "" : err.message, strata_status_name(r->code));
    if (rc != 0) {
        if (strstr(err.message, r->message) == NULL)
            fail_msg("%s: \"%s\" lacks \"%s\"", r->name, err.message, r->message);
        return;
    }
    if (count != r->profiles)
        fail_msg("%s: %llu, want %llu", r->name, (unsigned long long)count,
                 (unsigned long long)r->profiles);
    if (r->total != WANT_NONE && total != total_of(r->total))
        fail_msg("%s: total %lld, want %lld", r->name, (long long)total,
                 (long long)total_of(r->total));
}

static void test_engine_table(void **state) {
    (void)state;
    engine_fixture f;
    engine_open(&f, true);
    for (size_t i = 0; i < sizeof engine_rows / sizeof engine_rows[0]; i++)
        run_engine_row(f.engine, &engine_rows[i]);
    engine_close(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_full_range_uses_rollups),
        cmocka_unit_test(test_range_cutting_a_block_scans_rows),
        cmocka_unit_test(test_other_merges_agree),
        cmocka_unit_test(test_deep_stacks),
        cmocka_unit_test(test_fanout_agrees),
        cmocka_unit_test(test_cold_merge_reads_each_small_block_once),
        cmocka_unit_test(test_queries_reuse_the_block_threads),
        cmocka_unit_test(test_concurrent_queries_agree),
        cmocka_unit_test(test_block_error_stops_the_pass),
        cmocka_unit_test(test_engine_table),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
