/*
 * limits_bench.c - what the per-tenant limits cost on the write path, and what their series
 * tables hold.
 *
 * What it measures: the ingester's admission of a parsed WriteRaw request (write_limits.h:
 * ingest_request_admit: hashing each series' labels and profile type, then lib/limits' rate
 * bucket and active-series probes under the tenant's lock), the step handle_write_raw adds
 * between parsing a request and handing it to the batcher. Requests are built and parsed before
 * the clock starts; each configuration admits every request `--passes` times (the series are
 * all known after the first pass, as an agent's are from one push to the next; the limits are
 * set so that nothing is refused). CPU time is the whole process's, so the figure is per core.
 * ingest_bench gives the rest of the path (parse to durable block) per pprof sample; the ratio
 * of the two is the share the limits add.
 *
 * Datasets, as ingest_bench's: agent-like requests (bench/agentgen: one request per 10 s window
 * holding --processes processes' CPU profiles, 2 sample types, so 2 series per process) and the
 * real Go CPU profile (lib/pprof/testdata, 3 pprof samples, one series of 50) where the
 * per-request cost shows most.
 *
 * Memory: one tenant is given --series distinct series (max_active_series above it) and the
 * resident set's growth per series is printed.
 *
 *   build/bench/limits_bench [--windows N] [--processes N] [--passes N] [--threads N]
 *                            [--series N]
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/hash.h"
#include "limits/limits.h"
#include "requests.h"
#include "write_limits.h"
#include "write_raw.h"

typedef struct parsed_set {
    ingest_request *reqs;
    size_t n;
    uint64_t pprof_samples;
    uint64_t series; /* profiles: one series each */
} parsed_set;

static void parse_all(const request_set *set, parsed_set *out) {
    ingest_limits il;
    ingest_limits_default(&il);
    out->reqs = calloc(set->n, sizeof *out->reqs);
    if (out->reqs == NULL)
        die("out of memory", NULL);
    out->n = set->n;
    for (size_t i = 0; i < set->n; i++) {
        strata_error err;
        ingest_reject_reason reason;
        if (ingest_request_parse(set->requests[i].data, set->requests[i].len, &il, 0, &out->reqs[i],
                                 &reason, &err) != 0)
            die("parse", &err);
        out->pprof_samples += out->reqs[i].n_pprof_samples;
        out->series += out->reqs[i].n_profiles;
    }
}

static void free_parsed(parsed_set *p) {
    for (size_t i = 0; i < p->n; i++)
        ingest_request_free(&p->reqs[i]);
    free(p->reqs);
}

static void build_go(size_t copies, request_set *set) {
    const char *src = getenv("STRATA_SOURCE_DIR") ? getenv("STRATA_SOURCE_DIR") : ".";
    char path[4096];
    snprintf(path, sizeof path, "%s/lib/pprof/testdata/go_cpu.pb.gz", src);
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        die("cannot open lib/pprof/testdata/go_cpu.pb.gz (set STRATA_SOURCE_DIR)", NULL);
    strata_buffer raw = STRATA_BUFFER_INIT;
    uint8_t chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        if (strata_buffer_append(&raw, chunk, n) != 0)
            die("out of memory", NULL);
    fclose(f);
    if ((set->requests = calloc(copies, sizeof *set->requests)) == NULL)
        die("out of memory", NULL);
    for (size_t i = 0; i < copies; i++) {
        strata_error err;
        label_set labels = LABEL_SET_INIT;
        char instance[32];
        snprintf(instance, sizeof instance, "go-%zu", i % 50);
        if (label_set_add(&labels, "instance", 8, instance, strlen(instance), &err) != 0)
            die("labels", &err);
        encode_request(&labels, "process_cpu", &raw, 1, &set->requests[i]);
        label_set_free(&labels);
    }
    set->n = copies;
    strata_buffer_free(&raw);
}

typedef struct job {
    limits_enforcer *l;
    const parsed_set *set;
    size_t first, step; /* requests first, first + step, ... */
    size_t passes;
    char tenant[32];
} job;

static void *run_job(void *arg) {
    job *j = arg;
    for (size_t p = 0; p < j->passes; p++)
        for (size_t i = j->first; i < j->set->n; i += j->step) {
            limits_reason reason;
            strata_error err;
            if (ingest_request_admit(j->l, j->tenant, &j->set->reqs[i], strata_monotonic_ns(),
                                     &reason, &err) != 0)
                die("refused", &err);
        }
    return NULL;
}

/* Admits every request `passes` times on `threads` threads (each its own share of the requests),
 * for one tenant or one per thread; prints ns per request and per pprof sample. */
static void measure(const char *dataset, const char *what, const limits_values *v,
                    const parsed_set *set, size_t passes, size_t threads, bool one_tenant) {
    limits_enforcer *l;
    strata_error err;
    if (limits_new(v, NULL, &l, &err) != 0)
        die("limits", &err);
    job jobs[64];
    pthread_t th[64];
    for (size_t t = 0; t < threads; t++) {
        jobs[t] = (job){.l = l, .set = set, .first = t, .step = threads, .passes = 1};
        snprintf(jobs[t].tenant, sizeof jobs[t].tenant, one_tenant ? "bench" : "bench-%zu", t);
        run_job(&jobs[t]); /* warm: the series become known */
        jobs[t].passes = passes;
    }
    int64_t cpu0 = strata_process_cpu_ns(), wall0 = strata_monotonic_ns();
    for (size_t t = 0; t < threads; t++)
        if (pthread_create(&th[t], NULL, run_job, &jobs[t]) != 0)
            die("pthread_create", NULL);
    for (size_t t = 0; t < threads; t++)
        pthread_join(th[t], NULL);
    double cpu_ns = (double)(strata_process_cpu_ns() - cpu0);
    double wall_ns = (double)(strata_monotonic_ns() - wall0);
    double reqs = (double)set->n * (double)passes;
    double samples = (double)set->pprof_samples * (double)passes;
    double series = (double)set->series * (double)passes;
    printf("%-14s %-22s %zu thread%s %-11s %9.0f ns/request %7.2f ns/pprof sample %6.1f "
           "ns/series (wall %.2fs)\n",
           dataset, what, threads, threads == 1 ? " " : "s",
           threads == 1 ? "" : (one_tenant ? "one tenant" : "a tenant each"), cpu_ns / reqs,
           cpu_ns / samples, cpu_ns / series, wall_ns / 1e9);
    limits_free(l);
}

static long rss_kib(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, resident = 0;
    if (f == NULL)
        return 0;
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
        resident = 0;
    fclose(f);
    return resident * 4;
}

static void measure_memory(uint64_t n) {
    limits_values v = {.max_active_series = n, .active_series_window_ns = 600 * STRATA_NS_PER_SEC};
    limits_enforcer *l;
    strata_error err;
    if (limits_new(&v, NULL, &l, &err) != 0)
        die("limits", &err);
    long before = rss_kib();
    int64_t cpu0 = strata_process_cpu_ns();
    uint64_t batch[256];
    for (uint64_t i = 0; i < n; i += 256) {
        size_t k = 0;
        for (; k < 256 && i + k < n; k++)
            batch[k] = strata_hash_u64(i + k + 1);
        limits_reason reason;
        if (limits_admit(l, "memory", 1, 0, batch, k, &reason, &err) != 0)
            die("refused", &err);
    }
    double cpu_s = (double)(strata_process_cpu_ns() - cpu0) / 1e9;
    long after = rss_kib();
    limits_stats st;
    limits_get_stats(l, &st);
    printf("memory: %" PRIu64 " active series in one tenant: %.1f MiB held (%.1f bytes per "
           "series), resident +%.1f MiB; added at %.0f ns per new series\n",
           st.series, (double)st.bytes / 1048576.0, (double)st.bytes / (double)st.series,
           (double)(after - before) / 1024.0, cpu_s * 1e9 / (double)n);
    limits_free(l);
}

int main(int argc, char **argv) {
    size_t windows = 6, processes = 100, passes = 2000, threads = 2;
    uint64_t series = 1000000;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--windows") == 0)
            windows = (size_t)atol(argv[i + 1]);
        else if (strcmp(argv[i], "--processes") == 0)
            processes = (size_t)atol(argv[i + 1]);
        else if (strcmp(argv[i], "--passes") == 0)
            passes = (size_t)atol(argv[i + 1]);
        else if (strcmp(argv[i], "--threads") == 0)
            threads = (size_t)atol(argv[i + 1]);
        else if (strcmp(argv[i], "--series") == 0)
            series = (uint64_t)atoll(argv[i + 1]);
    }
    if (threads < 1 || threads > 64)
        die("--threads must be 1-64", NULL);
    measure_memory(series); /* first, so the resident set's growth is the table's */
    request_set agent_raw = {0}, go_raw = {0};
    build_agent_requests(windows, processes, &agent_raw);
    build_go(500, &go_raw);
    parsed_set agent = {0}, go = {0};
    parse_all(&agent_raw, &agent);
    parse_all(&go_raw, &go);
    free_set(&agent_raw);
    free_set(&go_raw);
    printf("admission of parsed WriteRaw requests (ingest_request_admit), CPU of all threads\n");
    printf("agent-like: %zu requests, %.0f pprof samples and %.0f series each; Go: %zu requests, "
           "%.0f pprof samples and %.0f series each\n",
           agent.n, (double)agent.pprof_samples / (double)agent.n,
           (double)agent.series / (double)agent.n, go.n, (double)go.pprof_samples / (double)go.n,
           (double)go.series / (double)go.n);
    const int64_t window = 600 * STRATA_NS_PER_SEC;
    limits_values none = {.active_series_window_ns = window};
    limits_values rate = {.ingestion_rate_samples = UINT64_C(1000000000000),
                          .active_series_window_ns = window};
    limits_values both = rate;
    both.max_active_series = 100000000;
    struct {
        const char *name;
        const parsed_set *set;
        size_t passes;
    } sets[] = {{"agent-like", &agent, passes}, {"Go", &go, passes}};
    for (size_t s = 0; s < 2; s++) {
        measure(sets[s].name, "no limits configured", &none, sets[s].set, sets[s].passes, 1, true);
        measure(sets[s].name, "rate", &rate, sets[s].set, sets[s].passes, 1, true);
        measure(sets[s].name, "rate + active series", &both, sets[s].set, sets[s].passes, 1, true);
        if (threads > 1) {
            measure(sets[s].name, "rate + active series", &both, sets[s].set, sets[s].passes,
                    threads, true);
            measure(sets[s].name, "rate + active series", &both, sets[s].set, sets[s].passes,
                    threads, false);
        }
    }
    free_parsed(&agent);
    free_parsed(&go);
    return 0;
}
