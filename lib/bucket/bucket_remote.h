/*
 * bucket_remote.h - the remote backends (S3, AZURE) and the HTTP layer they share.
 *
 * Design. Both backends speak HTTP/1.1 through libcurl. bucket_http owns what they have in common:
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
