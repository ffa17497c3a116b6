/*
 * fleet_targets - the fake fleet of bench/fleet_bench.py's scrape scenario: one process serving
 * real Go pprof profiles to as many scrape targets as the scraper is given, each profile stamped
 * with the time it was served, and a log of what it served so the benchmark can tell when each
 * profile was scraped.
 *
 *   fleet_targets --source-dir DIR [--bind 0.0.0.0:0] [--log FILE] [--io-threads N]
 *
 * Design, as bench/scrape_bench.c's child: one lib/http server on 0.0.0.0:<port> answers every
 * target, and each target is its own loopback address (127.0.X.Y:<port>), so the scraper holds a
 * connection per target as it would in a fleet. /debug/pprof/profile serves
 * lib/pprof/testdata/go_cpu.pb.gz at once (a Go program would answer after ?seconds=), every other
 * path go_heap.pb.gz (the Go heap profile stands in for allocs, block, goroutine and mutex, whose
 * content does not matter here). Both are decoded once at start and re-encoded without their
 * time_nanos; each answer is a gzip member carrying time_nanos = now followed by that profile
 * (fleet_common.h), so the stored profile's time is the scrape's. The handler only copies bytes,
 * so it runs on the I/O threads (a nonblocking route).
 *
 * The log has one line per answer, "HOST PATH TIME_NS" (HOST from the Host header: the target's
 * address), written at exit (SIGTERM or SIGINT). It prints "port=N" once serving, and at exit
 * "served=N bytes=N".
 */
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "common/clock.h"
#include "fleet_common.h"
#include "http/http.h"
#include "pprof/pprof.h"

typedef struct fleet {
    strata_buffer cpu, heap; /* gzipped, without time_nanos */
    pthread_mutex_t mu;
    strata_buffer log; /* kept in memory, written at exit */
    bool logging;
    atomic_uint_fast64_t served, bytes;
} fleet;

/* Decodes a testdata profile and re-encodes it gzipped without time_nanos. */
static int load_profile(const char *dir, const char *name, strata_buffer *out) {
    char path[4096];
    snprintf(path, sizeof path, "%s/lib/pprof/testdata/%s", dir, name);
    strata_buffer raw = STRATA_BUFFER_INIT;
    if (fleet_read_file(path, &raw) != 0) {
        fprintf(stderr, "fleet_targets: cannot read %s: %s\n", path, strerror(errno));
        return -1;
    }
    pprof_limits limits;
    pprof_limits_default(&limits);
    pprof_profile p;
    strata_error err;
    int rc = pprof_decode(raw.data, raw.len, &limits, &p, &err);
    if (rc == 0) {
        p.time_nanos = 0;
        rc = pprof_encode(&p, true, out, &err);
        pprof_profile_free(&p);
    }
    if (rc != 0)
        fprintf(stderr, "fleet_targets: %s: %s\n", path, err.message);
    strata_buffer_free(&raw);
    return rc;
}

static void serve(void *ctx, const http_request *req, http_response *resp) {
    fleet *fl = ctx;
    const char *path = http_request_path(req);
    const strata_buffer *b = strstr(path, "/profile") != NULL ? &fl->cpu : &fl->heap;
    int64_t now = strata_now_ns();
    uint8_t member[FLEET_TIME_MEMBER_MAX];
    size_t n = fleet_time_member(now, member);
    strata_buffer *body = http_response_body(resp);
    if (strata_buffer_append(body, member, n) != 0 ||
        strata_buffer_append(body, b->data, b->len) != 0) {
        http_response_set_status(resp, 500);
        return;
    }
    http_response_set_content_type(resp, "application/octet-stream");
    atomic_fetch_add(&fl->served, 1);
    atomic_fetch_add(&fl->bytes, body->len);
    if (fl->logging) {
        const char *host = http_request_header(req, "Host");
        pthread_mutex_lock(&fl->mu);
        strata_buffer_appendf(&fl->log, "%s %s %lld\n", host != NULL ? host : "-", path,
                              (long long)now);
        pthread_mutex_unlock(&fl->mu);
    }
}

static sem_t stop_sem;

static void on_stop(int sig) {
    (void)sig;
    sem_post(&stop_sem); /* async-signal-safe */
}

int main(int argc, char **argv) {
    const char *source = NULL, *bind = "0.0.0.0:0", *log_path = NULL;
    unsigned io_threads = 2;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--source-dir") == 0)
            source = argv[i + 1];
        else if (strcmp(argv[i], "--bind") == 0)
            bind = argv[i + 1];
        else if (strcmp(argv[i], "--log") == 0)
            log_path = argv[i + 1];
        else if (strcmp(argv[i], "--io-threads") == 0)
            io_threads = (unsigned)atoi(argv[i + 1]);
        else {
            fprintf(stderr, "fleet_targets: unknown argument %s\n", argv[i]);
            return 2;
        }
    }
    if (source == NULL || io_threads < 1) {
        fprintf(stderr, "usage: fleet_targets --source-dir DIR [--bind HOST:PORT] [--log FILE] "
                        "[--io-threads N]\n");
        return 2;
    }
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    static fleet fl = {.cpu = STRATA_BUFFER_INIT,
                       .heap = STRATA_BUFFER_INIT,
                       .mu = PTHREAD_MUTEX_INITIALIZER,
                       .log = STRATA_BUFFER_INIT};
    fl.logging = log_path != NULL;
    if (load_profile(source, "go_cpu.pb.gz", &fl.cpu) != 0 ||
        load_profile(source, "go_heap.pb.gz", &fl.heap) != 0)
        return 1;
    /* SIGTERM and SIGINT, whichever thread takes them, post the semaphore main waits on. */
    sem_init(&stop_sem, 0, 0);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    strata_error err;
    http_server_options ho = {.bind = bind,
                              .max_connections = 65536,
                              .max_connections_per_address = HTTP_UNLIMITED,
                              .io_threads = io_threads};
    http_server *http = http_server_new(&ho, &err);
    if (http == NULL ||
        http_server_route_nonblocking(http, "GET", "/", HTTP_MATCH_PREFIX, serve, &fl, &err) != 0 ||
        http_server_start(http, &err) != 0) {
        fprintf(stderr, "fleet_targets: %s\n", err.message);
        return 1;
    }
    printf("port=%u\n", (unsigned)http_server_port(http));
    fflush(stdout);
    while (sem_wait(&stop_sem) != 0 && errno == EINTR) {
    }
    http_server_free(http);
    int rc = 0;
    if (log_path != NULL) {
        FILE *f = fopen(log_path, "w");
        if (f == NULL || fwrite(fl.log.data, 1, fl.log.len, f) != fl.log.len || fclose(f) != 0) {
            fprintf(stderr, "fleet_targets: cannot write %s\n", log_path);
            rc = 1;
        }
    }
    printf("served=%llu bytes=%llu\n", (unsigned long long)atomic_load(&fl.served),
           (unsigned long long)atomic_load(&fl.bytes));
    strata_buffer_free(&fl.cpu);
    strata_buffer_free(&fl.heap);
    strata_buffer_free(&fl.log);
    return rc;
}
