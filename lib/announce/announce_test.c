/*
 * announce_test.c - block announcements over nng: the wire format and its validation, round
 * trips over tcp and inproc, several subscribers, either start order and publisher restarts,
 * malformed and oversized messages from a raw PUB socket, and shutdown while messages flow.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <nng/nng.h>
#include <nng/protocol/pubsub0/pub.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "announce/announce.h"

#define WAIT_MS 5000
#define WARMUP_TENANT "warmup"
#define MAX_RECORDED 4096

/* ---- a callback that records what it is told ------------------------------------------------ */

typedef struct recorder {
    pthread_mutex_t mu;
    pthread_cond_t cond;
    size_t count; /* announcements other than warm-ups */
    size_t warmups;
    char tenants[MAX_RECORDED][ANNOUNCE_TENANT_MAX + 1];
    char ulids[MAX_RECORDED][ANNOUNCE_ULID_LEN + 1];
    int delay_us; /* a slow callback */
} recorder;

static recorder *recorder_new(void) {
    recorder *r = calloc(1, sizeof *r);
    assert_non_null(r);
    assert_int_equal(pthread_mutex_init(&r->mu, NULL), 0);
    assert_int_equal(pthread_cond_init(&r->cond, NULL), 0);
    return r;
}

static void recorder_free(recorder *r) {
    pthread_cond_destroy(&r->cond);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static void record(void *ctx, const char *tenant, const char *ulid) {
    recorder *r = ctx;
    if (r->delay_us > 0) {
        struct timespec ts = {0, r->delay_us * 1000L};
        nanosleep(&ts, NULL);
    }
    pthread_mutex_lock(&r->mu);
    if (strcmp(tenant, WARMUP_TENANT) == 0) {
        r->warmups++;
    } else if (r->count < MAX_RECORDED) {
        snprintf(r->tenants[r->count], sizeof r->tenants[0], "%s", tenant);
        snprintf(r->ulids[r->count], sizeof r->ulids[0], "%s", ulid);
        r->count++;
    }
    pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&r->mu);
}

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void deadline_after(struct timespec *ts, long ms) {
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

/* Waits until *field (count or warmups) reaches want; returns the value seen. */
static size_t wait_for(recorder *r, const size_t *field, size_t want, long ms) {
    struct timespec deadline;
    deadline_after(&deadline, ms);
    pthread_mutex_lock(&r->mu);
    while (*field < want && pthread_cond_timedwait(&r->cond, &r->mu, &deadline) == 0) {
    }
    size_t seen = *field;
    pthread_mutex_unlock(&r->mu);
    return seen;
}

static size_t warmups_of(recorder *r) {
    pthread_mutex_lock(&r->mu);
    size_t n = r->warmups;
    pthread_mutex_unlock(&r->mu);
    return n;
}

/* A valid ULID made from i: "01J" and 23 digits. */
static void test_ulid(unsigned i, char out[ANNOUNCE_ULID_LEN + 1]) {
    snprintf(out, ANNOUNCE_ULID_LEN + 1, "01J%023u", i);
}

/* Pub/sub drops messages until the connection is up: publishes warm-ups until every recorder has
 * seen one, which proves each subscriber is connected. */
static void warm_up(announce_publisher *pub, recorder **recs, size_t n) {
    char ulid[ANNOUNCE_ULID_LEN + 1];
    test_ulid(0, ulid);
    for (int tries = 0; tries < WAIT_MS / 20; tries++) {
        assert_int_equal(announce_publish(pub, WARMUP_TENANT, ulid, NULL), 0);
        sleep_ms(20);
        size_t ready = 0;
        for (size_t i = 0; i < n; i++)
            ready += warmups_of(recs[i]) > 0;
        if (ready == n)
            return;
    }
    fail_msg("subscribers did not connect within %d ms", WAIT_MS);
}

static void publish_range(announce_publisher *pub, const char *tenant, unsigned first,
                          unsigned count) {
    char ulid[ANNOUNCE_ULID_LEN + 1];
    strata_error err;
    for (unsigned i = first; i < first + count; i++) {
        test_ulid(i, ulid);
        assert_int_equal(announce_publish(pub, tenant, ulid, &err), 0);
    }
}

/* Asserts r received exactly ulids first..first+count-1 for tenant, in order. */
static void assert_received_range(recorder *r, const char *tenant, unsigned first, unsigned count) {
    assert_int_equal(wait_for(r, &r->count, count, WAIT_MS), count);
    sleep_ms(50); /* nothing more arrives */
    pthread_mutex_lock(&r->mu);
    assert_int_equal(r->count, count);
    char ulid[ANNOUNCE_ULID_LEN + 1];
    for (unsigned i = 0; i < count; i++) {
        test_ulid(first + i, ulid);
        assert_string_equal(r->tenants[i], tenant);
        assert_string_equal(r->ulids[i], ulid);
    }
    pthread_mutex_unlock(&r->mu);
}

static char *tcp_url(int port) {
    static char url[64];
    snprintf(url, sizeof url, "tcp://127.0.0.1:%d", port);
    return url;
}

/* ---- the wire format ---------------------------------------------------------------------------
 */

static bool parse_str(const char *msg, char *tenant, char *ulid) {
    return announce_parse_message(msg, strlen(msg), tenant, ulid);
}

static void test_parse_valid(void **state) {
    (void)state;
    char tenant[ANNOUNCE_TENANT_MAX + 1], ulid[ANNOUNCE_ULID_LEN + 1];
    assert_true(
        parse_str("strata-block v1 team-a.prod_1 01HZX3Y8W6Q9R0S1T2V3W4X5Y6\n", tenant, ulid));
    assert_string_equal(tenant, "team-a.prod_1");
    assert_string_equal(ulid, "01HZX3Y8W6Q9R0S1T2V3W4X5Y6");
    assert_true(parse_str("strata-block v1 a 7ZZZZZZZZZZZZZZZZZZZZZZZZZ\n", tenant, ulid));
    assert_string_equal(tenant, "a");

    char longest[ANNOUNCE_MESSAGE_MAX + 8];
    char name[ANNOUNCE_TENANT_MAX + 1];
    memset(name, 't', ANNOUNCE_TENANT_MAX);
    name[ANNOUNCE_TENANT_MAX] = '\0';
    snprintf(longest, sizeof longest, "strata-block v1 %s 01HZX3Y8W6Q9R0S1T2V3W4X5Y6\n", name);
    assert_int_equal(strlen(longest), 194);
    assert_true(parse_str(longest, tenant, ulid));
    assert_string_equal(tenant, name);
}

static void test_parse_rejects_malformed(void **state) {
    (void)state;
    static const char *const bad[] = {
        "",
        "\n",
        "strata-block v1 \n",
        "strata-block v1 anonymous\n",
        "strata-block v1 anonymous 01HZX3Y8W6Q9R0S1T2V3W4X5Y6",     /* no newline */
        "strata-block v1 anonymous 01HZX3Y8W6Q9R0S1T2V3W4X5Y6\n\n", /* two newlines */
        "strata-block v2 anonymous 01HZX3Y8W6Q9R0S1T2V3W4X5Y6\n",   /* unknown version */
        "strata-blocks v1 anonymous 01HZX3Y8W6Q9R0S1T2V3W4X5Y6\n",  /* wrong magic */
        "STRATA-BLOCK V1 anonymous 01HZX3Y8W6Q9R0S1T2V3W4X5Y6\n",
        "strata-block v1  01HZX3Y8W6Q9R0S1T2V3W4X5Y6\n",           /* empty tenant */
        "strata-block v1 a b 01HZX3Y8W6Q9R0S1T2V3W4X5Y6\n",        /* extra field */
        "strata-block v1 anonymous  01HZX3Y8W6Q9R0S1T2V3W4X5Y6\n", /* double space */
        "strata-block v1 anonymous 01HZX3Y8W6Q9R0S1T2V3W4X5Y6 \n", /* trailing space */
        "strata-block v1 .. 01HZX3Y8W6Q9R0S1T2V3W4X5Y6\n",         /* path traversal */
        "strata-block v1 . 01HZX3Y8W6Q9R0S1T2V3W4X5Y6\n",
        "strata-block v1 a/b 01HZX3Y8W6Q9R0S1T2V3W4X5Y6\n",        /* slash in tenant */
        "strata-block v1 anonymous 01hzx3y8w6q9r0s1t2v3w4x5y6\n",  /* lower case */
        "strata-block v1 anonymous 81HZX3Y8W6Q9R0S1T2V3W4X5Y6\n",  /* overflows 128 bits */
        "strata-block v1 anonymous 01HZX3Y8W6Q9R0S1T2V3W4X5YU\n",  /* U is not base32 */
        "strata-block v1 anonymous 01HZX3Y8W6Q9R0S1T2V3W4X5Y\n",   /* 25 characters */
        "strata-block v1 anonymous 01HZX3Y8W6Q9R0S1T2V3W4X5Y67\n", /* 27 characters */
    };
    char tenant[ANNOUNCE_TENANT_MAX + 1], ulid[ANNOUNCE_ULID_LEN + 1];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (parse_str(bad[i], tenant, ulid))
            fail_msg("accepted malformed message %zu: \"%s\"", i, bad[i]);
    }
    /* a NUL inside the tenant */
    static const char nul[] = "strata-block v1 ab\0c 01HZX3Y8W6Q9R0S1T2V3W4X5Y6\n";
    assert_false(announce_parse_message(nul, sizeof nul - 1, tenant, ulid));
    /* tenant of 151 characters, and oversized messages */
    char msg[1024];
    char name[ANNOUNCE_TENANT_MAX + 2];
    memset(name, 't', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    snprintf(msg, sizeof msg, "strata-block v1 %s 01HZX3Y8W6Q9R0S1T2V3W4X5Y6\n", name);
    assert_false(parse_str(msg, tenant, ulid));
    memset(msg, 'x', sizeof msg);
    assert_false(announce_parse_message(msg, sizeof msg, tenant, ulid));
    assert_false(announce_parse_message(NULL, 0, tenant, ulid));
}

static void test_validators(void **state) {
    (void)state;
    assert_true(announce_tenant_is_valid("anonymous", 9));
    assert_true(announce_tenant_is_valid("...", 3));
    assert_false(announce_tenant_is_valid("..", 2));
    assert_false(announce_tenant_is_valid("", 0));
    assert_false(announce_tenant_is_valid("a b", 3));
    assert_true(announce_ulid_is_valid("00000000000000000000000000", 26));
    assert_false(announce_ulid_is_valid("0000000000000000000000000I", 26));
    assert_false(announce_ulid_is_valid("0000000000000000000000000L", 26));
    assert_false(announce_ulid_is_valid("0000000000000000000000000O", 26));
}

/* ---- argument errors ------------------------------------------------------------------------ */

static void test_publish_rejects_bad_fields(void **state) {
    (void)state;
    strata_error err;
    announce_publisher *pub = announce_publisher_new("inproc://announce-bad-fields", &err);
    assert_non_null(pub);
    assert_int_equal(announce_publisher_port(pub), 0);
    assert_int_equal(announce_publish(pub, "a/b", "01HZX3Y8W6Q9R0S1T2V3W4X5Y6", &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "tenant"));
    assert_int_equal(announce_publish(pub, "anonymous", "01hzx3y8w6q9r0s1t2v3w4x5y6", &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "ulid"));
    assert_int_equal(announce_publish(pub, NULL, NULL, &err), -1);
    assert_int_equal(announce_publish(pub, "anonymous", "01HZX3Y8W6Q9R0S1T2V3W4X5Y6", &err), 0);
    announce_publisher_stats st;
    announce_publisher_get_stats(pub, &st);
    assert_int_equal(st.published, 1);
    assert_int_equal(st.failed, 3);
    announce_publisher_free(pub);
    announce_publisher_free(NULL);
}

static void test_constructor_errors(void **state) {
    (void)state;
    strata_error err;
    assert_null(announce_publisher_new("", &err));
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_null(announce_publisher_new("bogus://nowhere", &err));
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "bogus://nowhere"));

    announce_publisher *first = announce_publisher_new("tcp://127.0.0.1:0", &err);
    assert_non_null(first);
    int port = announce_publisher_port(first);
    assert_true(port > 0);
    assert_null(announce_publisher_new(tcp_url(port), &err)); /* address in use */
    assert_int_equal(err.code, STRATA_UNAVAILABLE);
    announce_publisher_free(first);

    recorder *r = recorder_new();
    const char *good[] = {"tcp://127.0.0.1:1"};
    assert_null(announce_subscriber_new(good, 0, record, r, &err));
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_null(announce_subscriber_new(good, 1, NULL, r, &err));
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    const char *empty[] = {"tcp://127.0.0.1:1", ""};
    assert_null(announce_subscriber_new(empty, 2, record, r, &err));
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    const char *bogus[] = {"tcp://127.0.0.1:1", "bogus://nowhere"};
    assert_null(announce_subscriber_new(bogus, 2, record, r, &err));
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "bogus://nowhere"));
    announce_subscriber_free(NULL);
    recorder_free(r);
}

/* ---- round trips ---------------------------------------------------------------------------- */

static void round_trip(const char *listen_url, bool tcp) {
    strata_error err;
    announce_publisher *pub = announce_publisher_new(listen_url, &err);
    assert_non_null(pub);
    const char *dial = listen_url;
    if (tcp) {
        assert_true(announce_publisher_port(pub) > 0);
        dial = tcp_url(announce_publisher_port(pub));
    }
    recorder *r = recorder_new();
    announce_subscriber *sub = announce_subscriber_new(&dial, 1, record, r, &err);
    assert_non_null(sub);
    warm_up(pub, &r, 1);
    publish_range(pub, "team-a", 1, 500);
    assert_received_range(r, "team-a", 1, 500);

    announce_subscriber_stats st;
    announce_subscriber_get_stats(sub, &st);
    assert_int_equal(st.received, 500 + warmups_of(r));
    assert_int_equal(st.malformed, 0);
    announce_subscriber_free(sub);
    announce_publisher_free(pub);
    recorder_free(r);
}

static void test_round_trip_tcp(void **state) {
    (void)state;
    round_trip("tcp://127.0.0.1:0", true);
}

static void test_round_trip_inproc(void **state) {
    (void)state;
    round_trip("inproc://announce-round-trip", false);
}

static void test_several_subscribers(void **state) {
    (void)state;
    strata_error err;
    announce_publisher *pub = announce_publisher_new("tcp://127.0.0.1:0", &err);
    assert_non_null(pub);
    const char *dial = tcp_url(announce_publisher_port(pub));
    enum { N = 4 };
    recorder *recs[N];
    announce_subscriber *subs[N];
    for (int i = 0; i < N; i++) {
        recs[i] = recorder_new();
        assert_non_null(subs[i] = announce_subscriber_new(&dial, 1, record, recs[i], &err));
    }
    warm_up(pub, recs, N);
    publish_range(pub, "anonymous", 100, 300);
    for (int i = 0; i < N; i++)
        assert_received_range(recs[i], "anonymous", 100, 300);
    for (int i = 0; i < N; i++) {
        announce_subscriber_free(subs[i]);
        recorder_free(recs[i]);
    }
    announce_publisher_free(pub);
}

/* One subscriber dialling two publishers (an ingester and a compactor) hears both. */
static void test_subscriber_dials_several_publishers(void **state) {
    (void)state;
    strata_error err;
    announce_publisher *a = announce_publisher_new("tcp://127.0.0.1:0", &err);
    announce_publisher *b = announce_publisher_new("inproc://announce-second", &err);
    assert_non_null(a);
    assert_non_null(b);
    char url_a[64];
    snprintf(url_a, sizeof url_a, "%s", tcp_url(announce_publisher_port(a)));
    const char *urls[] = {url_a, "inproc://announce-second"};
    recorder *r = recorder_new();
    announce_subscriber *sub = announce_subscriber_new(urls, 2, record, r, &err);
    assert_non_null(sub);
    warm_up(a, &r, 1);
    size_t after_a = warmups_of(r);
    char ulid[ANNOUNCE_ULID_LEN + 1];
    test_ulid(0, ulid);
    for (int tries = 0; tries < WAIT_MS / 20 && warmups_of(r) == after_a; tries++) {
        assert_int_equal(announce_publish(b, WARMUP_TENANT, ulid, &err), 0);
        sleep_ms(20);
    }
    publish_range(a, "from-a", 1, 50);
    assert_int_equal(wait_for(r, &r->count, 50, WAIT_MS), 50);
    publish_range(b, "from-b", 51, 50);
    assert_int_equal(wait_for(r, &r->count, 100, WAIT_MS), 100);
    pthread_mutex_lock(&r->mu);
    assert_string_equal(r->tenants[0], "from-a");
    assert_string_equal(r->tenants[99], "from-b");
    pthread_mutex_unlock(&r->mu);
    announce_subscriber_free(sub);
    announce_publisher_free(a);
    announce_publisher_free(b);
    recorder_free(r);
}

/* ---- start order and restarts --------------------------------------------------------------- */

static int free_tcp_port(void) {
    strata_error err;
    announce_publisher *probe = announce_publisher_new("tcp://127.0.0.1:0", &err);
    assert_non_null(probe);
    int port = announce_publisher_port(probe);
    announce_publisher_free(probe);
    return port;
}

static void test_subscriber_before_publisher_and_restart(void **state) {
    (void)state;
    strata_error err;
    int port = free_tcp_port();
    char url[64];
    snprintf(url, sizeof url, "%s", tcp_url(port));
    const char *dial = url;
    recorder *r = recorder_new();
    announce_subscriber *sub = announce_subscriber_new(&dial, 1, record, r, &err);
    assert_non_null(sub); /* nothing listens yet: dialling goes on in the background */
    sleep_ms(300);

    announce_publisher *pub = announce_publisher_new(url, &err);
    assert_non_null(pub);
    warm_up(pub, &r, 1);
    publish_range(pub, "t", 1, 10);
    assert_int_equal(wait_for(r, &r->count, 10, WAIT_MS), 10);

    /* The publisher restarts (an ingester rollout): the subscriber redials by itself. */
    announce_publisher_free(pub);
    sleep_ms(200);
    assert_non_null(pub = announce_publisher_new(url, &err));
    size_t before = warmups_of(r);
    char ulid[ANNOUNCE_ULID_LEN + 1];
    test_ulid(0, ulid);
    for (int tries = 0; tries < WAIT_MS / 20 && warmups_of(r) == before; tries++) {
        assert_int_equal(announce_publish(pub, WARMUP_TENANT, ulid, &err), 0);
        sleep_ms(20);
    }
    assert_true(warmups_of(r) > before);
    publish_range(pub, "t", 11, 10);
    assert_received_range(r, "t", 1, 20);
    announce_subscriber_free(sub);
    announce_publisher_free(pub);
    recorder_free(r);
}

static void test_inproc_subscriber_before_publisher(void **state) {
    (void)state;
    strata_error err;
    const char *dial = "inproc://announce-late-publisher";
    recorder *r = recorder_new();
    announce_subscriber *sub = announce_subscriber_new(&dial, 1, record, r, &err);
    assert_non_null(sub);
    sleep_ms(150);
    announce_publisher *pub = announce_publisher_new(dial, &err);
    assert_non_null(pub);
    warm_up(pub, &r, 1);
    publish_range(pub, "t", 1, 5);
    assert_received_range(r, "t", 1, 5);
    announce_subscriber_free(sub);
    announce_publisher_free(pub);
    recorder_free(r);
}

/* ---- malformed input from a raw PUB socket -------------------------------------------------- */

typedef struct raw_publisher {
    nng_socket sock;
    char url[64];
} raw_publisher;

static void raw_open(raw_publisher *raw, const char *url) {
    assert_int_equal(nng_pub0_open(&raw->sock), 0);
    nng_listener l;
    assert_int_equal(nng_listen(raw->sock, url, &l, 0), 0);
    int port = 0;
    if (nng_listener_get_int(l, NNG_OPT_TCP_BOUND_PORT, &port) == 0)
        snprintf(raw->url, sizeof raw->url, "%s", tcp_url(port));
    else
        snprintf(raw->url, sizeof raw->url, "%s", url);
}

static void raw_send(raw_publisher *raw, const void *data, size_t len) {
    assert_int_equal(nng_send(raw->sock, (void *)data, len, 0), 0);
}

static void raw_send_str(raw_publisher *raw, const char *s) {
    raw_send(raw, s, strlen(s));
}

/* Sends valid warm-ups until the subscriber has one. */
static void raw_warm_up(raw_publisher *raw, recorder *r) {
    for (int tries = 0; tries < WAIT_MS / 20 && warmups_of(r) == 0; tries++) {
        raw_send_str(raw, "strata-block v1 " WARMUP_TENANT " 00000000000000000000000000\n");
        sleep_ms(20);
    }
    assert_true(warmups_of(r) > 0);
}

static void malformed_are_counted(const char *listen_url) {
    strata_error err;
    raw_publisher raw;
    raw_open(&raw, listen_url);
    const char *dial = raw.url;
    recorder *r = recorder_new();
    announce_subscriber *sub = announce_subscriber_new(&dial, 1, record, r, &err);
    assert_non_null(sub);
    raw_warm_up(&raw, r);

    static const char *const bad[] = {
        "strata-block v2 anonymous 01HZX3Y8W6Q9R0S1T2V3W4X5Y6\n",
        "strata-block v1 ../etc 01HZX3Y8W6Q9R0S1T2V3W4X5Y6\n",
        "strata-block v1 anonymous 01hzx3y8w6q9r0s1t2v3w4x5y6\n",
        "strata-block v1 anonymous 01HZX3Y8W6Q9R0S1T2V3W4X5Y6",
        "hello",
        "",
    };
    size_t n_bad = sizeof bad / sizeof bad[0];
    raw_send_str(&raw, "strata-block v1 good 01HZX3Y8W6Q9R0S1T2V3W4X5Y6\n");
    for (size_t i = 0; i < n_bad; i++)
        raw_send_str(&raw, bad[i]);
    static const char nul[] = "strata-block v1 a\0b 01HZX3Y8W6Q9R0S1T2V3W4X5Y6\n";
    raw_send(&raw, nul, sizeof nul - 1);
    char big[ANNOUNCE_RECV_MAX / 2]; /* oversized for the format, accepted by nng */
    memset(big, 'x', sizeof big);
    raw_send(&raw, big, sizeof big);
    uint8_t binary[64];
    for (size_t i = 0; i < sizeof binary; i++)
        binary[i] = (uint8_t)(i * 37 + 1);
    raw_send(&raw, binary, sizeof binary);
    raw_send_str(&raw, "strata-block v1 good 01HZX3Y8W6Q9R0S1T2V3W4X5Y7\n");

    /* Messages from one publisher arrive in order: the last valid one comes after every bad one. */
    assert_int_equal(wait_for(r, &r->count, 2, WAIT_MS), 2);
    announce_subscriber_stats st;
    announce_subscriber_get_stats(sub, &st);
    assert_int_equal(st.malformed, n_bad + 3);
    assert_int_equal(st.received, 2 + warmups_of(r));
    pthread_mutex_lock(&r->mu);
    assert_int_equal(r->count, 2);
    assert_string_equal(r->tenants[0], "good");
    assert_string_equal(r->ulids[1], "01HZX3Y8W6Q9R0S1T2V3W4X5Y7");
    pthread_mutex_unlock(&r->mu);

    announce_subscriber_free(sub);
    assert_int_equal(nng_close(raw.sock), 0);
    recorder_free(r);
}

static void test_malformed_tcp(void **state) {
    (void)state;
    malformed_are_counted("tcp://127.0.0.1:0");
}

static void test_malformed_inproc(void **state) {
    (void)state;
    malformed_are_counted("inproc://announce-malformed");
}

/* A message over ANNOUNCE_RECV_MAX makes nng drop the TCP connection; the subscriber redials and
 * later announcements arrive again. */
static void test_huge_message_drops_connection_then_recovers(void **state) {
    (void)state;
    strata_error err;
    raw_publisher raw;
    raw_open(&raw, "tcp://127.0.0.1:0");
    const char *dial = raw.url;
    recorder *r = recorder_new();
    announce_subscriber *sub = announce_subscriber_new(&dial, 1, record, r, &err);
    assert_non_null(sub);
    raw_warm_up(&raw, r);
    size_t huge_len = ANNOUNCE_RECV_MAX * 4;
    char *huge = malloc(huge_len);
    assert_non_null(huge);
    memset(huge, 'x', huge_len);
    raw_send(&raw, huge, huge_len);
    free(huge);
    sleep_ms(100);
    for (int tries = 0; tries < WAIT_MS / 50 && r->count == 0; tries++) {
        raw_send_str(&raw, "strata-block v1 after 01HZX3Y8W6Q9R0S1T2V3W4X5Y6\n");
        wait_for(r, &r->count, 1, 50);
    }
    assert_true(wait_for(r, &r->count, 1, 10) >= 1);
    pthread_mutex_lock(&r->mu);
    assert_string_equal(r->tenants[0], "after");
    pthread_mutex_unlock(&r->mu);
    announce_subscriber_stats st;
    announce_subscriber_get_stats(sub, &st);
    assert_int_equal(st.malformed, 0); /* never reached validation */
    announce_subscriber_free(sub);
    assert_int_equal(nng_close(raw.sock), 0);
    recorder_free(r);
}

/* ---- shutdown under load -------------------------------------------------------------------- */

typedef struct load {
    announce_publisher *pub;
    atomic_bool stop;
    atomic_uint_fast64_t sent;
} load;

static void *publish_forever(void *arg) {
    load *l = arg;
    char ulid[ANNOUNCE_ULID_LEN + 1];
    unsigned i = 0;
    while (!atomic_load(&l->stop)) {
        test_ulid(i++ % 100000, ulid);
        if (announce_publish(l->pub, "load", ulid, NULL) == 0)
            atomic_fetch_add(&l->sent, 1);
        if (i % 64 == 0)
            sleep_ms(1);
    }
    return NULL;
}

static void test_shutdown_under_load(void **state) {
    (void)state;
    strata_error err;
    load l = {.pub = announce_publisher_new("tcp://127.0.0.1:0", &err)};
    assert_non_null(l.pub);
    atomic_init(&l.stop, false);
    atomic_init(&l.sent, 0);
    char url[64];
    snprintf(url, sizeof url, "%s", tcp_url(announce_publisher_port(l.pub)));
    const char *urls[] = {url, "inproc://announce-load-nobody"};
    pthread_t threads[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&threads[i], NULL, publish_forever, &l), 0);

    for (int round = 0; round < 4; round++) {
        recorder *r = recorder_new();
        r->delay_us = round % 2 == 0 ? 0 : 200; /* odd rounds: a slow callback, queues fill */
        announce_subscriber *sub = announce_subscriber_new(urls, 2, record, r, &err);
        assert_non_null(sub);
        wait_for(r, &r->count, 1, WAIT_MS);
        sleep_ms(20 * (round % 3));
        announce_subscriber_stats st;
        announce_subscriber_get_stats(sub, &st);
        assert_true(st.received >= 1);
        assert_int_equal(st.malformed, 0);
        int64_t start = now_ms();
        announce_subscriber_free(sub);        /* joins the receive thread mid-stream */
        recorder_free(r);                     /* no callback may run after free returned */
        assert_true(now_ms() - start < 2500); /* 100 ms poll + at most 1 s bounded close */
    }
    atomic_store(&l.stop, true);
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_join(threads[i], NULL), 0);
    announce_publisher_stats ps;
    announce_publisher_get_stats(l.pub, &ps);
    assert_int_equal(ps.published, atomic_load(&l.sent));
    assert_int_equal(ps.failed, 0);
    int64_t start = now_ms();
    announce_publisher_free(l.pub); /* while subscribers' queues may still hold messages */
    assert_true(now_ms() - start < 2500);
}

/* Under ASan: a message that nng_send queued on a connection whose close hit the nng 1.5.2 defect
 * (announce.h) stays with the abandoned socket. nng_send copies our buffer, so no allocation of
 * ours can match; leaks of received messages (nng_recvmsg) are still reported. */
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) {
    return "leak:nng_send\n";
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_valid),
        cmocka_unit_test(test_parse_rejects_malformed),
        cmocka_unit_test(test_validators),
        cmocka_unit_test(test_publish_rejects_bad_fields),
        cmocka_unit_test(test_constructor_errors),
        cmocka_unit_test(test_round_trip_tcp),
        cmocka_unit_test(test_round_trip_inproc),
        cmocka_unit_test(test_several_subscribers),
        cmocka_unit_test(test_subscriber_dials_several_publishers),
        cmocka_unit_test(test_subscriber_before_publisher_and_restart),
        cmocka_unit_test(test_inproc_subscriber_before_publisher),
        cmocka_unit_test(test_malformed_tcp),
        cmocka_unit_test(test_malformed_inproc),
        cmocka_unit_test(test_huge_message_drops_connection_then_recovers),
        cmocka_unit_test(test_shutdown_under_load),
    };
    /* test_shutdown_under_load comes last: when it hits the nng 1.5.2 close defect (see
     * announce.h) nng's reaper stays stuck for the rest of the process, so nng_fini is not called.
     */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
