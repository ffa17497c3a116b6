/*
 * range_encode_test.c - the hand-written QueryRangeResponse read back by protobuf-c's generated
 * decoder, field by field: labels, every point (times before 1970 and with nanoseconds, negative
 * values and counts, zero values omitted on the wire and read back as zero), value types, and
 * an empty answer; and protobuf-c packing what it decoded gives back the very same bytes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "parca/query/v1alpha1/query.pb-c.h"
#include "range_encode.h"

static void check_point(const Parca__Query__V1alpha1__MetricsSample *got, const range_point *want) {
    int64_t ns = got->timestamp->seconds * 1000000000 + got->timestamp->nanos;
    assert_true(ns == want->time_ns);
    assert_true(got->timestamp->nanos >= 0 && got->timestamp->nanos < 1000000000);
    assert_true(got->value == want->value);
    assert_true(got->value_per_second == want->value_per_second);
    assert_true(got->duration == want->duration_ns);
    assert_int_equal(got->count, want->count);
}

static void test_round_trip(void **state) {
    (void)state;
    strata_error err;
    range_series s[2];
    memset(s, 0, sizeof s);
    for (int i = 0; i < 2; i++) {
        s[i].labels = (label_set)LABEL_SET_INIT;
        s[i].sample_type = "cpu";
        s[i].sample_unit = "nanoseconds";
        s[i].period_type = i == 0 ? "cpu" : "";
        s[i].period_unit = i == 0 ? "nanoseconds" : NULL;
    }
    assert_int_equal(label_set_add(&s[0].labels, "pod", 3, "api-7", 5, &err), 0);
    assert_int_equal(label_set_add(&s[0].labels, "zone", 4, "eu-1a", 5, &err), 0);
    range_point points[] = {
        {INT64_C(1700000000000000000), 5631578846, 0.0938596, 60000000000, 6},
        {INT64_C(1700000060123456789), 0, 0, 0, 0},
        {INT64_C(-1500000001), -42, -0.5, 1, -3},
        {0, INT64_MAX, 1e300, INT64_MIN, INT32_MAX},
    };
    s[0].points = points;
    s[0].n_points = 4;
    s[1].points = points + 1;
    s[1].n_points = 1;
    strata_buffer b = STRATA_BUFFER_INIT;
    assert_int_equal(range_encode_response(s, 2, &b, &err), 0);
    Parca__Query__V1alpha1__QueryRangeResponse *r =
        parca__query__v1alpha1__query_range_response__unpack(NULL, b.len, b.data);
    assert_non_null(r);
    assert_int_equal(r->n_series, 2);
    const Parca__Query__V1alpha1__MetricsSeries *a = r->series[0], *c = r->series[1];
    assert_int_equal(a->labelset->n_labels, 2);
    assert_string_equal(a->labelset->labels[0]->name, "pod");
    assert_string_equal(a->labelset->labels[0]->value, "api-7");
    assert_string_equal(a->labelset->labels[1]->name, "zone");
    assert_string_equal(a->labelset->labels[1]->value, "eu-1a");
    assert_int_equal(a->n_samples, 4);
    for (int k = 0; k < 4; k++)
        check_point(a->samples[k], &points[k]);
    assert_string_equal(a->sample_type->type, "cpu");
    assert_string_equal(a->sample_type->unit, "nanoseconds");
    assert_string_equal(a->period_type->type, "cpu");
    assert_string_equal(a->period_type->unit, "nanoseconds");
    assert_non_null(c->labelset); /* an empty label set is still there */
    assert_int_equal(c->labelset->n_labels, 0);
    assert_int_equal(c->n_samples, 1);
    check_point(c->samples[0], &points[1]);
    assert_string_equal(c->period_type->type, "");
    assert_string_equal(c->period_type->unit, "");
    /* protobuf-c writes the very same bytes for the message it decoded. */
    size_t size = parca__query__v1alpha1__query_range_response__get_packed_size(r);
    uint8_t *theirs = malloc(size);
    assert_non_null(theirs);
    assert_int_equal(parca__query__v1alpha1__query_range_response__pack(r, theirs), size);
    assert_int_equal(size, b.len);
    assert_memory_equal(theirs, b.data, size);
    free(theirs);
    parca__query__v1alpha1__query_range_response__free_unpacked(r, NULL);
    strata_buffer_free(&b);
    label_set_free(&s[0].labels);
}

static void test_empty(void **state) {
    (void)state;
    strata_error err;
    strata_buffer b = STRATA_BUFFER_INIT;
    assert_int_equal(range_encode_response(NULL, 0, &b, &err), 0);
    assert_int_equal(b.len, 0);
    Parca__Query__V1alpha1__QueryRangeResponse *r =
        parca__query__v1alpha1__query_range_response__unpack(NULL, 0, (const uint8_t *)"");
    assert_non_null(r);
    assert_int_equal(r->n_series, 0);
    parca__query__v1alpha1__query_range_response__free_unpacked(r, NULL);
    strata_buffer_free(&b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_empty),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
