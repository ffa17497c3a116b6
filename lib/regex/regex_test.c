/*
 * regex_test.c - conformance of lib/regex with Prometheus's regexes (Go's regexp, compiled as
 * ^(?s:PATTERN)$) and Go's regexp.Expand.
 *
 * Every expected value in the tables below was produced by Go 1.19's regexp package:
 *     re := regexp.MustCompile("^(?s:" + pattern + ")$")
 *     m := re.FindStringSubmatchIndex(value); string(re.ExpandString(nil, template, value, m))
 * and the refused patterns by regexp.Compile (whose messages differ in words, not in verdict),
 * except where a comment says the behaviour is RE2's own.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "regex/regex.h"

static strata_regex *compile_or_fail(const char *pattern) {
    strata_regex *re = NULL;
    strata_error err;
    if (strata_regex_compile(pattern, NULL, &re, &err) != 0)
        fail_msg("pattern \"%s\" refused: %s", pattern, err.message);
    assert_non_null(re);
    return re;
}

/* Matches value with pattern and, on a match, expands template (NULL: none); returns the
 * expansion ("" when there is no template), or NULL when there is no match. Caller frees. */
static char *match_expand(const char *pattern, const char *value, size_t len,
                          const char *template_text) {
    strata_regex *re = compile_or_fail(pattern);
    strata_error err;
    strata_regex_template *t = NULL;
    if (strata_regex_template_compile(re, template_text != NULL ? template_text : "", &t, &err) !=
        0)
        fail_msg("template \"%s\": %s", template_text, err.message);
    strata_regex_span spans[16];
    size_t n = strata_regex_template_spans(t);
    assert_true(n <= 16);
    int rc = strata_regex_match_groups(re, value, len, spans, n, &err);
    assert_true(rc == 0 || rc == 1);
    /* the bool match must agree with the match that tracks groups */
    assert_int_equal(strata_regex_match(re, value, len, &err), rc);
    char *out = NULL;
    if (rc == 1) {
        assert_int_equal(spans[0].start, 0);
        assert_int_equal(spans[0].end, (ptrdiff_t)len);
        strata_buffer b = STRATA_BUFFER_INIT;
        assert_int_equal(strata_regex_template_expand(t, value, spans, n, &b), 0);
        assert_int_equal(strata_buffer_append_byte(&b, 0), 0);
        out = strata_buffer_detach(&b, NULL);
        assert_non_null(out);
    }
    strata_regex_template_free(t);
    strata_regex_free(re);
    return out;
}

typedef struct conformance_case {
    const char *pattern;
    const char *value;
    const char *template_text; /* NULL: only whether it matches */
    const char *want;          /* the expansion ("" without a template); NULL: no match */
} conformance_case;

static const conformance_case cases[] = {
    /* the issue's example: glibc read \d as d, so this failed on ports and matched "ddd" */
    {"(.+):(\\d+)", "10.0.0.1:8080", "$1", "10.0.0.1"},
    {"(.+):(\\d+)", "10.0.0.1:8080", "$2", "8080"},
    {"(.+):(\\d+)", "10.0.0.1:ddd", NULL, NULL},
    {"\\d+", "0123456789", NULL, ""},
    {"\\d+", "12a", NULL, NULL},
    {"\\w+", "foo_Bar9", NULL, ""},
    {"\\w+", "foo-bar", NULL, NULL},
    {"\\s*x\\s*", " \tx\n", NULL, ""},
    {"\\D\\W\\S", "a-b", NULL, ""},
    /* flags */
    {"(?i)foo", "FoO", NULL, ""},
    {"(?i:api)-server", "API-server", NULL, ""},
    {"(?i:api)-server", "API-SERVER", NULL, NULL},
    {"(?U)(a+)(a*)", "aaa", "$1,$2", "a,aa"},
    /* non-capturing groups */
    {"(?:ab)+", "abab", "[$1]", "[]"},
    {"(?:a|b)(c)", "bc", "$1", "c"},
    /* non-greedy, leftmost-first captures (POSIX's leftmost-longest would differ) */
    {"(.*?)(b*)", "abb", "$1|$2", "a|bb"},
    {"(a+?)(a*)", "aaa", "$1,$2", "a,aa"},
    {"(.*?)", "abc", "$1", "abc"}, /* anchoring still makes it take everything */
    {"(a|ab)(c|bcd)(d*)", "abcd", "$1-$2-$3", "a-bcd-"},
    {"(.*)-(.*)", "a-b-c", "$1|$2", "a-b|c"},
    {"(.*?)-(.*)", "a-b-c", "$1|$2", "a|b-c"},
    /* named groups */
    {"(?P<host>[^:]+):(?P<port>\\d+)", "example.com:443", "${port}/$host", "443/example.com"},
    {"(?P<host>[^:]+):(?P<port>\\d+)", "example.com:443", "$1 ${2}", "example.com 443"},
    {"(?P<a>x)|(?P<a>y)", "y", "[$a]", "[y]"}, /* a repeated name: the group that took part */
    {"(?P<1x>x)", "x", "[$1x][${1x}][$1]", "[x][x][x]"},
    /* expansion, as Go's regexp.Expand */
    {"(.*)", "foo", "$1x", ""}, /* the group named "1x", which does not exist */
    {"(.*)", "foo", "${1}x", "foox"},
    {"(.*)", "foo", "$$1 $ ${ ${1 $-", "$1 $ ${ ${1 $-"},
    {"(.*)", "foo", "<$0>", "<foo>"},
    {"(.*)", "foo", "<$2>", "<>"},          /* no such group */
    {"(.*)", "foo", "<$01>", "<>"},         /* a leading zero makes it a name */
    {"(.*)", "foo", "<$name>", "<>"},       /* no such name */
    {"(a)(b)?", "a", "[$2][${2}]", "[][]"}, /* a group that took no part */
    {"(.*)", "foo", "$1$1${1}", "foofoofoo"},
    {"(.*)", "foo", "no references", "no references"},
    {"(.*)", "foo", "", ""},
    {"(.*)", "foo", "$1\xc3\xa9", ""},            /* "1é" is a name: Go's letters are Unicode's */
    {"(.*)", "foo", "$1\xc2\xb7", "foo\xc2\xb7"}, /* U+00B7 is punctuation, it ends the name */
    {"(.*)", "foo", "$1\xff", "foo\xff"},         /* an invalid byte is U+FFFD, not a letter */
    {"__meta_kubernetes_pod_label_(.+)", "__meta_kubernetes_pod_label_app", "$1", "app"},
    {"(.+)(:[0-9]+)?;([0-9]+)", "10.0.0.1;8080", "$1:$3", "10.0.0.1:8080"},
    /* anchoring: the whole value, both ends */
    {"foo", "foo", NULL, ""},
    {"foo", "foobar", NULL, NULL},
    {"foo", "xfoo", NULL, NULL},
    {"foo|bar", "bar", NULL, ""},
    {"foo|bar", "foobar", NULL, NULL},
    {"a|ab", "ab", NULL, ""},
    {"^foo$", "foo", NULL, ""},
    {"api-.*", "api-2", NULL, ""},
    {"[)(]+", "()", NULL, ""},
    /* `.` matches newline, as under (?s), unless the pattern turns it off */
    {"a.c", "a\nc", NULL, ""},
    {".*", "line1\nline2", NULL, ""},
    {"(?-s)a.c", "a\nc", NULL, NULL},
    /* the empty pattern matches only the empty value */
    {"", "", NULL, ""},
    {"", "x", NULL, NULL},
    {"x*", "", NULL, ""},
    {".+", "", NULL, NULL},
    /* other RE2 syntax Prometheus users write */
    {"\\Qa.b\\E", "a.b", NULL, ""},
    {"\\Qa.b\\E", "axb", NULL, NULL},
    {"[[:alpha:]]+", "abc", NULL, ""},
    {"\\pL+", "\xc3\xa9t\xc3\xa9", NULL, ""},
    {"caf.", "caf\xc3\xa9", NULL, ""}, /* `.` is one code point */
    {"a{2,3}", "aaa", NULL, ""},
    {"a{2,3}", "aaaa", NULL, NULL},
    {"x{1000}", "", NULL, NULL}, /* RE2's and Go's largest count */
};

static void test_conformance(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const conformance_case *c = &cases[i];
        char *got = match_expand(c->pattern, c->value, strlen(c->value), c->template_text);
        if ((got == NULL) != (c->want == NULL) || (got != NULL && strcmp(got, c->want) != 0))
            fail_msg("case %zu: \"%s\" against \"%s\" with \"%s\": want %s%s%s, got %s%s%s", i,
                     c->pattern, c->value, c->template_text ? c->template_text : "",
                     c->want ? "\"" : "", c->want ? c->want : "no match", c->want ? "\"" : "",
                     got ? "\"" : "", got ? got : "no match", got ? "\"" : "");
        free(got);
    }
}

/* A value may hold NUL bytes and need not be NUL-terminated. */
static void test_lengths(void **state) {
    (void)state;
    char *got = match_expand("a\\x00(b)", "a\0bc", 3, "$1");
    assert_non_null(got);
    assert_string_equal(got, "b");
    free(got);
    assert_null(match_expand("ab", "abc", 3, NULL));
}

typedef struct refused_case {
    const char *pattern;
    const char *message; /* the whole error message */
} refused_case;

static const refused_case refused[] = {
    {"(", "invalid regular expression \"(\": missing ): ("},
    {"(api", "invalid regular expression \"(api\": missing ): (api"},
    {"a{2,1}", "invalid regular expression \"a{2,1}\": invalid repetition size: {2,1}"},
    {"\\8", "invalid regular expression \"\\\\8\": invalid escape sequence: \\\\8"},
    /* no back-references in RE2 (nor in Go, nor Prometheus) */
    {"(a)\\1", "invalid regular expression \"(a)\\\\1\": invalid escape sequence: \\\\1"},
    /* Go would accept this spliced into ^(?s:a)|(b)$ and match "axyz"; parsed alone it is not a
     * regex */
    {"a)|(b", "invalid regular expression \"a)|(b\": unexpected ): a)|(b"},
    {"x**", "invalid regular expression \"x**\": bad repetition operator: **"},
    {"a+*", "invalid regular expression \"a+*\": bad repetition operator: +*"},
    {"a{1001}", "invalid regular expression \"a{1001}\": invalid repetition size: {1001}"},
    {"(a{1000}){1000}",
     "invalid regular expression \"(a{1000}){1000}\": invalid repetition size: {1000}"},
    {"[z-a]", "invalid regular expression \"[z-a]\": invalid character class range: z-a"},
    {"(?P<n>a)(?P<n!>b)",
     "invalid regular expression \"(?P<n>a)(?P<n!>b)\": invalid named capture group: (?P<n!>"},
    /* Go 1.22's other spelling of a named group: Debian 12's RE2 does not know it (RE2's own) */
    {"(?<n>a)", "invalid regular expression \"(?<n>a)\": invalid perl operator: (?<"},
    /* Go refuses invalid UTF-8 in a pattern too; the message escapes the byte */
    {"a\xff", "invalid regular expression \"a\\xff\": invalid UTF-8"},
    {"\x01(", "invalid regular expression \"\\x01(\": missing ): \\x01("},
};

static void test_refused(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        strata_regex *re = NULL;
        strata_error err;
        strata_error_clear(&err);
        if (strata_regex_compile(refused[i].pattern, NULL, &re, &err) != -1)
            fail_msg("accepted \"%s\"", refused[i].pattern);
        assert_null(re);
        assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
        if (strcmp(err.message, refused[i].message) != 0)
            fail_msg("\"%s\": want '%s', got '%s'", refused[i].pattern, refused[i].message,
                     err.message);
    }
}

static double seconds_since(const struct timespec *start) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - start->tv_sec) + (double)(now.tv_nsec - start->tv_nsec) / 1e9;
}

/* Patterns that took glibc (or any backtracking engine) seconds to minutes to compile or match,
 * the reason for the precheck this module replaced: RE2 compiles them at once and matches in time
 * linear in the value. The bound is generous so valgrind's slowdown stays far inside it. */
static void test_pathological_patterns_are_cheap(void **state) {
    (void)state;
    static const char *const patterns[] = {
        "(a?|b?|c?){12,}",
        "(a?|b?|c?|d?|e?|f?|g?|h?|i?|j?){8,}",
        "(x|||y)+(x|||y)+(x|||y)+(x|||y)+(x|||y)+(x|||y)+(x|||y)+(x|||y)+",
        "((a{0,2}|b*|c?){4}){4}",
        "(((((((((((x+)+)+)+)+)+)+)+)+)+)+)+",
        "(a{100}){10}",
        "(a*)*b",
        "(x+x+)+y",
        "(a|aa)*c",
        "(.*a){20}",
    };
    /* runs of a and x that end in a byte none of them accepts at the end */
    size_t len = 20000;
    char *as = malloc(len + 1), *xs = malloc(len + 1);
    assert_non_null(as);
    assert_non_null(xs);
    memset(as, 'a', len - 1);
    memset(xs, 'x', len - 1);
    as[len - 1] = xs[len - 1] = '!';
    as[len] = xs[len] = '\0';
    for (size_t i = 0; i < sizeof patterns / sizeof patterns[0]; i++) {
        struct timespec start;
        clock_gettime(CLOCK_MONOTONIC, &start);
        strata_regex *re = compile_or_fail(patterns[i]);
        strata_error err;
        strata_regex_span spans[4];
        assert_int_equal(strata_regex_match(re, as, len, &err), 0);
        assert_int_equal(strata_regex_match_groups(re, xs, len, spans, 4, &err), 0);
        strata_regex_free(re);
        double took = seconds_since(&start);
        if (took > 5.0)
            fail_msg("\"%s\" took %.1f s", patterns[i], took);
    }
    /* and a match with groups over a long value */
    as[len - 1] = 'a';
    strata_regex *re = compile_or_fail("(a*)*(a)");
    strata_regex_span spans[3];
    strata_error err;
    assert_int_equal(strata_regex_match_groups(re, as, len, spans, 3, &err), 1);
    assert_int_equal(spans[2].start, (ptrdiff_t)len - 1);
    strata_regex_free(re);
    free(as);
    free(xs);
}

/* What is still bounded: the pattern's length and the memory of its compiled form. */
static void test_limits(void **state) {
    (void)state;
    char *huge = malloc(STRATA_REGEX_MAX_BYTES + 2);
    assert_non_null(huge);
    memset(huge, 'a', STRATA_REGEX_MAX_BYTES + 1);
    huge[STRATA_REGEX_MAX_BYTES + 1] = '\0';
    strata_regex *re = NULL;
    strata_error err;
    assert_int_equal(strata_regex_compile(huge, NULL, &re, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_string_equal(err.message, "regular expression is 1025 bytes, longer than the limit of "
                                     "1024");
    huge[STRATA_REGEX_MAX_BYTES] = '\0';
    assert_int_equal(strata_regex_compile(huge, NULL, &re, &err), 0);
    assert_int_equal(strata_regex_match(re, huge, STRATA_REGEX_MAX_BYTES, &err), 1);
    strata_regex_free(re);
    free(huge);

    /* 1000 repetitions of every letter in Unicode: short to write, too large to compile */
    assert_int_equal(strata_regex_compile("\\pL{1000}", NULL, &re, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_string_equal(err.message, "invalid regular expression \"\\\\pL{1000}\": too large once "
                                     "compiled (over the limit of 8388608 bytes of memory); use "
                                     "fewer or smaller repetitions and classes");
    /* the limits can be set per use */
    strata_regex_limits small = {.max_bytes = 4, .max_mem = 0};
    assert_int_equal(strata_regex_compile("abcde", &small, &re, &err), -1);
    assert_non_null(strstr(err.message, "5 bytes, longer than the limit of 4"));
    assert_int_equal(strata_regex_compile("abcd", &small, &re, &err), 0);
    strata_regex_free(re);
    strata_regex_limits tight = {.max_bytes = 0, .max_mem = 64 << 10};
    assert_int_equal(strata_regex_compile(".{1000}", &tight, &re, &err), -1);
    assert_non_null(strstr(err.message, "too large once compiled (over the limit of 65536"));
    assert_int_equal(strata_regex_compile(".{10}", &tight, &re, &err), 0);
    strata_regex_free(re);
}

/* Long patterns and reasons are shortened in messages, and stay one printable line. */
static void test_message_shape(void **state) {
    (void)state;
    char pattern[600];
    memset(pattern, 'b', sizeof pattern - 2);
    pattern[sizeof pattern - 2] = '(';
    pattern[sizeof pattern - 1] = '\0';
    strata_regex *re = NULL;
    strata_error err;
    assert_int_equal(strata_regex_compile(pattern, NULL, &re, &err), -1);
    assert_true(strlen(err.message) < 300);
    assert_non_null(strstr(err.message, "bbb...\": missing ): bbb"));
    assert_null(strchr(err.message, '\n'));
}

static void test_groups(void **state) {
    (void)state;
    strata_regex *re = compile_or_fail("(?P<host>[^:]+)(:(?P<port>\\d+))?");
    assert_string_equal(strata_regex_pattern(re), "(?P<host>[^:]+)(:(?P<port>\\d+))?");
    assert_int_equal(strata_regex_group_count(re), 3);
    assert_string_equal(strata_regex_group_name(re, 1), "host");
    assert_null(strata_regex_group_name(re, 2));
    assert_string_equal(strata_regex_group_name(re, 3), "port");
    assert_null(strata_regex_group_name(re, 4));
    assert_null(strata_regex_group_name(re, 0));
    /* more spans than groups: the rest are unset; unmatched groups are unset */
    strata_regex_span spans[6];
    strata_error err;
    assert_int_equal(strata_regex_match_groups(re, "db", 2, spans, 6, &err), 1);
    assert_int_equal(spans[1].start, 0);
    assert_int_equal(spans[1].end, 2);
    for (size_t i = 2; i < 6; i++)
        assert_int_equal(spans[i].start, -1);
    /* fewer spans than groups */
    assert_int_equal(strata_regex_match_groups(re, "db:5432", 7, spans, 2, &err), 1);
    assert_int_equal(spans[1].end, 2);
    strata_regex_free(re);

    /* more groups than fit on the shim's stack */
    char many[200] = "";
    for (int i = 0; i < 40; i++)
        strcat(many, "(.)");
    re = compile_or_fail(many);
    char value[41];
    for (int i = 0; i < 40; i++)
        value[i] = (char)('A' + i % 26);
    value[40] = '\0';
    strata_regex_template *t = NULL;
    assert_int_equal(strata_regex_template_compile(re, "$40$1${39}", &t, &err), 0);
    assert_int_equal(strata_regex_template_spans(t), 41);
    strata_regex_span all[41];
    assert_int_equal(strata_regex_match_groups(re, value, 40, all, 41, &err), 1);
    strata_buffer b = STRATA_BUFFER_INIT;
    assert_int_equal(strata_regex_template_expand(t, value, all, 41, &b), 0);
    assert_int_equal(b.len, 3);
    assert_memory_equal(b.data, "NAM", 3);
    /* expanding with fewer spans than the template reads leaves those groups out */
    strata_buffer_reset(&b);
    assert_int_equal(strata_regex_template_expand(t, value, all, 2, &b), 0);
    assert_int_equal(b.len, 1);
    assert_memory_equal(b.data, "A", 1);
    strata_buffer_free(&b);
    strata_regex_template_free(t);
    strata_regex_free(re);
    strata_regex_free(NULL);
    strata_regex_template_free(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conformance), cmocka_unit_test(test_lengths),
        cmocka_unit_test(test_refused),     cmocka_unit_test(test_pathological_patterns_are_cheap),
        cmocka_unit_test(test_limits),      cmocka_unit_test(test_message_shape),
        cmocka_unit_test(test_groups),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
