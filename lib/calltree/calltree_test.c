/*
 * calltree_test.c - a hand-built tree checked exactly in every report:
 *   B: main;a;b x3, main;a;c x2, main;d x5, main;r;r x1  (total 11)
 *   A (diff base): main;a;b x4, main;d x14, main;e x4     (total 22)
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "calltree/calltree.h"
#include "pprof/pprof.h"

typedef Parca__Query__V1alpha1__QueryResponse QueryResponse;
typedef Parca__Query__V1alpha1__FlamegraphNode FlamegraphNode;

#define REPORT(x) PARCA__QUERY__V1ALPHA1__QUERY_REQUEST__REPORT_TYPE__REPORT_TYPE_##x

typedef struct stack_spec {
    const char *frames; /* "main;a;b" root first */
    int64_t value;
} stack_spec;

static const stack_spec STACKS_B[] = {
    {"main;a;b", 3}, {"main;a;c", 2}, {"main;d", 5}, {"main;r;r", 1}};
static const stack_spec STACKS_A[] = {{"main;a;b", 4}, {"main;d", 14}, {"main;e", 4}};

static uint32_t frame_for(calltree *t, const char *name, size_t len) {
    char file[64];
    snprintf(file, sizeof file, "%.*s.go", (int)len, name);
    bool libc = len == 1 && name[0] == 'd';
    calltree_frame_desc d = {{name, len},
                             calltree_cstr(""),
                             calltree_cstr(file),
                             calltree_cstr(libc ? "/lib/libc.so" : "/bin/app"),
                             calltree_cstr(libc ? "c0ffee" : "app1"),
                             (int64_t)len * 10,
                             {0}};
    uint32_t f;
    assert_int_equal(calltree_intern_frame(t, &d, &f, NULL), 0);
    return f;
}

static uint32_t insert(calltree *t, const char *stack) {
    uint32_t node = CALLTREE_ROOT;
    for (const char *p = stack; *p != '\0';) {
        size_t len = strcspn(p, ";");
        assert_int_equal(calltree_child(t, node, frame_for(t, p, len), &node, NULL), 0);
        p += len;
        if (*p == ';')
            p++;
    }
    return node;
}

static void add_stacks(calltree *t, const stack_spec *s, size_t n, bool base) {
    for (size_t i = 0; i < n; i++) {
        uint32_t leaf = insert(t, s[i].frames);
        if (base)
            calltree_add_base(t, leaf, s[i].value);
        else
            calltree_add(t, leaf, s[i].value);
    }
}

static calltree *tree_b(void) {
    calltree *t;
    assert_int_equal(calltree_create(&t, 0, NULL), 0);
    assert_int_equal(calltree_set_group_by(t, CALLTREE_GROUP_DEFAULT, NULL), 0);
    add_stacks(t, STACKS_B, 4, false);
    assert_int_equal(calltree_finalize(t, NULL), 0);
    return t;
}

static calltree *tree_diff(bool absolute) {
    calltree *t;
    assert_int_equal(calltree_create(&t, 0, NULL), 0);
    assert_int_equal(calltree_set_group_by(t, CALLTREE_GROUP_DEFAULT, NULL), 0);
    add_stacks(t, STACKS_B, 4, false);
    add_stacks(t, STACKS_A, 3, true);
    assert_int_equal(calltree_finalize(t, NULL), 0);
    assert_int_equal(calltree_apply_diff_mode(t, absolute, NULL), 0);
    return t;
}

static QueryResponse *encode(const calltree *t, int type, double threshold) {
    static const char *const labels[] = {"instance", "job"};
    calltree_report_options o = {.node_trim_threshold = threshold,
                                 .unit = "count",
                                 .total = 42,
                                 .filtered = 7,
                                 .metadata_labels = labels,
                                 .n_metadata_labels = 2};
    o.pprof = (calltree_pprof_meta){"samples", "count", "cpu", "nanoseconds", 10000000, 123, 456};
    strata_buffer b = STRATA_BUFFER_INIT;
    strata_error err;
    int rc = calltree_encode_query_response(
        t, (Parca__Query__V1alpha1__QueryRequest__ReportType)type, &o, &b, &err);
    if (rc != 0)
        fail_msg("%s", err.message);
    QueryResponse *r = parca__query__v1alpha1__query_response__unpack(NULL, b.len, b.data);
    assert_non_null(r);
    assert_int_equal(r->total, 42);
    assert_int_equal(r->filtered, 7);
    strata_buffer_free(&b);
    return r;
}

static char *json_of(const calltree *t, bool flamebearer, double threshold, size_t max_nodes) {
    calltree_report_options o = {
        .node_trim_threshold = threshold, .max_nodes = max_nodes, .unit = "count", .name = "cpu"};
    strata_buffer b = STRATA_BUFFER_INIT;
    json_writer w;
    json_writer_init(&w, &b);
    int rc = flamebearer ? calltree_write_flamebearer_json(t, &o, &w, NULL)
                         : calltree_write_table_json(t, &o, &w, NULL);
    assert_int_equal(rc, 0);
    assert_int_equal(json_writer_finish(&w), 0);
    return strata_buffer_detach(&b, NULL);
}

/* ---- building ---- */

static void test_nodes_and_totals(void **state) {
    (void)state;
    calltree *t = tree_b();
    assert_int_equal(calltree_node_count(t), 8);  /* root main a b c d r r */
    assert_int_equal(calltree_frame_count(t), 6); /* main a b c d r */
    assert_int_equal(calltree_node_get(t, CALLTREE_ROOT).total, 11);
    uint32_t main = calltree_child_at(t, CALLTREE_ROOT, 0);
    assert_string_equal(calltree_frame_get(t, calltree_node_frame(t, main)).name, "main");
    assert_int_equal(calltree_child_count(t, main), 3);
    const char *names[] = {"a", "d", "r"};
    const int64_t totals[] = {5, 5, 1};
    for (size_t i = 0; i < 3; i++) {
        uint32_t c = calltree_child_at(t, main, i);
        assert_string_equal(calltree_frame_get(t, calltree_node_frame(t, c)).name, names[i]);
        assert_int_equal(calltree_node_get(t, c).total, totals[i]);
        assert_int_equal(calltree_node_parent(t, c), main);
    }
    calltree_frame d = calltree_frame_get(t, calltree_node_frame(t, calltree_child_at(t, main, 1)));
    assert_string_equal(d.mapping_file, "/lib/libc.so");
    assert_string_equal(d.build_id, "c0ffee");
    assert_string_equal(d.filename, "d.go");
    assert_int_equal(d.start_line, 10);
    calltree_free(t);
}

static void test_frame_identity(void **state) {
    (void)state;
    calltree *t;
    assert_int_equal(calltree_create(&t, 0, NULL), 0);
    assert_int_equal(calltree_group_by(t), CALLTREE_GROUP_EXACT);
    calltree_frame_desc d = {calltree_cstr("f"),
                             calltree_cstr(""),
                             calltree_cstr("f.c"),
                             calltree_cstr("/bin/x"),
                             calltree_cstr(""),
                             7,
                             {0}};
    uint32_t f1, f2, f3;
    assert_int_equal(calltree_intern_frame(t, &d, &f1, NULL), 0);
    assert_int_equal(calltree_intern_frame(t, &d, &f2, NULL), 0);
    assert_int_equal(f1, f2);
    d.start_line = 99; /* exact: every field is part of the identity */
    assert_int_equal(calltree_intern_frame(t, &d, &f2, NULL), 0);
    assert_int_not_equal(f1, f2);
    d.start_line = 7;
    d.loc.address = 0x401000;
    assert_int_equal(calltree_intern_frame(t, &d, &f2, NULL), 0);
    assert_int_not_equal(f1, f2);
    d.loc.address = 0;
    d.mapping_file = calltree_cstr("/bin/y");
    assert_int_equal(calltree_intern_frame(t, &d, &f3, NULL), 0);
    assert_int_not_equal(f1, f3);
    /* Views need not be NUL-terminated. */
    calltree_frame_desc v = {{"fxyz", 1}, {NULL, 0}, {"f.cpp", 3}, {"/bin/x", 6},
                             {NULL, 0},   7,         {0}};
    assert_int_equal(calltree_intern_frame(t, &v, &f3, NULL), 0);
    assert_int_equal(f3, f1);
    strata_error err;
    assert_int_equal(calltree_set_group_by(t, CALLTREE_GROUP_FUNCTION_NAME, &err), -1);
    assert_int_equal(err.code, STRATA_FAILED_PRECONDITION);
    uint32_t a, b;
    assert_int_equal(calltree_child(t, CALLTREE_ROOT, f1, &a, NULL), 0);
    assert_int_equal(calltree_child(t, CALLTREE_ROOT, f1, &b, NULL), 0);
    assert_int_equal(a, b);
    assert_int_equal(calltree_child(t, 57, f1, &b, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_int_equal(calltree_child(t, CALLTREE_ROOT, 1000, &b, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    calltree_free(t);
}

static void test_errors(void **state) {
    (void)state;
    calltree *t;
    assert_int_equal(calltree_create(&t, 0, NULL), 0);
    add_stacks(t, STACKS_B, 4, false);
    strata_error err;
    calltree_report_options o = {0};
    strata_buffer b = STRATA_BUFFER_INIT;
    assert_int_equal(calltree_encode_query_response(t, REPORT(TOP), &o, &b, &err), -1);
    assert_int_equal(err.code, STRATA_FAILED_PRECONDITION);
    assert_int_equal(calltree_finalize(t, NULL), 0);
    assert_int_equal(calltree_encode_query_response(t, 77, &o, &b, &err), -1);
    assert_non_null(strstr(err.message, "77"));
    assert_int_equal(err.code, STRATA_UNIMPLEMENTED);
    o.node_trim_threshold = -1;
    assert_int_equal(calltree_encode_query_response(t, REPORT(TOP), &o, &b, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_int_equal(b.len, 0);
    assert_int_equal(calltree_scale_base(t, 1, 0, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_int_equal(calltree_merge(t, t, &err), -1);
    calltree_add(t, 1000, 5); /* out of range: ignored */
    assert_int_equal(calltree_node_get(t, 1000).self, 0);
    calltree_free(t);
}

/* ---- flame graph ---- */

static const char *fg_name(const Parca__Query__V1alpha1__Flamegraph *fg, const FlamegraphNode *n) {
    /* Through the tables, as Parca's UI does, and cross-checked with the inline function. */
    assert_true(n->meta->location_index >= 1 && n->meta->location_index <= fg->n_locations);
    const Parca__Metastore__V1alpha1__Location *loc = fg->locations[n->meta->location_index - 1];
    assert_int_equal(loc->n_lines, 1);
    uint32_t fi = loc->lines[n->meta->line_index]->function_index;
    assert_true(fi >= 1 && fi <= fg->n_function);
    const char *name = fg->string_table[fg->function[fi - 1]->name_string_index];
    assert_string_equal(name, n->meta->function->name);
    assert_string_equal(fg->string_table[n->meta->function->filename_string_index],
                        n->meta->function->filename);
    if (loc->mapping_index != 0)
        assert_string_equal(
            fg->string_table[fg->mapping[loc->mapping_index - 1]->file_string_index],
            n->meta->mapping->file);
    return name;
}

static void expect_node(const Parca__Query__V1alpha1__Flamegraph *fg, const FlamegraphNode *n,
                        const char *name, int64_t cumulative, int64_t diff, size_t n_children) {
    assert_string_equal(fg_name(fg, n), name);
    assert_int_equal(n->cumulative, cumulative);
    assert_int_equal(n->diff, diff);
    assert_int_equal(n->n_children, n_children);
}

static void test_flamegraph(void **state) {
    (void)state;
    calltree *t = tree_b();
    QueryResponse *r = encode(t, REPORT(FLAMEGRAPH_TABLE), 0);
    assert_int_equal(r->report_case, PARCA__QUERY__V1ALPHA1__QUERY_RESPONSE__REPORT_FLAMEGRAPH);
    const Parca__Query__V1alpha1__Flamegraph *fg = r->flamegraph;
    assert_int_equal(fg->root->cumulative, 11);
    assert_int_equal(fg->root->diff, 0);
    assert_int_equal(fg->height, 3);
    assert_int_equal(fg->trimmed, 0);
    assert_int_equal(fg->total, 11);
    assert_string_equal(fg->unit, "count");
    assert_string_equal(fg->string_table[0], "");
    assert_int_equal(fg->n_function, 6);
    assert_int_equal(fg->n_locations, 6);
    assert_int_equal(fg->n_mapping, 2);
    assert_int_equal(fg->root->n_children, 1);
    const FlamegraphNode *main = fg->root->children[0];
    expect_node(fg, main, "main", 11, 0, 3);
    expect_node(fg, main->children[0], "a", 5, 0, 2);
    expect_node(fg, main->children[0]->children[0], "b", 3, 0, 0);
    expect_node(fg, main->children[0]->children[1], "c", 2, 0, 0);
    expect_node(fg, main->children[1], "d", 5, 0, 0);
    assert_string_equal(main->children[1]->meta->mapping->build_id, "c0ffee");
    assert_int_equal(main->children[1]->meta->function->start_line, 10);
    expect_node(fg, main->children[2], "r", 1, 0, 1);
    expect_node(fg, main->children[2]->children[0], "r", 1, 0, 0);
    parca__query__v1alpha1__query_response__free_unpacked(r, NULL);

    /* 45%: under main (11) children <= 4.95 go (r: 1); under a (5) children <= 2.25 go (c: 2). */
    r = encode(t, REPORT(FLAMEGRAPH_TABLE), 45);
    fg = r->flamegraph;
    assert_int_equal(fg->trimmed, 3);
    assert_int_equal(fg->height, 3);
    assert_int_equal(fg->n_function, 4);
    main = fg->root->children[0];
    expect_node(fg, main, "main", 11, 0, 2);
    expect_node(fg, main->children[0], "a", 5, 0, 1);
    expect_node(fg, main->children[0]->children[0], "b", 3, 0, 0);
    expect_node(fg, main->children[1], "d", 5, 0, 0);
    parca__query__v1alpha1__query_response__free_unpacked(r, NULL);

    /* The deprecated unspecified type gets the same message. */
    r = encode(t, REPORT(FLAMEGRAPH_UNSPECIFIED), 30);
    assert_int_equal(r->flamegraph->trimmed, 1);
    assert_int_equal(r->flamegraph->height, 3);
    parca__query__v1alpha1__query_response__free_unpacked(r, NULL);
    calltree_free(t);
}

/* ---- top and table ---- */

static void expect_top(const Parca__Query__V1alpha1__TopNode *n, const char *name, int64_t flat,
                       int64_t cum, int64_t diff) {
    assert_string_equal(n->meta->function->name, name);
    assert_int_equal(n->flat, flat);
    assert_int_equal(n->cumulative, cum);
    assert_int_equal(n->diff, diff);
}

static void test_top(void **state) {
    (void)state;
    calltree *t = tree_b();
    QueryResponse *r = encode(t, REPORT(TOP), 0);
    assert_int_equal(r->report_case, PARCA__QUERY__V1ALPHA1__QUERY_RESPONSE__REPORT_TOP);
    const Parca__Query__V1alpha1__Top *top = r->top;
    assert_int_equal(top->reported, 6);
    assert_int_equal(top->n_list, 6);
    assert_string_equal(top->unit, "count");
    expect_top(top->list[0], "d", 5, 5, 0);
    assert_string_equal(top->list[0]->meta->mapping->file, "/lib/libc.so");
    expect_top(top->list[1], "b", 3, 3, 0);
    expect_top(top->list[2], "c", 2, 2, 0);
    expect_top(top->list[3], "r", 1, 1, 0); /* recursive: counted once */
    expect_top(top->list[4], "main", 0, 11, 0);
    expect_top(top->list[5], "a", 0, 5, 0);
    parca__query__v1alpha1__query_response__free_unpacked(r, NULL);
    calltree_free(t);
}

static calltree *tree_labels(unsigned group_by);

/* STACKS_B as a call graph: TOP's rows as nodes, caller -> callee edges once per pair. */
static uint32_t line_frame(calltree *t, const char *name, const char *file, const char *build,
                           int64_t line) {
    calltree_frame_desc d = {calltree_cstr(name),
                             calltree_cstr(""),
                             calltree_cstr(file),
                             calltree_cstr("/bin/app"),
                             calltree_cstr(build),
                             1,
                             {0}};
    d.loc.line = line;
    d.loc.address = 0x1000 + (uint64_t)line;
    uint32_t f;
    assert_int_equal(calltree_intern_frame(t, &d, &f, NULL), 0);
    return f;
}

static bool contains_int64s(const ProtobufCBinaryData *rec, const int64_t *v, size_t n) {
    size_t len = n * sizeof *v;
    for (size_t i = 0; i + len <= rec->len; i++)
        if (memcmp(rec->data + i, v, len) == 0)
            return true;
    return false;
}

/* SOURCE: per line of one file of one build, cumulative sums node totals (a recursive line counts
 * per occurrence) and flat the leaves' self; frames of other builds and files, and lines past the
 * text, count nowhere. */
static void test_source_report(void **state) {
    (void)state;
    calltree *t;
    assert_int_equal(calltree_create(&t, 0, NULL), 0);
    uint32_t main3 = line_frame(t, "main", "app.c", "b1", 3);
    uint32_t work7 = line_frame(t, "work", "app.c", "b1", 7);
    uint32_t other = line_frame(t, "work", "app.c", "b2", 7); /* another build */
    uint32_t lib2 = line_frame(t, "helper", "lib.c", "b1", 2);
    uint32_t far = line_frame(t, "work", "app.c", "b1", 99); /* past the text */
    uint32_t frames[][4] = {
        {main3, work7}, {main3, work7, work7}, {main3, other}, {main3, work7, lib2}, {main3, far}};
    size_t depth[] = {2, 3, 2, 3, 2};
    int64_t value[] = {10, 2, 100, 5, 1000};
    for (size_t i = 0; i < 5; i++) {
        uint32_t node;
        assert_int_equal(calltree_insert_stack(t, frames[i], depth[i], &node, NULL), 0);
        calltree_add(t, node, value[i]);
    }
    assert_int_equal(calltree_finalize(t, NULL), 0);
    const char text[] = "1\n2\n3\n4\n5\n6\n7\n8\n";
    calltree_report_options o = {.unit = "nanoseconds"};
    o.source = (calltree_source){"b1", "app.c", text, strlen(text)};
    strata_buffer b = STRATA_BUFFER_INIT;
    strata_error err;
    assert_int_equal(calltree_encode_query_response(t, REPORT(SOURCE), &o, &b, &err), 0);
    QueryResponse *r = parca__query__v1alpha1__query_response__unpack(NULL, b.len, b.data);
    assert_non_null(r);
    assert_int_equal(r->report_case, PARCA__QUERY__V1ALPHA1__QUERY_RESPONSE__REPORT_SOURCE);
    assert_string_equal(r->source->source, text);
    assert_string_equal(r->source->unit, "nanoseconds");
    assert_int_equal(r->total, 1117);
    int64_t cumulative[8] = {0, 0, 1117, 0, 0, 0, 19, 0}, flat[8] = {0, 0, 0, 0, 0, 0, 12, 0};
    assert_true(contains_int64s(&r->source->record, cumulative, 8));
    assert_true(contains_int64s(&r->source->record, flat, 8));
    parca__query__v1alpha1__query_response__free_unpacked(r, NULL);
    /* without the source: refused */
    o.source.text = NULL;
    strata_buffer_reset(&b);
    assert_int_equal(calltree_encode_query_response(t, REPORT(SOURCE), &o, &b, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    strata_buffer_free(&b);
    calltree_free(t);
}

/* The flame chart: time frames in time order, a function running on through adjacent profiles
 * one row, after a gap a new one; offsets, timestamps and trimming. */
static void test_flamechart(void **state) {
    (void)state;
    calltree *t;
    assert_int_equal(calltree_create(&t, 0, NULL), 0);
    calltree_grouping g = {.mask = CALLTREE_GROUP_DEFAULT, .by_timestamp = true};
    assert_int_equal(calltree_set_grouping(t, &g, NULL), 0);
    const int64_t S = 1000000000, T = 1767225600 * S;
    struct {
        int64_t time;
        const char *stack;
        int64_t value;
    } samples[] = {{T + 30 * S, "main;work", 2}, /* out of order: the chart sorts by time */
                   {T, "main;work", 5},
                   {T, "main;idle", 1},
                   {T + 10 * S, "main;work", 3}};
    for (size_t i = 0; i < 4; i++) {
        uint32_t tf, node;
        assert_int_equal(calltree_intern_time_frame(t, samples[i].time, 10 * S, &tf, NULL), 0);
        int64_t time = 0, duration = 0;
        assert_true(calltree_frame_time(t, tf, &time, &duration));
        assert_true(time == samples[i].time && duration == 10 * S);
        assert_int_equal(calltree_child(t, CALLTREE_ROOT, tf, &node, NULL), 0);
        for (const char *p = samples[i].stack; *p != '\0';) {
            size_t len = strcspn(p, ";");
            assert_int_equal(calltree_child(t, node, frame_for(t, p, len), &node, NULL), 0);
            p += len + (p[len] == ';');
        }
        calltree_add(t, node, samples[i].value);
    }
    assert_int_equal(calltree_finalize(t, NULL), 0);
    QueryResponse *r = encode(t, REPORT(FLAMECHART), 0);
    assert_int_equal(r->report_case,
                     PARCA__QUERY__V1ALPHA1__QUERY_RESPONSE__REPORT_FLAMEGRAPH_ARROW);
    const ProtobufCBinaryData *rec = &r->flamegraph_arrow->record;
    /* rows: root, main@T, idle@T, work@T, main@T+30, work@T+30; counts narrowed to uint8 */
    uint8_t cumulative[6] = {11, 9, 1, 8, 2, 2}, offset[6] = {0, 0, 0, 1, 9, 9};
    int64_t time[6] = {0, T, T, T, T + 30 * S, T + 30 * S};
    assert_non_null(memmem(rec->data, rec->len, cumulative, 6));
    assert_non_null(memmem(rec->data, rec->len, offset, 6));
    assert_true(contains_int64s(rec, time, 6));
    assert_int_equal(r->flamegraph_arrow->height, 2);
    assert_int_equal(r->flamegraph_arrow->trimmed, 0);
    parca__query__v1alpha1__query_response__free_unpacked(r, NULL);
    /* 20 %: idle (1 of 9) and the second main (2 of 11) go; offsets keep their gaps */
    r = encode(t, REPORT(FLAMECHART), 20);
    uint8_t kept_cum[3] = {11, 9, 8}, kept_offset[3] = {0, 0, 1};
    rec = &r->flamegraph_arrow->record;
    assert_non_null(memmem(rec->data, rec->len, kept_cum, 3));
    assert_non_null(memmem(rec->data, rec->len, kept_offset, 3));
    assert_int_equal(r->flamegraph_arrow->trimmed, 3);
    parca__query__v1alpha1__query_response__free_unpacked(r, NULL);
    calltree_free(t);
}

static void test_callgraph_and_metadata(void **state) {
    (void)state;
    calltree *t = tree_b();
    QueryResponse *r = encode(t, REPORT(CALLGRAPH), 0);
    assert_int_equal(r->report_case, PARCA__QUERY__V1ALPHA1__QUERY_RESPONSE__REPORT_CALLGRAPH);
    const Parca__Query__V1alpha1__Callgraph *cg = r->callgraph;
    assert_int_equal(cg->cumulative, 11);
    assert_int_equal(cg->n_nodes, 6);
    const char *names[6];
    for (size_t i = 0; i < cg->n_nodes; i++) {
        names[i] = cg->nodes[i]->meta->function->name;
        char id[24];
        snprintf(id, sizeof id, "%zu", i);
        assert_string_equal(cg->nodes[i]->id, id);
    }
    assert_string_equal(names[0], "d"); /* TOP's order */
    assert_int_equal(cg->nodes[0]->flat, 5);
    assert_string_equal(cg->nodes[0]->meta->mapping->file, "/lib/libc.so");
    assert_int_equal(cg->nodes[4]->cumulative, 11); /* main */
    char edges[512] = "";
    for (size_t i = 0; i < cg->n_edges; i++) {
        const Parca__Query__V1alpha1__CallgraphEdge *e = cg->edges[i];
        char want_id[32];
        snprintf(want_id, sizeof want_id, "%s-%s", e->source, e->target);
        assert_string_equal(e->id, want_id);
        size_t used = strlen(edges);
        snprintf(edges + used, sizeof edges - used, "%s%s>%s=%lld", used ? " " : "",
                 names[atoi(e->source)], names[atoi(e->target)], (long long)e->cumulative);
    }
    assert_string_equal(edges, "main>a=5 a>b=3 a>c=2 main>d=5 main>r=1 r>r=1");
    parca__query__v1alpha1__query_response__free_unpacked(r, NULL);

    /* FLAMEGRAPH_ARROW: an Arrow IPC stream (read by npm's apache-arrow in
     * integration_npm_clients); here its framing and the response's fields */
    r = encode(t, REPORT(FLAMEGRAPH_ARROW), 0);
    assert_int_equal(r->report_case,
                     PARCA__QUERY__V1ALPHA1__QUERY_RESPONSE__REPORT_FLAMEGRAPH_ARROW);
    assert_true(r->flamegraph_arrow->record.len > 16);
    assert_memory_equal(r->flamegraph_arrow->record.data, "\xff\xff\xff\xff", 4);
    assert_memory_equal(r->flamegraph_arrow->record.data + r->flamegraph_arrow->record.len - 8,
                        "\xff\xff\xff\xff\0\0\0\0", 8);
    assert_int_equal(r->flamegraph_arrow->height, 3);
    assert_string_equal(r->flamegraph_arrow->unit, "count");
    parca__query__v1alpha1__query_response__free_unpacked(r, NULL);

    calltree *labeled = tree_labels(CALLTREE_GROUP_DEFAULT);
    QueryResponse *lr = encode(labeled, REPORT(FLAMEGRAPH_ARROW), 0);
    const ProtobufCBinaryData *rec = &lr->flamegraph_arrow->record;
    assert_non_null(memmem(rec->data, rec->len, "labels.endpoint", 15)); /* a column */
    assert_non_null(memmem(rec->data, rec->len, "/a", 2));               /* its dictionary */
    assert_non_null(memmem(rec->data, rec->len, "value_offset", 12));
    parca__query__v1alpha1__query_response__free_unpacked(lr, NULL);
    calltree_free(labeled);

    r = encode(t, REPORT(TABLE_ARROW), 0);
    assert_int_equal(r->report_case, PARCA__QUERY__V1ALPHA1__QUERY_RESPONSE__REPORT_TABLE_ARROW);
    assert_true(r->table_arrow->record.len > 16);
    assert_memory_equal(r->table_arrow->record.data, "\xff\xff\xff\xff", 4);
    assert_string_equal(r->table_arrow->unit, "count");
    parca__query__v1alpha1__query_response__free_unpacked(r, NULL);

    r = encode(t, REPORT(PROFILE_METADATA), 0);
    assert_int_equal(r->report_case,
                     PARCA__QUERY__V1ALPHA1__QUERY_RESPONSE__REPORT_PROFILE_METADATA);
    assert_int_equal(r->profile_metadata->n_mapping_files, 2);
    assert_string_equal(r->profile_metadata->mapping_files[0], "/bin/app");
    assert_string_equal(r->profile_metadata->mapping_files[1], "/lib/libc.so");
    assert_int_equal(r->profile_metadata->n_labels, 2);
    assert_string_equal(r->profile_metadata->labels[1], "job");
    parca__query__v1alpha1__query_response__free_unpacked(r, NULL);
    calltree_free(t);
}

static void test_table_json(void **state) {
    (void)state;
    calltree *t = tree_b();
    char *json = json_of(t, false, 0, 0);
    assert_string_equal(json, "{\"unit\":\"count\",\"total\":11,\"rows_total\":6,\"rows\":["
                              "{\"name\":\"d\",\"system_name\":\"\",\"filename\":\"d.go\","
                              "\"mapping_file\":\"/lib/libc.so\",\"label\":\"d\",\"flat\":5,"
                              "\"cumulative\":5},"
                              "{\"name\":\"b\",\"system_name\":\"\",\"filename\":\"b.go\","
                              "\"mapping_file\":\"/bin/app\",\"label\":\"b\",\"flat\":3,"
                              "\"cumulative\":3},"
                              "{\"name\":\"c\",\"system_name\":\"\",\"filename\":\"c.go\","
                              "\"mapping_file\":\"/bin/app\",\"label\":\"c\",\"flat\":2,"
                              "\"cumulative\":2},"
                              "{\"name\":\"r\",\"system_name\":\"\",\"filename\":\"r.go\","
                              "\"mapping_file\":\"/bin/app\",\"label\":\"r\",\"flat\":1,"
                              "\"cumulative\":1},"
                              "{\"name\":\"main\",\"system_name\":\"\",\"filename\":\"main.go\","
                              "\"mapping_file\":\"/bin/app\",\"label\":\"main\",\"flat\":0,"
                              "\"cumulative\":11},"
                              "{\"name\":\"a\",\"system_name\":\"\",\"filename\":\"a.go\","
                              "\"mapping_file\":\"/bin/app\",\"label\":\"a\",\"flat\":0,"
                              "\"cumulative\":5}]}");
    free(json);
    calltree_free(t);
}

/* ---- pprof ---- */

static void stack_string(const pprof_profile *p, size_t i, char *out, size_t cap) {
    const pprof_sample *s = &p->samples[i];
    out[0] = '\0';
    for (uint32_t k = s->location_count; k-- > 0;) { /* leaf first in pprof: walk backwards */
        const pprof_location *loc =
            pprof_find_location(p, p->sample_location_ids[s->location_offset + k]);
        assert_non_null(loc);
        const pprof_function *fn = pprof_find_function(p, p->lines[loc->line_offset].function_id);
        pprof_string name = pprof_string_at(p, fn->name);
        size_t len = strlen(out);
        snprintf(out + len, cap - len, "%s%.*s", len ? ";" : "", (int)name.len, name.ptr);
    }
}

/* A diff table cut short keeps the largest changes, removed frames included. */
static void test_table_json_diff_cut(void **state) {
    (void)state;
    calltree *t = tree_diff(true);
    char *json = json_of(t, false, 0, 2);
    assert_non_null(strstr(json, "\"rows_total\":7,\"rows\":[{\"name\":\"main\""));
    assert_non_null(strstr(json, "},{\"name\":\"d\"")); /* -9 */
    assert_null(strstr(json, "\"name\":\"e\""));        /* -4: cut */
    free(json);
    json = json_of(t, false, 0, 3);
    assert_non_null(strstr(json, "\"name\":\"e\"")); /* removed, still listed */
    free(json);
    calltree_free(t);
}

static void test_pprof(void **state) {
    (void)state;
    calltree *t = tree_diff(true); /* a diff tree writes B's values */
    QueryResponse *r = encode(t, REPORT(PPROF), 0);
    assert_int_equal(r->report_case, PARCA__QUERY__V1ALPHA1__QUERY_RESPONSE__REPORT_PPROF);
    assert_true(pprof_is_gzip(r->pprof.data, r->pprof.len));
    pprof_profile p;
    strata_error err;
    if (pprof_decode(r->pprof.data, r->pprof.len, NULL, &p, &err) != 0)
        fail_msg("%s", err.message);
    assert_int_equal(p.n_sample_types, 1);
    pprof_string st = pprof_string_at(&p, p.sample_types[0].type);
    assert_int_equal(st.len, 7);
    assert_memory_equal(st.ptr, "samples", 7);
    assert_int_equal(p.period, 10000000);
    assert_int_equal(p.time_nanos, 123);
    assert_int_equal(p.duration_nanos, 456);
    assert_int_equal(p.n_functions, 6); /* e appears only in A */
    assert_int_equal(p.n_locations, 6);
    assert_int_equal(p.n_mappings, 2);
    assert_int_equal(p.n_samples, 4);
    const char *want[] = {"main;a;b", "main;a;c", "main;d", "main;r;r"};
    const int64_t values[] = {3, 2, 5, 1};
    for (size_t i = 0; i < 4; i++) {
        char buf[128];
        stack_string(&p, i, buf, sizeof buf);
        assert_string_equal(buf, want[i]);
        assert_int_equal(pprof_sample_value(&p, i, 0), values[i]);
    }
    pprof_profile_free(&p);
    parca__query__v1alpha1__query_response__free_unpacked(r, NULL);
    calltree_free(t);
}

/* ---- flamebearer ---- */

static void test_flamebearer(void **state) {
    (void)state;
    calltree *t = tree_b();
    char *json = json_of(t, true, 0, 0);
    assert_string_equal(
        json,
        "{\"version\":1,\"flamebearer\":{\"names\":[\"total\",\"main\",\"a\",\"b\",\"c\",\"d\","
        "\"r\"],"
        "\"levels\":[[0,11,0,0],[0,11,0,1],[0,5,0,2,0,5,5,5,0,1,0,6],"
        "[0,3,3,3,0,2,2,4,5,1,1,6]],\"numTicks\":11,\"maxSelf\":5},"
        "\"metadata\":{\"format\":\"single\",\"units\":\"count\",\"name\":\"cpu\"},\"trimmed\":0}");
    free(json);
    /* Trimming at 45% drops r (1) and c (2); b keeps its x. */
    json = json_of(t, true, 45, 0);
    assert_string_equal(
        json,
        "{\"version\":1,\"flamebearer\":{\"names\":[\"total\",\"main\",\"a\",\"b\",\"d\"],"
        "\"levels\":[[0,11,0,0],[0,11,0,1],[0,5,0,2,0,5,5,4],[0,3,3,3]],"
        "\"numTicks\":11,\"maxSelf\":5},"
        "\"metadata\":{\"format\":\"single\",\"units\":\"count\",\"name\":\"cpu\"},\"trimmed\":3}");
    free(json);
    /* max_nodes 3: weights 11,5,5,3,2,1,1, keep those above the 4th largest (3): main, a, d. */
    json = json_of(t, true, 0, 3);
    assert_string_equal(
        json,
        "{\"version\":1,\"flamebearer\":{\"names\":[\"total\",\"main\",\"a\",\"d\"],"
        "\"levels\":[[0,11,0,0],[0,11,0,1],[0,5,0,2,0,5,5,3]],"
        "\"numTicks\":11,\"maxSelf\":5},"
        "\"metadata\":{\"format\":\"single\",\"units\":\"count\",\"name\":\"cpu\"},\"trimmed\":6}");
    free(json);
    calltree_free(t);
}

static void test_flamebearer_diff(void **state) {
    (void)state;
    calltree *t = tree_diff(true);
    char *json = json_of(t, true, 0, 0);
    assert_string_equal(
        json,
        "{\"version\":1,\"flamebearer\":{\"names\":[\"total\",\"main\",\"a\",\"b\",\"c\",\"d\","
        "\"e\",\"r\"],\"levels\":["
        "[0,22,0,0,11,0,0],"
        "[0,22,0,0,11,0,1],"
        "[0,4,0,0,5,0,2,0,14,14,0,5,5,5,0,4,4,0,0,0,6,0,0,0,0,1,0,7],"
        "[0,4,4,0,3,3,3,0,0,0,0,2,2,4,18,0,0,5,1,1,7]],"
        "\"numTicks\":33,\"maxSelf\":14},"
        "\"metadata\":{\"format\":\"double\",\"units\":\"count\",\"name\":\"cpu\"},"
        "\"leftTicks\":22,\"rightTicks\":11,\"trimmed\":0}");
    free(json);
    calltree_free(t);
}

/* Pyroscope's FlameGraph(Diff) protobuf, read back with a minimal wire reader into the
 * flamebearer JSON's shape: names, levels, total, max_self, then leftTicks and rightTicks. */
static uint64_t read_varint(const uint8_t **p, const uint8_t *end) {
    uint64_t v = 0;
    assert_true(strata_uvarint_get(p, end, &v));
    return v;
}

static char *flamegraph_proto_text(const calltree *t, size_t max_nodes) {
    calltree_report_options o = {.max_nodes = max_nodes, .unit = "count", .name = "cpu"};
    strata_buffer b = STRATA_BUFFER_INIT, text = STRATA_BUFFER_INIT;
    assert_int_equal(calltree_encode_pyroscope_flamegraph(t, &o, &b, NULL), 0);
    strata_buffer names = STRATA_BUFFER_INIT, levels = STRATA_BUFFER_INIT,
                  ints = STRATA_BUFFER_INIT;
    const uint8_t *p = b.data, *end = b.data + b.len;
    while (p < end) {
        uint64_t key = read_varint(&p, end);
        if ((key & 7) == 0) {
            strata_buffer_appendf(&ints, ";%u=%lld", (unsigned)(key >> 3),
                                  (long long)read_varint(&p, end));
            continue;
        }
        assert_int_equal(key & 7, 2);
        uint64_t len = read_varint(&p, end);
        assert_true(len <= (uint64_t)(end - p));
        if (key >> 3 == 1) {
            strata_buffer_appendf(&names, "%s\"%.*s\"", names.len ? "," : "", (int)len, p);
        } else {
            assert_int_equal(key >> 3, 2);
            const uint8_t *q = p, *level_end = p + len;
            strata_buffer_appendf(&levels, "%s[", levels.len ? "," : "");
            if (q < level_end) {
                assert_int_equal(read_varint(&q, level_end), 1 << 3 | 2);
                uint64_t packed = read_varint(&q, level_end);
                const uint8_t *packed_end = q + packed;
                for (int i = 0; q < packed_end; i++)
                    strata_buffer_appendf(&levels, "%s%lld", i ? "," : "",
                                          (long long)read_varint(&q, packed_end));
            }
            strata_buffer_append_str(&levels, "]");
        }
        p += len;
    }
    strata_buffer_appendf(&text, "names=[%.*s] levels=[%.*s]%.*s", (int)names.len,
                          (const char *)names.data, (int)levels.len, (const char *)levels.data,
                          (int)ints.len, (const char *)ints.data);
    strata_buffer_free(&b);
    strata_buffer_free(&names);
    strata_buffer_free(&levels);
    strata_buffer_free(&ints);
    strata_buffer_append_byte(&text, 0);
    return (char *)text.data;
}

/* The same names and levels as the flamebearer, as Pyroscope's protobuf messages. */
static void test_pyroscope_flamegraph(void **state) {
    (void)state;
    calltree *t = tree_b();
    char *text = flamegraph_proto_text(t, 0);
    assert_string_equal(text, "names=[\"total\",\"main\",\"a\",\"b\",\"c\",\"d\",\"r\"] "
                              "levels=[[0,11,0,0],[0,11,0,1],[0,5,0,2,0,5,5,5,0,1,0,6],"
                              "[0,3,3,3,0,2,2,4,5,1,1,6]];3=11;4=5");
    free(text);
    text = flamegraph_proto_text(t, 3);
    assert_string_equal(text, "names=[\"total\",\"main\",\"a\",\"d\"] "
                              "levels=[[0,11,0,0],[0,11,0,1],[0,5,0,2,0,5,5,3]];3=11;4=5");
    free(text);
    calltree_free(t);
    t = tree_diff(true);
    text = flamegraph_proto_text(t, 0);
    assert_string_equal(text,
                        "names=[\"total\",\"main\",\"a\",\"b\",\"c\",\"d\",\"e\",\"r\"] levels=["
                        "[0,22,0,0,11,0,0],[0,22,0,0,11,0,1],"
                        "[0,4,0,0,5,0,2,0,14,14,0,5,5,5,0,4,4,0,0,0,6,0,0,0,0,1,0,7],"
                        "[0,4,4,0,3,3,3,0,0,0,0,2,2,4,18,0,0,5,1,1,7]];3=33;4=14;5=22;6=11");
    free(text);
    calltree_free(t);
}

/* ---- diff ---- */

static void test_diff_absolute(void **state) {
    (void)state;
    calltree *t = tree_diff(true);
    QueryResponse *r = encode(t, REPORT(FLAMEGRAPH_TABLE), 0);
    const Parca__Query__V1alpha1__Flamegraph *fg = r->flamegraph;
    assert_int_equal(fg->root->cumulative, 11);
    assert_int_equal(fg->root->diff, 11 - 22);
    const FlamegraphNode *main = fg->root->children[0];
    expect_node(fg, main, "main", 11, -11, 4);
    expect_node(fg, main->children[0], "a", 5, 1, 2);
    expect_node(fg, main->children[0]->children[0], "b", 3, -1, 0);
    expect_node(fg, main->children[0]->children[1], "c", 2, 2, 0);
    expect_node(fg, main->children[1], "d", 5, -9, 0);
    expect_node(fg, main->children[2], "e", 0, -4, 0);
    expect_node(fg, main->children[3], "r", 1, 1, 1);
    parca__query__v1alpha1__query_response__free_unpacked(r, NULL);

    r = encode(t, REPORT(TOP), 0);
    expect_top(r->top->list[0], "d", 5, 5, -9);
    expect_top(r->top->list[4], "main", 0, 11, -11);
    expect_top(r->top->list[6], "e", 0, 0, -4);
    parca__query__v1alpha1__query_response__free_unpacked(r, NULL);

    char *json = json_of(t, false, 0, 0);
    assert_non_null(
        strstr(json, "{\"name\":\"d\",\"system_name\":\"\",\"filename\":\"d.go\",\"mapping_file\":"
                     "\"/lib/libc.so\",\"label\":\"d\",\"flat\":5,\"cumulative\":5,"
                     "\"flat_base\":14,\"cumulative_base\":14,\"flat_diff\":-9,"
                     "\"cumulative_diff\":-9}"));
    assert_non_null(
        strstr(json, "\"name\":\"e\",\"system_name\":\"\",\"filename\":\"e.go\",\"mapping_file\":"
                     "\"/bin/app\",\"label\":\"e\",\"flat\":0,\"cumulative\":0,\"flat_base\":4,"
                     "\"cumulative_base\":4,\"flat_diff\":-4,\"cumulative_diff\":-4}"));
    free(json);
    calltree_free(t);
}

static void test_diff_relative(void **state) {
    (void)state;
    /* A's total (22) is larger: B is scaled by 22/11 = 2 before differencing. */
    calltree *t = tree_diff(false);
    QueryResponse *r = encode(t, REPORT(FLAMEGRAPH_TABLE), 0);
    const Parca__Query__V1alpha1__Flamegraph *fg = r->flamegraph;
    assert_int_equal(fg->root->cumulative, 22);
    assert_int_equal(fg->root->diff, 0);
    const FlamegraphNode *main = fg->root->children[0];
    expect_node(fg, main, "main", 22, 0, 4);
    expect_node(fg, main->children[0], "a", 10, 6, 2);
    expect_node(fg, main->children[0]->children[0], "b", 6, 2, 0);
    expect_node(fg, main->children[0]->children[1], "c", 4, 4, 0);
    expect_node(fg, main->children[1], "d", 10, -4, 0);
    expect_node(fg, main->children[2], "e", 0, -4, 0);
    expect_node(fg, main->children[3], "r", 2, 2, 1);
    parca__query__v1alpha1__query_response__free_unpacked(r, NULL);
    calltree_free(t);
}

static void test_scaling_rounding(void **state) {
    (void)state;
    calltree *t;
    assert_int_equal(calltree_create(&t, 0, NULL), 0);
    const int64_t in[] = {1, -1, 3, 5, 4, INT64_MAX / 2};
    uint32_t nodes[6];
    for (size_t i = 0; i < 6; i++) {
        char name[8];
        snprintf(name, sizeof name, "f%zu", i);
        nodes[i] = insert(t, name);
        calltree_add_base(t, nodes[i], in[i]);
        calltree_add(t, nodes[i], in[i]);
    }
    assert_true(calltree_is_diff(t));
    assert_int_equal(calltree_scale_base(t, 11, 2, NULL), 0); /* 5.5 -> 6, -5.5 -> -6, 16.5 -> 17 */
    assert_int_equal(calltree_scale_main(t, 1, 3, NULL),
                     0); /* 0.33 -> 0, 1 -> 1, 1.67 -> 2, 1.33 -> 1 */
    const int64_t want_base[] = {6, -6, 17, 28, 22, INT64_MAX};
    const int64_t want_main[] = {0, 0, 1, 2, 1, (INT64_MAX / 2 + 1) / 3};
    for (size_t i = 0; i < 6; i++) {
        assert_int_equal(calltree_node_get(t, nodes[i]).self_base, want_base[i]);
        assert_int_equal(calltree_node_get(t, nodes[i]).self, want_main[i]);
    }
    calltree_free(t);
}

/* ---- merge ---- */

static char *all_reports(calltree *t) {
    strata_buffer b = STRATA_BUFFER_INIT;
    calltree_report_options o = {.unit = "count"};
    assert_int_equal(calltree_encode_query_response(t, REPORT(FLAMEGRAPH_TABLE), &o, &b, NULL), 0);
    assert_int_equal(calltree_encode_query_response(t, REPORT(TOP), &o, &b, NULL), 0);
    /* PPROF too: its ids and strings follow the sorted tree, not the order nodes were made in */
    assert_int_equal(calltree_encode_query_response(t, REPORT(PPROF), &o, &b, NULL), 0);
    json_writer w;
    json_writer_init(&w, &b);
    json_begin_array(&w);
    assert_int_equal(calltree_write_flamebearer_json(t, &o, &w, NULL), 0);
    assert_int_equal(calltree_write_table_json(t, &o, &w, NULL), 0);
    json_end_array(&w);
    assert_int_equal(json_writer_finish(&w), 0);
    size_t len;
    char *s = strata_buffer_detach(&b, &len);
    for (size_t i = 0; i < len; i++) /* protobuf bytes: make the string comparable */
        if (s[i] == '\0')
            s[i] = '0';
    return s;
}

/* A swapped tree reports exactly what the tree it was built as reported; the other is empty. */
static void test_swap(void **state) {
    (void)state;
    calltree *built, *empty, *reference;
    assert_int_equal(calltree_create(&built, 0, NULL), 0);
    assert_int_equal(calltree_create(&empty, 0, NULL), 0);
    assert_int_equal(calltree_create(&reference, 0, NULL), 0);
    add_stacks(built, STACKS_B, 4, false);
    add_stacks(reference, STACKS_B, 4, false);
    calltree_swap(empty, built);
    assert_int_equal(calltree_node_count(built), 1);
    assert_int_equal(calltree_frame_count(built), 0);
    add_stacks(empty, STACKS_B, 1, false); /* still usable after the swap */
    add_stacks(reference, STACKS_B, 1, false);
    assert_int_equal(calltree_finalize(empty, NULL), 0);
    assert_int_equal(calltree_finalize(reference, NULL), 0);
    char *a = all_reports(reference), *b = all_reports(empty);
    assert_string_equal(a, b);
    free(a);
    free(b);
    calltree_free(built);
    calltree_free(empty);
    calltree_free(reference);
}

static void test_merge(void **state) {
    (void)state;
    calltree *whole;
    assert_int_equal(calltree_create(&whole, 0, NULL), 0);
    add_stacks(whole, STACKS_B, 4, false);
    add_stacks(whole, STACKS_A, 3, true);
    assert_int_equal(calltree_finalize(whole, NULL), 0);

    /* Two partial trees, frames interned in different orders, each side split between them. */
    calltree *p1, *p2;
    assert_int_equal(calltree_create(&p1, 0, NULL), 0);
    assert_int_equal(calltree_create(&p2, 0, NULL), 0);
    add_stacks(p1, &STACKS_B[2], 2, false);
    add_stacks(p1, &STACKS_A[1], 1, true);
    add_stacks(p2, STACKS_B, 2, false);
    add_stacks(p2, STACKS_A, 1, true);
    add_stacks(p2, &STACKS_A[2], 1, true);
    assert_int_equal(calltree_merge(p1, p2, NULL), 0);
    assert_int_equal(calltree_finalize(p1, NULL), 0);
    assert_int_equal(calltree_node_count(p1), calltree_node_count(whole));
    assert_int_equal(calltree_frame_count(p1), calltree_frame_count(whole));
    char *a = all_reports(whole), *b = all_reports(p1);
    assert_string_equal(a, b);
    free(a);
    free(b);
    calltree_free(whole);
    calltree_free(p1);
    calltree_free(p2);
}

static void test_empty_tree(void **state) {
    (void)state;
    calltree *t;
    assert_int_equal(calltree_create(&t, 0, NULL), 0);
    assert_int_equal(calltree_finalize(t, NULL), 0);
    QueryResponse *r = encode(t, REPORT(FLAMEGRAPH_TABLE), 10);
    assert_int_equal(r->flamegraph->root->cumulative, 0);
    assert_int_equal(r->flamegraph->height, 0);
    parca__query__v1alpha1__query_response__free_unpacked(r, NULL);
    r = encode(t, REPORT(PPROF), 0);
    parca__query__v1alpha1__query_response__free_unpacked(r, NULL);
    r = encode(t, REPORT(TOP), 0);
    assert_int_equal(r->top->reported, 0);
    parca__query__v1alpha1__query_response__free_unpacked(r, NULL);
    char *json = json_of(t, true, 0, 5);
    assert_string_equal(
        json, "{\"version\":1,\"flamebearer\":{\"names\":[\"total\"],\"levels\":[[0,0,0,0]],"
              "\"numTicks\":0,\"maxSelf\":0},\"metadata\":{\"format\":\"single\",\"units\":"
              "\"count\",\"name\":\"cpu\"},\"trimmed\":0}");
    free(json);
    calltree_free(t);
}

/* ---- group-by ---- */

static uint32_t build_frame(calltree *t, const char *name, const char *mapping, const char *build,
                            uint64_t address, int64_t start_line) {
    calltree_frame_desc d = {calltree_cstr(name),
                             calltree_cstr(""),
                             calltree_cstr("dep.go"),
                             calltree_cstr(mapping),
                             calltree_cstr(build),
                             start_line,
                             {0}};
    d.loc.address = address;
    d.loc.line = start_line + 3;
    uint32_t f;
    assert_int_equal(calltree_intern_frame(t, &d, &f, NULL), 0);
    return f;
}

/* Two builds of one program: main -> dep.Fib in each, at other addresses in other binaries. */
static calltree *two_builds(unsigned group_by) {
    calltree *t;
    assert_int_equal(calltree_create(&t, 0, NULL), 0);
    assert_int_equal(calltree_set_group_by(t, group_by, NULL), 0);
    uint32_t node;
    uint32_t v1[] = {build_frame(t, "main.main", "/v1/app", "b1", 0x401000, 10),
                     build_frame(t, "dep.Fib", "/v1/app", "b1", 0x402000, 20)};
    assert_int_equal(calltree_insert_stack(t, v1, 2, &node, NULL), 0);
    calltree_add_base(t, node, 30);
    uint32_t v2[] = {build_frame(t, "main.main", "/v2/app", "b2", 0x501000, 10),
                     build_frame(t, "dep.Fib", "/v2/app", "b2", 0x502000, 21)};
    assert_int_equal(calltree_insert_stack(t, v2, 2, &node, NULL), 0);
    calltree_add(t, node, 10);
    assert_int_equal(calltree_finalize(t, NULL), 0);
    return t;
}

/* A tree with n one-frame stacks of value 1 each, plus base on the first node when base != 0. */
static calltree *flat_tree(size_t n, int64_t base) {
    calltree *t;
    assert_int_equal(calltree_create(&t, 0, NULL), 0);
    for (size_t i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof name, "f%zu", i);
        uint32_t f = build_frame(t, name, "/app", "b", 0x1000 + 16 * i, 1), node;
        assert_int_equal(calltree_insert_stack(t, &f, 1, &node, NULL), 0);
        calltree_add(t, node, 1);
        if (i == 0 && base != 0)
            calltree_add_base(t, node, base);
    }
    return t;
}

/* The base side of a diff costs nothing until a base value comes (a merge never adds one): 8
 * bytes a node fewer while building, 16 once finalized; values read the same either way, and a
 * tree made a diff without base values finalizes with a zero base side. */
static void test_base_side_only_when_used(void **state) {
    (void)state;
    enum { N = 2000 };
    calltree *plain = flat_tree(N, 0), *diff = flat_tree(N, 5);
    size_t plain_bytes = calltree_memory_bytes(plain), diff_bytes = calltree_memory_bytes(diff);
    assert_true(diff_bytes >= plain_bytes + 8 * N);
    assert_int_equal(calltree_finalize(plain, NULL), 0);
    assert_int_equal(calltree_finalize(diff, NULL), 0);
    assert_true(calltree_memory_bytes(diff) >= calltree_memory_bytes(plain) + 16 * N);
    assert_false(calltree_is_diff(plain));
    assert_true(calltree_is_diff(diff));
    calltree_node_values p = calltree_node_get(plain, CALLTREE_ROOT),
                         d = calltree_node_get(diff, CALLTREE_ROOT);
    assert_int_equal(p.total, N);
    assert_int_equal(p.total_base, 0);
    assert_int_equal(d.total, N);
    assert_int_equal(d.total_base, 5);
    /* merging the diff tree into the plain one brings the base side with it */
    assert_int_equal(calltree_merge(plain, diff, NULL), 0);
    assert_int_equal(calltree_finalize(plain, NULL), 0);
    assert_int_equal(calltree_node_get(plain, CALLTREE_ROOT).total_base, 5);
    assert_int_equal(calltree_node_get(plain, CALLTREE_ROOT).total, 2 * N);
    calltree_free(plain);
    calltree_free(diff);
    /* a diff by flag only: both sides exist once finalized, the base all zero */
    calltree *flagged = flat_tree(3, 0);
    calltree_set_diff(flagged, true);
    assert_int_equal(calltree_finalize(flagged, NULL), 0);
    assert_int_equal(calltree_apply_diff_mode(flagged, false, NULL), 0);
    assert_int_equal(calltree_node_get(flagged, CALLTREE_ROOT).total_base, 0);
    assert_int_equal(calltree_node_get(flagged, CALLTREE_ROOT).total, 3);
    assert_int_equal(calltree_scale_base(flagged, 2, 1, NULL), 0);
    calltree_free(flagged);
}

/* The child index finds every (parent, frame) it was given, through its growth from a small
 * table to 150,000 nodes and after finalize dropped it (the rebuild finds the renumbered nodes). */
static void test_child_index_grows_and_rebuilds(void **state) {
    (void)state;
    enum { FRAMES = 300, NODES = 150000 };
    calltree *t;
    assert_int_equal(calltree_create(&t, 0, NULL), 0);
    uint32_t frames[FRAMES];
    for (size_t i = 0; i < FRAMES; i++) {
        char name[32];
        snprintf(name, sizeof name, "g%zu", i);
        frames[i] = build_frame(t, name, "/app", "b", 0x2000 + 16 * i, 1);
    }
    uint32_t *parent_of = malloc(NODES * sizeof *parent_of),
             *node_of = malloc(NODES * sizeof *node_of);
    assert_non_null(parent_of);
    assert_non_null(node_of);
    for (size_t i = 0; i < NODES; i++) { /* a node under a random earlier one */
        parent_of[i] = i == 0 ? CALLTREE_ROOT : node_of[(i * 7919) % i];
        assert_int_equal(calltree_child(t, parent_of[i], frames[i % FRAMES], &node_of[i], NULL), 0);
        calltree_add(t, node_of[i], 1);
    }
    size_t nodes = calltree_node_count(t);
    for (size_t i = 0; i < NODES; i++) { /* found again, none added */
        uint32_t again;
        assert_int_equal(calltree_child(t, parent_of[i], frames[i % FRAMES], &again, NULL), 0);
        assert_int_equal(again, node_of[i]);
    }
    assert_int_equal(calltree_node_count(t), nodes);
    assert_int_equal(calltree_finalize(t, NULL), 0);
    assert_int_equal(calltree_node_get(t, CALLTREE_ROOT).total, NODES);
    /* after finalize (nodes renumbered depth-first), every path resolves to one node of its own */
    for (size_t i = 0; i < NODES; i += 97) {
        uint32_t path[64], n = 0, cur = CALLTREE_ROOT;
        size_t k = i;
        while (n < 64) { /* the frames from i up to the root, as inserted */
            path[n++] = frames[k % FRAMES];
            if (k == 0)
                break;
            size_t up = (k * 7919) % k;
            k = up;
        }
        if (n == 64)
            continue;
        for (uint32_t j = n; j-- > 0;)
            assert_int_equal(calltree_child(t, cur, path[j], &cur, NULL), 0);
        assert_int_equal(calltree_node_frame(t, cur), frames[i % FRAMES]);
    }
    assert_int_equal(calltree_node_count(t), nodes); /* every path was there */
    free(parent_of);
    free(node_of);
    calltree_free(t);
}

static void test_group_by_function_name(void **state) {
    (void)state;
    calltree *t = two_builds(CALLTREE_GROUP_FUNCTION_NAME);
    assert_int_equal(calltree_frame_count(t), 2);
    assert_int_equal(calltree_node_count(t), 3); /* root, main.main, dep.Fib: one per function */
    uint32_t main = calltree_child_at(t, CALLTREE_ROOT, 0);
    uint32_t fib = calltree_child_at(t, main, 0);
    calltree_frame f = calltree_frame_get(t, calltree_node_frame(t, fib));
    assert_string_equal(f.name, "dep.Fib");
    assert_string_equal(f.filename, "dep.go"); /* agreed by both builds: kept */
    assert_string_equal(f.mapping_file, "");   /* differs: blanked, whichever came first */
    assert_string_equal(f.build_id, "");
    assert_int_equal(f.start_line, 0);
    assert_int_equal(f.loc.address, 0);
    assert_string_equal(calltree_frame_label(t, calltree_node_frame(t, fib)), "dep.Fib");
    calltree_node_values v = calltree_node_get(t, fib);
    assert_int_equal(v.total, 10);
    assert_int_equal(v.total_base, 30);
    calltree_free(t);

    t = two_builds(CALLTREE_GROUP_FUNCTION_NAME | CALLTREE_GROUP_MAPPING_FILE);
    assert_int_equal(calltree_frame_count(t), 4);
    assert_int_equal(calltree_child_count(t, CALLTREE_ROOT), 2);
    f = calltree_frame_get(t, calltree_node_frame(t, calltree_child_at(t, CALLTREE_ROOT, 0)));
    assert_string_equal(f.mapping_file, "/v1/app");
    assert_string_equal(
        calltree_frame_label(t, calltree_node_frame(t, calltree_child_at(t, CALLTREE_ROOT, 1))),
        "main.main [/v2/app]");
    assert_string_equal(f.build_id, "b1"); /* one binary per frame: its build id agrees */
    calltree_free(t);

    t = two_builds(CALLTREE_GROUP_LOCATION);
    assert_int_equal(calltree_frame_count(t), 4);
    assert_string_equal(calltree_frame_label(t, calltree_node_frame(t, 2)), "dep.Fib 0x402000");
    calltree_free(t);
}

static void test_group_by_merge_order(void **state) {
    (void)state;
    /* Merging partial trees in either order gives the same frames (blanking is symmetric). */
    calltree *a = two_builds(CALLTREE_GROUP_FUNCTION_NAME);
    calltree *x, *y;
    assert_int_equal(calltree_create(&x, 0, NULL), 0);
    assert_int_equal(calltree_create(&y, 0, NULL), 0);
    assert_int_equal(calltree_set_group_by(x, CALLTREE_GROUP_FUNCTION_NAME, NULL), 0);
    assert_int_equal(calltree_set_group_by(y, CALLTREE_GROUP_FUNCTION_NAME, NULL), 0);
    calltree *v1 = two_builds(CALLTREE_GROUP_LOCATION);
    assert_int_equal(calltree_merge(x, v1, NULL), 0);
    assert_int_equal(calltree_merge(y, v1, NULL), 0);
    assert_int_equal(calltree_finalize(x, NULL), 0);
    assert_int_equal(calltree_frame_count(x), 2);
    calltree_frame f = calltree_frame_get(x, 1);
    assert_string_equal(f.name, "dep.Fib");
    assert_string_equal(f.mapping_file, "");
    calltree_free(a);
    calltree_free(x);
    calltree_free(y);
    calltree_free(v1);
}

static void test_group_by_parse(void **state) {
    (void)state;
    calltree_grouping g;
    strata_error err;
    assert_int_equal(calltree_group_by_parse(NULL, 0, &g, &err), 0);
    assert_int_equal(g.mask, CALLTREE_GROUP_FUNCTION_NAME);
    assert_false(calltree_grouping_has_labels(&g));
    calltree_grouping_free(&g);
    const char *both[] = {"function_name", "mapping_file"};
    assert_int_equal(calltree_group_by_parse(both, 2, &g, &err), 0);
    assert_int_equal(g.mask, CALLTREE_GROUP_FUNCTION_NAME | CALLTREE_GROUP_MAPPING_FILE);
    calltree_grouping_free(&g);
    assert_int_equal(calltree_group_by_parse_list("location_address,function_file_name", &g, &err),
                     0);
    assert_int_equal(g.mask, CALLTREE_GROUP_LOCATION | CALLTREE_GROUP_FILE_NAME);
    calltree_grouping_free(&g);
    assert_int_equal(calltree_group_by_parse_list("", &g, &err), 0);
    assert_int_equal(g.mask, CALLTREE_GROUP_DEFAULT);
    calltree_grouping_free(&g);
    assert_int_equal(calltree_group_by_parse_list("function_name,bogus", &g, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "bogus"));
    /* pprof labels: one name, repeated names once, bare labels; code frames by function name */
    const char *labels[] = {"labels.endpoint", "labels.region", "labels.endpoint"};
    assert_int_equal(calltree_group_by_parse(labels, 3, &g, &err), 0);
    assert_int_equal(g.mask, CALLTREE_GROUP_FUNCTION_NAME);
    assert_false(g.all_labels);
    assert_int_equal(g.n_labels, 2);
    assert_string_equal(g.labels[0], "endpoint");
    assert_string_equal(g.labels[1], "region");
    assert_true(calltree_grouping_has_labels(&g));
    calltree_grouping_free(&g);
    assert_int_equal(calltree_group_by_parse_list("labels,mapping_file", &g, &err), 0);
    assert_true(g.all_labels);
    assert_int_equal(g.n_labels, 0);
    assert_int_equal(g.mask, CALLTREE_GROUP_MAPPING_FILE);
    calltree_grouping_free(&g);
    assert_int_equal(calltree_group_by_parse_list("labels.", &g, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_int_equal(calltree_group_by_parse_list("labelsx", &g, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
}

/* ---- pprof labels ---- */

static uint32_t label_frame(calltree *t, const char *name, const char *value, const char *name2,
                            const char *value2) {
    calltree_label l[2] = {{calltree_cstr(name), calltree_cstr(value)},
                           {calltree_cstr(name2), calltree_cstr(value2)}};
    uint32_t f;
    assert_int_equal(calltree_intern_label_frame(t, l, name2 != NULL ? 2 : 1, &f, NULL), 0);
    return f;
}

/* Stacks under label frames: endpoint="/a" main;a;b x3, endpoint="/b" main;a;b x5 and main;d x2,
 * endpoint="/b", region="eu" main;d x1, and main;d x4 without labels (directly under the root). */
static calltree *tree_labels(unsigned group_by) {
    calltree *t;
    assert_int_equal(calltree_create(&t, 0, NULL), 0);
    calltree_grouping g = {.mask = group_by};
    assert_int_equal(calltree_grouping_add_label(&g, "endpoint", NULL), 0);
    assert_int_equal(calltree_set_grouping(t, &g, NULL), 0);
    calltree_grouping_free(&g);
    const struct {
        const char *v, *region, *stack;
        int64_t value;
    } rows[] = {{"/a", NULL, "main;a;b", 3},
                {"/b", NULL, "main;a;b", 5},
                {"/b", NULL, "main;d", 2},
                {"/b", "eu", "main;d", 1},
                {NULL, NULL, "main;d", 4}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        uint32_t top = CALLTREE_ROOT;
        if (rows[i].v != NULL) {
            /* given unsorted when two: region before endpoint */
            uint32_t f = rows[i].region != NULL
                             ? label_frame(t, "region", rows[i].region, "endpoint", rows[i].v)
                             : label_frame(t, "endpoint", rows[i].v, NULL, NULL);
            assert_int_equal(calltree_child(t, CALLTREE_ROOT, f, &top, NULL), 0);
        }
        uint32_t node = top;
        for (const char *p = rows[i].stack; *p != '\0';) {
            size_t len = strcspn(p, ";");
            assert_int_equal(calltree_child(t, node, frame_for(t, p, len), &node, NULL), 0);
            p += len + (p[len] == ';');
        }
        calltree_add(t, node, rows[i].value);
    }
    assert_int_equal(calltree_finalize(t, NULL), 0);
    return t;
}

/* Label frames: one per label set, named by their labels, apart from code frames of any name, in
 * the flame graph, TOP, the table and merges; their cumulative is their labels' share. */
static void test_group_by_labels(void **state) {
    (void)state;
    calltree *t = tree_labels(CALLTREE_GROUP_DEFAULT);
    assert_int_equal(calltree_get_grouping(t)->n_labels, 1);
    assert_string_equal(calltree_get_grouping(t)->labels[0], "endpoint");
    /* the same labels give the same frame; a code frame named alike is another frame */
    uint32_t a = label_frame(t, "endpoint", "/a", NULL, NULL);
    assert_int_equal(label_frame(t, "endpoint", "/a", NULL, NULL), a);
    calltree_frame_desc d = {calltree_cstr("endpoint=\"/a\""),
                             calltree_cstr(""),
                             calltree_cstr(""),
                             calltree_cstr(""),
                             calltree_cstr(""),
                             0,
                             {0}};
    uint32_t code;
    assert_int_equal(calltree_intern_frame(t, &d, &code, NULL), 0);
    assert_int_not_equal(code, a);
    assert_int_equal(calltree_frame_label_count(t, a), 1);
    assert_int_equal(calltree_frame_label_count(t, code), 0);
    const char *name, *value;
    calltree_frame_label_at(t, a, 0, &name, &value);
    assert_string_equal(name, "endpoint");
    assert_string_equal(value, "/a");
    calltree_label bad[2] = {{calltree_cstr("x"), calltree_cstr("1")},
                             {calltree_cstr("x"), calltree_cstr("2")}};
    uint32_t f;
    assert_int_equal(calltree_intern_label_frame(t, bad, 2, &f, NULL), -1);
    assert_int_equal(calltree_intern_label_frame(t, bad, 0, &f, NULL), -1);
    calltree_free(t);

    t = tree_labels(CALLTREE_GROUP_DEFAULT);
    QueryResponse *r = encode(t, REPORT(FLAMEGRAPH_TABLE), 0);
    const Parca__Query__V1alpha1__Flamegraph *fg = r->flamegraph;
    assert_int_equal(fg->root->cumulative, 15);
    assert_int_equal(fg->height, 4);
    assert_int_equal(fg->root->n_children, 4); /* children sorted by name */
    expect_node(fg, fg->root->children[0], "endpoint=\"/a\"", 3, 0, 1);
    expect_node(fg, fg->root->children[1], "endpoint=\"/b\"", 7, 0, 1);
    expect_node(fg, fg->root->children[2], "endpoint=\"/b\", region=\"eu\"", 1, 0, 1);
    expect_node(fg, fg->root->children[3], "main", 4, 0, 1);
    expect_node(fg, fg->root->children[1]->children[0], "main", 7, 0, 2);
    parca__query__v1alpha1__query_response__free_unpacked(r, NULL);

    r = encode(t, REPORT(TOP), 0);
    const Parca__Query__V1alpha1__Top *top = r->top;
    assert_int_equal(top->n_list, 7); /* d, b, main, a and the three label frames */
    expect_top(top->list[0], "b", 8, 8, 0);
    expect_top(top->list[1], "d", 7, 7, 0);
    expect_top(top->list[2], "main", 0, 15, 0);
    bool seen_b = false;
    for (size_t i = 0; i < top->n_list; i++)
        if (strcmp(top->list[i]->meta->function->name, "endpoint=\"/b\"") == 0) {
            expect_top(top->list[i], "endpoint=\"/b\"", 0, 7, 0);
            seen_b = true;
        }
    assert_true(seen_b);
    parca__query__v1alpha1__query_response__free_unpacked(r, NULL);

    char *json = json_of(t, false, 0, 0);
    assert_non_null(strstr(json, "{\"name\":\"endpoint=\\\"/b\\\"\",\"system_name\":\"\""));
    assert_non_null(strstr(json, "\"label\":\"endpoint=\\\"/b\\\"\",\"flat\":0,\"cumulative\":7}"));
    free(json);
    json = json_of(t, true, 0, 0);
    assert_non_null(strstr(json, "\"endpoint=\\\"/a\\\"\""));
    free(json);

    /* a merge re-interns label frames with their labels */
    calltree *m;
    assert_int_equal(calltree_create(&m, 0, NULL), 0);
    assert_int_equal(calltree_set_grouping(m, calltree_get_grouping(t), NULL), 0);
    assert_int_equal(calltree_merge(m, t, NULL), 0);
    assert_int_equal(calltree_merge(m, t, NULL), 0);
    assert_int_equal(calltree_finalize(m, NULL), 0);
    assert_int_equal(calltree_node_get(m, CALLTREE_ROOT).total, 30);
    assert_int_equal(calltree_child_count(m, CALLTREE_ROOT), 4);
    uint32_t eu = calltree_node_frame(m, calltree_child_at(m, CALLTREE_ROOT, 2));
    assert_int_equal(calltree_frame_label_count(m, eu), 2);
    calltree_frame_label_at(m, eu, 1, &name, &value);
    assert_string_equal(name, "region");
    assert_string_equal(value, "eu");
    assert_int_equal(calltree_node_get(m, calltree_child_at(m, CALLTREE_ROOT, 2)).total, 2);
    calltree_free(m);
    calltree_free(t);
}

/* The PPROF report puts a label frame's labels back on the samples below it, and a label frame
 * is no location; values that need quoting in the frame's name keep their raw bytes in pprof. */
static void test_pprof_sample_labels(void **state) {
    (void)state;
    calltree *t = tree_labels(CALLTREE_GROUP_EXACT);
    uint32_t q = label_frame(t, "endpoint", "say \"hi\"\n", NULL, NULL);
    uint32_t top, node;
    assert_int_equal(calltree_child(t, CALLTREE_ROOT, q, &top, NULL), 0);
    assert_int_equal(calltree_child(t, top, frame_for(t, "e", 1), &node, NULL), 0);
    calltree_add(t, node, 6);
    calltree_add(t, top, 2); /* an empty stack with labels */
    assert_int_equal(calltree_finalize(t, NULL), 0);
    assert_string_equal(calltree_frame_label(t, q), "endpoint=\"say \\\"hi\\\"\\n\"");
    QueryResponse *r = encode(t, REPORT(PPROF), 0);
    pprof_profile p;
    strata_error err;
    if (pprof_decode(r->pprof.data, r->pprof.len, NULL, &p, &err) != 0)
        fail_msg("%s", err.message);
    assert_int_equal(p.n_samples, 7);
    assert_int_equal(p.n_functions, 5); /* main, a, b, d, e: no function for a label frame */
    char seen[7][300];
    for (size_t i = 0; i < p.n_samples; i++) {
        char stack[128];
        stack_string(&p, i, stack, sizeof stack);
        const pprof_sample *s = &p.samples[i];
        char labels[96] = "";
        for (uint32_t k = 0; k < s->label_count; k++) {
            const pprof_label *l = &p.sample_labels[s->label_offset + k];
            pprof_string key = pprof_string_at(&p, l->key), str = pprof_string_at(&p, l->str);
            size_t len = strlen(labels);
            snprintf(labels + len, sizeof labels - len, "%s%.*s=%.*s", k ? "," : "", (int)key.len,
                     key.ptr, (int)str.len, str.ptr);
        }
        snprintf(seen[i], sizeof seen[i], "%s [%s] %lld", stack, labels,
                 (long long)pprof_sample_value(&p, i, 0));
    }
    const char *want[] = {"main;a;b [endpoint=/a] 3",
                          "main;a;b [endpoint=/b] 5",
                          "main;d [endpoint=/b] 2",
                          "main;d [endpoint=/b,region=eu] 1",
                          "main;d [] 4",
                          "e [endpoint=say \"hi\"\n] 6",
                          " [endpoint=say \"hi\"\n] 2"};
    for (size_t w = 0; w < 7; w++) {
        bool found = false;
        for (size_t i = 0; i < 7 && !found; i++)
            found = strcmp(seen[i], want[w]) == 0;
        if (!found)
            fail_msg("no pprof sample \"%s\" (first: \"%s\")", want[w], seen[0]);
    }
    pprof_profile_free(&p);
    parca__query__v1alpha1__query_response__free_unpacked(r, NULL);
    calltree_free(t);
}

/* An exact tree exports the locations it was built from: addresses, call-site lines, inlined
 * frames as one location with two lines, a location without lines, mapping ranges. */
static void test_pprof_faithful(void **state) {
    (void)state;
    calltree *t;
    assert_int_equal(calltree_create(&t, 0, NULL), 0);
    calltree_frame_desc d = {calltree_cstr("main"),
                             calltree_cstr("main"),
                             calltree_cstr("main.c"),
                             calltree_cstr("/bin/app"),
                             calltree_cstr("abc"),
                             5,
                             {0}};
    d.loc = (calltree_frame_location){.address = 0x1010,
                                      .line = 12,
                                      .memory_start = 0x1000,
                                      .memory_limit = 0x9000,
                                      .file_offset = 0x100,
                                      .mapping_flags = CALLTREE_MAPPING_HAS_FUNCTIONS |
                                                       CALLTREE_MAPPING_HAS_LINE_NUMBERS};
    uint32_t f_main, f_outer, f_inner, f_raw;
    assert_int_equal(calltree_intern_frame(t, &d, &f_main, NULL), 0);
    /* One location at 0x1020 with two lines: inner() inlined into outer(). */
    d.name = d.system_name = calltree_cstr("outer");
    d.start_line = 20;
    d.loc.address = 0x1020;
    d.loc.line = 25;
    assert_int_equal(calltree_intern_frame(t, &d, &f_outer, NULL), 0);
    d.name = d.system_name = calltree_cstr("inner");
    d.start_line = 30;
    d.loc.line = 33;
    d.loc.inlined = true;
    assert_int_equal(calltree_intern_frame(t, &d, &f_inner, NULL), 0);
    /* An unsymbolized location. */
    calltree_frame_desc raw = {calltree_cstr("0x7000"),
                               calltree_cstr(""),
                               calltree_cstr(""),
                               calltree_cstr("[vdso]"),
                               calltree_cstr(""),
                               0,
                               {0}};
    raw.loc.address = 0x7000;
    raw.loc.lineless = true;
    assert_int_equal(calltree_intern_frame(t, &raw, &f_raw, NULL), 0);
    uint32_t s1[] = {f_main, f_outer, f_inner}, s2[] = {f_main, f_outer, f_inner, f_raw}, node;
    assert_int_equal(calltree_insert_stack(t, s1, 3, &node, NULL), 0);
    calltree_add(t, node, 7);
    assert_int_equal(calltree_insert_stack(t, s2, 4, &node, NULL), 0);
    calltree_add(t, node, 2);
    assert_int_equal(calltree_finalize(t, NULL), 0);
    QueryResponse *r = encode(t, REPORT(PPROF), 0);
    pprof_profile p;
    strata_error err;
    if (pprof_decode(r->pprof.data, r->pprof.len, NULL, &p, &err) != 0)
        fail_msg("%s", err.message);
    assert_int_equal(p.n_locations, 3); /* main, outer+inner, the raw address */
    assert_int_equal(p.n_functions, 3);
    assert_int_equal(p.n_mappings, 2);
    assert_int_equal(p.n_samples, 2);
    const pprof_sample *s = &p.samples[0];
    assert_int_equal(s->location_count, 2);
    const pprof_location *leaf = pprof_find_location(&p, p.sample_location_ids[s->location_offset]);
    assert_int_equal(leaf->address, 0x1020);
    assert_int_equal(leaf->line_count, 2);
    const pprof_line *inner = &p.lines[leaf->line_offset], *outer = inner + 1;
    assert_int_equal(inner->line, 33);
    assert_int_equal(outer->line, 25);
    pprof_string name = pprof_string_at(&p, pprof_find_function(&p, inner->function_id)->name);
    assert_memory_equal(name.ptr, "inner", 5);
    name = pprof_string_at(&p, pprof_find_function(&p, outer->function_id)->name);
    assert_memory_equal(name.ptr, "outer", 5);
    const pprof_mapping *m = pprof_find_mapping(&p, leaf->mapping_id);
    assert_non_null(m);
    assert_int_equal(m->memory_start, 0x1000);
    assert_int_equal(m->memory_limit, 0x9000);
    assert_int_equal(m->file_offset, 0x100);
    assert_true(m->has_functions);
    assert_true(m->has_line_numbers);
    assert_false(m->has_inline_frames);
    const pprof_location *root =
        pprof_find_location(&p, p.sample_location_ids[s->location_offset + 1]);
    assert_int_equal(root->address, 0x1010);
    assert_int_equal(p.lines[root->line_offset].line, 12);
    s = &p.samples[1];
    assert_int_equal(s->location_count, 3);
    const pprof_location *vdso = pprof_find_location(&p, p.sample_location_ids[s->location_offset]);
    assert_int_equal(vdso->address, 0x7000);
    assert_int_equal(vdso->line_count, 0);
    assert_int_equal(p.sample_location_ids[s->location_offset + 1], leaf->id); /* shared */
    assert_int_equal(pprof_sample_value(&p, 1, 0), 2);
    pprof_profile_free(&p);
    parca__query__v1alpha1__query_response__free_unpacked(r, NULL);
    calltree_free(t);
}

/* ---- node order, reserve, string ids ---- */

static bool is_ancestor_or_self(const calltree *t, uint32_t a, uint32_t node) {
    for (uint32_t n = node;; n = calltree_node_parent(t, n)) {
        if (n == a)
            return true;
        if (n == CALLTREE_ROOT)
            return false;
    }
}

/* Stacks inserted breadth first (every stack's first frame, then second, ...) and from two
 * sources, as a merge makes them; reordered depth first, every report reads the same, every
 * subtree is a contiguous range of ids, and inserts afterwards find the nodes that exist. */
static void test_depth_first_order(void **state) {
    (void)state;
    static const char *stacks[] = {"main;a;b;x", "main;d",   "main;a;c", "w;y",
                                   "main;a;b;z", "main;r;r", "w;y;q",    "main;e;f"};
    calltree *t[2];
    for (int k = 0; k < 2; k++) {
        assert_int_equal(calltree_create(&t[k], 0, NULL), 0);
        assert_int_equal(calltree_set_group_by(t[k], CALLTREE_GROUP_DEFAULT, NULL), 0);
        assert_int_equal(calltree_reserve(t[k], 64, NULL), 0);
        uint32_t at[8] = {0};
        for (size_t depth = 1; depth <= 4; depth++) {
            for (size_t i = 0; i < 8; i++) {
                const char *p = stacks[i];
                for (size_t d = 0; d + 1 < depth && p != NULL; d++)
                    p = strchr(p, ';') != NULL ? strchr(p, ';') + 1 : NULL;
                if (p == NULL)
                    continue;
                size_t len = strcspn(p, ";");
                assert_int_equal(calltree_child(t[k], at[i], frame_for(t[k], p, len), &at[i], NULL),
                                 0);
            }
        }
        for (size_t i = 0; i < 8; i++)
            calltree_add(t[k], at[i], (int64_t)(i + 1) * 10);
    }
    assert_int_equal(calltree_order_depth_first(t[1], NULL), 0);
    size_t n = calltree_node_count(t[1]);
    assert_int_equal(n, calltree_node_count(t[0]));
    for (uint32_t i = 2; i < n;
         i++) /* preorder: a node's parent is on the path to the one before */
        assert_true(is_ancestor_or_self(t[1], calltree_node_parent(t[1], i), i - 1));
    for (int k = 0; k < 2; k++)
        assert_int_equal(calltree_finalize(t[k], NULL), 0);
    for (int flame = 0; flame < 2; flame++) {
        char *a = json_of(t[0], flame, 0, 0), *b = json_of(t[1], flame, 0, 0);
        assert_string_equal(a, b);
        free(a);
        free(b);
    }
    /* Inserting after finalize rebuilds the child map dropped there: existing nodes are found. */
    uint32_t leaf = insert(t[1], "main;a;b;z");
    assert_int_equal(calltree_node_count(t[1]), n);
    calltree_add(t[1], leaf, 1);
    assert_int_not_equal(insert(t[1], "main;a;q"), leaf);
    assert_int_equal(calltree_node_count(t[1]), n + 1);
    assert_int_equal(calltree_finalize(t[1], NULL), 0);
    assert_int_equal(calltree_node_get(t[1], CALLTREE_ROOT).total, 361);
    calltree_free(t[0]);
    calltree_free(t[1]);
}

/* A frame interned through string ids is the frame interned through its strings. */
static void test_frame_ids(void **state) {
    (void)state;
    calltree *t;
    assert_int_equal(calltree_create(&t, 0, NULL), 0);
    uint32_t by_strings = frame_for(t, "main", 4);
    calltree_frame_ids d = {.start_line = 40};
    assert_int_equal(calltree_intern_string(t, calltree_cstr("main"), &d.name, NULL), 0);
    assert_int_equal(calltree_intern_string(t, calltree_cstr(""), &d.system_name, NULL), 0);
    assert_int_equal(calltree_intern_string(t, calltree_cstr("main.go"), &d.filename, NULL), 0);
    assert_int_equal(calltree_intern_string(t, calltree_cstr("/bin/app"), &d.mapping_file, NULL),
                     0);
    assert_int_equal(calltree_intern_string(t, calltree_cstr("app1"), &d.build_id, NULL), 0);
    uint32_t by_ids;
    assert_int_equal(calltree_intern_frame_ids(t, &d, &by_ids, NULL), 0);
    assert_int_equal(by_ids, by_strings);
    assert_int_equal(calltree_frame_count(t), 1);
    d.start_line = 41; /* a different frame */
    assert_int_equal(calltree_intern_frame_ids(t, &d, &by_ids, NULL), 0);
    assert_int_not_equal(by_ids, by_strings);
    d.build_id = 1u << 30;
    strata_error err;
    assert_int_equal(calltree_intern_frame_ids(t, &d, &by_ids, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_int_equal(calltree_frame_count(t), 2);
    calltree_free(t);
}

/* ---- partial trees on the wire (calltree_wire.c) ---- */

/* Packs t as a PartialTree, unpacks it as a peer would receive it, and adds it to dst. */
static int merge_through_wire(calltree *dst, const calltree *t) {
    Strata__Querier__V1__PartialTree p;
    assert_int_equal(calltree_to_partial(t, &p, NULL), 0);
    size_t size = strata__querier__v1__partial_tree__get_packed_size(&p);
    uint8_t *bytes = malloc(size + 1);
    assert_non_null(bytes);
    strata__querier__v1__partial_tree__pack(&p, bytes);
    calltree_partial_free(&p);
    Strata__Querier__V1__PartialTree *got =
        strata__querier__v1__partial_tree__unpack(NULL, size, bytes);
    assert_non_null(got);
    strata_error err;
    strata_error_clear(&err);
    int rc = calltree_merge_partial(dst, got, &err);
    strata__querier__v1__partial_tree__free_unpacked(got, NULL);
    free(bytes);
    return rc;
}

/* Partials split between two trees (both diff sides, label frames, frames blanked because two
 * builds disagree) and added through the wire give every report of the tree built whole. */
static void test_partial_round_trip(void **state) {
    (void)state;
    calltree *whole = tree_labels(CALLTREE_GROUP_FUNCTION_NAME);
    calltree *builds = two_builds(CALLTREE_GROUP_FUNCTION_NAME);
    calltree *dst;
    assert_int_equal(calltree_create(&dst, 0, NULL), 0);
    assert_int_equal(calltree_set_grouping(dst, calltree_get_grouping(whole), NULL), 0);
    assert_int_equal(merge_through_wire(dst, whole), 0);
    assert_int_equal(merge_through_wire(dst, builds), 0);
    assert_int_equal(calltree_finalize(dst, NULL), 0);
    calltree *reference;
    assert_int_equal(calltree_create(&reference, 0, NULL), 0);
    assert_int_equal(calltree_set_grouping(reference, calltree_get_grouping(whole), NULL), 0);
    assert_int_equal(calltree_merge(reference, whole, NULL), 0);
    assert_int_equal(calltree_merge(reference, builds, NULL), 0);
    assert_int_equal(calltree_finalize(reference, NULL), 0);
    assert_true(calltree_is_diff(dst));
    assert_int_equal(calltree_node_count(dst), calltree_node_count(reference));
    assert_int_equal(calltree_frame_count(dst), calltree_frame_count(reference));
    char *a = all_reports(reference), *b = all_reports(dst);
    assert_string_equal(a, b);
    free(a);
    free(b);
    /* The blanked mapping of dep.Fib stays blank; the label frames keep their labels. */
    assert_int_equal(calltree_frame_label_count(dst, 0), 1);
    calltree_free(whole);
    calltree_free(builds);
    calltree_free(dst);
    calltree_free(reference);
}

/* A partial from another process is checked before use: each broken rule is INVALID_ARGUMENT. */
static void test_partial_malformed(void **state) {
    (void)state;
    calltree *src = tree_b();
    for (int breakage = 0; breakage < 5; breakage++) {
        Strata__Querier__V1__PartialTree p;
        assert_int_equal(calltree_to_partial(src, &p, NULL), 0);
        uint32_t saved = 0;
        size_t saved_n = 0;
        switch (breakage) {
            case 0: /* a node before its parent */
                saved = p.node_parent[0];
                p.node_parent[0] = 5;
                break;
            case 1: /* a frame outside the table */
                saved = p.node_frame[1];
                p.node_frame[1] = 1000;
                break;
            case 2: /* a string outside the table */
                saved = p.frame_strings[0];
                p.frame_strings[0] = (uint32_t)p.n_strings;
                break;
            case 3: /* arrays of different lengths */
                saved_n = p.n_frame_line;
                p.n_frame_line = saved_n - 1;
                break;
            default: /* no root */
                saved_n = p.n_node_self;
                p.n_node_self = 0;
                break;
        }
        calltree *dst;
        assert_int_equal(calltree_create(&dst, 0, NULL), 0);
        strata_error err;
        strata_error_clear(&err);
        assert_int_equal(calltree_merge_partial(dst, &p, &err), -1);
        assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
        assert_non_null(strstr(err.message, "partial call tree"));
        calltree_free(dst);
        if (breakage == 0)
            p.node_parent[0] = saved;
        else if (breakage == 1)
            p.node_frame[1] = saved;
        else if (breakage == 2)
            p.frame_strings[0] = saved;
        else if (breakage == 3)
            p.n_frame_line = saved_n;
        else
            p.n_node_self = saved_n;
        calltree_partial_free(&p);
    }
    calltree_free(src);
}

/* ---- views ---- */

static int compare_lines(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The stacks of t as sorted lines "f1;f2;... self/self_base" ("{k=v}" for label frames, "-" for
 * the root), joined by '|'. */
static void stacks_of(const calltree *t, char *out, size_t cap) {
    size_t n = calltree_node_count(t), lines = 0;
    char **line = calloc(n, sizeof *line);
    assert_non_null(line);
    for (uint32_t node = 0; node < n; node++) {
        calltree_node_values v = calltree_node_get(t, node);
        if (v.self == 0 && v.self_base == 0)
            continue;
        char path[512] = "";
        uint32_t chain[64];
        size_t depth = 0;
        for (uint32_t x = node; x != CALLTREE_ROOT; x = calltree_node_parent(t, x))
            chain[depth++] = x;
        if (depth == 0)
            snprintf(path, sizeof path, "-");
        for (size_t k = depth; k-- > 0;) {
            uint32_t f = calltree_node_frame(t, chain[k]);
            size_t used = strlen(path);
            if (calltree_frame_label_count(t, f) > 0) {
                const char *name, *value;
                calltree_frame_label_at(t, f, 0, &name, &value);
                snprintf(path + used, sizeof path - used, "%s{%s=%s}", used ? ";" : "", name,
                         value);
            } else {
                snprintf(path + used, sizeof path - used, "%s%s", used ? ";" : "",
                         calltree_frame_get(t, f).name);
            }
        }
        char buf[600];
        snprintf(buf, sizeof buf, "%s %lld/%lld", path, (long long)v.self, (long long)v.self_base);
        assert_non_null(line[lines++] = strdup(buf));
    }
    qsort(line, lines, sizeof *line, compare_lines);
    out[0] = '\0';
    for (size_t i = 0; i < lines; i++) {
        size_t used = strlen(out);
        snprintf(out + used, cap - used, "%s%s", i ? "|" : "", line[i]);
        free(line[i]);
    }
    free(line);
}

static void expect_view(const calltree *src, const calltree_view *v, const char *want,
                        int64_t want_removed) {
    calltree *t;
    int64_t removed;
    strata_error err;
    assert_int_equal(calltree_view_apply(src, v, &t, &removed, &err), 0);
    char got[2048];
    stacks_of(t, got, sizeof got);
    assert_string_equal(got, want);
    assert_int_equal(removed, want_removed);
    /* totals are the kept stacks' sums */
    assert_int_equal(calltree_node_get(t, CALLTREE_ROOT).total,
                     calltree_node_get(src, CALLTREE_ROOT).total - want_removed);
    calltree_free(t);
}

static calltree_filter string_filter(bool frames, int which, calltree_match_op op,
                                     const char *value) {
    calltree_filter f = {.frames = frames};
    calltree_string_match m = {true, op, value};
    if (which == 0)
        f.criteria.function_name = m;
    else
        f.criteria.binary = m;
    return f;
}

/* STACKS_B: main;a;b 3, main;a;c 2, main;d 5 (d in /lib/libc.so), main;r;r 1. */
static void test_views(void **state) {
    (void)state;
    calltree *t = tree_b();
    calltree_view v = {0};
    assert_true(calltree_view_is_identity(&v));
    expect_view(t, &v, "main;a;b 3/0|main;a;c 2/0|main;d 5/0|main;r;r 1/0", 0);
    /* stack filters: positive conditions need one frame, negative ones every frame */
    calltree_filter f = string_filter(false, 0, CALLTREE_MATCH_CONTAINS, "B");
    v = (calltree_view){.filters = &f, .n_filters = 1};
    assert_false(calltree_view_is_identity(&v));
    expect_view(t, &v, "main;a;b 3/0", 8);
    f = string_filter(false, 0, CALLTREE_MATCH_NOT_EQUAL, "a");
    expect_view(t, &v, "main;d 5/0|main;r;r 1/0", 5);
    f = string_filter(false, 0, CALLTREE_MATCH_STARTS_WITH, "R");
    expect_view(t, &v, "main;r;r 1/0", 10);
    /* frame filters: frames of libc hidden; frames named m* only */
    f = string_filter(true, 1, CALLTREE_MATCH_NOT_EQUAL, "libc.so");
    expect_view(t, &v, "main 5/0|main;a;b 3/0|main;a;c 2/0|main;r;r 1/0", 0);
    f = string_filter(true, 0, CALLTREE_MATCH_STARTS_WITH, "m");
    expect_view(t, &v, "main 11/0", 0);
    /* the deprecated binary list: only libc's frames; stacks left empty weigh on the root */
    const char *const libc[] = {"libc.so"};
    f = (calltree_filter){.frames = true, .criteria = {.binaries = libc, .n_binaries = 1}};
    expect_view(t, &v, "- 6/0|d 5/0", 0);
    /* numbers: start_line is 10 x the name's length here */
    f = (calltree_filter){.frames = false,
                          .criteria = {.line_number = {true, true, 40}}}; /* no "main" */
    expect_view(t, &v, "", 11);
    /* two filters apply in order */
    calltree_filter two[2] = {string_filter(false, 0, CALLTREE_MATCH_EQUAL, "a"),
                              string_filter(true, 0, CALLTREE_MATCH_NOT_EQUAL, "main")};
    v = (calltree_view){.filters = two, .n_filters = 2};
    expect_view(t, &v, "a;b 3/0|a;c 2/0", 6);
    /* inverted, the sandwich's callees and callers */
    v = (calltree_view){.invert = true};
    expect_view(t, &v, "b;a;main 3/0|c;a;main 2/0|d;main 5/0|r;r;main 1/0", 0);
    v = (calltree_view){.sandwich = "a"};
    expect_view(t, &v, "a;b 3/0|a;c 2/0", 6);
    v = (calltree_view){.sandwich = "a", .invert = true};
    expect_view(t, &v, "a;main 5/0", 6);
    v = (calltree_view){.sandwich = "r"};
    expect_view(t, &v, "r;r 1/0", 10);
    v = (calltree_view){.sandwich = "r", .invert = true};
    expect_view(t, &v, "r;r;main 1/0", 10);
    calltree_free(t);

    /* both sides of a diff are carried */
    t = tree_diff(true);
    v = (calltree_view){.invert = true};
    calltree *inv;
    int64_t removed;
    assert_int_equal(calltree_view_apply(t, &v, &inv, &removed, NULL), 0);
    assert_true(calltree_is_diff(inv));
    assert_int_equal(calltree_node_get(inv, CALLTREE_ROOT).total_base,
                     calltree_node_get(t, CALLTREE_ROOT).total_base);
    assert_int_equal(calltree_node_get(inv, CALLTREE_ROOT).total,
                     calltree_node_get(t, CALLTREE_ROOT).total);
    calltree_free(inv);
    calltree_free(t);

    /* label frames stay on top and are never filtered */
    t = tree_labels(CALLTREE_GROUP_DEFAULT);
    v = (calltree_view){.invert = true};
    char got[2048];
    assert_int_equal(calltree_view_apply(t, &v, &inv, &removed, NULL), 0);
    stacks_of(inv, got, sizeof got);
    assert_non_null(strstr(got, "{endpoint=/a};b;a;main 3/0"));
    assert_non_null(strstr(got, "d;main 4/0"));
    calltree_free(inv);
    f = string_filter(true, 0, CALLTREE_MATCH_EQUAL, "d");
    v = (calltree_view){.filters = &f, .n_filters = 1};
    assert_int_equal(calltree_view_apply(t, &v, &inv, &removed, NULL), 0);
    stacks_of(inv, got, sizeof got);
    assert_non_null(strstr(got, "{endpoint=/a} 3/0"));
    assert_non_null(strstr(got, "{endpoint=/b};d 2/0"));
    calltree_free(inv);
    calltree_free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nodes_and_totals),
        cmocka_unit_test(test_frame_identity),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_flamegraph),
        cmocka_unit_test(test_top),
        cmocka_unit_test(test_table_json),
        cmocka_unit_test(test_pprof),
        cmocka_unit_test(test_table_json_diff_cut),
        cmocka_unit_test(test_flamebearer),
        cmocka_unit_test(test_flamebearer_diff),
        cmocka_unit_test(test_pyroscope_flamegraph),
        cmocka_unit_test(test_diff_absolute),
        cmocka_unit_test(test_diff_relative),
        cmocka_unit_test(test_scaling_rounding),
        cmocka_unit_test(test_merge),
        cmocka_unit_test(test_swap),
        cmocka_unit_test(test_empty_tree),
        cmocka_unit_test(test_base_side_only_when_used),
        cmocka_unit_test(test_child_index_grows_and_rebuilds),
        cmocka_unit_test(test_group_by_function_name),
        cmocka_unit_test(test_group_by_merge_order),
        cmocka_unit_test(test_group_by_parse),
        cmocka_unit_test(test_group_by_labels),
        cmocka_unit_test(test_pprof_sample_labels),
        cmocka_unit_test(test_pprof_faithful),
        cmocka_unit_test(test_depth_first_order),
        cmocka_unit_test(test_frame_ids),
        cmocka_unit_test(test_views),
        cmocka_unit_test(test_callgraph_and_metadata),
        cmocka_unit_test(test_source_report),
        cmocka_unit_test(test_flamechart),
        cmocka_unit_test(test_partial_round_trip),
        cmocka_unit_test(test_partial_malformed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
