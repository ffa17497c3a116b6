/*
 * http_multipart.c - multipart/form-data bodies as views (multipart.h).
 *
 * The body is scanned once with memmem for "\r\n--<boundary>": a part's content ends just before
 * that CRLF (the CRLF belongs to the delimiter, RFC 2046 section 5.1.1), so content that itself
 * ends in CRLF keeps it. The first delimiter may also start the body without a CRLF before it.
 * Header parameters (name="x"; filename="y") are read as RFC 7578 senders write them; a quoted
 * value is taken as it stands between its quotes (a backslash is not an escape: browsers
 * percent-encode quotes in file names instead).
 */
#include <string.h>
#include <strings.h>

#include "multipart.h"

#define MAX_BOUNDARY 70
#define MAX_PART_HEADER_BYTES 8192

typedef struct view {
    const char *p;
    size_t len;
} view;

static view trim(view v) {
    while (v.len > 0 && (v.p[0] == ' ' || v.p[0] == '\t'))
        v.p++, v.len--;
    while (v.len > 0 && (v.p[v.len - 1] == ' ' || v.p[v.len - 1] == '\t'))
        v.len--;
    return v;
}

static bool view_is(view v, const char *s) {
    return v.len == strlen(s) && strncasecmp(v.p, s, v.len) == 0;
}

/* The next ';'-separated parameter of a header value: *rest moves past it; a quoted value may hold
 * ';'. False when none is left. */
static bool next_param(view *rest, view *key, view *value) {
    while (rest->len > 0 && (rest->p[0] == ';' || rest->p[0] == ' ' || rest->p[0] == '\t'))
        rest->p++, rest->len--;
    if (rest->len == 0)
        return false;
    size_t i = 0;
    while (i < rest->len && rest->p[i] != '=' && rest->p[i] != ';')
        i++;
    *key = trim((view){rest->p, i});
    *value = (view){rest->p + i, 0};
    if (i < rest->len && rest->p[i] == '=') {
        i++;
        while (i < rest->len && (rest->p[i] == ' ' || rest->p[i] == '\t'))
            i++;
        if (i < rest->len && rest->p[i] == '"') {
            size_t start = ++i;
            while (i < rest->len && rest->p[i] != '"')
                i++;
            *value = (view){rest->p + start, i - start};
            if (i < rest->len)
                i++;
        } else {
            size_t start = i;
            while (i < rest->len && rest->p[i] != ';')
                i++;
            *value = trim((view){rest->p + start, i - start});
        }
    }
    rest->p += i;
    rest->len -= i;
    return true;
}

/* The media type of a Content-Type value (before any ';'), trimmed. */
static view media_type(const char *content_type) {
    return trim((view){content_type, strcspn(content_type, ";")});
}

bool http_multipart_is_form_data(const char *content_type) {
    return content_type != NULL && view_is(media_type(content_type), "multipart/form-data");
}

static int find_boundary(const char *content_type, view *boundary, strata_error *err) {
    if (!http_multipart_is_form_data(content_type))
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "multipart: the content type is not multipart/form-data");
    view rest = {content_type + strcspn(content_type, ";"), 0};
    rest.len = strlen(rest.p);
    view key, value;
    while (next_param(&rest, &key, &value)) {
        if (!view_is(key, "boundary"))
            continue;
        if (value.len == 0 || value.len > MAX_BOUNDARY)
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "multipart: the boundary must be 1 to %d characters",
                                    MAX_BOUNDARY);
        *boundary = value;
        return 0;
    }
    return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                            "multipart: the content type has no boundary parameter");
}

/* One header line of a part. */
static int read_part_header(view line, http_multipart_part *part, strata_error *err) {
    const char *colon = memchr(line.p, ':', line.len);
    if (colon == NULL)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "multipart: a part header has no ':'");
    view name = trim((view){line.p, (size_t)(colon - line.p)});
    view value = trim((view){colon + 1, line.len - (size_t)(colon + 1 - line.p)});
    if (view_is(name, "content-type")) {
        part->content_type = value.p;
        part->content_type_len = value.len;
        return 0;
    }
    if (!view_is(name, "content-disposition"))
        return 0;
    const char *semi = memchr(value.p, ';', value.len);
    size_t type_len = semi != NULL ? (size_t)(semi - value.p) : value.len;
    view rest = {value.p + type_len, value.len - type_len};
    if (!view_is(trim((view){value.p, type_len}), "form-data"))
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "multipart: a part's Content-Disposition is not form-data");
    view key, v;
    while (next_param(&rest, &key, &v)) {
        if (view_is(key, "name")) {
            part->name = v.p;
            part->name_len = v.len;
        } else if (view_is(key, "filename")) {
            part->filename = v.p;
            part->filename_len = v.len;
        }
    }
    return 0;
}

/* The headers of a part starting at p; *content is where its content starts. */
static int read_part_headers(const uint8_t *p, const uint8_t *end, http_multipart_part *part,
                             const uint8_t **content, strata_error *err) {
    size_t avail = (size_t)(end - p);
    const uint8_t *stop = memmem(p, avail, "\r\n\r\n", 4);
    if (avail >= 2 && p[0] == '\r' && p[1] == '\n')
        stop = p - 2; /* no headers at all */
    if (stop == NULL || (size_t)(stop + 4 - p) > MAX_PART_HEADER_BYTES)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "multipart: a part's headers do not end (or exceed %d bytes)",
                                MAX_PART_HEADER_BYTES);
    const uint8_t *line = p;
    while (line < stop) {
        const uint8_t *eol = memmem(line, (size_t)(stop - line) + 2, "\r\n", 2);
        if (eol == NULL || eol > stop)
            eol = stop;
        if (read_part_header((view){(const char *)line, (size_t)(eol - line)}, part, err) != 0)
            return -1;
        line = eol + 2;
    }
    if (part->name == NULL)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "multipart: a part has no Content-Disposition name");
    *content = stop + 4;
    return 0;
}

/* After a delimiter at p: "--" closes (returns 1), else transport padding and CRLF (returns 0 with
 * *next after them). */
static int after_delimiter(const uint8_t *p, const uint8_t *end, const uint8_t **next,
                           strata_error *err) {
    if (end - p >= 2 && p[0] == '-' && p[1] == '-')
        return 1;
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    if (end - p < 2 || p[0] != '\r' || p[1] != '\n')
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "multipart: a boundary line is not followed by CRLF");
    *next = p + 2;
    return 0;
}

int http_multipart_parse(const char *content_type, const uint8_t *body, size_t len,
                         http_multipart_part *parts, size_t max_parts, size_t *n_parts,
                         strata_error *err) {
    *n_parts = 0;
    view boundary = {NULL, 0};
    if (find_boundary(content_type, &boundary, err) != 0)
        return -1;
    char delim[4 + MAX_BOUNDARY]; /* "\r\n--" boundary */
    memcpy(delim, "\r\n--", 4);
    memcpy(delim + 4, boundary.p, boundary.len);
    size_t delim_len = 4 + boundary.len;
    const uint8_t *end = body + len, *p;
    if (len >= delim_len - 2 && memcmp(body, delim + 2, delim_len - 2) == 0)
        p = body + delim_len - 2;
    else if ((p = memmem(body, len, delim, delim_len)) != NULL)
        p += delim_len;
    else
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "multipart: the body holds no boundary line");
    for (;;) {
        const uint8_t *next = NULL;
        int rc = after_delimiter(p, end, &next, err);
        if (rc != 0)
            return rc < 0 ? -1 : 0;
        if (*n_parts == max_parts)
            return strata_error_set(err, STRATA_INVALID_ARGUMENT, "multipart: more than %zu parts",
                                    max_parts);
        http_multipart_part *part = &parts[*n_parts];
        memset(part, 0, sizeof *part);
        const uint8_t *content = NULL;
        if (read_part_headers(next, end, part, &content, err) != 0)
            return -1;
        const uint8_t *stop = memmem(content, (size_t)(end - content), delim, delim_len);
        if (stop == NULL)
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "multipart: part \"%.*s\" has no closing boundary",
                                    (int)(part->name_len > 64 ? 64 : part->name_len), part->name);
        part->data = content;
        part->len = (size_t)(stop - content);
        (*n_parts)++;
        p = stop + delim_len;
    }
}

const http_multipart_part *http_multipart_find(const http_multipart_part *parts, size_t n_parts,
                                               const char *name) {
    size_t len = strlen(name);
    for (size_t i = 0; i < n_parts; i++)
        if (parts[i].name_len == len && memcmp(parts[i].name, name, len) == 0)
            return &parts[i];
    return NULL;
}
