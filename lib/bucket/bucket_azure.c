/*
 * bucket_azure.c - the AZURE backend: Azure Blob Storage (and Azurite) with SharedKey signing.
 *
 * Signing. Every request carries x-ms-date and x-ms-version and an Authorization header
 * "SharedKey <account>:<base64 HMAC-SHA256(key, string-to-sign)>", the string-to-sign being the
 * verb, the standard headers we send (Content-Length empty when 0, Content-Type), the sorted
 * x-ms-* headers and the canonicalized resource "/<account><url path>" followed by each query
 * parameter as "\nname:decoded value" in name order. Query values are percent-encoded on the wire.
 * Ranges use x-ms-range (signed as a canonical header). libcurl sends no Content-Type of its own
 * because bodies go through CURLOPT_UPLOAD.
 *
 * URLs. `endpoint` is Thanos' host suffix ("blob.core.windows.net" gives
 * https://<account>.blob.core.windows.net/<container>). As an extension for emulators and private
 * endpoints, an endpoint with a scheme ("http://127.0.0.1:10000") is used path-style:
 * <endpoint>/<account>/<container>. A storage_connection_string (AccountName, AccountKey and
 * BlobEndpoint or DefaultEndpointsProtocol + EndpointSuffix) may replace the three keys.
 *
 * Semantics of bucket.h on Azure:
 *   - upload: Put Blob up to bucket_azure_put_blob_max bytes; above it Put Block for each block
 *     (ids random per upload, so concurrent uploads of one key never mix blocks) and Put Block
 *     List, which makes the blob visible atomically.
 *   - get_range: Get Blob with x-ms-range; a 416 answer is resolved with Get Blob Properties like
 *     in the S3 backend (offset == size is an empty read, beyond is OUT_OF_RANGE).
 *   - iterate: List Blobs with prefix, '/' delimiter when not recursive, and markers; blobs and
 *     prefixes of a page are merged in byte order.
 *   - delete: Delete Blob (404 is success). attributes/exists: Get Blob Properties (HEAD).
 * With storage_create_container (default true) the container is created at open if missing.
 */
#include "bucket/bucket_remote.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/clock.h"

#define AZ_VERSION "2021-08-06"
#define AZ_DEFAULT_ATTEMPTS 4 /* the Azure SDK's MaxTries */
#define AZ_MAX_BLOCKS 50000

size_t bucket_azure_put_blob_max = (size_t)64 << 20;
size_t bucket_azure_block_size = (size_t)16 << 20;

typedef struct az_bucket {
    char *what;     /* "azure container NAME" */
    char *account;  /* storage account name */
    char *base_url; /* https://account.host/container or http://host:port/account/container */
    size_t path_at; /* offset of the URL path in base_url */
    uint8_t *key;   /* decoded account key (secret) */
    size_t key_len;
    bucket_http_client *http;
} az_bucket;

/* ---- Requests ---------------------------------------------------------------------------------
 */

typedef struct az_param {
    const char *name; /* lower case; callers give them in byte order */
    const char *value;
} az_param;

typedef struct az_call {
    const char *op;
    const char *key;
    strata_buffer url;
    struct curl_slist *headers;
    bucket_http_response resp;
    bool oom;
} az_call;

static void call_init(az_call *c, const char *op, const char *key) {
    memset(c, 0, sizeof *c);
    c->op = op;
    c->key = key;
}

static void call_free(az_call *c) {
    strata_buffer_free(&c->url);
    curl_slist_free_all(c->headers);
    bucket_http_response_free(&c->resp);
}

static void add_header(az_call *c, const char *name, const char *value) {
    char line[1200];
    int n = snprintf(line, sizeof line, "%s: %s", name, value);
    struct curl_slist *l =
        n >= 0 && (size_t)n < sizeof line ? curl_slist_append(c->headers, line) : NULL;
    if (l == NULL)
        c->oom = true;
    else
        c->headers = l;
}

/* url = base[/escaped blob][?params]; canonical resource into res. */
static int build_url(const az_bucket *az, const char *blob, const az_param *params, size_t n,
                     strata_buffer *url, strata_buffer *res) {
    int rc = strata_buffer_append_str(url, az->base_url);
    if (blob != NULL)
        rc |=
            strata_buffer_append_byte(url, '/') | bucket_http_escape(url, blob, strlen(blob), true);
    rc |= strata_buffer_appendf(res, "/%s", az->account) |
          strata_buffer_append(res, url->data + az->path_at, url->len - az->path_at);
    for (size_t i = 0; i < n; i++) {
        rc |= strata_buffer_append_byte(url, i == 0 ? '?' : '&') |
              strata_buffer_appendf(url, "%s=", params[i].name) |
              bucket_http_escape(url, params[i].value, strlen(params[i].value), false) |
              strata_buffer_appendf(res, "\n%s:%s", params[i].name, params[i].value);
    }
    rc |= strata_buffer_append_byte(url, '\0') | strata_buffer_append_byte(res, '\0');
    return rc != 0 ? -1 : 0;
}

typedef struct az_header {
    const char *name; /* x-ms-* in lower case */
    const char *value;
} az_header;

static int compare_headers(const void *a, const void *b) {
    return strcmp(((const az_header *)a)->name, ((const az_header *)b)->name);
}

/* Adds x-ms-date, x-ms-version and the signature over everything else. */
static void sign(const az_bucket *az, az_call *c, const char *method, az_header *xms, size_t n_xms,
                 const char *content_type, size_t body_len, const strata_buffer *res) {
    char date[40], length[24];
    bucket_http_format_date(strata_now_ns(), date, sizeof date);
    xms[n_xms++] = (az_header){"x-ms-date", date};
    xms[n_xms++] = (az_header){"x-ms-version", AZ_VERSION};
    qsort(xms, n_xms, sizeof *xms, compare_headers);
    snprintf(length, sizeof length, "%zu", body_len);
    strata_buffer sts = STRATA_BUFFER_INIT, sig = STRATA_BUFFER_INIT;
    int rc =
        strata_buffer_appendf(&sts, "%s\n\n\n%s\n\n%s\n\n\n\n\n\n\n", method,
                              body_len > 0 ? length : "", content_type != NULL ? content_type : "");
    for (size_t i = 0; i < n_xms; i++) {
        rc |= strata_buffer_appendf(&sts, "%s:%s\n", xms[i].name, xms[i].value);
        add_header(c, xms[i].name, xms[i].value);
    }
    rc |= strata_buffer_append(&sts, res->data, res->len - 1); /* without the NUL */
    uint8_t mac[32];
    rc |= bucket_hmac_sha256(az->key, az->key_len, sts.data, sts.len, mac) |
          strata_buffer_appendf(&sig, "SharedKey %s:", az->account) |
          bucket_base64_encode(&sig, mac, sizeof mac);
    if (rc != 0)
        c->oom = true;
    else
        add_header(c, "Authorization", (const char *)sig.data);
    if (content_type != NULL)
        add_header(c, "Content-Type", content_type);
    strata_buffer_free(&sts);
    strata_buffer_free(&sig);
}

typedef struct az_request {
    const char *method;
    const char *blob; /* NULL: the container */
    const az_param *params;
    size_t n_params;
    az_header xms[4]; /* extra x-ms-* headers (room for date and version too) */
    size_t n_xms;
    const char *content_type;
    const void *body;
    size_t body_len;
} az_request;

static int send_call(az_bucket *az, az_call *c, az_request *r, strata_buffer *out,
                     strata_error *err) {
    strata_buffer res = STRATA_BUFFER_INIT;
    az_header xms[6];
    memcpy(xms, r->xms, r->n_xms * sizeof *xms);
    if (build_url(az, r->blob, r->params, r->n_params, &c->url, &res) != 0)
        c->oom = true;
    else
        sign(az, c, r->method, xms, r->n_xms, r->content_type, r->body_len, &res);
    strata_buffer_free(&res);
    if (c->oom)
        return strata_error_oom(err);
    bucket_http_request req = {
        .op = c->op,
        .key = c->key,
        .method = r->method,
        .url = (const char *)c->url.data,
        .headers = c->headers,
        .body = r->body,
        .body_len = r->body_len,
    };
    return bucket_http_do(az->http, &req, out, &c->resp, err);
}

static strata_status status_code(long status, const char *code) {
    if (status == 404)
        return strcmp(code, "ContainerNotFound") == 0 ? STRATA_FAILED_PRECONDITION
                                                      : STRATA_NOT_FOUND;
    if (status == 401 || status == 403)
        return STRATA_PERMISSION_DENIED;
    if (status == 416)
        return STRATA_OUT_OF_RANGE;
    if (status == 409 || status == 412)
        return STRATA_FAILED_PRECONDITION;
    if (status == 501)
        return STRATA_UNIMPLEMENTED;
    if (bucket_http_status_retryable(status))
        return STRATA_UNAVAILABLE;
    if (status == 400)
        return STRATA_INVALID_ARGUMENT;
    return STRATA_UNKNOWN;
}

static int answer_error(const az_bucket *az, const az_call *c, strata_error *err) {
    char code[64], message[256];
    bucket_xml_find(&c->resp.error_body, "Code", code, sizeof code);
    bucket_xml_find(&c->resp.error_body, "Message", message, sizeof message);
    const char *hint = c->resp.status == 403 ? " (check storage_account_key)" : "";
    return strata_error_set(err, status_code(c->resp.status, code),
                            "%s: %s \"%.200s\": HTTP %ld%s%s%s%s%s", az->what, c->op, c->key,
                            c->resp.status, code[0] != '\0' ? " " : "", code,
                            message[0] != '\0' ? ": " : "", message, hint);
}

static bool ok(const az_call *c) {
    return c->resp.status >= 200 && c->resp.status < 300;
}

/* Runs a request whose only interesting outcome is its status. */
static int simple_call(az_bucket *az, const char *op, const char *key, az_request *r, long also_ok,
                       strata_error *err) {
    az_call c;
    call_init(&c, op, key);
    int rc = send_call(az, &c, r, NULL, err);
    if (rc == 0 && !ok(&c) && c.resp.status != also_ok)
        rc = answer_error(az, &c, err);
    call_free(&c);
    return rc;
}

/* ---- Upload -----------------------------------------------------------------------------------
 */

static int put_blob(az_bucket *az, const char *key, const void *data, size_t len,
                    strata_error *err) {
    az_request r = {.method = "PUT",
                    .blob = key,
                    .body = data,
                    .body_len = len,
                    .content_type = "application/octet-stream"};
    r.xms[r.n_xms++] = (az_header){"x-ms-blob-type", "BlockBlob"};
    return simple_call(az, "upload", key, &r, 0, err);
}

/* Block ids: 12 random bytes of this upload + a 4-byte index, base64 (all the same length). */
static int block_id(const uint8_t nonce[12], uint32_t index, strata_buffer *out) {
    uint8_t raw[16];
    memcpy(raw, nonce, 12);
    raw[12] = (uint8_t)(index >> 24);
    raw[13] = (uint8_t)(index >> 16);
    raw[14] = (uint8_t)(index >> 8);
    raw[15] = (uint8_t)index;
    strata_buffer_reset(out);
    return bucket_base64_encode(out, raw, sizeof raw);
}

static int put_block(az_bucket *az, const char *key, const char *id, const void *data, size_t len,
                     strata_error *err) {
    az_param params[] = {{"blockid", id}, {"comp", "block"}};
    az_request r = {.method = "PUT",
                    .blob = key,
                    .params = params,
                    .n_params = 2,
                    .body = data,
                    .body_len = len,
                    .content_type = "application/octet-stream"};
    return simple_call(az, "upload (put block)", key, &r, 0, err);
}

static int put_block_list(az_bucket *az, const char *key, const strata_buffer *xml,
                          strata_error *err) {
    az_param params[] = {{"comp", "blocklist"}};
    az_request r = {.method = "PUT",
                    .blob = key,
                    .params = params,
                    .n_params = 1,
                    .body = xml->data,
                    .body_len = xml->len,
                    .content_type = "application/xml"};
    return simple_call(az, "upload (put block list)", key, &r, 0, err);
}

static int block_upload(az_bucket *az, const char *key, const bucket_upload_body *body,
                        strata_error *err) {
    uint64_t len = body->size;
    size_t block = bucket_azure_block_size > 0 ? bucket_azure_block_size : (size_t)16 << 20;
    if ((len + block - 1) / block > AZ_MAX_BLOCKS)
        block = (len + AZ_MAX_BLOCKS - 1) / AZ_MAX_BLOCKS;
    uint8_t nonce[12];
    arc4random_buf(nonce, sizeof nonce);
    strata_buffer id = STRATA_BUFFER_INIT, xml = STRATA_BUFFER_INIT, scratch = STRATA_BUFFER_INIT;
    int rc =
        strata_buffer_append_str(&xml, "<?xml version=\"1.0\" encoding=\"utf-8\"?><BlockList>");
    uint32_t index = 0;
    for (uint64_t off = 0; rc == 0 && off < len; off += block, index++) {
        size_t n = len - off < block ? (size_t)(len - off) : block;
        const uint8_t *data = NULL;
        if (block_id(nonce, index, &id) != 0 ||
            strata_buffer_appendf(&xml, "<Latest>%s</Latest>", (const char *)id.data) != 0)
            rc = strata_error_oom(err);
        else if ((rc = bucket_upload_body_read(body, off, n, &scratch, &data, err)) == 0)
            rc = put_block(az, key, (const char *)id.data, data, n, err);
    }
    if (rc == 0 && strata_buffer_append_str(&xml, "</BlockList>") != 0)
        rc = strata_error_oom(err);
    if (rc == 0)
        rc = put_block_list(az, key, &xml, err);
    /* Uncommitted blocks of a failed upload are garbage-collected by the service after a week. */
    strata_buffer_free(&id);
    strata_buffer_free(&xml);
    strata_buffer_free(&scratch);
    return rc;
}

static int az_upload(void *impl, const char *key, const bucket_upload_body *body,
                     strata_error *err) {
    az_bucket *az = impl;
    if (body->size > bucket_azure_put_blob_max)
        return block_upload(az, key, body, err);
    strata_buffer scratch = STRATA_BUFFER_INIT;
    const uint8_t *data = NULL;
    int rc = bucket_upload_body_read(body, 0, (size_t)body->size, &scratch, &data, err);
    if (rc == 0)
        rc = put_blob(az, key, data, (size_t)body->size, err);
    strata_buffer_free(&scratch);
    return rc;
}

/* ---- Properties and reads ---------------------------------------------------------------------
 */

static int head_blob(az_bucket *az, const char *op, const char *key,
                     bucket_object_attributes *attrs, bool *found, strata_error *err) {
    az_call c;
    call_init(&c, op, key);
    az_request r = {.method = "HEAD", .blob = key};
    int rc = send_call(az, &c, &r, NULL, err);
    *found = false;
    if (rc == 0 && c.resp.status == 404)
        rc = 0;
    else if (rc == 0 && !ok(&c))
        rc = answer_error(az, &c, err);
    else if (rc == 0 && !c.resp.has_content_length)
        rc = strata_error_set(err, STRATA_INTERNAL, "%s: %s \"%.200s\": no Content-Length",
                              az->what, op, key);
    else if (rc == 0) {
        *found = true;
        attrs->size = c.resp.content_length;
        attrs->last_modified_ns = c.resp.last_modified_ns;
    }
    call_free(&c);
    return rc;
}

static int not_found(const az_bucket *az, const char *op, const char *key, strata_error *err) {
    return strata_error_set(err, STRATA_NOT_FOUND, "%s: %s \"%.200s\": no such object", az->what,
                            op, key);
}

static int az_attributes(void *impl, const char *key, bucket_object_attributes *out,
                         strata_error *err) {
    bool found;
    if (head_blob(impl, "attributes", key, out, &found, err) != 0)
        return -1;
    return found ? 0 : not_found(impl, "attributes", key, err);
}

static int az_exists(void *impl, const char *key, bool *out, strata_error *err) {
    bucket_object_attributes attrs;
    return head_blob(impl, "exists", key, &attrs, out, err);
}

static int empty_read(az_bucket *az, const char *key, uint64_t offset, strata_error *err) {
    bucket_object_attributes attrs;
    bool found;
    if (head_blob(az, "get", key, &attrs, &found, err) != 0)
        return -1;
    if (!found)
        return not_found(az, "get", key, err);
    if (offset > attrs.size)
        return strata_error_set(err, STRATA_OUT_OF_RANGE,
                                "%s: get \"%.200s\": offset %llu is past the end of the %llu-byte "
                                "object",
                                az->what, key, (unsigned long long)offset,
                                (unsigned long long)attrs.size);
    return 0;
}

static int az_get_range(void *impl, const char *key, uint64_t offset, uint64_t length,
                        strata_buffer *out, strata_error *err) {
    az_bucket *az = impl;
    if (length == 0)
        return empty_read(az, key, offset, err);
    char range[64];
    az_request r = {.method = "GET", .blob = key};
    if (length != BUCKET_TO_END && length - 1 <= UINT64_MAX - offset)
        snprintf(range, sizeof range, "bytes=%llu-%llu", (unsigned long long)offset,
                 (unsigned long long)(offset + length - 1));
    else
        snprintf(range, sizeof range, "bytes=%llu-", (unsigned long long)offset);
    if (offset > 0 || length != BUCKET_TO_END)
        r.xms[r.n_xms++] = (az_header){"x-ms-range", range};
    az_call c;
    call_init(&c, "get", key);
    int rc = send_call(az, &c, &r, out, err);
    if (rc == 0 && c.resp.status == 416)
        rc = empty_read(az, key, offset, err);
    else if (rc == 0 && !ok(&c))
        rc = answer_error(az, &c, err);
    call_free(&c);
    return rc;
}

static int az_delete(void *impl, const char *key, strata_error *err) {
    az_request r = {.method = "DELETE", .blob = key};
    return simple_call(impl, "delete", key, &r, 404, err);
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

static int collect_names(const strata_buffer *page, const char *outer, name_vec *out) {
    const char *pos = (const char *)page->data;
    const char *end = pos + page->len;
    const char *block, *text;
    size_t block_len, len;
    while (bucket_xml_next(&pos, end, outer, &block, &block_len)) {
        const char *in = block;
        if (bucket_xml_next(&in, block + block_len, "Name", &text, &len) &&
            name_vec_add_xml(out, text, len) != 0)
            return -1;
    }
    return 0;
}

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
    bool recursive;
    strata_buffer marker;
    bool done;
} list_state;

static int next_marker(const strata_buffer *page, list_state *st) {
    strata_buffer_reset(&st->marker);
    const char *pos = (const char *)page->data, *text;
    size_t len;
    st->done = !bucket_xml_next(&pos, pos + page->len, "NextMarker", &text, &len) || len == 0;
    return st->done ? 0 : bucket_xml_unescape(&st->marker, text, len);
}

static int list_page(az_bucket *az, list_state *st, bucket_iter_fn fn, void *ctx,
                     strata_error *err) {
    char max[16];
    snprintf(max, sizeof max, "%d", bucket_remote_list_page_size);
    az_param params[6];
    size_t n = 0;
    params[n++] = (az_param){"comp", "list"};
    if (!st->recursive)
        params[n++] = (az_param){"delimiter", "/"};
    if (st->marker.len > 0)
        params[n++] = (az_param){"marker", (const char *)st->marker.data};
    params[n++] = (az_param){"maxresults", max};
    if (st->dir[0] != '\0')
        params[n++] = (az_param){"prefix", st->dir};
    params[n++] = (az_param){"restype", "container"};
    az_request r = {.method = "GET", .params = params, .n_params = n};
    az_call c;
    call_init(&c, "iter", st->dir);
    strata_buffer page = STRATA_BUFFER_INIT;
    name_vec keys = {0}, dirs = {0};
    int rc = send_call(az, &c, &r, &page, err);
    if (rc == 0 && !ok(&c))
        rc = answer_error(az, &c, err);
    if (rc == 0 && (collect_names(&page, "Blob", &keys) != 0 ||
                    collect_names(&page, "BlobPrefix", &dirs) != 0 || next_marker(&page, st) != 0))
        rc = strata_error_oom(err);
    if (rc == 0)
        rc = emit_merged(&keys, &dirs, fn, ctx, err);
    name_vec_free(&keys);
    name_vec_free(&dirs);
    strata_buffer_free(&page);
    call_free(&c);
    return rc;
}

/* List Blobs cannot start at a name (its marker is opaque), so a listing with start_after reads
 * the directory from its start and the generic layer skips what comes before. */
static int az_iterate(void *impl, bucket_list_request *req, bucket_iter_fn fn, void *ctx,
                      strata_error *err) {
    list_state st = {.dir = req->dir, .recursive = req->recursive};
    int rc = 0;
    while (rc == 0 && !st.done) {
        req->requests++;
        rc = list_page(impl, &st, fn, ctx, err);
    }
    strata_buffer_free(&st.marker);
    return rc < 0 ? -1 : 0;
}

static int create_container(az_bucket *az, strata_error *err) {
    az_param params[] = {{"restype", "container"}};
    az_request r = {.method = "PUT", .params = params, .n_params = 1};
    return simple_call(az, "create container", "", &r, 409, err);
}

/* ---- Configuration ----------------------------------------------------------------------------
 */

typedef struct az_reader_yaml {
    int64_t max_retry_requests;
} az_reader_yaml;

typedef struct az_pipeline_yaml {
    int64_t max_tries;
    int64_t try_timeout;
    int64_t retry_delay;
    int64_t max_retry_delay;
} az_pipeline_yaml;

typedef struct az_yaml {
    char *az_tenant_id, *client_id, *client_secret;
    char *storage_account, *storage_account_key, *storage_connection_string;
    bool storage_create_container;
    char *container, *endpoint, *user_assigned_id, *msi_resource;
    int64_t max_retries;
    az_reader_yaml reader_config;
    az_pipeline_yaml pipeline_config;
    bucket_http_yaml http_config;
} az_yaml;

static const config_field reader_fields[] = {
    {.key = "max_retry_requests",
     .kind = CONFIG_INT64,
     .offset = offsetof(az_reader_yaml, max_retry_requests),
     .default_text = "0"},
    {0},
};

static const config_field pipeline_fields[] = {
    {.key = "max_tries",
     .kind = CONFIG_INT64,
     .offset = offsetof(az_pipeline_yaml, max_tries),
     .default_text = "0"},
    {.key = "try_timeout",
     .kind = CONFIG_DURATION,
     .offset = offsetof(az_pipeline_yaml, try_timeout),
     .default_text = "0"},
    {.key = "retry_delay",
     .kind = CONFIG_DURATION,
     .offset = offsetof(az_pipeline_yaml, retry_delay),
     .default_text = "0"},
    {.key = "max_retry_delay",
     .kind = CONFIG_DURATION,
     .offset = offsetof(az_pipeline_yaml, max_retry_delay),
     .default_text = "0"},
    {0},
};

#define AZ_FIELD(name, k, def)                                                                     \
    { .key = #name, .kind = k, .offset = offsetof(az_yaml, name), .default_text = def }

static const config_field az_fields[] = {
    AZ_FIELD(az_tenant_id, CONFIG_STRING, "\"\""),
    AZ_FIELD(client_id, CONFIG_STRING, "\"\""),
    AZ_FIELD(client_secret, CONFIG_STRING, "\"\""),
    AZ_FIELD(storage_account, CONFIG_STRING, "\"\""),
    AZ_FIELD(storage_account_key, CONFIG_STRING, "\"\""),
    AZ_FIELD(storage_connection_string, CONFIG_STRING, "\"\""),
    AZ_FIELD(storage_create_container, CONFIG_BOOL, "true"),
    AZ_FIELD(container, CONFIG_STRING, "\"\""),
    AZ_FIELD(endpoint, CONFIG_STRING, "blob.core.windows.net"),
    AZ_FIELD(user_assigned_id, CONFIG_STRING, "\"\""),
    AZ_FIELD(msi_resource, CONFIG_STRING, "\"\""),
    AZ_FIELD(max_retries, CONFIG_INT64, "0"),
    {.key = "reader_config",
     .kind = CONFIG_STRUCT,
     .offset = offsetof(az_yaml, reader_config),
     .fields = reader_fields},
    {.key = "pipeline_config",
     .kind = CONFIG_STRUCT,
     .offset = offsetof(az_yaml, pipeline_config),
     .fields = pipeline_fields},
    {.key = "http_config",
     .kind = CONFIG_STRUCT,
     .offset = offsetof(az_yaml, http_config),
     .fields = bucket_http_yaml_fields},
    {0},
};

static bool is_set(const char *s) {
    return s != NULL && s[0] != '\0';
}

static const config_node *key_node(const config_node *config, const char *key) {
    const config_node *n = config_node_get(config, key);
    return n != NULL ? n : config;
}

/* Account, key and base URL after the connection string (if any) is applied. */
typedef struct az_target {
    char account[256];
    char key[256];
    char blob_endpoint[512]; /* full URL up to the account (path style) or "" */
    char protocol[16];
    char suffix[256];
} az_target;

static void copy_field(char *dst, size_t cap, const char *v, size_t n) {
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, v, n);
    dst[n] = '\0';
}

/* Parses "Name=value;..." (values may contain '='). Only the keys Azure's SDKs document matter. */
static int parse_connection_string(const char *cs, az_target *t, const config_node *node,
                                   strata_error *err) {
    for (const char *p = cs; *p != '\0';) {
        const char *semi = strchr(p, ';');
        size_t n = semi != NULL ? (size_t)(semi - p) : strlen(p);
        const char *eq = memchr(p, '=', n);
        if (n > 0 && eq == NULL)
            return config_node_error(err, node,
                                     "storage_connection_string: expected "
                                     "Name=value pairs separated by ';'");
        size_t name_len = eq != NULL ? (size_t)(eq - p) : 0;
        const char *v = eq != NULL ? eq + 1 : p;
        size_t vlen = n - name_len - (eq != NULL ? 1 : 0);
#define IS(name) (name_len == strlen(name) && strncasecmp(p, name, name_len) == 0)
        if (IS("AccountName"))
            copy_field(t->account, sizeof t->account, v, vlen);
        else if (IS("AccountKey"))
            copy_field(t->key, sizeof t->key, v, vlen);
        else if (IS("BlobEndpoint"))
            copy_field(t->blob_endpoint, sizeof t->blob_endpoint, v, vlen);
        else if (IS("DefaultEndpointsProtocol"))
            copy_field(t->protocol, sizeof t->protocol, v, vlen);
        else if (IS("EndpointSuffix"))
            copy_field(t->suffix, sizeof t->suffix, v, vlen);
        else if (IS("SharedAccessSignature")) {
            config_node_error(err, node,
                              "storage_connection_string: SAS tokens are not "
                              "supported (use AccountKey)");
            if (err != NULL)
                err->code = STRATA_UNIMPLEMENTED;
            return -1;
        }
#undef IS
        p = semi != NULL ? semi + 1 : p + n;
    }
    return 0;
}

static int unsupported(const config_node *config, const char *key, strata_error *err) {
    config_node_error(err, key_node(config, key),
                      "%s is not supported (Strata authenticates with storage_account_key)", key);
    if (err != NULL)
        err->code = STRATA_UNIMPLEMENTED;
    return -1;
}

static int check_options(const az_yaml *y, const config_node *config, strata_error *err) {
    const char *identity[] = {"az_tenant_id", "client_id", "client_secret", "user_assigned_id",
                              "msi_resource"};
    const char *values[] = {y->az_tenant_id, y->client_id, y->client_secret, y->user_assigned_id,
                            y->msi_resource};
    if (is_set(y->storage_account_key) && is_set(y->storage_connection_string))
        return config_node_error(err, key_node(config, "storage_account_key"),
                                 "storage_account_key and storage_connection_string are "
                                 "mutually exclusive");
    if (is_set(y->storage_account_key) && is_set(y->user_assigned_id))
        return config_node_error(err, key_node(config, "storage_account_key"),
                                 "storage_account_key and user_assigned_id are mutually "
                                 "exclusive");
    for (size_t i = 0; i < sizeof identity / sizeof identity[0]; i++)
        if (is_set(values[i]))
            return unsupported(config, identity[i], err);
    if (!is_set(y->container))
        return config_node_error(err, key_node(config, "container"), "container must be set");
    if (y->max_retries < 0 || y->max_retries > 100 || y->pipeline_config.max_tries < 0 ||
        y->pipeline_config.max_tries > 100)
        return config_node_error(err, key_node(config, "max_retries"),
                                 "max_retries and pipeline_config.max_tries must be between 0 "
                                 "(default) and 100");
    return 0;
}

static int resolve_target(const az_yaml *y, const config_node *config, az_target *t,
                          strata_error *err) {
    memset(t, 0, sizeof *t);
    if (is_set(y->storage_connection_string) &&
        parse_connection_string(y->storage_connection_string, t,
                                key_node(config, "storage_connection_string"), err) != 0)
        return -1;
    if (is_set(y->storage_account))
        copy_field(t->account, sizeof t->account, y->storage_account, strlen(y->storage_account));
    if (is_set(y->storage_account_key))
        copy_field(t->key, sizeof t->key, y->storage_account_key, strlen(y->storage_account_key));
    if (t->account[0] == '\0')
        return config_node_error(err, key_node(config, "storage_account"),
                                 "storage_account must be set");
    for (const char *p = t->account; *p != '\0'; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9')))
            return config_node_error(err, key_node(config, "storage_account"),
                                     "storage_account must be lower-case letters and digits");
    if (t->key[0] == '\0')
        return config_node_error(err, key_node(config, "storage_account_key"),
                                 "storage_account_key (or a storage_connection_string with "
                                 "AccountKey) must be set");
    return 0;
}

static int set_key(az_bucket *az, const az_target *t, const config_node *config,
                   strata_error *err) {
    strata_buffer key = STRATA_BUFFER_INIT;
    if (bucket_base64_decode(&key, t->key, strlen(t->key)) != 0 || key.len == 0) {
        strata_buffer_free(&key);
        /* Never echo the key itself. */
        return config_node_error(err,
                                 key_node(config, is_set(t->key) ? "storage_account_key"
                                                                 : "storage_connection_"
                                                                   "string"),
                                 "storage_account_key is not valid base64");
    }
    az->key = key.data;
    az->key_len = key.len;
    return 0;
}

static int set_urls(az_bucket *az, const az_yaml *y, const az_target *t, strata_error *err) {
    int n;
    if (t->blob_endpoint[0] != '\0')
        n = asprintf(&az->base_url, "%s/%s", t->blob_endpoint, y->container);
    else if (strstr(y->endpoint, "://") != NULL)
        n = asprintf(&az->base_url, "%s/%s/%s", y->endpoint, t->account, y->container);
    else
        n = asprintf(&az->base_url, "%s://%s.%s/%s", t->protocol[0] != '\0' ? t->protocol : "https",
                     t->account, t->suffix[0] != '\0' ? t->suffix : y->endpoint, y->container);
    if (n < 0) {
        az->base_url = NULL;
        return strata_error_oom(err);
    }
    /* Drop a trailing '/' of the endpoint ("http://h:1/" + "/acct"), then find the path. */
    const char *host = strstr(az->base_url, "://");
    const char *path = host != NULL ? strchr(host + 3, '/') : NULL;
    if (path == NULL)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "azure: cannot use endpoint");
    az->path_at = (size_t)(path - az->base_url);
    if ((az->account = strdup(t->account)) == NULL ||
        asprintf(&az->what, "azure container %s", y->container) < 0) {
        az->what = NULL;
        return strata_error_oom(err);
    }
    return 0;
}

static void az_close(void *impl) {
    az_bucket *az = impl;
    if (az == NULL)
        return;
    bucket_http_client_free(az->http);
    if (az->key != NULL)
        memset(az->key, 0, az->key_len);
    free(az->key);
    free(az->what);
    free(az->account);
    free(az->base_url);
    free(az);
}

static int build(az_bucket *az, const az_yaml *y, const config_node *config, strata_error *err) {
    az_target t;
    int rc = resolve_target(y, config, &t, err);
    if (rc == 0)
        rc = set_key(az, &t, config, err);
    memset(t.key, 0, sizeof t.key);
    if (rc != 0 || set_urls(az, y, &t, err) != 0)
        return -1;
    int64_t tries = y->max_retries > 0                 ? y->max_retries
                    : y->pipeline_config.max_tries > 0 ? y->pipeline_config.max_tries
                                                       : AZ_DEFAULT_ATTEMPTS;
    const az_pipeline_yaml *p = &y->pipeline_config;
    bucket_http_options o = {
        .what = az->what,
        .max_attempts = (int)tries,
        .backoff_base_ns = p->retry_delay > 0 ? p->retry_delay : 100 * STRATA_NS_PER_MS,
        .backoff_max_ns = p->max_retry_delay > 0 ? p->max_retry_delay : 5 * STRATA_NS_PER_SEC,
    };
    if (bucket_http_options_from_yaml(&y->http_config, config, &o, err) != 0)
        return -1;
    o.attempt_timeout_ns = p->try_timeout;
    if (bucket_http_client_new(&o, &az->http, err) != 0)
        return -1;
    return y->storage_create_container ? create_container(az, err) : 0;
}

int bucket_azure_open_config(const config_node *bucket_node, const config_node *config, void **impl,
                             strata_error *err) {
    *impl = NULL;
    if (config == NULL)
        return config_node_error(err, bucket_node,
                                 "missing required key \"config\" (AZURE needs "
                                 "config.storage_account, storage_account_key and container)");
    az_yaml y;
    if (config_decode(config, az_fields, &y, err) != 0)
        return -1;
    int rc = check_options(&y, config, err);
    az_bucket *az = NULL;
    if (rc == 0 && (az = calloc(1, sizeof *az)) == NULL)
        rc = strata_error_oom(err);
    if (rc == 0)
        rc = build(az, &y, config, err);
    if (rc != 0)
        az_close(az);
    else
        *impl = az;
    config_free(az_fields, &y);
    return rc;
}

const bucket_backend_ops bucket_azure_ops = {
    .type = "AZURE",
    .upload = az_upload,
    .get_range = az_get_range,
    .attributes = az_attributes,
    .exists = az_exists,
    .delete_object = az_delete,
    .iterate = az_iterate,
    .close = az_close,
};
