/*
 * push_test.c - the WriteRaw pusher against real gRPC servers (lib/rpc) that decode what they
 * receive: balancing, failover, rejection, backoff and recovery, bounded queue, tenant header.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <pthread.h>

#include <cmocka.h>

#include "common/clock.h"
#include "parca/profilestore/v1alpha1/profilestore.pb-c.h"
#include "push/push.h"
#include "rpc/rpc.h"

#define MAX_HELD 16

/* A fake ingester: a real gRPC server whose WriteRaw handler decodes the request. */
typedef struct ingester {
    rpc_server *server;
    char address[64];
    pthread_mutex_t mu;
    strata_status answer; /* OK accepts; anything else fails the call with that code */
    bool hold;            /* keep calls unanswered until release_held */
    rpc_call *held[MAX_HELD];
    size_t n_held;
    size_t attempts, accepted, series;
    char last_seq[32]; /* the "seq" label of the last accepted series */
    char tenant[64];
    size_t last_pprof_len;
} ingester;

static void on_write_raw(rpc_call *call, const uint8_t *request, size_t len, void *arg) {
    ingester *in = arg;
    Parca__Profilestore__V1alpha1__WriteRawRequest *req =
        parca__profilestore__v1alpha1__write_raw_request__unpack(NULL, len, request);
    pthread_mutex_lock(&in->mu);
    in->attempts++;
    strata_status answer = req == NULL ? STRATA_INVALID_ARGUMENT : in->answer;
    if (answer == STRATA_OK) {
        in->accepted++;
        in->series += req->n_series;
        for (size_t i = 0; i < req->n_series; i++) {
            const Parca__Profilestore__V1alpha1__LabelSet *ls = req->series[i]->labels;
            for (size_t j = 0; j < ls->n_labels; j++)
                if (strcmp(ls->labels[j]->name, "seq") == 0)
                    snprintf(in->last_seq, sizeof in->last_seq, "%s", ls->labels[j]->value);
            in->last_pprof_len = req->series[i]->samples[0]->raw_profile.len;
        }
        const char *tenant;
        size_t tenant_len;
        if (rpc_call_metadata(call, "x-scope-orgid", &tenant, &tenant_len))
            snprintf(in->tenant, sizeof in->tenant, "%.*s", (int)tenant_len, tenant);
    }
    bool hold = answer == STRATA_OK && in->hold && in->n_held < MAX_HELD;
    if (hold)
        in->held[in->n_held++] = call;
    pthread_mutex_unlock(&in->mu);
    if (req != NULL)
        parca__profilestore__v1alpha1__write_raw_request__free_unpacked(req, NULL);
    if (!hold)
        rpc_call_finish(call, answer, answer == STRATA_OK ? NULL : "test ingester says no", "", 0);
}

static void ingester_start(ingester *in) {
    memset(in, 0, sizeof *in);
    pthread_mutex_init(&in->mu, NULL);
    strata_error err;
    rpc_server_options o = {.listen_address = "127.0.0.1:0", .threads = 2};
    in->server = rpc_server_new(&o, &err);
    assert_non_null(in->server);
    assert_int_equal(
        rpc_server_add_method(in->server, PUSH_WRITE_RAW_METHOD, on_write_raw, in, &err), 0);
    assert_int_equal(rpc_server_start(in->server, &err), 0);
    snprintf(in->address, sizeof in->address, "127.0.0.1:%d", rpc_server_port(in->server));
}

static void set_answer(ingester *in, strata_status answer) {
    pthread_mutex_lock(&in->mu);
    in->answer = answer;
    pthread_mutex_unlock(&in->mu);
}

static size_t held_count(ingester *in) {
    pthread_mutex_lock(&in->mu);
    size_t n = in->n_held;
    pthread_mutex_unlock(&in->mu);
    return n;
}

static void release_held(ingester *in) {
    pthread_mutex_lock(&in->mu);
    in->hold = false;
    size_t n = in->n_held;
    in->n_held = 0;
    pthread_mutex_unlock(&in->mu);
    for (size_t i = 0; i < n; i++)
        rpc_call_finish(in->held[i], STRATA_OK, NULL, "", 0);
}

static void ingester_stop(ingester *in) {
    release_held(in);
    rpc_server_shutdown(in->server, STRATA_NS_PER_SEC);
    pthread_mutex_destroy(&in->mu);
}

/* Reads a counter or a string under the ingester's lock (its handler threads write them). */
static size_t count_of(ingester *in, const size_t *field) {
    pthread_mutex_lock(&in->mu);
    size_t v = *field;
    pthread_mutex_unlock(&in->mu);
    return v;
}

static const char *text_of(ingester *in, const char *field) {
    static char copies[4][64];
    static int next;
    char *out = copies[next++ % 4];
    pthread_mutex_lock(&in->mu);
    snprintf(out, sizeof copies[0], "%s", field);
    pthread_mutex_unlock(&in->mu);
    return out;
}

/* One series {seq="<seq>", job="test"} with a pprof of pprof_len bytes. */
typedef struct test_series {
    label_set labels;
    uint8_t pprof[2048];
    push_series s;
} test_series;

static void make_series(test_series *t, int seq, size_t pprof_len) {
    char text[64];
    snprintf(text, sizeof text, "{job=\"test\", seq=\"%d\"}", seq);
    assert_int_equal(label_set_from_text(text, &t->labels, NULL), 0);
    memset(t->pprof, 0x1f, sizeof t->pprof);
    assert_true(pprof_len <= sizeof t->pprof);
    t->s = (push_series){&t->labels, t->pprof, pprof_len};
}

static void enqueue_seq(pusher *p, int seq) {
    test_series t;
    make_series(&t, seq, 100);
    strata_error err;
    assert_int_equal(push_enqueue(p, &t.s, 1, &err), 0);
    label_set_free(&t.labels);
}

static int64_t in_ms(int64_t ms) {
    return strata_monotonic_ns() + ms * STRATA_NS_PER_MS;
}

/* ---- tests -------------------------------------------------------------------------------- */

static void test_encode(void **state) {
    (void)state;
    test_series t;
    make_series(&t, 7, 1000);
    strata_buffer b = STRATA_BUFFER_INIT;
    assert_int_equal(push_write_raw_encode(&t.s, 1, &b, NULL), 0);
    Parca__Profilestore__V1alpha1__WriteRawRequest *req =
        parca__profilestore__v1alpha1__write_raw_request__unpack(NULL, b.len, b.data);
    assert_non_null(req);
    assert_int_equal(req->n_series, 1);
    assert_int_equal(req->series[0]->labels->n_labels, 2);
    assert_string_equal(req->series[0]->labels->labels[1]->name, "seq");
    assert_string_equal(req->series[0]->labels->labels[1]->value, "7");
    assert_int_equal(req->series[0]->n_samples, 1);
    assert_int_equal(req->series[0]->samples[0]->raw_profile.len, 1000);
    assert_memory_equal(req->series[0]->samples[0]->raw_profile.data, t.pprof, 1000);
    parca__profilestore__v1alpha1__write_raw_request__free_unpacked(req, NULL);
    strata_buffer_free(&b);
    label_set_free(&t.labels);
}

/* Requests alternate between the addresses, and the tenant header reaches both. */
static void test_balancing(void **state) {
    (void)state;
    ingester a, b;
    ingester_start(&a);
    ingester_start(&b);
    const char *addresses[] = {a.address, b.address};
    push_options o = {.addresses = addresses, .n_addresses = 2, .tenant = "team-a"};
    pusher *p = pusher_new(&o, NULL);
    assert_non_null(p);
    for (int i = 0; i < 10; i++)
        enqueue_seq(p, i);
    assert_int_equal(push_flush(p, in_ms(20000)), 0);
    push_stats st;
    push_stats_get(p, &st);
    assert_int_equal(st.enqueued_requests, 10);
    assert_int_equal(st.requests, 10);
    assert_int_equal(st.series, 10);
    assert_int_equal(st.errors, 0);
    assert_int_equal(st.queue_requests, 0);
    assert_int_equal(st.n_addresses, 2);
    assert_string_equal(st.addresses[0].address, a.address);
    assert_int_equal(st.addresses[0].requests, 5);
    assert_int_equal(st.addresses[1].requests, 5);
    assert_int_equal(count_of(&a, &a.accepted), 5);
    assert_int_equal(count_of(&b, &b.accepted), 5);
    assert_string_equal(text_of(&a, a.tenant), "team-a");
    assert_string_equal(text_of(&b, b.tenant), "team-a");
    assert_int_equal(count_of(&a, &a.last_pprof_len), 100);
    pusher_free(p);
    ingester_stop(&a);
    ingester_stop(&b);
}

/* UNAVAILABLE on one address moves the request to the next one at once (no backoff: the test
 * would otherwise wait the 1 h minimum backoff set here). */
static void test_failover(void **state) {
    (void)state;
    ingester down, up;
    ingester_start(&down);
    ingester_start(&up);
    set_answer(&down, STRATA_UNAVAILABLE);
    const char *addresses[] = {down.address, up.address};
    push_options o = {.addresses = addresses,
                      .n_addresses = 2,
                      .min_backoff_ns = 3600 * STRATA_NS_PER_SEC,
                      .max_backoff_ns = 3600 * STRATA_NS_PER_SEC};
    pusher *p = pusher_new(&o, NULL);
    assert_non_null(p);
    for (int i = 0; i < 4; i++)
        enqueue_seq(p, i);
    assert_int_equal(push_flush(p, in_ms(20000)), 0);
    push_stats st;
    push_stats_get(p, &st);
    assert_int_equal(st.requests, 4);
    assert_int_equal(count_of(&up, &up.accepted), 4);
    /* Requests 0 and 2 started on the down address. */
    assert_int_equal(count_of(&down, &down.attempts), 2);
    assert_int_equal(st.errors, 2);
    assert_int_equal(st.addresses[0].errors, 2);
    assert_int_equal(st.addresses[0].requests, 0);
    assert_int_equal(st.addresses[1].requests, 4);
    assert_non_null(strstr(st.addresses[0].last_error, "UNAVAILABLE: test ingester says no"));
    assert_int_equal(st.dropped[PUSH_DROP_QUEUE_FULL] + st.dropped[PUSH_DROP_REJECTED], 0);
    pusher_free(p);

    /* A dead address (nothing listens on port 1) fails over the same way. */
    const char *dead[] = {"127.0.0.1:1", up.address};
    o.addresses = dead;
    p = pusher_new(&o, NULL);
    assert_non_null(p);
    enqueue_seq(p, 10);
    assert_int_equal(push_flush(p, in_ms(20000)), 0);
    push_stats_get(p, &st);
    assert_int_equal(st.requests, 1);
    assert_int_equal(st.addresses[0].errors, 1);
    assert_int_equal(count_of(&up, &up.accepted), 5);
    assert_string_equal(text_of(&up, up.last_seq), "10");
    pusher_free(p);
    ingester_stop(&down);
    ingester_stop(&up);
}

/* INVALID_ARGUMENT will never succeed anywhere: the request is dropped, not retried. */
static void test_rejected(void **state) {
    (void)state;
    ingester bad, good;
    ingester_start(&bad);
    ingester_start(&good);
    set_answer(&bad, STRATA_INVALID_ARGUMENT);
    const char *addresses[] = {bad.address, good.address};
    push_options o = {.addresses = addresses, .n_addresses = 2, .senders = 1};
    pusher *p = pusher_new(&o, NULL);
    assert_non_null(p);
    enqueue_seq(p, 0);
    enqueue_seq(p, 1);
    assert_int_equal(push_flush(p, in_ms(20000)), 0);
    push_stats st;
    push_stats_get(p, &st);
    assert_int_equal(st.dropped[PUSH_DROP_REJECTED], 1);
    assert_int_equal(st.dropped_series, 1);
    assert_int_equal(st.requests, 1);
    assert_int_equal(count_of(&bad, &bad.attempts), 1);
    assert_int_equal(count_of(&good, &good.accepted), 1);
    assert_string_equal(text_of(&good, good.last_seq), "1");
    assert_non_null(strstr(st.last_error, "INVALID_ARGUMENT"));
    assert_string_equal(push_drop_reason_name(PUSH_DROP_REJECTED), "rejected");
    pusher_free(p);
    ingester_stop(&bad);
    ingester_stop(&good);
}

/* When every address fails, the request backs off and is retried until an ingester recovers. */
static void test_backoff_and_recovery(void **state) {
    (void)state;
    ingester a, b;
    ingester_start(&a);
    ingester_start(&b);
    set_answer(&a, STRATA_UNAVAILABLE);
    set_answer(&b, STRATA_RESOURCE_EXHAUSTED);
    const char *addresses[] = {a.address, b.address};
    push_options o = {.addresses = addresses,
                      .n_addresses = 2,
                      .min_backoff_ns = 5 * STRATA_NS_PER_MS,
                      .max_backoff_ns = 20 * STRATA_NS_PER_MS};
    pusher *p = pusher_new(&o, NULL);
    assert_non_null(p);
    enqueue_seq(p, 42);
    push_stats st;
    int64_t deadline = in_ms(20000);
    do {
        usleep(5000);
        push_stats_get(p, &st);
    } while (st.errors < 6 && strata_monotonic_ns() < deadline);
    assert_true(st.errors >= 6);
    assert_int_equal(st.requests, 0);
    assert_int_equal(st.queue_requests, 1);
    set_answer(&b, STRATA_OK);
    assert_int_equal(push_flush(p, in_ms(20000)), 0);
    push_stats_get(p, &st);
    assert_int_equal(st.requests, 1);
    assert_int_equal(count_of(&b, &b.accepted), 1);
    assert_string_equal(text_of(&b, b.last_seq), "42");
    assert_true(st.addresses[0].errors >= 3);
    assert_true(st.addresses[1].errors >= 3);
    pusher_free(p);
    ingester_stop(&a);
    ingester_stop(&b);
}

/* A stuck ingester never blocks enqueue; the full queue drops the oldest requests. */
static void test_queue_full_drops_oldest(void **state) {
    (void)state;
    ingester in;
    ingester_start(&in);
    in.hold = true;
    const char *addresses[] = {in.address};
    push_options o = {.addresses = addresses, .n_addresses = 1, .max_queue_requests = 2};
    pusher *p = pusher_new(&o, NULL);
    assert_non_null(p);
    enqueue_seq(p, 0);
    int64_t deadline = in_ms(20000);
    while (held_count(&in) == 0 && strata_monotonic_ns() < deadline)
        usleep(2000);
    assert_int_equal(held_count(&in), 1);
    /* Request 0 is held by the ingester; these return although nothing moves. */
    for (int i = 1; i <= 5; i++)
        enqueue_seq(p, i);
    push_stats st;
    push_stats_get(p, &st);
    assert_int_equal(st.queue_requests, 2); /* 0 in flight, 5 queued */
    assert_int_equal(st.dropped[PUSH_DROP_QUEUE_FULL], 4);
    assert_int_equal(st.dropped_series, 4);
    assert_int_equal(push_flush(p, in_ms(50)), -1);
    release_held(&in);
    assert_int_equal(push_flush(p, in_ms(20000)), 0);
    push_stats_get(p, &st);
    assert_int_equal(st.requests, 2);
    assert_string_equal(text_of(&in, in.last_seq), "5");
    pusher_free(p);
    ingester_stop(&in);
}

/* The byte bound: a request larger than the bound on its own is dropped as too large, and
 * smaller ones push out the oldest (nothing listens, so nothing leaves the queue). */
static void test_queue_bytes(void **state) {
    (void)state;
    test_series t;
    make_series(&t, 1, 1000);
    strata_buffer b = STRATA_BUFFER_INIT;
    assert_int_equal(push_write_raw_encode(&t.s, 1, &b, NULL), 0);
    const char *addresses[] = {"127.0.0.1:1"};
    push_options o = {.addresses = addresses,
                      .n_addresses = 1,
                      .max_queue_bytes = 3 * b.len,
                      .min_backoff_ns = 3600 * STRATA_NS_PER_SEC,
                      .max_backoff_ns = 3600 * STRATA_NS_PER_SEC};
    pusher *p = pusher_new(&o, NULL);
    assert_non_null(p);
    for (int i = 0; i < 10; i++)
        assert_int_equal(push_enqueue(p, &t.s, 1, NULL), 0);
    test_series big;
    make_series(&big, 2, 2048);
    push_stats st;
    push_stats_get(p, &st);
    assert_int_equal(st.queue_bytes, 3 * b.len);
    assert_int_equal(st.queue_requests, 3);
    assert_int_equal(st.dropped[PUSH_DROP_QUEUE_FULL], 7);
    pusher_free(p);

    o.max_queue_bytes = 3 * b.len;
    p = pusher_new(&o, NULL);
    assert_non_null(p);
    assert_int_equal(push_enqueue(p, &big.s, 1, NULL), 0);
    push_series hs[3] = {big.s, big.s, big.s};
    assert_int_equal(push_enqueue(p, hs, 3, NULL), 0);
    push_stats_get(p, &st);
    assert_int_equal(st.dropped[PUSH_DROP_TOO_LARGE], 1);
    assert_int_equal(st.dropped_series, 3);
    assert_int_equal(st.queue_requests, 1);
    pusher_free(p);
    strata_buffer_free(&b);
    label_set_free(&t.labels);
    label_set_free(&big.labels);
}

static void test_bad_options(void **state) {
    (void)state;
    strata_error err;
    push_options o = {.addresses = NULL, .n_addresses = 0};
    assert_null(pusher_new(&o, &err));
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    const char *empty[] = {""};
    o.addresses = empty;
    o.n_addresses = 1;
    assert_null(pusher_new(&o, &err));
    assert_string_equal(err.message, "empty ingester address");
    pusher_free(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encode),
        cmocka_unit_test(test_balancing),
        cmocka_unit_test(test_failover),
        cmocka_unit_test(test_rejected),
        cmocka_unit_test(test_backoff_and_recovery),
        cmocka_unit_test(test_queue_full_drops_oldest),
        cmocka_unit_test(test_queue_bytes),
        cmocka_unit_test(test_bad_options),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
