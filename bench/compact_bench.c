/*
 * compact_bench.c - compaction of agent-like data: merge throughput, memory, and bytes per sample
 * before and after each level.
 *
 *   compact_bench [--minutes M] [--processes N] [--fanin F] [--seed S] [--memory-limit MiB]
 *                 [--zstd-level L] [--dir DIR]
 *
 * 1. Level 1, as ingesters write it: bench/agentgen's processes (default 100) each push one CPU
 *    profile every 10 s; an ingester flushing every second writes one block per second holding the
 *    ~N/10 profiles that arrived in it (data object, then meta.json) into a FILESYSTEM bucket
 *    (--dir, default a temporary directory removed at the end), for M minutes (default 10).
 * 2. Level 1 -> 2: block_merge of each F (default 60) consecutive level-1 blocks: one block per
 *    minute. Level 2 -> 3: block_merge of each F consecutive level-2 blocks (all of them for up to
 *    an hour of data).
 *
 * Each phase runs in its own child process, so its peak RSS (wait4's rusage) is its own. For each
 * level it prints: blocks, bytes per sample of all its objects (data objects plus meta.json, so
 * symbols and indexes included), and for each merge step: samples merged per CPU-second (the
 * child's CPU time, all bucket I/O and encoding included), wall time, peak RSS, the merger's own
 * peak memory estimate (what --memory-limit is checked against) and bytes read and written. Nothing
 * is asserted.
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
#include "block/block_merge.h"
#include "block/block_meta.h"
#include "block/block_writer.h"
#include "bucket/bucket.h"
#include "common/clock.h"

#define TENANT "bench"

typedef struct bench_args {
    double minutes;
    size_t processes;
    size_t fanin;
    uint64_t seed;
    size_t memory_limit_mib;
    int zstd_level;
    const char *dir;
} bench_args;

static void die(const char *what, const strata_error *err) {
    fprintf(stderr, "compact_bench: %s: %s\n", what, err != NULL ? err->message : "failed");
    exit(1);
}

static int parse_args(int argc, char **argv, bench_args *a) {
    a->minutes = 10;
    a->processes = 100;
    a->fanin = 60;
    a->seed = 42;
    a->memory_limit_mib = 4096;
    a->zstd_level = 3;
    a->dir = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--minutes") == 0)
            a->minutes = atof(argv[i + 1]);
        else if (strcmp(argv[i], "--processes") == 0)
            a->processes = (size_t)atol(argv[i + 1]);
        else if (strcmp(argv[i], "--fanin") == 0)
            a->fanin = (size_t)atol(argv[i + 1]);
        else if (strcmp(argv[i], "--seed") == 0)
            a->seed = (uint64_t)atoll(argv[i + 1]);
        else if (strcmp(argv[i], "--memory-limit") == 0)
            a->memory_limit_mib = (size_t)atol(argv[i + 1]);
        else if (strcmp(argv[i], "--zstd-level") == 0)
            a->zstd_level = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--dir") == 0)
            a->dir = argv[i + 1];
        else
            return -1;
    }
    return a->minutes > 0 && a->processes > 0 && a->fanin > 1 ? 0 : -1;
}

/* ---- phase 1: level-1 blocks -------------------------------------------------------------- */

static void write_level1(const bench_args *a, bucket *store) {
    uint64_t windows = (uint64_t)(a->minutes * 6.0 + 0.5);
    int64_t base_ns = strata_now_ns() - (int64_t)windows * 10 * STRATA_NS_PER_SEC;
    base_ns -= base_ns % (60 * STRATA_NS_PER_SEC);
    write_level1_blocks(store, TENANT, a->processes, a->seed, a->minutes, base_ns, 1);
}

/* ---- listing blocks ----------------------------------------------------------------------- */

typedef struct block_list {
    block_meta *metas;
    uint64_t *bytes; /* data object + meta.json */
    size_t n, cap;
    bucket *store;
} block_list;

static int collect_block(const char *key, void *ctx, strata_error *err) {
    block_list *l = ctx;
    size_t len = strlen(key);
    if (len == 0 || key[len - 1] != '/')
        return 0;
    char mkey[256];
    snprintf(mkey, sizeof mkey, "%s%s", key, BLOCK_META_FILE);
    strata_buffer json = STRATA_BUFFER_INIT;
    if (bucket_get(l->store, mkey, &json, err) != 0) {
        strata_buffer_free(&json);
        return err->code == STRATA_NOT_FOUND ? 0 : -1;
    }
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 256;
        l->metas = realloc(l->metas, l->cap * sizeof *l->metas);
        l->bytes = realloc(l->bytes, l->cap * sizeof *l->bytes);
        if (l->metas == NULL || l->bytes == NULL)
            die("realloc", NULL);
    }
    block_meta *m = &l->metas[l->n];
    block_meta_init(m);
    if (block_meta_decode((const char *)json.data, json.len, m, err) != 0)
        return -1;
    l->bytes[l->n] = json.len;
    for (size_t i = 0; i < m->n_files; i++)
        l->bytes[l->n] += m->files[i].size_bytes;
    l->n++;
    strata_buffer_free(&json);
    return 0;
}

static int compare_by_time(const void *a, const void *b) {
    const block_meta *x = a, *y = b;
    if (x->min_time_ms != y->min_time_ms)
        return x->min_time_ms < y->min_time_ms ? -1 : 1;
    return ulid_compare(&x->id, &y->id);
}

/* The blocks of one compaction level, sorted by time; bytes/samples summed. */
static void list_level(bucket *store, int level, block_list *out, uint64_t *bytes,
                       uint64_t *samples) {
    strata_error err;
    block_list all = {NULL, NULL, 0, 0, store};
    if (bucket_iterate(store, TENANT "/", false, collect_block, &all, &err) != 0)
        die("list", &err);
    memset(out, 0, sizeof *out);
    out->store = store;
    *bytes = *samples = 0;
    out->metas = calloc(all.n + 1, sizeof *out->metas);
    out->bytes = calloc(all.n + 1, sizeof *out->bytes);
    for (size_t i = 0; i < all.n; i++) {
        if (all.metas[i].compaction_level != level) {
            block_meta_free(&all.metas[i]);
            continue;
        }
        out->bytes[out->n] = all.bytes[i];
        out->metas[out->n++] = all.metas[i];
        *bytes += all.bytes[i];
        *samples += all.metas[i].num_samples;
    }
    qsort(out->metas, out->n, sizeof *out->metas, compare_by_time);
    free(all.metas);
    free(all.bytes);
}

static void free_list(block_list *l) {
    for (size_t i = 0; i < l->n; i++)
        block_meta_free(&l->metas[i]);
    free(l->metas);
    free(l->bytes);
}

/* ---- merging one level -------------------------------------------------------------------- */

typedef struct level_totals {
    uint64_t samples_in, samples_out, profiles_in, duplicates, bytes_read, bytes_written;
    size_t peak_estimate, merges;
} level_totals;

/* Merges each fanin consecutive blocks of `level` into one of level + 1 (in the calling child). */
static void merge_level(const bench_args *a, bucket *store, int level) {
    block_list l;
    uint64_t bytes, samples;
    list_level(store, level, &l, &bytes, &samples);
    block_merge_options mo;
    block_merge_options_default(&mo);
    mo.memory_limit = a->memory_limit_mib << 20;
    mo.zstd_level = a->zstd_level;
    level_totals t;
    memset(&t, 0, sizeof t);
    int64_t cpu0 = strata_process_cpu_ns(), wall0 = strata_monotonic_ns();
    for (size_t i = 0; i < l.n; i += a->fanin) {
        size_t n = l.n - i < a->fanin ? l.n - i : a->fanin;
        ulid *ids = calloc(n, sizeof *ids);
        if (ids == NULL)
            die("calloc", NULL);
        for (size_t k = 0; k < n; k++)
            ids[k] = l.metas[i + k].id;
        block_merge_result r;
        strata_error err;
        if (block_merge(store, TENANT, ids, n, &mo, &r, &err) != 0)
            die("block_merge", &err);
        t.samples_in += r.stats.samples_in;
        t.samples_out += r.stats.samples_out;
        t.profiles_in += r.stats.profiles_in;
        t.duplicates += r.stats.duplicates;
        t.bytes_read += r.stats.bytes_read;
        t.bytes_written += r.stats.bytes_written;
        if (r.stats.peak_memory_bytes > t.peak_estimate)
            t.peak_estimate = r.stats.peak_memory_bytes;
        t.merges++;
        block_merge_result_free(&r);
        free(ids);
    }
    double cpu = (double)(strata_process_cpu_ns() - cpu0) / 1e9;
    double wall = (double)(strata_monotonic_ns() - wall0) / 1e9;
    printf("merge level %d -> %d: %zu merges of up to %zu blocks, %" PRIu64 " samples in %.1f "
           "CPU-s (%.2f M samples/s per core), wall %.1f s\n",
           level, level + 1, t.merges, a->fanin, t.samples_in, cpu,
           (double)t.samples_in / cpu / 1e6, wall);
    printf("                     duplicates %" PRIu64 ", samples out %" PRIu64 ", read %.1f MiB, "
           "written %.1f MiB, merger peak estimate %.1f MiB\n",
           t.duplicates, t.samples_out, (double)t.bytes_read / 1048576.0,
           (double)t.bytes_written / 1048576.0, (double)t.peak_estimate / 1048576.0);
    free_list(&l);
}

static void report_level(bucket *store, int level) {
    block_list l;
    uint64_t bytes, samples;
    list_level(store, level, &l, &bytes, &samples);
    printf("level %d: %5zu blocks, %10" PRIu64 " samples, %8.2f MiB, %6.2f bytes/sample, "
           "%.1f KiB per block\n",
           level, l.n, samples, (double)bytes / 1048576.0,
           samples ? (double)bytes / (double)samples : 0.0,
           l.n ? (double)bytes / (double)l.n / 1024.0 : 0.0);
    free_list(&l);
}

/* Runs fn in a child process and prints its peak RSS and CPU. */
static void in_child(const char *what, void (*fn)(const bench_args *, bucket *, int),
                     const bench_args *a, const char *dir, int level) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        die("fork", NULL);
    if (pid == 0) {
        strata_error err;
        bucket *store;
        if (bucket_open_filesystem(dir, NULL, &store, &err) != 0)
            die("bucket", &err);
        fn(a, store, level);
        bucket_close(store);
        fflush(stdout);
        _exit(0);
    }
    int status;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        die(what, NULL);
    printf("%-20s peak RSS %.0f MiB, CPU %.1f s\n", what, (double)ru.ru_maxrss / 1024.0,
           (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
               (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6);
}

static void level1_child(const bench_args *a, bucket *store, int level) {
    (void)level;
    write_level1(a, store);
}

static int collect_higher(const char *key, void *ctx, strata_error *err) {
    bucket *store = ctx;
    size_t len = strlen(key);
    if (len == 0 || key[len - 1] != '/')
        return 0;
    char mkey[256];
    snprintf(mkey, sizeof mkey, "%s%s", key, BLOCK_META_FILE);
    strata_buffer json = STRATA_BUFFER_INIT;
    block_meta m;
    block_meta_init(&m);
    int rc = bucket_get(store, mkey, &json, err) == 0 &&
                     block_meta_decode((const char *)json.data, json.len, &m, err) == 0
                 ? 0
                 : -1;
    if (rc == 0 && m.compaction_level > 1) {
        char dkey[256];
        snprintf(dkey, sizeof dkey, "%s%s", key, BLOCK_DATA_FILE);
        rc = bucket_delete(store, mkey, err) == 0 && bucket_delete(store, dkey, err) == 0 ? 0 : -1;
    }
    block_meta_free(&m);
    strata_buffer_free(&json);
    return rc;
}

/* Deletes the merged blocks of an earlier run (meta.json first, as the delete rule says). */
static void remove_levels_above_1(bucket *store) {
    strata_error err;
    if (bucket_iterate(store, TENANT "/", false, collect_higher, store, &err) != 0)
        die("cleanup", &err);
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
        fprintf(stderr, "usage: compact_bench [--minutes M] [--processes N] [--fanin F] [--seed S] "
                        "[--memory-limit MiB] [--zstd-level L] [--dir DIR]\n");
        return 2;
    }
    char tmp[] = "/tmp/strata-compact-bench-XXXXXX";
    const char *dir = a.dir;
    if (dir == NULL) {
        if (mkdtemp(tmp) == NULL)
            die("mkdtemp", NULL);
        dir = tmp;
    }
    printf("agent-like data: %.1f min, %zu processes (one 2,000-stack CPU profile each per 10 s), "
           "fan-in %zu, merges at zstd level %d (level 1: 3), bucket %s\n",
           a.minutes, a.processes, a.fanin, a.zstd_level, dir);
    strata_error err;
    bucket *store;
    if (bucket_open_filesystem(dir, NULL, &store, &err) != 0)
        die("bucket", &err);
    block_list existing;
    uint64_t bytes, samples;
    list_level(store, 1, &existing, &bytes, &samples);
    if (existing.n == 0)
        in_child("write level 1:", level1_child, &a, dir, 1);
    else /* --dir with data from an earlier run: reuse level 1, redo the merges */
        remove_levels_above_1(store);
    free_list(&existing);
    report_level(store, 1);
    for (int level = 1; level <= 2; level++) {
        char what[32];
        snprintf(what, sizeof what, "merge %d -> %d:", level, level + 1);
        in_child(what, merge_level, &a, dir, level);
        report_level(store, level + 1);
    }
    bucket_close(store);
    if (a.dir == NULL)
        nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}
