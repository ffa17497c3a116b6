/*
 * limits_test.c - per-tenant limits: config decoding and overrides, the token bucket under a fake
 * clock, the burst, active series with their window and limit, ageing out of idle tenants,
 * reloads, and concurrent admissions that never let more through than the limits.
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

#include "limits/limits.h"

#define SEC INT64_C(1000000000)
#define T0 (INT64_C(1000) * SEC) /* the fake clock's start */

typedef struct test_config {
    limits_values limits;
    limits_overrides overrides;
} test_config;

static const config_field test_fields[] = {
    {.key = "limits",
     .kind = CONFIG_STRUCT,
     .offset = offsetof(test_config, limits),
     .fields = limits_values_fields},
    LIMITS_OVERRIDES_FIELD("overrides", test_config, overrides),
    {.key = NULL},
};

static int decode(const char *yaml, test_config *out, strata_error *err) {
    config_document *doc;
    if (config_load_string("limits.yaml", yaml, strlen(yaml), &doc, err) != 0)
        return -1;
    int rc = config_decode_document(doc, test_fields, out, err);
    config_document_free(doc);
    return rc;
}

static void expect_decode_error(const char *yaml, const char *want) {
    test_config c;
    strata_error err;
    assert_int_equal(decode(yaml, &c, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_string_equal(err.message, want);
    config_free(test_fields, &c);
}

static limits_enforcer *new_limits(const char *yaml) {
    test_config c;
    strata_error err;
    if (decode(yaml, &c, &err) != 0)
        fail_msg("%s", err.message);
    limits_enforcer *l;
    assert_int_equal(limits_new(&c.limits, &c.overrides, &l, &err), 0);
    config_free(test_fields, &c);
    return l;
}

/* Admits n samples and the given series (0-terminated list of hashes). */
static int admit(limits_enforcer *l, const char *tenant, int64_t now, uint64_t n,
                 const uint64_t *series, limits_reason *reason, strata_error *err) {
    uint64_t copy[64];
    size_t count = 0;
    while (series != NULL && series[count] != 0) {
        copy[count] = series[count];
        count++;
    }
    strata_error_clear(err);
    return limits_admit(l, tenant, now, n, copy, count, reason, err);
}

static void expect_ok(limits_enforcer *l, const char *tenant, int64_t now, uint64_t n,
                      const uint64_t *series) {
    limits_reason reason;
    strata_error err;
    if (admit(l, tenant, now, n, series, &reason, &err) != 0)
        fail_msg("refused: %s", err.message);
    assert_int_equal(reason, LIMITS_NONE);
}

static void expect_refused(limits_enforcer *l, const char *tenant, int64_t now, uint64_t n,
                           const uint64_t *series, limits_reason want_reason, const char *want) {
    limits_reason reason;
    strata_error err;
    assert_int_equal(admit(l, tenant, now, n, series, &reason, &err), -1);
    assert_int_equal(reason, want_reason);
    assert_int_equal(err.code, STRATA_RESOURCE_EXHAUSTED);
    assert_string_equal(err.message, want);
}

/* ---- configuration ------------------------------------------------------------------------ */

static void test_config_defaults_and_overrides(void **state) {
    (void)state;
    test_config c;
    strata_error err;
    assert_int_equal(decode("{}", &c, &err), 0);
    assert_true(c.limits.ingestion_rate_samples == 0);
    assert_true(c.limits.ingestion_burst_samples == 0);
    assert_true(c.limits.max_active_series == 0);
    assert_true(c.limits.active_series_window_ns == 600 * SEC);
    assert_true(c.limits.max_query_bytes == 0);
    assert_int_equal(c.overrides.count, 0);
    config_free(test_fields, &c);

    const char *yaml = "limits: {ingestion_rate_samples: 1000, max_active_series: 50,\n"
                       "         max_query_bytes: 64MiB}\n"
                       "overrides:\n"
                       "  team-b: {max_active_series: 7, active_series_window: 1m,\n"
                       "           max_query_bytes: 1MiB}\n"
                       "  team-a: {ingestion_rate_samples: 0}\n"
                       "  team-c: {ingestion_burst_samples: 5000}\n"
                       "  team-d:\n";
    assert_int_equal(decode(yaml, &c, &err), 0);
    assert_int_equal(c.overrides.count, 4);
    assert_string_equal(c.overrides.items[0].tenant, "team-a"); /* sorted */
    assert_string_equal(c.overrides.items[3].tenant, "team-d");
    assert_int_equal(c.overrides.items[3].set, 0);
    limits_values v;
    limits_resolve(&c.limits, &c.overrides, "team-a", &v); /* 0 lifts the default */
    assert_true(v.ingestion_rate_samples == 0 && v.max_active_series == 50);
    limits_resolve(&c.limits, &c.overrides, "team-b", &v); /* the rate is the default's */
    assert_true(v.ingestion_rate_samples == 1000 && v.ingestion_burst_samples == 10000);
    assert_true(v.max_active_series == 7 && v.active_series_window_ns == 60 * SEC);
    assert_true(v.max_query_bytes == (uint64_t)1 << 20);
    limits_resolve(&c.limits, &c.overrides, "team-c", &v);
    assert_true(v.max_query_bytes == (uint64_t)64 << 20);
    assert_true(v.ingestion_rate_samples == 1000 && v.ingestion_burst_samples == 5000);
    limits_resolve(&c.limits, &c.overrides, "someone", &v); /* no override: the defaults */
    assert_true(v.ingestion_rate_samples == 1000 && v.ingestion_burst_samples == 10000);
    assert_true(v.max_active_series == 50 && v.active_series_window_ns == 600 * SEC);
    config_free(test_fields, &c);
}

static void test_config_errors(void **state) {
    (void)state;
    expect_decode_error("overrides:\n  team/a: {max_active_series: 1}\n",
                        "limits.yaml:2:3: overrides: tenant \"team/a\" is not valid: a tenant is "
                        "1-150 characters of [A-Za-z0-9_.-], not \".\" or \"..\"");
    expect_decode_error("overrides:\n  ..: {}\n",
                        "limits.yaml:2:3: overrides: tenant \"..\" is not valid: a tenant is "
                        "1-150 characters of [A-Za-z0-9_.-], not \".\" or \"..\"");
    expect_decode_error("overrides:\n  team-a: {max_series: 1}\n",
                        "limits.yaml:2:12: overrides.team-a: unknown key \"max_series\" (expected "
                        "one of: ingestion_rate_samples, ingestion_burst_samples, "
                        "max_active_series, active_series_window, max_query_bytes)");
    expect_decode_error("overrides: [team-a]\n",
                        "limits.yaml:1:12: overrides: expected a mapping of tenant to limits, "
                        "like {team-a: {ingestion_rate_samples: 100000}}");
    expect_decode_error("overrides:\n  team-a: {active_series_window: 1s}\n",
                        "limits.yaml:2:34: overrides.team-a.active_series_window: 1s is below "
                        "the minimum 10s");
    expect_decode_error("limits: {max_active_series: -1}\n",
                        "limits.yaml:1:29: limits.max_active_series: expected a non-negative "
                        "64-bit integer, got \"-1\"");
    expect_decode_error("limits: {max_active_series: 100000001}\n",
                        "limits.yaml:1:29: limits.max_active_series: 100000001 is above the "
                        "maximum 100000000");
}

/* ---- rate ------------------------------------------------------------------------------------ */

static void test_rate_with_fake_clock(void **state) {
    (void)state;
    limits_enforcer *l =
        new_limits("limits: {ingestion_rate_samples: 100, ingestion_burst_samples: 200}");
    assert_true(limits_enabled(l));
    expect_ok(l, "team-a", T0, 150, NULL); /* a new tenant starts with a full bucket */
    expect_refused(l, "team-a", T0, 100, NULL, LIMITS_RATE,
                   "tenant team-a: ingestion rate limit 100 samples/s (burst 200) exceeded: the "
                   "request has 100 samples, 50 are available (the rate refills them)");
    expect_ok(l, "team-a", T0 + SEC / 2, 100, NULL); /* 50 + 0.5 s x 100 */
    expect_refused(l, "team-a", T0 + SEC / 2, 1, NULL, LIMITS_RATE,
                   "tenant team-a: ingestion rate limit 100 samples/s (burst 200) exceeded: the "
                   "request has 1 samples, 0 are available (the rate refills them)");
    expect_ok(l, "team-b", T0, 200, NULL); /* each tenant has its own bucket */
    /* After 10 s the bucket holds the burst, not more. */
    expect_refused(l, "team-a", T0 + 10 * SEC, 201, NULL, LIMITS_RATE,
                   "tenant team-a: ingestion rate limit 100 samples/s (burst 200) exceeded: the "
                   "request has 201 samples, more than the burst");
    expect_ok(l, "team-a", T0 + 10 * SEC, 200, NULL);
    /* A clock going backwards adds nothing. */
    expect_refused(l, "team-a", T0, 1, NULL, LIMITS_RATE,
                   "tenant team-a: ingestion rate limit 100 samples/s (burst 200) exceeded: the "
                   "request has 1 samples, 0 are available (the rate refills them)");
    expect_ok(l, "team-a", T0 + 10 * SEC + SEC / 100, 1, NULL);
    limits_free(l);
}

static void test_burst_defaults_to_ten_seconds(void **state) {
    (void)state;
    limits_enforcer *l = new_limits("limits: {ingestion_rate_samples: 100}");
    expect_ok(l, "anonymous", T0, 1000, NULL);
    expect_refused(l, "anonymous", T0, 1, NULL, LIMITS_RATE,
                   "tenant anonymous: ingestion rate limit 100 samples/s (burst 1000) exceeded: "
                   "the request has 1 samples, 0 are available (the rate refills them)");
    expect_refused(l, "other", T0, 1001, NULL, LIMITS_RATE,
                   "tenant other: ingestion rate limit 100 samples/s (burst 1000) exceeded: the "
                   "request has 1001 samples, more than the burst");
    limits_free(l);
}

/* ---- series ---------------------------------------------------------------------------------- */

static void test_series_limit_and_window(void **state) {
    (void)state;
    limits_enforcer *l = new_limits("limits: {max_active_series: 3, active_series_window: 10s}");
    const uint64_t abc[] = {11, 12, 13, 0}, d[] = {14, 0}, known[] = {11, 11, 12, 0},
                   ad[] = {11, 14, 0}, a[] = {11, 0}, de[] = {14, 15, 0}, ee[] = {15, 15, 0},
                   f[] = {16, 0};
    expect_ok(l, "team-a", T0, 10, abc);
    assert_int_equal(limits_tenant_series(l, "team-a"), 3);
    expect_refused(l, "team-a", T0 + SEC, 1, d, LIMITS_SERIES,
                   "tenant team-a: active series limit 3 exceeded: 3 series active within 10s, "
                   "the request adds 1");
    expect_ok(l, "team-a", T0 + SEC, 1, known); /* known series (repeated) still pass */
    expect_refused(l, "team-a", T0 + SEC, 1, ad, LIMITS_SERIES, /* refused whole */
                   "tenant team-a: active series limit 3 exceeded: 3 series active within 10s, "
                   "the request adds 1");
    assert_int_equal(limits_tenant_series(l, "team-a"), 3);
    expect_ok(l, "team-b", T0, 1, abc); /* another tenant counts its own */
    /* 11 written again at 5 s; 12 last at 1 s, 13 at 0 s: at 11 s only 11 is active. */
    expect_ok(l, "team-a", T0 + 5 * SEC, 1, a);
    expect_ok(l, "team-a", T0 + 11 * SEC, 1, de);
    assert_int_equal(limits_tenant_series(l, "team-a"), 3); /* 11, 14, 15 */
    expect_refused(l, "team-a", T0 + 11 * SEC, 1, f, LIMITS_SERIES,
                   "tenant team-a: active series limit 3 exceeded: 3 series active within 10s, "
                   "the request adds 1");
    expect_ok(l, "team-a", T0 + 12 * SEC, 1, ee); /* a repeat of a new series counts once */
    /* 11 expired at 15 s (written at 5 s): the periodic drop (every window / 10) frees it. */
    expect_ok(l, "team-a", T0 + 15 * SEC + SEC / 10, 1, f);
    assert_int_equal(limits_tenant_series(l, "team-a"), 3); /* 14, 15, 16 */
    limits_free(l);
}

static void test_series_expire_without_pressure(void **state) {
    (void)state;
    /* Below the limit, expired series go at the periodic drop (every window / 10). */
    limits_enforcer *l = new_limits("limits: {max_active_series: 100, active_series_window: 10s}");
    const uint64_t s1[] = {1, 2, 3, 4, 0}, s2[] = {5, 0};
    expect_ok(l, "t", T0, 1, s1);
    expect_ok(l, "t", T0 + 5 * SEC, 1, s2);
    expect_ok(l, "t", T0 + 10 * SEC, 1, s2); /* 1-4 expire exactly at 10 s */
    assert_int_equal(limits_tenant_series(l, "t"), 1);
    limits_free(l);
}

static void test_rate_and_series_all_or_nothing(void **state) {
    (void)state;
    limits_enforcer *l =
        new_limits("limits: {ingestion_rate_samples: 10, ingestion_burst_samples: 10, "
                   "max_active_series: 2}");
    const uint64_t ab[] = {1, 2, 0}, c[] = {3, 0}, a[] = {1, 0};
    /* Refused for its rate: its series are not counted. */
    expect_refused(l, "t", T0, 11, ab, LIMITS_RATE,
                   "tenant t: ingestion rate limit 10 samples/s (burst 10) exceeded: the request "
                   "has 11 samples, more than the burst");
    assert_int_equal(limits_tenant_series(l, "t"), 0);
    expect_ok(l, "t", T0, 4, ab);
    /* Refused for its series: its samples are not taken. */
    expect_refused(l, "t", T0, 6, c, LIMITS_SERIES,
                   "tenant t: active series limit 2 exceeded: 2 series active within 10m, the "
                   "request adds 1");
    expect_ok(l, "t", T0, 6, a);
    limits_free(l);
}

/* ---- overrides, ageing, reloads ----------------------------------------------------------- */

static void test_overrides(void **state) {
    (void)state;
    limits_enforcer *l = new_limits("limits: {ingestion_rate_samples: 10}\n"
                                    "overrides:\n"
                                    "  big: {ingestion_rate_samples: 0}\n"
                                    "  small: {max_active_series: 1}\n");
    expect_ok(l, "big", T0, 1000000, NULL);
    expect_refused(l, "anonymous", T0, 101, NULL, LIMITS_RATE,
                   "tenant anonymous: ingestion rate limit 10 samples/s (burst 100) exceeded: the "
                   "request has 101 samples, more than the burst");
    const uint64_t one[] = {1, 0}, two[] = {2, 0};
    expect_ok(l, "small", T0, 100, one);
    expect_refused(l, "small", T0 + SEC, 1, two, LIMITS_SERIES,
                   "tenant small: active series limit 1 exceeded: 1 series active within 10m, the "
                   "request adds 1");
    expect_refused(l, "small", T0 + SEC, 11, one, LIMITS_RATE, /* the default rate applies */
                   "tenant small: ingestion rate limit 10 samples/s (burst 100) exceeded: the "
                   "request has 11 samples, 10 are available (the rate refills them)");
    limits_stats st;
    limits_get_stats(l, &st);
    assert_true(st.tenants == 2 && st.series == 1); /* no state for the unlimited "big" */
    limits_free(l);
}

static void test_no_limits_keep_no_state(void **state) {
    (void)state;
    limits_enforcer *l = new_limits("overrides: {team-a: {ingestion_burst_samples: 5}}");
    assert_false(limits_enabled(l)); /* a burst without a rate limits nothing */
    const uint64_t s[] = {1, 2, 3, 0};
    expect_ok(l, "team-a", T0, 1000000, s);
    limits_stats st;
    limits_get_stats(l, &st);
    assert_true(st.tenants == 0 && st.series == 0);
    limits_free(l);
}

static void test_idle_tenants_age_out(void **state) {
    (void)state;
    limits_enforcer *l =
        new_limits("limits: {ingestion_rate_samples: 100, ingestion_burst_samples: 200}\n"
                   "overrides: {series: {max_active_series: 5, active_series_window: 1m}}");
    const uint64_t s[] = {1, 2, 0};
    expect_ok(l, "rate", T0, 200, NULL);
    expect_ok(l, "series", T0, 1, s);
    limits_stats st;
    limits_get_stats(l, &st);
    assert_true(st.tenants == 2 && st.series == 2);
    limits_sweep(l, T0 + SEC); /* "rate" refills in 2 s, "series" has a 60 s window */
    limits_get_stats(l, &st);
    assert_int_equal(st.tenants, 2);
    limits_sweep(l, T0 + 2 * SEC + SEC / 10);
    limits_get_stats(l, &st);
    assert_true(st.tenants == 1 && st.series == 2);
    assert_int_equal(limits_tenant_series(l, "series"), 2);
    limits_sweep(l, T0 + 60 * SEC);
    limits_get_stats(l, &st);
    assert_true(st.tenants == 0 && st.series == 0);
    /* A tenant that comes back starts fresh: a full bucket, no series. */
    expect_ok(l, "rate", T0 + 61 * SEC, 200, NULL);
    /* limits_admit sweeps by itself every 10 s of its clock. */
    expect_ok(l, "t1", T0 + 61 * SEC, 1, NULL);
    expect_ok(l, "t2", T0 + 100 * SEC, 1, NULL);
    limits_get_stats(l, &st);
    assert_int_equal(st.tenants, 1); /* "rate" and "t1" went, "t2" is new */
    limits_free(l);
}

static void test_apply_reload(void **state) {
    (void)state;
    limits_enforcer *l = new_limits("limits: {ingestion_rate_samples: 100, max_active_series: 2}");
    const uint64_t ab[] = {1, 2, 0}, c[] = {3, 0};
    expect_ok(l, "t", T0, 10, ab);
    expect_ok(l, "u", T0, 10, NULL);
    test_config c2;
    strata_error err;
    assert_int_equal(decode("limits: {ingestion_rate_samples: 10, ingestion_burst_samples: 20, "
                            "max_active_series: 3}\n"
                            "overrides: {u: {ingestion_rate_samples: 0, max_active_series: 0}}",
                            &c2, &err),
                     0);
    assert_int_equal(limits_apply(l, &c2.limits, &c2.overrides, &err), 0);
    config_free(test_fields, &c2);
    /* t: tokens capped at the new burst, its two series still counted, room for a third. */
    expect_refused(l, "t", T0, 21, NULL, LIMITS_RATE,
                   "tenant t: ingestion rate limit 10 samples/s (burst 20) exceeded: the request "
                   "has 21 samples, more than the burst");
    expect_ok(l, "t", T0, 20, c);
    assert_int_equal(limits_tenant_series(l, "t"), 3);
    limits_stats st;
    limits_get_stats(l, &st);
    assert_int_equal(st.tenants, 1); /* u has no limits left: its state went */
    /* Back to nothing: disabled, every state dropped. */
    limits_values none = {.active_series_window_ns = 600 * SEC};
    assert_int_equal(limits_apply(l, &none, NULL, &err), 0);
    assert_false(limits_enabled(l));
    limits_get_stats(l, &st);
    assert_int_equal(st.tenants, 0);
    limits_free(l);
}

/* ---- threads --------------------------------------------------------------------------------- */

typedef struct worker {
    limits_enforcer *l;
    int index;
    int admitted_samples;
    int admitted_series;
} worker;

static void *run_worker(void *arg) {
    worker *w = arg;
    for (int i = 0; i < 5000; i++) {
        limits_reason reason;
        strata_error err;
        if (limits_admit(w->l, "shared", T0, 1, NULL, 0, &reason, &err) == 0)
            w->admitted_samples++;
        uint64_t series = (uint64_t)(w->index * 100000 + i + 1);
        if (limits_admit(w->l, "series", T0, 0, &series, 1, &reason, &err) == 0)
            w->admitted_series++;
    }
    return NULL;
}

static void test_concurrent_admissions(void **state) {
    (void)state;
    limits_enforcer *l =
        new_limits("limits: {ingestion_rate_samples: 1, ingestion_burst_samples: 7000}\n"
                   "overrides: {series: {ingestion_rate_samples: 0, "
                   "max_active_series: 900}}");
    worker w[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        w[i] = (worker){.l = l, .index = i};
        assert_int_equal(pthread_create(&th[i], NULL, run_worker, &w[i]), 0);
    }
    int samples = 0, series = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        samples += w[i].admitted_samples;
        series += w[i].admitted_series;
    }
    assert_int_equal(samples, 7000); /* the clock stands still: exactly the burst */
    assert_int_equal(series, 900);
    assert_int_equal(limits_tenant_series(l, "series"), 900);
    limits_stats st;
    limits_get_stats(l, &st);
    /* 900 series in 2,048 slots of 16 bytes, plus two tenant states and the tenant table */
    assert_true(st.tenants == 2 && st.series == 900);
    assert_true(st.bytes >= 2048 * 16 + 64 * 8 && st.bytes < 2048 * 16 + 64 * 8 + 1024);
    limits_free(l);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_defaults_and_overrides),
        cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_rate_with_fake_clock),
        cmocka_unit_test(test_burst_defaults_to_ten_seconds),
        cmocka_unit_test(test_series_limit_and_window),
        cmocka_unit_test(test_series_expire_without_pressure),
        cmocka_unit_test(test_rate_and_series_all_or_nothing),
        cmocka_unit_test(test_overrides),
        cmocka_unit_test(test_no_limits_keep_no_state),
        cmocka_unit_test(test_idle_tenants_age_out),
        cmocka_unit_test(test_apply_reload),
        cmocka_unit_test(test_concurrent_admissions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
