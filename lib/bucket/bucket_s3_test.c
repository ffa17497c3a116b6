/*
 * bucket_s3_test.c - the S3 backend against a real server (Ceph radosgw, which verifies SigV4).
 *
 * Needs STRATA_S3_ENDPOINT (host:port, plain HTTP), STRATA_S3_BUCKET, STRATA_S3_ACCESS_KEY and
 * STRATA_S3_SECRET_KEY, as printed by tests/servers/radosgw.sh; ctest runs it through that script.
 * Without STRATA_S3_ENDPOINT it says so and exits 77 (ctest: skipped).
 *
 * Runs the shared remote suite (conformance, large objects, pagination, odd keys) with ListObjects
 * v2, the remote-specific part again with v1, then S3-specific checks: a wrong secret is
 * PERMISSION_DENIED without the secret in the message, a missing bucket is FAILED_PRECONDITION,
 * credentials from the AWS environment variables work, and multipart uploads leave no visible
 * partial object.
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
#include "bucket/bucket_remote_suite.h"

static const char *endpoint, *bucket_name, *access_key, *secret_key;
static const char *list_version = "v2";

static int open_with(const char *prefix, const char *extra, const char *secret, const char *name,
                     bucket **out, strata_error *err) {
    char yaml[2048];
    snprintf(yaml, sizeof yaml,
             "type: S3\n"
             "config:\n"
             "  bucket: %s\n"
             "  endpoint: %s\n"
             "  insecure: true\n"
             "  access_key: %s\n"
             "  secret_key: %s\n"
             "  list_objects_version: %s\n"
             "  max_retries: 3\n"
             "%s"
             "prefix: %s\n",
             name, endpoint, access_key, secret, list_version, extra, prefix);
    return bucket_open_yaml_string("s3.yaml", yaml, strlen(yaml), out, err);
}

static int open_s3(const char *prefix, const char *extra, bucket **out, strata_error *err) {
    return open_with(prefix, extra, secret_key, bucket_name, out, err);
}

static void test_wrong_secret(void **state) {
    (void)state;
    bucket *b = NULL;
    strata_error err;
    assert_int_equal(open_with("wrong", "", "not-the-secret-zzz", bucket_name, &b, &err), 0);
    assert_int_equal(bucket_upload(b, "k", "v", 1, &err), -1);
    assert_int_equal(err.code, STRATA_PERMISSION_DENIED);
    assert_non_null(strstr(err.message, "SignatureDoesNotMatch"));
    assert_non_null(strstr(err.message, "upload \"wrong/k\""));
    assert_null(strstr(err.message, "not-the-secret-zzz"));
    strata_buffer buf = STRATA_BUFFER_INIT;
    assert_int_equal(bucket_get(b, "k", &buf, &err), -1);
    assert_int_equal(err.code, STRATA_PERMISSION_DENIED);
    bucket_stats stats;
    bucket_get_stats(b, &stats);
    assert_int_equal(stats.failures[BUCKET_OP_UPLOAD], 1);
    assert_int_equal(stats.failures[BUCKET_OP_GET], 1);
    bucket_close(b);
}

static void test_missing_bucket(void **state) {
    (void)state;
    bucket *b = NULL;
    strata_error err;
    assert_int_equal(open_with("x", "", secret_key, "no-such-bucket-strata", &b, &err), 0);
    strata_buffer buf = STRATA_BUFFER_INIT;
    assert_int_equal(bucket_get(b, "k", &buf, &err), -1);
    assert_int_equal(err.code, STRATA_FAILED_PRECONDITION);
    assert_non_null(strstr(err.message, "NoSuchBucket"));
    bucket_close(b);
}

static void test_environment_credentials(void **state) {
    (void)state;
    assert_int_equal(setenv("AWS_ACCESS_KEY_ID", access_key, 1), 0);
    assert_int_equal(setenv("AWS_SECRET_ACCESS_KEY", secret_key, 1), 0);
    char yaml[1024];
    snprintf(yaml, sizeof yaml,
             "type: S3\nconfig:\n  bucket: %s\n  endpoint: %s\n  insecure: true\n"
             "  bucket_lookup_type: path\nprefix: envcreds\n",
             bucket_name, endpoint);
    bucket *b = NULL;
    strata_error err;
    if (bucket_open_yaml_string("s3.yaml", yaml, strlen(yaml), &b, &err) != 0)
        fail_msg("open: %s", err.message);
    assert_int_equal(bucket_upload(b, "k", "env", 3, &err), 0);
    strata_buffer buf = STRATA_BUFFER_INIT;
    assert_int_equal(bucket_get(b, "k", &buf, &err), 0);
    assert_int_equal(buf.len, 3);
    strata_buffer_free(&buf);
    assert_int_equal(bucket_delete(b, "k", &err), 0);
    bucket_close(b);
    unsetenv("AWS_ACCESS_KEY_ID");
    unsetenv("AWS_SECRET_ACCESS_KEY");
}

/* A multipart upload replaces an existing object with the whole new one. */
static void test_multipart_replaces_whole(void **state) {
    (void)state;
    bucket *b = NULL;
    strata_error err;
    char prefix[64];
    bucket_remote_unique_prefix("s3mp", prefix, sizeof prefix);
    assert_int_equal(open_s3(prefix, "  part_size: 5MiB\n", &b, &err), 0);
    size_t len = ((size_t)11 << 20);
    uint8_t *data = malloc(len);
    assert_non_null(data);
    memset(data, 'm', len);
    assert_int_equal(bucket_upload(b, "obj", "old", 3, &err), 0);
    assert_int_equal(bucket_upload(b, "obj", data, len, &err), 0);
    bucket_object_attributes attrs;
    assert_int_equal(bucket_attributes(b, "obj", &attrs, &err), 0);
    assert_int_equal(attrs.size, len);
    free(data);
    bucket_remote_empty(b);
    bucket_close(b);
}

int main(void) {
    endpoint = getenv("STRATA_S3_ENDPOINT");
    if (endpoint == NULL || endpoint[0] == '\0') {
        printf("bucket_s3_test: SKIPPED: STRATA_S3_ENDPOINT is not set (run it through "
               "tests/servers/radosgw.sh exec, or `ctest -L storage`)\n");
        return 77;
    }
    bucket_name = getenv("STRATA_S3_BUCKET");
    access_key = getenv("STRATA_S3_ACCESS_KEY");
    secret_key = getenv("STRATA_S3_SECRET_KEY");
    if (bucket_name == NULL || access_key == NULL || secret_key == NULL) {
        printf("bucket_s3_test: STRATA_S3_BUCKET, STRATA_S3_ACCESS_KEY and STRATA_S3_SECRET_KEY "
               "must be set with STRATA_S3_ENDPOINT\n");
        return 1;
    }
    int failed = bucket_remote_suite_run("s3", open_s3, "  part_size: 5MiB\n", true);
    list_version = "v1";
    failed += bucket_remote_suite_run("s3_list_v1", open_s3, "  part_size: 5MiB\n", false);
    list_version = "v2";
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wrong_secret),
        cmocka_unit_test(test_missing_bucket),
        cmocka_unit_test(test_environment_credentials),
        cmocka_unit_test(test_multipart_replaces_whole),
    };
    failed += cmocka_run_group_tests_name("bucket_s3", tests, NULL, NULL);
    return failed == 0 ? 0 : 1;
}
