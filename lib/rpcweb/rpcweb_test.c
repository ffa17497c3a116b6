/*
 * rpcweb_test.c - gRPC-Web (binary and text) and Connect calls over real HTTP (libcurl) into the
 * rpc test services, checked byte for byte: frames, trailers, Connect errors, metadata, deadlines,
 * asynchronous handlers, malformed bodies and the close before shutdown.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/auth.h"
#include "common/base64.h"
#include "http/http.h"
#include "metrics/metrics.h"
#include "rpc/rpc_test_services.h"
#include "rpcweb/rpcweb.h"

typedef struct fixture {
    test_delayer delayer;
    rpc_server *rpc;
    metrics_registry *metrics;
    http_server *http;
    rpcweb *web;
    char base[64];
} fixture;

static fixture *fixture_new(const char *const *cors, size_t n_cors, const strata_auth *auth) {
    fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    strata_error err;
    assert_int_equal(test_delayer_start(&f->delayer), 0);
    rpc_server_options ro = {.listen_address = "127.0.0.1:0"};
    assert_non_null(f->rpc = rpc_server_new(&ro, &err));
    assert_int_equal(test_register_services(f->rpc, &f->delayer, &err), 0);
    assert_non_null(f->metrics = metrics_registry_new(&err));
    http_server_options ho = {.bind = "127.0.0.1:0",
                              .metrics = f->metrics,
                              .auth = auth,
                              .cors_origins = cors,
                              .n_cors_origins = n_cors};
    assert_non_null(f->http = http_server_new(&ho, &err));
    assert_int_equal(rpcweb_new(f->http, f->rpc, &f->web, &err), 0);
    assert_int_equal(rpc_server_start(f->rpc, &err), 0);
    assert_int_equal(http_server_start(f->http, &err), 0);
    snprintf(f->base, sizeof f->base, "http://127.0.0.1:%u", http_server_port(f->http));
    return f;
}

static int setup(void **state) {
    *state = fixture_new(NULL, 0, NULL);
    return 0;
}

static void fixture_free(fixture *f) {
    rpcweb_close(f->web);
    rpc_server_shutdown(f->rpc, 1000000000);
    http_server_stop(f->http);
    http_server_free(f->http);
    rpcweb_free(f->web);
    metrics_registry_free(f->metrics);
    test_delayer_stop(&f->delayer);
    free(f);
}

static int teardown(void **state) {
    fixture_free(*state);
    return 0;
}

typedef struct reply {
    long status;
    strata_buffer body;
    strata_buffer headers;
} reply;

static size_t on_write(char *data, size_t size, size_t n, void *ctx) {
    return strata_buffer_append(ctx, data, size * n) == 0 ? size * n : 0;
}

/* A request of method (POST when NULL) to path with a Content-Type (none when NULL) and extra
 * headers (NULL-terminated). */
static reply request(const fixture *f, const char *method, const char *path, const char *type,
                     const void *body, size_t len, const char *const *extra) {
    reply r = {0};
    CURL *c = curl_easy_init();
    assert_non_null(c);
    char url[256], content_type[128];
    snprintf(url, sizeof url, "%s%s", f->base, path);
    snprintf(content_type, sizeof content_type, "Content-Type: %s", type != NULL ? type : "");
    struct curl_slist *h = type != NULL ? curl_slist_append(NULL, content_type) : NULL;
    for (size_t i = 0; extra != NULL && extra[i] != NULL; i++)
        h = curl_slist_append(h, extra[i]);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
    if (method != NULL) {
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    } else {
        curl_easy_setopt(c, CURLOPT_POST, 1L);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, (const char *)body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    }
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &r.body);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_write);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &r.headers);
    assert_int_equal(curl_easy_perform(c), CURLE_OK);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    assert_int_equal(strata_buffer_append_byte(&r.headers, 0), 0);
    return r;
}

static reply post(const fixture *f, const char *path, const char *type, const void *body,
                  size_t len, const char *const *extra) {
    return request(f, NULL, path, type, body, len, extra);
}

static void reply_free(reply *r) {
    strata_buffer_free(&r->body);
    strata_buffer_free(&r->headers);
}

static strata_buffer frame(uint8_t flag, const char *msg) {
    strata_buffer b = STRATA_BUFFER_INIT;
    size_t n = strlen(msg);
    uint8_t head[5] = {flag, (uint8_t)(n >> 24), (uint8_t)(n >> 16), (uint8_t)(n >> 8), (uint8_t)n};
    assert_int_equal(strata_buffer_append(&b, head, 5), 0);
    assert_int_equal(strata_buffer_append(&b, msg, n), 0);
    return b;
}

/* A gRPC-Web call with a string message; the answer's frames as "DATA:<msg>|TRAILER:<text>". */
static void grpc_web(const fixture *f, const char *path, const char *msg, bool text,
                     const char *const *extra, char *out, size_t size) {
    strata_buffer req = frame(0, msg), enc = STRATA_BUFFER_INIT;
    if (text)
        assert_int_equal(strata_base64_encode(&enc, req.data, req.len), 0);
    const strata_buffer *sent = text ? &enc : &req;
    reply r = post(f, path, text ? "application/grpc-web-text" : "application/grpc-web+proto",
                   sent->data, sent->len, extra);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr((const char *)r.headers.data, text ? "application/grpc-web-text+proto"
                                                              : "application/grpc-web+proto"));
    strata_buffer body = STRATA_BUFFER_INIT;
    strata_error err;
    if (text)
        assert_int_equal(strata_base64_decode((const char *)r.body.data, r.body.len, &body, &err),
                         0);
    else
        assert_int_equal(strata_buffer_append(&body, r.body.data, r.body.len), 0);
    size_t used = 0;
    out[0] = '\0';
    for (size_t i = 0; i + 5 <= body.len;) {
        size_t n = (size_t)body.data[i + 1] << 24 | (size_t)body.data[i + 2] << 16 |
                   (size_t)body.data[i + 3] << 8 | body.data[i + 4];
        assert_true(i + 5 + n <= body.len);
        used += (size_t)snprintf(out + used, size - used, "%s%s:%.*s", used ? "|" : "",
                                 body.data[i] == 0x80 ? "TRAILER" : "DATA", (int)n,
                                 (const char *)body.data + i + 5);
        i += 5 + n;
    }
    strata_buffer_free(&body);
    strata_buffer_free(&req);
    strata_buffer_free(&enc);
    reply_free(&r);
}

static void test_grpc_web_binary_and_text(void **state) {
    fixture *f = *state;
    char got[512];
    for (int text = 0; text < 2; text++) {
        grpc_web(f, "/test.Echo/Echo", "hello", text, NULL, got, sizeof got);
        assert_string_equal(got, "DATA:hello|TRAILER:grpc-status:0\r\ngrpc-message:\r\n");
        grpc_web(f, "/test.Other/Upper", "abc", text, NULL, got, sizeof got);
        assert_string_equal(got, "DATA:ABC|TRAILER:grpc-status:0\r\ngrpc-message:\r\n");
    }
    /* an asynchronous handler, answered from another thread */
    grpc_web(f, "/test.Async/Delay", "30:late", false, NULL, got, sizeof got);
    assert_string_equal(got, "DATA:late|TRAILER:grpc-status:0\r\ngrpc-message:\r\n");
    /* errors: the status and its percent-encoded message in the trailer frame, no data frame */
    grpc_web(f, "/test.Echo/Fail", "x\xc3\xa9%", false, NULL, got, sizeof got);
    assert_string_equal(got, "TRAILER:grpc-status:3\r\ngrpc-message:bad request: x%C3%A9%25\r\n");
    grpc_web(f, "/test.Echo/Nope", "x", false, NULL, got, sizeof got);
    assert_string_equal(
        got, "TRAILER:grpc-status:12\r\ngrpc-message:unknown method /test.Echo/Nope\r\n");
}

static void test_metadata_and_deadlines(void **state) {
    fixture *f = *state;
    char got[512];
    grpc_web(f, "/test.Echo/Metadata", "x-scope-orgid", false,
             (const char *const[]){"X-Scope-OrgID: team-a", NULL}, got, sizeof got);
    assert_string_equal(got, "DATA:team-a|TRAILER:grpc-status:0\r\ngrpc-message:\r\n");
    grpc_web(f, "/test.Echo/Deadline", "", false, NULL, got, sizeof got);
    assert_string_equal(got, "DATA:none|TRAILER:grpc-status:0\r\ngrpc-message:\r\n");
    grpc_web(f, "/test.Echo/Deadline", "", false, (const char *const[]){"grpc-timeout: 5S", NULL},
             got, sizeof got);
    long ms = strtol(got + 5, NULL, 10);
    assert_true(ms > 0 && ms <= 5000);
    grpc_web(f, "/test.Echo/Deadline", "", false, (const char *const[]){"grpc-timeout: 5x", NULL},
             got, sizeof got);
    assert_string_equal(got, "TRAILER:grpc-status:3\r\ngrpc-message:malformed timeout header\r\n");
    reply r = post(f, "/test.Echo/Deadline", "application/proto", "", 0,
                   (const char *const[]){"Connect-Timeout-Ms: 2000", NULL});
    assert_int_equal(r.status, 200);
    assert_int_equal(strata_buffer_append_byte(&r.body, 0), 0); /* the answer is bare bytes */
    ms = strtol((const char *)r.body.data, NULL, 10);
    assert_true(ms > 0 && ms <= 2000);
    reply_free(&r);
}

static void test_connect_unary(void **state) {
    fixture *f = *state;
    reply r = post(f, "/test.Other/Upper", "application/proto", "abc", 3, NULL);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.body.len, 3);
    assert_memory_equal(r.body.data, "ABC", 3);
    assert_non_null(strstr((const char *)r.headers.data, "application/proto"));
    reply_free(&r);
    r = post(f, "/test.Echo/Fail", "application/proto", "q\"", 2, NULL);
    assert_int_equal(r.status, 400);
    assert_non_null(strstr((const char *)r.headers.data, "application/json"));
    assert_int_equal(strata_buffer_append_byte(&r.body, 0), 0);
    assert_string_equal((const char *)r.body.data,
                        "{\"code\":\"invalid_argument\",\"message\":\"bad request: q\\\"\"}");
    reply_free(&r);
    r = post(f, "/test.Echo/Nope", "application/proto", "", 0, NULL);
    assert_int_equal(r.status, 501);
    reply_free(&r);
    /* JSON needs the method's message types (rpcweb_set_json_services): none for test.Echo */
    r = post(f, "/test.Echo/Echo", "application/json", "{}", 2, NULL);
    assert_int_equal(r.status, 501);
    assert_int_equal(strata_buffer_append_byte(&r.body, 0), 0);
    assert_non_null(strstr((const char *)r.body.data, "no JSON codec"));
    reply_free(&r);
    r = post(f, "/test.Echo/Echo", "text/plain", "x", 1, NULL);
    assert_int_equal(r.status, 415);
    reply_free(&r);
}

static void test_malformed_frames(void **state) {
    fixture *f = *state;
    const struct {
        const char *body;
        size_t len;
        const char *want;
    } cases[] = {
        {"\x01\x00\x00\x00\x01x", 6, "grpc-status:12"}, /* compressed */
        {"\x00\x00\x00\x00\x09x", 6, "grpc-status:3"},  /* length past the body */
        {"\x00\x00", 2, "grpc-status:3"},               /* no frame header */
        {"\x00\x00\x00\x00\x01xy", 7, "grpc-status:3"}, /* bytes after the frame */
        {"\x80\x00\x00\x00\x01x", 6, "grpc-status:3"},  /* a trailer frame as the request */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        reply r = post(f, "/test.Echo/Echo", "application/grpc-web+proto", cases[i].body,
                       cases[i].len, NULL);
        assert_int_equal(r.status, 200);
        assert_true(r.body.len > 5 && r.body.data[0] == 0x80);
        assert_int_equal(strata_buffer_append_byte(&r.body, 0), 0);
        assert_non_null(strstr((const char *)r.body.data + 5, cases[i].want));
        reply_free(&r);
    }
    reply r = post(f, "/test.Echo/Echo", "application/grpc-web-text", "!!!", 3, NULL);
    assert_int_equal(r.status, 200);
    strata_buffer body = STRATA_BUFFER_INIT;
    strata_error err;
    assert_int_equal(strata_base64_decode((const char *)r.body.data, r.body.len, &body, &err), 0);
    assert_int_equal(strata_buffer_append_byte(&body, 0), 0);
    assert_non_null(strstr((const char *)body.data + 5, "grpc-status:3"));
    strata_buffer_free(&body);
    reply_free(&r);
}

static void test_closed_before_shutdown(void **state) {
    fixture *f = *state;
    rpcweb_close(f->web);
    char got[512];
    grpc_web(f, "/test.Echo/Echo", "hello", false, NULL, got, sizeof got);
    assert_string_equal(got, "TRAILER:grpc-status:14\r\ngrpc-message:server is shutting down\r\n");
}

/* CORS: preflights answered before authentication for allowed origins only; answers to them
 * carry Access-Control-Allow-Origin and expose grpc-status; authentication still applies to the
 * calls themselves. */
static void test_cors(void **state) {
    (void)state;
    strata_error err;
    const char *const tenants[] = {"*"};
    strata_auth_credential cred = {.token = "s3cret", .tenants = tenants, .n_tenants = 1};
    strata_auth *auth = strata_auth_new(&cred, 1, &err);
    assert_non_null(auth);
    const char *const origins[] = {"http://grafana.example:3000"};
    fixture *f = fixture_new(origins, 1, auth);
    reply r = request(f, "OPTIONS", "/test.Echo/Echo", NULL, NULL, 0,
                      (const char *const[]){"Origin: http://grafana.example:3000",
                                            "Access-Control-Request-Method: POST",
                                            "Access-Control-Request-Headers: content-type, "
                                            "x-grpc-web, authorization",
                                            NULL});
    const char *h = (const char *)r.headers.data;
    assert_int_equal(r.status, 204);
    assert_non_null(strstr(h, "Access-Control-Allow-Origin: http://grafana.example:3000"));
    assert_non_null(
        strstr(h, "Access-Control-Allow-Headers: content-type, x-grpc-web, authorization"));
    assert_non_null(strstr(h, "Access-Control-Allow-Methods: GET, HEAD, POST, OPTIONS"));
    reply_free(&r);
    r = request(f, "OPTIONS", "/test.Echo/Echo", NULL, NULL, 0,
                (const char *const[]){"Origin: http://evil.example",
                                      "Access-Control-Request-Method: POST", NULL});
    assert_int_equal(r.status, 403);
    assert_null(strstr((const char *)r.headers.data, "Access-Control-Allow-Origin"));
    reply_free(&r);
    strata_buffer req = frame(0, "hi");
    r = post(f, "/test.Echo/Echo", "application/grpc-web+proto", req.data, req.len,
             (const char *const[]){"Origin: http://grafana.example:3000", NULL});
    assert_int_equal(r.status, 401); /* no token: authentication is not skipped */
    reply_free(&r);
    r = post(f, "/test.Echo/Echo", "application/grpc-web+proto", req.data, req.len,
             (const char *const[]){"Origin: http://grafana.example:3000",
                                   "Authorization: Bearer s3cret", NULL});
    h = (const char *)r.headers.data;
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(h, "Access-Control-Allow-Origin: http://grafana.example:3000"));
    assert_non_null(strstr(h, "Access-Control-Expose-Headers: grpc-status, grpc-message"));
    reply_free(&r);
    /* another origin gets its answer (CORS is the browser's rule) but no permission to read it */
    r = post(
        f, "/test.Echo/Echo", "application/grpc-web+proto", req.data, req.len,
        (const char *const[]){"Origin: http://evil.example", "Authorization: Bearer s3cret", NULL});
    assert_int_equal(r.status, 200);
    assert_null(strstr((const char *)r.headers.data, "Access-Control-Allow-Origin"));
    reply_free(&r);
    strata_buffer_free(&req);
    fixture_free(f);
    strata_auth_free(auth);
}

int main(void) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_grpc_web_binary_and_text, setup, teardown),
        cmocka_unit_test_setup_teardown(test_metadata_and_deadlines, setup, teardown),
        cmocka_unit_test_setup_teardown(test_connect_unary, setup, teardown),
        cmocka_unit_test_setup_teardown(test_malformed_frames, setup, teardown),
        cmocka_unit_test_setup_teardown(test_closed_before_shutdown, setup, teardown),
        cmocka_unit_test(test_cors),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    curl_global_cleanup();
    return rc;
}
