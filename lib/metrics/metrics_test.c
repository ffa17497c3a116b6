/*
 * metrics_test.c - tests for the metrics registry: exact text output, escaping, histogram
 * buckets, concurrency, vec children and their cap, collectors and process metrics.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "metrics/metrics.h"

/* Renders r into a NUL-terminated string owned by the caller. */
static char *render(metrics_registry *r) {
    strata_buffer b = STRATA_BUFFER_INIT;
    strata_error err;
    assert_int_equal(metrics_registry_render(r, &b, &err), 0);
    char *text = strata_buffer_detach(&b, NULL);
    assert_non_null(text);
    return text;
}

/* Value on the line that starts with `prefix ` (the full series name with labels), or NAN. */
static double value_of(const char *text, const char *prefix) {
    size_t n = strlen(prefix);
    for (const char *p = text; p != NULL && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
        if (strncmp(p, prefix, n) == 0 && p[n] == ' ')
            return strtod(p + n + 1, NULL);
    return NAN;
}

static void test_exact_text_output(void **state) {
    (void)state;
    strata_error err;
    metrics_registry *r = metrics_registry_new(&err);
    assert_non_null(r);
    metrics_counter *requests = metrics_counter_new(
        r, &(metrics_opts){.name = "app_requests_total", .help = "Requests served."}, &err);
    metrics_gauge *temp = metrics_gauge_new(
        r, &(metrics_opts){.name = "app_temperature", .help = "Degrees.", .kind = METRICS_DOUBLE},
        &err);
    const char *const err_labels[] = {"code", "path"};
    metrics_counter_vec *errors =
        metrics_counter_vec_new(r,
                                &(metrics_opts){.name = "app_errors_total",
                                                .help = "Errors\nby code \\ path.",
                                                .label_names = err_labels,
                                                .n_labels = 2},
                                &err);
    const double bounds[] = {0.25, 0.5, 1};
    metrics_histogram *latency = metrics_histogram_new(
        r,
        &(metrics_opts){
            .name = "app_latency_seconds", .help = "Latency.", .buckets = bounds, .n_buckets = 3},
        &err);
    assert_non_null(requests);
    assert_non_null(temp);
    assert_non_null(errors);
    assert_non_null(latency);

    for (int i = 0; i < 3; i++)
        metrics_counter_inc(requests);
    metrics_gauge_set_double(temp, 21.5);
    metrics_counter_add(metrics_counter_vec_with(errors, (const char *[]){"500", "/a"}), 2);
    metrics_counter_inc(metrics_counter_vec_with(errors, (const char *[]){"404", "a\"b\\c\nd"}));
    metrics_histogram_observe(latency, 0.125);
    metrics_histogram_observe(latency, 0.25);
    metrics_histogram_observe(latency, 0.75);
    metrics_histogram_observe(latency, 3);

    const char *expected = "# HELP app_errors_total Errors\\nby code \\\\ path.\n"
                           "# TYPE app_errors_total counter\n"
                           "app_errors_total{code=\"404\",path=\"a\\\"b\\\\c\\nd\"} 1\n"
                           "app_errors_total{code=\"500\",path=\"/a\"} 2\n"
                           "# HELP app_latency_seconds Latency.\n"
                           "# TYPE app_latency_seconds histogram\n"
                           "app_latency_seconds_bucket{le=\"0.25\"} 2\n"
                           "app_latency_seconds_bucket{le=\"0.5\"} 2\n"
                           "app_latency_seconds_bucket{le=\"1\"} 3\n"
                           "app_latency_seconds_bucket{le=\"+Inf\"} 4\n"
                           "app_latency_seconds_sum 4.125\n"
                           "app_latency_seconds_count 4\n"
                           "# HELP app_requests_total Requests served.\n"
                           "# TYPE app_requests_total counter\n"
                           "app_requests_total 3\n"
                           "# HELP app_temperature Degrees.\n"
                           "# TYPE app_temperature gauge\n"
                           "app_temperature 21.5\n";
    char *text = render(r);
    assert_string_equal(text, expected);
    free(text);
    metrics_registry_free(r);
}

static void test_invalid_definitions(void **state) {
    (void)state;
    strata_error err;
    metrics_registry *r = metrics_registry_new(&err);
    assert_non_null(r);
    const char *bad_names[] = {"", "1abc", "a-b", "a b", "é"};
    for (size_t i = 0; i < sizeof bad_names / sizeof bad_names[0]; i++) {
        assert_null(
            metrics_counter_new(r, &(metrics_opts){.name = bad_names[i], .help = ""}, &err));
        assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    }
    assert_null(metrics_counter_new(r, &(metrics_opts){.name = "no_help"}, &err));
    assert_null(metrics_counter_new(r, NULL, &err));

    const char *const reserved[] = {"__x"};
    const char *const le[] = {"le"};
    const char *const dup[] = {"a", "a"};
    const char *const colon[] = {"a:b"};
    assert_null(metrics_counter_vec_new(
        r, &(metrics_opts){.name = "v1", .help = "", .label_names = reserved, .n_labels = 1},
        &err));
    assert_null(metrics_histogram_vec_new(
        r, &(metrics_opts){.name = "v2", .help = "", .label_names = le, .n_labels = 1}, &err));
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_non_null(metrics_counter_vec_new(
        r, &(metrics_opts){.name = "v3", .help = "", .label_names = le, .n_labels = 1}, &err));
    assert_null(metrics_counter_vec_new(
        r, &(metrics_opts){.name = "v4", .help = "", .label_names = dup, .n_labels = 2}, &err));
    assert_null(metrics_counter_vec_new(
        r, &(metrics_opts){.name = "v5", .help = "", .label_names = colon, .n_labels = 1}, &err));
    assert_null(metrics_counter_vec_new(r, &(metrics_opts){.name = "v6", .help = ""}, &err));
    assert_null(metrics_counter_new(
        r, &(metrics_opts){.name = "v7", .help = "", .label_names = le, .n_labels = 1}, &err));

    const double decreasing[] = {1, 0.5};
    const double with_nan[] = {0.1, NAN};
    assert_null(metrics_histogram_new(
        r, &(metrics_opts){.name = "h1", .help = "", .buckets = decreasing, .n_buckets = 2}, &err));
    assert_null(metrics_histogram_new(
        r, &(metrics_opts){.name = "h2", .help = "", .buckets = with_nan, .n_buckets = 2}, &err));
    const double inf_only[] = {INFINITY};
    assert_null(metrics_histogram_new(
        r, &(metrics_opts){.name = "h3", .help = "", .buckets = inf_only, .n_buckets = 1}, &err));
    metrics_registry_free(r);
}

static void test_get_or_create(void **state) {
    (void)state;
    strata_error err;
    metrics_registry *r = metrics_registry_new(&err);
    assert_non_null(r);
    metrics_opts o = {.name = "x_total", .help = "X."};
    metrics_counter *a = metrics_counter_new(r, &o, &err);
    metrics_counter *b = metrics_counter_new(r, &o, &err);
    assert_non_null(a);
    assert_ptr_equal(a, b);
    assert_null(metrics_gauge_new(r, &o, &err));
    assert_int_equal(err.code, STRATA_ALREADY_EXISTS);
    assert_null(metrics_counter_new(r, &(metrics_opts){.name = "x_total", .help = "Other."}, &err));
    assert_int_equal(err.code, STRATA_ALREADY_EXISTS);
    assert_null(metrics_counter_new(
        r, &(metrics_opts){.name = "x_total", .help = "X.", .kind = METRICS_DOUBLE}, &err));

    const double b1[] = {1, 2, INFINITY}, b2[] = {1, 2}, b3[] = {1, 3};
    metrics_histogram *h1 = metrics_histogram_new(
        r, &(metrics_opts){.name = "h", .help = "", .buckets = b1, .n_buckets = 3}, &err);
    metrics_histogram *h2 = metrics_histogram_new(
        r, &(metrics_opts){.name = "h", .help = "", .buckets = b2, .n_buckets = 2}, &err);
    assert_non_null(h1);
    assert_ptr_equal(h1, h2);
    assert_null(metrics_histogram_new(
        r, &(metrics_opts){.name = "h", .help = "", .buckets = b3, .n_buckets = 2}, &err));
    metrics_registry_free(r);
}

static void test_histogram_bucket_math(void **state) {
    (void)state;
    strata_error err;
    metrics_registry *r = metrics_registry_new(&err);
    assert_non_null(r);
    metrics_histogram *h =
        metrics_histogram_new(r, &(metrics_opts){.name = "lat_seconds", .help = "Latency."}, &err);
    assert_non_null(h);
    size_t n;
    const double *def = metrics_default_latency_buckets(&n);
    assert_int_equal(n, 11);
    assert_true(def[0] == 0.005 && def[10] == 10);
    /* one observation exactly on every bound, one above all, one below all */
    for (size_t i = 0; i < n; i++)
        metrics_histogram_observe(h, def[i]);
    metrics_histogram_observe(h, 11);
    metrics_histogram_observe(h, -1);
    metrics_histogram_observe(h, NAN);
    metrics_histogram_observe_ns(h, 30000000); /* 0.03 s lands in le=0.05 */
    assert_int_equal(metrics_histogram_count(h), 14);

    char *text = render(r);
    assert_true(value_of(text, "lat_seconds_bucket{le=\"0.005\"}") == 2);
    assert_true(value_of(text, "lat_seconds_bucket{le=\"0.01\"}") == 3);
    assert_true(value_of(text, "lat_seconds_bucket{le=\"0.025\"}") == 4);
    assert_true(value_of(text, "lat_seconds_bucket{le=\"0.05\"}") == 6);
    assert_true(value_of(text, "lat_seconds_bucket{le=\"10\"}") == 13);
    assert_true(value_of(text, "lat_seconds_bucket{le=\"+Inf\"}") == 14);
    assert_true(value_of(text, "lat_seconds_count") == 14);
    assert_true(fabs(value_of(text, "lat_seconds_sum") - (19.44 + 11 - 1 + 0.03)) < 1e-9);
    free(text);

    double exp[4];
    assert_int_equal(metrics_exponential_buckets(0.001, 10, 4, exp, &err), 0);
    assert_true(exp[0] == 0.001 && exp[3] == 0.001 * 10 * 10 * 10);
    assert_int_equal(metrics_exponential_buckets(0, 2, 4, exp, &err), -1);
    assert_int_equal(metrics_exponential_buckets(1, 1, 4, exp, &err), -1);
    assert_int_equal(metrics_exponential_buckets(1, 2, 0, exp, &err), -1);
    metrics_registry_free(r);
}

static void test_values_and_formatting(void **state) {
    (void)state;
    strata_error err;
    metrics_registry *r = metrics_registry_new(&err);
    assert_non_null(r);
    metrics_gauge *g = metrics_gauge_new(
        r, &(metrics_opts){.name = "g", .help = "", .kind = METRICS_DOUBLE}, &err);
    metrics_gauge *gi = metrics_gauge_new(r, &(metrics_opts){.name = "gi", .help = ""}, &err);
    metrics_counter *c = metrics_counter_new(r, &(metrics_opts){.name = "c", .help = ""}, &err);
    metrics_counter *cd = metrics_counter_new(
        r, &(metrics_opts){.name = "cd", .help = "", .kind = METRICS_DOUBLE}, &err);
    metrics_counter_add(c, -5);
    metrics_counter_add_double(c, 2.6); /* rounds to 3 on an int counter */
    metrics_counter_add_double(cd, NAN);
    metrics_counter_add_double(cd, -1);
    metrics_counter_add(cd, 2);
    metrics_counter_add_double(cd, 0.1);
    metrics_gauge_set(gi, INT64_MIN);
    metrics_gauge_set_double(g, 0.1);
    assert_true(metrics_counter_value(c) == 3);
    assert_true(metrics_counter_value(cd) == 2.1);

    char *text = render(r);
    assert_non_null(strstr(text, "\nc 3\n"));
    assert_non_null(strstr(text, "\ncd 2.1\n"));
    assert_non_null(strstr(text, "\ng 0.1\n"));
    assert_non_null(strstr(text, "\ngi -9223372036854775808\n"));
    free(text);

    const double cases[] = {1e-9,      1e21, 123456789.125, -0.5,     INFINITY,
                            -INFINITY, 100,  0.0001,        123456.5, 1e6};
    const char *want[] = {
        "g 1e-09\n", "g 1e+21\n",  "g 1.23456789125e+08\n", "g -0.5\n", "g +Inf\n", "g -Inf\n",
        "g 100\n",   "g 0.0001\n", "g 123456.5\n",          "g 1e+06\n"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        metrics_gauge_set_double(g, cases[i]);
        text = render(r);
        assert_non_null(strstr(text, want[i]));
        free(text);
    }
    metrics_gauge_set_double(g, 5);
    metrics_gauge_inc(g);
    metrics_gauge_dec(g);
    metrics_gauge_dec(g);
    metrics_gauge_add_double(g, 0.25);
    assert_true(metrics_gauge_value(g) == 4.25);

    /* NULL handles are accepted everywhere */
    metrics_counter_inc(NULL);
    metrics_gauge_set(NULL, 1);
    metrics_histogram_observe(NULL, 1);
    assert_null(metrics_counter_vec_with(NULL, (const char *[]){"x"}));
    metrics_registry_free(r);
}

static void test_vec_children_and_cap(void **state) {
    (void)state;
    strata_error err;
    metrics_registry *r = metrics_registry_new(&err);
    assert_non_null(r);
    const char *const names[] = {"method"};
    metrics_counter_vec *v = metrics_counter_vec_new(r,
                                                     &(metrics_opts){.name = "calls_total",
                                                                     .help = "",
                                                                     .label_names = names,
                                                                     .n_labels = 1,
                                                                     .max_children = 2},
                                                     &err);
    assert_non_null(v);
    metrics_counter *a = metrics_counter_vec_with(v, (const char *[]){"a"});
    metrics_counter *b = metrics_counter_vec_with(v, (const char *[]){"b"});
    assert_non_null(a);
    assert_non_null(b);
    assert_ptr_not_equal(a, b);
    assert_ptr_equal(metrics_counter_vec_with(v, (const char *[]){"a"}), a);
    assert_null(metrics_counter_vec_with(v, (const char *[]){"c"}));
    assert_null(metrics_counter_vec_with(v, (const char *[]){"d"}));
    assert_null(metrics_counter_vec_with(v, (const char *[]){NULL}));
    metrics_counter_inc(a);

    const char *const hl[] = {"path"};
    metrics_histogram_vec *hv = metrics_histogram_vec_new(
        r, &(metrics_opts){.name = "hv_seconds", .help = "", .label_names = hl, .n_labels = 1},
        &err);
    assert_non_null(hv);
    metrics_gauge_vec *gv = metrics_gauge_vec_new(
        r, &(metrics_opts){.name = "gv", .help = "", .label_names = hl, .n_labels = 1}, &err);
    metrics_histogram_observe(metrics_histogram_vec_with(hv, (const char *[]){"/x"}), 0.2);
    metrics_gauge_set(metrics_gauge_vec_with(gv, (const char *[]){""}), 7);

    char *text = render(r);
    assert_true(value_of(text, "calls_total{method=\"a\"}") == 1);
    assert_true(value_of(text, "calls_total{method=\"b\"}") == 0);
    assert_null(strstr(text, "method=\"c\""));
    assert_true(value_of(text, "strata_metrics_children_dropped_total{metric=\"calls_total\"}") ==
                2);
    assert_true(value_of(text, "hv_seconds_bucket{path=\"/x\",le=\"0.25\"}") == 1);
    assert_true(value_of(text, "hv_seconds_bucket{path=\"/x\",le=\"0.1\"}") == 0);
    assert_true(value_of(text, "hv_seconds_count{path=\"/x\"}") == 1);
    assert_true(value_of(text, "gv{path=\"\"}") == 7);
    free(text);
    metrics_registry_free(r);
}

static void test_empty_vec_is_omitted(void **state) {
    (void)state;
    strata_error err;
    metrics_registry *r = metrics_registry_new(&err);
    assert_non_null(r);
    const char *const names[] = {"x"};
    assert_non_null(metrics_counter_vec_new(
        r, &(metrics_opts){.name = "unused_total", .help = "", .label_names = names, .n_labels = 1},
        &err));
    char *text = render(r);
    assert_string_equal(text, "");
    free(text);
    metrics_registry_free(r);
}

enum { THREADS = 8, ITERATIONS = 50000 };

typedef struct shared_metrics {
    metrics_counter *ints;
    metrics_counter *doubles;
    metrics_histogram *hist;
    metrics_counter_vec *vec;
} shared_metrics;

static void *hammer(void *arg) {
    shared_metrics *m = arg;
    const char *labels[][1] = {{"x"}, {"y"}, {"z"}};
    for (int i = 0; i < ITERATIONS; i++) {
        metrics_counter_inc(m->ints);
        metrics_counter_add_double(m->doubles, 0.5);
        metrics_histogram_observe(m->hist, (i % 2) ? 0.5 : 2.0);
        metrics_counter_inc(metrics_counter_vec_with(m->vec, labels[i % 3]));
    }
    return NULL;
}

static void test_concurrent_updates_sum_exactly(void **state) {
    (void)state;
    strata_error err;
    metrics_registry *r = metrics_registry_new(&err);
    assert_non_null(r);
    const double bounds[] = {1};
    const char *const names[] = {"k"};
    shared_metrics m = {
        .ints = metrics_counter_new(r, &(metrics_opts){.name = "ints_total", .help = ""}, &err),
        .doubles = metrics_counter_new(
            r, &(metrics_opts){.name = "doubles_total", .help = "", .kind = METRICS_DOUBLE}, &err),
        .hist = metrics_histogram_new(
            r, &(metrics_opts){.name = "hist", .help = "", .buckets = bounds, .n_buckets = 1},
            &err),
        .vec = metrics_counter_vec_new(
            r,
            &(metrics_opts){.name = "vec_total", .help = "", .label_names = names, .n_labels = 1},
            &err),
    };
    pthread_t threads[THREADS];
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&threads[i], NULL, hammer, &m), 0);
    for (int i = 0; i < THREADS; i++)
        pthread_join(threads[i], NULL);
    const double total = (double)THREADS * ITERATIONS;
    assert_true(metrics_counter_value(m.ints) == total);
    assert_true(metrics_counter_value(m.doubles) == total / 2);
    assert_int_equal(metrics_histogram_count(m.hist), THREADS * ITERATIONS);
    assert_true(metrics_histogram_sum(m.hist) == total / 2 * 2.5);
    char *text = render(r);
    assert_true(value_of(text, "hist_bucket{le=\"1\"}") == total / 2);
    double sum = value_of(text, "vec_total{k=\"x\"}") + value_of(text, "vec_total{k=\"y\"}") +
                 value_of(text, "vec_total{k=\"z\"}");
    assert_true(sum == total);
    free(text);
    metrics_registry_free(r);
}

typedef struct collector_ctx {
    metrics_gauge *gauge;
    int calls;
} collector_ctx;

static void collect(void *ctx) {
    collector_ctx *c = ctx;
    c->calls++;
    metrics_gauge_set(c->gauge, c->calls * 10);
}

static void test_collectors(void **state) {
    (void)state;
    strata_error err;
    metrics_registry *r = metrics_registry_new(&err);
    assert_non_null(r);
    collector_ctx c = {.gauge = metrics_gauge_new(
                           r, &(metrics_opts){.name = "owned_elsewhere", .help = ""}, &err)};
    assert_int_equal(metrics_registry_add_collector(r, collect, &c, &err), 0);
    char *text = render(r);
    assert_true(value_of(text, "owned_elsewhere") == 10);
    free(text);
    text = render(r);
    assert_true(value_of(text, "owned_elsewhere") == 20);
    free(text);
    assert_true(metrics_registry_remove_collector(r, collect, &c));
    assert_false(metrics_registry_remove_collector(r, collect, &c));
    text = render(r);
    assert_true(value_of(text, "owned_elsewhere") == 20);
    assert_int_equal(c.calls, 2);
    free(text);
    assert_int_equal(metrics_registry_add_collector(r, NULL, NULL, &err), -1);
    metrics_registry_free(r);
}

static void test_process_metrics(void **state) {
    (void)state;
    strata_error err;
    metrics_registry *r = metrics_registry_new(&err);
    assert_non_null(r);
    assert_int_equal(metrics_register_process_metrics(r, &err), 0);
    assert_int_equal(metrics_register_process_metrics(r, &err), 0); /* idempotent */
    char *text = render(r);
    assert_true(value_of(text, "process_cpu_seconds_total") > 0);
    assert_true(value_of(text, "process_resident_memory_bytes") > 1024 * 1024);
    assert_true(value_of(text, "process_virtual_memory_bytes") >=
                value_of(text, "process_resident_memory_bytes"));
    assert_true(value_of(text, "process_open_fds") >= 3);
    assert_true(value_of(text, "process_max_fds") >= value_of(text, "process_open_fds"));
    double start = value_of(text, "process_start_time_seconds");
    double now = (double)time(NULL);
    assert_true(start > now - 3600 && start <= now + 1);
    assert_non_null(strstr(text, "# TYPE process_cpu_seconds_total counter\n"));
    free(text);
    metrics_registry_free(r);
}

static void test_default_registry(void **state) {
    (void)state;
    metrics_registry *a = metrics_default_registry();
    assert_non_null(a);
    assert_ptr_equal(a, metrics_default_registry());
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exact_text_output),
        cmocka_unit_test(test_invalid_definitions),
        cmocka_unit_test(test_get_or_create),
        cmocka_unit_test(test_histogram_bucket_math),
        cmocka_unit_test(test_values_and_formatting),
        cmocka_unit_test(test_vec_children_and_cap),
        cmocka_unit_test(test_empty_vec_is_omitted),
        cmocka_unit_test(test_concurrent_updates_sum_exactly),
        cmocka_unit_test(test_collectors),
        cmocka_unit_test(test_process_metrics),
        cmocka_unit_test(test_default_registry),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
