/*
 * bucket_remote.c - the bucket semantics shared by the S3 and AZURE backends (see bucket_remote.h).
 *
 * Every function here works through a backend's bucket_remote and its dialect: the dialect builds,
 * signs and sends a request (bucket_http does the transport), this file decides what the answer
 * means for bucket.h. Reads: length 0 is answered by HEAD alone; a 416 answer is resolved the same
 * way, so "offset == size" is an empty read and anything beyond is OUT_OF_RANGE. Listings: one
 * request per page, `requests` counted per page, the page's objects and prefixes merged in byte
 * order before the caller sees them, the next page asked with the token the dialect found.
 * Uploads: the backend picks one request or chunks (S3 multipart, Azure blocks); the chunk loop
 * here caps the count of chunks by growing their size.
 */
#include "bucket/bucket_remote.h"

#include <curl/curl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/array.h"

#define LIST_PAGE 1000

int bucket_remote_list_page_size = LIST_PAGE;

/* ---- Opening and closing ----------------------------------------------------------------------
 */

int bucket_remote_connect(bucket_remote *r, bucket_http_options *o, const bucket_http_yaml *y,
                          const config_node *config, strata_error *err) {
    o->what = r->what;
    if (bucket_http_options_from_yaml(y, config, o, err) != 0)
        return -1;
    return bucket_http_client_new(o, &r->http, err);
}

void bucket_remote_free(bucket_remote *r) {
    bucket_http_client_free(r->http);
    free(r->what);
}

int bucket_remote_open_config(const bucket_remote_opener *o, const config_node *bucket_node,
                              const config_node *config, void *yaml, void **impl,
                              strata_error *err) {
    *impl = NULL;
    if (config == NULL)
        return config_node_error(err, bucket_node, "%s", o->missing_config);
    if (config_decode(config, o->fields, yaml, err) != 0)
        return -1;
    bucket_remote *b = calloc(1, o->impl_size);
    if (b != NULL)
        b->dialect = o->dialect;
    int rc = b == NULL ? strata_error_oom(err) : o->build(b, yaml, config, err);
    if (rc != 0)
        o->close(b);
    else
        *impl = b;
    config_free(o->fields, yaml);
    return rc;
}

/* ---- Requests and answers ---------------------------------------------------------------------
 */

void bucket_remote_call_init(bucket_remote_call *c, const char *op, const char *key) {
    memset(c, 0, sizeof *c);
    c->op = op;
    c->key = key;
}

void bucket_remote_call_free(bucket_remote_call *c) {
    strata_buffer_free(&c->url);
    curl_slist_free_all(c->headers);
    bucket_http_response_free(&c->resp);
}

void bucket_remote_add_header(bucket_remote_call *c, const char *fmt, ...) {
    char line[1200];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    struct curl_slist *l =
        n >= 0 && (size_t)n < sizeof line ? curl_slist_append(c->headers, line) : NULL;
    if (l == NULL)
        c->oom = true;
    else
        c->headers = l;
}

int bucket_remote_send(bucket_remote *r, bucket_remote_call *c, bucket_http_request *req,
                       strata_buffer *out, strata_error *err) {
    if (c->oom)
        return strata_error_oom(err);
    req->op = c->op;
    req->key = c->key;
    req->url = (const char *)c->url.data;
    req->headers = c->headers;
    return bucket_http_do(r->http, req, out, &c->resp, err);
}

static strata_status status_code(const bucket_remote_dialect *d, long status, const char *code) {
    if (status == 404)
        return strcmp(code, d->no_bucket_code) == 0 ? STRATA_FAILED_PRECONDITION : STRATA_NOT_FOUND;
    if (status == 401 || status == 403)
        return STRATA_PERMISSION_DENIED;
    if (status == 416)
        return STRATA_OUT_OF_RANGE;
    if (status == 409 || status == 412)
        return STRATA_FAILED_PRECONDITION;
    if (status == 501)
        return STRATA_UNIMPLEMENTED;
    if (bucket_http_status_retryable(status) ||
        (d->timeout_code != NULL && strcmp(code, d->timeout_code) == 0))
        return STRATA_UNAVAILABLE;
    if (status == 400)
        return STRATA_INVALID_ARGUMENT;
    return STRATA_UNKNOWN;
}

/* An error naming the operation, key, status and the store's error code and message. */
int bucket_remote_answer_error(const bucket_remote *r, const bucket_remote_call *c,
                               strata_error *err) {
    const bucket_remote_dialect *d = r->dialect;
    char code[64], message[256];
    bucket_xml_find(&c->resp.error_body, "Code", code, sizeof code);
    bucket_xml_find(&c->resp.error_body, "Message", message, sizeof message);
    const char *hint = c->resp.status != 403 ? ""
                       : d->bad_signature_code != NULL && strcmp(code, d->bad_signature_code) == 0
                           ? d->bad_signature_hint
                           : d->denied_hint;
    return strata_error_set(err, status_code(d, c->resp.status, code),
                            "%s: %s \"%.200s\": HTTP %ld%s%s%s%s%s", r->what, c->op, c->key,
                            c->resp.status, code[0] != '\0' ? " " : "", code,
                            message[0] != '\0' ? ": " : "", message, hint);
}

static bool ok(const bucket_remote_call *c) {
    return c->resp.status >= 200 && c->resp.status < 300;
}

int bucket_remote_check(const bucket_remote *r, const bucket_remote_call *c, long also_ok,
                        strata_error *err) {
    if (ok(c) || (also_ok != 0 && c->resp.status == also_ok))
        return 0;
    return bucket_remote_answer_error(r, c, err);
}

/* ---- Upload -----------------------------------------------------------------------------------
 */

int bucket_remote_upload_whole(bucket_remote *r, const char *key, const bucket_upload_body *body,
                               int (*put)(bucket_remote *r, const char *key, const uint8_t *data,
                                          size_t len, strata_error *err),
                               strata_error *err) {
    strata_buffer scratch = STRATA_BUFFER_INIT;
    const uint8_t *data = NULL;
    int rc = body->size > SIZE_MAX
                 ? strata_error_oom(err)
                 : bucket_upload_body_read(body, 0, (size_t)body->size, &scratch, &data, err);
    if (rc == 0)
        rc = put(r, key, data, (size_t)body->size, err);
    strata_buffer_free(&scratch);
    return rc;
}

int bucket_remote_upload_chunks(const bucket_upload_body *body, uint64_t chunk_size,
                                uint64_t max_chunks,
                                int (*fn)(void *ctx, uint32_t index, const uint8_t *data,
                                          size_t len, strata_error *err),
                                void *ctx, strata_error *err) {
    uint64_t len = body->size;
    if ((len + chunk_size - 1) / chunk_size > max_chunks)
        chunk_size = (len + max_chunks - 1) / max_chunks;
    strata_buffer scratch = STRATA_BUFFER_INIT;
    int rc = 0;
    uint32_t index = 0;
    for (uint64_t off = 0; rc == 0 && off < len; off += chunk_size, index++) {
        size_t n = len - off < chunk_size ? (size_t)(len - off) : (size_t)chunk_size;
        const uint8_t *data = NULL;
        rc = bucket_upload_body_read(body, off, n, &scratch, &data, err);
        if (rc == 0)
            rc = fn(ctx, index, data, n, err);
    }
    strata_buffer_free(&scratch);
    return rc;
}

/* ---- HEAD, GET, DELETE ------------------------------------------------------------------------
 */

/* HEAD key: *found false on 404. */
static int head_object(bucket_remote *r, const char *op, const char *key,
                       bucket_object_attributes *attrs, bool *found, strata_error *err) {
    bucket_remote_call c;
    bucket_remote_call_init(&c, op, key);
    int rc = r->dialect->send_object(r, &c, "HEAD", NULL, NULL, err);
    *found = false;
    if (rc == 0 && c.resp.status == 404)
        rc = 0;
    else if (rc == 0 && !ok(&c))
        rc = bucket_remote_answer_error(r, &c, err);
    else if (rc == 0 && !c.resp.has_content_length)
        rc = strata_error_set(err, STRATA_INTERNAL, "%s: %s \"%.200s\": no Content-Length", r->what,
                              op, key);
    else if (rc == 0) {
        *found = true;
        attrs->size = c.resp.content_length;
        attrs->last_modified_ns = c.resp.last_modified_ns;
    }
    bucket_remote_call_free(&c);
    return rc;
}

static int not_found(const bucket_remote *r, const char *op, const char *key, strata_error *err) {
    return strata_error_set(err, STRATA_NOT_FOUND, "%s: %s \"%.200s\": no such object", r->what, op,
                            key);
}

int bucket_remote_attributes(void *impl, const char *key, bucket_object_attributes *out,
                             strata_error *err) {
    bool found;
    if (head_object(impl, "attributes", key, out, &found, err) != 0)
        return -1;
    return found ? 0 : not_found(impl, "attributes", key, err);
}

int bucket_remote_exists(void *impl, const char *key, bool *out, strata_error *err) {
    bucket_object_attributes attrs;
    return head_object(impl, "exists", key, &attrs, out, err);
}

/* Decides an empty read at offset (length 0, or a 416 answer) from the object's size. */
static int empty_read(bucket_remote *r, const char *key, uint64_t offset, strata_error *err) {
    bucket_object_attributes attrs;
    bool found;
    if (head_object(r, "get", key, &attrs, &found, err) != 0)
        return -1;
    if (!found)
        return not_found(r, "get", key, err);
    if (offset > attrs.size)
        return strata_error_set(err, STRATA_OUT_OF_RANGE,
                                "%s: get \"%.200s\": offset %llu is past the end of the %llu-byte "
                                "object",
                                r->what, key, (unsigned long long)offset,
                                (unsigned long long)attrs.size);
    return 0;
}

/* A server that ignored the range sent the whole object; keep the asked-for slice. */
static void keep_slice(strata_buffer *out, size_t start, uint64_t offset, uint64_t length) {
    size_t got = out->len - start;
    if (offset >= got) {
        out->len = start;
        return;
    }
    size_t n = got - (size_t)offset;
    if (length < n)
        n = (size_t)length;
    memmove(out->data + start, out->data + start + offset, n);
    out->len = start + n;
}

int bucket_remote_get_range(void *impl, const char *key, uint64_t offset, uint64_t length,
                            strata_buffer *out, strata_error *err) {
    bucket_remote *r = impl;
    if (length == 0)
        return empty_read(r, key, offset, err);
    bool ranged = offset > 0 || length != BUCKET_TO_END;
    char range[64];
    if (length != BUCKET_TO_END && length - 1 <= UINT64_MAX - offset)
        snprintf(range, sizeof range, "bytes=%llu-%llu", (unsigned long long)offset,
                 (unsigned long long)(offset + length - 1));
    else
        snprintf(range, sizeof range, "bytes=%llu-", (unsigned long long)offset);
    bucket_remote_call c;
    bucket_remote_call_init(&c, "get", key);
    size_t start = out->len;
    int rc = r->dialect->send_object(r, &c, "GET", ranged ? range : NULL, out, err);
    if (rc == 0 && c.resp.status == 416)
        rc = empty_read(r, key, offset, err);
    else if (rc == 0 && !ok(&c))
        rc = bucket_remote_answer_error(r, &c, err);
    else if (rc == 0 && ranged && c.resp.status == 200)
        keep_slice(out, start, offset, length);
    bucket_remote_call_free(&c);
    return rc;
}

/* Both stores answer a delete of a missing key with success or 404; either is done. */
int bucket_remote_delete(void *impl, const char *key, strata_error *err) {
    bucket_remote *r = impl;
    bucket_remote_call c;
    bucket_remote_call_init(&c, "delete", key);
    int rc = r->dialect->send_object(r, &c, "DELETE", NULL, NULL, err);
    if (rc == 0)
        rc = bucket_remote_check(r, &c, 404, err);
    bucket_remote_call_free(&c);
    return rc;
}

/* ---- List -------------------------------------------------------------------------------------
 */

typedef struct name_vec {
    char **names;
    size_t count, cap;
} name_vec;

static void name_vec_free(name_vec *v) {
    for (size_t i = 0; i < v->count; i++)
        free(v->names[i]);
    free(v->names);
    memset(v, 0, sizeof *v);
}

static int name_vec_add_xml(name_vec *v, const char *text, size_t len) {
    if (STRATA_ARRAY_RESERVE(v->names, v->cap, v->count + 1) != 0)
        return -1;
    strata_buffer b = STRATA_BUFFER_INIT;
    if (bucket_xml_unescape(&b, text, len) != 0) {
        strata_buffer_free(&b);
        return -1;
    }
    v->names[v->count++] = (char *)b.data;
    return 0;
}

/* Collects the `inner` text of each `outer` element of the page. */
static int collect_names(const strata_buffer *page, const char *outer, const char *inner,
                         name_vec *out) {
    const char *pos = (const char *)page->data;
    const char *end = pos + page->len;
    const char *block, *text;
    size_t block_len, len;
    while (bucket_xml_next(&pos, end, outer, &block, &block_len)) {
        const char *in = block;
        if (bucket_xml_next(&in, block + block_len, inner, &text, &len) &&
            name_vec_add_xml(out, text, len) != 0)
            return -1;
    }
    return 0;
}

/* Calls fn for the merged, sorted keys and prefixes; returns -1, 0, or 1 (stop). */
static int emit_merged(const name_vec *keys, const name_vec *dirs, bucket_iter_fn fn, void *ctx,
                       strata_error *err) {
    size_t i = 0, j = 0;
    while (i < keys->count || j < dirs->count) {
        const char *next;
        if (j >= dirs->count || (i < keys->count && strcmp(keys->names[i], dirs->names[j]) < 0))
            next = keys->names[i++];
        else
            next = dirs->names[j++];
        int rc = fn(next, ctx, err);
        if (rc != 0)
            return rc < 0 ? -1 : 1;
    }
    return 0;
}

int bucket_remote_read_token(const strata_buffer *page, const char *tag, bucket_remote_list *st) {
    const char *pos = (const char *)page->data, *text;
    size_t len;
    if (!bucket_xml_next(&pos, pos + page->len, tag, &text, &len) || len == 0)
        return 0;
    return bucket_xml_unescape(&st->token, text, len) == 0 ? 1 : -1;
}

/* The greater of the last key and the last prefix of a page, or "". */
static const char *last_name(const name_vec *keys, const name_vec *dirs) {
    const char *k = keys->count > 0 ? keys->names[keys->count - 1] : "";
    const char *d = dirs->count > 0 ? dirs->names[dirs->count - 1] : "";
    return strcmp(k, d) > 0 ? k : d;
}

/* Fetches and emits one page; returns -1, 0 or 1 (stopped). */
static int list_page(bucket_remote *r, bucket_remote_list *st, bucket_iter_fn fn, void *ctx,
                     strata_error *err) {
    const bucket_remote_dialect *d = r->dialect;
    bucket_remote_call c;
    bucket_remote_call_init(&c, "iter", st->dir);
    strata_buffer page = STRATA_BUFFER_INIT;
    name_vec keys = {0}, dirs = {0};
    int rc = d->send_list(r, &c, st, &page, err);
    if (rc == 0)
        rc = bucket_remote_check(r, &c, 0, err);
    if (rc == 0) {
        strata_buffer_reset(&st->token);
        if (collect_names(&page, d->object_tag, d->object_name, &keys) != 0 ||
            collect_names(&page, d->prefix_tag, d->prefix_name, &dirs) != 0 ||
            d->next_token(r, &page, last_name(&keys, &dirs), st) != 0)
            rc = strata_error_oom(err);
    }
    if (rc == 0)
        rc = emit_merged(&keys, &dirs, fn, ctx, err);
    name_vec_free(&keys);
    name_vec_free(&dirs);
    strata_buffer_free(&page);
    bucket_remote_call_free(&c);
    return rc;
}

int bucket_remote_iterate(void *impl, bucket_list_request *req, bucket_iter_fn fn, void *ctx,
                          strata_error *err) {
    bucket_remote_list st = {
        .dir = req->dir, .start_after = req->start_after, .recursive = req->recursive};
    int rc = 0;
    while (rc == 0 && !st.done) {
        req->requests++;
        rc = list_page(impl, &st, fn, ctx, err);
    }
    strata_buffer_free(&st.token);
    return rc < 0 ? -1 : 0;
}
