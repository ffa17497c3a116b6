/*
 * bucket_test.c - the conformance suite on the FILESYSTEM backend, plus what is specific to it
 * (on-disk layout, temporary files, directory pruning, conflicts), prefixes and YAML config.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bucket/bucket.h"
#include "bucket/bucket_conformance.h"

/* ---- Temporary directories --------------------------------------------------------------------
 */

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void remove_tree(const char *dir) {
    nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static char *make_temp_dir(void) {
    char *dir = strdup("/tmp/strata-bucket-test-XXXXXX");
    assert_non_null(dir);
    assert_non_null(mkdtemp(dir));
    return dir;
}

static bool path_exists(const char *root, const char *rel) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    struct stat st;
    return stat(path, &st) == 0;
}

static size_t count_entries(const char *dir) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "find %s -mindepth 1 | wc -l", dir);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = 0;
    assert_int_equal(fscanf(p, "%zu", &n), 1);
    pclose(p);
    return n;
}

/* ---- Conformance on FILESYSTEM ----------------------------------------------------------------
 */

typedef struct fs_fixture {
    char *dir;
    const char *prefix;
} fs_fixture;

static int fs_open(void *ctx, bucket **out, strata_error *err) {
    fs_fixture *f = ctx;
    f->dir = make_temp_dir();
    return bucket_open_filesystem(f->dir, f->prefix, out, err);
}

static void fs_cleanup(void *ctx, bucket *b) {
    fs_fixture *f = ctx;
    bucket_close(b);
    remove_tree(f->dir);
    free(f->dir);
    f->dir = NULL;
}

/* ---- FILESYSTEM specifics ---------------------------------------------------------------------
 */

typedef struct fs_state {
    char *dir;
    bucket *b;
} fs_state;

static int fs_setup(void **state) {
    fs_state *s = calloc(1, sizeof *s);
    assert_non_null(s);
    s->dir = make_temp_dir();
    strata_error err;
    if (bucket_open_filesystem(s->dir, NULL, &s->b, &err) != 0)
        fail_msg("%s", err.message);
    *state = s;
    return 0;
}

static int fs_teardown(void **state) {
    fs_state *s = *state;
    bucket_close(s->b);
    remove_tree(s->dir);
    free(s->dir);
    free(s);
    return 0;
}

static void put(bucket *b, const char *key, const char *text) {
    strata_error err;
    if (bucket_upload(b, key, text, strlen(text), &err) != 0)
        fail_msg("upload %s: %s", key, err.message);
}

static int count_keys(const char *key, void *ctx, strata_error *err) {
    (void)key;
    (void)err;
    ++*(size_t *)ctx;
    return 0;
}

static void test_fs_layout_and_pruning(void **state) {
    fs_state *s = *state;
    put(s->b, "01H/chunks/000001", "c");
    put(s->b, "01H/meta.json", "m");
    assert_true(path_exists(s->dir, "01H/chunks/000001"));
    assert_int_equal(count_entries(s->dir), 4); /* 01H, chunks, 000001, meta.json: no temps */
    strata_error err;
    assert_int_equal(bucket_delete(s->b, "01H/chunks/000001", &err), 0);
    assert_false(path_exists(s->dir, "01H/chunks"));
    assert_true(path_exists(s->dir, "01H"));
    assert_int_equal(bucket_delete(s->b, "01H/meta.json", &err), 0);
    assert_false(path_exists(s->dir, "01H"));
    assert_true(path_exists(s->dir, "")); /* the root stays */
    assert_int_equal(count_entries(s->dir), 0);
}

static void test_fs_skips_temp_files_and_rejects_reserved_keys(void **state) {
    fs_state *s = *state;
    put(s->b, "d/real", "r");
    char path[512];
    snprintf(path, sizeof path, "%s/d/.strata-tmp.123.4", s->dir);
    int fd = open(path, O_WRONLY | O_CREAT, 0644);
    assert_true(fd >= 0);
    close(fd);
    size_t n = 0;
    strata_error err;
    assert_int_equal(bucket_iterate(s->b, "", true, count_keys, &n, &err), 0);
    assert_int_equal(n, 1);
    strata_buffer buf = STRATA_BUFFER_INIT;
    assert_int_equal(bucket_get(s->b, "d/.strata-tmp.123.4", &buf, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_int_equal(bucket_upload(s->b, ".strata-tmp.x/y", "x", 1, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    char long_segment[300];
    memset(long_segment, 'a', sizeof long_segment - 1);
    long_segment[sizeof long_segment - 1] = '\0';
    assert_int_equal(bucket_upload(s->b, long_segment, "x", 1, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
}

static void test_fs_object_directory_conflicts(void **state) {
    fs_state *s = *state;
    put(s->b, "a/b", "x");
    strata_error err;
    assert_int_equal(bucket_upload(s->b, "a", "y", 1, &err), -1);
    assert_int_equal(err.code, STRATA_FAILED_PRECONDITION);
    assert_int_equal(bucket_upload(s->b, "a/b/c", "z", 1, &err), -1);
    assert_int_equal(err.code, STRATA_FAILED_PRECONDITION);
    assert_int_equal(bucket_delete(s->b, "a", &err), 0); /* not an object: nothing deleted */
    assert_true(path_exists(s->dir, "a/b"));
}

static void test_fs_open_errors(void **state) {
    (void)state;
    bucket *b;
    strata_error err;
    assert_int_equal(bucket_open_filesystem("", NULL, &b, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_null(b);
    char *dir = make_temp_dir();
    char file[512];
    snprintf(file, sizeof file, "%s/file", dir);
    int fd = open(file, O_WRONLY | O_CREAT, 0644);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(bucket_open_filesystem(file, NULL, &b, &err), -1);
    assert_int_equal(err.code, STRATA_FAILED_PRECONDITION);
    /* A missing root is created, parents included. */
    char nested[512];
    snprintf(nested, sizeof nested, "%s/x/y/z", dir);
    assert_int_equal(bucket_open_filesystem(nested, NULL, &b, &err), 0);
    assert_string_equal(bucket_type(b), "FILESYSTEM");
    bucket_close(b);
    assert_true(path_exists(dir, "x/y/z"));
    remove_tree(dir);
    free(dir);
}

static void test_prefix(void **state) {
    fs_state *s = *state;
    bucket *tenant;
    strata_error err;
    assert_int_equal(bucket_open_filesystem(s->dir, "/tenants/a/", &tenant, &err), 0);
    assert_string_equal(bucket_prefix(tenant), "tenants/a");
    put(tenant, "blocks/1/meta.json", "{}");
    assert_true(path_exists(s->dir, "tenants/a/blocks/1/meta.json"));

    size_t n = 0;
    assert_int_equal(bucket_iterate(tenant, "", true, count_keys, &n, &err), 0);
    assert_int_equal(n, 1);
    strata_buffer buf = STRATA_BUFFER_INIT;
    assert_int_equal(bucket_get(tenant, "blocks/1/meta.json", &buf, &err), 0);
    assert_int_equal(buf.len, 2);
    strata_buffer_free(&buf);
    /* The unprefixed bucket sees the tenant's directory. */
    bool exists;
    assert_int_equal(bucket_exists(s->b, "tenants/a/blocks/1/meta.json", &exists, &err), 0);
    assert_true(exists);
    assert_int_equal(bucket_delete(tenant, "blocks/1/meta.json", &err), 0);
    assert_false(path_exists(s->dir, "tenants"));
    bucket_close(tenant);

    bucket *none;
    assert_int_equal(bucket_open_filesystem(s->dir, "/", &none, &err), 0);
    assert_string_equal(bucket_prefix(none), "");
    bucket_close(none);
    assert_int_equal(bucket_open_filesystem(s->dir, "a/../b", &none, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_string_equal(err.message, "invalid bucket prefix: invalid object key \"a/../b\": keys "
                                     "must not contain \".\" or \"..\" segments");
}

/* ---- YAML configuration -----------------------------------------------------------------------
 */

static int open_yaml(const char *yaml, bucket **b, strata_error *err) {
    return bucket_open_yaml_string("bucket.yaml", yaml, strlen(yaml), b, err);
}

static void expect_yaml_error(const char *yaml, strata_status code, const char *message) {
    bucket *b = NULL;
    strata_error err;
    assert_int_equal(open_yaml(yaml, &b, &err), -1);
    assert_null(b);
    assert_int_equal(err.code, code);
    assert_string_equal(err.message, message);
}

static void test_config_opens_filesystem(void **state) {
    fs_state *s = *state;
    char yaml[512];
    snprintf(yaml, sizeof yaml,
             "type: filesystem\n"
             "config:\n"
             "  directory: %s\n"
             "prefix: /t1/\n",
             s->dir);
    bucket *b;
    strata_error err;
    if (open_yaml(yaml, &b, &err) != 0)
        fail_msg("%s", err.message);
    assert_string_equal(bucket_type(b), "FILESYSTEM");
    assert_string_equal(bucket_prefix(b), "t1");
    put(b, "k", "v");
    assert_true(path_exists(s->dir, "t1/k"));
    bucket_close(b);

    char path[512];
    snprintf(path, sizeof path, "%s/objstore.yaml", s->dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "type: FILESYSTEM\nconfig:\n  directory: %s/data\n", s->dir);
    fclose(f);
    assert_int_equal(bucket_open_yaml_file(path, &b, &err), 0);
    assert_string_equal(bucket_prefix(b), "");
    bucket_close(b);
    assert_true(path_exists(s->dir, "data"));
}

static void test_config_errors(void **state) {
    (void)state;
    expect_yaml_error("type: FILESYSTEM\nconfig:\n  directry: /tmp/x\n", STRATA_INVALID_ARGUMENT,
                      "bucket.yaml:3:3: config: unknown key \"directry\" (expected one of: "
                      "directory)");
    expect_yaml_error("type: FILESYSTEM\nconfig:\n  directory: /tmp/x\nregion: eu\n",
                      STRATA_INVALID_ARGUMENT,
                      "bucket.yaml:4:1: unknown key \"region\" (expected one of: type, config, "
                      "prefix)");
    expect_yaml_error("type: gcs\nconfig:\n  bucket: b\n", STRATA_UNIMPLEMENTED,
                      "bucket.yaml:1:7: type: bucket type \"GCS\" is not supported in this "
                      "build yet (supported: FILESYSTEM, S3, AZURE)");
    expect_yaml_error("type: SWIFT\n", STRATA_UNIMPLEMENTED,
                      "bucket.yaml:1:7: type: bucket type \"SWIFT\" is not supported in this "
                      "build yet (supported: FILESYSTEM, S3, AZURE)");
    expect_yaml_error("type: FTP\n", STRATA_INVALID_ARGUMENT,
                      "bucket.yaml:1:7: type: unknown bucket type \"FTP\" (expected one of: "
                      "FILESYSTEM, S3, AZURE, GCS, SWIFT, COS, ALIYUNOSS, BOS, OCI, OBS)");
    expect_yaml_error("type: FILESYSTEM\n", STRATA_INVALID_ARGUMENT,
                      "bucket.yaml:1:1: missing required key \"config\" (FILESYSTEM needs "
                      "config.directory)");
    expect_yaml_error("type: FILESYSTEM\nconfig: {}\n", STRATA_INVALID_ARGUMENT,
                      "bucket.yaml:2:9: config: missing required key \"directory\"");
    expect_yaml_error("type: FILESYSTEM\nconfig:\n  directory: ''\n", STRATA_INVALID_ARGUMENT,
                      "bucket.yaml:3:14: config.directory: directory must not be empty");
    expect_yaml_error("config:\n  directory: /tmp/x\n", STRATA_INVALID_ARGUMENT,
                      "bucket.yaml:1:1: missing required key \"type\"");
    expect_yaml_error("type: FILESYSTEM\nconfig:\n  directory: /tmp/x\nprefix: a//b\n",
                      STRATA_INVALID_ARGUMENT,
                      "bucket.yaml:4:9: prefix: invalid bucket prefix: invalid object key "
                      "\"a//b\": keys must not contain empty segments (\"//\")");
    expect_yaml_error("", STRATA_INVALID_ARGUMENT,
                      "bucket.yaml: bucket configuration is empty (need type and config)");
    expect_yaml_error("type: [FILESYSTEM]\n", STRATA_INVALID_ARGUMENT,
                      "bucket.yaml:1:7: type: expected a string, got a list");
    expect_yaml_error("type: FILESYSTEM\n\tconfig: {}\n", STRATA_INVALID_ARGUMENT,
                      "bucket.yaml:2:1: found a tab character that violates indentation (while "
                      "scanning a plain scalar at line 1)");
    expect_yaml_error("type: FILESYSTEM\nconfig:\n  directory: /proc/strata-cannot-exist\n",
                      STRATA_FAILED_PRECONDITION,
                      "bucket.yaml:3:14: config.directory: filesystem bucket "
                      "/proc/strata-cannot-exist: cannot create directory: No such file or "
                      "directory");
    bucket *b;
    strata_error err;
    assert_int_equal(bucket_open_config(NULL, &b, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
}

/* A service config embedding the bucket under `bucket:` keeps it raw and opens it later. */
typedef struct service_config {
    char *name;
    config_raw bucket;
} service_config;

static const config_field service_fields[] = {
    {.key = "name", .kind = CONFIG_STRING, .offset = offsetof(service_config, name)},
    {.key = "bucket",
     .kind = CONFIG_RAW,
     .offset = offsetof(service_config, bucket),
     .required = true},
    {0},
};

static void test_config_embedded_in_service(void **state) {
    fs_state *s = *state;
    char yaml[512];
    snprintf(yaml, sizeof yaml,
             "name: ingester\n"
             "bucket:\n"
             "  type: FILESYSTEM\n"
             "  config:\n"
             "    directory: %s\n"
             "    directry: typo\n",
             s->dir);
    config_document *doc;
    strata_error err;
    assert_int_equal(config_load_string("strata.yaml", yaml, strlen(yaml), &doc, &err), 0);
    service_config cfg;
    assert_int_equal(config_decode_document(doc, service_fields, &cfg, &err), 0);
    config_document_free(doc);
    bucket *b;
    assert_int_equal(bucket_open_config(cfg.bucket.node, &b, &err), -1);
    assert_string_equal(err.message, "strata.yaml:6:5: bucket.config: unknown key \"directry\" "
                                     "(expected one of: directory)");
    config_free(service_fields, &cfg);
}

int main(void) {
    fs_fixture plain = {0}, prefixed = {.prefix = "tenant/x"};
    bucket_conformance_backend backends[] = {
        {"bucket_conformance_filesystem", fs_open, fs_cleanup, &plain},
        {"bucket_conformance_filesystem_prefixed", fs_open, fs_cleanup, &prefixed},
    };
    int failed = 0;
    for (size_t i = 0; i < sizeof backends / sizeof backends[0]; i++)
        failed += bucket_conformance_run(&backends[i]);

    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fs_layout_and_pruning, fs_setup, fs_teardown),
        cmocka_unit_test_setup_teardown(test_fs_skips_temp_files_and_rejects_reserved_keys,
                                        fs_setup, fs_teardown),
        cmocka_unit_test_setup_teardown(test_fs_object_directory_conflicts, fs_setup, fs_teardown),
        cmocka_unit_test(test_fs_open_errors),
        cmocka_unit_test_setup_teardown(test_prefix, fs_setup, fs_teardown),
        cmocka_unit_test_setup_teardown(test_config_opens_filesystem, fs_setup, fs_teardown),
        cmocka_unit_test(test_config_errors),
        cmocka_unit_test_setup_teardown(test_config_embedded_in_service, fs_setup, fs_teardown),
    };
    failed += cmocka_run_group_tests_name("bucket_filesystem", tests, NULL, NULL);
    return failed == 0 ? 0 : 1;
}
