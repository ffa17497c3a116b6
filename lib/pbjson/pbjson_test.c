/*
 * pbjson_test.c - the proto3 JSON mapping on Parca's own messages: what a Connect JSON client
 * sends decodes to the message grpcio would send, answers encode as protojson writes them, round
 * trips are exact, and malformed JSON is refused naming the field.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "parca/query/v1alpha1/query.pb-c.h"
#include "pbjson/pbjson.h"

typedef Parca__Query__V1alpha1__QueryRequest QueryRequest;

static const ProtobufCMessageDescriptor *const QR =
    &parca__query__v1alpha1__query_request__descriptor;

static QueryRequest *decode(const char *json) {
    strata_buffer bin = STRATA_BUFFER_INIT;
    strata_error err;
    if (pbjson_decode(QR, json, strlen(json), &bin, &err) != 0)
        fail_msg("%s", err.message);
    QueryRequest *r = parca__query__v1alpha1__query_request__unpack(NULL, bin.len, bin.data);
    assert_non_null(r);
    strata_buffer_free(&bin);
    return r;
}

static char *encode(const ProtobufCMessage *m) {
    size_t size = protobuf_c_message_get_packed_size(m);
    uint8_t *bin = malloc(size + 1);
    assert_non_null(bin);
    protobuf_c_message_pack(m, bin);
    strata_buffer json = STRATA_BUFFER_INIT;
    strata_error err;
    assert_int_equal(pbjson_encode(m->descriptor, bin, size, &json, &err), 0);
    free(bin);
    assert_int_equal(strata_buffer_append_byte(&json, 0), 0);
    return (char *)json.data;
}

static void test_query_request(void **state) {
    (void)state;
    QueryRequest *r = decode(
        "{\"mode\":\"MODE_MERGE\",\"reportType\":\"REPORT_TYPE_TOP\","
        "\"merge\":{\"query\":\"process_cpu:samples:count:cpu:nanoseconds:delta{}\","
        "\"start\":\"2026-01-01T00:00:00Z\",\"end\":\"2026-01-01T01:00:00.5+01:00\"},"
        "\"node_trim_threshold\":0.5,\"invertCallStack\":true,"
        "\"filter\":[{\"stackFilter\":{\"criteria\":{\"functionName\":{\"contains\":\"x\"}}}}],"
        "\"groupBy\":{\"fields\":[\"function_name\",\"labels.job\"]}}");
    assert_int_equal(r->mode, PARCA__QUERY__V1ALPHA1__QUERY_REQUEST__MODE__MODE_MERGE);
    assert_int_equal(r->report_type,
                     PARCA__QUERY__V1ALPHA1__QUERY_REQUEST__REPORT_TYPE__REPORT_TYPE_TOP);
    assert_int_equal(r->options_case, PARCA__QUERY__V1ALPHA1__QUERY_REQUEST__OPTIONS_MERGE);
    assert_string_equal(r->merge->query, "process_cpu:samples:count:cpu:nanoseconds:delta{}");
    assert_int_equal(r->merge->start->seconds, 1767225600);
    assert_int_equal(r->merge->end->seconds, 1767225600);
    assert_int_equal(r->merge->end->nanos, 500000000);
    assert_true(r->_node_trim_threshold_case != 0);
    assert_true(r->node_trim_threshold == 0.5);
    assert_true(r->invert_call_stack);
    assert_int_equal(r->n_filter, 1);
    assert_string_equal(r->filter[0]->stack_filter->criteria->function_name->contains, "x");
    assert_int_equal(r->group_by->n_fields, 2);
    assert_string_equal(r->group_by->fields[1], "labels.job");
    /* and back: lowerCamelCase, enums by name, times in RFC 3339, defaults left out */
    char *json = encode(&r->base);
    assert_non_null(strstr(json, "\"mode\":\"MODE_MERGE\""));
    assert_non_null(strstr(json, "\"reportType\":\"REPORT_TYPE_TOP\""));
    assert_non_null(strstr(json, "\"start\":\"2026-01-01T00:00:00.000000000Z\""));
    assert_non_null(strstr(json, "\"nodeTrimThreshold\":0.5"));
    assert_non_null(strstr(json, "\"invertCallStack\":true"));
    assert_null(strstr(json, "sandwich"));
    QueryRequest *again = decode(json);
    char *json2 = encode(&again->base);
    assert_string_equal(json, json2);
    free(json);
    free(json2);
    parca__query__v1alpha1__query_request__free_unpacked(again, NULL);
    parca__query__v1alpha1__query_request__free_unpacked(r, NULL);
}

static void test_response_encoding(void **state) {
    (void)state;
    Parca__Query__V1alpha1__QueryResponse resp = PARCA__QUERY__V1ALPHA1__QUERY_RESPONSE__INIT;
    resp.total = 9007199254740993LL; /* beyond a double's precision: a string */
    resp.report_case = PARCA__QUERY__V1ALPHA1__QUERY_RESPONSE__REPORT_PPROF;
    uint8_t gz[3] = {0x1f, 0x8b, 0xff};
    resp.pprof.data = gz;
    resp.pprof.len = 3;
    char *json = encode(&resp.base);
    assert_string_equal(json, "{\"pprof\":\"H4v/\",\"total\":\"9007199254740993\"}");
    free(json);
    Parca__Query__V1alpha1__ValuesResponse empty = PARCA__QUERY__V1ALPHA1__VALUES_RESPONSE__INIT;
    json = encode(&empty.base);
    assert_string_equal(json, "{}");
    free(json);
}

static void test_refused(void **state) {
    (void)state;
    const char *bad[][2] = {
        {"{\"nope\":1}", "nope: unknown field"},
        {"{\"mode\":\"MODE_SIDEWAYS\"}", "mode: not a value of its enum"},
        {"{\"merge\":{\"start\":\"yesterday\"}}", "merge.start: not an RFC 3339 time"},
        /* offsets and fields are exactly their digits: a short offset used to be read past the
         * end of the string */
        {"{\"merge\":{\"start\":\"2026-01-01T00:00:00+1:30\"}}", "merge.start: not an RFC 3339"},
        {"{\"merge\":{\"start\":\"2026-01-01T00:00:00+01\"}}", "merge.start: not an RFC 3339"},
        {"{\"merge\":{\"start\":\"2026-01-01T00:00:00+24:00\"}}", "merge.start: not an RFC 3339"},
        {"{\"merge\":{\"start\":\" 2026-01-01T00:00:00Z\"}}", "merge.start: not an RFC 3339"},
        {"{\"merge\":{\"start\":\"2026-1-01T00:00:00Z\"}}", "merge.start: not an RFC 3339"},
        {"{\"merge\":{\"start\":\"2026-01-01T0:00:00Z\"}}", "merge.start: not an RFC 3339"},
        {"{\"merge\":{\"start\":\"+026-01-01T00:00:00Z\"}}", "merge.start: not an RFC 3339"},
        {"{\"merge\":{\"start\":\"2026-01-01\"}}", "merge.start: not an RFC 3339"},
        {"{\"merge\":{\"query\":7}}", "merge.query: not a string"},
        {"{\"filter\":{}}", "filter: not an array"},
        {"{\"merge\":{},\"single\":{}}", "single: a second member of its oneof"},
        {"{\"nodeTrimThreshold\":\"much\"}", "nodeTrimThreshold: not a number"},
        {"{\"groupBy\":{\"fields\":[\"a\",1]}}", "groupBy.fields: not a string"},
        {"[1]", "(message): not an object"},
        {"{", "line 1"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        strata_buffer bin = STRATA_BUFFER_INIT;
        strata_error err;
        assert_int_equal(pbjson_decode(QR, bad[i][0], strlen(bad[i][0]), &bin, &err), -1);
        assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
        if (strstr(err.message, bad[i][1]) == NULL)
            fail_msg("%s: got \"%s\", want \"%s\"", bad[i][0], err.message, bad[i][1]);
        strata_buffer_free(&bin);
    }
    /* int64 from numbers and strings; uint32 refuses negatives */
    strata_buffer bin = STRATA_BUFFER_INIT;
    strata_error err;
    const char *ok = "{\"merge\":{\"start\":\"1970-01-01T00:00:01Z\"}}";
    assert_int_equal(pbjson_decode(QR, ok, strlen(ok), &bin, &err), 0);
    strata_buffer_free(&bin);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_query_request),
        cmocka_unit_test(test_response_encoding),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
