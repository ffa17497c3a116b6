/*
 * arrow_ipc_test.c - the stream's framing checked byte by byte (message prefixes, 8-byte
 * alignment, body lengths, end of stream), and with STRATA_ARROW_OUT set, the stream of every
 * column kind written there for an independent reader (npm's apache-arrow through
 * tests/clients/arrow_dump.mjs, run by integration_npm_clients).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arrow/arrow_ipc.h"

static uint32_t le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static int64_t le64(const uint8_t *p) {
    return (int64_t)((uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32);
}

/* A sample of every column kind: 3 rows. */
static void sample(strata_buffer *out) {
    arrow_writer w;
    arrow_writer_init(&w);
    const uint64_t addr[] = {0, 0x401000, UINT64_MAX};
    const int32_t parent[] = {-1, 0, 1};
    const bool labels_only[] = {false, true, false};
    const int32_t names[] = {0, 1, 2};
    const char *dict[] = {"", "main", "app.h\xc3\xa9"};
    const size_t dict_len[] = {0, 4, 7};
    const int32_t offsets[] = {0, 1, 2, 2};
    const uint32_t children[] = {1, 2};
    const int64_t cum[] = {12, 12, -5};
    arrow_add_bool(&w, "labels_only", labels_only, 3, false);
    arrow_add_int(&w, "location_address", 64, false, addr, 3);
    arrow_add_dict_binary(&w, "function_name", names, 3, dict, dict_len, 3);
    arrow_add_list_uint32(&w, "children", offsets, 3, children);
    arrow_add_int(&w, "parent", 32, true, parent, 3);
    arrow_add_int(&w, "cumulative", 64, true, cum, 3);
    /* narrowed: to uint8, uint16, int8 (a negative value in an unsigned column), int32, uint64 */
    const int64_t u8[] = {0, 200, 255}, u16[] = {0, 256, 65535}, neg[] = {3, -5, 100};
    const int64_t i32[] = {-40000, 0, 40000}, u64[] = {1, (int64_t)1 << 40, 7};
    arrow_add_int_narrowed(&w, "u8", false, u8, 3);
    arrow_add_int_narrowed(&w, "u16", false, u16, 3);
    arrow_add_int_narrowed(&w, "neg", false, neg, 3);
    arrow_add_int_narrowed(&w, "i32", true, i32, 3);
    arrow_add_int_narrowed(&w, "u64", false, u64, 3);
    strata_error err;
    assert_int_equal(arrow_writer_finish(&w, 3, out, &err), 0);
    arrow_writer_free(&w);
}

static void test_framing(void **state) {
    (void)state;
    strata_buffer s = STRATA_BUFFER_INIT;
    sample(&s);
    /* schema, one dictionary batch, one record batch, end of stream */
    size_t at = 0, messages = 0;
    while (at + 8 <= s.len) {
        assert_int_equal(at % 8, 0);
        assert_int_equal(le32(s.data + at), 0xffffffffu);
        uint32_t meta = le32(s.data + at + 4);
        if (meta == 0)
            break;
        assert_int_equal(meta % 8, 0);
        const uint8_t *fbuf = s.data + at + 8;
        /* root table -> Message: vtable slot 3 is bodyLength */
        const uint8_t *table = fbuf + le32(fbuf);
        const uint8_t *vt = table - (int32_t)le32(table);
        uint16_t vt_size = (uint16_t)(vt[0] | vt[1] << 8);
        int64_t body = 0;
        if (vt_size >= 12) {
            uint16_t off = (uint16_t)(vt[10] | vt[11] << 8);
            if (off != 0)
                body = le64(table + off);
        }
        assert_int_equal(body % 8, 0);
        at += 8 + meta + (size_t)body;
        messages++;
    }
    assert_int_equal(messages, 3);
    assert_int_equal(at + 8, s.len); /* the end-of-stream marker closes it */
    const char *path = getenv("STRATA_ARROW_OUT");
    if (path != NULL) {
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(s.data, 1, s.len, f), s.len);
        fclose(f);
    }
    strata_buffer_free(&s);
}

static void test_column_length_checked(void **state) {
    (void)state;
    arrow_writer w;
    arrow_writer_init(&w);
    const int32_t v[] = {1, 2};
    arrow_add_int(&w, "a", 32, true, v, 2);
    strata_buffer out = STRATA_BUFFER_INIT;
    strata_error err;
    assert_int_equal(arrow_writer_finish(&w, 3, &out, &err), -1);
    assert_int_equal(err.code, STRATA_INTERNAL);
    arrow_writer_free(&w);
    strata_buffer_free(&out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_framing),
        cmocka_unit_test(test_column_length_checked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
