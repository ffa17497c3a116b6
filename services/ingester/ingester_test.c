/*
 * ingester_test.c - WriteRaw parsing and validation, the agents registry, and the batcher's
 * acknowledge-after-durable contract against a real filesystem bucket.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agents.h"
#include "batcher.h"
#include "block/block_format.h"
#include "block/block_reader.h"
#include "bucket/bucket.h"
#include "bucket/bucket_backend.h"
#include "common/clock.h"
#include "config/config.h"
#include "ingester.h"
#include "metrics/metrics.h"
#include "parca/profilestore/v1alpha1/profilestore.pb-c.h"
#include "pprof/pprof.h"
#include "push/v1/push.pb-c.h"
#include "push_api.h"
#include "rpc/rpc.h"
#include "write_limits.h"
#include "write_raw.h"

/* ---- building requests ------------------------------------------------------------------- */

/* A two-sample-type CPU-like pprof: samples/count and cpu/nanoseconds, stacks main->work->leaf. */
static void build_pprof_leaf(strata_buffer *out, int64_t duration_ns, bool gzip,
                             int64_t zero_sample, const char *leaf) {
    const char *strings[] = {"",     "samples", "count", "cpu",   "nanoseconds",
                             "main", "work",    leaf,    "app.go"};
    pprof_profile p;
    memset(&p, 0, sizeof p);
    pprof_string strs[9];
    for (int i = 0; i < 9; i++) {
        strs[i].ptr = strings[i];
        strs[i].len = (uint32_t)strlen(strings[i]);
    }
    pprof_value_type types[2] = {{1, 2}, {3, 4}};
    pprof_function fns[3] = {{1, 5, 5, 8, 1}, {2, 6, 6, 8, 10}, {3, 7, 7, 8, 20}};
    pprof_line lines[3] = {{1, 3, 0}, {2, 12, 0}, {3, 22, 0}};
    pprof_location locs[3] = {
        {1, 0, 0x1000, 0, 1, false}, {2, 0, 0x2000, 1, 1, false}, {3, 0, 0x3000, 2, 1, false}};
    uint64_t loc_ids[5] = {3, 2, 1, 2, 1};
    int64_t values[4] = {5, 50000000, zero_sample, zero_sample * 10000000};
    pprof_sample samples[2] = {{0, 3, 0, 0, 0}, {3, 2, 2, 0, 0}};
    p.sample_types = types;
    p.n_sample_types = 2;
    p.samples = samples;
    p.n_samples = 2;
    p.sample_location_ids = loc_ids;
    p.n_sample_location_ids = 5;
    p.sample_values = values;
    p.locations = locs;
    p.n_locations = 3;
    p.lines = lines;
    p.n_lines = 3;
    p.functions = fns;
    p.n_functions = 3;
    p.strings = strs;
    p.n_strings = 9;
    p.time_nanos = 1700000000000000000;
    p.duration_nanos = duration_ns;
    p.period_type.type = 3;
    p.period_type.unit = 4;
    p.period = 10000000;
    strata_error err;
    assert_int_equal(pprof_encode(&p, gzip, out, &err), 0);
}

static void build_pprof(strata_buffer *out, int64_t duration_ns, bool gzip, int64_t zero_sample) {
    build_pprof_leaf(out, duration_ns, gzip, zero_sample, "leaf");
}

typedef struct test_series {
    const char *const *labels; /* name, value pairs, NULL-terminated */
    const strata_buffer *raws;
    size_t n_raws;
} test_series;

static void build_request(const test_series *series, size_t n_series, strata_buffer *out) {
    Parca__Profilestore__V1alpha1__RawProfileSeries s_pb[4], *s_ptrs[4];
    Parca__Profilestore__V1alpha1__LabelSet sets[4];
    Parca__Profilestore__V1alpha1__Label labels[4][8], *label_ptrs[4][8];
    Parca__Profilestore__V1alpha1__RawSample samples[4][4], *sample_ptrs[4][4];
    assert_true(n_series <= 4);
    for (size_t i = 0; i < n_series; i++) {
        parca__profilestore__v1alpha1__raw_profile_series__init(&s_pb[i]);
        parca__profilestore__v1alpha1__label_set__init(&sets[i]);
        size_t n = 0;
        for (; series[i].labels[2 * n] != NULL; n++) {
            parca__profilestore__v1alpha1__label__init(&labels[i][n]);
            labels[i][n].name = (char *)series[i].labels[2 * n];
            labels[i][n].value = (char *)series[i].labels[2 * n + 1];
            label_ptrs[i][n] = &labels[i][n];
        }
        sets[i].n_labels = n;
        sets[i].labels = label_ptrs[i];
        s_pb[i].labels = &sets[i];
        for (size_t j = 0; j < series[i].n_raws; j++) {
            parca__profilestore__v1alpha1__raw_sample__init(&samples[i][j]);
            samples[i][j].raw_profile.data = series[i].raws[j].data;
            samples[i][j].raw_profile.len = series[i].raws[j].len;
            sample_ptrs[i][j] = &samples[i][j];
        }
        s_pb[i].n_samples = series[i].n_raws;
        s_pb[i].samples = sample_ptrs[i];
        s_ptrs[i] = &s_pb[i];
    }
    Parca__Profilestore__V1alpha1__WriteRawRequest req =
        PARCA__PROFILESTORE__V1ALPHA1__WRITE_RAW_REQUEST__INIT;
    req.n_series = n_series;
    req.series = s_ptrs;
    size_t size = parca__profilestore__v1alpha1__write_raw_request__get_packed_size(&req);
    assert_int_equal(strata_buffer_reserve(out, size), 0);
    out->len = parca__profilestore__v1alpha1__write_raw_request__pack(&req, out->data);
}

static int parse(const test_series *series, size_t n, ingest_request *req,
                 ingest_reject_reason *reason, strata_error *err) {
    strata_buffer buf = STRATA_BUFFER_INIT;
    build_request(series, n, &buf);
    ingest_limits limits;
    ingest_limits_default(&limits);
    int rc = ingest_request_parse(buf.data, buf.len, &limits, 42, req, reason, err);
    strata_buffer_free(&buf);
    return rc;
}

/* ---- write_raw ---------------------------------------------------------------------------- */

static void test_parse_expands_sample_types(void **state) {
    (void)state;
    strata_buffer raw[2] = {STRATA_BUFFER_INIT, STRATA_BUFFER_INIT};
    build_pprof(&raw[0], 10 * STRATA_NS_PER_SEC, true, 0);
    build_pprof(&raw[1], 0, false, 3);
    const char *labels[] = {"job", "api", "__name__", "process_cpu", "instance", "h:1", NULL};
    test_series s = {labels, raw, 2};
    ingest_request req;
    ingest_reject_reason reason;
    strata_error err;
    assert_int_equal(parse(&s, 1, &req, &reason, &err), 0);
    assert_int_equal(reason, INGEST_REJECT_NONE);
    assert_int_equal(req.n_series, 1);
    assert_int_equal(req.series_labels[0].count, 2);                      /* __name__ removed */
    assert_string_equal(req.series_labels[0].labels[0].name, "instance"); /* sorted */
    assert_string_equal(req.series_labels[0].labels[1].value, "api");
    assert_int_equal(req.n_pprofs, 2);
    assert_int_equal(req.n_profiles, 4);
    const ingest_profile *p0 = &req.profiles[0], *p1 = &req.profiles[1], *p3 = &req.profiles[3];
    assert_string_equal(p0->type.name, "process_cpu");
    assert_string_equal(p0->type.sample_type, "samples");
    assert_string_equal(p0->type.sample_unit, "count");
    assert_string_equal(p0->type.period_type, "cpu");
    assert_string_equal(p0->type.period_unit, "nanoseconds");
    assert_true(p0->type.delta);
    assert_string_equal(p1->type.sample_type, "cpu");
    assert_false(p3->type.delta);       /* duration 0 */
    assert_int_equal(p0->n_samples, 1); /* the zero sample is not counted */
    assert_int_equal(p3->n_samples, 2);
    assert_int_equal(req.n_samples, 1 + 1 + 2 + 2);
    assert_true(p0->time_ns == 1700000000000000000);
    assert_int_equal(p0->period, 10000000);
    assert_null(req.node);
    ingest_request_free(&req);
    strata_buffer_free(&raw[0]);
    strata_buffer_free(&raw[1]);
}

static void expect_rejected(const char *const *labels, const uint8_t *raw, size_t raw_len,
                            ingest_reject_reason want_reason, strata_status want_code,
                            const char *needle) {
    strata_buffer rb = STRATA_BUFFER_INIT;
    if (raw == NULL)
        build_pprof(&rb, 0, true, 0);
    else
        assert_int_equal(strata_buffer_append(&rb, raw, raw_len), 0);
    test_series s = {labels, &rb, 1};
    ingest_request req;
    ingest_reject_reason reason;
    strata_error err;
    strata_error_clear(&err);
    assert_int_equal(parse(&s, 1, &req, &reason, &err), -1);
    assert_int_equal(reason, want_reason);
    assert_int_equal(err.code, want_code);
    if (strstr(err.message, needle) == NULL)
        fail_msg("message \"%s\" lacks \"%s\"", err.message, needle);
    assert_int_equal(req.n_profiles, 0);
    strata_buffer_free(&rb);
}

static void test_parse_rejects_bad_labels(void **state) {
    (void)state;
    const char *no_name[] = {"job", "api", NULL};
    expect_rejected(no_name, NULL, 0, INGEST_REJECT_INVALID_LABELS, STRATA_INVALID_ARGUMENT,
                    "series 0: the __name__ label (the profile name) is required");
    const char *bad_label[] = {"__name__", "cpu", "1job", "x", NULL};
    expect_rejected(bad_label, NULL, 0, INGEST_REJECT_INVALID_LABELS, STRATA_INVALID_ARGUMENT,
                    "1job");
    const char *dup_label[] = {"__name__", "cpu", "job", "x", "job", "y", NULL};
    expect_rejected(dup_label, NULL, 0, INGEST_REJECT_INVALID_LABELS, STRATA_INVALID_ARGUMENT,
                    "job");
    const char *bad_name[] = {"__name__", "process cpu", NULL};
    expect_rejected(bad_name, NULL, 0, INGEST_REJECT_INVALID_LABELS, STRATA_INVALID_ARGUMENT,
                    "not a valid profile name");
}

static void test_parse_rejects_bad_pprof(void **state) {
    (void)state;
    const char *labels[] = {"__name__", "cpu", NULL};
    static const uint8_t garbage[] = {0x0a, 0x05, 'g', 'a'};
    expect_rejected(labels, garbage, sizeof garbage, INGEST_REJECT_INVALID_PPROF,
                    STRATA_INVALID_ARGUMENT, "series 0 sample 0: invalid pprof");
    static const uint8_t bad_gzip[] = {0x1f, 0x8b, 0x08, 0x00, 0x01, 0x02};
    expect_rejected(labels, bad_gzip, sizeof bad_gzip, INGEST_REJECT_INVALID_PPROF,
                    STRATA_INVALID_ARGUMENT, "series 0 sample 0: invalid pprof");
}

static void test_parse_rejects_non_protobuf(void **state) {
    (void)state;
    static const uint8_t junk[] = {0xff, 0xff, 0xff};
    ingest_limits limits;
    ingest_limits_default(&limits);
    ingest_request req;
    ingest_reject_reason reason;
    strata_error err;
    assert_int_equal(ingest_request_parse(junk, sizeof junk, &limits, 0, &req, &reason, &err), -1);
    assert_int_equal(reason, INGEST_REJECT_MALFORMED_REQUEST);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
}

static void test_parse_label_limit(void **state) {
    (void)state;
    strata_buffer raw = STRATA_BUFFER_INIT;
    build_pprof(&raw, 0, false, 0);
    const char *labels[] = {"__name__", "cpu", "a", "1", "b", "2", "c", "3", NULL};
    test_series s = {labels, &raw, 1};
    strata_buffer buf = STRATA_BUFFER_INIT;
    build_request(&s, 1, &buf);
    ingest_limits limits;
    ingest_limits_default(&limits);
    limits.max_labels_per_series = 3;
    ingest_request req;
    ingest_reject_reason reason;
    strata_error err;
    assert_int_equal(ingest_request_parse(buf.data, buf.len, &limits, 0, &req, &reason, &err), -1);
    assert_non_null(strstr(err.message, "4 labels, more than the limit of 3"));
    strata_buffer_free(&buf);
    strata_buffer_free(&raw);
}

/* ---- strings on the wire ------------------------------------------------------------------ */

/* Appends a length-delimited field. protobuf-c cannot build strings with NUL inside, so these
 * requests are written byte by byte. */
static void put_len_field(strata_buffer *b, uint32_t field, const void *data, size_t len) {
    assert_int_equal(strata_buffer_append_uvarint(b, (uint64_t)field << 3 | 2), 0);
    assert_int_equal(strata_buffer_append_uvarint(b, len), 0);
    assert_int_equal(strata_buffer_append(b, data, len), 0);
}

typedef struct wire_label {
    const char *name;
    size_t name_len;
    const char *value;
    size_t value_len;
} wire_label;

#define WL(n, v)                                                                                   \
    { n, sizeof n - 1, v, sizeof v - 1 }

/* Appends a LabelSet message holding labels[0, n). */
static void put_label_set(strata_buffer *series, const wire_label *labels, size_t n) {
    strata_buffer set = STRATA_BUFFER_INIT, label = STRATA_BUFFER_INIT;
    for (size_t i = 0; i < n; i++) {
        strata_buffer_reset(&label);
        put_len_field(&label, 1, labels[i].name, labels[i].name_len);
        put_len_field(&label, 2, labels[i].value, labels[i].value_len);
        put_len_field(&set, 1, label.data, label.len);
    }
    put_len_field(series, 1, set.data, set.len);
    strata_buffer_free(&set);
    strata_buffer_free(&label);
}

/* Appends a RawProfileSeries (field 2 of WriteRawRequest) with the labels in one or two LabelSet
 * fields (split: the first set holds labels[0, split)) and one pprof. */
static void put_series(strata_buffer *req, const wire_label *labels, size_t n, size_t split,
                       const strata_buffer *pprof) {
    strata_buffer series = STRATA_BUFFER_INIT, sample = STRATA_BUFFER_INIT;
    put_label_set(&series, labels, split);
    if (split < n)
        put_label_set(&series, labels + split, n - split);
    put_len_field(&sample, 1, pprof->data, pprof->len);
    put_len_field(&series, 2, sample.data, sample.len);
    put_len_field(req, 2, series.data, series.len);
    strata_buffer_free(&series);
    strata_buffer_free(&sample);
}

static void expect_wire_rejected(const strata_buffer *request, ingest_reject_reason want_reason,
                                 const char *want_message) {
    ingest_limits limits;
    ingest_limits_default(&limits);
    ingest_request req;
    ingest_reject_reason reason;
    strata_error err;
    strata_error_clear(&err);
    assert_int_equal(
        ingest_request_parse(request->data, request->len, &limits, 0, &req, &reason, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_string_equal(err.message, want_message);
    assert_int_equal(reason, want_reason);
    assert_int_equal(req.n_profiles, 0);
    assert_int_equal(req.n_series, 0);
}

/* A NUL inside a label is refused, not cut: job="victim\0evil" must not land in job="victim", and
 * __name__="process_cpu\0junk" must not become process_cpu. Invalid UTF-8 anywhere is refused,
 * in a label or a pprof string, naming the field; nothing of the request is kept. */
static void test_parse_refuses_bad_strings(void **state) {
    (void)state;
    strata_buffer cpu = STRATA_BUFFER_INIT, bad_fn = STRATA_BUFFER_INIT;
    build_pprof(&cpu, 0, false, 0);
    build_pprof_leaf(&bad_fn, 0, true, 0,
                     "l\xff"
                     "af");
    static const struct {
        wire_label labels[3];
        size_t n, split;
        const char *message;
    } cases[] = {
        {{WL("__name__", "process_cpu"), WL("job", "victim\0evil")},
         2,
         2,
         "series 0 label \"job\" value: NUL byte at offset 6"},
        {{WL("__name__", "process_cpu\0junk"), WL("job", "victim")},
         2,
         2,
         "series 0 label \"__name__\" value: NUL byte at offset 11"},
        {{WL("__name__", "process_cpu"), WL("job", "\xff")},
         2,
         2,
         "series 0 label \"job\" value: invalid UTF-8 at offset 0"},
        {{WL("__name__", "process_cpu"), WL("jo\0b", "x")},
         2,
         2,
         "series 0 label 1 name: NUL byte at offset 2"},
        {{WL("__name__", "process_cpu"), WL("j\xc3", "x")},
         2,
         2,
         "series 0 label 1 name: invalid UTF-8 at offset 1"},
        /* In a second LabelSet field, which protobuf merges into the first. */
        {{WL("__name__", "process_cpu"), WL("pod", "p"), WL("job", "a\xed\xa0\x80")},
         3,
         1,
         "series 0 label \"job\" value: invalid UTF-8 at offset 1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        print_message("case: %s\n", cases[i].message);
        strata_buffer req = STRATA_BUFFER_INIT;
        put_series(&req, cases[i].labels, cases[i].n, cases[i].split, &cpu);
        expect_wire_rejected(&req, INGEST_REJECT_INVALID_LABELS, cases[i].message);
        strata_buffer_free(&req);
    }
    /* The second series is bad: the first, good, is not kept either. */
    const wire_label good[] = {WL("__name__", "process_cpu"), WL("job", "victim")};
    const wire_label evil[] = {WL("__name__", "process_cpu"), WL("job", "victim\0evil")};
    strata_buffer req = STRATA_BUFFER_INIT;
    put_series(&req, good, 2, 2, &cpu);
    put_series(&req, evil, 2, 2, &cpu);
    expect_wire_rejected(&req, INGEST_REJECT_INVALID_LABELS,
                         "series 1 label \"job\" value: NUL byte at offset 6");
    /* The deprecated tenant field is a string too. */
    strata_buffer_reset(&req);
    put_len_field(&req, 1, "t\xc0\xaf", 3);
    put_series(&req, good, 2, 2, &cpu);
    expect_wire_rejected(&req, INGEST_REJECT_INVALID_LABELS,
                         "tenant field: invalid UTF-8 at offset 1");
    /* A pprof string (the leaf function's name). */
    strata_buffer_reset(&req);
    put_series(&req, good, 2, 2, &cpu);
    put_series(&req, good, 2, 2, &bad_fn);
    expect_wire_rejected(&req, INGEST_REJECT_INVALID_PPROF,
                         "series 1 sample 0: invalid pprof: string 7 (function 2 name): invalid "
                         "UTF-8 at offset 1");
    /* A label field with the wrong wire type is malformed, as protobuf-c finds it. */
    static const uint8_t varint_label_set[] = {0x12, 0x02, 0x08, 0x01};
    strata_buffer_reset(&req);
    assert_int_equal(strata_buffer_append(&req, varint_label_set, sizeof varint_label_set), 0);
    expect_wire_rejected(&req, INGEST_REJECT_MALFORMED_REQUEST,
                         "request is not a valid WriteRawRequest protobuf");
    /* Valid UTF-8 beyond ASCII is stored byte for byte. */
    const wire_label utf8[] = {WL("__name__", "process_cpu"),
                               WL("job", "caf\xc3\xa9 \xf0\x9f\x94\xa5")};
    strata_buffer_reset(&req);
    put_series(&req, utf8, 2, 2, &cpu);
    ingest_limits limits;
    ingest_limits_default(&limits);
    ingest_request parsed;
    ingest_reject_reason reason;
    strata_error err;
    assert_int_equal(ingest_request_parse(req.data, req.len, &limits, 0, &parsed, &reason, &err),
                     0);
    assert_int_equal(parsed.n_series, 1);
    assert_string_equal(label_set_get(&parsed.series_labels[0], "job"),
                        "caf\xc3\xa9 \xf0\x9f\x94\xa5");
    assert_int_equal(parsed.n_profiles, 2);
    ingest_request_free(&parsed);
    strata_buffer_free(&req);
    strata_buffer_free(&cpu);
    strata_buffer_free(&bad_fn);
}

/* ---- agents ------------------------------------------------------------------------------- */

/* Push's series become WriteRaw's: labels in a LabelSet, profiles as they are, IDs dropped. */
static void test_push_is_write_raw(void **state) {
    (void)state;
    Push__V1__LabelPair name = PUSH__V1__LABEL_PAIR__INIT, app = PUSH__V1__LABEL_PAIR__INIT;
    name.name = "__name__";
    name.value = "process_cpu";
    app.name = "service_name";
    app.value = "shop";
    Push__V1__LabelPair *labels[2] = {&name, &app};
    Push__V1__RawSample a = PUSH__V1__RAW_SAMPLE__INIT, b = PUSH__V1__RAW_SAMPLE__INIT;
    a.raw_profile = (ProtobufCBinaryData){3, (uint8_t *)"abc"};
    a.id = "id-a";
    b.raw_profile = (ProtobufCBinaryData){2, (uint8_t *)"de"};
    Push__V1__RawSample *samples[2] = {&a, &b};
    Push__V1__RawProfileSeries series[2] = {PUSH__V1__RAW_PROFILE_SERIES__INIT,
                                            PUSH__V1__RAW_PROFILE_SERIES__INIT};
    series[0].labels = labels;
    series[0].n_labels = 2;
    series[0].samples = samples;
    series[0].n_samples = 2;
    series[1].labels = labels;
    series[1].n_labels = 1;
    Push__V1__RawProfileSeries *series_ptrs[2] = {&series[0], &series[1]};
    Push__V1__PushRequest push = PUSH__V1__PUSH_REQUEST__INIT;
    push.series = series_ptrs;
    push.n_series = 2;
    uint8_t packed[512];
    size_t len = push__v1__push_request__pack(&push, packed);
    strata_buffer out = STRATA_BUFFER_INIT;
    strata_error err;
    assert_int_equal(push_to_write_raw(packed, len, &out, &err), 0);
    Parca__Profilestore__V1alpha1__WriteRawRequest *raw =
        parca__profilestore__v1alpha1__write_raw_request__unpack(NULL, out.len, out.data);
    assert_non_null(raw);
    assert_int_equal(raw->n_series, 2);
    const Parca__Profilestore__V1alpha1__RawProfileSeries *s0 = raw->series[0];
    assert_int_equal(s0->labels->n_labels, 2);
    assert_string_equal(s0->labels->labels[1]->name, "service_name");
    assert_string_equal(s0->labels->labels[1]->value, "shop");
    assert_int_equal(s0->n_samples, 2);
    assert_int_equal(s0->samples[0]->raw_profile.len, 3);
    assert_memory_equal(s0->samples[0]->raw_profile.data, "abc", 3);
    assert_int_equal(s0->samples[0]->n_executable_info, 0); /* the ID is not executable info */
    assert_memory_equal(s0->samples[1]->raw_profile.data, "de", 2);
    assert_int_equal(raw->series[1]->labels->n_labels, 1);
    assert_int_equal(raw->series[1]->n_samples, 0);
    parca__profilestore__v1alpha1__write_raw_request__free_unpacked(raw, NULL);
    strata_buffer_reset(&out);
    assert_int_equal(push_to_write_raw((const uint8_t *)"\x0a\xff", 2, &out, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    strata_buffer_free(&out);
}

static void test_agents_registry(void **state) {
    (void)state;
    agent_registry *r;
    strata_error err;
    assert_int_equal(agent_registry_new(&r, &err), 0);
    int64_t now = 1000 * STRATA_NS_PER_SEC;
    assert_int_equal(agent_registry_record(r, "node-b", "ipv4:10.0.0.2:1", now, 5, NULL, &err), 0);
    assert_int_equal(agent_registry_record(r, "node-a", "ipv4:10.0.0.1:1", now, 7, "boom", &err),
                     0);
    assert_int_equal(agent_registry_record(r, NULL, "ipv4:10.0.0.3:1",
                                           now - AGENT_IDLE_EXPIRY_NS - 1, 1, NULL, &err),
                     0);
    strata_buffer out = STRATA_BUFFER_INIT;
    assert_int_equal(agent_registry_encode_response(r, now, &out, &err), 0);
    Parca__Profilestore__V1alpha1__AgentsResponse *resp =
        parca__profilestore__v1alpha1__agents_response__unpack(NULL, out.len, out.data);
    assert_non_null(resp);
    assert_int_equal(resp->n_agents, 2); /* the idle one expired */
    assert_string_equal(resp->agents[0]->id, "node-a ipv4:10.0.0.1:1");
    assert_string_equal(resp->agents[0]->last_error, "boom");
    assert_int_equal(resp->agents[0]->last_push->seconds, 1000);
    assert_int_equal(resp->agents[0]->last_push_duration->nanos, 7);
    assert_string_equal(resp->agents[1]->last_error, "");
    parca__profilestore__v1alpha1__agents_response__free_unpacked(resp, NULL);
    strata_buffer_free(&out);
    agent_registry_free(r);
}

/* ---- batcher ------------------------------------------------------------------------------ */

typedef struct ack_probe {
    pthread_mutex_t mu;
    bucket *store;
    const char *tenant;
    int acks;
    int failures;
    strata_status last_code;
    int meta_files_at_ack; /* meta.json objects visible when the ack ran */
} ack_probe;

static int count_meta(const char *key, void *ctx, strata_error *err) {
    (void)err;
    size_t len = strlen(key);
    if (len >= 9 && strcmp(key + len - 9, "meta.json") == 0)
        (*(int *)ctx)++;
    return 0;
}

static int count_meta_files(bucket *store, const char *tenant) {
    int n = 0;
    strata_error err;
    assert_int_equal(bucket_iterate(store, tenant, true, count_meta, &n, &err), 0);
    return n;
}

static void probe_ack(void *ctx, const strata_error *err) {
    ack_probe *p = ctx;
    pthread_mutex_lock(&p->mu);
    p->acks++;
    if (err != NULL) {
        p->failures++;
        p->last_code = err->code;
    }
    p->meta_files_at_ack = count_meta_files(p->store, p->tenant);
    pthread_mutex_unlock(&p->mu);
}

static char *make_temp_dir(void) {
    char tmpl[] = "/tmp/strata-ingester-test-XXXXXX";
    char *dir = mkdtemp(tmpl);
    assert_non_null(dir);
    return strdup(dir);
}

static void remove_temp_dir(char *dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
    free(dir);
}

static void wait_for_acks(ack_probe *probe, int want) {
    for (int i = 0; i < 500; i++) {
        pthread_mutex_lock(&probe->mu);
        int acks = probe->acks;
        pthread_mutex_unlock(&probe->mu);
        if (acks >= want)
            return;
        usleep(10 * 1000);
    }
    fail_msg("waited 5 s for %d acknowledgements", want);
}

static void parse_one(ingest_request *req) {
    strata_buffer raw = STRATA_BUFFER_INIT;
    build_pprof(&raw, 10 * STRATA_NS_PER_SEC, true, 0);
    const char *labels[] = {"__name__", "process_cpu", "job", "api", NULL};
    test_series s = {labels, &raw, 1};
    ingest_reject_reason reason;
    strata_error err;
    assert_int_equal(parse(&s, 1, req, &reason, &err), 0);
    strata_buffer_free(&raw);
}

static void test_batcher_acknowledges_after_durable(void **state) {
    (void)state;
    char *dir = make_temp_dir();
    bucket *store;
    strata_error err;
    assert_int_equal(bucket_open_filesystem(dir, NULL, &store, &err), 0);
    batcher_options opts;
    batcher_options_default(&opts);
    opts.flush_interval_ns = 50 * STRATA_NS_PER_MS;
    batcher *b;
    assert_int_equal(batcher_new(&opts, store, &b, &err), 0);
    assert_int_equal(batcher_start(b, &err), 0);
    ack_probe probe = {.store = store, .tenant = "team-a"};
    pthread_mutex_init(&probe.mu, NULL);
    ingest_request req;
    parse_one(&req);
    for (int i = 0; i < 3; i++)
        assert_int_equal(batcher_submit(b, "team-a", &req, probe_ack, &probe, &err), 0);
    ingest_request_free(&req);
    wait_for_acks(&probe, 3);
    assert_int_equal(probe.acks, 3);
    assert_int_equal(probe.failures, 0);
    assert_true(probe.meta_files_at_ack >= 1); /* durable before acknowledged */
    const batcher_stats *st = batcher_get_stats(b);
    assert_int_equal(atomic_load(&st->profiles_accepted), 6); /* 3 requests x 2 sample types */
    assert_true(atomic_load(&st->blocks_written) >= 1);
    batcher_free(b);
    bucket_close(store);
    pthread_mutex_destroy(&probe.mu);
    remove_temp_dir(dir);
}

static void test_batcher_reports_failed_upload(void **state) {
    (void)state;
    char *dir = make_temp_dir();
    /* A plain file where the tenant's directory must go makes every upload fail. */
    char path[512];
    snprintf(path, sizeof path, "%s/blocked", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fclose(f);
    bucket *store;
    strata_error err;
    assert_int_equal(bucket_open_filesystem(dir, NULL, &store, &err), 0);
    batcher_options opts;
    batcher_options_default(&opts);
    opts.flush_interval_ns = 20 * STRATA_NS_PER_MS;
    opts.upload_attempts = 2;
    opts.upload_backoff_ns = STRATA_NS_PER_MS;
    batcher *b;
    assert_int_equal(batcher_new(&opts, store, &b, &err), 0);
    assert_int_equal(batcher_start(b, &err), 0);
    ack_probe probe = {.store = store, .tenant = "ok"};
    pthread_mutex_init(&probe.mu, NULL);
    ingest_request req;
    parse_one(&req);
    assert_int_equal(batcher_submit(b, "blocked", &req, probe_ack, &probe, &err), 0);
    ingest_request_free(&req);
    batcher_stop(b); /* flushes and acknowledges before returning */
    assert_int_equal(probe.acks, 1);
    assert_int_equal(probe.failures, 1);
    assert_int_equal(probe.last_code, STRATA_UNAVAILABLE);
    const batcher_stats *st = batcher_get_stats(b);
    assert_int_equal(atomic_load(&st->upload_failures), 2);
    assert_int_equal(atomic_load(&st->flush_failures), 1);
    /* After stop, submissions are refused. */
    parse_one(&req);
    assert_int_equal(batcher_submit(b, "ok", &req, probe_ack, &probe, &err), -1);
    assert_int_equal(err.code, STRATA_UNAVAILABLE);
    ingest_request_free(&req);
    batcher_free(b);
    bucket_close(store);
    pthread_mutex_destroy(&probe.mu);
    remove_temp_dir(dir);
}

/* A FILESYSTEM bucket whose every upload takes upload_ms: a slow object store. */
typedef struct slow_bucket {
    void *fs;
    int upload_ms;
} slow_bucket;

static int slow_upload(void *impl, const char *key, const bucket_upload_body *body,
                       strata_error *err) {
    slow_bucket *sb = impl;
    usleep((useconds_t)sb->upload_ms * 1000);
    return bucket_filesystem_ops.upload(sb->fs, key, body, err);
}

static int slow_iterate(void *impl, bucket_list_request *req, bucket_iter_fn fn, void *ctx,
                        strata_error *err) {
    slow_bucket *sb = impl;
    return bucket_filesystem_ops.iterate(sb->fs, req, fn, ctx, err);
}

static void slow_close(void *impl) {
    slow_bucket *sb = impl;
    bucket_filesystem_ops.close(sb->fs);
}

static const bucket_backend_ops slow_ops = {
    .type = "SLOW", .upload = slow_upload, .iterate = slow_iterate, .close = slow_close};

typedef struct timed_ack {
    pthread_mutex_t mu;
    int acks, failures;
    int64_t worst_ns; /* longest submit -> acknowledgement */
} timed_ack;

typedef struct timed_submit {
    timed_ack *probe;
    int64_t submitted_ns;
} timed_submit;

static void timed_ack_fn(void *ctx, const strata_error *err) {
    timed_submit *t = ctx;
    int64_t took = strata_monotonic_ns() - t->submitted_ns;
    pthread_mutex_lock(&t->probe->mu);
    t->probe->acks++;
    t->probe->failures += err != NULL;
    if (took > t->probe->worst_ns)
        t->probe->worst_ns = took;
    pthread_mutex_unlock(&t->probe->mu);
}

/* Group commit on a fixed beat: with a block's upload (data, then meta.json) taking the whole
 * 1 s flush interval, a write waits at most for the next cut (<= 1 s) plus its block's upload
 * (1 s). Flushing an interval after the previous flush ended (the ingester before this) made a
 * write that arrived just after a cut wait for that upload, a whole interval and its own upload:
 * 3 s. */
static void test_batcher_flushes_on_a_beat(void **state) {
    (void)state;
    char *dir = make_temp_dir();
    slow_bucket sb = {.upload_ms = 500};
    strata_error err;
    assert_int_equal(bucket_filesystem_new(dir, &sb.fs, &err), 0);
    bucket *store;
    assert_int_equal(bucket_new(&slow_ops, &sb, NULL, &store, &err), 0);
    batcher_options opts;
    batcher_options_default(&opts);
    opts.flush_interval_ns = STRATA_NS_PER_SEC;
    batcher *b;
    assert_int_equal(batcher_new(&opts, store, &b, &err), 0);
    assert_int_equal(batcher_start(b, &err), 0);
    timed_ack probe = {.acks = 0};
    pthread_mutex_init(&probe.mu, NULL);
    ingest_request req;
    parse_one(&req);
    enum { N = 100 }; /* one write every 50 ms for 5 s */
    timed_submit *subs = calloc(N, sizeof *subs);
    assert_non_null(subs);
    for (int i = 0; i < N; i++) {
        subs[i] = (timed_submit){.probe = &probe, .submitted_ns = strata_monotonic_ns()};
        assert_int_equal(batcher_submit(b, "team-a", &req, timed_ack_fn, &subs[i], &err), 0);
        usleep(50 * 1000);
    }
    ingest_request_free(&req);
    batcher_stop(b);
    assert_int_equal(probe.acks, N);
    assert_int_equal(probe.failures, 0);
    print_message("worst acknowledgement %lld ms (flush 1 s, upload 2 x 0.5 s)\n",
                  (long long)(probe.worst_ns / STRATA_NS_PER_MS));
    /* 2 s by the beat, 3 s without it: 2.5 s splits them with 0.5 s to spare either way */
    assert_true(probe.worst_ns < 2500 * STRATA_NS_PER_MS);
    batcher_free(b);
    bucket_close(store);
    free(subs);
    pthread_mutex_destroy(&probe.mu);
    remove_temp_dir(dir);
}

typedef struct block_list {
    char keys[8][256];
    size_t n;
} block_list;

static int collect_data_key(const char *key, void *ctx, strata_error *err) {
    (void)err;
    block_list *l = ctx;
    size_t len = strlen(key), suffix = strlen(BLOCK_DATA_FILE);
    if (len >= suffix && strcmp(key + len - suffix, BLOCK_DATA_FILE) == 0 && l->n < 8)
        snprintf(l->keys[l->n++], sizeof l->keys[0], "%s", key);
    return 0;
}

static int compare_keys(const void *a, const void *b) {
    return strcmp(a, b);
}

/* "fn,fn,..;total" of one block: its function table in order, and the sum of its profiles. */
static void block_summary(bucket *store, const char *key, char *out, size_t cap) {
    strata_buffer data = STRATA_BUFFER_INIT;
    strata_error err;
    assert_int_equal(bucket_get(store, key, &data, &err), 0);
    block_memory_source src = {data.data, data.len};
    block_reader *r;
    assert_int_equal(block_reader_open(block_memory_fetch, &src, src.len, NULL, &r, &err), 0);
    out[0] = '\0';
    uint64_t n = block_reader_row_count(r, BLOCK_TABLE_FUNCTIONS);
    for (uint32_t i = 0; i < n; i++) {
        block_function f;
        assert_int_equal(block_reader_function(r, i, &f, &err), 0);
        strncat(out, f.name, cap - strlen(out) - 1);
        strncat(out, ",", cap - strlen(out) - 1);
    }
    block_profile *p = NULL;
    size_t np = 0;
    assert_int_equal(block_reader_profiles(r, NULL, 0, INT64_MIN, INT64_MAX, &p, &np, &err), 0);
    int64_t total = 0;
    for (size_t i = 0; i < np; i++)
        total += p[i].total;
    char tail[64];
    snprintf(tail, sizeof tail, ";%zu profiles;%lld", np, (long long)total);
    strncat(out, tail, cap - strlen(out) - 1);
    free(p);
    block_reader_close(r);
    strata_buffer_free(&data);
}

/* One tenant's writer lives across flushes and keeps its dictionary, yet each block holds only
 * the functions its own profiles use; with a tiny max_symbol_bytes the dictionary is dropped at
 * every cut, with the same blocks. */
static void run_blocks_across_flushes(uint64_t max_symbol_bytes, uint64_t want_resets) {
    char *dir = make_temp_dir();
    bucket *store;
    strata_error err;
    assert_int_equal(bucket_open_filesystem(dir, NULL, &store, &err), 0);
    batcher_options opts;
    batcher_options_default(&opts);
    opts.flush_interval_ns = 20 * STRATA_NS_PER_MS;
    opts.max_symbol_bytes = max_symbol_bytes;
    batcher *b;
    assert_int_equal(batcher_new(&opts, store, &b, &err), 0);
    assert_int_equal(batcher_start(b, &err), 0);
    ack_probe probe = {.store = store, .tenant = "team-a"};
    pthread_mutex_init(&probe.mu, NULL);
    const char *leaves[] = {"leaf", "other", "leaf"};
    for (int i = 0; i < 3; i++) {
        strata_buffer raw = STRATA_BUFFER_INIT;
        build_pprof_leaf(&raw, 10 * STRATA_NS_PER_SEC, true, 0, leaves[i]);
        const char *labels[] = {"__name__", "process_cpu", "job", "api", NULL};
        test_series ts = {labels, &raw, 1};
        ingest_request req;
        ingest_reject_reason reason;
        assert_int_equal(parse(&ts, 1, &req, &reason, &err), 0);
        assert_int_equal(batcher_submit(b, "team-a", &req, probe_ack, &probe, &err), 0);
        ingest_request_free(&req);
        strata_buffer_free(&raw);
        wait_for_acks(&probe, i + 1); /* so each request has a block of its own */
        usleep(2 * 1000);
    }
    assert_int_equal(probe.failures, 0);
    batcher_stop(b);
    const batcher_stats *st = batcher_get_stats(b);
    assert_int_equal(atomic_load(&st->blocks_written), 3);
    assert_int_equal(atomic_load(&st->symbol_resets), want_resets);
    block_list blocks = {0};
    assert_int_equal(bucket_iterate(store, "team-a", true, collect_data_key, &blocks, &err), 0);
    assert_int_equal(blocks.n, 3);
    qsort(blocks.keys, blocks.n, sizeof blocks.keys[0], compare_keys); /* ULIDs sort by time */
    const char *want[] = {
        "main,work,leaf,;2 profiles;50000005",
        "main,work,other,;2 profiles;50000005",
        "main,work,leaf,;2 profiles;50000005",
    };
    for (size_t i = 0; i < 3; i++) {
        char got[512];
        block_summary(store, blocks.keys[i], got, sizeof got);
        assert_string_equal(got, want[i]);
    }
    batcher_free(b);
    bucket_close(store);
    pthread_mutex_destroy(&probe.mu);
    remove_temp_dir(dir);
}

static void test_batcher_keeps_dictionary_across_flushes(void **state) {
    (void)state;
    run_blocks_across_flushes(256u << 20, 0);
    run_blocks_across_flushes(1, 3);
}

/* ---- per-tenant limits --------------------------------------------------------------------- */

typedef struct top_config {
    ingester_config ingester;
} top_config;

static const config_field top_fields[] = {
    {.key = "ingester",
     .kind = CONFIG_STRUCT,
     .offset = offsetof(top_config, ingester),
     .fields = ingester_config_fields},
    {.key = NULL},
};

static int decode_top(const char *yaml, top_config *out, strata_error *err) {
    config_document *doc;
    if (config_load_string("strata.yaml", yaml, strlen(yaml), &doc, err) != 0)
        return -1;
    int rc = config_decode_document(doc, top_fields, out, err);
    config_document_free(doc);
    return rc;
}

static void test_limits_config_keys(void **state) {
    (void)state;
    top_config c;
    strata_error err;
    assert_int_equal(decode_top("ingester: {}", &c, &err), 0);
    assert_true(c.ingester.limits.ingestion_rate_samples == 0);
    assert_true(c.ingester.limits.max_active_series == 0);
    assert_true(c.ingester.limits.active_series_window_ns == 600 * STRATA_NS_PER_SEC);
    assert_int_equal(c.ingester.overrides.count, 0);
    config_free(top_fields, &c);
    assert_int_equal(decode_top("ingester:\n"
                                "  limits: {ingestion_rate_samples: 100000, max_active_series: 5}\n"
                                "  overrides:\n"
                                "    team-a: {ingestion_rate_samples: 10}\n",
                                &c, &err),
                     0);
    limits_values v;
    limits_resolve(&c.ingester.limits, &c.ingester.overrides, "team-a", &v);
    assert_true(v.ingestion_rate_samples == 10 && v.ingestion_burst_samples == 100);
    assert_true(v.max_active_series == 5);
    config_free(top_fields, &c);
    assert_int_equal(
        decode_top("ingester:\n  overrides:\n    team a: {max_active_series: 1}\n", &c, &err), -1);
    assert_string_equal(err.message,
                        "strata.yaml:3:5: ingester.overrides: tenant \"team a\" is not valid: a "
                        "tenant is 1-150 characters of [A-Za-z0-9_.-], not \".\" or \"..\"");
    config_free(top_fields, &c);
    assert_int_equal(decode_top("ingester:\n  limits: {ingestion_rate: 1}\n", &c, &err), -1);
    assert_non_null(strstr(err.message, "strata.yaml:2:12: ingester.limits: unknown key "
                                        "\"ingestion_rate\""));
    config_free(top_fields, &c);
}

static limits_enforcer *enforcer(const char *yaml) {
    top_config c;
    strata_error err;
    if (decode_top(yaml, &c, &err) != 0)
        fail_msg("%s", err.message);
    limits_enforcer *l;
    assert_int_equal(limits_new(&c.ingester.limits, &c.ingester.overrides, &l, &err), 0);
    config_free(top_fields, &c);
    return l;
}

/* A request of n_series series (job=<job><i>, __name__ name), each with one CPU pprof of two
 * samples, one of them all zeros. */
static void parse_jobs(const char *name, const char *job, size_t n_series, ingest_request *req) {
    strata_buffer raw = STRATA_BUFFER_INIT;
    build_pprof(&raw, 10 * STRATA_NS_PER_SEC, true, 0);
    char values[4][32];
    const char *labels[4][5];
    test_series s[4];
    for (size_t i = 0; i < n_series; i++) {
        snprintf(values[i], sizeof values[i], "%s%zu", job, i);
        labels[i][0] = "__name__";
        labels[i][1] = name;
        labels[i][2] = "job";
        labels[i][3] = values[i];
        labels[i][4] = NULL;
        s[i] = (test_series){labels[i], &raw, 1};
    }
    ingest_reject_reason reason;
    strata_error err;
    assert_int_equal(parse(s, n_series, req, &reason, &err), 0);
    strata_buffer_free(&raw);
}

static void expect_admit(limits_enforcer *l, const char *tenant, const ingest_request *req,
                         int64_t now, limits_reason want_reason, const char *want_message) {
    limits_reason reason;
    strata_error err;
    strata_error_clear(&err);
    int rc = ingest_request_admit(l, tenant, req, now, &reason, &err);
    assert_int_equal(reason, want_reason);
    if (want_message == NULL) {
        if (rc != 0)
            fail_msg("refused: %s", err.message);
        return;
    }
    assert_int_equal(rc, -1);
    assert_int_equal(err.code, STRATA_RESOURCE_EXHAUSTED);
    assert_string_equal(err.message, want_message);
}

static void test_admit_counts_pprof_samples(void **state) {
    (void)state;
    ingest_request req;
    parse_jobs("process_cpu", "api", 2, &req);
    /* Two pprofs of two samples, one all zeros: 2 pprof samples (4 stored, one per type). */
    assert_int_equal(req.n_pprof_samples, 2);
    assert_int_equal(req.n_samples, 4);
    limits_enforcer *l = enforcer("ingester: {limits: {ingestion_rate_samples: 1, "
                                  "ingestion_burst_samples: 3}}");
    int64_t t0 = 1000 * STRATA_NS_PER_SEC;
    expect_admit(l, "team-a", &req, t0, LIMITS_NONE, NULL);
    expect_admit(l, "team-a", &req, t0, LIMITS_RATE,
                 "tenant team-a: ingestion rate limit 1 samples/s (burst 3) exceeded: the request "
                 "has 2 samples, 1 are available (the rate refills them)");
    expect_admit(l, "team-a", &req, t0 + STRATA_NS_PER_SEC, LIMITS_NONE, NULL);
    expect_admit(l, "team-b", &req, t0, LIMITS_NONE, NULL);
    limits_free(l);
    ingest_request_free(&req);
}

static void test_admit_counts_series_per_profile_type(void **state) {
    (void)state;
    ingest_request two_jobs, other_job, other_name;
    parse_jobs("process_cpu", "api", 2, &two_jobs);  /* job=api0, api1: 2 x 2 sample types */
    parse_jobs("process_cpu", "web", 1, &other_job); /* job=web0 */
    parse_jobs("memory", "api", 1, &other_name);     /* job=api0 under another profile name */
    limits_enforcer *l = enforcer("ingester:\n"
                                  "  limits: {max_active_series: 4, active_series_window: 1m}\n"
                                  "  overrides: {big: {max_active_series: 0}}\n");
    int64_t t0 = 1000 * STRATA_NS_PER_SEC;
    expect_admit(l, "team-a", &two_jobs, t0, LIMITS_NONE, NULL);
    assert_int_equal(limits_tenant_series(l, "team-a"), 4);
    expect_admit(l, "team-a", &other_job, t0, LIMITS_SERIES,
                 "tenant team-a: active series limit 4 exceeded: 4 series active within 1m, the "
                 "request adds 2");
    expect_admit(l, "team-a", &other_name, t0, LIMITS_SERIES,
                 "tenant team-a: active series limit 4 exceeded: 4 series active within 1m, the "
                 "request adds 2");
    expect_admit(l, "team-a", &two_jobs, t0 + STRATA_NS_PER_SEC, LIMITS_NONE, NULL); /* known */
    expect_admit(l, "big", &other_job, t0, LIMITS_NONE, NULL);
    expect_admit(l, "big", &two_jobs, t0, LIMITS_NONE, NULL);
    /* After the window the old series are gone and the new ones fit. */
    expect_admit(l, "team-a", &other_job, t0 + 62 * STRATA_NS_PER_SEC, LIMITS_NONE, NULL);
    expect_admit(l, "team-a", &other_name, t0 + 62 * STRATA_NS_PER_SEC, LIMITS_NONE, NULL);
    assert_int_equal(limits_tenant_series(l, "team-a"), 4);
    limits_free(l);
    ingest_request_free(&two_jobs);
    ingest_request_free(&other_job);
    ingest_request_free(&other_name);
}

/* WriteRaw through gRPC: over its limit a tenant's request is refused with RESOURCE_EXHAUSTED,
 * counted, and nothing of it is stored; another tenant writes on. */
static void test_write_raw_over_limit_is_refused_and_counted(void **state) {
    (void)state;
    char *dir = make_temp_dir();
    bucket *store;
    strata_error err;
    assert_int_equal(bucket_open_filesystem(dir, NULL, &store, &err), 0);
    metrics_registry *registry = metrics_registry_new(&err);
    assert_non_null(registry);
    top_config c;
    assert_int_equal(decode_top("ingester:\n"
                                "  flush_interval: 20ms\n"
                                "  overrides:\n"
                                "    low: {ingestion_rate_samples: 1, ingestion_burst_samples: 1}\n"
                                "    few: {max_active_series: 2}\n",
                                &c, &err),
                     0);
    ingester *ing;
    assert_int_equal(ingester_new(&c.ingester, store, registry, &ing, &err), 0);
    config_free(top_fields, &c); /* the ingester keeps its own copy of the limits */
    rpc_server *server =
        rpc_server_new(&(rpc_server_options){.listen_address = "127.0.0.1:0"}, &err);
    assert_non_null(server);
    assert_int_equal(ingester_register(ing, server, &err), 0);
    assert_int_equal(ingester_start(ing, &err), 0);
    assert_int_equal(rpc_server_start(server, &err), 0);
    char target[64];
    snprintf(target, sizeof target, "127.0.0.1:%d", rpc_server_port(server));
    rpc_channel *ch = rpc_channel_new(target, NULL, &err);
    assert_non_null(ch);

    strata_buffer one = STRATA_BUFFER_INIT, two = STRATA_BUFFER_INIT, raw = STRATA_BUFFER_INIT;
    build_pprof(&raw, 10 * STRATA_NS_PER_SEC, true, 0);
    const char *a[] = {"__name__", "process_cpu", "job", "a", NULL};
    const char *b[] = {"__name__", "process_cpu", "job", "b", NULL};
    test_series sa = {a, &raw, 1}, sab[2] = {{a, &raw, 1}, {b, &raw, 1}};
    build_request(&sa, 1, &one); /* 1 pprof sample, 2 series */
    build_request(sab, 2, &two); /* 2 pprof samples, 4 series */
    strata_buffer resp = STRATA_BUFFER_INIT;
    rpc_metadata low = {"x-scope-orgid", "low", 3}, few = {"x-scope-orgid", "few", 3},
                 other = {"x-scope-orgid", "other", 5};
    int64_t timeout = 10 * STRATA_NS_PER_SEC;
    /* "low": 2 samples against a burst of 1. */
    assert_int_equal(rpc_call_unary(ch, INGESTER_WRITE_RAW_METHOD, two.data, two.len, &low, 1,
                                    timeout, &resp, &err),
                     -1);
    assert_int_equal(err.code, STRATA_RESOURCE_EXHAUSTED);
    assert_string_equal(err.message, "tenant low: ingestion rate limit 1 samples/s (burst 1) "
                                     "exceeded: the request has 2 samples, more than the burst");
    /* "few": 2 series fit, 4 do not. */
    assert_int_equal(rpc_call_unary(ch, INGESTER_WRITE_RAW_METHOD, one.data, one.len, &few, 1,
                                    timeout, &resp, &err),
                     0);
    assert_int_equal(rpc_call_unary(ch, INGESTER_WRITE_RAW_METHOD, two.data, two.len, &few, 1,
                                    timeout, &resp, &err),
                     -1);
    assert_int_equal(err.code, STRATA_RESOURCE_EXHAUSTED);
    assert_string_equal(err.message, "tenant few: active series limit 2 exceeded: 2 series active "
                                     "within 10m, the request adds 2");
    /* Another tenant is not limited. */
    assert_int_equal(rpc_call_unary(ch, INGESTER_WRITE_RAW_METHOD, two.data, two.len, &other, 1,
                                    timeout, &resp, &err),
                     0);
    assert_int_equal(count_meta_files(store, "low"), 0); /* nothing of the refused one */
    assert_int_equal(count_meta_files(store, "few"), 1); /* only the admitted request */
    assert_int_equal(count_meta_files(store, "other"), 1);

    strata_buffer text = STRATA_BUFFER_INIT;
    assert_int_equal(metrics_registry_render(registry, &text, &err), 0);
    assert_int_equal(strata_buffer_append(&text, "", 1), 0);
    const char *want[] = {
        "strata_ingester_limited_requests_total{reason=\"rate\"} 1\n",
        "strata_ingester_limited_requests_total{reason=\"series\"} 1\n",
        "strata_ingester_limited_samples_total{reason=\"rate\"} 2\n",
        "strata_ingester_limited_samples_total{reason=\"series\"} 2\n",
        "strata_ingester_limits_tenants 2\n",       /* low, few; not other */
        "strata_ingester_limits_active_series 2\n", /* few's */
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (strstr((const char *)text.data, want[i]) == NULL)
            fail_msg("/metrics lacks %s", want[i]);

    /* A reload that lifts "low"'s limit lets the request through. */
    assert_int_equal(decode_top("ingester: {}", &c, &err), 0);
    assert_int_equal(ingester_apply_limits(ing, &c.ingester, &err), 0);
    config_free(top_fields, &c);
    assert_int_equal(rpc_call_unary(ch, INGESTER_WRITE_RAW_METHOD, two.data, two.len, &low, 1,
                                    timeout, &resp, &err),
                     0);
    assert_int_equal(count_meta_files(store, "low"), 1);

    rpc_channel_free(ch);
    rpc_server_shutdown(server, STRATA_NS_PER_SEC);
    ingester_stop(ing);
    ingester_free(ing);
    metrics_registry_free(registry);
    bucket_close(store);
    strata_buffer_free(&text);
    strata_buffer_free(&resp);
    strata_buffer_free(&one);
    strata_buffer_free(&two);
    strata_buffer_free(&raw);
    remove_temp_dir(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_expands_sample_types),
        cmocka_unit_test(test_parse_rejects_bad_labels),
        cmocka_unit_test(test_parse_rejects_bad_pprof),
        cmocka_unit_test(test_parse_rejects_non_protobuf),
        cmocka_unit_test(test_parse_label_limit),
        cmocka_unit_test(test_parse_refuses_bad_strings),
        cmocka_unit_test(test_push_is_write_raw),
        cmocka_unit_test(test_agents_registry),
        cmocka_unit_test(test_batcher_acknowledges_after_durable),
        cmocka_unit_test(test_batcher_reports_failed_upload),
        cmocka_unit_test(test_batcher_keeps_dictionary_across_flushes),
        cmocka_unit_test(test_batcher_flushes_on_a_beat),
        cmocka_unit_test(test_limits_config_keys),
        cmocka_unit_test(test_admit_counts_pprof_samples),
        cmocka_unit_test(test_admit_counts_series_per_profile_type),
        cmocka_unit_test(test_write_raw_over_limit_is_refused_and_counted),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
