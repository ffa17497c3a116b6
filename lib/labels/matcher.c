/*
 * matcher.c - profile types and label matchers (see labels.h).
 *
 * Regex matchers are anchored without rewriting the user's pattern: the pattern is compiled as
 * written and a value matches only if regexec's leftmost-longest match spans the whole value.
 * POSIX requires the leftmost, then longest, match, so a full-length match is found whenever one
 * exists; this is exactly ^(?:re)$ and, unlike wrapping the text in ^(...)$, cannot be subverted by
 * a pattern such as `a)|(b` (glibc treats an unmatched ")" as a literal). Before compiling, a
 * cheap scan rejects back-references (RE2, and so Prometheus, has none, and they make matching
 * exponential) and patterns whose bounded repetitions would expand into a huge automaton.
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

/* ---- regex pre-checks --------------------------------------------------------------------- */

/* glibc builds its automaton by copying repeated subexpressions ((a{1000}){100} is 100000 copies
 * of `a`, and x+ is xx*, so x++++... doubles each time), and its matcher is not linear in that
 * size; this caps the expanded size (any pattern within STRATA_REGEX_MAX_BYTES without repetitions
 * fits, as does a{1,1000}, RE2's largest count). Stacked repetition operators (a**, a+{2}) are
 * rejected, as RE2 and so Prometheus do. */
#define REGEX_MAX_EXPANDED 2048
#define REGEX_MAX_GROUP_DEPTH 64

/* Index just past the bracket expression that starts at re[i] == '['. */
static size_t skip_bracket(const char *re, size_t len, size_t i) {
    i++;
    if (i < len && re[i] == '^')
        i++;
    if (i < len && re[i] == ']')
        i++;
    while (i < len && re[i] != ']') {
        if (re[i] == '[' && i + 1 < len &&
            (re[i + 1] == ':' || re[i + 1] == '.' || re[i + 1] == '=')) {
            const char *close = re + i + 2;
            while (close < re + len - 1 && !(close[0] == re[i + 1] && close[1] == ']'))
                close++;
            if (close >= re + len - 1)
                return len;
            i = (size_t)(close - re) + 2;
        } else {
            i++;
        }
    }
    return i < len ? i + 1 : len;
}

/* a * b, saturating at 2^40, far above every limit it is compared with. */
static uint64_t saturating_mul(uint64_t a, uint64_t b) {
    const uint64_t cap = UINT64_C(1) << 40;
    if (a == 0 || b == 0)
        return 0;
    return a > cap / b ? cap : (a * b > cap ? cap : a * b);
}

/* Parses an interval `{m}`, `{m,}`, `{,n}` or `{m,n}` at re[i] == '{'. Returns the index past it
 * and the largest repeat count in *count, or i (not an interval) if it does not parse. */
static size_t parse_interval(const char *re, size_t len, size_t i, uint64_t *count) {
    size_t j = i + 1;
    uint64_t lo = 0, hi = 0;
    bool have_lo = false, have_hi = false, comma = false;
    for (; j < len && re[j] >= '0' && re[j] <= '9'; j++, have_lo = true)
        lo = lo > 100000 ? lo : lo * 10 + (uint64_t)(re[j] - '0');
    if (j < len && re[j] == ',') {
        comma = true;
        for (j++; j < len && re[j] >= '0' && re[j] <= '9'; j++, have_hi = true)
            hi = hi > 100000 ? hi : hi * 10 + (uint64_t)(re[j] - '0');
    }
    if (j >= len || re[j] != '}' || (!have_lo && !have_hi))
        return i;
    *count = have_hi ? (hi > lo ? hi : lo) : (comma ? lo + 1 : lo);
    return j + 1;
}

static int regex_too_large(const char *re, strata_error *err) {
    char quoted[160];
    return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                            "regular expression %s is too large once its repetitions are "
                            "expanded (limit %d); use * or + instead of large {m,n} counts",
                            labels_quote_for_message(re, quoted, sizeof quoted),
                            REGEX_MAX_EXPANDED);
}

static bool is_quantifier_at(const char *re, size_t len, size_t i) {
    uint64_t count;
    return re[i] == '*' || re[i] == '+' || re[i] == '?' ||
           (re[i] == '{' && parse_interval(re, len, i, &count) != i);
}

static int regex_stacked_repetition(const char *re, strata_error *err) {
    char quoted[160];
    return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                            "regular expression %s repeats a repetition (as in \"a**\" or "
                            "\"a+{2}\"); group it first, as in \"(a*)*\"",
                            labels_quote_for_message(re, quoted, sizeof quoted));
}

/* glibc's regcomp computes epsilon closures by walking every path of empty moves, and a group with
 * several alternatives that can match nothing ((a?|b?|c?), (x|||y)) multiplies those paths by their
 * number each time it is repeated ahead of a loop: (a?|b?|c?){12,} takes 3 s to compile and
 * (a?|...|j?){8,} minutes (found by selector_fuzz). So the precheck also tracks that product,
 * counting every such group (and every copy a repetition makes), and caps it; it overestimates
 * (groups in a plain sequence cost nothing without a loop behind them), which only refuses
 * patterns no label matcher needs. */
#define REGEX_MAX_AMBIGUITY 4096

static uint64_t saturating_pow(uint64_t base, uint64_t exp) {
    uint64_t r = 1;
    while (exp-- > 0 && r <= REGEX_MAX_AMBIGUITY)
        r = saturating_mul(r, base);
    return r;
}

/* The state of one open group (depth 0 is the whole pattern). */
typedef struct regex_group {
    uint64_t size;          /* expanded size so far */
    uint64_t ambiguity;     /* product of the empty-path counts of what it holds */
    uint32_t nullable_alts; /* finished alternatives that can match nothing */
    bool alt_nullable;      /* the current alternative can match nothing so far */
} regex_group;

/* The atom a repetition would apply to (after "(", "|" or the start: none, size 0, ambiguity 1, so
 * a stray repetition there changes nothing). */
typedef struct regex_atom {
    uint64_t size, ambiguity;
    bool pending;  /* not yet folded into its alternative's nullability */
    bool nullable; /* it can match nothing (after its quantifier, if any) */
} regex_atom;

static void regex_commit_atom(regex_group *g, regex_atom *a) {
    if (a->pending && !a->nullable)
        g->alt_nullable = false;
    a->pending = false;
}

static void regex_end_alternative(regex_group *g) {
    if (g->alt_nullable)
        g->nullable_alts++;
    g->alt_nullable = true;
}

static int regex_too_ambiguous(const char *re, strata_error *err) {
    char quoted[160];
    return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                            "regular expression %s repeats groups with several alternatives "
                            "that can match nothing (as in \"(a?|b?){12,}\") too often to compile "
                            "quickly (limit %d); make the alternatives non-empty",
                            labels_quote_for_message(re, quoted, sizeof quoted),
                            REGEX_MAX_AMBIGUITY);
}

/* Rejects back-references, stacked repetitions, groups nested too deeply and patterns that expand
 * too far or would make regcomp walk too many empty paths. */
static int regex_precheck(const char *re, size_t len, strata_error *err) {
    char quoted[160];
    regex_group group[REGEX_MAX_GROUP_DEPTH + 1];
    regex_atom last = {.ambiguity = 1}; /* ambiguity is a product: never 0 */
    size_t depth = 0;
    group[0] = (regex_group){.ambiguity = 1, .alt_nullable = true};
    bool after_quantifier = false;
    for (size_t i = 0; i < len;) {
        char c = re[i];
        uint64_t count = 0;
        size_t next;
        bool quantifier = is_quantifier_at(re, len, i);
        if (quantifier && after_quantifier)
            return regex_stacked_repetition(re, err);
        after_quantifier = quantifier;
        regex_group *g = &group[depth];
        if (!quantifier)
            regex_commit_atom(g, &last);
        if (c == '\\' && i + 1 < len && re[i + 1] >= '1' && re[i + 1] <= '9') {
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "regular expression %s uses a back-reference (\\%c), which "
                                    "is not supported",
                                    labels_quote_for_message(re, quoted, sizeof quoted), re[i + 1]);
        } else if (c == '(') {
            if (depth == REGEX_MAX_GROUP_DEPTH)
                return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                        "regular expression %s nests groups deeper than %d",
                                        labels_quote_for_message(re, quoted, sizeof quoted),
                                        REGEX_MAX_GROUP_DEPTH);
            group[++depth] = (regex_group){.ambiguity = 1, .alt_nullable = true};
            last = (regex_atom){.ambiguity = 1};
            i++;
            continue;
        } else if (c == ')' && depth > 0) {
            regex_end_alternative(g);
            uint64_t ambiguity = g->ambiguity;
            if (g->nullable_alts >= 2)
                ambiguity = saturating_mul(ambiguity, g->nullable_alts);
            last = (regex_atom){.size = g->size > 0 ? g->size : 1,
                                .ambiguity = ambiguity,
                                .pending = true,
                                .nullable = g->nullable_alts > 0};
            g = &group[--depth];
            g->size += last.size;
            g->ambiguity = saturating_mul(g->ambiguity, ambiguity);
            i++;
        } else if (c == '{' && (next = parse_interval(re, len, i, &count)) != i) {
            g->size += saturating_mul(last.size, count > 0 ? count - 1 : 0);
            g->ambiguity = saturating_mul(
                g->ambiguity, saturating_pow(last.ambiguity, count > 0 ? count - 1 : 0));
            last.size = saturating_mul(last.size, count);
            last.ambiguity = saturating_pow(last.ambiguity, count);
            if (re[i + 1] == '0' || re[i + 1] == ',')
                last.nullable = true; /* {0,n}, {,n}: may repeat zero times */
            i = next;
        } else if (c == '+') { /* glibc expands x+ to xx*, so stacked "+" double the size */
            g->size += last.size;
            g->ambiguity = saturating_mul(g->ambiguity, last.ambiguity);
            last.size = saturating_mul(last.size, 2);
            last.ambiguity = saturating_mul(last.ambiguity, last.ambiguity);
            i++;
        } else if (c == '*' || c == '?') {
            last.nullable = true;
            i++;
            continue;
        } else if (c == '|' || c == '^' || c == '$') {
            if (c == '|')
                regex_end_alternative(g);
            last = (regex_atom){.ambiguity = 1};
            i++;
            continue;
        } else {
            i = c == '[' ? skip_bracket(re, len, i) : i + (c == '\\' && i + 1 < len ? 2 : 1);
            last = (regex_atom){.size = 1, .ambiguity = 1, .pending = true, .nullable = false};
            g->size += 1;
        }
        if (g->size > REGEX_MAX_EXPANDED)
            return regex_too_large(re, err);
        if (g->ambiguity > REGEX_MAX_AMBIGUITY)
            return regex_too_ambiguous(re, err);
    }
    return 0;
}

/* ---- matchers ----------------------------------------------------------------------------- */

static int compile_regex(label_matcher *m, strata_error *err) {
    char quoted[160];
    size_t len = strlen(m->value);
    if (len > STRATA_REGEX_MAX_BYTES)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "regular expression is %zu bytes, longer than the limit of %d", len,
                                STRATA_REGEX_MAX_BYTES);
    if (regex_precheck(m->value, len, err) != 0)
        return -1;
    int rc = regcomp(&m->regex, m->value, REG_EXTENDED);
    if (rc != 0) {
        char reason[128];
        regerror(rc, &m->regex, reason, sizeof reason);
        return strata_error_set(
            err, rc == REG_ESPACE ? STRATA_RESOURCE_EXHAUSTED : STRATA_INVALID_ARGUMENT,
            "invalid regular expression %s: %s",
            labels_quote_for_message(m->value, quoted, sizeof quoted), reason);
    }
    m->regex_compiled = true;
    return 0;
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

static bool regex_matches_fully(const regex_t *re, const char *value) {
    regmatch_t match;
    if (regexec(re, value, 1, &match, 0) != 0)
        return false;
    return match.rm_so == 0 && (size_t)match.rm_eo == strlen(value);
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
            return m->regex_compiled && regex_matches_fully(&m->regex, value);
        case LABEL_MATCH_NOT_REGEX:
            return m->regex_compiled && !regex_matches_fully(&m->regex, value);
    }
    return false;
}

void label_matcher_free(label_matcher *m) {
    if (m->regex_compiled)
        regfree(&m->regex);
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
