/*
 * push_load.c - a WriteRaw load generator for multi-process benchmarks (bench/cluster_bench.py).
 *
 * It builds agent-like requests before the clock starts (bench/agentgen: one request per 10 s
 * window holding --processes processes' gzipped CPU profiles, as one node's agent sends them),
 * or, with --pprof FILE:TYPE (repeatable), requests of --series series each cut from those
 * files as a scraper batches a fleet's profiles (--targets instances; bench/testdata holds real Go
 * profiles; with --once, --windows windows of --targets processes each, the files taken in turn
 * and re-stamped window by window, in requests of --per-request: build_file_requests_split), then
 * --threads threads send them round-robin over the --address list for --seconds, each call waiting
 * for its acknowledgement (the ingester acknowledges once the block holding the write is durable in
 * the bucket). The load generator does little work per request (the bytes are ready), so the
 * figures are the ingesters'.
 *
 *   build/bench/push_load --address HOST:PORT [--address ...] [--seconds N] [--threads N]
 *                         [--windows N] [--processes N] [--per-request N] [--dump-dir DIR]
 *                         [--start-unix S] [--once [--windows-per-second R]]
 *                         [--pprof FILE:TYPE ... [--targets N] [--series N]]
 *
 * --per-request N splits each window's processes into requests of at most N profiles;
 * --dump-dir DIR also writes every agent profile there as a gzipped pprof file (for a peer such
 * as `go tool pprof` to read the same data); --start-unix S puts window w at S + 10 w seconds
 * (default 0: the first window at time 0, which an ingester stamps with its clock); --once sends
 * each request exactly once, in time order, and stops (data for query benchmarks) instead of
 * cycling for --seconds, at most R windows per second with --windows-per-second (0.1 is real time;
 * the ingester cuts a block per flush, so the pace sets how many fresh blocks the data lands in).
 *
 * Prints one line of key=value pairs: requests, profiles, samples acknowledged (pprof samples,
 * DESIGN.md's unit; stored_samples counts one per sample type), errors, seconds.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "requests.h"
#include "rpc/rpc.h"

#define MAX_ADDRESSES 16
#define MAX_THREADS 64
#define MAX_FILES 16
#define WRITE_RAW "/parca.profilestore.v1alpha1.ProfileStoreService/WriteRaw"

typedef struct load {
    rpc_channel *channels[MAX_ADDRESSES];
    size_t n_channels;
    request_set set;
    uint64_t samples_per_request;        /* pprof samples */
    uint64_t stored_samples_per_request; /* one per sample type */
    int64_t deadline_ns;
    bool once;                  /* send each request exactly once, then stop */
    double requests_per_second; /* --once: request i is not sent before start + i / rate */
    int64_t start_ns;
    atomic_uint_fast64_t next;
    atomic_uint_fast64_t requests, errors;
} load;

static void *sender(void *arg) {
    load *l = arg;
    strata_buffer response = STRATA_BUFFER_INIT;
    while (strata_monotonic_ns() < l->deadline_ns) {
        uint64_t i = atomic_fetch_add(&l->next, 1);
        if (l->once && i >= l->set.n)
            break;
        if (l->requests_per_second > 0) {
            int64_t due = l->start_ns + (int64_t)((double)i / l->requests_per_second * 1e9);
            int64_t now = strata_monotonic_ns();
            if (due > now) {
                struct timespec ts = {(time_t)((due - now) / 1000000000),
                                      (long)((due - now) % 1000000000)};
                nanosleep(&ts, NULL);
            }
        }
        const strata_buffer *req = &l->set.requests[i % l->set.n];
        strata_error err;
        if (rpc_call_unary(l->channels[i % l->n_channels], WRITE_RAW, req->data, req->len, NULL, 0,
                           30 * STRATA_NS_PER_SEC, &response, &err) != 0) {
            atomic_fetch_add(&l->errors, 1);
            continue;
        }
        atomic_fetch_add(&l->requests, 1);
    }
    strata_buffer_free(&response);
    return NULL;
}

int main(int argc, char **argv) {
    load l;
    memset(&l, 0, sizeof l);
    const char *addresses[MAX_ADDRESSES];
    pprof_file files[MAX_FILES];
    char *file_args[MAX_FILES];
    size_t n_addresses = 0, windows = 30, processes = 10, threads = 4, n_files = 0;
    size_t targets = 100, series = 50, per_request = 0;
    const char *dump_dir = NULL;
    int64_t start_unix = 0;
    double windows_per_second = 0;
    double seconds = 20;
    for (int i = 1; i < argc; i += 2) {
        if (strcmp(argv[i], "--once") == 0) {
            l.once = true;
            i--; /* a flag without a value */
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "push_load: %s needs a value\n", argv[i]);
            return 2;
        }
        if (strcmp(argv[i], "--address") == 0 && n_addresses < MAX_ADDRESSES)
            addresses[n_addresses++] = argv[i + 1];
        else if (strcmp(argv[i], "--seconds") == 0)
            seconds = atof(argv[i + 1]);
        else if (strcmp(argv[i], "--threads") == 0)
            threads = (size_t)atol(argv[i + 1]);
        else if (strcmp(argv[i], "--windows") == 0)
            windows = (size_t)atol(argv[i + 1]);
        else if (strcmp(argv[i], "--processes") == 0)
            processes = (size_t)atol(argv[i + 1]);
        else if (strcmp(argv[i], "--pprof") == 0 && n_files < MAX_FILES &&
                 strchr(argv[i + 1], ':') != NULL) {
            file_args[n_files] = strdup(argv[i + 1]);
            if (file_args[n_files] == NULL)
                die("out of memory", NULL);
            char *colon = strrchr(file_args[n_files], ':');
            *colon = '\0';
            files[n_files] = (pprof_file){file_args[n_files], colon + 1};
            n_files++;
        } else if (strcmp(argv[i], "--targets") == 0)
            targets = (size_t)atol(argv[i + 1]);
        else if (strcmp(argv[i], "--series") == 0)
            series = (size_t)atol(argv[i + 1]);
        else if (strcmp(argv[i], "--per-request") == 0)
            per_request = (size_t)atol(argv[i + 1]);
        else if (strcmp(argv[i], "--dump-dir") == 0)
            dump_dir = argv[i + 1];
        else if (strcmp(argv[i], "--start-unix") == 0)
            start_unix = atoll(argv[i + 1]);
        else if (strcmp(argv[i], "--windows-per-second") == 0)
            windows_per_second = atof(argv[i + 1]);
        else {
            fprintf(stderr, "push_load: unknown argument %s\n", argv[i]);
            return 2;
        }
    }
    if (n_addresses == 0 || threads == 0 || threads > MAX_THREADS || windows == 0 || targets == 0 ||
        series == 0) {
        fprintf(stderr, "usage: push_load --address HOST:PORT [--address ...] [--seconds N] "
                        "[--threads 1-64] [--windows N] [--processes N] "
                        "[--per-request N] [--dump-dir DIR] [--start-unix S] [--once] "
                        "[--windows-per-second R] "
                        "[--pprof FILE:TYPE ... [--targets N] [--series N]]\n");
        return 2;
    }
    if (n_files > 0 && l.once) {
        build_file_requests_split(files, n_files, windows, targets, per_request,
                                  start_unix * INT64_C(1000000000), dump_dir, &l.set);
        processes = targets;
    } else if (n_files > 0) {
        build_file_requests(files, n_files, targets, series, windows, &l.set);
        processes = series; /* profiles per request */
        per_request = series;
    } else {
        build_agent_requests_split(windows, processes, per_request,
                                   start_unix * INT64_C(1000000000), dump_dir, &l.set);
    }
    /* profiles in all the requests, and per request (the last of a window's may be shorter) */
    bool windowed = n_files == 0 || l.once; /* requests come window by window */
    uint64_t total_profiles = windowed ? (uint64_t)windows * processes : (uint64_t)l.set.n * series;
    if (windowed && (per_request == 0 || per_request > processes))
        per_request = processes;
    l.requests_per_second =
        windows_per_second * (double)(windowed ? (processes + per_request - 1) / per_request : 1);
    l.samples_per_request = l.set.pprof_samples / l.set.n;
    l.stored_samples_per_request = l.set.samples / l.set.n;
    strata_error err;
    for (size_t i = 0; i < n_addresses; i++)
        if ((l.channels[l.n_channels++] = rpc_channel_new(addresses[i], NULL, &err)) == NULL)
            die("channel", &err);
    pthread_t tids[MAX_THREADS];
    int64_t start = strata_monotonic_ns();
    l.deadline_ns = l.once ? INT64_MAX : start + (int64_t)(seconds * 1e9);
    l.start_ns = start;
    for (size_t t = 0; t < threads; t++)
        if (pthread_create(&tids[t], NULL, sender, &l) != 0)
            die("pthread_create", NULL);
    for (size_t t = 0; t < threads; t++)
        pthread_join(tids[t], NULL);
    double wall = (double)(strata_monotonic_ns() - start) / 1e9;
    uint64_t requests = atomic_load(&l.requests);
    printf("requests=%" PRIu64 " profiles=%" PRIu64 " samples=%" PRIu64 " stored_samples=%" PRIu64
           " errors=%" PRIu64 " seconds=%.2f\n",
           requests, l.once && requests == l.set.n ? total_profiles : requests * per_request,
           requests * l.samples_per_request, requests * l.stored_samples_per_request,
           (uint64_t)atomic_load(&l.errors), wall);
    for (size_t i = 0; i < l.n_channels; i++)
        rpc_channel_free(l.channels[i]);
    free_set(&l.set);
    for (size_t i = 0; i < n_files; i++)
        free(file_args[i]);
    return 0;
}
