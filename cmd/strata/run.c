/*
 * run.c - `strata all` and `strata <service>`: load the config, open the bucket, start the HTTP
 * server (/metrics, /ready) and the gRPC server, run the requested services on them until SIGINT
 * or SIGTERM, then shut down in the order that keeps every acknowledged write durable: stop
 * accepting gRPC calls and let those in flight finish (the ingester's flush thread acknowledges
 * them), then stop the services, then the HTTP server. The scraper stops first (its last scrapes
 * are flushed to the ingesters, which may be this process). SIGHUP reloads the config file and
 * hands its scrape_configs to the scraper; a file that does not load is logged with its file and
 * line, counted, and the running config stays.
 *
 * -check-config loads and validates the file (every bound, the mode's cross-section rules, the
 * bucket section) and builds nothing else: no service, no thread, no listening socket.
 *
 * At start the soft RLIMIT_NOFILE is raised to the hard one: every HTTP connection (up to
 * server.http_max_connections) takes a descriptor, and a flood must meet the server's own cap,
 * not EMFILE.
 *
 * Readiness (/ready) is the AND of the services' own checks and, for the services that write the
 * bucket (ingester, compactor), a write probe: every WRITE_PROBE_INTERVAL_S a thread uploads and
 * deletes the object WRITE_PROBE_KEY_PREFIX<hostname> at the top of the bucket (under its prefix;
 * an object, not a directory, so no listing takes it for a tenant) and keeps the result; /ready
 * reads the cached result, so it never waits for the bucket. A bucket that refuses writes, or a
 * probe that has not succeeded for WRITE_PROBE_STALE_S, makes /ready 503 with the reason. Queriers
 * and scrapers never write the bucket and run no probe.
 */
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "announce/announce.h"
#include "bucket/bucket.h"
#include "cli.h"
#include "common/auth.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/textfile.h"
#include "compactor.h"
#include "http/http.h"
#include "ingester.h"
#include "metrics/metrics.h"
#include "querier.h"
#include "scraper.h"
#include "rpc/rpc.h"
#include "parca/debuginfo/v1alpha1/debuginfo.pb-c.h"
#include "push/v1/push.pb-c.h"
#include "querier/v1/querier.pb-c.h"
#include "parca/profilestore/v1alpha1/profilestore.pb-c.h"
#include "parca/query/v1alpha1/query.pb-c.h"
#include "parca/scrape/v1alpha1/scrape.pb-c.h"
#include "rpcweb/rpcweb.h"
#include "strata/querier/v1/peer.pb-c.h"
#include "strata_config.h"

typedef struct run_args {
    const char *config_path;
    bool check_config;
} run_args;

#define WRITE_PROBE_INTERVAL_S 5
#define WRITE_PROBE_STALE_S 60
#define WRITE_PROBE_KEY_PREFIX ".strata-ready-"

/* The bucket write probe of writing services; see the top comment. */
typedef struct write_probe {
    bucket *store;
    char key[128];
    pthread_mutex_t mu;
    pthread_cond_t wake;
    bool stop;
    bool started;
    pthread_t thread;
    bool probed;        /* a probe has completed */
    bool ok;            /* the last probe wrote */
    int64_t last_ok_ns; /* monotonic time of the last probe that wrote */
    char error[sizeof(((strata_error *)0)->message)]; /* why the last probe failed */
    bool delete_warned;                               /* a failed delete is logged once */
    bool counted;                                     /* uploads_seen and failures_seen are set */
    uint64_t uploads_seen; /* the bucket's upload counters after the last probe */
    uint64_t failures_seen;
} write_probe;

typedef struct runtime {
    const char *mode;
    strata_config config;
    bucket *store;
    metrics_registry *registry;
    http_server *http;
    rpc_server *grpc;
    rpcweb *web; /* gRPC-Web and Connect on the HTTP port, into grpc's methods */
    ingester *ing;
    querier *qr;
    compactor *cmp;
    scraper *scr;
    metrics_counter_vec *reloads; /* strata_config_reloads_total{result} */
    metrics_gauge *reload_ok;
    announce_publisher *publisher;   /* ingester: committed blocks, for other processes */
    announce_subscriber *subscriber; /* querier: blocks announced by ingesters */
    metrics_counter_vec *bucket_ops;
    metrics_counter_vec *bucket_failures;
    metrics_counter *announce_published;
    metrics_counter *announce_received;
    metrics_counter *announce_malformed;
    write_probe probe; /* started when a writing service runs */
    strata_auth *auth; /* server.auth; NULL without credentials */
} runtime;

static volatile sig_atomic_t stop_requested;
static volatile sig_atomic_t reload_requested;

static void on_signal(int sig) {
    if (sig == SIGHUP)
        reload_requested = 1;
    else
        stop_requested = 1;
}

static int parse_run_args(int argc, char **argv, run_args *a, strata_error *err) {
    memset(a, 0, sizeof *a);
    for (int i = 0; i < argc; i++) {
        if (cli_flag_is(argv[i], "config") && i + 1 < argc) {
            a->config_path = argv[++i];
        } else if (cli_flag_is(argv[i], "check-config")) {
            a->check_config = true;
        } else {
            return strata_error_set(err, STRATA_INVALID_ARGUMENT, "unexpected argument \"%s\"",
                                    argv[i]);
        }
    }
    if (a->config_path == NULL)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "-config FILE is required");
    return 0;
}

/* --- the bucket write probe ------------------------------------------------------------------ */

/* WRITE_PROBE_KEY_PREFIX + this host's name, with anything outside [A-Za-z0-9._-] replaced. */
static void probe_key(char *out, size_t size) {
    char host[64] = "";
    if (gethostname(host, sizeof host - 1) != 0 || host[0] == '\0')
        snprintf(host, sizeof host, "unknown");
    for (char *p = host; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '.' || *p == '_' || *p == '-'))
            *p = '_';
    snprintf(out, size, "%s%s", WRITE_PROBE_KEY_PREFIX, host);
}

/* Whether the service's own uploads since the last probe all succeeded (at least one, none
 * failed), which proves the bucket writable as well as a probe would; remembers the counters. */
static bool writes_proven(write_probe *p) {
    bucket_stats st;
    bucket_get_stats(p->store, &st);
    uint64_t uploads = st.operations[BUCKET_OP_UPLOAD], failures = st.failures[BUCKET_OP_UPLOAD];
    bool proven = p->counted && uploads > p->uploads_seen && failures == p->failures_seen;
    p->uploads_seen = uploads;
    p->failures_seen = failures;
    p->counted = true;
    return proven;
}

/* One probe: upload a small object, then delete it (best effort: a bucket policy may allow
 * writes without deletes, which an ingester never needs). A service that wrote blocks since the
 * last probe, all successfully, has shown the bucket writable: then nothing is written, so a busy
 * ingester pays no requests for its readiness (an idle one, two every WRITE_PROBE_INTERVAL_S). */
static void probe_once(write_probe *p) {
    char body[64];
    int len =
        snprintf(body, sizeof body, "%lld\n", (long long)(strata_now_ns() / STRATA_NS_PER_SEC));
    strata_error err;
    strata_error_clear(&err);
    bool proven = writes_proven(p);
    bool ok = proven || bucket_upload(p->store, p->key, body, (size_t)len, &err) == 0;
    if (ok && !proven) {
        strata_error derr;
        if (bucket_delete(p->store, p->key, &derr) != 0 && !p->delete_warned) {
            char quoted[600];
            strata_log_warn("strata", "bucket write probe not deleted", "key=%s error=%s", p->key,
                            strata_log_quote(derr.message, quoted, sizeof quoted));
            p->delete_warned = true;
        }
    }
    if (!proven)
        (void)writes_proven(p); /* the probe's own upload is not the service's */
    pthread_mutex_lock(&p->mu);
    if (ok != p->ok || !p->probed) { /* changes, and a failure at start */
        char quoted[600];
        if (ok && p->probed)
            strata_log_info("strata", "bucket writable again", "key=%s", p->key);
        else if (!ok)
            strata_log_warn("strata", "bucket not writable, not ready", "key=%s error=%s", p->key,
                            strata_log_quote(err.message, quoted, sizeof quoted));
    }
    p->probed = true;
    p->ok = ok;
    if (ok)
        p->last_ok_ns = strata_monotonic_ns();
    else
        snprintf(p->error, sizeof p->error, "%s", err.message);
    pthread_mutex_unlock(&p->mu);
}

static void *probe_main(void *arg) {
    write_probe *p = arg;
    pthread_mutex_lock(&p->mu);
    while (!p->stop) {
        int64_t next = strata_monotonic_ns() + WRITE_PROBE_INTERVAL_S * STRATA_NS_PER_SEC;
        struct timespec ts = {(time_t)(next / STRATA_NS_PER_SEC), (long)(next % STRATA_NS_PER_SEC)};
        while (!p->stop && pthread_cond_timedwait(&p->wake, &p->mu, &ts) != ETIMEDOUT) {
        }
        if (p->stop)
            break;
        pthread_mutex_unlock(&p->mu);
        probe_once(p);
        pthread_mutex_lock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* Probes once now (so /ready is right from the start), then every WRITE_PROBE_INTERVAL_S. */
static int probe_start(write_probe *p, bucket *store, strata_error *err) {
    p->store = store;
    probe_key(p->key, sizeof p->key);
    pthread_condattr_t attr;
    if (pthread_condattr_init(&attr) != 0)
        return strata_error_set(err, STRATA_INTERNAL, "cannot create the write probe's condition");
    int rc = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    if (rc == 0)
        rc = pthread_cond_init(&p->wake, &attr);
    pthread_condattr_destroy(&attr);
    if (rc != 0)
        return strata_error_set(err, STRATA_INTERNAL, "cannot create the write probe's condition");
    if (pthread_mutex_init(&p->mu, NULL) != 0) {
        pthread_cond_destroy(&p->wake);
        return strata_error_set(err, STRATA_INTERNAL, "cannot create the write probe's mutex");
    }
    probe_once(p);
    if (pthread_create(&p->thread, NULL, probe_main, p) != 0) {
        pthread_mutex_destroy(&p->mu);
        pthread_cond_destroy(&p->wake);
        return strata_error_set(err, STRATA_INTERNAL, "cannot start the bucket write probe");
    }
    p->started = true;
    return 0;
}

static void probe_stop(write_probe *p) {
    if (!p->started)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->thread, NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->wake);
    p->started = false;
}

/* The cached verdict; never touches the bucket. */
static bool probe_ready(write_probe *p, char *reason, size_t reason_size) {
    if (!p->started)
        return true;
    pthread_mutex_lock(&p->mu);
    int64_t age = strata_monotonic_ns() - p->last_ok_ns;
    bool ready = p->ok && age <= WRITE_PROBE_STALE_S * STRATA_NS_PER_SEC;
    if (!p->ok)
        snprintf(reason, reason_size, "bucket not writable: %s", p->error);
    else if (!ready)
        snprintf(reason, reason_size, "bucket write probe has not succeeded for %llds",
                 (long long)(age / STRATA_NS_PER_SEC));
    pthread_mutex_unlock(&p->mu);
    return ready;
}

/* --- readiness ------------------------------------------------------------------------------- */

/* Runs on an HTTP I/O thread: only flags and cached results, never the bucket. */
static bool ready_check(void *ctx, char *reason, size_t reason_size) {
    runtime *rt = ctx;
    const char *why = NULL;
    if (rt->ing != NULL && !ingester_ready(rt->ing, &why)) {
        snprintf(reason, reason_size, "%s", why);
        return false;
    }
    if (rt->cmp != NULL && !compactor_ready(rt->cmp, &why)) {
        snprintf(reason, reason_size, "%s", why);
        return false;
    }
    if (rt->qr != NULL && !querier_ready(rt->qr, &why)) {
        snprintf(reason, reason_size, "%s", why);
        return false;
    }
    if (!probe_ready(&rt->probe, reason, reason_size))
        return false;
    if (stop_requested) {
        snprintf(reason, reason_size, "shutting down");
        return false;
    }
    return true;
}

/* Copies the bucket's per-operation counters into the registry at scrape time. */
static void collect_bucket_stats(void *ctx) {
    runtime *rt = ctx;
    bucket_stats st;
    bucket_get_stats(rt->store, &st);
    for (int op = 0; op < BUCKET_OP_COUNT; op++) {
        const char *name = bucket_op_name((bucket_op)op);
        metrics_counter_set(metrics_counter_vec_with(rt->bucket_ops, &name),
                            (int64_t)st.operations[op]);
        metrics_counter_set(metrics_counter_vec_with(rt->bucket_failures, &name),
                            (int64_t)st.failures[op]);
    }
}

/* Announcement counters (zero when announcements are off). */
static void collect_announce_stats(void *ctx) {
    runtime *rt = ctx;
    if (rt->publisher != NULL) {
        announce_publisher_stats ps;
        announce_publisher_get_stats(rt->publisher, &ps);
        metrics_counter_set(rt->announce_published, (int64_t)ps.published);
    }
    if (rt->subscriber != NULL) {
        announce_subscriber_stats ss;
        announce_subscriber_get_stats(rt->subscriber, &ss);
        metrics_counter_set(rt->announce_received, (int64_t)ss.received);
        metrics_counter_set(rt->announce_malformed, (int64_t)ss.malformed);
    }
}

/* querier.external_url when not set: the HTTP listen address, a wildcard host as localhost
 * (ShareProfile's links; behind a proxy or in a cluster, set it). */
static int default_external_url(strata_config *c, strata_error *err) {
    if (c->querier.external_url != NULL && c->querier.external_url[0] != '\0')
        return 0;
    const char *addr = c->server.http_listen_address != NULL ? c->server.http_listen_address : "";
    const char *colon = strrchr(addr, ':');
    const char *port = colon != NULL ? colon + 1 : "7070";
    size_t host_len = colon != NULL ? (size_t)(colon - addr) : strlen(addr);
    bool wildcard = host_len == 0 || (host_len == 7 && strncmp(addr, "0.0.0.0", 7) == 0) ||
                    (host_len == 4 && strncmp(addr, "[::]", 4) == 0);
    const char *scheme =
        c->server.tls.cert_file != NULL && c->server.tls.cert_file[0] != '\0' ? "https" : "http";
    char url[512];
    int n = wildcard ? snprintf(url, sizeof url, "%s://localhost:%s", scheme, port)
                     : snprintf(url, sizeof url, "%s://%.*s:%s", scheme, (int)host_len, addr, port);
    if (n < 0 || (size_t)n >= sizeof url)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "server.http_listen_address is too long");
    char *copy = strdup(url);
    if (copy == NULL)
        return strata_error_oom(err);
    free(c->querier.external_url);
    c->querier.external_url = copy;
    return 0;
}

static int register_announce_metrics(runtime *rt, strata_error *err) {
    metrics_opts o = {.name = "strata_announce_published_total",
                      .help = "Block announcements published over nng by this ingester."};
    if ((rt->announce_published = metrics_counter_new(rt->registry, &o, err)) == NULL)
        return -1;
    o = (metrics_opts){.name = "strata_announce_received_total",
                       .help = "Valid block announcements received by this querier."};
    if ((rt->announce_received = metrics_counter_new(rt->registry, &o, err)) == NULL)
        return -1;
    o = (metrics_opts){.name = "strata_announce_malformed_total",
                       .help = "Announcement messages dropped as malformed."};
    if ((rt->announce_malformed = metrics_counter_new(rt->registry, &o, err)) == NULL)
        return -1;
    return metrics_registry_add_collector(rt->registry, collect_announce_stats, rt, err);
}

static int register_reload_metrics(runtime *rt, strata_error *err) {
    static const char *const result_label[] = {"result"};
    metrics_opts o = {.name = "strata_config_reloads_total",
                      .help = "Config reloads on SIGHUP, by result (success, failure).",
                      .label_names = result_label,
                      .n_labels = 1};
    if ((rt->reloads = metrics_counter_vec_new(rt->registry, &o, err)) == NULL)
        return -1;
    o = (metrics_opts){.name = "strata_config_last_reload_successful",
                       .help = "1 when the last reload (or the start) loaded the config."};
    if ((rt->reload_ok = metrics_gauge_new(rt->registry, &o, err)) == NULL)
        return -1;
    metrics_gauge_set(rt->reload_ok, 1);
    return 0;
}

static int register_bucket_metrics(runtime *rt, strata_error *err) {
    static const char *const op_label[] = {"operation"};
    metrics_opts o = {.name = "strata_bucket_operations_total",
                      .help = "Object storage operations, by operation.",
                      .label_names = op_label,
                      .n_labels = 1};
    if ((rt->bucket_ops = metrics_counter_vec_new(rt->registry, &o, err)) == NULL)
        return -1;
    o.name = "strata_bucket_operation_failures_total";
    o.help = "Object storage operations that failed (after retries), by operation.";
    if ((rt->bucket_failures = metrics_counter_vec_new(rt->registry, &o, err)) == NULL)
        return -1;
    return metrics_registry_add_collector(rt->registry, collect_bucket_stats, rt, err);
}

/* The ingester tells the querier in this process (strata all) and, over nng, queriers in other
 * processes about each block it commits, before acknowledging the writes it holds. */
static void announce_block(void *ctx, const char *tenant, const char *block_id) {
    runtime *rt = ctx;
    if (rt->qr != NULL)
        querier_announce_block(rt->qr, tenant, block_id);
    strata_error err;
    if (rt->publisher != NULL && announce_publish(rt->publisher, tenant, block_id, &err) != 0) {
        char quoted[600];
        strata_log_warn("ingester", "block announcement not sent", "ulid=%s error=%s", block_id,
                        strata_log_quote(err.message, quoted, sizeof quoted));
    }
}

/* The compactor's merged blocks reach the querier in this process at once; queriers in other
 * processes find them with their next listing (sync_interval), which hides the sources. */
static void announce_compacted_block(void *ctx, const char *tenant, const char *block_id) {
    runtime *rt = ctx;
    if (rt->qr != NULL)
        querier_announce_block(rt->qr, tenant, block_id);
}

static void on_announced_block(void *ctx, const char *tenant, const char *block_id) {
    querier_announce_block(ctx, tenant, block_id);
}

/* nng publisher (ingester) and subscriber (querier) for block announcements, when configured. */
static int start_announcements(runtime *rt, strata_error *err) {
    const char *listen = rt->ing != NULL ? rt->config.ingester.announce_listen_address : NULL;
    if (listen != NULL && listen[0] != '\0' &&
        (rt->publisher = announce_publisher_new(listen, err)) == NULL)
        return strata_error_wrap(err, "ingester.announce_listen_address");
    const config_string_list *peers = &rt->config.querier.announce_addresses;
    if (rt->qr != NULL && peers->count > 0 &&
        (rt->subscriber = announce_subscriber_new((const char *const *)peers->items, peers->count,
                                                  on_announced_block, rt->qr, err)) == NULL)
        return strata_error_wrap(err, "querier.announce_addresses");
    return 0;
}

/* Loads and validates the config, opens the bucket and, unless only checking the config, builds
 * every service, without binding anything. */
static int runtime_prepare(runtime *rt, const run_args *a, strata_error *err) {
    if (strata_config_load(a->config_path, &rt->config, err) != 0 ||
        strata_config_validate(&rt->config, rt->mode, err) != 0)
        return -1;
    strata_log_level level;
    if (strata_log_parse_level(rt->config.server.log_level, &level) != 0)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "%s: server.log_level: want debug, info, warn or error, got \"%s\"",
                                a->config_path, rt->config.server.log_level);
    strata_log_set_level(level);
    if (strcmp(rt->mode, "scraper") == 0 && rt->config.scraper.ingester_addresses.count == 0)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "%s: scraper.ingester_addresses: strata scraper needs at least one "
                                "ingester to push to",
                                a->config_path);
    if (bucket_open_config(rt->config.bucket.node, &rt->store, err) != 0)
        return -1;
    if (a->check_config)
        return 0; /* validated; build nothing */
    if ((rt->registry = metrics_registry_new(err)) == NULL ||
        metrics_register_process_metrics(rt->registry, err) != 0 ||
        register_bucket_metrics(rt, err) != 0 || register_announce_metrics(rt, err) != 0 ||
        register_reload_metrics(rt, err) != 0)
        return -1;
    bool all = strcmp(rt->mode, "all") == 0;
    if ((all || strcmp(rt->mode, "ingester") == 0) &&
        ingester_new(&rt->config.ingester, rt->store, rt->registry, &rt->ing, err) != 0)
        return -1;
    if ((all || strcmp(rt->mode, "querier") == 0) &&
        (default_external_url(&rt->config, err) != 0 ||
         querier_new(&rt->config.querier, rt->store, rt->registry, &rt->qr, err) != 0))
        return -1;
    if (((all && rt->config.compactor.enabled) || strcmp(rt->mode, "compactor") == 0) &&
        compactor_new(&rt->config.compactor, rt->store, rt->registry, &rt->cmp, err) != 0)
        return -1;
    if (rt->ing != NULL)
        ingester_set_block_listener(rt->ing, announce_block, rt);
    if (rt->cmp != NULL)
        compactor_set_block_listener(rt->cmp, announce_compacted_block, rt);
    return 0;
}

/* The scraper (strata all, strata scraper): it pushes to scraper.ingester_addresses, or in
 * strata all to this process's own gRPC port. */
static int runtime_new_scraper(runtime *rt, strata_error *err) {
    bool all = strcmp(rt->mode, "all") == 0;
    if (!all && strcmp(rt->mode, "scraper") != 0)
        return 0;
    /* This process's gRPC address as a client reaches it: the listen host unless it is a
     * wildcard, with the bound port (the config may say 0). */
    const char *listen = rt->config.server.grpc_listen_address;
    const char *colon = strrchr(listen, ':');
    size_t host_len = colon != NULL ? (size_t)(colon - listen) : 0;
    bool wildcard = host_len == 0 || strncmp(listen, "0.0.0.0", host_len) == 0 ||
                    strncmp(listen, "[::]", host_len) == 0;
    char self[300];
    snprintf(self, sizeof self, "%.*s:%d", wildcard ? 9 : (int)host_len,
             wildcard ? "127.0.0.1" : listen, rpc_server_port(rt->grpc));
    const scraper_config *sc = &rt->config.scraper;
    const server_config *server = &rt->config.server;
    if (all && sc->ingester_addresses.count == 0) { /* pushes to this process's own gRPC port */
        const scraper_push_tls_config *pt = &sc->push_tls;
        if (server->tls.cert_file != NULL && !pt->enabled && pt->ca_file == NULL)
            strata_log_warn("scraper",
                            "server.tls is set but scraper.push_tls is not: the scraper's pushes "
                            "to this process will fail",
                            "grpc=%s", self);
        if (rt->auth != NULL && sc->bearer_token_file == NULL && pt->cert_file == NULL)
            strata_log_warn("scraper",
                            "server.auth is set but scraper.bearer_token_file is not: the "
                            "scraper's pushes to this process will be refused",
                            "grpc=%s", self);
    }
    scraper_options o = {.config = &rt->config.scraper,
                         .default_ingester = all ? self : NULL,
                         .registry = rt->registry};
    if ((rt->scr = scraper_new(&o, err)) == NULL ||
        scraper_apply(rt->scr, &rt->config.scrape, err) != 0 ||
        scraper_register_grpc(rt->scr, rt->grpc, err) != 0 ||
        scraper_register_http(rt->scr, rt->http, err) != 0)
        return -1;
    return 0;
}

/* Raises the soft limit on open files to the hard one; returns the soft limit in effect. */
static rlim_t raise_open_files_limit(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return 0;
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0 && getrlimit(RLIMIT_NOFILE, &rl) != 0)
            return 0;
    }
    return rl.rlim_cur;
}

static rlim_t open_files_limit(void) {
    struct rlimit rl;
    return getrlimit(RLIMIT_NOFILE, &rl) == 0 ? rl.rlim_cur : 0;
}

/* A token file's token: the text without the whitespace around it. */
static int read_token_file(const char *path, char **out, strata_error *err) {
    size_t len = 0;
    if (strata_textfile_read(path, "server.auth.tokens[].token_file", out, &len, err) != 0)
        return -1;
    char *t = *out;
    size_t start = 0;
    while (start < len && isspace((unsigned char)t[start]))
        start++;
    while (len > start && isspace((unsigned char)t[len - 1]))
        len--;
    memmove(t, t + start, len - start);
    t[len - start] = '\0';
    return 0;
}

/* server.auth into rt->auth (common/auth.h); none configured leaves it NULL. */
static int build_auth(runtime *rt, strata_error *err) {
    const server_auth_config *ac = &rt->config.server.auth;
    size_t n = ac->tokens.count + ac->client_certificates.count;
    if (n == 0)
        return 0;
    strata_auth_credential *creds = calloc(n, sizeof *creds);
    char **files = calloc(ac->tokens.count + 1, sizeof *files);
    int rc = creds != NULL && files != NULL ? 0 : strata_error_oom(err);
    const server_auth_token *tokens = ac->tokens.items;
    for (size_t i = 0; rc == 0 && i < ac->tokens.count; i++) {
        const server_auth_token *t = &tokens[i];
        if ((t->token != NULL) == (t->token_file != NULL)) {
            rc = strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                  "server.auth.tokens[%zu]: want one of token and token_file", i);
            break;
        }
        if (t->token_file != NULL && read_token_file(t->token_file, &files[i], err) != 0) {
            rc = -1;
            break;
        }
        creds[i] = (strata_auth_credential){.token = t->token != NULL ? t->token : files[i],
                                            .tenants = (const char *const *)t->tenants.items,
                                            .n_tenants = t->tenants.count};
    }
    const server_auth_certificate *certs = ac->client_certificates.items;
    for (size_t i = 0; rc == 0 && i < ac->client_certificates.count; i++)
        creds[ac->tokens.count + i] =
            (strata_auth_credential){.subject = certs[i].subject,
                                     .tenants = (const char *const *)certs[i].tenants.items,
                                     .n_tenants = certs[i].tenants.count};
    if (rc == 0 && (rt->auth = strata_auth_new(creds, n, err)) == NULL)
        rc = strata_error_wrap(err, "server.auth");
    for (size_t i = 0; files != NULL && i < ac->tokens.count; i++)
        free(files[i]);
    free(files);
    free(creds);
    return rc;
}

static int runtime_start(runtime *rt, strata_error *err) {
    const server_config *sc = &rt->config.server;
    if (build_auth(rt, err) != 0)
        return -1;
    http_server_options hopts = {
        .bind = sc->http_listen_address,
        .connection_timeout_s = (unsigned)(sc->http_idle_timeout_ns / STRATA_NS_PER_SEC),
        .header_timeout_ms = (unsigned)(sc->http_header_timeout_ns / STRATA_NS_PER_MS),
        .read_timeout_ms = (unsigned)(sc->http_read_timeout_ns / STRATA_NS_PER_MS),
        .max_connections = (unsigned)sc->http_max_connections,
        .max_connections_per_address = sc->http_max_connections_per_address == 0
                                           ? HTTP_UNLIMITED
                                           : (unsigned)sc->http_max_connections_per_address,
        .io_threads = (unsigned)sc->http_io_threads,
        .handler_threads = (unsigned)sc->http_handler_threads,
        .metrics = rt->registry,
        .tls_cert_file = sc->tls.cert_file,
        .tls_key_file = sc->tls.key_file,
        .tls_client_ca_file = sc->tls.client_ca_file,
        .auth = rt->auth,
        .cors_origins = (const char *const *)sc->cors_allowed_origins.items,
        .n_cors_origins = sc->cors_allowed_origins.count};
    if ((rt->http = http_server_new(&hopts, err)) == NULL ||
        http_server_add_metrics(rt->http, rt->registry, err) != 0 ||
        http_server_add_ready(rt->http, ready_check, rt, err) != 0)
        return -1;
    rpc_server_options ropts = {.listen_address = rt->config.server.grpc_listen_address,
                                .threads = (int)rt->config.server.grpc_threads,
                                .tls_cert_file = sc->tls.cert_file,
                                .tls_key_file = sc->tls.key_file,
                                .tls_client_ca_file = sc->tls.client_ca_file,
                                .auth = rt->auth};
    bool grpc = strcmp(rt->mode, "compactor") != 0; /* the compactor alone serves no gRPC */
    if ((grpc && (rt->grpc = rpc_server_new(&ropts, err)) == NULL) ||
        start_announcements(rt, err) != 0)
        return -1;
    if (rt->ing != NULL &&
        (ingester_register(rt->ing, rt->grpc, err) != 0 ||
         ingester_register_http(rt->ing, rt->http, err) != 0 || ingester_start(rt->ing, err) != 0))
        return -1;
    if (rt->qr != NULL &&
        (querier_register_grpc(rt->qr, rt->grpc, err) != 0 ||
         querier_register_http(rt->qr, rt->http, err) != 0 || querier_start(rt->qr, err) != 0))
        return -1;
    if (runtime_new_scraper(rt, err) != 0)
        return -1;
    if (rt->grpc != NULL && rpcweb_new(rt->http, rt->grpc, &rt->web, err) != 0)
        return -1;
    if (rt->ing != NULL && ingester_register_web(rt->ing, rt->web, err) != 0)
        return -1;
    static const ProtobufCServiceDescriptor *const json_services[] = {
        &parca__query__v1alpha1__query_service__descriptor,
        &parca__profilestore__v1alpha1__profile_store_service__descriptor,
        &parca__profilestore__v1alpha1__agents_service__descriptor,
        &parca__scrape__v1alpha1__scrape_service__descriptor,
        &parca__debuginfo__v1alpha1__debuginfo_service__descriptor,
        &push__v1__pusher_service__descriptor,
        &querier__v1__querier_service__descriptor,
        &strata__querier__v1__peer_service__descriptor,
    };
    if (rt->web != NULL)
        rpcweb_set_json_services(rt->web, json_services,
                                 sizeof json_services / sizeof json_services[0]);
    const char *ui = rt->config.server.ui_directory;
    if (rt->qr != NULL && ui != NULL && ui[0] != '\0' &&
        http_server_serve_static(rt->http, "/", ui, err) != 0)
        return strata_error_wrap(err, "server.ui_directory");
    if ((rt->ing != NULL || rt->cmp != NULL) && probe_start(&rt->probe, rt->store, err) != 0)
        return -1;
    if ((rt->grpc != NULL && rpc_server_start(rt->grpc, err) != 0) ||
        http_server_start(rt->http, err) != 0)
        return -1;
    if (rt->cmp != NULL && compactor_start(rt->cmp, err) != 0)
        return -1;
    if (rt->scr != NULL && scraper_start(rt->scr, err) != 0)
        return -1;
    http_server_options in_effect;
    http_server_get_options(rt->http, &in_effect);
    strata_log_info(
        "strata", "started",
        "mode=%s http=%s grpc=%s grpc_port=%d http_port=%u http_max_connections=%u "
        "http_max_connections_per_address=%u http_header_timeout_ms=%u open_files_limit=%llu",
        rt->mode, rt->config.server.http_listen_address,
        rt->grpc != NULL ? rt->config.server.grpc_listen_address : "off",
        rt->grpc != NULL ? rpc_server_port(rt->grpc) : 0, (unsigned)http_server_port(rt->http),
        in_effect.max_connections,
        in_effect.max_connections_per_address == HTTP_UNLIMITED
            ? 0
            : in_effect.max_connections_per_address,
        in_effect.header_timeout_ms, (unsigned long long)open_files_limit());
    return 0;
}

static void runtime_shutdown(runtime *rt) {
    scraper_stop(rt->scr); /* its last pushes may go to this process's ingester */
    rpcweb_close(rt->web); /* before the methods it calls into go */
    if (rt->grpc != NULL)
        rpc_server_shutdown(rt->grpc, rt->config.server.shutdown_grace_ns);
    rt->grpc = NULL;
    if (rt->ing != NULL)
        ingester_stop(rt->ing);
    if (rt->cmp != NULL)
        compactor_stop(rt->cmp); /* waits for the merge in progress */
    probe_stop(&rt->probe);
    if (rt->http != NULL)
        http_server_stop(rt->http); /* no /metrics scrape reads the announcers after this */
    http_server_free(rt->http);
    rpcweb_free(rt->web);
    rt->web = NULL;
    scraper_free(rt->scr);
    announce_subscriber_free(rt->subscriber); /* before the querier it calls into */
    rt->subscriber = NULL;
    ingester_free(rt->ing);
    announce_publisher_free(rt->publisher);
    compactor_free(rt->cmp); /* before the querier it announces to */
    querier_free(rt->qr);
    if (rt->registry != NULL) {
        metrics_registry_remove_collector(rt->registry, collect_bucket_stats, rt);
        metrics_registry_remove_collector(rt->registry, collect_announce_stats, rt);
    }
    metrics_registry_free(rt->registry);
    bucket_close(rt->store);
    strata_auth_free(rt->auth); /* after both servers, which check with it */
    rt->auth = NULL;
    strata_config_free(&rt->config);
}

/* SIGHUP: reload the file; only scrape_configs take effect without a restart. */
static void reload_config(runtime *rt, const char *path) {
    strata_config fresh;
    strata_error err;
    const char *result = "success";
    if (strata_config_load(path, &fresh, &err) != 0 ||
        strata_config_validate(&fresh, rt->mode, &err) != 0) {
        if (fresh.root.doc != NULL)
            strata_config_free(&fresh);
        char quoted[600];
        strata_log_error("strata", "config reload rejected, keeping the running config",
                         "file=%s error=%s", path,
                         strata_log_quote(err.message, quoted, sizeof quoted));
        result = "failure";
    } else {
        size_t jobs = fresh.scrape.n_jobs;
        if (rt->scr != NULL && scraper_apply(rt->scr, &fresh.scrape, &err) != 0) {
            char quoted[600];
            strata_log_error("strata", "scrape configs not applied", "file=%s error=%s", path,
                             strata_log_quote(err.message, quoted, sizeof quoted));
            result = "failure";
        } else if (rt->ing != NULL && ingester_apply_limits(rt->ing, &fresh.ingester, &err) != 0) {
            char quoted[600];
            strata_log_error("strata", "ingester limits not applied", "file=%s error=%s", path,
                             strata_log_quote(err.message, quoted, sizeof quoted));
            result = "failure";
        } else {
            strata_log_info("strata", "config reloaded", "file=%s scrape_jobs=%zu", path, jobs);
        }
        strata_config_free(&fresh);
    }
    metrics_counter_inc(metrics_counter_vec_with(rt->reloads, &result));
    metrics_gauge_set(rt->reload_ok, strcmp(result, "success") == 0);
}

static void wait_for_signal(runtime *rt, const char *config_path) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    while (!stop_requested) {
        if (reload_requested) {
            reload_requested = 0;
            reload_config(rt, config_path);
        }
        usleep(100 * 1000);
    }
}

int cli_run_services(const char *mode, int argc, char **argv) {
    run_args a;
    runtime rt;
    memset(&rt, 0, sizeof rt);
    rt.mode = mode;
    strata_error err;
    strata_error_clear(&err);
    if (parse_run_args(argc, argv, &a, &err) != 0) {
        fprintf(stderr, "strata %s: %s\n", mode, err.message);
        return 2;
    }
    int rc = 1;
    if (runtime_prepare(&rt, &a, &err) != 0)
        goto out;
    if (a.check_config) {
        printf("%s: configuration is valid\n", a.config_path);
        rc = 0;
        goto out;
    }
    rlim_t files = raise_open_files_limit();
    if (files != 0 && files != RLIM_INFINITY &&
        files < (rlim_t)rt.config.server.http_max_connections + 256)
        strata_log_warn("strata", "open files limit below the HTTP connection limit",
                        "open_files_limit=%llu http_max_connections=%llu",
                        (unsigned long long)files,
                        (unsigned long long)rt.config.server.http_max_connections);
    if (runtime_start(&rt, &err) != 0)
        goto out;
    wait_for_signal(&rt, a.config_path);
    strata_log_info("strata", "shutting down", "mode=%s", mode);
    rc = 0;
out:
    if (rc != 0) {
        char quoted[600];
        strata_log_error("strata", "cannot run", "mode=%s code=%s error=%s", mode,
                         strata_status_name(err.code),
                         strata_log_quote(err.message, quoted, sizeof quoted));
    }
    runtime_shutdown(&rt);
    if (rc == 0 && !a.check_config)
        strata_log_info("strata", "stopped", "mode=%s", mode);
    return rc;
}
