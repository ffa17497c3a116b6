/*
 * labels.h - label sets, profile types and Prometheus-style selectors.
 *
 * A label set is a small sorted array of (name, value) pairs with owned strings; sorted by name it
 * has one canonical form, so it can be hashed, compared and printed as `{a="1", b="2"}`.
 *
 * A profile type names what a profile measures, in Parca's form
 *     name:sample_type:sample_unit:period_type:period_unit[:delta]
 * e.g. `process_cpu:samples:count:cpu:nanoseconds:delta`. A selector is a profile type optionally
 * followed by label matchers in braces, as in PromQL:
 *     process_cpu:samples:count:cpu:nanoseconds:delta{job="api", pod=~"api-.*", env!="dev"}
 * Either part may be omitted (`{job="api"}` selects every type). Matcher semantics are
 * Prometheus's:
 * `=` and `!=` compare strings; `=~` and `!~` are fully anchored regular expressions (RE2
 * syntax, as in Prometheus; compiled once at parse time); a missing label has the value "", so
 * `l=""` selects series without l and `l!=""` series with it. Values are double-quoted, single-
 * quoted or back-quoted strings with Go/PromQL escapes (\" \' \\ \a \b \f \n \r \t \v \xNN
 * \NNN octal, \uNNNN, \UNNNNNNNN); back-quoted strings are raw. A NUL character is rejected.
 *
 * Grammar (whitespace is allowed between tokens; a profile type is one token):
 *     selector     = [profile_type] ["{" [matcher {"," matcher} [","]] "}"]
 *     profile_type = part ":" part ":" part ":" part ":" part [":" "delta"]
 *     part         = 1*( ALPHA / DIGIT / "_" / "." / "-" )
 *     matcher      = label_name ("=" / "!=" / "=~" / "!~") string
 * `__name__` matchers are allowed. Errors are INVALID_ARGUMENT and start with the 1-based column
 * (byte offset + 1): `column 14: expected "=", "!=", "=~" or "!~" after label name "job"`.
 *
 * Regexes are lib/regex's: RE2 matching the whole value, which is Prometheus's ^(?s:re)$ (`.`
 * matches newlines) without splicing the user's text into a bigger pattern. RE2 matches in linear
 * time, so no pattern makes a selector slow; a pattern RE2 refuses (`(`, `\8`, `a{2,1}`) is
 * INVALID_ARGUMENT with RE2's reason.
 *
 * Limits keep hostile input cheap: selectors over STRATA_SELECTOR_MAX_BYTES, more than
 * STRATA_SELECTOR_MAX_MATCHERS matchers, or regexes over STRATA_REGEX_MAX_BYTES are rejected with
 * INVALID_ARGUMENT and a message that points at the column.
 */
#ifndef STRATA_LABELS_H
#define STRATA_LABELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buffer.h"
#include "common/error.h"
#include "regex/regex.h" /* STRATA_REGEX_MAX_BYTES */

#define STRATA_SELECTOR_MAX_BYTES 16384
#define STRATA_SELECTOR_MAX_MATCHERS 64

/* The reserved label holding the profile name. */
#define STRATA_LABEL_NAME "__name__"

typedef struct strata_label {
    char *name;
    char *value;
} strata_label;

typedef struct label_set {
    strata_label *labels;
    size_t count;
    size_t cap;
} label_set;

#define LABEL_SET_INIT                                                                             \
    { NULL, 0, 0 }

/* A Prometheus label name: [a-zA-Z_][a-zA-Z0-9_]*. */
bool label_name_is_valid(const char *name, size_t len);

/* Appends a copy of (name, value). Does not sort or check for duplicates. Bytes after an embedded
 * NUL could not be represented, so a name or value containing NUL is INVALID_ARGUMENT. */
int label_set_add(label_set *set, const char *name, size_t name_len, const char *value,
                  size_t value_len, strata_error *err);
/* Sets name to value, replacing an existing value, keeping the set sorted if it was. */
int label_set_set(label_set *set, const char *name, const char *value, strata_error *err);
/* Removes name if present. */
void label_set_remove(label_set *set, const char *name);
/* Sorts by name (stable for equal names, which validation then rejects). */
void label_set_sort(label_set *set);
/* Checks every name is valid and names are unique; the set must be sorted. INVALID_ARGUMENT
 * with the label's name on failure (FAILED_PRECONDITION if the set is not sorted). Empty values
 * are allowed. */
int label_set_validate(const label_set *set, strata_error *err);
/* Value of name, or NULL. */
const char *label_set_get(const label_set *set, const char *name);
/* Hash of a sorted set; equal sets hash equally. Stable across runs (stored in blocks). */
uint64_t label_set_hash(const label_set *set);
/* Compares sorted sets lexicographically by (name, value) pairs; <0, 0, >0. */
int label_set_compare(const label_set *a, const label_set *b);
/* Deep copy. dst is overwritten without being freed (pass a new or freed set); on failure it is
 * left empty. */
int label_set_copy(label_set *dst, const label_set *src, strata_error *err);
/* Appends `{a="1", b="2"}` (values escaped so that label_set_from_text reads them back). */
int label_set_format(const label_set *set, strata_buffer *out);
void label_set_clear(label_set *set); /* frees strings, keeps capacity */
void label_set_free(label_set *set);
/* Parses `{a="1", b="2"}` (the label_set_format form; "=" only, any quoting, trailing comma
 * allowed) into a sorted, validated set. *out is overwritten; on failure it is left empty.
 * Errors are INVALID_ARGUMENT, with the column for syntax errors. */
int label_set_from_text(const char *text, label_set *out, strata_error *err);

typedef struct profile_type {
    char *name;
    char *sample_type;
    char *sample_unit;
    char *period_type;
    char *period_unit;
    bool delta;
} profile_type;

/* Parses `name:sample_type:sample_unit:period_type:period_unit[:delta]` (text need not be
 * NUL-terminated). *out is overwritten; on failure it is left zeroed. */
int profile_type_parse(const char *text, size_t len, profile_type *out, strata_error *err);
/* Appends the canonical text form. */
int profile_type_format(const profile_type *type, strata_buffer *out);
int profile_type_copy(profile_type *dst, const profile_type *src, strata_error *err);
bool profile_type_equal(const profile_type *a, const profile_type *b);
void profile_type_free(profile_type *type);

typedef enum label_match_type {
    LABEL_MATCH_EQUAL,
    LABEL_MATCH_NOT_EQUAL,
    LABEL_MATCH_REGEX,
    LABEL_MATCH_NOT_REGEX,
} label_match_type;

typedef struct label_matcher {
    char *name;
    char *value;
    label_match_type type;
    strata_regex *regex; /* for REGEX and NOT_REGEX; NULL otherwise */
} label_matcher;

/* Builds a matcher (compiling the regex for =~ and !~). *m is overwritten; on failure it is left
 * zeroed (label_matcher_free is then a no-op). INVALID_ARGUMENT for a bad name or regex, with
 * RE2's reason for the latter. */
int label_matcher_init(label_matcher *m, const char *name, label_match_type type, const char *value,
                       strata_error *err);
/* value is the label's value, or NULL when the label is absent (treated as ""). Should RE2 run
 * out of memory matching, neither =~ nor !~ matches. */
bool label_matcher_matches(const label_matcher *m, const char *value);
void label_matcher_free(label_matcher *m);
/* "=", "!=", "=~", "!~" */
const char *label_match_type_string(label_match_type type);

typedef struct selector {
    bool has_profile_type;
    profile_type profile_type;
    label_matcher *matchers;
    size_t n_matchers;
} selector;

/* Parses a selector (see the top of this file). An empty string or `{}` selects everything.
 * *out is overwritten; on failure it is left empty (selector_free is still safe). */
int selector_parse(const char *text, selector *out, strata_error *err);
/* True if every matcher matches the set (the profile type is not checked here). */
bool selector_matches(const selector *sel, const label_set *set);
/* Appends the canonical text form, which selector_parse reads back to an equal selector:
 * `type{a="1", b=~"x.*"}`, `type` alone without matchers, `{}` for the empty selector. */
int selector_format(const selector *sel, strata_buffer *out);
void selector_free(selector *sel);

#endif
