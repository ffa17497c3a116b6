/*
 * http_internal.h - structures shared by the HTTP implementation files: the server, routing and
 * the MHD callbacks (http_server.c), handler threads and deferred answers (http_handlers.c),
 * connection deadlines and their sweeper (http_conns.c), request parsing and responses
 * (http_request.c), static files (http_static.c) and the /metrics and /ready helpers
 * (http_builtin.c). Not part of the contract.
 *
 * Locks, never nested except as written: conns_lock (connection records; taken from MHD's
 * connection callbacks and the sweeper), lock (requests in flight and handlers running; the
 * handler-pool queue), answer_lock (a request's finished / suspended flags; held across
 * MHD_suspend_connection and MHD_resume_connection so that a resume never precedes its suspend).
 * No MHD callback runs while answer_lock is held by the same thread.
 */
#ifndef STRATA_HTTP_INTERNAL_H
#define STRATA_HTTP_INTERNAL_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>

#include "http/http.h"

enum { HTTP_STATUS_CLASSES = 6 }; /* index 1..5 = 1xx..5xx, 0 = anything else */

typedef struct http_route {
    char *method; /* NULL = any */
    char *path;
    size_t path_len;
    http_match match;
    http_handler fn;
    void *ctx;
    bool nonblocking; /* runs on the I/O thread */
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

/* What a connection is waiting for, which decides its deadline. */
typedef enum http_conn_phase {
    HTTP_CONN_HEADERS,  /* a request's headers: header deadline */
    HTTP_CONN_BODY,     /* the rest of its body: read deadline */
    HTTP_CONN_HANDLING, /* a handler's answer, then the response going out: none */
    HTTP_CONN_IDLE,     /* kept alive, no request yet: idle deadline */
    HTTP_CONN_PHASES
} http_conn_phase;

/* One open connection (MHD's socket context), on the server's list under conns_lock. */
typedef struct http_conn {
    struct http_conn *prev, *next;
    int fd;
    struct sockaddr_storage peer;
    socklen_t peer_len;
    http_conn_phase phase;
    int64_t deadline_ns; /* INT64_MAX = none */
    unsigned requests;   /* request lines seen */
    bool cut;            /* the sweeper shut it down */
} http_conn;

/* Handler threads, started as requests need them (http_handlers.c). */
typedef struct http_workers {
    pthread_mutex_t mu;
    pthread_cond_t work;
    http_request *head, *tail; /* queued requests */
    size_t queued;
    size_t idle; /* threads waiting for work */
    pthread_t *threads;
    size_t n_threads, max_threads;
    bool stopping;
} http_workers;

struct http_server {
    http_server_options opts;
    char *tls_cert, *tls_key, *tls_client_ca; /* PEM text; NULL without TLS / client CA */
    int listen_fd;
    uint16_t port;
    struct MHD_Daemon *daemon;
    http_server_state state;
    http_route *routes;
    size_t n_routes, cap_routes;
    http_owned *owned;
    size_t n_owned, cap_owned;
    http_route unmatched; /* metrics for requests no route took */
    metrics_counter_vec *requests_total;
    metrics_histogram_vec *duration_seconds;
    metrics_gauge *open_connections;
    metrics_counter *timed_out[HTTP_CONN_PHASES]; /* by the phase that timed out (not HANDLING) */
    atomic_bool stopping;
    _Atomic int64_t stop_ns; /* requests that started after this get 503 */
    pthread_mutex_t lock;    /* in_flight, handling */
    pthread_cond_t idle;     /* in_flight or handling dropped to 0 */
    size_t in_flight;        /* requests between request line and completion */
    size_t handling;         /* requests whose handler has not finished the answer */
    pthread_mutex_t answer_lock;
    http_workers workers;
    /* connection records and their sweeper */
    pthread_mutex_t conns_lock;
    pthread_cond_t sweep_wake;
    http_conn *conns;
    bool sweeper_started, sweeper_stop;
    pthread_t sweeper;
};

typedef struct http_query_param {
    char *key;
    char *value;
} http_query_param;

struct http_response {
    unsigned status;
    char *content_type;
    char **headers; /* name, value, name, value, ... */
    size_t n_headers;
    size_t cap_headers; /* in entries: 2 x n_headers used */
    bool invalid;       /* a setter failed: send 500 instead */
    strata_buffer body;
    int fd; /* -1 = send body */
    uint64_t file_size;
};

struct http_request {
    http_server *server;
    struct MHD_Connection *conn;
    http_conn *conn_rec; /* NULL if it could not be allocated: no deadlines then */
    int64_t start_ns;
    bool started;     /* the access handler has seen this request */
    bool too_large;   /* body over the limit, or refused (below): being discarded */
    unsigned refused; /* 401/403/400 decided at the headers (auth), answered once the body is
                         discarded; 0: not refused */
    char refused_message[256];
    bool dispatched; /* given to its handler */
    bool deferred;   /* the handler deferred the answer */
    bool returned;   /* the handler has returned (answer_lock) */
    bool finished;   /* the answer is complete (answer_lock) */
    bool suspended;  /* the connection is suspended waiting for it (answer_lock) */
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
    http_response resp;
    http_request *next_queued; /* handler-pool queue */
    char peer[64];
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

/* http_handlers.c */
int http_workers_init(http_workers *w, size_t max_threads, strata_error *err);
/* Queues r for a handler thread, starting one if every thread is busy and fewer than the maximum
 * run; -1 if no thread exists and none can be started. */
int http_workers_submit(http_workers *w, http_request *r);
/* Joins the threads once the queue is empty; frees. */
void http_workers_destroy(http_workers *w);
/* Runs r's route handler on the calling thread (r->dispatched and handling counted). Returns true
 * when the answer is complete and the connection was not suspended: the caller (an I/O thread in
 * the access handler) queues it. Otherwise the connection is, or stays, suspended until the answer
 * is complete, and is then resumed. */
bool http_run_handler(http_request *r);
/* The same with a ready-made answer in r->resp, for a handler that could not be run. */
bool http_request_answered(http_request *r);

/* http_conns.c */
int http_conns_init(http_server *s, strata_error *err);
void http_conns_destroy(http_server *s);
int http_conns_start_sweeper(http_server *s, strata_error *err);
void http_conns_stop_sweeper(http_server *s);
/* MHD_OPTION_NOTIFY_CONNECTION */
void http_conns_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                       enum MHD_ConnectionNotificationCode toe);
/* Phase changes of the connection's current request (rec may be NULL). */
void http_conn_request_line(http_server *s, http_conn *rec);
void http_conn_set_phase(http_server *s, http_conn *rec, http_conn_phase phase,
                         int64_t request_start_ns);

#endif
