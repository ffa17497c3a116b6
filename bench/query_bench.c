/*
 * query_bench.c - query engine throughput and latency, side by side with `go tool pprof -proto`.
 *
 *   query_bench [--hours H] [--processes N] [--pprof-minutes M] [--merge-runs R]
 *               [--range-runs R] [--block-minutes B] [--dir DIR] [--keep] [--no-rollups]
 *               [--seed S] [--parallelism P]
 *
 * Data (written once per DIR; reused when DIR is given again and its ".done" markers exist):
 *   - merge data, tenant "agent-<H>h-<N>p": agent-like CPU profiles from bench/agentgen (N
 *     processes, 2,000 stacks per 10 s profile, stacks 10-60 deep) over H hours, written into a
 *     FILESYSTEM bucket as compacted blocks (level 2, one block per B minutes, default 60), data
 *     object first and meta.json last, as the compactor does. Process i's profile of window w is at
 *     T0 + 10 w + (i mod 10) seconds, as if pushes were spread over the 10 s. The profiles go
 *     straight into the block writer through bench/agentgen_block, on one thread: the same blocks
 *     as agentgen's pprof profiles through block_writer_add_profile (sample type 0,
 *     samples/count; bench/agentgen_block_test), at about 4.5 M samples/s: an hour in 15 s, a
 *     day in under 7 minutes (the pprof path took about 17 minutes for an hour on two threads).
 *   - range data, tenant "range-day": a day of 100 series (the same 100 agent label sets), one
 *     profile every 10 s per series (8,640 points per series, 864,000 profiles), each profile
 *     holding one two-frame sample, in 24 hourly level-2 blocks. A range query reads only the
 *     profiles table, so the sample content does not matter and generation stays cheap.
 *   - pprof files: the first M minutes (default 2) of the merge data, as gzipped pprof files, one
 *     per profile, exactly what agentgen emits.
 * Generation runs in a child process, so the peak RSS reported below is the queries' alone; the
 * child reports its own peak RSS and CPU.
 *
 * Measured (CPU = whole-process CPU time, all threads, so rates are "per core"; wall is reported
 * too, the machine being shared; --parallelism sets the engine's worker threads, by default one
 * per online CPU, each taking whole blocks):
 *   1. merge: query_merge of the agent profile type over the whole range with an empty selector
 *      into a calltree, then calltree_finalize; R runs (the first opens the block readers).
 *      Samples are block rows read (one per distinct stack per profile, as pprof's samples).
 *      Time split: the sample scan is measured on its own (the same samples read through the
 *      block_index's readers with block_reader_read_samples); with --no-rollups, stack
 *      translation and tree building is the merge minus the scan; with rollups (the default) the
 *      merge reads each block's per-series rollups instead of the scan, which is shown only for
 *      comparison; finalize is timed separately.
 *   2. selective merge: the same with {pod="<process 0's pod>"} (1 series of N), showing pruning.
 *   3. range: query_range over the day of 100 series, step 60 s, with sum_by pid (100 series
 *      out: one per process), with sum_by node (10 series out) and with an empty sum_by (one
 *      series, as Parca sums a delta type over everything then); p50/p90/p99 of wall latency over R
 * runs (default 20) after one warm-up run, and the mean CPU per query.
 *   4. peer: `go tool pprof -proto FILE... > merged.pb` over the M minutes of pprof files (CPU and
 *      peak RSS from wait4's rusage of the go command, which includes the pprof tool it runs),
 *      against query_merge + finalize over the same M minutes; the merged totals are compared.
 * Nothing is asserted: figures only.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agentgen.h"
#include "agentgen_block.h"
#include "block/block_format.h"
#include "block/block_reader.h"
#include "block/block_writer.h"
#include "block/ulid.h"
#include "block_index.h"
#include "bucket/bucket.h"
#include "calltree/calltree.h"
#include "common/clock.h"
#include "engine.h"
#include "pprof/pprof.h"

/* 2023-11-14T22:00:00Z, an hour boundary. */
#define T0_NS (INT64_C(1699999200) * STRATA_NS_PER_SEC)
#define WINDOW_NS (10 * STRATA_NS_PER_SEC)
#define RANGE_TENANT "range-day"
#define RANGE_SERIES 100

typedef struct bench_args {
    double hours;
    size_t processes;
    double pprof_minutes;
    int merge_runs;
    int range_runs;
    int block_minutes;
    const char *dir;
    bool keep;
    bool no_rollups;
    uint64_t seed;
    int parallelism; /* the engine's worker threads; 0: its default (online CPUs) */
} bench_args;

static void die(const char *what, const strata_error *err) {
    fprintf(stderr, "query_bench: %s: %s\n", what, err != NULL ? err->message : strerror(errno));
    exit(1);
}

static int parse_args(int argc, char **argv, bench_args *a) {
    a->hours = 1.0;
    a->processes = 100;
    a->pprof_minutes = 2.0;
    a->merge_runs = 3;
    a->range_runs = 20;
    a->block_minutes = 60;
    a->dir = NULL;
    a->keep = false;
    a->no_rollups = false;
    a->seed = 42;
    a->parallelism = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--keep") == 0) {
            a->keep = true;
            continue;
        }
        if (strcmp(argv[i], "--no-rollups") == 0) {
            a->no_rollups = true;
            continue;
        }
        if (i + 1 >= argc)
            return -1;
        const char *v = argv[++i];
        if (strcmp(argv[i - 1], "--hours") == 0)
            a->hours = atof(v);
        else if (strcmp(argv[i - 1], "--processes") == 0)
            a->processes = (size_t)atol(v);
        else if (strcmp(argv[i - 1], "--pprof-minutes") == 0)
            a->pprof_minutes = atof(v);
        else if (strcmp(argv[i - 1], "--merge-runs") == 0)
            a->merge_runs = atoi(v);
        else if (strcmp(argv[i - 1], "--range-runs") == 0)
            a->range_runs = atoi(v);
        else if (strcmp(argv[i - 1], "--block-minutes") == 0)
            a->block_minutes = atoi(v);
        else if (strcmp(argv[i - 1], "--dir") == 0)
            a->dir = v;
        else if (strcmp(argv[i - 1], "--seed") == 0)
            a->seed = (uint64_t)atoll(v);
        else if (strcmp(argv[i - 1], "--parallelism") == 0)
            a->parallelism = atoi(v);
        else
            return -1;
    }
    return a->hours > 0 && a->processes > 0 && a->merge_runs > 0 && a->range_runs > 0 &&
                   a->block_minutes > 0 && a->pprof_minutes >= 0 && a->parallelism >= 0
               ? 0
               : -1;
}

static double cpu_s(const struct rusage *ru) {
    return (double)ru->ru_utime.tv_sec + (double)ru->ru_utime.tv_usec / 1e6 +
           (double)ru->ru_stime.tv_sec + (double)ru->ru_stime.tv_usec / 1e6;
}

static double peak_rss_mib(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0;
}

static bool file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static void touch(const char *path) {
    FILE *f = fopen(path, "w");
    if (f == NULL)
        die(path, NULL);
    fclose(f);
}

/* ---- data generation (in a child process) -----------------------------------------------------
 */

static uint64_t merge_windows(const bench_args *a) {
    return (uint64_t)(a->hours * 360.0 + 0.5);
}

static uint64_t pprof_windows(const bench_args *a) {
    uint64_t w = (uint64_t)(a->pprof_minutes * 6.0 + 0.5);
    return w < merge_windows(a) ? w : merge_windows(a);
}

static void merge_tenant(const bench_args *a, char *out, size_t cap) {
    snprintf(out, cap, "agent-%gh-%zup", a->hours, a->processes);
}

static void pprof_dir(const bench_args *a, char *out, size_t cap) {
    snprintf(out, cap, "%s/pprof-%gm-%zup", a->dir, a->pprof_minutes, a->processes);
}

static block_writer *new_writer(const char *tenant, strata_error *err) {
    block_writer_options o;
    block_writer_options_default(&o);
    o.compaction_level = 2;
    o.tenant = tenant;
    block_writer *w = block_writer_new(&o, err);
    if (w == NULL)
        die("block_writer_new", err);
    return w;
}

/* Finishes w and uploads data, then meta.json, as the compactor does. Returns data bytes. */
static uint64_t upload_block(bucket *store, const char *tenant, block_writer *w,
                             strata_error *err) {
    strata_buffer data = STRATA_BUFFER_INIT, meta_json = STRATA_BUFFER_INIT;
    block_meta meta;
    if (block_writer_finish(w, &data, &meta, err) != 0)
        die("block_writer_finish", err);
    if (block_meta_encode(&meta, &meta_json, err) != 0)
        die("block_meta_encode", err);
    char id[ULID_STRING_LEN + 1], key[256];
    ulid_format(&meta.id, id);
    snprintf(key, sizeof key, "%s/%s/%s", tenant, id, BLOCK_DATA_FILE);
    if (bucket_upload(store, key, data.data, data.len, err) != 0)
        die("upload data", err);
    snprintf(key, sizeof key, "%s/%s/%s", tenant, id, BLOCK_META_FILE);
    if (bucket_upload(store, key, meta_json.data, meta_json.len, err) != 0)
        die("upload meta", err);
    uint64_t bytes = data.len;
    strata_buffer_free(&data);
    strata_buffer_free(&meta_json);
    block_meta_free(&meta);
    block_writer_free(w);
    return bytes;
}

/* A day of 100 series with one tiny sample per profile. */
static void write_range_data(bucket *store, agentgen *g, label_set *labels, strata_error *err) {
    profile_type type = agentgen_profile_type();
    block_frame frames[2] = {{.function_name = "work", .mapping_file = "/usr/bin/svc"},
                             {.function_name = "main", .mapping_file = "/usr/bin/svc"}};
    (void)g;
    for (int hour = 0; hour < 24; hour++) {
        block_writer *w = new_writer(RANGE_TENANT, err);
        for (int64_t win = 0; win < 360; win++) {
            for (size_t s = 0; s < RANGE_SERIES; s++) {
                int64_t t = T0_NS + ((int64_t)hour * 360 + win) * WINDOW_NS +
                            (int64_t)(s % 10) * STRATA_NS_PER_SEC;
                if (block_writer_begin_profile(w, &labels[s], &type, t, WINDOW_NS,
                                               STRATA_NS_PER_SEC / 19, err) != 0 ||
                    block_writer_add_sample(w, frames, 2, 1 + (int64_t)((win * 31 + s * 7) % 38),
                                            err) != 0 ||
                    block_writer_end_profile(w, err) != 0)
                    die("range profile", err);
            }
        }
        upload_block(store, RANGE_TENANT, w, err);
    }
}

/* The pprof files: process i's profile of window w, exactly what agentgen emits, with the time and
 * duration the merge data gives it. */
typedef struct pprof_stats {
    uint64_t files, bytes, samples;
} pprof_stats;

static void write_pprof_window(const bench_args *a, agentgen *g, uint64_t w, pprof_stats *st) {
    strata_error err;
    char dir[512];
    pprof_dir(a, dir, sizeof dir);
    if (w == 0 && mkdir(dir, 0755) != 0 && errno != EEXIST)
        die(dir, NULL);
    for (size_t i = 0; i < a->processes; i++) {
        pprof_profile p;
        if (agentgen_profile(g, i, w, &p, &err) != 0)
            die("agentgen_profile", &err);
        p.time_nanos = T0_NS + (int64_t)w * WINDOW_NS + (int64_t)(i % 10) * STRATA_NS_PER_SEC;
        p.duration_nanos = WINDOW_NS;
        strata_buffer gz = STRATA_BUFFER_INIT;
        if (pprof_encode(&p, true, &gz, &err) != 0)
            die("pprof_encode", &err);
        char path[600];
        snprintf(path, sizeof path, "%s/w%05" PRIu64 "-p%03zu.pb.gz", dir, w, i);
        FILE *f = fopen(path, "wb");
        if (f == NULL || fwrite(gz.data, 1, gz.len, f) != gz.len || fclose(f) != 0)
            die(path, NULL);
        st->files++;
        st->bytes += gz.len;
        st->samples += p.n_samples;
        strata_buffer_free(&gz);
        pprof_profile_free(&p);
    }
}

static void print_pprof_stats(const pprof_stats *st) {
    if (st->files > 0)
        printf("pprof files written:  %" PRIu64 " files, %" PRIu64 " samples, %.1f bytes/sample\n",
               st->files, st->samples, (double)st->bytes / (double)st->samples);
}

/* Merge data, on one thread: window by window, each process's profile goes straight into the
 * block writer through bench/agentgen_block (the content agentgen_profile +
 * block_writer_add_profile would write, sample type 0: samples/count); the first pprof windows
 * are also written as pprof files. */
static void write_merge_data(const bench_args *a, bucket *store, agentgen *g, label_set *labels,
                             bool write_pprof, strata_error *err) {
    char tenant[128];
    merge_tenant(a, tenant, sizeof tenant);
    uint64_t windows = merge_windows(a), n_pprof = write_pprof ? pprof_windows(a) : 0;
    agentgen_writer *aw = agentgen_writer_new(g, err);
    if (aw == NULL)
        die("agentgen_writer_new", err);
    profile_type type = agentgen_profile_type();
    uint64_t block_windows = (uint64_t)a->block_minutes * 6;
    block_writer *w = NULL;
    uint64_t samples = 0, bytes = 0, blocks = 0;
    pprof_stats st = {0, 0, 0};
    int64_t wall0 = strata_monotonic_ns(), cpu0 = strata_process_cpu_ns();
    for (uint64_t win = 0; win < windows; win++) {
        if (w == NULL) {
            w = new_writer(tenant, err);
            agentgen_writer_start(aw, w);
        }
        for (size_t i = 0; i < a->processes; i++) {
            int64_t t = T0_NS + (int64_t)win * WINDOW_NS + (int64_t)(i % 10) * STRATA_NS_PER_SEC;
            if (agentgen_writer_add(aw, i, win, &labels[i], &type, t, WINDOW_NS, 0, err) != 0)
                die("agentgen_writer_add", err);
        }
        if (win < n_pprof)
            write_pprof_window(a, g, win, &st);
        if ((win + 1) % block_windows == 0 || win + 1 == windows) {
            samples += block_writer_sample_count(w);
            agentgen_writer_start(aw, NULL);
            bytes += upload_block(store, tenant, w, err);
            blocks++;
            w = NULL;
            double s = (double)(strata_monotonic_ns() - wall0) / 1e9;
            fprintf(stderr,
                    "query_bench: wrote block %" PRIu64 " of %s (%.0f s, %.2f M samples/s)\n",
                    blocks, tenant, s, (double)samples / s / 1e6);
        }
    }
    agentgen_writer_free(aw);
    double wall = (double)(strata_monotonic_ns() - wall0) / 1e9;
    double cpu = (double)(strata_process_cpu_ns() - cpu0) / 1e9;
    printf("merge data written:   %s: %" PRIu64 " blocks, %" PRIu64 " samples, %.2f bytes/sample, "
           "%.0f s wall, %.0f s CPU (%.2f M samples/s per core, one thread)\n",
           tenant, blocks, samples, (double)bytes / (double)samples, wall, cpu,
           (double)samples / cpu / 1e6);
    print_pprof_stats(&st);
}

static void generate(const bench_args *a, const char *bucket_dir) {
    char tenant[128], marker[700], pmarker[700], rmarker[700];
    merge_tenant(a, tenant, sizeof tenant);
    snprintf(marker, sizeof marker, "%s/%s.done", a->dir, tenant);
    pprof_dir(a, pmarker, sizeof pmarker - 8);
    strcat(pmarker, ".done");
    snprintf(rmarker, sizeof rmarker, "%s/%s.done", a->dir, RANGE_TENANT);
    bool need_pprof = pprof_windows(a) > 0 && !file_exists(pmarker);
    bool need_merge = !file_exists(marker);
    bool need_range = !file_exists(rmarker);
    if (!need_pprof && !need_merge && !need_range) {
        printf("data:                 reusing %s\n", a->dir);
        return;
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        die("fork", NULL);
    if (pid > 0) {
        int status;
        if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "query_bench: data generation failed\n");
            exit(1);
        }
        return;
    }
    strata_error err;
    bucket *store;
    if (bucket_open_filesystem(bucket_dir, NULL, &store, &err) != 0)
        die("bucket", &err);
    agentgen_options go;
    agentgen_options_default(&go);
    go.n_processes = a->processes > RANGE_SERIES ? a->processes : RANGE_SERIES;
    go.seed = a->seed;
    agentgen *g = agentgen_new(&go, &err);
    if (g == NULL)
        die("agentgen", &err);
    label_set *labels = calloc(go.n_processes, sizeof *labels);
    if (labels == NULL)
        die("out of memory", NULL);
    for (size_t i = 0; i < go.n_processes; i++)
        if (agentgen_labels(g, i, &labels[i], &err) != 0)
            die("labels", &err);
    if (need_range) {
        int64_t t0 = strata_monotonic_ns();
        write_range_data(store, g, labels, &err);
        printf("range data written:   %s: 24 blocks, %d series, %d profiles, %.0f s\n",
               RANGE_TENANT, RANGE_SERIES, RANGE_SERIES * 8640,
               (double)(strata_monotonic_ns() - t0) / 1e9);
        touch(rmarker);
    }
    if (need_merge || need_pprof) {
        if (need_merge) {
            /* (Re)write everything: blocks and, if wanted, the pprof files. */
            write_merge_data(a, store, g, labels, pprof_windows(a) > 0, &err);
            touch(marker);
        } else {
            /* Only the pprof files are missing. */
            pprof_stats st = {0, 0, 0};
            for (uint64_t w = 0; w < pprof_windows(a); w++)
                write_pprof_window(a, g, w, &st);
            print_pprof_stats(&st);
        }
        if (pprof_windows(a) > 0)
            touch(pmarker);
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("data generation:      peak RSS %.0f MiB, CPU %.0f s (the generating child process)\n",
           (double)ru.ru_maxrss / 1024.0, cpu_s(&ru));
    fflush(stdout);
    _exit(0);
}

/* ---- measurements ------------------------------------------------------------------------------
 */

typedef struct timed {
    double cpu_s, wall_s;
} timed;

typedef struct merge_run {
    merge_result res;
    timed merge, finalize;
    size_t nodes, frames;
    int64_t root_total;
} merge_run;

static void run_merge_once(query_engine *e, const char *tenant, const selector *sel, int64_t start,
                           int64_t end, merge_run *out) {
    strata_error err;
    calltree *tree;
    if (calltree_create(&tree, 0, &err) != 0)
        die("calltree_create", &err);
    int64_t c0 = strata_process_cpu_ns(), w0 = strata_monotonic_ns();
    if (query_merge(e, tenant, sel, start, end, tree, false, &out->res, &err) != 0)
        die("query_merge", &err);
    int64_t c1 = strata_process_cpu_ns(), w1 = strata_monotonic_ns();
    if (calltree_finalize(tree, &err) != 0)
        die("calltree_finalize", &err);
    int64_t c2 = strata_process_cpu_ns(), w2 = strata_monotonic_ns();
    out->merge = (timed){(double)(c1 - c0) / 1e9, (double)(w1 - w0) / 1e9};
    out->finalize = (timed){(double)(c2 - c1) / 1e9, (double)(w2 - w1) / 1e9};
    out->nodes = calltree_node_count(tree);
    out->frames = calltree_frame_count(tree);
    out->root_total = calltree_node_get(tree, CALLTREE_ROOT).total;
    calltree_free(tree);
}

static void print_merge_run(const char *what, int i, const merge_run *r) {
    double cpu = r->merge.cpu_s + r->finalize.cpu_s, wall = r->merge.wall_s + r->finalize.wall_s;
    printf("%-22s run %d: %" PRIu64 " profiles, %" PRIu64 " samples, %zu nodes, %zu frames; "
           "CPU %.3f s (merge %.3f + finalize %.3f), wall %.3f s -> %.1f M samples/s per core "
           "(%.1f M/s wall)\n",
           what, i, r->res.profiles, r->res.samples, r->nodes, r->frames, cpu, r->merge.cpu_s,
           r->finalize.cpu_s, wall, (double)r->res.samples / cpu / 1e6,
           (double)r->res.samples / wall / 1e6);
}

/* Best (least CPU) of the R runs (the first also opens the block readers). */
static merge_run bench_merge(query_engine *e, const char *tenant, const selector *sel,
                             int64_t start, int64_t end, int runs, const char *what) {
    merge_run best;
    memset(&best, 0, sizeof best);
    for (int i = 1; i <= runs; i++) {
        merge_run r;
        run_merge_once(e, tenant, sel, start, end, &r);
        print_merge_run(what, i, &r);
        if (i == 1 || r.merge.cpu_s + r.finalize.cpu_s < best.merge.cpu_s + best.finalize.cpu_s)
            best = r;
    }
    return best;
}

/* Reads every sample of the tenant's blocks in [start, end] through the index's readers. */
static timed bench_scan(block_index *ix, const char *tenant, int64_t start, int64_t end,
                        uint64_t *n_samples) {
    strata_error err;
    indexed_block **blocks;
    size_t n_blocks;
    if (block_index_acquire(ix, tenant, start, end, &blocks, &n_blocks, &err) != 0)
        die("acquire", &err);
    int64_t c0 = strata_process_cpu_ns(), w0 = strata_monotonic_ns();
    uint64_t total = 0;
    int64_t checksum = 0;
    block_samples s = {0};
    for (size_t b = 0; b < n_blocks; b++) {
        pthread_mutex_lock(&blocks[b]->mu);
        if (block_index_open_reader(ix, blocks[b], &err) != 0)
            die("open reader", &err);
        block_reader *r = blocks[b]->reader;
        block_profile *profiles = NULL;
        size_t n = 0;
        if (block_reader_profiles(r, NULL, 0, start, end, &profiles, &n, &err) != 0)
            die("profiles", &err);
        for (size_t i = 0; i < n;) {
            size_t j = i;
            uint64_t batch = 0;
            while (j < n && (j == i || batch + profiles[j].sample_count <= (1u << 20)))
                batch += profiles[j++].sample_count;
            s.len = 0;
            if (block_reader_read_samples(r, profiles + i, j - i, &s, &err) != 0)
                die("read samples", &err);
            for (size_t k = 0; k < s.len; k++)
                checksum += s.values[k] + s.stacks[k];
            total += s.len;
            i = j;
        }
        free(profiles);
        pthread_mutex_unlock(&blocks[b]->mu);
    }
    int64_t c1 = strata_process_cpu_ns(), w1 = strata_monotonic_ns();
    block_samples_free(&s);
    block_index_release_all(ix, blocks, n_blocks);
    *n_samples = checksum != 0 ? total : 0;
    return (timed){(double)(c1 - c0) / 1e9, (double)(w1 - w0) / 1e9};
}

/* What the tenant's open block readers hold (block_reader_memory_bytes: decoded symbol tables,
 * cached pages, buffers): readers stay open between queries, so this part of the RSS grows with
 * the blocks a query has touched. */
static void print_reader_memory(block_index *ix, const char *tenant, int64_t start, int64_t end) {
    strata_error err;
    indexed_block **blocks;
    size_t n_blocks, open = 0;
    if (block_index_acquire(ix, tenant, start, end, &blocks, &n_blocks, &err) != 0)
        die("acquire", &err);
    size_t bytes = 0, most = 0;
    for (size_t b = 0; b < n_blocks; b++) {
        pthread_mutex_lock(&blocks[b]->mu);
        if (blocks[b]->reader != NULL) {
            size_t m = block_reader_memory_bytes(blocks[b]->reader);
            bytes += m;
            most = m > most ? m : most;
            open++;
        }
        pthread_mutex_unlock(&blocks[b]->mu);
    }
    block_index_release_all(ix, blocks, n_blocks);
    printf("  open block readers:  %zu of %zu blocks, holding %.0f MiB (largest %.0f MiB)\n", open,
           n_blocks, (double)bytes / 1048576.0, (double)most / 1048576.0);
}

static int compare_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

static double percentile(const double *sorted, int n, double p) {
    int i = (int)(p / 100.0 * (double)n + 0.999999) - 1;
    if (i < 0)
        i = 0;
    if (i >= n)
        i = n - 1;
    return sorted[i];
}

static void bench_range(query_engine *e, const selector *sel, const char *const *sum_by,
                        size_t n_sum_by, int runs, const char *what) {
    strata_error err;
    int64_t start = T0_NS, end = T0_NS + 24 * 3600 * STRATA_NS_PER_SEC - 1;
    double *wall = calloc((size_t)runs, sizeof *wall);
    double cpu_total = 0;
    size_t n_series = 0, n_points = 0;
    int32_t count = 0;
    for (int i = 0; i <= runs; i++) { /* run 0: warm-up (opens the readers) */
        range_series *series;
        size_t n;
        int64_t c0 = strata_process_cpu_ns(), w0 = strata_monotonic_ns();
        if (query_range(e, RANGE_TENANT, sel, start, end, 60 * STRATA_NS_PER_SEC, sum_by, n_sum_by,
                        &series, &n, NULL, &err) != 0)
            die("query_range", &err);
        int64_t c1 = strata_process_cpu_ns(), w1 = strata_monotonic_ns();
        if (i == 0) {
            printf("%-22s warm-up (opens 24 readers): wall %.1f ms, CPU %.1f ms\n", what,
                   (double)(w1 - w0) / 1e6, (double)(c1 - c0) / 1e6);
        } else {
            wall[i - 1] = (double)(w1 - w0) / 1e6;
            cpu_total += (double)(c1 - c0) / 1e6;
        }
        n_series = n;
        n_points = 0;
        count = 0;
        for (size_t s = 0; s < n; s++) {
            n_points += series[s].n_points;
            for (size_t p = 0; p < series[s].n_points; p++)
                count += series[s].points[p].count;
        }
        query_range_free(series, n);
    }
    qsort(wall, (size_t)runs, sizeof *wall, compare_double);
    printf("%-22s %zu series, %zu points, %d profiles; over %d runs: p50 %.1f ms, p90 %.1f ms, "
           "p99 %.1f ms wall; mean CPU %.1f ms\n",
           what, n_series, n_points, count, runs, percentile(wall, runs, 50),
           percentile(wall, runs, 90), percentile(wall, runs, 99), cpu_total / runs);
    free(wall);
}

/* Runs `go tool pprof -proto FILES... > out`; returns CPU and peak RSS of the go command and its
 * descendants (wait4's rusage). */
static int run_go_pprof(const bench_args *a, const char *out_path, timed *t, double *rss_mib) {
    char pdir[600];
    pprof_dir(a, pdir, sizeof pdir);
    DIR *d = opendir(pdir);
    if (d == NULL)
        die(pdir, NULL);
    size_t cap = 1024, n = 0;
    char **argv = malloc(cap * sizeof *argv);
    argv[n++] = "go";
    argv[n++] = "tool";
    argv[n++] = "pprof";
    argv[n++] = "-proto";
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strstr(de->d_name, ".pb.gz") == NULL)
            continue;
        if (n + 2 >= cap)
            argv = realloc(argv, (cap *= 2) * sizeof *argv);
        if (asprintf(&argv[n++], "%s/%s", pdir, de->d_name) < 0)
            die("asprintf", NULL);
    }
    closedir(d);
    argv[n] = NULL;
    char home[600], cache[600];
    snprintf(home, sizeof home, "%s/gohome", a->dir);
    snprintf(cache, sizeof cache, "%s/gocache", a->dir);
    mkdir(home, 0755);
    mkdir(cache, 0755);
    fflush(stdout);
    int64_t w0 = strata_monotonic_ns();
    pid_t pid = fork();
    if (pid < 0)
        die("fork", NULL);
    if (pid == 0) {
        int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || dup2(fd, 1) < 0)
            _exit(127);
        setenv("HOME", home, 1);
        setenv("GOCACHE", cache, 1);
        setenv("GOFLAGS", "-mod=mod", 1);
        setenv("GOPROXY", "off", 1);
        execvp("go", argv);
        _exit(127);
    }
    int status;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) < 0)
        die("wait4", NULL);
    t->wall_s = (double)(strata_monotonic_ns() - w0) / 1e9;
    t->cpu_s = cpu_s(&ru);
    *rss_mib = (double)ru.ru_maxrss / 1024.0;
    for (size_t i = 4; i < n; i++)
        free(argv[i]);
    free(argv);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? (int)(n - 4) : -1;
}

/* Sum of the first sample type of a (gzipped) pprof file, and its sample count. */
static int pprof_file_total(const char *path, int64_t *total, int64_t *period, size_t *samples) {
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return -1;
    strata_buffer buf = STRATA_BUFFER_INIT;
    char chunk[1 << 16];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0)
        if (strata_buffer_append(&buf, chunk, got) != 0)
            die("out of memory", NULL);
    fclose(f);
    pprof_limits lim;
    pprof_limits_default(&lim);
    lim.max_decompressed_bytes = (size_t)8 << 30;
    lim.max_samples = (size_t)1 << 30;
    pprof_profile p;
    strata_error err;
    if (pprof_decode(buf.data, buf.len, &lim, &p, &err) != 0) {
        fprintf(stderr, "query_bench: decode %s: %s\n", path, err.message);
        strata_buffer_free(&buf);
        return -1;
    }
    *total = 0;
    for (size_t i = 0; i < p.n_samples; i++)
        *total += pprof_sample_value(&p, i, 0);
    *period = p.period;
    *samples = p.n_samples;
    pprof_profile_free(&p);
    strata_buffer_free(&buf);
    return 0;
}

static void remove_tree(const char *path) {
    char *cmd;
    if (asprintf(&cmd, "rm -rf '%s'", path) >= 0) {
        if (system(cmd) != 0)
            fprintf(stderr, "query_bench: could not remove %s\n", path);
        free(cmd);
    }
}

int main(int argc, char **argv) {
    bench_args a;
    if (parse_args(argc, argv, &a) != 0) {
        fprintf(stderr, "usage: query_bench [--hours H] [--processes N] [--pprof-minutes M] "
                        "[--merge-runs R] [--range-runs R] [--block-minutes B] [--dir DIR] "
                        "[--keep] [--no-rollups] [--seed S] [--parallelism P]\n");
        return 2;
    }
    char tmpl[] = "/tmp/query_bench.XXXXXX";
    bool temp_dir = a.dir == NULL;
    if (temp_dir) {
        if (mkdtemp(tmpl) == NULL)
            die("mkdtemp", NULL);
        a.dir = tmpl;
    } else if (mkdir(a.dir, 0755) != 0 && errno != EEXIST) {
        die(a.dir, NULL);
    }
    char bucket_dir[600], tenant[128];
    snprintf(bucket_dir, sizeof bucket_dir, "%s/bucket", a.dir);
    merge_tenant(&a, tenant, sizeof tenant);
    printf("query_bench: %g h x %zu processes (agentgen, 2,000 stacks per 10 s profile), "
           "blocks of %d min, pprof subset %g min, data in %s\n",
           a.hours, a.processes, a.block_minutes, a.pprof_minutes, a.dir);
    generate(&a, bucket_dir);

    strata_error err;
    bucket *store;
    if (bucket_open_filesystem(bucket_dir, NULL, &store, &err) != 0)
        die("bucket", &err);
    block_index_options io;
    block_index_options_default(&io);
    block_index *ix;
    if (block_index_new(&io, store, &ix, &err) != 0 || block_index_sync(ix, &err) != 0)
        die("block_index", &err);
    query_engine_options eo;
    query_engine_options_default(&eo);
    eo.use_rollups = !a.no_rollups;
    if (a.parallelism > 0)
        eo.parallelism = a.parallelism;
    query_engine *e;
    if (query_engine_new(&eo, ix, &e, &err) != 0)
        die("query_engine", &err);
    printf("query engine:         %d worker threads (blocks are spread over them)\n",
           eo.parallelism);

    profile_type type = agentgen_profile_type();
    strata_buffer type_text = STRATA_BUFFER_INIT;
    profile_type_format(&type, &type_text);
    strata_buffer_append(&type_text, "", 1);
    selector all;
    if (selector_parse((const char *)type_text.data, &all, &err) != 0)
        die("selector", &err);
    int64_t start = T0_NS, end = T0_NS + (int64_t)merge_windows(&a) * WINDOW_NS - 1;

    /* 1. full merge */
    printf("\n== merge: %s, empty selector, whole range ==\n", (const char *)type_text.data);
    merge_run m = bench_merge(e, tenant, &all, start, end, a.merge_runs, "merge all");
    uint64_t scanned;
    timed scan = bench_scan(ix, tenant, start, end, &scanned);
    double m_cpu = m.merge.cpu_s + m.finalize.cpu_s;
    printf("merge all (best):      %.1f M samples/s per core, %.1f M samples/s wall, peak RSS "
           "%.0f MiB (whole process so far)\n",
           (double)m.res.samples / m_cpu / 1e6,
           (double)m.res.samples / (m.merge.wall_s + m.finalize.wall_s) / 1e6, peak_rss_mib());
    if (a.no_rollups)
        printf("  split (CPU):         sample scan %.3f s (%.0f%%, %.1f M samples/s, %" PRIu64
               " samples), stack translation + tree %.3f s (%.0f%%), finalize %.3f s (%.0f%%)\n",
               scan.cpu_s, 100 * scan.cpu_s / m_cpu, (double)scanned / scan.cpu_s / 1e6, scanned,
               m.merge.cpu_s - scan.cpu_s, 100 * (m.merge.cpu_s - scan.cpu_s) / m_cpu,
               m.finalize.cpu_s, 100 * m.finalize.cpu_s / m_cpu);
    else /* blocks with rollups are not row-scanned: the scan is shown for comparison only */
        printf("  split (CPU):         merge through rollups (rollup rows + stack translation + "
               "tree) %.3f s (%.0f%%), finalize %.3f s (%.0f%%); a row scan of the same %" PRIu64
               " samples alone takes %.3f s (%.1f M samples/s)\n",
               m.merge.cpu_s, 100 * m.merge.cpu_s / m_cpu, m.finalize.cpu_s,
               100 * m.finalize.cpu_s / m_cpu, scanned, scan.cpu_s,
               (double)scanned / scan.cpu_s / 1e6);
    print_reader_memory(ix, tenant, start, end);

    /* 2. selective merge */
    agentgen_options go;
    agentgen_options_default(&go);
    go.n_processes = a.processes;
    go.seed = a.seed;
    agentgen *g = agentgen_new(&go, &err);
    label_set l0 = {0};
    if (g == NULL || agentgen_labels(g, 0, &l0, &err) != 0)
        die("agentgen", &err);
    char sel_text[512];
    snprintf(sel_text, sizeof sel_text, "%s{pod=\"%s\"}", (const char *)type_text.data,
             label_set_get(&l0, "pod"));
    selector one;
    if (selector_parse(sel_text, &one, &err) != 0)
        die("selector", &err);
    printf("\n== selective merge: %s ==\n", sel_text);
    merge_run s1 = bench_merge(e, tenant, &one, start, end, a.merge_runs, "merge one pod");
    printf("merge one pod (best):  CPU %.4f s, wall %.4f s for %" PRIu64 " samples (%.1f M "
           "samples/s per core); %.1fx less CPU than the full merge for 1/%zu of the series\n",
           s1.merge.cpu_s + s1.finalize.cpu_s, s1.merge.wall_s + s1.finalize.wall_s, s1.res.samples,
           (double)s1.res.samples / (s1.merge.cpu_s + s1.finalize.cpu_s) / 1e6,
           m_cpu / (s1.merge.cpu_s + s1.finalize.cpu_s), a.processes);
    label_set_free(&l0);
    agentgen_free(g);
    selector_free(&one);

    /* 3. range */
    printf("\n== range: a day of %d series, one profile per 10 s each, step 60 s ==\n",
           RANGE_SERIES);
    const char *by_pid[] = {"pid"};
    bench_range(e, &all, by_pid, 1, a.range_runs, "range sum_by pid");
    const char *by_node[] = {"node"};
    bench_range(e, &all, by_node, 1, a.range_runs, "range sum_by node");
    bench_range(e, &all, NULL, 0, a.range_runs, "range sum_by (none)");
    double rss_queries = peak_rss_mib();

    /* 4. peer */
    if (pprof_windows(&a) > 0) {
        uint64_t pw = pprof_windows(&a);
        printf("\n== peer: the first %g min (%" PRIu64 " profiles) merged by both ==\n",
               a.pprof_minutes, pw * a.processes);
        int64_t pend = T0_NS + (int64_t)pw * WINDOW_NS - 1;
        merge_run sm = bench_merge(e, tenant, &all, start, pend, a.merge_runs, "strata subset");
        char out_path[700];
        snprintf(out_path, sizeof out_path, "%s/merged.pb", a.dir);
        timed gt;
        double go_rss;
        int files = run_go_pprof(&a, out_path, &gt, &go_rss);
        if (files < 0) {
            printf("go tool pprof failed (is golang-go installed?)\n");
        } else {
            int64_t total = 0, period = 0;
            size_t merged_samples = 0;
            if (pprof_file_total(out_path, &total, &period, &merged_samples) != 0)
                printf("could not read %s\n", out_path);
            double sm_cpu = sm.merge.cpu_s + sm.finalize.cpu_s;
            double go_rate = (double)sm.res.samples / gt.cpu_s;
            printf("go tool pprof -proto:  %d files, CPU %.2f s, wall %.2f s, peak RSS %.0f MiB "
                   "-> %.1f k samples/s per core; merged profile %zu samples, total %" PRId64
                   " x period %" PRId64 " = %" PRId64 " ns\n",
                   files, gt.cpu_s, gt.wall_s, go_rss, go_rate / 1e3, merged_samples, total, period,
                   total * period);
            printf("strata subset (best):  CPU %.3f s, wall %.3f s -> %.1f M samples/s per core; "
                   "merged total %" PRId64 " ns (%s)\n",
                   sm_cpu, sm.merge.wall_s + sm.finalize.wall_s,
                   (double)sm.res.samples / sm_cpu / 1e6, sm.root_total,
                   sm.root_total == total * period ? "equal" : "DIFFERENT");
            printf("\n%-28s %16s %16s\n", "", "strata", "go tool pprof");
            printf("%-28s %16.3f %16.2f\n", "CPU s (same profiles)", sm_cpu, gt.cpu_s);
            printf("%-28s %16.1f %16.3f\n", "M samples/s per core",
                   (double)sm.res.samples / sm_cpu / 1e6, go_rate / 1e6);
            printf("%-28s %16.0f %16.0f\n", "peak RSS MiB", rss_queries, go_rss);
            printf("speed ratio (CPU): strata is %.0fx go tool pprof on the same %g min; the 1 h "
                   "merge rate is %.0fx pprof's rate\n",
                   gt.cpu_s / sm_cpu, a.pprof_minutes, ((double)m.res.samples / m_cpu) / go_rate);
        }
    }
    printf("\ntargets: merge >= 50 M samples/s per core and >= 20x pprof; range < 50 ms\n");
    printf("peak RSS of the query process: %.0f MiB\n", peak_rss_mib());

    query_engine_free(e);
    block_index_free(ix);
    bucket_close(store);
    selector_free(&all);
    strata_buffer_free(&type_text);
    if (temp_dir && !a.keep)
        remove_tree(a.dir);
    else
        printf("data kept in %s (pass --dir %s to reuse it)\n", a.dir, a.dir);
    return 0;
}
