/*
 * announce.c - the publisher (PUB socket, listens) and the subscriber (SUB socket, dials every
 * publisher, receive thread).
 */
#include <nng/nng.h>
#include <nng/protocol/pubsub0/pub.h>
#include <nng/protocol/pubsub0/sub.h>
#include <nng/supplemental/util/platform.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "announce/announce.h"
#include "announce_internal.h"

/* Redial delays after a refused or lost connection: doubling from the first to the second. */
#define REDIAL_MIN_MS 100
#define REDIAL_MAX_MS 1000
/* Pause after an unexpected receive error, so a persistent one cannot spin. */
#define RECV_ERROR_PAUSE_MS 10
/* How often the receive thread checks for shutdown. nng 1.5.2 can deadlock in nng_close while
 * another thread is blocked in nng_recvmsg on the same socket (nanomsg/nng#1543, #1813), so the
 * thread is stopped by a flag and joined before the socket is closed. */
#define RECV_POLL_MS 100

/* ---- bounded close -------------------------------------------------------------------------- */

/* nng 1.5.2 can hang for ever in nng_close on a socket whose TCP connection is receiving at that
 * moment (reproduced here: a SUB socket fed by a busy PUB; nng's reaper waits on a task that never
 * runs, nanomsg/nng#1543). So sockets are closed on a helper thread and waited for at most
 * CLOSE_WAIT_MS; after that the helper is abandoned (it frees its state if nng ever returns). */
#define CLOSE_WAIT_MS 1000

typedef struct socket_closer {
    nng_socket sock;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    bool done;
    bool abandoned;
} socket_closer;

static void closer_free(socket_closer *c) {
    pthread_cond_destroy(&c->cond);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static void *closer_main(void *arg) {
    socket_closer *c = arg;
    nng_close(c->sock);
    pthread_mutex_lock(&c->mu);
    c->done = true;
    bool abandoned = c->abandoned;
    pthread_cond_signal(&c->cond);
    pthread_mutex_unlock(&c->mu);
    if (abandoned)
        closer_free(c);
    return NULL;
}

static socket_closer *closer_new(nng_socket sock) {
    socket_closer *c = calloc(1, sizeof *c);
    if (c == NULL)
        return NULL;
    c->sock = sock;
    if (pthread_mutex_init(&c->mu, NULL) != 0) {
        free(c);
        return NULL;
    }
    if (pthread_cond_init(&c->cond, NULL) != 0) {
        pthread_mutex_destroy(&c->mu);
        free(c);
        return NULL;
    }
    return c;
}

/* Waits for the closer until CLOSE_WAIT_MS; true if nng_close returned in time. */
static bool closer_wait(socket_closer *c) {
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += CLOSE_WAIT_MS / 1000;
    deadline.tv_nsec += (long)(CLOSE_WAIT_MS % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&c->mu);
    while (!c->done && pthread_cond_timedwait(&c->cond, &c->mu, &deadline) == 0) {
    }
    bool done = c->done;
    c->abandoned = !done;
    pthread_mutex_unlock(&c->mu);
    return done;
}

/* Closes sock, waiting at most CLOSE_WAIT_MS. Returns false if the close was abandoned. */
static bool close_socket_bounded(nng_socket sock) {
    if (nng_socket_id(sock) <= 0)
        return true;
    socket_closer *c = closer_new(sock);
    pthread_t thread;
    if (c == NULL || pthread_create(&thread, NULL, closer_main, c) != 0) {
        if (c != NULL)
            closer_free(c);
        nng_close(sock); /* no thread to spare: close here and hope */
        return true;
    }
    bool done = closer_wait(c);
    if (done) {
        pthread_join(thread, NULL);
        closer_free(c);
    } else {
        pthread_detach(thread);
    }
    return done;
}

int announce_nng_error(strata_error *err, int rv, const char *what, const char *url) {
    strata_status code = STRATA_UNAVAILABLE;
    if (rv == NNG_EADDRINVAL || rv == NNG_ENOTSUP || rv == NNG_EINVAL)
        code = STRATA_INVALID_ARGUMENT;
    else if (rv == NNG_ENOMEM)
        code = STRATA_RESOURCE_EXHAUSTED;
    return strata_error_set(err, code, "announce: %s %s: %s", what, url != NULL ? url : "",
                            nng_strerror(rv));
}

/* ---- publisher ---------------------------------------------------------------------------- */

struct announce_publisher {
    nng_socket sock;
    int port;
    atomic_uint_fast64_t published;
    atomic_uint_fast64_t failed;
};

static int publisher_listen(announce_publisher *pub, const char *url, strata_error *err) {
    int rv = nng_pub0_open(&pub->sock);
    if (rv != 0)
        return announce_nng_error(err, rv, "cannot open publisher for", url);
    if ((rv = nng_socket_set_int(pub->sock, NNG_OPT_SENDBUF, ANNOUNCE_QUEUE_DEPTH)) != 0)
        return announce_nng_error(err, rv, "cannot set send buffer for", url);
    nng_listener listener;
    if ((rv = nng_listen(pub->sock, url, &listener, 0)) != 0)
        return announce_nng_error(err, rv, "cannot listen on", url);
    int port = 0;
    if (nng_listener_get_int(listener, NNG_OPT_TCP_BOUND_PORT, &port) == 0)
        pub->port = port; /* other transports have no port: stays 0 */
    return 0;
}

announce_publisher *announce_publisher_new(const char *url, strata_error *err) {
    if (url == NULL || url[0] == '\0') {
        strata_error_set(err, STRATA_INVALID_ARGUMENT, "announce: publisher URL is empty");
        return NULL;
    }
    announce_publisher *pub = calloc(1, sizeof *pub);
    if (pub == NULL) {
        strata_error_oom(err);
        return NULL;
    }
    pub->sock = (nng_socket)NNG_SOCKET_INITIALIZER;
    atomic_init(&pub->published, 0);
    atomic_init(&pub->failed, 0);
    if (publisher_listen(pub, url, err) != 0) {
        announce_publisher_free(pub);
        return NULL;
    }
    return pub;
}

int announce_publish(announce_publisher *pub, const char *tenant, const char *ulid,
                     strata_error *err) {
    char msg[ANNOUNCE_MESSAGE_MAX];
    size_t len;
    if (announce_format_message(tenant, ulid, msg, sizeof msg, &len, err) != 0) {
        atomic_fetch_add(&pub->failed, 1);
        return -1;
    }
    int rv = nng_send(pub->sock, msg, len, NNG_FLAG_NONBLOCK);
    if (rv != 0) {
        atomic_fetch_add(&pub->failed, 1);
        return announce_nng_error(err, rv, "cannot publish block", ulid);
    }
    atomic_fetch_add(&pub->published, 1);
    return 0;
}

int announce_publisher_port(const announce_publisher *pub) {
    return pub->port;
}

void announce_publisher_get_stats(const announce_publisher *pub, announce_publisher_stats *out) {
    out->published = atomic_load(&pub->published);
    out->failed = atomic_load(&pub->failed);
}

void announce_publisher_free(announce_publisher *pub) {
    if (pub == NULL)
        return;
    close_socket_bounded(pub->sock);
    free(pub);
}

/* ---- subscriber --------------------------------------------------------------------------- */

struct announce_subscriber {
    nng_socket sock;
    pthread_t thread;
    bool thread_started;
    atomic_bool stopping;
    announce_block_fn callback;
    void *ctx;
    atomic_uint_fast64_t received;
    atomic_uint_fast64_t malformed;
};

static void subscriber_handle(announce_subscriber *sub, const void *data, size_t len) {
    char tenant[ANNOUNCE_TENANT_MAX + 1];
    char ulid[ANNOUNCE_ULID_LEN + 1];
    if (!announce_parse_message(data, len, tenant, ulid)) {
        atomic_fetch_add(&sub->malformed, 1);
        return;
    }
    atomic_fetch_add(&sub->received, 1);
    sub->callback(sub->ctx, tenant, ulid);
}

/* Runs until announce_subscriber_free sets stopping; each receive waits at most RECV_POLL_MS. */
static void *subscriber_loop(void *arg) {
    announce_subscriber *sub = arg;
    while (!atomic_load(&sub->stopping)) {
        nng_msg *msg = NULL;
        int rv = nng_recvmsg(sub->sock, &msg, 0);
        if (rv == NNG_ETIMEDOUT)
            continue;
        if (rv == NNG_ECLOSED)
            break;
        if (rv != 0) {
            nng_msleep(RECV_ERROR_PAUSE_MS);
            continue;
        }
        subscriber_handle(sub, nng_msg_body(msg), nng_msg_len(msg));
        nng_msg_free(msg);
    }
    return NULL;
}

static int subscriber_configure(announce_subscriber *sub, strata_error *err) {
    int rv = nng_sub0_open(&sub->sock);
    if (rv != 0)
        return announce_nng_error(err, rv, "cannot open subscriber", NULL);
    /* Subscribe to everything so that malformed messages reach validation and are counted. */
    if ((rv = nng_socket_set(sub->sock, NNG_OPT_SUB_SUBSCRIBE, "", 0)) != 0 ||
        (rv = nng_socket_set_int(sub->sock, NNG_OPT_RECVBUF, ANNOUNCE_QUEUE_DEPTH)) != 0 ||
        (rv = nng_socket_set_size(sub->sock, NNG_OPT_RECVMAXSZ, ANNOUNCE_RECV_MAX)) != 0 ||
        (rv = nng_socket_set_ms(sub->sock, NNG_OPT_RECVTIMEO, RECV_POLL_MS)) != 0 ||
        (rv = nng_socket_set_ms(sub->sock, NNG_OPT_RECONNMINT, REDIAL_MIN_MS)) != 0 ||
        (rv = nng_socket_set_ms(sub->sock, NNG_OPT_RECONNMAXT, REDIAL_MAX_MS)) != 0)
        return announce_nng_error(err, rv, "cannot configure subscriber", NULL);
    return 0;
}

static int subscriber_dial(announce_subscriber *sub, const char *const *urls, size_t n,
                           strata_error *err) {
    for (size_t i = 0; i < n; i++) {
        if (urls[i] == NULL || urls[i][0] == '\0')
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "announce: publisher address %zu is empty", i + 1);
        /* Non-blocking: a publisher that is not up yet is redialled in the background. */
        int rv = nng_dial(sub->sock, urls[i], NULL, NNG_FLAG_NONBLOCK);
        if (rv != 0)
            return announce_nng_error(err, rv, "cannot dial", urls[i]);
    }
    return 0;
}

static int subscriber_start(announce_subscriber *sub, const char *const *urls, size_t n,
                            strata_error *err) {
    if (subscriber_configure(sub, err) != 0 || subscriber_dial(sub, urls, n, err) != 0)
        return -1;
    if (pthread_create(&sub->thread, NULL, subscriber_loop, sub) != 0)
        return strata_error_set(err, STRATA_RESOURCE_EXHAUSTED,
                                "announce: cannot start the receive thread");
    sub->thread_started = true;
    return 0;
}

announce_subscriber *announce_subscriber_new(const char *const *urls, size_t n,
                                             announce_block_fn callback, void *ctx,
                                             strata_error *err) {
    if (urls == NULL || n == 0 || n > ANNOUNCE_MAX_PUBLISHERS || callback == NULL) {
        strata_error_set(err, STRATA_INVALID_ARGUMENT,
                         "announce: want 1-%d publisher addresses and a callback",
                         ANNOUNCE_MAX_PUBLISHERS);
        return NULL;
    }
    announce_subscriber *sub = calloc(1, sizeof *sub);
    if (sub == NULL) {
        strata_error_oom(err);
        return NULL;
    }
    sub->sock = (nng_socket)NNG_SOCKET_INITIALIZER;
    sub->callback = callback;
    sub->ctx = ctx;
    atomic_init(&sub->stopping, false);
    atomic_init(&sub->received, 0);
    atomic_init(&sub->malformed, 0);
    if (subscriber_start(sub, urls, n, err) != 0) {
        announce_subscriber_free(sub);
        return NULL;
    }
    return sub;
}

void announce_subscriber_get_stats(const announce_subscriber *sub, announce_subscriber_stats *out) {
    out->received = atomic_load(&sub->received);
    out->malformed = atomic_load(&sub->malformed);
}

void announce_subscriber_free(announce_subscriber *sub) {
    if (sub == NULL)
        return;
    /* Stop and join first: no thread may be inside nng_recvmsg when the socket closes. */
    atomic_store(&sub->stopping, true);
    if (sub->thread_started)
        pthread_join(sub->thread, NULL);
    close_socket_bounded(sub->sock);
    free(sub);
}
