/*
 * http.h - the HTTP server every Strata service embeds (UI, JSON API, /metrics, /ready), built on
 * GNU libmicrohttpd.
 *
 * Threading. The server runs libmicrohttpd with a thread per connection
 * (MHD_USE_THREAD_PER_CONNECTION, one polling thread accepting): a connection's requests, which
 * HTTP/1.1 serves one after another anyway, run their handlers on its own thread, so a handler that
 * takes seconds (a query over a day of blocks) delays nothing but its own connection. An earlier
 * version ran a fixed pool of workers, each serving many connections from its own epoll set; a
 * slow handler there stalled every connection its worker held, and when the pool was busy with
 * queries, /ready went unanswered and Kubernetes' probes failed. The cost of a thread per
 * connection is a thread (and its stack, mostly untouched) per open connection, bounded by
 * max_connections; idle keep-alive connections are closed after connection_timeout_s. Handlers that
 * must be bounded in number (query merges) take their own limits (the querier shares its
 * query_threads slots between HTTP and gRPC).
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
 * Stop. http_server_stop() stops accepting (MHD_quiesce_daemon), answers requests that arrive on
 * open keep-alive connections with 503 and "Connection: close", waits up to drain_timeout_ms for
 * requests in flight to finish and be sent, then stops libmicrohttpd, which closes idle
 * connections and joins its threads.
 *
 * Metrics. Every response is counted in http_requests_total{handler,code} and timed in
 * http_request_duration_seconds{handler} (request line received to response sent), in the
 * registry given in the options. handler is the route's path pattern ("unmatched" for 404s), and
 * code the status class ("2xx"), which keeps the number of series bounded.
 *
 * Thread safety: handlers run concurrently on the connections' threads. Server functions are
 * called by the owner; http_server_stop() may be called from any thread other than a handler's.
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
#define HTTP_DEFAULT_DRAIN_TIMEOUT_MS 10000
#define HTTP_DEFAULT_MAX_CONNECTIONS 1024

typedef struct http_server http_server;
typedef struct http_request http_request;
typedef struct http_response http_response;

typedef struct http_server_options {
    const char *bind;              /* "host:port", "[::1]:port", ":port"; port 0 = pick a free one.
                                      NULL = "127.0.0.1:0" */
    size_t max_body_bytes;         /* 0 = HTTP_DEFAULT_MAX_BODY_BYTES */
    unsigned connection_timeout_s; /* idle connections are closed after this; 0 = default */
    unsigned drain_timeout_ms;     /* how long stop waits for requests in flight; 0 = default */
    unsigned max_connections;      /* 0 = HTTP_DEFAULT_MAX_CONNECTIONS */
    metrics_registry *metrics;     /* access metrics; NULL = metrics_default_registry() */
} http_server_options;

typedef enum http_match {
    HTTP_MATCH_EXACT = 0,
    HTTP_MATCH_PREFIX = 1, /* path starts with the pattern; patterns should end with '/' */
} http_match;

/* Handles one request. Runs on its connection's thread; must fill resp and return. */
typedef void (*http_handler)(void *ctx, const http_request *req, http_response *resp);

/* Readiness: returns true when ready; otherwise writes a one-line reason into reason. */
typedef bool (*http_ready_fn)(void *ctx, char *reason, size_t reason_size);

/* --- server ---------------------------------------------------------------------------------- */

/* Validates options and binds the listening socket, so the port is known (and bind errors are
 * reported) before start. Errors: INVALID_ARGUMENT (bad address), UNAVAILABLE (cannot bind). */
http_server *http_server_new(const http_server_options *opts, strata_error *err);
/* The bound port (the one picked when the options said 0). */
uint16_t http_server_port(const http_server *s);

/* Registers a route. method NULL = any method. path must start with '/'. Fails with
 * FAILED_PRECONDITION after start, ALREADY_EXISTS for a duplicate (method, path, match). */
int http_server_route(http_server *s, const char *method, const char *path, http_match match,
                      http_handler fn, void *ctx, strata_error *err);
/* GET /metrics renders reg (Prometheus text format). */
int http_server_add_metrics(http_server *s, metrics_registry *reg, strata_error *err);
/* GET /ready: 200 "ready\n" when fn says so, else 503 with the reason. */
int http_server_add_ready(http_server *s, http_ready_fn fn, void *ctx, strata_error *err);
/* GET (and HEAD) under prefix (ending in '/') serve files from root_dir; see the top comment. */
int http_server_serve_static(http_server *s, const char *prefix, const char *root_dir,
                             strata_error *err);

/* Starts accepting connections (the polling thread; a thread per connection from then on). */
int http_server_start(http_server *s, strata_error *err);
/* Graceful stop; see the top comment. Idempotent; a no-op if never started. */
void http_server_stop(http_server *s);
/* Stops if needed and frees everything. */
void http_server_free(http_server *s);

/* --- request (valid during the handler call) ------------------------------------------------- */

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

/* Content type for a file name by its extension; "application/octet-stream" if unknown. */
const char *http_content_type_for(const char *filename);

#endif
