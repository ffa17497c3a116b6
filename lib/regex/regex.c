/*
 * regex.c - the C half of the regex module (see regex.h): error messages and replacement
 * templates.
 *
 * A template is compiled once against its regex into parts: literal runs (kept in one string) and
 * group references. A numbered reference holds its group; a named one every group of that name
 * (RE2, like Go, allows a name twice), of which expansion takes the first that took part in the
 * match, exactly as Go's regexp.Expand walks its subexpression names. References to groups the
 * regex does not have vanish at compile time, since they always expand to "".
 *
 * Go reads a reference's name as the longest run of Unicode letters, digits and '_'. ASCII is
 * decided here; other code points by glibc's C.UTF-8 iswalnum, whose idea of a letter is close to
 * Go's unicode.IsLetter. Group names are ASCII in RE2, so a name that runs into a non-ASCII letter
 * never resolves; only where the name stops could differ, for rare code points.
 */
#include "regex/regex.h"
#include "regex/regex_internal.h"

#include <locale.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wctype.h>

#include "common/array.h"
#include "common/utf8.h"

/* ---- messages ----------------------------------------------------------------------------- */

/* Appends s[0, len) to out (out_len bytes, always NUL-terminated): printable UTF-8 as is, '"' and
 * '\' escaped, other bytes as \xNN; cut with "..." after max source bytes. */
static void append_printable(char *out, size_t out_len, const char *s, size_t max) {
    size_t used = strlen(out), len = strlen(s);
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        char piece[8];
        size_t n = strata_utf8_sequence_length(p + i, len - i);
        if (i >= max) {
            snprintf(piece, sizeof piece, "...");
            n = len - i;
        } else if (n == 1 && (p[i] == '"' || p[i] == '\\')) {
            snprintf(piece, sizeof piece, "\\%c", p[i]);
        } else if (n == 0 || (n == 1 && (p[i] < 0x20 || p[i] == 0x7f))) {
            snprintf(piece, sizeof piece, "\\x%02x", p[i]);
            n = 1;
        } else {
            memcpy(piece, s + i, n);
            piece[n] = '\0';
        }
        size_t piece_len = strlen(piece);
        if (used + piece_len + 1 > out_len)
            return;
        memcpy(out + used, piece, piece_len + 1);
        used += piece_len;
        i += n;
    }
}

int regex_error(strata_error *err, strata_status code, const char *pattern, const char *reason) {
    char quoted[200] = "", why[240] = "";
    append_printable(quoted, sizeof quoted, pattern, 64);
    append_printable(why, sizeof why, reason, 160);
    return strata_error_set(err, code, "invalid regular expression \"%s\": %s", quoted, why);
}

/* ---- templates ---------------------------------------------------------------------------- */

typedef struct template_part {
    size_t literal_start; /* a run of t->literals */
    size_t literal_len;
    size_t first_group; /* then one of t->groups[first_group, first_group + n_groups) */
    size_t n_groups;
} template_part;

struct strata_regex_template {
    char *literals;
    template_part *parts;
    size_t n_parts;
    size_t *groups;
    size_t spans; /* 1 + the highest group referred to */
};

void strata_regex_template_free(strata_regex_template *t) {
    if (t == NULL)
        return;
    free(t->literals);
    free(t->parts);
    free(t->groups);
    free(t);
}

size_t strata_regex_template_spans(const strata_regex_template *t) {
    return t->spans;
}

static locale_t utf8_locale;
static pthread_once_t utf8_locale_once = PTHREAD_ONCE_INIT;

static void open_utf8_locale(void) {
    utf8_locale = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
}

/* Bytes of the name character (Go: unicode.IsLetter, IsDigit or '_') at s, or 0 if there is
 * none (an invalid byte is Go's U+FFFD, not a letter). */
static size_t name_char_length(const unsigned char *s, size_t len) {
    if (s[0] < 0x80)
        return (s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z') ||
                       (s[0] >= '0' && s[0] <= '9') || s[0] == '_'
                   ? 1
                   : 0;
    size_t n = strata_utf8_sequence_length(s, len);
    if (n == 0)
        return 0;
    wint_t c = (wint_t)(s[0] & (0xff >> (n + 1)));
    for (size_t i = 1; i < n; i++)
        c = c << 6 | (s[i] & 0x3f);
    pthread_once(&utf8_locale_once, open_utf8_locale);
    if (utf8_locale == (locale_t)0)
        return n; /* no tables: count every code point as a letter */
    return iswalnum_l(c, utf8_locale) ? n : 0;
}

/* Go's extract(): parses the reference after a '$' at s. Returns the bytes it spans (0: not a
 * reference, the '$' stays literal) and the name; *num is its group number or -1 for a name. */
static size_t parse_reference(const char *s, const char **name, size_t *name_len, long *num) {
    const unsigned char *p = (const unsigned char *)s;
    size_t len = strlen(s), start = s[0] == '{' ? 1 : 0, i = start, n;
    while (i < len && (n = name_char_length(p + i, len - i)) > 0)
        i += n;
    if (i == start || (start == 1 && s[i] != '}'))
        return 0;
    *name = s + start;
    *name_len = i - start;
    *num = 0;
    for (size_t k = 0; k < *name_len; k++) {
        if (s[start + k] < '0' || s[start + k] > '9' || *num >= 100000000) {
            *num = -1;
            break;
        }
        *num = *num * 10 + (s[start + k] - '0');
    }
    if (s[start] == '0' && *name_len > 1)
        *num = -1;
    return i + start; /* the closing brace, if any, too */
}

/* Growing arrays while compiling. */
typedef struct template_builder {
    strata_regex_template *t;
    size_t literals_len;
    size_t parts_cap;
    size_t n_group_refs;
    size_t groups_cap;
    size_t pending; /* start of the literal run not yet in a part */
} template_builder;

/* t->literals has room for the whole template, and a template byte yields at most one. */
static void add_literal(template_builder *b, const char *s, size_t len) {
    memcpy(b->t->literals + b->literals_len, s, len);
    b->literals_len += len;
}

/* Ends the current part with the groups [first, n_group_refs) (none: a final literal run). */
static int end_part(template_builder *b, size_t first) {
    strata_regex_template *t = b->t;
    if (STRATA_ARRAY_RESERVE(t->parts, b->parts_cap, t->n_parts + 1) != 0)
        return -1;
    t->parts[t->n_parts++] = (template_part){
        .literal_start = b->pending,
        .literal_len = b->literals_len - b->pending,
        .first_group = first,
        .n_groups = b->n_group_refs - first,
    };
    b->pending = b->literals_len;
    return 0;
}

static int add_group(template_builder *b, size_t group) {
    if (STRATA_ARRAY_RESERVE(b->t->groups, b->groups_cap, b->n_group_refs + 1) != 0)
        return -1;
    b->t->groups[b->n_group_refs++] = group;
    if (group + 1 > b->t->spans)
        b->t->spans = group + 1;
    return 0;
}

/* Adds a part for the reference name / num (nothing when no group answers to it). */
static int add_reference(template_builder *b, const strata_regex *re, const char *name,
                         size_t name_len, long num) {
    size_t first = b->n_group_refs, count = strata_regex_group_count(re);
    if (num >= 0) {
        if ((size_t)num <= count && add_group(b, (size_t)num) != 0)
            return -1;
    } else {
        for (size_t g = 1; g <= count; g++) {
            const char *group_name = strata_regex_group_name(re, g);
            if (group_name != NULL && strlen(group_name) == name_len &&
                memcmp(group_name, name, name_len) == 0 && add_group(b, g) != 0)
                return -1;
        }
    }
    return b->n_group_refs > first ? end_part(b, first) : 0;
}

static int compile_template(template_builder *b, const strata_regex *re, const char *text) {
    for (const char *s = text; *s != '\0';) {
        const char *dollar = strchr(s, '$');
        if (dollar == NULL) {
            add_literal(b, s, strlen(s));
            break;
        }
        add_literal(b, s, (size_t)(dollar - s));
        s = dollar + 1;
        if (*s == '$') { /* $$ is $ */
            add_literal(b, "$", 1);
            s++;
            continue;
        }
        const char *name = NULL;
        size_t name_len = 0;
        long num = -1;
        size_t used = parse_reference(s, &name, &name_len, &num);
        if (used == 0) { /* malformed: the $ is literal */
            add_literal(b, "$", 1);
            continue;
        }
        s += used;
        if (add_reference(b, re, name, name_len, num) != 0)
            return -1;
    }
    return b->literals_len > b->pending ? end_part(b, b->n_group_refs) : 0;
}

int strata_regex_template_compile(const strata_regex *re, const char *template_text,
                                  strata_regex_template **out, strata_error *err) {
    *out = NULL;
    template_builder b = {0};
    b.t = calloc(1, sizeof *b.t);
    if (b.t == NULL || (b.t->literals = malloc(strlen(template_text) + 1)) == NULL) {
        strata_regex_template_free(b.t);
        return strata_error_oom(err);
    }
    b.t->spans = 1;
    if (compile_template(&b, re, template_text) != 0) {
        strata_regex_template_free(b.t);
        return strata_error_oom(err);
    }
    *out = b.t;
    return 0;
}

int strata_regex_template_expand(const strata_regex_template *t, const char *value,
                                 const strata_regex_span *spans, size_t n, strata_buffer *out) {
    for (size_t i = 0; i < t->n_parts; i++) {
        const template_part *part = &t->parts[i];
        if (strata_buffer_append(out, t->literals + part->literal_start, part->literal_len) != 0)
            return -1;
        for (size_t k = 0; k < part->n_groups; k++) {
            size_t g = t->groups[part->first_group + k];
            if (g < n && spans[g].start >= 0) {
                if (strata_buffer_append(out, value + spans[g].start,
                                         (size_t)(spans[g].end - spans[g].start)) != 0)
                    return -1;
                break;
            }
        }
    }
    return 0;
}
