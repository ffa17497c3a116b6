/*
 * compactor_bench.c - the compactor service end to end on agent-like data: compaction throughput,
 * peak RSS and bytes per sample before and after, per level.
 *
 *   compactor_bench [--minutes M] [--processes N] [--seed S] [--max-job-memory MiB] [--dir DIR]
 *                   [--block-seconds S]
 *
 * 1. A child process writes level-1 blocks as ingesters do: bench/agentgen's processes (default
 *    100) each push one CPU profile every 10 s, and an ingester flushing every second writes one
 *    block per second holding the ~N/10 profiles that arrived in it (data object, then meta.json),
 *    for M minutes (default 10) starting at a day boundary two days ago, into a FILESYSTEM
 *    bucket (--dir, default a temporary directory, removed at the end). --block-seconds S cuts
 *    a block every S seconds instead (300: the 5-minute blocks a first compaction makes, to
 *    reach a day of data, --minutes 1440, without 86,400 one-second blocks).
 * 2. This process runs compactor cycles (block ranges 5m, 2h, 24h; delete_delay long, so the
 *    sources stay to be measured) until a cycle runs no job: every 5-minute window becomes one
 *    level-2 block, then the 2-hour window one level-3 block. The whole service path is timed:
 *    listing, meta.json reads, planning, block_merge (reads by ranges, re-interning, encoding,
 *    upload), deletion marks and the bucket index.
 *
 * Printed (nothing asserted; figures go in the notes): per level, blocks, samples (block rows: one
 * per distinct stack per profile) and bytes per sample of all its objects (data objects plus
 * meta.json, so symbols and indexes included); compaction CPU seconds of this process and samples
 * merged per CPU-second (the samples of every merge's sources, so level-2 samples count again when
 * they merge into level 3), wall time, and this process's peak RSS (it generated nothing).
 */
#include <ftw.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agentgen.h"
#include "level1_blocks.h"
#include "block/block_format.h"
#include "block/block_meta.h"
#include "block/block_writer.h"
#include "bucket/bucket.h"
#include "common/clock.h"
#include "common/log.h"
#include "compactor.h"

#define TENANT "bench"

typedef struct bench_args {
    int minutes;
    int block_seconds;
    size_t processes;
    uint64_t seed;
    uint64_t max_job_memory;
    const char *dir;
} bench_args;

static void die(const char *what, const strata_error *err) {
    fprintf(stderr, "compactor_bench: %s: %s\n", what, err->message);
    exit(1);
}

static int parse_args(int argc, char **argv, bench_args *a) {
    *a = (bench_args){
        .minutes = 10, .block_seconds = 1, .processes = 100, .seed = 42, .max_job_memory = 1024};
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--minutes") == 0)
            a->minutes = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--processes") == 0)
            a->processes = (size_t)atol(argv[i + 1]);
        else if (strcmp(argv[i], "--seed") == 0)
            a->seed = (uint64_t)atoll(argv[i + 1]);
        else if (strcmp(argv[i], "--max-job-memory") == 0)
            a->max_job_memory = (uint64_t)atoll(argv[i + 1]);
        else if (strcmp(argv[i], "--dir") == 0)
            a->dir = argv[i + 1];
        else if (strcmp(argv[i], "--block-seconds") == 0)
            a->block_seconds = atoi(argv[i + 1]);
        else
            return -1;
    }
    return a->minutes > 0 && a->processes > 0 && a->block_seconds > 0 ? 0 : -1;
}

typedef struct level_totals {
    uint64_t blocks, samples, bytes;
} level_totals;

typedef struct scan_ctx {
    bucket *store;
    level_totals levels[8];
    bool include_marked;
} scan_ctx;

/* Sums, per level, the committed blocks' samples and object sizes (data object + meta.json). */
static int scan_key(const char *key, void *arg, strata_error *err) {
    scan_ctx *s = arg;
    size_t len = strlen(key), ml = strlen(BLOCK_META_FILE);
    if (len < ml || strcmp(key + len - ml, BLOCK_META_FILE) != 0)
        return 0;
    strata_buffer json = STRATA_BUFFER_INIT;
    block_meta meta;
    if (bucket_get(s->store, key, &json, err) != 0 ||
        block_meta_decode((const char *)json.data, json.len, &meta, err) != 0)
        return -1;
    int level = meta.compaction_level < 8 ? meta.compaction_level : 7;
    s->levels[level].blocks++;
    s->levels[level].samples += meta.num_samples;
    s->levels[level].bytes += json.len;
    for (size_t i = 0; i < meta.n_files; i++)
        s->levels[level].bytes += meta.files[i].size_bytes;
    block_meta_free(&meta);
    strata_buffer_free(&json);
    return 0;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

int main(int argc, char **argv) {
    bench_args a;
    if (parse_args(argc, argv, &a) != 0) {
        fprintf(stderr, "usage: compactor_bench [--minutes M] [--processes N] [--seed S] "
                        "[--max-job-memory MiB] [--dir DIR] [--block-seconds S]\n");
        return 2;
    }
    char tmp[] = "/tmp/strata-compactor-bench-XXXXXX";
    const char *dir = a.dir != NULL ? a.dir : mkdtemp(tmp);
    strata_error err;
    bucket *store;
    if (dir == NULL || bucket_open_filesystem(dir, NULL, &store, &err) != 0)
        die("bucket", &err);
    int64_t base_s = (strata_now_ns() / STRATA_NS_PER_SEC - 2 * 86400) / 86400 * 86400;

    int64_t gen0 = strata_monotonic_ns();
    pid_t child = fork();
    if (child == 0) {
        write_level1_blocks(store, TENANT, a.processes, a.seed, a.minutes,
                            base_s * STRATA_NS_PER_SEC, a.block_seconds);
        _exit(0);
    }
    int status;
    struct rusage child_usage;
    if (child < 0 || wait4(child, &status, 0, &child_usage) != child || status != 0) {
        fprintf(stderr, "compactor_bench: generating level 1 failed\n");
        return 1;
    }
    printf("level 1 written: %d minutes of %zu processes in %.1f s (child peak RSS %ld MiB)\n",
           a.minutes, a.processes, (double)(strata_monotonic_ns() - gen0) / 1e9,
           child_usage.ru_maxrss / 1024);

    char *ranges[] = {"5m", "2h", "24h"};
    compactor_config cfg = {.enabled = true,
                            .compaction_interval_ns = STRATA_NS_PER_SEC,
                            .block_ranges = {.items = ranges, .count = 3},
                            .consistency_delay_ns = 0,
                            .delete_delay_ns = 86400 * STRATA_NS_PER_SEC,
                            .max_job_memory = a.max_job_memory << 20,
                            .progress_interval_ns = 3600 * STRATA_NS_PER_SEC};
    strata_log_set_level(STRATA_LOG_WARN);
    compactor *c;
    if (compactor_new(&cfg, store, NULL, &c, &err) != 0)
        die("compactor", &err);
    int64_t cpu0 = strata_process_cpu_ns(), wall0 = strata_monotonic_ns();
    compactor_stats st;
    uint64_t jobs_before;
    do {
        compactor_get_stats(c, &st);
        jobs_before = st.jobs;
        if (compactor_run_once(c, &err) != 0)
            die("cycle", &err);
        compactor_get_stats(c, &st);
    } while (st.jobs != jobs_before);
    int64_t cpu = strata_process_cpu_ns() - cpu0, wall = strata_monotonic_ns() - wall0;

    scan_ctx s = {.store = store};
    if (bucket_iterate(store, TENANT, true, scan_key, &s, &err) != 0)
        die("scan", &err);
    uint64_t merged_samples = 0;
    for (int level = 1; level < 8; level++) {
        level_totals *l = &s.levels[level];
        if (l->blocks == 0)
            continue;
        printf("level %d: %6" PRIu64 " blocks %12" PRIu64 " samples %12" PRIu64
               " bytes %6.2f bytes/sample\n",
               level, l->blocks, l->samples, l->bytes, (double)l->bytes / (double)l->samples);
        if (level < 3)
            merged_samples += l->samples; /* sources of the level-2 and level-3 merges */
    }
    struct rusage self;
    getrusage(RUSAGE_SELF, &self);
    printf("compaction: %" PRIu64 " jobs (%" PRIu64 " blocks in, %" PRIu64 " out, %" PRIu64
           " failed), %.2f CPU s, %.2f wall s, %.2f M samples merged per CPU-second, peak RSS %ld "
           "MiB (max_job_memory %" PRIu64 " MiB)\n",
           st.jobs, st.blocks_in, st.blocks_out, st.jobs_failed, (double)cpu / 1e9,
           (double)wall / 1e9, (double)merged_samples / ((double)cpu / 1e9) / 1e6,
           self.ru_maxrss / 1024, a.max_job_memory);
    compactor_free(c);
    bucket_close(store);
    if (a.dir == NULL)
        nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}
