/*
 * block_bench.c - writes agent-like data into blocks and reports write speed, size and memory.
 *
 *   block_bench [--hours H] [--processes N] [--zstd-level L] [--seed S]
 *
 * Two ways, fed the same generated profiles:
 *   - level 1: what an ingester flushing every second writes; with 100 processes pushing every
 *     10 s, each 1 s block holds the ~10 profiles that arrived in that second;
 *   - compacted: everything in one block, as compaction produces.
 * Reported: samples (block rows: distinct stacks per profile) per CPU-second spent in the block
 * writer (pprof generation excluded), bytes per sample of the data objects plus meta.json
 * (symbols included), the gzipped pprof size of the same profiles for reference, the rate at which
 * a reader decodes samples from the compacted block, and peak RSS (getrusage).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "agentgen.h"
#include "block/block_reader.h"
#include "block/block_writer.h"
#include "common/clock.h"

typedef struct bench_args {
    double hours;
    size_t processes;
    int zstd_level;
    uint64_t seed;
} bench_args;

typedef struct bench_totals {
    uint64_t samples;
    uint64_t profiles;
    int64_t small_cpu_ns, large_cpu_ns;
    uint64_t small_bytes, small_blocks, large_bytes;
    uint64_t pprof_gz_bytes, pprof_gz_samples;
} bench_totals;

static int parse_args(int argc, char **argv, bench_args *a) {
    a->hours = 1.0;
    a->processes = 100;
    a->zstd_level = 3;
    a->seed = 42;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--hours") == 0)
            a->hours = atof(argv[i + 1]);
        else if (strcmp(argv[i], "--processes") == 0)
            a->processes = (size_t)atol(argv[i + 1]);
        else if (strcmp(argv[i], "--zstd-level") == 0)
            a->zstd_level = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--seed") == 0)
            a->seed = (uint64_t)atoll(argv[i + 1]);
        else
            return -1;
    }
    return a->hours > 0 && a->processes > 0 ? 0 : -1;
}

static void die(const char *what, const strata_error *err) {
    fprintf(stderr, "block_bench: %s: %s\n", what, err->message);
    exit(1);
}

static uint64_t finish_block(block_writer *w, bench_totals *t, int64_t *cpu, strata_error *err) {
    strata_buffer data = STRATA_BUFFER_INIT, meta_json = STRATA_BUFFER_INIT;
    block_meta meta;
    int64_t t0 = strata_process_cpu_ns();
    if (block_writer_finish(w, &data, &meta, err) != 0)
        die("finish", err);
    *cpu += strata_process_cpu_ns() - t0;
    if (block_meta_encode(&meta, &meta_json, err) != 0)
        die("meta", err);
    uint64_t bytes = data.len + meta_json.len;
    (void)t;
    strata_buffer_free(&data);
    strata_buffer_free(&meta_json);
    block_meta_free(&meta);
    return bytes;
}

static void add_timed(block_writer *w, const label_set *labels, const pprof_profile *p,
                      int64_t time_ns, int64_t *cpu, strata_error *err) {
    profile_type type = agentgen_profile_type();
    int64_t t0 = strata_process_cpu_ns();
    if (block_writer_add_profile(w, labels, &type, time_ns, 10 * STRATA_NS_PER_SEC, p->period, p, 0,
                                 err) != 0)
        die("add_profile", err);
    *cpu += strata_process_cpu_ns() - t0;
}

static block_writer *new_writer(int level, int zstd_level, strata_error *err) {
    block_writer_options o;
    block_writer_options_default(&o);
    o.compaction_level = level;
    o.zstd_level = zstd_level;
    block_writer *w = block_writer_new(&o, err);
    if (w == NULL)
        die("writer", err);
    return w;
}

/* One second of ingest: the processes whose push falls into second `sub` of the window. */
static void write_second(agentgen *g, const bench_args *a, label_set *labels, uint64_t window,
                         size_t sub, block_writer *large, bench_totals *t, strata_error *err) {
    block_writer *small = NULL;
    for (size_t i = sub; i < a->processes; i += 10) {
        pprof_profile p;
        if (agentgen_profile(g, i, window, &p, err) != 0)
            die("generate", err);
        int64_t time_ns = (int64_t)(window * 10 + sub) * STRATA_NS_PER_SEC;
        if (small == NULL)
            small = new_writer(1, a->zstd_level, err);
        add_timed(small, &labels[i], &p, time_ns, &t->small_cpu_ns, err);
        add_timed(large, &labels[i], &p, time_ns, &t->large_cpu_ns, err);
        if (window < 3) { /* pprof.gz reference on a subset */
            strata_buffer gz = STRATA_BUFFER_INIT;
            if (pprof_encode(&p, true, &gz, err) != 0)
                die("pprof_encode", err);
            t->pprof_gz_bytes += gz.len;
            t->pprof_gz_samples += p.n_samples;
            strata_buffer_free(&gz);
        }
        t->profiles++;
        pprof_profile_free(&p);
    }
    if (small != NULL) {
        t->samples += block_writer_sample_count(small);
        t->small_bytes += finish_block(small, t, &t->small_cpu_ns, err);
        t->small_blocks++;
        block_writer_free(small);
    }
}

/* Decodes every sample of the block; returns samples per CPU-second. */
static double scan_block(const strata_buffer *data, uint64_t *n_samples, strata_error *err) {
    block_memory_source src = {data->data, data->len};
    block_reader *r;
    if (block_reader_open(block_memory_fetch, &src, data->len, NULL, &r, err) != 0)
        die("open", err);
    printf("compacted block tables:    %" PRIu64 " stacks, %" PRIu64 " locations, %" PRIu64
           " functions, %" PRIu64 " strings\n",
           block_reader_row_count(r, BLOCK_TABLE_STACKS),
           block_reader_row_count(r, BLOCK_TABLE_LOCATIONS),
           block_reader_row_count(r, BLOCK_TABLE_FUNCTIONS),
           block_reader_row_count(r, BLOCK_TABLE_STRINGS));
    block_profile *profiles = NULL;
    size_t n = 0;
    if (block_reader_profiles(r, NULL, 0, INT64_MIN, INT64_MAX, &profiles, &n, err) != 0)
        die("profiles", err);
    block_samples s = {0};
    int64_t t0 = strata_process_cpu_ns();
    uint64_t total = 0;
    int64_t checksum = 0;
    for (size_t i = 0; i < n; i += 100) {
        s.len = 0;
        size_t batch = n - i < 100 ? n - i : 100;
        if (block_reader_read_samples(r, &profiles[i], batch, &s, err) != 0)
            die("samples", err);
        total += s.len;
        for (size_t k = 0; k < s.len; k++)
            checksum += s.values[k];
    }
    int64_t cpu = strata_process_cpu_ns() - t0;
    *n_samples = total;
    block_samples_free(&s);
    free(profiles);
    block_reader_close(r);
    return checksum == 0 ? 0 : (double)total / ((double)cpu / 1e9);
}

int main(int argc, char **argv) {
    bench_args a;
    if (parse_args(argc, argv, &a) != 0) {
        fprintf(stderr, "usage: block_bench [--hours H] [--processes N] [--zstd-level L] "
                        "[--seed S]\n");
        return 2;
    }
    strata_error err;
    agentgen_options go;
    agentgen_options_default(&go);
    go.n_processes = a.processes;
    go.seed = a.seed;
    agentgen *g = agentgen_new(&go, &err);
    if (g == NULL)
        die("agentgen", &err);
    label_set *labels = calloc(a.processes, sizeof *labels);
    for (size_t i = 0; labels != NULL && i < a.processes; i++) {
        if (agentgen_labels(g, i, &labels[i], &err) != 0)
            die("labels", &err);
    }
    bench_totals t;
    memset(&t, 0, sizeof t);
    block_writer *large = new_writer(3, a.zstd_level, &err);
    uint64_t windows = (uint64_t)(a.hours * 360.0 + 0.5);
    int64_t wall0 = strata_monotonic_ns();
    for (uint64_t w = 0; w < windows; w++) {
        for (size_t sub = 0; sub < 10; sub++)
            write_second(g, &a, labels, w, sub, large, &t, &err);
    }
    size_t large_memory = block_writer_memory_bytes(large);
    strata_buffer data = STRATA_BUFFER_INIT;
    block_meta meta;
    int64_t t0 = strata_process_cpu_ns();
    if (block_writer_finish(large, &data, &meta, &err) != 0)
        die("finish large", &err);
    t.large_cpu_ns += strata_process_cpu_ns() - t0;
    strata_buffer meta_json = STRATA_BUFFER_INIT;
    if (block_meta_encode(&meta, &meta_json, &err) != 0)
        die("meta", &err);
    t.large_bytes = data.len + meta_json.len;
    block_writer_free(large);
    uint64_t scanned;
    double scan_rate = scan_block(&data, &scanned, &err);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);

    double s = (double)t.samples;
    printf("agent-like data: %.2f h, %zu processes, %" PRIu64 " profiles, %" PRIu64
           " samples (%.0f per profile), zstd level %d, wall %.1f s\n",
           a.hours, a.processes, t.profiles, t.samples, s / (double)t.profiles, a.zstd_level,
           (double)(strata_monotonic_ns() - wall0) / 1e9);
    printf("pprof.gz reference:        %8.2f bytes/sample\n",
           (double)t.pprof_gz_bytes / (double)t.pprof_gz_samples);
    printf("level-1 blocks (1 s):      %8.2f bytes/sample, %" PRIu64 " blocks, %.2f M samples/s "
           "per core written\n",
           (double)t.small_bytes / s, t.small_blocks, s / ((double)t.small_cpu_ns / 1e9) / 1e6);
    printf("compacted block:           %8.2f bytes/sample, %" PRIu64 " bytes, %.2f M samples/s "
           "per core written, writer memory %.0f MiB\n",
           (double)t.large_bytes / s, t.large_bytes, s / ((double)t.large_cpu_ns / 1e9) / 1e6,
           (double)large_memory / 1048576.0);
    printf("compacted block scan:      %.1f M samples/s per core (%" PRIu64 " samples)\n",
           scan_rate / 1e6, scanned);
    printf("peak RSS:                  %.0f MiB\n", (double)ru.ru_maxrss / 1024.0);
    strata_buffer_free(&data);
    strata_buffer_free(&meta_json);
    block_meta_free(&meta);
    for (size_t i = 0; i < a.processes; i++)
        label_set_free(&labels[i]);
    free(labels);
    agentgen_free(g);
    return 0;
}
