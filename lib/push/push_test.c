/*
 * push_test.c - the WriteRaw pusher against real gRPC servers (lib/rpc) that decode what they
 * receive and log what they store: batching, calls in flight, per-series order through failures
 * and failover, balancing, rejection (a rejected batch split), backoff and recovery, the bounded
 * queue, stats, tenant header.
 *
 * Each test series is {job="test", series="<name>"}; its pprof bytes start with "<name>:<seq>", so
 * the fake ingester can log, per series, the order in which it stored profiles. A fake ingester
 * answers at once, holds calls until the test releases them, or acknowledges each call a fixed
 * delay after it arrived (as Strata's ingester does after its next flush).
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

#define MAX_HELD 256
#define MAX_LOG 8192
#define NAME_MAX_LEN 16

/* One stored profile: its series name and sequence number. */
typedef struct stored {
    char series[NAME_MAX_LEN];
    int seq;
} stored;

/* What one or several fake ingesters stored, in the order they stored it. */
typedef struct store_log {
    pthread_mutex_t mu;
    stored items[MAX_LOG];
    size_t n;
} store_log;

typedef struct held_call {
    rpc_call *call;
    int64_t due_ns; /* INT64_MAX: until released by the test */
    stored *items;
    size_t n_items;
} held_call;

/* A fake ingester: a real gRPC server whose WriteRaw handler decodes the request. */
typedef struct ingester {
    rpc_server *server;
    char address[64];
    pthread_mutex_t mu;
    pthread_cond_t changed;
    strata_status answer;  /* OK accepts; anything else fails the call with that code */
    bool hold;             /* keep accepted calls unanswered until release_held */
    int64_t delay_ns;      /* > 0: acknowledge accepted calls this long after they arrived */
    bool fail_every_other; /* UNAVAILABLE for every second call */
    held_call held[MAX_HELD];
    size_t n_held, max_held;
    size_t attempts, accepted, series, max_series_per_call;
    char tenant[64];
    size_t last_pprof_len;
    store_log own_log;
    store_log *log; /* own_log, or one shared with other ingesters */
    pthread_t releaser;
    bool stopping;
} ingester;

static void log_init(store_log *l) {
    memset(l, 0, sizeof *l);
    pthread_mutex_init(&l->mu, NULL);
}

static void log_append(store_log *l, const stored *items, size_t n) {
    pthread_mutex_lock(&l->mu);
    for (size_t i = 0; i < n && l->n < MAX_LOG; i++)
        l->items[l->n++] = items[i];
    pthread_mutex_unlock(&l->mu);
}

/* The sequence numbers stored for series, in store order, as "0 1 2". */
static const char *log_of(store_log *l, const char *series) {
    static char out[4][4096];
    static int next;
    char *s = out[next++ % 4];
    size_t len = 0;
    s[0] = '\0';
    pthread_mutex_lock(&l->mu);
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->items[i].series, series) == 0 && len + 16 < sizeof out[0])
            len += (size_t)snprintf(s + len, sizeof out[0] - len, "%s%d", len ? " " : "",
                                    l->items[i].seq);
    pthread_mutex_unlock(&l->mu);
    return s;
}

static size_t log_count(store_log *l) {
    pthread_mutex_lock(&l->mu);
    size_t n = l->n;
    pthread_mutex_unlock(&l->mu);
    return n;
}

/* Decodes the series of a request into items; *bad when one carries the label bad="true". */
static stored *decode_items(const Parca__Profilestore__V1alpha1__WriteRawRequest *req, bool *bad) {
    stored *items = calloc(req->n_series ? req->n_series : 1, sizeof *items);
    assert_non_null(items);
    for (size_t i = 0; i < req->n_series; i++) {
        const Parca__Profilestore__V1alpha1__LabelSet *ls = req->series[i]->labels;
        for (size_t j = 0; j < ls->n_labels; j++)
            if (strcmp(ls->labels[j]->name, "bad") == 0)
                *bad = true;
        const ProtobufCBinaryData *raw = &req->series[i]->samples[0]->raw_profile;
        char text[64];
        snprintf(text, sizeof text, "%.*s", (int)(raw->len < 63 ? raw->len : 63),
                 (const char *)raw->data);
        if (sscanf(text, "%15[^:]:%d", items[i].series, &items[i].seq) != 2)
            items[i].seq = -1;
    }
    return items;
}

/* Finishes a call; an OK one is stored: counted and logged (mu not held). */
static void finish(ingester *in, rpc_call *call, strata_status code, stored *items, size_t n) {
    if (code == STRATA_OK) {
        pthread_mutex_lock(&in->mu);
        in->accepted++;
        in->series += n;
        if (n > in->max_series_per_call)
            in->max_series_per_call = n;
        pthread_mutex_unlock(&in->mu);
        log_append(in->log, items, n);
    }
    free(items);
    rpc_call_finish(call, code, code == STRATA_OK ? NULL : "test ingester says no", "", 0);
}

static void on_write_raw(rpc_call *call, const uint8_t *request, size_t len, void *arg) {
    ingester *in = arg;
    Parca__Profilestore__V1alpha1__WriteRawRequest *req =
        parca__profilestore__v1alpha1__write_raw_request__unpack(NULL, len, request);
    bool bad = false;
    stored *items = req != NULL ? decode_items(req, &bad) : NULL;
    size_t n = req != NULL ? req->n_series : 0;
    pthread_mutex_lock(&in->mu);
    in->attempts++;
    strata_status answer = req == NULL || bad ? STRATA_INVALID_ARGUMENT : in->answer;
    if (answer == STRATA_OK && in->fail_every_other && in->attempts % 2 == 1)
        answer = STRATA_UNAVAILABLE;
    if (answer == STRATA_OK) {
        in->last_pprof_len = req->series[n - 1]->samples[0]->raw_profile.len;
        const char *tenant;
        size_t tenant_len;
        if (rpc_call_metadata(call, "x-scope-orgid", &tenant, &tenant_len))
            snprintf(in->tenant, sizeof in->tenant, "%.*s", (int)tenant_len, tenant);
    }
    bool hold = answer == STRATA_OK && (in->hold || in->delay_ns > 0);
    if (hold) {
        assert_true(in->n_held < MAX_HELD);
        in->held[in->n_held++] = (held_call){
            call, in->hold ? INT64_MAX : strata_monotonic_ns() + in->delay_ns, items, n};
        if (in->n_held > in->max_held)
            in->max_held = in->n_held;
        pthread_cond_broadcast(&in->changed);
    }
    pthread_mutex_unlock(&in->mu);
    if (req != NULL)
        parca__profilestore__v1alpha1__write_raw_request__free_unpacked(req, NULL);
    if (!hold)
        finish(in, call, answer, items, n);
}

/* Acknowledges delayed calls when they are due. */
static void *releaser_main(void *arg) {
    ingester *in = arg;
    pthread_mutex_lock(&in->mu);
    while (!in->stopping) {
        int64_t now = strata_monotonic_ns(), next = now + STRATA_NS_PER_SEC;
        size_t i = 0;
        while (i < in->n_held) {
            held_call h = in->held[i];
            if (h.due_ns > now) {
                if (h.due_ns < next)
                    next = h.due_ns;
                i++;
                continue;
            }
            in->held[i] = in->held[--in->n_held];
            pthread_mutex_unlock(&in->mu);
            finish(in, h.call, STRATA_OK, h.items, h.n_items);
            pthread_mutex_lock(&in->mu);
            i = 0;
        }
        struct timespec ts = {(time_t)(next / STRATA_NS_PER_SEC), (long)(next % STRATA_NS_PER_SEC)};
        pthread_cond_timedwait(&in->changed, &in->mu, &ts);
    }
    pthread_mutex_unlock(&in->mu);
    return NULL;
}

static void ingester_start_logging(ingester *in, store_log *shared) {
    memset(in, 0, sizeof *in);
    pthread_mutex_init(&in->mu, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&in->changed, &attr);
    pthread_condattr_destroy(&attr);
    log_init(&in->own_log);
    in->log = shared != NULL ? shared : &in->own_log;
    strata_error err;
    rpc_server_options o = {.listen_address = "127.0.0.1:0", .threads = 2};
    in->server = rpc_server_new(&o, &err);
    assert_non_null(in->server);
    assert_int_equal(
        rpc_server_add_method(in->server, PUSH_WRITE_RAW_METHOD, on_write_raw, in, &err), 0);
    assert_int_equal(rpc_server_start(in->server, &err), 0);
    snprintf(in->address, sizeof in->address, "127.0.0.1:%d", rpc_server_port(in->server));
    assert_int_equal(pthread_create(&in->releaser, NULL, releaser_main, in), 0);
}

static void ingester_start(ingester *in) {
    ingester_start_logging(in, NULL);
}

static void set_answer(ingester *in, strata_status answer) {
    pthread_mutex_lock(&in->mu);
    in->answer = answer;
    pthread_mutex_unlock(&in->mu);
}

static void set_hold(ingester *in, bool hold) {
    pthread_mutex_lock(&in->mu);
    in->hold = hold;
    pthread_mutex_unlock(&in->mu);
}

static void set_delay(ingester *in, int64_t delay_ns) {
    pthread_mutex_lock(&in->mu);
    in->delay_ns = delay_ns;
    pthread_mutex_unlock(&in->mu);
}

/* Stops holding and answers every held call with code (OK stores them). */
static void release_held(ingester *in, strata_status code) {
    pthread_mutex_lock(&in->mu);
    in->hold = false;
    held_call held[MAX_HELD];
    size_t n = in->n_held;
    memcpy(held, in->held, n * sizeof *held);
    in->n_held = 0;
    pthread_mutex_unlock(&in->mu);
    for (size_t i = 0; i < n; i++)
        finish(in, held[i].call, code, held[i].items, held[i].n_items);
}

static void ingester_stop(ingester *in) {
    pthread_mutex_lock(&in->mu);
    in->stopping = true;
    pthread_cond_broadcast(&in->changed);
    pthread_mutex_unlock(&in->mu);
    pthread_join(in->releaser, NULL);
    release_held(in, STRATA_OK);
    rpc_server_shutdown(in->server, STRATA_NS_PER_SEC);
    pthread_cond_destroy(&in->changed);
    pthread_mutex_destroy(&in->mu);
    pthread_mutex_destroy(&in->own_log.mu);
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

/* Waits (polling, at most 20 s) until *field reaches at least want; returns its value. */
static size_t wait_count(ingester *in, const size_t *field, size_t want) {
    int64_t deadline = strata_monotonic_ns() + 20 * STRATA_NS_PER_SEC;
    size_t v;
    while ((v = count_of(in, field)) < want && strata_monotonic_ns() < deadline)
        usleep(1000);
    return v;
}

/* One series {job="test", series="<name>"} with a pprof of pprof_len bytes naming <name>:<seq>. */
typedef struct test_series {
    label_set labels;
    uint8_t pprof[2048];
    push_series s;
} test_series;

static void make_series(test_series *t, const char *name, int seq, size_t pprof_len) {
    char text[96];
    snprintf(text, sizeof text, "{job=\"test\", series=\"%s\"%s}", name,
             strncmp(name, "bad", 3) == 0 ? ", bad=\"true\"" : "");
    assert_int_equal(label_set_from_text(text, &t->labels, NULL), 0);
    memset(t->pprof, 0x1f, sizeof t->pprof);
    assert_true(pprof_len <= sizeof t->pprof && pprof_len >= 16);
    int n = snprintf((char *)t->pprof, 16, "%s:%d", name, seq);
    t->pprof[n] = 0;
    t->s = (push_series){&t->labels, t->pprof, pprof_len};
}

static void enqueue(pusher *p, const char *name, int seq) {
    test_series t;
    make_series(&t, name, seq, 100);
    strata_error err;
    assert_int_equal(push_enqueue(p, &t.s, 1, &err), 0);
    label_set_free(&t.labels);
}

/* Waits (polling, at most 20 s) until the pusher has had want series acknowledged. */
static void wait_acknowledged(pusher *p, uint64_t want) {
    int64_t deadline = strata_monotonic_ns() + 20 * STRATA_NS_PER_SEC;
    push_stats st;
    do {
        push_stats_get(p, &st);
        if (st.series >= want)
            return;
        usleep(1000);
    } while (strata_monotonic_ns() < deadline);
    fail_msg("%llu series acknowledged, want %llu", (unsigned long long)st.series,
             (unsigned long long)want);
}

static int64_t in_ms(int64_t ms) {
    return strata_monotonic_ns() + ms * STRATA_NS_PER_MS;
}

static push_stats stats_of(pusher *p) {
    push_stats st;
    push_stats_get(p, &st);
    return st;
}

/* ---- tests -------------------------------------------------------------------------------- */

static void test_encode(void **state) {
    (void)state;
    test_series t;
    make_series(&t, "a", 7, 1000);
    strata_buffer b = STRATA_BUFFER_INIT;
    assert_int_equal(push_write_raw_encode(&t.s, 1, &b, NULL), 0);
    Parca__Profilestore__V1alpha1__WriteRawRequest *req =
        parca__profilestore__v1alpha1__write_raw_request__unpack(NULL, b.len, b.data);
    assert_non_null(req);
    assert_int_equal(req->n_series, 1);
    assert_int_equal(req->series[0]->labels->n_labels, 2);
    assert_string_equal(req->series[0]->labels->labels[1]->name, "series");
    assert_string_equal(req->series[0]->labels->labels[1]->value, "a");
    assert_int_equal(req->series[0]->n_samples, 1);
    assert_int_equal(req->series[0]->samples[0]->raw_profile.len, 1000);
    assert_memory_equal(req->series[0]->samples[0]->raw_profile.data, t.pprof, 1000);
    parca__profilestore__v1alpha1__write_raw_request__free_unpacked(req, NULL);
    strata_buffer_free(&b);
    label_set_free(&t.labels);
}

/* A batch is its requests' encodings end to end: they parse as one request holding every series,
 * in order (what push.h relies on to batch without encoding twice). */
static void test_concatenated_requests(void **state) {
    (void)state;
    test_series a, b, c;
    make_series(&a, "a", 1, 100);
    make_series(&b, "b", 2, 200);
    make_series(&c, "c", 3, 300);
    push_series two[] = {b.s, c.s};
    strata_buffer bytes = STRATA_BUFFER_INIT;
    assert_int_equal(push_write_raw_encode(&a.s, 1, &bytes, NULL), 0);
    assert_int_equal(push_write_raw_encode(two, 2, &bytes, NULL), 0);
    Parca__Profilestore__V1alpha1__WriteRawRequest *req =
        parca__profilestore__v1alpha1__write_raw_request__unpack(NULL, bytes.len, bytes.data);
    assert_non_null(req);
    assert_int_equal(req->n_series, 3);
    assert_string_equal(req->series[0]->labels->labels[1]->value, "a");
    assert_string_equal(req->series[1]->labels->labels[1]->value, "b");
    assert_string_equal(req->series[2]->labels->labels[1]->value, "c");
    assert_int_equal(req->series[2]->samples[0]->raw_profile.len, 300);
    assert_string_equal((const char *)req->series[2]->samples[0]->raw_profile.data, "c:3");
    assert_string_equal(req->tenant, "");
    assert_false(req->normalized);
    parca__profilestore__v1alpha1__write_raw_request__free_unpacked(req, NULL);
    strata_buffer_free(&bytes);
    label_set_free(&a.labels);
    label_set_free(&b.labels);
    label_set_free(&c.labels);
}

/* Batches alternate between the addresses, and the tenant header reaches both. */
static void test_balancing(void **state) {
    (void)state;
    ingester a, b;
    ingester_start(&a);
    ingester_start(&b);
    const char *addresses[] = {a.address, b.address};
    push_options o = {.addresses = addresses, .n_addresses = 2, .tenant = "team-a"};
    pusher *p = pusher_new(&o, NULL);
    assert_non_null(p);
    for (int i = 0; i < 10; i++) {
        enqueue(p, "a", i);
        assert_int_equal(push_flush(p, in_ms(20000)), 0);
    }
    push_stats st = stats_of(p);
    assert_int_equal(st.enqueued_requests, 10);
    assert_int_equal(st.requests, 10);
    assert_int_equal(st.series, 10);
    assert_int_equal(st.batches, 10);
    assert_int_equal(st.errors, 0);
    assert_int_equal(st.queue_requests, 0);
    assert_int_equal(st.in_flight_batches, 0);
    assert_int_equal(st.lag_ns, 0);
    assert_int_equal(st.n_addresses, 2);
    assert_string_equal(st.addresses[0].address, a.address);
    assert_int_equal(st.addresses[0].batches, 5);
    assert_int_equal(st.addresses[1].batches, 5);
    assert_int_equal(count_of(&a, &a.accepted), 5);
    assert_int_equal(count_of(&b, &b.accepted), 5);
    assert_string_equal(text_of(&a, a.tenant), "team-a");
    assert_string_equal(text_of(&b, b.tenant), "team-a");
    assert_int_equal(count_of(&a, &a.last_pprof_len), 100);
    pusher_free(p);
    ingester_stop(&a);
    ingester_stop(&b);
}

/* An ingester that acknowledges 200 ms after each call, like a flush: 50 profiles enqueued at once
 * ride in a handful of WriteRaw calls, not 50; the size and series limits cut batches. */
static void test_batching(void **state) {
    (void)state;
    ingester in;
    ingester_start(&in);
    set_delay(&in, 200 * STRATA_NS_PER_MS);
    const char *addresses[] = {in.address};
    push_options o = {.addresses = addresses, .n_addresses = 1};
    pusher *p = pusher_new(&o, NULL);
    assert_non_null(p);
    char name[16];
    for (int i = 0; i < 50; i++) {
        snprintf(name, sizeof name, "t%d", i);
        enqueue(p, name, 0);
    }
    assert_int_equal(push_flush(p, in_ms(20000)), 0);
    push_stats st = stats_of(p);
    assert_int_equal(st.requests, 50);
    assert_int_equal(st.series, 50);
    assert_int_equal(count_of(&in, &in.series), 50);
    /* At most 4 calls go before the first acknowledgement; whatever queued meanwhile rides in the
     * next one or next few. */
    assert_true(st.batches >= 1 && st.batches <= 8);
    assert_int_equal(count_of(&in, &in.accepted), st.batches);
    assert_true(count_of(&in, &in.max_series_per_call) >= 50 / 8);
    pusher_free(p);

    /* max_request_series: at most 10 series a call. */
    set_delay(&in, 0);
    pthread_mutex_lock(&in.mu);
    in.max_series_per_call = 0;
    pthread_mutex_unlock(&in.mu);
    set_hold(&in, true);
    o.max_in_flight = 1;
    o.max_request_series = 10;
    p = pusher_new(&o, NULL);
    assert_non_null(p);
    enqueue(p, "first", 0);
    assert_int_equal(wait_count(&in, &in.n_held, 1), 1);
    for (int i = 0; i < 25; i++) {
        snprintf(name, sizeof name, "s%d", i);
        enqueue(p, name, 0);
    }
    release_held(&in, STRATA_OK);
    assert_int_equal(push_flush(p, in_ms(20000)), 0);
    st = stats_of(p);
    assert_int_equal(st.series, 26);
    assert_int_equal(st.batches, 4); /* 1, then 10 + 10 + 5 */
    assert_int_equal(count_of(&in, &in.max_series_per_call), 10);
    pusher_free(p);

    /* max_request_bytes: 1,000-byte profiles, at most 3,500 bytes a call, so 3 a call; a profile
     * larger than the limit goes alone. */
    test_series big;
    make_series(&big, "big", 0, 2048);
    strata_buffer one = STRATA_BUFFER_INIT;
    test_series t;
    make_series(&t, "x", 0, 1000);
    assert_int_equal(push_write_raw_encode(&t.s, 1, &one, NULL), 0);
    label_set_free(&t.labels);
    o.max_request_series = 0;
    o.max_request_bytes = 3500;
    assert_true(3 * one.len <= 3500 && 4 * one.len > 3500);
    set_hold(&in, true);
    pusher *q = pusher_new(&o, NULL);
    assert_non_null(q);
    enqueue(q, "first", 1);
    size_t held0 = count_of(&in, &in.accepted);
    assert_int_equal(wait_count(&in, &in.n_held, 1), 1);
    for (int i = 0; i < 7; i++) {
        snprintf(name, sizeof name, "b%d", i);
        make_series(&t, name, 0, 1000);
        assert_int_equal(push_enqueue(q, &t.s, 1, NULL), 0);
        label_set_free(&t.labels);
    }
    push_series bigs[] = {big.s, big.s};
    assert_int_equal(push_enqueue(q, bigs, 2, NULL), 0); /* 4 KiB: over the limit, alone */
    release_held(&in, STRATA_OK);
    assert_int_equal(push_flush(q, in_ms(20000)), 0);
    st = stats_of(q);
    assert_int_equal(st.series, 10);
    /* "first", then 3 + 3 + 1 (the 1,000-byte ones), then the 4 KiB one alone */
    assert_int_equal(st.batches, 5);
    assert_int_equal(count_of(&in, &in.accepted) - held0, 5);
    assert_int_equal(st.dropped[PUSH_DROP_TOO_LARGE], 0);
    pusher_free(q);
    strata_buffer_free(&one);
    label_set_free(&big.labels);
    ingester_stop(&in);
}

/* Calls in flight: max_in_flight calls wait on an ingester at once, not more; with a 200 ms
 * acknowledgement and one profile a call, 4 in flight deliver about 4x what 1 does. */
static void test_in_flight(void **state) {
    (void)state;
    ingester in;
    ingester_start(&in);
    set_hold(&in, true);
    const char *addresses[] = {in.address};
    push_options o = {.addresses = addresses, .n_addresses = 1, .max_request_series = 1};
    pusher *p = pusher_new(&o, NULL);
    assert_non_null(p);
    char name[16];
    for (int i = 0; i < 10; i++) {
        snprintf(name, sizeof name, "t%d", i);
        enqueue(p, name, 0);
    }
    assert_int_equal(wait_count(&in, &in.n_held, 4), 4);
    assert_int_equal(push_flush(p, in_ms(100)), -1); /* gives a fifth call time to show up */
    assert_int_equal(count_of(&in, &in.n_held), 4);
    push_stats st = stats_of(p);
    assert_int_equal(st.in_flight_batches, 4);
    assert_int_equal(st.addresses[0].in_flight, 4);
    assert_int_equal(st.queue_requests, 10);
    assert_true(st.lag_ns > 0);
    release_held(&in, STRATA_OK);
    assert_int_equal(push_flush(p, in_ms(20000)), 0);
    st = stats_of(p);
    assert_int_equal(st.series, 10);
    assert_int_equal(st.in_flight_batches, 0);
    assert_int_equal(count_of(&in, &in.max_held), 4);
    pusher_free(p);

    /* Throughput against a 200 ms acknowledgement, 12 profiles of 12 series, one a call. */
    set_delay(&in, 200 * STRATA_NS_PER_MS);
    int64_t elapsed[2];
    unsigned in_flight[2] = {1, 4};
    for (int k = 0; k < 2; k++) {
        o.max_in_flight = in_flight[k];
        p = pusher_new(&o, NULL);
        assert_non_null(p);
        int64_t start = strata_monotonic_ns();
        for (int i = 0; i < 12; i++) {
            snprintf(name, sizeof name, "u%d", i);
            enqueue(p, name, k);
        }
        assert_int_equal(push_flush(p, in_ms(20000)), 0);
        elapsed[k] = strata_monotonic_ns() - start;
        assert_int_equal(stats_of(p).batches, 12);
        pusher_free(p);
    }
    print_message("12 profiles, 200 ms acknowledgement: %.2f s one in flight, %.2f s four\n",
                  (double)elapsed[0] / 1e9, (double)elapsed[1] / 1e9);
    assert_true(elapsed[0] >= 12 * 200 * STRATA_NS_PER_MS);
    assert_true(elapsed[0] >= 2 * elapsed[1]); /* ~4x; 2x leaves room for a loaded machine */
    ingester_stop(&in);
}

/* A profile that fails on one address, held there while later profiles of its series are
 * enqueued, is stored before them: they wait while other series go ahead. */
static void test_failover_keeps_series_order(void **state) {
    (void)state;
    store_log shared;
    log_init(&shared);
    ingester a, b;
    ingester_start_logging(&a, &shared);
    ingester_start_logging(&b, &shared);
    set_hold(&a, true);
    const char *addresses[] = {a.address, b.address};
    push_options o = {.addresses = addresses,
                      .n_addresses = 2,
                      .min_backoff_ns = 3600 * STRATA_NS_PER_SEC,
                      .max_backoff_ns = 3600 * STRATA_NS_PER_SEC};
    pusher *p = pusher_new(&o, NULL);
    assert_non_null(p);
    enqueue(p, "s", 0); /* the first batch goes to the first address, which holds it */
    assert_int_equal(wait_count(&a, &a.n_held, 1), 1);
    enqueue(p, "s", 1);
    enqueue(p, "s", 2);
    enqueue(p, "t", 0); /* another series: goes to b at once */
    wait_acknowledged(p, 1);
    assert_string_equal(log_of(&shared, "t"), "0");
    assert_string_equal(log_of(&shared, "s"), "");
    push_stats st = stats_of(p);
    assert_int_equal(st.queue_requests, 3); /* s:0 in flight, s:1 and s:2 held back */
    assert_int_equal(st.in_flight_batches, 1);
    set_answer(&a, STRATA_UNAVAILABLE);
    release_held(&a, STRATA_UNAVAILABLE);
    assert_int_equal(push_flush(p, in_ms(20000)), 0);
    assert_string_equal(log_of(&shared, "s"), "0 1 2");
    st = stats_of(p);
    assert_int_equal(st.series, 4);
    assert_true(st.errors >= 1);
    assert_int_equal(st.dropped[PUSH_DROP_QUEUE_FULL] + st.dropped[PUSH_DROP_REJECTED], 0);
    pusher_free(p);
    ingester_stop(&a);
    ingester_stop(&b);
    pthread_mutex_destroy(&shared.mu);
}

/* A profile backing off (every address failed it) holds back the later profiles of its series,
 * not the others. */
static void test_backoff_keeps_series_order(void **state) {
    (void)state;
    ingester in;
    ingester_start(&in);
    set_answer(&in, STRATA_UNAVAILABLE);
    const char *addresses[] = {in.address};
    push_options o = {.addresses = addresses,
                      .n_addresses = 1,
                      .max_in_flight = 1,
                      .min_backoff_ns = 2 * STRATA_NS_PER_SEC,
                      .max_backoff_ns = 2 * STRATA_NS_PER_SEC};
    pusher *p = pusher_new(&o, NULL);
    assert_non_null(p);
    enqueue(p, "s", 0);
    assert_int_equal(wait_count(&in, &in.attempts, 1), 1);
    set_answer(&in, STRATA_OK);
    enqueue(p, "s", 1); /* s:0 backs off for 2 s: s:1 waits for it */
    enqueue(p, "t", 0); /* goes at once */
    wait_acknowledged(p, 1);
    assert_string_equal(log_of(in.log, "t"), "0");
    assert_string_equal(log_of(in.log, "s"), "");
    assert_int_equal(stats_of(p).queue_requests, 2);
    assert_int_equal(push_flush(p, in_ms(20000)), 0);
    assert_string_equal(log_of(in.log, "s"), "0 1");
    pusher_free(p);
    ingester_stop(&in);
}

/* Many series, many profiles each, 4 calls in flight per address, small batches, one address
 * failing every second call and both acknowledging late: every series is stored complete and in
 * order. */
static void test_series_order_under_failures(void **state) {
    (void)state;
    store_log shared;
    log_init(&shared);
    ingester a, b;
    ingester_start_logging(&a, &shared);
    ingester_start_logging(&b, &shared);
    a.fail_every_other = true;
    set_delay(&a, 5 * STRATA_NS_PER_MS);
    set_delay(&b, 20 * STRATA_NS_PER_MS);
    const char *addresses[] = {a.address, b.address};
    push_options o = {.addresses = addresses,
                      .n_addresses = 2,
                      .max_request_series = 3,
                      .min_backoff_ns = 1 * STRATA_NS_PER_MS,
                      .max_backoff_ns = 5 * STRATA_NS_PER_MS};
    pusher *p = pusher_new(&o, NULL);
    assert_non_null(p);
    const char *names[] = {"a", "b", "c", "d", "e", "f"};
    for (int seq = 0; seq < 30; seq++) {
        for (int s = 0; s < 6; s++)
            enqueue(p, names[s], seq);
        if (seq % 10 == 9)
            usleep(10000); /* let some go while others queue */
    }
    assert_int_equal(push_flush(p, in_ms(60000)), 0);
    char want[256];
    size_t len = 0;
    for (int seq = 0; seq < 30; seq++)
        len += (size_t)snprintf(want + len, sizeof want - len, "%s%d", seq ? " " : "", seq);
    for (int s = 0; s < 6; s++)
        assert_string_equal(log_of(&shared, names[s]), want);
    push_stats st = stats_of(p);
    assert_int_equal(st.series, 180);
    assert_int_equal(log_count(&shared), 180);
    assert_true(st.errors >= 1);
    assert_true(count_of(&b, &b.series) > 0);
    pusher_free(p);
    ingester_stop(&a);
    ingester_stop(&b);
    pthread_mutex_destroy(&shared.mu);
}

/* UNAVAILABLE on one address moves the batch to the next one at once (no backoff: the test would
 * otherwise wait the 1 h minimum backoff set here). */
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
    for (int i = 0; i < 4; i++) {
        enqueue(p, "a", i);
        assert_int_equal(push_flush(p, in_ms(20000)), 0);
    }
    push_stats st = stats_of(p);
    assert_int_equal(st.requests, 4);
    assert_int_equal(count_of(&up, &up.series), 4);
    assert_string_equal(log_of(up.log, "a"), "0 1 2 3");
    /* Requests 0 and 2 started on the down address (round-robin). */
    assert_int_equal(count_of(&down, &down.attempts), 2);
    assert_int_equal(st.errors, 2);
    assert_int_equal(st.addresses[0].errors, 2);
    assert_int_equal(st.addresses[0].batches, 0);
    assert_int_equal(st.addresses[1].batches, 4);
    assert_non_null(strstr(st.addresses[0].last_error, "UNAVAILABLE: test ingester says no"));
    assert_int_equal(st.dropped[PUSH_DROP_QUEUE_FULL] + st.dropped[PUSH_DROP_REJECTED], 0);
    pusher_free(p);

    /* A dead address (nothing listens on port 1) fails over the same way. */
    const char *dead[] = {"127.0.0.1:1", up.address};
    o.addresses = dead;
    p = pusher_new(&o, NULL);
    assert_non_null(p);
    enqueue(p, "a", 10);
    assert_int_equal(push_flush(p, in_ms(20000)), 0);
    st = stats_of(p);
    assert_int_equal(st.requests, 1);
    assert_int_equal(st.addresses[0].errors, 1);
    assert_int_equal(count_of(&up, &up.accepted), 5);
    assert_string_equal(log_of(up.log, "a"), "0 1 2 3 10");
    pusher_free(p);
    ingester_stop(&down);
    ingester_stop(&up);
}

/* INVALID_ARGUMENT will never succeed anywhere: a request rejected alone is dropped, not retried;
 * a rejected batch is split and only its bad request is dropped. */
static void test_rejected(void **state) {
    (void)state;
    ingester in;
    ingester_start(&in);
    set_hold(&in, true);
    const char *addresses[] = {in.address};
    push_options o = {.addresses = addresses, .n_addresses = 1, .max_in_flight = 1};
    pusher *p = pusher_new(&o, NULL);
    assert_non_null(p);
    enqueue(p, "a", 0);
    assert_int_equal(wait_count(&in, &in.n_held, 1), 1);
    /* These queue behind the held call and go as one batch, which the ingester rejects whole. */
    enqueue(p, "a", 1);
    enqueue(p, "bad", 0);
    enqueue(p, "a", 2);
    release_held(&in, STRATA_OK);
    assert_int_equal(push_flush(p, in_ms(20000)), 0);
    push_stats st = stats_of(p);
    assert_int_equal(st.dropped[PUSH_DROP_REJECTED], 1);
    assert_int_equal(st.dropped_series, 1);
    assert_int_equal(st.requests, 3);
    assert_int_equal(st.errors, 2); /* the batch, then "bad" alone */
    assert_int_equal(count_of(&in, &in.attempts), 5);
    assert_string_equal(log_of(in.log, "a"), "0 1 2");
    assert_string_equal(log_of(in.log, "bad"), "");
    assert_non_null(strstr(st.last_error, "INVALID_ARGUMENT"));
    assert_string_equal(push_drop_reason_name(PUSH_DROP_REJECTED), "rejected");
    pusher_free(p);
    ingester_stop(&in);
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
    enqueue(p, "a", 42);
    push_stats st;
    int64_t deadline = in_ms(20000);
    do {
        usleep(5000);
        st = stats_of(p);
    } while (st.errors < 6 && strata_monotonic_ns() < deadline);
    assert_true(st.errors >= 6);
    assert_int_equal(st.requests, 0);
    assert_int_equal(st.queue_requests, 1);
    set_answer(&b, STRATA_OK);
    assert_int_equal(push_flush(p, in_ms(20000)), 0);
    st = stats_of(p);
    assert_int_equal(st.requests, 1);
    assert_int_equal(count_of(&b, &b.accepted), 1);
    assert_string_equal(log_of(b.log, "a"), "42");
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
    set_hold(&in, true);
    const char *addresses[] = {in.address};
    push_options o = {
        .addresses = addresses, .n_addresses = 1, .max_queue_requests = 2, .max_in_flight = 1};
    pusher *p = pusher_new(&o, NULL);
    assert_non_null(p);
    enqueue(p, "a", 0);
    assert_int_equal(wait_count(&in, &in.n_held, 1), 1);
    /* Request 0 is held by the ingester; these return although nothing moves. */
    for (int i = 1; i <= 5; i++)
        enqueue(p, "a", i);
    push_stats st = stats_of(p);
    assert_int_equal(st.queue_requests, 2); /* 0 in flight, 5 queued */
    assert_int_equal(st.dropped[PUSH_DROP_QUEUE_FULL], 4);
    assert_int_equal(st.dropped_series, 4);
    assert_int_equal(push_flush(p, in_ms(50)), -1);
    release_held(&in, STRATA_OK);
    assert_int_equal(push_flush(p, in_ms(20000)), 0);
    st = stats_of(p);
    assert_int_equal(st.requests, 2);
    assert_string_equal(log_of(in.log, "a"), "0 5");
    pusher_free(p);
    ingester_stop(&in);
}

/* The byte bound, in flight included: nothing listens, so nothing leaves; the queue never passes
 * its bound, drops the oldest, and counts what it drops; a request larger than the bound on its
 * own is dropped as too large. */
static void test_queue_bytes(void **state) {
    (void)state;
    test_series t;
    make_series(&t, "a", 1, 1000);
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
    push_stats st;
    for (int i = 0; i < 100; i++) {
        assert_int_equal(push_enqueue(p, &t.s, 1, NULL), 0);
        st = stats_of(p);
        assert_true(st.queue_bytes <= 3 * b.len);
    }
    assert_int_equal(st.queue_bytes, 3 * b.len);
    assert_int_equal(st.queue_requests, 3);
    assert_int_equal(st.dropped[PUSH_DROP_QUEUE_FULL], 97);
    assert_int_equal(st.dropped_series, 97);
    assert_true(st.lag_ns > 0);
    pusher_free(p);

    test_series big;
    make_series(&big, "big", 2, 2048);
    p = pusher_new(&o, NULL);
    assert_non_null(p);
    assert_int_equal(push_enqueue(p, &big.s, 1, NULL), 0);
    push_series hs[3] = {big.s, big.s, big.s};
    assert_int_equal(push_enqueue(p, hs, 3, NULL), 0);
    st = stats_of(p);
    assert_int_equal(st.dropped[PUSH_DROP_TOO_LARGE], 1);
    assert_int_equal(st.dropped_series, 3);
    assert_int_equal(st.queue_requests, 1);
    pusher_free(p);
    strata_buffer_free(&b);
    label_set_free(&t.labels);
    label_set_free(&big.labels);
}

/* Batches in flight hold their requests' bytes once: with calls held, the bound still holds, the
 * oldest queued requests are dropped, and what survives (in flight, then the newest) is stored. */
static void test_queue_bytes_in_flight(void **state) {
    (void)state;
    ingester in;
    ingester_start(&in);
    set_hold(&in, true);
    test_series t;
    make_series(&t, "s0", 0, 1000); /* as long as every request below */
    strata_buffer one = STRATA_BUFFER_INIT;
    assert_int_equal(push_write_raw_encode(&t.s, 1, &one, NULL), 0);
    label_set_free(&t.labels);
    const char *addresses[] = {in.address};
    push_options o = {.addresses = addresses,
                      .n_addresses = 1,
                      .max_in_flight = 2,
                      .max_queue_bytes = 10 * one.len};
    pusher *p = pusher_new(&o, NULL);
    assert_non_null(p);
    push_stats st;
    char name[16];
    for (int i = 0; i < 40; i++) {
        snprintf(name, sizeof name, "s%d", i % 4);
        make_series(&t, name, i, 1000);
        assert_int_equal(push_enqueue(p, &t.s, 1, NULL), 0);
        label_set_free(&t.labels);
        st = stats_of(p);
        assert_true(st.queue_bytes <= 10 * one.len);
        if (i == 0)
            assert_int_equal(wait_count(&in, &in.n_held, 1), 1);
    }
    assert_int_equal(st.queue_requests, 10);
    assert_int_equal(st.dropped[PUSH_DROP_QUEUE_FULL], 30);
    assert_true(st.in_flight_batches >= 1 && st.in_flight_batches <= 2);
    release_held(&in, STRATA_OK);
    assert_int_equal(push_flush(p, in_ms(20000)), 0);
    st = stats_of(p);
    assert_int_equal(st.requests, 10);
    assert_int_equal(count_of(&in, &in.series), 10);
    /* the newest survive: the last of each series is stored last */
    assert_non_null(strstr(log_of(in.log, "s3"), "39"));
    pusher_free(p);
    strata_buffer_free(&one);
    ingester_stop(&in);
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
    const char *one[] = {"127.0.0.1:1"};
    o.addresses = one;
    o.max_in_flight = PUSH_MAX_IN_FLIGHT + 1;
    assert_null(pusher_new(&o, &err));
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "max_in_flight"));
    pusher_free(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encode),
        cmocka_unit_test(test_concatenated_requests),
        cmocka_unit_test(test_balancing),
        cmocka_unit_test(test_batching),
        cmocka_unit_test(test_in_flight),
        cmocka_unit_test(test_failover_keeps_series_order),
        cmocka_unit_test(test_backoff_keeps_series_order),
        cmocka_unit_test(test_series_order_under_failures),
        cmocka_unit_test(test_failover),
        cmocka_unit_test(test_rejected),
        cmocka_unit_test(test_backoff_and_recovery),
        cmocka_unit_test(test_queue_full_drops_oldest),
        cmocka_unit_test(test_queue_bytes),
        cmocka_unit_test(test_queue_bytes_in_flight),
        cmocka_unit_test(test_bad_options),
    };
    if (getenv("PUSH_TEST_FILTER") != NULL) /* e.g. PUSH_TEST_FILTER=test_in_flight */
        cmocka_set_test_filter(getenv("PUSH_TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
