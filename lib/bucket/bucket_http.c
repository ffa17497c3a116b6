/*
 * bucket_http.c - the HTTP transport shared by the S3 and AZURE backends (see bucket_remote.h);
 * what an answer means for bucket.h is decided in bucket_remote.c.
 *
 * Handles. A client keeps a stack of idle curl easy handles under a mutex. A request pops one (or
 * creates one), resets its options (curl_easy_reset keeps the connection cache and TLS session),
 * performs, and pushes it back unless max_idle_conns are already idle. So concurrent requests
 * never share a handle and sequential ones reuse warm connections.
 *
 * Retries. An attempt is transient when curl could not connect, timed out, lost the connection or
 * got a truncated body, or when the server answered 408, 429 or 5xx other than 501. The wait before
 * retry n (n >= 1) is drawn uniformly from [d/2, d] with d = min(max, base * 2^(n-1)) ("equal
 * jitter"), so clients that failed together do not retry together. Bodies of 2xx answers go to the
 * caller's buffer, which is rolled back to its length before the attempt when an attempt fails.
 */
#include "bucket/bucket_remote.h"

#include <curl/curl.h>
#include <errno.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "common/clock.h"
#include "common/curl_global.h"

/* ---- http_config ------------------------------------------------------------------------------
 */

static const config_field tls_fields[] = {
    {.key = "ca_file",
     .kind = CONFIG_STRING,
     .offset = offsetof(bucket_tls_yaml, ca_file),
     .default_text = "\"\""},
    {.key = "cert_file",
     .kind = CONFIG_STRING,
     .offset = offsetof(bucket_tls_yaml, cert_file),
     .default_text = "\"\""},
    {.key = "key_file",
     .kind = CONFIG_STRING,
     .offset = offsetof(bucket_tls_yaml, key_file),
     .default_text = "\"\""},
    {.key = "server_name",
     .kind = CONFIG_STRING,
     .offset = offsetof(bucket_tls_yaml, server_name),
     .default_text = "\"\""},
    {.key = "insecure_skip_verify",
     .kind = CONFIG_BOOL,
     .offset = offsetof(bucket_tls_yaml, insecure_skip_verify),
     .default_text = "false"},
    {0},
};

#define HTTP_FIELD(name, k, def)                                                                   \
    { .key = #name, .kind = (k), .offset = offsetof(bucket_http_yaml, name), .default_text = (def) }

const config_field bucket_http_yaml_fields[] = {
    HTTP_FIELD(idle_conn_timeout, CONFIG_DURATION, "1m30s"),
    HTTP_FIELD(response_header_timeout, CONFIG_DURATION, "2m"),
    HTTP_FIELD(insecure_skip_verify, CONFIG_BOOL, "false"),
    HTTP_FIELD(tls_handshake_timeout, CONFIG_DURATION, "10s"),
    HTTP_FIELD(expect_continue_timeout, CONFIG_DURATION, "1s"),
    HTTP_FIELD(max_idle_conns, CONFIG_INT64, "100"),
    HTTP_FIELD(max_idle_conns_per_host, CONFIG_INT64, "100"),
    HTTP_FIELD(max_conns_per_host, CONFIG_INT64, "0"),
    HTTP_FIELD(disable_compression, CONFIG_BOOL, "false"),
    {.key = "tls_config",
     .kind = CONFIG_STRUCT,
     .offset = offsetof(bucket_http_yaml, tls_config),
     .fields = tls_fields},
    {0},
};

static const char *empty_to_null(const char *s) {
    return s != NULL && s[0] != '\0' ? s : NULL;
}

/* The node of http_config.<key> (or of http_config, or of the config) for error positions. */
static const config_node *http_node(const config_node *config, const char *key) {
    const config_node *h = config != NULL ? config_node_get(config, "http_config") : NULL;
    const config_node *k = h != NULL ? config_node_get(h, key) : NULL;
    return k != NULL ? k : h != NULL ? h : config;
}

int bucket_http_options_from_yaml(const bucket_http_yaml *y, const config_node *node,
                                  bucket_http_options *out, strata_error *err) {
    if (y->max_idle_conns < 0 || y->max_idle_conns_per_host < 0 || y->max_conns_per_host < 0)
        return config_node_error(err, http_node(node, "max_idle_conns"),
                                 "connection limits must not be negative");
    if (empty_to_null(y->tls_config.server_name) != NULL)
        return config_node_error(err, http_node(node, "tls_config"),
                                 "tls_config.server_name is not supported (the server name is "
                                 "always the endpoint's host)");
    if ((empty_to_null(y->tls_config.cert_file) == NULL) !=
        (empty_to_null(y->tls_config.key_file) == NULL))
        return config_node_error(err, http_node(node, "tls_config"),
                                 "tls_config.cert_file and tls_config.key_file must be given "
                                 "together");
    int64_t idle = y->max_idle_conns_per_host;
    if (y->max_idle_conns < idle)
        idle = y->max_idle_conns;
    out->connect_timeout_ns = y->tls_handshake_timeout;
    out->stall_timeout_ns = y->response_header_timeout;
    out->expect_continue_ns = y->expect_continue_timeout;
    out->idle_conn_timeout_ns = y->idle_conn_timeout;
    out->max_idle_conns = (size_t)idle;
    out->ca_file = empty_to_null(y->tls_config.ca_file);
    out->cert_file = empty_to_null(y->tls_config.cert_file);
    out->key_file = empty_to_null(y->tls_config.key_file);
    out->insecure_skip_verify = y->insecure_skip_verify || y->tls_config.insecure_skip_verify;
    return 0;
}

/* ---- Client -----------------------------------------------------------------------------------
 */

struct bucket_http_client {
    bucket_http_options o;
    char *what, *ca_file, *cert_file, *key_file; /* owned copies behind o's pointers */
    pthread_mutex_t mu;
    CURL **idle;
    size_t n_idle;
    atomic_uint_fast64_t retries;
};

static int dup_opt(const char *s, char **owned, const char **view) {
    *owned = NULL;
    *view = NULL;
    if (s == NULL)
        return 0;
    *owned = strdup(s);
    *view = *owned;
    return *owned != NULL ? 0 : -1;
}

int bucket_http_client_new(const bucket_http_options *options, bucket_http_client **out,
                           strata_error *err) {
    *out = NULL;
    if (strata_curl_global_init(err) != 0)
        return -1;
    bucket_http_client *c = calloc(1, sizeof *c);
    if (c == NULL)
        return strata_error_oom(err);
    c->o = *options;
    if (c->o.max_attempts < 1)
        c->o.max_attempts = 1;
    atomic_init(&c->retries, 0);
    const char *what = options->what != NULL ? options->what : "bucket";
    if (dup_opt(what, &c->what, &c->o.what) != 0 ||
        dup_opt(options->ca_file, &c->ca_file, &c->o.ca_file) != 0 ||
        dup_opt(options->cert_file, &c->cert_file, &c->o.cert_file) != 0 ||
        dup_opt(options->key_file, &c->key_file, &c->o.key_file) != 0 ||
        (c->idle = calloc(c->o.max_idle_conns + 1, sizeof *c->idle)) == NULL) {
        bucket_http_client_free(c);
        return strata_error_oom(err);
    }
    if (pthread_mutex_init(&c->mu, NULL) != 0) {
        free(c->idle);
        c->idle = NULL;
        bucket_http_client_free(c);
        return strata_error_set(err, STRATA_INTERNAL, "cannot create a mutex");
    }
    *out = c;
    return 0;
}

void bucket_http_client_free(bucket_http_client *c) {
    if (c == NULL)
        return;
    if (c->idle != NULL) {
        for (size_t i = 0; i < c->n_idle; i++)
            curl_easy_cleanup(c->idle[i]);
        free(c->idle);
        pthread_mutex_destroy(&c->mu);
    }
    free(c->what);
    free(c->ca_file);
    free(c->cert_file);
    free(c->key_file);
    free(c);
}

uint64_t bucket_http_client_retries(const bucket_http_client *c) {
    return atomic_load_explicit(&((bucket_http_client *)c)->retries, memory_order_relaxed);
}

static CURL *take_handle(bucket_http_client *c) {
    CURL *h = NULL;
    pthread_mutex_lock(&c->mu);
    if (c->n_idle > 0)
        h = c->idle[--c->n_idle];
    pthread_mutex_unlock(&c->mu);
    if (h != NULL)
        curl_easy_reset(h);
    else
        h = curl_easy_init();
    return h;
}

/* Returns a handle for reuse; a handle that failed at the transport level is dropped so its
 * connection is not reused. */
static void give_handle(bucket_http_client *c, CURL *h, bool healthy) {
    bool kept = false;
    if (healthy) {
        pthread_mutex_lock(&c->mu);
        if (c->n_idle < c->o.max_idle_conns) {
            c->idle[c->n_idle++] = h;
            kept = true;
        }
        pthread_mutex_unlock(&c->mu);
    }
    if (!kept)
        curl_easy_cleanup(h);
}

/* ---- One attempt ------------------------------------------------------------------------------
 */

typedef struct attempt {
    CURL *h;
    const bucket_http_request *req;
    size_t sent; /* upload read position */
    strata_buffer *body;
    bucket_http_response *resp;
    bool oom;
} attempt;

static size_t read_body(char *dst, size_t size, size_t nmemb, void *ctx) {
    attempt *a = ctx;
    size_t left = a->req->body_len - a->sent;
    size_t n = size * nmemb < left ? size * nmemb : left;
    if (n > 0)
        memcpy(dst, (const uint8_t *)a->req->body + a->sent, n);
    a->sent += n;
    return n;
}

static int seek_body(void *ctx, curl_off_t offset, int origin) {
    attempt *a = ctx;
    if (origin != SEEK_SET || offset < 0 || (uint64_t)offset > a->req->body_len)
        return CURL_SEEKFUNC_CANTSEEK;
    a->sent = (size_t)offset;
    return CURL_SEEKFUNC_OK;
}

static size_t write_body(char *data, size_t size, size_t nmemb, void *ctx) {
    attempt *a = ctx;
    size_t n = size * nmemb;
    long status = 0;
    curl_easy_getinfo(a->h, CURLINFO_RESPONSE_CODE, &status);
    strata_buffer *dst = status >= 200 && status < 300 ? a->body : &a->resp->error_body;
    if (dst == NULL)
        return n;
    if (dst == &a->resp->error_body && dst->len > 64 * 1024)
        return n; /* error bodies are short; keep the start */
    if (strata_buffer_append(dst, data, n) != 0) {
        a->oom = true;
        return 0;
    }
    return n;
}

static bool header_is(const char *line, size_t len, const char *name, const char **value,
                      size_t *value_len) {
    size_t n = strlen(name);
    if (len <= n || strncasecmp(line, name, n) != 0 || line[n] != ':')
        return false;
    const char *v = line + n + 1;
    const char *end = line + len;
    while (v < end && (*v == ' ' || *v == '\t'))
        v++;
    while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' '))
        end--;
    *value = v;
    *value_len = (size_t)(end - v);
    return true;
}

static size_t on_header(char *line, size_t size, size_t nmemb, void *ctx) {
    attempt *a = ctx;
    size_t len = size * nmemb;
    const char *v;
    size_t vlen;
    char text[130];
    if (len >= 5 && strncmp(line, "HTTP/", 5) == 0) {
        /* A new response (after 100 Continue, for instance): forget the previous headers. */
        a->resp->has_content_length = false;
        a->resp->last_modified_ns = 0;
        a->resp->etag[0] = '\0';
    } else if (header_is(line, len, "content-length", &v, &vlen) && vlen < sizeof text) {
        memcpy(text, v, vlen);
        text[vlen] = '\0';
        char *end;
        errno = 0;
        unsigned long long n = strtoull(text, &end, 10);
        a->resp->has_content_length = errno == 0 && end != text && *end == '\0';
        a->resp->content_length = n;
    } else if (header_is(line, len, "last-modified", &v, &vlen) && vlen < sizeof text) {
        memcpy(text, v, vlen);
        text[vlen] = '\0';
        if (!bucket_http_parse_date(text, &a->resp->last_modified_ns))
            a->resp->last_modified_ns = 0;
    } else if (header_is(line, len, "etag", &v, &vlen) && vlen < sizeof a->resp->etag) {
        memcpy(a->resp->etag, v, vlen);
        a->resp->etag[vlen] = '\0';
    }
    return len;
}

static long seconds_ceil(int64_t ns) {
    return ns <= 0 ? 0 : (long)((ns + STRATA_NS_PER_SEC - 1) / STRATA_NS_PER_SEC);
}

static CURLcode set_method(CURL *h, const bucket_http_request *req, attempt *a) {
    CURLcode rc = CURLE_OK;
    if (strcmp(req->method, "HEAD") == 0)
        return curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
    if (strcmp(req->method, "PUT") == 0) {
        if ((rc = curl_easy_setopt(h, CURLOPT_UPLOAD, 1L)) == CURLE_OK &&
            (rc = curl_easy_setopt(h, CURLOPT_READFUNCTION, read_body)) == CURLE_OK &&
            (rc = curl_easy_setopt(h, CURLOPT_READDATA, a)) == CURLE_OK &&
            (rc = curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, seek_body)) == CURLE_OK &&
            (rc = curl_easy_setopt(h, CURLOPT_SEEKDATA, a)) == CURLE_OK)
            rc = curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)req->body_len);
        return rc;
    }
    if (strcmp(req->method, "POST") == 0) {
        if ((rc = curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body_len)) ==
            CURLE_OK)
            rc = curl_easy_setopt(h, CURLOPT_POSTFIELDS, req->body != NULL ? req->body : "");
        return rc;
    }
    if (strcmp(req->method, "GET") != 0)
        rc = curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, req->method);
    return rc;
}

static CURLcode set_tls(CURL *h, const bucket_http_options *o) {
    CURLcode rc = CURLE_OK;
    if (o->ca_file != NULL && (rc = curl_easy_setopt(h, CURLOPT_CAINFO, o->ca_file)) != CURLE_OK)
        return rc;
    if (o->cert_file != NULL &&
        ((rc = curl_easy_setopt(h, CURLOPT_SSLCERT, o->cert_file)) != CURLE_OK ||
         (rc = curl_easy_setopt(h, CURLOPT_SSLKEY, o->key_file)) != CURLE_OK))
        return rc;
    if (o->insecure_skip_verify &&
        ((rc = curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L)) != CURLE_OK ||
         (rc = curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L)) != CURLE_OK))
        return rc;
    return CURLE_OK;
}

static CURLcode set_timeouts(CURL *h, const bucket_http_options *o) {
    CURLcode rc;
    if ((rc = curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L)) != CURLE_OK ||
        (rc = curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
                               (long)(o->connect_timeout_ns / STRATA_NS_PER_MS))) != CURLE_OK ||
        (rc = curl_easy_setopt(h, CURLOPT_EXPECT_100_TIMEOUT_MS,
                               (long)(o->expect_continue_ns / STRATA_NS_PER_MS))) != CURLE_OK)
        return rc;
    if (o->stall_timeout_ns > 0 &&
        ((rc = curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1L)) != CURLE_OK ||
         (rc = curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, seconds_ceil(o->stall_timeout_ns))) !=
             CURLE_OK))
        return rc;
    if (o->attempt_timeout_ns > 0 &&
        (rc = curl_easy_setopt(h, CURLOPT_TIMEOUT_MS,
                               (long)(o->attempt_timeout_ns / STRATA_NS_PER_MS))) != CURLE_OK)
        return rc;
    if (o->idle_conn_timeout_ns > 0)
        rc = curl_easy_setopt(h, CURLOPT_MAXAGE_CONN, seconds_ceil(o->idle_conn_timeout_ns));
    return rc;
}

static CURLcode set_signing(CURL *h, const bucket_http_request *req) {
    CURLcode rc = CURLE_OK;
    if (req->aws_sigv4 != NULL && req->userpwd != NULL &&
        (rc = curl_easy_setopt(h, CURLOPT_AWS_SIGV4, req->aws_sigv4)) == CURLE_OK)
        rc = curl_easy_setopt(h, CURLOPT_USERPWD, req->userpwd);
    return rc;
}

static CURLcode configure(bucket_http_client *c, attempt *a) {
    CURL *h = a->h;
    const bucket_http_request *req = a->req;
    CURLcode rc;
    if ((rc = curl_easy_setopt(h, CURLOPT_URL, req->url)) != CURLE_OK ||
        (rc = curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https")) != CURLE_OK ||
        (rc = curl_easy_setopt(h, CURLOPT_HTTPHEADER, req->headers)) != CURLE_OK ||
        (rc = curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, write_body)) != CURLE_OK ||
        (rc = curl_easy_setopt(h, CURLOPT_WRITEDATA, a)) != CURLE_OK ||
        (rc = curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header)) != CURLE_OK ||
        (rc = curl_easy_setopt(h, CURLOPT_HEADERDATA, a)) != CURLE_OK ||
        (rc = set_method(h, req, a)) != CURLE_OK || (rc = set_timeouts(h, &c->o)) != CURLE_OK ||
        (rc = set_tls(h, &c->o)) != CURLE_OK)
        return rc;
    return set_signing(h, req);
}

static bool transport_retryable(CURLcode rc) {
    switch (rc) {
        case CURLE_COULDNT_CONNECT:
        case CURLE_OPERATION_TIMEDOUT:
        case CURLE_SEND_ERROR:
        case CURLE_RECV_ERROR:
        case CURLE_GOT_NOTHING:
        case CURLE_PARTIAL_FILE:
        case CURLE_SSL_CONNECT_ERROR:
        case CURLE_HTTP2:
        case CURLE_HTTP2_STREAM:
        case CURLE_SEND_FAIL_REWIND:
            return true;
        default:
            return false;
    }
}

bool bucket_http_status_retryable(long status) {
    return status == 408 || status == 429 || (status >= 500 && status != 501 && status < 600);
}

static void reset_response(bucket_http_response *resp) {
    resp->status = 0;
    strata_buffer_reset(&resp->error_body);
    resp->has_content_length = false;
    resp->content_length = 0;
    resp->last_modified_ns = 0;
    resp->etag[0] = '\0';
}

/* One attempt. Returns the curl code; *status is the HTTP status (0 if none). */
static CURLcode perform_once(bucket_http_client *c, const bucket_http_request *req,
                             strata_buffer *body, bucket_http_response *resp, bool *oom) {
    attempt a = {.req = req, .body = body, .resp = resp};
    reset_response(resp);
    a.h = take_handle(c);
    if (a.h == NULL) {
        *oom = true;
        return CURLE_OUT_OF_MEMORY;
    }
    CURLcode rc = configure(c, &a);
    if (rc == CURLE_OK)
        rc = curl_easy_perform(a.h);
    curl_easy_getinfo(a.h, CURLINFO_RESPONSE_CODE, &resp->status);
    *oom = a.oom;
    give_handle(c, a.h, rc == CURLE_OK);
    return rc;
}

/* ---- Retries ----------------------------------------------------------------------------------
 */

static void sleep_ns(int64_t ns) {
    struct timespec ts = {(time_t)(ns / STRATA_NS_PER_SEC), (long)(ns % STRATA_NS_PER_SEC)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Equal jitter: uniform in [d/2, d], d = min(max, base * 2^(retry-1)). */
static int64_t backoff_ns(const bucket_http_options *o, int retry) {
    int64_t d = o->backoff_base_ns > 0 ? o->backoff_base_ns : 100 * STRATA_NS_PER_MS;
    for (int i = 1; i < retry && d < o->backoff_max_ns; i++)
        d *= 2;
    if (o->backoff_max_ns > 0 && d > o->backoff_max_ns)
        d = o->backoff_max_ns;
    uint32_t half_ms = (uint32_t)(d / 2 / STRATA_NS_PER_MS);
    return d / 2 + (int64_t)arc4random_uniform(half_ms + 1) * STRATA_NS_PER_MS;
}

static int transport_error(const bucket_http_client *c, const bucket_http_request *req, CURLcode rc,
                           int attempts, strata_error *err) {
    strata_status code =
        rc == CURLE_OPERATION_TIMEDOUT ? STRATA_DEADLINE_EXCEEDED : STRATA_UNAVAILABLE;
    if (rc == CURLE_URL_MALFORMAT || rc == CURLE_UNSUPPORTED_PROTOCOL)
        code = STRATA_INVALID_ARGUMENT;
    return strata_error_set(err, code, "%s: %s \"%.200s\": %s (after %d attempt%s)", c->o.what,
                            req->op, req->key, curl_easy_strerror(rc), attempts,
                            attempts == 1 ? "" : "s");
}

int bucket_http_do(bucket_http_client *c, const bucket_http_request *req, strata_buffer *body,
                   bucket_http_response *resp, strata_error *err) {
    size_t body_start = body != NULL ? body->len : 0;
    CURLcode rc = CURLE_OK;
    int attempt_no = 1;
    for (;; attempt_no++) {
        bool oom = false;
        rc = perform_once(c, req, body, resp, &oom);
        if (oom)
            return strata_error_oom(err);
        bool ok_answer = rc == CURLE_OK && !bucket_http_status_retryable(resp->status);
        bool retry = rc == CURLE_OK || transport_retryable(rc);
        if (ok_answer || !retry || attempt_no >= c->o.max_attempts)
            break;
        if (body != NULL)
            body->len = body_start;
        atomic_fetch_add_explicit(&c->retries, 1, memory_order_relaxed);
        sleep_ns(backoff_ns(&c->o, attempt_no));
    }
    if (rc != CURLE_OK) {
        if (body != NULL)
            body->len = body_start;
        return transport_error(c, req, rc, attempt_no, err);
    }
    if ((resp->status < 200 || resp->status >= 300) && body != NULL)
        body->len = body_start;
    return 0;
}

void bucket_http_response_free(bucket_http_response *r) {
    strata_buffer_free(&r->error_body);
}

/* ---- Escaping ---------------------------------------------------------------------------------
 */

static bool unreserved(unsigned char ch) {
    return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
           ch == '-' || ch == '_' || ch == '.' || ch == '~';
}

int bucket_http_escape(strata_buffer *out, const char *s, size_t n, bool keep_slash) {
    static const char hex[] = "0123456789ABCDEF";
    if (strata_buffer_reserve(out, n * 3 + 1) != 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (unreserved(ch) || (keep_slash && ch == '/')) {
            out->data[out->len++] = ch;
        } else {
            out->data[out->len++] = '%';
            out->data[out->len++] = (uint8_t)hex[ch >> 4];
            out->data[out->len++] = (uint8_t)hex[ch & 15];
        }
    }
    out->data[out->len] = '\0';
    return 0;
}

static int hex_value(char ch) {
    if (ch >= '0' && ch <= '9')
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

int bucket_http_unescape(strata_buffer *out, const char *s, size_t n) {
    if (strata_buffer_reserve(out, n + 1) != 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        int hi = i + 2 < n && s[i] == '%' ? hex_value(s[i + 1]) : -1;
        int lo = hi >= 0 ? hex_value(s[i + 2]) : -1;
        if (lo >= 0) {
            out->data[out->len++] = (uint8_t)(hi * 16 + lo);
            i += 2;
        } else {
            out->data[out->len++] = (uint8_t)s[i];
        }
    }
    out->data[out->len] = '\0';
    return 0;
}

/* ---- XML --------------------------------------------------------------------------------------
 */

bool bucket_xml_next(const char **pos, const char *end, const char *tag, const char **text,
                     size_t *len) {
    size_t tag_len = strlen(tag);
    for (const char *p = *pos; p < end; p++) {
        p = memchr(p, '<', (size_t)(end - p));
        if (p == NULL || (size_t)(end - p) < tag_len + 2)
            return false;
        if (memcmp(p + 1, tag, tag_len) != 0)
            continue;
        const char *after = p + 1 + tag_len;
        if (*after == '/' && after + 1 < end && after[1] == '>') {
            *text = after + 2;
            *len = 0;
            *pos = after + 2;
            return true;
        }
        if (*after != '>')
            continue;
        const char *start = after + 1;
        for (const char *q = start; q < end; q++) {
            q = memchr(q, '<', (size_t)(end - q));
            if (q == NULL || (size_t)(end - q) < tag_len + 3)
                return false;
            if (q[1] == '/' && memcmp(q + 2, tag, tag_len) == 0 && q[2 + tag_len] == '>') {
                *text = start;
                *len = (size_t)(q - start);
                *pos = q + 3 + tag_len;
                return true;
            }
        }
        return false;
    }
    return false;
}

/* Decodes one entity at s (after '&'); returns its length including ';' or 0 if unknown. */
static size_t decode_entity(const char *s, size_t n, uint32_t *cp) {
    static const struct {
        const char *name;
        char ch;
    } named[] = {{"amp;", '&'}, {"lt;", '<'}, {"gt;", '>'}, {"quot;", '"'}, {"apos;", '\''}};
    for (size_t i = 0; i < sizeof named / sizeof named[0]; i++) {
        size_t l = strlen(named[i].name);
        if (n >= l && memcmp(s, named[i].name, l) == 0) {
            *cp = (uint32_t)named[i].ch;
            return l;
        }
    }
    if (n < 3 || s[0] != '#')
        return 0;
    bool hex = s[1] == 'x' || s[1] == 'X';
    uint32_t v = 0;
    size_t i = hex ? 2 : 1;
    for (; i < n && i < 10 && s[i] != ';'; i++) {
        int d = hex ? hex_value(s[i]) : (s[i] >= '0' && s[i] <= '9' ? s[i] - '0' : -1);
        if (d < 0)
            return 0;
        v = v * (hex ? 16 : 10) + (uint32_t)d;
    }
    if (i >= n || s[i] != ';' || v == 0 || v > 0x10FFFF)
        return 0;
    *cp = v;
    return i + 1;
}

static void put_utf8(strata_buffer *out, uint32_t cp) {
    uint8_t *d = out->data + out->len;
    if (cp < 0x80) {
        d[0] = (uint8_t)cp;
        out->len += 1;
    } else if (cp < 0x800) {
        d[0] = (uint8_t)(0xC0 | cp >> 6);
        d[1] = (uint8_t)(0x80 | (cp & 63));
        out->len += 2;
    } else if (cp < 0x10000) {
        d[0] = (uint8_t)(0xE0 | cp >> 12);
        d[1] = (uint8_t)(0x80 | ((cp >> 6) & 63));
        d[2] = (uint8_t)(0x80 | (cp & 63));
        out->len += 3;
    } else {
        d[0] = (uint8_t)(0xF0 | cp >> 18);
        d[1] = (uint8_t)(0x80 | ((cp >> 12) & 63));
        d[2] = (uint8_t)(0x80 | ((cp >> 6) & 63));
        d[3] = (uint8_t)(0x80 | (cp & 63));
        out->len += 4;
    }
}

int bucket_xml_unescape(strata_buffer *out, const char *text, size_t len) {
    /* Decoded text is never longer than the input (an entity is longer than its UTF-8). */
    if (strata_buffer_reserve(out, len + 1) != 0)
        return -1;
    for (size_t i = 0; i < len; i++) {
        uint32_t cp;
        size_t used = text[i] == '&' ? decode_entity(text + i + 1, len - i - 1, &cp) : 0;
        if (used > 0) {
            put_utf8(out, cp);
            i += used;
        } else {
            out->data[out->len++] = (uint8_t)text[i];
        }
    }
    out->data[out->len] = '\0';
    return 0;
}

int bucket_xml_escape(strata_buffer *out, const char *s) {
    for (; *s != '\0'; s++) {
        const char *e = *s == '&'    ? "&amp;"
                        : *s == '<'  ? "&lt;"
                        : *s == '>'  ? "&gt;"
                        : *s == '"'  ? "&quot;"
                        : *s == '\'' ? "&apos;"
                                     : NULL;
        int rc = e != NULL ? strata_buffer_append_str(out, e) : strata_buffer_append_byte(out, *s);
        if (rc != 0)
            return -1;
    }
    return 0;
}

void bucket_xml_find(const strata_buffer *body, const char *tag, char *out, size_t out_len) {
    out[0] = '\0';
    if (body->len == 0)
        return;
    const char *pos = (const char *)body->data;
    const char *text;
    size_t len;
    if (!bucket_xml_next(&pos, pos + body->len, tag, &text, &len))
        return;
    if (len >= out_len)
        len = out_len - 1;
    for (size_t i = 0; i < len; i++) /* keep messages on one line */
        out[i] = text[i] == '\n' || text[i] == '\r' ? ' ' : text[i];
    out[len] = '\0';
}

/* ---- Dates ------------------------------------------------------------------------------------
 */

bool bucket_http_parse_date(const char *text, int64_t *out_ns) {
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    const char *end = strptime(text, "%a, %d %b %Y %H:%M:%S GMT", &tm);
    if (end == NULL || *end != '\0')
        return false;
    time_t t = timegm(&tm);
    if (t == (time_t)-1)
        return false;
    *out_ns = (int64_t)t * STRATA_NS_PER_SEC;
    return true;
}

void bucket_http_format_date(int64_t now_ns, char *out, size_t out_len) {
    time_t t = (time_t)(now_ns / STRATA_NS_PER_SEC);
    struct tm tm;
    gmtime_r(&t, &tm);
    static const char days[7][4] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
    static const char months[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                       "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    snprintf(out, out_len, "%s, %02d %s %04d %02d:%02d:%02d GMT", days[tm.tm_wday], tm.tm_mday,
             months[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
}

/* ---- Crypto -----------------------------------------------------------------------------------
 */

void bucket_sha256_hex(const void *data, size_t len, char out[65]) {
    static const char hex[] = "0123456789abcdef";
    uint8_t md[32];
    unsigned int md_len = 0;
    if (EVP_Digest(data, len, md, &md_len, EVP_sha256(), NULL) != 1 || md_len != 32)
        memset(md, 0, sizeof md); /* cannot happen with the built-in provider; fails signing */
    for (size_t i = 0; i < 32; i++) {
        out[2 * i] = hex[md[i] >> 4];
        out[2 * i + 1] = hex[md[i] & 15];
    }
    out[64] = '\0';
}

int bucket_md5_base64(const void *data, size_t len, char out[25]) {
    uint8_t md[16];
    unsigned int md_len = 0;
    if (EVP_Digest(data, len, md, &md_len, EVP_md5(), NULL) != 1 || md_len != 16)
        return -1;
    return EVP_EncodeBlock((unsigned char *)out, md, 16) == 24 ? 0 : -1;
}

int bucket_hmac_sha256(const void *key, size_t key_len, const void *msg, size_t msg_len,
                       uint8_t mac[32]) {
    unsigned int mac_len = 0;
    if (key_len > INT32_MAX ||
        HMAC(EVP_sha256(), key, (int)key_len, msg, msg_len, mac, &mac_len) == NULL || mac_len != 32)
        return -1;
    return 0;
}

int bucket_base64_encode(strata_buffer *out, const void *data, size_t len) {
    if (len > INT32_MAX / 2 || strata_buffer_reserve(out, (len + 2) / 3 * 4 + 1) != 0)
        return -1;
    int n = EVP_EncodeBlock(out->data + out->len, data, (int)len);
    if (n < 0)
        return -1;
    out->len += (size_t)n;
    out->data[out->len] = '\0';
    return 0;
}

int bucket_base64_decode(strata_buffer *out, const char *text, size_t len) {
    if (len % 4 != 0 || len > INT32_MAX / 2 || strata_buffer_reserve(out, len / 4 * 3 + 1) != 0)
        return -1;
    int n = EVP_DecodeBlock(out->data + out->len, (const unsigned char *)text, (int)len);
    if (n < 0)
        return -1;
    /* EVP_DecodeBlock counts padding as zero bytes. */
    if (len > 0 && text[len - 1] == '=')
        n--;
    if (len > 1 && text[len - 2] == '=')
        n--;
    out->len += (size_t)n;
    out->data[out->len] = '\0';
    return 0;
}
