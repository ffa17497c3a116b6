/*
 * regex.h - regular expressions as Prometheus has them: RE2 syntax, fully anchored, `.` matching
 * newlines, and Go's regexp.Expand for replacement templates.
 *
 * Prometheus compiles every label matcher (`=~`, `!~`) and every relabel `regex` as
 * `^(?s:PATTERN)$` with Go's regexp package, whose syntax and semantics are RE2's. Users copy
 * selectors and relabel configs from Prometheus, so Strata compiles them with RE2 itself (Debian's
 * libre2, through the small C++ shim in regex.cc): `\d`, `\w`, `\s`, `\pL`, `(?i)`, `(?:...)`,
 * non-greedy `*?`, `(?P<name>...)` and `\Q...\E` all mean what they mean there, and capture groups
 * follow leftmost-first (Perl, Go) rules, so `(.*?)(b*)` against "abb" captures "a" and "bb".
 *
 * Anchoring: the pattern is parsed as written, with `.` matching `\n` (the (?s) flag, which the
 * pattern may turn off with (?-s)), and a value matches only when the pattern matches all of it
 * (RE2's ANCHOR_BOTH). That is exactly ^(?s:PATTERN)$ without splicing the user's text into a
 * larger pattern, so `a)|(b`, which Go would read as ^(?s:a)|(b)$ and match "axyz" with, is refused
 * as unbalanced instead. `foo` does not match "foobar"; the empty pattern matches only "".
 *
 * Cost: RE2 matches in time linear in the value's length, whatever the pattern (no backtracking,
 * no back-references), so no pattern can make a selector or a relabel rule slow and nothing is
 * checked ahead of compiling. What remains bounded is size: a pattern longer than max_bytes
 * (STRATA_REGEX_MAX_BYTES, 1 KiB, by default) is refused, and so is one whose compiled program
 * would exceed max_mem (RE2's own limit, STRATA_REGEX_MAX_MEM by default; it also caps the lazily
 * built DFA, after which RE2 falls back to its slower, still linear, NFA). RE2, like Go, refuses
 * repetition counts above 1000, also when nested ((a{100}){100}).
 *
 * Differences from Go that remain: Debian 12's RE2 does not know Go 1.22's `(?<name>...)` (write
 * `(?P<name>...)`, which both accept), and RE2's `.` and classes do not match bytes that are not
 * valid UTF-8, where Go reads each such byte as U+FFFD (label values are valid UTF-8 at ingest).
 *
 * Templates (a relabel `replacement` or `target_label`) expand as Go's regexp.Expand does: `$1` or
 * `${1}` is capture group 1; `$name` or `${name}` the group named so, where a name is the longest
 * run of letters, digits and '_' (so `$1x` is the group named "1x", which does not exist, and
 * expands to "" - write `${1}x`); a number has no leading zero; an unknown group or one that did
 * not take part in the match expands to ""; `$$` is "$"; a `$` not followed by a name (or `${`
 * without its `}`) stays as written. A template is compiled once against its regex, so expanding
 * is a copy of literal runs and group spans.
 *
 * Errors are strata_error values: INVALID_ARGUMENT with the pattern and RE2's reason (`invalid
 * regular expression "(": missing ): (`), RESOURCE_EXHAUSTED when memory runs out. No C++
 * exception crosses into C: the shim's functions are noexcept and turn std::bad_alloc into
 * RESOURCE_EXHAUSTED.
 *
 * A compiled regex or template is immutable; any number of threads may match and expand with it.
 */
#ifndef STRATA_REGEX_REGEX_H
#define STRATA_REGEX_REGEX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buffer.h"
#include "common/error.h"

#ifdef __cplusplus
extern "C" {
/* The C++ shim's definitions are noexcept; its declarations must say so too. */
#define STRATA_REGEX_NOEXCEPT noexcept
#else
#define STRATA_REGEX_NOEXCEPT
#endif

/* Default limits: the longest pattern (bytes) and RE2's max_mem for one regex. */
#define STRATA_REGEX_MAX_BYTES 1024
#define STRATA_REGEX_MAX_MEM ((int64_t)8 << 20)

typedef struct strata_regex strata_regex;

typedef struct strata_regex_limits {
    size_t max_bytes; /* longest pattern accepted; 0: STRATA_REGEX_MAX_BYTES */
    int64_t max_mem;  /* RE2's max_mem (program and DFA cache); 0: STRATA_REGEX_MAX_MEM */
} strata_regex_limits;

/* Compiles pattern (NUL-terminated) with the semantics above; limits may be NULL for the defaults.
 * *out is NULL on failure. INVALID_ARGUMENT for a pattern RE2 refuses or one over the limits,
 * RESOURCE_EXHAUSTED when out of memory. */
int strata_regex_compile(const char *pattern, const strata_regex_limits *limits, strata_regex **out,
                         strata_error *err) STRATA_REGEX_NOEXCEPT;
void strata_regex_free(strata_regex *re) STRATA_REGEX_NOEXCEPT; /* NULL is a no-op */

/* The pattern as given to strata_regex_compile. */
const char *strata_regex_pattern(const strata_regex *re) STRATA_REGEX_NOEXCEPT;
/* Number of capture groups, not counting the whole match. */
size_t strata_regex_group_count(const strata_regex *re) STRATA_REGEX_NOEXCEPT;
/* Name of capture group index (1-based), or NULL when it has none or does not exist. */
const char *strata_regex_group_name(const strata_regex *re, size_t index) STRATA_REGEX_NOEXCEPT;

/* Whether re matches all of value[0, len): 1 yes, 0 no, -1 when RE2 ran out of memory
 * (RESOURCE_EXHAUSTED). */
int strata_regex_match(const strata_regex *re, const char *value, size_t len,
                       strata_error *err) STRATA_REGEX_NOEXCEPT;

/* Bytes [start, end) of the value; start == -1 when the group took no part in the match. */
typedef struct strata_regex_span {
    ptrdiff_t start;
    ptrdiff_t end;
} strata_regex_span;

/* As strata_regex_match and, on a match, fills spans[0, n): spans[0] is the whole value, spans[i]
 * capture group i, and entries past the pattern's groups are unset. Asking for fewer groups than
 * the pattern has is allowed and cheaper (n == 0 or 1 needs no capture tracking at all). */
int strata_regex_match_groups(const strata_regex *re, const char *value, size_t len,
                              strata_regex_span *spans, size_t n,
                              strata_error *err) STRATA_REGEX_NOEXCEPT;

typedef struct strata_regex_template strata_regex_template;

/* Compiles template (NUL-terminated) against re's capture groups. */
int strata_regex_template_compile(const strata_regex *re, const char *template_text,
                                  strata_regex_template **out,
                                  strata_error *err) STRATA_REGEX_NOEXCEPT;
void strata_regex_template_free(strata_regex_template *t)
    STRATA_REGEX_NOEXCEPT; /* NULL is a no-op */

/* How many spans an expansion reads: 1 + the highest group it refers to (1 when it refers to none),
 * the n to pass to strata_regex_match_groups. */
size_t strata_regex_template_spans(const strata_regex_template *t) STRATA_REGEX_NOEXCEPT;

/* Appends the expansion of t for a match of value (spans[0, n) from strata_regex_match_groups;
 * groups at or past n expand to ""). -1 only when out of memory. */
int strata_regex_template_expand(const strata_regex_template *t, const char *value,
                                 const strata_regex_span *spans, size_t n,
                                 strata_buffer *out) STRATA_REGEX_NOEXCEPT;

#ifdef __cplusplus
}
#endif

#endif
