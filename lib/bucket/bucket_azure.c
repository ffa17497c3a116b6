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
 * What bucket.h means on a remote store (Get Blob Properties, a HEAD, for attributes / exists
 * with 404 as absent; Get Blob with x-ms-range, a 416 resolved by HEAD; Delete Blob with 404 as
 * done; paged listings merged in byte order; error answers to status codes) lives in
 * bucket_remote.c; this file is Azure's dialect of it:
 *   - upload: Put Blob up to bucket_azure_put_blob_max bytes; above it Put Block for each block
 *     (ids random per upload, so concurrent uploads of one key never mix blocks) and Put Block
 *     List, which makes the blob visible atomically.
 *   - iterate: List Blobs with prefix, '/' delimiter when not recursive, <Blob><Name> and
 *     <BlobPrefix><Name>, following NextMarker until it is empty.
 *   - errors: ContainerNotFound is FAILED_PRECONDITION; a 403 message hints at the account key.
 * With storage_create_container (default true) the container is created at open if missing.
 */
#include "bucket/bucket_remote.h"

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
    bucket_remote remote; /* first: what ("azure container NAME"), the HTTP client */
    char *account;        /* storage account name */
    char *base_url;       /* https://account.host/container or http://host:port/account/container */
    size_t path_at;       /* offset of the URL path in base_url */
    uint8_t *key;         /* decoded account key (secret) */
    size_t key_len;
} az_bucket;

/* ---- Requests ---------------------------------------------------------------------------------
 */

typedef struct az_param {
    const char *name; /* lower case; callers give them in byte order */
    const char *value;
} az_param;

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
static void sign(const az_bucket *az, bucket_remote_call *c, const char *method, az_header *xms,
                 size_t n_xms, const char *content_type, size_t body_len,
                 const strata_buffer *res) {
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
        bucket_remote_add_header(c, "%s: %s", xms[i].name, xms[i].value);
    }
    rc |= strata_buffer_append(&sts, res->data, res->len - 1); /* without the NUL */
    uint8_t mac[32];
    rc |= bucket_hmac_sha256(az->key, az->key_len, sts.data, sts.len, mac) |
          strata_buffer_appendf(&sig, "SharedKey %s:", az->account) |
          bucket_base64_encode(&sig, mac, sizeof mac);
    if (rc != 0)
        c->oom = true;
    else
        bucket_remote_add_header(c, "Authorization: %s", (const char *)sig.data);
    if (content_type != NULL)
        bucket_remote_add_header(c, "Content-Type: %s", content_type);
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

static int send_call(az_bucket *az, bucket_remote_call *c, az_request *r, strata_buffer *out,
                     strata_error *err) {
    strata_buffer res = STRATA_BUFFER_INIT;
    az_header xms[6];
    memcpy(xms, r->xms, r->n_xms * sizeof *xms);
    if (build_url(az, r->blob, r->params, r->n_params, &c->url, &res) != 0)
        c->oom = true;
    else
        sign(az, c, r->method, xms, r->n_xms, r->content_type, r->body_len, &res);
    strata_buffer_free(&res);
    bucket_http_request req = {.method = r->method, .body = r->body, .body_len = r->body_len};
    return bucket_remote_send(&az->remote, c, &req, out, err);
}

/* Runs a request whose only interesting outcome is its status. */
static int simple_call(az_bucket *az, const char *op, const char *key, az_request *r, long also_ok,
                       strata_error *err) {
    bucket_remote_call c;
    bucket_remote_call_init(&c, op, key);
    int rc = send_call(az, &c, r, NULL, err);
    if (rc == 0)
        rc = bucket_remote_check(&az->remote, &c, also_ok, err);
    bucket_remote_call_free(&c);
    return rc;
}

/* Get Blob Properties, Get Blob and Delete Blob (bucket_remote_dialect.send_object). */
static int send_object(bucket_remote *r, bucket_remote_call *c, const char *method,
                       const char *range, strata_buffer *out, strata_error *err) {
    az_request q = {.method = method, .blob = c->key};
    if (range != NULL)
        q.xms[q.n_xms++] = (az_header){"x-ms-range", range};
    return send_call((az_bucket *)r, c, &q, out, err);
}

/* ---- Upload -----------------------------------------------------------------------------------
 */

static int put_blob(bucket_remote *r, const char *key, const uint8_t *data, size_t len,
                    strata_error *err) {
    az_request q = {.method = "PUT",
                    .blob = key,
                    .body = data,
                    .body_len = len,
                    .content_type = "application/octet-stream"};
    q.xms[q.n_xms++] = (az_header){"x-ms-blob-type", "BlockBlob"};
    return simple_call((az_bucket *)r, "upload", key, &q, 0, err);
}

typedef struct block_upload {
    az_bucket *az;
    const char *key;
    uint8_t nonce[12];
    strata_buffer id;  /* of the block being put */
    strata_buffer xml; /* the block list so far */
} block_upload;

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

/* Puts block `index` and adds it to the block list. */
static int put_block(void *ctx, uint32_t index, const uint8_t *data, size_t len,
                     strata_error *err) {
    block_upload *u = ctx;
    if (block_id(u->nonce, index, &u->id) != 0 ||
        strata_buffer_appendf(&u->xml, "<Latest>%s</Latest>", (const char *)u->id.data) != 0)
        return strata_error_oom(err);
    az_param params[] = {{"blockid", (const char *)u->id.data}, {"comp", "block"}};
    az_request q = {.method = "PUT",
                    .blob = u->key,
                    .params = params,
                    .n_params = 2,
                    .body = data,
                    .body_len = len,
                    .content_type = "application/octet-stream"};
    return simple_call(u->az, "upload (put block)", u->key, &q, 0, err);
}

static int put_block_list(const block_upload *u, strata_error *err) {
    az_param params[] = {{"comp", "blocklist"}};
    az_request q = {.method = "PUT",
                    .blob = u->key,
                    .params = params,
                    .n_params = 1,
                    .body = u->xml.data,
                    .body_len = u->xml.len,
                    .content_type = "application/xml"};
    return simple_call(u->az, "upload (put block list)", u->key, &q, 0, err);
}

static int block_upload_run(az_bucket *az, const char *key, const bucket_upload_body *body,
                            strata_error *err) {
    size_t block = bucket_azure_block_size > 0 ? bucket_azure_block_size : (size_t)16 << 20;
    block_upload u = {.az = az, .key = key, .id = STRATA_BUFFER_INIT, .xml = STRATA_BUFFER_INIT};
    arc4random_buf(u.nonce, sizeof u.nonce);
    int rc =
        strata_buffer_append_str(&u.xml, "<?xml version=\"1.0\" encoding=\"utf-8\"?><BlockList>");
    if (rc != 0)
        rc = strata_error_oom(err);
    else
        rc = bucket_remote_upload_chunks(body, block, AZ_MAX_BLOCKS, put_block, &u, err);
    if (rc == 0 && strata_buffer_append_str(&u.xml, "</BlockList>") != 0)
        rc = strata_error_oom(err);
    if (rc == 0)
        rc = put_block_list(&u, err);
    /* Uncommitted blocks of a failed upload are garbage-collected by the service after a week. */
    strata_buffer_free(&u.id);
    strata_buffer_free(&u.xml);
    return rc;
}

static int az_upload(void *impl, const char *key, const bucket_upload_body *body,
                     strata_error *err) {
    az_bucket *az = impl;
    if (body->size > bucket_azure_put_blob_max)
        return block_upload_run(az, key, body, err);
    return bucket_remote_upload_whole(&az->remote, key, body, put_blob, err);
}

/* ---- List -------------------------------------------------------------------------------------
 */

/* List Blobs cannot start at a name (its marker is opaque), so a listing with start_after reads
 * the directory from its start and the generic layer skips what comes before. */
static int send_list(bucket_remote *r, bucket_remote_call *c, const bucket_remote_list *st,
                     strata_buffer *page, strata_error *err) {
    char max[16];
    snprintf(max, sizeof max, "%d", bucket_remote_list_page_size);
    az_param params[6];
    size_t n = 0;
    params[n++] = (az_param){"comp", "list"};
    if (!st->recursive)
        params[n++] = (az_param){"delimiter", "/"};
    if (st->token.len > 0)
        params[n++] = (az_param){"marker", (const char *)st->token.data};
    params[n++] = (az_param){"maxresults", max};
    if (st->dir[0] != '\0')
        params[n++] = (az_param){"prefix", st->dir};
    params[n++] = (az_param){"restype", "container"};
    az_request q = {.method = "GET", .params = params, .n_params = n};
    return send_call((az_bucket *)r, c, &q, page, err);
}

static int next_token(const bucket_remote *r, const strata_buffer *page, const char *last,
                      bucket_remote_list *st) {
    (void)r;
    (void)last;
    int rc = bucket_remote_read_token(page, "NextMarker", st);
    st->done = rc == 0;
    return rc < 0 ? -1 : 0;
}

static const bucket_remote_dialect az_dialect = {
    .send_object = send_object,
    .send_list = send_list,
    .next_token = next_token,
    .object_tag = "Blob",
    .object_name = "Name",
    .prefix_tag = "BlobPrefix",
    .prefix_name = "Name",
    .no_bucket_code = "ContainerNotFound",
    .denied_hint = " (check storage_account_key)",
};

static int create_container(az_bucket *az, strata_error *err) {
    az_param params[] = {{"restype", "container"}};
    az_request q = {.method = "PUT", .params = params, .n_params = 1};
    return simple_call(az, "create container", "", &q, 409, err);
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
    { .key = #name, .kind = (k), .offset = offsetof(az_yaml, name), .default_text = (def) }

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
        asprintf(&az->remote.what, "azure container %s", y->container) < 0) {
        az->remote.what = NULL;
        return strata_error_oom(err);
    }
    return 0;
}

static void az_close(void *impl) {
    az_bucket *az = impl;
    if (az == NULL)
        return;
    bucket_remote_free(&az->remote);
    if (az->key != NULL)
        memset(az->key, 0, az->key_len);
    free(az->key);
    free(az->account);
    free(az->base_url);
    free(az);
}

static int build(void *impl, const void *yaml, const config_node *config, strata_error *err) {
    az_bucket *az = impl;
    const az_yaml *y = yaml;
    if (check_options(y, config, err) != 0)
        return -1;
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
        .max_attempts = (int)tries,
        .backoff_base_ns = p->retry_delay > 0 ? p->retry_delay : 100 * STRATA_NS_PER_MS,
        .backoff_max_ns = p->max_retry_delay > 0 ? p->max_retry_delay : 5 * STRATA_NS_PER_SEC,
        .attempt_timeout_ns = p->try_timeout,
    };
    if (bucket_remote_connect(&az->remote, &o, &y->http_config, config, err) != 0)
        return -1;
    return y->storage_create_container ? create_container(az, err) : 0;
}

static const bucket_remote_opener az_opener = {
    .dialect = &az_dialect,
    .missing_config = "missing required key \"config\" (AZURE needs config.storage_account, "
                      "storage_account_key and container)",
    .fields = az_fields,
    .impl_size = sizeof(az_bucket),
    .build = build,
    .close = az_close,
};

int bucket_azure_open_config(const config_node *bucket_node, const config_node *config, void **impl,
                             strata_error *err) {
    az_yaml y;
    return bucket_remote_open_config(&az_opener, bucket_node, config, &y, impl, err);
}

const bucket_backend_ops bucket_azure_ops = {
    .type = "AZURE",
    .upload = az_upload,
    .get_range = bucket_remote_get_range,
    .attributes = bucket_remote_attributes,
    .exists = bucket_remote_exists,
    .delete_object = bucket_remote_delete,
    .iterate = bucket_remote_iterate,
    .close = az_close,
};
