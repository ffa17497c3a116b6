/*
 * ingest_bench.c - ingest throughput from request to durable block.
 *
 * What it measures: serialized WriteRaw requests (gzipped pprof inside protobuf, as agents and
 * scrapers send them) go through the ingester's real path: protobuf unpack, gunzip, pprof decode
 * and validation, expansion per sample type, the batcher adding profiles to per-tenant block
 * writers, and the flush thread finishing each block and writing data + meta.json to a FILESYSTEM
 * bucket (fsync'd) before acknowledging. The figure is pprof samples per CPU-second of the whole
 * process (all threads), so it is "per core" whatever the thread count; a pprof sample is one
 * stack with its values (DESIGN.md's unit), and the rows stored for it (one per sample type) are
 * reported beside it. Requests are built before the
 * clock starts.
 *
 * Two datasets: agent-like CPU profiles from bench/agentgen (100 processes, 2,000 stacks per 10 s
 * profile, stacks 10-60 deep, Zipf-distributed) and a real Go CPU profile (lib/pprof/testdata)
 * pushed repeatedly.
 *
 *   build/bench/ingest_bench [--windows N] [--processes N] [--flush-ms N] [--dir DIR]
 *                            [--only agent|go] [--perf-ctl FIFO]
 *
 * --perf-ctl FIFO writes "enable" / "disable" to a perf control FIFO around the timed runs, so
 * `perf record -D -1 --control fifo:FIFO` profiles ingest alone, not the request generation
 * (bench/README.md).
 */
#include <inttypes.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "agentgen.h"
#include "requests.h"
#include "batcher.h"
#include "bucket/bucket.h"
#include "common/clock.h"
#include "parca/profilestore/v1alpha1/profilestore.pb-c.h"
#include "pprof/pprof.h"
#include "write_raw.h"

/* The real Go CPU profile of lib/pprof/testdata, one per request, over 50 instances. */
static void build_go_requests(const char *source_dir, size_t copies, request_set *set) {
    char path[4096];
    snprintf(path, sizeof path, "%s/lib/pprof/testdata/go_cpu.pb.gz", source_dir);
    pprof_file file = {path, "process_cpu"};
    build_file_requests(&file, 1, 50, 1, copies, set);
}

static atomic_uint_fast64_t acks;

/* perf control FIFO (--perf-ctl), or NULL. */
static FILE *perf_ctl;

static void perf_command(const char *cmd) {
    if (perf_ctl == NULL)
        return;
    fprintf(perf_ctl, "%s\n", cmd);
    fflush(perf_ctl);
}

static void on_ack(void *ctx, const strata_error *err) {
    (void)ctx;
    if (err != NULL)
        die("write not acknowledged", err);
    atomic_fetch_add(&acks, 1);
}

typedef struct run_result {
    double cpu_s, wall_s;
    uint64_t blocks, bytes;
    uint64_t flushes, cut_ns, symbol_resets;
} run_result;

/* --- where the time goes: the request path's first stages alone ------------------------------ */

typedef enum stage { STAGE_INFLATE, STAGE_DECODE, STAGE_PARSE } stage;

/* Runs the first stages of ingest over every request on this thread (nothing else runs then) and
 * returns the CPU seconds:
 * STAGE_INFLATE unpacks the WriteRaw protobuf and inflates each pprof (libdeflate, as the
 * ingester does); STAGE_DECODE also decodes and validates each pprof (pprof_decode, which
 * inflates itself); STAGE_PARSE is the ingester's whole request parse (labels, decode,
 * validation, one profile per sample type) that precedes the block writers. */
static double run_stage(const request_set *set, stage which) {
    strata_error err;
    strata_buffer inflated = STRATA_BUFFER_INIT;
    ingest_limits limits;
    ingest_limits_default(&limits);
    int64_t cpu0 = strata_process_cpu_ns();
    for (size_t i = 0; i < set->n; i++) {
        const strata_buffer *r = &set->requests[i];
        if (which == STAGE_PARSE) {
            ingest_request req;
            ingest_reject_reason reason;
            if (ingest_request_parse(r->data, r->len, &limits, 0, &req, &reason, &err) != 0)
                die("parse", &err);
            ingest_request_free(&req);
            continue;
        }
        Parca__Profilestore__V1alpha1__WriteRawRequest *msg =
            parca__profilestore__v1alpha1__write_raw_request__unpack(NULL, r->len, r->data);
        if (msg == NULL)
            die("unpack", NULL);
        for (size_t s = 0; s < msg->n_series; s++)
            for (size_t k = 0; k < msg->series[s]->n_samples; k++) {
                const ProtobufCBinaryData *raw = &msg->series[s]->samples[k]->raw_profile;
                if (which == STAGE_INFLATE) {
                    strata_buffer_reset(&inflated);
                    if (pprof_gunzip(raw->data, raw->len, SIZE_MAX, &inflated, &err) != 0)
                        die("inflate", &err);
                    continue;
                }
                pprof_profile prof;
                if (pprof_decode(raw->data, raw->len, NULL, &prof, &err) != 0)
                    die("decode", &err);
                pprof_profile_free(&prof);
            }
        parca__profilestore__v1alpha1__write_raw_request__free_unpacked(msg, NULL);
    }
    double cpu_s = (double)(strata_process_cpu_ns() - cpu0) / 1e9;
    strata_buffer_free(&inflated);
    return cpu_s;
}

/* Prints each stage's cost per pprof sample and the rate it alone would allow: the ceiling that
 * no work after it can raise. */
static void report_stages(const request_set *set, const run_result *whole) {
    static const char *const names[] = {"unpack + inflate", "+ pprof decode, validation",
                                        "+ labels, one profile per type"};
    double n = (double)set->pprof_samples;
    printf("%-22s where the time goes, per pprof sample (one thread, each stage alone):\n", "");
    for (stage st = STAGE_INFLATE; st <= STAGE_PARSE; st++) {
        double cpu_s = run_stage(set, st);
        printf("%-22s   %-32s %6.3f us  (alone: %5.2f M pprof samples/s)\n", "", names[st],
               cpu_s / n * 1e6, n / cpu_s / 1e6);
    }
    printf("%-22s   %-32s %6.3f us  (all threads' CPU)\n", "", "whole ingest to durable block",
           whole->cpu_s / n * 1e6);
}

static void run(const request_set *set, const char *dir, int64_t flush_ns, run_result *res) {
    strata_error err;
    bucket *store;
    if (bucket_open_filesystem(dir, NULL, &store, &err) != 0)
        die("bucket", &err);
    batcher_options opts;
    batcher_options_default(&opts);
    opts.flush_interval_ns = flush_ns;
    batcher *b;
    if (batcher_new(&opts, store, &b, &err) != 0 || batcher_start(b, &err) != 0)
        die("batcher", &err);
    ingest_limits limits;
    ingest_limits_default(&limits);
    atomic_store(&acks, 0);
    perf_command("enable");
    int64_t cpu0 = strata_process_cpu_ns(), wall0 = strata_monotonic_ns();
    for (size_t i = 0; i < set->n; i++) {
        ingest_request req;
        ingest_reject_reason reason;
        if (ingest_request_parse(set->requests[i].data, set->requests[i].len, &limits,
                                 strata_now_ns(), &req, &reason, &err) != 0)
            die("parse", &err);
        if (batcher_submit(b, "bench", &req, on_ack, NULL, &err) != 0)
            die("submit", &err);
        ingest_request_free(&req);
    }
    batcher_stop(b); /* final flush: every request acknowledged */
    res->cpu_s = (double)(strata_process_cpu_ns() - cpu0) / 1e9;
    res->wall_s = (double)(strata_monotonic_ns() - wall0) / 1e9;
    perf_command("disable");
    const batcher_stats *st = batcher_get_stats(b);
    res->blocks = atomic_load(&st->blocks_written);
    res->bytes = atomic_load(&st->bytes_written);
    res->flushes = atomic_load(&st->flushes);
    res->cut_ns = atomic_load(&st->cut_duration_ns);
    res->symbol_resets = atomic_load(&st->symbol_resets);
    if (atomic_load(&acks) != set->n)
        die("not every request was acknowledged", NULL);
    batcher_free(b);
    bucket_close(store);
}

/* Rates are per pprof sample (DESIGN.md's unit: a stack with its values, as an agent's profile
 * of 2,000 samples holds 2,000) and, in brackets, per stored sample (one per sample type: the
 * ingester stores one profile per sample type, so a 2-type pprof sample becomes 2 rows). */
static void report(const char *name, const request_set *set, const run_result *r) {
    double pprof_samples = (double)set->pprof_samples, stored = (double)set->samples;
    printf("%-22s %9" PRIu64 " pprof samples (%" PRIu64
           " stored)  %5.2f M pprof samples/s per core "
           "(%.2f M stored/s; cpu %.2fs, wall %.2fs)\n",
           name, set->pprof_samples, set->samples, pprof_samples / r->cpu_s / 1e6,
           stored / r->cpu_s / 1e6, r->cpu_s, r->wall_s);
    printf("%-22s level-1 blocks: %" PRIu64 " blocks, %.2f bytes per pprof sample (%.2f per stored "
           "sample); pprof.gz %.2f bytes per pprof sample\n",
           "", r->blocks, (double)r->bytes / pprof_samples, (double)r->bytes / stored,
           (double)set->pprof_bytes / pprof_samples);
    printf("%-22s cutting blocks off the writers (writes wait): %.1f ms per flush over %" PRIu64
           " flushes; symbol dictionary resets: %" PRIu64 "\n",
           "", r->flushes ? (double)r->cut_ns / 1e6 / (double)r->flushes : 0.0, r->flushes,
           r->symbol_resets);
}

int main(int argc, char **argv) {
    size_t windows = 30, processes = 100;
    int64_t flush_ms = 1000;
    const char *dir = NULL, *only = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--windows") == 0)
            windows = (size_t)atol(argv[i + 1]);
        else if (strcmp(argv[i], "--processes") == 0)
            processes = (size_t)atol(argv[i + 1]);
        else if (strcmp(argv[i], "--flush-ms") == 0)
            flush_ms = atol(argv[i + 1]);
        else if (strcmp(argv[i], "--dir") == 0)
            dir = argv[i + 1];
        else if (strcmp(argv[i], "--only") == 0)
            only = argv[i + 1];
        else if (strcmp(argv[i], "--perf-ctl") == 0 && (perf_ctl = fopen(argv[i + 1], "w")) == NULL)
            die("cannot open the perf control FIFO", NULL);
    }
    bool run_agent = only == NULL || strcmp(only, "agent") == 0;
    bool run_go = only == NULL || strcmp(only, "go") == 0;
    char tmpl[] = "/tmp/strata-ingest-bench-XXXXXX";
    if (dir == NULL && (dir = mkdtemp(tmpl)) == NULL)
        die("mkdtemp", NULL);
    const char *src = getenv("STRATA_SOURCE_DIR") ? getenv("STRATA_SOURCE_DIR") : ".";
    request_set agent = {0}, go = {0};
    if (run_agent)
        build_agent_requests(windows, processes, &agent);
    /* The Go profile is small (3 pprof samples per request): ten requests per agent profile keep
     * its timed run long enough (~0.5 s) to mean something. */
    if (run_go)
        build_go_requests(src, 10 * windows * processes, &go);
    run_result ra, rg;
    char sub[4200];
    if (run_agent) {
        snprintf(sub, sizeof sub, "%s/agent", dir);
        run(&agent, sub, flush_ms * STRATA_NS_PER_MS, &ra);
    }
    if (run_go) {
        snprintf(sub, sizeof sub, "%s/go", dir);
        run(&go, sub, flush_ms * STRATA_NS_PER_MS, &rg);
    }
    printf("ingest, request to durable block (FILESYSTEM bucket at %s, flush every %lld ms)\n", dir,
           (long long)flush_ms);
    if (run_agent) {
        report("agent-like CPU", &agent, &ra);
        report_stages(&agent, &ra);
    }
    if (run_go) {
        report("real Go CPU profile", &go, &rg);
        report_stages(&go, &rg);
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("peak RSS %.0f MiB (requests for both datasets held in memory)\n",
           (double)ru.ru_maxrss / 1024.0);
    free_set(&agent);
    free_set(&go);
    return 0;
}
