/*
 * http_server.c - server lifecycle, routing and the libmicrohttpd callbacks; see http.h.
 *
 * libmicrohttpd calls, per request: on_uri (request line read; we allocate our request object
 * there and keep the raw URI), on_request once after the headers, again for each piece of body,
 * and once more with no data (we dispatch then: a nonblocking route's handler runs at once, any
 * other request is queued for a handler thread and its connection suspended), once more after the
 * connection is resumed (we queue the answer then), and finally on_completed after the response
 * was sent or the connection failed (we record metrics and free). Connection records and deadlines
 * live in http_conns.c, handler threads and deferred answers in http_handlers.c.
 */
#include <errno.h>
#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/array.h"
#include "common/auth.h"
#include "common/clock.h"
#include "common/tenant.h"
#include "common/textfile.h"
#include "http/http_internal.h"

static const char *const status_class_names[HTTP_STATUS_CLASSES] = {"other", "1xx", "2xx",
                                                                    "3xx",   "4xx", "5xx"};

/* --- binding --------------------------------------------------------------------------------- */

/* Splits "host:port", "[v6]:port" or ":port" into host (NULL = any) and port. */
static int split_bind(const char *bind, char *host, size_t host_size, char *port, size_t port_size,
                      strata_error *err) {
    const char *colon = strrchr(bind, ':');
    if (colon == NULL || colon[1] == '\0' || strlen(colon + 1) >= port_size)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "bind address %s: want host:port",
                                bind);
    for (const char *p = colon + 1; *p; p++)
        if (*p < '0' || *p > '9')
            return strata_error_set(err, STRATA_INVALID_ARGUMENT, "bind address %s: bad port",
                                    bind);
    if (strtoul(colon + 1, NULL, 10) > 65535)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "bind address %s: bad port", bind);
    snprintf(port, port_size, "%s", colon + 1);
    const char *h = bind;
    size_t len = (size_t)(colon - bind);
    if (len >= 2 && h[0] == '[' && h[len - 1] == ']') {
        h++;
        len -= 2;
    }
    if (len >= host_size)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "bind address %s: host too long",
                                bind);
    memcpy(host, h, len);
    host[len] = '\0';
    return 0;
}

static int listen_on(const struct addrinfo *ai) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0)
        return -1;
    int one = 1;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
        bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, SOMAXCONN) != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

static uint16_t bound_port(int fd) {
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
        return 0;
    /* copied out, not read through a cast of &ss (strict aliasing) */
    if (ss.ss_family == AF_INET6) {
        struct sockaddr_in6 in6;
        memcpy(&in6, &ss, sizeof in6);
        return ntohs(in6.sin6_port);
    }
    struct sockaddr_in in4;
    memcpy(&in4, &ss, sizeof in4);
    return ntohs(in4.sin_port);
}

static int open_listener(http_server *s, const char *bind, strata_error *err) {
    char host[256], port[8];
    if (split_bind(bind, host, sizeof host, port, sizeof port, err) != 0)
        return -1;
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *list = NULL;
    int rc = getaddrinfo(host[0] ? host : NULL, port, &hints, &list);
    if (rc != 0)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "bind address %s: %s", bind,
                                gai_strerror(rc));
    int saved = 0;
    for (const struct addrinfo *ai = list; ai != NULL && s->listen_fd < 0; ai = ai->ai_next) {
        s->listen_fd = listen_on(ai);
        saved = errno;
    }
    freeaddrinfo(list);
    if (s->listen_fd < 0)
        return strata_error_set(err, STRATA_UNAVAILABLE, "cannot listen on %s: %s", bind,
                                strerror(saved));
    s->port = bound_port(s->listen_fd);
    return 0;
}

/* --- server ---------------------------------------------------------------------------------- */

static void apply_defaults(http_server_options *o) {
    if (o->bind == NULL)
        o->bind = "127.0.0.1:0";
    if (o->max_body_bytes == 0)
        o->max_body_bytes = HTTP_DEFAULT_MAX_BODY_BYTES;
    if (o->connection_timeout_s == 0)
        o->connection_timeout_s = HTTP_DEFAULT_CONNECTION_TIMEOUT_S;
    if (o->header_timeout_ms == 0)
        o->header_timeout_ms = HTTP_DEFAULT_HEADER_TIMEOUT_MS;
    if (o->read_timeout_ms == 0)
        o->read_timeout_ms = HTTP_DEFAULT_READ_TIMEOUT_MS;
    if (o->drain_timeout_ms == 0)
        o->drain_timeout_ms = HTTP_DEFAULT_DRAIN_TIMEOUT_MS;
    if (o->max_connections == 0)
        o->max_connections = HTTP_DEFAULT_MAX_CONNECTIONS;
    if (o->max_connections_per_address == 0)
        o->max_connections_per_address = HTTP_DEFAULT_MAX_CONNECTIONS_PER_ADDRESS;
    if (o->io_threads == 0)
        o->io_threads = HTTP_DEFAULT_IO_THREADS;
    if (o->handler_threads == 0)
        o->handler_threads = HTTP_DEFAULT_HANDLER_THREADS;
    if (o->metrics == NULL)
        o->metrics = metrics_default_registry();
}

static int register_access_metrics(http_server *s, strata_error *err) {
    static const char *const request_labels[] = {"handler", "code"};
    static const char *const duration_labels[] = {"handler"};
    s->requests_total = metrics_counter_vec_new(
        s->opts.metrics,
        &(metrics_opts){.name = "http_requests_total",
                        .help = "HTTP requests answered, by route and status class.",
                        .label_names = request_labels,
                        .n_labels = 2},
        err);
    if (s->requests_total == NULL)
        return -1;
    s->duration_seconds = metrics_histogram_vec_new(
        s->opts.metrics,
        &(metrics_opts){.name = "http_request_duration_seconds",
                        .help = "Time from request line to response sent, by route.",
                        .label_names = duration_labels,
                        .n_labels = 1},
        err);
    return s->duration_seconds == NULL ? -1 : 0;
}

static int init_sync(http_server *s, strata_error *err) {
    pthread_condattr_t attr;
    if (pthread_condattr_init(&attr) != 0)
        return strata_error_set(err, STRATA_INTERNAL, "cannot create condition variable");
    int rc = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    if (rc == 0)
        rc = pthread_cond_init(&s->idle, &attr);
    pthread_condattr_destroy(&attr);
    if (rc != 0)
        return strata_error_set(err, STRATA_INTERNAL, "cannot create condition variable");
    if (pthread_mutex_init(&s->lock, NULL) != 0) {
        pthread_cond_destroy(&s->idle);
        return strata_error_set(err, STRATA_INTERNAL, "cannot create mutex");
    }
    if (pthread_mutex_init(&s->answer_lock, NULL) != 0) {
        pthread_mutex_destroy(&s->lock);
        pthread_cond_destroy(&s->idle);
        return strata_error_set(err, STRATA_INTERNAL, "cannot create mutex");
    }
    return 0;
}

static void destroy_sync(http_server *s) {
    pthread_mutex_destroy(&s->answer_lock);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->idle);
}

static bool is_set(const char *s) {
    return s != NULL && s[0] != '\0';
}

/* Reads the TLS files named in the options (see http.h). */
static int load_tls(http_server *s, strata_error *err) {
    const http_server_options *o = &s->opts;
    bool tls = is_set(o->tls_cert_file) || is_set(o->tls_key_file);
    if (tls && !(is_set(o->tls_cert_file) && is_set(o->tls_key_file)))
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "http: tls needs both cert_file and key_file");
    if (!tls && is_set(o->tls_client_ca_file))
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "http: tls client_ca_file needs cert_file and key_file");
    if (!tls)
        return 0;
    if (!MHD_is_feature_supported(MHD_FEATURE_TLS))
        return strata_error_set(err, STRATA_UNIMPLEMENTED,
                                "http: this libmicrohttpd is built without TLS");
    if (strata_textfile_read(o->tls_cert_file, "http: tls cert_file", &s->tls_cert, NULL, err) !=
            0 ||
        strata_textfile_read(o->tls_key_file, "http: tls key_file", &s->tls_key, NULL, err) != 0)
        return -1;
    if (is_set(o->tls_client_ca_file) &&
        strata_textfile_read(o->tls_client_ca_file, "http: tls client_ca_file", &s->tls_client_ca,
                             NULL, err) != 0)
        return -1;
    return 0;
}

http_server *http_server_new(const http_server_options *opts, strata_error *err) {
    http_server *s = calloc(1, sizeof *s);
    if (s == NULL) {
        strata_error_oom(err);
        return NULL;
    }
    if (opts != NULL)
        s->opts = *opts;
    apply_defaults(&s->opts);
    s->listen_fd = -1;
    s->unmatched.path = "unmatched";
    atomic_init(&s->stopping, false);
    if (s->opts.metrics == NULL) {
        free(s);
        strata_error_oom(err);
        return NULL;
    }
    if (init_sync(s, err) != 0) {
        free(s);
        return NULL;
    }
    if (http_conns_init(s, err) != 0) {
        destroy_sync(s);
        free(s);
        return NULL;
    }
    if (http_workers_init(&s->workers, s->opts.handler_threads, err) != 0) {
        http_conns_destroy(s);
        destroy_sync(s);
        free(s);
        return NULL;
    }
    if (register_access_metrics(s, err) != 0 || load_tls(s, err) != 0 ||
        open_listener(s, s->opts.bind, err) != 0) {
        http_server_free(s);
        return NULL;
    }
    s->opts.bind = NULL; /* the caller's strings may not outlive us */
    s->opts.tls_cert_file = s->opts.tls_key_file = s->opts.tls_client_ca_file = NULL;
    return s;
}

uint16_t http_server_port(const http_server *s) {
    return s ? s->port : 0;
}

void http_server_get_options(const http_server *s, http_server_options *out) {
    *out = s->opts;
    out->bind = NULL;
}

static bool valid_method(const char *m) {
    if (*m == '\0')
        return false;
    for (; *m; m++)
        if (*m < 'A' || *m > 'Z')
            return false;
    return true;
}

static bool same_route(const http_route *r, const char *method, const char *path, http_match m) {
    bool same_method = (r->method == NULL && method == NULL) ||
                       (r->method != NULL && method != NULL && strcmp(r->method, method) == 0);
    return same_method && r->match == m && strcmp(r->path, path) == 0;
}

static int check_route(const http_server *s, const char *method, const char *path, http_match match,
                       http_handler fn, strata_error *err) {
    if (s == NULL || path == NULL || fn == NULL || path[0] != '/' ||
        (match != HTTP_MATCH_EXACT && match != HTTP_MATCH_PREFIX))
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "a route needs a path starting with '/' and a handler");
    if (method != NULL && !valid_method(method))
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "route %s: bad method", path);
    if (s->state != HTTP_SERVER_NEW)
        return strata_error_set(err, STRATA_FAILED_PRECONDITION,
                                "route %s: routes must be added before start", path);
    for (size_t i = 0; i < s->n_routes; i++)
        if (same_route(&s->routes[i], method, path, match))
            return strata_error_set(err, STRATA_ALREADY_EXISTS, "route %s %s already exists",
                                    method ? method : "*", path);
    return 0;
}

static int add_route(http_server *s, const char *method, const char *path, http_match match,
                     http_handler fn, void *ctx, bool nonblocking, strata_error *err) {
    if (check_route(s, method, path, match, fn, err) != 0)
        return -1;
    if (STRATA_ARRAY_RESERVE_OR_OOM(s->routes, s->cap_routes, s->n_routes + 1, err) != 0)
        return -1;
    http_route *r = &s->routes[s->n_routes];
    memset(r, 0, sizeof *r);
    r->method = method ? strdup(method) : NULL;
    r->path = strdup(path);
    if ((method != NULL && r->method == NULL) || r->path == NULL) {
        free(r->method);
        free(r->path);
        return strata_error_oom(err);
    }
    r->path_len = strlen(path);
    r->match = match;
    r->fn = fn;
    r->ctx = ctx;
    r->nonblocking = nonblocking;
    s->n_routes++;
    return 0;
}

int http_server_route(http_server *s, const char *method, const char *path, http_match match,
                      http_handler fn, void *ctx, strata_error *err) {
    return add_route(s, method, path, match, fn, ctx, false, err);
}

int http_server_route_nonblocking(http_server *s, const char *method, const char *path,
                                  http_match match, http_handler fn, void *ctx, strata_error *err) {
    return add_route(s, method, path, match, fn, ctx, true, err);
}

int http_server_own(http_server *s, void *ptr, void (*free_fn)(void *), strata_error *err) {
    if (STRATA_ARRAY_RESERVE(s->owned, s->cap_owned, s->n_owned + 1) != 0) {
        free_fn(ptr);
        return strata_error_oom(err);
    }
    s->owned[s->n_owned++] = (http_owned){ptr, free_fn};
    return 0;
}

/* --- routing --------------------------------------------------------------------------------- */

static bool method_matches(const http_route *r, const char *method) {
    if (r->method == NULL || strcmp(r->method, method) == 0)
        return true;
    return strcmp(method, MHD_HTTP_METHOD_HEAD) == 0 && strcmp(r->method, "GET") == 0;
}

/* How well the route matches the path: 0 = not at all; exact beats any prefix, longer prefixes
 * beat shorter ones. */
static size_t path_score(const http_route *r, const char *path) {
    if (r->match == HTTP_MATCH_EXACT)
        return strcmp(r->path, path) == 0 ? SIZE_MAX : 0;
    return strncmp(r->path, path, r->path_len) == 0 ? r->path_len : 0;
}

/* The best route for the request, or NULL; *path_known says whether some route had the path. */
static http_route *find_route(http_server *s, const char *method, const char *path,
                              bool *path_known) {
    http_route *best = NULL;
    size_t best_score = 0;
    *path_known = false;
    for (size_t i = 0; i < s->n_routes; i++) {
        size_t score = path_score(&s->routes[i], path);
        if (score == 0)
            continue;
        *path_known = true;
        if (score > best_score && method_matches(&s->routes[i], method)) {
            best = &s->routes[i];
            best_score = score;
        }
    }
    return best;
}

/* "GET, HEAD, POST" for the routes that have the path. */
static void allowed_methods(const http_server *s, const char *path, char *out, size_t size) {
    out[0] = '\0';
    for (size_t i = 0; i < s->n_routes; i++) {
        const http_route *r = &s->routes[i];
        if (r->method == NULL || path_score(r, path) == 0 || strstr(out, r->method) != NULL)
            continue;
        size_t used = strlen(out);
        snprintf(out + used, size - used, "%s%s%s", used ? ", " : "", r->method,
                 strcmp(r->method, "GET") == 0 ? ", HEAD" : "");
    }
}

/* --- CORS ------------------------------------------------------------------------------------ */

/* Headers a browser page may read from an answer: gRPC-Web's and Connect's status and trailers. */
#define CORS_EXPOSED_HEADERS                                                                       \
    "grpc-status, grpc-message, grpc-status-details-bin, connect-content-encoding, "               \
    "trailer-warning, *"

/* The request's Origin when server options allow it, else NULL. */
static const char *allowed_origin(const http_server *s, const http_request *r) {
    if (s->opts.n_cors_origins == 0)
        return NULL;
    const char *origin = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Origin");
    if (origin == NULL || origin[0] == '\0')
        return NULL;
    for (size_t i = 0; i < s->opts.n_cors_origins; i++)
        if (strcmp(s->opts.cors_origins[i], "*") == 0 ||
            strcasecmp(s->opts.cors_origins[i], origin) == 0)
            return origin;
    return NULL;
}

static void add_cors_headers(const http_server *s, const http_request *r, http_response *resp) {
    const char *origin = allowed_origin(s, r);
    if (origin == NULL)
        return;
    (void)http_response_add_header(resp, "Access-Control-Allow-Origin", origin);
    (void)http_response_add_header(resp, "Vary", "Origin");
    (void)http_response_add_header(resp, "Access-Control-Expose-Headers", CORS_EXPOSED_HEADERS);
}

/* A CORS preflight: OPTIONS asking whether a request may follow. */
static bool is_preflight(const http_server *s, const http_request *r, const char *method) {
    return s->opts.n_cors_origins > 0 && strcmp(method, "OPTIONS") == 0 &&
           MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Access-Control-Request-Method") !=
               NULL;
}

static enum MHD_Result respond(http_request *r, http_response *resp);

static enum MHD_Result respond_preflight(http_server *s, http_request *r) {
    if (allowed_origin(s, r) == NULL) {
        http_response_error(&r->resp, r, 403, "origin not allowed (server.cors_allowed_origins)");
        return respond(r, &r->resp);
    }
    http_response_set_status(&r->resp, 204);
    (void)http_response_add_header(&r->resp, "Access-Control-Allow-Methods",
                                   "GET, HEAD, POST, OPTIONS");
    const char *asked =
        MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Access-Control-Request-Headers");
    if (asked != NULL && asked[0] != '\0')
        (void)http_response_add_header(&r->resp, "Access-Control-Allow-Headers", asked);
    (void)http_response_add_header(&r->resp, "Access-Control-Max-Age", "7200");
    return respond(r, &r->resp);
}

/* --- responding ------------------------------------------------------------------------------ */

static enum MHD_Result respond(http_request *r, http_response *resp) {
    if (resp->invalid || resp->status < 100 || resp->status > 599) {
        http_response_release(resp);
        http_response_error(resp, r, 500, "internal error: the handler built an invalid response");
    }
    add_cors_headers(r->server, r, resp);
    unsigned status = resp->status;
    struct MHD_Response *m = http_response_to_mhd(
        resp, atomic_load_explicit(&r->server->stopping, memory_order_relaxed));
    http_response_release(resp);
    if (m == NULL)
        return MHD_NO;
    enum MHD_Result rc = MHD_queue_response(r->conn, status, m);
    MHD_destroy_response(m);
    if (rc == MHD_YES) {
        r->responded = true;
        r->status = status;
    }
    return rc;
}

static enum MHD_Result respond_error(http_request *r, unsigned status, const char *message) {
    http_response_error(&r->resp, r, status, message);
    return respond(r, &r->resp);
}

static void begin_handling(http_server *s, http_request *r) {
    r->dispatched = true;
    http_conn_set_phase(s, r->conn_rec, HTTP_CONN_HANDLING, r->start_ns);
    pthread_mutex_lock(&s->lock);
    s->handling++;
    pthread_mutex_unlock(&s->lock);
}

/* Hands the request to its route: at once for a nonblocking route, else to a handler thread with
 * the connection suspended until the answer is complete. */
static enum MHD_Result dispatch(http_server *s, http_request *r) {
    bool path_known = false;
    http_route *route = find_route(s, r->method, r->path, &path_known);
    if (route == NULL && path_known) {
        char allow[256];
        allowed_methods(s, r->path, allow, sizeof allow);
        http_response_error(&r->resp, r, 405, "method not allowed");
        http_response_add_header(&r->resp, MHD_HTTP_HEADER_ALLOW, allow);
        return respond(r, &r->resp);
    }
    if (route == NULL)
        return respond_error(r, 404, "not found");
    r->route = route;
    r->rest =
        route->match == HTTP_MATCH_PREFIX ? r->path + route->path_len : r->path + strlen(r->path);
    begin_handling(s, r);
    if (route->nonblocking)
        return http_run_handler(r) ? respond(r, &r->resp) : MHD_YES;
    pthread_mutex_lock(&s->answer_lock);
    MHD_suspend_connection(r->conn);
    r->suspended = true;
    pthread_mutex_unlock(&s->answer_lock);
    if (http_workers_submit(&s->workers, r) != 0) {
        http_response_error(&r->resp, r, 503, "no handler thread could be started");
        (void)http_request_answered(r); /* resumes the connection, which queues it */
    }
    return MHD_YES;
}

/* The access handler again, after the connection was resumed (or, defensively, before). */
static enum MHD_Result on_resumed(http_server *s, http_request *r) {
    pthread_mutex_lock(&s->answer_lock);
    bool complete = r->returned && r->finished;
    if (!complete && !r->suspended) {
        MHD_suspend_connection(r->conn);
        r->suspended = true;
    }
    pthread_mutex_unlock(&s->answer_lock);
    return complete ? respond(r, &r->resp) : MHD_YES;
}

/* --- libmicrohttpd callbacks ----------------------------------------------------------------- */

static http_conn *conn_record(struct MHD_Connection *conn) {
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return info != NULL ? info->socket_context : NULL;
}

static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn) {
    http_server *s = cls;
    http_request *r = http_request_new(s, uri);
    if (r == NULL)
        return NULL;
    r->conn = conn;
    r->conn_rec = conn_record(conn);
    http_conn_request_line(s, r->conn_rec);
    pthread_mutex_lock(&s->lock);
    s->in_flight++;
    pthread_mutex_unlock(&s->lock);
    return r;
}

static bool content_length(struct MHD_Connection *conn, uint64_t *out) {
    const char *v = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
    if (v == NULL || *v < '0' || *v > '9')
        return false;
    char *end;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (errno != 0 || *end != '\0')
        n = UINT64_MAX;
    *out = n;
    return true;
}

/* A client that sent "Expect: 100-continue" waits for our answer before sending the body, so a
 * 413 can go out at once. Other clients are already sending it: answering and closing before
 * reading it would make the kernel reset the connection and lose the 413. */
static bool expects_continue(struct MHD_Connection *conn) {
    const char *v = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Expect");
    return v != NULL && strcasecmp(v, "100-continue") == 0;
}

static bool refused_for_stop(const http_server *s, const http_request *r) {
    return atomic_load_explicit(&s->stopping, memory_order_acquire) &&
           r->start_ns >= atomic_load_explicit(&s->stop_ns, memory_order_relaxed);
}

/* Mutual TLS: libmicrohttpd asks for a client certificate when it has a trust list but leaves
 * the verdict to us; without a certificate, or with one that does not verify, no route runs. */
static bool client_certificate_verified(struct MHD_Connection *conn) {
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_GNUTLS_SESSION);
    if (info == NULL || info->tls_session == NULL)
        return false;
    unsigned status = 0;
    if (gnutls_certificate_verify_peers2((gnutls_session_t)info->tls_session, &status) < 0)
        return false;
    return status == 0;
}

/* Refuses a request at its headers. A client waiting for "100 Continue" is answered at once;
 * otherwise its body is read and discarded first, as for a 413, so that the answer is not lost
 * to a reset. */
static enum MHD_Result refuse(http_request *r, unsigned status, const char *message) {
    if (expects_continue(r->conn))
        return respond_error(r, status, message);
    r->refused = status;
    /* a longer message is cut: the precision says so to the compiler */
    snprintf(r->refused_message, sizeof r->refused_message, "%.*s",
             (int)sizeof r->refused_message - 1, message);
    r->too_large = true;
    r->discarded = 0;
    strata_buffer_free(&r->body);
    return MHD_YES;
}

/* Paths served without authentication: the readiness probe and Prometheus' scrapes. */
static bool open_path(const char *path) {
    return strcmp(path, "/ready") == 0 || strcmp(path, "/metrics") == 0;
}

/* The subject (RFC 4514) of the client's first certificate, already verified; false if none. */
static bool client_subject(struct MHD_Connection *conn, char *out, size_t size) {
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_GNUTLS_SESSION);
    if (info == NULL || info->tls_session == NULL)
        return false;
    unsigned n = 0;
    const gnutls_datum_t *certs =
        gnutls_certificate_get_peers((gnutls_session_t)info->tls_session, &n);
    if (certs == NULL || n == 0)
        return false;
    gnutls_x509_crt_t crt;
    if (gnutls_x509_crt_init(&crt) < 0)
        return false;
    size_t len = size;
    bool ok = gnutls_x509_crt_import(crt, &certs[0], GNUTLS_X509_FMT_DER) >= 0 &&
              gnutls_x509_crt_get_dn(crt, out, &len) >= 0;
    gnutls_x509_crt_deinit(crt);
    return ok;
}

/* Authentication (common/auth.h) before any route sees the request. */
static bool authorized(http_server *s, http_request *r, strata_error *err) {
    const char *authorization =
        MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    const char *tenant_value =
        MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, STRATA_TENANT_HTTP_HEADER);
    char subject[1024];
    bool has_subject = s->tls_client_ca != NULL && client_subject(r->conn, subject, sizeof subject);
    strata_tenant tenant;
    strata_error tenant_err;
    strata_error_clear(err);
    bool tenant_ok =
        strata_tenant_from_header(tenant_value, tenant_value != NULL ? strlen(tenant_value) : 0,
                                  &tenant, &tenant_err) == 0;
    if (strata_auth_check(s->opts.auth, authorization,
                          authorization != NULL ? strlen(authorization) : 0,
                          has_subject ? subject : NULL, tenant_ok ? tenant.name : "", err) == 0)
        return true;
    if (!tenant_ok && err->code == STRATA_PERMISSION_DENIED)
        *err = tenant_err;
    return false;
}

static enum MHD_Result on_headers(http_server *s, http_request *r, const char *method) {
    r->started = true;
    r->method = method;
    http_conn_set_phase(s, r->conn_rec, HTTP_CONN_BODY, r->start_ns);
    http_request_set_peer(r);
    if (http_request_parse_uri(r) != 0)
        return respond_error(r, 400, "malformed request URI");
    if (is_preflight(s, r, method))
        return respond_preflight(s, r);
    if (s->tls_client_ca != NULL && !open_path(r->path) && !client_certificate_verified(r->conn))
        return refuse(r, 401, "a client certificate signed by the server's client CA is required");
    if (s->opts.auth != NULL && !open_path(r->path)) {
        strata_error aerr;
        if (!authorized(s, r, &aerr))
            return refuse(r, http_status_from_strata(aerr.code), aerr.message);
    }
    if (refused_for_stop(s, r))
        return respond_error(r, 503, "server is shutting down");
    uint64_t length = 0;
    if (content_length(r->conn, &length)) {
        if (length > s->opts.max_body_bytes &&
            (expects_continue(r->conn) || length / 2 > s->opts.max_body_bytes))
            return respond_error(r, 413, "request body exceeds the size limit");
        if (length > s->opts.max_body_bytes) {
            r->too_large = true; /* read and discard it, then answer 413 */
            return MHD_YES;
        }
        /* best effort; appends grow the buffer anyway */
        (void)strata_buffer_reserve(&r->body, length < (4u << 20) ? (size_t)length : (4u << 20));
    }
    return MHD_YES;
}

static enum MHD_Result on_body(http_server *s, http_request *r, const char *data, size_t *size) {
    size_t n = *size;
    *size = 0;
    size_t max = s->opts.max_body_bytes;
    if (!r->too_large && n > max - r->body.len) {
        r->too_large = true;
        r->discarded = r->body.len;
        strata_buffer_free(&r->body);
    }
    if (r->too_large) {
        r->discarded += n;
        return r->discarded / 2 > max ? MHD_NO : MHD_YES;
    }
    return strata_buffer_append(&r->body, data, n) == 0 ? MHD_YES : MHD_NO;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls) {
    (void)conn;
    (void)url;
    (void)version;
    http_server *s = cls;
    http_request *r = *con_cls;
    if (r == NULL)
        return MHD_NO; /* on_uri ran out of memory */
    if (r->responded) {
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (r->dispatched)
        return on_resumed(s, r);
    if (!r->started)
        return on_headers(s, r, method);
    if (*upload_data_size > 0)
        return on_body(s, r, upload_data, upload_data_size);
    if (r->refused != 0)
        return respond_error(r, r->refused, r->refused_message);
    if (r->too_large)
        return respond_error(r, 413, "request body exceeds the size limit");
    return dispatch(s, r);
}

static void record_access(http_server *s, const http_request *r) {
    http_route *route = r->route ? r->route : &s->unmatched;
    unsigned cls = r->status / 100 < HTTP_STATUS_CLASSES ? r->status / 100 : 0;
    metrics_counter *c = atomic_load_explicit(&route->requests[cls], memory_order_acquire);
    if (c == NULL) {
        c = metrics_counter_vec_with(s->requests_total,
                                     (const char *[]){route->path, status_class_names[cls]});
        atomic_store_explicit(&route->requests[cls], c, memory_order_release);
    }
    metrics_histogram *h = atomic_load_explicit(&route->duration, memory_order_acquire);
    if (h == NULL) {
        h = metrics_histogram_vec_with(s->duration_seconds, (const char *[]){route->path});
        atomic_store_explicit(&route->duration, h, memory_order_release);
    }
    metrics_counter_inc(c);
    metrics_histogram_observe_ns(h, strata_monotonic_ns() - r->start_ns);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    (void)conn;
    http_server *s = cls;
    http_request *r = *con_cls;
    if (r == NULL)
        return;
    *con_cls = NULL;
    if (r->responded)
        record_access(s, r);
    if (toe == MHD_REQUEST_TERMINATED_COMPLETED_OK)
        http_conn_set_phase(s, r->conn_rec, HTTP_CONN_IDLE, r->start_ns);
    http_request_free(r);
    pthread_mutex_lock(&s->lock);
    if (--s->in_flight == 0)
        pthread_cond_broadcast(&s->idle);
    pthread_mutex_unlock(&s->lock);
}

/* --- start and stop -------------------------------------------------------------------------- */

int http_server_start(http_server *s, strata_error *err) {
    if (s == NULL || s->state != HTTP_SERVER_NEW)
        return strata_error_set(err, STRATA_FAILED_PRECONDITION, "server already started");
    if (http_conns_start_sweeper(s, err) != 0)
        return -1;
    /* I/O threads with their own epoll sets (see http.h); handlers run elsewhere, their
     * connections suspended meanwhile. */
    unsigned flags =
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ITC;
    unsigned per_ip = s->opts.max_connections_per_address == HTTP_UNLIMITED
                          ? 0
                          : s->opts.max_connections_per_address;
    struct MHD_OptionItem tls[4] = {{MHD_OPTION_END, 0, NULL}};
    if (s->tls_cert != NULL) {
        flags |= MHD_USE_TLS;
        tls[0] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, s->tls_cert};
        tls[1] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, s->tls_key};
        if (s->tls_client_ca != NULL)
            tls[2] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_TRUST, 0, s->tls_client_ca};
    }
    s->daemon = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, s, MHD_OPTION_LISTEN_SOCKET, s->listen_fd,
        MHD_OPTION_THREAD_POOL_SIZE, s->opts.io_threads, MHD_OPTION_CONNECTION_TIMEOUT,
        s->opts.connection_timeout_s, MHD_OPTION_CONNECTION_LIMIT, s->opts.max_connections,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_ip, MHD_OPTION_URI_LOG_CALLBACK, on_uri, s,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_NOTIFY_CONNECTION,
        http_conns_notify, s, MHD_OPTION_ARRAY, tls, MHD_OPTION_END);
    if (s->daemon == NULL) {
        http_conns_stop_sweeper(s);
        return strata_error_set(
            err, STRATA_INTERNAL, "cannot start the HTTP server on port %u%s", (unsigned)s->port,
            s->tls_cert != NULL ? " (or the TLS certificate and key are not valid PEM)" : "");
    }
    s->listen_fd = -1; /* owned by libmicrohttpd until quiesced */
    s->state = HTTP_SERVER_RUNNING;
    return 0;
}

/* Waits until *count is 0, up to deadline (NULL: without limit); s->lock held. */
static void wait_for_zero(http_server *s, const size_t *count, const struct timespec *deadline) {
    while (*count > 0) {
        if (deadline == NULL)
            pthread_cond_wait(&s->idle, &s->lock);
        else if (pthread_cond_timedwait(&s->idle, &s->lock, deadline) == ETIMEDOUT)
            break;
    }
}

static void wait_for_in_flight(http_server *s) {
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += s->opts.drain_timeout_ms / 1000;
    deadline.tv_nsec += (long)(s->opts.drain_timeout_ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&s->lock);
    wait_for_zero(s, &s->in_flight, &deadline);
    /* Handlers are never interrupted, and libmicrohttpd must not stop while a connection waits
     * suspended for one: every answer is completed (and its connection resumed) first. */
    wait_for_zero(s, &s->handling, NULL);
    pthread_mutex_unlock(&s->lock);
}

void http_server_stop(http_server *s) {
    if (s == NULL || s->state != HTTP_SERVER_RUNNING)
        return;
    atomic_store_explicit(&s->stop_ns, strata_monotonic_ns(), memory_order_relaxed);
    atomic_store_explicit(&s->stopping, true, memory_order_release);
    MHD_socket fd = MHD_quiesce_daemon(s->daemon);
    if (fd != MHD_INVALID_SOCKET)
        close(fd);
    wait_for_in_flight(s);
    MHD_stop_daemon(s->daemon);
    s->daemon = NULL;
    http_conns_stop_sweeper(s);
    s->state = HTTP_SERVER_STOPPED;
}

void http_server_free(http_server *s) {
    if (s == NULL)
        return;
    http_server_stop(s);
    if (s->listen_fd >= 0)
        close(s->listen_fd);
    http_workers_destroy(&s->workers);
    for (size_t i = 0; i < s->n_routes; i++) {
        free(s->routes[i].method);
        free(s->routes[i].path);
    }
    free(s->routes);
    for (size_t i = 0; i < s->n_owned; i++)
        s->owned[i].free_fn(s->owned[i].ptr);
    free(s->owned);
    http_conns_destroy(s);
    destroy_sync(s);
    free(s->tls_cert);
    free(s->tls_key);
    free(s->tls_client_ca);
    free(s);
}
