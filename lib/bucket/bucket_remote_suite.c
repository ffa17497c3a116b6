/*
 * bucket_remote_suite.c - conformance plus remote-specific checks (see bucket_remote_suite.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bucket/bucket_conformance.h"
#include "bucket/bucket_remote.h"
#include "bucket/bucket_remote_suite.h"
#include "common/array.h"

static const char *suite_name;
static bucket_remote_open_fn suite_open;
static const char *suite_large_extra;

void bucket_remote_unique_prefix(const char *name, char *out, size_t out_len) {
    static int counter;
    snprintf(out, out_len, "%s-%ld-%d", name, (long)getpid(), ++counter);
}

typedef struct key_vec {
    char **keys;
    size_t count, cap;
} key_vec;

static int collect(const char *key, void *ctx, strata_error *err) {
    (void)err;
    key_vec *v = ctx;
    assert_int_equal(STRATA_ARRAY_RESERVE(v->keys, v->cap, v->count + 1), 0);
    v->keys[v->count] = strdup(key);
    assert_non_null(v->keys[v->count]);
    v->count++;
    return 0;
}

static void key_vec_free(key_vec *v) {
    for (size_t i = 0; i < v->count; i++)
        free(v->keys[i]);
    free(v->keys);
    memset(v, 0, sizeof *v);
}

void bucket_remote_empty(bucket *b) {
    key_vec keys = {0};
    strata_error err;
    if (bucket_iterate(b, "", true, collect, &keys, &err) != 0)
        print_error("cleanup: listing failed: %s\n", err.message);
    for (size_t i = 0; i < keys.count; i++)
        if (bucket_delete(b, keys.keys[i], &err) != 0)
            print_error("cleanup: delete %s: %s\n", keys.keys[i], err.message);
    key_vec_free(&keys);
}

/* ---- Conformance ------------------------------------------------------------------------------
 */

static int conformance_open(void *ctx, bucket **out, strata_error *err) {
    (void)ctx;
    char prefix[128];
    bucket_remote_unique_prefix(suite_name, prefix, sizeof prefix);
    return suite_open(prefix, "", out, err);
}

static void conformance_cleanup(void *ctx, bucket *b) {
    (void)ctx;
    if (b == NULL)
        return;
    bucket_remote_empty(b);
    bucket_close(b);
}

/* ---- Remote-specific tests --------------------------------------------------------------------
 */

static int setup(void **state) {
    char prefix[128];
    bucket_remote_unique_prefix(suite_name, prefix, sizeof prefix);
    bucket *b = NULL;
    strata_error err;
    if (suite_open(prefix, suite_large_extra, &b, &err) != 0) {
        print_error("cannot open bucket: %s\n", err.message);
        return -1;
    }
    *state = b;
    return 0;
}

static int teardown(void **state) {
    conformance_cleanup(NULL, *state);
    return 0;
}

static uint8_t *pattern(size_t len, uint32_t seed) {
    uint8_t *p = malloc(len);
    assert_non_null(p);
    uint32_t x = seed;
    for (size_t i = 0; i < len; i++) {
        x = x * 1103515245u + 12345u;
        p[i] = (uint8_t)(x >> 16);
    }
    return p;
}

/* 12 MiB + 1: three parts of 5 MiB (S3) or blocks (Azure), read whole and across boundaries. */
static void test_large_object(void **state) {
    bucket *b = *state;
    size_t len = ((size_t)12 << 20) + 1;
    uint8_t *data = pattern(len, 7);
    strata_error err;
    if (bucket_upload(b, "large/object", data, len, &err) != 0)
        fail_msg("upload: %s", err.message);
    bucket_object_attributes attrs;
    assert_int_equal(bucket_attributes(b, "large/object", &attrs, &err), 0);
    assert_int_equal(attrs.size, len);
    strata_buffer buf = STRATA_BUFFER_INIT;
    assert_int_equal(bucket_get(b, "large/object", &buf, &err), 0);
    assert_int_equal(buf.len, len);
    assert_memory_equal(buf.data, data, len);
    const uint64_t boundary = (uint64_t)5 << 20;
    strata_buffer_reset(&buf);
    assert_int_equal(bucket_get_range(b, "large/object", boundary - 100, 200, &buf, &err), 0);
    assert_int_equal(buf.len, 200);
    assert_memory_equal(buf.data, data + boundary - 100, 200);
    strata_buffer_reset(&buf);
    assert_int_equal(bucket_get_range(b, "large/object", len - 10, BUCKET_TO_END, &buf, &err), 0);
    assert_int_equal(buf.len, 10);
    assert_memory_equal(buf.data, data + len - 10, 10);
    strata_buffer_reset(&buf);
    assert_int_equal(bucket_get_range(b, "large/object", len, 5, &buf, &err), 0);
    assert_int_equal(buf.len, 0);
    assert_int_equal(bucket_get_range(b, "large/object", len + 1, 5, &buf, &err), -1);
    assert_int_equal(err.code, STRATA_OUT_OF_RANGE);
    /* The same object sent from a file, in parts read one at a time. */
    FILE *f = tmpfile();
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    assert_int_equal(fflush(f), 0);
    if (bucket_upload_file(b, "large/from-file", fileno(f), len, &err) != 0)
        fail_msg("upload_file: %s", err.message);
    fclose(f);
    strata_buffer_reset(&buf);
    assert_int_equal(bucket_get(b, "large/from-file", &buf, &err), 0);
    assert_int_equal(buf.len, len);
    assert_memory_equal(buf.data, data, len);
    /* Replacing a large object with a small one leaves only the small one. */
    assert_int_equal(bucket_upload(b, "large/object", "small", 5, &err), 0);
    strata_buffer_reset(&buf);
    assert_int_equal(bucket_get(b, "large/object", &buf, &err), 0);
    assert_int_equal(buf.len, 5);
    strata_buffer_free(&buf);
    free(data);
}

/* 45 objects listed 7 per page: recursive, flat with directories, and stopped early. */
static void test_pagination(void **state) {
    bucket *b = *state;
    int saved = bucket_remote_list_page_size;
    bucket_remote_list_page_size = 7;
    strata_error err;
    for (int i = 0; i < 45; i++) {
        char key[64];
        if (i % 3 == 0)
            snprintf(key, sizeof key, "p/d%02d/x", i);
        else
            snprintf(key, sizeof key, "p/o%02d", i);
        assert_int_equal(bucket_upload(b, key, key, strlen(key), &err), 0);
    }
    key_vec all = {0}, flat = {0};
    assert_int_equal(bucket_iterate(b, "p", true, collect, &all, &err), 0);
    assert_int_equal(all.count, 45);
    for (size_t i = 1; i < all.count; i++)
        assert_true(strcmp(all.keys[i - 1], all.keys[i]) < 0);
    assert_int_equal(bucket_iterate(b, "p/", false, collect, &flat, &err), 0);
    assert_int_equal(flat.count, 45);
    assert_string_equal(flat.keys[0], "p/d00/");
    assert_string_equal(flat.keys[15], "p/o01");
    for (size_t i = 1; i < flat.count; i++)
        assert_true(strcmp(flat.keys[i - 1], flat.keys[i]) < 0);
    key_vec_free(&all);
    key_vec_free(&flat);
    /* Each page is a request, and counts as one. S3 starts a listing after a name on the server:
     * the 14 names after "o24" come in 2 pages, not the 7 of the whole directory (AZURE, which
     * cannot, reads all 7 and skips). */
    bucket_stats before, after;
    bucket_get_stats(b, &before);
    assert_int_equal(bucket_iterate(b, "p/", false, collect, &flat, &err), 0);
    bucket_get_stats(b, &after);
    assert_int_equal(after.operations[BUCKET_OP_ITERATE] - before.operations[BUCKET_OP_ITERATE], 7);
    key_vec_free(&flat);
    assert_int_equal(bucket_iterate_after(b, "p/", "o24", false, collect, &flat, &err), 0);
    assert_int_equal(flat.count, 14);
    assert_string_equal(flat.keys[0], "p/o25");
    bucket_get_stats(b, &before);
    bool s3 = strcmp(bucket_type(b), "S3") == 0;
    assert_int_equal(before.operations[BUCKET_OP_ITERATE] - after.operations[BUCKET_OP_ITERATE],
                     s3 ? 2 : 7);
    key_vec_free(&flat);
    bucket_remote_list_page_size = saved;
}

/* Keys needing escaping in URLs and XML round-trip and list back unchanged. */
static void test_odd_keys(void **state) {
    bucket *b = *state;
    const char *keys[] = {"odd/a b",
                          "odd/amp&lt",
                          "odd/percent%41",
                          "odd/plus+eq=q?h#",
                          "odd/unicode-\xc3\xa9t\xc3\xa9",
                          "odd/quote\"'<>"};
    size_t n = sizeof keys / sizeof keys[0];
    strata_error err;
    for (size_t i = 0; i < n; i++)
        if (bucket_upload(b, keys[i], keys[i], strlen(keys[i]), &err) != 0)
            fail_msg("upload %s: %s", keys[i], err.message);
    key_vec got = {0};
    assert_int_equal(bucket_iterate(b, "odd", true, collect, &got, &err), 0);
    assert_int_equal(got.count, n);
    for (size_t i = 0; i < n; i++) {
        strata_buffer buf = STRATA_BUFFER_INIT;
        if (bucket_get(b, keys[i], &buf, &err) != 0)
            fail_msg("get %s: %s", keys[i], err.message);
        assert_int_equal(buf.len, strlen(keys[i]));
        assert_memory_equal(buf.data, keys[i], buf.len);
        strata_buffer_free(&buf);
        bool found = false;
        for (size_t j = 0; j < got.count; j++)
            found |= strcmp(got.keys[j], keys[i]) == 0;
        if (!found)
            fail_msg("%s not listed", keys[i]);
    }
    key_vec_free(&got);
}

int bucket_remote_suite_run(const char *name, bucket_remote_open_fn open, const char *large_extra,
                            bool with_conformance) {
    suite_name = name;
    suite_open = open;
    suite_large_extra = large_extra;
    char group[128];
    snprintf(group, sizeof group, "bucket_conformance_%s", name);
    bucket_conformance_backend backend = {
        .name = group, .open = conformance_open, .cleanup = conformance_cleanup};
    int failed = with_conformance ? bucket_conformance_run(&backend) : 0;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_large_object, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pagination, setup, teardown),
        cmocka_unit_test_setup_teardown(test_odd_keys, setup, teardown),
    };
    snprintf(group, sizeof group, "bucket_remote_%s", name);
    return failed +
           _cmocka_run_group_tests(group, tests, sizeof tests / sizeof tests[0], NULL, NULL);
}
