/*
 * json_test.c - tests for the JSON reader and writer.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "json/json.h"

static json_document *parse_ok(const char *text) {
    json_document *doc;
    strata_error err;
    if (json_parse(text, strlen(text), &doc, &err) != 0)
        fail_msg("json_parse(%s) failed: %s", text, err.message);
    return doc;
}

static void assert_parse_error(const char *text, size_t len, const char *want) {
    json_document *doc = (json_document *)1;
    strata_error err;
    strata_error_clear(&err);
    if (json_parse(text, len, &doc, &err) == 0)
        fail_msg("json_parse(%.*s) unexpectedly succeeded", (int)len, text);
    assert_null(doc);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    if (strstr(err.message, want) == NULL)
        fail_msg("json_parse(%.*s): \"%s\" lacks \"%s\"", (int)len, text, err.message, want);
}

static const char *string_of(const json_value *v) {
    const char *s;
    assert_true(json_get_string(v, &s, NULL));
    return s;
}

/* Writes doc's root with the writer and returns the text. */
static void write_value(json_writer *w, const json_value *v) {
    switch (json_value_type(v)) {
        case JSON_NULL:
            json_null(w);
            break;
        case JSON_BOOL: {
            bool b;
            assert_true(json_get_bool(v, &b));
            json_bool(w, b);
            break;
        }
        case JSON_NUMBER: {
            int64_t i;
            double d;
            if (json_get_int64(v, &i)) {
                json_int(w, i);
            } else {
                assert_true(json_get_double(v, &d));
                json_double(w, d);
            }
            break;
        }
        case JSON_STRING: {
            const char *s;
            size_t len;
            assert_true(json_get_string(v, &s, &len));
            json_string_len(w, s, len);
            break;
        }
        case JSON_ARRAY:
            json_begin_array(w);
            for (size_t i = 0; i < json_array_length(v); i++)
                write_value(w, json_array_at(v, i));
            json_end_array(w);
            break;
        case JSON_OBJECT:
            json_begin_object(w);
            for (size_t i = 0; i < json_object_size(v); i++) {
                json_key(w, json_object_key_at(v, i));
                write_value(w, json_object_value_at(v, i));
            }
            json_end_object(w);
            break;
    }
}

static char *reserialise(const char *text) {
    json_document *doc = parse_ok(text);
    strata_buffer b = STRATA_BUFFER_INIT;
    json_writer w;
    json_writer_init(&w, &b);
    write_value(&w, json_document_root(doc));
    assert_int_equal(json_writer_finish(&w), 0);
    json_document_free(doc);
    char *out = strata_buffer_detach(&b, NULL);
    assert_non_null(out);
    return out;
}

static void assert_round_trip(const char *text, const char *want) {
    char *out = reserialise(text);
    assert_string_equal(out, want);
    char *again = reserialise(out);
    assert_string_equal(again, want);
    free(out);
    free(again);
}

/* ---- reader ------------------------------------------------------------------------------- */

static void test_parse_meta_json(void **state) {
    (void)state;
    json_document *doc = parse_ok("{\n  \"ulid\": \"01H\",\n  \"minTime\": 1700000000000,\n"
                                  "  \"compaction\": {\"level\": 2, \"sources\": [\"a\", \"b\"]},\n"
                                  "  \"deleted\": false, \"note\": null, \"ratio\": 0.25\n}\n");
    const json_value *root = json_document_root(doc);
    assert_int_equal(json_value_type(root), JSON_OBJECT);
    assert_int_equal(json_object_size(root), 6);
    assert_string_equal(json_object_key_at(root, 0), "ulid");
    assert_string_equal(json_object_key_at(root, 5), "ratio");
    assert_null(json_object_key_at(root, 6));
    assert_string_equal(string_of(json_object_get(root, "ulid")), "01H");
    int64_t t;
    assert_true(json_get_int64(json_object_get(root, "minTime"), &t));
    assert_int_equal(t, 1700000000000);
    const json_value *sources = json_object_get(json_object_get(root, "compaction"), "sources");
    assert_int_equal(json_array_length(sources), 2);
    assert_string_equal(string_of(json_array_at(sources, 1)), "b");
    assert_null(json_array_at(sources, 2));
    bool deleted = true;
    assert_true(json_get_bool(json_object_get(root, "deleted"), &deleted));
    assert_false(deleted);
    assert_int_equal(json_value_type(json_object_get(root, "note")), JSON_NULL);
    double ratio;
    assert_true(json_get_double(json_object_get(root, "ratio"), &ratio));
    assert_true(ratio == 0.25);
    assert_false(json_get_int64(json_object_get(root, "ratio"), &t));
    assert_false(json_get_int64(json_object_get(root, "missing"), &t));
    assert_false(json_get_string(json_object_get(root, "minTime"), &(const char *){NULL}, NULL));
    assert_null(json_object_get(sources, "x"));
    assert_int_equal(json_object_size(sources), 0);
    assert_int_equal(json_array_length(root), 0);
    json_document_free(doc);
    json_document_free(NULL);
}

static void test_scalars_at_top_level(void **state) {
    (void)state;
    const char *texts[] = {" true ", "null", "\"x\"", "-0", "[]", "{}"};
    json_type types[] = {JSON_BOOL, JSON_NULL, JSON_STRING, JSON_NUMBER, JSON_ARRAY, JSON_OBJECT};
    for (size_t i = 0; i < 6; i++) {
        json_document *doc = parse_ok(texts[i]);
        assert_int_equal(json_value_type(json_document_root(doc)), types[i]);
        json_document_free(doc);
    }
}

static void test_every_escape(void **state) {
    (void)state;
    json_document *doc = parse_ok("\"\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u0041 \\u00e9 \\u20AC\"");
    const char *s;
    size_t len;
    assert_true(json_get_string(json_document_root(doc), &s, &len));
    assert_string_equal(s, "\" \\ / \b \f \n \r \t A \xc3\xa9 \xe2\x82\xac");
    assert_int_equal(len, strlen(s));
    json_document_free(doc);
}

static void test_surrogate_pairs(void **state) {
    (void)state;
    json_document *doc = parse_ok("[\"\\uD83D\\uDE00\", \"\\ud834\\udd1e\", \"\xf0\x9f\x98\x80\"]");
    const json_value *root = json_document_root(doc);
    assert_string_equal(string_of(json_array_at(root, 0)), "\xf0\x9f\x98\x80");
    assert_string_equal(string_of(json_array_at(root, 1)), "\xf0\x9d\x84\x9e");
    assert_string_equal(string_of(json_array_at(root, 2)), "\xf0\x9f\x98\x80");
    json_document_free(doc);

    assert_parse_error("\"\\ud800\"", 8, "line 1, column 2: lone high surrogate \\uD800");
    assert_parse_error("\"\\ud800\\u0041\"", 14, "lone high surrogate");
    assert_parse_error("\"\\ud800x\"", 9, "lone high surrogate");
    assert_parse_error("\"\\udc00\"", 8, "line 1, column 2: lone low surrogate \\uDC00");
    assert_parse_error("\"\\u0000\"", 8, "\\u0000 is not allowed");
    assert_parse_error("\"\\u12\"", 6, "\\u must be followed by 4 hex digits");
    assert_parse_error("\"\\u12G4\"", 8, "\\u must be followed by 4 hex digits");
}

static void test_invalid_utf8(void **state) {
    (void)state;
    static const struct {
        const char *text;
        const char *want;
    } cases[] = {
        {"\"\xff\"", "column 2: invalid UTF-8 byte 0xff"},
        {"\"a\xc3\"", "column 3: invalid UTF-8 byte 0xc3"},  /* truncated */
        {"\"\xc0\xaf\"", "invalid UTF-8 byte 0xc0"},         /* overlong */
        {"\"\xe0\x80\xaf\"", "invalid UTF-8 byte 0xe0"},     /* overlong */
        {"\"\xed\xa0\x80\"", "invalid UTF-8 byte 0xed"},     /* UTF-8 surrogate */
        {"\"\xf4\x90\x80\x80\"", "invalid UTF-8 byte 0xf4"}, /* above U+10FFFF */
        {"\"\x80\"", "invalid UTF-8 byte 0x80"},             /* lone continuation */
        {"\"\xe2\x82\"", "invalid UTF-8 byte 0xe2"},         /* cut by the quote */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        assert_parse_error(cases[i].text, strlen(cases[i].text), cases[i].want);
}

static void test_depth_limit(void **state) {
    (void)state;
    char text[2 * (JSON_MAX_DEPTH + 1) + 1];
    for (int i = 0; i < JSON_MAX_DEPTH; i++) {
        text[i] = '[';
        text[JSON_MAX_DEPTH + i] = ']';
    }
    text[2 * JSON_MAX_DEPTH] = '\0';
    json_document *doc = parse_ok(text);
    json_document_free(doc);

    for (int i = 0; i <= JSON_MAX_DEPTH; i++) {
        text[i] = '[';
        text[JSON_MAX_DEPTH + 1 + i] = ']';
    }
    text[2 * (JSON_MAX_DEPTH + 1)] = '\0';
    assert_parse_error(text, strlen(text),
                       "line 1, column 129: nesting is deeper than the limit of 128 levels");
    memset(text, '{', 200);
    assert_parse_error(text, 200, "line 1, column 2: expected a string key in object, got '{'");
}

static void test_big_integers(void **state) {
    (void)state;
    json_document *doc = parse_ok("[9223372036854775807, 9223372036854775808, "
                                  "-9223372036854775808, -9223372036854775809, 0, -0, 1e3, 1.0, "
                                  "18446744073709551616123, 1E400, -2.5e-3, 1e-400]");
    const json_value *a = json_document_root(doc);
    int64_t v;
    double d;
    assert_true(json_get_int64(json_array_at(a, 0), &v));
    assert_true(v == INT64_MAX);
    assert_false(json_get_int64(json_array_at(a, 1), &v));
    assert_true(json_get_double(json_array_at(a, 1), &d));
    assert_true(d == 9223372036854775808.0);
    assert_true(json_get_int64(json_array_at(a, 2), &v));
    assert_true(v == INT64_MIN);
    assert_false(json_get_int64(json_array_at(a, 3), &v));
    assert_true(json_get_int64(json_array_at(a, 4), &v));
    assert_int_equal(v, 0);
    assert_true(json_get_int64(json_array_at(a, 5), &v));
    assert_int_equal(v, 0);
    assert_false(json_get_int64(json_array_at(a, 6), &v)); /* exponent: not an integer literal */
    assert_true(json_get_double(json_array_at(a, 6), &d));
    assert_true(d == 1000.0);
    assert_false(json_get_int64(json_array_at(a, 7), &v));
    assert_true(json_get_double(json_array_at(a, 7), &d));
    assert_true(d == 1.0);
    assert_false(json_get_int64(json_array_at(a, 8), &v));
    assert_false(json_get_double(json_array_at(a, 9), &d)); /* overflows a double */
    assert_true(json_get_double(json_array_at(a, 10), &d));
    assert_true(d == -2.5e-3);
    assert_true(json_get_double(json_array_at(a, 11), &d)); /* underflow to 0 is fine */
    assert_true(d == 0.0);
    assert_false(json_get_double(json_array_at(a, 12), &d)); /* past the end */
    json_document_free(doc);
}

static void test_duplicate_keys(void **state) {
    (void)state;
    json_document *doc = parse_ok("{\"a\": 1, \"a\": 2, \"a\\u0062\": 3}");
    const json_value *root = json_document_root(doc);
    int64_t v;
    assert_int_equal(json_object_size(root), 3);
    assert_true(json_get_int64(json_object_get(root, "a"), &v));
    assert_int_equal(v, 2);
    assert_true(json_get_int64(json_object_get(root, "ab"), &v));
    assert_int_equal(v, 3);
    json_document_free(doc);
}

static void test_syntax_errors(void **state) {
    (void)state;
    static const struct {
        const char *text;
        const char *want;
    } cases[] = {
        {"", "line 1, column 1: expected a JSON value, got end of input"},
        {"   \n  ", "line 2, column 3: expected a JSON value, got end of input"},
        {"{\"a\" 1}", "line 1, column 6: expected ':' after object key, got '1'"},
        {"{\n  \"a\": 1,\n  \"b\" 2\n}", "line 3, column 7: expected ':' after object key"},
        {"[1, 2,]", "line 1, column 7: trailing comma before ']'"},
        {"{\"a\": 1,}", "line 1, column 9: trailing comma before '}'"},
        {"[1 2]", "line 1, column 4: expected ',' or ']' after an array element, got '2'"},
        {"{\"a\": 1 \"b\": 2}", "line 1, column 9: expected ',' or '}' after an object member"},
        {"{a: 1}", "line 1, column 2: expected a string key in object, got 'a'"},
        {"[1", "line 1, column 3: expected ',' or ']' after an array element, got end of input"},
        {"tru", "line 1, column 1: expected a JSON value, got 't'"},
        {"nul", "expected a JSON value"},
        {"NaN", "line 1, column 1: expected a JSON value, got 'N'"},
        {"-Infinity", "line 1, column 2: expected a digit in number"},
        {"01", "line 1, column 1: numbers must not have leading zeros"},
        {"-01", "line 1, column 2: numbers must not have leading zeros"},
        {"1.", "line 1, column 3: expected a digit after the decimal point"},
        {".5", "line 1, column 1: expected a JSON value, got '.'"},
        {"1e", "line 1, column 3: expected a digit in the exponent"},
        {"1e+", "line 1, column 4: expected a digit in the exponent"},
        {"+1", "expected a JSON value, got '+'"},
        {"1 2", "line 1, column 3: unexpected '2' after the JSON value"},
        {"{} x", "line 1, column 4: unexpected 'x' after the JSON value"},
        {"// c\n1", "line 1, column 1: expected a JSON value, got '/'"},
        {"\"abc", "line 1, column 1: unterminated string"},
        {"\"a\\", "line 1, column 1: unterminated string"},
        {"\"a\nb\"", "line 1, column 3: unescaped control character 0x0a in string"},
        {"\"a\tb\"", "unescaped control character 0x09"},
        {"\"\\x41\"", "line 1, column 2: invalid escape: backslash followed by 'x'"},
        {"\"\\'\"", "invalid escape: backslash followed by '''"},
        {"\xef\xbb\xbf{}", "line 1, column 1: expected a JSON value, got byte 0xef"},
        {"[\"a\",\n\n  nope]", "line 3, column 3: expected a JSON value, got 'n'"},
        {"truex", "line 1, column 5: unexpected 'x' after the JSON value"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        assert_parse_error(cases[i].text, strlen(cases[i].text), cases[i].want);
    assert_parse_error("[1,\0 2]", 7, "line 1, column 4: expected a JSON value, got byte 0x00");
    assert_parse_error("\"a\0\"", 4, "line 1, column 3: unescaped control character 0x00");
    /* Only len bytes are read: the terminator after them is not part of the input. */
    assert_parse_error("[1]", 2, "line 1, column 3: expected ',' or ']'");
}

/* ---- writer ------------------------------------------------------------------------------- */

static char *finish(json_writer *w, strata_buffer *b, int want_rc) {
    assert_int_equal(json_writer_finish(w), want_rc);
    char *s = strata_buffer_detach(b, NULL);
    assert_non_null(s);
    return s;
}

static void test_writer_document(void **state) {
    (void)state;
    strata_buffer b = STRATA_BUFFER_INIT;
    json_writer w;
    json_writer_init(&w, &b);
    json_begin_object(&w);
    json_key(&w, "ulid");
    json_string(&w, "01H");
    json_key(&w, "minTime");
    json_int(&w, INT64_MIN);
    json_key(&w, "max");
    json_uint(&w, UINT64_MAX);
    json_key(&w, "list");
    json_begin_array(&w);
    json_bool(&w, true);
    json_bool(&w, false);
    json_null(&w);
    json_string(&w, NULL);
    json_begin_object(&w);
    json_end_object(&w);
    json_begin_array(&w);
    json_end_array(&w);
    json_raw(&w, "{\"x\":[1]}", 9);
    json_end_array(&w);
    json_key(&w, "d");
    json_begin_array(&w);
    json_double(&w, 0.1);
    json_double(&w, 1.0 / 3.0);
    json_double(&w, -2.5e-300);
    json_double(&w, 1e21);
    json_double(&w, -0.0);
    json_double(&w, 3.0);
    json_double(&w, 0.0 / 0.0);
    json_double(&w, 1.0 / 0.0);
    json_end_array(&w);
    json_end_object(&w);
    char *s = finish(&w, &b, 0);
    assert_string_equal(s, "{\"ulid\":\"01H\",\"minTime\":-9223372036854775808,"
                           "\"max\":18446744073709551615,"
                           "\"list\":[true,false,null,null,{},[],{\"x\":[1]}],"
                           "\"d\":[0.1,0.33333333333333331,-2.5e-300,1e+21,-0.0,3,null,null]}");
    free(s);
}

static void test_writer_escaping(void **state) {
    (void)state;
    strata_buffer b = STRATA_BUFFER_INIT;
    json_writer w;
    json_writer_init(&w, &b);
    json_begin_array(&w);
    json_string(&w, "q\" b\\ / \b\f\n\r\t \x01\x1f\x7f caf\xc3\xa9 \xf0\x9f\x98\x80");
    json_string_len(&w, "nul\0x", 5);
    json_string(&w, "bad\xff mid\xc3(end\xe2\x82");
    json_end_array(&w);
    char *s = finish(&w, &b, 0);
    assert_string_equal(s, "[\"q\\\" b\\\\ / \\b\\f\\n\\r\\t \\u0001\\u001f\x7f caf\xc3\xa9 "
                           "\xf0\x9f\x98\x80\",\"nul\\u0000x\","
                           "\"bad\xef\xbf\xbd mid\xef\xbf\xbd(end\xef\xbf\xbd\xef\xbf\xbd\"]");
    /* What the writer emits, the reader accepts (except \u0000, which it rejects by design). */
    json_document *doc;
    strata_error err;
    assert_int_equal(json_parse(s, strlen(s), &doc, &err), -1);
    assert_non_null(strstr(err.message, "\\u0000 is not allowed"));
    free(s);
}

static void test_writer_sticky_failures(void **state) {
    (void)state;
    strata_buffer b = STRATA_BUFFER_INIT;
    json_writer w;

    json_writer_init(&w, &b); /* unbalanced */
    json_begin_array(&w);
    free(finish(&w, &b, -1));

    json_writer_init(&w, &b); /* closing more than opened, then more output is dropped */
    json_begin_array(&w);
    json_end_array(&w);
    json_end_array(&w);
    json_int(&w, 1);
    char *s = finish(&w, &b, -1);
    assert_string_equal(s, "[]");
    free(s);

    json_writer_init(&w, &b); /* key without value */
    json_begin_object(&w);
    json_key(&w, "a");
    json_end_object(&w);
    s = finish(&w, &b, -1);
    assert_string_equal(s, "{\"a\":");
    free(s);

    json_writer_init(&w, &b); /* two top-level values */
    json_int(&w, 1);
    json_int(&w, 2);
    s = finish(&w, &b, -1);
    assert_string_equal(s, "1");
    free(s);

    json_writer_init(&w, &b); /* key at top level */
    json_key(&w, "a");
    free(finish(&w, &b, -1));

    json_writer_init(&w, &b); /* too deep */
    for (int i = 0; i <= JSON_MAX_DEPTH; i++)
        json_begin_array(&w);
    assert_int_equal(b.len, JSON_MAX_DEPTH);
    for (int i = 0; i <= JSON_MAX_DEPTH; i++)
        json_end_array(&w);
    free(finish(&w, &b, -1));

    json_writer_init(&w, &b); /* exactly at the limit is fine */
    for (int i = 0; i < JSON_MAX_DEPTH; i++)
        json_begin_array(&w);
    for (int i = 0; i < JSON_MAX_DEPTH; i++)
        json_end_array(&w);
    s = finish(&w, &b, 0);
    assert_int_equal(strlen(s), 2 * JSON_MAX_DEPTH);
    json_document *doc = parse_ok(s);
    json_document_free(doc);
    free(s);
}

/* protojson Timestamp and Duration, as the Targets and Agents JSON answers carry them. */
static void test_writer_timestamps_and_durations(void **state) {
    (void)state;
    strata_buffer b = STRATA_BUFFER_INIT;
    json_writer w;
    json_writer_init(&w, &b);
    json_begin_array(&w);
    json_timestamp_ns(&w, INT64_C(1764687845123456789));
    json_timestamp_ns(&w, -1); /* one ns before the epoch */
    json_duration_ns(&w, INT64_C(1500000000));
    json_duration_ns(&w, 7);
    json_duration_ns(&w, INT64_C(-1500000000));
    json_end_array(&w);
    assert_int_equal(json_writer_finish(&w), 0);
    assert_int_equal(strata_buffer_append(&b, "", 1), 0);
    assert_string_equal((const char *)b.data,
                        "[\"2025-12-02T15:04:05.123456789Z\",\"1969-12-31T23:59:59.999999999Z\","
                        "\"1.500000000s\",\"0.000000007s\",\"-1.500000000s\"]");
    strata_buffer_free(&b);
}

static void test_round_trips(void **state) {
    (void)state;
    assert_round_trip(" { \"a\" : [ 1 , -2 , 3.5 , 1e2 , true , null ] , \"b\" : { } } ",
                      "{\"a\":[1,-2,3.5,100,true,null],\"b\":{}}");
    assert_round_trip("\"\\u00e9\\ud83d\\ude00 \\\"\\\\\\/\\b\\f\\n\\r\\t\\u001f\"",
                      "\"\xc3\xa9\xf0\x9f\x98\x80 \\\"\\\\/\\b\\f\\n\\r\\t\\u001f\"");
    assert_round_trip("[9223372036854775807,-9223372036854775808,9223372036854775808]",
                      "[9223372036854775807,-9223372036854775808,9.2233720368547758e+18]");
    assert_round_trip("[-0, -0.0, -0e5]", "[0,-0.0,-0.0]");
    assert_round_trip("[0.1,1e-7,123456789012345678,5e-324]",
                      "[0.1,1e-07,123456789012345678,4.94065645841247e-324]");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_meta_json),
        cmocka_unit_test(test_scalars_at_top_level),
        cmocka_unit_test(test_every_escape),
        cmocka_unit_test(test_surrogate_pairs),
        cmocka_unit_test(test_invalid_utf8),
        cmocka_unit_test(test_depth_limit),
        cmocka_unit_test(test_big_integers),
        cmocka_unit_test(test_duplicate_keys),
        cmocka_unit_test(test_syntax_errors),
        cmocka_unit_test(test_writer_document),
        cmocka_unit_test(test_writer_escaping),
        cmocka_unit_test(test_writer_sticky_failures),
        cmocka_unit_test(test_round_trips),
        cmocka_unit_test(test_writer_timestamps_and_durations),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
