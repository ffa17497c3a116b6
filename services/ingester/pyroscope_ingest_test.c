/*
 * pyroscope_ingest_test.c - Pyroscope's /ingest requests as the WriteRaw requests they mean: each
 * result goes through WriteRaw's own parser (ingest_request_parse) and is checked for its labels,
 * profile types, time, values and function names; malformed requests are refused with words that
 * name the problem.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "pyroscope_ingest.h"

#define FROM 1767225600LL
#define NS 1000000000LL
#define NOW_NS ((FROM + 3600) * NS)

static int translate(pyroscope_ingest_params p, ingest_request *req, strata_error *err) {
    ingest_limits limits;
    ingest_limits_default(&limits);
    limits.pprof.max_stack_depth = 8;
    limits.max_labels_per_series = 8;
    strata_buffer out = STRATA_BUFFER_INIT;
    if (p.from == NULL)
        p.from = "1767225600";
    if (p.until == NULL)
        p.until = "1767225610";
    int rc = pyroscope_ingest_to_write_raw(&p, &limits, NOW_NS, &out, err);
    ingest_reject_reason reason;
    if (rc == 0)
        rc = ingest_request_parse(out.data, out.len, &limits, 1, req, &reason, err);
    strata_buffer_free(&out);
    return rc;
}

static pyroscope_ingest_params text(const char *name, const char *format, const char *body) {
    return (pyroscope_ingest_params){.name = name,
                                     .format = format,
                                     .content_type = "text/plain",
                                     .body = (const uint8_t *)body,
                                     .body_len = strlen(body)};
}

/* "k=v,k=v" of the series' labels (without __name__). */
static const char *labels_of(const ingest_request *req, char *buf, size_t cap) {
    size_t used = 0;
    buf[0] = '\0';
    const label_set *ls = &req->series_labels[0];
    for (size_t i = 0; i < ls->count; i++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%s=%s", i ? "," : "",
                                 ls->labels[i].name, ls->labels[i].value);
    return buf;
}

static const char *type_of(const ingest_request *req, size_t i, char *buf, size_t cap) {
    const profile_type *t = &req->profiles[i].type;
    snprintf(buf, cap, "%s:%s:%s:%s:%s%s", t->name, t->sample_type, t->sample_unit, t->period_type,
             t->period_unit, t->delta ? ":delta" : "");
    return buf;
}

/* Sample s's frames, root first, as "a;b;c". */
static const char *stack_of(const pprof_profile *p, size_t s, char *buf, size_t cap) {
    size_t used = 0;
    buf[0] = '\0';
    const pprof_sample *sm = &p->samples[s];
    for (size_t k = sm->location_count; k-- > 0;) {
        const pprof_location *loc =
            pprof_find_location(p, p->sample_location_ids[sm->location_offset + k]);
        const pprof_function *fn = pprof_find_function(p, p->lines[loc->line_offset].function_id);
        pprof_string name = pprof_string_at(p, fn->name);
        used += (size_t)snprintf(buf + used, cap - used, "%s%.*s", used ? ";" : "", (int)name.len,
                                 name.ptr);
    }
    return buf;
}

static void test_folded(void **state) {
    (void)state;
    ingest_request req;
    strata_error err;
    pyroscope_ingest_params p =
        text("shop.cpu{env = prod, otel.scope.name=sdk,__reserved=x,}", "folded",
             "main;work;leaf 10\r\n\nmain;idle 3\nmain;never 0\n");
    p.spy_name = "rbspy";
    p.sample_rate = "50";
    assert_int_equal(translate(p, &req, &err), 0);
    char buf[256];
    assert_string_equal(labels_of(&req, buf, sizeof buf),
                        "env=prod,otel_scope_name=sdk,pyroscope_spy=rbspy,service_name=shop");
    assert_int_equal(req.n_profiles, 1);
    assert_string_equal(type_of(&req, 0, buf, sizeof buf),
                        "process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta");
    assert_int_equal(req.profiles[0].time_ns, FROM * NS);
    assert_int_equal(req.profiles[0].duration_ns, 10 * NS);
    assert_int_equal(req.profiles[0].period, NS / 50);
    const pprof_profile *pp = &req.pprofs[0];
    assert_int_equal(pp->n_samples, 2); /* the zero line is dropped */
    assert_string_equal(stack_of(pp, 0, buf, sizeof buf), "main;work;leaf");
    assert_int_equal(pprof_sample_value(pp, 0, 0), 10 * NS / 50);
    assert_string_equal(stack_of(pp, 1, buf, sizeof buf), "main;idle");
    assert_int_equal(pprof_sample_value(pp, 1, 0), 3 * NS / 50);
    ingest_request_free(&req);
}

static void test_lines_and_suffixes(void **state) {
    (void)state;
    ingest_request req;
    strata_error err;
    char buf[256];
    /* lines: one sample per line; inuse_space is a gauge in bytes */
    assert_int_equal(
        translate(text("a.b.inuse_space", "lines", "main;x\nmain;x\nmain;y"), &req, &err), 0);
    assert_string_equal(labels_of(&req, buf, sizeof buf), "service_name=a.b");
    assert_string_equal(type_of(&req, 0, buf, sizeof buf),
                        "memory:inuse_space:bytes:inuse_space:bytes");
    assert_int_equal(req.pprofs[0].n_samples, 3);
    assert_int_equal(pprof_sample_value(&req.pprofs[0], 1, 0), 1);
    ingest_request_free(&req);
    /* no format and a plain body: folded; an unknown suffix keeps the name and means cpu */
    assert_int_equal(translate(text("my.app", NULL, "main 2"), &req, &err), 0);
    assert_string_equal(labels_of(&req, buf, sizeof buf), "service_name=my.app");
    assert_string_equal(type_of(&req, 0, buf, sizeof buf),
                        "process_cpu:cpu:nanoseconds:cpu:nanoseconds:delta");
    assert_int_equal(pprof_sample_value(&req.pprofs[0], 0, 0), 2 * NS / 100);
    ingest_request_free(&req);
    /* mutex_duration: nanoseconds as given, not scaled; a service_name label wins */
    assert_int_equal(
        translate(text("svc.mutex_duration{service_name=real}", "folded", "m;l 7"), &req, &err), 0);
    assert_string_equal(labels_of(&req, buf, sizeof buf), "service_name=real");
    assert_string_equal(type_of(&req, 0, buf, sizeof buf),
                        "mutex:delay:nanoseconds:delay:nanoseconds:delta");
    assert_int_equal(pprof_sample_value(&req.pprofs[0], 0, 0), 7);
    ingest_request_free(&req);
}

/* A one-sample pprof with the given sample types (values 1, 2, ...). */
static void build_pprof(const char *const *types, size_t n, int64_t time_ns, bool gzip,
                        strata_buffer *out) {
    pprof_string strings[16] = {{"", 0}, {"count", 5}, {"main", 4}};
    pprof_value_type vt[8];
    int64_t values[8];
    for (size_t i = 0; i < n; i++) {
        strings[3 + i] = (pprof_string){types[i], (uint32_t)strlen(types[i])};
        vt[i] = (pprof_value_type){(int64_t)(3 + i), 1};
        values[i] = (int64_t)i + 1;
    }
    pprof_function fn = {.id = 1, .name = 2};
    pprof_line line = {.function_id = 1};
    pprof_location loc = {.id = 1, .line_count = 1};
    uint64_t loc_id = 1;
    pprof_sample sample = {.location_count = 1};
    pprof_profile p = {.sample_types = vt,
                       .n_sample_types = n,
                       .samples = &sample,
                       .n_samples = 1,
                       .sample_location_ids = &loc_id,
                       .n_sample_location_ids = 1,
                       .sample_values = values,
                       .locations = &loc,
                       .n_locations = 1,
                       .lines = &line,
                       .n_lines = 1,
                       .functions = &fn,
                       .n_functions = 1,
                       .strings = strings,
                       .n_strings = 3 + n,
                       .time_nanos = time_ns,
                       .period_type = vt[0],
                       .period = 1};
    strata_error err;
    assert_int_equal(pprof_encode(&p, gzip, out, &err), 0);
}

static void expect_pprof_metric(const char *const *types, size_t n, const char *metric) {
    strata_buffer body = STRATA_BUFFER_INIT;
    build_pprof(types, n, 0, true, &body);
    pyroscope_ingest_params p = {.name = "node{region=eu}",
                                 .format = "pprof",
                                 .content_type = "application/octet-stream",
                                 .body = body.data,
                                 .body_len = body.len};
    ingest_request req;
    strata_error err;
    assert_int_equal(translate(p, &req, &err), 0);
    assert_int_equal(req.n_profiles, n);
    assert_string_equal(req.profiles[0].type.name, metric);
    assert_int_equal(req.profiles[0].time_ns, FROM * NS); /* time_nanos was 0: from */
    char buf[128];
    assert_string_equal(labels_of(&req, buf, sizeof buf), "region=eu,service_name=node");
    ingest_request_free(&req);
    strata_buffer_free(&body);
}

static void test_pprof_body(void **state) {
    (void)state;
    const char *wall[] = {"samples", "wall", "cpu"};
    expect_pprof_metric(wall, 3, "wall");
    const char *cpu[] = {"samples", "cpu"};
    expect_pprof_metric(cpu, 2, "process_cpu");
    const char *heap[] = {"inuse_objects", "inuse_space"};
    expect_pprof_metric(heap, 2, "memory");
    const char *dotnet[] = {"alloc_samples", "alloc_size"};
    expect_pprof_metric(dotnet, 2, "memory");
    const char *go[] = {"goroutine"};
    expect_pprof_metric(go, 1, "goroutines");
    const char *odd[] = {"widgets"};
    expect_pprof_metric(odd, 1, "widgets");
    /* a time the profile has is kept */
    strata_buffer body = STRATA_BUFFER_INIT;
    build_pprof(cpu, 2, 5 * NS, false, &body);
    pyroscope_ingest_params p = {
        .name = "x", .format = "pprof", .body = body.data, .body_len = body.len};
    ingest_request req;
    strata_error err;
    assert_int_equal(translate(p, &req, &err), 0);
    assert_int_equal(req.profiles[0].time_ns, 5 * NS);
    ingest_request_free(&req);
    strata_buffer_free(&body);
}

static void multipart(strata_buffer *out, const strata_buffer *profile, const char *config,
                      const char *prev) {
    strata_buffer_append_str(out, "--BND\r\nContent-Disposition: form-data; name=\"profile\"; "
                                  "filename=\"profile.pprof\"\r\nContent-Type: "
                                  "application/octet-stream\r\n\r\n");
    strata_buffer_append(out, profile->data, profile->len);
    if (config != NULL)
        strata_buffer_appendf(out,
                              "\r\n--BND\r\nContent-Disposition: form-data; "
                              "name=\"sample_type_config\"; filename=\"c.json\"\r\n\r\n%s",
                              config);
    if (prev != NULL)
        strata_buffer_appendf(out,
                              "\r\n--BND\r\nContent-Disposition: form-data; "
                              "name=\"prev_profile\"\r\n\r\n%s",
                              prev);
    strata_buffer_append_str(out, "\r\n--BND--\r\n");
}

static void test_multipart_pprof(void **state) {
    (void)state;
    const char *types[] = {"contentions", "delay"};
    strata_buffer profile = STRATA_BUFFER_INIT, body = STRATA_BUFFER_INIT;
    build_pprof(types, 2, 0, true, &profile);
    multipart(&body, &profile,
              "{\"contentions\":{\"units\":\"lock_samples\",\"display-name\":\"block_count\"},"
              "\"delay\":{\"units\":\"lock_nanoseconds\",\"display-name\":\"block_duration\"}}",
              "");
    /* no format parameter: a multipart body is pprof (pyroscope-go) */
    pyroscope_ingest_params p = {.name = "go.app{pod=a}",
                                 .spy_name = "gospy",
                                 .content_type = "multipart/form-data; boundary=BND",
                                 .body = body.data,
                                 .body_len = body.len};
    ingest_request req;
    strata_error err;
    assert_int_equal(translate(p, &req, &err), 0);
    char buf[256];
    assert_string_equal(labels_of(&req, buf, sizeof buf),
                        "pod=a,pyroscope_spy=gospy,service_name=go.app");
    assert_int_equal(req.n_profiles, 2);
    assert_string_equal(type_of(&req, 1, buf, sizeof buf), "block:delay:count:contentions:count");
    assert_int_equal(pprof_sample_value(&req.pprofs[0], 0, 1), 2);
    ingest_request_free(&req);
    /* without display names contentions mean mutex */
    strata_buffer_reset(&body);
    multipart(&body, &profile, NULL, NULL);
    p.body = body.data;
    p.body_len = body.len;
    assert_int_equal(translate(p, &req, &err), 0);
    assert_string_equal(req.profiles[0].type.name, "mutex");
    ingest_request_free(&req);
    /* a previous profile (cumulative, not delta) is refused */
    strata_buffer_reset(&body);
    multipart(&body, &profile, NULL, "old");
    p.body = body.data;
    p.body_len = body.len;
    assert_int_equal(translate(p, &req, &err), -1);
    assert_non_null(strstr(err.message, "prev_profile"));
    strata_buffer_free(&profile);
    strata_buffer_free(&body);
}

static void test_refused(void **state) {
    (void)state;
    static const struct {
        const char *name, *format, *body, *from, *rate, *words;
    } cases[] = {
        {NULL, "folded", "a 1", NULL, NULL, "name parameter"},
        {"{a=b}", "folded", "a 1", NULL, NULL, "no application name"},
        {"app{a=b", "folded", "a 1", NULL, NULL, "end with '}'"},
        {"app{ab}", "folded", "a 1", NULL, NULL, "not key=value"},
        {"app{a=1,b=2,c=3,d=4,e=5,f=6,g=7,h=8,i=9}", "folded", "a 1", NULL, NULL, "more than 8"},
        {"app", "jfr", "", NULL, NULL, "format \"jfr\" is not supported"},
        {"app", "folded", "a;b", NULL, NULL, "folded line 1"},
        {"app", "folded", "a;b 1\na;b x", NULL, NULL, "folded line 2"},
        {"app", "folded", "a;b -3", NULL, NULL, "folded line 1"},
        {"app", "folded", "1;2;3;4;5;6;7;8;9 1", NULL, NULL, "9 frames"},
        {"app", "folded", "a 1", "yesterday", NULL, "from must be"},
        {"app", "folded", "a 1", NULL, "0", "sampleRate"},
        {"app", "pprof", "not a profile", NULL, NULL, "invalid pprof"},
        {"app{a.b!=1}", "folded", "a 1", NULL, NULL, "invalid label name"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pyroscope_ingest_params p = text(cases[i].name, cases[i].format, cases[i].body);
        p.from = cases[i].from;
        p.sample_rate = cases[i].rate;
        ingest_request req;
        strata_error err;
        strata_error_clear(&err);
        assert_int_equal(translate(p, &req, &err), -1);
        if (err.code != STRATA_INVALID_ARGUMENT && err.code != STRATA_RESOURCE_EXHAUSTED)
            fail_msg("case %zu: code %d", i, err.code);
        if (strstr(err.message, cases[i].words) == NULL)
            fail_msg("case %zu: \"%s\" lacks \"%s\"", i, err.message, cases[i].words);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_folded),     cmocka_unit_test(test_lines_and_suffixes),
        cmocka_unit_test(test_pprof_body), cmocka_unit_test(test_multipart_pprof),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
