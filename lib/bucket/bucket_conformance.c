/*
 * bucket_conformance.c - the backend-independent bucket suite (see bucket_conformance.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bucket/bucket_conformance.h"
#include "common/array.h"
#include "common/clock.h"

static const bucket_conformance_backend *current;

/* ---- Helpers ----------------------------------------------------------------------------------
 */

static int setup(void **state) {
    bucket *b = NULL;
    strata_error err;
    if (current->open(current->ctx, &b, &err) != 0) {
        print_error("cannot open bucket: %s\n", err.message);
        return -1;
    }
    *state = b;
    return 0;
}

static int teardown(void **state) {
    current->cleanup(current->ctx, *state);
    return 0;
}

static void put(bucket *b, const char *key, const char *text) {
    strata_error err;
    if (bucket_upload(b, key, text, strlen(text), &err) != 0)
        fail_msg("upload %s: %s", key, err.message);
}

/* Reads key and compares it with text. */
static void expect_object(bucket *b, const char *key, const char *text) {
    strata_buffer buf = STRATA_BUFFER_INIT;
    strata_error err;
    if (bucket_get(b, key, &buf, &err) != 0)
        fail_msg("get %s: %s", key, err.message);
    assert_int_equal(buf.len, strlen(text));
    assert_memory_equal(buf.data, text, buf.len);
    strata_buffer_free(&buf);
}

static void expect_range(bucket *b, const char *key, uint64_t offset, uint64_t length,
                         const char *text) {
    strata_buffer buf = STRATA_BUFFER_INIT;
    strata_error err;
    if (bucket_get_range(b, key, offset, length, &buf, &err) != 0)
        fail_msg("get_range %s %llu: %s", key, (unsigned long long)offset, err.message);
    assert_int_equal(buf.len, strlen(text));
    if (buf.len > 0)
        assert_memory_equal(buf.data, text, buf.len);
    strata_buffer_free(&buf);
}

typedef struct key_list {
    char **keys;
    size_t count, cap;
    size_t stop_after; /* 0: never stop */
} key_list;

static int collect(const char *key, void *ctx, strata_error *err) {
    (void)err;
    key_list *l = ctx;
    assert_int_equal(STRATA_ARRAY_RESERVE(l->keys, l->cap, l->count + 1), 0);
    l->keys[l->count] = strdup(key);
    assert_non_null(l->keys[l->count]);
    l->count++;
    return l->stop_after != 0 && l->count == l->stop_after ? BUCKET_ITER_STOP : 0;
}

static void key_list_free(key_list *l) {
    for (size_t i = 0; i < l->count; i++)
        free(l->keys[i]);
    free(l->keys);
    memset(l, 0, sizeof *l);
}

/* Lists dir after `after` and compares with the NULL-terminated expected keys, in order. */
static void expect_listing_after(bucket *b, const char *dir, const char *after, bool recursive,
                                 const char *const *want) {
    key_list got = {0};
    strata_error err;
    if (bucket_iterate_after(b, dir, after, recursive, collect, &got, &err) != 0)
        fail_msg("iterate %s after %s: %s", dir, after, err.message);
    size_t n = 0;
    while (want[n] != NULL)
        n++;
    for (size_t i = 0; i < got.count && i < n; i++)
        assert_string_equal(got.keys[i], want[i]);
    assert_int_equal(got.count, n);
    key_list_free(&got);
}

static void expect_listing(bucket *b, const char *dir, bool recursive, const char *const *want) {
    expect_listing_after(b, dir, "", recursive, want);
}

/* ---- Tests ------------------------------------------------------------------------------------
 */

static void test_put_get(void **state) {
    bucket *b = *state;
    put(b, "a/b/c.txt", "hello");
    expect_object(b, "a/b/c.txt", "hello");
    put(b, "top", "");
    expect_object(b, "top", "");
    put(b, ".hidden/x y", "spaces and dots are fine");
    expect_object(b, ".hidden/x y", "spaces and dots are fine");

    /* get appends to what the buffer holds. */
    strata_buffer buf = STRATA_BUFFER_INIT;
    strata_error err;
    assert_int_equal(strata_buffer_append_str(&buf, ">>"), 0);
    assert_int_equal(bucket_get(b, "a/b/c.txt", &buf, &err), 0);
    assert_int_equal(buf.len, 7);
    assert_memory_equal(buf.data, ">>hello", 7);
    strata_buffer_free(&buf);

    /* Binary data with NUL bytes round-trips. */
    uint8_t bytes[4096];
    for (size_t i = 0; i < sizeof bytes; i++)
        bytes[i] = (uint8_t)(i * 31);
    assert_int_equal(bucket_upload(b, "bin", bytes, sizeof bytes, &err), 0);
    assert_int_equal(bucket_get(b, "bin", &buf, &err), 0);
    assert_int_equal(buf.len, sizeof bytes);
    assert_memory_equal(buf.data, bytes, sizeof bytes);
    strata_buffer_free(&buf);
}

static void test_overwrite(void **state) {
    bucket *b = *state;
    put(b, "k", "first version, longer");
    put(b, "k", "second");
    expect_object(b, "k", "second");
    bucket_object_attributes attrs;
    strata_error err;
    assert_int_equal(bucket_attributes(b, "k", &attrs, &err), 0);
    assert_int_equal(attrs.size, 6);
    expect_listing(b, "", true, (const char *const[]){"k", NULL});
}

static void test_get_range(void **state) {
    bucket *b = *state;
    put(b, "r", "0123456789");
    expect_range(b, "r", 2, 3, "234");
    expect_range(b, "r", 0, 10, "0123456789");
    expect_range(b, "r", 7, BUCKET_TO_END, "789");
    expect_range(b, "r", 8, 100, "89");
    expect_range(b, "r", 10, 5, "");
    expect_range(b, "r", 3, 0, "");

    strata_buffer buf = STRATA_BUFFER_INIT;
    strata_error err;
    assert_int_equal(strata_buffer_append_str(&buf, "keep"), 0);
    assert_int_equal(bucket_get_range(b, "r", 11, 1, &buf, &err), -1);
    assert_int_equal(err.code, STRATA_OUT_OF_RANGE);
    assert_int_equal(buf.len, 4);
    assert_int_equal(bucket_get_range(b, "nope", 0, 1, &buf, &err), -1);
    assert_int_equal(err.code, STRATA_NOT_FOUND);
    assert_int_equal(buf.len, 4);
    strata_buffer_free(&buf);
}

static void test_missing_keys(void **state) {
    bucket *b = *state;
    put(b, "dir/obj", "x");
    const char *missing[] = {"missing", "dir/missing", "dir", "dir/obj/below"};
    for (size_t i = 0; i < sizeof missing / sizeof missing[0]; i++) {
        strata_buffer buf = STRATA_BUFFER_INIT;
        strata_error err;
        assert_int_equal(bucket_get(b, missing[i], &buf, &err), -1);
        assert_int_equal(err.code, STRATA_NOT_FOUND);
        assert_int_equal(buf.len, 0);
        bucket_object_attributes attrs;
        assert_int_equal(bucket_attributes(b, missing[i], &attrs, &err), -1);
        assert_int_equal(err.code, STRATA_NOT_FOUND);
        bool exists = true;
        assert_int_equal(bucket_exists(b, missing[i], &exists, &err), 0);
        assert_false(exists);
        strata_buffer_free(&buf);
    }
    /* A NULL error is allowed. */
    strata_buffer buf = STRATA_BUFFER_INIT;
    assert_int_equal(bucket_get(b, "missing", &buf, NULL), -1);
}

static void test_exists_and_attributes(void **state) {
    bucket *b = *state;
    int64_t before = strata_now_ns();
    put(b, "blocks/01/meta.json", "{\"version\":1}");
    int64_t after = strata_now_ns();
    bool exists = false;
    strata_error err;
    assert_int_equal(bucket_exists(b, "blocks/01/meta.json", &exists, &err), 0);
    assert_true(exists);
    bucket_object_attributes attrs;
    assert_int_equal(bucket_attributes(b, "blocks/01/meta.json", &attrs, &err), 0);
    assert_int_equal(attrs.size, 13);
    /* Allow for coarse filesystem timestamps and clock skew with a remote store. */
    assert_true(attrs.last_modified_ns >= before - 2 * STRATA_NS_PER_SEC);
    assert_true(attrs.last_modified_ns <= after + 2 * STRATA_NS_PER_SEC);
}

static void test_delete(void **state) {
    bucket *b = *state;
    put(b, "x/y/z", "1");
    put(b, "x/keep", "2");
    strata_error err;
    assert_int_equal(bucket_delete(b, "x/y/z", &err), 0);
    bool exists = true;
    assert_int_equal(bucket_exists(b, "x/y/z", &exists, &err), 0);
    assert_false(exists);
    expect_object(b, "x/keep", "2");
    /* Emptied "directories" disappear from listings. */
    expect_listing(b, "x", false, (const char *const[]){"x/keep", NULL});
    assert_int_equal(bucket_delete(b, "x/y/z", &err), 0); /* again: not an error */
    assert_int_equal(bucket_delete(b, "never/was", &err), 0);
    assert_int_equal(bucket_delete(b, "x/keep", &err), 0);
    expect_listing(b, "", true, (const char *const[]){NULL});
    expect_listing(b, "", false, (const char *const[]){NULL});
}

static void test_iterate_flat_and_recursive(void **state) {
    bucket *b = *state;
    const char *keys[] = {"b", "a/2", "a/sub/3", "a-b", "a/1", "a/sub/deeper/4", "c/d"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        put(b, keys[i], keys[i]);
    expect_listing(b, "", false, (const char *const[]){"a-b", "a/", "b", "c/", NULL});
    expect_listing(b, "a", false, (const char *const[]){"a/1", "a/2", "a/sub/", NULL});
    expect_listing(b, "a/", false, (const char *const[]){"a/1", "a/2", "a/sub/", NULL});
    expect_listing(b, "a", true,
                   (const char *const[]){"a/1", "a/2", "a/sub/3", "a/sub/deeper/4", NULL});
    expect_listing(
        b, "", true,
        (const char *const[]){"a-b", "a/1", "a/2", "a/sub/3", "a/sub/deeper/4", "b", "c/d", NULL});
    expect_listing(b, "missing", false, (const char *const[]){NULL});
    expect_listing(b, "missing", true, (const char *const[]){NULL});
    expect_listing(b, "b", true, (const char *const[]){NULL}); /* an object is not a directory */
}

/* A listing that starts after a name: what a querier does to find the newest ULIDs. */
static void test_iterate_after(void **state) {
    bucket *b = *state;
    const char *keys[] = {"t/01A/meta.json", "t/01B/meta.json", "t/01B/data",
                          "t/01C/meta.json", "t/index.json",    "t/01BA"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        put(b, keys[i], keys[i]);
    expect_listing_after(
        b, "t", "01A", false,
        (const char *const[]){"t/01A/", "t/01B/", "t/01BA", "t/01C/", "t/index.json", NULL});
    expect_listing_after(b, "t/", "01B", false,
                         (const char *const[]){"t/01B/", "t/01BA", "t/01C/", "t/index.json", NULL});
    expect_listing_after(b, "t", "01BA", false,
                         (const char *const[]){"t/01C/", "t/index.json", NULL});
    expect_listing_after(b, "t", "01B0", true,
                         (const char *const[]){"t/01BA", "t/01C/meta.json", "t/index.json", NULL});
    expect_listing_after(b, "t", "z", false, (const char *const[]){NULL});
    expect_listing_after(b, "", "s", false, (const char *const[]){"t/", NULL});
    key_list got = {0};
    strata_error err;
    assert_int_equal(bucket_iterate_after(b, "t", "01A/meta.json", false, collect, &got, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    key_list_free(&got);
}

static int compare_strings(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void test_iterate_thousand_sorted(void **state) {
    bucket *b = *state;
    enum { N = 1000 };
    char *want[N];
    for (int i = 0; i < N; i++) {
        char key[64];
        /* A mix of depths and names whose order differs from creation order. */
        if (i % 3 == 0)
            snprintf(key, sizeof key, "blocks/%03d/meta.json", (i * 7919) % N);
        else if (i % 3 == 1)
            snprintf(key, sizeof key, "blocks/%03d/chunks/%06d", (i * 7919) % N, i);
        else
            snprintf(key, sizeof key, "blocks-%d", i);
        put(b, key, key);
        want[i] = strdup(key);
        assert_non_null(want[i]);
    }
    qsort(want, N, sizeof want[0], compare_strings);
    key_list got = {0};
    strata_error err;
    assert_int_equal(bucket_iterate(b, "", true, collect, &got, &err), 0);
    assert_int_equal(got.count, N);
    for (int i = 0; i < N; i++) {
        assert_string_equal(got.keys[i], want[i]);
        free(want[i]);
    }
    key_list_free(&got);

    /* Non-recursive listing of the same data: the "blocks/" directory once, then blocks-N. */
    assert_int_equal(bucket_iterate(b, "", false, collect, &got, &err), 0);
    assert_int_equal(got.count, 1 + N / 3);
    assert_string_equal(got.keys[0], "blocks-101");
    assert_string_equal(got.keys[got.count - 1], "blocks/");
    key_list_free(&got);
}

static int fail_at_second(const char *key, void *ctx, strata_error *err) {
    int *calls = ctx;
    if (++*calls == 2)
        return strata_error_set(err, STRATA_ABORTED, "callback gave up at %s", key);
    return 0;
}

static void test_iterate_stop_and_abort(void **state) {
    bucket *b = *state;
    for (int i = 0; i < 10; i++) {
        char key[16];
        snprintf(key, sizeof key, "s/%d", i);
        put(b, key, "x");
    }
    key_list got = {.stop_after = 3};
    strata_error err;
    assert_int_equal(bucket_iterate(b, "s", true, collect, &got, &err), 0);
    assert_int_equal(got.count, 3);
    assert_string_equal(got.keys[2], "s/2");
    key_list_free(&got);

    int calls = 0;
    assert_int_equal(bucket_iterate(b, "", true, fail_at_second, &calls, &err), -1);
    assert_int_equal(calls, 2);
    assert_int_equal(err.code, STRATA_ABORTED);
    assert_string_equal(err.message, "callback gave up at s/1");
}

static void test_key_validation(void **state) {
    bucket *b = *state;
    const char *bad[] = {"", "/abs", "a//b", "a/", "./a", "a/./b", "a/..", "../x", ".", ".."};
    strata_error err;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(bucket_upload(b, bad[i], "x", 1, &err), -1);
        assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
        strata_buffer buf = STRATA_BUFFER_INIT;
        assert_int_equal(bucket_get(b, bad[i], &buf, &err), -1);
        assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
        bool exists;
        assert_int_equal(bucket_exists(b, bad[i], &exists, &err), -1);
        assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
        assert_int_equal(bucket_delete(b, bad[i], &err), -1);
        assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    }
    assert_int_equal(bucket_upload(b, "a/../b", "x", 1, &err), -1);
    assert_string_equal(err.message,
                        "invalid object key \"a/../b\": keys must not contain \".\" or \"..\" "
                        "segments");
    char long_key[BUCKET_KEY_MAX + 2];
    memset(long_key, 'k', sizeof long_key - 1);
    long_key[sizeof long_key - 1] = '\0';
    assert_int_equal(bucket_upload(b, long_key, "x", 1, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    key_list got = {0};
    assert_int_equal(bucket_iterate(b, "/abs", false, collect, &got, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_int_equal(bucket_iterate(b, "../up", true, collect, &got, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_int_equal(got.count, 0);
    expect_listing(b, "", true, (const char *const[]){NULL});
}

static void test_stats(void **state) {
    bucket *b = *state;
    bucket_stats before, after;
    bucket_get_stats(b, &before);
    put(b, "s", "1");
    strata_buffer buf = STRATA_BUFFER_INIT;
    strata_error err;
    assert_int_equal(bucket_get(b, "s", &buf, &err), 0);
    assert_int_equal(bucket_get(b, "missing", &buf, &err), -1);       /* an answer */
    assert_int_equal(bucket_get_range(b, "s", 5, 1, &buf, &err), -1); /* an answer */
    assert_int_equal(bucket_upload(b, "/bad", "x", 1, &err), -1);     /* a failure */
    strata_buffer_free(&buf);
    bucket_get_stats(b, &after);
    assert_int_equal(after.operations[BUCKET_OP_UPLOAD] - before.operations[BUCKET_OP_UPLOAD], 2);
    assert_int_equal(after.failures[BUCKET_OP_UPLOAD] - before.failures[BUCKET_OP_UPLOAD], 1);
    assert_int_equal(after.operations[BUCKET_OP_GET] - before.operations[BUCKET_OP_GET], 2);
    assert_int_equal(after.failures[BUCKET_OP_GET] - before.failures[BUCKET_OP_GET], 0);
    assert_int_equal(after.operations[BUCKET_OP_GET_RANGE] - before.operations[BUCKET_OP_GET_RANGE],
                     1);
    assert_int_equal(after.failures[BUCKET_OP_GET_RANGE] - before.failures[BUCKET_OP_GET_RANGE], 0);
    assert_string_equal(bucket_op_name(BUCKET_OP_ITERATE), "iter");
    assert_string_equal(bucket_op_name(BUCKET_OP_GET_RANGE), "get_range");
}

/* ---- Concurrency ------------------------------------------------------------------------------
 */

enum { WRITERS = 6, ROUNDS = 40 };

typedef struct worker {
    bucket *b;
    int id;
    int errors;
    char message[STRATA_ERROR_MESSAGE_MAX + 64];
} worker;

/* A self-checking object: 8-byte length, writer id, round, then a byte pattern. */
static size_t make_object(uint8_t *out, int id, int round) {
    size_t len = 64 + (size_t)((id * 977 + round * 131) % 16000);
    memcpy(out, &len, sizeof len);
    out[8] = (uint8_t)id;
    out[9] = (uint8_t)round;
    for (size_t i = 10; i < len; i++)
        out[i] = (uint8_t)(id + round + i);
    return len;
}

static bool object_is_whole(const uint8_t *data, size_t len) {
    size_t declared;
    if (len < 10)
        return false;
    memcpy(&declared, data, sizeof declared);
    if (declared != len)
        return false;
    for (size_t i = 10; i < len; i++)
        if (data[i] != (uint8_t)(data[8] + data[9] + i))
            return false;
    return true;
}

static void worker_fail(worker *w, const char *what, const strata_error *err) {
    if (w->errors++ == 0)
        snprintf(w->message, sizeof w->message, "worker %d: %s: %s", w->id, what,
                 err != NULL ? err->message : "");
}

static void *writer_main(void *arg) {
    worker *w = arg;
    uint8_t *obj = malloc(16064 + 64);
    strata_buffer buf = STRATA_BUFFER_INIT;
    strata_error err;
    for (int round = 0; obj != NULL && round < ROUNDS; round++) {
        char key[64];
        size_t len = make_object(obj, w->id, round);
        /* Same directory as the other writers' deletes, so pruning races with creation. */
        snprintf(key, sizeof key, "conc/dir%d/w%d-r%d", round % 3, w->id, round);
        if (bucket_upload(w->b, key, obj, len, &err) != 0)
            worker_fail(w, "upload distinct", &err);
        if (bucket_upload(w->b, "conc/shared", obj, len, &err) != 0)
            worker_fail(w, "upload shared", &err);
        strata_buffer_reset(&buf);
        if (bucket_get(w->b, "conc/shared", &buf, &err) != 0)
            worker_fail(w, "get shared", &err);
        else if (!object_is_whole(buf.data, buf.len))
            worker_fail(w, "shared object torn", NULL);
        if (round % 2 == 1 && bucket_delete(w->b, key, &err) != 0)
            worker_fail(w, "delete", &err);
    }
    if (obj == NULL)
        worker_fail(w, "out of memory", NULL);
    free(obj);
    strata_buffer_free(&buf);
    return NULL;
}

static void test_concurrent_writers(void **state) {
    bucket *b = *state;
    pthread_t threads[WRITERS];
    worker workers[WRITERS];
    for (int i = 0; i < WRITERS; i++) {
        workers[i] = (worker){.b = b, .id = i};
        assert_int_equal(pthread_create(&threads[i], NULL, writer_main, &workers[i]), 0);
    }
    for (int i = 0; i < WRITERS; i++) {
        assert_int_equal(pthread_join(threads[i], NULL), 0);
        if (workers[i].errors != 0)
            fail_msg("%d errors, first: %s", workers[i].errors, workers[i].message);
    }
    /* Every kept object is intact; every deleted one is gone. */
    uint8_t *obj = malloc(16064 + 64);
    assert_non_null(obj);
    strata_buffer buf = STRATA_BUFFER_INIT;
    strata_error err;
    for (int id = 0; id < WRITERS; id++) {
        for (int round = 0; round < ROUNDS; round++) {
            char key[64];
            snprintf(key, sizeof key, "conc/dir%d/w%d-r%d", round % 3, id, round);
            strata_buffer_reset(&buf);
            int rc = bucket_get(b, key, &buf, &err);
            if (round % 2 == 1) {
                assert_int_equal(rc, -1);
                assert_int_equal(err.code, STRATA_NOT_FOUND);
                continue;
            }
            assert_int_equal(rc, 0);
            size_t len = make_object(obj, id, round);
            assert_int_equal(buf.len, len);
            assert_memory_equal(buf.data, obj, len);
        }
    }
    strata_buffer_reset(&buf);
    assert_int_equal(bucket_get(b, "conc/shared", &buf, &err), 0);
    assert_true(object_is_whole(buf.data, buf.len));
    strata_buffer_free(&buf);
    free(obj);
    key_list got = {0};
    assert_int_equal(bucket_iterate(b, "conc", true, collect, &got, &err), 0);
    assert_int_equal(got.count, WRITERS * ROUNDS / 2 + 1);
    key_list_free(&got);
}

/* A temporary file holding len pattern bytes (also returned in *bytes). */
static int pattern_file(size_t len, uint8_t **bytes) {
    uint8_t *p = malloc(len + 1);
    assert_non_null(p);
    for (size_t i = 0; i < len; i++)
        p[i] = (uint8_t)((i * 2654435761u) >> 13);
    FILE *f = tmpfile();
    assert_non_null(f);
    int fd = dup(fileno(f));
    fclose(f);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, p, len, 0), (ssize_t)len);
    *bytes = p;
    return fd;
}

/* bucket_upload_file sends the file's first `size` bytes (in pieces on the FILESYSTEM backend,
 * in one request or in parts remotely); a file shorter than its size fails and leaves no object. */
static void test_upload_file(void **state) {
    bucket *b = *state;
    size_t len = ((size_t)3 << 20) + 7;
    uint8_t *bytes;
    int fd = pattern_file(len, &bytes);
    strata_error err;
    if (bucket_upload_file(b, "files/whole", fd, len, &err) != 0)
        fail_msg("upload_file: %s", err.message);
    strata_buffer buf = STRATA_BUFFER_INIT;
    assert_int_equal(bucket_get(b, "files/whole", &buf, &err), 0);
    assert_int_equal(buf.len, len);
    assert_memory_equal(buf.data, bytes, len);
    strata_buffer_reset(&buf);
    assert_int_equal(bucket_upload_file(b, "files/head", fd, 1000, &err), 0);
    assert_int_equal(bucket_get(b, "files/head", &buf, &err), 0);
    assert_int_equal(buf.len, 1000);
    assert_memory_equal(buf.data, bytes, 1000);
    assert_int_equal(bucket_upload_file(b, "files/short", fd, len + 100, &err), -1);
    bool exists = true;
    assert_int_equal(bucket_exists(b, "files/short", &exists, &err), 0);
    assert_false(exists);
    assert_int_equal(bucket_upload_file(b, "files/nofile", -1, 10, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    strata_buffer_free(&buf);
    free(bytes);
    close(fd);
}

int bucket_conformance_run(const bucket_conformance_backend *backend) {
    current = backend;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_put_get, setup, teardown),
        cmocka_unit_test_setup_teardown(test_overwrite, setup, teardown),
        cmocka_unit_test_setup_teardown(test_get_range, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_keys, setup, teardown),
        cmocka_unit_test_setup_teardown(test_exists_and_attributes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_delete, setup, teardown),
        cmocka_unit_test_setup_teardown(test_iterate_flat_and_recursive, setup, teardown),
        cmocka_unit_test_setup_teardown(test_iterate_after, setup, teardown),
        cmocka_unit_test_setup_teardown(test_iterate_thousand_sorted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_iterate_stop_and_abort, setup, teardown),
        cmocka_unit_test_setup_teardown(test_key_validation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stats, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_writers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_upload_file, setup, teardown),
    };
    return _cmocka_run_group_tests(backend->name, tests, sizeof tests / sizeof tests[0], NULL,
                                   NULL);
}
