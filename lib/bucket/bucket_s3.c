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
 * What bucket.h means on a remote store (HEAD for attributes / exists with 404 as absent, ranged
 * GET with 416 resolved by HEAD, delete with 404 as done, paged listings merged in byte order,
 * error answers to status codes) lives in bucket_remote.c; this file is S3's dialect of it:
 *   - URLs (path style or virtual-hosted), SigV4 and the x-amz-* headers, "Range: bytes=a-b";
 *   - upload: one PUT up to part_size; above it a multipart upload (create, parts in order,
 *     complete; abort on failure). S3 makes the object visible only on PUT / complete, so readers
 *     never see a part. Each part is retried on its own.
 *   - iterate: ListObjectsV2 (or v1 with list_objects_version: v1) with the directory as prefix,
 *     '/' as delimiter for non-recursive listings, <Contents><Key> and <CommonPrefixes><Prefix>,
 *     following continuation tokens (v1: markers) while IsTruncated is true.
 *   - errors: NoSuchBucket is FAILED_PRECONDITION, RequestTimeout UNAVAILABLE; a 403 message hints
 *     at the keys. S3 answers 204 to a delete of a missing key.
 *
 * Configuration: Thanos' S3 keys (see docs/storage.md). Credentials come from access_key /
 * secret_key or the AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN variables; with
 * neither, requests are anonymous. Contradictory or unsupported settings (SigV2, SSE-KMS, STS) are
 * errors naming the key.
 */
#include "bucket/bucket_remote.h"

#include <curl/curl.h>
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
#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

typedef struct s3_bucket {
    bucket_remote remote; /* first: what ("s3 bucket NAME"), the HTTP client */
    char *base_url;       /* scheme://host/NAME (path style) or scheme://NAME.host */
    char *sigv4;          /* "aws:amz:REGION:s3" */
    char *userpwd;        /* "ACCESS:SECRET" or NULL for anonymous requests */
    char *session_token;  /* or NULL */
    char **meta_headers;  /* "X-Amz-Meta-K: V" lines for uploads */
    size_t n_meta;
    bool sse_s3, list_v1, send_md5, disable_multipart;
    uint64_t part_size;
} s3_bucket;

/* ---- Requests ---------------------------------------------------------------------------------
 */

/* url = base/escaped-key[?query]; key "" addresses the bucket ("base/?query"). */
static void set_url(bucket_remote_call *c, const s3_bucket *s3, const char *key,
                    const char *query) {
    if (strata_buffer_append_str(&c->url, s3->base_url) != 0 ||
        strata_buffer_append_byte(&c->url, '/') != 0 ||
        bucket_http_escape(&c->url, key, strlen(key), true) != 0 ||
        (query != NULL && (strata_buffer_append_byte(&c->url, '?') != 0 ||
                           strata_buffer_append_str(&c->url, query) != 0)) ||
        strata_buffer_append_byte(&c->url, '\0') != 0)
        c->oom = true;
}

/* Headers every request carries: payload hash and session token. */
static void base_headers(bucket_remote_call *c, const s3_bucket *s3, const void *body, size_t len) {
    if (len == 0) {
        bucket_remote_add_header(c, "x-amz-content-sha256: %s", EMPTY_SHA256);
    } else {
        char hash[65];
        bucket_sha256_hex(body, len, hash);
        bucket_remote_add_header(c, "x-amz-content-sha256: %s", hash);
    }
    if (s3->session_token != NULL)
        bucket_remote_add_header(c, "x-amz-security-token: %s", s3->session_token);
}

/* Headers of the requests that create objects (PUT, multipart create). */
static void object_headers(bucket_remote_call *c, const s3_bucket *s3) {
    bucket_remote_add_header(c, "Content-Type: application/octet-stream");
    if (s3->sse_s3)
        bucket_remote_add_header(c, "x-amz-server-side-encryption: AES256");
    for (size_t i = 0; i < s3->n_meta; i++)
        bucket_remote_add_header(c, "%s", s3->meta_headers[i]);
}

static int send_call(s3_bucket *s3, bucket_remote_call *c, const char *method, const void *body,
                     size_t len, strata_buffer *out, strata_error *err) {
    bucket_http_request req = {
        .method = method,
        .body = body,
        .body_len = len,
        .aws_sigv4 = s3->userpwd != NULL ? s3->sigv4 : NULL,
        .userpwd = s3->userpwd,
    };
    return bucket_remote_send(&s3->remote, c, &req, out, err);
}

/* HEAD, GET and DELETE of an object (bucket_remote_dialect.send_object). */
static int send_object(bucket_remote *r, bucket_remote_call *c, const char *method,
                       const char *range, strata_buffer *out, strata_error *err) {
    s3_bucket *s3 = (s3_bucket *)r;
    set_url(c, s3, c->key, NULL);
    base_headers(c, s3, NULL, 0);
    if (range != NULL)
        bucket_remote_add_header(c, "Range: %s", range);
    return send_call(s3, c, method, NULL, 0, out, err);
}

/* ---- Upload -----------------------------------------------------------------------------------
 */

static int put_object(bucket_remote *r, const char *key, const uint8_t *data, size_t len,
                      strata_error *err) {
    s3_bucket *s3 = (s3_bucket *)r;
    bucket_remote_call c;
    bucket_remote_call_init(&c, "upload", key);
    set_url(&c, s3, key, NULL);
    base_headers(&c, s3, data, len);
    object_headers(&c, s3);
    char md5[25];
    if (s3->send_md5) {
        if (bucket_md5_base64(data, len, md5) != 0)
            c.oom = true;
        else
            bucket_remote_add_header(&c, "Content-MD5: %s", md5);
    }
    int rc = send_call(s3, &c, "PUT", data, len, NULL, err);
    if (rc == 0)
        rc = bucket_remote_check(r, &c, 0, err);
    bucket_remote_call_free(&c);
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
    bucket_remote_call c;
    bucket_remote_call_init(&c, "upload (create multipart)", key);
    set_url(&c, s3, key, "uploads=");
    base_headers(&c, s3, NULL, 0);
    object_headers(&c, s3);
    strata_buffer body = STRATA_BUFFER_INIT;
    int rc = send_call(s3, &c, "POST", NULL, 0, &body, err);
    if (rc == 0)
        rc = bucket_remote_check(&s3->remote, &c, 0, err);
    char id[1024];
    if (rc == 0) {
        bucket_xml_find(&body, "UploadId", id, sizeof id);
        if (id[0] == '\0')
            rc = strata_error_set(err, STRATA_INTERNAL,
                                  "%s: upload \"%.200s\": no UploadId in "
                                  "the answer to CreateMultipartUpload",
                                  s3->remote.what, key);
        else if ((*upload_id = strdup(id)) == NULL)
            rc = strata_error_oom(err);
    }
    strata_buffer_free(&body);
    bucket_remote_call_free(&c);
    return rc;
}

typedef struct multipart {
    s3_bucket *s3;
    const char *key;
    const char *upload_id;
    strata_buffer parts; /* <Part> elements of the uploaded parts */
} multipart;

/* Uploads the part of chunk `index` (part number index + 1) and appends its <Part> element. */
static int upload_part(void *ctx, uint32_t index, const uint8_t *data, size_t len,
                       strata_error *err) {
    multipart *m = ctx;
    s3_bucket *s3 = m->s3;
    int part = (int)index + 1;
    bucket_remote_call c;
    bucket_remote_call_init(&c, "upload (part)", m->key);
    strata_buffer q = STRATA_BUFFER_INIT;
    if (upload_query(&q, m->upload_id, part) != 0)
        c.oom = true;
    else
        set_url(&c, s3, m->key, (const char *)q.data);
    base_headers(&c, s3, data, len);
    int rc = send_call(s3, &c, "PUT", data, len, NULL, err);
    if (rc == 0)
        rc = bucket_remote_check(&s3->remote, &c, 0, err);
    if (rc == 0 && c.resp.etag[0] == '\0')
        rc = strata_error_set(err, STRATA_INTERNAL, "%s: upload \"%.200s\": part %d has no ETag",
                              s3->remote.what, m->key, part);
    if (rc == 0 &&
        (strata_buffer_appendf(&m->parts, "<Part><PartNumber>%d</PartNumber><ETag>", part) != 0 ||
         bucket_xml_escape(&m->parts, c.resp.etag) != 0 ||
         strata_buffer_append_str(&m->parts, "</ETag></Part>") != 0))
        rc = strata_error_oom(err);
    strata_buffer_free(&q);
    bucket_remote_call_free(&c);
    return rc;
}

static int complete_multipart(const multipart *m, strata_error *err) {
    s3_bucket *s3 = m->s3;
    bucket_remote_call c;
    bucket_remote_call_init(&c, "upload (complete multipart)", m->key);
    strata_buffer q = STRATA_BUFFER_INIT, xml = STRATA_BUFFER_INIT, answer = STRATA_BUFFER_INIT;
    if (upload_query(&q, m->upload_id, 0) != 0 ||
        strata_buffer_append_str(&xml, "<CompleteMultipartUpload>") != 0 ||
        strata_buffer_append(&xml, m->parts.data, m->parts.len) != 0 ||
        strata_buffer_append_str(&xml, "</CompleteMultipartUpload>") != 0)
        c.oom = true;
    else
        set_url(&c, s3, m->key, (const char *)q.data);
    base_headers(&c, s3, xml.data, xml.len);
    bucket_remote_add_header(&c, "Content-Type: application/xml");
    int rc = send_call(s3, &c, "POST", xml.data, xml.len, &answer, err);
    if (rc == 0)
        rc = bucket_remote_check(&s3->remote, &c, 0, err);
    /* S3 may answer 200 and still fail, with an <Error> document in the body. */
    if (rc == 0 && answer.len > 0 && memmem(answer.data, answer.len, "<Error>", 7) != NULL) {
        strata_buffer_free(&c.resp.error_body);
        c.resp.error_body = answer;
        answer = (strata_buffer)STRATA_BUFFER_INIT;
        c.resp.status = 500;
        rc = bucket_remote_answer_error(&s3->remote, &c, err);
    }
    strata_buffer_free(&q);
    strata_buffer_free(&xml);
    strata_buffer_free(&answer);
    bucket_remote_call_free(&c);
    return rc;
}

/* Best effort: an upload that is not aborted only costs storage until a lifecycle rule. */
static void abort_multipart(const multipart *m) {
    bucket_remote_call c;
    bucket_remote_call_init(&c, "upload (abort multipart)", m->key);
    strata_buffer q = STRATA_BUFFER_INIT;
    if (upload_query(&q, m->upload_id, 0) != 0)
        c.oom = true;
    else
        set_url(&c, m->s3, m->key, (const char *)q.data);
    base_headers(&c, m->s3, NULL, 0);
    strata_error ignored;
    (void)send_call(m->s3, &c, "DELETE", NULL, 0, NULL, &ignored);
    strata_buffer_free(&q);
    bucket_remote_call_free(&c);
}

/* Parts are read from the body one at a time (a file body: into one part-sized buffer). */
static int multipart_upload(s3_bucket *s3, const char *key, const bucket_upload_body *body,
                            strata_error *err) {
    char *upload_id = NULL;
    if (create_multipart(s3, key, &upload_id, err) != 0)
        return -1;
    multipart m = {.s3 = s3, .key = key, .upload_id = upload_id, .parts = STRATA_BUFFER_INIT};
    int rc = bucket_remote_upload_chunks(body, s3->part_size, S3_MAX_PARTS, upload_part, &m, err);
    if (rc == 0)
        rc = complete_multipart(&m, err);
    if (rc != 0)
        abort_multipart(&m);
    strata_buffer_free(&m.parts);
    free(upload_id);
    return rc;
}

static int s3_upload(void *impl, const char *key, const bucket_upload_body *body,
                     strata_error *err) {
    s3_bucket *s3 = impl;
    if (!s3->disable_multipart && body->size > s3->part_size)
        return multipart_upload(s3, key, body, err);
    return bucket_remote_upload_whole(&s3->remote, key, body, put_object, err);
}

/* ---- List -------------------------------------------------------------------------------------
 */

/* start_after goes to the store: ListObjectsV2's start-after, or V1's first marker (which means
 * the same), so a listing of a directory's newest names is one request however many precede. */
static int list_query(const s3_bucket *s3, const bucket_remote_list *st, strata_buffer *q) {
    const char *token = (const char *)st->token.data;
    size_t token_len = st->token.len;
    if (s3->list_v1 && token_len == 0 && st->start_after != NULL) {
        token = st->start_after;
        token_len = strlen(token);
    }
    /* Parameters in byte order, as SigV4 needs them. */
    int rc = 0;
    if (!s3->list_v1 && token_len > 0)
        rc |= strata_buffer_append_str(q, "continuation-token=") |
              bucket_http_escape(q, token, token_len, false) | strata_buffer_append_byte(q, '&');
    if (!st->recursive)
        rc |= strata_buffer_append_str(q, "delimiter=%2F&");
    if (!s3->list_v1)
        rc |= strata_buffer_append_str(q, "list-type=2&");
    if (s3->list_v1 && token_len > 0)
        rc |= strata_buffer_append_str(q, "marker=") |
              bucket_http_escape(q, token, token_len, false) | strata_buffer_append_byte(q, '&');
    rc |= strata_buffer_appendf(q, "max-keys=%d&prefix=", bucket_remote_list_page_size) |
          bucket_http_escape(q, st->dir, strlen(st->dir), false);
    if (!s3->list_v1 && token_len == 0 && st->start_after != NULL)
        rc |= strata_buffer_append_str(q, "&start-after=") |
              bucket_http_escape(q, st->start_after, strlen(st->start_after), false);
    rc |= strata_buffer_append_byte(q, 0);
    return rc != 0 ? -1 : 0;
}

static int send_list(bucket_remote *r, bucket_remote_call *c, const bucket_remote_list *st,
                     strata_buffer *page, strata_error *err) {
    s3_bucket *s3 = (s3_bucket *)r;
    strata_buffer q = STRATA_BUFFER_INIT;
    if (list_query(s3, st, &q) != 0)
        c->oom = true;
    else
        set_url(c, s3, "", (const char *)q.data);
    base_headers(c, s3, NULL, 0);
    int rc = send_call(s3, c, "GET", NULL, 0, page, err);
    strata_buffer_free(&q);
    return rc;
}

/* Reads IsTruncated and the next token or marker. */
static int next_token(const bucket_remote *r, const strata_buffer *page, const char *last,
                      bucket_remote_list *st) {
    const s3_bucket *s3 = (const s3_bucket *)r;
    char truncated[8];
    bucket_xml_find(page, "IsTruncated", truncated, sizeof truncated);
    st->done = strcmp(truncated, "true") != 0;
    if (st->done)
        return 0;
    int rc =
        bucket_remote_read_token(page, s3->list_v1 ? "NextMarker" : "NextContinuationToken", st);
    if (rc != 0)
        return rc < 0 ? -1 : 0;
    /* v1 without NextMarker: continue after the last name of the page. */
    st->done = last[0] == '\0';
    return strata_buffer_append_str(&st->token, last);
}

static const bucket_remote_dialect s3_dialect = {
    .send_object = send_object,
    .send_list = send_list,
    .next_token = next_token,
    .object_tag = "Contents",
    .object_name = "Key",
    .prefix_tag = "CommonPrefixes",
    .prefix_name = "Prefix",
    .no_bucket_code = "NoSuchBucket",
    .timeout_code = "RequestTimeout",
    .denied_hint = " (check access_key and the bucket policy)",
    .bad_signature_code = "SignatureDoesNotMatch",
    .bad_signature_hint = " (check secret_key and region)",
};

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
    { .key = #name, .kind = (k), .offset = offsetof(s3_yaml, name), .default_text = (def) }

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
    n = n < 0 ? n : asprintf(&s3->remote.what, "s3 bucket %s", y->bucket);
    if (n < 0)
        s3->remote.what = NULL;
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
    bucket_remote_free(&s3->remote);
    for (size_t i = 0; i < s3->n_meta; i++)
        free(s3->meta_headers[i]);
    free(s3->meta_headers);
    free(s3->base_url);
    free(s3->sigv4);
    if (s3->userpwd != NULL)
        memset(s3->userpwd, 0, strlen(s3->userpwd)); /* do not leave the secret in freed memory */
    free(s3->userpwd);
    free(s3->session_token);
    free(s3);
}

static int build(void *impl, const void *yaml, const config_node *config, strata_error *err) {
    s3_bucket *s3 = impl;
    const s3_yaml *y = yaml;
    if (check_options(y, config, err) != 0)
        return -1;
    s3->sse_s3 = is_set(y->sse_config.type);
    s3->list_v1 = is_set(y->list_objects_version) && strcmp(y->list_objects_version, "v1") == 0;
    s3->send_md5 = y->send_content_md5;
    s3->disable_multipart = y->disable_multipart;
    s3->part_size = y->part_size != 0 ? y->part_size : S3_DEFAULT_PART_SIZE;
    if (set_urls(s3, y, err) != 0 || set_credentials(s3, y, err) != 0 ||
        set_metadata(s3, y, config, err) != 0)
        return -1;
    bucket_http_options o = {
        .max_attempts = y->max_retries > 0 ? (int)y->max_retries : S3_DEFAULT_ATTEMPTS,
        .backoff_base_ns = 100 * STRATA_NS_PER_MS,
        .backoff_max_ns = 5 * STRATA_NS_PER_SEC,
    };
    return bucket_remote_connect(&s3->remote, &o, &y->http_config, config, err);
}

static const bucket_remote_opener s3_opener = {
    .dialect = &s3_dialect,
    .missing_config =
        "missing required key \"config\" (S3 needs config.bucket and config.endpoint)",
    .fields = s3_fields,
    .impl_size = sizeof(s3_bucket),
    .build = build,
    .close = s3_close,
};

int bucket_s3_open_config(const config_node *bucket_node, const config_node *config, void **impl,
                          strata_error *err) {
    s3_yaml y;
    return bucket_remote_open_config(&s3_opener, bucket_node, config, &y, impl, err);
}

const bucket_backend_ops bucket_s3_ops = {
    .type = "S3",
    .upload = s3_upload,
    .get_range = bucket_remote_get_range,
    .attributes = bucket_remote_attributes,
    .exists = bucket_remote_exists,
    .delete_object = bucket_remote_delete,
    .iterate = bucket_remote_iterate,
    .close = s3_close,
};
