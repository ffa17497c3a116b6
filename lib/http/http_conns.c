/*
 * http_conns.c - open connections and the deadlines a client cannot extend; see http.h.
 *
 * libmicrohttpd's connection timeout restarts on every byte received, so a client trickling one
 * header byte every few seconds holds its connection forever. Here each connection gets a record
 * (MHD's socket context, from MHD_OPTION_NOTIFY_CONNECTION) with a phase and an absolute deadline
 * that only the server moves: set at accept (header deadline), at a later request line on a
 * kept-alive connection (header deadline again), when the headers are complete (read deadline,
 * from the request line), while a handler answers (none) and after a response (idle deadline).
 * A sweeper thread walks the records and shuts down the socket of each connection past its
 * deadline; libmicrohttpd then reads end-of-file and closes it.
 *
 * Shutting a socket down from another thread is safe only while the descriptor still belongs to
 * that connection: libmicrohttpd reports the close (MHD_CONNECTION_NOTIFY_CLOSED, which removes
 * the record under conns_lock) before it closes the descriptor, and the sweeper holds conns_lock
 * while it shuts down; it also checks that the socket's peer is still the recorded one.
 */
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "http/http_internal.h"

static const char *const phase_names[HTTP_CONN_PHASES] = {"headers", "body", "handling", "idle"};

int http_conns_init(http_server *s, strata_error *err) {
    static const char *const phase_label[] = {"phase"};
    s->open_connections = metrics_gauge_new(
        s->opts.metrics,
        &(metrics_opts){.name = "http_open_connections", .help = "Open HTTP connections."}, err);
    if (s->open_connections == NULL)
        return -1;
    metrics_counter_vec *timed_out = metrics_counter_vec_new(
        s->opts.metrics,
        &(metrics_opts){.name = "http_connections_timed_out_total",
                        .help = "HTTP connections closed because a deadline passed, by what they "
                                "were waiting for (headers, body, idle).",
                        .label_names = phase_label,
                        .n_labels = 1},
        err);
    if (timed_out == NULL)
        return -1;
    for (int p = 0; p < HTTP_CONN_PHASES; p++) {
        if (p == HTTP_CONN_HANDLING)
            continue;
        const char *name = phase_names[p];
        if ((s->timed_out[p] = metrics_counter_vec_with(timed_out, &name)) == NULL)
            return strata_error_oom(err);
    }
    pthread_condattr_t attr;
    if (pthread_condattr_init(&attr) != 0)
        return strata_error_set(err, STRATA_INTERNAL, "cannot create condition variable");
    int rc = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    if (rc == 0)
        rc = pthread_cond_init(&s->sweep_wake, &attr);
    pthread_condattr_destroy(&attr);
    if (rc != 0)
        return strata_error_set(err, STRATA_INTERNAL, "cannot create condition variable");
    if (pthread_mutex_init(&s->conns_lock, NULL) != 0) {
        pthread_cond_destroy(&s->sweep_wake);
        return strata_error_set(err, STRATA_INTERNAL, "cannot create mutex");
    }
    return 0;
}

void http_conns_destroy(http_server *s) {
    /* libmicrohttpd reported every close before MHD_stop_daemon returned; nothing is left, but a
     * record it never closed must not leak. */
    while (s->conns != NULL) {
        http_conn *c = s->conns;
        s->conns = c->next;
        free(c);
    }
    pthread_mutex_destroy(&s->conns_lock);
    pthread_cond_destroy(&s->sweep_wake);
}

static int64_t ms_ns(unsigned ms) {
    return (int64_t)ms * STRATA_NS_PER_MS;
}

/* --- libmicrohttpd's connection notifications ------------------------------------------------ */

static http_conn *conn_new(struct MHD_Connection *conn) {
    const union MHD_ConnectionInfo *fd_info =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    const union MHD_ConnectionInfo *addr_info =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (fd_info == NULL)
        return NULL;
    http_conn *c = calloc(1, sizeof *c);
    if (c == NULL)
        return NULL;
    c->fd = fd_info->connect_fd;
    c->peer_len = 0;
    if (addr_info != NULL && addr_info->client_addr != NULL) {
        const struct sockaddr *sa = addr_info->client_addr;
        socklen_t len =
            sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
        memcpy(&c->peer, sa, len);
        c->peer_len = len;
    }
    c->phase = HTTP_CONN_HEADERS;
    return c;
}

void http_conns_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                       enum MHD_ConnectionNotificationCode toe) {
    http_server *s = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        metrics_gauge_inc(s->open_connections);
        http_conn *c = conn_new(conn);
        *socket_context = c;
        if (c == NULL)
            return; /* served without deadlines; libmicrohttpd's timeout still applies */
        c->deadline_ns = strata_monotonic_ns() + ms_ns(s->opts.header_timeout_ms);
        pthread_mutex_lock(&s->conns_lock);
        c->next = s->conns;
        if (s->conns != NULL)
            s->conns->prev = c;
        s->conns = c;
        pthread_mutex_unlock(&s->conns_lock);
        return;
    }
    if (toe != MHD_CONNECTION_NOTIFY_CLOSED)
        return;
    metrics_gauge_dec(s->open_connections);
    http_conn *c = *socket_context;
    *socket_context = NULL;
    if (c == NULL)
        return;
    pthread_mutex_lock(&s->conns_lock);
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    pthread_mutex_unlock(&s->conns_lock);
    free(c);
}

/* --- phases of a request --------------------------------------------------------------------- */

void http_conn_request_line(http_server *s, http_conn *rec) {
    if (rec == NULL)
        return;
    pthread_mutex_lock(&s->conns_lock);
    /* The first request's headers are due header_timeout after the accept, a later one's after
     * its request line: the idle deadline only bounded the wait for that line. */
    if (rec->requests++ > 0) {
        rec->phase = HTTP_CONN_HEADERS;
        rec->deadline_ns = strata_monotonic_ns() + ms_ns(s->opts.header_timeout_ms);
    }
    pthread_mutex_unlock(&s->conns_lock);
}

void http_conn_set_phase(http_server *s, http_conn *rec, http_conn_phase phase,
                         int64_t request_start_ns) {
    if (rec == NULL)
        return;
    int64_t deadline = INT64_MAX;
    if (phase == HTTP_CONN_BODY)
        deadline = request_start_ns + ms_ns(s->opts.read_timeout_ms);
    else if (phase == HTTP_CONN_IDLE)
        deadline =
            strata_monotonic_ns() + (int64_t)s->opts.connection_timeout_s * STRATA_NS_PER_SEC;
    pthread_mutex_lock(&s->conns_lock);
    rec->phase = phase;
    rec->deadline_ns = deadline;
    pthread_mutex_unlock(&s->conns_lock);
}

/* --- the sweeper ----------------------------------------------------------------------------- */

static bool same_peer(const http_conn *c) {
    if (c->peer_len == 0)
        return true; /* nothing recorded to compare */
    struct sockaddr_storage now;
    socklen_t len = sizeof now;
    if (getpeername(c->fd, (struct sockaddr *)&now, &len) != 0)
        return errno == ENOTCONN; /* the client is gone: shutting down harms nothing */
    return len == c->peer_len && memcmp(&now, &c->peer, len) == 0;
}

/* Shuts down every connection past its deadline; conns_lock held. */
static void sweep(http_server *s, int64_t now) {
    for (http_conn *c = s->conns; c != NULL; c = c->next) {
        if (c->cut || c->deadline_ns > now || c->phase == HTTP_CONN_HANDLING)
            continue;
        if (!same_peer(c))
            continue;
        c->cut = true;
        metrics_counter_inc(s->timed_out[c->phase]); /* counted before the client can see it */
        shutdown(c->fd, SHUT_RDWR);
    }
}

/* Every quarter of the shortest deadline, at most every 250 ms, at least every 10 ms. */
static int64_t sweep_period_ns(const http_server *s) {
    int64_t shortest = ms_ns(s->opts.header_timeout_ms);
    if (ms_ns(s->opts.read_timeout_ms) < shortest)
        shortest = ms_ns(s->opts.read_timeout_ms);
    int64_t period = shortest / 4;
    if (period > 250 * STRATA_NS_PER_MS)
        period = 250 * STRATA_NS_PER_MS;
    if (period < 10 * STRATA_NS_PER_MS)
        period = 10 * STRATA_NS_PER_MS;
    return period;
}

static void *sweeper_main(void *arg) {
    http_server *s = arg;
    int64_t period = sweep_period_ns(s);
    pthread_mutex_lock(&s->conns_lock);
    while (!s->sweeper_stop) {
        int64_t next = strata_monotonic_ns() + period;
        struct timespec ts = {(time_t)(next / STRATA_NS_PER_SEC), (long)(next % STRATA_NS_PER_SEC)};
        while (!s->sweeper_stop &&
               pthread_cond_timedwait(&s->sweep_wake, &s->conns_lock, &ts) != ETIMEDOUT) {
        }
        if (!s->sweeper_stop)
            sweep(s, strata_monotonic_ns());
    }
    pthread_mutex_unlock(&s->conns_lock);
    return NULL;
}

int http_conns_start_sweeper(http_server *s, strata_error *err) {
    s->sweeper_stop = false;
    if (pthread_create(&s->sweeper, NULL, sweeper_main, s) != 0)
        return strata_error_set(err, STRATA_INTERNAL, "cannot start the HTTP deadline sweeper");
    s->sweeper_started = true;
    return 0;
}

void http_conns_stop_sweeper(http_server *s) {
    if (!s->sweeper_started)
        return;
    pthread_mutex_lock(&s->conns_lock);
    s->sweeper_stop = true;
    pthread_cond_broadcast(&s->sweep_wake);
    pthread_mutex_unlock(&s->conns_lock);
    pthread_join(s->sweeper, NULL);
    s->sweeper_started = false;
}
