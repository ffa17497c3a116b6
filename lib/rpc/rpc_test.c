/*
 * rpc_test.c - tests for the rpc module: a real server on 127.0.0.1 with the test services
 * (rpc_test_services.h) and the module's own client.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/auth.h"
#include "common/clock.h"
#include "rpc/rpc.h"
#include "rpc/rpc_test_services.h"

#define SECOND STRATA_NS_PER_SEC

typedef struct env {
    test_delayer delayer;
    rpc_server *server;
    rpc_channel *channel;
} env;

static int setup(void **state) {
    env *e = calloc(1, sizeof(*e));
    strata_error err;
    assert_non_null(e);
    assert_int_equal(test_delayer_start(&e->delayer), 0);
    rpc_server_options options = {.listen_address = "127.0.0.1:0", .threads = 3};
    e->server = rpc_server_new(&options, &err);
    assert_non_null(e->server);
    assert_true(rpc_server_port(e->server) > 0);
    assert_int_equal(test_register_services(e->server, &e->delayer, &err), 0);
    assert_int_equal(rpc_server_start(e->server, &err), 0);
    char target[64];
    snprintf(target, sizeof(target), "127.0.0.1:%d", rpc_server_port(e->server));
    e->channel = rpc_channel_new(target, NULL, &err);
    assert_non_null(e->channel);
    *state = e;
    return 0;
}

static int teardown(void **state) {
    env *e = *state;
    rpc_channel_free(e->channel);
    rpc_server_shutdown(e->server, SECOND);
    test_delayer_stop(&e->delayer);
    free(e);
    return 0;
}

/* Calls method with a string request; on success the response is NUL-terminated in resp. */
static int call_str(env *e, const char *method, const char *request, int64_t timeout_ns,
                    strata_buffer *resp, strata_error *err) {
    strata_error_clear(err);
    int rc = rpc_call_unary(e->channel, method, request, strlen(request), NULL, 0, timeout_ns, resp,
                            err);
    if (rc == 0)
        assert_int_equal(strata_buffer_append_byte(resp, 0), 0);
    return rc;
}

static size_t method_index(rpc_server *s, const char *path) {
    rpc_method_stats st;
    for (size_t i = 0; i < rpc_server_method_count(s); i++) {
        assert_int_equal(rpc_server_method_stats(s, i, &st), 0);
        if (strcmp(st.method, path) == 0)
            return i;
    }
    fail_msg("method %s not registered", path);
    return 0;
}

/* Waits (up to 10 s) until `path` has `in_flight` calls in flight; returns its stats. */
static rpc_method_stats wait_in_flight(rpc_server *s, const char *path, uint64_t in_flight) {
    size_t index = method_index(s, path);
    rpc_method_stats st;
    for (int i = 0; i < 5000; i++) {
        assert_int_equal(rpc_server_method_stats(s, index, &st), 0);
        if (st.in_flight == in_flight)
            return st;
        usleep(2000);
    }
    fail_msg("%s: %llu calls in flight, expected %llu", path, (unsigned long long)st.in_flight,
             (unsigned long long)in_flight);
    return st;
}

/* Waits (up to 10 s) until the delayer has held `n` calls at once. */
static void wait_delayer_peak(test_delayer *d, size_t n) {
    for (int i = 0; i < 5000 && test_delayer_peak(d) < n; i++)
        usleep(2000);
    assert_int_equal(test_delayer_peak(d), n);
}

static void test_echo_several_services(void **state) {
    env *e = *state;
    strata_buffer resp = STRATA_BUFFER_INIT;
    strata_error err;
    assert_int_equal(call_str(e, "/test.Echo/Echo", "hello", 5 * SECOND, &resp, &err), 0);
    assert_string_equal((char *)resp.data, "hello");
    assert_int_equal(resp.len, 6);
    assert_int_equal(call_str(e, "/test.Other/Upper", "abc-xyz", 5 * SECOND, &resp, &err), 0);
    assert_string_equal((char *)resp.data, "ABC-XYZ");
    assert_int_equal(call_str(e, "/test.Echo/Echo", "", 0, &resp, &err), 0);
    assert_int_equal(resp.len, 1); /* empty response plus our terminator */
    strata_buffer_free(&resp);
}

static void test_status_and_message(void **state) {
    env *e = *state;
    strata_buffer resp = STRATA_BUFFER_INIT;
    strata_error err;
    assert_int_equal(call_str(e, "/test.Echo/Fail", "xyz", 5 * SECOND, &resp, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_string_equal(err.message, "bad request: xyz");
    assert_int_equal(call_str(e, "/test.Echo/Metadata", "x-missing", 5 * SECOND, &resp, &err), -1);
    assert_int_equal(err.code, STRATA_NOT_FOUND);
    assert_string_equal(err.message, "no metadata x-missing");
    assert_int_equal(call_str(e, "/test.Async/Delay", "no colon", 5 * SECOND, &resp, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_string_equal(err.message, "want <ms>:<payload>");
    strata_buffer_free(&resp);
}

static void test_unimplemented(void **state) {
    env *e = *state;
    strata_buffer resp = STRATA_BUFFER_INIT;
    strata_error err;
    assert_int_equal(call_str(e, "/test.Nope/Nope", "x", 5 * SECOND, &resp, &err), -1);
    assert_int_equal(err.code, STRATA_UNIMPLEMENTED);
    assert_string_equal(err.message, "unknown method /test.Nope/Nope");
    assert_int_equal(call_str(e, "/test.Echo/Nope", "x", 5 * SECOND, &resp, &err), -1);
    assert_int_equal(err.code, STRATA_UNIMPLEMENTED);
    assert_string_equal(err.message, "unknown method /test.Echo/Nope");
    assert_int_equal(rpc_server_unimplemented_calls(e->server), 2);
    strata_buffer_free(&resp);
}

static void test_metadata_and_peer(void **state) {
    env *e = *state;
    strata_buffer resp = STRATA_BUFFER_INIT;
    strata_error err;
    const uint8_t binary[] = {0, 1, 2, 255};
    rpc_metadata md[] = {
        {"X-Scope-OrgID", "tenant-a", 8},
        {"trace-bin", (const char *)binary, sizeof(binary)},
    };
    const char *keys[] = {"x-scope-orgid", "X-SCOPE-ORGID"};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(rpc_call_unary(e->channel, "/test.Echo/Metadata", keys[i], strlen(keys[i]),
                                        md, 2, 5 * SECOND, &resp, &err),
                         0);
        assert_int_equal(resp.len, 8);
        assert_memory_equal(resp.data, "tenant-a", 8);
    }
    assert_int_equal(rpc_call_unary(e->channel, "/test.Echo/Metadata", "trace-bin", 9, md, 2,
                                    5 * SECOND, &resp, &err),
                     0);
    assert_int_equal(resp.len, sizeof(binary));
    assert_memory_equal(resp.data, binary, sizeof(binary));

    rpc_metadata bad[] = {{"bad key", "v", 1}};
    assert_int_equal(
        rpc_call_unary(e->channel, "/test.Echo/Echo", "x", 1, bad, 1, 5 * SECOND, &resp, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_string_equal(err.message, "rpc: illegal metadata key \"bad key\"");

    assert_int_equal(call_str(e, "/test.Echo/Peer", "", 5 * SECOND, &resp, &err), 0);
    assert_memory_equal(resp.data, "ipv4:127.0.0.1:", 15);
    assert_true(atoi((char *)resp.data + 15) > 0);
    strata_buffer_free(&resp);
}

static void test_deadline_visible_to_handler(void **state) {
    env *e = *state;
    strata_buffer resp = STRATA_BUFFER_INIT;
    strata_error err;
    assert_int_equal(call_str(e, "/test.Echo/Deadline", "", 5 * SECOND, &resp, &err), 0);
    int ms = atoi((char *)resp.data);
    assert_true(ms > 3000 && ms <= 5100); /* grpc-timeout is sent rounded up */
    assert_int_equal(call_str(e, "/test.Echo/Deadline", "", 0, &resp, &err), 0);
    assert_string_equal((char *)resp.data, "none");
    strata_buffer_free(&resp);
}

static void test_finish_from_other_thread(void **state) {
    env *e = *state;
    strata_buffer resp = STRATA_BUFFER_INIT;
    strata_error err;
    int64_t start = strata_monotonic_ns();
    assert_int_equal(call_str(e, "/test.Async/Delay", "150:later", 5 * SECOND, &resp, &err), 0);
    assert_true(strata_monotonic_ns() - start >= 150 * STRATA_NS_PER_MS);
    assert_string_equal((char *)resp.data, "later");
    assert_int_equal(atomic_load(&e->delayer.finished), 1);
    assert_int_equal(atomic_load(&e->delayer.finished_cancelled), 0);
    rpc_method_stats st = wait_in_flight(e->server, "/test.Async/Delay", 0);
    assert_int_equal(st.started, 1);
    assert_int_equal(st.finished[STRATA_OK], 1);
    strata_buffer_free(&resp);
}

static void test_deadline_exceeded(void **state) {
    env *e = *state;
    strata_buffer resp = STRATA_BUFFER_INIT;
    strata_error err;
    int64_t start = strata_monotonic_ns();
    assert_int_equal(
        call_str(e, "/test.Async/Delay", "1000:x", 200 * STRATA_NS_PER_MS, &resp, &err), -1);
    assert_int_equal(err.code, STRATA_DEADLINE_EXCEEDED);
    assert_true(strata_monotonic_ns() - start < 900 * STRATA_NS_PER_MS);
    /* The handler's late finish goes nowhere, and the server saw the call cancelled. */
    rpc_method_stats st = wait_in_flight(e->server, "/test.Async/Delay", 0);
    assert_int_equal(atomic_load(&e->delayer.finished), 1);
    assert_int_equal(atomic_load(&e->delayer.finished_cancelled), 1);
    assert_int_equal(st.finished[STRATA_DEADLINE_EXCEEDED], 1);
    assert_int_equal(st.finished[STRATA_OK], 0);
    strata_buffer_free(&resp);
}

static void test_unavailable(void **state) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(addr);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&addr, sizeof(addr)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&addr, &len), 0);
    close(fd); /* a port nobody listens on */
    char target[64];
    snprintf(target, sizeof(target), "127.0.0.1:%d", ntohs(addr.sin_port));
    strata_error err;
    rpc_channel *ch = rpc_channel_new(target, NULL, &err);
    assert_non_null(ch);
    strata_buffer resp = STRATA_BUFFER_INIT;
    assert_int_equal(
        rpc_call_unary(ch, "/test.Echo/Echo", "x", 1, NULL, 0, 5 * SECOND, &resp, &err), -1);
    assert_int_equal(err.code, STRATA_UNAVAILABLE);
    assert_true(strlen(err.message) > 0);
    rpc_channel_free(ch);
    strata_buffer_free(&resp);
}

static void test_large_messages(void **state) {
    env *e = *state;
    size_t size = (size_t)40 << 20;
    uint8_t *req = malloc(size);
    assert_non_null(req);
    for (size_t i = 0; i < size; i++)
        req[i] = (uint8_t)(i * 31 + (i >> 20));
    strata_buffer resp = STRATA_BUFFER_INIT;
    strata_error err;
    assert_int_equal(
        rpc_call_unary(e->channel, "/test.Echo/Echo", req, size, NULL, 0, 60 * SECOND, &resp, &err),
        0);
    assert_int_equal(resp.len, size);
    assert_memory_equal(resp.data, req, size);
    free(req);
    strata_buffer_free(&resp);
}

static void test_message_limit(void **state) {
    strata_error err;
    rpc_server_options options = {
        .listen_address = "127.0.0.1:0", .threads = 1, .max_receive_message_bytes = 1 << 20};
    rpc_server *s = rpc_server_new(&options, &err);
    assert_non_null(s);
    assert_int_equal(test_register_services(s, NULL, &err), 0);
    assert_int_equal(rpc_server_start(s, &err), 0);
    char target[64];
    snprintf(target, sizeof(target), "127.0.0.1:%d", rpc_server_port(s));
    rpc_channel *ch = rpc_channel_new(target, NULL, &err);
    assert_non_null(ch);
    size_t size = (size_t)2 << 20;
    uint8_t *req = calloc(1, size);
    assert_non_null(req);
    strata_buffer resp = STRATA_BUFFER_INIT;
    assert_int_equal(
        rpc_call_unary(ch, "/test.Echo/Echo", req, size, NULL, 0, 10 * SECOND, &resp, &err), -1);
    assert_int_equal(err.code, STRATA_RESOURCE_EXHAUSTED);
    assert_int_equal(
        rpc_call_unary(ch, "/test.Echo/Echo", req, 1000, NULL, 0, 10 * SECOND, &resp, &err), 0);
    assert_int_equal(resp.len, 1000);
    free(req);
    strata_buffer_free(&resp);
    rpc_channel_free(ch);
    rpc_server_shutdown(s, SECOND);
}

/* A collected client stream: every message in order, an empty stream, the size limit, and the
 * method refused over a bridged transport. */
static void test_client_stream(void **state) {
    env *e = *state;
    strata_error err;
    strata_buffer resp = STRATA_BUFFER_INIT;
    rpc_stream_message msgs[3] = {{"alpha", 5}, {"", 0}, {"gamma", 5}};
    assert_int_equal(rpc_call_client_stream(e->channel, "/test.Stream/Join", msgs, 3, NULL, 0,
                                            10 * SECOND, &resp, &err),
                     0);
    assert_int_equal(resp.len, strlen("3:alpha||gamma"));
    assert_memory_equal(resp.data, "3:alpha||gamma", resp.len);
    assert_int_equal(rpc_call_client_stream(e->channel, "/test.Stream/Join", NULL, 0, NULL, 0,
                                            10 * SECOND, &resp, &err),
                     0);
    assert_int_equal(resp.len, 2);
    assert_memory_equal(resp.data, "0:", 2);
    /* 64 KiB in all is the limit: 5 messages of 16 KiB are over it. */
    size_t chunk = 16 << 10;
    uint8_t *big = calloc(1, chunk);
    assert_non_null(big);
    rpc_stream_message many[5];
    for (int i = 0; i < 5; i++)
        many[i] = (rpc_stream_message){big, chunk};
    assert_int_equal(rpc_call_client_stream(e->channel, "/test.Stream/Join", many, 5, NULL, 0,
                                            10 * SECOND, &resp, &err),
                     -1);
    assert_int_equal(err.code, STRATA_RESOURCE_EXHAUSTED);
    assert_int_equal(rpc_call_client_stream(e->channel, "/test.Stream/Join", many, 3, NULL, 0,
                                            10 * SECOND, &resp, &err),
                     0);
    assert_int_equal(resp.len, 2 + 3 * chunk + 2);
    /* The unary client on the same channel still works after the refused stream. */
    assert_int_equal(call_str(e, "/test.Echo/Echo", "after", 10 * SECOND, &resp, &err), 0);
    assert_string_equal((const char *)resp.data, "after");
    rpc_bridge bridge = {0};
    assert_int_equal(rpc_server_call_bridged(e->server, "/test.Stream/Join", (const uint8_t *)"x",
                                             1, &bridge, &err),
                     -1);
    assert_int_equal(err.code, STRATA_UNIMPLEMENTED);
    free(big);
    strata_buffer_free(&resp);
}

typedef struct stream_job {
    env *e;
    pthread_t thread;
    int rc;
    strata_status code;
} stream_job;

static void *run_gated_stream(void *arg) {
    stream_job *j = arg;
    strata_error err;
    strata_buffer resp = STRATA_BUFFER_INIT;
    rpc_stream_message m = {"held", 4};
    j->rc = rpc_call_client_stream(j->e->channel, "/test.Stream/Gated", &m, 1, NULL, 0, 30 * SECOND,
                                   &resp, &err);
    j->code = j->rc == 0 ? STRATA_OK : err.code;
    strata_buffer_free(&resp);
    return NULL;
}

/* A client-streaming method holds at most its max_calls streams: the next is refused at once,
 * and served again once those are over. */
static void test_client_stream_call_limit(void **state) {
    env *e = *state;
    stream_job jobs[2];
    for (int i = 0; i < 2; i++) {
        jobs[i] = (stream_job){.e = e};
        assert_int_equal(pthread_create(&jobs[i].thread, NULL, run_gated_stream, &jobs[i]), 0);
    }
    wait_in_flight(e->server, "/test.Stream/Gated", 2);
    strata_error err;
    strata_buffer resp = STRATA_BUFFER_INIT;
    rpc_stream_message m = {"third", 5};
    assert_int_equal(rpc_call_client_stream(e->channel, "/test.Stream/Gated", &m, 1, NULL, 0,
                                            10 * SECOND, &resp, &err),
                     -1);
    assert_int_equal(err.code, STRATA_RESOURCE_EXHAUSTED);
    assert_non_null(strstr(err.message, "too many client streams"));
    test_delayer_open_gate(&e->delayer);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(pthread_join(jobs[i].thread, NULL), 0);
        assert_int_equal(jobs[i].rc, 0);
    }
    wait_in_flight(e->server, "/test.Stream/Gated", 0);
    assert_int_equal(rpc_call_client_stream(e->channel, "/test.Stream/Gated", &m, 1, NULL, 0,
                                            10 * SECOND, &resp, &err),
                     0);
    assert_int_equal(resp.len, 6); /* the framed message: its size, then "third" */
    strata_buffer_free(&resp);
}

/* --- concurrency ------------------------------------------------------------------------------ */

typedef struct client_job {
    env *e;
    int id;
    int calls;
    const char *method; /* NULL: a mix of methods */
    int delay_ms;
    int failures; /* wrong responses or errors */
    strata_status last_code;
} client_job;

/* One call with a request unique to (job, i), checking the response. */
static void job_call(client_job *j, int i, const char *method, int delay_ms) {
    char req[64], want[64];
    bool delayed = strcmp(method, "/test.Async/Delay") == 0;
    bool upper = strcmp(method, "/test.Other/Upper") == 0;
    snprintf(want, sizeof(want), upper ? "JOB-%d-CALL-%d" : "job-%d-call-%d", j->id, i);
    if (delayed)
        snprintf(req, sizeof(req), "%d:job-%d-call-%d", delay_ms, j->id, i);
    else
        snprintf(req, sizeof(req), "job-%d-call-%d", j->id, i);
    strata_buffer resp = STRATA_BUFFER_INIT;
    strata_error err;
    strata_error_clear(&err);
    int rc =
        rpc_call_unary(j->e->channel, method, req, strlen(req), NULL, 0, 30 * SECOND, &resp, &err);
    j->last_code = rc == 0 ? STRATA_OK : err.code;
    if (rc != 0 || resp.len != strlen(want) || memcmp(resp.data, want, resp.len) != 0)
        j->failures++;
    strata_buffer_free(&resp);
}

static void *job_main(void *arg) {
    static const char *mix[] = {"/test.Echo/Echo", "/test.Other/Upper", "/test.Async/Delay"};
    client_job *j = arg;
    for (int i = 0; i < j->calls; i++) {
        const char *method = j->method != NULL ? j->method : mix[(j->id + i) % 3];
        job_call(j, i, method, j->method != NULL ? j->delay_ms : i % 5);
    }
    return NULL;
}

static void start_jobs(pthread_t *threads, client_job *jobs, int n) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    for (int i = 0; i < n; i++)
        assert_int_equal(pthread_create(&threads[i], &attr, job_main, &jobs[i]), 0);
    pthread_attr_destroy(&attr);
}

static void join_jobs(pthread_t *threads, int n) {
    for (int i = 0; i < n; i++)
        pthread_join(threads[i], NULL);
}

static client_job *make_jobs(env *e, int n, int calls, const char *method, int delay_ms) {
    client_job *jobs = calloc((size_t)n, sizeof(*jobs));
    assert_non_null(jobs);
    for (int i = 0; i < n; i++)
        jobs[i] =
            (client_job){.e = e, .id = i, .calls = calls, .method = method, .delay_ms = delay_ms};
    return jobs;
}

static void test_many_calls_in_flight(void **state) {
    env *e = *state;
    enum { N = 256 };
    pthread_t threads[N];
    client_job *jobs = make_jobs(e, N, 1, "/test.Async/Gate", 0);
    start_jobs(threads, jobs, N);
    /* All N calls are held by the handler at once, then released together. */
    wait_delayer_peak(&e->delayer, N);
    rpc_method_stats st = wait_in_flight(e->server, "/test.Async/Gate", N);
    assert_int_equal(st.started, N);
    test_delayer_open_gate(&e->delayer);
    join_jobs(threads, N);
    for (int i = 0; i < N; i++)
        assert_int_equal(jobs[i].failures, 0);
    st = wait_in_flight(e->server, "/test.Async/Gate", 0);
    assert_int_equal(st.started, N);
    assert_int_equal(st.finished[STRATA_OK], N);
    free(jobs);
}

static void test_concurrent_mixed_calls(void **state) {
    env *e = *state;
    enum { N = 8, CALLS = 40 };
    pthread_t threads[N];
    client_job *jobs = make_jobs(e, N, CALLS, NULL, 0);
    start_jobs(threads, jobs, N);
    join_jobs(threads, N);
    for (int i = 0; i < N; i++)
        assert_int_equal(jobs[i].failures, 0);
    uint64_t total = 0;
    const char *methods[] = {"/test.Echo/Echo", "/test.Other/Upper", "/test.Async/Delay"};
    for (int m = 0; m < 3; m++) {
        rpc_method_stats st = wait_in_flight(e->server, methods[m], 0);
        assert_int_equal(st.started, st.finished[STRATA_OK]);
        total += st.started;
    }
    assert_int_equal(total, N * CALLS);
    free(jobs);
}

/* --- shutdown ----------------------------------------------------------------------------------
 */

typedef struct shutdown_job {
    rpc_server *server;
    int64_t grace_ns;
    int64_t took_ns;
} shutdown_job;

static void *shutdown_main(void *arg) {
    shutdown_job *j = arg;
    int64_t start = strata_monotonic_ns();
    rpc_server_shutdown(j->server, j->grace_ns);
    j->took_ns = strata_monotonic_ns() - start;
    return NULL;
}

/* Calls Echo until the draining server answers UNAVAILABLE; returns how many calls succeeded
 * before, or -1 on any other outcome. */
static int call_until_draining(env *e) {
    strata_buffer resp = STRATA_BUFFER_INIT;
    strata_error err;
    int ok = 0;
    for (;;) {
        int rc =
            rpc_call_unary(e->channel, "/test.Echo/Echo", "x", 1, NULL, 0, 5 * SECOND, &resp, &err);
        if (rc != 0)
            break;
        ok++;
        usleep(1000);
    }
    strata_buffer_free(&resp);
    bool draining =
        err.code == STRATA_UNAVAILABLE && strcmp(err.message, "server is shutting down") == 0;
    return draining ? ok : -1;
}

static void test_shutdown_lets_calls_finish(void **state) {
    env *e = *state;
    enum { N = 20 };
    pthread_t threads[N], shutdown_thread;
    client_job *jobs = make_jobs(e, N, 1, "/test.Async/Gate", 0);
    start_jobs(threads, jobs, N);
    wait_delayer_peak(&e->delayer, N);
    shutdown_job sj = {.server = e->server, .grace_ns = 10 * SECOND};
    e->server = NULL;
    assert_int_equal(pthread_create(&shutdown_thread, NULL, shutdown_main, &sj), 0);
    /* New calls are turned away while the ones in flight are still running. */
    assert_true(call_until_draining(e) >= 0);
    assert_int_equal(atomic_load(&e->delayer.finished), 0);
    test_delayer_open_gate(&e->delayer);
    pthread_join(shutdown_thread, NULL);
    assert_true(sj.took_ns < 10 * SECOND);
    join_jobs(threads, N);
    for (int i = 0; i < N; i++) {
        assert_int_equal(jobs[i].failures, 0);
        assert_int_equal(jobs[i].last_code, STRATA_OK);
    }
    assert_int_equal(atomic_load(&e->delayer.finished), N);
    assert_int_equal(atomic_load(&e->delayer.finished_cancelled), 0);
    free(jobs);
}

static void test_shutdown_cancels_after_grace(void **state) {
    env *e = *state;
    enum { N = 10 };
    pthread_t threads[N];
    client_job *jobs = make_jobs(e, N, 1, "/test.Async/WaitCancel", 0);
    start_jobs(threads, jobs, N);
    wait_delayer_peak(&e->delayer, N);
    int64_t start = strata_monotonic_ns();
    rpc_server_shutdown(e->server, 200 * STRATA_NS_PER_MS);
    e->server = NULL;
    int64_t took = strata_monotonic_ns() - start;
    assert_true(took >= 200 * STRATA_NS_PER_MS && took < 5 * SECOND);
    join_jobs(threads, N);
    for (int i = 0; i < N; i++) {
        assert_int_equal(jobs[i].failures, 1);
        assert_true(jobs[i].last_code == STRATA_CANCELLED ||
                    jobs[i].last_code == STRATA_UNAVAILABLE);
    }
    assert_int_equal(atomic_load(&e->delayer.finished), N);
    assert_int_equal(atomic_load(&e->delayer.finished_cancelled), N);
    free(jobs);
}

/* --- misuse ------------------------------------------------------------------------------------
 */

static int noop_sync(rpc_call *call, const uint8_t *req, size_t len, strata_buffer *resp,
                     strata_error *err, void *arg) {
    return 0;
}

static void test_registration_errors(void **state) {
    strata_error err;
    rpc_server_options options = {.listen_address = "127.0.0.1:0"};
    rpc_server *s = rpc_server_new(&options, &err);
    assert_non_null(s);
    const char *bad[] = {"noslash", "/a", "/a/", "//m", "/a/b/c", ""};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_int_equal(rpc_server_add_sync_method(s, bad[i], noop_sync, NULL, &err), -1);
        assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    }
    assert_int_equal(rpc_server_add_sync_method(s, "/svc.A/M", noop_sync, NULL, &err), 0);
    assert_int_equal(rpc_server_add_sync_method(s, "/svc.A/M", noop_sync, NULL, &err), -1);
    assert_int_equal(err.code, STRATA_ALREADY_EXISTS);
    assert_int_equal(rpc_server_method_count(s), 1);
    rpc_method_stats st;
    assert_int_equal(rpc_server_method_stats(s, 1, &st), -1);
    rpc_server_shutdown(s, SECOND); /* never started */

    s = rpc_server_new(&options, &err);
    assert_non_null(s);
    assert_int_equal(rpc_server_start(s, &err), 0);
    assert_int_equal(rpc_server_add_sync_method(s, "/svc.A/M", noop_sync, NULL, &err), -1);
    assert_int_equal(err.code, STRATA_FAILED_PRECONDITION);
    assert_int_equal(rpc_server_start(s, &err), -1);
    assert_int_equal(err.code, STRATA_FAILED_PRECONDITION);
    rpc_server_shutdown(s, SECOND);
}

/* server auth (common/auth.h) before every handler, and the client's bearer_token_file. */
static void test_auth_before_handlers(void **state) {
    (void)state;
    strata_error err;
    const char *tenants[] = {"team-a"};
    strata_auth_credential cred = {.token = "tok", .tenants = tenants, .n_tenants = 1};
    strata_auth *auth = strata_auth_new(&cred, 1, &err);
    assert_non_null(auth);
    rpc_server_options options = {.listen_address = "127.0.0.1:0", .auth = auth};
    rpc_server *s = rpc_server_new(&options, &err);
    assert_non_null(s);
    test_delayer delayer;
    assert_int_equal(test_delayer_start(&delayer), 0);
    assert_int_equal(test_register_services(s, &delayer, &err), 0);
    assert_int_equal(rpc_server_start(s, &err), 0);
    char target[64], token_file[] = "/tmp/strata-rpc-token-XXXXXX";
    snprintf(target, sizeof target, "127.0.0.1:%d", rpc_server_port(s));
    int fd = mkstemp(token_file);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, " tok\n", 5), 5);
    close(fd);
    rpc_channel *plain = rpc_channel_new(target, NULL, &err);
    rpc_channel_options with_token = {.bearer_token_file = token_file};
    rpc_channel *tok = rpc_channel_new(target, &with_token, &err);
    assert_non_null(plain);
    assert_non_null(tok);
    rpc_metadata team_a = {"x-scope-orgid", "team-a", 6}, team_b = {"x-scope-orgid", "team-b", 6};
    strata_buffer resp = STRATA_BUFFER_INIT;
    assert_int_equal(
        rpc_call_unary(plain, "/test.Echo/Echo", "x", 1, &team_a, 1, 10 * SECOND, &resp, &err), -1);
    assert_int_equal(err.code, STRATA_UNAUTHENTICATED);
    assert_int_equal(
        rpc_call_unary(tok, "/test.Echo/Echo", "x", 1, &team_b, 1, 10 * SECOND, &resp, &err), -1);
    assert_int_equal(err.code, STRATA_PERMISSION_DENIED);
    assert_int_equal(
        rpc_call_unary(tok, "/test.Echo/Echo", "x", 1, &team_a, 1, 10 * SECOND, &resp, &err), 0);
    assert_int_equal(resp.len, 1);
    /* the token travels as metadata a handler can see */
    assert_int_equal(rpc_call_unary(tok, "/test.Echo/Metadata", "authorization", 13, &team_a, 1,
                                    10 * SECOND, &resp, &err),
                     0);
    assert_memory_equal(resp.data, "Bearer tok", 10);
    strata_buffer_free(&resp);
    rpc_channel_free(plain);
    rpc_channel_free(tok);
    /* a token file that cannot be read fails the channel at once */
    unlink(token_file);
    assert_null(rpc_channel_new(target, &with_token, &err));
    assert_int_equal(err.code, STRATA_NOT_FOUND);
    rpc_server_shutdown(s, SECOND);
    test_delayer_stop(&delayer);
    strata_auth_free(auth);
}

static void test_bad_options(void **state) {
    strata_error err;
    rpc_server_options options = {.listen_address = NULL};
    assert_null(rpc_server_new(&options, &err));
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    options.listen_address = "127.0.0.1:0";
    options.threads = -1;
    assert_null(rpc_server_new(&options, &err));
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    options.threads = 1;
    options.listen_address = "no-such-host.invalid:1";
    assert_null(rpc_server_new(&options, &err));
    assert_int_equal(err.code, STRATA_UNAVAILABLE);
    assert_string_equal(err.message, "rpc: cannot listen on no-such-host.invalid:1");
    assert_null(rpc_channel_new("", NULL, &err));
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_auth_before_handlers),
        cmocka_unit_test_setup_teardown(test_echo_several_services, setup, teardown),
        cmocka_unit_test_setup_teardown(test_status_and_message, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unimplemented, setup, teardown),
        cmocka_unit_test_setup_teardown(test_metadata_and_peer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_deadline_visible_to_handler, setup, teardown),
        cmocka_unit_test_setup_teardown(test_finish_from_other_thread, setup, teardown),
        cmocka_unit_test_setup_teardown(test_deadline_exceeded, setup, teardown),
        cmocka_unit_test(test_unavailable),
        cmocka_unit_test_setup_teardown(test_large_messages, setup, teardown),
        cmocka_unit_test(test_message_limit),
        cmocka_unit_test_setup_teardown(test_client_stream, setup, teardown),
        cmocka_unit_test_setup_teardown(test_client_stream_call_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_many_calls_in_flight, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_mixed_calls, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shutdown_lets_calls_finish, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shutdown_cancels_after_grace, setup, teardown),
        cmocka_unit_test(test_registration_errors),
        cmocka_unit_test(test_bad_options),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
