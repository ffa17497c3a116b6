/*
 * multipart.h - reading a multipart/form-data body (RFC 7578), the shape HTML forms and several
 * profilers' SDKs (pyroscope-go's /ingest upload) send files in.
 *
 * The parser works on a complete body in memory (the HTTP server collects bodies in full) and
 * copies nothing: each part is a view into the body, its form-field name and file name views
 * into the part's Content-Disposition header. Only what form-data uses is understood: the
 * boundary from the Content-Type parameter (quoted or not, at most 70 characters as RFC 2046
 * allows), parts separated by CRLF "--" boundary lines, each with headers ending in an empty line,
 * the close delimiter "--boundary--"; a preamble before the first boundary and an epilogue after
 * the last are ignored, as the RFC says. A part's Content-Transfer-Encoding is not decoded (RFC
 * 7578 deprecates it; every client sends binary). Anything else (no boundary, a part without a
 * Content-Disposition name, headers that never end, no close delimiter, more parts than the
 * caller allows) is INVALID_ARGUMENT with a message that says which.
 */
#ifndef STRATA_HTTP_MULTIPART_H
#define STRATA_HTTP_MULTIPART_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

typedef struct http_multipart_part {
    const char *name; /* the form field's name (Content-Disposition name=); not NUL-terminated */
    size_t name_len;
    const char *filename; /* filename=, NULL when absent; not NUL-terminated */
    size_t filename_len;
    const char *content_type; /* the part's Content-Type value, NULL when absent */
    size_t content_type_len;
    const uint8_t *data; /* the part's content */
    size_t len;
} http_multipart_part;

/* True when content_type is multipart/form-data (any parameters). */
bool http_multipart_is_form_data(const char *content_type);

/* Splits body[0..len) into its parts (at most max_parts, in order) using the boundary of
 * content_type; *n_parts is how many. The views point into body and content_type. */
int http_multipart_parse(const char *content_type, const uint8_t *body, size_t len,
                         http_multipart_part *parts, size_t max_parts, size_t *n_parts,
                         strata_error *err);

/* The first part whose form field is name, or NULL. */
const http_multipart_part *http_multipart_find(const http_multipart_part *parts, size_t n_parts,
                                               const char *name);

#endif
