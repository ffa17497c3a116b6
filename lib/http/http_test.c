/*
 * http_test.c - tests for the HTTP server, with libcurl as the client: routing, query and header
 * access, bodies (plain, chunked, over the limit), errors, static files and traversal attempts,
 * /metrics and /ready, parallel clients, blocked and deferred handlers, a graceful stop with a
 * request in flight; and with raw sockets from several loopback addresses: floods of idle and
 * trickling connections, deadlines a trickle cannot extend, the cap per address.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "http/http.h"

/* --- client ---------------------------------------------------------------------------------- */

typedef struct reply {
    CURLcode rc;
    long status;
    strata_buffer body;    /* NUL-terminated */
    strata_buffer headers; /* NUL-terminated */
} reply;

typedef struct request_opts {
    const char *method;
    const uint8_t *body;
    size_t body_len;
    bool chunked;
    const char *header; /* one extra request header */
    bool path_as_is;
} request_opts;

typedef struct upload {
    const uint8_t *data;
    size_t len;
    size_t pos;
} upload;

static size_t on_write(char *p, size_t size, size_t n, void *ud) {
    return strata_buffer_append(ud, p, size * n) == 0 ? size * n : 0;
}

static size_t on_read(char *p, size_t size, size_t n, void *ud) {
    upload *u = ud;
    size_t take = size * n;
    if (take > 100000)
        take = 100000; /* many chunks */
    if (take > u->len - u->pos)
        take = u->len - u->pos;
    memcpy(p, u->data + u->pos, take);
    u->pos += take;
    return take;
}

static void reply_free(reply *r) {
    strata_buffer_free(&r->body);
    strata_buffer_free(&r->headers);
}

static void configure_body(CURL *c, const request_opts *o, upload *u, struct curl_slist **hdrs) {
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    if (o->chunked) {
        *u = (upload){o->body, o->body_len, 0};
        curl_easy_setopt(c, CURLOPT_READFUNCTION, on_read);
        curl_easy_setopt(c, CURLOPT_READDATA, u);
        *hdrs = curl_slist_append(*hdrs, "Transfer-Encoding: chunked");
    } else {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, (const char *)o->body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)o->body_len);
    }
}

/* Runs one request on c; reusing c across calls reuses its keep-alive connection. */
static reply perform(CURL *c, const char *url, const request_opts *o) {
    static const request_opts defaults = {0};
    o = o ? o : &defaults;
    reply r = {.body = STRATA_BUFFER_INIT, .headers = STRATA_BUFFER_INIT};
    struct curl_slist *hdrs = NULL;
    upload u;
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &r.body);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_write);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &r.headers);
    curl_easy_setopt(c, CURLOPT_PATH_AS_IS, o->path_as_is ? 1L : 0L);
    if (o->body != NULL)
        configure_body(c, o, &u, &hdrs);
    if (o->method != NULL)
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, o->method);
    if (o->method != NULL && strcmp(o->method, "HEAD") == 0)
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    if (o->header != NULL)
        hdrs = curl_slist_append(hdrs, o->header);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
    r.rc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
    curl_slist_free_all(hdrs);
    assert_int_equal(strata_buffer_append_byte(&r.body, 0), 0);
    assert_int_equal(strata_buffer_append_byte(&r.headers, 0), 0);
    r.body.len--;
    r.headers.len--;
    return r;
}

static reply fetch(const char *url, const request_opts *o) {
    CURL *c = curl_easy_init();
    assert_non_null(c);
    reply r = perform(c, url, o);
    curl_easy_cleanup(c);
    return r;
}

static const char *body_of(const reply *r) {
    return (const char *)r->body.data;
}

/* True if the response has the header line "name: value" (name case-insensitive). */
static bool has_header(const reply *r, const char *name, const char *value) {
    char line[512];
    snprintf(line, sizeof line, "\n%s: %s\r\n", name, value);
    return strcasestr((const char *)r->headers.data, line) != NULL;
}

/* --- handlers -------------------------------------------------------------------------------- */

static uint64_t fnv1a(const uint8_t *p, size_t n) {
    uint64_t h = 14695981039346656037ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}

static void handle_echo(void *ctx, const http_request *req, http_response *resp) {
    (void)ctx;
    strata_buffer *b = http_response_body(resp);
    const char *ks[8];
    size_t nk = http_request_query_all(req, "k", ks, 8);
    strata_buffer_appendf(b, "method=%s path=%s k=", http_request_method(req),
                          http_request_path(req));
    for (size_t i = 0; i < nk && i < 8; i++)
        strata_buffer_appendf(b, "%s[%s]", i ? "," : "", ks[i]);
    const char *x = http_request_query(req, "x"), *e = http_request_query(req, "empty");
    const char *h = http_request_header(req, "x-TEST");
    strata_buffer_appendf(b, " x=%s empty=%s missing=%s header=%s peer=%s", x ? x : "(null)",
                          e ? e : "(null)", http_request_query(req, "nope") ? "yes" : "no",
                          h ? h : "(null)", http_request_peer(req));
    http_response_add_header(resp, "X-Handler", "echo");
    assert_int_equal(http_response_add_header(resp, "X-Bad", "a\r\nInjected: 1"), -1);
    assert_int_equal(http_response_add_header(resp, "Bad Name", "v"), -1);
}

static void handle_upload(void *ctx, const http_request *req, http_response *resp) {
    (void)ctx;
    size_t len;
    const uint8_t *body = http_request_body(req, &len);
    http_response_set_status(resp, 201);
    http_response_set_content_type(resp, "application/json");
    strata_buffer_appendf(http_response_body(resp), "{\"len\":%zu,\"fnv\":\"%016llx\"}", len,
                          (unsigned long long)fnv1a(body, len));
}

static void handle_any(void *ctx, const http_request *req, http_response *resp) {
    (void)ctx;
    strata_buffer_appendf(http_response_body(resp), "%s rest=%s", http_request_method(req),
                          http_request_path_rest(req));
}

static void handle_fail(void *ctx, const http_request *req, http_response *resp) {
    (void)ctx;
    strata_error err;
    strata_error_set(&err, STRATA_INVALID_ARGUMENT, "bad \"selector\"");
    http_response_strata_error(resp, req, &err);
}

static atomic_int slow_started;
static atomic_int slow_release;

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Holds its thread until the test sets slow_release (at most 20 s); counts its starts. */
static void handle_slow(void *ctx, const http_request *req, http_response *resp) {
    (void)ctx;
    (void)req;
    atomic_fetch_add(&slow_started, 1);
    for (int i = 0; i < 20000 && !atomic_load(&slow_release); i++)
        sleep_ms(1);
    strata_buffer_append_str(http_response_body(resp), "slow done");
}

static atomic_bool is_ready;

static bool ready_check(void *ctx, char *reason, size_t size) {
    (void)ctx;
    if (atomic_load(&is_ready))
        return true;
    snprintf(reason, size, "warming up: %d blocks left", 3);
    return false;
}

/* --- fixture --------------------------------------------------------------------------------- */

typedef struct fixture {
    metrics_registry *metrics;
    http_server *server;
    char base[64];
    char dir[256]; /* temp dir: root/ (static files) and outside.txt */
    char root[300];
} fixture;

static void write_file(const char *dir, const char *name, const char *content) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(content, f);
    fclose(f);
}

static void make_static_tree(fixture *fx) {
    snprintf(fx->dir, sizeof fx->dir, "/tmp/strata_http_test_XXXXXX");
    assert_non_null(mkdtemp(fx->dir));
    snprintf(fx->root, sizeof fx->root, "%s/root", fx->dir);
    assert_int_equal(mkdir(fx->root, 0755), 0);
    char sub[400];
    snprintf(sub, sizeof sub, "%s/sub", fx->root);
    assert_int_equal(mkdir(sub, 0755), 0);
    write_file(fx->dir, "outside.txt", "SECRET");
    write_file(fx->root, "index.html", "<h1>strata</h1>");
    write_file(fx->root, "app.js", "console.log(1);");
    write_file(fx->root, ".hidden", "hidden");
    write_file(sub, "index.html", "sub index");
    write_file(sub, "data.json", "{\"a\":1}");
    char link[400];
    snprintf(link, sizeof link, "%s/link_out", fx->root);
    assert_int_equal(symlink("../outside.txt", link), 0);
    snprintf(link, sizeof link, "%s/link_abs", fx->root);
    assert_int_equal(symlink("/etc/passwd", link), 0);
    snprintf(link, sizeof link, "%s/link_in", fx->root);
    assert_int_equal(symlink("app.js", link), 0);
}

static void remove_static_tree(fixture *fx) {
    const char *names[] = {"root/sub/index.html", "root/sub/data.json", "root/index.html",
                           "root/app.js",         "root/.hidden",       "root/link_out",
                           "root/link_abs",       "root/link_in",       "outside.txt"};
    char path[512];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", fx->dir, names[i]);
        unlink(path);
    }
    snprintf(path, sizeof path, "%s/root/sub", fx->dir);
    rmdir(path);
    rmdir(fx->root);
    rmdir(fx->dir);
}

static void add_routes(fixture *fx) {
    strata_error err;
    http_server *s = fx->server;
    assert_int_equal(
        http_server_route(s, "GET", "/echo", HTTP_MATCH_EXACT, handle_echo, NULL, &err), 0);
    assert_int_equal(
        http_server_route(s, "POST", "/upload", HTTP_MATCH_EXACT, handle_upload, NULL, &err), 0);
    assert_int_equal(http_server_route(s, NULL, "/any/", HTTP_MATCH_PREFIX, handle_any, NULL, &err),
                     0);
    assert_int_equal(
        http_server_route(s, "GET", "/any/deeper/", HTTP_MATCH_PREFIX, handle_echo, NULL, &err), 0);
    assert_int_equal(
        http_server_route(s, "GET", "/fail", HTTP_MATCH_EXACT, handle_fail, NULL, &err), 0);
    assert_int_equal(
        http_server_route(s, "GET", "/slow", HTTP_MATCH_EXACT, handle_slow, NULL, &err), 0);
    assert_int_equal(http_server_add_metrics(s, fx->metrics, &err), 0);
    assert_int_equal(http_server_add_ready(s, ready_check, NULL, &err), 0);
    assert_int_equal(http_server_serve_static(s, "/ui/", fx->root, &err), 0);
}

static int setup(void **state) {
    fixture *fx = calloc(1, sizeof *fx);
    if (fx == NULL)
        return -1;
    strata_error err;
    fx->metrics = metrics_registry_new(&err);
    make_static_tree(fx);
    http_server_options o = {.bind = "127.0.0.1:0", .metrics = fx->metrics};
    fx->server = http_server_new(&o, &err);
    if (fx->server == NULL)
        return -1;
    add_routes(fx);
    if (http_server_start(fx->server, &err) != 0)
        return -1;
    snprintf(fx->base, sizeof fx->base, "http://127.0.0.1:%u", http_server_port(fx->server));
    *state = fx;
    return 0;
}

static int teardown(void **state) {
    fixture *fx = *state;
    http_server_free(fx->server);
    metrics_registry_free(fx->metrics);
    remove_static_tree(fx);
    free(fx);
    return 0;
}

static reply get(const fixture *fx, const char *path, const request_opts *o) {
    char url[1024];
    snprintf(url, sizeof url, "%s%s", fx->base, path);
    return fetch(url, o);
}

/* --- tests ----------------------------------------------------------------------------------- */

static void test_get_with_query_and_headers(void **state) {
    fixture *fx = *state;
    reply r = get(fx, "/echo?k=1&k=two%20words&x=a+b%2Bc&empty&k=%E2%9C%93",
                  &(request_opts){.header = "X-Test: hello there"});
    assert_int_equal(r.rc, CURLE_OK);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(body_of(&r), "method=GET path=/echo k=[1],[two words],[\xE2\x9C\x93] "
                                        "x=a b+c empty= missing=no header=hello there "
                                        "peer=127.0.0.1:"));
    assert_true(has_header(&r, "X-Handler", "echo"));
    assert_true(has_header(&r, "Content-Type", "text/plain; charset=utf-8"));
    assert_null(strcasestr((const char *)r.headers.data, "Injected"));
    reply_free(&r);

    r = get(fx, "/echo", &(request_opts){.method = "HEAD"});
    assert_int_equal(r.status, 200);
    assert_int_equal(r.body.len, 0);
    reply_free(&r);

    /* the path is decoded too; %2F becomes part of the path, not a separator at routing time */
    r = get(fx, "/any/a%20b/c", NULL);
    assert_int_equal(r.status, 200);
    assert_string_equal(body_of(&r), "GET rest=a b/c");
    reply_free(&r);
    r = get(fx, "/any/x", &(request_opts){.method = "DELETE"});
    assert_string_equal(body_of(&r), "DELETE rest=x");
    reply_free(&r);
    r = get(fx, "/any/deeper/z?k=7", NULL); /* the longer prefix wins */
    assert_non_null(strstr(body_of(&r), "path=/any/deeper/z k=[7]"));
    reply_free(&r);
}

static uint8_t *pattern(size_t n) {
    uint8_t *p = malloc(n);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(i * 31 + (i >> 12));
    return p;
}

static void test_post_bodies(void **state) {
    fixture *fx = *state;
    size_t n = 3 << 20;
    uint8_t *data = pattern(n);
    char want[128];
    snprintf(want, sizeof want, "{\"len\":%zu,\"fnv\":\"%016llx\"}", n,
             (unsigned long long)fnv1a(data, n));
    for (int chunked = 0; chunked <= 1; chunked++) {
        reply r =
            get(fx, "/upload", &(request_opts){.body = data, .body_len = n, .chunked = chunked});
        assert_int_equal(r.rc, CURLE_OK);
        assert_int_equal(r.status, 201);
        assert_string_equal(body_of(&r), want);
        assert_true(has_header(&r, "Content-Type", "application/json"));
        reply_free(&r);
    }
    reply r = get(fx, "/upload", &(request_opts){.body = data, .body_len = 0});
    assert_int_equal(r.status, 201);
    assert_string_equal(body_of(&r), "{\"len\":0,\"fnv\":\"cbf29ce484222325\"}");
    reply_free(&r);
    free(data);
}

static void test_body_over_limit(void **state) {
    (void)state;
    strata_error err;
    metrics_registry *reg = metrics_registry_new(&err);
    http_server *s =
        http_server_new(&(http_server_options){.max_body_bytes = 1 << 20, .metrics = reg}, &err);
    assert_non_null(s);
    assert_int_equal(
        http_server_route(s, "POST", "/upload", HTTP_MATCH_EXACT, handle_upload, NULL, &err), 0);
    assert_int_equal(http_server_start(s, &err), 0);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%u/upload", http_server_port(s));
    size_t n = (1 << 20) + 1;
    uint8_t *data = pattern(n);
    for (int chunked = 0; chunked <= 1; chunked++) {
        reply r = fetch(url, &(request_opts){.body = data, .body_len = n, .chunked = chunked});
        assert_int_equal(r.rc, CURLE_OK);
        assert_int_equal(r.status, 413);
        assert_string_equal(body_of(&r), "request body exceeds the size limit\n");
        reply_free(&r);
    }
    /* without "Expect: 100-continue" the client sends the body before it sees the 413 */
    reply r = fetch(url, &(request_opts){.body = data, .body_len = n, .header = "Expect:"});
    assert_int_equal(r.status, 413);
    assert_string_equal(body_of(&r), "request body exceeds the size limit\n");
    reply_free(&r);
    /* a chunked body far over the limit is not read to its end: 413 or a dropped connection */
    size_t huge = 5 << 20;
    uint8_t *big = pattern(huge);
    r = fetch(url, &(request_opts){.body = big, .body_len = huge, .chunked = true});
    assert_true(r.rc != CURLE_OK || r.status == 413);
    reply_free(&r);
    free(big);
    r = fetch(url, &(request_opts){.body = data, .body_len = 1 << 20});
    assert_int_equal(r.status, 201); /* exactly the limit is fine */
    reply_free(&r);
    free(data);
    http_server_free(s);
    metrics_registry_free(reg);
}

static void test_errors(void **state) {
    fixture *fx = *state;
    reply r = get(fx, "/nope", NULL);
    assert_int_equal(r.status, 404);
    assert_string_equal(body_of(&r), "not found\n");
    reply_free(&r);
    r = get(fx, "/nope", &(request_opts){.header = "Accept: application/json"});
    assert_int_equal(r.status, 404);
    assert_string_equal(body_of(&r), "{\"error\":\"not found\",\"status\":404}\n");
    assert_true(has_header(&r, "Content-Type", "application/json"));
    reply_free(&r);

    r = get(fx, "/echo",
            &(request_opts){.method = "POST", .body = (const uint8_t *)"x", .body_len = 1});
    assert_int_equal(r.status, 405);
    assert_true(has_header(&r, "Allow", "GET, HEAD"));
    reply_free(&r);
    r = get(fx, "/upload", NULL);
    assert_int_equal(r.status, 405);
    assert_true(has_header(&r, "Allow", "POST"));
    reply_free(&r);

    const char *bad[] = {"/echo%zz", "/echo%0", "/a%00b", "/echo?k=%g1"};
    for (size_t i = 0; i < 4; i++) {
        r = get(fx, bad[i], &(request_opts){.path_as_is = true});
        assert_int_equal(r.status, 400);
        assert_string_equal(body_of(&r), "malformed request URI\n");
        reply_free(&r);
    }

    r = get(fx, "/fail", &(request_opts){.header = "Accept: application/json, */*"});
    assert_int_equal(r.status, 400);
    assert_string_equal(body_of(&r), "{\"error\":\"bad \\\"selector\\\"\",\"status\":400}\n");
    reply_free(&r);
}

typedef struct static_case {
    const char *path;
    long status;
    const char *body;
    const char *type;
} static_case;

static void test_static_files(void **state) {
    fixture *fx = *state;
    const static_case cases[] = {
        {"/ui/", 200, "<h1>strata</h1>", "text/html; charset=utf-8"},
        {"/ui/index.html", 200, "<h1>strata</h1>", "text/html; charset=utf-8"},
        {"/ui/app.js", 200, "console.log(1);", "text/javascript; charset=utf-8"},
        {"/ui/sub/", 200, "sub index", "text/html; charset=utf-8"},
        {"/ui/sub/data.json", 200, "{\"a\":1}", "application/json"},
        {"/ui//sub//./data.json", 200, "{\"a\":1}", "application/json"},
        {"/ui/link_in", 200, "console.log(1);", "application/octet-stream"},
        {"/ui/missing.html", 404, "not found\n", NULL},
        {"/ui/sub/missing/", 404, "not found\n", NULL},
        /* traversal attempts, sent as-is */
        {"/ui/../outside.txt", 404, "not found\n", NULL},
        {"/ui/sub/../../outside.txt", 404, "not found\n", NULL},
        {"/ui/%2e%2e/outside.txt", 404, "not found\n", NULL},
        {"/ui/%2E%2E%2Foutside.txt", 404, "not found\n", NULL},
        {"/ui/sub/%2e%2e/%2e%2e/outside.txt", 404, "not found\n", NULL},
        {"/ui/..%2foutside.txt", 404, "not found\n", NULL},
        {"/ui//etc/passwd", 404, "not found\n", NULL},
        {"/ui/%2fetc%2fpasswd", 404, "not found\n", NULL},
        {"/ui/link_out", 404, "not found\n", NULL},
        {"/ui/link_abs", 404, "not found\n", NULL},
        {"/ui/.hidden", 404, "not found\n", NULL},
        {"/ui/sub\\..\\..\\outside.txt", 404, "not found\n", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        reply r = get(fx, cases[i].path, &(request_opts){.path_as_is = true});
        if (r.status != cases[i].status)
            fail_msg("%s: status %ld, want %ld", cases[i].path, r.status, cases[i].status);
        assert_string_equal(body_of(&r), cases[i].body);
        assert_null(strstr(body_of(&r), "SECRET"));
        if (cases[i].type != NULL)
            assert_true(has_header(&r, "Content-Type", cases[i].type));
        reply_free(&r);
    }
    reply r = get(fx, "/ui", NULL);
    assert_int_equal(r.status, 301);
    assert_true(has_header(&r, "Location", "/ui/"));
    reply_free(&r);
    r = get(fx, "/ui/sub?x=1", NULL);
    assert_int_equal(r.status, 301);
    assert_true(has_header(&r, "Location", "/ui/sub/?x=1"));
    reply_free(&r);
    r = get(fx, "/ui/app.js", &(request_opts){.method = "HEAD"});
    assert_int_equal(r.status, 200);
    assert_true(has_header(&r, "Content-Length", "15"));
    reply_free(&r);
}

static void test_content_types_and_status_mapping(void **state) {
    (void)state;
    assert_string_equal(http_content_type_for("a/b/c.CSS"), "text/css; charset=utf-8");
    assert_string_equal(http_content_type_for("x.svg"), "image/svg+xml");
    assert_string_equal(http_content_type_for("dir.d/noext"), "application/octet-stream");
    assert_string_equal(http_content_type_for("x.wasm"), "application/wasm");
    assert_int_equal(http_status_from_strata(STRATA_NOT_FOUND), 404);
    assert_int_equal(http_status_from_strata(STRATA_RESOURCE_EXHAUSTED), 429);
    assert_int_equal(http_status_from_strata(STRATA_UNAVAILABLE), 503);
    assert_int_equal(http_status_from_strata(STRATA_INTERNAL), 500);
}

static void test_ready(void **state) {
    fixture *fx = *state;
    atomic_store(&is_ready, false);
    reply r = get(fx, "/ready", NULL);
    assert_int_equal(r.status, 503);
    assert_string_equal(body_of(&r), "warming up: 3 blocks left\n");
    reply_free(&r);
    atomic_store(&is_ready, true);
    r = get(fx, "/ready", NULL);
    assert_int_equal(r.status, 200);
    assert_string_equal(body_of(&r), "ready\n");
    reply_free(&r);
}

/* Value of the series line starting with `series ` in a /metrics body, or -1. */
static double metric_value(const char *text, const char *series) {
    char needle[512];
    snprintf(needle, sizeof needle, "\n%s ", series);
    const char *p = strstr(text, needle);
    return p ? strtod(p + strlen(needle), NULL) : -1;
}

static double scrape(const fixture *fx, const char *series) {
    reply r = get(fx, "/metrics", NULL);
    assert_int_equal(r.status, 200);
    double v = metric_value(body_of(&r), series);
    reply_free(&r);
    return v;
}

/* The series' value once it reaches at least want (or after 20 s). A request is counted when
 * libmicrohttpd reports it complete, just after its response has gone out, so a client can read
 * /metrics before its own last request is in: wait on the count, not on the replies. */
static double scrape_at_least(const fixture *fx, const char *series, double want) {
    double v = scrape(fx, series);
    for (int i = 0; i < 2000 && v < want; i++) {
        sleep_ms(10);
        v = scrape(fx, series);
    }
    return v;
}

static void test_metrics_endpoint(void **state) {
    fixture *fx = *state;
    strata_error err;
    metrics_counter *c = metrics_counter_new(
        fx->metrics, &(metrics_opts){.name = "strata_test_things_total", .help = "Things."}, &err);
    metrics_counter_add(c, 42);
    double before = scrape(fx, "http_requests_total{handler=\"/echo\",code=\"2xx\"}");
    for (int i = 0; i < 3; i++) {
        reply r = get(fx, "/echo", NULL);
        reply_free(&r);
    }
    reply r = get(fx, "/definitely/unknown", NULL);
    reply_free(&r);
    (void)scrape_at_least(fx, "http_requests_total{handler=\"unmatched\",code=\"4xx\"}", 1);
    (void)scrape_at_least(fx, "http_requests_total{handler=\"/echo\",code=\"2xx\"}",
                          (before < 0 ? 0 : before) + 3);

    r = get(fx, "/metrics", NULL);
    assert_int_equal(r.status, 200);
    assert_true(has_header(&r, "Content-Type", METRICS_CONTENT_TYPE));
    const char *text = body_of(&r);
    assert_non_null(strstr(text, "# HELP strata_test_things_total Things.\n"
                                 "# TYPE strata_test_things_total counter\n"
                                 "strata_test_things_total 42\n"));
    assert_non_null(strstr(text, "# TYPE http_requests_total counter\n"));
    assert_non_null(strstr(text, "# TYPE http_request_duration_seconds histogram\n"));
    assert_true(metric_value(text, "http_requests_total{handler=\"/echo\",code=\"2xx\"}") ==
                (before < 0 ? 0 : before) + 3);
    assert_true(metric_value(text, "http_requests_total{handler=\"unmatched\",code=\"4xx\"}") >= 1);
    assert_true(metric_value(text, "http_request_duration_seconds_count{handler=\"/echo\"}") >= 3);
    assert_true(
        metric_value(text, "http_request_duration_seconds_bucket{handler=\"/echo\",le=\"+Inf\"}") >=
        3);
    reply_free(&r);
}

enum { CLIENT_THREADS = 8, REQUESTS_PER_THREAD = 13 };

typedef struct client_arg {
    const fixture *fx;
    int id;
    int ok;
} client_arg;

static void *client_thread(void *p) {
    client_arg *a = p;
    for (int i = 0; i < REQUESTS_PER_THREAD; i++) {
        char path[64], want[64];
        snprintf(path, sizeof path, "/any/t%d/r%d", a->id, i);
        snprintf(want, sizeof want, "GET rest=t%d/r%d", a->id, i);
        reply r = get(a->fx, path, NULL);
        if (r.rc == CURLE_OK && r.status == 200 && strcmp(body_of(&r), want) == 0)
            a->ok++;
        reply_free(&r);
    }
    return NULL;
}

static void test_parallel_requests(void **state) {
    fixture *fx = *state;
    double before = scrape(fx, "http_requests_total{handler=\"/any/\",code=\"2xx\"}");
    pthread_t threads[CLIENT_THREADS];
    client_arg args[CLIENT_THREADS];
    for (int i = 0; i < CLIENT_THREADS; i++) {
        args[i] = (client_arg){fx, i, 0};
        assert_int_equal(pthread_create(&threads[i], NULL, client_thread, &args[i]), 0);
    }
    int ok = 0;
    for (int i = 0; i < CLIENT_THREADS; i++) {
        pthread_join(threads[i], NULL);
        ok += args[i].ok;
    }
    assert_int_equal(ok, CLIENT_THREADS * REQUESTS_PER_THREAD);
    double base = before < 0 ? 0 : before;
    double after = scrape_at_least(fx, "http_requests_total{handler=\"/any/\",code=\"2xx\"}",
                                   base + CLIENT_THREADS * REQUESTS_PER_THREAD);
    assert_true(after - base == CLIENT_THREADS * REQUESTS_PER_THREAD);
}

typedef struct slow_arg {
    char url[128];
    reply r;
} slow_arg;

static void *slow_client(void *p) {
    slow_arg *a = p;
    a->r = fetch(a->url, NULL);
    return NULL;
}

/* Handlers that block (long queries) delay nothing but their own connections: they hold handler
 * threads, never the I/O threads. With more of them blocked than the fixed pool of 4 workers this
 * server once had, each still starts, and /ready (on the I/O thread) and another route (on a free
 * handler thread) answer at once, on new connections and on a keep-alive connection opened before.
 * test_ready_answers_with_every_handler_busy covers the case of no free handler thread. */
static void test_blocked_handlers_stall_nothing_else(void **state) {
    fixture *fx = *state;
    enum { BLOCKED = 6 };
    atomic_store(&slow_started, 0);
    atomic_store(&slow_release, 0);
    atomic_store(&is_ready, true);
    CURL *keep = curl_easy_init();
    assert_non_null(keep);
    char url[160];
    snprintf(url, sizeof url, "%s/ready", fx->base);
    reply r = perform(keep, url, NULL);
    assert_int_equal(r.status, 200);
    reply_free(&r);

    pthread_t clients[BLOCKED];
    slow_arg args[BLOCKED];
    for (int i = 0; i < BLOCKED; i++) {
        snprintf(args[i].url, sizeof args[i].url, "%s/slow", fx->base);
        assert_int_equal(pthread_create(&clients[i], NULL, slow_client, &args[i]), 0);
    }
    int64_t deadline = strata_monotonic_ns() + 10 * STRATA_NS_PER_SEC;
    while (atomic_load(&slow_started) < BLOCKED && strata_monotonic_ns() < deadline)
        sleep_ms(5);
    assert_int_equal(atomic_load(&slow_started), BLOCKED);

    int64_t t0 = strata_monotonic_ns();
    r = get(fx, "/ready", NULL);
    assert_int_equal(r.status, 200);
    reply_free(&r);
    r = get(fx, "/any/x", NULL);
    assert_int_equal(r.status, 200);
    assert_string_equal(body_of(&r), "GET rest=x");
    reply_free(&r);
    r = perform(keep, url, NULL);
    assert_int_equal(r.status, 200);
    reply_free(&r);
    /* the handlers are still blocked: the answers did not wait for them */
    assert_int_equal(atomic_load(&slow_release), 0);
    assert_true(strata_monotonic_ns() - t0 < 5 * STRATA_NS_PER_SEC);
    curl_easy_cleanup(keep);

    atomic_store(&slow_release, 1);
    for (int i = 0; i < BLOCKED; i++) {
        pthread_join(clients[i], NULL);
        assert_int_equal(args[i].r.status, 200);
        assert_string_equal(body_of(&args[i].r), "slow done");
        reply_free(&args[i].r);
    }
}

/* --- deferred answers ------------------------------------------------------------------------ */

/* A stand-in for the querier's query threads: deferred answers wait here until released. */
static pthread_mutex_t later_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t later_cond = PTHREAD_COND_INITIALIZER;
static int later_waiting;  /* answers waiting to be released */
static bool later_release; /* let them go */

typedef struct later_job {
    http_deferred *d;
    bool wait;
} later_job;

static void *later_thread(void *p) {
    later_job *job = p;
    if (job->wait) {
        pthread_mutex_lock(&later_mu);
        later_waiting++;
        pthread_cond_broadcast(&later_cond);
        while (!later_release)
            pthread_cond_wait(&later_cond, &later_mu);
        pthread_mutex_unlock(&later_mu);
    }
    const http_request *req = http_deferred_request(job->d);
    http_response *resp = http_deferred_response(job->d);
    const char *id = http_request_query(req, "id");
    http_response_set_status(resp, 202);
    strata_buffer_appendf(http_response_body(resp), "later %s", id ? id : "-");
    http_deferred_finish(job->d);
    free(job);
    return NULL;
}

/* Defers; a thread answers (after the release when ?wait is given). */
static void handle_later(void *ctx, const http_request *req, http_response *resp) {
    (void)ctx;
    later_job *job = malloc(sizeof *job);
    assert_non_null(job);
    job->d = http_response_defer(resp);
    assert_ptr_equal(http_response_defer(resp), job->d);
    job->wait = http_request_query(req, "wait") != NULL;
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, later_thread, job), 0);
    pthread_detach(t);
}

/* Defers and finishes before returning. */
static void handle_later_now(void *ctx, const http_request *req, http_response *resp) {
    (void)ctx;
    (void)req;
    http_deferred *d = http_response_defer(resp);
    strata_buffer_append_str(http_response_body(http_deferred_response(d)), "finished early");
    http_deferred_finish(d);
}

typedef struct later_client {
    char url[160];
    reply r;
} later_client;

static void *later_client_main(void *p) {
    later_client *c = p;
    c->r = fetch(c->url, NULL);
    return NULL;
}

static void wait_for_later_waiting(int n) {
    pthread_mutex_lock(&later_mu);
    while (later_waiting < n)
        pthread_cond_wait(&later_cond, &later_mu);
    pthread_mutex_unlock(&later_mu);
}

/* A deferred answer holds no thread of the server: with handler_threads at 1, three answers wait
 * (two from nonblocking routes, one from a handler-thread route) while /ready, another handler
 * and answers finished before their handler returned go through; released, each arrives. */
static void test_deferred_answers(void **state) {
    (void)state;
    strata_error err;
    metrics_registry *reg = metrics_registry_new(&err);
    http_server *s = http_server_new(
        &(http_server_options){.handler_threads = 1, .io_threads = 1, .metrics = reg}, &err);
    assert_non_null(s);
    assert_int_equal(http_server_route_nonblocking(s, "GET", "/later", HTTP_MATCH_EXACT,
                                                   handle_later, NULL, &err),
                     0);
    assert_int_equal(http_server_route_nonblocking(s, "GET", "/now", HTTP_MATCH_EXACT,
                                                   handle_later_now, NULL, &err),
                     0);
    assert_int_equal(
        http_server_route(s, "GET", "/sync-later", HTTP_MATCH_EXACT, handle_later, NULL, &err), 0);
    assert_int_equal(
        http_server_route(s, "GET", "/any/", HTTP_MATCH_PREFIX, handle_any, NULL, &err), 0);
    assert_int_equal(http_server_add_ready(s, ready_check, NULL, &err), 0);
    assert_int_equal(http_server_start(s, &err), 0);
    atomic_store(&is_ready, true);
    later_waiting = 0;
    later_release = false;
    char base[64];
    snprintf(base, sizeof base, "http://127.0.0.1:%u", http_server_port(s));

    enum { WAITING = 3 };
    later_client clients[WAITING];
    pthread_t threads[WAITING];
    for (int i = 0; i < WAITING; i++) {
        snprintf(clients[i].url, sizeof clients[i].url, "%s/%s?wait&id=%d", base,
                 i == 2 ? "sync-later" : "later", i);
        assert_int_equal(pthread_create(&threads[i], NULL, later_client_main, &clients[i]), 0);
    }
    wait_for_later_waiting(WAITING);

    char url[200];
    snprintf(url, sizeof url, "%s/ready", base);
    reply r = fetch(url, NULL);
    assert_int_equal(r.status, 200);
    reply_free(&r);
    snprintf(url, sizeof url, "%s/any/x", base);
    r = fetch(url, NULL);
    assert_string_equal(body_of(&r), "GET rest=x");
    reply_free(&r);
    snprintf(url, sizeof url, "%s/now", base);
    r = fetch(url, NULL);
    assert_int_equal(r.status, 200);
    assert_string_equal(body_of(&r), "finished early");
    reply_free(&r);
    snprintf(url, sizeof url, "%s/later?id=quick", base);
    r = fetch(url, NULL);
    assert_int_equal(r.status, 202);
    assert_string_equal(body_of(&r), "later quick");
    reply_free(&r);

    pthread_mutex_lock(&later_mu);
    later_release = true;
    pthread_cond_broadcast(&later_cond);
    pthread_mutex_unlock(&later_mu);
    for (int i = 0; i < WAITING; i++) {
        pthread_join(threads[i], NULL);
        char want[32];
        snprintf(want, sizeof want, "later %d", i);
        assert_int_equal(clients[i].r.status, 202);
        assert_string_equal(body_of(&clients[i].r), want);
        reply_free(&clients[i].r);
    }
    http_server_free(s);
    metrics_registry_free(reg);
}

/* /ready runs on the I/O thread: with both handler threads blocked and a third request queued
 * behind them, it still answers at once; the queued request is answered after the release. */
static void test_ready_answers_with_every_handler_busy(void **state) {
    (void)state;
    strata_error err;
    metrics_registry *reg = metrics_registry_new(&err);
    http_server *s =
        http_server_new(&(http_server_options){.handler_threads = 2, .metrics = reg}, &err);
    assert_non_null(s);
    assert_int_equal(
        http_server_route(s, "GET", "/slow", HTTP_MATCH_EXACT, handle_slow, NULL, &err), 0);
    assert_int_equal(
        http_server_route(s, "GET", "/any/", HTTP_MATCH_PREFIX, handle_any, NULL, &err), 0);
    assert_int_equal(http_server_add_ready(s, ready_check, NULL, &err), 0);
    assert_int_equal(http_server_start(s, &err), 0);
    atomic_store(&is_ready, true);
    atomic_store(&slow_started, 0);
    atomic_store(&slow_release, 0);
    enum { BLOCKED = 2 };
    slow_arg args[BLOCKED + 1];
    pthread_t clients[BLOCKED + 1];
    for (int i = 0; i < BLOCKED; i++) {
        snprintf(args[i].url, sizeof args[i].url, "http://127.0.0.1:%u/slow", http_server_port(s));
        assert_int_equal(pthread_create(&clients[i], NULL, slow_client, &args[i]), 0);
    }
    int64_t deadline = strata_monotonic_ns() + 10 * STRATA_NS_PER_SEC;
    while (atomic_load(&slow_started) < BLOCKED && strata_monotonic_ns() < deadline)
        sleep_ms(5);
    assert_int_equal(atomic_load(&slow_started), BLOCKED);
    snprintf(args[BLOCKED].url, sizeof args[BLOCKED].url, "http://127.0.0.1:%u/any/queued",
             http_server_port(s));
    assert_int_equal(pthread_create(&clients[BLOCKED], NULL, slow_client, &args[BLOCKED]), 0);

    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%u/ready", http_server_port(s));
    for (int i = 0; i < 5; i++) {
        int64_t t0 = strata_monotonic_ns();
        reply r = fetch(url, NULL);
        int64_t took = strata_monotonic_ns() - t0;
        assert_int_equal(r.status, 200);
        reply_free(&r);
        if (took > 100 * STRATA_NS_PER_MS)
            fail_msg("/ready took %lld ms with every handler thread busy",
                     (long long)(took / STRATA_NS_PER_MS));
    }
    assert_int_equal(atomic_load(&slow_started), BLOCKED); /* the queued one did not run */
    atomic_store(&slow_release, 1);
    for (int i = 0; i <= BLOCKED; i++) {
        pthread_join(clients[i], NULL);
        assert_int_equal(args[i].r.status, 200);
        assert_string_equal(body_of(&args[i].r), i < BLOCKED ? "slow done" : "GET rest=queued");
        reply_free(&args[i].r);
    }
    http_server_free(s);
    metrics_registry_free(reg);
}

/* --- floods and deadlines (raw sockets) ------------------------------------------------------ */

/* A connection to 127.0.0.1:port from the loopback address src (any of 127.0.0.0/8 is local). */
static int connect_from(const char *src, uint16_t port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in from = {.sin_family = AF_INET};
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, src, &from.sin_addr);
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    if (bind(fd, (struct sockaddr *)&from, sizeof from) != 0 ||
        connect(fd, (struct sockaddr *)&to, sizeof to) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static bool send_text(int fd, const char *text) {
    size_t n = strlen(text);
    return send(fd, text, n, MSG_NOSIGNAL) == (ssize_t)n;
}

/* True once the server has closed fd (end of file or reset), reading and dropping any answer;
 * waits up to timeout_ms. */
static bool closed_within(int fd, int timeout_ms) {
    int64_t deadline = strata_monotonic_ns() + timeout_ms * STRATA_NS_PER_MS;
    for (;;) {
        int64_t left = (deadline - strata_monotonic_ns()) / STRATA_NS_PER_MS;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (left < 0 || poll(&p, 1, (int)left) <= 0)
            return false;
        char buf[4096];
        ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
            return true;
    }
}

/* True while the server has neither closed fd nor sent anything on it. */
static bool still_open(int fd) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, 0) == 0;
}

/* Trickles one byte into a connection every step_ms until the server closes it; returns the
 * milliseconds from start_ns to the close, or -1 if it stayed open for limit_ms. */
static long trickle_until_closed(int fd, int64_t start_ns, int step_ms, int limit_ms) {
    while (strata_monotonic_ns() - start_ns < limit_ms * STRATA_NS_PER_MS) {
        if (!send_text(fd, "a") || closed_within(fd, step_ms))
            return (long)((strata_monotonic_ns() - start_ns) / STRATA_NS_PER_MS);
    }
    return -1;
}

static double metric_of(metrics_registry *reg, const char *series) {
    strata_buffer b = STRATA_BUFFER_INIT;
    strata_error err;
    assert_int_equal(metrics_registry_render(reg, &b, &err), 0);
    assert_int_equal(strata_buffer_append_byte(&b, 0), 0);
    double v = metric_value((const char *)b.data, series);
    strata_buffer_free(&b);
    return v;
}

/* The most connections the flood test can open here: this process holds both ends. */
static size_t flood_size(size_t want) {
    struct rlimit rl;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
    if (rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
    }
    size_t room = rl.rlim_cur > 512 ? (size_t)(rl.rlim_cur - 512) / 2 : 0;
    return want < room ? want : room;
}

typedef struct trickler {
    int *fds;
    size_t n;
    atomic_bool stop;
    atomic_int rounds;
} trickler;

/* One header byte to every connection every 200 ms. */
static void *trickler_main(void *p) {
    trickler *t = p;
    while (!atomic_load(&t->stop)) {
        for (size_t i = 0; i < t->n; i++)
            (void)send(t->fds[i], "a", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        atomic_fetch_add(&t->rounds, 1);
        sleep_ms(200); /* the trickle's pace, not a wait for a condition */
    }
    return NULL;
}

static int64_t timed_fetch(const char *url, long want_status, const char *want_body) {
    int64_t t0 = strata_monotonic_ns();
    reply r = fetch(url, NULL);
    int64_t took = strata_monotonic_ns() - t0;
    if (r.rc != CURLE_OK || r.status != want_status)
        fail_msg("%s: curl %d, status %ld during the flood", url, (int)r.rc, r.status);
    assert_string_equal(body_of(&r), want_body);
    reply_free(&r);
    return took;
}

/* Thousands of connections held open, half idle and half trickling headers, from several
 * addresses (each under the cap per address): /ready and a deferred answer (the querier's path)
 * still answer within 100 ms, and every flood connection is still held. A thread per connection
 * (the server before this) stopped at 1,024. The full 10,000 is bench/http_flood_bench.py's job
 * (this process holds both ends of every connection). */
static void test_flood_of_idle_and_trickling_connections(void **state) {
    (void)state;
    size_t n = flood_size(3000);
    if (n < 1200)
        skip(); /* RLIMIT_NOFILE too low here for a flood beyond a thread per connection */
    strata_error err;
    metrics_registry *reg = metrics_registry_new(&err);
    http_server *s = http_server_new(&(http_server_options){.header_timeout_ms = 60000,
                                                            .connection_timeout_s = 30,
                                                            .metrics = reg},
                                     &err);
    assert_non_null(s);
    assert_int_equal(http_server_route_nonblocking(s, "GET", "/later", HTTP_MATCH_EXACT,
                                                   handle_later, NULL, &err),
                     0);
    assert_int_equal(http_server_add_ready(s, ready_check, NULL, &err), 0);
    assert_int_equal(http_server_start(s, &err), 0);
    atomic_store(&is_ready, true);
    uint16_t port = http_server_port(s);

    int *fds = calloc(n, sizeof *fds);
    assert_non_null(fds);
    for (size_t i = 0; i < n; i++) {
        char src[32];
        snprintf(src, sizeof src, "127.0.1.%zu", 1 + i / 200); /* 200 per address */
        fds[i] = connect_from(src, port);
        if (fds[i] < 0)
            fail_msg("connection %zu of the flood: %s", i, strerror(errno));
    }
    /* the second half trickles a request line and headers that never end */
    for (size_t i = n / 2; i < n; i++)
        assert_true(send_text(fds[i], "GET /ready HTTP/1.1\r\nHost: x\r\nX-Slow: "));
    trickler t = {.fds = fds + n / 2, .n = n - n / 2};
    atomic_init(&t.stop, false);
    atomic_init(&t.rounds, 0);
    pthread_t tt;
    assert_int_equal(pthread_create(&tt, NULL, trickler_main, &t), 0);
    int64_t deadline = strata_monotonic_ns() + 30 * STRATA_NS_PER_SEC;
    while (metric_of(reg, "http_open_connections") < (double)n && strata_monotonic_ns() < deadline)
        sleep_ms(10);
    assert_true(metric_of(reg, "http_open_connections") >= (double)n);
    while (atomic_load(&t.rounds) < 3)
        sleep_ms(10);

    char ready[64], later[64];
    snprintf(ready, sizeof ready, "http://127.0.0.1:%u/ready", port);
    snprintf(later, sizeof later, "http://127.0.0.1:%u/later?id=q", port);
    int64_t worst = 0;
    for (int i = 0; i < 6; i++) {
        int64_t a = timed_fetch(ready, 200, "ready\n");
        int64_t b = timed_fetch(later, 202, "later q");
        worst = a > worst ? a : worst;
        worst = b > worst ? b : worst;
    }
    print_message("flood of %zu connections: slowest of 12 answers %lld ms\n", n,
                  (long long)(worst / STRATA_NS_PER_MS));
    if (worst > 100 * STRATA_NS_PER_MS)
        fail_msg("an answer took %lld ms during the flood", (long long)(worst / STRATA_NS_PER_MS));
    atomic_store(&t.stop, true);
    pthread_join(tt, NULL);
    for (size_t i = 0; i < n; i++) {
        if (!still_open(fds[i]))
            fail_msg("flood connection %zu was closed", i);
        close(fds[i]);
    }
    free(fds);
    /* Every record goes with its connection. Closes are normally seen at once; one lost by the
     * I/O layer (seen once in CI after 3,000 closes, not reproduced since) must still end at the
     * connection's deadline, which the sweeper enforces: the header deadline for the flood, the
     * idle timeout for the fetches' connections. */
    deadline = strata_monotonic_ns() + 10 * STRATA_NS_PER_SEC;
    while (metric_of(reg, "http_open_connections") > 0 && strata_monotonic_ns() < deadline)
        sleep_ms(10);
    if (metric_of(reg, "http_open_connections") > 0) {
        print_message("%.0f connection(s) still open 10 s after the flood closed; waiting for "
                      "their deadlines\n",
                      metric_of(reg, "http_open_connections"));
        deadline += 65 * STRATA_NS_PER_SEC; /* both deadlines are 60 s */
        while (metric_of(reg, "http_open_connections") > 0 && strata_monotonic_ns() < deadline)
            sleep_ms(50);
    }
    assert_true(metric_of(reg, "http_open_connections") == 0);
    http_server_free(s);
    metrics_registry_free(reg);
}

/* A trickle does not extend the deadlines: a new connection's headers, a kept-alive connection's
 * next headers and a body are each cut at their deadline however steadily bytes arrive, where
 * libmicrohttpd's own timeout (restarted by every byte) would never fire. */
static void test_trickles_cut_at_deadlines(void **state) {
    (void)state;
    strata_error err;
    metrics_registry *reg = metrics_registry_new(&err);
    http_server *s = http_server_new(&(http_server_options){.header_timeout_ms = 400,
                                                            .read_timeout_ms = 900,
                                                            .connection_timeout_s = 30,
                                                            .metrics = reg},
                                     &err);
    assert_non_null(s);
    assert_int_equal(
        http_server_route(s, "POST", "/upload", HTTP_MATCH_EXACT, handle_upload, NULL, &err), 0);
    assert_int_equal(http_server_add_ready(s, ready_check, NULL, &err), 0);
    assert_int_equal(http_server_start(s, &err), 0);
    atomic_store(&is_ready, true);
    uint16_t port = http_server_port(s);

    /* headers of a new connection: due 400 ms after the accept */
    int64_t t0 = strata_monotonic_ns();
    int fd = connect_from("127.0.0.1", port);
    assert_true(fd >= 0);
    assert_true(send_text(fd, "GET /ready HTTP/1.1\r\nHost: x\r\nX-Slow: "));
    long ms = trickle_until_closed(fd, t0, 50, 5000);
    close(fd);
    if (ms < 350 || ms > 1500)
        fail_msg("trickled headers cut after %ld ms, want about 400", ms);
    assert_true(metric_of(reg, "http_connections_timed_out_total{phase=\"headers\"}") == 1);

    /* a kept-alive connection: the next request's headers are due 400 ms after its line */
    fd = connect_from("127.0.0.1", port);
    assert_true(fd >= 0);
    assert_true(send_text(fd, "GET /ready HTTP/1.1\r\nHost: x\r\n\r\n"));
    char buf[512] = "";
    size_t got = 0;
    while (strstr(buf, "ready\n") == NULL) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        assert_int_equal(poll(&p, 1, 5000), 1);
        ssize_t k = recv(fd, buf + got, sizeof buf - 1 - got, 0);
        assert_true(k > 0);
        got += (size_t)k;
        buf[got] = '\0';
    }
    sleep_ms(600); /* idle past the header timeout: the idle deadline is connection_timeout_s */
    assert_true(still_open(fd));
    t0 = strata_monotonic_ns();
    assert_true(send_text(fd, "GET /ready HTTP/1.1\r\nX-Slow: "));
    ms = trickle_until_closed(fd, t0, 50, 5000);
    close(fd);
    if (ms < 350 || ms > 1500)
        fail_msg("second request's trickled headers cut after %ld ms, want about 400", ms);
    assert_true(metric_of(reg, "http_connections_timed_out_total{phase=\"headers\"}") == 2);

    /* a body: the whole request is due 900 ms after its request line */
    fd = connect_from("127.0.0.1", port);
    assert_true(fd >= 0);
    t0 = strata_monotonic_ns();
    assert_true(
        send_text(fd, "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n"));
    ms = trickle_until_closed(fd, t0, 50, 5000);
    close(fd);
    if (ms < 850 || ms > 2000)
        fail_msg("trickled body cut after %ld ms, want about 900", ms);
    assert_true(metric_of(reg, "http_connections_timed_out_total{phase=\"body\"}") == 1);
    http_server_free(s);
    metrics_registry_free(reg);
}

/* At most max_connections_per_address from one address: the excess is closed at once, the held
 * ones stay, and other addresses are served. */
static void test_connection_cap_per_address(void **state) {
    (void)state;
    strata_error err;
    metrics_registry *reg = metrics_registry_new(&err);
    http_server *s = http_server_new(
        &(http_server_options){.max_connections_per_address = 4, .metrics = reg}, &err);
    assert_non_null(s);
    assert_int_equal(http_server_add_ready(s, ready_check, NULL, &err), 0);
    assert_int_equal(http_server_start(s, &err), 0);
    atomic_store(&is_ready, true);
    uint16_t port = http_server_port(s);
    int held[4];
    for (int i = 0; i < 4; i++) {
        held[i] = connect_from("127.0.2.1", port);
        assert_true(held[i] >= 0);
    }
    int64_t deadline = strata_monotonic_ns() + 10 * STRATA_NS_PER_SEC;
    while (metric_of(reg, "http_open_connections") < 4 && strata_monotonic_ns() < deadline)
        sleep_ms(5);
    int excess = connect_from("127.0.2.1", port);
    assert_true(excess >= 0); /* the kernel accepts; the server closes it at once */
    assert_true(closed_within(excess, 5000));
    close(excess);
    for (int i = 0; i < 4; i++)
        assert_true(still_open(held[i]));
    int other = connect_from("127.0.2.2", port);
    assert_true(other >= 0);
    assert_true(send_text(other, "GET /ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
    char buf[512] = "";
    size_t got = 0;
    for (;;) {
        struct pollfd p = {.fd = other, .events = POLLIN};
        assert_int_equal(poll(&p, 1, 5000), 1);
        ssize_t k = recv(other, buf + got, sizeof buf - 1 - got, 0);
        if (k <= 0)
            break;
        got += (size_t)k;
        buf[got] = '\0';
    }
    assert_non_null(strstr(buf, "HTTP/1.1 200"));
    close(other);
    /* a held connection still gets its answer */
    assert_true(send_text(held[0], "GET /ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
    assert_true(closed_within(held[0], 5000));
    for (int i = 0; i < 4; i++)
        close(held[i]);
    http_server_free(s);
    metrics_registry_free(reg);
}

static atomic_int stop_returned;

static void *stopper(void *p) {
    http_server_stop(p);
    atomic_store(&stop_returned, 1);
    return NULL;
}

static void test_stop_with_request_in_flight(void **state) {
    (void)state;
    strata_error err;
    metrics_registry *reg = metrics_registry_new(&err);
    http_server *s = http_server_new(&(http_server_options){.bind = ":0", .metrics = reg}, &err);
    assert_non_null(s);
    assert_int_equal(
        http_server_route(s, "GET", "/slow", HTTP_MATCH_EXACT, handle_slow, NULL, &err), 0);
    assert_int_equal(http_server_route(s, "GET", "/fast", HTTP_MATCH_EXACT, handle_any, NULL, &err),
                     0);
    assert_int_equal(http_server_start(s, &err), 0);
    assert_int_equal(
        http_server_route(s, "GET", "/late", HTTP_MATCH_EXACT, handle_slow, NULL, &err), -1);
    assert_int_equal(err.code, STRATA_FAILED_PRECONDITION);
    uint16_t port = http_server_port(s);
    assert_true(port > 0);
    char fast[128];
    snprintf(fast, sizeof fast, "http://127.0.0.1:%u/fast", port);

    atomic_store(&slow_started, 0);
    atomic_store(&slow_release, 0);
    atomic_store(&stop_returned, 0);
    slow_arg a;
    snprintf(a.url, sizeof a.url, "http://127.0.0.1:%u/slow", port);
    pthread_t client, stop;
    assert_int_equal(pthread_create(&client, NULL, slow_client, &a), 0);
    while (!atomic_load(&slow_started))
        sleep_ms(1);
    /* a keep-alive connection opened before the stop, served on its own thread while the slow
     * handler runs */
    CURL *keep = curl_easy_init();
    assert_non_null(keep);
    reply r = perform(keep, fast, NULL);
    assert_int_equal(r.status, 200);
    reply_free(&r);
    assert_int_equal(pthread_create(&stop, NULL, stopper, s), 0);

    /* new connections are refused once the stop began ... */
    bool refused = false;
    for (int i = 0; i < 5000 && !refused; i++) {
        r = fetch(fast, NULL);
        refused = r.rc == CURLE_COULDNT_CONNECT;
        reply_free(&r);
        if (!refused)
            sleep_ms(1);
    }
    assert_true(refused);
    /* ... and a request on an open connection gets 503 and is told to close */
    r = perform(keep, fast, NULL);
    assert_int_equal(r.status, 503);
    assert_string_equal(body_of(&r), "server is shutting down\n");
    assert_true(has_header(&r, "Connection", "close"));
    reply_free(&r);
    curl_easy_cleanup(keep);

    /* the request in flight completes normally, and stop returns only after that */
    sleep_ms(50);
    assert_int_equal(atomic_load(&stop_returned), 0);
    atomic_store(&slow_release, 1);
    pthread_join(client, NULL);
    pthread_join(stop, NULL);
    assert_int_equal(a.r.rc, CURLE_OK);
    assert_int_equal(a.r.status, 200);
    assert_string_equal(body_of(&a.r), "slow done");
    reply_free(&a.r);

    r = fetch(a.url, NULL);
    assert_int_equal(r.rc, CURLE_COULDNT_CONNECT);
    reply_free(&r);
    http_server_stop(s); /* idempotent */
    http_server_free(s);
    metrics_registry_free(reg);
}

static void test_bind_and_route_errors(void **state) {
    fixture *fx = *state;
    strata_error err;
    const char *bad[] = {"nonsense", "127.0.0.1:", "127.0.0.1:99999", "127.0.0.1:8x",
                         "no.such.host.invalid:80"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_null(http_server_new(&(http_server_options){.bind = bad[i]}, &err));
        assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    }
    char taken[64];
    snprintf(taken, sizeof taken, "127.0.0.1:%u", http_server_port(fx->server));
    assert_null(http_server_new(&(http_server_options){.bind = taken}, &err));
    assert_int_equal(err.code, STRATA_UNAVAILABLE);

    http_server *s = http_server_new(&(http_server_options){.bind = "[::1]:0"}, &err);
    if (s != NULL) { /* IPv6 may be disabled here */
        assert_true(http_server_port(s) > 0);
        assert_int_equal(
            http_server_route(s, "get", "/x", HTTP_MATCH_EXACT, handle_echo, NULL, &err), -1);
        assert_int_equal(
            http_server_route(s, "GET", "x", HTTP_MATCH_EXACT, handle_echo, NULL, &err), -1);
        assert_int_equal(
            http_server_route(s, "GET", "/x", HTTP_MATCH_EXACT, handle_echo, NULL, &err), 0);
        assert_int_equal(
            http_server_route(s, "GET", "/x", HTTP_MATCH_EXACT, handle_echo, NULL, &err), -1);
        assert_int_equal(err.code, STRATA_ALREADY_EXISTS);
        assert_int_equal(http_server_serve_static(s, "/nope", "/tmp", &err), -1);
        assert_int_equal(http_server_serve_static(s, "/s/", "/does/not/exist", &err), -1);
        http_server_free(s); /* never started */
    }
}

int main(void) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_get_with_query_and_headers),
        cmocka_unit_test(test_post_bodies),
        cmocka_unit_test(test_body_over_limit),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_static_files),
        cmocka_unit_test(test_content_types_and_status_mapping),
        cmocka_unit_test(test_ready),
        cmocka_unit_test(test_metrics_endpoint),
        cmocka_unit_test(test_parallel_requests),
        cmocka_unit_test(test_blocked_handlers_stall_nothing_else),
        cmocka_unit_test(test_deferred_answers),
        cmocka_unit_test(test_ready_answers_with_every_handler_busy),
        cmocka_unit_test(test_flood_of_idle_and_trickling_connections),
        cmocka_unit_test(test_trickles_cut_at_deadlines),
        cmocka_unit_test(test_connection_cap_per_address),
        cmocka_unit_test(test_stop_with_request_in_flight),
        cmocka_unit_test(test_bind_and_route_errors),
    };
    int rc = cmocka_run_group_tests(tests, setup, teardown);
    curl_global_cleanup();
    return rc;
}
