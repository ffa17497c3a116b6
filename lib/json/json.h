/*
 * json.h - a small JSON reader and writer.
 *
 * Strata speaks JSON in three places: meta.json and mark files in the bucket (Thanos-style), the
 * HTTP API for the UI and curl, and test fixtures. The reader parses a whole document into an
 * immutable tree allocated from one arena (one free for the whole tree); objects keep their keys
 * in document order and lookups are linear, which is right for the small objects we read. Numbers
 * keep their source text so 64-bit integers (nanosecond timestamps) round-trip exactly through
 * json_get_int64 instead of losing precision in a double. Input is strict RFC 8259: no comments, no
 * trailing commas, no NaN; depth is limited to JSON_MAX_DEPTH; strings must be valid UTF-8 and are
 * returned unescaped and NUL-terminated (a "\u0000" escape is rejected). \uXXXX escapes must
 * form valid code points (surrogate pairs are combined; a lone surrogate is an error). Duplicate
 * object keys are kept in the tree; json_object_get returns the last one, as most parsers do.
 * Error columns count bytes from 1.
 *
 * Accessors accept NULL (json_object_get's "absent") and then report "no such value", so lookups
 * can be chained: json_get_int64(json_object_get(root, "minTime"), &t).
 *
 * The writer appends compact JSON to a strata_buffer and tracks commas itself. Strings are escaped
 * (quote, backslash, control characters); valid UTF-8 passes through and bytes that are not UTF-8
 * become U+FFFD, so output is always valid JSON. A failure is sticky: allocation failure, nesting
 * past JSON_MAX_DEPTH, closing more than was opened, a key outside an object or a second top-level
 * value make later calls do nothing and json_writer_finish() return -1. Numbers are formatted and
 * parsed in the C locale's notation (Strata never calls setlocale).
 */
#ifndef STRATA_JSON_H
#define STRATA_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buffer.h"
#include "common/error.h"

#define JSON_MAX_DEPTH 128

typedef enum json_type {
    JSON_NULL,
    JSON_BOOL,
    JSON_NUMBER,
    JSON_STRING,
    JSON_ARRAY,
    JSON_OBJECT,
} json_type;

typedef struct json_value json_value;
typedef struct json_document json_document;

/* Parses text; on success *out owns the tree (free with json_document_free). Errors are
 * INVALID_ARGUMENT with line and column ("line 3, column 14: expected ':'"). */
int json_parse(const char *text, size_t len, json_document **out, strata_error *err);
void json_document_free(json_document *doc);
const json_value *json_document_root(const json_document *doc);

/* JSON_NULL for NULL. */
json_type json_value_type(const json_value *v);
/* Object member by key, or NULL (also NULL if v is not an object). */
const json_value *json_object_get(const json_value *v, const char *key);
size_t json_object_size(const json_value *v);
const char *json_object_key_at(const json_value *v, size_t i);
const json_value *json_object_value_at(const json_value *v, size_t i);
size_t json_array_length(const json_value *v);
const json_value *json_array_at(const json_value *v, size_t i);

/* Scalar accessors return false when v is NULL or of another type. */
bool json_get_bool(const json_value *v, bool *out);
/* Integral numbers only (no fraction or exponent), exactly, within int64 range. */
bool json_get_int64(const json_value *v, int64_t *out);
/* Any number; false if it overflows a double (1e400). */
bool json_get_double(const json_value *v, double *out);
/* NUL-terminated, unescaped; *len (if given) is the byte length. */
bool json_get_string(const json_value *v, const char **out, size_t *len);

typedef struct json_writer {
    strata_buffer *out;
    int depth;
    bool first[JSON_MAX_DEPTH + 1]; /* no element written yet at this depth */
    bool after_key;
    bool failed;
} json_writer;

void json_writer_init(json_writer *w, strata_buffer *out);
void json_begin_object(json_writer *w);
void json_end_object(json_writer *w);
void json_begin_array(json_writer *w);
void json_end_array(json_writer *w);
void json_key(json_writer *w, const char *key);
/* A NULL s is written as null. */
void json_string(json_writer *w, const char *s);
void json_string_len(json_writer *w, const char *s, size_t len);
void json_int(json_writer *w, int64_t v);
void json_uint(json_writer *w, uint64_t v);
/* Finite values only; NaN and infinities are written as null. */
void json_double(json_writer *w, double v);
void json_bool(json_writer *w, bool v);
void json_null(json_writer *w);
/* Protobuf JSON (protojson) forms of google.protobuf.Timestamp and Duration, as Parca's HTTP
 * gateway writes them: "2026-12-02T15:04:05.123456789Z" (UTC, nanoseconds since the epoch) and
 * "1.500000000s" (negative durations keep the sign on the seconds: "-1.500000000s"). */
void json_timestamp_ns(json_writer *w, int64_t unix_ns);
void json_duration_ns(json_writer *w, int64_t ns);
/* Appends pre-encoded JSON as one value (trusted input). */
void json_raw(json_writer *w, const char *json, size_t len);
/* 0 if everything was written and nesting is balanced, else -1. */
int json_writer_finish(json_writer *w);

#endif
