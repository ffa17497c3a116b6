/*
 * labels_test.c - tests for label sets, profile types, matchers and selectors.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "labels/labels.h"

/* ---- helpers ------------------------------------------------------------------------------ */

static char *format_selector(const selector *sel) {
    strata_buffer b = STRATA_BUFFER_INIT;
    assert_int_equal(selector_format(sel, &b), 0);
    char *s = strata_buffer_detach(&b, NULL);
    assert_non_null(s);
    return s;
}

/* Parses text, checks it formats as `want`, and that the formatted text parses back the same. */
static void assert_selector_canonical(const char *text, const char *want) {
    selector sel, again;
    strata_error err;
    if (selector_parse(text, &sel, &err) != 0)
        fail_msg("selector_parse(%s) failed: %s", text, err.message);
    char *formatted = format_selector(&sel);
    assert_string_equal(formatted, want);
    assert_int_equal(selector_parse(formatted, &again, &err), 0);
    char *reformatted = format_selector(&again);
    assert_string_equal(reformatted, formatted);
    free(formatted);
    free(reformatted);
    selector_free(&sel);
    selector_free(&again);
}

static void assert_selector_error(const char *text, const char *want_substring) {
    selector sel;
    strata_error err;
    strata_error_clear(&err);
    if (selector_parse(text, &sel, &err) == 0)
        fail_msg("selector_parse(%s) unexpectedly succeeded", text);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    if (strstr(err.message, want_substring) == NULL)
        fail_msg("selector_parse(%s): message \"%s\" lacks \"%s\"", text, err.message,
                 want_substring);
    assert_null(sel.matchers);
    assert_int_equal(sel.n_matchers, 0);
    selector_free(&sel);
}

static label_set make_set(const char *const *pairs, size_t n) {
    label_set set = LABEL_SET_INIT;
    for (size_t i = 0; i < n; i++) {
        const char *name = pairs[2 * i], *value = pairs[2 * i + 1];
        assert_int_equal(label_set_add(&set, name, strlen(name), value, strlen(value), NULL), 0);
    }
    return set;
}

static char *format_set(const label_set *set) {
    strata_buffer b = STRATA_BUFFER_INIT;
    assert_int_equal(label_set_format(set, &b), 0);
    char *s = strata_buffer_detach(&b, NULL);
    assert_non_null(s);
    return s;
}

/* ---- label names and sets ----------------------------------------------------------------- */

static void test_label_name_is_valid(void **state) {
    (void)state;
    assert_true(label_name_is_valid("job", 3));
    assert_true(label_name_is_valid("_a9", 3));
    assert_true(label_name_is_valid("__name__", 8));
    assert_true(label_name_is_valid("jobX", 3)); /* only the first len bytes count */
    assert_false(label_name_is_valid("", 0));
    assert_false(label_name_is_valid("9job", 4));
    assert_false(label_name_is_valid("a-b", 3));
    assert_false(label_name_is_valid("a.b", 3));
    assert_false(label_name_is_valid("é", strlen("é")));
    assert_false(label_name_is_valid(NULL, 0));
}

static void test_label_set_sort_format_get(void **state) {
    (void)state;
    const char *pairs[] = {"pod", "api-1", "job", "api", "env", "prod \"eu\"\n"};
    label_set set = make_set(pairs, 3);
    label_set_sort(&set);
    assert_int_equal(label_set_validate(&set, NULL), 0);
    char *text = format_set(&set);
    assert_string_equal(text, "{env=\"prod \\\"eu\\\"\\n\", job=\"api\", pod=\"api-1\"}");
    assert_string_equal(label_set_get(&set, "job"), "api");
    assert_null(label_set_get(&set, "missing"));

    label_set parsed;
    strata_error err;
    assert_int_equal(label_set_from_text(text, &parsed, &err), 0);
    assert_int_equal(label_set_compare(&parsed, &set), 0);
    assert_int_equal(label_set_hash(&parsed), label_set_hash(&set));
    free(text);
    label_set_free(&parsed);
    label_set_free(&set);
}

static void test_label_set_sort_many_is_stable(void **state) {
    (void)state;
    label_set set = LABEL_SET_INIT;
    char name[16], value[16];
    for (int i = 99; i >= 0; i--) {
        snprintf(name, sizeof name, "l%03d", i / 2); /* every name twice */
        snprintf(value, sizeof value, "%d", i);
        assert_int_equal(label_set_add(&set, name, strlen(name), value, strlen(value), NULL), 0);
    }
    label_set_sort(&set);
    assert_int_equal(set.count, 100);
    for (size_t i = 0; i + 1 < set.count; i++) {
        assert_true(strcmp(set.labels[i].name, set.labels[i + 1].name) <= 0);
        if (strcmp(set.labels[i].name, set.labels[i + 1].name) == 0) /* insertion order kept */
            assert_true(atoi(set.labels[i].value) > atoi(set.labels[i + 1].value));
    }
    strata_error err;
    assert_int_equal(label_set_validate(&set, &err), -1);
    assert_string_equal(err.message, "duplicate label name \"l000\"");
    label_set_free(&set);
}

static void test_label_set_validate_errors(void **state) {
    (void)state;
    strata_error err;
    const char *dup[] = {"job", "a", "job", "b"};
    label_set set = make_set(dup, 2);
    label_set_sort(&set);
    assert_int_equal(label_set_validate(&set, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_string_equal(err.message, "duplicate label name \"job\"");
    label_set_free(&set);

    const char *bad[] = {"a", "1", "9lives", "x"};
    set = make_set(bad, 2);
    label_set_sort(&set);
    assert_int_equal(label_set_validate(&set, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "invalid label name \"9lives\""));
    label_set_free(&set);

    const char *empty[] = {"", "v", "b", "x"};
    set = make_set(empty, 2);
    label_set_sort(&set);
    assert_int_equal(label_set_validate(&set, &err), -1);
    assert_non_null(strstr(err.message, "empty label name"));
    label_set_free(&set);

    const char *unsorted[] = {"b", "1", "a", "2"};
    set = make_set(unsorted, 2);
    assert_int_equal(label_set_validate(&set, &err), -1);
    assert_int_equal(err.code, STRATA_FAILED_PRECONDITION);
    label_set_free(&set);

    assert_int_equal(label_set_add(&set, "a", 1, "x\0y", 3, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_int_equal(set.count, 0);
    label_set_free(&set);
}

static void test_label_set_hash_order_independent(void **state) {
    (void)state;
    const char *forward[] = {"a", "1", "b", "2", "c", "3"};
    const char *backward[] = {"c", "3", "b", "2", "a", "1"};
    const char *other[] = {"a", "1", "b", "23", "c", ""};
    const char *shifted[] = {"a", "1", "b", "2c", "", "3"};
    label_set x = make_set(forward, 3), y = make_set(backward, 3);
    label_set z = make_set(other, 3), w = make_set(shifted, 3);
    label_set_sort(&x);
    label_set_sort(&y);
    label_set_sort(&z);
    label_set_sort(&w);
    assert_int_equal(label_set_compare(&x, &y), 0);
    assert_true(label_set_hash(&x) == label_set_hash(&y));
    assert_true(label_set_hash(&x) != label_set_hash(&z));
    assert_true(label_set_hash(&x) != label_set_hash(&w));
    assert_true(label_set_compare(&x, &z) < 0);
    assert_true(label_set_compare(&z, &x) > 0);
    /* Pinned: the hash is stored in blocks, so it must never change. */
    label_set empty = LABEL_SET_INIT;
    assert_true(label_set_hash(&empty) == label_set_hash(&empty));
    label_set prefix = make_set(forward, 2);
    assert_true(label_set_compare(&prefix, &x) < 0);
    label_set_free(&prefix);
    label_set_free(&x);
    label_set_free(&y);
    label_set_free(&z);
    label_set_free(&w);
}

static void test_label_set_set_remove_copy(void **state) {
    (void)state;
    label_set set = LABEL_SET_INIT;
    assert_int_equal(label_set_set(&set, "m", "1", NULL), 0);
    assert_int_equal(label_set_set(&set, "a", "2", NULL), 0);
    assert_int_equal(label_set_set(&set, "z", "3", NULL), 0);
    assert_int_equal(label_set_set(&set, "m", "4", NULL), 0);
    char *text = format_set(&set);
    assert_string_equal(text, "{a=\"2\", m=\"4\", z=\"3\"}");
    free(text);

    label_set copy;
    assert_int_equal(label_set_copy(&copy, &set, NULL), 0);
    label_set_remove(&set, "m");
    label_set_remove(&set, "nope");
    text = format_set(&set);
    assert_string_equal(text, "{a=\"2\", z=\"3\"}");
    free(text);
    text = format_set(&copy);
    assert_string_equal(text, "{a=\"2\", m=\"4\", z=\"3\"}");
    free(text);

    label_set_clear(&copy);
    assert_int_equal(copy.count, 0);
    text = format_set(&copy);
    assert_string_equal(text, "{}");
    free(text);
    label_set_free(&copy);
    label_set_free(&set);
}

static void test_label_set_from_text_errors(void **state) {
    (void)state;
    label_set set;
    strata_error err;
    assert_int_equal(label_set_from_text(" { b = 'x' , a=`y`, } ", &set, &err), 0);
    assert_int_equal(set.count, 2);
    assert_string_equal(set.labels[0].name, "a");
    assert_string_equal(set.labels[1].value, "x");
    label_set_free(&set);

    assert_int_equal(label_set_from_text("{}", &set, &err), 0);
    assert_int_equal(set.count, 0);
    label_set_free(&set);

    assert_int_equal(label_set_from_text("{a=~\"x\"}", &set, &err), -1);
    assert_string_equal(err.message, "column 3: only \"=\" is allowed in a label set, got \"=~\"");
    assert_int_equal(set.count, 0);
    assert_int_equal(label_set_from_text("{a=\"1\", a=\"2\"}", &set, &err), -1);
    assert_string_equal(err.message, "duplicate label name \"a\"");
    assert_int_equal(label_set_from_text("a:b:c:d:e{}", &set, &err), -1);
    assert_string_equal(err.message, "column 1: expected \"{\", got \"a\"");
    assert_int_equal(label_set_from_text("", &set, &err), -1);
    assert_string_equal(err.message, "column 1: expected \"{\", got end of input");
}

/* ---- profile types ------------------------------------------------------------------------ */

static void test_profile_type(void **state) {
    (void)state;
    profile_type t, copy;
    strata_error err;
    const char *text = "process_cpu:samples:count:cpu:nanoseconds:delta";
    assert_int_equal(profile_type_parse(text, strlen(text), &t, &err), 0);
    assert_string_equal(t.name, "process_cpu");
    assert_string_equal(t.sample_type, "samples");
    assert_string_equal(t.sample_unit, "count");
    assert_string_equal(t.period_type, "cpu");
    assert_string_equal(t.period_unit, "nanoseconds");
    assert_true(t.delta);
    strata_buffer b = STRATA_BUFFER_INIT;
    assert_int_equal(profile_type_format(&t, &b), 0);
    assert_int_equal(b.len, strlen(text));
    assert_memory_equal(b.data, text, b.len);
    strata_buffer_free(&b);
    assert_int_equal(profile_type_copy(&copy, &t, &err), 0);
    assert_true(profile_type_equal(&copy, &t));
    copy.delta = false;
    assert_false(profile_type_equal(&copy, &t));
    profile_type_free(&copy);

    /* Only the first len bytes are read. */
    assert_int_equal(profile_type_parse("memory:alloc_space:bytes:space:bytes{x}", 36, &copy, &err),
                     0);
    assert_false(copy.delta);
    assert_string_equal(copy.period_unit, "bytes");
    assert_false(profile_type_equal(&copy, &t));
    profile_type_free(&copy);
    profile_type_free(&t);

    assert_int_equal(profile_type_parse("a:b:c:d", 7, &t, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "has 4 colon-separated parts, expected 5 or 6"));
    assert_null(t.name);
    assert_int_equal(profile_type_parse("a:b:c:d:e:cumulative", 20, &t, &err), -1);
    assert_string_equal(err.message,
                        "column 11: the 6th part of a profile type must be \"delta\", got "
                        "\"cumulative\"");
    assert_int_equal(profile_type_parse("a:b::d:e", 8, &t, &err), -1);
    assert_string_equal(err.message, "column 5: empty sample_unit in profile type");
    assert_int_equal(profile_type_parse("a:b:c:d:e$", 10, &t, &err), -1);
    assert_non_null(strstr(err.message, "column 10: invalid character 0x24 in the period_unit"));
    assert_int_equal(profile_type_parse("a:b:c:d:e:delta:x", 17, &t, &err), -1);
    assert_non_null(strstr(err.message, "more than 6 colon-separated parts"));
}

/* ---- matchers ----------------------------------------------------------------------------- */

static bool matches(const char *name, label_match_type type, const char *pattern,
                    const char *value) {
    label_matcher m;
    strata_error err;
    if (label_matcher_init(&m, name, type, pattern, &err) != 0)
        fail_msg("label_matcher_init(%s) failed: %s", pattern, err.message);
    bool result = label_matcher_matches(&m, value);
    label_matcher_free(&m);
    return result;
}

static void test_matcher_semantics(void **state) {
    (void)state;
    assert_true(matches("job", LABEL_MATCH_EQUAL, "api", "api"));
    assert_false(matches("job", LABEL_MATCH_EQUAL, "api", "api-2"));
    assert_true(matches("job", LABEL_MATCH_NOT_EQUAL, "api", "web"));
    assert_false(matches("job", LABEL_MATCH_NOT_EQUAL, "api", "api"));
    /* A missing label is "". */
    assert_true(matches("job", LABEL_MATCH_EQUAL, "", NULL));
    assert_false(matches("job", LABEL_MATCH_NOT_EQUAL, "", NULL));
    assert_true(matches("job", LABEL_MATCH_NOT_EQUAL, "api", NULL));
    assert_true(matches("job", LABEL_MATCH_REGEX, ".*", NULL));
    assert_false(matches("job", LABEL_MATCH_REGEX, ".+", NULL));
    assert_true(matches("job", LABEL_MATCH_NOT_REGEX, ".+", NULL));
    assert_true(matches("job", LABEL_MATCH_REGEX, "", ""));
    assert_false(matches("job", LABEL_MATCH_REGEX, "", "x"));
}

static void test_regex_anchoring(void **state) {
    (void)state;
    assert_true(matches("job", LABEL_MATCH_REGEX, "api", "api"));
    assert_false(matches("job", LABEL_MATCH_REGEX, "api", "api-2"));
    assert_false(matches("job", LABEL_MATCH_REGEX, "api", "xapi"));
    assert_true(matches("job", LABEL_MATCH_REGEX, "api|web", "api"));
    assert_true(matches("job", LABEL_MATCH_REGEX, "api|web", "web"));
    assert_false(matches("job", LABEL_MATCH_REGEX, "api|web", "xapi"));
    assert_false(matches("job", LABEL_MATCH_REGEX, "api|web", "apiweb"));
    assert_false(matches("job", LABEL_MATCH_REGEX, "api|web", "web2"));
    /* A shorter alternative first must not hide the full match. */
    assert_true(matches("job", LABEL_MATCH_REGEX, "a|ab", "ab"));
    assert_true(matches("job", LABEL_MATCH_REGEX, "api-.*", "api-2"));
    assert_true(matches("job", LABEL_MATCH_REGEX, "^api$", "api"));
    assert_true(matches("job", LABEL_MATCH_REGEX, "a.c", "a\nc"));
    assert_true(matches("job", LABEL_MATCH_NOT_REGEX, "api|web", "xapi"));
    assert_false(matches("job", LABEL_MATCH_NOT_REGEX, "api|web", "web"));
    assert_true(matches("job", LABEL_MATCH_REGEX, "[)(]+", "()"));
}

/* Prometheus's regexes are RE2's (Go's regexp): what glibc's POSIX regcomp got wrong or refused. */
static void test_regex_re2_syntax(void **state) {
    (void)state;
    /* glibc read \d as "d": this did not match a port and matched "ddd" */
    assert_true(matches("instance", LABEL_MATCH_REGEX, "(.+):(\\d+)", "10.0.0.1:8080"));
    assert_false(matches("instance", LABEL_MATCH_REGEX, "(.+):(\\d+)", "10.0.0.1:ddd"));
    assert_true(matches("instance", LABEL_MATCH_NOT_REGEX, "(.+):(\\d+)", "10.0.0.1:ddd"));
    assert_true(matches("job", LABEL_MATCH_REGEX, "\\w+-\\d", "api_2-7"));
    assert_true(matches("job", LABEL_MATCH_REGEX, "(?i)API", "api"));
    assert_false(matches("job", LABEL_MATCH_REGEX, "(?i:a)pi", "aPI"));
    assert_true(matches("job", LABEL_MATCH_REGEX, "(?:api|web)-\\d+", "web-12"));
    assert_true(matches("job", LABEL_MATCH_REGEX, "api-.*?", "api-canary"));
    assert_true(matches("job", LABEL_MATCH_REGEX, "(?P<svc>api)-(?P<n>\\d)", "api-1"));
    assert_true(matches("pod", LABEL_MATCH_REGEX, "\\Qa.b\\E", "a.b"));
    assert_false(matches("pod", LABEL_MATCH_REGEX, "\\Qa.b\\E", "axb"));
    assert_true(matches("pod", LABEL_MATCH_REGEX, "\\pL+", "\xc3\xa9t\xc3\xa9"));
    assert_false(matches("pod", LABEL_MATCH_REGEX, "(?-s)a.c", "a\nc"));
}

static void test_matcher_init_errors(void **state) {
    (void)state;
    label_matcher m;
    strata_error err;
    assert_int_equal(label_matcher_init(&m, "job", LABEL_MATCH_REGEX, "(api", &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_string_equal(err.message, "invalid regular expression \"(api\": missing ): (api");
    assert_null(m.regex);
    label_matcher_free(&m);
    assert_int_equal(label_matcher_init(&m, "1job", LABEL_MATCH_EQUAL, "x", &err), -1);
    assert_non_null(strstr(err.message, "invalid label name \"1job\""));
    /* RE2 (so Prometheus) has no back-references */
    assert_int_equal(label_matcher_init(&m, "j", LABEL_MATCH_REGEX, "(a)\\1", &err), -1);
    assert_string_equal(err.message,
                        "invalid regular expression \"(a)\\\\1\": invalid escape sequence: \\\\1");
    /* glibc's unmatched ")" was a literal; in RE2 it is an error, so anchoring cannot be undone */
    assert_int_equal(label_matcher_init(&m, "j", LABEL_MATCH_REGEX, "a)|(b", &err), -1);
    assert_non_null(strstr(err.message, "unexpected )"));
    assert_int_equal(label_matcher_init(&m, "j", LABEL_MATCH_REGEX, "(a{100}){21}", &err), -1);
    assert_non_null(strstr(err.message, "invalid repetition size: {21}"));
    assert_int_equal(label_matcher_init(&m, "j", LABEL_MATCH_REGEX, "a+*", &err), -1);
    assert_non_null(strstr(err.message, "bad repetition operator: +*"));
    assert_int_equal(label_matcher_init(&m, "j", LABEL_MATCH_REGEX, "a{2}{3}", &err), -1);
    assert_non_null(strstr(err.message, "bad repetition operator: {2}{3}"));
    /* the pattern selector_fuzz found for glibc: RE2, as Go, refuses invalid UTF-8 in patterns */
    assert_int_equal(
        label_matcher_init(&m, "j", LABEL_MATCH_REGEX,
                           "(\xff\xff||||||||||||||||||||||||||||||||||||||||\xff\xffV\xff"
                           "\x7f\xfa|b){23,}[pha:]]",
                           &err),
        -1);
    assert_non_null(strstr(err.message, ": invalid UTF-8"));
    assert_int_equal(label_matcher_init(&m, "j", LABEL_MATCH_REGEX, "\\pL{1000}", &err), -1);
    assert_non_null(strstr(err.message, "too large once compiled"));
    /* What glibc needed a precheck for (seconds to minutes in regcomp or regexec) compiles at once
     * in RE2 and matches in linear time; the first is what selector_fuzz found, made UTF-8. */
    static const struct {
        const char *pattern, *match, *no_match;
    } cheap[] = {
        {"(\xc3\xa9||||||||||||||||||||||||||||||||||||||||V|b){23,}[pha:]]", "Vb\xc3\xa9:]", "Vb"},
        {"(a?|b?|c?){12,}", "abcabc", "abcd"},
        {"(x|||y)+(x|||y)+(x|||y)+(x|||y)+(x|||y)+(x|||y)+(x|||y)+(x|||y)+", "xyxy", "xyz"},
        {"((a{0,2}|b*|c?){4}){4}", "aabbbc", "d"},
        {"(((((((((((x+)+)+)+)+)+)+)+)+)+)+)+", "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
         "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxy"},
        {"(a?|b?){8}", "abba", "abc"},
        {"(a+)*x{1,1000}", "aaax", "aaa"},
        {"(a*)*b", "aaab", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"},
    };
    for (size_t i = 0; i < sizeof cheap / sizeof cheap[0]; i++) {
        if (label_matcher_init(&m, "j", LABEL_MATCH_REGEX, cheap[i].pattern, &err) != 0)
            fail_msg("refused %s: %s", cheap[i].pattern, err.message);
        assert_true(label_matcher_matches(&m, cheap[i].match));
        assert_false(label_matcher_matches(&m, cheap[i].no_match));
        label_matcher_free(&m);
    }
    char *huge = malloc(STRATA_REGEX_MAX_BYTES + 2);
    assert_non_null(huge);
    memset(huge, 'a', STRATA_REGEX_MAX_BYTES + 1);
    huge[STRATA_REGEX_MAX_BYTES + 1] = '\0';
    assert_int_equal(label_matcher_init(&m, "j", LABEL_MATCH_REGEX, huge, &err), -1);
    assert_non_null(strstr(err.message, "longer than the limit of 1024"));
    huge[STRATA_REGEX_MAX_BYTES] = '\0';
    assert_int_equal(label_matcher_init(&m, "j", LABEL_MATCH_REGEX, huge, &err), 0);
    assert_true(label_matcher_matches(&m, huge));
    label_matcher_free(&m);
    free(huge);
    /* = and != compile nothing */
    assert_int_equal(label_matcher_init(&m, "j", LABEL_MATCH_EQUAL, "(", &err), 0);
    assert_null(m.regex);
    label_matcher_free(&m);
    assert_string_equal(label_match_type_string(LABEL_MATCH_NOT_REGEX), "!~");
}

/* ---- selectors ---------------------------------------------------------------------------- */

static void test_selector_valid(void **state) {
    (void)state;
    assert_selector_canonical("", "{}");
    assert_selector_canonical("  {  }  ", "{}");
    assert_selector_canonical("process_cpu:samples:count:cpu:nanoseconds:delta",
                              "process_cpu:samples:count:cpu:nanoseconds:delta");
    assert_selector_canonical("memory:alloc_space:bytes:space:bytes{}",
                              "memory:alloc_space:bytes:space:bytes");
    assert_selector_canonical(
        "process_cpu:samples:count:cpu:nanoseconds:delta{job=\"api\", pod=~\"api-.*\", "
        "env!=\"dev\"}",
        "process_cpu:samples:count:cpu:nanoseconds:delta{job=\"api\", pod=~\"api-.*\", "
        "env!=\"dev\"}");
    assert_selector_canonical("\n{ job = 'api' ,\tx !~ `a\\d\"` , }\r\n",
                              "{job=\"api\", x!~\"a\\\\d\\\"\"}");
    assert_selector_canonical("{__name__=\"process_cpu\"}", "{__name__=\"process_cpu\"}");
    assert_selector_canonical("a.b-c:x:y:z:w{a=\"\"}", "a.b-c:x:y:z:w{a=\"\"}");
    assert_selector_canonical("{a=\"\\x41\\u00e9\\U0001F600\\101\\a\\b\\f\\v\\'\"}",
                              "{a=\"A\xc3\xa9\xf0\x9f\x98\x80"
                              "A\\x07\\x08\\x0c\\x0b'\"}");
    assert_selector_canonical("{a='\\\"\\t'}", "{a=\"\\\"\\t\"}");
    assert_selector_canonical("{a=\"\\xff\\x7f\"}", "{a=\"\\xff\\x7f\"}");
    assert_selector_canonical("{a=`\n`}", "{a=\"\\n\"}");
}

static void test_selector_parts(void **state) {
    (void)state;
    selector sel;
    strata_error err;
    assert_int_equal(selector_parse("p:s:u:pt:pu{job=~\"a|b\",x!=\"\"}", &sel, &err), 0);
    assert_true(sel.has_profile_type);
    assert_string_equal(sel.profile_type.period_type, "pt");
    assert_false(sel.profile_type.delta);
    assert_int_equal(sel.n_matchers, 2);
    assert_string_equal(sel.matchers[0].name, "job");
    assert_int_equal(sel.matchers[0].type, LABEL_MATCH_REGEX);
    assert_string_equal(sel.matchers[0].value, "a|b");
    assert_non_null(sel.matchers[0].regex);
    assert_int_equal(sel.matchers[1].type, LABEL_MATCH_NOT_EQUAL);

    const char *match[] = {"job", "a", "x", "1"};
    const char *no_x[] = {"job", "b"};
    const char *wrong_job[] = {"job", "ab", "x", "1"};
    label_set s1 = make_set(match, 2), s2 = make_set(no_x, 1), s3 = make_set(wrong_job, 2);
    assert_true(selector_matches(&sel, &s1));
    assert_false(selector_matches(&sel, &s2)); /* x!="" requires x */
    assert_false(selector_matches(&sel, &s3));
    selector_free(&sel);
    selector_free(&sel); /* freeing twice is harmless */

    assert_int_equal(selector_parse("{}", &sel, &err), 0);
    assert_true(selector_matches(&sel, &s3));
    assert_false(sel.has_profile_type);
    selector_free(&sel);
    label_set_free(&s1);
    label_set_free(&s2);
    label_set_free(&s3);
}

static void test_selector_escape_round_trip(void **state) {
    (void)state;
    const char *values[] = {"plain",
                            "quote\"back\\slash",
                            "tab\tnl\nret\r",
                            "\x01\x1f\x7f",
                            "caf\xc3\xa9 \xe2\x82\xac",
                            "bad\xff\xc3utf8",
                            "`tick`",
                            "'single'"};
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        selector sel = {0}, again;
        strata_error err;
        sel.matchers = calloc(1, sizeof *sel.matchers);
        assert_non_null(sel.matchers);
        assert_int_equal(
            label_matcher_init(&sel.matchers[0], "v", LABEL_MATCH_NOT_EQUAL, values[i], &err), 0);
        sel.n_matchers = 1;
        char *text = format_selector(&sel);
        if (selector_parse(text, &again, &err) != 0)
            fail_msg("%s: %s", text, err.message);
        assert_int_equal(again.n_matchers, 1);
        assert_string_equal(again.matchers[0].value, values[i]);
        assert_int_equal(again.matchers[0].type, LABEL_MATCH_NOT_EQUAL);
        free(text);
        selector_free(&sel);
        selector_free(&again);
    }
}

static void test_selector_invalid(void **state) {
    (void)state;
    static const struct {
        const char *text;
        const char *message;
    } cases[] = {
        {"{job}", "column 5: expected \"=\", \"!=\", \"=~\" or \"!~\" after label name \"job\""},
        {"{job \"api\"}", "column 6: expected \"=\", \"!=\", \"=~\" or \"!~\" after label name"},
        {"{job=api}", "column 6: expected a quoted string after \"=\", got \"a\""},
        {"{job=}", "column 6: expected a quoted string after \"=\", got \"}\""},
        {"{job=\"api}", "column 6: unterminated quoted string (missing closing \")"},
        {"{job='api}", "column 6: unterminated quoted string (missing closing ')"},
        {"{job=`api}", "column 6: unterminated raw string"},
        {"{job=\"api\"", "column 11: expected \",\" or \"}\" after a matcher, got end of input"},
        {"{job=\"api\" env=\"x\"}",
         "column 12: expected \",\" or \"}\" after a matcher, got \"e\""},
        {"{,}", "column 2: expected a label name or \"}\", got \",\""},
        {"{a=\"1\",,}", "column 8: expected a label name or \"}\", got \",\""},
        {"{9a=\"1\"}", "column 2: expected a label name or \"}\", got \"9\""},
        {"{a-b=\"1\"}",
         "column 3: expected \"=\", \"!=\", \"=~\" or \"!~\" after label name \"a\""},
        {"{a==\"1\"}", "column 4: expected a quoted string after \"=\", got \"=\""},
        {"{a=\"1\"}x", "column 8: unexpected \"x\" after \"}\""},
        {"{a=\"1\"}}", "column 8: unexpected \"}\" after \"}\""},
        {"{a=\"\\q\"}", "column 5: unknown escape sequence \"\\q\""},
        {"{a=\"\\x4\"}", "column 5: escape sequence \"\\x\" needs 2 hex digits"},
        {"{a=\"\\u12G4\"}", "column 5: escape sequence \"\\u\" needs 4 hex digits"},
        {"{a=\"\\ud800\"}", "column 5: escape sequence is not a valid Unicode code point (U+D800)"},
        {"{a=\"\\U00110000\"}", "not a valid Unicode code point (U+110000)"},
        {"{a=\"\\x00\"}", "column 5: NUL characters are not allowed in strings"},
        {"{a=\"\\u0000\"}", "column 5: NUL characters are not allowed"},
        {"{a=\"\\400\"}", "column 5: octal escape value 256 is larger than 255"},
        {"{a=\"x\ny\"}", "column 6: newline in quoted string"},
        {"{a=\"\\", "column 4: unterminated quoted string"},
        {"{a=~\"(api\"}", "column 5: invalid regular expression \"(api\": missing ): (api"},
        {"{a!~\"[z-a]\"}",
         "column 5: invalid regular expression \"[z-a]\": invalid character class range: z-a"},
        {"{a=~`(x)\\1`}",
         "column 5: invalid regular expression \"(x)\\\\1\": invalid escape sequence: \\\\1"},
        {"{a=~\"a)|(b\"}", "column 5: invalid regular expression \"a)|(b\": unexpected ): a)|(b"},
        {"job=\"api\"", "column 1: profile type has 1 colon-separated part"},
        {"a:b:c:d{}", "column 1: profile type has 4 colon-separated parts, expected 5 or 6"},
        {"a:b:c:d:e:f:g", "column 1: profile type has more than 6 colon-separated parts"},
        {"a:b:c:d:e:cumulative", "column 11: the 6th part of a profile type must be \"delta\""},
        {"a::c:d:e", "column 3: empty sample_type in profile type"},
        {"a:b:c:d:e {x=\"1\"} {", "column 19: unexpected \"{\" after \"}\""},
        {"a:b:c:d:e x", "column 11: expected \"{\" or the end of the selector, got \"x\""},
        {"a:b:c:d:e$", "column 10: expected \"{\" or the end of the selector, got \"$\""},
        {"$", "column 1: expected a profile type or \"{\", got \"$\""},
        {"\"x\"", "column 1: expected a profile type or \"{\", got '\"'"},
        {"{a=\"1\"\x01}", "column 7: expected \",\" or \"}\" after a matcher, got byte 0x01"},
        {"{a=\"\\", "unterminated"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        assert_selector_error(cases[i].text, cases[i].message);
}

static void test_selector_limits(void **state) {
    (void)state;
    strata_buffer b = STRATA_BUFFER_INIT;
    assert_int_equal(strata_buffer_append_byte(&b, '{'), 0);
    for (int i = 0; i < STRATA_SELECTOR_MAX_MATCHERS; i++)
        assert_int_equal(strata_buffer_appendf(&b, "l%d=\"v\",", i), 0);
    assert_int_equal(strata_buffer_append_byte(&b, '}'), 0);
    char *ok = strata_buffer_detach(&b, NULL);
    assert_non_null(ok);
    selector sel;
    strata_error err;
    assert_int_equal(selector_parse(ok, &sel, &err), 0);
    assert_int_equal(sel.n_matchers, STRATA_SELECTOR_MAX_MATCHERS);
    selector_free(&sel);
    size_t len = strlen(ok);
    ok[len - 1] = '\0';
    char too_many[2048];
    snprintf(too_many, sizeof too_many, "%sx=\"y\"}", ok);
    char want[64];
    snprintf(want, sizeof want, "column %zu: too many matchers (the limit is 64)", len);
    assert_selector_error(too_many, want);
    free(ok);

    char *huge = malloc(STRATA_SELECTOR_MAX_BYTES + 2);
    assert_non_null(huge);
    memset(huge, ' ', STRATA_SELECTOR_MAX_BYTES + 1);
    huge[STRATA_SELECTOR_MAX_BYTES + 1] = '\0';
    assert_selector_error(huge, "column 16385: selector is longer than the limit of 16384 bytes");
    huge[STRATA_SELECTOR_MAX_BYTES] = '\0';
    assert_int_equal(selector_parse(huge, &sel, &err), 0);
    selector_free(&sel);
    free(huge);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_label_name_is_valid),
        cmocka_unit_test(test_label_set_sort_format_get),
        cmocka_unit_test(test_label_set_sort_many_is_stable),
        cmocka_unit_test(test_label_set_validate_errors),
        cmocka_unit_test(test_label_set_hash_order_independent),
        cmocka_unit_test(test_label_set_set_remove_copy),
        cmocka_unit_test(test_label_set_from_text_errors),
        cmocka_unit_test(test_profile_type),
        cmocka_unit_test(test_matcher_semantics),
        cmocka_unit_test(test_regex_anchoring),
        cmocka_unit_test(test_regex_re2_syntax),
        cmocka_unit_test(test_matcher_init_errors),
        cmocka_unit_test(test_selector_valid),
        cmocka_unit_test(test_selector_parts),
        cmocka_unit_test(test_selector_escape_round_trip),
        cmocka_unit_test(test_selector_invalid),
        cmocka_unit_test(test_selector_limits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
