/*
 * bucket_azure_test.c - the AZURE backend against Azurite (which verifies SharedKey signatures).
 *
 * Needs STRATA_AZURE_ENDPOINT (http://host:port), STRATA_AZURE_ACCOUNT, STRATA_AZURE_KEY and
 * STRATA_AZURE_CONTAINER, as printed by tests/servers/azurite.sh; ctest runs it through that
 * script. Without STRATA_AZURE_ENDPOINT it says so and exits 77 (ctest: skipped).
 *
 * Runs the shared remote suite (conformance, large objects through Put Block / Put Block List,
 * pagination, odd keys), then Azure-specific checks: a wrong key is PERMISSION_DENIED without the
 * key in the message, a missing container is FAILED_PRECONDITION (or created at open), and a
 * connection string works in place of the separate keys.
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

static const char *endpoint, *account, *key, *container;

static int open_with(const char *prefix, const char *extra, const char *account_key,
                     const char *name, bucket **out, strata_error *err) {
    char yaml[2048];
    snprintf(yaml, sizeof yaml,
             "type: AZURE\n"
             "config:\n"
             "  storage_account: %s\n"
             "  storage_account_key: '%s'\n"
             "  container: %s\n"
             "  endpoint: %s\n"
             "  max_retries: 3\n"
             "%s"
             "prefix: %s\n",
             account, account_key, name, endpoint, extra, prefix);
    return bucket_open_yaml_string("azure.yaml", yaml, strlen(yaml), out, err);
}

static int open_azure(const char *prefix, const char *extra, bucket **out, strata_error *err) {
    return open_with(prefix, extra, key, container, out, err);
}

static void test_wrong_key(void **state) {
    (void)state;
    bucket *b = NULL;
    strata_error err;
    /* "wrongkey" in base64; opening creates no container, so it succeeds. */
    const char *wrong = "d3Jvbmdrd3Jvbmdr";
    assert_int_equal(
        open_with("wrong", "  storage_create_container: false\n", wrong, container, &b, &err), 0);
    assert_int_equal(bucket_upload(b, "k", "v", 1, &err), -1);
    assert_int_equal(err.code, STRATA_PERMISSION_DENIED);
    assert_non_null(
        strstr(err.message, "azure container strata-test: upload \"wrong/k\": HTTP 403"));
    assert_null(strstr(err.message, wrong));
    bucket_close(b);
    /* With a wrong key, creating the container at open fails and names the operation. */
    assert_int_equal(open_with("wrong", "", wrong, container, &b, &err), -1);
    assert_int_equal(err.code, STRATA_PERMISSION_DENIED);
    assert_non_null(strstr(err.message, "create container"));
}

static void test_missing_container(void **state) {
    (void)state;
    bucket *b = NULL;
    strata_error err;
    assert_int_equal(
        open_with("x", "  storage_create_container: false\n", key, "no-such-container", &b, &err),
        0);
    strata_buffer buf = STRATA_BUFFER_INIT;
    assert_int_equal(bucket_get(b, "k", &buf, &err), -1);
    assert_int_equal(err.code, STRATA_FAILED_PRECONDITION);
    assert_non_null(strstr(err.message, "ContainerNotFound"));
    bucket_close(b);
    /* Created at open by default, then usable. */
    assert_int_equal(open_with("x", "", key, "created-by-strata", &b, &err), 0);
    assert_int_equal(bucket_upload(b, "k", "v", 1, &err), 0);
    assert_int_equal(bucket_delete(b, "k", &err), 0);
    bucket_close(b);
}

static void test_connection_string(void **state) {
    (void)state;
    char yaml[1024];
    snprintf(yaml, sizeof yaml,
             "type: AZURE\nconfig:\n  container: %s\n  storage_connection_string: "
             "'DefaultEndpointsProtocol=http;AccountName=%s;AccountKey=%s;BlobEndpoint=%s/%s;'\n"
             "prefix: connstr\n",
             container, account, key, endpoint, account);
    bucket *b = NULL;
    strata_error err;
    if (bucket_open_yaml_string("azure.yaml", yaml, strlen(yaml), &b, &err) != 0)
        fail_msg("open: %s", err.message);
    assert_int_equal(bucket_upload(b, "k", "conn", 4, &err), 0);
    strata_buffer buf = STRATA_BUFFER_INIT;
    assert_int_equal(bucket_get_range(b, "k", 1, 2, &buf, &err), 0);
    assert_int_equal(buf.len, 2);
    assert_memory_equal(buf.data, "on", 2);
    strata_buffer_free(&buf);
    assert_int_equal(bucket_delete(b, "k", &err), 0);
    bucket_close(b);
}

int main(void) {
    endpoint = getenv("STRATA_AZURE_ENDPOINT");
    if (endpoint == NULL || endpoint[0] == '\0') {
        printf("bucket_azure_test: SKIPPED: STRATA_AZURE_ENDPOINT is not set (run it through "
               "tests/servers/azurite.sh exec, or `ctest -L storage`)\n");
        return 77;
    }
    account = getenv("STRATA_AZURE_ACCOUNT");
    key = getenv("STRATA_AZURE_KEY");
    container = getenv("STRATA_AZURE_CONTAINER");
    if (account == NULL || key == NULL || container == NULL) {
        printf("bucket_azure_test: STRATA_AZURE_ACCOUNT, STRATA_AZURE_KEY and "
               "STRATA_AZURE_CONTAINER must be set with STRATA_AZURE_ENDPOINT\n");
        return 1;
    }
    /* Blobs above 8 MiB go up as 5 MiB blocks, so the 12 MiB test object takes three. */
    bucket_azure_put_blob_max = (size_t)8 << 20;
    bucket_azure_block_size = (size_t)5 << 20;
    int failed = bucket_remote_suite_run("azure", open_azure, "", true);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wrong_key),
        cmocka_unit_test(test_missing_container),
        cmocka_unit_test(test_connection_string),
    };
    failed += cmocka_run_group_tests_name("bucket_azure", tests, NULL, NULL);
    return failed == 0 ? 0 : 1;
}
