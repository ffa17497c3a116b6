/*
 * http_multipart_test.c - multipart/form-data as pyroscope-go, curl -F and browsers send it: part
 * boundaries, names and file names, content that holds CRLF and boundary-like text, a preamble
 * and epilogue, and every malformed shape refused with its reason.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "http/multipart.h"

#define CT "multipart/form-data; boundary=XyZ"

static size_t parse(const char *content_type, const char *body, http_multipart_part *parts,
                    size_t max, strata_error *err) {
    size_t n = 99;
    int rc = http_multipart_parse(content_type, (const uint8_t *)body, strlen(body), parts, max, &n,
                                  err);
    return rc == 0 ? n : (size_t)-1;
}

static void assert_part(const http_multipart_part *p, const char *name, const char *filename,
                        const char *data) {
    assert_int_equal(p->name_len, strlen(name));
    assert_memory_equal(p->name, name, p->name_len);
    if (filename == NULL) {
        assert_null(p->filename);
    } else {
        assert_int_equal(p->filename_len, strlen(filename));
        assert_memory_equal(p->filename, filename, p->filename_len);
    }
    assert_int_equal(p->len, strlen(data));
    assert_memory_equal(p->data, data, p->len);
}

static void test_parts(void **state) {
    (void)state;
    http_multipart_part parts[4];
    strata_error err;
    const char *body = "--XyZ\r\n"
                       "Content-Disposition: form-data; name=\"profile\"; filename=\"p.pprof\"\r\n"
                       "Content-Type: application/octet-stream\r\n"
                       "\r\n"
                       "\x1f\x8b\r\n--XyNot a boundary\r\n"
                       "\r\n--XyZ\r\n"
                       "content-disposition: form-data; name=sample_type_config\r\n"
                       "\r\n"
                       "{\"cpu\":{}}"
                       "\r\n--XyZ--\r\nepilogue";
    assert_int_equal(parse(CT, body, parts, 4, &err), 2);
    assert_part(&parts[0], "profile", "p.pprof", "\x1f\x8b\r\n--XyNot a boundary\r\n");
    assert_int_equal(parts[0].content_type_len, strlen("application/octet-stream"));
    assert_part(&parts[1], "sample_type_config", NULL, "{\"cpu\":{}}");
    assert_null(parts[1].content_type);
    assert_ptr_equal(http_multipart_find(parts, 2, "sample_type_config"), &parts[1]);
    assert_null(http_multipart_find(parts, 2, "prev_profile"));
}

static void test_boundary_forms(void **state) {
    (void)state;
    http_multipart_part parts[2];
    strata_error err;
    const char *body = "preamble\r\n--a b;c\r\n"
                       "Content-Disposition: form-data; name=\"x;y\"\r\n\r\n"
                       "\r\n--a b;c-- \r\n";
    /* a quoted boundary may hold spaces and ';'; a preamble comes first; empty content */
    assert_int_equal(
        parse("Multipart/Form-Data ; charset=x; BOUNDARY=\"a b;c\"", body, parts, 2, &err), 1);
    assert_part(&parts[0], "x;y", NULL, "");
    assert_true(http_multipart_is_form_data("multipart/form-data"));
    assert_false(http_multipart_is_form_data("multipart/mixed; boundary=x"));
    assert_false(http_multipart_is_form_data(NULL));
    /* no parts at all */
    assert_int_equal(parse(CT, "--XyZ--\r\n", parts, 2, &err), 0);
}

static void test_refused(void **state) {
    (void)state;
    static const struct {
        const char *content_type, *body, *words;
    } cases[] = {
        {"application/octet-stream", "--XyZ--", "not multipart/form-data"},
        {"multipart/form-data", "--XyZ--", "no boundary"},
        {"multipart/form-data; boundary=\"\"", "--XyZ--", "1 to 70"},
        {CT, "no boundary line here", "no boundary line"},
        {CT, "--XyZ\r\nContent-Disposition: form-data; name=a\r\n\r\nnever closed",
         "has no closing boundary"},
        {CT, "--XyZ\r\nContent-Disposition: form-data; name=a\r\nno blank line", "do not end"},
        {CT, "--XyZ\r\nContent-Type: text/plain\r\n\r\nx\r\n--XyZ--",
         "no Content-Disposition name"},
        {CT, "--XyZ\r\n\r\nx\r\n--XyZ--", "no Content-Disposition name"},
        {CT, "--XyZ\r\nContent-Disposition: attachment; name=a\r\n\r\nx\r\n--XyZ--",
         "not form-data"},
        {CT, "--XyZ\r\nbroken header\r\n\r\nx\r\n--XyZ--", "no ':'"},
        {CT, "--XyZjunk\r\n", "not followed by CRLF"},
        {CT,
         "--XyZ\r\nContent-Disposition: form-data; name=a\r\n\r\n1\r\n--XyZ\r\n"
         "Content-Disposition: form-data; name=b\r\n\r\n2\r\n--XyZ\r\n"
         "Content-Disposition: form-data; name=c\r\n\r\n3\r\n--XyZ--",
         "more than 2 parts"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        http_multipart_part parts[2];
        strata_error err;
        strata_error_clear(&err);
        assert_int_equal(parse(cases[i].content_type, cases[i].body, parts, 2, &err), (size_t)-1);
        assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
        if (strstr(err.message, cases[i].words) == NULL)
            fail_msg("case %zu: \"%s\" lacks \"%s\"", i, err.message, cases[i].words);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parts),
        cmocka_unit_test(test_boundary_forms),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
