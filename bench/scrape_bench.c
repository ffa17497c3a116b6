/*
 * scrape_bench - what scraping costs per target: N static targets (default 1,000) with Parca's five
 * default Go profiles each, scraped every 10 s by the real scraper (libcurl multi, pprof checks,
 * lib/push to a gRPC endpoint), for a measured window after a warm-up.
 *
 *   scrape_bench [--targets N] [--seconds S] [--warmup S] [--interval D]
 *
 * A child process plays the fleet and the ingester: one lib/http server on 0.0.0.0:<port> serves
 * real Go profiles (lib/pprof/testdata: go_cpu.pb.gz for /debug/pprof/profile at once, without
 * waiting out ?seconds=, go_heap.pb.gz for the others) to every target, and a gRPC server answers
 * WriteRaw with OK. Each target has its own loopback address (127.0.X.Y), so the scraper opens a
 * connection per target as it would in a fleet. The figures are this process's alone: CPU of all
 * its threads per scrape and per target, resident memory. Nothing is asserted.
 */
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

static int accept_write_raw(rpc_call *call, const uint8_t *request, size_t request_len,
                            strata_buffer *response, strata_error *err, void *arg) {
    (void)call, (void)request, (void)request_len, (void)response, (void)err, (void)arg;
    return 0;
}

/* The child: serves until killed; writes "http_port grpc_port\n" to fd. */
static void run_fleet(int fd, const char *source_dir) {
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
    http_server_options ho = {.bind = "0.0.0.0:0", .max_connections = 4096};
    http_server *http = http_server_new(&ho, &err);
    if (http == NULL ||
        http_server_route(http, "GET", "/", HTTP_MATCH_PREFIX, serve_profile, &fl, &err) != 0 ||
        http_server_start(http, &err) != 0) {
        fprintf(stderr, "fleet: %s\n", err.message);
        _exit(1);
    }
    rpc_server_options ro = {.listen_address = "127.0.0.1:0", .threads = 2};
    rpc_server *grpc = rpc_server_new(&ro, &err);
    if (grpc == NULL ||
        rpc_server_add_sync_method(grpc, PUSH_WRITE_RAW_METHOD, accept_write_raw, NULL, &err) !=
            0 ||
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
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--targets") == 0)
            targets = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--seconds") == 0)
            seconds = atof(argv[i + 1]);
        else if (strcmp(argv[i], "--warmup") == 0)
            warmup = atof(argv[i + 1]);
        else if (strcmp(argv[i], "--interval") == 0)
            interval = argv[i + 1];
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
        run_fleet(fds[1], source);
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
                         .max_queue_bytes = 64 << 20};
    metrics_registry *reg = metrics_registry_new(&err);
    scraper_options o = {.config = &sc, .default_ingester = ingester, .registry = reg};
    scraper *s = reg != NULL ? scraper_new(&o, &err) : NULL;
    if (s == NULL || scraper_apply(s, &configs, &err) != 0 || scraper_start(s, &err) != 0) {
        fprintf(stderr, "scraper: %s\n", err.message);
        return 1;
    }
    printf("scrape_bench: %d targets x 5 profiles every %s, %d pid fleet, warm-up %.0f s\n",
           targets, interval, (int)child, warmup);
    usleep((useconds_t)(warmup * 1e6));
    double scrapes0 = metric_sum(reg, "strata_scraper_scrapes_total");
    double bytes0 = metric_sum(reg, "strata_scraper_scraped_bytes_total");
    double acked0 = metric_sum(reg, "strata_scraper_push_acknowledged_series_total");
    int64_t cpu0 = strata_process_cpu_ns(), wall0 = strata_monotonic_ns();
    usleep((useconds_t)(seconds * 1e6));
    int64_t cpu = strata_process_cpu_ns() - cpu0, wall = strata_monotonic_ns() - wall0;
    double scrapes = metric_sum(reg, "strata_scraper_scrapes_total") - scrapes0;
    double bytes = metric_sum(reg, "strata_scraper_scraped_bytes_total") - bytes0;
    double acked = metric_sum(reg, "strata_scraper_push_acknowledged_series_total") - acked0;
    double failures = metric_sum(reg, "strata_scraper_scrape_failures_total");
    double dropped = metric_sum(reg, "strata_scraper_push_dropped_requests_total");
    double cpu_s = (double)cpu / 1e9, wall_s = (double)wall / 1e9;
    printf("window          %.1f s wall\n", wall_s);
    printf("scrapes         %.0f (%.1f/s), %.1f MB of pprof, failures (all time) %.0f\n", scrapes,
           scrapes / wall_s, bytes / 1e6, failures);
    printf("pushed          %.0f series acknowledged, %.0f requests dropped\n", acked, dropped);
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
