/*
 * http_builtin.c - the /metrics and /ready routes every service attaches; see http.h.
 */
#include <stdlib.h>

#include "http/http_internal.h"

static void serve_metrics(void *ctx, const http_request *req, http_response *resp) {
    metrics_registry *reg = ctx;
    strata_error err;
    if (metrics_registry_render(reg, http_response_body(resp), &err) != 0) {
        http_response_strata_error(resp, req, &err);
        return;
    }
    http_response_set_content_type(resp, METRICS_CONTENT_TYPE);
}

int http_server_add_metrics(http_server *s, metrics_registry *reg, strata_error *err) {
    if (reg == NULL)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "/metrics needs a registry");
    return http_server_route(s, "GET", "/metrics", HTTP_MATCH_EXACT, serve_metrics, reg, err);
}

typedef struct ready_check {
    http_ready_fn fn;
    void *ctx;
} ready_check;

static void serve_ready(void *ctx, const http_request *req, http_response *resp) {
    (void)req;
    const ready_check *check = ctx;
    char reason[256] = "";
    if (check->fn(check->ctx, reason, sizeof reason)) {
        strata_buffer_append_str(http_response_body(resp), "ready\n");
        return;
    }
    reason[sizeof reason - 1] = '\0';
    http_response_set_status(resp, 503);
    strata_buffer_appendf(http_response_body(resp), "%s\n", reason[0] ? reason : "not ready");
}

int http_server_add_ready(http_server *s, http_ready_fn fn, void *ctx, strata_error *err) {
    if (s == NULL || fn == NULL)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "/ready needs a server and a callback");
    ready_check *check = malloc(sizeof *check);
    if (check == NULL)
        return strata_error_oom(err);
    *check = (ready_check){fn, ctx};
    if (http_server_own(s, check, free, err) != 0) /* frees check on failure */
        return -1;
    /* on the I/O thread: /ready answers even while every handler thread is busy */
    return http_server_route_nonblocking(s, "GET", "/ready", HTTP_MATCH_EXACT, serve_ready, check,
                                         err);
}
