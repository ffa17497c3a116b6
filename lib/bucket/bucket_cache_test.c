/*
 * bucket_cache_test.c - the disk cache over a real FILESYSTEM bucket: the conformance suite
 * through it, every range answered as the inner bucket answers it (cold and warm), misses fetched
 * in one request per run of pages, a restart keeping what was cached, the size bound, damaged
 * files fetched again, keys that are not cacheable, uploads and deletes through it, and readers on
 * several threads.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bucket/bucket.h"
#include "bucket/bucket_cache.h"
#include "bucket/bucket_conformance.h"

#define PAGE 512u
#define KEY "tenant/01HX0000000000000000000000/profiles.strata"

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static char *make_temp_dir(void) {
    char *dir = strdup("/tmp/strata-bucket-cache-test-XXXXXX");
    assert_non_null(dir);
    assert_non_null(mkdtemp(dir));
    return dir;
}

static void remove_dir(char *dir) {
    nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(dir);
}

/* A FILESYSTEM bucket and a cache over it, each in a directory of its own. */
typedef struct fixture {
    char *bucket_dir, *cache_dir;
    bucket *inner, *cached;
    bucket_cache_options options;
} fixture;

static void open_cache(fixture *f) {
    strata_error err;
    f->options.directory = f->cache_dir;
    assert_int_equal(bucket_cache_open(f->inner, &f->options, &f->cached, &err), 0);
}

static int setup(void **state) {
    fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    f->bucket_dir = make_temp_dir();
    f->cache_dir = make_temp_dir();
    strata_error err;
    assert_int_equal(bucket_open_filesystem(f->bucket_dir, NULL, &f->inner, &err), 0);
    f->options = (bucket_cache_options){.page_bytes = PAGE, .cacheable_suffix = "/profiles.strata"};
    open_cache(f);
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fixture *f = *state;
    bucket_close(f->cached);
    bucket_close(f->inner);
    remove_dir(f->bucket_dir);
    remove_dir(f->cache_dir);
    free(f);
    return 0;
}

static uint64_t inner_range_reads(const fixture *f) {
    bucket_stats s;
    bucket_get_stats(f->inner, &s);
    return s.operations[BUCKET_OP_GET_RANGE] + s.operations[BUCKET_OP_GET];
}

static bucket_cache_stats cache_stats(const fixture *f) {
    bucket_cache_stats s;
    assert_true(bucket_cache_get_stats(f->cached, &s));
    return s;
}

static uint8_t *random_bytes(size_t n, uint32_t seed) {
    uint8_t *p = malloc(n > 0 ? n : 1);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        p[i] = (uint8_t)(seed >> 16);
    }
    return p;
}

static void put(fixture *f, const char *key, const uint8_t *data, size_t n) {
    strata_error err;
    assert_int_equal(bucket_upload(f->inner, key, data, n, &err), 0);
}

/* Reads through both buckets and checks the cache answered as the inner bucket did; returns the
 * reads the cache asked of the inner bucket. */
static uint64_t check_range(fixture *f, const char *key, uint64_t offset, uint64_t length) {
    strata_buffer want = STRATA_BUFFER_INIT, got = STRATA_BUFFER_INIT;
    strata_error want_err = {0}, got_err = {0};
    int want_rc = bucket_get_range(f->inner, key, offset, length, &want, &want_err);
    uint64_t before = inner_range_reads(f);
    int got_rc = bucket_get_range(f->cached, key, offset, length, &got, &got_err);
    uint64_t asked = inner_range_reads(f) - before;
    if (want_rc != got_rc || (want_rc != 0 && want_err.code != got_err.code) ||
        want.len != got.len || (want.len > 0 && memcmp(want.data, got.data, want.len) != 0))
        fail_msg("range %llu+%llu of %s: inner rc %d code %d len %zu, cache rc %d code %d len %zu",
                 (unsigned long long)offset, (unsigned long long)length, key, want_rc,
                 want_err.code, want.len, got_rc, got_err.code, got.len);
    strata_buffer_free(&want);
    strata_buffer_free(&got);
    return asked;
}

/* ---- The conformance suite through the cache ------------------------------------------------
 * Its keys are not cacheable here: it overwrites objects while other threads read them, which a
 * page cache must never be asked to serve (see bucket_cache.h); what it checks is that the
 * wrapper hands everything else to the inner bucket unchanged. The tests below read cached keys.
 */

typedef struct conformance_ctx {
    char *bucket_dir, *cache_dir;
    bucket *inner;
} conformance_ctx;

static int conformance_open(void *ctx, bucket **out, strata_error *err) {
    conformance_ctx *c = ctx;
    c->bucket_dir = make_temp_dir();
    c->cache_dir = make_temp_dir();
    if (bucket_open_filesystem(c->bucket_dir, NULL, &c->inner, err) != 0)
        return -1;
    bucket_cache_options o = {
        .directory = c->cache_dir, .page_bytes = PAGE, .cacheable_suffix = "/profiles.strata"};
    return bucket_cache_open(c->inner, &o, out, err);
}

static void conformance_cleanup(void *ctx, bucket *b) {
    conformance_ctx *c = ctx;
    bucket_close(b);
    bucket_close(c->inner);
    remove_dir(c->bucket_dir);
    remove_dir(c->cache_dir);
}

/* ---- Tests ------------------------------------------------------------------------------------
 */

static void test_ranges_answer_as_the_inner_bucket(void **state) {
    fixture *f = *state;
    const size_t sizes[] = {10 * PAGE + 123, 4 * PAGE, 0, 17};
    const char *keys[] = {"t/a/profiles.strata", "t/b/profiles.strata", "t/c/profiles.strata",
                          "t/d/profiles.strata"};
    for (size_t k = 0; k < 4; k++) {
        uint8_t *data = random_bytes(sizes[k], (uint32_t)k + 1);
        put(f, keys[k], data, sizes[k]);
        free(data);
    }
    for (int pass = 0; pass < 2; pass++) { /* cold, then from the disk */
        for (size_t k = 0; k < 4; k++) {
            uint64_t n = sizes[k];
            const uint64_t offsets[] = {0,     1,     PAGE - 1, PAGE,  PAGE + 1, 3 * PAGE,
                                        n / 2, n - 1, n,        n + 1, n + PAGE, 10 * PAGE};
            const uint64_t lengths[] = {0,
                                        1,
                                        100,
                                        PAGE - 1,
                                        PAGE,
                                        PAGE + 1,
                                        3 * PAGE + 7,
                                        n,
                                        BUCKET_TO_END,
                                        UINT64_MAX - 5};
            for (size_t i = 0; i < sizeof offsets / sizeof offsets[0]; i++)
                for (size_t j = 0; j < sizeof lengths / sizeof lengths[0]; j++) {
                    if (offsets[i] > n + 2 * PAGE)
                        continue;
                    uint64_t asked = check_range(f, keys[k], offsets[i], lengths[j]);
                    /* warm, a read of bytes the object has asks nothing of the inner bucket */
                    if (pass == 1 && lengths[j] > 0 && offsets[i] < n &&
                        lengths[j] <= n - offsets[i])
                        assert_int_equal(asked, 0);
                }
            check_range(f, "t/missing/profiles.strata", 0, BUCKET_TO_END);
        }
    }
    bucket_cache_stats s = cache_stats(f);
    assert_true(s.hits > 0);
    assert_int_equal(s.invalid, 0);
    assert_int_equal(s.write_errors, 0);
    /* every page of the three non-empty objects is held: 11 + 4 + 1 */
    assert_int_equal(s.pages, 16);
}

static void test_misses_fetch_runs_in_one_request(void **state) {
    fixture *f = *state;
    uint8_t *data = random_bytes(10 * PAGE, 7);
    put(f, KEY, data, 10 * PAGE);
    strata_buffer out = STRATA_BUFFER_INIT;
    strata_error err;
    uint64_t before = inner_range_reads(f);
    /* pages 2-3 */
    assert_int_equal(bucket_get_range(f->cached, KEY, 2 * PAGE + 5, PAGE, &out, &err), 0);
    assert_int_equal(out.len, PAGE);
    assert_memory_equal(out.data, data + 2 * PAGE + 5, PAGE);
    assert_int_equal(inner_range_reads(f) - before, 1);
    /* the whole object: pages 0-1 in one request, 2-3 from the disk, 4-9 in one request */
    strata_buffer_reset(&out);
    assert_int_equal(bucket_get(f->cached, KEY, &out, &err), 0);
    assert_int_equal(out.len, 10 * PAGE);
    assert_memory_equal(out.data, data, 10 * PAGE);
    assert_int_equal(inner_range_reads(f) - before, 3);
    bucket_cache_stats s = cache_stats(f);
    assert_int_equal(s.fetches, 3);
    assert_int_equal(s.misses, 2 + 2 + 6);
    assert_int_equal(s.hits, 2);
    assert_int_equal(s.pages, 10);
    /* once more: the object ends exactly at a page's end, so reading to the end asks the inner
     * bucket whether there is more (an empty answer) and nothing else */
    strata_buffer_reset(&out);
    assert_int_equal(bucket_get(f->cached, KEY, &out, &err), 0);
    assert_memory_equal(out.data, data, 10 * PAGE);
    assert_int_equal(inner_range_reads(f) - before, 4);
    strata_buffer_reset(&out);
    assert_int_equal(bucket_get_range(f->cached, KEY, 0, 10 * PAGE, &out, &err), 0);
    assert_int_equal(inner_range_reads(f) - before, 4);
    strata_buffer_free(&out);
    free(data);
}

static void test_survives_a_restart(void **state) {
    fixture *f = *state;
    size_t n = 6 * PAGE + 99;
    uint8_t *data = random_bytes(n, 11);
    put(f, KEY, data, n);
    strata_buffer out = STRATA_BUFFER_INIT;
    strata_error err;
    assert_int_equal(bucket_get(f->cached, KEY, &out, &err), 0);
    bucket_cache_stats first = cache_stats(f);
    bucket_close(f->cached);
    open_cache(f);
    bucket_cache_stats reopened = cache_stats(f);
    assert_int_equal(reopened.pages, first.pages);
    assert_int_equal(reopened.bytes, first.bytes);
    uint64_t before = inner_range_reads(f);
    strata_buffer_reset(&out);
    assert_int_equal(bucket_get(f->cached, KEY, &out, &err), 0);
    assert_int_equal(out.len, n);
    assert_memory_equal(out.data, data, n);
    assert_int_equal(inner_range_reads(f), before); /* the short last page ends the read */
    assert_int_equal(cache_stats(f).hits, 7);
    strata_buffer_free(&out);
    free(data);
}

static uint64_t disk_bytes(const char *dir) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "find %s -type f -printf '%%s\\n' | awk '{s+=$1} END {print s+0}'",
             dir);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    unsigned long long n = 0;
    assert_int_equal(fscanf(p, "%llu", &n), 1);
    pclose(p);
    return n;
}

static void test_stays_within_max_bytes(void **state) {
    fixture *f = *state;
    bucket_close(f->cached);
    size_t file_bytes = 32 + strlen(KEY) + PAGE;
    f->options.max_bytes = 8 * file_bytes;
    open_cache(f);
    uint8_t *data = random_bytes(40 * PAGE, 3);
    put(f, KEY, data, 40 * PAGE);
    strata_buffer out = STRATA_BUFFER_INIT;
    strata_error err;
    for (uint64_t p = 0; p < 40; p++) {
        strata_buffer_reset(&out);
        assert_int_equal(bucket_get_range(f->cached, KEY, p * PAGE, PAGE, &out, &err), 0);
        assert_memory_equal(out.data, data + p * PAGE, PAGE);
        bucket_cache_stats s = cache_stats(f);
        assert_true(s.bytes <= f->options.max_bytes);
        assert_true(disk_bytes(f->cache_dir) <= f->options.max_bytes);
    }
    bucket_cache_stats s = cache_stats(f);
    assert_int_equal(s.pages, 8);
    assert_int_equal(s.evictions, 32);
    /* the last eight pages are the ones kept: reading them asks nothing of the inner bucket; the
     * first page was evicted and is fetched again */
    uint64_t before = inner_range_reads(f);
    strata_buffer_reset(&out);
    assert_int_equal(bucket_get_range(f->cached, KEY, 32 * PAGE, 8 * PAGE, &out, &err), 0);
    assert_memory_equal(out.data, data + 32 * PAGE, 8 * PAGE);
    assert_int_equal(inner_range_reads(f), before);
    strata_buffer_reset(&out);
    assert_int_equal(bucket_get_range(f->cached, KEY, 0, PAGE, &out, &err), 0);
    assert_memory_equal(out.data, data, PAGE);
    assert_int_equal(inner_range_reads(f), before + 1);
    /* reopened with a smaller budget, it evicts to fit at once, least recent first */
    bucket_close(f->cached);
    f->options.max_bytes = 3 * file_bytes;
    open_cache(f);
    assert_int_equal(cache_stats(f).pages, 3);
    assert_true(disk_bytes(f->cache_dir) <= 3 * file_bytes);
    before = inner_range_reads(f);
    strata_buffer_reset(&out);
    assert_int_equal(bucket_get_range(f->cached, KEY, 0, PAGE, &out, &err), 0); /* the newest */
    assert_int_equal(inner_range_reads(f), before);
    strata_buffer_free(&out);
    free(data);
}

/* The path of the only page file of page p of KEY, found by listing. */
static void page_file(const fixture *f, unsigned p, char *out, size_t cap) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "find %s/v1 -name '*-%08x' -type f", f->cache_dir, p);
    FILE *pipe = popen(cmd, "r");
    assert_non_null(pipe);
    assert_non_null(fgets(out, (int)cap, pipe));
    out[strcspn(out, "\n")] = '\0';
    pclose(pipe);
}

static void test_damaged_files_are_fetched_again(void **state) {
    fixture *f = *state;
    uint8_t *data = random_bytes(3 * PAGE, 5);
    put(f, KEY, data, 3 * PAGE);
    strata_buffer out = STRATA_BUFFER_INIT;
    strata_error err;
    assert_int_equal(bucket_get(f->cached, KEY, &out, &err), 0);
    char path[1024];
    /* one byte of page 1's data flipped */
    page_file(f, 1, path, sizeof path);
    FILE *fp = fopen(path, "r+b");
    assert_non_null(fp);
    assert_int_equal(fseek(fp, -10, SEEK_END), 0);
    int c = fgetc(fp);
    assert_int_equal(fseek(fp, -10, SEEK_END), 0);
    fputc(c ^ 0x40, fp);
    fclose(fp);
    /* page 2 cut short, as a crash before its data reached the disk leaves it */
    page_file(f, 2, path, sizeof path);
    assert_int_equal(truncate(path, 40), 0);
    uint64_t before = inner_range_reads(f);
    strata_buffer_reset(&out);
    assert_int_equal(bucket_get_range(f->cached, KEY, 0, 3 * PAGE, &out, &err), 0);
    assert_int_equal(out.len, 3 * PAGE);
    assert_memory_equal(out.data, data, 3 * PAGE);
    assert_int_equal(inner_range_reads(f) - before, 2);
    bucket_cache_stats s = cache_stats(f);
    assert_int_equal(s.invalid, 2);
    assert_int_equal(s.pages, 3);
    /* stray files: a temporary write cut short and a name that is no page file go at reopen */
    char stray[1100];
    snprintf(stray, sizeof stray, "%s/v1/tmp/123-4", f->cache_dir);
    FILE *t = fopen(stray, "w");
    assert_non_null(t);
    fclose(t);
    snprintf(stray, sizeof stray, "%s/v1/00", f->cache_dir);
    (void)mkdir(stray, 0755);
    snprintf(stray, sizeof stray, "%s/v1/00/not-a-page", f->cache_dir);
    t = fopen(stray, "w");
    assert_non_null(t);
    fclose(t);
    bucket_close(f->cached);
    open_cache(f);
    assert_int_equal(cache_stats(f).pages, 3);
    struct stat st;
    assert_int_not_equal(stat(stray, &st), 0);
    snprintf(stray, sizeof stray, "%s/v1/tmp/123-4", f->cache_dir);
    assert_int_not_equal(stat(stray, &st), 0);
    strata_buffer_free(&out);
    free(data);
}

static void test_other_keys_are_not_cached(void **state) {
    fixture *f = *state;
    const char *key = "tenant/01HX0000000000000000000000/meta.json";
    put(f, key, (const uint8_t *)"{\"v\":1}", 7);
    strata_buffer out = STRATA_BUFFER_INIT;
    strata_error err;
    assert_int_equal(bucket_get(f->cached, key, &out, &err), 0);
    put(f, key, (const uint8_t *)"{\"v\":22}", 8); /* rewritten behind the cache */
    strata_buffer_reset(&out);
    assert_int_equal(bucket_get(f->cached, key, &out, &err), 0);
    assert_int_equal(out.len, 8);
    assert_memory_equal(out.data, "{\"v\":22}", 8);
    assert_int_equal(cache_stats(f).pages, 0);
    /* listings, attributes and existence are the inner bucket's */
    bucket_object_attributes attrs;
    assert_int_equal(bucket_attributes(f->cached, key, &attrs, &err), 0);
    assert_int_equal(attrs.size, 8);
    bool exists = false;
    assert_int_equal(bucket_exists(f->cached, key, &exists, &err), 0);
    assert_true(exists);
    strata_buffer_free(&out);
}

static void test_upload_and_delete_through_it_drop_pages(void **state) {
    fixture *f = *state;
    uint8_t *one = random_bytes(2 * PAGE, 1), *two = random_bytes(3 * PAGE, 2);
    strata_error err;
    strata_buffer out = STRATA_BUFFER_INIT;
    assert_int_equal(bucket_upload(f->cached, KEY, one, 2 * PAGE, &err), 0);
    assert_int_equal(bucket_get(f->cached, KEY, &out, &err), 0);
    assert_int_equal(cache_stats(f).pages, 2);
    assert_int_equal(bucket_upload(f->cached, KEY, two, 3 * PAGE, &err), 0);
    assert_int_equal(cache_stats(f).pages, 0);
    strata_buffer_reset(&out);
    assert_int_equal(bucket_get(f->cached, KEY, &out, &err), 0);
    assert_int_equal(out.len, 3 * PAGE);
    assert_memory_equal(out.data, two, 3 * PAGE);
    assert_int_equal(bucket_delete(f->cached, KEY, &err), 0);
    assert_int_equal(cache_stats(f).pages, 0);
    assert_int_equal(disk_bytes(f->cache_dir), 0);
    strata_buffer_reset(&out);
    assert_int_equal(bucket_get(f->cached, KEY, &out, &err), -1);
    assert_int_equal(err.code, STRATA_NOT_FOUND);
    strata_buffer_free(&out);
    free(one);
    free(two);
}

typedef struct reader_ctx {
    fixture *f;
    const uint8_t *data[2];
    size_t size[2];
    unsigned seed;
    int failures;
} reader_ctx;

static void *reader(void *arg) {
    reader_ctx *r = arg;
    const char *keys[2] = {"t/x/profiles.strata", "t/y/profiles.strata"};
    strata_buffer out = STRATA_BUFFER_INIT;
    for (int i = 0; i < 400; i++) {
        int k = rand_r(&r->seed) % 2;
        uint64_t off = (uint64_t)rand_r(&r->seed) % r->size[k];
        uint64_t len = (uint64_t)rand_r(&r->seed) % (4 * PAGE) + 1;
        strata_error err;
        strata_buffer_reset(&out);
        if (bucket_get_range(r->f->cached, keys[k], off, len, &out, &err) != 0) {
            r->failures++;
            continue;
        }
        uint64_t want = off + len > r->size[k] ? r->size[k] - off : len;
        if (out.len != want || memcmp(out.data, r->data[k] + off, (size_t)want) != 0)
            r->failures++;
    }
    strata_buffer_free(&out);
    return NULL;
}

static void test_readers_on_several_threads(void **state) {
    fixture *f = *state;
    bucket_close(f->cached);
    f->options.max_bytes = 12 * (32 + strlen(KEY) + PAGE); /* evicting all along */
    open_cache(f);
    size_t sizes[2] = {30 * PAGE + 7, 17 * PAGE};
    uint8_t *x = random_bytes(sizes[0], 21), *y = random_bytes(sizes[1], 22);
    put(f, "t/x/profiles.strata", x, sizes[0]);
    put(f, "t/y/profiles.strata", y, sizes[1]);
    pthread_t threads[4];
    reader_ctx ctx[4];
    for (int i = 0; i < 4; i++) {
        ctx[i] = (reader_ctx){f, {x, y}, {sizes[0], sizes[1]}, (unsigned)i + 1, 0};
        assert_int_equal(pthread_create(&threads[i], NULL, reader, &ctx[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        assert_int_equal(pthread_join(threads[i], NULL), 0);
        assert_int_equal(ctx[i].failures, 0);
    }
    bucket_cache_stats s = cache_stats(f);
    assert_true(s.hits > 0 && s.evictions > 0);
    assert_true(s.bytes <= f->options.max_bytes);
    assert_true(disk_bytes(f->cache_dir) <= f->options.max_bytes);
    free(x);
    free(y);
}

static void test_open_errors(void **state) {
    fixture *f = *state;
    bucket *b = NULL;
    strata_error err;
    bucket_cache_options o = {0};
    assert_int_equal(bucket_cache_open(f->inner, &o, &b, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    o = (bucket_cache_options){.directory = f->cache_dir, .page_bytes = 100};
    assert_int_equal(bucket_cache_open(f->inner, &o, &b, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "512"));
    char file[1100];
    snprintf(file, sizeof file, "%s/a-file", f->cache_dir);
    FILE *fp = fopen(file, "w");
    assert_non_null(fp);
    fclose(fp);
    o = (bucket_cache_options){.directory = file};
    assert_int_equal(bucket_cache_open(f->inner, &o, &b, &err), -1);
    assert_int_equal(err.code, STRATA_UNAVAILABLE);
    assert_null(b);
    /* the fixture's cache holds its directory: a second user of it is refused, by this process
     * (flock locks belong to the open file) and by another */
    o = (bucket_cache_options){.directory = f->cache_dir};
    assert_int_equal(bucket_cache_open(f->inner, &o, &b, &err), -1);
    assert_int_equal(err.code, STRATA_FAILED_PRECONDITION);
    assert_non_null(strstr(err.message, "in use by another process"));
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        bucket *other = NULL;
        strata_error child_err;
        int rc = bucket_cache_open(f->inner, &o, &other, &child_err);
        _exit(rc == -1 && child_err.code == STRATA_FAILED_PRECONDITION ? 0 : 1);
    }
    int status = 0;
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    /* released at close */
    bucket_close(f->cached);
    f->cached = NULL;
    assert_int_equal(bucket_cache_open(f->inner, &o, &f->cached, &err), 0);
    assert_false(bucket_cache_get_stats(f->inner, &(bucket_cache_stats){0}));
}

int main(void) {
    conformance_ctx cc = {0};
    bucket_conformance_backend backend = {"bucket_conformance_cache", conformance_open,
                                          conformance_cleanup, &cc};
    int failed = bucket_conformance_run(&backend);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_ranges_answer_as_the_inner_bucket, setup, teardown),
        cmocka_unit_test_setup_teardown(test_misses_fetch_runs_in_one_request, setup, teardown),
        cmocka_unit_test_setup_teardown(test_survives_a_restart, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stays_within_max_bytes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_damaged_files_are_fetched_again, setup, teardown),
        cmocka_unit_test_setup_teardown(test_other_keys_are_not_cached, setup, teardown),
        cmocka_unit_test_setup_teardown(test_upload_and_delete_through_it_drop_pages, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_readers_on_several_threads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_open_errors, setup, teardown),
    };
    return failed + cmocka_run_group_tests_name("bucket_cache", tests, NULL, NULL);
}
