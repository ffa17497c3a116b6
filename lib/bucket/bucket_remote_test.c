/*
 * bucket_remote_test.c - what the S3 and AZURE backends do without a server: configuration (every
 * unknown, contradictory or unsupported key is an error naming it, secrets never in messages), the
 * HTTP helpers (escaping, XML scanning, dates, digests) and retries against a dead endpoint.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bucket/bucket.h"
#include "bucket/bucket_remote.h"
#include "common/clock.h"

static void expect_error(const char *yaml, strata_status code, const char *message) {
    bucket *b = NULL;
    strata_error err;
    assert_int_equal(bucket_open_yaml_string("bucket.yaml", yaml, strlen(yaml), &b, &err), -1);
    assert_null(b);
    if (strcmp(err.message, message) != 0)
        fail_msg("got  \"%s\"\nwant \"%s\"", err.message, message);
    assert_int_equal(err.code, code);
}

#define S3_HEAD "type: S3\nconfig:\n  bucket: b\n  endpoint: 127.0.0.1:9\n"

static void test_s3_config_errors(void **state) {
    (void)state;
    expect_error(S3_HEAD "  regoin: eu\n", STRATA_INVALID_ARGUMENT,
                 "bucket.yaml:5:3: config: unknown key \"regoin\" (expected one of: bucket, "
                 "endpoint, region, disable_dualstack, aws_sdk_auth, access_key, secret_key, "
                 "session_token, insecure, signature_version2, put_user_metadata, http_config, "
                 "trace, list_objects_version, bucket_...)");
    expect_error("type: S3\nconfig:\n  endpoint: h\n", STRATA_INVALID_ARGUMENT,
                 "bucket.yaml:3:3: config: bucket must be set");
    expect_error("type: S3\nconfig:\n  bucket: b\n", STRATA_INVALID_ARGUMENT,
                 "bucket.yaml:3:3: config: endpoint must be set");
    expect_error("type: S3\n", STRATA_INVALID_ARGUMENT,
                 "bucket.yaml:1:1: missing required key \"config\" (S3 needs config.bucket and "
                 "config.endpoint)");
    expect_error(S3_HEAD "  access_key: AKIA\n", STRATA_INVALID_ARGUMENT,
                 "bucket.yaml:5:15: config.access_key: access_key and secret_key must be given "
                 "together");
    expect_error(S3_HEAD "  secret_key: TOPSECRET\n", STRATA_INVALID_ARGUMENT,
                 "bucket.yaml:5:15: config.secret_key: access_key and secret_key must be given "
                 "together");
    expect_error(S3_HEAD "  access_key: a\n  secret_key: s\n  aws_sdk_auth: true\n",
                 STRATA_INVALID_ARGUMENT,
                 "bucket.yaml:7:17: config.aws_sdk_auth: aws_sdk_auth and access_key are "
                 "mutually exclusive");
    expect_error(S3_HEAD "  list_objects_version: v3\n", STRATA_INVALID_ARGUMENT,
                 "bucket.yaml:5:25: config.list_objects_version: expected v1 or v2, got \"v3\"");
    expect_error(S3_HEAD "  bucket_lookup_type: dns\n", STRATA_INVALID_ARGUMENT,
                 "bucket.yaml:5:23: config.bucket_lookup_type: expected auto, path or "
                 "virtual-hosted, got \"dns\"");
    expect_error(S3_HEAD "  part_size: 1MiB\n", STRATA_INVALID_ARGUMENT,
                 "bucket.yaml:5:14: config.part_size: part_size must be between 5MiB and 5GiB "
                 "(or 0 for 128MiB)");
    expect_error(S3_HEAD "  signature_version2: true\n", STRATA_UNIMPLEMENTED,
                 "bucket.yaml:5:23: config.signature_version2: signature version 2 is not "
                 "supported");
    expect_error(S3_HEAD "  sse_config:\n    type: SSE-KMS\n    kms_key_id: k\n",
                 STRATA_UNIMPLEMENTED,
                 "bucket.yaml:6:11: config.sse_config.type: SSE-KMS and SSE-C are not supported "
                 "yet (use SSE-S3)");
    expect_error(S3_HEAD "  sse_config:\n    type: AES\n", STRATA_INVALID_ARGUMENT,
                 "bucket.yaml:6:11: config.sse_config.type: unknown type \"AES\" (expected "
                 "SSE-S3, SSE-KMS or SSE-C)");
    expect_error(S3_HEAD "  http_config:\n    idle_conn_timeout: soon\n", STRATA_INVALID_ARGUMENT,
                 "bucket.yaml:6:24: config.http_config.idle_conn_timeout: expected a duration "
                 "like 10s, 1m30s or 500ms, got \"soon\"");
    expect_error(S3_HEAD "  http_config:\n    tls_config:\n      cert_file: /c\n",
                 STRATA_INVALID_ARGUMENT,
                 "bucket.yaml:7:7: config.http_config.tls_config: tls_config.cert_file and "
                 "tls_config.key_file must be given together");
    expect_error("type: S3\nconfig:\n  bucket: b\n  endpoint: http://h:1\n",
                 STRATA_INVALID_ARGUMENT,
                 "bucket.yaml:4:13: config.endpoint: endpoint is host[:port] without a scheme "
                 "or path (set insecure: true for plain HTTP)");
    expect_error(S3_HEAD "  max_retries: -1\n", STRATA_INVALID_ARGUMENT,
                 "bucket.yaml:5:16: config.max_retries: max_retries must be between 0 (default) "
                 "and 100");
}

#define AZ_HEAD "type: AZURE\nconfig:\n  storage_account: acct\n  container: c\n"

static void test_azure_config_errors(void **state) {
    (void)state;
    expect_error(AZ_HEAD "  storage_account_key: c2VjcmV0\n  storage_connection_string: "
                         "AccountName=a\n",
                 STRATA_INVALID_ARGUMENT,
                 "bucket.yaml:5:24: config.storage_account_key: storage_account_key and "
                 "storage_connection_string are mutually exclusive");
    expect_error(AZ_HEAD, STRATA_INVALID_ARGUMENT,
                 "bucket.yaml:3:3: config: storage_account_key (or a storage_connection_string "
                 "with AccountKey) must be set");
    expect_error(AZ_HEAD "  storage_account_key: 'not base64 TOPSECRET!'\n",
                 STRATA_INVALID_ARGUMENT,
                 "bucket.yaml:5:24: config.storage_account_key: storage_account_key is not valid "
                 "base64");
    expect_error(AZ_HEAD "  client_id: x\n", STRATA_UNIMPLEMENTED,
                 "bucket.yaml:5:14: config.client_id: client_id is not supported (Strata "
                 "authenticates with storage_account_key)");
    expect_error("type: AZURE\nconfig:\n  storage_account: a\n  storage_account_key: c2VjcmV0\n",
                 STRATA_INVALID_ARGUMENT, "bucket.yaml:3:3: config: container must be set");
    expect_error(AZ_HEAD "  storage_account_key: c2VjcmV0\n  containr: x\n",
                 STRATA_INVALID_ARGUMENT,
                 "bucket.yaml:6:3: config: unknown key \"containr\" (expected one of: "
                 "az_tenant_id, client_id, client_secret, storage_account, storage_account_key, "
                 "storage_connection_string, storage_create_container, container, endpoint, "
                 "user_assigned_id, msi_resource, max_retries,...)");
    expect_error("type: AZURE\nconfig:\n  storage_account: Bad_Name\n  container: c\n"
                 "  storage_account_key: c2VjcmV0\n",
                 STRATA_INVALID_ARGUMENT,
                 "bucket.yaml:3:20: config.storage_account: storage_account must be lower-case "
                 "letters and digits");
    expect_error(AZ_HEAD "  storage_connection_string: 'AccountName=a;SharedAccessSignature=x'\n",
                 STRATA_UNIMPLEMENTED,
                 "bucket.yaml:5:30: config.storage_connection_string: storage_connection_string: "
                 "SAS tokens are not supported (use AccountKey)");
}

/* Nothing listens on port 9 of loopback: every attempt is refused, retried, then UNAVAILABLE. */
static void test_retries_then_unavailable(void **state) {
    (void)state;
    const char *yaml = S3_HEAD "  insecure: true\n  access_key: a\n  secret_key: TOPSECRET\n"
                               "  max_retries: 3\n";
    bucket *b = NULL;
    strata_error err;
    assert_int_equal(bucket_open_yaml_string("bucket.yaml", yaml, strlen(yaml), &b, &err), 0);
    assert_string_equal(bucket_type(b), "S3");
    int64_t start = strata_monotonic_ns();
    assert_int_equal(bucket_upload(b, "k", "v", 1, &err), -1);
    int64_t took = strata_monotonic_ns() - start;
    assert_int_equal(err.code, STRATA_UNAVAILABLE);
    assert_non_null(strstr(err.message, "s3 bucket b: upload \"k\": "));
    assert_non_null(strstr(err.message, "(after 3 attempts)"));
    assert_null(strstr(err.message, "TOPSECRET"));
    /* Two waits: [50, 100] ms then [100, 200] ms. */
    assert_true(took >= 150 * STRATA_NS_PER_MS);
    assert_true(took < 5 * STRATA_NS_PER_SEC);
    bucket_stats stats;
    bucket_get_stats(b, &stats);
    assert_int_equal(stats.operations[BUCKET_OP_UPLOAD], 1);
    assert_int_equal(stats.failures[BUCKET_OP_UPLOAD], 1);
    bucket_close(b);

    const char *az = AZ_HEAD "  storage_account_key: c2VjcmV0\n  endpoint: http://127.0.0.1:9\n"
                             "  storage_create_container: false\n  max_retries: 2\n";
    assert_int_equal(bucket_open_yaml_string("bucket.yaml", az, strlen(az), &b, &err), 0);
    strata_buffer buf = STRATA_BUFFER_INIT;
    assert_int_equal(bucket_get(b, "k", &buf, &err), -1);
    assert_int_equal(err.code, STRATA_UNAVAILABLE);
    assert_non_null(strstr(err.message, "azure container c: get \"k\": "));
    assert_non_null(strstr(err.message, "(after 2 attempts)"));
    bucket_close(b);
}

static void test_escape(void **state) {
    (void)state;
    strata_buffer b = STRATA_BUFFER_INIT;
    assert_int_equal(bucket_http_escape(&b, "a b/c~d-e_f.g%+=&\xc3\xa9", 19, true), 0);
    assert_string_equal((char *)b.data, "a%20b/c~d-e_f.g%25%2B%3D%26%C3%A9");
    strata_buffer_reset(&b);
    assert_int_equal(bucket_http_escape(&b, "a/b", 3, false), 0);
    assert_string_equal((char *)b.data, "a%2Fb");
    strata_buffer_reset(&b);
    assert_int_equal(bucket_http_unescape(&b, "a%20b%2fc%zz%4", 14), 0);
    assert_string_equal((char *)b.data, "a b/c%zz%4");
    strata_buffer_free(&b);
}

static void test_xml(void **state) {
    (void)state;
    const char *xml = "<R><Contents><Key>a&amp;b&#x41;&#66;&lt;</Key></Contents><Keys>x</Keys>"
                      "<NextMarker/><Contents><Key>c</Key></Contents><Key>unterminated";
    const char *pos = xml, *end = xml + strlen(xml), *text;
    size_t len;
    assert_true(bucket_xml_next(&pos, end, "Key", &text, &len));
    strata_buffer b = STRATA_BUFFER_INIT;
    assert_int_equal(bucket_xml_unescape(&b, text, len), 0);
    assert_string_equal((char *)b.data, "a&bAB<");
    assert_true(bucket_xml_next(&pos, end, "Key", &text, &len));
    assert_int_equal(len, 1);
    assert_memory_equal(text, "c", 1);
    assert_false(bucket_xml_next(&pos, end, "Key", &text, &len));
    pos = xml;
    assert_true(bucket_xml_next(&pos, end, "NextMarker", &text, &len));
    assert_int_equal(len, 0);
    strata_buffer_reset(&b);
    assert_int_equal(bucket_xml_unescape(&b, "&bogus; &#0; &#x110000; &", 25), 0);
    assert_string_equal((char *)b.data, "&bogus; &#0; &#x110000; &");
    strata_buffer_reset(&b);
    assert_int_equal(bucket_xml_escape(&b, "\"a\"&<b>'"), 0);
    assert_int_equal(strata_buffer_append_byte(&b, 0), 0);
    assert_string_equal((char *)b.data, "&quot;a&quot;&amp;&lt;b&gt;&apos;");
    strata_buffer_free(&b);
    char code[8];
    strata_buffer body = STRATA_BUFFER_INIT;
    assert_int_equal(strata_buffer_append_str(&body, "<Error><Code>NoSuchKeyLong</Code>"), 0);
    bucket_xml_find(&body, "Code", code, sizeof code);
    assert_string_equal(code, "NoSuchK");
    bucket_xml_find(&body, "Message", code, sizeof code);
    assert_string_equal(code, "");
    strata_buffer_free(&body);
}

static void test_dates_and_digests(void **state) {
    (void)state;
    int64_t ns = 0;
    assert_true(bucket_http_parse_date("Sun, 06 Nov 1994 08:49:37 GMT", &ns));
    assert_int_equal(ns, INT64_C(784111777) * STRATA_NS_PER_SEC);
    assert_false(bucket_http_parse_date("Sun, 06 Nov 1994 08:49:37", &ns));
    assert_false(bucket_http_parse_date("yesterday", &ns));
    char date[40];
    bucket_http_format_date(INT64_C(784111777) * STRATA_NS_PER_SEC, date, sizeof date);
    assert_string_equal(date, "Sun, 06 Nov 1994 08:49:37 GMT");
    char hex[65];
    bucket_sha256_hex("abc", 3, hex);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    char md5[25];
    assert_int_equal(bucket_md5_base64("", 0, md5), 0);
    assert_string_equal(md5, "1B2M2Y8AsgTpgAmY7PhCfg==");
    /* RFC 4231 test case 2. */
    uint8_t mac[32];
    const char *msg = "what do ya want for nothing?";
    assert_int_equal(bucket_hmac_sha256("Jefe", 4, msg, strlen(msg), mac), 0);
    assert_int_equal(mac[0], 0x5b);
    assert_int_equal(mac[31], 0x43);
    strata_buffer b = STRATA_BUFFER_INIT;
    assert_int_equal(bucket_base64_encode(&b, "hello", 5), 0);
    assert_string_equal((char *)b.data, "aGVsbG8=");
    strata_buffer_reset(&b);
    assert_int_equal(bucket_base64_decode(&b, "aGVsbG8=", 8), 0);
    assert_int_equal(b.len, 5);
    assert_memory_equal(b.data, "hello", 5);
    strata_buffer_reset(&b);
    assert_int_equal(bucket_base64_decode(&b, "aGVsbG8", 7), -1);
    assert_int_equal(bucket_base64_decode(&b, "a!==", 4), -1);
    strata_buffer_free(&b);
    assert_true(bucket_http_status_retryable(503));
    assert_true(bucket_http_status_retryable(429));
    assert_false(bucket_http_status_retryable(501));
    assert_false(bucket_http_status_retryable(404));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_s3_config_errors),
        cmocka_unit_test(test_azure_config_errors),
        cmocka_unit_test(test_retries_then_unavailable),
        cmocka_unit_test(test_escape),
        cmocka_unit_test(test_xml),
        cmocka_unit_test(test_dates_and_digests),
    };
    return cmocka_run_group_tests_name("bucket_remote", tests, NULL, NULL);
}
