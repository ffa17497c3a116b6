/*
 * rpc_test_services.c - see rpc_test_services.h.
 */
#include "rpc/rpc_test_services.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"

struct test_delay_item {
    test_delay_item *next;
    rpc_call *call;
    int64_t due_ns;
    bool until_cancelled;
    bool gated;
    const uint8_t *payload; /* points into the request, valid until finished */
    size_t payload_len;
};

static int echo(rpc_call *call, const uint8_t *req, size_t len, strata_buffer *resp,
                strata_error *err, void *arg) {
    if (strata_buffer_append(resp, req, len) != 0)
        return strata_error_oom(err);
    return 0;
}

static int upper(rpc_call *call, const uint8_t *req, size_t len, strata_buffer *resp,
                 strata_error *err, void *arg) {
    for (size_t i = 0; i < len; i++) {
        if (strata_buffer_append_byte(resp, (uint8_t)toupper(req[i])) != 0)
            return strata_error_oom(err);
    }
    return 0;
}

static int metadata(rpc_call *call, const uint8_t *req, size_t len, strata_buffer *resp,
                    strata_error *err, void *arg) {
    char key[128];
    if (len >= sizeof(key))
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "key too long");
    memcpy(key, req, len);
    key[len] = '\0';
    const char *value;
    size_t value_len;
    if (!rpc_call_metadata(call, key, &value, &value_len))
        return strata_error_set(err, STRATA_NOT_FOUND, "no metadata %s", key);
    if (strata_buffer_append(resp, value, value_len) != 0)
        return strata_error_oom(err);
    return 0;
}

static int peer(rpc_call *call, const uint8_t *req, size_t len, strata_buffer *resp,
                strata_error *err, void *arg) {
    if (strata_buffer_append_str(resp, rpc_call_peer(call)) != 0)
        return strata_error_oom(err);
    return 0;
}

static int deadline(rpc_call *call, const uint8_t *req, size_t len, strata_buffer *resp,
                    strata_error *err, void *arg) {
    int64_t left = rpc_call_deadline_remaining_ns(call);
    int rc = left == INT64_MAX ? strata_buffer_append_str(resp, "none")
                               : strata_buffer_appendf(resp, "%lld", (long long)(left / 1000000));
    return rc != 0 ? strata_error_oom(err) : 0;
}

static int fail(rpc_call *call, const uint8_t *req, size_t len, strata_buffer *resp,
                strata_error *err, void *arg) {
    return strata_error_set(err, STRATA_INVALID_ARGUMENT, "bad request: %.*s", (int)len,
                            (const char *)req);
}

static void enqueue(test_delayer *d, test_delay_item *item) {
    pthread_mutex_lock(&d->lock);
    item->next = d->items;
    d->items = item;
    d->pending++;
    if (d->pending > d->peak_pending)
        d->peak_pending = d->pending;
    pthread_cond_signal(&d->wake);
    pthread_mutex_unlock(&d->lock);
}

static void delay(rpc_call *call, const uint8_t *req, size_t len, void *arg) {
    const uint8_t *colon = memchr(req, ':', len);
    test_delay_item *item = calloc(1, sizeof(*item));
    if (colon == NULL || item == NULL) {
        free(item);
        rpc_call_finish(call, STRATA_INVALID_ARGUMENT, "want <ms>:<payload>", NULL, 0);
        return;
    }
    int64_t ms = 0;
    for (const uint8_t *p = req; p < colon && isdigit(*p); p++)
        ms = ms * 10 + (*p - '0');
    item->call = call;
    item->due_ns = strata_monotonic_ns() + ms * STRATA_NS_PER_MS;
    item->payload = colon + 1;
    item->payload_len = (size_t)(req + len - (colon + 1));
    enqueue(arg, item);
}

/* Queues a call that waits for a condition, at most 30 s. */
static void hold(rpc_call *call, const uint8_t *req, size_t len, test_delayer *d, bool gated) {
    test_delay_item *item = calloc(1, sizeof(*item));
    if (item == NULL) {
        rpc_call_finish(call, STRATA_RESOURCE_EXHAUSTED, "out of memory", NULL, 0);
        return;
    }
    item->call = call;
    item->due_ns = strata_monotonic_ns() + 30 * STRATA_NS_PER_SEC;
    item->until_cancelled = !gated;
    item->gated = gated;
    item->payload = req;
    item->payload_len = gated ? len : 0;
    enqueue(d, item);
}

static void wait_cancel(rpc_call *call, const uint8_t *req, size_t len, void *arg) {
    hold(call, req, len, arg, false);
}

static void gate(rpc_call *call, const uint8_t *req, size_t len, void *arg) {
    hold(call, req, len, arg, true);
}

static bool item_ready(test_delayer *d, test_delay_item *item, int64_t now) {
    if (now >= item->due_ns)
        return true;
    if (item->gated)
        return atomic_load(&d->gate_open);
    return item->until_cancelled && rpc_call_is_cancelled(item->call);
}

/* Moves the items that are due from d->items to the returned list. Called with the lock held. */
static test_delay_item *take_ready(test_delayer *d) {
    test_delay_item *ready = NULL, **link = &d->items;
    int64_t now = strata_monotonic_ns();
    while (*link != NULL) {
        test_delay_item *item = *link;
        if (!item_ready(d, item, now)) {
            link = &item->next;
            continue;
        }
        *link = item->next;
        item->next = ready;
        ready = item;
        d->pending--;
    }
    return ready;
}

static void finish_items(test_delayer *d, test_delay_item *item) {
    while (item != NULL) {
        test_delay_item *next = item->next;
        /* Counted before finishing, so a client that has its answer sees the counts. */
        if (rpc_call_is_cancelled(item->call))
            atomic_fetch_add(&d->finished_cancelled, 1);
        atomic_fetch_add(&d->finished, 1);
        rpc_call_finish(item->call, STRATA_OK, NULL, item->payload, item->payload_len);
        free(item);
        item = next;
    }
}

static void *delayer_main(void *arg) {
    test_delayer *d = arg;
    pthread_mutex_lock(&d->lock);
    while (!d->stop || d->items != NULL) {
        test_delay_item *ready = take_ready(d);
        pthread_mutex_unlock(&d->lock);
        finish_items(d, ready);
        pthread_mutex_lock(&d->lock);
        if (d->stop && d->items == NULL)
            break;
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 2000000;
        if (until.tv_nsec >= 1000000000) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&d->wake, &d->lock, &until);
    }
    pthread_mutex_unlock(&d->lock);
    return NULL;
}

int test_delayer_start(test_delayer *d) {
    memset(d, 0, sizeof(*d));
    atomic_init(&d->gate_open, false);
    atomic_init(&d->finished, 0);
    atomic_init(&d->finished_cancelled, 0);
    pthread_mutex_init(&d->lock, NULL);
    pthread_cond_init(&d->wake, NULL);
    return pthread_create(&d->thread, NULL, delayer_main, d) == 0 ? 0 : -1;
}

void test_delayer_stop(test_delayer *d) {
    pthread_mutex_lock(&d->lock);
    d->stop = true;
    pthread_cond_signal(&d->wake);
    pthread_mutex_unlock(&d->lock);
    pthread_join(d->thread, NULL);
    pthread_cond_destroy(&d->wake);
    pthread_mutex_destroy(&d->lock);
}

size_t test_delayer_peak(test_delayer *d) {
    pthread_mutex_lock(&d->lock);
    size_t peak = d->peak_pending;
    pthread_mutex_unlock(&d->lock);
    return peak;
}

void test_delayer_open_gate(test_delayer *d) {
    atomic_store(&d->gate_open, true);
}

/* Client stream: answers "<count>:<m1>|<m2>|..." (the messages in order). */
static int join(rpc_call *call, const uint8_t *req, size_t len, strata_buffer *resp,
                strata_error *err, void *arg) {
    (void)call;
    (void)arg;
    const uint8_t *p = req, *end = req + len, *m;
    size_t n = 0, mlen;
    strata_buffer body = STRATA_BUFFER_INIT;
    while (rpc_stream_next(&p, end, &m, &mlen)) {
        if ((n > 0 && strata_buffer_append_byte(&body, '|') != 0) ||
            strata_buffer_append(&body, m, mlen) != 0) {
            strata_buffer_free(&body);
            return strata_error_oom(err);
        }
        n++;
    }
    char head[32];
    int hl = snprintf(head, sizeof head, "%zu:", n);
    int rc = strata_buffer_append(resp, head, (size_t)hl) != 0 ||
                     strata_buffer_append(resp, body.data, body.len) != 0
                 ? strata_error_oom(err)
                 : 0;
    strata_buffer_free(&body);
    return rc;
}

static void join_async(rpc_call *call, const uint8_t *req, size_t len, void *arg) {
    strata_buffer resp = STRATA_BUFFER_INIT;
    strata_error err;
    if (join(call, req, len, &resp, &err, arg) == 0)
        rpc_call_finish_buffer(call, STRATA_OK, NULL, &resp);
    else
        rpc_call_finish(call, err.code, err.message, NULL, 0);
    strata_buffer_free(&resp);
}

int test_register_services(rpc_server *s, test_delayer *d, strata_error *err) {
    if (rpc_server_add_client_stream_method(s, "/test.Stream/Join", join_async, NULL, 1 << 16, 4,
                                            err) != 0)
        return -1;
    if (d != NULL &&
        rpc_server_add_client_stream_method(s, "/test.Stream/Gated", gate, d, 1 << 16, 2, err) != 0)
        return -1;
    static const struct {
        const char *path;
        rpc_sync_handler handler;
    } sync_methods[] = {
        {"/test.Echo/Echo", echo}, {"/test.Echo/Metadata", metadata},
        {"/test.Echo/Peer", peer}, {"/test.Echo/Deadline", deadline},
        {"/test.Echo/Fail", fail}, {"/test.Other/Upper", upper},
    };
    for (size_t i = 0; i < sizeof(sync_methods) / sizeof(sync_methods[0]); i++) {
        if (rpc_server_add_sync_method(s, sync_methods[i].path, sync_methods[i].handler, NULL,
                                       err) != 0)
            return -1;
    }
    if (rpc_server_add_method(s, "/test.Async/Delay", delay, d, err) != 0)
        return -1;
    if (rpc_server_add_method(s, "/test.Async/Gate", gate, d, err) != 0)
        return -1;
    return rpc_server_add_method(s, "/test.Async/WaitCancel", wait_cancel, d, err);
}
