/*
 * debuginfo_test.c - build ids, source keys and source archives: tar archives built here entry by
 * entry (ustar prefixes, GNU long names, pax paths, directories, base-256 sizes), compressed with
 * gzip and with zstd, then damaged in the ways uploads arrive damaged.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

#include "debuginfo/debuginfo.h"

/* ---- building archives ---- */

/* v in octal, zero-padded to len - 1 digits and NUL-terminated (v fits: test sizes are small). */
static void put_octal(uint8_t *field, size_t len, uint64_t v) {
    field[len - 1] = '\0';
    for (size_t i = len - 1; i-- > 0; v >>= 3)
        field[i] = (uint8_t)('0' + (v & 7));
}

static void add_entry(strata_buffer *tar, const char *name, const char *prefix, char type,
                      const void *data, size_t size) {
    uint8_t h[512];
    memset(h, 0, sizeof h);
    strncpy((char *)h, name, 100);
    put_octal(h + 100, 8, 0644);
    put_octal(h + 108, 8, 0);
    put_octal(h + 116, 8, 0);
    put_octal(h + 124, 12, size);
    put_octal(h + 136, 12, 0);
    h[156] = (uint8_t)type;
    memcpy(h + 257, "ustar", 6);
    memcpy(h + 263, "00", 2);
    if (prefix != NULL)
        strncpy((char *)h + 345, prefix, 155);
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (size_t i = 0; i < 512; i++)
        sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
    assert_int_equal(strata_buffer_append(tar, h, 512), 0);
    assert_int_equal(strata_buffer_append(tar, data, size), 0);
    static const uint8_t zero[512];
    assert_int_equal(strata_buffer_append(tar, zero, (512 - size % 512) % 512), 0);
}

static void add_file(strata_buffer *tar, const char *name, const char *text) {
    add_entry(tar, name, NULL, '0', text, strlen(text));
}

static void end_tar(strata_buffer *tar) {
    static const uint8_t zero[1024];
    assert_int_equal(strata_buffer_append(tar, zero, sizeof zero), 0);
}

static void gzip_of(const strata_buffer *in, strata_buffer *out) {
    z_stream z;
    memset(&z, 0, sizeof z);
    assert_int_equal(deflateInit2(&z, 6, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY), Z_OK);
    size_t cap = deflateBound(&z, in->len) + 64;
    assert_int_equal(strata_buffer_reserve(out, cap), 0);
    z.next_in = in->data;
    z.avail_in = (uInt)in->len;
    z.next_out = out->data + out->len;
    z.avail_out = (uInt)cap;
    assert_int_equal(deflate(&z, Z_FINISH), Z_STREAM_END);
    out->len += cap - z.avail_out;
    deflateEnd(&z);
}

static void zstd_of(const strata_buffer *in, strata_buffer *out) {
    size_t cap = ZSTD_compressBound(in->len);
    assert_int_equal(strata_buffer_reserve(out, cap), 0);
    size_t n = ZSTD_compress(out->data + out->len, cap, in->data, in->len, 3);
    assert_false(ZSTD_isError(n));
    out->len += n;
}

/* An archive as `tar` writes a source tree: a directory, plain files, a ustar prefix path, a GNU
 * long name and a pax path. */
static void sample_tar(strata_buffer *tar) {
    add_entry(tar, "src/", NULL, '5', "", 0);
    add_file(tar, "src/main.c", "int main(void) {\n    return work();\n}\n");
    add_file(tar, "./src/work.c", "int work(void) {\n    return 42;\n}\n");
    add_entry(tar, "deep.c", "/usr/src/project/a/very/long/directory", '0', "deep\n", 5);
    char longname[300];
    memset(longname, 'x', sizeof longname);
    memcpy(longname, "long/", 5);
    strcpy(longname + 290, ".c");
    add_entry(tar, "././@LongLink", NULL, 'L', longname, strlen(longname) + 1);
    add_file(tar, "truncated-name", "long\n");
    const char *pax = "30 path=/abs/pax/named/file.c\n";
    add_entry(tar, "PaxHeaders/x", NULL, 'x', pax, strlen(pax));
    add_file(tar, "ignored-name.c", "pax\n");
    end_tar(tar);
}

static void expect_file(const strata_buffer *archive, const char *name, const char *text) {
    strata_buffer out = STRATA_BUFFER_INIT;
    strata_error err;
    assert_int_equal(source_archive_find(archive->data, archive->len, name, 1 << 20, &out, &err),
                     0);
    assert_int_equal(out.len, strlen(text));
    assert_memory_equal(out.data, text, out.len);
    strata_buffer_free(&out);
}

static void expect_error(const strata_buffer *archive, const char *name, strata_status code) {
    strata_buffer out = STRATA_BUFFER_INIT;
    strata_error err;
    strata_error_clear(&err);
    assert_int_equal(source_archive_find(archive->data, archive->len, name, 1 << 20, &out, &err),
                     -1);
    assert_int_equal(err.code, code);
    strata_buffer_free(&out);
}

static void test_find_in_gzip_and_zstd(void **state) {
    (void)state;
    strata_buffer tar = STRATA_BUFFER_INIT, gz = STRATA_BUFFER_INIT, zst = STRATA_BUFFER_INIT;
    sample_tar(&tar);
    gzip_of(&tar, &gz);
    zstd_of(&tar, &zst);
    const strata_buffer *both[2] = {&gz, &zst};
    char longname[300];
    memset(longname, 'x', sizeof longname);
    memcpy(longname, "long/", 5);
    strcpy(longname + 290, ".c");
    for (int i = 0; i < 2; i++) {
        const strata_buffer *a = both[i];
        expect_file(a, "src/main.c", "int main(void) {\n    return work();\n}\n");
        expect_file(a, "/src/main.c", "int main(void) {\n    return work();\n}\n");
        expect_file(a, "src/work.c", "int work(void) {\n    return 42;\n}\n");
        expect_file(a, "/usr/src/project/a/very/long/directory/deep.c", "deep\n");
        expect_file(a, longname, "long\n");
        expect_file(a, "/abs/pax/named/file.c", "pax\n");
        expect_error(a, "ignored-name.c", STRATA_NOT_FOUND); /* named by its pax path */
        expect_error(a, "src/missing.c", STRATA_NOT_FOUND);
        expect_error(a, "src", STRATA_NOT_FOUND); /* a directory is no file */
        size_t files = 0;
        strata_error err;
        assert_int_equal(source_archive_check(a->data, a->len, &files, &err), 0);
        assert_int_equal(files, 5);
    }
    /* a file over the limit */
    strata_buffer out = STRATA_BUFFER_INIT;
    strata_error err;
    assert_int_equal(source_archive_find(gz.data, gz.len, "src/main.c", 10, &out, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "at most 10"));
    strata_buffer_free(&out);
    strata_buffer_free(&tar);
    strata_buffer_free(&gz);
    strata_buffer_free(&zst);
}

static void test_damaged_archives(void **state) {
    (void)state;
    strata_buffer tar = STRATA_BUFFER_INIT, gz = STRATA_BUFFER_INIT;
    strata_error err;
    sample_tar(&tar);
    /* not compressed at all */
    assert_int_equal(source_archive_check(tar.data, tar.len, NULL, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "gzip nor zstd"));
    /* a gzip of something that is not tar */
    strata_buffer text = STRATA_BUFFER_INIT;
    for (int i = 0; i < 200; i++)
        assert_int_equal(strata_buffer_append(&text, "not a tar archive ", 18), 0);
    gzip_of(&text, &gz);
    assert_int_equal(source_archive_check(gz.data, gz.len, NULL, &err), -1);
    assert_non_null(strstr(err.message, "checksum"));
    /* truncated in the middle of a file's data */
    strata_buffer_reset(&gz);
    strata_buffer cut = STRATA_BUFFER_INIT;
    assert_int_equal(strata_buffer_append(&cut, tar.data, 512 + 512 + 100), 0);
    gzip_of(&cut, &gz);
    assert_int_equal(source_archive_check(gz.data, gz.len, NULL, &err), -1);
    assert_non_null(strstr(err.message, "truncated"));
    /* the compressed stream itself cut short */
    strata_buffer_reset(&gz);
    gzip_of(&tar, &gz);
    assert_int_equal(source_archive_check(gz.data, gz.len / 2, NULL, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    /* a corrupted deflate stream */
    gz.data[gz.len / 2] ^= 0xff;
    gz.data[gz.len / 2 + 1] ^= 0x55;
    strata_buffer out = STRATA_BUFFER_INIT;
    int rc = source_archive_find(gz.data, gz.len, "/abs/pax/named/file.c", 1 << 20, &out, &err);
    assert_int_equal(rc, -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    /* pax records whose length does not cover their own length field (found by the fuzzer:
     * "1 x" once read past the header's end) */
    static const char *const short_records[] = {"1 x", "2 path=a\n", "3 4 path=b\n"};
    for (size_t i = 0; i < sizeof short_records / sizeof short_records[0]; i++) {
        strata_buffer bad_tar = STRATA_BUFFER_INIT, bad_gz = STRATA_BUFFER_INIT;
        add_entry(&bad_tar, "PaxHeaders/x", NULL, 'x', short_records[i], strlen(short_records[i]));
        add_file(&bad_tar, "a.c", "x\n");
        gzip_of(&bad_tar, &bad_gz);
        assert_int_equal(source_archive_check(bad_gz.data, bad_gz.len, NULL, &err), -1);
        assert_non_null(strstr(err.message, "damaged pax header"));
        strata_buffer_free(&bad_tar);
        strata_buffer_free(&bad_gz);
    }
    /* empty input */
    assert_int_equal(source_archive_check(NULL, 0, NULL, &err), -1);
    strata_buffer_free(&out);
    strata_buffer_free(&cut);
    strata_buffer_free(&text);
    strata_buffer_free(&tar);
    strata_buffer_free(&gz);
}

static void test_base256_size_and_concatenated_members(void **state) {
    (void)state;
    /* a size in GNU base-256 form */
    strata_buffer tar = STRATA_BUFFER_INIT, gz = STRATA_BUFFER_INIT;
    add_file(&tar, "a.c", "hello\n");
    uint8_t *h = tar.data;
    memset(h + 124, 0, 12);
    h[124] = 0x80;
    h[135] = 6;
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (size_t i = 0; i < 512; i++)
        sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
    /* two gzip members: the second holds the rest of the archive */
    gzip_of(&tar, &gz);
    strata_buffer rest = STRATA_BUFFER_INIT;
    add_file(&rest, "b.c", "second member\n");
    end_tar(&rest);
    gzip_of(&rest, &gz);
    expect_file(&gz, "a.c", "hello\n");
    expect_file(&gz, "b.c", "second member\n");
    strata_buffer_free(&rest);
    strata_buffer_free(&tar);
    strata_buffer_free(&gz);
}

static void test_build_ids_and_keys(void **state) {
    (void)state;
    strata_error err;
    assert_int_equal(debuginfo_check_build_id("2d6912fd3dd64542f6f6294f4bf9cb6c265b3085", &err), 0);
    assert_int_equal(debuginfo_check_build_id("Abc-_.9/xyz_-", &err), 0); /* Go's form */
    const char *bad[] = {"",          "../etc", "a/../b", "a//b", "/abs",
                         "trailing/", ".",      "a b",    "x\n",  "a/./b"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(debuginfo_check_build_id(bad[i], &err), -1);
        assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    }
    char longid[DEBUGINFO_MAX_BUILD_ID + 2];
    memset(longid, 'a', sizeof longid - 1);
    longid[sizeof longid - 1] = '\0';
    assert_int_equal(debuginfo_check_build_id(longid, &err), -1);
    assert_int_equal(debuginfo_check_build_id(NULL, &err), -1);
    char key[128];
    assert_int_equal(debuginfo_sources_key("team-a", "abc123", key, sizeof key, &err), 0);
    assert_string_equal(key, "team-a/debuginfo/abc123/sources");
    assert_int_equal(debuginfo_sources_key("team-a", "abc123", key, 10, &err), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_find_in_gzip_and_zstd),
        cmocka_unit_test(test_damaged_archives),
        cmocka_unit_test(test_base256_size_and_concatenated_members),
        cmocka_unit_test(test_build_ids_and_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
