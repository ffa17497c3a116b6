/*
 * selector.c - the selector parser and printer (see labels.h for the grammar).
 *
 * A hand-written recursive-descent parser over bytes. Every error names the 1-based column (byte
 * offset + 1) where the problem was found and what was expected there. Strings are unescaped into a
 * strata_buffer; the printer escapes values so that parsing the printed text gives back the same
 * bytes, which the fuzzer checks.
 */
#include "labels/labels.h"
#include "labels/labels_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/array.h"

typedef struct parser {
    const char *text;
    size_t len;
    size_t pos;
    bool labels_only; /* label_set_from_text: braces required, "=" only, no profile type */
    strata_error *err;
} parser;

static int parse_fail(parser *p, size_t pos, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int parse_fail(parser *p, size_t pos, const char *fmt, ...) {
    char message[STRATA_ERROR_MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    return strata_error_set(p->err, STRATA_INVALID_ARGUMENT, "column %zu: %s", pos + 1, message);
}

/* Describes the byte at pos for messages: `end of input`, `"x"` or `byte 0x07`. */
static const char *describe_at(const parser *p, size_t pos, char *buf, size_t buf_len) {
    if (pos >= p->len)
        return "end of input";
    unsigned char c = (unsigned char)p->text[pos];
    if (c == '"')
        snprintf(buf, buf_len, "'\"'");
    else if (c > 0x20 && c < 0x7f)
        snprintf(buf, buf_len, "\"%c\"", c);
    else
        snprintf(buf, buf_len, "byte 0x%02x", c);
    return buf;
}

static bool at_end(const parser *p) {
    return p->pos >= p->len;
}

static char peek(const parser *p) {
    return at_end(p) ? '\0' : p->text[p->pos];
}

static void skip_space(parser *p) {
    while (!at_end(p) && strchr(" \t\r\n", p->text[p->pos]) != NULL)
        p->pos++;
}

static bool is_name_start(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static bool is_name_char(char c) {
    return is_name_start(c) || (c >= '0' && c <= '9');
}

static bool is_profile_type_char(char c) {
    return is_name_char(c) || c == '.' || c == '-' || c == ':';
}

/* ---- strings ------------------------------------------------------------------------------ */

static int hex_value(char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Reads `digits` digits of base 8 or 16 at p->pos into *out. */
static int read_digits(parser *p, size_t escape_pos, int digits, int base, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < digits; i++) {
        int d = at_end(p) ? -1 : hex_value(p->text[p->pos]);
        if (d < 0 || d >= base)
            return parse_fail(p, escape_pos, "escape sequence \"\\%c\" needs %d %s digits",
                              p->text[escape_pos + 1], digits, base == 8 ? "octal" : "hex");
        v = v * (uint32_t)base + (uint32_t)d;
        p->pos++;
    }
    *out = v;
    return 0;
}

static int append_code_point(parser *p, size_t escape_pos, uint32_t cp, strata_buffer *out) {
    if (cp == 0)
        return parse_fail(p, escape_pos, "NUL characters are not allowed in strings");
    if ((cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
        return parse_fail(p, escape_pos,
                          "escape sequence is not a valid Unicode code point "
                          "(U+%04X)",
                          (unsigned)cp);
    uint8_t b[4];
    size_t n;
    if (cp < 0x80) {
        b[0] = (uint8_t)cp;
        n = 1;
    } else if (cp < 0x800) {
        b[0] = (uint8_t)(0xc0 | cp >> 6);
        b[1] = (uint8_t)(0x80 | (cp & 0x3f));
        n = 2;
    } else if (cp < 0x10000) {
        b[0] = (uint8_t)(0xe0 | cp >> 12);
        b[1] = (uint8_t)(0x80 | (cp >> 6 & 0x3f));
        b[2] = (uint8_t)(0x80 | (cp & 0x3f));
        n = 3;
    } else {
        b[0] = (uint8_t)(0xf0 | cp >> 18);
        b[1] = (uint8_t)(0x80 | (cp >> 12 & 0x3f));
        b[2] = (uint8_t)(0x80 | (cp >> 6 & 0x3f));
        b[3] = (uint8_t)(0x80 | (cp & 0x3f));
        n = 4;
    }
    return strata_buffer_append(out, b, n) != 0 ? strata_error_oom(p->err) : 0;
}

static int append_byte_escape(parser *p, size_t escape_pos, uint32_t v, strata_buffer *out) {
    if (v == 0)
        return parse_fail(p, escape_pos, "NUL characters are not allowed in strings");
    if (v > 0xff)
        return parse_fail(p, escape_pos, "octal escape value %u is larger than 255", (unsigned)v);
    return strata_buffer_append_byte(out, (uint8_t)v) != 0 ? strata_error_oom(p->err) : 0;
}

/* Parses the escape sequence at p->pos (a backslash) and appends what it stands for. */
static int parse_escape(parser *p, strata_buffer *out) {
    static const char simple_from[] = "abfnrtv\\\"'";
    static const char simple_to[] = "\a\b\f\n\r\t\v\\\"'";
    size_t escape_pos = p->pos++;
    char c = p->text[p->pos];
    const char *simple = strchr(simple_from, c);
    uint32_t v = 0;
    if (c != '\0' && simple != NULL) {
        p->pos++;
        char byte = simple_to[simple - simple_from];
        return strata_buffer_append_byte(out, (uint8_t)byte) != 0 ? strata_error_oom(p->err) : 0;
    }
    if (c == 'x' || c == 'u' || c == 'U') {
        p->pos++;
        if (read_digits(p, escape_pos, c == 'x' ? 2 : c == 'u' ? 4 : 8, 16, &v) != 0)
            return -1;
        return c == 'x' ? append_byte_escape(p, escape_pos, v, out)
                        : append_code_point(p, escape_pos, v, out);
    }
    if (c >= '0' && c <= '7') {
        if (read_digits(p, escape_pos, 3, 8, &v) != 0)
            return -1;
        return append_byte_escape(p, escape_pos, v, out);
    }
    if (c > 0x20 && c < 0x7f)
        return parse_fail(p, escape_pos, "unknown escape sequence \"\\%c\" in quoted string", c);
    return parse_fail(p, escape_pos, "unknown escape sequence (\"\\\" followed by byte 0x%02x)",
                      (unsigned char)c);
}

static int parse_raw_string(parser *p, size_t open, strata_buffer *out) {
    const char *close = memchr(p->text + p->pos, '`', p->len - p->pos);
    if (close == NULL)
        return parse_fail(p, open, "unterminated raw string (missing closing \"`\")");
    size_t n = (size_t)(close - (p->text + p->pos));
    if (strata_buffer_append(out, p->text + p->pos, n) != 0)
        return strata_error_oom(p->err);
    p->pos += n + 1;
    return 0;
}

static int parse_quoted_body(parser *p, char quote, size_t open, strata_buffer *out) {
    for (;;) {
        if (at_end(p))
            return parse_fail(p, open, "unterminated quoted string (missing closing %c)", quote);
        char c = p->text[p->pos];
        if (c == quote) {
            p->pos++;
            return 0;
        }
        if (c == '\n')
            return parse_fail(p, p->pos, "newline in quoted string (write it as \\n)");
        if (c == '\\') {
            if (p->pos + 1 >= p->len)
                return parse_fail(p, open, "unterminated quoted string (missing closing %c)",
                                  quote);
            if (parse_escape(p, out) != 0)
                return -1;
            continue;
        }
        if (strata_buffer_append_byte(out, (uint8_t)c) != 0)
            return strata_error_oom(p->err);
        p->pos++;
    }
}

/* Parses a quoted string at p->pos into a new NUL-terminated string. */
static int parse_string(parser *p, const char *after, char **value) {
    char what[16];
    char quote = peek(p);
    if (quote != '"' && quote != '\'' && quote != '`')
        return parse_fail(p, p->pos, "expected a quoted string after \"%s\", got %s", after,
                          describe_at(p, p->pos, what, sizeof what));
    size_t open = p->pos++;
    strata_buffer buf = STRATA_BUFFER_INIT;
    int rc =
        quote == '`' ? parse_raw_string(p, open, &buf) : parse_quoted_body(p, quote, open, &buf);
    if (rc == 0) {
        *value = strata_buffer_detach(&buf, NULL);
        if (*value == NULL)
            rc = strata_error_oom(p->err);
    }
    strata_buffer_free(&buf);
    return rc;
}

/* ---- matchers ----------------------------------------------------------------------------- */

static int parse_operator(parser *p, const char *name, label_match_type *type) {
    static const struct {
        const char *text;
        label_match_type type;
    } ops[] = {{"=~", LABEL_MATCH_REGEX},
               {"!~", LABEL_MATCH_NOT_REGEX},
               {"!=", LABEL_MATCH_NOT_EQUAL},
               {"=", LABEL_MATCH_EQUAL}};
    char quoted[96];
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        size_t n = strlen(ops[i].text);
        if (p->len - p->pos < n || memcmp(p->text + p->pos, ops[i].text, n) != 0)
            continue;
        if (p->labels_only && ops[i].type != LABEL_MATCH_EQUAL)
            return parse_fail(p, p->pos, "only \"=\" is allowed in a label set, got \"%s\"",
                              ops[i].text);
        p->pos += n;
        *type = ops[i].type;
        return 0;
    }
    return parse_fail(p, p->pos, "expected \"=\", \"!=\", \"=~\" or \"!~\" after label name %s",
                      labels_quote_for_message(name, quoted, sizeof quoted));
}

static int parse_matcher(parser *p, label_matcher *m) {
    char what[16];
    if (!is_name_start(peek(p)))
        return parse_fail(p, p->pos, "expected a label name or \"}\", got %s",
                          describe_at(p, p->pos, what, sizeof what));
    size_t start = p->pos;
    while (!at_end(p) && is_name_char(p->text[p->pos]))
        p->pos++;
    char *name = strndup(p->text + start, p->pos - start);
    if (name == NULL)
        return strata_error_oom(p->err);
    label_match_type type = LABEL_MATCH_EQUAL;
    char *value = NULL;
    skip_space(p);
    int rc = parse_operator(p, name, &type);
    skip_space(p);
    size_t value_pos = p->pos;
    if (rc == 0)
        rc = parse_string(p, label_match_type_string(type), &value);
    if (rc == 0 && label_matcher_init(m, name, type, value, p->err) != 0)
        rc = strata_error_wrap(p->err, "column %zu", value_pos + 1);
    free(name);
    free(value);
    return rc;
}

/* ---- selectors ---------------------------------------------------------------------------- */

static int parse_profile_type(parser *p, selector *sel) {
    size_t start = p->pos;
    while (!at_end(p) && is_profile_type_char(p->text[p->pos]))
        p->pos++;
    if (labels_parse_profile_type(p->text + start, p->pos - start, start + 1, &sel->profile_type,
                                  p->err) != 0)
        return -1;
    sel->has_profile_type = true;
    return 0;
}

static int add_matcher(parser *p, selector *sel, size_t *cap) {
    if (sel->n_matchers == STRATA_SELECTOR_MAX_MATCHERS)
        return parse_fail(p, p->pos, "too many matchers (the limit is %d)",
                          STRATA_SELECTOR_MAX_MATCHERS);
    if (STRATA_ARRAY_RESERVE_OR_OOM(sel->matchers, *cap, sel->n_matchers + 1, p->err) != 0)
        return -1;
    if (parse_matcher(p, &sel->matchers[sel->n_matchers]) != 0)
        return -1;
    sel->n_matchers++;
    return 0;
}

/* Parses `{matcher, ...}` with p->pos at the "{". */
static int parse_matchers(parser *p, selector *sel) {
    char what[16];
    size_t cap = 0;
    p->pos++;
    for (;;) {
        skip_space(p);
        if (peek(p) == '}')
            break;
        if (add_matcher(p, sel, &cap) != 0)
            return -1;
        skip_space(p);
        if (peek(p) == ',') {
            p->pos++;
            continue;
        }
        if (peek(p) != '}')
            return parse_fail(p, p->pos, "expected \",\" or \"}\" after a matcher, got %s",
                              describe_at(p, p->pos, what, sizeof what));
    }
    p->pos++;
    return 0;
}

static int parse_selector_text(parser *p, selector *sel) {
    char what[16];
    size_t len = strnlen(p->text, STRATA_SELECTOR_MAX_BYTES + 1);
    if (len > STRATA_SELECTOR_MAX_BYTES)
        return strata_error_set(
            p->err, STRATA_INVALID_ARGUMENT, "column %d: %s is longer than the limit of %d bytes",
            STRATA_SELECTOR_MAX_BYTES + 1, p->labels_only ? "label set" : "selector",
            STRATA_SELECTOR_MAX_BYTES);
    p->len = len;
    skip_space(p);
    if (!p->labels_only && is_profile_type_char(peek(p)) && parse_profile_type(p, sel) != 0)
        return -1;
    skip_space(p);
    if (at_end(p) && !p->labels_only)
        return 0;
    if (peek(p) != '{')
        return parse_fail(p, p->pos, "expected %s, got %s",
                          p->labels_only          ? "\"{\""
                          : sel->has_profile_type ? "\"{\" or the end of the selector"
                                                  : "a profile type or \"{\"",
                          describe_at(p, p->pos, what, sizeof what));
    if (parse_matchers(p, sel) != 0)
        return -1;
    skip_space(p);
    if (!at_end(p))
        return parse_fail(p, p->pos, "unexpected %s after \"}\"",
                          describe_at(p, p->pos, what, sizeof what));
    return 0;
}

int selector_parse(const char *text, selector *out, strata_error *err) {
    parser p = {.text = text, .err = err};
    selector sel = {0};
    if (parse_selector_text(&p, &sel) != 0) {
        selector_free(&sel);
        *out = sel;
        return -1;
    }
    *out = sel;
    return 0;
}

int label_set_from_text(const char *text, label_set *out, strata_error *err) {
    parser p = {.text = text, .labels_only = true, .err = err};
    selector sel = {0};
    label_set set = LABEL_SET_INIT;
    int rc = parse_selector_text(&p, &sel);
    for (size_t i = 0; rc == 0 && i < sel.n_matchers; i++) {
        const label_matcher *m = &sel.matchers[i];
        rc = label_set_add(&set, m->name, strlen(m->name), m->value, strlen(m->value), err);
    }
    selector_free(&sel);
    if (rc == 0) {
        label_set_sort(&set);
        rc = label_set_validate(&set, err);
    }
    if (rc != 0)
        label_set_free(&set);
    *out = set;
    return rc;
}

bool selector_matches(const selector *sel, const label_set *set) {
    for (size_t i = 0; i < sel->n_matchers; i++) {
        const label_matcher *m = &sel->matchers[i];
        if (!label_matcher_matches(m, label_set_get(set, m->name)))
            return false;
    }
    return true;
}

int selector_format(const selector *sel, strata_buffer *out) {
    if (sel->has_profile_type && profile_type_format(&sel->profile_type, out) != 0)
        return -1;
    if (sel->has_profile_type && sel->n_matchers == 0)
        return 0;
    if (strata_buffer_append_byte(out, '{') != 0)
        return -1;
    for (size_t i = 0; i < sel->n_matchers; i++) {
        const label_matcher *m = &sel->matchers[i];
        if ((i > 0 && strata_buffer_append_str(out, ", ") != 0) ||
            strata_buffer_append_str(out, m->name) != 0 ||
            strata_buffer_append_str(out, label_match_type_string(m->type)) != 0 ||
            labels_append_quoted(out, m->value) != 0)
            return -1;
    }
    return strata_buffer_append_byte(out, '}');
}

void selector_free(selector *sel) {
    for (size_t i = 0; i < sel->n_matchers; i++)
        label_matcher_free(&sel->matchers[i]);
    free(sel->matchers);
    if (sel->has_profile_type)
        profile_type_free(&sel->profile_type);
    memset(sel, 0, sizeof *sel);
}
