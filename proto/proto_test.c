/*
 * proto_test.c - round trips through the protoc-c code generated from proto/, and field numbers
 * read back from the generated descriptors (they must match Parca's wire API).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "google/protobuf/timestamp.pb-c.h"
#include "parca/metastore/v1alpha1/metastore.pb-c.h"
#include "parca/profilestore/v1alpha1/profilestore.pb-c.h"
#include "parca/query/v1alpha1/query.pb-c.h"
#include "parca/scrape/v1alpha1/scrape.pb-c.h"
#include "perftools/profiles/profile.pb-c.h"

static uint8_t *pack_message(const ProtobufCMessage *msg, size_t *len) {
    *len = protobuf_c_message_get_packed_size(msg);
    uint8_t *buf = malloc(*len ? *len : 1);
    assert_non_null(buf);
    assert_int_equal(protobuf_c_message_pack(msg, buf), *len);
    return buf;
}

static void test_write_raw_round_trip(void **state) {
    (void)state;
    Parca__Profilestore__V1alpha1__Label l_name[2] = {PARCA__PROFILESTORE__V1ALPHA1__LABEL__INIT,
                                                      PARCA__PROFILESTORE__V1ALPHA1__LABEL__INIT};
    Parca__Profilestore__V1alpha1__Label l_job = PARCA__PROFILESTORE__V1ALPHA1__LABEL__INIT;
    l_name[0].name = "__name__";
    l_name[0].value = "process_cpu";
    l_name[1].name = "__name__";
    l_name[1].value = "memory";
    l_job.name = "job";
    l_job.value = "api";

    Parca__Profilestore__V1alpha1__Label *set0[] = {&l_name[0], &l_job};
    Parca__Profilestore__V1alpha1__Label *set1[] = {&l_name[1]};
    Parca__Profilestore__V1alpha1__LabelSet ls[2] = {
        PARCA__PROFILESTORE__V1ALPHA1__LABEL_SET__INIT,
        PARCA__PROFILESTORE__V1ALPHA1__LABEL_SET__INIT};
    ls[0].n_labels = 2;
    ls[0].labels = set0;
    ls[1].n_labels = 1;
    ls[1].labels = set1;

    static uint8_t gz[] = {0x1f, 0x8b, 0x08, 0x00};
    static uint8_t plain[] = {0x0a, 0x02, 0x08, 0x01};
    Parca__Profilestore__V1alpha1__LoadSegment seg =
        PARCA__PROFILESTORE__V1ALPHA1__LOAD_SEGMENT__INIT;
    seg.offset = 0x1000;
    seg.vaddr = UINT64_C(0x400000);
    Parca__Profilestore__V1alpha1__ExecutableInfo exe =
        PARCA__PROFILESTORE__V1ALPHA1__EXECUTABLE_INFO__INIT;
    exe.elf_type = 3;
    exe.load_segment = &seg;
    Parca__Profilestore__V1alpha1__ExecutableInfo *exes[] = {&exe};

    Parca__Profilestore__V1alpha1__RawSample s0 = PARCA__PROFILESTORE__V1ALPHA1__RAW_SAMPLE__INIT;
    Parca__Profilestore__V1alpha1__RawSample s1 = PARCA__PROFILESTORE__V1ALPHA1__RAW_SAMPLE__INIT;
    Parca__Profilestore__V1alpha1__RawSample s2 = PARCA__PROFILESTORE__V1ALPHA1__RAW_SAMPLE__INIT;
    s0.raw_profile.data = gz;
    s0.raw_profile.len = sizeof gz;
    s0.n_executable_info = 1;
    s0.executable_info = exes;
    s1.raw_profile.data = plain;
    s1.raw_profile.len = sizeof plain;
    s2.raw_profile.data = plain;
    s2.raw_profile.len = 2;
    Parca__Profilestore__V1alpha1__RawSample *samples0[] = {&s0, &s1};
    Parca__Profilestore__V1alpha1__RawSample *samples1[] = {&s2};

    Parca__Profilestore__V1alpha1__RawProfileSeries series[2] = {
        PARCA__PROFILESTORE__V1ALPHA1__RAW_PROFILE_SERIES__INIT,
        PARCA__PROFILESTORE__V1ALPHA1__RAW_PROFILE_SERIES__INIT};
    series[0].labels = &ls[0];
    series[0].n_samples = 2;
    series[0].samples = samples0;
    series[1].labels = &ls[1];
    series[1].n_samples = 1;
    series[1].samples = samples1;
    Parca__Profilestore__V1alpha1__RawProfileSeries *series_ptrs[] = {&series[0], &series[1]};

    Parca__Profilestore__V1alpha1__WriteRawRequest req =
        PARCA__PROFILESTORE__V1ALPHA1__WRITE_RAW_REQUEST__INIT;
    req.n_series = 2;
    req.series = series_ptrs;
    req.normalized = 1;

    size_t len;
    uint8_t *buf = pack_message(&req.base, &len);
    Parca__Profilestore__V1alpha1__WriteRawRequest *got =
        parca__profilestore__v1alpha1__write_raw_request__unpack(NULL, len, buf);
    assert_non_null(got);
    assert_string_equal(got->tenant, "");
    assert_true(got->normalized);
    assert_int_equal(got->n_series, 2);

    Parca__Profilestore__V1alpha1__RawProfileSeries *g0 = got->series[0], *g1 = got->series[1];
    assert_int_equal(g0->labels->n_labels, 2);
    assert_string_equal(g0->labels->labels[0]->name, "__name__");
    assert_string_equal(g0->labels->labels[0]->value, "process_cpu");
    assert_string_equal(g0->labels->labels[1]->name, "job");
    assert_string_equal(g0->labels->labels[1]->value, "api");
    assert_int_equal(g0->n_samples, 2);
    assert_int_equal(g0->samples[0]->raw_profile.len, sizeof gz);
    assert_memory_equal(g0->samples[0]->raw_profile.data, gz, sizeof gz);
    assert_int_equal(g0->samples[0]->n_executable_info, 1);
    assert_int_equal(g0->samples[0]->executable_info[0]->elf_type, 3);
    assert_int_equal(g0->samples[0]->executable_info[0]->load_segment->offset, 0x1000);
    assert_int_equal(g0->samples[0]->executable_info[0]->load_segment->vaddr, 0x400000);
    assert_int_equal(g0->samples[1]->raw_profile.len, sizeof plain);
    assert_memory_equal(g0->samples[1]->raw_profile.data, plain, sizeof plain);
    assert_int_equal(g0->samples[1]->n_executable_info, 0);

    assert_int_equal(g1->labels->n_labels, 1);
    assert_string_equal(g1->labels->labels[0]->value, "memory");
    assert_int_equal(g1->n_samples, 1);
    assert_int_equal(g1->samples[0]->raw_profile.len, 2);

    parca__profilestore__v1alpha1__write_raw_request__free_unpacked(got, NULL);

    /* Truncated input is rejected, not misread. */
    assert_null(parca__profilestore__v1alpha1__write_raw_request__unpack(NULL, len - 3, buf));
    free(buf);
}

static void test_query_request_diff_round_trip(void **state) {
    (void)state;
    Google__Protobuf__Timestamp ta = GOOGLE__PROTOBUF__TIMESTAMP__INIT;
    Google__Protobuf__Timestamp tb_start = GOOGLE__PROTOBUF__TIMESTAMP__INIT;
    Google__Protobuf__Timestamp tb_end = GOOGLE__PROTOBUF__TIMESTAMP__INIT;
    ta.seconds = 1700000000;
    ta.nanos = 5000000;
    tb_start.seconds = 1700000100;
    tb_end.seconds = 1700000200;

    Parca__Query__V1alpha1__SingleProfile single = PARCA__QUERY__V1ALPHA1__SINGLE_PROFILE__INIT;
    single.time = &ta;
    single.query = "process_cpu:samples:count:cpu:nanoseconds:delta{job=\"a\"}";
    Parca__Query__V1alpha1__MergeProfile merge = PARCA__QUERY__V1ALPHA1__MERGE_PROFILE__INIT;
    merge.query = "process_cpu:samples:count:cpu:nanoseconds:delta{job=\"b\"}";
    merge.start = &tb_start;
    merge.end = &tb_end;

    Parca__Query__V1alpha1__ProfileDiffSelection a =
        PARCA__QUERY__V1ALPHA1__PROFILE_DIFF_SELECTION__INIT;
    a.mode = PARCA__QUERY__V1ALPHA1__PROFILE_DIFF_SELECTION__MODE__MODE_SINGLE_UNSPECIFIED;
    a.options_case = PARCA__QUERY__V1ALPHA1__PROFILE_DIFF_SELECTION__OPTIONS_SINGLE;
    a.single = &single;
    Parca__Query__V1alpha1__ProfileDiffSelection b =
        PARCA__QUERY__V1ALPHA1__PROFILE_DIFF_SELECTION__INIT;
    b.mode = PARCA__QUERY__V1ALPHA1__PROFILE_DIFF_SELECTION__MODE__MODE_MERGE;
    b.options_case = PARCA__QUERY__V1ALPHA1__PROFILE_DIFF_SELECTION__OPTIONS_MERGE;
    b.merge = &merge;

    Parca__Query__V1alpha1__DiffProfile diff = PARCA__QUERY__V1ALPHA1__DIFF_PROFILE__INIT;
    diff.a = &a;
    diff.b = &b;
    /* Explicitly false: presence must survive the round trip even though the value is the default.
     */
    diff._absolute_case = PARCA__QUERY__V1ALPHA1__DIFF_PROFILE___ABSOLUTE_ABSOLUTE;
    diff.absolute = 0;

    Parca__Query__V1alpha1__QueryRequest req = PARCA__QUERY__V1ALPHA1__QUERY_REQUEST__INIT;
    req.mode = PARCA__QUERY__V1ALPHA1__QUERY_REQUEST__MODE__MODE_DIFF;
    req.options_case = PARCA__QUERY__V1ALPHA1__QUERY_REQUEST__OPTIONS_DIFF;
    req.diff = &diff;
    req.report_type =
        PARCA__QUERY__V1ALPHA1__QUERY_REQUEST__REPORT_TYPE__REPORT_TYPE_FLAMEGRAPH_ARROW;
    req._node_trim_threshold_case =
        PARCA__QUERY__V1ALPHA1__QUERY_REQUEST___NODE_TRIM_THRESHOLD_NODE_TRIM_THRESHOLD;
    req.node_trim_threshold = 0.25f;

    size_t len;
    uint8_t *buf = pack_message(&req.base, &len);
    Parca__Query__V1alpha1__QueryRequest *got =
        parca__query__v1alpha1__query_request__unpack(NULL, len, buf);
    assert_non_null(got);
    assert_int_equal(got->mode, PARCA__QUERY__V1ALPHA1__QUERY_REQUEST__MODE__MODE_DIFF);
    assert_int_equal(got->report_type, 5);
    assert_int_equal(got->options_case, PARCA__QUERY__V1ALPHA1__QUERY_REQUEST__OPTIONS_DIFF);
    assert_int_equal(
        got->_node_trim_threshold_case,
        PARCA__QUERY__V1ALPHA1__QUERY_REQUEST___NODE_TRIM_THRESHOLD_NODE_TRIM_THRESHOLD);
    assert_true(got->node_trim_threshold == 0.25f);
    assert_int_equal(got->_invert_call_stack_case,
                     PARCA__QUERY__V1ALPHA1__QUERY_REQUEST___INVERT_CALL_STACK__NOT_SET);
    assert_int_equal(got->_group_by_case,
                     PARCA__QUERY__V1ALPHA1__QUERY_REQUEST___GROUP_BY__NOT_SET);
    assert_int_equal(got->n_filter, 0);

    Parca__Query__V1alpha1__DiffProfile *gd = got->diff;
    assert_int_equal(gd->_absolute_case, PARCA__QUERY__V1ALPHA1__DIFF_PROFILE___ABSOLUTE_ABSOLUTE);
    assert_false(gd->absolute);
    assert_int_equal(gd->a->options_case,
                     PARCA__QUERY__V1ALPHA1__PROFILE_DIFF_SELECTION__OPTIONS_SINGLE);
    assert_int_equal(gd->a->single->time->seconds, 1700000000);
    assert_int_equal(gd->a->single->time->nanos, 5000000);
    assert_string_equal(gd->a->single->query, single.query);
    assert_int_equal(gd->b->mode, PARCA__QUERY__V1ALPHA1__PROFILE_DIFF_SELECTION__MODE__MODE_MERGE);
    assert_int_equal(gd->b->options_case,
                     PARCA__QUERY__V1ALPHA1__PROFILE_DIFF_SELECTION__OPTIONS_MERGE);
    assert_string_equal(gd->b->merge->query, merge.query);
    assert_int_equal(gd->b->merge->start->seconds, 1700000100);
    assert_int_equal(gd->b->merge->end->seconds, 1700000200);
    parca__query__v1alpha1__query_request__free_unpacked(got, NULL);
    free(buf);

    /* Without `absolute` the presence flag stays unset; with true it reads back true. */
    diff._absolute_case = PARCA__QUERY__V1ALPHA1__DIFF_PROFILE___ABSOLUTE__NOT_SET;
    buf = pack_message(&diff.base, &len);
    Parca__Query__V1alpha1__DiffProfile *gd2 =
        parca__query__v1alpha1__diff_profile__unpack(NULL, len, buf);
    assert_non_null(gd2);
    assert_int_equal(gd2->_absolute_case, PARCA__QUERY__V1ALPHA1__DIFF_PROFILE___ABSOLUTE__NOT_SET);
    parca__query__v1alpha1__diff_profile__free_unpacked(gd2, NULL);
    free(buf);

    diff._absolute_case = PARCA__QUERY__V1ALPHA1__DIFF_PROFILE___ABSOLUTE_ABSOLUTE;
    diff.absolute = 1;
    buf = pack_message(&diff.base, &len);
    gd2 = parca__query__v1alpha1__diff_profile__unpack(NULL, len, buf);
    assert_non_null(gd2);
    assert_int_equal(gd2->_absolute_case, PARCA__QUERY__V1ALPHA1__DIFF_PROFILE___ABSOLUTE_ABSOLUTE);
    assert_true(gd2->absolute);
    parca__query__v1alpha1__diff_profile__free_unpacked(gd2, NULL);
    free(buf);
}

static void check_field(const ProtobufCMessageDescriptor *d, const char *name, unsigned number,
                        ProtobufCType type) {
    const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field_by_name(d, name);
    if (f == NULL)
        fail_msg("%s has no field %s", d->name, name);
    if (f->id != number || f->type != type)
        fail_msg("%s.%s is %u/type %d, want %u/type %d", d->name, name, f->id, (int)f->type, number,
                 (int)type);
    assert_ptr_equal(protobuf_c_message_descriptor_get_field(d, number), f);
}

static void test_field_numbers(void **state) {
    (void)state;
    check_field(&parca__query__v1alpha1__query_response__descriptor, "pprof", 6,
                PROTOBUF_C_TYPE_BYTES);
    check_field(&parca__query__v1alpha1__query_response__descriptor, "flamegraph_arrow", 11,
                PROTOBUF_C_TYPE_MESSAGE);
    check_field(&parca__query__v1alpha1__query_response__descriptor, "total", 9,
                PROTOBUF_C_TYPE_INT64);
    check_field(&parca__query__v1alpha1__flamegraph__descriptor, "trimmed", 10,
                PROTOBUF_C_TYPE_INT64);
    check_field(&parca__query__v1alpha1__metrics_sample__descriptor, "count", 5,
                PROTOBUF_C_TYPE_INT32);
    check_field(&parca__query__v1alpha1__metrics_sample__descriptor, "value_per_second", 3,
                PROTOBUF_C_TYPE_DOUBLE);
    check_field(&parca__query__v1alpha1__query_request__descriptor, "sandwich_by_function", 13,
                PROTOBUF_C_TYPE_STRING);
    check_field(&parca__query__v1alpha1__query_request__descriptor, "node_trim_threshold", 7,
                PROTOBUF_C_TYPE_FLOAT);
    check_field(&parca__scrape__v1alpha1__target__descriptor, "health", 7, PROTOBUF_C_TYPE_ENUM);
    check_field(&parca__scrape__v1alpha1__target__descriptor, "last_scrape_duration", 5,
                PROTOBUF_C_TYPE_MESSAGE);
    check_field(&parca__metastore__v1alpha1__location__descriptor, "mapping_id", 4,
                PROTOBUF_C_TYPE_STRING);
    assert_null(protobuf_c_message_descriptor_get_field(
        &parca__metastore__v1alpha1__location__descriptor, 3));
    check_field(&parca__profilestore__v1alpha1__write_raw_request__descriptor, "normalized", 3,
                PROTOBUF_C_TYPE_BOOL);
    check_field(&perftools__profiles__profile__descriptor, "default_sample_type", 14,
                PROTOBUF_C_TYPE_INT64);
    check_field(&perftools__profiles__line__descriptor, "column", 3, PROTOBUF_C_TYPE_INT64);
    check_field(&perftools__profiles__sample__descriptor, "location_id", 1, PROTOBUF_C_TYPE_UINT64);

    /* Full names and enum values as Parca spells them. */
    assert_string_equal(parca__query__v1alpha1__query_request__descriptor.name,
                        "parca.query.v1alpha1.QueryRequest");
    assert_string_equal(parca__profilestore__v1alpha1__profile_store_service__descriptor.name,
                        "parca.profilestore.v1alpha1.ProfileStoreService");
    const ProtobufCEnumValue *v = protobuf_c_enum_descriptor_get_value_by_name(
        &parca__query__v1alpha1__query_request__report_type__descriptor, "REPORT_TYPE_TABLE_ARROW");
    assert_non_null(v);
    assert_int_equal(v->value, 7);
    v = protobuf_c_enum_descriptor_get_value_by_name(
        &parca__scrape__v1alpha1__target__health__descriptor, "HEALTH_BAD");
    assert_non_null(v);
    assert_int_equal(v->value, 2);
}

static void test_profile_round_trip(void **state) {
    (void)state;
    char *strings[] = {"", "samples", "count", "main"};
    Perftools__Profiles__Function fn = PERFTOOLS__PROFILES__FUNCTION__INIT;
    fn.id = 1;
    fn.name = 3;
    Perftools__Profiles__Function *fns[] = {&fn};
    Perftools__Profiles__Line line = PERFTOOLS__PROFILES__LINE__INIT;
    line.function_id = 1;
    line.line = 42;
    Perftools__Profiles__Line *lines[] = {&line};
    Perftools__Profiles__Location loc = PERFTOOLS__PROFILES__LOCATION__INIT;
    loc.id = 1;
    loc.address = 0x401000;
    loc.n_line = 1;
    loc.line = lines;
    Perftools__Profiles__Location *locs[] = {&loc};
    uint64_t loc_ids[] = {1};
    int64_t values[] = {-7};
    Perftools__Profiles__Sample s = PERFTOOLS__PROFILES__SAMPLE__INIT;
    s.n_location_id = 1;
    s.location_id = loc_ids;
    s.n_value = 1;
    s.value = values;
    Perftools__Profiles__Sample *ss[] = {&s};
    Perftools__Profiles__ValueType vt = PERFTOOLS__PROFILES__VALUE_TYPE__INIT;
    vt.type = 1;
    vt.unit = 2;
    Perftools__Profiles__ValueType *vts[] = {&vt};
    Perftools__Profiles__Profile p = PERFTOOLS__PROFILES__PROFILE__INIT;
    p.n_sample_type = 1;
    p.sample_type = vts;
    p.n_sample = 1;
    p.sample = ss;
    p.n_location = 1;
    p.location = locs;
    p.n_function = 1;
    p.function = fns;
    p.n_string_table = 4;
    p.string_table = strings;
    p.time_nanos = INT64_C(1700000000000000000);
    p.period = 10000000;

    size_t len;
    uint8_t *buf = pack_message(&p.base, &len);
    Perftools__Profiles__Profile *got = perftools__profiles__profile__unpack(NULL, len, buf);
    assert_non_null(got);
    assert_int_equal(got->n_string_table, 4);
    assert_string_equal(got->string_table[3], "main");
    assert_int_equal(got->n_sample, 1);
    assert_int_equal(got->sample[0]->value[0], -7);
    assert_int_equal(got->sample[0]->location_id[0], 1);
    assert_int_equal(got->location[0]->address, 0x401000);
    assert_int_equal(got->location[0]->line[0]->line, 42);
    assert_int_equal(got->function[0]->name, 3);
    assert_int_equal(got->time_nanos, INT64_C(1700000000000000000));
    assert_int_equal(got->period, 10000000);
    perftools__profiles__profile__free_unpacked(got, NULL);
    free(buf);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_write_raw_round_trip),
        cmocka_unit_test(test_query_request_diff_round_trip),
        cmocka_unit_test(test_field_numbers),
        cmocka_unit_test(test_profile_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
