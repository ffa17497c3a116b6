/*
 * http.h - the HTTP server every Strata service embeds (UI, JSON API, /metrics, /ready), built on
 * GNU libmicrohttpd.
 *
 * Threading. libmicrohttpd runs io_threads I/O threads (MHD_USE_EPOLL with a thread pool), each
 * serving its share of the connections from its own epoll set, so an open connection costs a few
 * KiB, not a thread. An I/O thread reads requests and writes responses and never runs a handler
 * that could block: once a request is complete its connection is suspended
 * (MHD_suspend_connection) and the request goes to a handler thread (at most handler_threads,
 * started as they are needed); when the handler has answered, the connection is resumed and the
 * response goes out from the I/O thread. A handler that blocks (a long query) holds a handler
 * thread, never an I/O thread. Handlers registered with http_server_route_nonblocking run on the
 * I/O thread itself, without that hop: they must return at once, answering or deferring the
 * answer (http_response_defer), which another thread completes later (http_deferred_finish); the
 * querier's merges are answered that way from its query threads. /ready is a nonblocking route,
 * so it answers even while every handler thread is busy. Earlier versions ran a fixed pool of
 * workers with their own epoll sets (a slow handler stalled every connection its worker held),
 * then a thread per connection (1,024 connections trickling headers took every thread, and /ready
 * went unanswered).
 *
 * Limits, all in http_server_options, defaults in the HTTP_DEFAULT_* macros below. At most
 * max_connections open connections, and max_connections_per_address from one IP address: the
 * excess is closed at once, before anything is read (MHD_OPTION_PER_IP_CONNECTION_LIMIT). Each
 * needs a file descriptor: the process's RLIMIT_NOFILE must be above max_connections (cmd/strata
 * raises its soft limit to the hard one). Deadlines a client cannot extend by trickling bytes
 * (libmicrohttpd's own timeout restarts on every byte): a request's headers must be complete
 * within header_timeout_ms of the connection's accept, or for a later request on a kept-alive
 * connection of its request line; the whole request, body included, within read_timeout_ms of its
 * request line; a kept-alive connection must start its next request line within
 * connection_timeout_s of its last response. A connection whose request is being handled has no
 * deadline. A sweeper thread checks the deadlines (every quarter of the header timeout, at most
 * every 250 ms) and shuts the socket of each expired connection down, which libmicrohttpd then
 * closes without an answer. libmicrohttpd's inactivity timeout (connection_timeout_s without a
 * byte either way) still applies, for a client that stops reading its response.
 *
 * Requests. Routes are registered before http_server_start() and are immutable afterwards, so
 * lookups take no lock. A route is (method or NULL for any, path, exact or prefix match); a GET
 * route also answers HEAD. Exact routes win over prefix routes, longer prefixes over shorter ones.
 * A path that matches some route but not its method gets 405 with an Allow header; anything else
 * gets 404. Error bodies are JSON ({"error":"...","status":404}) when the client's Accept header
 * asks for application/json, plain text otherwise.
 *
 * The request line is decoded by this module, not by libmicrohttpd: the path and query are
 * percent-decoded strictly (a bad escape or an encoded NUL is a 400), '+' means a space only in
 * the query, and repeated query keys keep all their values. The body is collected in full,
 * chunked or not, before the handler runs. A body over max_body_bytes is answered 413 and never
 * handed over truncated. When the client waits for "100 Continue" the 413 goes out before the
 * body is sent; otherwise the body is read and discarded so the 413 arrives intact (a kernel
 * reset would lose it), as long as it stays under twice the limit; past that the server answers
 * 413 or drops the connection without reading further.
 *
 * Responses. The handler sets status (default 200), content type (default text/plain), extra
 * headers and either fills the body buffer or hands over a file descriptor (sent with sendfile).
 * Header names and values containing CR, LF or NUL are refused.
 *
 * Static files. http_server_serve_static() serves a directory under a prefix: content type by
 * extension, index.html for directories (after a 301 to the slash-terminated URL), 404 for
 * missing files. Traversal is refused at two levels: any "." or ".." path segment (after
 * decoding, so %2e%2e too) or a segment starting with '.' is a 404, and the file is opened with
 * openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS) relative to the root, so neither an absolute
 * path nor a symlink can leave the root (kernels without openat2 fall back to a realpath prefix
 * check).
 *
 * Metrics. Every response is counted in http_requests_total{handler,code} and timed in
 * http_request_duration_seconds{handler} (request line received to response sent), in the
 * registry given in the options. handler is the route's path pattern ("unmatched" for 404s), and
 * code the status class ("2xx"), which keeps the number of series bounded. http_open_connections
 * counts the connections open now and http_connections_timed_out_total{phase} those closed by a
 * deadline (phase "headers", "body" or "idle").
 *
 * Stop. http_server_stop() stops accepting (MHD_quiesce_daemon), answers requests that arrive on
 * open keep-alive connections with 503 and "Connection: close", waits up to drain_timeout_ms for
 * requests in flight to finish and be sent, and in any case for every handler to return and every
 * deferred answer to be finished (handlers are never interrupted), then stops libmicrohttpd, which
 * closes the remaining connections and joins its threads.
 *
 * Thread safety: handlers run concurrently on handler threads (nonblocking ones on I/O threads).
 * Server functions are called by the owner; http_server_stop() may be called from any thread other
 * than a handler's, and http_deferred_finish() from any thread.
 */
#ifndef STRATA_HTTP_H
#define STRATA_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buffer.h"
#include "common/error.h"
#include "metrics/metrics.h"

#define HTTP_DEFAULT_MAX_BODY_BYTES ((size_t)64 << 20)
#define HTTP_DEFAULT_CONNECTION_TIMEOUT_S 60
#define HTTP_DEFAULT_HEADER_TIMEOUT_MS 10000
#define HTTP_DEFAULT_READ_TIMEOUT_MS 120000
#define HTTP_DEFAULT_DRAIN_TIMEOUT_MS 10000
#define HTTP_DEFAULT_MAX_CONNECTIONS 16384
#define HTTP_DEFAULT_MAX_CONNECTIONS_PER_ADDRESS 256
#define HTTP_DEFAULT_IO_THREADS 2
#define HTTP_DEFAULT_HANDLER_THREADS 16
/* max_connections_per_address: no cap per address. */
#define HTTP_UNLIMITED UINT32_MAX

typedef struct http_server http_server;
typedef struct http_request http_request;
typedef struct http_response http_response;
typedef struct http_deferred http_deferred;

/* Zero in any field means its default. */
typedef struct http_server_options {
    const char *bind;                     /* "host:port", "[::1]:port", ":port"; port 0 = pick a
                                             free one. NULL = "127.0.0.1:0" */
    size_t max_body_bytes;                /* HTTP_DEFAULT_MAX_BODY_BYTES */
    unsigned connection_timeout_s;        /* idle keep-alive connections are closed after this */
    unsigned header_timeout_ms;           /* headers complete within this (see the top) */
    unsigned read_timeout_ms;             /* whole request within this of its request line */
    unsigned drain_timeout_ms;            /* how long stop waits for requests in flight */
    unsigned max_connections;             /* open connections in all */
    unsigned max_connections_per_address; /* from one IP address; HTTP_UNLIMITED = no cap */
    unsigned io_threads;                  /* libmicrohttpd's I/O threads */
    unsigned handler_threads;             /* most handlers running at once */
    metrics_registry *metrics;            /* access metrics; NULL = metrics_default_registry() */
    /* TLS (HTTPS): PEM files of the certificate (chain) and key, both or neither; read by
     * http_server_new. tls_client_ca_file, optional, makes it mutual TLS: a request from a
     * connection without a client certificate verified against these CAs is answered 401 before
     * any route sees it, except GET /ready and /metrics (kubelet probes and Prometheus scrapes
     * carry no client certificate). */
    const char *tls_cert_file;
    const char *tls_key_file;
    const char *tls_client_ca_file;
    /* Authentication (common/auth.h) before every route but GET /ready and /metrics (probes and
     * Prometheus scrapes stay open): no known bearer token ("Authorization: Bearer") or
     * verified client certificate is 401, a tenant (X-Scope-OrgID) outside the credential's list
     * 403. NULL: none. Must outlive the server. */
    const struct strata_auth *auth;
    /* CORS: origins (e.g. "http://grafana.example:3000", or "*" for any) whose pages may call
     * this server from a browser. A preflight (OPTIONS with Access-Control-Request-Method) is
     * answered by the server itself, before authentication and any route (it carries no
     * credentials and returns no data): 204 with the allowed methods and the requested headers
     * for an allowed origin, 403 otherwise; every response to an allowed origin carries
     * Access-Control-Allow-Origin and exposes the gRPC-Web and Connect headers. None (the
     * default): no CORS headers, so only same-origin pages can read answers. The strings must
     * outlive the server. */
    const char *const *cors_origins;
    size_t n_cors_origins;
} http_server_options;

typedef enum http_match {
    HTTP_MATCH_EXACT = 0,
    HTTP_MATCH_PREFIX = 1, /* path starts with the pattern; patterns should end with '/' */
} http_match;

/* Handles one request: fills resp and returns, or defers the answer (http_response_defer). Runs on
 * a handler thread (on an I/O thread for nonblocking routes). */
typedef void (*http_handler)(void *ctx, const http_request *req, http_response *resp);

/* Readiness: returns true when ready; otherwise writes a one-line reason into reason. Runs on an
 * I/O thread: it must not block (read state that others keep up to date). */
typedef bool (*http_ready_fn)(void *ctx, char *reason, size_t reason_size);

/* --- server ---------------------------------------------------------------------------------- */

/* Validates options and binds the listening socket, so the port is known (and bind errors are
 * reported) before start. Errors: INVALID_ARGUMENT (bad address), UNAVAILABLE (cannot bind). */
http_server *http_server_new(const http_server_options *opts, strata_error *err);
/* The bound port (the one picked when the options said 0). */
uint16_t http_server_port(const http_server *s);
/* The options in effect, defaults filled in (bind is NULL: the caller's string is not kept). */
void http_server_get_options(const http_server *s, http_server_options *out);

/* Registers a route. method NULL = any method. path must start with '/'. Fails with
 * FAILED_PRECONDITION after start, ALREADY_EXISTS for a duplicate (method, path, match). */
int http_server_route(http_server *s, const char *method, const char *path, http_match match,
                      http_handler fn, void *ctx, strata_error *err);
/* The same for a handler that never blocks: it runs on the I/O thread that read the request and
 * must return at once, having answered or deferred the answer to another thread. */
int http_server_route_nonblocking(http_server *s, const char *method, const char *path,
                                  http_match match, http_handler fn, void *ctx, strata_error *err);
/* GET /metrics renders reg (Prometheus text format). */
int http_server_add_metrics(http_server *s, metrics_registry *reg, strata_error *err);
/* GET /ready: 200 "ready\n" when fn says so, else 503 with the reason. A nonblocking route. */
int http_server_add_ready(http_server *s, http_ready_fn fn, void *ctx, strata_error *err);
/* GET (and HEAD) under prefix (ending in '/') serve files from root_dir; see the top comment. */
int http_server_serve_static(http_server *s, const char *prefix, const char *root_dir,
                             strata_error *err);

/* Starts accepting connections (the I/O threads and the deadline sweeper; handler threads start
 * as requests need them). */
int http_server_start(http_server *s, strata_error *err);
/* Graceful stop; see the top comment. Idempotent; a no-op if never started. */
void http_server_stop(http_server *s);
/* Stops if needed and frees everything. */
void http_server_free(http_server *s);

/* --- request (valid during the handler call, or until a deferred answer is finished) --------- */

const char *http_request_method(const http_request *r);
/* Percent-decoded path, without the query. */
const char *http_request_path(const http_request *r);
/* For prefix routes the decoded path after the prefix; "" for exact routes. */
const char *http_request_path_rest(const http_request *r);
/* First value of a query parameter (decoded), "" for a key without '=', or NULL if absent. */
const char *http_request_query(const http_request *r, const char *key);
/* Writes up to max values of key, in order, into values; returns how many the query holds. */
size_t http_request_query_all(const http_request *r, const char *key, const char **values,
                              size_t max);
/* Header value by case-insensitive name, or NULL. */
const char *http_request_header(const http_request *r, const char *name);
/* The whole body (len 0 if none). Not NUL-terminated. */
const uint8_t *http_request_body(const http_request *r, size_t *len);
/* Client address as "ip:port" ("[ip6]:port" for IPv6). */
const char *http_request_peer(const http_request *r);

/* --- response -------------------------------------------------------------------------------- */

void http_response_set_status(http_response *resp, unsigned status);
/* Copies type; -1 (INVALID_ARGUMENT) if it holds CR, LF or other control characters. */
int http_response_set_content_type(http_response *resp, const char *type);
/* Adds an extra header (copied). Refuses invalid names and values with CR/LF. */
int http_response_add_header(http_response *resp, const char *name, const char *value);
/* The body buffer for the handler to fill. */
strata_buffer *http_response_body(http_response *resp);
/* Sends size bytes of fd instead of the body buffer. Takes ownership of fd: it is closed after
 * sending, or at once if this fails. */
int http_response_send_file(http_response *resp, int fd, uint64_t size);
/* Sets status and an error body (JSON or text, chosen by the request's Accept header). */
void http_response_error(http_response *resp, const http_request *req, unsigned status,
                         const char *message);
/* Maps a Strata error to its HTTP status (INVALID_ARGUMENT 400, NOT_FOUND 404, ...) and sets the
 * error body with its message. */
void http_response_strata_error(http_response *resp, const http_request *req,
                                const strata_error *err);
unsigned http_status_from_strata(strata_status code);

/* --- deferred answers ------------------------------------------------------------------------ */

/* Called by a handler, with the resp it was given, to answer later from another thread: the
 * handler then returns without answering, and the request and response stay valid (and the
 * connection waits, holding no thread) until http_deferred_finish(d). Never fails; calling it
 * again returns the same handle. */
http_deferred *http_response_defer(http_response *resp);
const http_request *http_deferred_request(http_deferred *d);
http_response *http_deferred_response(http_deferred *d);
/* Sends the response the deferred answer's resp now holds; d is invalid afterwards. Any thread,
 * once per handle; also allowed before the handler has returned. */
void http_deferred_finish(http_deferred *d);

/* Content type for a file name by its extension; "application/octet-stream" if unknown. */
const char *http_content_type_for(const char *filename);

#endif
