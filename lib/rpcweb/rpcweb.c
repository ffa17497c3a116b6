/*
 * rpcweb.c - see rpcweb.h.
 *
 * Each request becomes one rpcweb_call: the HTTP answer is deferred (the route is nonblocking, so
 * it runs on the I/O thread and must not wait), the message is unwrapped according to the
 * protocol and handed to rpc_server_call_bridged; whichever thread finishes the rpc call writes
 * the HTTP response in the protocol's shape and finishes the deferred answer. A read-write lock
 * orders calls against rpcweb_close: a call holds it shared from its check of `closed` until the
 * rpc server has taken the call (and counted it, so rpc_server_shutdown waits for it).
 *
 * Translated routes (rpcweb_add_translated_route) reuse the same path after their own first
 * step: they run on a handler thread (the translation may inflate and decode a profile), build
 * the method's request message, then defer and hand it over exactly as a Connect call would.
 */
#include "rpcweb/rpcweb.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/base64.h"
#include "common/clock.h"
#include "pbjson/pbjson.h"

#define MAX_SERVICES 32
#define MAX_TRANSLATED_ROUTES 8

typedef enum web_protocol {
    GRPC_WEB,      /* application/grpc-web(+proto) */
    GRPC_WEB_TEXT, /* application/grpc-web-text(+proto) */
    CONNECT_PROTO, /* application/proto */
    CONNECT_JSON,  /* application/json: pbjson both ways */
    PLAIN_HTTP,    /* a translated route: 200 and no body, or the error as HTTP */
} web_protocol;

typedef struct translated_route {
    struct rpcweb *web;
    char *rpc_method;
    rpcweb_translate_fn translate;
    void *ctx;
} translated_route;

struct rpcweb {
    http_server *http;
    rpc_server *rpc;
    pthread_rwlock_t lock;
    bool closed;
    char *prefixes[MAX_SERVICES];
    size_t n_prefixes;
    const ProtobufCServiceDescriptor *const *json_services; /* rpcweb_set_json_services */
    size_t n_json_services;
    translated_route *routes[MAX_TRANSLATED_ROUTES];
    size_t n_routes;
};

typedef struct rpcweb_call {
    http_deferred *deferred;
    const http_request *request;
    web_protocol protocol;
    strata_buffer decoded;                    /* the text or JSON protocol's request, decoded */
    const ProtobufCMessageDescriptor *output; /* CONNECT_JSON: the response's type */
} rpcweb_call;

/* ---- responses ------------------------------------------------------------------------------ */

static const char *const connect_codes[] = {
    "ok",
    "canceled",
    "unknown",
    "invalid_argument",
    "deadline_exceeded",
    "not_found",
    "already_exists",
    "permission_denied",
    "resource_exhausted",
    "failed_precondition",
    "aborted",
    "out_of_range",
    "unimplemented",
    "internal",
    "unavailable",
    "data_loss",
    "unauthenticated",
};

/* Connect's HTTP status for a code (its protocol specification's table). */
static unsigned connect_http_status(strata_status code) {
    static const unsigned statuses[] = {200, 499, 500, 400, 504, 404, 409, 403, 429,
                                        400, 409, 400, 501, 500, 503, 500, 401};
    return (unsigned)code < sizeof statuses / sizeof statuses[0] ? statuses[code] : 500;
}

static int append_json_string(strata_buffer *out, const char *s) {
    int rc = strata_buffer_append_byte(out, '"');
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0' && rc == 0; p++) {
        if (*p == '"' || *p == '\\')
            rc = strata_buffer_appendf(out, "\\%c", *p);
        else if (*p < 0x20)
            rc = strata_buffer_appendf(out, "\\u%04x", *p);
        else
            rc = strata_buffer_append_byte(out, *p);
    }
    return rc != 0 ? -1 : strata_buffer_append_byte(out, '"');
}

/* grpc-message's percent-encoding: bytes outside printable ASCII, and '%'. */
static int append_percent_encoded(strata_buffer *out, const char *s) {
    int rc = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0' && rc == 0; p++)
        rc = *p < 0x20 || *p > 0x7e || *p == '%' ? strata_buffer_appendf(out, "%%%02X", *p)
                                                 : strata_buffer_append_byte(out, *p);
    return rc;
}

static int append_frame(strata_buffer *out, uint8_t flag, const void *data, size_t len) {
    uint8_t head[5] = {flag, (uint8_t)(len >> 24), (uint8_t)(len >> 16), (uint8_t)(len >> 8),
                       (uint8_t)len};
    return strata_buffer_append(out, head, 5) != 0 || strata_buffer_append(out, data, len) != 0 ? -1
                                                                                                : 0;
}

static int grpc_web_body(strata_buffer *out, strata_status code, const char *message,
                         const strata_buffer *response, const char *trailer_key,
                         const char *trailer_value) {
    strata_buffer trailers = STRATA_BUFFER_INIT;
    int rc = strata_buffer_appendf(&trailers, "grpc-status:%d\r\ngrpc-message:", (int)code);
    if (rc == 0)
        rc = append_percent_encoded(&trailers, message != NULL ? message : "");
    if (rc == 0)
        rc = strata_buffer_append_str(&trailers, "\r\n");
    if (rc == 0 && trailer_key != NULL)
        rc = strata_buffer_appendf(&trailers, "%s:%s\r\n", trailer_key, trailer_value);
    if (rc == 0 && code == STRATA_OK)
        rc = append_frame(out, 0, response->data, response->len);
    if (rc == 0)
        rc = append_frame(out, 0x80, trailers.data, trailers.len);
    strata_buffer_free(&trailers);
    return rc;
}

static void answer_grpc_web(rpcweb_call *c, http_response *resp, strata_status code,
                            const char *message, const strata_buffer *response,
                            const char *trailer_key, const char *trailer_value) {
    strata_buffer frames = STRATA_BUFFER_INIT;
    int rc = grpc_web_body(&frames, code, message, response, trailer_key, trailer_value);
    strata_buffer *body = http_response_body(resp);
    if (rc == 0 && c->protocol == GRPC_WEB_TEXT)
        rc = strata_base64_encode(body, frames.data, frames.len);
    else if (rc == 0)
        rc = strata_buffer_append(body, frames.data, frames.len);
    strata_buffer_free(&frames);
    if (rc != 0) {
        http_response_set_status(resp, 500);
        return;
    }
    http_response_set_content_type(resp, c->protocol == GRPC_WEB_TEXT
                                             ? "application/grpc-web-text+proto"
                                             : "application/grpc-web+proto");
}

static void answer_connect(const rpcweb_call *c, http_response *resp, strata_status code,
                           const char *message, const strata_buffer *response,
                           const char *trailer_key, const char *trailer_value) {
    strata_buffer *body = http_response_body(resp);
    if (trailer_key != NULL) {
        char name[96];
        snprintf(name, sizeof name, "trailer-%s", trailer_key);
        (void)http_response_add_header(resp, name, trailer_value);
    }
    strata_error err;
    if (code == STRATA_OK && c->protocol == CONNECT_JSON) {
        if (pbjson_encode(c->output, response->data, response->len, body, &err) == 0) {
            http_response_set_content_type(resp, "application/json");
            return;
        }
        strata_buffer_reset(body);
        code = err.code;
        message = err.message;
    } else if (code == STRATA_OK) {
        http_response_set_content_type(resp, "application/proto");
        if (strata_buffer_append(body, response->data, response->len) != 0)
            http_response_set_status(resp, 500);
        return;
    }
    http_response_set_status(resp, connect_http_status(code));
    http_response_set_content_type(resp, "application/json");
    const char *name = (unsigned)code < sizeof connect_codes / sizeof connect_codes[0]
                           ? connect_codes[code]
                           : "unknown";
    if (strata_buffer_appendf(body, "{\"code\":\"%s\",\"message\":", name) != 0 ||
        append_json_string(body, message != NULL ? message : "") != 0 ||
        strata_buffer_append_byte(body, '}') != 0)
        http_response_set_status(resp, 500);
}

/* A translated route's answer: 200 with no body, or the HTTP status for the code and the message
 * (text or JSON as the request's Accept asks). */
static void answer_plain(const rpcweb_call *c, http_response *resp, strata_status code,
                         const char *message) {
    if (code == STRATA_OK)
        return;
    strata_error err;
    strata_error_set(&err, code, "%s", message != NULL ? message : "");
    http_response_strata_error(resp, c->request, &err);
}

static void call_free(rpcweb_call *c) {
    strata_buffer_free(&c->decoded);
    free(c);
}

/* rpc_bridge.finish: the rpc call's outcome, in the protocol's shape. */
static void finish_call(void *ctx, strata_status code, const char *message, strata_buffer *response,
                        const char *trailer_key, const char *trailer_value) {
    rpcweb_call *c = ctx;
    http_response *resp = http_deferred_response(c->deferred);
    if (c->protocol == PLAIN_HTTP)
        answer_plain(c, resp, code, message);
    else if (c->protocol == CONNECT_PROTO || c->protocol == CONNECT_JSON)
        answer_connect(c, resp, code, message, response, trailer_key, trailer_value);
    else
        answer_grpc_web(c, resp, code, message, response, trailer_key, trailer_value);
    http_deferred *d = c->deferred;
    call_free(c);
    http_deferred_finish(d);
}

/* An error before the rpc server had the call. */
static void fail_call(rpcweb_call *c, strata_status code, const char *message) {
    strata_buffer none = STRATA_BUFFER_INIT;
    finish_call(c, code, message, &none, NULL, NULL);
}

/* ---- requests ------------------------------------------------------------------------------- */

static bool call_metadata(void *ctx, const char *key, const char **value, size_t *value_len) {
    const rpcweb_call *c = ctx;
    const char *v = http_request_header(c->request, key);
    if (v == NULL)
        return false;
    *value = v;
    *value_len = strlen(v);
    return true;
}

/* The protocol a Content-Type names; false for none of ours. *json: Connect's JSON codec. */
static bool protocol_of(const char *type, web_protocol *out, bool *json) {
    *json = false;
    if (type == NULL)
        return false;
    size_t len = strcspn(type, ";");
    while (len > 0 && (type[len - 1] == ' ' || type[len - 1] == '\t'))
        len--;
#define IS(s) (len == strlen(s) && strncasecmp(type, s, len) == 0)
    if (IS("application/grpc-web") || IS("application/grpc-web+proto"))
        *out = GRPC_WEB;
    else if (IS("application/grpc-web-text") || IS("application/grpc-web-text+proto"))
        *out = GRPC_WEB_TEXT;
    else if (IS("application/proto"))
        *out = CONNECT_PROTO;
    else if (IS("application/json"))
        *json = true, *out = CONNECT_JSON;
    else
        return false;
#undef IS
    return true;
}

/* The deadline grpc-timeout ("<1-8 digits><H|M|S|m|u|n>") or connect-timeout-ms sets; INT64_MAX
 * for none; -1 when malformed. */
static int64_t deadline_of(const http_request *req, web_protocol protocol) {
    bool connect = protocol == CONNECT_PROTO || protocol == CONNECT_JSON;
    const char *t = http_request_header(req, connect ? "connect-timeout-ms" : "grpc-timeout");
    if (t == NULL)
        return INT64_MAX;
    size_t digits = strspn(t, "0123456789");
    if (digits == 0 || digits > (connect ? 10 : 8))
        return -1;
    int64_t n = strtoll(t, NULL, 10), unit;
    const char *u = t + digits;
    if (connect)
        unit = u[0] == '\0' ? STRATA_NS_PER_MS : -1;
    else if (u[0] == '\0' || u[1] != '\0')
        unit = -1;
    else
        switch (u[0]) {
            case 'H':
                unit = 3600 * STRATA_NS_PER_SEC;
                break;
            case 'M':
                unit = 60 * STRATA_NS_PER_SEC;
                break;
            case 'S':
                unit = STRATA_NS_PER_SEC;
                break;
            case 'm':
                unit = STRATA_NS_PER_MS;
                break;
            case 'u':
                unit = 1000;
                break;
            case 'n':
                unit = 1;
                break;
            default:
                unit = -1;
        }
    if (unit < 0)
        return -1;
    if (n > (INT64_MAX / 2) / unit)
        return INT64_MAX;
    return strata_monotonic_ns() + n * unit;
}

/* The message of a gRPC-Web request body: exactly one uncompressed frame. */
static int unwrap_frame(const uint8_t *body, size_t len, const uint8_t **msg, size_t *msg_len,
                        strata_status *code, const char **why) {
    *code = STRATA_INVALID_ARGUMENT;
    if (len < 5) {
        *why = "gRPC-Web request body shorter than a frame header";
        return -1;
    }
    size_t n = (size_t)body[1] << 24 | (size_t)body[2] << 16 | (size_t)body[3] << 8 | body[4];
    if (body[0] == 1) {
        *code = STRATA_UNIMPLEMENTED;
        *why = "compressed gRPC-Web messages are not supported (no grpc-encoding is accepted)";
        return -1;
    }
    if (body[0] != 0 || n != len - 5) {
        *why = "gRPC-Web request body is not one message frame";
        return -1;
    }
    *msg = body + 5;
    *msg_len = n;
    return 0;
}

/* The method descriptor of path "/package.Service/Method" among the JSON services, or NULL. */
static const ProtobufCMethodDescriptor *json_method(const rpcweb *w, const char *path) {
    const char *slash = strchr(path + 1, '/');
    if (path[0] != '/' || slash == NULL)
        return NULL;
    size_t service_len = (size_t)(slash - path - 1);
    for (size_t i = 0; i < w->n_json_services; i++) {
        const ProtobufCServiceDescriptor *s = w->json_services[i];
        if (strlen(s->name) != service_len || strncmp(s->name, path + 1, service_len) != 0)
            continue;
        for (unsigned k = 0; k < s->n_methods; k++)
            if (strcmp(s->methods[k].name, slash + 1) == 0)
                return &s->methods[k];
    }
    return NULL;
}

/* Hands the call to the rpc server (or answers it UNAVAILABLE once closed); msg must stay valid
 * until the call finishes. */
static void hand_over(rpcweb *w, rpcweb_call *c, const char *path, const uint8_t *msg,
                      size_t msg_len, int64_t deadline) {
    rpc_bridge bridge = {.finish = finish_call,
                         .metadata = call_metadata,
                         .ctx = c,
                         .peer = http_request_peer(c->request),
                         .deadline_ns = deadline};
    strata_error err;
    pthread_rwlock_rdlock(&w->lock);
    int rc = w->closed ? 1 : rpc_server_call_bridged(w->rpc, path, msg, msg_len, &bridge, &err);
    pthread_rwlock_unlock(&w->lock);
    if (rc == 1)
        fail_call(c, STRATA_UNAVAILABLE, "server is shutting down");
    else if (rc != 0)
        fail_call(c, err.code, err.message);
}

static void handle(void *ctx, const http_request *req, http_response *resp) {
    rpcweb *w = ctx;
    web_protocol protocol = GRPC_WEB;
    bool json = false;
    if (strcmp(http_request_method(req), "POST") != 0) {
        http_response_add_header(resp, "Allow", "POST");
        http_response_error(resp, req, 405, "gRPC-Web and Connect calls are POST requests");
        return;
    }
    if (!protocol_of(http_request_header(req, "content-type"), &protocol, &json)) {
        http_response_error(resp, req, 415,
                            "unsupported content type: application/grpc-web(+proto), "
                            "application/grpc-web-text(+proto), application/proto or "
                            "application/json");
        return;
    }
    rpcweb_call *c = calloc(1, sizeof *c);
    if (c == NULL) {
        http_response_error(resp, req, 500, "out of memory");
        return;
    }
    c->protocol = protocol;
    c->deferred = http_response_defer(resp);
    c->request = http_deferred_request(c->deferred);
    size_t len = 0;
    const uint8_t *body = http_request_body(req, &len);
    const uint8_t *msg = body;
    size_t msg_len = len;
    strata_status code = STRATA_OK;
    const char *why = NULL;
    strata_error err;
    if (protocol == GRPC_WEB_TEXT) {
        if (strata_base64_decode((const char *)body, len, &c->decoded, &err) != 0) {
            fail_call(c, STRATA_INVALID_ARGUMENT, "gRPC-Web text request body is not base64");
            return;
        }
        body = c->decoded.data;
        len = c->decoded.len;
    }
    if (protocol == CONNECT_JSON) {
        const ProtobufCMethodDescriptor *m = json_method(w, http_request_path(req));
        if (m == NULL) {
            fail_call(c, STRATA_UNIMPLEMENTED,
                      "no JSON codec for this method: use application/proto");
            return;
        }
        c->output = m->output;
        if (pbjson_decode(m->input, (const char *)body, len, &c->decoded, &err) != 0) {
            fail_call(c, err.code, err.message);
            return;
        }
        msg = c->decoded.data;
        msg_len = c->decoded.len;
    }
    if (protocol != CONNECT_PROTO && protocol != CONNECT_JSON &&
        unwrap_frame(body, len, &msg, &msg_len, &code, &why) != 0) {
        fail_call(c, code, why);
        return;
    }
    int64_t deadline = deadline_of(req, protocol);
    if (deadline < 0) {
        fail_call(c, STRATA_INVALID_ARGUMENT, "malformed timeout header");
        return;
    }
    hand_over(w, c, http_request_path(req), msg, msg_len, deadline);
}

/* ---- translated routes ---------------------------------------------------------------------- */

static void handle_translated(void *ctx, const http_request *req, http_response *resp) {
    translated_route *r = ctx;
    rpcweb_call *c = calloc(1, sizeof *c);
    if (c == NULL) {
        http_response_error(resp, req, 500, "out of memory");
        return;
    }
    c->protocol = PLAIN_HTTP;
    strata_error err;
    strata_error_clear(&err);
    if (r->translate(r->ctx, req, &c->decoded, &err) != 0) {
        http_response_strata_error(resp, req, &err);
        call_free(c);
        return;
    }
    c->deferred = http_response_defer(resp);
    c->request = http_deferred_request(c->deferred);
    hand_over(r->web, c, r->rpc_method, c->decoded.data, c->decoded.len, INT64_MAX);
}

int rpcweb_add_translated_route(rpcweb *w, const char *http_method, const char *path,
                                const char *rpc_method, rpcweb_translate_fn translate, void *ctx,
                                strata_error *err) {
    if (w->n_routes == MAX_TRANSLATED_ROUTES)
        return strata_error_set(err, STRATA_RESOURCE_EXHAUSTED, "more than %d translated routes",
                                MAX_TRANSLATED_ROUTES);
    translated_route *r = calloc(1, sizeof *r);
    if (r == NULL || (r->rpc_method = strdup(rpc_method)) == NULL) {
        free(r);
        return strata_error_oom(err);
    }
    r->web = w;
    r->translate = translate;
    r->ctx = ctx;
    w->routes[w->n_routes++] = r;
    return http_server_route(w->http, http_method, path, HTTP_MATCH_EXACT, handle_translated, r,
                             err);
}

/* ---- lifecycle ------------------------------------------------------------------------------ */

int rpcweb_new(http_server *http, rpc_server *rpc, rpcweb **out, strata_error *err) {
    rpcweb *w = calloc(1, sizeof *w);
    if (w == NULL)
        return strata_error_oom(err);
    w->http = http;
    w->rpc = rpc;
    if (pthread_rwlock_init(&w->lock, NULL) != 0) {
        free(w);
        return strata_error_set(err, STRATA_INTERNAL, "cannot initialise a lock");
    }
    /* One prefix route per service: "/package.Service/" of each method path. */
    for (size_t i = 0; i < rpc_server_method_count(rpc); i++) {
        rpc_method_stats st;
        if (rpc_server_method_stats(rpc, i, &st) != 0)
            continue;
        const char *slash = strchr(st.method + 1, '/');
        if (slash == NULL)
            continue;
        size_t len = (size_t)(slash - st.method) + 1;
        bool seen = false;
        for (size_t p = 0; p < w->n_prefixes && !seen; p++)
            seen = strlen(w->prefixes[p]) == len && strncmp(w->prefixes[p], st.method, len) == 0;
        if (seen)
            continue;
        if (w->n_prefixes == MAX_SERVICES) {
            rpcweb_free(w);
            return strata_error_set(err, STRATA_RESOURCE_EXHAUSTED, "more than %d services",
                                    MAX_SERVICES);
        }
        if ((w->prefixes[w->n_prefixes] = strndup(st.method, len)) == NULL) {
            rpcweb_free(w);
            return strata_error_oom(err);
        }
        if (http_server_route_nonblocking(http, NULL, w->prefixes[w->n_prefixes++],
                                          HTTP_MATCH_PREFIX, handle, w, err) != 0) {
            rpcweb_free(w);
            return -1;
        }
    }
    *out = w;
    return 0;
}

void rpcweb_set_json_services(rpcweb *w, const ProtobufCServiceDescriptor *const *services,
                              size_t n) {
    w->json_services = services;
    w->n_json_services = n;
}

void rpcweb_close(rpcweb *w) {
    if (w == NULL)
        return;
    pthread_rwlock_wrlock(&w->lock);
    w->closed = true;
    pthread_rwlock_unlock(&w->lock);
}

void rpcweb_free(rpcweb *w) {
    if (w == NULL)
        return;
    for (size_t i = 0; i < w->n_prefixes; i++)
        free(w->prefixes[i]);
    for (size_t i = 0; i < w->n_routes; i++) {
        free(w->routes[i]->rpc_method);
        free(w->routes[i]);
    }
    pthread_rwlock_destroy(&w->lock);
    free(w);
}
