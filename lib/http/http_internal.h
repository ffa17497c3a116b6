/*
 * http_internal.h - structures shared by the HTTP implementation files: the server and the MHD
 * callbacks (http_server.c), request parsing and responses (http_request.c), static files
 * (http_static.c) and the /metrics and /ready helpers (http_builtin.c). Not part of the contract.
 */
#ifndef STRATA_HTTP_INTERNAL_H
#define STRATA_HTTP_INTERNAL_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>

#include "http/http.h"

enum { HTTP_STATUS_CLASSES = 6 }; /* index 1..5 = 1xx..5xx, 0 = anything else */

typedef struct http_route {
    char *method; /* NULL = any */
    char *path;
    size_t path_len;
    http_match match;
    http_handler fn;
    void *ctx;
    /* Children of the access metrics, looked up on first use and cached. */
    _Atomic(metrics_counter *) requests[HTTP_STATUS_CLASSES];
    _Atomic(metrics_histogram *) duration;
} http_route;

/* Something the server frees with itself (contexts of built-in routes). */
typedef struct http_owned {
    void *ptr;
    void (*free_fn)(void *ptr);
} http_owned;

typedef enum http_server_state {
    HTTP_SERVER_NEW,
    HTTP_SERVER_RUNNING,
    HTTP_SERVER_STOPPED,
} http_server_state;

struct http_server {
    http_server_options opts;
    int listen_fd;
    uint16_t port;
    struct MHD_Daemon *daemon;
    http_server_state state;
    http_route *routes;
    size_t n_routes;
    http_owned *owned;
    size_t n_owned;
    http_route unmatched; /* metrics for requests no route took */
    metrics_counter_vec *requests_total;
    metrics_histogram_vec *duration_seconds;
    atomic_bool stopping;
    _Atomic int64_t stop_ns; /* requests that started after this get 503 */
    pthread_mutex_t lock;    /* in_flight */
    pthread_cond_t idle;
    size_t in_flight;
};

typedef struct http_query_param {
    char *key;
    char *value;
} http_query_param;

struct http_request {
    http_server *server;
    struct MHD_Connection *conn;
    int64_t start_ns;
    bool started;    /* the access handler has seen this request */
    bool too_large;  /* body over the limit: being discarded */
    bool responded;  /* a response was queued */
    unsigned status; /* status of the queued response */
    char *raw_uri;
    const char *method;  /* owned by MHD, valid during the request */
    char *path;          /* decoded */
    const char *rest;    /* points into path */
    char *query_storage; /* decoded query, split in place */
    http_query_param *params;
    size_t n_params;
    strata_buffer body;
    uint64_t discarded;
    http_route *route; /* the route that answered, or NULL */
    char peer[64];
};

struct http_response {
    unsigned status;
    char *content_type;
    char **headers; /* name, value, name, value, ... */
    size_t n_headers;
    bool invalid; /* a setter failed: send 500 instead */
    strata_buffer body;
    int fd; /* -1 = send body */
    uint64_t file_size;
};

/* http_request.c */
http_request *http_request_new(http_server *s, const char *uri);
void http_request_free(http_request *r);
/* Splits and decodes raw_uri into path and query; -1 if malformed. */
int http_request_parse_uri(http_request *r);
void http_request_set_peer(http_request *r);
void http_response_init(http_response *resp);
void http_response_release(http_response *resp);
/* Builds the MHD response (consuming body or fd); NULL on failure. */
struct MHD_Response *http_response_to_mhd(http_response *resp, bool close_connection);

/* http_static.c: the request path under a static root as "a/b/c" (no dot segments, no hidden
 * names, never absolute); -1 if refused or longer than size. */
int http_static_relative_path(const char *rest, char *out, size_t size);

/* http_builtin.c */
int http_server_own(http_server *s, void *ptr, void (*free_fn)(void *), strata_error *err);

#endif
