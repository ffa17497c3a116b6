/*
 * querier_api_test.c - the querier's two front ends as tables: request in, status and answer out.
 *
 * One FILESYSTEM bucket holds a block of tenant t1 with three series whose totals are known: CPU
 * {job="api",pod="p0"} at T0 (main > serve > parse 5, main > gc 3), CPU {job="db",pod="p1"} at
 * T0 + 10 s (main > query 7), and memory {job="api",pod="p0"} at T0 (main > alloc 1024). Each
 * sample's CPU value is scaled by the profile's period (samples:count), so a CPU total is
 * (sum of counts) x PERIOD.
 *
 * query_http.c: the routes run on a real HTTP server (libmicrohttpd, an ephemeral port) and are
 * called with libcurl; each row is a path with its query string and tenant header, and the
 * expected status, Content-Type and body (exact where it is small, else strings it must hold and
 * strings it must not).
 *
 * query_grpc.c: the QueryService methods run through rpc_server_call_bridged, the same handler a
 * gRPC call reaches (and gRPC-Web, Connect), without a network; each row is a method, a request
 * message (or raw bytes), the tenant metadata, and the expected status code, message, and a check
 * of the decoded answer.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <curl/curl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block/block_merge_testdata.h"
#include "bucket/bucket.h"
#include "common/clock.h"
#include "config/config.h"
#include "labels/labels.h"
#include "parca/query/v1alpha1/query.pb-c.h"
#include "querier_internal.h"

#define T0 (INT64_C(1700000000) * SEC)
#define T0_MS "1700000000000"
#define PERIOD 10000000 /* 10 ms */
#define MEMORY "memory:inuse_space:bytes:space:bytes"

typedef struct api_fixture {
    char dir[64];
    bucket *store;
    metrics_registry *registry;
    querier *q;
    http_server *http;
    rpc_server *rpc;
    char base_url[64];
} api_fixture;

static api_fixture fx;

/* ---- the data ------------------------------------------------------------------------------ */

typedef struct test_sample {
    const char *frames[4]; /* leaf first, NULL-terminated */
    int64_t value;
} test_sample;

static void add_profile(block_writer *w, const char *labels_text, const profile_type *type,
                        int64_t time_ns, int64_t period, const test_sample *samples, size_t n) {
    strata_error err;
    label_set labels = LABEL_SET_INIT;
    assert_int_equal(label_set_from_text(labels_text, &labels, &err), 0);
    assert_int_equal(block_writer_begin_profile(w, &labels, type, time_ns, 10 * SEC, period, &err),
                     0);
    for (size_t i = 0; i < n; i++) {
        block_frame frames[4];
        size_t depth = 0;
        for (; depth < 4 && samples[i].frames[depth] != NULL; depth++) {
            const char *f = samples[i].frames[depth];
            frames[depth] = (block_frame){f, f, "app.c", 10, 1, "/bin/app", "b1", 0x1000 + depth};
        }
        assert_int_equal(block_writer_add_sample(w, frames, depth, samples[i].value, &err), 0);
    }
    assert_int_equal(block_writer_end_profile(w, &err), 0);
    label_set_free(&labels);
}

static void write_data(void) {
    block_writer_options o;
    block_writer_options_default(&o);
    o.tenant = "t1";
    strata_error err;
    block_writer *w = block_writer_new(&o, &err);
    assert_non_null(w);
    profile_type cpu = {"process_cpu", "samples", "count", "cpu", "nanoseconds", true};
    profile_type mem = {"memory", "inuse_space", "bytes", "space", "bytes", false};
    const test_sample api[] = {{{"parse", "serve", "main", NULL}, 5}, {{"gc", "main", NULL}, 3}};
    const test_sample db[] = {{{"query", "main", NULL}, 7}};
    const test_sample heap[] = {{{"alloc", "main", NULL}, 1024}};
    add_profile(w, "{job=\"api\",pod=\"p0\"}", &cpu, T0, PERIOD, api, 2);
    add_profile(w, "{job=\"db\",pod=\"p1\"}", &cpu, T0 + 10 * SEC, PERIOD, db, 1);
    add_profile(w, "{job=\"api\",pod=\"p0\"}", &mem, T0, 1, heap, 1);
    ulid id;
    upload_writer_as(fx.store, w, "t1", &id);
}

/* ---- set-up ---------------------------------------------------------------------------------- */

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int setup(void **state) {
    (void)state;
    memset(&fx, 0, sizeof fx);
    assert_int_equal(curl_global_init(CURL_GLOBAL_DEFAULT), CURLE_OK);
    snprintf(fx.dir, sizeof fx.dir, "/tmp/strata-querier-api-XXXXXX");
    assert_non_null(mkdtemp(fx.dir));
    strata_error err;
    assert_int_equal(bucket_open_filesystem(fx.dir, NULL, &fx.store, &err), 0);
    write_data();

    static const char yaml[] = "query_threads: 2\n";
    config_document *doc;
    assert_int_equal(config_load_string("querier.yaml", yaml, strlen(yaml), &doc, &err), 0);
    querier_config config;
    assert_int_equal(config_decode_document(doc, querier_config_fields, &config, &err), 0);
    config_document_free(doc);
    assert_non_null(fx.registry = metrics_registry_new(&err));
    assert_int_equal(querier_new(&config, fx.store, fx.registry, &fx.q, &err), 0);
    config_free(querier_config_fields, &config);
    assert_int_equal(block_index_sync(fx.q->index, &err), 0);

    http_server_options ho = {.metrics = fx.registry};
    assert_non_null(fx.http = http_server_new(&ho, &err));
    assert_int_equal(querier_register_http(fx.q, fx.http, &err), 0);
    assert_int_equal(http_server_start(fx.http, &err), 0);
    snprintf(fx.base_url, sizeof fx.base_url, "http://127.0.0.1:%u",
             (unsigned)http_server_port(fx.http));

    rpc_server_options ro = {.listen_address = "127.0.0.1:0"};
    assert_non_null(fx.rpc = rpc_server_new(&ro, &err));
    assert_int_equal(querier_register_grpc(fx.q, fx.rpc, &err), 0);
    assert_int_equal(rpc_server_start(fx.rpc, &err), 0);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    rpc_server_shutdown(fx.rpc, 5 * SEC);
    http_server_stop(fx.http);
    http_server_free(fx.http);
    querier_free(fx.q);
    metrics_registry_free(fx.registry);
    bucket_close(fx.store);
    nftw(fx.dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    curl_global_cleanup();
    return 0;
}

/* ---- query_http.c ---------------------------------------------------------------------------- */

typedef struct http_answer {
    long status;
    char content_type[128];
    strata_buffer body;
} http_answer;

static size_t on_body(char *data, size_t size, size_t n, void *arg) {
    strata_buffer *b = arg;
    return strata_buffer_append(b, data, size * n) == 0 ? size * n : 0;
}

static void http_get(const char *path, const char *tenant, http_answer *a) {
    CURL *c = curl_easy_init();
    assert_non_null(c);
    char url[2048];
    snprintf(url, sizeof url, "%s%s", fx.base_url, path);
    struct curl_slist *headers = NULL;
    char header[256];
    if (tenant != NULL) {
        snprintf(header, sizeof header, "X-Scope-OrgID: %s", tenant);
        headers = curl_slist_append(headers, header);
    }
    strata_buffer_init(&a->body);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 60L);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &a->body);
    assert_int_equal(curl_easy_perform(c), CURLE_OK);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &a->status);
    char *type = NULL;
    curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &type);
    snprintf(a->content_type, sizeof a->content_type, "%s", type != NULL ? type : "");
    assert_int_equal(strata_buffer_append_byte(&a->body, 0), 0);
    a->body.len--;
    curl_slist_free_all(headers);
    curl_easy_cleanup(c);
}

/* A CPU selector's query string, URL-encoded: {job="api"} and friends. */
#define Q_CPU "process_cpu%3Asamples%3Acount%3Acpu%3Ananoseconds%3Adelta"
#define Q_API Q_CPU "%7Bjob%3D%22api%22%7D"
#define Q_DB Q_CPU "%7Bjob%3D%22db%22%7D"
#define RANGE "&start=" T0_MS "&end=1700000060000"

typedef struct http_row {
    const char *name;
    const char *path;
    const char *tenant;
    long status;
    const char *content_type;
    const char *body;     /* exact, when not NULL */
    const char *has[4];   /* substrings the body must hold */
    const char *lacks[2]; /* substrings it must not */
    size_t prefix_bytes;  /* body starts with these bytes (binary answers), when > 0 */
    const char *prefix;
} http_row;

#define JSON "application/json"
#define TYPE_CPU                                                                                   \
    "{\"id\":\"" CPU "\",\"name\":\"process_cpu\",\"sample_type\":\"samples\",\"sample_unit\":"    \
    "\"count\",\"period_type\":\"cpu\",\"period_unit\":\"nanoseconds\",\"delta\":true}"
#define TYPE_MEMORY                                                                                \
    "{\"id\":\"" MEMORY "\",\"name\":\"memory\",\"sample_type\":\"inuse_space\",\"sample_unit\":"  \
    "\"bytes\",\"period_type\":\"space\",\"period_unit\":\"bytes\",\"delta\":false}"

static const http_row http_rows[] = {
    {.name = "profile types",
     .path = "/api/v1/profile_types",
     .tenant = "t1",
     .status = 200,
     .content_type = JSON,
     .body = "{\"types\":[" TYPE_MEMORY "," TYPE_CPU "]}"},
    {.name = "profile types, a time range before the data",
     .path = "/api/v1/profile_types?start=1600000000000&end=1600000060000",
     .tenant = "t1",
     .status = 200,
     .content_type = JSON,
     .body = "{\"types\":[]}"},
    {.name = "another tenant sees nothing",
     .path = "/api/v1/profile_types",
     .tenant = "t2",
     .status = 200,
     .content_type = JSON,
     .body = "{\"types\":[]}"},
    {.name = "anonymous sees nothing",
     .path = "/api/v1/profile_types",
     .status = 200,
     .content_type = JSON,
     .body = "{\"types\":[]}"},
    {.name = "a tenant header breaking the rule",
     .path = "/api/v1/profile_types",
     .tenant = "a/b",
     .status = 400,
     .content_type = JSON,
     .has = {"\"code\":\"INVALID_ARGUMENT\"", "tenant"}},
    {.name = "a time that is not one",
     .path = "/api/v1/profile_types?start=yesterday",
     .tenant = "t1",
     .status = 400,
     .content_type = JSON,
     .has = {"\"code\":\"INVALID_ARGUMENT\"", "start", "yesterday"}},
    {.name = "label names",
     .path = "/api/v1/labels",
     .tenant = "t1",
     .status = 200,
     .content_type = JSON,
     .has = {"\"job\"", "\"pod\""}},
    {.name = "label values",
     .path = "/api/v1/labels/job/values",
     .tenant = "t1",
     .status = 200,
     .content_type = JSON,
     .body = "{\"label_values\":[\"api\",\"db\"]}"},
    {.name = "label values under a matcher",
     .path = "/api/v1/labels/pod/values?match=%7Bjob%3D%22db%22%7D",
     .tenant = "t1",
     .status = 200,
     .content_type = JSON,
     .body = "{\"label_values\":[\"p1\"]}"},
    {.name = "label values of one profile type",
     .path = "/api/v1/labels/job/values?profile_type=" MEMORY,
     .tenant = "t1",
     .status = 200,
     .content_type = JSON,
     .body = "{\"label_values\":[\"api\"]}"},
    {.name = "label values of a name that cannot be one",
     .path = "/api/v1/labels/a-b/values",
     .tenant = "t1",
     .status = 400,
     .content_type = JSON,
     .has = {"INVALID_ARGUMENT", "a-b"}},
    {.name = "a matcher that does not parse",
     .path = "/api/v1/labels?match=%7Bjob%3D",
     .tenant = "t1",
     .status = 400,
     .content_type = JSON,
     .has = {"INVALID_ARGUMENT"}},
    {.name = "range: one series, one point",
     .path = "/api/v1/query_range?query=" Q_API RANGE "&step=60s",
     .tenant = "t1",
     .status = 200,
     .content_type = JSON,
     .has = {"\"labels\":{}", "\"timestamp\":1699999980000,\"value\":80000000,", "\"count\":1}"}},
    {.name = "range summed by job",
     .path = "/api/v1/query_range?query=" Q_CPU RANGE "&step=60&sum_by=job",
     .tenant = "t1",
     .status = 200,
     .content_type = JSON,
     .has = {"\"job\":\"api\"", "\"job\":\"db\"", "80000000", "70000000"},
     .lacks = {"\"pod\""}},
    {.name = "range without a query",
     .path = "/api/v1/query_range?start=" T0_MS "&end=1700000060000",
     .tenant = "t1",
     .status = 400,
     .content_type = JSON,
     .has = {"INVALID_ARGUMENT", "query"}},
    {.name = "range with a step that is not a duration",
     .path = "/api/v1/query_range?query=" Q_API RANGE "&step=x",
     .tenant = "t1",
     .status = 400,
     .content_type = JSON,
     .has = {"INVALID_ARGUMENT", "step", "\\\"x\\\""}},
    {.name = "merge as a table",
     .path = "/api/v1/query?query=" Q_CPU RANGE "&mode=merge&report=table",
     .tenant = "t1",
     .status = 200,
     .content_type = JSON,
     .has = {"\"parse\"", "\"query\"", "\"gc\"", "150000000"}},
    {.name = "merge of one job",
     .path = "/api/v1/query?query=" Q_DB RANGE "&mode=merge&report=table",
     .tenant = "t1",
     .status = 200,
     .content_type = JSON,
     .has = {"\"query\"", "70000000"},
     .lacks = {"\"parse\"", "\"gc\""}},
    {.name = "merge as a flame graph",
     .path = "/api/v1/query?query=" Q_API RANGE "&mode=merge",
     .tenant = "t1",
     .status = 200,
     .content_type = JSON,
     .has = {"\"serve\"", "\"parse\"", "80000000"},
     .lacks = {"\"query\""}},
    {.name = "merge as pprof (gzip)",
     .path = "/api/v1/query?query=" Q_API RANGE "&mode=merge&report=pprof",
     .tenant = "t1",
     .status = 200,
     .prefix_bytes = 2,
     .prefix = "\x1f\x8b"},
    {.name = "single at the profile's time",
     .path = "/api/v1/query?query=" Q_DB "&mode=single&time=1700000010000",
     .tenant = "t1",
     .status = 200,
     .content_type = JSON,
     .has = {"\"query\"", "70000000"},
     .lacks = {"\"parse\""}},
    {.name = "an unknown report",
     .path = "/api/v1/query?query=" Q_API RANGE "&mode=merge&report=svg",
     .tenant = "t1",
     .status = 400,
     .content_type = JSON,
     .has = {"INVALID_ARGUMENT",
             "report: \\\"svg\\\" is not flamegraph, table, both, top or pprof"}},
    {.name = "an unknown mode",
     .path = "/api/v1/query?query=" Q_API RANGE "&mode=sum",
     .tenant = "t1",
     .status = 400,
     .content_type = JSON,
     .has = {"INVALID_ARGUMENT", "mode: \\\"sum\\\" is neither merge nor single"}},
    {.name = "a selector that does not parse",
     .path = "/api/v1/query?query=%7Bjob%3D" RANGE "&mode=merge",
     .tenant = "t1",
     .status = 400,
     .content_type = JSON,
     .has = {"INVALID_ARGUMENT"}},
    {.name = "a query without a selector",
     .path = "/api/v1/query?report=table",
     .tenant = "t1",
     .status = 400,
     .content_type = JSON,
     .has = {"INVALID_ARGUMENT"}},
    {.name = "merge for a tenant without data (NOT_FOUND, as Parca)",
     .path = "/api/v1/query?query=" Q_API RANGE "&mode=merge",
     .tenant = "t2",
     .status = 404,
     .content_type = JSON,
     .body = "{\"code\":\"NOT_FOUND\",\"message\":\"no profiles match the query in that "
             "range\"}"},
    {.name = "diff",
     .path = "/api/v1/diff?query_a=" Q_API "&query_b=" Q_DB "&start_a=" T0_MS
             "&end_a=1700000060000&start_b=" T0_MS "&end_b=1700000060000&report=table",
     .tenant = "t1",
     .status = 200,
     .content_type = JSON,
     .has = {"\"query\"", "\"parse\""}},
    {.name = "diff without its second side",
     .path = "/api/v1/diff?query_a=" Q_API RANGE,
     .tenant = "t1",
     .status = 400,
     .content_type = JSON,
     .has = {"INVALID_ARGUMENT"}},
    {.name = "a path that is not an operation",
     .path = "/api/v1/nothing",
     .tenant = "t1",
     .status = 404},
};

static bool body_starts(const http_answer *a, const char *prefix, size_t n) {
    return a->body.len >= n && memcmp(a->body.data, prefix, n) == 0;
}

static void test_http_table(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof http_rows / sizeof http_rows[0]; i++) {
        const http_row *r = &http_rows[i];
        http_answer a;
        http_get(r->path, r->tenant, &a);
        const char *body = (const char *)a.body.data;
        bool ok = a.status == r->status;
        if (r->content_type != NULL)
            ok = ok && strncmp(a.content_type, r->content_type, strlen(r->content_type)) == 0;
        if (r->body != NULL)
            ok = ok && strcmp(body, r->body) == 0;
        for (size_t k = 0; k < 4 && r->has[k] != NULL; k++)
            ok = ok && strstr(body, r->has[k]) != NULL;
        for (size_t k = 0; k < 2 && r->lacks[k] != NULL; k++)
            ok = ok && strstr(body, r->lacks[k]) == NULL;
        if (r->prefix_bytes > 0)
            ok = ok && body_starts(&a, r->prefix, r->prefix_bytes);
        if (!ok)
            fail_msg("%s: GET %s -> %ld %s %.2000s", r->name, r->path, a.status, a.content_type,
                     body);
        strata_buffer_free(&a.body);
    }
}

/* ---- query_grpc.c ---------------------------------------------------------------------------- */

typedef struct grpc_answer {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
    strata_status code;
    char message[1024];
    strata_buffer response;
    const char *tenant;
} grpc_answer;

static void on_finish(void *ctx, strata_status code, const char *message, strata_buffer *response,
                      const char *trailer_key, const char *trailer_value) {
    (void)trailer_key;
    (void)trailer_value;
    grpc_answer *a = ctx;
    pthread_mutex_lock(&a->mu);
    a->code = code;
    snprintf(a->message, sizeof a->message, "%s", message != NULL ? message : "");
    if (response != NULL && code == STRATA_OK) {
        a->response = *response;
        strata_buffer_init(response);
    }
    a->done = true;
    pthread_cond_signal(&a->cv);
    pthread_mutex_unlock(&a->mu);
}

static bool on_metadata(void *ctx, const char *key, const char **value, size_t *value_len) {
    grpc_answer *a = ctx;
    if (a->tenant == NULL || strcmp(key, "x-scope-orgid") != 0)
        return false;
    *value = a->tenant;
    *value_len = strlen(a->tenant);
    return true;
}

/* Calls method with request's bytes as tenant; returns the call's status (or the error that kept
 * it from starting, UNIMPLEMENTED for an unknown method). */
static void grpc_call(const char *method, const uint8_t *req, size_t len, const char *tenant,
                      grpc_answer *a) {
    memset(a, 0, sizeof *a);
    assert_int_equal(pthread_mutex_init(&a->mu, NULL), 0);
    assert_int_equal(pthread_cond_init(&a->cv, NULL), 0);
    a->tenant = tenant;
    rpc_bridge bridge = {.finish = on_finish,
                         .metadata = on_metadata,
                         .ctx = a,
                         .peer = "test",
                         .deadline_ns = INT64_MAX};
    strata_error err;
    if (rpc_server_call_bridged(fx.rpc, method, req, len, &bridge, &err) != 0) {
        a->code = err.code;
        snprintf(a->message, sizeof a->message, "%s", err.message);
        a->done = true;
    }
    pthread_mutex_lock(&a->mu);
    while (!a->done)
        pthread_cond_wait(&a->cv, &a->mu);
    pthread_mutex_unlock(&a->mu);
    pthread_cond_destroy(&a->cv);
    pthread_mutex_destroy(&a->mu);
}

static Google__Protobuf__Timestamp ts_start = {
    PROTOBUF_C_MESSAGE_INIT(&google__protobuf__timestamp__descriptor), 1700000000, 0};
static Google__Protobuf__Timestamp ts_end = {
    PROTOBUF_C_MESSAGE_INIT(&google__protobuf__timestamp__descriptor), 1700000060, 0};
static Google__Protobuf__Duration step_60s = {
    PROTOBUF_C_MESSAGE_INIT(&google__protobuf__duration__descriptor), 60, 0};

/* Requests, built into a buffer per row. */
typedef void (*request_fn)(strata_buffer *out);

static void pack(const ProtobufCMessage *m, strata_buffer *out) {
    size_t n = protobuf_c_message_get_packed_size(m);
    assert_int_equal(strata_buffer_reserve(out, n + 1), 0);
    out->len = protobuf_c_message_pack(m, out->data);
}

static void req_profile_types(strata_buffer *out) {
    Parca__Query__V1alpha1__ProfileTypesRequest r =
        PARCA__QUERY__V1ALPHA1__PROFILE_TYPES_REQUEST__INIT;
    pack(&r.base, out);
}

static void req_labels(strata_buffer *out) {
    Parca__Query__V1alpha1__LabelsRequest r = PARCA__QUERY__V1ALPHA1__LABELS_REQUEST__INIT;
    pack(&r.base, out);
}

static void values_of(const char *name, strata_buffer *out) {
    Parca__Query__V1alpha1__ValuesRequest r = PARCA__QUERY__V1ALPHA1__VALUES_REQUEST__INIT;
    r.label_name = (char *)name;
    pack(&r.base, out);
}

static void req_values_job(strata_buffer *out) {
    values_of("job", out);
}

static void req_values_bad_name(strata_buffer *out) {
    values_of("a-b", out);
}

static void range_of(const char *query, char **sum_by, size_t n_sum_by, strata_buffer *out) {
    Parca__Query__V1alpha1__QueryRangeRequest r = PARCA__QUERY__V1ALPHA1__QUERY_RANGE_REQUEST__INIT;
    r.query = (char *)query;
    r.start = &ts_start;
    r.end = &ts_end;
    r.step = &step_60s;
    r.sum_by = sum_by;
    r.n_sum_by = n_sum_by;
    pack(&r.base, out);
}

static void req_range_api(strata_buffer *out) {
    range_of(CPU "{job=\"api\"}", NULL, 0, out);
}

static void req_range_by_job(strata_buffer *out) {
    char *by[] = {"job"};
    range_of(CPU, by, 1, out);
}

static void req_range_no_times(strata_buffer *out) {
    Parca__Query__V1alpha1__QueryRangeRequest r = PARCA__QUERY__V1ALPHA1__QUERY_RANGE_REQUEST__INIT;
    r.query = CPU;
    pack(&r.base, out);
}

static void merge_of(const char *query, Parca__Query__V1alpha1__QueryRequest__ReportType report,
                     Google__Protobuf__Timestamp *start, Google__Protobuf__Timestamp *end,
                     strata_buffer *out) {
    Parca__Query__V1alpha1__MergeProfile m = PARCA__QUERY__V1ALPHA1__MERGE_PROFILE__INIT;
    m.query = (char *)query;
    m.start = start;
    m.end = end;
    Parca__Query__V1alpha1__QueryRequest r = PARCA__QUERY__V1ALPHA1__QUERY_REQUEST__INIT;
    r.mode = PARCA__QUERY__V1ALPHA1__QUERY_REQUEST__MODE__MODE_MERGE;
    r.report_type = report;
    r.options_case = PARCA__QUERY__V1ALPHA1__QUERY_REQUEST__OPTIONS_MERGE;
    r.merge = &m;
    pack(&r.base, out);
}

static void req_merge_top(strata_buffer *out) {
    merge_of(CPU, PARCA__QUERY__V1ALPHA1__QUERY_REQUEST__REPORT_TYPE__REPORT_TYPE_TOP, &ts_start,
             &ts_end, out);
}

static void req_merge_db_top(strata_buffer *out) {
    merge_of(CPU "{job=\"db\"}",
             PARCA__QUERY__V1ALPHA1__QUERY_REQUEST__REPORT_TYPE__REPORT_TYPE_TOP, &ts_start,
             &ts_end, out);
}

static void req_merge_pprof(strata_buffer *out) {
    merge_of(MEMORY, PARCA__QUERY__V1ALPHA1__QUERY_REQUEST__REPORT_TYPE__REPORT_TYPE_PPROF,
             &ts_start, &ts_end, out);
}

static void req_merge_reversed(strata_buffer *out) {
    merge_of(CPU, PARCA__QUERY__V1ALPHA1__QUERY_REQUEST__REPORT_TYPE__REPORT_TYPE_TOP, &ts_end,
             &ts_start, out);
}

static void req_merge_bad_selector(strata_buffer *out) {
    merge_of(CPU "{job=", PARCA__QUERY__V1ALPHA1__QUERY_REQUEST__REPORT_TYPE__REPORT_TYPE_TOP,
             &ts_start, &ts_end, out);
}

static void req_merge_without_merge(strata_buffer *out) {
    Parca__Query__V1alpha1__QueryRequest r = PARCA__QUERY__V1ALPHA1__QUERY_REQUEST__INIT;
    r.mode = PARCA__QUERY__V1ALPHA1__QUERY_REQUEST__MODE__MODE_MERGE;
    pack(&r.base, out);
}

static void req_garbage(strata_buffer *out) {
    static const uint8_t bytes[] = {0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f}; /* a length past the end */
    assert_int_equal(strata_buffer_append(out, bytes, sizeof bytes), 0);
}

static void req_empty(strata_buffer *out) {
    (void)out;
}

/* Checks of decoded answers. */
typedef void (*answer_fn)(const strata_buffer *response);

static void check_types(const strata_buffer *resp) {
    Parca__Query__V1alpha1__ProfileTypesResponse *r =
        parca__query__v1alpha1__profile_types_response__unpack(NULL, resp->len, resp->data);
    assert_non_null(r);
    assert_int_equal(r->n_types, 2);
    assert_string_equal(r->types[0]->name, "memory");
    assert_false(r->types[0]->delta);
    assert_string_equal(r->types[1]->name, "process_cpu");
    assert_string_equal(r->types[1]->sample_type, "samples");
    assert_true(r->types[1]->delta);
    parca__query__v1alpha1__profile_types_response__free_unpacked(r, NULL);
}

static void check_no_types(const strata_buffer *resp) {
    Parca__Query__V1alpha1__ProfileTypesResponse *r =
        parca__query__v1alpha1__profile_types_response__unpack(NULL, resp->len, resp->data);
    assert_non_null(r);
    assert_int_equal(r->n_types, 0);
    parca__query__v1alpha1__profile_types_response__free_unpacked(r, NULL);
}

static void check_label_names(const strata_buffer *resp) {
    Parca__Query__V1alpha1__LabelsResponse *r =
        parca__query__v1alpha1__labels_response__unpack(NULL, resp->len, resp->data);
    assert_non_null(r);
    bool job = false, pod = false;
    for (size_t i = 0; i < r->n_label_names; i++) {
        job = job || strcmp(r->label_names[i], "job") == 0;
        pod = pod || strcmp(r->label_names[i], "pod") == 0;
    }
    assert_true(job && pod);
    parca__query__v1alpha1__labels_response__free_unpacked(r, NULL);
}

static void check_job_values(const strata_buffer *resp) {
    Parca__Query__V1alpha1__ValuesResponse *r =
        parca__query__v1alpha1__values_response__unpack(NULL, resp->len, resp->data);
    assert_non_null(r);
    assert_int_equal(r->n_label_values, 2);
    assert_string_equal(r->label_values[0], "api");
    assert_string_equal(r->label_values[1], "db");
    parca__query__v1alpha1__values_response__free_unpacked(r, NULL);
}

static const char *label_value(const Parca__Query__V1alpha1__MetricsSeries *s, const char *name) {
    if (s->labelset == NULL)
        return NULL;
    for (size_t i = 0; i < s->labelset->n_labels; i++)
        if (strcmp(s->labelset->labels[i]->name, name) == 0)
            return s->labelset->labels[i]->value;
    return NULL;
}

static int64_t series_total(const Parca__Query__V1alpha1__MetricsSeries *s) {
    int64_t total = 0;
    for (size_t i = 0; i < s->n_samples; i++)
        total += s->samples[i]->value;
    return total;
}

static void check_range_api(const strata_buffer *resp) {
    Parca__Query__V1alpha1__QueryRangeResponse *r =
        parca__query__v1alpha1__query_range_response__unpack(NULL, resp->len, resp->data);
    assert_non_null(r);
    assert_int_equal(r->n_series, 1); /* no sum_by: one series without labels, as Parca */
    assert_null(label_value(r->series[0], "job"));
    assert_int_equal(r->series[0]->n_samples, 1);
    assert_int_equal(r->series[0]->samples[0]->value, 8 * PERIOD);
    assert_int_equal(r->series[0]->samples[0]->count, 1);
    parca__query__v1alpha1__query_range_response__free_unpacked(r, NULL);
}

static void check_range_by_job(const strata_buffer *resp) {
    Parca__Query__V1alpha1__QueryRangeResponse *r =
        parca__query__v1alpha1__query_range_response__unpack(NULL, resp->len, resp->data);
    assert_non_null(r);
    assert_int_equal(r->n_series, 2);
    for (size_t i = 0; i < 2; i++) {
        const char *job = label_value(r->series[i], "job");
        assert_non_null(job);
        assert_null(label_value(r->series[i], "pod")); /* summed away */
        assert_int_equal(series_total(r->series[i]),
                         strcmp(job, "api") == 0 ? 8 * PERIOD : 7 * PERIOD);
    }
    parca__query__v1alpha1__query_range_response__free_unpacked(r, NULL);
}

static const Parca__Query__V1alpha1__TopNode *top_node(const Parca__Query__V1alpha1__Top *top,
                                                       const char *function) {
    for (size_t i = 0; i < top->n_list; i++) {
        const Parca__Query__V1alpha1__TopNodeMeta *m = top->list[i]->meta;
        if (m != NULL && m->function != NULL && strcmp(m->function->name, function) == 0)
            return top->list[i];
    }
    return NULL;
}

static void check_merge_top(const strata_buffer *resp) {
    Parca__Query__V1alpha1__QueryResponse *r =
        parca__query__v1alpha1__query_response__unpack(NULL, resp->len, resp->data);
    assert_non_null(r);
    assert_int_equal(r->report_case, PARCA__QUERY__V1ALPHA1__QUERY_RESPONSE__REPORT_TOP);
    assert_int_equal(r->total, 15 * PERIOD);
    const struct {
        const char *function;
        int64_t flat, cumulative;
    } want[] = {{"main", 0, 15 * PERIOD},
                {"serve", 0, 5 * PERIOD},
                {"parse", 5 * PERIOD, 5 * PERIOD},
                {"gc", 3 * PERIOD, 3 * PERIOD},
                {"query", 7 * PERIOD, 7 * PERIOD}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const Parca__Query__V1alpha1__TopNode *n = top_node(r->top, want[i].function);
        assert_non_null(n);
        assert_int_equal(n->flat, want[i].flat);
        assert_int_equal(n->cumulative, want[i].cumulative);
    }
    assert_null(top_node(r->top, "alloc")); /* memory is another profile type */
    parca__query__v1alpha1__query_response__free_unpacked(r, NULL);
}

static void check_merge_db_top(const strata_buffer *resp) {
    Parca__Query__V1alpha1__QueryResponse *r =
        parca__query__v1alpha1__query_response__unpack(NULL, resp->len, resp->data);
    assert_non_null(r);
    assert_int_equal(r->total, 7 * PERIOD);
    assert_non_null(top_node(r->top, "query"));
    assert_null(top_node(r->top, "parse"));
    parca__query__v1alpha1__query_response__free_unpacked(r, NULL);
}

static void check_merge_pprof(const strata_buffer *resp) {
    Parca__Query__V1alpha1__QueryResponse *r =
        parca__query__v1alpha1__query_response__unpack(NULL, resp->len, resp->data);
    assert_non_null(r);
    assert_int_equal(r->report_case, PARCA__QUERY__V1ALPHA1__QUERY_RESPONSE__REPORT_PPROF);
    assert_int_equal(r->total, 1024);
    assert_true(r->pprof.len > 2);
    assert_int_equal(r->pprof.data[0], 0x1f); /* gzip, as pprof files are */
    assert_int_equal(r->pprof.data[1], 0x8b);
    parca__query__v1alpha1__query_response__free_unpacked(r, NULL);
}

#define SVC "/parca.query.v1alpha1.QueryService/"

typedef struct grpc_row {
    const char *name;
    const char *method;
    request_fn request;
    const char *tenant;
    strata_status code;
    const char *message; /* a substring of the status message, when not NULL */
    answer_fn check;     /* of the answer, when OK */
} grpc_row;

static const grpc_row grpc_rows[] = {
    {"profile types", SVC "ProfileTypes", req_profile_types, "t1", STRATA_OK, NULL, check_types},
    {"profile types of another tenant", SVC "ProfileTypes", req_profile_types, "t2", STRATA_OK,
     NULL, check_no_types},
    {"profile types, anonymous", SVC "ProfileTypes", req_profile_types, NULL, STRATA_OK, NULL,
     check_no_types},
    {"a tenant breaking the rule", SVC "ProfileTypes", req_profile_types, "a/b",
     STRATA_INVALID_ARGUMENT, "tenant", NULL},
    {"label names", SVC "Labels", req_labels, "t1", STRATA_OK, NULL, check_label_names},
    {"label values", SVC "Values", req_values_job, "t1", STRATA_OK, NULL, check_job_values},
    {"values of a name that cannot be one", SVC "Values", req_values_bad_name, "t1",
     STRATA_INVALID_ARGUMENT, "label_name \"a-b\" is not valid", NULL},
    {"range of one series", SVC "QueryRange", req_range_api, "t1", STRATA_OK, NULL,
     check_range_api},
    {"range summed by job", SVC "QueryRange", req_range_by_job, "t1", STRATA_OK, NULL,
     check_range_by_job},
    {"range without times", SVC "QueryRange", req_range_no_times, "t1", STRATA_INVALID_ARGUMENT,
     "start and end are required", NULL},
    {"merge, top", SVC "Query", req_merge_top, "t1", STRATA_OK, NULL, check_merge_top},
    {"merge of one job", SVC "Query", req_merge_db_top, "t1", STRATA_OK, NULL, check_merge_db_top},
    {"merge for a tenant without data", SVC "Query", req_merge_top, "t2", STRATA_NOT_FOUND,
     "no profiles match the query in that range", NULL},
    {"merge as pprof", SVC "Query", req_merge_pprof, "t1", STRATA_OK, NULL, check_merge_pprof},
    {"merge ending before it starts", SVC "Query", req_merge_reversed, "t1",
     STRATA_INVALID_ARGUMENT, "merge end is before start", NULL},
    {"merge of a selector that does not parse", SVC "Query", req_merge_bad_selector, "t1",
     STRATA_INVALID_ARGUMENT, "invalid query", NULL},
    {"MODE_MERGE without merge", SVC "Query", req_merge_without_merge, "t1",
     STRATA_INVALID_ARGUMENT, "MODE_MERGE needs merge", NULL},
    {"bytes that are not a request", SVC "Query", req_garbage, "t1", STRATA_INVALID_ARGUMENT,
     "not a valid", NULL},
    {"an empty QueryRange", SVC "QueryRange", req_empty, "t1", STRATA_INVALID_ARGUMENT,
     "start and end are required", NULL},
    {"Series, which Strata does not implement", SVC "Series", req_empty, "t1", STRATA_UNIMPLEMENTED,
     "is not implemented by Strata", NULL},
    {"a method nobody registered", SVC "Nothing", req_empty, "t1", STRATA_UNIMPLEMENTED,
     "unknown method", NULL},
};

static void test_grpc_table(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof grpc_rows / sizeof grpc_rows[0]; i++) {
        const grpc_row *r = &grpc_rows[i];
        strata_buffer req = STRATA_BUFFER_INIT;
        r->request(&req);
        grpc_answer a;
        grpc_call(r->method, req.data, req.len, r->tenant, &a);
        if (a.code != r->code || (r->message != NULL && strstr(a.message, r->message) == NULL))
            fail_msg("%s: %s -> %s \"%s\", want %s \"%s\"", r->name, r->method,
                     strata_status_name(a.code), a.message, strata_status_name(r->code),
                     r->message != NULL ? r->message : "");
        if (a.code == STRATA_OK && r->check != NULL)
            r->check(&a.response);
        strata_buffer_free(&a.response);
        strata_buffer_free(&req);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_http_table),
        cmocka_unit_test(test_grpc_table),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
