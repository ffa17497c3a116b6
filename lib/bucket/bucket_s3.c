/*
 * bucket_s3.c - the S3 backend (AWS S3, MinIO, Ceph radosgw, ...) on libcurl's SigV4 signer.
 *
 * Requests. Each operation is one REST call (multipart upload: several) built here and sent by
 * bucket_http (pooled connections, retries with backoff and jitter). libcurl signs with
 * CURLOPT_AWS_SIGV4 = "aws:amz:<region>:s3", following the rules that make curl 7.88's signature
 * match what servers compute: we set x-amz-content-sha256 ourselves (hex SHA-256 of the body),
 * build query strings already sorted and RFC 3986-encoded with value-less parameters written as
 * "uploads=", never pass x-amz-date and never remove a header with an empty "Name:" entry. Object
 * keys are encoded segment by segment ('/' kept), which is also their canonical form.
 *
 * Semantics of bucket.h on S3:
 *   - upload: one PUT up to part_size; above it a multipart upload (create, parts in order,
 *     complete; abort on failure). S3 makes the object visible only on PUT / complete, so readers
 *     never see a part. Each part is retried on its own.
 *   - get_range: GET with "Range: bytes=a-b". S3 answers 416 when the range starts at or past the
 *     end; a HEAD then tells "empty range at the end" (offset == size) from OUT_OF_RANGE.
 *   - attributes / exists: HEAD (404 means absent).
 *   - iterate: ListObjectsV2 (or v1 with list_objects_version: v1) with the directory as prefix,
 *     '/' as delimiter for non-recursive listings, following continuation tokens (v1: markers).
 *     Contents and CommonPrefixes of a page are merged, so keys come out in byte order.
 *   - delete: DELETE (S3 answers 204 for missing keys too).
 *
 * Configuration: Thanos' S3 keys (see docs/storage.md). Credentials come from access_key /
 * secret_key or the AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN variables; with
 * neither, requests are anonymous. Contradictory or unsupported settings (SigV2, SSE-KMS, STS) are
 * errors naming the key.
 */
#include "bucket/bucket_remote.h"

#include <curl/curl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/clock.h"

#define S3_MIN_PART_SIZE (UINT64_C(5) << 20)
#define S3_MAX_PART_SIZE (UINT64_C(5) << 30)
#define S3_DEFAULT_PART_SIZE (UINT64_C(128) << 20) /* part_size: 0 */
#define S3_MAX_PARTS 10000
#define S3_DEFAULT_ATTEMPTS 10 /* max_retries: 0 (minio-go's default) */
#define S3_LIST_PAGE 1000
#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

typedef struct s3_bucket {
    char *what;          /* "s3 bucket NAME" */
    char *base_url;      /* scheme://host/NAME (path style) or scheme://NAME.host */
    char *sigv4;         /* "aws:amz:REGION:s3" */
    char *userpwd;       /* "ACCESS:SECRET" or NULL for anonymous requests */
    char *session_token; /* or NULL */
    char **meta_headers; /* "X-Amz-Meta-K: V" lines for uploads */
    size_t n_meta;
    bool sse_s3, list_v1, send_md5, disable_multipart;
    uint64_t part_size;
    bucket_http_client *http;
} s3_bucket;

/* ---- Requests ---------------------------------------------------------------------------------
 */

typedef struct s3_call {
    const char *op;
    const char *key;
    strata_buffer url;
    struct curl_slist *headers;
    bucket_http_response resp;
    bool oom;
} s3_call;

static void call_init(s3_call *c, const char *op, const char *key) {
    memset(c, 0, sizeof *c);
    c->op = op;
    c->key = key;
}

static void call_free(s3_call *c) {
    strata_buffer_free(&c->url);
    curl_slist_free_all(c->headers);
    bucket_http_response_free(&c->resp);
}

static void add_header(s3_call *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void add_header(s3_call *c, const char *fmt, ...) {
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

/* url = base/escaped-key[?query]; key "" addresses the bucket ("base/?query"). */
static void set_url(s3_call *c, const s3_bucket *s3, const char *key, const char *query) {
    if (strata_buffer_append_str(&c->url, s3->base_url) != 0 ||
        strata_buffer_append_byte(&c->url, '/') != 0 ||
        bucket_http_escape(&c->url, key, strlen(key), true) != 0 ||
        (query != NULL && (strata_buffer_append_byte(&c->url, '?') != 0 ||
                           strata_buffer_append_str(&c->url, query) != 0)) ||
        strata_buffer_append_byte(&c->url, '\0') != 0)
        c->oom = true;
}

/* Headers every request carries: payload hash and session token. */
static void base_headers(s3_call *c, const s3_bucket *s3, const void *body, size_t len) {
    if (len == 0) {
        add_header(c, "x-amz-content-sha256: %s", EMPTY_SHA256);
    } else {
        char hash[65];
        bucket_sha256_hex(body, len, hash);
        add_header(c, "x-amz-content-sha256: %s", hash);
    }
    if (s3->session_token != NULL)
        add_header(c, "x-amz-security-token: %s", s3->session_token);
}

/* Headers of the requests that create objects (PUT, multipart create). */
static void object_headers(s3_call *c, const s3_bucket *s3) {
    add_header(c, "Content-Type: application/octet-stream");
    if (s3->sse_s3)
        add_header(c, "x-amz-server-side-encryption: AES256");
    for (size_t i = 0; i < s3->n_meta; i++)
        add_header(c, "%s", s3->meta_headers[i]);
}

static int send_call(s3_bucket *s3, s3_call *c, const char *method, const void *body, size_t len,
                     strata_buffer *out, strata_error *err) {
    if (c->oom)
        return strata_error_oom(err);
    bucket_http_request req = {
        .op = c->op,
        .key = c->key,
        .method = method,
        .url = (const char *)c->url.data,
        .headers = c->headers,
        .body = body,
        .body_len = len,
        .aws_sigv4 = s3->userpwd != NULL ? s3->sigv4 : NULL,
        .userpwd = s3->userpwd,
    };
    return bucket_http_do(s3->http, &req, out, &c->resp, err);
}

static strata_status status_code(long status, const char *code) {
    if (status == 404)
        return strcmp(code, "NoSuchBucket") == 0 ? STRATA_FAILED_PRECONDITION : STRATA_NOT_FOUND;
    if (status == 401 || status == 403)
        return STRATA_PERMISSION_DENIED;
    if (status == 416)
        return STRATA_OUT_OF_RANGE;
    if (status == 409 || status == 412)
        return STRATA_FAILED_PRECONDITION;
    if (status == 501)
        return STRATA_UNIMPLEMENTED;
    if (bucket_http_status_retryable(status) || strcmp(code, "RequestTimeout") == 0)
        return STRATA_UNAVAILABLE;
    if (status == 400)
        return STRATA_INVALID_ARGUMENT;
    return STRATA_UNKNOWN;
}

/* An error for a non-2xx answer, naming the operation, key, status and S3 error code. */
static int answer_error(const s3_bucket *s3, const s3_call *c, strata_error *err) {
    char code[64], message[256];
    bucket_xml_find(&c->resp.error_body, "Code", code, sizeof code);
    bucket_xml_find(&c->resp.error_body, "Message", message, sizeof message);
    const char *hint = c->resp.status == 403 && strcmp(code, "SignatureDoesNotMatch") == 0
                           ? " (check secret_key and region)"
                       : c->resp.status == 403 ? " (check access_key and the bucket policy)"
                                               : "";
    return strata_error_set(err, status_code(c->resp.status, code),
                            "%s: %s \"%.200s\": HTTP %ld%s%s%s%s%s", s3->what, c->op, c->key,
                            c->resp.status, code[0] != '\0' ? " " : "", code,
                            message[0] != '\0' ? ": " : "", message, hint);
}

static bool ok(const s3_call *c) {
    return c->resp.status >= 200 && c->resp.status < 300;
}

/* ---- Upload -----------------------------------------------------------------------------------
 */

static int put_object(s3_bucket *s3, const char *key, const void *data, size_t len,
                      strata_error *err) {
    s3_call c;
    call_init(&c, "upload", key);
    set_url(&c, s3, key, NULL);
    base_headers(&c, s3, data, len);
    object_headers(&c, s3);
    char md5[25];
    if (s3->send_md5) {
        if (bucket_md5_base64(data, len, md5) != 0)
            c.oom = true;
        else
            add_header(&c, "Content-MD5: %s", md5);
    }
    int rc = send_call(s3, &c, "PUT", data, len, NULL, err);
    if (rc == 0 && !ok(&c))
        rc = answer_error(s3, &c, err);
    call_free(&c);
    return rc;
}

/* Query "uploadId=ID" (with "partNumber=N&" before it when part > 0), encoded. */
static int upload_query(strata_buffer *q, const char *upload_id, int part) {
    if (part > 0 && strata_buffer_appendf(q, "partNumber=%d&", part) != 0)
        return -1;
    if (strata_buffer_append_str(q, "uploadId=") != 0 ||
        bucket_http_escape(q, upload_id, strlen(upload_id), false) != 0)
        return -1;
    return strata_buffer_append_byte(q, '\0') == 0 ? 0 : -1;
}

static int create_multipart(s3_bucket *s3, const char *key, char **upload_id, strata_error *err) {
    s3_call c;
    call_init(&c, "upload (create multipart)", key);
    set_url(&c, s3, key, "uploads=");
    base_headers(&c, s3, NULL, 0);
    object_headers(&c, s3);
    strata_buffer body = STRATA_BUFFER_INIT;
    int rc = send_call(s3, &c, "POST", NULL, 0, &body, err);
    if (rc == 0 && !ok(&c))
        rc = answer_error(s3, &c, err);
    char id[1024];
    if (rc == 0) {
        bucket_xml_find(&body, "UploadId", id, sizeof id);
        if (id[0] == '\0')
            rc = strata_error_set(err, STRATA_INTERNAL,
                                  "%s: upload \"%.200s\": no UploadId in "
                                  "the answer to CreateMultipartUpload",
                                  s3->what, key);
        else if ((*upload_id = strdup(id)) == NULL)
            rc = strata_error_oom(err);
    }
    strata_buffer_free(&body);
    call_free(&c);
    return rc;
}

/* Uploads part `part` (1-based) and appends its <Part> element to `parts`. */
static int upload_part(s3_bucket *s3, const char *key, const char *upload_id, int part,
                       const uint8_t *data, size_t len, strata_buffer *parts, strata_error *err) {
    s3_call c;
    call_init(&c, "upload (part)", key);
    strata_buffer q = STRATA_BUFFER_INIT;
    if (upload_query(&q, upload_id, part) != 0)
        c.oom = true;
    else
        set_url(&c, s3, key, (const char *)q.data);
    base_headers(&c, s3, data, len);
    int rc = send_call(s3, &c, "PUT", data, len, NULL, err);
    if (rc == 0 && !ok(&c))
        rc = answer_error(s3, &c, err);
    if (rc == 0 && c.resp.etag[0] == '\0')
        rc = strata_error_set(err, STRATA_INTERNAL, "%s: upload \"%.200s\": part %d has no ETag",
                              s3->what, key, part);
    if (rc == 0 &&
        (strata_buffer_appendf(parts, "<Part><PartNumber>%d</PartNumber><ETag>", part) != 0 ||
         bucket_xml_escape(parts, c.resp.etag) != 0 ||
         strata_buffer_append_str(parts, "</ETag></Part>") != 0))
        rc = strata_error_oom(err);
    strata_buffer_free(&q);
    call_free(&c);
    return rc;
}

static int complete_multipart(s3_bucket *s3, const char *key, const char *upload_id,
                              const strata_buffer *parts, strata_error *err) {
    s3_call c;
    call_init(&c, "upload (complete multipart)", key);
    strata_buffer q = STRATA_BUFFER_INIT, xml = STRATA_BUFFER_INIT, answer = STRATA_BUFFER_INIT;
    if (upload_query(&q, upload_id, 0) != 0 ||
        strata_buffer_append_str(&xml, "<CompleteMultipartUpload>") != 0 ||
        strata_buffer_append(&xml, parts->data, parts->len) != 0 ||
        strata_buffer_append_str(&xml, "</CompleteMultipartUpload>") != 0)
        c.oom = true;
    else
        set_url(&c, s3, key, (const char *)q.data);
    base_headers(&c, s3, xml.data, xml.len);
    add_header(&c, "Content-Type: application/xml");
    int rc = send_call(s3, &c, "POST", xml.data, xml.len, &answer, err);
    if (rc == 0 && !ok(&c))
        rc = answer_error(s3, &c, err);
    /* S3 may answer 200 and still fail, with an <Error> document in the body. */
    if (rc == 0 && answer.len > 0 && memmem(answer.data, answer.len, "<Error>", 7) != NULL) {
        strata_buffer_free(&c.resp.error_body);
        c.resp.error_body = answer;
        answer = (strata_buffer)STRATA_BUFFER_INIT;
        c.resp.status = 500;
        rc = answer_error(s3, &c, err);
    }
    strata_buffer_free(&q);
    strata_buffer_free(&xml);
    strata_buffer_free(&answer);
    call_free(&c);
    return rc;
}

/* Best effort: an upload that is not aborted only costs storage until a lifecycle rule. */
static void abort_multipart(s3_bucket *s3, const char *key, const char *upload_id) {
    s3_call c;
    call_init(&c, "upload (abort multipart)", key);
    strata_buffer q = STRATA_BUFFER_INIT;
    if (upload_query(&q, upload_id, 0) != 0)
        c.oom = true;
    else
        set_url(&c, s3, key, (const char *)q.data);
    base_headers(&c, s3, NULL, 0);
    strata_error ignored;
    (void)send_call(s3, &c, "DELETE", NULL, 0, NULL, &ignored);
    strata_buffer_free(&q);
    call_free(&c);
}

/* Parts are read from the body one at a time (a file body: into one part-sized buffer). */
static int multipart_upload(s3_bucket *s3, const char *key, const bucket_upload_body *body,
                            strata_error *err) {
    uint64_t len = body->size;
    uint64_t part_size = s3->part_size;
    if ((len + part_size - 1) / part_size > S3_MAX_PARTS)
        part_size = (len + S3_MAX_PARTS - 1) / S3_MAX_PARTS;
    char *upload_id = NULL;
    if (create_multipart(s3, key, &upload_id, err) != 0)
        return -1;
    strata_buffer parts = STRATA_BUFFER_INIT, scratch = STRATA_BUFFER_INIT;
    int rc = 0;
    int part = 1;
    for (uint64_t off = 0; rc == 0 && off < len; off += part_size, part++) {
        size_t n = len - off < part_size ? (size_t)(len - off) : (size_t)part_size;
        const uint8_t *data = NULL;
        rc = bucket_upload_body_read(body, off, n, &scratch, &data, err);
        if (rc == 0)
            rc = upload_part(s3, key, upload_id, part, data, n, &parts, err);
    }
    if (rc == 0)
        rc = complete_multipart(s3, key, upload_id, &parts, err);
    if (rc != 0)
        abort_multipart(s3, key, upload_id);
    strata_buffer_free(&parts);
    strata_buffer_free(&scratch);
    free(upload_id);
    return rc;
}

static int s3_upload(void *impl, const char *key, const bucket_upload_body *body,
                     strata_error *err) {
    s3_bucket *s3 = impl;
    if (!s3->disable_multipart && body->size > s3->part_size)
        return multipart_upload(s3, key, body, err);
    strata_buffer scratch = STRATA_BUFFER_INIT;
    const uint8_t *data = NULL;
    int rc = body->size > SIZE_MAX
                 ? strata_error_oom(err)
                 : bucket_upload_body_read(body, 0, (size_t)body->size, &scratch, &data, err);
    if (rc == 0)
        rc = put_object(s3, key, data, (size_t)body->size, err);
    strata_buffer_free(&scratch);
    return rc;
}

/* ---- HEAD -------------------------------------------------------------------------------------
 */

/* HEAD key: *found false on 404. */
static int head_object(s3_bucket *s3, const char *op, const char *key,
                       bucket_object_attributes *attrs, bool *found, strata_error *err) {
    s3_call c;
    call_init(&c, op, key);
    set_url(&c, s3, key, NULL);
    base_headers(&c, s3, NULL, 0);
    int rc = send_call(s3, &c, "HEAD", NULL, 0, NULL, err);
    *found = false;
    if (rc == 0 && c.resp.status == 404)
        rc = 0;
    else if (rc == 0 && !ok(&c))
        rc = answer_error(s3, &c, err);
    else if (rc == 0 && !c.resp.has_content_length)
        rc = strata_error_set(err, STRATA_INTERNAL, "%s: %s \"%.200s\": no Content-Length",
                              s3->what, op, key);
    else if (rc == 0) {
        *found = true;
        attrs->size = c.resp.content_length;
        attrs->last_modified_ns = c.resp.last_modified_ns;
    }
    call_free(&c);
    return rc;
}

static int not_found(const s3_bucket *s3, const char *op, const char *key, strata_error *err) {
    return strata_error_set(err, STRATA_NOT_FOUND, "%s: %s \"%.200s\": no such object", s3->what,
                            op, key);
}

static int s3_attributes(void *impl, const char *key, bucket_object_attributes *out,
                         strata_error *err) {
    bool found;
    if (head_object(impl, "attributes", key, out, &found, err) != 0)
        return -1;
    return found ? 0 : not_found(impl, "attributes", key, err);
}

static int s3_exists(void *impl, const char *key, bool *out, strata_error *err) {
    bucket_object_attributes attrs;
    return head_object(impl, "exists", key, &attrs, out, err);
}

/* ---- GET --------------------------------------------------------------------------------------
 */

/* Decides an empty read at offset (length 0, or a 416 answer) from the object's size. */
static int empty_read(s3_bucket *s3, const char *key, uint64_t offset, strata_error *err) {
    bucket_object_attributes attrs;
    bool found;
    if (head_object(s3, "get", key, &attrs, &found, err) != 0)
        return -1;
    if (!found)
        return not_found(s3, "get", key, err);
    if (offset > attrs.size)
        return strata_error_set(err, STRATA_OUT_OF_RANGE,
                                "%s: get \"%.200s\": offset %llu is past the end of the %llu-byte "
                                "object",
                                s3->what, key, (unsigned long long)offset,
                                (unsigned long long)attrs.size);
    return 0;
}

/* A server that ignored Range sent the whole object; keep the asked-for slice. */
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

static int s3_get_range(void *impl, const char *key, uint64_t offset, uint64_t length,
                        strata_buffer *out, strata_error *err) {
    s3_bucket *s3 = impl;
    if (length == 0)
        return empty_read(s3, key, offset, err);
    bool ranged = offset > 0 || length != BUCKET_TO_END;
    s3_call c;
    call_init(&c, "get", key);
    set_url(&c, s3, key, NULL);
    base_headers(&c, s3, NULL, 0);
    if (ranged && length != BUCKET_TO_END && length - 1 <= UINT64_MAX - offset)
        add_header(&c, "Range: bytes=%llu-%llu", (unsigned long long)offset,
                   (unsigned long long)(offset + length - 1));
    else if (ranged)
        add_header(&c, "Range: bytes=%llu-", (unsigned long long)offset);
    size_t start = out->len;
    int rc = send_call(s3, &c, "GET", NULL, 0, out, err);
    if (rc == 0 && c.resp.status == 416)
        rc = empty_read(s3, key, offset, err);
    else if (rc == 0 && !ok(&c))
        rc = answer_error(s3, &c, err);
    else if (rc == 0 && ranged && c.resp.status == 200)
        keep_slice(out, start, offset, length);
    call_free(&c);
    return rc;
}

/* ---- DELETE -----------------------------------------------------------------------------------
 */

static int s3_delete(void *impl, const char *key, strata_error *err) {
    s3_bucket *s3 = impl;
    s3_call c;
    call_init(&c, "delete", key);
    set_url(&c, s3, key, NULL);
    base_headers(&c, s3, NULL, 0);
    int rc = send_call(s3, &c, "DELETE", NULL, 0, NULL, err);
    if (rc == 0 && !ok(&c) && c.resp.status != 404)
        rc = answer_error(s3, &c, err);
    call_free(&c);
    return rc;
}

/* ---- List -------------------------------------------------------------------------------------
 */

int bucket_remote_list_page_size = S3_LIST_PAGE;

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
    if (v->count == v->cap) {
        size_t cap = v->cap == 0 ? 64 : v->cap * 2;
        char **names = realloc(v->names, cap * sizeof *names);
        if (names == NULL)
            return -1;
        v->names = names;
        v->cap = cap;
    }
    strata_buffer b = STRATA_BUFFER_INIT;
    if (bucket_xml_unescape(&b, text, len) != 0)
        return -1;
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

typedef struct list_state {
    const char *dir;
    const char *start_after; /* full key or NULL; sent with the first page only */
    bool recursive;
    strata_buffer token; /* continuation token (v2) or marker (v1); empty at the start */
    bool done;
} list_state;

static int list_query(const s3_bucket *s3, const list_state *st, strata_buffer *q) {
    /* Parameters in byte order, as SigV4 needs them. */
    int rc = 0;
    if (!s3->list_v1 && st->token.len > 0)
        rc |= strata_buffer_append_str(q, "continuation-token=") |
              bucket_http_escape(q, (const char *)st->token.data, st->token.len, false) |
              strata_buffer_append_byte(q, '&');
    if (!st->recursive)
        rc |= strata_buffer_append_str(q, "delimiter=%2F&");
    if (!s3->list_v1)
        rc |= strata_buffer_append_str(q, "list-type=2&");
    if (s3->list_v1 && st->token.len > 0)
        rc |= strata_buffer_append_str(q, "marker=") |
              bucket_http_escape(q, (const char *)st->token.data, st->token.len, false) |
              strata_buffer_append_byte(q, '&');
    rc |= strata_buffer_appendf(q, "max-keys=%d&prefix=", bucket_remote_list_page_size) |
          bucket_http_escape(q, st->dir, strlen(st->dir), false);
    if (!s3->list_v1 && st->token.len == 0 && st->start_after != NULL)
        rc |= strata_buffer_append_str(q, "&start-after=") |
              bucket_http_escape(q, st->start_after, strlen(st->start_after), false);
    rc |= strata_buffer_append_byte(q, 0);
    return rc != 0 ? -1 : 0;
}

/* Reads IsTruncated and the next token or marker. */
static int next_token(const s3_bucket *s3, const strata_buffer *page, const name_vec *keys,
                      const name_vec *dirs, list_state *st) {
    char truncated[8];
    bucket_xml_find(page, "IsTruncated", truncated, sizeof truncated);
    strata_buffer_reset(&st->token);
    st->done = strcmp(truncated, "true") != 0;
    if (st->done)
        return 0;
    const char *tag = s3->list_v1 ? "NextMarker" : "NextContinuationToken";
    const char *pos = (const char *)page->data, *text;
    size_t len;
    if (bucket_xml_next(&pos, pos + page->len, tag, &text, &len) && len > 0)
        return bucket_xml_unescape(&st->token, text, len);
    /* v1 without NextMarker: continue after the last name of the page. */
    const char *k = keys->count > 0 ? keys->names[keys->count - 1] : "";
    const char *d = dirs->count > 0 ? dirs->names[dirs->count - 1] : "";
    const char *last = strcmp(k, d) > 0 ? k : d;
    st->done = last[0] == '\0';
    return strata_buffer_append_str(&st->token, last);
}

/* Fetches and emits one page; returns -1, 0 or 1 (stopped). */
static int list_page(s3_bucket *s3, list_state *st, bucket_iter_fn fn, void *ctx,
                     strata_error *err) {
    s3_call c;
    call_init(&c, "iter", st->dir);
    strata_buffer q = STRATA_BUFFER_INIT, page = STRATA_BUFFER_INIT;
    name_vec keys = {0}, dirs = {0};
    if (list_query(s3, st, &q) != 0)
        c.oom = true;
    else
        set_url(&c, s3, "", (const char *)q.data);
    base_headers(&c, s3, NULL, 0);
    int rc = send_call(s3, &c, "GET", NULL, 0, &page, err);
    if (rc == 0 && !ok(&c))
        rc = answer_error(s3, &c, err);
    if (rc == 0 && (collect_names(&page, "Contents", "Key", &keys) != 0 ||
                    collect_names(&page, "CommonPrefixes", "Prefix", &dirs) != 0 ||
                    next_token(s3, &page, &keys, &dirs, st) != 0))
        rc = strata_error_oom(err);
    if (rc == 0)
        rc = emit_merged(&keys, &dirs, fn, ctx, err);
    name_vec_free(&keys);
    name_vec_free(&dirs);
    strata_buffer_free(&q);
    strata_buffer_free(&page);
    call_free(&c);
    return rc;
}

/* start_after goes to the store: ListObjectsV2's start-after, or V1's first marker (which means
 * the same), so a listing of a directory's newest names is one request however many precede. */
static int s3_iterate(void *impl, bucket_list_request *req, bucket_iter_fn fn, void *ctx,
                      strata_error *err) {
    const s3_bucket *s3 = impl;
    list_state st = {.dir = req->dir, .start_after = req->start_after, .recursive = req->recursive};
    int rc = 0;
    if (s3->list_v1 && req->start_after != NULL &&
        strata_buffer_append_str(&st.token, req->start_after) != 0)
        rc = strata_error_oom(err);
    while (rc == 0 && !st.done) {
        req->requests++;
        rc = list_page(impl, &st, fn, ctx, err);
    }
    strata_buffer_free(&st.token);
    return rc < 0 ? -1 : 0;
}

/* ---- Configuration ----------------------------------------------------------------------------
 */

typedef struct s3_sse_yaml {
    char *type;
    char *kms_key_id;
    config_string_map kms_encryption_context;
    char *encryption_key;
} s3_sse_yaml;

typedef struct s3_trace_yaml {
    bool enable;
} s3_trace_yaml;

typedef struct s3_yaml {
    char *bucket, *endpoint, *region;
    bool disable_dualstack, aws_sdk_auth;
    char *access_key, *secret_key, *session_token;
    bool insecure, signature_version2;
    config_string_map put_user_metadata;
    bucket_http_yaml http_config;
    s3_trace_yaml trace;
    char *list_objects_version, *bucket_lookup_type;
    bool send_content_md5, disable_multipart;
    uint64_t part_size;
    s3_sse_yaml sse_config;
    char *sts_endpoint;
    int64_t max_retries;
} s3_yaml;

static const config_field sse_fields[] = {
    {.key = "type",
     .kind = CONFIG_STRING,
     .offset = offsetof(s3_sse_yaml, type),
     .default_text = "\"\""},
    {.key = "kms_key_id",
     .kind = CONFIG_STRING,
     .offset = offsetof(s3_sse_yaml, kms_key_id),
     .default_text = "\"\""},
    {.key = "kms_encryption_context",
     .kind = CONFIG_STRING_MAP,
     .offset = offsetof(s3_sse_yaml, kms_encryption_context)},
    {.key = "encryption_key",
     .kind = CONFIG_STRING,
     .offset = offsetof(s3_sse_yaml, encryption_key),
     .default_text = "\"\""},
    {0},
};

static const config_field trace_fields[] = {
    {.key = "enable",
     .kind = CONFIG_BOOL,
     .offset = offsetof(s3_trace_yaml, enable),
     .default_text = "false"},
    {0},
};

#define S3_FIELD(name, k, def)                                                                     \
    { .key = #name, .kind = k, .offset = offsetof(s3_yaml, name), .default_text = def }

static const config_field s3_fields[] = {
    S3_FIELD(bucket, CONFIG_STRING, "\"\""),
    S3_FIELD(endpoint, CONFIG_STRING, "\"\""),
    S3_FIELD(region, CONFIG_STRING, "\"\""),
    S3_FIELD(disable_dualstack, CONFIG_BOOL, "false"),
    S3_FIELD(aws_sdk_auth, CONFIG_BOOL, "false"),
    S3_FIELD(access_key, CONFIG_STRING, "\"\""),
    S3_FIELD(secret_key, CONFIG_STRING, "\"\""),
    S3_FIELD(session_token, CONFIG_STRING, "\"\""),
    S3_FIELD(insecure, CONFIG_BOOL, "false"),
    S3_FIELD(signature_version2, CONFIG_BOOL, "false"),
    {.key = "put_user_metadata",
     .kind = CONFIG_STRING_MAP,
     .offset = offsetof(s3_yaml, put_user_metadata)},
    {.key = "http_config",
     .kind = CONFIG_STRUCT,
     .offset = offsetof(s3_yaml, http_config),
     .fields = bucket_http_yaml_fields},
    {.key = "trace",
     .kind = CONFIG_STRUCT,
     .offset = offsetof(s3_yaml, trace),
     .fields = trace_fields},
    S3_FIELD(list_objects_version, CONFIG_STRING, "\"\""),
    S3_FIELD(bucket_lookup_type, CONFIG_STRING, "auto"),
    S3_FIELD(send_content_md5, CONFIG_BOOL, "true"),
    S3_FIELD(disable_multipart, CONFIG_BOOL, "false"),
    S3_FIELD(part_size, CONFIG_BYTES, "67108864"),
    {.key = "sse_config",
     .kind = CONFIG_STRUCT,
     .offset = offsetof(s3_yaml, sse_config),
     .fields = sse_fields},
    S3_FIELD(sts_endpoint, CONFIG_STRING, "\"\""),
    S3_FIELD(max_retries, CONFIG_INT64, "0"),
    {0},
};

/* The node of key (nested with "a.b"), else the closest parent, for error positions. */
static const config_node *key_node(const config_node *config, const char *key) {
    char first[64];
    const char *dot = strchr(key, '.');
    snprintf(first, sizeof first, "%.*s", dot != NULL ? (int)(dot - key) : (int)strlen(key), key);
    const config_node *n = config_node_get(config, first);
    if (n == NULL)
        return config;
    if (dot == NULL)
        return n;
    const config_node *inner = config_node_get(n, dot + 1);
    return inner != NULL ? inner : n;
}

static int unsupported(const config_node *config, const char *key, const char *why,
                       strata_error *err) {
    config_node_error(err, key_node(config, key), "%s", why);
    if (err != NULL)
        err->code = STRATA_UNIMPLEMENTED;
    return -1;
}

static bool is_set(const char *s) {
    return s != NULL && s[0] != '\0';
}

static int check_credentials(const s3_yaml *y, const config_node *config, strata_error *err) {
    if (is_set(y->access_key) != is_set(y->secret_key))
        return config_node_error(
            err, key_node(config, is_set(y->access_key) ? "access_key" : "secret_key"),
            "access_key and secret_key must be given together");
    if (y->aws_sdk_auth && is_set(y->access_key))
        return config_node_error(err, key_node(config, "aws_sdk_auth"),
                                 "aws_sdk_auth and access_key are mutually exclusive");
    if (is_set(y->session_token) && !is_set(y->access_key))
        return config_node_error(err, key_node(config, "session_token"),
                                 "session_token needs access_key and secret_key");
    return 0;
}

static int check_sse(const s3_yaml *y, const config_node *config, strata_error *err) {
    const char *t = y->sse_config.type;
    if (!is_set(t) || strcmp(t, "SSE-S3") == 0) {
        if (is_set(y->sse_config.kms_key_id) || is_set(y->sse_config.encryption_key))
            return config_node_error(err, key_node(config, "sse_config"),
                                     "kms_key_id and encryption_key need type SSE-KMS or SSE-C");
        return 0;
    }
    if (strcmp(t, "SSE-KMS") == 0 || strcmp(t, "SSE-C") == 0)
        return unsupported(config, "sse_config.type",
                           "SSE-KMS and SSE-C are not supported yet (use SSE-S3)", err);
    return config_node_error(err, key_node(config, "sse_config.type"),
                             "unknown type \"%.64s\" (expected SSE-S3, SSE-KMS or SSE-C)", t);
}

static int check_options(const s3_yaml *y, const config_node *config, strata_error *err) {
    if (!is_set(y->bucket))
        return config_node_error(err, key_node(config, "bucket"), "bucket must be set");
    if (!is_set(y->endpoint))
        return config_node_error(err, key_node(config, "endpoint"), "endpoint must be set");
    if (strstr(y->endpoint, "://") != NULL || strchr(y->endpoint, '/') != NULL)
        return config_node_error(err, key_node(config, "endpoint"),
                                 "endpoint is host[:port] without a scheme or path (set "
                                 "insecure: true for plain HTTP)");
    if (y->signature_version2)
        return unsupported(config, "signature_version2", "signature version 2 is not supported",
                           err);
    if (is_set(y->sts_endpoint))
        return unsupported(config, "sts_endpoint", "STS is not supported", err);
    const char *v = y->list_objects_version;
    if (is_set(v) && strcmp(v, "v1") != 0 && strcmp(v, "v2") != 0)
        return config_node_error(err, key_node(config, "list_objects_version"),
                                 "expected v1 or v2, got \"%.32s\"", v);
    const char *l = y->bucket_lookup_type;
    if (strcmp(l, "auto") != 0 && strcmp(l, "path") != 0 && strcmp(l, "virtual-hosted") != 0)
        return config_node_error(err, key_node(config, "bucket_lookup_type"),
                                 "expected auto, path or virtual-hosted, got \"%.32s\"", l);
    if (y->part_size != 0 && (y->part_size < S3_MIN_PART_SIZE || y->part_size > S3_MAX_PART_SIZE))
        return config_node_error(err, key_node(config, "part_size"),
                                 "part_size must be between 5MiB and 5GiB (or 0 for 128MiB)");
    if (y->max_retries < 0 || y->max_retries > 100)
        return config_node_error(err, key_node(config, "max_retries"),
                                 "max_retries must be between 0 (default) and 100");
    if (check_credentials(y, config, err) != 0)
        return -1;
    return check_sse(y, config, err);
}

static bool header_safe(const char *s, bool is_name) {
    for (; *s != '\0'; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f || (is_name && (*s == ':' || *s == ' ')))
            return false;
    return true;
}

static int set_metadata(s3_bucket *s3, const s3_yaml *y, const config_node *config,
                        strata_error *err) {
    const config_string_map *m = &y->put_user_metadata;
    if (m->count == 0)
        return 0;
    if ((s3->meta_headers = calloc(m->count, sizeof *s3->meta_headers)) == NULL)
        return strata_error_oom(err);
    for (size_t i = 0; i < m->count; i++) {
        if (!header_safe(m->keys[i], true) || !header_safe(m->values[i], false) ||
            m->keys[i][0] == '\0')
            return config_node_error(err, key_node(config, "put_user_metadata"),
                                     "key \"%.64s\" or its value cannot be an HTTP header",
                                     m->keys[i]);
        bool storage_class = strcasecmp(m->keys[i], "X-Amz-Storage-Class") == 0;
        if (asprintf(&s3->meta_headers[i], "%s%s: %s", storage_class ? "" : "X-Amz-Meta-",
                     m->keys[i], m->values[i]) < 0) {
            s3->meta_headers[i] = NULL;
            return strata_error_oom(err);
        }
        s3->n_meta = i + 1;
    }
    return 0;
}

static bool use_virtual_host(const s3_yaml *y) {
    if (strcmp(y->bucket_lookup_type, "auto") != 0)
        return strcmp(y->bucket_lookup_type, "virtual-hosted") == 0;
    return strstr(y->endpoint, "amazonaws.com") != NULL ||
           strstr(y->endpoint, "aliyuncs.com") != NULL;
}

/* Access keys from the config, else from the AWS environment variables; NULL for anonymous. */
static int set_credentials(s3_bucket *s3, const s3_yaml *y, strata_error *err) {
    const char *access = y->access_key, *secret = y->secret_key, *token = y->session_token;
    if (!is_set(access)) {
        access = getenv("AWS_ACCESS_KEY_ID");
        secret = getenv("AWS_SECRET_ACCESS_KEY");
        token = getenv("AWS_SESSION_TOKEN");
        if (!is_set(access))
            access = getenv("AWS_ACCESS_KEY");
        if (!is_set(secret))
            secret = getenv("AWS_SECRET_KEY");
    }
    if (!is_set(access) || !is_set(secret))
        return 0;
    if (asprintf(&s3->userpwd, "%s:%s", access, secret) < 0) {
        s3->userpwd = NULL;
        return strata_error_oom(err);
    }
    if (is_set(token) && (s3->session_token = strdup(token)) == NULL)
        return strata_error_oom(err);
    return 0;
}

static int set_urls(s3_bucket *s3, const s3_yaml *y, strata_error *err) {
    const char *scheme = y->insecure ? "http" : "https";
    int n = use_virtual_host(y)
                ? asprintf(&s3->base_url, "%s://%s.%s", scheme, y->bucket, y->endpoint)
                : asprintf(&s3->base_url, "%s://%s/%s", scheme, y->endpoint, y->bucket);
    if (n < 0)
        s3->base_url = NULL;
    n = n < 0 ? n : asprintf(&s3->what, "s3 bucket %s", y->bucket);
    if (n < 0)
        s3->what = NULL;
    n = n < 0 ? n
              : asprintf(&s3->sigv4, "aws:amz:%s:s3", is_set(y->region) ? y->region : "us-east-1");
    if (n < 0) {
        s3->sigv4 = NULL;
        return strata_error_oom(err);
    }
    return 0;
}

static void s3_close(void *impl) {
    s3_bucket *s3 = impl;
    if (s3 == NULL)
        return;
    bucket_http_client_free(s3->http);
    for (size_t i = 0; i < s3->n_meta; i++)
        free(s3->meta_headers[i]);
    free(s3->meta_headers);
    free(s3->what);
    free(s3->base_url);
    free(s3->sigv4);
    if (s3->userpwd != NULL)
        memset(s3->userpwd, 0, strlen(s3->userpwd)); /* do not leave the secret in freed memory */
    free(s3->userpwd);
    free(s3->session_token);
    free(s3);
}

static int build(s3_bucket *s3, const s3_yaml *y, const config_node *config, strata_error *err) {
    s3->sse_s3 = is_set(y->sse_config.type);
    s3->list_v1 = is_set(y->list_objects_version) && strcmp(y->list_objects_version, "v1") == 0;
    s3->send_md5 = y->send_content_md5;
    s3->disable_multipart = y->disable_multipart;
    s3->part_size = y->part_size != 0 ? y->part_size : S3_DEFAULT_PART_SIZE;
    if (set_urls(s3, y, err) != 0 || set_credentials(s3, y, err) != 0 ||
        set_metadata(s3, y, config, err) != 0)
        return -1;
    bucket_http_options o = {
        .what = s3->what,
        .max_attempts = y->max_retries > 0 ? (int)y->max_retries : S3_DEFAULT_ATTEMPTS,
        .backoff_base_ns = 100 * STRATA_NS_PER_MS,
        .backoff_max_ns = 5 * STRATA_NS_PER_SEC,
    };
    if (bucket_http_options_from_yaml(&y->http_config, config, &o, err) != 0)
        return -1;
    return bucket_http_client_new(&o, &s3->http, err);
}

int bucket_s3_open_config(const config_node *bucket_node, const config_node *config, void **impl,
                          strata_error *err) {
    *impl = NULL;
    if (config == NULL)
        return config_node_error(err, bucket_node,
                                 "missing required key \"config\" (S3 needs config.bucket and "
                                 "config.endpoint)");
    s3_yaml y;
    if (config_decode(config, s3_fields, &y, err) != 0)
        return -1;
    int rc = check_options(&y, config, err);
    s3_bucket *s3 = NULL;
    if (rc == 0 && (s3 = calloc(1, sizeof *s3)) == NULL)
        rc = strata_error_oom(err);
    if (rc == 0)
        rc = build(s3, &y, config, err);
    if (rc != 0)
        s3_close(s3);
    else
        *impl = s3;
    config_free(s3_fields, &y);
    return rc;
}

const bucket_backend_ops bucket_s3_ops = {
    .type = "S3",
    .upload = s3_upload,
    .get_range = s3_get_range,
    .attributes = s3_attributes,
    .exists = s3_exists,
    .delete_object = s3_delete,
    .iterate = s3_iterate,
    .close = s3_close,
};
