/*
 * bucket_remote.h - the remote backends (S3, AZURE), the bucket semantics and the HTTP layer they
 * share.
 *
 * Design. Both backends speak HTTP/1.1 through libcurl. bucket_http owns the transport they have
 * in common:
 *   - a pool of curl easy handles per bucket, so connections (and TLS sessions) are reused across
 *     calls while any number of threads issue requests at once (one handle per request in flight);
 *   - one request function that sends a body from memory, appends a 2xx body to the caller's
 *     buffer, keeps a non-2xx body apart for the error message and captures the few response
 *     headers the backends need (Content-Length, Last-Modified, ETag);
 *   - retries with exponential backoff and jitter on transient failures: HTTP 408, 429, 500, 502,
 *     503, 504, timeouts, refused or reset connections and truncated bodies. Every retry restarts
 *     the request from scratch, so a retried upload sends the whole body again and a retried read
 *     never mixes bytes of two attempts;
 *   - the `http_config` section of Thanos objstore (timeouts and TLS), decoded here for both;
 *   - small helpers: RFC 3986 escaping, a tolerant XML element scanner for S3 and Azure listings,
 *     HTTP dates, SHA-256 / HMAC / MD5 / base64 via OpenSSL.
 *
 * bucket_remote owns what bucket.h means on a store that answers HTTP, the same on S3 and Azure:
 * exists and attributes are a HEAD whose 404 means absent; a read is a GET with a byte range, and
 * an empty read (length 0, or the store's 416 for a range at or past the end) asks HEAD whether
 * the offset is the end (empty result) or beyond it (OUT_OF_RANGE); a ranged GET answered 200
 * (the server ignored the range) keeps the asked-for slice; delete treats 404 as done; a listing
 * asks page after page until the store gives no continuation token, merging each page's objects
 * and common prefixes in byte order; an error answer becomes a status code (404 NOT_FOUND, or
 * FAILED_PRECONDITION for a missing bucket; 401/403 PERMISSION_DENIED; 416 OUT_OF_RANGE; ...) and
 * a message naming the operation, key, HTTP status and the store's <Code> and <Message>; uploads
 * go as one request or as chunks of a bounded count; opening decodes the Thanos `config`, checks
 * it and builds the backend, closing it on failure. A backend keeps a `bucket_remote` as the first
 * member of its state and fills a `bucket_remote_dialect`: how a request is addressed and signed
 * (SigV4 vs SharedKey, URL layout, the range header), how a listing page is asked for and where
 * its next token is, and how its error codes are spelled. Its ops table points at the shared
 * functions for get_range, attributes, exists, delete and iterate.
 *
 * Secrets (secret keys, session tokens, account keys) are passed to libcurl or used for HMACs and
 * never appear in URLs, error messages or logs.
 *
 * Each backend file (bucket_s3.c, bucket_azure.c) decodes its Thanos `config` mapping and exposes
 * an open function and an ops table, registered by one row in bucket_config.c.
 */
#ifndef STRATA_BUCKET_REMOTE_H
#define STRATA_BUCKET_REMOTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "bucket/bucket_backend.h"

struct curl_slist;

/* ---- Backends ---------------------------------------------------------------------------------
 */

/* Decode the backend's `config` node (NULL when absent) and create the backend; errors name the
 * key and its position. */
int bucket_s3_open_config(const config_node *bucket_node, const config_node *config, void **impl,
                          strata_error *err);
extern const bucket_backend_ops bucket_s3_ops;
int bucket_azure_open_config(const config_node *bucket_node, const config_node *config, void **impl,
                             strata_error *err);
extern const bucket_backend_ops bucket_azure_ops;

/* Keys asked for per list request (S3 max-keys, Azure maxresults); default 1000. Tests lower it
 * to exercise pagination; set it before opening buckets. */
extern int bucket_remote_list_page_size;
/* Azure: blobs above this size are uploaded as blocks of bucket_azure_block_size bytes (defaults
 * 64 MiB and 16 MiB). Tests lower them. */
extern size_t bucket_azure_put_blob_max;
extern size_t bucket_azure_block_size;

/* ---- http_config (Thanos objstore, shared by S3 and AZURE) ------------------------------------
 */

typedef struct bucket_tls_yaml {
    char *ca_file;
    char *cert_file;
    char *key_file;
    char *server_name;
    bool insecure_skip_verify;
} bucket_tls_yaml;

typedef struct bucket_http_yaml {
    int64_t idle_conn_timeout;
    int64_t response_header_timeout;
    bool insecure_skip_verify;
    int64_t tls_handshake_timeout;
    int64_t expect_continue_timeout;
    int64_t max_idle_conns;
    int64_t max_idle_conns_per_host;
    int64_t max_conns_per_host;
    bool disable_compression;
    bucket_tls_yaml tls_config;
} bucket_http_yaml;

/* Field table for a CONFIG_STRUCT `http_config` entry (Thanos' keys and defaults). */
extern const config_field bucket_http_yaml_fields[];

/* ---- HTTP client ------------------------------------------------------------------------------
 */

typedef struct bucket_http_options {
    const char *what;           /* "s3 bucket b", used in messages */
    int max_attempts;           /* total tries per request, >= 1 */
    int64_t backoff_base_ns;    /* first retry waits about this long */
    int64_t backoff_max_ns;     /* cap of one wait */
    int64_t connect_timeout_ns; /* TCP and TLS handshake */
    int64_t stall_timeout_ns;   /* no byte received for this long fails the attempt */
    int64_t expect_continue_ns; /* wait for 100-continue before sending a body anyway */
    int64_t idle_conn_timeout_ns;
    int64_t attempt_timeout_ns; /* whole attempt; 0: none */
    size_t max_idle_conns;      /* handles kept for reuse */
    const char *ca_file;        /* NULL: system store */
    const char *cert_file;
    const char *key_file;
    bool insecure_skip_verify;
} bucket_http_options;

/* Fills options from decoded http_config (`node` is the config mapping, for error positions). */
int bucket_http_options_from_yaml(const bucket_http_yaml *y, const config_node *node,
                                  bucket_http_options *out, strata_error *err);

typedef struct bucket_http_client bucket_http_client;

/* Copies the options (strings included). */
int bucket_http_client_new(const bucket_http_options *options, bucket_http_client **out,
                           strata_error *err);
void bucket_http_client_free(bucket_http_client *c);
/* Retries performed so far (each extra attempt counts once). */
uint64_t bucket_http_client_retries(const bucket_http_client *c);

typedef struct bucket_http_request {
    const char *op;     /* "upload", for messages */
    const char *key;    /* object key or "" for messages */
    const char *method; /* GET, HEAD, PUT, POST, DELETE */
    const char *url;
    const struct curl_slist *headers;
    const void *body; /* PUT and POST; may be NULL with body_len 0 */
    size_t body_len;
    const char *aws_sigv4; /* CURLOPT_AWS_SIGV4, or NULL */
    const char *userpwd;   /* CURLOPT_USERPWD with aws_sigv4 (secret) */
} bucket_http_request;

typedef struct bucket_http_response {
    long status;
    strata_buffer error_body; /* body of a non-2xx answer (owned) */
    bool has_content_length;
    uint64_t content_length;
    int64_t last_modified_ns; /* 0 when absent */
    char etag[130];
} bucket_http_response;

void bucket_http_response_free(bucket_http_response *r);

/* Sends req, retrying transient failures. Returns 0 when a final HTTP answer arrived (any status,
 * including a 5xx that outlived the retries); a 2xx body is appended to body (may be NULL). Returns
 * -1 with UNAVAILABLE or DEADLINE_EXCEEDED when no answer arrived. */
int bucket_http_do(bucket_http_client *c, const bucket_http_request *req, strata_buffer *body,
                   bucket_http_response *resp, strata_error *err);

/* True for the HTTP statuses bucket_http_do retries. */
bool bucket_http_status_retryable(long status);

/* ---- Remote-bucket semantics (bucket_remote.c) ------------------------------------------------
 */

typedef struct bucket_remote bucket_remote;

/* One request: its URL and headers as the backend builds them, then the answer. */
typedef struct bucket_remote_call {
    const char *op;  /* "get", for messages */
    const char *key; /* object key, the directory of a listing, or "" */
    strata_buffer url;
    struct curl_slist *headers;
    bucket_http_response resp;
    bool oom; /* building ran out of memory: sending fails with RESOURCE_EXHAUSTED */
} bucket_remote_call;

/* A listing in progress. */
typedef struct bucket_remote_list {
    const char *dir;         /* full key: "" or ends with '/' */
    const char *start_after; /* full key; NULL: from the start */
    bool recursive;
    /* The store's continuation token or marker (NUL-terminated); empty on the first page. */
    strata_buffer token;
    bool done; /* the last page has been read */
} bucket_remote_list;

/* What differs between the stores. */
typedef struct bucket_remote_dialect {
    /* Sends method (HEAD, GET, DELETE; no body) for the object c->key; range, when not NULL, is
     * "bytes=A-B" or "bytes=A-" for the store's range header. A 2xx body is appended to out. */
    int (*send_object)(bucket_remote *r, bucket_remote_call *c, const char *method,
                       const char *range, strata_buffer *out, strata_error *err);
    /* Sends the request for the next page of st; its body goes to page. */
    int (*send_list)(bucket_remote *r, bucket_remote_call *c, const bucket_remote_list *st,
                     strata_buffer *page, strata_error *err);
    /* Sets st->token (reset by the caller) and st->done from a page; last is the page's greatest
     * name ("" when none). -1 when out of memory. */
    int (*next_token)(const bucket_remote *r, const strata_buffer *page, const char *last,
                      bucket_remote_list *st);
    const char *object_tag, *object_name; /* a page's objects: <Contents><Key>, <Blob><Name> */
    const char *prefix_tag, *prefix_name; /* and prefixes: <CommonPrefixes><Prefix>, ... */
    const char *no_bucket_code;           /* a 404 with this <Code> is FAILED_PRECONDITION */
    const char *timeout_code;             /* an answer with this <Code> is UNAVAILABLE; or NULL */
    const char *denied_hint;              /* appended to the message of a 403 */
    const char *bad_signature_code;       /* a 403 with this <Code> gets bad_signature_hint */
    const char *bad_signature_hint;
} bucket_remote_dialect;

/* The first member of a backend's state: its impl pointer is a bucket_remote pointer too. */
struct bucket_remote {
    const bucket_remote_dialect *dialect;
    char *what; /* "s3 bucket NAME", for messages (owned) */
    bucket_http_client *http;
};

/* Creates r->http from the backend's options and http_config (o->what is set to r->what). */
int bucket_remote_connect(bucket_remote *r, bucket_http_options *o, const bucket_http_yaml *y,
                          const config_node *config, strata_error *err);
/* Frees what bucket_remote holds (not r itself). */
void bucket_remote_free(bucket_remote *r);

/* How a backend is opened from its Thanos `config` node. */
typedef struct bucket_remote_opener {
    const bucket_remote_dialect *dialect;
    const char *missing_config; /* the message when there is no `config` */
    const config_field *fields;
    size_t impl_size; /* the backend's state, allocated zeroed but for its dialect */
    /* Checks the decoded YAML and fills impl (its bucket_remote's what and http included); impl
     * is closed after a failure. */
    int (*build)(void *impl, const void *yaml, const config_node *config, strata_error *err);
    void (*close)(void *impl);
} bucket_remote_opener;

/* Decodes config into yaml (the backend's YAML struct, freed again here), builds the backend and
 * sets *impl. */
int bucket_remote_open_config(const bucket_remote_opener *o, const config_node *bucket_node,
                              const config_node *config, void *yaml, void **impl,
                              strata_error *err);

void bucket_remote_call_init(bucket_remote_call *c, const char *op, const char *key);
void bucket_remote_call_free(bucket_remote_call *c);
/* Appends a "Name: value" header line; a line too long or out of memory sets c->oom. */
void bucket_remote_add_header(bucket_remote_call *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Sends c with req's method, body and signing (op, key, URL and headers come from c). */
int bucket_remote_send(bucket_remote *r, bucket_remote_call *c, bucket_http_request *req,
                       strata_buffer *out, strata_error *err);
/* 0 for a 2xx answer or the status also_ok (0: none), else the answer's error. */
int bucket_remote_check(const bucket_remote *r, const bucket_remote_call *c, long also_ok,
                        strata_error *err);
/* The error for c's answer (status and error body). */
int bucket_remote_answer_error(const bucket_remote *r, const bucket_remote_call *c,
                               strata_error *err);

/* Uploads body with one call of put (a file body is read into memory first). */
int bucket_remote_upload_whole(bucket_remote *r, const char *key, const bucket_upload_body *body,
                               int (*put)(bucket_remote *r, const char *key, const uint8_t *data,
                                          size_t len, strata_error *err),
                               strata_error *err);
/* Calls fn for consecutive chunks of the body of chunk_size bytes (more when max_chunks would
 * not do), index counting from 0; a file body is read chunk by chunk into one buffer. Stops at
 * the first failure. */
int bucket_remote_upload_chunks(const bucket_upload_body *body, uint64_t chunk_size,
                                uint64_t max_chunks,
                                int (*fn)(void *ctx, uint32_t index, const uint8_t *data,
                                          size_t len, strata_error *err),
                                void *ctx, strata_error *err);

/* Reads the text of tag in a listing page into st->token: 1 when present and not empty, 0 when
 * not, -1 when out of memory. */
int bucket_remote_read_token(const strata_buffer *page, const char *tag, bucket_remote_list *st);

/* The backend operations, the same for every remote store (impl is a bucket_remote). */
int bucket_remote_get_range(void *impl, const char *key, uint64_t offset, uint64_t length,
                            strata_buffer *out, strata_error *err);
int bucket_remote_attributes(void *impl, const char *key, bucket_object_attributes *out,
                             strata_error *err);
int bucket_remote_exists(void *impl, const char *key, bool *out, strata_error *err);
int bucket_remote_delete(void *impl, const char *key, strata_error *err);
int bucket_remote_iterate(void *impl, bucket_list_request *req, bucket_iter_fn fn, void *ctx,
                          strata_error *err);

/* ---- Helpers ----------------------------------------------------------------------------------
 */

/* Appends s[0..n) percent-encoding everything but RFC 3986 unreserved characters (and '/' when
 * keep_slash). */
int bucket_http_escape(strata_buffer *out, const char *s, size_t n, bool keep_slash);
/* Decodes %XX escapes (and '+' is kept as is). Appends to out. */
int bucket_http_unescape(strata_buffer *out, const char *s, size_t n);

/* Finds the next <tag>text</tag> at or after *pos in [*pos, end); sets text and advances *pos past
 * it. Returns false when there is none. Self-closing <tag/> gives empty text. */
bool bucket_xml_next(const char **pos, const char *end, const char *tag, const char **text,
                     size_t *len);
/* Appends text with XML entities (&amp; &lt; &gt; &quot; &apos; &#N; &#xN;) decoded, NUL-terminated
 * (the terminator is not counted). */
int bucket_xml_unescape(strata_buffer *out, const char *text, size_t len);
/* Appends s with &, <, >, " and ' escaped. */
int bucket_xml_escape(strata_buffer *out, const char *s);
/* Copies <tag> text of the first occurrence in body into out (truncated, NUL-terminated); "" when
 * absent. */
void bucket_xml_find(const strata_buffer *body, const char *tag, char *out, size_t out_len);

/* Parses an RFC 7231 date ("Sun, 06 Nov 1994 08:49:37 GMT") to ns since the epoch; false if not. */
bool bucket_http_parse_date(const char *text, int64_t *out_ns);
/* Formats now as an RFC 7231 date into out (at least 30 bytes). */
void bucket_http_format_date(int64_t now_ns, char *out, size_t out_len);

/* Lower-case hex SHA-256 of data into out (65 bytes). */
void bucket_sha256_hex(const void *data, size_t len, char out[65]);
/* Base64 of the MD5 of data into out (25 bytes). */
int bucket_md5_base64(const void *data, size_t len, char out[25]);
/* HMAC-SHA256 of msg with key into mac (32 bytes). */
int bucket_hmac_sha256(const void *key, size_t key_len, const void *msg, size_t msg_len,
                       uint8_t mac[32]);
/* Appends base64 of data (NUL-terminated, terminator not counted). */
int bucket_base64_encode(strata_buffer *out, const void *data, size_t len);
/* Decodes base64 text; returns -1 if it is not valid base64. */
int bucket_base64_decode(strata_buffer *out, const char *text, size_t len);

#endif
