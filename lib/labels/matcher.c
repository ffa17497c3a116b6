/*
 * matcher.c - profile types and label matchers (see labels.h).
 *
 * Regex matchers are lib/regex's: RE2 with Prometheus's semantics, the pattern compiled as written
 * and matched against the whole value (^(?s:re)$ without splicing the text, so a pattern such as
 * `a)|(b` is refused as unbalanced rather than unanchored). RE2 runs in time linear in the value
 * whatever the pattern, so nothing is checked before compiling beyond the pattern's length and
 * RE2's memory limit (both in lib/regex).
 */
#include "labels/labels.h"
#include "labels/labels_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- profile types ------------------------------------------------------------------------ */

static const char *const profile_type_part_names[] = {
    "name", "sample_type", "sample_unit", "period_type", "period_unit", "delta",
};

static bool is_profile_type_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == '-';
}

/* Checks one colon-separated part; returns the offset of a bad character or `len` if fine. */
static size_t profile_type_part_bad_offset(const char *part, size_t len) {
    for (size_t i = 0; i < len; i++) {
        if (!is_profile_type_char(part[i]))
            return i;
    }
    return len;
}

static char *copy_part(const char *s, size_t len) {
    char *copy = malloc(len + 1);
    if (copy != NULL) {
        memcpy(copy, s, len);
        copy[len] = '\0';
    }
    return copy;
}

/* Splits text at ':' into at most 6 parts; returns the number of parts (7 means "more than 6"). */
static size_t split_profile_type(const char *text, size_t len, size_t starts[6], size_t lens[6]) {
    size_t n = 0, start = 0;
    for (size_t i = 0; i <= len; i++) {
        if (i < len && text[i] != ':')
            continue;
        if (n == 6)
            return 7;
        starts[n] = start;
        lens[n] = i - start;
        n++;
        start = i + 1;
    }
    return n;
}

static int check_profile_type_parts(const char *text, size_t n, const size_t starts[6],
                                    const size_t lens[6], size_t column, strata_error *err) {
    for (size_t p = 0; p < n; p++) {
        if (lens[p] == 0)
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "column %zu: empty %s in profile type", column + starts[p],
                                    profile_type_part_names[p]);
        size_t bad = profile_type_part_bad_offset(text + starts[p], lens[p]);
        if (bad < lens[p])
            return strata_error_set(
                err, STRATA_INVALID_ARGUMENT,
                "column %zu: invalid character 0x%02x in the %s of the profile type (allowed: "
                "letters, digits, '_', '.', '-')",
                column + starts[p] + bad, (unsigned char)text[starts[p] + bad],
                profile_type_part_names[p]);
    }
    if (n == 6 && (lens[5] != 5 || memcmp(text + starts[5], "delta", 5) != 0))
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "column %zu: the 6th part of a profile type must be \"delta\", "
                                "got \"%.*s\"",
                                column + starts[5], (int)(lens[5] > 64 ? 64 : lens[5]),
                                text + starts[5]);
    return 0;
}

int labels_parse_profile_type(const char *text, size_t len, size_t column, profile_type *out,
                              strata_error *err) {
    memset(out, 0, sizeof *out);
    size_t starts[6], lens[6];
    size_t n = split_profile_type(text, len, starts, lens);
    if (n < 5 || n > 6)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "column %zu: profile type has %s%zu colon-separated parts, "
                                "expected 5 or 6 "
                                "(name:sample_type:sample_unit:period_type:period_unit[:delta])",
                                column, n > 6 ? "more than " : "", n > 6 ? (size_t)6 : n);
    if (check_profile_type_parts(text, n, starts, lens, column, err) != 0)
        return -1;
    char **fields[5] = {&out->name, &out->sample_type, &out->sample_unit, &out->period_type,
                        &out->period_unit};
    for (size_t p = 0; p < 5; p++) {
        *fields[p] = copy_part(text + starts[p], lens[p]);
        if (*fields[p] == NULL) {
            profile_type_free(out);
            return strata_error_oom(err);
        }
    }
    out->delta = n == 6;
    return 0;
}

int profile_type_parse(const char *text, size_t len, profile_type *out, strata_error *err) {
    return labels_parse_profile_type(text, len, 1, out, err);
}

int profile_type_format(const profile_type *type, strata_buffer *out) {
    const char *parts[5] = {type->name, type->sample_type, type->sample_unit, type->period_type,
                            type->period_unit};
    for (size_t p = 0; p < 5; p++) {
        if (p > 0 && strata_buffer_append_byte(out, ':') != 0)
            return -1;
        if (strata_buffer_append_str(out, parts[p] != NULL ? parts[p] : "") != 0)
            return -1;
    }
    return type->delta ? strata_buffer_append_str(out, ":delta") : 0;
}

int profile_type_copy(profile_type *dst, const profile_type *src, strata_error *err) {
    profile_type copy = {0};
    const char *in[5] = {src->name, src->sample_type, src->sample_unit, src->period_type,
                         src->period_unit};
    char **fields[5] = {&copy.name, &copy.sample_type, &copy.sample_unit, &copy.period_type,
                        &copy.period_unit};
    for (size_t p = 0; p < 5; p++) {
        const char *s = in[p] != NULL ? in[p] : "";
        *fields[p] = copy_part(s, strlen(s));
        if (*fields[p] == NULL) {
            profile_type_free(&copy);
            *dst = copy;
            return strata_error_oom(err);
        }
    }
    copy.delta = src->delta;
    *dst = copy;
    return 0;
}

static bool same_text(const char *a, const char *b) {
    return strcmp(a != NULL ? a : "", b != NULL ? b : "") == 0;
}

bool profile_type_equal(const profile_type *a, const profile_type *b) {
    return a->delta == b->delta && same_text(a->name, b->name) &&
           same_text(a->sample_type, b->sample_type) && same_text(a->sample_unit, b->sample_unit) &&
           same_text(a->period_type, b->period_type) && same_text(a->period_unit, b->period_unit);
}

void profile_type_free(profile_type *type) {
    free(type->name);
    free(type->sample_type);
    free(type->sample_unit);
    free(type->period_type);
    free(type->period_unit);
    memset(type, 0, sizeof *type);
}

/* ---- matchers ----------------------------------------------------------------------------- */

static int compile_regex(label_matcher *m, strata_error *err) {
    return strata_regex_compile(m->value, NULL, &m->regex, err);
}

int label_matcher_init(label_matcher *m, const char *name, label_match_type type, const char *value,
                       strata_error *err) {
    char quoted[160];
    memset(m, 0, sizeof *m);
    if (!label_name_is_valid(name, strlen(name)))
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "invalid label name %s in matcher: names must match "
                                "[a-zA-Z_][a-zA-Z0-9_]*",
                                labels_quote_for_message(name, quoted, sizeof quoted));
    if ((unsigned)type > LABEL_MATCH_NOT_REGEX)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "unknown matcher type %d", (int)type);
    m->type = type;
    m->name = strdup(name);
    m->value = strdup(value);
    if (m->name == NULL || m->value == NULL) {
        label_matcher_free(m);
        return strata_error_oom(err);
    }
    if ((type == LABEL_MATCH_REGEX || type == LABEL_MATCH_NOT_REGEX) &&
        compile_regex(m, err) != 0) {
        label_matcher_free(m);
        return -1;
    }
    return 0;
}

/* 1 (matches all of value), 0, or -1 when RE2 ran out of memory or m has no regex. */
static int regex_match(const label_matcher *m, const char *value) {
    if (m->regex == NULL)
        return -1;
    return strata_regex_match(m->regex, value, strlen(value), NULL);
}

bool label_matcher_matches(const label_matcher *m, const char *value) {
    if (value == NULL)
        value = "";
    switch (m->type) {
        case LABEL_MATCH_EQUAL:
            return strcmp(m->value, value) == 0;
        case LABEL_MATCH_NOT_EQUAL:
            return strcmp(m->value, value) != 0;
        case LABEL_MATCH_REGEX:
            return regex_match(m, value) == 1;
        case LABEL_MATCH_NOT_REGEX:
            return regex_match(m, value) == 0;
    }
    return false;
}

void label_matcher_free(label_matcher *m) {
    strata_regex_free(m->regex);
    free(m->name);
    free(m->value);
    memset(m, 0, sizeof *m);
}

const char *label_match_type_string(label_match_type type) {
    switch (type) {
        case LABEL_MATCH_EQUAL:
            return "=";
        case LABEL_MATCH_NOT_EQUAL:
            return "!=";
        case LABEL_MATCH_REGEX:
            return "=~";
        case LABEL_MATCH_NOT_REGEX:
            return "!~";
    }
    return "?";
}
