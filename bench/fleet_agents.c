/*
 * fleet_agents - simulated agents for bench/fleet_bench.py: N agents, each pushing its own
 * agent-like CPU profile through WriteRaw, paced as agents push (one per agent every interval,
 * spread evenly over it) or in a closed loop (C pushers, each pushing again as soon as its last
 * push is acknowledged), recording every call's acknowledgement latency.
 *
 *   fleet_agents --address HOST:PORT [--address ...] [--mode paced|closed] [--agents 500]
 *                [--windows 3] [--interval-ms 10000] [--concurrency 10] [--seconds 60]
 *                [--log FILE] [--tenant T] [--gen-threads 2]
 *
 * Profiles. bench/agentgen's processes 0..N-1 are the agents: each pushes one series, the
 * process's labels with node="agent-<i>" (so every agent is its own series and node), and
 * agentgen's 10 s CPU profile of 2,000 distinct stacks (10-60 frames deep), as the eBPF agent
 * pushes it (samples/count and cpu/nanoseconds, delta, gzipped). Building a profile costs
 * milliseconds, far more than pushing it, so --windows windows per agent are built and gzipped
 * before any push (on --gen-threads threads) and cycled: push k of an agent sends window k mod W.
 * Each push is stamped with its own time (fleet_common.h: a gzip member holding time_nanos = the
 * push's wall time goes in front of the prebuilt profile), so the stored profile's time is the
 * push time and two pushes of one window are distinct profiles. "ready" is printed once the
 * profiles are built, before the first push, so the caller can leave generation out of the load
 * generator's CPU.
 *
 * Paced (the agents scenario): one thread and one gRPC channel (so one connection) per agent, as
 * N agents on N nodes would have. Agent i pushes at start + i * interval / N + k * interval. A call
 * is waited for (rpc_call_unary, 60 s deadline); a push whose slot came while the agent's last call
 * was still waiting goes at once and counts as late. Closed (the acknowledgement-latency phase):
 * C threads, each with its own channel, each pushing agents in turn (thread t: agents t, t + C,
 * ...), the next push as soon as the last is acknowledged, as bench/push_load does.
 *
 * Output: at the end one line of key=value pairs (pushes, errors, late, pprof samples and bytes
 * sent, ack latency p50/p99/max in ms, seconds), and with --log one line per call:
 * "AGENT TIME_NS LATENCY_NS CODE" (CODE 0 = OK, else the gRPC status).
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agentgen.h"
#include "common/clock.h"
#include "fleet_common.h"
#include "requests.h"
#include "rpc/rpc.h"

#define MAX_ADDRESSES 16
#define WRITE_RAW "/parca.profilestore.v1alpha1.ProfileStoreService/WriteRaw"
#define CALL_TIMEOUT_NS (60 * STRATA_NS_PER_SEC)

typedef struct agent_data {
    label_set labels;
    strata_buffer *windows; /* gzipped pprof without time_nanos, one per window */
} agent_data;

typedef struct record {
    uint32_t agent;
    int32_t code;
    int64_t time_ns, latency_ns;
} record;

typedef struct worker worker;

typedef struct fleet {
    const char *addresses[MAX_ADDRESSES];
    size_t n_addresses;
    const char *tenant;
    size_t n_agents, n_windows, concurrency, gen_threads;
    int64_t interval_ns, start_ns, deadline_ns;
    agent_data *agents;
    uint64_t samples_per_window_total; /* pprof samples over all agents and windows */
    uint64_t *samples;                 /* pprof samples of agent a's window w: [a * W + w] */
    worker *workers;
    atomic_uint_fast64_t gen_next;
} fleet;

struct worker {
    fleet *f;
    size_t index;
    rpc_channel *channel;
    record *records;
    size_t n_records, cap_records;
    uint64_t late, samples, bytes;
};

/* ---- generation -------------------------------------------------------------------------- */

static void agent_labels(agentgen *g, size_t a, label_set *out) {
    strata_error err;
    label_set raw = LABEL_SET_INIT;
    if (agentgen_labels(g, a, &raw, &err) != 0)
        die("labels", &err);
    char node[32];
    snprintf(node, sizeof node, "agent-%zu", a);
    for (size_t i = 0; i < raw.count; i++) {
        const char *name = raw.labels[i].name, *value = raw.labels[i].value;
        if (strcmp(name, "node") == 0)
            value = node;
        if (label_set_add(out, name, strlen(name), value, strlen(value), &err) != 0)
            die("labels", &err);
    }
    label_set_free(&raw);
}

static void *generate(void *arg) {
    fleet *f = arg;
    strata_error err;
    agentgen_options o;
    agentgen_options_default(&o);
    o.n_processes = f->n_agents;
    agentgen *g = agentgen_new(&o, &err);
    if (g == NULL)
        die("agentgen", &err);
    for (;;) {
        size_t a = (size_t)atomic_fetch_add(&f->gen_next, 1);
        if (a >= f->n_agents)
            break;
        agent_data *ad = &f->agents[a];
        agent_labels(g, a, &ad->labels);
        ad->windows = calloc(f->n_windows, sizeof *ad->windows);
        if (ad->windows == NULL)
            die("out of memory", NULL);
        for (size_t w = 0; w < f->n_windows; w++) {
            pprof_profile p;
            if (agentgen_profile(g, a, w, &p, &err) != 0)
                die("profile", &err);
            p.time_nanos = 0; /* set per push by the time member */
            f->samples[a * f->n_windows + w] = count_pprof_samples(&p);
            if (pprof_encode(&p, true, &ad->windows[w], &err) != 0)
                die("encode", &err);
            pprof_profile_free(&p);
        }
    }
    agentgen_free(g);
    return NULL;
}

/* ---- pushing ----------------------------------------------------------------------------- */

static void add_record(worker *w, const record *r) {
    if (w->n_records == w->cap_records) {
        size_t cap = w->cap_records ? 2 * w->cap_records : 64;
        record *rs = realloc(w->records, cap * sizeof *rs);
        if (rs == NULL)
            die("out of memory", NULL);
        w->records = rs;
        w->cap_records = cap;
    }
    w->records[w->n_records++] = *r;
}

/* One push of agent a's window k mod W, stamped now; records it. */
static void push_once(worker *w, size_t a, uint64_t k, strata_buffer *pprof, strata_buffer *req,
                      strata_buffer *resp) {
    fleet *f = w->f;
    const agent_data *ad = &f->agents[a];
    const strata_buffer *base = &ad->windows[k % f->n_windows];
    int64_t time_ns = strata_now_ns();
    uint8_t member[FLEET_TIME_MEMBER_MAX];
    size_t n = fleet_time_member(time_ns, member);
    strata_buffer_reset(pprof);
    strata_buffer_reset(req);
    if (strata_buffer_append(pprof, member, n) != 0 ||
        strata_buffer_append(pprof, base->data, base->len) != 0)
        die("out of memory", NULL);
    label_set labels = ad->labels; /* encode_request only reads it */
    profile_type t = agentgen_profile_type();
    encode_request(&labels, t.name, pprof, 1, req);
    rpc_metadata md = {"x-scope-orgid", f->tenant, f->tenant != NULL ? strlen(f->tenant) : 0};
    strata_error err;
    int64_t t0 = strata_monotonic_ns();
    int rc = rpc_call_unary(w->channel, WRITE_RAW, req->data, req->len, &md,
                            f->tenant != NULL ? 1 : 0, CALL_TIMEOUT_NS, resp, &err);
    int64_t latency = strata_monotonic_ns() - t0;
    record r = {(uint32_t)a, rc == 0 ? 0 : (int32_t)err.code, time_ns, latency};
    add_record(w, &r);
    if (rc == 0) {
        w->samples += f->samples[a * f->n_windows + k % f->n_windows];
        w->bytes += pprof->len;
    }
}

static void sleep_until_mono(int64_t when_ns) {
    for (;;) {
        int64_t left = when_ns - strata_monotonic_ns();
        if (left <= 0)
            return;
        struct timespec ts = {(time_t)(left / STRATA_NS_PER_SEC), (long)(left % STRATA_NS_PER_SEC)};
        nanosleep(&ts, NULL);
    }
}

/* Paced: worker i is agent i. */
static void *paced_agent(void *arg) {
    worker *w = arg;
    fleet *f = w->f;
    strata_buffer pprof = STRATA_BUFFER_INIT, req = STRATA_BUFFER_INIT, resp = STRATA_BUFFER_INIT;
    int64_t offset = (int64_t)((double)f->interval_ns * (double)w->index / (double)f->n_agents);
    for (uint64_t k = 0;; k++) {
        int64_t due = f->start_ns + offset + (int64_t)k * f->interval_ns;
        if (due >= f->deadline_ns)
            break;
        if (strata_monotonic_ns() > due + 50 * STRATA_NS_PER_MS)
            w->late++;
        sleep_until_mono(due);
        push_once(w, w->index, k, &pprof, &req, &resp);
    }
    strata_buffer_free(&pprof);
    strata_buffer_free(&req);
    strata_buffer_free(&resp);
    return NULL;
}

/* Closed loop: worker t pushes agents t, t + C, ... in turn. */
static void *closed_pusher(void *arg) {
    worker *w = arg;
    fleet *f = w->f;
    strata_buffer pprof = STRATA_BUFFER_INIT, req = STRATA_BUFFER_INIT, resp = STRATA_BUFFER_INIT;
    for (uint64_t k = 0; strata_monotonic_ns() < f->deadline_ns; k++) {
        size_t a = (w->index + k * f->concurrency) % f->n_agents;
        push_once(w, a, k, &pprof, &req, &resp);
    }
    strata_buffer_free(&pprof);
    strata_buffer_free(&req);
    strata_buffer_free(&resp);
    return NULL;
}

static int compare_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static double percentile_ms(const int64_t *sorted, size_t n, double q) {
    if (n == 0)
        return 0;
    size_t i = (size_t)(q * (double)(n - 1) + 0.5);
    return (double)sorted[i] / 1e6;
}

int main(int argc, char **argv) {
    static fleet f;
    const char *mode = "paced", *log_path = NULL;
    double seconds = 60;
    f.n_agents = 500;
    f.n_windows = 3;
    f.concurrency = 10;
    f.gen_threads = 2;
    f.interval_ns = 10 * STRATA_NS_PER_SEC;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        if (strcmp(k, "--address") == 0 && f.n_addresses < MAX_ADDRESSES)
            f.addresses[f.n_addresses++] = v;
        else if (strcmp(k, "--mode") == 0)
            mode = v;
        else if (strcmp(k, "--agents") == 0)
            f.n_agents = (size_t)atol(v);
        else if (strcmp(k, "--windows") == 0)
            f.n_windows = (size_t)atol(v);
        else if (strcmp(k, "--interval-ms") == 0)
            f.interval_ns = atol(v) * STRATA_NS_PER_MS;
        else if (strcmp(k, "--concurrency") == 0)
            f.concurrency = (size_t)atol(v);
        else if (strcmp(k, "--seconds") == 0)
            seconds = atof(v);
        else if (strcmp(k, "--log") == 0)
            log_path = v;
        else if (strcmp(k, "--tenant") == 0)
            f.tenant = v;
        else if (strcmp(k, "--gen-threads") == 0)
            f.gen_threads = (size_t)atol(v);
        else {
            fprintf(stderr, "fleet_agents: unknown argument %s\n", k);
            return 2;
        }
    }
    bool paced = strcmp(mode, "paced") == 0;
    if (f.n_addresses == 0 || f.n_agents == 0 || f.n_windows == 0 || f.interval_ns <= 0 ||
        f.gen_threads == 0 || f.gen_threads > 64 || (!paced && strcmp(mode, "closed") != 0) ||
        (!paced && (f.concurrency == 0 || f.concurrency > 4096))) {
        fprintf(stderr, "usage: fleet_agents --address HOST:PORT [--address ...] "
                        "[--mode paced|closed] [--agents N] [--windows W] [--interval-ms MS] "
                        "[--concurrency C] [--seconds S] [--log FILE] [--tenant T]\n");
        return 2;
    }

    f.agents = calloc(f.n_agents, sizeof *f.agents);
    f.samples = calloc(f.n_agents * f.n_windows, sizeof *f.samples);
    if (f.agents == NULL || f.samples == NULL)
        die("out of memory", NULL);
    int64_t gen0 = strata_monotonic_ns();
    pthread_t gen[64];
    for (size_t t = 0; t < f.gen_threads; t++)
        if (pthread_create(&gen[t], NULL, generate, &f) != 0)
            die("pthread_create", NULL);
    for (size_t t = 0; t < f.gen_threads; t++)
        pthread_join(gen[t], NULL);
    uint64_t gen_bytes = 0, gen_samples = 0;
    for (size_t a = 0; a < f.n_agents; a++)
        for (size_t w = 0; w < f.n_windows; w++) {
            gen_bytes += f.agents[a].windows[w].len;
            gen_samples += f.samples[a * f.n_windows + w];
        }
    printf("ready profiles=%zu pprof_samples=%" PRIu64 " gzipped_bytes=%" PRIu64
           " generation_s=%.1f\n",
           f.n_agents * f.n_windows, gen_samples, gen_bytes,
           (double)(strata_monotonic_ns() - gen0) / 1e9);
    fflush(stdout);

    size_t n_workers = paced ? f.n_agents : f.concurrency;
    f.workers = calloc(n_workers, sizeof *f.workers);
    pthread_t *tids = calloc(n_workers, sizeof *tids);
    if (f.workers == NULL || tids == NULL)
        die("out of memory", NULL);
    strata_error err;
    for (size_t i = 0; i < n_workers; i++) {
        f.workers[i].f = &f;
        f.workers[i].index = i;
        /* Each agent or pusher has its own channel, hence its own connection. */
        f.workers[i].channel = rpc_channel_new(f.addresses[i % f.n_addresses], NULL, &err);
        if (f.workers[i].channel == NULL)
            die("channel", &err);
    }
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 1 << 20);
    f.start_ns = strata_monotonic_ns();
    f.deadline_ns = f.start_ns + (int64_t)(seconds * 1e9);
    for (size_t i = 0; i < n_workers; i++)
        if (pthread_create(&tids[i], &attr, paced ? paced_agent : closed_pusher, &f.workers[i]) !=
            0)
            die("pthread_create", NULL);
    for (size_t i = 0; i < n_workers; i++)
        pthread_join(tids[i], NULL);
    double wall = (double)(strata_monotonic_ns() - f.start_ns) / 1e9;

    size_t n = 0;
    uint64_t errors = 0, late = 0, samples = 0, bytes = 0;
    for (size_t i = 0; i < n_workers; i++)
        n += f.workers[i].n_records;
    int64_t *lat = malloc((n + 1) * sizeof *lat);
    FILE *log = log_path != NULL ? fopen(log_path, "w") : NULL;
    if (lat == NULL || (log_path != NULL && log == NULL))
        die(log_path != NULL ? log_path : "out of memory", NULL);
    size_t n_ok = 0;
    for (size_t i = 0; i < n_workers; i++) {
        worker *w = &f.workers[i];
        late += w->late;
        samples += w->samples;
        bytes += w->bytes;
        for (size_t r = 0; r < w->n_records; r++) {
            const record *rec = &w->records[r];
            if (rec->code != 0)
                errors++;
            else
                lat[n_ok++] = rec->latency_ns;
            if (log != NULL)
                fprintf(log, "%u %" PRId64 " %" PRId64 " %d\n", rec->agent, rec->time_ns,
                        rec->latency_ns, rec->code);
        }
        free(w->records);
        rpc_channel_free(w->channel);
    }
    if (log != NULL && fclose(log) != 0)
        die(log_path, NULL);
    qsort(lat, n_ok, sizeof *lat, compare_i64);
    printf("mode=%s agents=%zu concurrency=%zu pushes=%zu errors=%" PRIu64 " late=%" PRIu64
           " pprof_samples=%" PRIu64 " bytes=%" PRIu64
           " ack_p50_ms=%.1f ack_p99_ms=%.1f ack_max_ms=%.1f seconds=%.2f\n",
           mode, f.n_agents, paced ? f.n_agents : f.concurrency, n, errors, late, samples, bytes,
           percentile_ms(lat, n_ok, 0.5), percentile_ms(lat, n_ok, 0.99),
           n_ok ? (double)lat[n_ok - 1] / 1e6 : 0.0, wall);
    free(lat);
    free(tids);
    free(f.workers);
    for (size_t a = 0; a < f.n_agents; a++) {
        label_set_free(&f.agents[a].labels);
        for (size_t w = 0; w < f.n_windows; w++)
            strata_buffer_free(&f.agents[a].windows[w]);
        free(f.agents[a].windows);
    }
    free(f.agents);
    free(f.samples);
    return 0;
}
