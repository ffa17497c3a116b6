/*
 * scraper_test.c - the scraper against a real HTTP server (lib/http) posing as pprof targets: a
 * good one serving a real Go heap profile, and targets that answer 500, garbage, too much, or
 * hang. Good scrapes reach the sink with the final labels; each bad target is unhealthy with its
 * own last error while the good one keeps being scraped. Also: relabeling (dropped targets,
 * instance), URLs of delta endpoints and params, keep_sample_type, and the Targets API in both
 * encodings.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/clock.h"
#include "json/json.h"
#include "parca/scrape/v1alpha1/scrape.pb-c.h"
#include "pprof/pprof.h"
#include "scraper.h"

typedef struct fixture {
    http_server *http;
    uint16_t port;
    strata_buffer heap; /* lib/pprof/testdata/go_heap.pb.gz */
    metrics_registry *registry;
    pthread_mutex_t mu;
    size_t pushes_good;
    size_t pushes_other;
    char last_labels[512];
    strata_buffer last_pprof;
} fixture;

static fixture fx;

static void read_file(const char *path, strata_buffer *out) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        assert_int_equal(strata_buffer_append(out, buf, n), 0);
    fclose(f);
}

static void serve(void *ctx, const http_request *req, http_response *resp) {
    (void)ctx;
    const char *path = http_request_path(req);
    if (strncmp(path, "/good/", 6) == 0 || strncmp(path, "/big/", 5) == 0) {
        strata_buffer_append(http_response_body(resp), fx.heap.data, fx.heap.len);
    } else if (strncmp(path, "/bad500/", 8) == 0) {
        http_response_set_status(resp, 500);
        strata_buffer_append_str(http_response_body(resp), "boom\n");
    } else if (strncmp(path, "/garbage/", 9) == 0) {
        strata_buffer_append_str(http_response_body(resp), "this is not a profile at all\n");
    } else if (strncmp(path, "/hang/", 6) == 0) {
        /* Blocks only this connection's thread. When lib/http served many connections per
         * worker, these sleeps delayed big's answer past its timeout (seen in CI). */
        usleep(1500 * 1000);
        strata_buffer_append(http_response_body(resp), fx.heap.data, fx.heap.len);
    } else {
        http_response_set_status(resp, 404);
    }
}

static int sink(void *ctx, const push_series *series, size_t n, strata_error *err) {
    (void)ctx;
    (void)err;
    assert_true(n >= 1 && n <= 64);
    for (size_t i = 0; i + 1 < n; i++)
        sink(ctx, &series[i], 1, err);
    series += n - 1;
    strata_buffer text = STRATA_BUFFER_INIT;
    assert_int_equal(label_set_format(series->labels, &text), 0);
    assert_int_equal(strata_buffer_append_byte(&text, 0), 0);
    pthread_mutex_lock(&fx.mu);
    if (strcmp(label_set_get(series->labels, "job"), "good") == 0)
        fx.pushes_good++;
    else
        fx.pushes_other++;
    snprintf(fx.last_labels, sizeof fx.last_labels, "%s", (char *)text.data);
    strata_buffer_reset(&fx.last_pprof);
    strata_buffer_append(&fx.last_pprof, series->pprof, series->pprof_len);
    pthread_mutex_unlock(&fx.mu);
    strata_buffer_free(&text);
    return 0;
}

static int setup(void **state) {
    (void)state;
    memset(&fx, 0, sizeof fx);
    pthread_mutex_init(&fx.mu, NULL);
    const char *src = getenv("STRATA_SOURCE_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/lib/pprof/testdata/go_heap.pb.gz", src ? src : ".");
    read_file(path, &fx.heap);
    fx.registry = metrics_registry_new(NULL);
    http_server_options o = {.bind = "127.0.0.1:0", .metrics = fx.registry};
    strata_error err;
    fx.http = http_server_new(&o, &err);
    assert_non_null(fx.http);
    assert_int_equal(http_server_route(fx.http, NULL, "/", HTTP_MATCH_PREFIX, serve, NULL, &err),
                     0);
    assert_int_equal(http_server_start(fx.http, &err), 0);
    fx.port = http_server_port(fx.http);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    http_server_free(fx.http);
    metrics_registry_free(fx.registry);
    strata_buffer_free(&fx.heap);
    strata_buffer_free(&fx.last_pprof);
    pthread_mutex_destroy(&fx.mu);
    return 0;
}

static scrape_configs decode_configs(const char *yaml_fmt) {
    char yaml[4096];
    snprintf(yaml, sizeof yaml, yaml_fmt, fx.port, fx.port, fx.port, fx.port, fx.port);
    config_document *doc = NULL;
    strata_error err;
    if (config_load_string("t.yaml", yaml, strlen(yaml), &doc, &err) != 0)
        fail_msg("%s", err.message);
    scrape_configs configs;
    if (scrape_configs_decode(config_node_get(config_document_root(doc), "scrape_configs"),
                              &configs, &err) != 0)
        fail_msg("%s", err.message);
    config_document_free(doc);
    return configs;
}

static scraper *new_scraper(const char *yaml_fmt) {
    scrape_configs configs = decode_configs(yaml_fmt);
    strata_error err;
    scraper_config sc = {.max_response_bytes = 64 << 20};
    scraper_options o = {.config = &sc, .registry = fx.registry, .sink = sink};
    scraper *s = scraper_new(&o, &err);
    assert_non_null(s);
    if (scraper_apply(s, &configs, &err) != 0)
        fail_msg("%s", err.message);
    return s;
}

/* The Targets JSON, parsed. */
static json_document *targets_json(scraper *s, scrape_state_filter state) {
    strata_buffer out = STRATA_BUFFER_INIT;
    strata_error err;
    assert_int_equal(scraper_targets_json(s, state, &out, &err), 0);
    json_document *doc = NULL;
    assert_int_equal(json_parse((const char *)out.data, out.len, &doc, &err), 0);
    strata_buffer_free(&out);
    return doc;
}

static const json_value *job_targets(json_document *doc, const char *job) {
    const json_value *j = json_object_get(json_object_get(json_document_root(doc), "targets"), job);
    assert_non_null(j);
    return json_object_get(j, "targets");
}

static const char *str(const json_value *obj, const char *key) {
    const char *s = NULL;
    size_t len;
    if (!json_get_string(json_object_get(obj, key), &s, &len))
        return NULL;
    return s;
}

/* Value of label name in a protojson LabelSet, or NULL. */
static const char *label(const json_value *set, const char *name) {
    const json_value *labels = json_object_get(set, "labels");
    for (size_t i = 0; i < json_array_length(labels); i++) {
        const json_value *l = json_array_at(labels, i);
        if (strcmp(str(l, "name"), name) == 0)
            return str(l, "value");
    }
    return NULL;
}

static const char *health_of(scraper *s, const char *job) {
    json_document *doc = targets_json(s, SCRAPE_STATE_ACTIVE);
    const json_value *t = json_array_at(job_targets(doc, job), 0);
    static char health[64];
    snprintf(health, sizeof health, "%s", t ? str(t, "health") : "none");
    json_document_free(doc);
    return health;
}

/* Only "hang" tests the timeout (300 ms); the others have 1 s, so a loaded machine (CI) does not
 * turn their errors, or the good target's success, into timeouts (a 300 ms timeout once hid big's
 * size-limit error in CI). */
static const char health_config[] =
    "scrape_configs:\n"
    "  - job_name: good\n"
    "    scrape_interval: 1s\n"
    "    scrape_timeout: 1s\n"
    "    static_configs: [{targets: ['127.0.0.1:%u'], labels: {env: prod}}]\n"
    "    profiling_config:\n"
    "      path_prefix: /good\n"
    "      pprof_config:\n"
    "        block: {enabled: false}\n"
    "        goroutine: {enabled: false}\n"
    "        mutex: {enabled: false}\n"
    "        process_cpu: {enabled: false}\n"
    "  - job_name: bad500\n"
    "    scrape_interval: 1s\n"
    "    scrape_timeout: 1s\n"
    "    static_configs: [{targets: ['127.0.0.1:%u']}]\n"
    "    profiling_config: {path_prefix: /bad500, pprof_config: {block: {enabled: false},\n"
    "      goroutine: {enabled: false}, mutex: {enabled: false}, process_cpu: {enabled: false}}}\n"
    "  - job_name: garbage\n"
    "    scrape_interval: 1s\n"
    "    scrape_timeout: 1s\n"
    "    static_configs: [{targets: ['127.0.0.1:%u']}]\n"
    "    profiling_config: {path_prefix: /garbage, pprof_config: {block: {enabled: false},\n"
    "      goroutine: {enabled: false}, mutex: {enabled: false}, process_cpu: {enabled: false}}}\n"
    "  - job_name: hang\n"
    "    scrape_interval: 300ms\n"
    "    static_configs: [{targets: ['127.0.0.1:%u']}]\n"
    "    profiling_config: {path_prefix: /hang, pprof_config: {block: {enabled: false},\n"
    "      goroutine: {enabled: false}, mutex: {enabled: false}, process_cpu: {enabled: false}}}\n"
    "  - job_name: big\n"
    "    scrape_interval: 1s\n"
    "    scrape_timeout: 1s\n"
    "    body_size_limit: 1KiB\n"
    "    static_configs: [{targets: ['127.0.0.1:%u']}]\n"
    "    profiling_config: {path_prefix: /big, pprof_config: {block: {enabled: false},\n"
    "      goroutine: {enabled: false}, mutex: {enabled: false}, process_cpu: {enabled: false}}}\n";

static bool all_settled(scraper *s) {
    pthread_mutex_lock(&fx.mu);
    size_t good = fx.pushes_good;
    pthread_mutex_unlock(&fx.mu);
    static const char *const bad[] = {"bad500", "garbage", "hang", "big"};
    for (size_t i = 0; i < 4; i++)
        if (strcmp(health_of(s, bad[i]), "HEALTH_BAD") != 0)
            return false;
    return good >= 3 && strcmp(health_of(s, "good"), "HEALTH_GOOD") == 0;
}

static void expect_error(json_document *doc, const char *job, const char *want) {
    const json_value *t = json_array_at(job_targets(doc, job), 0);
    const char *got = str(t, "lastError");
    if (got == NULL || strstr(got, want) == NULL)
        fail_msg("job %s: last error \"%s\" lacks \"%s\"", job, got ? got : "(null)", want);
    assert_string_equal(str(t, "health"), "HEALTH_BAD");
    assert_non_null(str(t, "lastScrape"));
}

static void test_health_and_last_errors(void **state) {
    (void)state;
    scraper *s = new_scraper(health_config);
    strata_error err;
    assert_int_equal(scraper_start(s, &err), 0);
    int64_t deadline = strata_monotonic_ns() + 15 * STRATA_NS_PER_SEC;
    while (!all_settled(s) && strata_monotonic_ns() < deadline)
        usleep(50 * 1000);
    assert_true(all_settled(s));

    json_document *doc = targets_json(s, SCRAPE_STATE_ANY);
    const json_value *good = json_array_at(job_targets(doc, "good"), 0);
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%u/good/debug/pprof/allocs", fx.port);
    assert_string_equal(str(good, "url"), url);
    assert_string_equal(str(good, "lastError"), "");
    const json_value *labels = json_object_get(good, "labels");
    assert_int_equal(json_array_length(json_object_get(labels, "labels")), 4);
    assert_string_equal(label(labels, "__name__"), "memory");
    assert_string_equal(label(labels, "job"), "good");
    assert_string_equal(label(labels, "env"), "prod");
    char instance[64];
    snprintf(instance, sizeof instance, "127.0.0.1:%u", fx.port);
    assert_string_equal(label(labels, "instance"), instance);
    const json_value *discovered = json_object_get(good, "discoveredLabels");
    assert_string_equal(label(discovered, "__address__"), instance);
    assert_string_equal(label(discovered, "__scheme__"), "http");
    assert_null(label(discovered, "instance"));
    assert_non_null(str(good, "lastScrapeDuration"));

    expect_error(doc, "bad500", "server returned HTTP status 500");
    expect_error(doc, "garbage", "invalid pprof profile");
    expect_error(doc, "hang", "timed out after 300 ms");
    expect_error(doc, "big", "response larger than the limit of 1024 bytes");
    json_document_free(doc);

    pthread_mutex_lock(&fx.mu);
    char want[256];
    snprintf(want, sizeof want,
             "{__name__=\"memory\", env=\"prod\", instance=\"%s\", job=\"good\"}", instance);
    assert_string_equal(fx.last_labels, want);
    assert_int_equal(fx.pushes_other, 0);
    assert_int_equal(fx.last_pprof.len, fx.heap.len); /* passed on as served */
    pthread_mutex_unlock(&fx.mu);

    /* The same over the gRPC encoding. */
    strata_buffer pb = STRATA_BUFFER_INIT;
    assert_int_equal(scraper_targets_proto(s, SCRAPE_STATE_ANY, &pb, &err), 0);
    Parca__Scrape__V1alpha1__TargetsResponse *resp =
        parca__scrape__v1alpha1__targets_response__unpack(NULL, pb.len, pb.data);
    assert_non_null(resp);
    assert_int_equal(resp->n_targets, 5);
    bool seen_bad = false;
    for (size_t i = 0; i < resp->n_targets; i++) {
        Parca__Scrape__V1alpha1__Targets *ts = resp->targets[i]->value;
        assert_int_equal(ts->n_targets, 1);
        Parca__Scrape__V1alpha1__Target *t = ts->targets[0];
        if (strcmp(resp->targets[i]->key, "bad500") == 0) {
            seen_bad = true;
            assert_int_equal(t->health, PARCA__SCRAPE__V1ALPHA1__TARGET__HEALTH__HEALTH_BAD);
            assert_string_equal(t->last_error, "server returned HTTP status 500");
            assert_non_null(t->last_scrape);
            assert_true(t->last_scrape->seconds > 1700000000);
        }
    }
    assert_true(seen_bad);
    parca__scrape__v1alpha1__targets_response__free_unpacked(resp, NULL);
    strata_buffer_free(&pb);

    /* A reload with the same jobs keeps every target's health and last error. */
    scrape_configs again = decode_configs(health_config);
    assert_int_equal(scraper_apply(s, &again, &err), 0);
    assert_string_equal(health_of(s, "good"), "HEALTH_GOOD");
    assert_string_equal(health_of(s, "bad500"), "HEALTH_BAD");
    doc = targets_json(s, SCRAPE_STATE_ANY);
    expect_error(doc, "bad500", "server returned HTTP status 500");
    json_document_free(doc);
    scraper_free(s);
}

static void test_relabel_dropped_and_instance(void **state) {
    (void)state;
    scraper *s = new_scraper("scrape_configs:\n"
                             "  - job_name: app\n"
                             "    static_configs:\n"
                             "      - {targets: ['10.0.0.1:6060'], labels: {env: prod}}\n"
                             "      - {targets: ['10.0.0.2:6060'], labels: {env: dev}}\n"
                             "    relabel_configs:\n"
                             "      - {source_labels: [env], regex: prod, action: keep}\n"
                             "      - {source_labels: [__address__], regex: '(.+):[0-9]+',\n"
                             "         target_label: instance, replacement: '$1'}\n"
                             "      - {source_labels: [__name__], regex: 'block|mutex',\n"
                             "         action: drop}\n");
    json_document *doc = targets_json(s, SCRAPE_STATE_ACTIVE);
    const json_value *active = job_targets(doc, "app");
    /* one address x memory, goroutine, process_cpu */
    assert_int_equal(json_array_length(active), 3);
    for (size_t i = 0; i < 3; i++) {
        const json_value *t = json_array_at(active, i);
        assert_string_equal(label(json_object_get(t, "labels"), "instance"), "10.0.0.1");
        assert_string_equal(str(t, "health"), "HEALTH_UNKNOWN_UNSPECIFIED");
        assert_null(str(t, "lastScrape"));
    }
    json_document_free(doc);
    doc = targets_json(s, SCRAPE_STATE_DROPPED);
    const json_value *dropped = job_targets(doc, "app");
    /* 10.0.0.2 x 5 profiles, 10.0.0.1 x block and mutex */
    assert_int_equal(json_array_length(dropped), 7);
    assert_string_equal(str(json_array_at(dropped, 0), "health"), "HEALTH_UNKNOWN_UNSPECIFIED");
    json_document_free(doc);
    scraper_free(s);
}

static void test_delta_and_params_url(void **state) {
    (void)state;
    scraper *s = new_scraper("scrape_configs:\n"
                             "  - job_name: app\n"
                             "    scrape_interval: 15s\n"
                             "    scheme: https\n"
                             "    params: {debug: ['1'], tag: [a, b]}\n"
                             "    static_configs:\n"
                             "      - targets: ['h:1', 'h:1']\n" /* one target */
                             "      - {targets: ['h:2'], labels: {__param_debug: '2'}}\n"
                             "    profiling_config:\n"
                             "      path_prefix: /svc\n"
                             "      pprof_config:\n"
                             "        memory: {enabled: false}\n"
                             "        block: {enabled: false}\n"
                             "        goroutine: {enabled: false}\n"
                             "        mutex: {enabled: false}\n");
    json_document *doc = targets_json(s, SCRAPE_STATE_ACTIVE);
    const json_value *ts = job_targets(doc, "app");
    assert_int_equal(json_array_length(ts), 2);
    const char *u0 = str(json_array_at(ts, 0), "url"), *u1 = str(json_array_at(ts, 1), "url");
    const char *first = strstr(u0, "h:1") ? u0 : u1, *second = first == u0 ? u1 : u0;
    assert_string_equal(first,
                        "https://h:1/svc/debug/pprof/profile?debug=1&tag=a&tag=b&seconds=15");
    assert_string_equal(second,
                        "https://h:2/svc/debug/pprof/profile?debug=2&tag=a&tag=b&seconds=15");
    json_document_free(doc);
    scraper_free(s);
}

static void test_keep_sample_type(void **state) {
    (void)state;
    pthread_mutex_lock(&fx.mu);
    fx.pushes_good = 0;
    pthread_mutex_unlock(&fx.mu);
    scraper *s = new_scraper("scrape_configs:\n"
                             "  - job_name: good\n"
                             "    scrape_interval: 200ms\n"
                             "    static_configs: [{targets: ['127.0.0.1:%u']}]\n"
                             "    profiling_config:\n"
                             "      path_prefix: /good\n"
                             "      pprof_config:\n"
                             "        memory:\n"
                             "          keep_sample_type: [{type: inuse_space, unit: bytes}]\n"
                             "        block: {enabled: false}\n"
                             "        goroutine: {enabled: false}\n"
                             "        mutex: {enabled: false}\n"
                             "        process_cpu: {enabled: false}\n");
    strata_error err;
    assert_int_equal(scraper_start(s, &err), 0);
    int64_t deadline = strata_monotonic_ns() + 10 * STRATA_NS_PER_SEC;
    for (;;) {
        pthread_mutex_lock(&fx.mu);
        size_t n = fx.pushes_good;
        pthread_mutex_unlock(&fx.mu);
        if (n > 0 || strata_monotonic_ns() > deadline)
            break;
        usleep(20 * 1000);
    }
    scraper_free(s);
    pprof_limits limits;
    pprof_limits_default(&limits);
    pprof_profile p, orig;
    assert_int_equal(pprof_decode(fx.last_pprof.data, fx.last_pprof.len, &limits, &p, &err), 0);
    assert_int_equal(pprof_decode(fx.heap.data, fx.heap.len, &limits, &orig, &err), 0);
    assert_int_equal(orig.n_sample_types, 4);
    assert_int_equal(p.n_sample_types, 1);
    const pprof_string *type = &p.strings[p.sample_types[0].type];
    assert_int_equal(type->len, strlen("inuse_space"));
    assert_memory_equal(type->ptr, "inuse_space", type->len);
    /* the kept column is the original's inuse_space */
    size_t col = orig.n_sample_types;
    for (size_t i = 0; i < orig.n_sample_types; i++) {
        const pprof_string *t = &orig.strings[orig.sample_types[i].type];
        if (t->len == strlen("inuse_space") && memcmp(t->ptr, "inuse_space", t->len) == 0)
            col = i;
    }
    assert_true(col < orig.n_sample_types);
    int64_t sum = 0, orig_sum = 0;
    for (size_t i = 0; i < p.n_samples; i++)
        sum += p.sample_values[p.samples[i].value_offset];
    for (size_t i = 0; i < orig.n_samples; i++)
        orig_sum += orig.sample_values[orig.samples[i].value_offset + col];
    assert_int_equal(sum, orig_sum);
    assert_true(sum > 0);
    pprof_profile_free(&p);
    pprof_profile_free(&orig);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_health_and_last_errors),
        cmocka_unit_test(test_relabel_dropped_and_instance),
        cmocka_unit_test(test_delta_and_params_url),
        cmocka_unit_test(test_keep_sample_type),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
