/*
 * query_http.c - the query API as JSON over HTTP, for the web UI and for curl. The same operations
 * as the gRPC QueryService, with URL parameters (docs/http-api.md):
 *
 *   GET /api/v1/profile_types             ?start&end
 *   GET /api/v1/labels                    ?match (repeatable)&profile_type&start&end
 *   GET /api/v1/labels/NAME/values        same parameters
 *   GET /api/v1/query_range               ?query&start&end&step&sum_by (repeatable)
 *   GET /api/v1/query                     ?query&mode=merge|single&start&end|time
 *                                         &report=flamegraph|table|top|pprof
 *                                         &node_trim_threshold&max_nodes
 *   GET /api/v1/diff                      ?query_a&start_a&end_a|time_a&mode_a and the _b twins,
 *                                         &absolute=true|false&report=...
 *
 * Times are Unix milliseconds, RFC 3339 ("2026-12-02T12:00:00Z"), "now" or "now-<duration>"
 * ("now-1h"); durations are Prometheus style ("15s", "1m") or plain seconds. The tenant is the
 * X-Scope-OrgID header (anonymous when absent; a value that breaks common/tenant.h's rule is a 400
 * before anything is read). Errors are JSON {"code","message"} with the HTTP status
 * matching the gRPC code.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/tenant.h"
#include "config/config.h"
#include "json/json.h"
#include "labels/labels.h"
#include "querier_internal.h"

#define API_PREFIX "/api/v1/"

/* ---- parameters --------------------------------------------------------------------------- */

static int time_param(const http_request *req, const char *name, int64_t fallback, int64_t now_ns,
                      int64_t *out, strata_error *err) {
    const char *v = http_request_query(req, name);
    if (v == NULL || v[0] == '\0') {
        *out = fallback;
        return 0;
    }
    return config_parse_time(name, v, now_ns, out, err);
}

static int duration_param(const http_request *req, const char *name, int64_t fallback, int64_t *out,
                          strata_error *err) {
    const char *v = http_request_query(req, name);
    if (v == NULL || v[0] == '\0') {
        *out = fallback;
        return 0;
    }
    double seconds;
    if (config_parse_duration(v, out))
        return 0;
    if (config_parse_double(v, &seconds) && seconds > 0) {
        *out = (int64_t)(seconds * 1e9);
        return 0;
    }
    return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                            "%s: \"%s\" is not a duration like 15s or a number of seconds", name,
                            v);
}

/* The request's tenant by the one rule (common/tenant.h): X-Scope-OrgID, anonymous when absent,
 * INVALID_ARGUMENT (400) when the value breaks the rule. Resolved before anything is read. */
static int tenant_of(const http_request *req, strata_tenant *out, strata_error *err) {
    const char *t = http_request_header(req, STRATA_TENANT_HTTP_HEADER);
    return strata_tenant_from_header(t, t != NULL ? strlen(t) : 0, out, err);
}

static void send_json(http_response *resp, strata_buffer *body) {
    http_response_set_status(resp, 200);
    http_response_set_content_type(resp, "application/json");
    strata_buffer *out = http_response_body(resp);
    strata_buffer_append(out, body->data, body->len);
}

/* Every API error is JSON {"code": "INVALID_ARGUMENT", "message": "..."} with the HTTP status that
 * matches the gRPC code (400, 404, 429, 500, 501, 503...). */
static void send_error(querier *q, http_response *resp, const http_request *req, const char *op,
                       int64_t start, strata_error *err) {
    (void)req;
    if (err->code == STRATA_OK)
        err->code = STRATA_UNKNOWN;
    querier_observe(q, op, err->code, start);
    strata_buffer *body = http_response_body(resp);
    strata_buffer_reset(body);
    json_writer w;
    json_writer_init(&w, body);
    json_begin_object(&w);
    json_key(&w, "code");
    json_string(&w, strata_status_name(err->code));
    json_key(&w, "message");
    json_string(&w, err->message);
    json_end_object(&w);
    json_writer_finish(&w);
    http_response_set_status(resp, http_status_from_strata(err->code));
    http_response_set_content_type(resp, "application/json");
}

/* ---- profile types, labels, values -------------------------------------------------------- */

static void write_profile_type(json_writer *w, const profile_type *t) {
    strata_buffer id = STRATA_BUFFER_INIT;
    profile_type_format(t, &id);
    json_begin_object(w);
    json_key(w, "id");
    json_string_len(w, (const char *)id.data, id.len);
    json_key(w, "name");
    json_string(w, t->name);
    json_key(w, "sample_type");
    json_string(w, t->sample_type);
    json_key(w, "sample_unit");
    json_string(w, t->sample_unit);
    json_key(w, "period_type");
    json_string(w, t->period_type);
    json_key(w, "period_unit");
    json_string(w, t->period_unit);
    json_key(w, "delta");
    json_bool(w, t->delta);
    json_end_object(w);
    strata_buffer_free(&id);
}

static void http_profile_types(void *ctx, const http_request *req, http_response *resp) {
    querier *q = ctx;
    int64_t start = strata_monotonic_ns(), now = strata_now_ns();
    strata_error err;
    strata_error_clear(&err);
    int64_t from, to;
    profile_type *types = NULL;
    size_t n = 0;
    strata_tenant tenant;
    if (tenant_of(req, &tenant, &err) != 0 ||
        time_param(req, "start", INT64_MIN, now, &from, &err) != 0 ||
        time_param(req, "end", INT64_MAX, now, &to, &err) != 0 ||
        query_profile_types(q->engine, tenant.name, from, to, &types, &n, &err) != 0) {
        send_error(q, resp, req, "profile_types", start, &err);
        return;
    }
    strata_buffer body = STRATA_BUFFER_INIT;
    json_writer w;
    json_writer_init(&w, &body);
    json_begin_object(&w);
    json_key(&w, "types");
    json_begin_array(&w);
    for (size_t i = 0; i < n; i++)
        write_profile_type(&w, &types[i]);
    json_end_array(&w);
    json_end_object(&w);
    query_profile_types_free(types, n);
    if (json_writer_finish(&w) != 0) {
        strata_error_oom(&err);
        send_error(q, resp, req, "profile_types", start, &err);
    } else {
        send_json(resp, &body);
        querier_observe(q, "profile_types", STRATA_OK, start);
    }
    strata_buffer_free(&body);
}

/* Labels (name NULL) or values of name. */
static void answer_labels(querier *q, const http_request *req, http_response *resp,
                          const char *name) {
    const char *op = name == NULL ? "labels" : "values";
    int64_t start = strata_monotonic_ns(), now = strata_now_ns();
    strata_error err;
    strata_error_clear(&err);
    const char *matches[STRATA_SELECTOR_MAX_MATCHERS];
    size_t n_match = http_request_query_all(req, "match", matches, STRATA_SELECTOR_MAX_MATCHERS);
    selector sels[STRATA_SELECTOR_MAX_MATCHERS];
    size_t n_sels = 0;
    profile_type type;
    memset(&type, 0, sizeof type);
    const char *type_text = http_request_query(req, "profile_type");
    bool has_type = type_text != NULL && type_text[0] != '\0';
    int64_t from, to;
    char **out = NULL;
    size_t n = 0;
    strata_tenant tenant;
    int rc = tenant_of(req, &tenant, &err);
    if (rc == 0)
        rc = time_param(req, "start", INT64_MIN, now, &from, &err);
    if (rc == 0)
        rc = time_param(req, "end", INT64_MAX, now, &to, &err);
    if (rc == 0 && has_type && profile_type_parse(type_text, strlen(type_text), &type, &err) != 0)
        rc = strata_error_wrap(&err, "profile_type");
    for (size_t i = 0; rc == 0 && i < n_match; i++, n_sels++)
        if (selector_parse(matches[i], &sels[i], &err) != 0)
            rc = strata_error_wrap(&err, "match");
    if (rc == 0)
        rc = query_labels(q->engine, tenant.name, name, sels, n_sels, has_type ? &type : NULL, from,
                          to, &out, &n, &err);
    for (size_t i = 0; i < n_sels; i++)
        selector_free(&sels[i]);
    profile_type_free(&type);
    if (rc != 0) {
        send_error(q, resp, req, op, start, &err);
        return;
    }
    strata_buffer body = STRATA_BUFFER_INIT;
    json_writer w;
    json_writer_init(&w, &body);
    json_begin_object(&w);
    json_key(&w, name == NULL ? "label_names" : "label_values");
    json_begin_array(&w);
    for (size_t i = 0; i < n; i++)
        json_string(&w, out[i]);
    json_end_array(&w);
    json_end_object(&w);
    query_strings_free(out, n);
    if (json_writer_finish(&w) == 0)
        send_json(resp, &body);
    else
        http_response_error(resp, req, 500, "out of memory");
    strata_buffer_free(&body);
    querier_observe(q, op, STRATA_OK, start);
}

static void http_labels(void *ctx, const http_request *req, http_response *resp) {
    querier *q = ctx;
    const char *rest = http_request_path_rest(req); /* after /api/v1/labels */
    if (rest == NULL || rest[0] == '\0' || strcmp(rest, "/") == 0) {
        answer_labels(q, req, resp, NULL);
        return;
    }
    /* /NAME/values */
    const char *p = rest[0] == '/' ? rest + 1 : rest;
    const char *slash = strchr(p, '/');
    char name[256];
    if (slash == NULL || strcmp(slash, "/values") != 0 || (size_t)(slash - p) >= sizeof name) {
        strata_error err;
        strata_error_set(&err, STRATA_NOT_FOUND,
                         "want /api/v1/labels or /api/v1/labels/NAME/values");
        send_error(q, resp, req, "values", strata_monotonic_ns(), &err);
        return;
    }
    memcpy(name, p, (size_t)(slash - p));
    name[slash - p] = '\0';
    if (!label_name_is_valid(name, strlen(name))) {
        strata_error err;
        strata_error_set(&err, STRATA_INVALID_ARGUMENT, "\"%s\" is not a valid label name", name);
        send_error(q, resp, req, "values", strata_monotonic_ns(), &err);
        return;
    }
    answer_labels(q, req, resp, name);
}

/* ---- query_range -------------------------------------------------------------------------- */

static void write_labels_object(json_writer *w, const label_set *labels) {
    json_begin_object(w);
    for (size_t i = 0; i < labels->count; i++) {
        json_key(w, labels->labels[i].name);
        json_string(w, labels->labels[i].value);
    }
    json_end_object(w);
}

/* "warnings":[...] when the answer left something out (a partial answer) or folded duplicates. */
static void write_warnings(json_writer *w, const char *warnings) {
    if (warnings == NULL || warnings[0] == '\0')
        return;
    json_key(w, "warnings");
    json_begin_array(w);
    json_string(w, warnings);
    json_end_array(w);
}

static void write_range_json(json_writer *w, const range_series *series, size_t n,
                             const char *warnings) {
    json_begin_object(w);
    write_warnings(w, warnings);
    json_key(w, "series");
    json_begin_array(w);
    for (size_t i = 0; i < n; i++) {
        const range_series *s = &series[i];
        json_begin_object(w);
        json_key(w, "labels");
        write_labels_object(w, &s->labels);
        json_key(w, "sample_type");
        json_begin_object(w);
        json_key(w, "type");
        json_string(w, s->sample_type);
        json_key(w, "unit");
        json_string(w, s->sample_unit);
        json_end_object(w);
        json_key(w, "period_type");
        json_begin_object(w);
        json_key(w, "type");
        json_string(w, s->period_type);
        json_key(w, "unit");
        json_string(w, s->period_unit);
        json_end_object(w);
        json_key(w, "samples");
        json_begin_array(w);
        for (size_t k = 0; k < s->n_points; k++) {
            const range_point *pt = &s->points[k];
            json_begin_object(w);
            json_key(w, "timestamp");
            json_int(w, pt->time_ns / STRATA_NS_PER_MS);
            json_key(w, "value");
            json_int(w, pt->value);
            json_key(w, "value_per_second");
            json_double(w, pt->value_per_second);
            json_key(w, "duration");
            json_int(w, pt->duration_ns);
            json_key(w, "count");
            json_int(w, pt->count);
            json_end_object(w);
        }
        json_end_array(w);
        json_end_object(w);
    }
    json_end_array(w);
    json_end_object(w);
}

/* diff is unused: the signature is answer_fn's (below). */
static void answer_query_range(querier *q, const http_request *req, http_response *resp,
                               bool diff) {
    (void)diff;
    int64_t start = strata_monotonic_ns(), now = strata_now_ns();
    strata_error err;
    strata_error_clear(&err);
    const char *query = http_request_query(req, "query");
    const char *sum_by[32];
    size_t n_sum_by = http_request_query_all(req, "sum_by", sum_by, 32);
    int64_t from, to, step;
    uint64_t limit = 0;
    const char *limit_text = http_request_query(req, "limit");
    selector sel;
    range_series *series = NULL;
    size_t n = 0;
    strata_tenant tenant;
    if (tenant_of(req, &tenant, &err) != 0) {
        send_error(q, resp, req, "query_range", start, &err);
        return;
    }
    if (limit_text != NULL && !config_parse_uint64(limit_text, &limit)) {
        strata_error_set(&err, STRATA_INVALID_ARGUMENT, "limit: want a number of points");
        send_error(q, resp, req, "query_range", start, &err);
        return;
    }
    if (query == NULL) {
        strata_error_set(&err, STRATA_INVALID_ARGUMENT, "query is required");
        send_error(q, resp, req, "query_range", start, &err);
        return;
    }
    if (time_param(req, "start", now - 3600 * STRATA_NS_PER_SEC, now, &from, &err) != 0 ||
        time_param(req, "end", now, now, &to, &err) != 0 ||
        duration_param(req, "step", 0, &step, &err) != 0) {
        send_error(q, resp, req, "query_range", start, &err);
        return;
    }
    step = querier_range_step(from, to, step, limit);
    if (selector_parse(query, &sel, &err) != 0) {
        strata_error_wrap(&err, "invalid query");
        send_error(q, resp, req, "query_range", start, &err);
        return;
    }
    query_stats stats = {0};
    int rc = query_range(q->engine, tenant.name, &sel, from, to, step, sum_by, n_sum_by, &series,
                         &n, &stats, &err);
    selector_free(&sel);
    if (rc != 0) {
        send_error(q, resp, req, "query_range", start, &err);
        return;
    }
    strata_buffer body = STRATA_BUFFER_INIT;
    json_writer w;
    json_writer_init(&w, &body);
    char warnings[1024];
    querier_warnings(q, &stats, NULL, warnings, sizeof warnings);
    write_range_json(&w, series, n, warnings);
    query_range_free(series, n);
    if (json_writer_finish(&w) == 0)
        send_json(resp, &body);
    else
        http_response_error(resp, req, 500, "out of memory");
    strata_buffer_free(&body);
    querier_observe(q, "query_range", STRATA_OK, start);
}

/* ---- query and diff ----------------------------------------------------------------------- */

/* Reads one selection with parameter names suffixed by `suffix` ("" or "_a" / "_b"). */
static int selection_param(const http_request *req, const char *suffix, int64_t now,
                           profile_selection *s, strata_error *err) {
    char name[32];
    snprintf(name, sizeof name, "query%s", suffix);
    s->query = http_request_query(req, name);
    if (s->query == NULL)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "%s is required", name);
    snprintf(name, sizeof name, "mode%s", suffix);
    const char *mode = http_request_query(req, name);
    s->mode = mode != NULL && strcmp(mode, "single") == 0 ? SELECTION_SINGLE : SELECTION_MERGE;
    if (mode != NULL && strcmp(mode, "single") != 0 && strcmp(mode, "merge") != 0)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "%s: \"%.64s\" is neither merge nor single", name, mode);
    if (s->mode == SELECTION_SINGLE) {
        snprintf(name, sizeof name, "time%s", suffix);
        if (http_request_query(req, name) == NULL)
            return strata_error_set(err, STRATA_INVALID_ARGUMENT, "%s is required", name);
        return time_param(req, name, now, now, &s->time_ns, err);
    }
    snprintf(name, sizeof name, "start%s", suffix);
    if (time_param(req, name, now - 3600 * STRATA_NS_PER_SEC, now, &s->start_ns, err) != 0)
        return -1;
    snprintf(name, sizeof name, "end%s", suffix);
    return time_param(req, name, now, now, &s->end_ns, err);
}

typedef enum report_kind {
    REPORT_FLAMEGRAPH,
    REPORT_TABLE,
    REPORT_TOP,
    REPORT_PPROF,
    REPORT_BOTH
} report_kind;

static int report_param(const http_request *req, report_kind *out, strata_error *err) {
    const char *r = http_request_query(req, "report");
    if (r == NULL || strcmp(r, "flamegraph") == 0)
        *out = REPORT_FLAMEGRAPH;
    else if (strcmp(r, "table") == 0)
        *out = REPORT_TABLE;
    else if (strcmp(r, "both") == 0)
        *out = REPORT_BOTH;
    else if (strcmp(r, "top") == 0)
        *out = REPORT_TOP;
    else if (strcmp(r, "pprof") == 0)
        *out = REPORT_PPROF;
    else
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "report: \"%.64s\" is not flamegraph, table, both, top or pprof",
                                r);
    return 0;
}

static int write_tree_json(const query_tree_result *tr, const calltree_report_options *opts,
                           report_kind kind, const char *warnings, strata_buffer *body,
                           strata_error *err) {
    json_writer w;
    json_writer_init(&w, body);
    json_begin_object(&w);
    write_warnings(&w, warnings);
    json_key(&w, "total");
    json_int(&w, opts->total);
    json_key(&w, "filtered");
    json_int(&w, opts->filtered);
    json_key(&w, "unit");
    json_string(&w, opts->unit != NULL ? opts->unit : "");
    json_key(&w, "profiles");
    json_uint(&w, tr->main.profiles);
    json_key(&w, "diff");
    json_bool(&w, calltree_is_diff(tr->tree));
    if (calltree_is_diff(tr->tree)) {
        json_key(&w, "total_base");
        json_int(&w, calltree_node_get(tr->tree, CALLTREE_ROOT).total_base);
    }
    int rc = 0;
    if (kind == REPORT_FLAMEGRAPH || kind == REPORT_BOTH) {
        json_key(&w, "flamegraph");
        rc = calltree_write_flamebearer_json(tr->tree, opts, &w, err);
    }
    if (rc == 0 && (kind == REPORT_TABLE || kind == REPORT_TOP || kind == REPORT_BOTH)) {
        json_key(&w, "table");
        rc = calltree_write_table_json(tr->tree, opts, &w, err);
    }
    json_end_object(&w);
    if (rc == 0 && json_writer_finish(&w) != 0)
        rc = strata_error_oom(err);
    return rc;
}

static int send_pprof(const query_tree_result *tr, const calltree_report_options *opts,
                      http_response *resp, strata_error *err) {
    strata_buffer packed = STRATA_BUFFER_INIT;
    int rc = calltree_encode_query_response(
        tr->tree, PARCA__QUERY__V1ALPHA1__QUERY_REQUEST__REPORT_TYPE__REPORT_TYPE_PPROF, opts,
        &packed, err);
    Parca__Query__V1alpha1__QueryResponse *r = NULL;
    if (rc == 0 &&
        (r = parca__query__v1alpha1__query_response__unpack(NULL, packed.len, packed.data)) == NULL)
        rc = strata_error_set(err, STRATA_INTERNAL, "cannot re-read the pprof report");
    if (rc == 0) {
        http_response_set_status(resp, 200);
        http_response_set_content_type(resp, "application/octet-stream");
        http_response_add_header(resp, "Content-Disposition",
                                 "attachment; filename=\"profile.pb.gz\"");
        rc = strata_buffer_append(http_response_body(resp), r->pprof.data, r->pprof.len) == 0
                 ? 0
                 : strata_error_oom(err);
    }
    if (r != NULL)
        parca__query__v1alpha1__query_response__free_unpacked(r, NULL);
    strata_buffer_free(&packed);
    return rc;
}

static void answer_tree(querier *q, const http_request *req, http_response *resp, bool diff) {
    const char *op = diff ? "diff" : "query";
    int64_t start = strata_monotonic_ns(), now = strata_now_ns();
    strata_error err;
    strata_error_clear(&err);
    profile_selection a, b;
    report_kind kind = REPORT_FLAMEGRAPH;
    query_tree_result tr;
    memset(&tr, 0, sizeof tr);
    double trim = 0;
    const char *trim_text = http_request_query(req, "node_trim_threshold");
    const char *abs_text = http_request_query(req, "absolute");
    bool absolute = abs_text != NULL && strcmp(abs_text, "true") == 0;
    strata_tenant tenant;
    int rc = tenant_of(req, &tenant, &err);
    if (rc == 0)
        rc = report_param(req, &kind, &err);
    if (rc == 0 && trim_text != NULL && (!config_parse_double(trim_text, &trim) || trim < 0))
        rc = strata_error_set(&err, STRATA_INVALID_ARGUMENT,
                              "node_trim_threshold: want a percentage >= 0");
    if (rc == 0 && diff)
        rc = selection_param(req, "_a", now, &a, &err);
    if (rc == 0)
        rc = selection_param(req, diff ? "_b" : "", now, &b, &err);
    calltree_grouping group_by = {.mask = 0};
    if (rc == 0)
        rc = calltree_group_by_parse_list(http_request_query(req, "group_by"), &group_by, &err);
    if (rc == 0 && kind == REPORT_PPROF) { /* a pprof download keeps every location and label */
        group_by.mask = CALLTREE_GROUP_EXACT;
        group_by.all_labels = true;
    }
    group_by.by_timestamp = false; /* no JSON report is a flame chart */
    const char *max_nodes = http_request_query(req, "max_nodes");
    uint64_t mn = 0;
    if (rc == 0 && max_nodes != NULL && !config_parse_uint64(max_nodes, &mn))
        rc = strata_error_set(&err, STRATA_INVALID_ARGUMENT, "max_nodes: want a number of nodes");
    if (rc == 0)
        rc = querier_build_tree(q, tenant.name, diff ? &a : NULL, &b, absolute, &group_by, &tr,
                                &err);
    if (rc == 0) {
        calltree_report_options opts;
        querier_report_options(q, &tr, trim, mn, &opts);
        if (kind == REPORT_PPROF) {
            opts.max_nodes = 0; /* an export is whole */
            rc = send_pprof(&tr, &opts, resp, &err);
        } else {
            char warnings[1024];
            querier_warnings(q, &tr.main.stats, diff ? &tr.base.stats : NULL, warnings,
                             sizeof warnings);
            strata_buffer body = STRATA_BUFFER_INIT;
            rc = write_tree_json(&tr, &opts, kind, warnings, &body, &err);
            if (rc == 0)
                send_json(resp, &body);
            strata_buffer_free(&body);
        }
    }
    query_tree_result_free(&tr);
    calltree_grouping_free(&group_by);
    if (rc != 0)
        send_error(q, resp, req, op, start, &err);
    else
        querier_observe(q, op, STRATA_OK, start);
}

/* ---- running merges on the query threads ------------------------------------------------- */

/* Merges run on the querier's query threads, as gRPC queries do, so query_threads bounds them
 * (and their memory) across both APIs. The handler runs on the HTTP server's I/O thread
 * (a nonblocking route): it only queues the merge and defers the answer, which the query thread
 * finishes, so no server thread waits for a query. A full queue answers 429 at once. */
typedef void (*answer_fn)(querier *q, const http_request *req, http_response *resp, bool diff);

typedef struct pooled_answer {
    answer_fn answer;
    querier *q;
    http_deferred *deferred;
    bool diff;
} pooled_answer;

static void run_pooled_answer(void *arg) {
    pooled_answer *a = arg;
    a->answer(a->q, http_deferred_request(a->deferred), http_deferred_response(a->deferred),
              a->diff);
    http_deferred_finish(a->deferred);
    free(a);
}

static void answer_on_query_threads(querier *q, const http_request *req, http_response *resp,
                                    const char *op, answer_fn answer, bool diff) {
    int64_t start = strata_monotonic_ns();
    strata_error err;
    pooled_answer *a = malloc(sizeof *a);
    if (a == NULL) {
        strata_error_oom(&err);
        send_error(q, resp, req, op, start, &err);
        return;
    }
    *a = (pooled_answer){answer, q, http_response_defer(resp), diff};
    if (query_pool_submit(q->pool, run_pooled_answer, a, &err) != 0) {
        send_error(q, resp, req, op, start, &err);
        http_deferred_finish(a->deferred);
        free(a);
    }
}

static void http_query_range(void *ctx, const http_request *req, http_response *resp) {
    answer_on_query_threads(ctx, req, resp, "query_range", answer_query_range, false);
}

static void http_query(void *ctx, const http_request *req, http_response *resp) {
    answer_on_query_threads(ctx, req, resp, "query", answer_tree, false);
}

static void http_diff(void *ctx, const http_request *req, http_response *resp) {
    answer_on_query_threads(ctx, req, resp, "diff", answer_tree, true);
}

/* GET /api/v1/shared/<id>: a profile ShareProfile stored (query_grpc.c), as a pprof download. */
static void http_shared(void *ctx, const http_request *req, http_response *resp) {
    querier *q = ctx;
    int64_t start = strata_monotonic_ns();
    strata_error err;
    strata_error_clear(&err);
    const char *id = http_request_path_rest(req);
    bool ok = strlen(id) == 32;
    for (size_t i = 0; ok && id[i] != '\0'; i++)
        ok = (id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f');
    strata_tenant tenant;
    char key[STRATA_TENANT_MAX_LENGTH + 96], disposition[96];
    if (tenant_of(req, &tenant, &err) != 0 ||
        (!ok && strata_error_set(&err, STRATA_INVALID_ARGUMENT,
                                 "a shared profile's id is 32 hex digits") != 0)) {
        send_error(q, resp, req, "shared", start, &err);
        return;
    }
    snprintf(key, sizeof key, "%s/shared/%s/profile.pb.gz", tenant.name, id);
    if (bucket_get(q->store, key, http_response_body(resp), &err) != 0) {
        if (err.code == STRATA_NOT_FOUND)
            strata_error_set(&err, STRATA_NOT_FOUND, "no shared profile %s", id);
        send_error(q, resp, req, "shared", start, &err);
        return;
    }
    snprintf(disposition, sizeof disposition, "attachment; filename=\"profile-%s.pb.gz\"", id);
    if (http_response_set_content_type(resp, "application/octet-stream") != 0 ||
        http_response_add_header(resp, "Content-Disposition", disposition) != 0) {
        strata_error_oom(&err);
        send_error(q, resp, req, "shared", start, &err);
        return;
    }
    querier_observe(q, "shared", STRATA_OK, start);
}

int querier_register_http(querier *q, http_server *server, strata_error *err) {
    if (http_server_route(server, "GET", API_PREFIX "shared/", HTTP_MATCH_PREFIX, http_shared, q,
                          err) != 0)
        return -1;
    if (http_server_route(server, "GET", API_PREFIX "profile_types", HTTP_MATCH_EXACT,
                          http_profile_types, q, err) != 0 ||
        http_server_route(server, "GET", API_PREFIX "labels", HTTP_MATCH_PREFIX, http_labels, q,
                          err) != 0 ||
        http_server_route_nonblocking(server, "GET", API_PREFIX "query_range", HTTP_MATCH_EXACT,
                                      http_query_range, q, err) != 0 ||
        http_server_route_nonblocking(server, "GET", API_PREFIX "query", HTTP_MATCH_EXACT,
                                      http_query, q, err) != 0)
        return -1;
    return http_server_route_nonblocking(server, "GET", API_PREFIX "diff", HTTP_MATCH_EXACT,
                                         http_diff, q, err);
}
