/*
 * bucket_bench.c - object storage as Strata uses it: raw throughput and latency of a bucket, and
 * how many bucket operations ingest and queries cost.
 *
 * The bucket comes from a Thanos objstore YAML file (FILESYSTEM, S3 or AZURE), so the same run
 * compares a local directory with radosgw and Azurite (bench/README.md). Everything it writes is
 * under a fresh run prefix (tenant "bbench-<time>-<pid>"); raw upload objects are deleted at the
 * end, the ingested blocks are left (remote test servers are thrown away; delete the directory of
 * a FILESYSTEM bucket by hand).
 *
 *   1. upload: MB/s for objects of 64 KiB, 1 MiB, 16 MiB and --large-mib (default 24 MiB: above an
 *      S3 part_size of 8 MiB, so it goes up as a multipart upload), one upload at a time;
 *      ranged reads: MB/s and p50/p99 latency of 4 KiB, 64 KiB and 1 MiB ranges at random offsets
 *      of the 16 MiB object, one at a time.
 *   2. ingest: bench/agentgen's agent-like CPU profiles (--processes per 10 s window, --windows
 *      windows) through the real ingester path (WriteRaw parse + batcher) with a --flush-ms flush
 *      (default 1 s), one window's request every --window-ms (default 1000: ten times real time,
 *      so each flush holds about one window); bucket_get_stats deltas per operation, per 1,000
 *      profiles.
 *   3. query: a fresh block_index (synced once by hand, no background thread, so the counters
 *      are the query's alone) and query engine on the same bucket; bucket operations of the sync,
 *      of a cold query_merge (readers opened: footer, page index, series tables, then samples) and
 *      of the same query warm (readers and their page caches kept).
 *
 * Counters are bucket operations (bucket.h), not HTTP requests: a multipart upload is one
 * "upload", a paginated listing one "iter".
 *
 *   build/bench/bucket_bench --bucket FILE [--windows N] [--processes N] [--window-ms N]
 *                            [--flush-ms N] [--large-mib N]
 */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agentgen.h"
#include "requests.h"
#include "batcher.h"
#include "block_index.h"
#include "bucket/bucket.h"
#include "calltree/calltree.h"
#include "common/clock.h"
#include "engine.h"
#include "parca/profilestore/v1alpha1/profilestore.pb-c.h"
#include "pprof/pprof.h"
#include "write_raw.h"

static bucket_stats snap(const bucket *b) {
    bucket_stats s;
    bucket_get_stats(b, &s);
    return s;
}

/* Prints "op=N" for every operation that changed between a and b (and failures if any). */
static void print_delta(const char *what, const bucket_stats *a, const bucket_stats *b, double per,
                        const char *per_what) {
    printf("  %-26s", what);
    bool any = false;
    for (int op = 0; op < BUCKET_OP_COUNT; op++) {
        uint64_t d = b->operations[op] - a->operations[op];
        uint64_t f = b->failures[op] - a->failures[op];
        if (d == 0 && f == 0)
            continue;
        any = true;
        if (per > 0)
            printf(" %s=%.1f", bucket_op_name((bucket_op)op), (double)d / per);
        else
            printf(" %s=%" PRIu64, bucket_op_name((bucket_op)op), d);
        if (f != 0)
            printf(" (%" PRIu64 " failed)", f);
    }
    if (!any)
        printf(" none");
    if (per > 0)
        printf("  [%s]", per_what);
    printf("\n");
}

static uint64_t total_ops(const bucket_stats *a, const bucket_stats *b) {
    uint64_t n = 0;
    for (int op = 0; op < BUCKET_OP_COUNT; op++)
        n += b->operations[op] - a->operations[op];
    return n;
}

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static double pct_ms(int64_t *sorted, size_t n, double p) {
    size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    return (double)sorted[i] / 1e6;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static void sleep_until(int64_t t_ns) {
    int64_t now = strata_monotonic_ns();
    if (t_ns <= now)
        return;
    struct timespec ts = {(time_t)((t_ns - now) / 1000000000), (long)((t_ns - now) % 1000000000)};
    nanosleep(&ts, NULL);
}

/* ---- 1. raw uploads and ranged reads ----------------------------------------------------------
 */

static void bench_raw(bucket *b, const char *run_id, size_t large_mib) {
    strata_error err;
    size_t sizes[4] = {64u << 10, 1u << 20, 16u << 20, large_mib << 20};
    size_t max = sizes[3] > sizes[2] ? sizes[3] : sizes[2];
    uint8_t *data = malloc(max);
    if (data == NULL)
        die("out of memory", NULL);
    for (size_t i = 0; i + 8 <= max; i += 8) {
        uint64_t r = rng();
        memcpy(data + i, &r, 8);
    }
    char key[256], range_key[256];
    snprintf(range_key, sizeof range_key, "%s-raw/16MiB-0", run_id);
    printf("\n== 1. uploads (one at a time, distinct keys, incompressible data) ==\n");
    for (int s = 0; s < 4; s++) {
        size_t size = sizes[s];
        size_t n = (64u << 20) / size;
        n = n < 3 ? 3 : n > 100 ? 100 : n;
        int64_t *lat = calloc(n, sizeof *lat);
        bucket_stats a = snap(b);
        int64_t w0 = strata_monotonic_ns();
        for (size_t i = 0; i < n; i++) {
            if (s == 2)
                snprintf(key, sizeof key, "%s-raw/16MiB-%zu", run_id, i);
            else
                snprintf(key, sizeof key, "%s-raw/%zu-%zu", run_id, size, i);
            data[0] = (uint8_t)i;
            int64_t t0 = strata_monotonic_ns();
            if (bucket_upload(b, key, data, size, &err) != 0)
                die("upload", &err);
            lat[i] = strata_monotonic_ns() - t0;
        }
        double wall = (double)(strata_monotonic_ns() - w0) / 1e9;
        bucket_stats z = snap(b);
        qsort(lat, n, sizeof *lat, cmp_i64);
        printf("  upload %8.3f MiB x %3zu: %8.1f MB/s  p50 %8.2f ms  p99 %8.2f ms  "
               "(%" PRIu64 " upload ops)\n",
               (double)size / 1048576.0, n, (double)size * (double)n / wall / 1e6,
               pct_ms(lat, n, 0.5), pct_ms(lat, n, 0.99),
               z.operations[BUCKET_OP_UPLOAD] - a.operations[BUCKET_OP_UPLOAD]);
        free(lat);
    }

    printf("\n== 1b. ranged reads of the 16 MiB object (random offsets, one at a time) ==\n");
    size_t lens[3] = {4u << 10, 64u << 10, 1u << 20};
    size_t counts[3] = {300, 300, 60};
    strata_buffer out = STRATA_BUFFER_INIT;
    for (int r = 0; r < 3; r++) {
        size_t n = counts[r], len = lens[r];
        int64_t *lat = calloc(n, sizeof *lat);
        int64_t w0 = strata_monotonic_ns();
        for (size_t i = 0; i < n; i++) {
            uint64_t off = (rng() % ((16u << 20) - len)) & ~(uint64_t)4095;
            strata_buffer_reset(&out);
            int64_t t0 = strata_monotonic_ns();
            if (bucket_get_range(b, range_key, off, len, &out, &err) != 0)
                die("get_range", &err);
            lat[i] = strata_monotonic_ns() - t0;
            if (out.len != len ||
                memcmp(out.data + (off == 0), data + off + (off == 0), len - (off == 0)) != 0)
                die("ranged read returned wrong bytes", NULL);
        }
        double wall = (double)(strata_monotonic_ns() - w0) / 1e9;
        qsort(lat, n, sizeof *lat, cmp_i64);
        printf("  range %6zu KiB x %3zu: %8.1f MB/s  p50 %8.3f ms  p99 %8.3f ms\n", len >> 10, n,
               (double)len * (double)n / wall / 1e6, pct_ms(lat, n, 0.5), pct_ms(lat, n, 0.99));
        free(lat);
    }
    strata_buffer_free(&out);
    for (int s = 0; s < 4; s++) {
        size_t n = (64u << 20) / sizes[s];
        n = n < 3 ? 3 : n > 100 ? 100 : n;
        for (size_t i = 0; i < n; i++) {
            if (s == 2)
                snprintf(key, sizeof key, "%s-raw/16MiB-%zu", run_id, i);
            else
                snprintf(key, sizeof key, "%s-raw/%zu-%zu", run_id, sizes[s], i);
            if (bucket_delete(b, key, &err) != 0)
                die("delete", &err);
        }
    }
    free(data);
}

/* ---- 2. ingest ---------------------------------------------------------------------------------
 */

static atomic_uint_fast64_t acks;

static void on_ack(void *ctx, const strata_error *err) {
    (void)ctx;
    if (err != NULL)
        die("write not acknowledged", err);
    atomic_fetch_add(&acks, 1);
}

static void bench_ingest(bucket *store, const char *tenant, size_t windows, size_t processes,
                         int64_t window_ms, int64_t flush_ms) {
    strata_error err;
    request_set set = {0};
    build_agent_requests(windows, processes, &set);
    batcher_options opts;
    batcher_options_default(&opts);
    opts.flush_interval_ns = flush_ms * STRATA_NS_PER_MS;
    batcher *bt;
    if (batcher_new(&opts, store, &bt, &err) != 0 || batcher_start(bt, &err) != 0)
        die("batcher", &err);
    ingest_limits limits;
    ingest_limits_default(&limits);
    atomic_store(&acks, 0);
    bucket_stats a = snap(store);
    int64_t w0 = strata_monotonic_ns();
    for (size_t i = 0; i < set.n; i++) {
        sleep_until(w0 + (int64_t)i * window_ms * STRATA_NS_PER_MS);
        ingest_request req;
        ingest_reject_reason reason;
        if (ingest_request_parse(set.requests[i].data, set.requests[i].len, &limits,
                                 strata_now_ns(), &req, &reason, &err) != 0)
            die("parse", &err);
        if (batcher_submit(bt, tenant, &req, on_ack, NULL, &err) != 0)
            die("submit", &err);
        ingest_request_free(&req);
    }
    batcher_stop(bt);
    double wall = (double)(strata_monotonic_ns() - w0) / 1e9;
    bucket_stats z = snap(store);
    const batcher_stats *st = batcher_get_stats(bt);
    /* Per agent profile (one pprof per process and window); the ingester stores each pprof as
     * one profile per sample type (2 here), as profiles_accepted counts. */
    uint64_t profiles = (uint64_t)windows * processes;
    uint64_t stored = atomic_load(&st->profiles_accepted);
    uint64_t blocks = atomic_load(&st->blocks_written), bytes = atomic_load(&st->bytes_written);
    if (atomic_load(&acks) != set.n)
        die("not every request was acknowledged", NULL);
    printf("\n== 2. ingest: %zu windows x %zu agent profiles, one window every %lld ms, flush "
           "every %lld ms ==\n",
           windows, processes, (long long)window_ms, (long long)flush_ms);
    printf("  %" PRIu64 " agent profiles (%" PRIu64 " stored, one per sample type), %" PRIu64
           " stored samples in %.1f s wall -> %" PRIu64 " blocks, %.2f MiB (%.1f KiB per block)\n",
           profiles, stored, set.samples, wall, blocks, (double)bytes / 1048576.0,
           blocks ? (double)bytes / 1024.0 / (double)blocks : 0.0);
    print_delta("total operations", &a, &z, 0, NULL);
    print_delta("per 1,000 profiles", &a, &z, (double)profiles / 1000.0,
                "ops per 1,000 agent profiles");
    printf("  all operations per 1,000 profiles: %.1f\n",
           (double)total_ops(&a, &z) * 1000.0 / (double)profiles);
    batcher_free(bt);
    for (size_t i = 0; i < set.n; i++)
        strata_buffer_free(&set.requests[i]);
    free(set.requests);
}

/* ---- 3. query ----------------------------------------------------------------------------------
 */

static void bench_query(bucket *store, const char *tenant) {
    strata_error err;
    block_index_options io;
    block_index_options_default(&io);
    block_index *ix;
    if (block_index_new(&io, store, &ix, &err) != 0)
        die("block_index", &err);
    printf("\n== 3. query_merge over the blocks just written (fresh block_index, no sync "
           "thread) ==\n");
    bucket_stats a = snap(store);
    int64_t t0 = strata_monotonic_ns();
    if (block_index_sync(ix, &err) != 0)
        die("block_index_sync", &err);
    double sync_ms = (double)(strata_monotonic_ns() - t0) / 1e6;
    bucket_stats z = snap(store);
    block_index_stats bs;
    block_index_get_stats(ix, &bs);
    printf("  sync: %" PRIu64 " blocks in the whole bucket, %.1f ms\n", bs.blocks, sync_ms);
    print_delta("sync (list + meta.json)", &a, &z, 0, NULL);

    query_engine_options eo;
    query_engine_options_default(&eo);
    query_engine *e;
    if (query_engine_new(&eo, ix, &e, &err) != 0)
        die("query_engine", &err);
    profile_type type = agentgen_profile_type();
    strata_buffer type_text = STRATA_BUFFER_INIT;
    profile_type_format(&type, &type_text);
    strata_buffer_append(&type_text, "", 1);
    selector all;
    if (selector_parse((const char *)type_text.data, &all, &err) != 0)
        die("selector", &err);
    for (int run = 0; run < 2; run++) {
        calltree *tree;
        if (calltree_create(&tree, 0, &err) != 0)
            die("calltree_create", &err);
        block_index_stats b1;
        merge_result res;
        a = snap(store);
        t0 = strata_monotonic_ns();
        if (query_merge(e, tenant, &all, 0, INT64_MAX, tree, false, &res, &err) != 0)
            die("query_merge", &err);
        double ms = (double)(strata_monotonic_ns() - t0) / 1e6;
        z = snap(store);
        block_index_get_stats(ix, &b1);
        printf("  %s merge: %" PRIu64 " profiles, %" PRIu64 " samples, %.1f ms wall, %" PRIu64
               " readers open\n",
               run == 0 ? "cold" : "warm", res.profiles, res.samples, ms, b1.readers_open);
        print_delta(run == 0 ? "cold query_merge" : "warm query_merge", &a, &z, 0, NULL);
        calltree_free(tree);
    }
    selector_free(&all);
    strata_buffer_free(&type_text);
    query_engine_free(e);
    block_index_free(ix);
}

int main(int argc, char **argv) {
    const char *path = NULL;
    size_t windows = 20, processes = 100, large_mib = 24;
    int64_t window_ms = 1000, flush_ms = 1000;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--bucket") == 0)
            path = argv[i + 1];
        else if (strcmp(argv[i], "--windows") == 0)
            windows = (size_t)atol(argv[i + 1]);
        else if (strcmp(argv[i], "--processes") == 0)
            processes = (size_t)atol(argv[i + 1]);
        else if (strcmp(argv[i], "--window-ms") == 0)
            window_ms = atol(argv[i + 1]);
        else if (strcmp(argv[i], "--flush-ms") == 0)
            flush_ms = atol(argv[i + 1]);
        else if (strcmp(argv[i], "--large-mib") == 0)
            large_mib = (size_t)atol(argv[i + 1]);
        else {
            fprintf(stderr, "bucket_bench: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (path == NULL) {
        fprintf(stderr, "usage: bucket_bench --bucket FILE [--windows N] [--processes N] "
                        "[--window-ms N] [--flush-ms N] [--large-mib N]\n");
        return 2;
    }
    strata_error err;
    bucket *store;
    if (bucket_open_yaml_file(path, &store, &err) != 0)
        die("bucket", &err);
    char run_id[64];
    snprintf(run_id, sizeof run_id, "bbench-%lld-%d", (long long)time(NULL), (int)getpid());
    rng_state ^= (uint64_t)getpid();
    printf("bucket_bench: %s bucket from %s (prefix \"%s\"), run %s\n", bucket_type(store), path,
           bucket_prefix(store), run_id);
    bench_raw(store, run_id, large_mib);
    bench_ingest(store, run_id, windows, processes, window_ms, flush_ms);
    bench_query(store, run_id);
    bucket_close(store);
    return 0;
}
