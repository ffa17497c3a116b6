/*
 * json.c - the JSON reader (see json.h). The writer is in json_writer.c.
 *
 * A recursive-descent parser (recursion is bounded by JSON_MAX_DEPTH) that builds the tree in an
 * arena owned by the document. Array elements and object members are first collected on one
 * growable scratch stack shared by all nesting levels and copied into the arena, contiguous, when
 * their container closes, so a container costs one arena allocation however it grows. Strings are
 * unescaped straight into the arena; numbers keep a NUL-terminated copy of their source text.
 */
#include "json/json.h"

#include <errno.h>
#include <math.h>
#include <stdalign.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/array.h"
#include "common/utf8.h"

struct json_value {
    json_type type;
    union {
        bool boolean;
        struct {
            const char *text; /* NUL-terminated; a number's source text or an unescaped string */
            size_t len;
        } scalar;
        struct {
            struct json_value *items;
            size_t count;
        } array;
        struct {
            struct json_object_member *members;
            size_t count;
        } object;
    } u;
};

typedef struct json_object_member {
    const char *key;
    size_t key_len;
    json_value value;
} json_object_member;

typedef struct arena_chunk {
    struct arena_chunk *next;
    size_t used;
    size_t cap;
    alignas(max_align_t) unsigned char data[];
} arena_chunk;

struct json_document {
    arena_chunk *chunks; /* newest first */
    json_value root;
};

#define ARENA_MIN_CHUNK 4096
#define ARENA_MAX_CHUNK (1u << 20)

static void *arena_alloc(json_document *doc, size_t size) {
    size_t align = alignof(max_align_t);
    size = (size + align - 1) & ~(align - 1);
    arena_chunk *chunk = doc->chunks;
    if (chunk == NULL || chunk->cap - chunk->used < size) {
        size_t cap =
            chunk != NULL && chunk->cap < ARENA_MAX_CHUNK ? chunk->cap * 2 : ARENA_MIN_CHUNK;
        if (chunk != NULL && chunk->cap >= ARENA_MAX_CHUNK)
            cap = ARENA_MAX_CHUNK;
        if (cap < size)
            cap = size;
        chunk = malloc(sizeof *chunk + cap);
        if (chunk == NULL)
            return NULL;
        chunk->next = doc->chunks;
        chunk->used = 0;
        chunk->cap = cap;
        doc->chunks = chunk;
    }
    void *p = chunk->data + chunk->used;
    chunk->used += size;
    return p;
}

/* ---- parser state and errors -------------------------------------------------------------- */

typedef struct parser {
    const char *text;
    size_t len;
    size_t pos;
    int depth;
    json_document *doc;
    json_object_member *scratch; /* pending elements/members of every open container */
    size_t scratch_len;
    size_t scratch_cap;
    strata_error *err;
} parser;

static int parse_fail(parser *p, size_t pos, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int parse_fail(parser *p, size_t pos, const char *fmt, ...) {
    size_t line = 1, line_start = 0;
    for (size_t i = 0; i < pos && i < p->len; i++) {
        if (p->text[i] == '\n') {
            line++;
            line_start = i + 1;
        }
    }
    char message[STRATA_ERROR_MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    return strata_error_set(p->err, STRATA_INVALID_ARGUMENT, "line %zu, column %zu: %s", line,
                            pos - line_start + 1, message);
}

static int parse_oom(parser *p) {
    return strata_error_oom(p->err);
}

/* Describes the byte at pos: `end of input`, `'x'` or `byte 0x07`. */
static const char *describe_at(const parser *p, size_t pos, char *buf, size_t buf_len) {
    if (pos >= p->len)
        return "end of input";
    unsigned char c = (unsigned char)p->text[pos];
    if (c > 0x20 && c < 0x7f)
        snprintf(buf, buf_len, "'%c'", c);
    else
        snprintf(buf, buf_len, "byte 0x%02x", c);
    return buf;
}

static void skip_space(parser *p) {
    while (p->pos < p->len) {
        char c = p->text[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
            return;
        p->pos++;
    }
}

static int expect_value_error(parser *p) {
    char what[16];
    return parse_fail(p, p->pos, "expected a JSON value, got %s",
                      describe_at(p, p->pos, what, sizeof what));
}

/* ---- strings ------------------------------------------------------------------------------ */

static size_t utf8_encode(uint32_t cp, char *out) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | cp >> 12);
        out[1] = (char)(0x80 | (cp >> 6 & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | cp >> 18);
    out[1] = (char)(0x80 | (cp >> 12 & 0x3f));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* Reads 4 hex digits at text[pos]; -1 if they are not all there. */
static long read_hex4(const parser *p, size_t pos) {
    if (p->len - pos < 4)
        return -1;
    long v = 0;
    for (size_t i = pos; i < pos + 4; i++) {
        char c = p->text[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

/* Decodes a \uXXXX escape (and its low surrogate) at p->pos (the backslash) into out. */
static int decode_unicode_escape(parser *p, char *out, size_t *out_len) {
    size_t at = p->pos;
    long cp = read_hex4(p, at + 2);
    if (cp < 0)
        return parse_fail(p, at, "\\u must be followed by 4 hex digits");
    p->pos += 6;
    if (cp >= 0xdc00 && cp <= 0xdfff)
        return parse_fail(p, at, "lone low surrogate \\u%04lX (it must follow a high surrogate)",
                          cp);
    if (cp >= 0xd800 && cp <= 0xdbff) {
        long low = p->len - p->pos >= 6 && p->text[p->pos] == '\\' && p->text[p->pos + 1] == 'u'
                       ? read_hex4(p, p->pos + 2)
                       : -1;
        if (low < 0xdc00 || low > 0xdfff)
            return parse_fail(p, at,
                              "lone high surrogate \\u%04lX (it must be followed by a low "
                              "surrogate \\uDC00-\\uDFFF)",
                              cp);
        cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
        p->pos += 6;
    }
    if (cp == 0)
        return parse_fail(p, at, "\\u0000 is not allowed (strings are NUL-terminated)");
    *out_len = utf8_encode((uint32_t)cp, out);
    return 0;
}

/* Decodes the escape at p->pos (a backslash) into out. */
static int decode_escape(parser *p, char *out, size_t *out_len) {
    static const char from[] = "\"\\/bfnrt";
    static const char to[] = "\"\\/\b\f\n\r\t";
    char c = p->pos + 1 < p->len ? p->text[p->pos + 1] : '\0';
    if (c == 'u')
        return decode_unicode_escape(p, out, out_len);
    const char *hit = c != '\0' ? strchr(from, c) : NULL;
    if (hit == NULL) {
        char what[16];
        return parse_fail(p, p->pos, "invalid escape: backslash followed by %s",
                          describe_at(p, p->pos + 1, what, sizeof what));
    }
    out[0] = to[hit - from];
    *out_len = 1;
    p->pos += 2;
    return 0;
}

/* Finds the closing quote of the string opening at p->pos; returns its offset or len. */
static size_t find_string_end(const parser *p) {
    size_t i = p->pos + 1;
    while (i < p->len && p->text[i] != '"')
        i += p->text[i] == '\\' ? 2 : 1;
    return i < p->len ? i : p->len;
}

/* Copies one raw (unescaped) character of a string, validating it. */
static int copy_string_char(parser *p, size_t end, char *out, size_t *out_len) {
    unsigned char c = (unsigned char)p->text[p->pos];
    if (c < 0x20)
        return parse_fail(p, p->pos, "unescaped control character 0x%02x in string", c);
    size_t n = strata_utf8_sequence_length((const unsigned char *)p->text + p->pos, end - p->pos);
    if (n == 0)
        return parse_fail(p, p->pos, "invalid UTF-8 byte 0x%02x in string", c);
    memcpy(out, p->text + p->pos, n);
    *out_len = n;
    p->pos += n;
    return 0;
}

/* Parses the string at p->pos (the opening quote) into the arena. */
static int parse_string(parser *p, const char **out, size_t *out_len) {
    size_t open = p->pos;
    size_t end = find_string_end(p);
    if (end == p->len)
        return parse_fail(p, open, "unterminated string");
    /* Unescaping never makes a string longer (\uXXXX is 6 bytes for at most 3, a pair 12 for 4). */
    char *buf = arena_alloc(p->doc, end - open);
    if (buf == NULL)
        return parse_oom(p);
    size_t n = 0;
    p->pos++;
    while (p->pos < end) {
        size_t k = 0;
        int rc = p->text[p->pos] == '\\' ? decode_escape(p, buf + n, &k)
                                         : copy_string_char(p, end, buf + n, &k);
        if (rc != 0)
            return -1;
        n += k;
    }
    if (p->pos != end) /* an escape's digits ran past the closing quote */
        return parse_fail(p, end, "unterminated escape sequence before the closing quote");
    buf[n] = '\0';
    p->pos = end + 1;
    *out = buf;
    *out_len = n;
    return 0;
}

/* ---- numbers and literals ----------------------------------------------------------------- */

static size_t skip_digits(const parser *p, size_t i) {
    while (i < p->len && p->text[i] >= '0' && p->text[i] <= '9')
        i++;
    return i;
}

static bool is_digit_at(const parser *p, size_t i) {
    return i < p->len && p->text[i] >= '0' && p->text[i] <= '9';
}

/* Scans -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? and returns the offset past it. */
static int scan_number(parser *p, size_t *end_out) {
    size_t i = p->pos;
    if (p->text[i] == '-')
        i++;
    if (!is_digit_at(p, i))
        return parse_fail(p, i, "expected a digit in number");
    if (p->text[i] == '0' && is_digit_at(p, i + 1))
        return parse_fail(p, i, "numbers must not have leading zeros");
    i = skip_digits(p, i);
    if (i < p->len && p->text[i] == '.') {
        if (!is_digit_at(p, i + 1))
            return parse_fail(p, i + 1, "expected a digit after the decimal point");
        i = skip_digits(p, i + 1);
    }
    if (i < p->len && (p->text[i] == 'e' || p->text[i] == 'E')) {
        i++;
        if (i < p->len && (p->text[i] == '+' || p->text[i] == '-'))
            i++;
        if (!is_digit_at(p, i))
            return parse_fail(p, i, "expected a digit in the exponent");
        i = skip_digits(p, i);
    }
    *end_out = i;
    return 0;
}

static int parse_number(parser *p, json_value *out) {
    size_t end = 0;
    if (scan_number(p, &end) != 0)
        return -1;
    size_t n = end - p->pos;
    char *text = arena_alloc(p->doc, n + 1);
    if (text == NULL)
        return parse_oom(p);
    memcpy(text, p->text + p->pos, n);
    text[n] = '\0';
    out->type = JSON_NUMBER;
    out->u.scalar.text = text;
    out->u.scalar.len = n;
    p->pos = end;
    return 0;
}

static int parse_literal(parser *p, json_value *out) {
    static const struct {
        const char *text;
        json_type type;
        bool value;
    } literals[] = {
        {"true", JSON_BOOL, true}, {"false", JSON_BOOL, false}, {"null", JSON_NULL, false}};
    for (size_t i = 0; i < sizeof literals / sizeof literals[0]; i++) {
        size_t n = strlen(literals[i].text);
        if (p->len - p->pos >= n && memcmp(p->text + p->pos, literals[i].text, n) == 0) {
            out->type = literals[i].type;
            out->u.boolean = literals[i].value;
            p->pos += n;
            return 0;
        }
    }
    return expect_value_error(p);
}

/* ---- containers --------------------------------------------------------------------------- */

static int scratch_push(parser *p, const char *key, size_t key_len, const json_value *value) {
    if (STRATA_ARRAY_RESERVE(p->scratch, p->scratch_cap, p->scratch_len + 1) != 0)
        return parse_oom(p);
    json_object_member *m = &p->scratch[p->scratch_len++];
    m->key = key;
    m->key_len = key_len;
    m->value = *value;
    return 0;
}

static int parse_value(parser *p, json_value *out);

static int enter_container(parser *p) {
    if (p->depth == JSON_MAX_DEPTH)
        return parse_fail(p, p->pos, "nesting is deeper than the limit of %d levels",
                          JSON_MAX_DEPTH);
    p->depth++;
    p->pos++;
    skip_space(p);
    return 0;
}

/* After an element: consumes "," (returns 1, more follow) or the closing byte (returns 0). */
static int parse_separator(parser *p, char close, const char *what) {
    char got[16];
    skip_space(p);
    if (p->pos < p->len && p->text[p->pos] == ',') {
        p->pos++;
        skip_space(p);
        if (p->pos < p->len && p->text[p->pos] == close)
            return parse_fail(p, p->pos, "trailing comma before '%c'", close);
        return 1;
    }
    if (p->pos < p->len && p->text[p->pos] == close) {
        p->pos++;
        return 0;
    }
    return parse_fail(p, p->pos, "expected ',' or '%c' after %s, got %s", close, what,
                      describe_at(p, p->pos, got, sizeof got));
}

static int parse_array(parser *p, json_value *out) {
    if (enter_container(p) != 0)
        return -1;
    size_t base = p->scratch_len;
    int more = 1;
    if (p->pos < p->len && p->text[p->pos] == ']') {
        p->pos++;
        more = 0;
    }
    while (more == 1) {
        json_value item;
        if (parse_value(p, &item) != 0 || scratch_push(p, NULL, 0, &item) != 0)
            return -1;
        more = parse_separator(p, ']', "an array element");
    }
    if (more < 0)
        return -1;
    size_t count = p->scratch_len - base;
    json_value *items = count ? arena_alloc(p->doc, count * sizeof *items) : NULL;
    if (count && items == NULL)
        return parse_oom(p);
    for (size_t i = 0; i < count; i++)
        items[i] = p->scratch[base + i].value;
    p->scratch_len = base;
    p->depth--;
    out->type = JSON_ARRAY;
    out->u.array.items = items;
    out->u.array.count = count;
    return 0;
}

static int parse_member(parser *p) {
    char got[16];
    const char *key;
    size_t key_len;
    json_value value;
    if (p->pos >= p->len || p->text[p->pos] != '"')
        return parse_fail(p, p->pos, "expected a string key in object, got %s",
                          describe_at(p, p->pos, got, sizeof got));
    if (parse_string(p, &key, &key_len) != 0)
        return -1;
    skip_space(p);
    if (p->pos >= p->len || p->text[p->pos] != ':')
        return parse_fail(p, p->pos, "expected ':' after object key, got %s",
                          describe_at(p, p->pos, got, sizeof got));
    p->pos++;
    if (parse_value(p, &value) != 0)
        return -1;
    return scratch_push(p, key, key_len, &value);
}

static int parse_object(parser *p, json_value *out) {
    if (enter_container(p) != 0)
        return -1;
    size_t base = p->scratch_len;
    int more = 1;
    if (p->pos < p->len && p->text[p->pos] == '}') {
        p->pos++;
        more = 0;
    }
    while (more == 1) {
        if (parse_member(p) != 0)
            return -1;
        more = parse_separator(p, '}', "an object member");
    }
    if (more < 0)
        return -1;
    size_t count = p->scratch_len - base;
    json_object_member *members = count ? arena_alloc(p->doc, count * sizeof *members) : NULL;
    if (count && members == NULL)
        return parse_oom(p);
    if (count)
        memcpy(members, p->scratch + base, count * sizeof *members);
    p->scratch_len = base;
    p->depth--;
    out->type = JSON_OBJECT;
    out->u.object.members = members;
    out->u.object.count = count;
    return 0;
}

static int parse_value(parser *p, json_value *out) {
    skip_space(p);
    if (p->pos >= p->len)
        return expect_value_error(p);
    char c = p->text[p->pos];
    switch (c) {
        case '{':
            return parse_object(p, out);
        case '[':
            return parse_array(p, out);
        case '"':
            out->type = JSON_STRING;
            return parse_string(p, &out->u.scalar.text, &out->u.scalar.len);
        case 't':
        case 'f':
        case 'n':
            return parse_literal(p, out);
        default:
            if (c == '-' || (c >= '0' && c <= '9'))
                return parse_number(p, out);
            return expect_value_error(p);
    }
}

/* ---- documents ---------------------------------------------------------------------------- */

int json_parse(const char *text, size_t len, json_document **out, strata_error *err) {
    *out = NULL;
    json_document *doc = calloc(1, sizeof *doc);
    if (doc == NULL)
        return strata_error_oom(err);
    parser p = {.text = text, .len = len, .doc = doc, .err = err};
    int rc = parse_value(&p, &doc->root);
    if (rc == 0) {
        skip_space(&p);
        char what[16];
        if (p.pos < p.len)
            rc = parse_fail(&p, p.pos, "unexpected %s after the JSON value",
                            describe_at(&p, p.pos, what, sizeof what));
    }
    free(p.scratch);
    if (rc != 0) {
        json_document_free(doc);
        return -1;
    }
    *out = doc;
    return 0;
}

void json_document_free(json_document *doc) {
    if (doc == NULL)
        return;
    arena_chunk *chunk = doc->chunks;
    while (chunk != NULL) {
        arena_chunk *next = chunk->next;
        free(chunk);
        chunk = next;
    }
    free(doc);
}

const json_value *json_document_root(const json_document *doc) {
    return doc != NULL ? &doc->root : NULL;
}

/* ---- accessors ---------------------------------------------------------------------------- */

json_type json_value_type(const json_value *v) {
    return v != NULL ? v->type : JSON_NULL;
}

const json_value *json_object_get(const json_value *v, const char *key) {
    if (v == NULL || v->type != JSON_OBJECT || key == NULL)
        return NULL;
    size_t key_len = strlen(key);
    for (size_t i = v->u.object.count; i-- > 0;) { /* the last duplicate wins */
        const json_object_member *m = &v->u.object.members[i];
        if (m->key_len == key_len && memcmp(m->key, key, key_len) == 0)
            return &m->value;
    }
    return NULL;
}

size_t json_object_size(const json_value *v) {
    return v != NULL && v->type == JSON_OBJECT ? v->u.object.count : 0;
}

const char *json_object_key_at(const json_value *v, size_t i) {
    return i < json_object_size(v) ? v->u.object.members[i].key : NULL;
}

const json_value *json_object_value_at(const json_value *v, size_t i) {
    return i < json_object_size(v) ? &v->u.object.members[i].value : NULL;
}

size_t json_array_length(const json_value *v) {
    return v != NULL && v->type == JSON_ARRAY ? v->u.array.count : 0;
}

const json_value *json_array_at(const json_value *v, size_t i) {
    return i < json_array_length(v) ? &v->u.array.items[i] : NULL;
}

bool json_get_bool(const json_value *v, bool *out) {
    if (v == NULL || v->type != JSON_BOOL)
        return false;
    *out = v->u.boolean;
    return true;
}

bool json_get_int64(const json_value *v, int64_t *out) {
    if (v == NULL || v->type != JSON_NUMBER)
        return false;
    const char *s = v->u.scalar.text;
    bool negative = *s == '-';
    if (negative)
        s++;
    uint64_t limit = negative ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    uint64_t acc = 0;
    for (; *s != '\0'; s++) {
        if (*s < '0' || *s > '9')
            return false; /* fraction or exponent */
        uint64_t digit = (uint64_t)(*s - '0');
        if (acc > (limit - digit) / 10)
            return false;
        acc = acc * 10 + digit;
    }
    if (negative)
        *out = acc == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)acc;
    else
        *out = (int64_t)acc;
    return true;
}

bool json_get_double(const json_value *v, double *out) {
    if (v == NULL || v->type != JSON_NUMBER)
        return false;
    errno = 0;
    double d = strtod(v->u.scalar.text, NULL);
    if (errno == ERANGE && isinf(d))
        return false;
    *out = d;
    return true;
}

bool json_get_string(const json_value *v, const char **out, size_t *len) {
    if (v == NULL || v->type != JSON_STRING)
        return false;
    *out = v->u.scalar.text;
    if (len != NULL)
        *len = v->u.scalar.len;
    return true;
}
