/*
 * scrape_config_test.c - scrape_configs decoding: Prometheus's defaults, Parca's pprof endpoints
 * merged with a job's own entries, strict errors with file and line, file_sd files (YAML and
 * JSON) read into target groups, and kubernetes_sd_configs against the fake API server.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "kubernetes/kubernetes_testserver.h"
#include "scrape_config.h"
#include "scrape_discovery.h"

static int decode(const char *yaml, scrape_configs *out, strata_error *err) {
    config_document *doc = NULL;
    if (config_load_string("s.yaml", yaml, strlen(yaml), &doc, err) != 0)
        return -1;
    int rc = scrape_configs_decode(config_node_get(config_document_root(doc), "scrape_configs"),
                                   out, err);
    config_document_free(doc);
    return rc;
}

static void expect_error(const char *yaml, const char *message) {
    scrape_configs c;
    strata_error err;
    assert_int_equal(decode(yaml, &c, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    if (strstr(err.message, message) == NULL)
        fail_msg("error \"%s\" does not contain \"%s\"", err.message, message);
    assert_int_equal(c.n_jobs, 0);
}

static void test_defaults(void **state) {
    (void)state;
    scrape_configs c;
    strata_error err;
    assert_int_equal(decode("scrape_configs:\n"
                            "  - job_name: app\n"
                            "    static_configs:\n"
                            "      - targets: ['127.0.0.1:6060']\n"
                            "        labels: {env: prod}\n",
                            &c, &err),
                     0);
    assert_int_equal(c.n_jobs, 1);
    const scrape_job_config *j = &c.jobs[0];
    assert_string_equal(j->job_name, "app");
    assert_int_equal(j->scrape_interval_ns, INT64_C(10000000000));
    assert_int_equal(j->scrape_timeout_ns, INT64_C(10000000000));
    assert_string_equal(j->scheme, "http");
    assert_int_equal(j->n_endpoints, 5);
    static const char *const names[] = {"memory", "block", "goroutine", "mutex", "process_cpu"};
    static const char *const paths[] = {"/debug/pprof/allocs", "/debug/pprof/block",
                                        "/debug/pprof/goroutine", "/debug/pprof/mutex",
                                        "/debug/pprof/profile"};
    for (size_t i = 0; i < 5; i++) {
        assert_string_equal(j->endpoints[i].name, names[i]);
        assert_string_equal(j->endpoints[i].path, paths[i]);
        assert_true(j->endpoints[i].enabled);
        assert_int_equal(j->endpoints[i].delta, i == 4);
    }
    assert_int_equal(j->static_configs.count, 1);
    const scrape_static_config *sc = j->static_configs.items;
    assert_string_equal(sc->targets.items[0], "127.0.0.1:6060");
    assert_string_equal(sc->labels.keys[0], "env");
    assert_string_equal(sc->labels.values[0], "prod");
    assert_null(j->relabel);
    scrape_configs_free(&c);
}

static void test_timeout_defaults_to_short_interval(void **state) {
    (void)state;
    scrape_configs c;
    strata_error err;
    assert_int_equal(decode("scrape_configs:\n"
                            "  - job_name: fast\n"
                            "    scrape_interval: 3s\n"
                            "  - job_name: slow\n"
                            "    scrape_interval: 1m\n"
                            "    scrape_timeout: 20s\n",
                            &c, &err),
                     0);
    assert_int_equal(c.jobs[0].scrape_timeout_ns, INT64_C(3000000000));
    assert_int_equal(c.jobs[1].scrape_interval_ns, INT64_C(60000000000));
    assert_int_equal(c.jobs[1].scrape_timeout_ns, INT64_C(20000000000));
    scrape_configs_free(&c);
}

static void test_profiling_config_merge(void **state) {
    (void)state;
    scrape_configs c;
    strata_error err;
    assert_int_equal(decode("scrape_configs:\n"
                            "  - job_name: app\n"
                            "    params: {debug: ['0', '1']}\n"
                            "    profiling_config:\n"
                            "      path_prefix: /app\n"
                            "      pprof_config:\n"
                            "        memory:\n"
                            "          enabled: false\n"
                            "        process_cpu:\n"
                            "          seconds: 5s\n"
                            "          keep_sample_type:\n"
                            "            - {type: cpu, unit: nanoseconds}\n"
                            "        fgprof:\n"
                            "          path: /debug/pprof/fgprof\n"
                            "          delta: true\n",
                            &c, &err),
                     0);
    const scrape_job_config *j = &c.jobs[0];
    assert_string_equal(j->profiling_config.path_prefix, "/app");
    assert_int_equal(j->n_endpoints, 6);
    const scrape_endpoint *mem = scrape_job_endpoint(j, "memory");
    assert_false(mem->enabled);
    assert_string_equal(mem->path, "/debug/pprof/allocs");
    const scrape_endpoint *cpu = scrape_job_endpoint(j, "process_cpu");
    assert_true(cpu->enabled);
    assert_true(cpu->delta);
    assert_int_equal(cpu->seconds_ns, INT64_C(5000000000));
    assert_int_equal(cpu->n_keep_sample_types, 1);
    assert_string_equal(cpu->keep_sample_types[0].type, "cpu");
    assert_string_equal(cpu->keep_sample_types[0].unit, "nanoseconds");
    const scrape_endpoint *fg = scrape_job_endpoint(j, "fgprof");
    assert_non_null(fg);
    assert_true(fg->enabled);
    assert_true(fg->delta);
    assert_string_equal(fg->path, "/debug/pprof/fgprof");
    assert_int_equal(j->params.count, 1);
    assert_string_equal(j->params.items[0].name, "debug");
    assert_int_equal(j->params.items[0].values.count, 2);
    assert_string_equal(j->params.items[0].values.items[1], "1");
    scrape_configs_free(&c);
}

static void test_auth_and_tls(void **state) {
    (void)state;
    scrape_configs c;
    strata_error err;
    assert_int_equal(decode("scrape_configs:\n"
                            "  - job_name: a\n"
                            "    scheme: https\n"
                            "    basic_auth: {username: u, password_file: /run/p}\n"
                            "    tls_config:\n"
                            "      ca_file: /ca.pem\n"
                            "      cert_file: /c.pem\n"
                            "      key_file: /k.pem\n"
                            "      server_name: api.internal\n"
                            "      insecure_skip_verify: true\n"
                            "  - job_name: b\n"
                            "    bearer_token_file: /run/token\n",
                            &c, &err),
                     0);
    assert_string_equal(c.jobs[0].scheme, "https");
    assert_string_equal(c.jobs[0].basic_auth.username, "u");
    assert_string_equal(c.jobs[0].basic_auth.password_file, "/run/p");
    assert_string_equal(c.jobs[0].tls_config.server_name, "api.internal");
    assert_true(c.jobs[0].tls_config.insecure_skip_verify);
    assert_string_equal(c.jobs[1].bearer_token_file, "/run/token");
    scrape_configs_free(&c);
}

static void test_relabel_configs_compiled(void **state) {
    (void)state;
    scrape_configs c;
    strata_error err;
    assert_int_equal(decode("scrape_configs:\n"
                            "  - job_name: a\n"
                            "    relabel_configs:\n"
                            "      - {source_labels: [__address__], modulus: 2,\n"
                            "         target_label: __tmp_hash, action: hashmod}\n"
                            "      - {source_labels: [__tmp_hash], regex: '0', action: keep}\n",
                            &c, &err),
                     0);
    assert_int_equal(relabel_rules_count(c.jobs[0].relabel), 2);
    scrape_configs_free(&c);
}

static void test_errors_name_file_and_line(void **state) {
    (void)state;
    expect_error("scrape_configs:\n"
                 "  - job_name: a\n"
                 "    scrape_interval: 10s\n"
                 "    scrape_timeout: 15s\n",
                 "s.yaml:4:21: scrape_configs[0].scrape_timeout: must not be longer than "
                 "scrape_interval");
    expect_error("scrape_configs:\n"
                 "  - job_name: a\n"
                 "    scrape_intervall: 10s\n",
                 "s.yaml:3:5: scrape_configs[0]: unknown key \"scrape_intervall\"");
    expect_error("scrape_configs:\n"
                 "  - job_name: a\n"
                 "  - job_name: a\n",
                 "s.yaml:3:15: scrape_configs[1].job_name: job \"a\" is defined twice");
    expect_error("scrape_configs:\n"
                 "  - static_configs: []\n",
                 "job_name");
    expect_error("scrape_configs:\n"
                 "  - job_name: a\n"
                 "    scheme: ftp\n",
                 "want http or https, got \"ftp\"");
    expect_error("scrape_configs:\n"
                 "  - job_name: a\n"
                 "    bearer_token: x\n"
                 "    bearer_token_file: /y\n",
                 "at most one of bearer_token and bearer_token_file");
    expect_error("scrape_configs:\n"
                 "  - job_name: a\n"
                 "    profiling_config:\n"
                 "      pprof_config:\n"
                 "        fgprof: {enabled: true}\n",
                 "s.yaml:5:17: scrape_configs[0].profiling_config.pprof_config.fgprof: a new "
                 "profile needs a path");
    expect_error("scrape_configs:\n"
                 "  - job_name: a\n"
                 "    profiling_config:\n"
                 "      pprof_config:\n"
                 "        memory: {path: debug/allocs}\n",
                 "path must start with \"/\"");
    expect_error("scrape_configs:\n"
                 "  - job_name: a\n"
                 "    static_configs:\n"
                 "      - targets: ['http://x:1/']\n",
                 "is not a host:port address");
    expect_error("scrape_configs:\n"
                 "  - job_name: a\n"
                 "    relabel_configs:\n"
                 "      - {action: hashmod, source_labels: [a], target_label: b}\n",
                 "s.yaml:4:9: scrape_configs[0].relabel_configs[0]");
    expect_error("scrape_configs:\n"
                 "  - job_name: a\n"
                 "    params: {debug: 1}\n",
                 "expected a list of values");
}

static char *write_temp(const char *suffix, const char *text) {
    char *path = malloc(64);
    assert_non_null(path);
    snprintf(path, 64, "/tmp/strata-file-sd-XXXXXX%s", suffix);
    int fd = mkstemps(path, (int)strlen(suffix));
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    return path;
}

static void test_file_sd_yaml_and_json(void **state) {
    (void)state;
    char *yaml = write_temp(".yaml", "- targets: ['a:1', 'b:2']\n"
                                     "  labels: {env: prod}\n"
                                     "- targets: ['c:3']\n");
    char *json = write_temp(".json", "[{\"targets\": [\"d:4\"], \"labels\": {\"team\": \"x\"}}]");
    target_group *groups = NULL;
    size_t n = 0;
    strata_error err;
    assert_int_equal(scrape_file_sd_read(yaml, &groups, &n, &err), 0);
    assert_int_equal(n, 2);
    assert_int_equal(groups[0].n_targets, 2);
    assert_string_equal(label_set_get(&groups[0].targets[1], "__address__"), "b:2");
    assert_string_equal(label_set_get(&groups[0].targets[1], "__meta_filepath"), yaml);
    assert_string_equal(label_set_get(&groups[0].labels, "env"), "prod");
    char source[128];
    snprintf(source, sizeof source, "%s:1", yaml);
    assert_string_equal(groups[1].source, source);
    target_groups_free(groups, n);

    assert_int_equal(scrape_file_sd_read(json, &groups, &n, &err), 0);
    assert_int_equal(n, 1);
    assert_string_equal(label_set_get(&groups[0].targets[0], "__address__"), "d:4");
    assert_string_equal(label_set_get(&groups[0].labels, "team"), "x");
    target_groups_free(groups, n);

    char *bad = write_temp(".yaml", "- targets: ['a:1']\n  lables: {}\n");
    assert_int_equal(scrape_file_sd_read(bad, &groups, &n, &err), -1);
    assert_non_null(strstr(err.message, ":2:3"));
    assert_non_null(strstr(err.message, "unknown key \"lables\""));
    assert_int_equal(n, 0);
    unlink(yaml);
    unlink(json);
    unlink(bad);
    free(yaml);
    free(json);
    free(bad);
}

typedef struct collected {
    size_t calls;
    size_t groups;
    size_t targets;
    char first_address[64];
} collected;

static void collect(void *ctx, const target_group *groups, size_t n) {
    collected *c = ctx;
    c->calls++;
    c->groups += n;
    for (size_t i = 0; i < n; i++) {
        c->targets += groups[i].n_targets;
        if (c->first_address[0] == '\0' && groups[i].n_targets > 0)
            snprintf(c->first_address, sizeof c->first_address, "%s",
                     label_set_get(&groups[i].targets[0], "__address__"));
    }
}

static void test_discovery_start_lists_static_and_files(void **state) {
    (void)state;
    char *file = write_temp(".yml", "- targets: ['f:1', 'f:2']\n");
    char yaml[512];
    snprintf(yaml, sizeof yaml,
             "scrape_configs:\n"
             "  - job_name: a\n"
             "    static_configs:\n"
             "      - targets: ['s:1']\n"
             "    file_sd_configs:\n"
             "      - files: ['%s']\n",
             file);
    scrape_configs c;
    strata_error err;
    assert_int_equal(decode(yaml, &c, &err), 0);
    collected got = {0};
    scrape_discovery *d = scrape_discovery_start(&c.jobs[0], collect, &got, &err);
    assert_non_null(d);
    /* both providers listed everything before start returned */
    assert_int_equal(got.calls, 2);
    assert_int_equal(got.targets, 3);
    assert_string_equal(got.first_address, "s:1");
    scrape_discovery_stop(d);
    scrape_configs_free(&c);
    unlink(file);
    free(file);
}

/* The file provider's view: the addresses of the current targets per source. */
typedef struct watched {
    pthread_mutex_t mu;
    char sources[8][256];
    size_t counts[8];
    size_t n;
} watched;

static void watch_update(void *ctx, const target_group *groups, size_t n) {
    watched *w = ctx;
    pthread_mutex_lock(&w->mu);
    for (size_t i = 0; i < n; i++) {
        size_t at = w->n;
        for (size_t k = 0; k < w->n; k++)
            if (strcmp(w->sources[k], groups[i].source) == 0)
                at = k;
        if (at == w->n && w->n < 8)
            snprintf(w->sources[w->n++], sizeof w->sources[0], "%s", groups[i].source);
        if (at < 8)
            w->counts[at] = groups[i].n_targets;
    }
    pthread_mutex_unlock(&w->mu);
}

static size_t watched_total(watched *w) {
    pthread_mutex_lock(&w->mu);
    size_t total = 0;
    for (size_t i = 0; i < w->n; i++)
        total += w->counts[i];
    pthread_mutex_unlock(&w->mu);
    return total;
}

static bool wait_total(watched *w, size_t want) {
    for (int i = 0; i < 100; i++) { /* the provider checks every second */
        if (watched_total(w) == want)
            return true;
        usleep(50 * 1000);
    }
    return false;
}

static void write_file(const char *path, const char *text) {
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    assert_int_equal(rename(tmp, path), 0); /* atomically, as config management tools do */
}

static void test_file_sd_watches_files(void **state) {
    (void)state;
    char dir[] = "/tmp/strata-file-sd-dir-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char a[300], b[300], yaml[1024];
    snprintf(a, sizeof a, "%s/a.yaml", dir);
    snprintf(b, sizeof b, "%s/b.json", dir);
    write_file(a, "- targets: ['a:1']\n");
    snprintf(yaml, sizeof yaml,
             "scrape_configs:\n"
             "  - job_name: w\n"
             "    file_sd_configs:\n"
             "      - files: ['%s/*.yaml', '%s/*.json']\n"
             "        refresh_interval: 1h\n",
             dir, dir);
    scrape_configs c;
    strata_error err;
    assert_int_equal(decode(yaml, &c, &err), 0);
    watched w = {.mu = PTHREAD_MUTEX_INITIALIZER};
    scrape_discovery *d = scrape_discovery_start(&c.jobs[0], watch_update, &w, &err);
    assert_non_null(d);
    assert_int_equal(watched_total(&w), 1);
    /* a new file matching a pattern */
    write_file(b, "[{\"targets\": [\"b:1\", \"b:2\"]}]");
    assert_true(wait_total(&w, 3));
    /* a changed file: one entry becomes two */
    write_file(a, "- targets: ['a:1', 'a:2']\n- targets: ['a:3']\n");
    assert_true(wait_total(&w, 5));
    /* an invalid file keeps its previous targets */
    write_file(a, "- targets: ['a:1'\n");
    usleep(1500 * 1000);
    assert_int_equal(watched_total(&w), 5);
    /* a shrunk file sends its gone entry empty */
    write_file(a, "- targets: ['a:1']\n");
    assert_true(wait_total(&w, 3));
    /* a deleted file: its sources are gone */
    assert_int_equal(unlink(b), 0);
    assert_true(wait_total(&w, 1));
    scrape_discovery_stop(d);
    scrape_configs_free(&c);
    unlink(a);
    rmdir(dir);
}

/* kubernetes_sd_configs: decoded by lib/kubernetes with its errors at file:line; each entry is a
 * provider whose sources carry the entry's index, so two entries watching one pod stay apart. */
static void test_kubernetes_sd_configs(void **state) {
    (void)state;
    expect_error("scrape_configs:\n"
                 "  - job_name: k\n"
                 "    kubernetes_sd_configs:\n"
                 "      - role: endpoints\n",
                 "s.yaml:4:15: scrape_configs[0].kubernetes_sd_configs[0].role: role "
                 "\"endpoints\" is not supported (only pod)");
    expect_error("scrape_configs:\n"
                 "  - job_name: k\n"
                 "    kubernetes_sd_configs:\n"
                 "      - {role: pod, namespace: [a]}\n",
                 "s.yaml:4:21: scrape_configs[0].kubernetes_sd_configs[0]: unknown key "
                 "\"namespace\"");

    kubernetes_testserver server;
    assert_int_equal(kubernetes_testserver_start(&server, 0, NULL), 0);
    assert_int_equal(
        kubernetes_testserver_post(
            &server, "/apply",
            "{\"metadata\":{\"name\":\"p\",\"namespace\":\"ns\"},\"spec\":{\"containers\":"
            "[{\"name\":\"c\",\"ports\":[{\"containerPort\":6060}]}]},"
            "\"status\":{\"podIP\":\"10.0.0.1\"}}"),
        0);
    char yaml[1024];
    snprintf(yaml, sizeof yaml,
             "scrape_configs:\n"
             "  - job_name: k\n"
             "    kubernetes_sd_configs:\n"
             "      - {role: pod, api_server: '%s'}\n"
             "      - {role: pod, api_server: '%s', namespaces: {names: [ns]}}\n",
             server.url, server.url);
    scrape_configs c;
    strata_error err;
    assert_int_equal(decode(yaml, &c, &err), 0);
    assert_int_equal(c.jobs[0].kubernetes_sd_configs.count, 2);
    assert_string_equal(c.jobs[0].kubernetes_sd_configs.items[1].namespaces.names.items[0], "ns");
    watched w = {.mu = PTHREAD_MUTEX_INITIALIZER};
    scrape_discovery *d = scrape_discovery_start(&c.jobs[0], watch_update, &w, &err);
    assert_non_null(d);
    assert_true(wait_total(&w, 2));
    scrape_discovery_stop(d);
    assert_int_equal(w.n, 2);
    bool first = strcmp(w.sources[0], "kubernetes/0/pod/ns/p") == 0;
    assert_string_equal(w.sources[first ? 0 : 1], "kubernetes/0/pod/ns/p");
    assert_string_equal(w.sources[first ? 1 : 0], "kubernetes/1/pod/ns/p");
    scrape_configs_free(&c);
    kubernetes_testserver_stop(&server);
}

/* The `scraper:` section's push keys: defaults, values and bounds. */
static int decode_scraper(const char *yaml, scraper_config *out, strata_error *err) {
    config_document *doc = NULL;
    if (config_load_string("s.yaml", yaml, strlen(yaml), &doc, err) != 0)
        return -1;
    int rc = config_decode(config_node_get(config_document_root(doc), "scraper"),
                           scraper_config_fields, out, err);
    config_document_free(doc);
    return rc;
}

static void test_scraper_push_keys(void **state) {
    (void)state;
    scraper_config c;
    strata_error err;
    assert_int_equal(decode_scraper("scraper: {}\n", &c, &err), 0);
    assert_int_equal(c.max_in_flight, 16);
    assert_int_equal(c.max_request_bytes, 3 << 20);
    assert_int_equal(c.max_queue_bytes, 64 << 20);
    config_free(scraper_config_fields, &c);
    assert_int_equal(
        decode_scraper("scraper: {max_in_flight: 16, max_request_bytes: 1MiB}\n", &c, &err), 0);
    assert_int_equal(c.max_in_flight, 16);
    assert_int_equal(c.max_request_bytes, 1 << 20);
    config_free(scraper_config_fields, &c);
    assert_int_equal(decode_scraper("scraper:\n  max_in_flight: 0\n", &c, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "s.yaml:2:18: scraper.max_in_flight: 0 is below"));
    assert_int_equal(decode_scraper("scraper:\n  max_in_flight: 65\n", &c, &err), -1);
    assert_non_null(strstr(err.message, "above the maximum 64"));
    assert_int_equal(decode_scraper("scraper:\n  max_request_bytes: 100MiB\n", &c, &err), -1);
    assert_non_null(strstr(err.message, "scraper.max_request_bytes"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_scraper_push_keys),
        cmocka_unit_test(test_timeout_defaults_to_short_interval),
        cmocka_unit_test(test_profiling_config_merge),
        cmocka_unit_test(test_auth_and_tls),
        cmocka_unit_test(test_relabel_configs_compiled),
        cmocka_unit_test(test_errors_name_file_and_line),
        cmocka_unit_test(test_file_sd_yaml_and_json),
        cmocka_unit_test(test_discovery_start_lists_static_and_files),
        cmocka_unit_test(test_file_sd_watches_files),
        cmocka_unit_test(test_kubernetes_sd_configs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
