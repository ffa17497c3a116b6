/*
 * scrape_bench - what scraping costs per target: N static targets (default 1,000) with Parca's five
 * default Go profiles each, scraped every 10 s by the real scraper (libcurl multi, pprof checks,
 * lib/push to a gRPC endpoint), for a measured window after a warm-up.
 *
 *   scrape_bench [--targets N] [--seconds S] [--warmup S] [--interval D]
 *                [--ack-delay D] [--max-in-flight N] [--max-request-bytes B]
 *
 * A child process plays the fleet and the ingester: one lib/http server on 0.0.0.0:<port> serves
 * real Go profiles (lib/pprof/testdata: go_cpu.pb.gz for /debug/pprof/profile at once, without
 * waiting out ?seconds=, go_heap.pb.gz for the others) to every target, and a gRPC server answers
 * WriteRaw. Each target has its own loopback address (127.0.X.Y), so the scraper opens a
 * connection per target as it would in a fleet. The figures are this process's alone: CPU of all
 * its threads per scrape and per target, resident memory. Nothing is asserted.
 *
 * --ack-delay makes the sink answer as Strata's ingester does: it acknowledges a write only at its
 * next flush, every D (all calls that arrived since the last one at once), instead of at once
 * (0, the default, which hides how many calls a pusher keeps waiting). --max-in-flight and
 * --max-request-bytes set the scraper's push options (lib/push); --max-in-flight 1
 * --max-request-bytes 1KiB is the pusher as it was before batching and pipelining (one request
 * per call, one call at a time). It prints profiles acknowledged per second against profiles
 * scraped, and the push lag (the age of the oldest profile not yet acknowledged) sampled every
 * 100 ms of the window.
 *
 * Figures (RelWithDebInfo, 2 shared cores; --ack-delay 1s, like the ingester's default flush):
 *
 *   targets/interval  pusher                  delivered/scraped  WriteRaw/s  lag mean / max
 *   10 / 5 s          before (1 call, alone)  2.4 / 10.0 per s   1.0         31 s / 54 s, growing
 *   10 / 5 s          defaults (4, 3 MiB)     10.0 / 10.0        4.0         0.73 s / 1.56 s
 *   10 / 5 s          --max-in-flight 8       10.0 / 10.0        5.0         0.35 s / 0.95 s
 *   1,000 / 10 s      before                  55 / 499           1.0         29 s / 46 s, growing
 *   1,000 / 10 s      defaults                500 / 500          4.0         1.14 s / 1.72 s
 *   1,000 / 10 s      --max-in-flight 8       499 / 500          8.0         0.70 s / 1.25 s
 *
 *   build-push/bench/scrape_bench --targets 10 --interval 5s --warmup 10 --seconds 60 \
 *       --ack-delay 1s [--max-in-flight 1 --max-request-bytes 1KiB]
 *   build-push/bench/scrape_bench --targets 1000 --warmup 12 --seconds 40 --ack-delay 1s [...]
 *
 * With 4 calls in flight, a profile that finds them all waiting waits for one flush to free a
 * slot and then for the next: the lag stays under two flush intervals. The testdata profiles are
 * small (1.2 KB on average); at the defaults an address carries 4 x 3 MiB per flush.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/clock.h"
#include "http/http.h"
#include "rpc/rpc.h"
#include "scraper.h"

typedef struct fleet {
    strata_buffer cpu;
    strata_buffer heap;
} fleet;

static int read_file(const char *path, strata_buffer *out) {
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return -1;
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        if (strata_buffer_append(out, buf, n) != 0) {
            fclose(f);
            return -1;
        }
    fclose(f);
    return 0;
}

static void serve_profile(void *ctx, const http_request *req, http_response *resp) {
    fleet *fl = ctx;
    const strata_buffer *b = strstr(http_request_path(req), "/profile") ? &fl->cpu : &fl->heap;
    strata_buffer_append(http_response_body(resp), b->data, b->len);
}

/* The sink: acknowledges WriteRaw at once, or at its next flush every delay_ns. */
typedef struct sink {
    pthread_mutex_t mu;
    rpc_call **calls; /* waiting for the next flush */
    size_t n, cap;
    int64_t delay_ns;
} sink;

static void on_write_raw(rpc_call *call, const uint8_t *request, size_t request_len, void *arg) {
    (void)request, (void)request_len;
    sink *k = arg;
    if (k->delay_ns <= 0) {
        rpc_call_finish(call, STRATA_OK, NULL, "", 0);
        return;
    }
    pthread_mutex_lock(&k->mu);
    if (k->n == k->cap) {
        size_t cap = k->cap ? 2 * k->cap : 256;
        rpc_call **calls = realloc(k->calls, cap * sizeof *calls);
        if (calls == NULL) {
            pthread_mutex_unlock(&k->mu);
            rpc_call_finish(call, STRATA_RESOURCE_EXHAUSTED, "sink out of memory", "", 0);
            return;
        }
        k->calls = calls;
        k->cap = cap;
    }
    k->calls[k->n++] = call;
    pthread_mutex_unlock(&k->mu);
}

/* Every delay_ns: acknowledges every call that arrived since the last flush. */
static void *flush_loop(void *arg) {
    sink *k = arg;
    for (;;) {
        usleep((useconds_t)(k->delay_ns / 1000));
        pthread_mutex_lock(&k->mu);
        rpc_call **calls = k->calls;
        size_t n = k->n;
        k->calls = NULL;
        k->n = k->cap = 0;
        pthread_mutex_unlock(&k->mu);
        for (size_t i = 0; i < n; i++)
            rpc_call_finish(calls[i], STRATA_OK, NULL, "", 0);
        free(calls);
    }
    return NULL;
}

/* The child: serves until killed; writes "http_port grpc_port\n" to fd. */
static void run_fleet(int fd, const char *source_dir, int64_t ack_delay_ns) {
    fleet fl = {STRATA_BUFFER_INIT, STRATA_BUFFER_INIT};
    char path[1024];
    snprintf(path, sizeof path, "%s/lib/pprof/testdata/go_cpu.pb.gz", source_dir);
    if (read_file(path, &fl.cpu) != 0) {
        fprintf(stderr, "cannot read %s (set STRATA_SOURCE_DIR)\n", path);
        _exit(1);
    }
    snprintf(path, sizeof path, "%s/lib/pprof/testdata/go_heap.pb.gz", source_dir);
    if (read_file(path, &fl.heap) != 0)
        _exit(1);
    strata_error err;
    /* Every scrape comes from 127.0.0.1: no cap per client address. */
    http_server_options ho = {.bind = "0.0.0.0:0",
                              .max_connections = 4096,
                              .max_connections_per_address = HTTP_UNLIMITED};
    http_server *http = http_server_new(&ho, &err);
    if (http == NULL ||
        http_server_route(http, "GET", "/", HTTP_MATCH_PREFIX, serve_profile, &fl, &err) != 0 ||
        http_server_start(http, &err) != 0) {
        fprintf(stderr, "fleet: %s\n", err.message);
        _exit(1);
    }
    static sink k = {.mu = PTHREAD_MUTEX_INITIALIZER};
    k.delay_ns = ack_delay_ns;
    pthread_t flusher;
    if (ack_delay_ns > 0 && pthread_create(&flusher, NULL, flush_loop, &k) != 0) {
        fprintf(stderr, "ingester: cannot start the flush thread\n");
        _exit(1);
    }
    rpc_server_options ro = {.listen_address = "127.0.0.1:0", .threads = 2};
    rpc_server *grpc = rpc_server_new(&ro, &err);
    if (grpc == NULL ||
        rpc_server_add_method(grpc, PUSH_WRITE_RAW_METHOD, on_write_raw, &k, &err) != 0 ||
        rpc_server_start(grpc, &err) != 0) {
        fprintf(stderr, "ingester: %s\n", err.message);
        _exit(1);
    }
    dprintf(fd, "%u %d\n", (unsigned)http_server_port(http), rpc_server_port(grpc));
    close(fd);
    for (;;)
        pause();
}

static double metric_sum(metrics_registry *r, const char *name) {
    strata_buffer text = STRATA_BUFFER_INIT;
    strata_error err;
    double sum = 0;
    if (metrics_registry_render(r, &text, &err) == 0 && strata_buffer_append_byte(&text, 0) == 0) {
        size_t len = strlen(name);
        for (char *line = (char *)text.data; line != NULL && *line;) {
            char *next = strchr(line, '\n');
            if (next != NULL)
                *next = '\0';
            if (strncmp(line, name, len) == 0 && (line[len] == ' ' || line[len] == '{')) {
                char *value = strrchr(line, ' ');
                if (value != NULL)
                    sum += strtod(value + 1, NULL);
            }
            line = next != NULL ? next + 1 : NULL;
        }
    }
    strata_buffer_free(&text);
    return sum;
}

static long status_kib(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    size_t len = strlen(key);
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        if (strncmp(line, key, len) == 0)
            kib = strtol(line + len + 1, NULL, 10);
    if (f != NULL)
        fclose(f);
    return kib;
}

static char *build_config(int targets, unsigned port, const char *interval) {
    strata_buffer y = STRATA_BUFFER_INIT;
    strata_buffer_appendf(&y,
                          "scrape_configs:\n  - job_name: bench\n    scrape_interval: %s\n"
                          "    static_configs:\n      - targets: [",
                          interval);
    for (int i = 0; i < targets; i++)
        strata_buffer_appendf(&y, "%s'127.0.%d.%d:%u'", i ? ", " : "", 1 + i / 250, 1 + i % 250,
                              port);
    strata_buffer_append_str(&y, "]\n");
    strata_buffer_append_byte(&y, 0);
    return (char *)strata_buffer_detach(&y, NULL);
}

int main(int argc, char **argv) {
    int targets = 1000;
    double seconds = 30, warmup = 12;
    const char *interval = "10s";
    int64_t ack_delay_ns = 0;
    uint64_t max_in_flight = 0, max_request_bytes = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        bool ok = true;
        if (strcmp(argv[i], "--targets") == 0)
            targets = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--seconds") == 0)
            seconds = atof(argv[i + 1]);
        else if (strcmp(argv[i], "--warmup") == 0)
            warmup = atof(argv[i + 1]);
        else if (strcmp(argv[i], "--interval") == 0)
            interval = argv[i + 1];
        else if (strcmp(argv[i], "--ack-delay") == 0)
            ok = config_parse_duration(argv[i + 1], &ack_delay_ns);
        else if (strcmp(argv[i], "--max-in-flight") == 0)
            ok = config_parse_uint64(argv[i + 1], &max_in_flight);
        else if (strcmp(argv[i], "--max-request-bytes") == 0)
            ok = config_parse_bytes(argv[i + 1], &max_request_bytes);
        else
            ok = false;
        if (!ok) {
            fprintf(stderr, "bad argument %s %s\n", argv[i], argv[i + 1]);
            return 2;
        }
    }
    if (targets < 1 || targets > 250 * 250) {
        fprintf(stderr, "--targets must be 1..62500\n");
        return 2;
    }
    const char *source = getenv("STRATA_SOURCE_DIR") ? getenv("STRATA_SOURCE_DIR") : ".";
    int fds[2];
    if (pipe(fds) != 0)
        return 1;
    pid_t child = fork();
    if (child == 0) {
        close(fds[0]);
        run_fleet(fds[1], source, ack_delay_ns);
    }
    close(fds[1]);
    unsigned http_port = 0;
    int grpc_port = 0;
    FILE *in = fdopen(fds[0], "r");
    if (in == NULL || fscanf(in, "%u %d", &http_port, &grpc_port) != 2) {
        fprintf(stderr, "the fleet process did not start\n");
        return 1;
    }
    fclose(in);

    char *yaml = build_config(targets, http_port, interval);
    config_document *doc = NULL;
    scrape_configs configs;
    strata_error err;
    if (config_load_string("bench", yaml, strlen(yaml), &doc, &err) != 0 ||
        scrape_configs_decode(config_node_get(config_document_root(doc), "scrape_configs"),
                              &configs, &err) != 0) {
        fprintf(stderr, "config: %s\n", err.message);
        return 1;
    }
    config_document_free(doc);
    free(yaml);
    char ingester[64];
    snprintf(ingester, sizeof ingester, "127.0.0.1:%d", grpc_port);
    scraper_config sc = {.max_response_bytes = 64 << 20,
                         .push_timeout_ns = 10 * STRATA_NS_PER_SEC,
                         .max_queue_bytes = 64 << 20,
                         .max_in_flight = max_in_flight,
                         .max_request_bytes = max_request_bytes};
    metrics_registry *reg = metrics_registry_new(&err);
    scraper_options o = {.config = &sc, .default_ingester = ingester, .registry = reg};
    scraper *s = reg != NULL ? scraper_new(&o, &err) : NULL;
    if (s == NULL || scraper_apply(s, &configs, &err) != 0 || scraper_start(s, &err) != 0) {
        fprintf(stderr, "scraper: %s\n", err.message);
        return 1;
    }
    printf("scrape_bench: %d targets x 5 profiles every %s, %d pid fleet, warm-up %.0f s, ack "
           "%s (delay %.0f ms), max_in_flight %llu, max_request_bytes %llu\n",
           targets, interval, (int)child, warmup,
           ack_delay_ns > 0 ? "at the next flush" : "at once", (double)ack_delay_ns / 1e6,
           (unsigned long long)max_in_flight, (unsigned long long)max_request_bytes);
    usleep((useconds_t)(warmup * 1e6));
    double scrapes0 = metric_sum(reg, "strata_scraper_scrapes_total");
    double bytes0 = metric_sum(reg, "strata_scraper_scraped_bytes_total");
    double acked0 = metric_sum(reg, "strata_scraper_push_acknowledged_series_total");
    double enq0 = metric_sum(reg, "strata_scraper_push_enqueued_series_total");
    double batches0 = metric_sum(reg, "strata_scraper_push_batches_total");
    double lag_start = metric_sum(reg, "strata_scraper_push_lag_seconds");
    int64_t cpu0 = strata_process_cpu_ns(), wall0 = strata_monotonic_ns();
    /* The push lag, every 100 ms of the window. */
    double lag_sum = 0, lag_max = 0, lag = 0;
    size_t lag_n = 0;
    for (int64_t end = wall0 + (int64_t)(seconds * 1e9); strata_monotonic_ns() < end;) {
        usleep(100000);
        lag = metric_sum(reg, "strata_scraper_push_lag_seconds");
        lag_sum += lag;
        lag_n++;
        if (lag > lag_max)
            lag_max = lag;
    }
    int64_t cpu = strata_process_cpu_ns() - cpu0, wall = strata_monotonic_ns() - wall0;
    double scrapes = metric_sum(reg, "strata_scraper_scrapes_total") - scrapes0;
    double bytes = metric_sum(reg, "strata_scraper_scraped_bytes_total") - bytes0;
    double acked = metric_sum(reg, "strata_scraper_push_acknowledged_series_total") - acked0;
    double enqueued = metric_sum(reg, "strata_scraper_push_enqueued_series_total") - enq0;
    double batches = metric_sum(reg, "strata_scraper_push_batches_total") - batches0;
    double waiting = metric_sum(reg, "strata_scraper_push_enqueued_series_total") -
                     metric_sum(reg, "strata_scraper_push_acknowledged_series_total");
    double failures = metric_sum(reg, "strata_scraper_scrape_failures_total");
    double dropped = metric_sum(reg, "strata_scraper_push_dropped_requests_total");
    double cpu_s = (double)cpu / 1e9, wall_s = (double)wall / 1e9;
    printf("window          %.1f s wall\n", wall_s);
    printf("scrapes         %.0f (%.1f/s), %.1f MB of pprof, failures (all time) %.0f\n", scrapes,
           scrapes / wall_s, bytes / 1e6, failures);
    printf("pushed          %.0f series acknowledged, %.0f requests dropped\n", acked, dropped);
    printf("delivered       %.1f profiles/s acknowledged for %.1f/s scraped, in %.1f WriteRaw/s "
           "(%.1f profiles each)\n",
           acked / wall_s, enqueued / wall_s, batches / wall_s,
           batches > 0 ? acked / batches : 0.0);
    printf("push lag        %.2f s at the start, %.2f s mean, %.2f s max, %.2f s at the end; "
           "%.0f profiles not yet acknowledged\n",
           lag_start, lag_n ? lag_sum / (double)lag_n : 0.0, lag_max, lag, waiting);
    printf("cpu             %.3f s = %.2f%% of one core\n", cpu_s, 100 * cpu_s / wall_s);
    printf("cpu per scrape  %.1f us\n", scrapes > 0 ? cpu_s / scrapes * 1e6 : 0.0);
    printf("cpu per target  %.4f%% of one core (5 profiles every %s)\n",
           100 * cpu_s / wall_s / targets, interval);
    printf("rss             %.1f MB now, %.1f MB peak\n", status_kib("VmRSS:") / 1024.0,
           status_kib("VmHWM:") / 1024.0);
    if (getenv("SCRAPE_BENCH_DEBUG") != NULL) {
        strata_buffer j = STRATA_BUFFER_INIT;
        scraper_targets_json(s, SCRAPE_STATE_ANY, &j, &err);
        printf("%.*s\n", (int)(j.len > 2000 ? 2000 : j.len), (char *)j.data);
        strata_buffer_free(&j);
    }
    scraper_free(s);
    metrics_registry_free(reg);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    return 0;
}
