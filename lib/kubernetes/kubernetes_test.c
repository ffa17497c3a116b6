/*
 * kubernetes_test.c - pod discovery against a fake API server (tests/kubernetes/fake_apiserver.py)
 * that answers list and watch in the official JSON shapes over HTTPS with a bearer token: pods
 * added, modified, deleted, without IP; relists after 410 (as an ERROR event and as an HTTP
 * status); a malformed and an oversized event; paging; the CA and the token checked; in-cluster
 * and kubeconfig connections; the config decoder's rules.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <pthread.h>

#include "common/clock.h"
#include "kubernetes/kubernetes.h"
#include "kubernetes/kubernetes_internal.h"
#include "kubernetes/kubernetes_testserver.h"

static char certs[256];

/* ---- Collecting updates -----------------------------------------------------------------------
 */

typedef struct collector {
    pthread_mutex_t mu;
    target_group groups[64]; /* latest group per source */
    size_t n_groups;
    size_t calls;
    size_t first_call_groups;
} collector;

static void collect(void *ctx, const target_group *groups, size_t n) {
    collector *c = ctx;
    pthread_mutex_lock(&c->mu);
    if (c->calls++ == 0)
        c->first_call_groups = n;
    for (size_t i = 0; i < n; i++) {
        size_t at = 0;
        while (at < c->n_groups && strcmp(c->groups[at].source, groups[i].source) != 0)
            at++;
        if (at == c->n_groups) {
            assert_true(c->n_groups < 64);
            c->n_groups++;
        } else {
            target_group_free(&c->groups[at]);
        }
        assert_int_equal(target_group_copy(&c->groups[at], &groups[i], NULL), 0);
    }
    pthread_mutex_unlock(&c->mu);
}

static void collector_init(collector *c) {
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
}

static void collector_free(collector *c) {
    for (size_t i = 0; i < c->n_groups; i++)
        target_group_free(&c->groups[i]);
    pthread_mutex_destroy(&c->mu);
}

/* Number of targets of source (-1 when never reported), under the lock. */
static long targets_of(collector *c, const char *source) {
    long n = -1;
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < c->n_groups; i++)
        if (strcmp(c->groups[i].source, source) == 0)
            n = (long)c->groups[i].n_targets;
    pthread_mutex_unlock(&c->mu);
    return n;
}

/* Copy of the group's merged labels for target i. */
static void merged(collector *c, const char *source, size_t i, label_set *out) {
    pthread_mutex_lock(&c->mu);
    bool found = false;
    for (size_t g = 0; g < c->n_groups; g++) {
        if (strcmp(c->groups[g].source, source) == 0) {
            assert_true(i < c->groups[g].n_targets);
            assert_int_equal(target_group_merge_labels(&c->groups[g], i, out, NULL), 0);
            found = true;
        }
    }
    pthread_mutex_unlock(&c->mu);
    assert_true(found);
}

#define WAIT_UNTIL(cond)                                                                           \
    do {                                                                                           \
        int64_t deadline_ = strata_monotonic_ns() + 20000000000LL;                                 \
        while (!(cond) && strata_monotonic_ns() < deadline_)                                       \
            usleep(10000);                                                                         \
        assert_true(cond);                                                                         \
    } while (0)

/* ---- The fake cluster -------------------------------------------------------------------------
 */

static const char *pod_api_json =
    "{\"metadata\":{\"name\":\"api-7f9c\",\"namespace\":\"shop\",\"uid\":\"u-1\","
    "\"labels\":{\"app.kubernetes.io/name\":\"api\",\"tier\":\"backend\"},"
    "\"annotations\":{\"strata.dev/scrape\":\"true\"},"
    "\"ownerReferences\":[{\"kind\":\"Node\",\"name\":\"n\"},"
    "{\"kind\":\"ReplicaSet\",\"name\":\"api-7f9\",\"controller\":true}]},"
    "\"spec\":{\"nodeName\":\"node-1\",\"containers\":["
    "{\"name\":\"app\",\"image\":\"shop/api:1.2\",\"ports\":["
    "{\"name\":\"http\",\"containerPort\":8080,\"protocol\":\"TCP\"},"
    "{\"name\":\"pprof\",\"containerPort\":6060,\"protocol\":\"TCP\"}]},"
    "{\"name\":\"sidecar\",\"image\":\"envoy:1\"}],"
    "\"initContainers\":[{\"name\":\"migrate\",\"image\":\"shop/migrate:1\"}]},"
    "\"status\":{\"phase\":\"Running\",\"podIP\":\"10.1.2.3\",\"hostIP\":\"192.168.0.7\","
    "\"conditions\":[{\"type\":\"Initialized\",\"status\":\"True\"},"
    "{\"type\":\"Ready\",\"status\":\"True\"}],"
    "\"containerStatuses\":[{\"name\":\"app\",\"containerID\":\"containerd://abc123\"},"
    "{\"name\":\"sidecar\",\"containerID\":\"containerd://def456\"}],"
    "\"initContainerStatuses\":[{\"name\":\"migrate\",\"containerID\":\"containerd://0ff\"}]}}";

/* A small pod: namespace, name, label app, podIP (may be ""), one port. */
static void apply_pod(const kubernetes_testserver *s, const char *ns, const char *name,
                      const char *app, const char *ip) {
    char json[1024];
    snprintf(json, sizeof json,
             "{\"metadata\":{\"name\":\"%s\",\"namespace\":\"%s\",\"labels\":{\"app\":\"%s\"}},"
             "\"spec\":{\"nodeName\":\"node-1\",\"containers\":[{\"name\":\"c\",\"image\":\"i\","
             "\"ports\":[{\"containerPort\":80,\"protocol\":\"TCP\"}]}]},"
             "\"status\":{\"phase\":\"Running\",\"podIP\":\"%s\"}}",
             name, ns, app, ip);
    assert_int_equal(kubernetes_testserver_post(s, "/apply", json), 0);
}

static void delete_pod(const kubernetes_testserver *s, const char *ns, const char *name,
                       bool silent) {
    char json[256];
    snprintf(json, sizeof json, "{\"namespace\":\"%s\",\"name\":\"%s\",\"silent\":%s}", ns, name,
             silent ? "true" : "false");
    assert_int_equal(kubernetes_testserver_post(s, "/delete", json), 0);
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* Starts an HTTPS server that wants token "s3cret" and a discovery of it with the CA and a token
 * file. */
static kubernetes_discovery *start_https(kubernetes_testserver *s, collector *c,
                                         kubernetes_sd_config *config, const char *extra_yaml) {
    char cert[512], key[512], token_file[512];
    snprintf(cert, sizeof cert, "%s/server.crt", certs);
    snprintf(key, sizeof key, "%s/server.key", certs);
    snprintf(token_file, sizeof token_file, "%s/token", certs);
    write_file(token_file, "s3cret\n");
    const char *args[] = {"--tls-cert", cert, "--tls-key", key, "--token", "s3cret", NULL};
    assert_int_equal(kubernetes_testserver_start(s, 1, args), 0);
    char yaml[2048];
    snprintf(yaml, sizeof yaml,
             "role: pod\napi_server: %s\nbearer_token_file: %s\n"
             "tls_config: {ca_file: %s/ca.crt}\n%s",
             s->url, token_file, certs, extra_yaml != NULL ? extra_yaml : "");
    config_document *doc = NULL;
    strata_error err;
    assert_int_equal(config_load_string("<test>", yaml, strlen(yaml), &doc, &err), 0);
    assert_int_equal(kubernetes_sd_config_decode(config_document_root(doc), config, &err), 0);
    config_document_free(doc);
    collector_init(c);
    kubernetes_discovery *d = kubernetes_discovery_new(config, collect, c, &err);
    if (d == NULL)
        fail_msg("%s", err.message);
    return d;
}

static void stats(kubernetes_discovery *d, kubernetes_discovery_stats *st) {
    kubernetes_discovery_get_stats(d, st);
}

static uint64_t lists_of(kubernetes_discovery *d) {
    kubernetes_discovery_stats st;
    stats(d, &st);
    return st.lists;
}

static uint64_t errors_of(kubernetes_discovery *d) {
    kubernetes_discovery_stats st;
    stats(d, &st);
    return st.errors;
}

/* Waits until the fake server has started n watch streams (events posted before a watch starts
 * reach it through the resourceVersion; raw lines and expiries only reach open streams). */
static void wait_watching(const kubernetes_testserver *s, int n) {
    int64_t deadline = strata_monotonic_ns() + 20000000000LL;
    for (;;) {
        char *state = kubernetes_testserver_get(s, "/state");
        const char *at = state != NULL ? strstr(state, "\"watch_requests\": ") : NULL;
        bool open = at != NULL && atoi(at + strlen("\"watch_requests\": ")) >= n;
        free(state);
        if (open)
            return;
        assert_true(strata_monotonic_ns() < deadline);
        usleep(10000);
    }
}

/* ---- Pods as target groups --------------------------------------------------------------------
 */

static void assert_label(const label_set *set, const char *name, const char *value) {
    const char *got = label_set_get(set, name);
    if (got == NULL)
        fail_msg("label %s missing", name);
    assert_string_equal(got, value);
}

static void test_pod_targets_and_meta_labels(void **state) {
    (void)state;
    json_document *doc = NULL;
    assert_int_equal(json_parse(pod_api_json, strlen(pod_api_json), &doc, NULL), 0);
    target_group g;
    strata_error err;
    assert_int_equal(kubernetes_pod_target_group(json_document_root(doc), &g, &err), 0);
    assert_string_equal(g.source, "pod/shop/api-7f9c");
    /* app: two ports; sidecar: no ports; migrate (init): no ports. */
    assert_int_equal(g.n_targets, 4);
    const label_set *l = &g.labels;
    assert_label(l, "__meta_kubernetes_namespace", "shop");
    assert_label(l, "__meta_kubernetes_pod_name", "api-7f9c");
    assert_label(l, "__meta_kubernetes_pod_ip", "10.1.2.3");
    assert_label(l, "__meta_kubernetes_pod_ready", "true");
    assert_label(l, "__meta_kubernetes_pod_phase", "Running");
    assert_label(l, "__meta_kubernetes_pod_node_name", "node-1");
    assert_label(l, "__meta_kubernetes_pod_host_ip", "192.168.0.7");
    assert_label(l, "__meta_kubernetes_pod_uid", "u-1");
    assert_label(l, "__meta_kubernetes_pod_label_app_kubernetes_io_name", "api");
    assert_label(l, "__meta_kubernetes_pod_labelpresent_app_kubernetes_io_name", "true");
    assert_label(l, "__meta_kubernetes_pod_label_tier", "backend");
    assert_label(l, "__meta_kubernetes_pod_labelpresent_tier", "true");
    assert_label(l, "__meta_kubernetes_pod_annotation_strata_dev_scrape", "true");
    assert_label(l, "__meta_kubernetes_pod_annotationpresent_strata_dev_scrape", "true");
    assert_label(l, "__meta_kubernetes_pod_controller_kind", "ReplicaSet");
    assert_label(l, "__meta_kubernetes_pod_controller_name", "api-7f9");
    assert_int_equal(l->count, 16);
    assert_int_equal(label_set_validate(l, NULL), 0);

    const label_set *t = &g.targets[0];
    assert_label(t, "__address__", "10.1.2.3:8080");
    assert_label(t, "__meta_kubernetes_pod_container_name", "app");
    assert_label(t, "__meta_kubernetes_pod_container_id", "containerd://abc123");
    assert_label(t, "__meta_kubernetes_pod_container_image", "shop/api:1.2");
    assert_label(t, "__meta_kubernetes_pod_container_init", "false");
    assert_label(t, "__meta_kubernetes_pod_container_port_name", "http");
    assert_label(t, "__meta_kubernetes_pod_container_port_number", "8080");
    assert_label(t, "__meta_kubernetes_pod_container_port_protocol", "TCP");
    assert_int_equal(t->count, 8);
    assert_label(&g.targets[1], "__address__", "10.1.2.3:6060");
    assert_label(&g.targets[1], "__meta_kubernetes_pod_container_port_name", "pprof");

    t = &g.targets[2];
    assert_label(t, "__address__", "10.1.2.3");
    assert_label(t, "__meta_kubernetes_pod_container_name", "sidecar");
    assert_label(t, "__meta_kubernetes_pod_container_id", "containerd://def456");
    assert_int_equal(t->count, 5);
    assert_null(label_set_get(t, "__meta_kubernetes_pod_container_port_number"));

    t = &g.targets[3];
    assert_label(t, "__address__", "10.1.2.3");
    assert_label(t, "__meta_kubernetes_pod_container_name", "migrate");
    assert_label(t, "__meta_kubernetes_pod_container_init", "true");
    assert_label(t, "__meta_kubernetes_pod_container_id", "containerd://0ff");
    target_group_free(&g);
    json_document_free(doc);
}

static void pod_group(const char *json, target_group *g, int expect_rc, strata_error *err) {
    json_document *doc = NULL;
    assert_int_equal(json_parse(json, strlen(json), &doc, NULL), 0);
    assert_int_equal(kubernetes_pod_target_group(json_document_root(doc), g, err), expect_rc);
    json_document_free(doc);
}

static void test_pod_edge_cases(void **state) {
    (void)state;
    target_group g;
    strata_error err;
    /* No IP yet: an empty group, the source is gone. */
    pod_group("{\"metadata\":{\"name\":\"p\",\"namespace\":\"n\"},\"spec\":{\"containers\":"
              "[{\"name\":\"c\"}]},\"status\":{\"phase\":\"Pending\"}}",
              &g, 0, &err);
    assert_string_equal(g.source, "pod/n/p");
    assert_int_equal(g.n_targets, 0);
    assert_int_equal(g.labels.count, 0);
    target_group_free(&g);
    /* Names that sanitize alike: the later one wins. */
    pod_group("{\"metadata\":{\"name\":\"p\",\"namespace\":\"n\",\"labels\":{\"a.b\":\"1\","
              "\"a/b\":\"2\",\"a\":\"3\"}},\"spec\":{\"containers\":[{\"name\":\"c\"}]},"
              "\"status\":{\"podIP\":\"1.2.3.4\"}}",
              &g, 0, &err);
    assert_label(&g.labels, "__meta_kubernetes_pod_label_a_b", "2");
    assert_label(&g.labels, "__meta_kubernetes_pod_label_a", "3");
    assert_int_equal(label_set_validate(&g.labels, NULL), 0);
    target_group_free(&g);
    /* IPv6 in brackets; no Ready condition: unknown; no controller labels. */
    pod_group("{\"metadata\":{\"name\":\"p\",\"namespace\":\"n\"},\"spec\":{\"containers\":"
              "[{\"name\":\"c\",\"ports\":[{\"containerPort\":9090}]}]},"
              "\"status\":{\"podIP\":\"fd00::5\"}}",
              &g, 0, &err);
    assert_label(&g.targets[0], "__address__", "[fd00::5]:9090");
    assert_label(&g.targets[0], "__meta_kubernetes_pod_container_port_protocol", "");
    assert_label(&g.labels, "__meta_kubernetes_pod_ready", "unknown");
    assert_null(label_set_get(&g.labels, "__meta_kubernetes_pod_controller_kind"));
    target_group_free(&g);
    /* Not a pod. */
    pod_group("{\"metadata\":{\"name\":\"p\"}}", &g, -1, &err);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    pod_group("{\"metadata\":{\"name\":\"p\",\"namespace\":\"n\"},\"spec\":{\"containers\":"
              "[{\"name\":\"c\",\"ports\":[{\"containerPort\":\"x\"}]}]},"
              "\"status\":{\"podIP\":\"1.2.3.4\"}}",
              &g, -1, &err);
    assert_string_equal(err.message,
                        "pod/n/p: container c has a port without a valid containerPort");

    char name[64];
    kubernetes_sanitize_label_name("app.kubernetes.io/part-of", name, sizeof name);
    assert_string_equal(name, "app_kubernetes_io_part_of");
}

/* ---- Config decoding --------------------------------------------------------------------------
 */

static int decode(const char *name, const char *yaml, kubernetes_sd_config *out,
                  strata_error *err) {
    config_document *doc = NULL;
    assert_int_equal(config_load_string(name, yaml, strlen(yaml), &doc, err), 0);
    memset(out, 0, sizeof *out);
    int rc = kubernetes_sd_config_decode(config_document_root(doc), out, err);
    config_document_free(doc);
    return rc;
}

static void decode_fails(const char *yaml, const char *message) {
    kubernetes_sd_config c;
    strata_error err;
    assert_int_equal(decode("k.yaml", yaml, &c, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_string_equal(err.message, message);
    kubernetes_sd_config_release(&c);
}

static void test_config_decode(void **state) {
    (void)state;
    kubernetes_sd_config c;
    strata_error err;
    const char *yaml =
        "role: pod\n"
        "api_server: https://k8s.example:6443\n"
        "namespaces:\n  own_namespace: true\n  names: [shop, db]\n"
        "selectors:\n  - role: pod\n    label: app=api\n    field: spec.nodeName=n1\n"
        "bearer_token_file: secrets/token\n"
        "tls_config:\n  ca_file: /etc/ca.crt\n  insecure_skip_verify: false\n";
    assert_int_equal(decode("/etc/strata/strata.yaml", yaml, &c, &err), 0);
    assert_string_equal(c.role, "pod");
    assert_string_equal(c.api_server, "https://k8s.example:6443");
    assert_true(c.namespaces.own_namespace);
    assert_int_equal(c.namespaces.names.count, 2);
    assert_string_equal(c.namespaces.names.items[1], "db");
    assert_int_equal(c.selectors.count, 1);
    const kubernetes_selector *sel = c.selectors.items;
    assert_string_equal(sel[0].label, "app=api");
    assert_string_equal(sel[0].field, "spec.nodeName=n1");
    /* Relative to the config file's directory. */
    assert_string_equal(c.bearer_token_file, "/etc/strata/secrets/token");
    assert_string_equal(c.tls_config.ca_file, "/etc/ca.crt");
    kubernetes_sd_config_release(&c);
    assert_null(c.role);

    decode_fails("role: pod\nnamespace: [a]\n",
                 "k.yaml:2:1: unknown key \"namespace\" (expected one of: role, api_server, "
                 "kubeconfig_file, namespaces, selectors, bearer_token, bearer_token_file, "
                 "basic_auth, tls_config)");
    decode_fails("role: service\n",
                 "k.yaml:1:7: role: role \"service\" is not supported (only pod)");
    decode_fails("api_server: http://a\n", "k.yaml:1:1: missing required key \"role\"");
    decode_fails("role: pod\napi_server: http://a\nkubeconfig_file: k\n",
                 "k.yaml:3:18: kubeconfig_file: api_server and kubeconfig_file exclude each other");
    decode_fails("role: pod\napi_server: a.example\n",
                 "k.yaml:2:13: api_server: api_server must be an http:// or https:// URL");
    decode_fails("role: pod\nkubeconfig_file: k\nbearer_token: t\n",
                 "k.yaml:2:18: kubeconfig_file: kubeconfig_file excludes bearer_token, "
                 "bearer_token_file, basic_auth and tls_config (the kubeconfig says how to "
                 "connect)");
    decode_fails("role: pod\napi_server: http://a\nbearer_token: t\nbearer_token_file: f\n",
                 "k.yaml:4:20: bearer_token_file: bearer_token and bearer_token_file exclude each "
                 "other");
    decode_fails("role: pod\napi_server: http://a\nbearer_token: t\nbasic_auth: {username: u}\n",
                 "k.yaml:4:13: basic_auth: basic_auth excludes bearer_token and "
                 "bearer_token_file");
    decode_fails("role: pod\nselectors: [{role: node, label: a=b}]\n",
                 "k.yaml:2:20: selectors[0].role: selector role \"node\" is not supported with "
                 "discovery role pod (only pod selectors)");
    decode_fails("role: pod\nselectors: [{role: pod}]\n",
                 "k.yaml:2:13: selectors[0]: a selector needs label or field");
    decode_fails("role: pod\ntls_config: {ca_file: x}\n",
                 "k.yaml:1:1: authentication and tls_config need api_server (in-cluster discovery "
                 "uses the service account)");
    decode_fails("role: pod\ntls_config: {ca_fil: x}\n",
                 "k.yaml:2:14: tls_config: unknown key \"ca_fil\" (expected one of: ca_file, "
                 "cert_file, key_file, server_name, insecure_skip_verify)");

    /* The list form a scrape config embeds. */
    config_document *doc = NULL;
    const char *list_yaml = "- role: pod\n- role: pod\n  namespaces: {names: [a]}\n";
    assert_int_equal(config_load_string("l", list_yaml, strlen(list_yaml), &doc, &err), 0);
    kubernetes_sd_config_list list;
    assert_int_equal(kubernetes_sd_configs_decode(config_document_root(doc), &list, &err), 0);
    assert_int_equal(list.count, 2);
    assert_string_equal(list.items[1].namespaces.names.items[0], "a");
    kubernetes_sd_configs_release(&list);
    config_document_free(doc);
}

/* ---- Discovery against the fake API server ----------------------------------------------------
 */

static void test_pods_added_modified_deleted(void **state) {
    (void)state;
    kubernetes_testserver s;
    collector c;
    kubernetes_sd_config config;
    kubernetes_discovery *d = start_https(
        &s, &c, &config, "selectors: [{role: pod, label: 'app.kubernetes.io/name!=db'}]\n");
    WAIT_UNTIL(lists_of(d) == 1);
    assert_int_equal(c.first_call_groups, 0);
    wait_watching(&s, 1);

    /* Added: every label with its value. */
    assert_int_equal(kubernetes_testserver_post(&s, "/apply", pod_api_json), 0);
    WAIT_UNTIL(targets_of(&c, "pod/shop/api-7f9c") == 4);
    label_set l = LABEL_SET_INIT;
    merged(&c, "pod/shop/api-7f9c", 1, &l);
    assert_label(&l, "__address__", "10.1.2.3:6060");
    assert_label(&l, "__meta_kubernetes_namespace", "shop");
    assert_label(&l, "__meta_kubernetes_pod_name", "api-7f9c");
    assert_label(&l, "__meta_kubernetes_pod_container_port_name", "pprof");
    assert_label(&l, "__meta_kubernetes_pod_label_tier", "backend");
    assert_label(&l, "__meta_kubernetes_pod_uid", "u-1");
    assert_label(&l, "__meta_kubernetes_pod_controller_kind", "ReplicaSet");
    assert_int_equal(l.count, 16 + 8);
    label_set_free(&l);

    /* Modified: a label changes. */
    apply_pod(&s, "default", "web", "v1", "10.0.0.9");
    WAIT_UNTIL(targets_of(&c, "pod/default/web") == 1);
    apply_pod(&s, "default", "web", "v2", "10.0.0.9");
    for (int64_t deadline = strata_monotonic_ns() + 20000000000LL;;) {
        merged(&c, "pod/default/web", 0, &l);
        bool changed = strcmp(label_set_get(&l, "__meta_kubernetes_pod_label_app"), "v2") == 0;
        if (changed)
            break;
        label_set_free(&l);
        assert_true(strata_monotonic_ns() < deadline);
        usleep(10000);
    }
    assert_label(&l, "__address__", "10.0.0.9:80");
    label_set_free(&l);

    /* Not matching the label selector: never reported. */
    assert_int_equal(kubernetes_testserver_post(
                         &s, "/apply",
                         "{\"metadata\":{\"name\":\"db\",\"namespace\":\"default\",\"labels\":"
                         "{\"app.kubernetes.io/name\":\"db\"}},"
                         "\"status\":{\"podIP\":\"10.0.0.10\"}}"),
                     0);
    /* Losing its IP (evicted): an empty group. */
    apply_pod(&s, "default", "web", "v2", "");
    WAIT_UNTIL(targets_of(&c, "pod/default/web") == 0);
    apply_pod(&s, "default", "web", "v3", "10.0.0.11");
    WAIT_UNTIL(targets_of(&c, "pod/default/web") == 1);

    /* Deleted: an empty group. */
    delete_pod(&s, "shop", "api-7f9c", false);
    WAIT_UNTIL(targets_of(&c, "pod/shop/api-7f9c") == 0);
    assert_int_equal(targets_of(&c, "pod/default/db"), -1);

    /* A bookmark moves the resourceVersion on without an update. */
    pthread_mutex_lock(&c.mu);
    size_t calls = c.calls;
    pthread_mutex_unlock(&c.mu);
    kubernetes_discovery_stats st;
    stats(d, &st);
    uint64_t events = st.events;
    assert_int_equal(kubernetes_testserver_post(&s, "/bookmark", "{}"), 0);
    WAIT_UNTIL((stats(d, &st), st.events == events + 1));
    pthread_mutex_lock(&c.mu);
    assert_int_equal(c.calls, calls);
    pthread_mutex_unlock(&c.mu);
    assert_true(st.synced);
    assert_int_equal(st.errors, 0);

    kubernetes_discovery_free(d);

    /* Every request carried the token from the file and the label selector; the watch resumed
     * from the list's resourceVersion with bookmarks. */
    char *requests = kubernetes_testserver_get(&s, "/requests");
    assert_non_null(requests);
    assert_non_null(strstr(requests,
                           "\"query\": {\"labelSelector\": \"app.kubernetes.io/name!=db\", "
                           "\"limit\": \"500\"}"));
    assert_non_null(strstr(requests,
                           "\"labelSelector\": \"app.kubernetes.io/name!=db\", \"watch\": \"1\", "
                           "\"resourceVersion\": \"100\", \"allowWatchBookmarks\": "
                           "\"true\""));
    assert_null(strstr(requests, "\"authorization\": null"));
    assert_non_null(strstr(requests, "\"authorization\": \"Bearer s3cret\""));
    free(requests);
    kubernetes_testserver_stop(&s);
    collector_free(&c);
    kubernetes_sd_config_release(&config);
}

static void relist_after_gone(const char *how) {
    kubernetes_testserver s;
    collector c;
    kubernetes_sd_config config;
    kubernetes_discovery *d = start_https(&s, &c, &config, NULL);
    WAIT_UNTIL(lists_of(d) == 1);
    wait_watching(&s, 1);
    apply_pod(&s, "a", "keep", "x", "10.0.0.1");
    apply_pod(&s, "a", "lost", "x", "10.0.0.2");
    WAIT_UNTIL(targets_of(&c, "pod/a/lost") == 1 && targets_of(&c, "pod/a/keep") == 1);

    /* The deletion is compacted away: only a relist can tell. */
    delete_pod(&s, "a", "lost", true);
    apply_pod(&s, "a", "new", "x", "10.0.0.3");
    char json[64];
    snprintf(json, sizeof json, "{\"how\":\"%s\"}", how);
    assert_int_equal(kubernetes_testserver_post(&s, "/expire", json), 0);
    WAIT_UNTIL(lists_of(d) == 2);
    WAIT_UNTIL(targets_of(&c, "pod/a/lost") == 0);
    assert_int_equal(targets_of(&c, "pod/a/keep"), 1);
    assert_int_equal(targets_of(&c, "pod/a/new"), 1);
    kubernetes_discovery_stats st;
    stats(d, &st);
    assert_int_equal(st.expired, 1);
    assert_int_equal(st.errors, 0);
    /* And it watches again from the new list. */
    wait_watching(&s, 2);
    apply_pod(&s, "a", "later", "x", "10.0.0.4");
    WAIT_UNTIL(targets_of(&c, "pod/a/later") == 1);
    kubernetes_discovery_free(d);
    kubernetes_testserver_stop(&s);
    collector_free(&c);
    kubernetes_sd_config_release(&config);
}

static void test_relist_after_410_event(void **state) {
    (void)state;
    relist_after_gone("event");
}

static void test_relist_after_410_status(void **state) {
    (void)state;
    relist_after_gone("status");
}

/* A watch the server ends normally (timeoutSeconds) is resumed from the last resourceVersion,
 * without a relist, and events in between are not lost. */
static void test_watch_resumes_after_timeout(void **state) {
    (void)state;
    kubernetes_testserver s;
    collector c;
    kubernetes_sd_config config;
    kubernetes_watch_timeout_s = 1;
    kubernetes_discovery *d = start_https(&s, &c, &config, NULL);
    WAIT_UNTIL(lists_of(d) == 1);
    wait_watching(&s, 1);
    apply_pod(&s, "a", "before", "x", "10.0.0.1");
    WAIT_UNTIL(targets_of(&c, "pod/a/before") == 1);
    wait_watching(&s, 3); /* two watches ended after their second */
    apply_pod(&s, "a", "after", "x", "10.0.0.2");
    WAIT_UNTIL(targets_of(&c, "pod/a/after") == 1);
    kubernetes_discovery_stats st;
    stats(d, &st);
    assert_int_equal(st.lists, 1);
    assert_int_equal(st.errors, 0);
    assert_true(st.watches >= 3);
    kubernetes_discovery_free(d);
    char *requests = kubernetes_testserver_get(&s, "/requests");
    assert_non_null(strstr(requests, "\"timeoutSeconds\": \"1\""));
    free(requests);
    kubernetes_testserver_stop(&s);
    collector_free(&c);
    kubernetes_sd_config_release(&config);
    kubernetes_watch_timeout_s = 0;
}

static void test_malformed_and_oversized_events(void **state) {
    (void)state;
    kubernetes_testserver s;
    collector c;
    kubernetes_sd_config config;
    kubernetes_backoff_initial_ms = 20;
    kubernetes_discovery *d = start_https(&s, &c, &config, NULL);
    WAIT_UNTIL(lists_of(d) == 1);
    wait_watching(&s, 1);
    assert_int_equal(kubernetes_testserver_post(&s, "/raw", "{\"line\":\"{\\\"type\\\":\\\"ADD\"}"),
                     0);
    WAIT_UNTIL(errors_of(d) == 1);
    kubernetes_discovery_stats st;
    stats(d, &st);
    assert_non_null(strstr(st.last_error, "malformed watch event"));
    /* It backs off, relists and carries on. */
    WAIT_UNTIL(lists_of(d) == 2);
    wait_watching(&s, 2);
    apply_pod(&s, "a", "after-garbage", "x", "10.0.0.1");
    WAIT_UNTIL(targets_of(&c, "pod/a/after-garbage") == 1);

    assert_int_equal(
        kubernetes_testserver_post(
            &s, "/raw", "{\"line\":\"{\\\"type\\\":\\\"SURPRISE\\\",\\\"object\\\":{}}\"}"),
        0);
    WAIT_UNTIL(errors_of(d) == 2);
    stats(d, &st);
    assert_string_equal(st.last_error, "unknown watch event type \"SURPRISE\"");
    WAIT_UNTIL(lists_of(d) == 3);

    /* An event over the size limit is an error, not an allocation. */
    wait_watching(&s, 3);
    size_t saved = kubernetes_max_event_bytes;
    kubernetes_max_event_bytes = 4096;
    char big[8192];
    int n = snprintf(big, sizeof big,
                     "{\"metadata\":{\"name\":\"big\",\"namespace\":\"a\",\"annotations\":"
                     "{\"x\":\"");
    memset(big + n, 'x', 5000);
    snprintf(big + n + 5000, sizeof big - (size_t)n - 5000,
             "\"}},\"spec\":{\"containers\":[{\"name\":\"c\"}]},"
             "\"status\":{\"podIP\":\"1.1.1.1\"}}");
    assert_int_equal(kubernetes_testserver_post(&s, "/apply", big), 0);
    WAIT_UNTIL(errors_of(d) == 3);
    stats(d, &st);
    assert_string_equal(st.last_error, "watch event larger than 4096 bytes");
    kubernetes_max_event_bytes = saved;
    /* The list has no such limit at this size: the relist reports the pod. */
    WAIT_UNTIL(targets_of(&c, "pod/a/big") == 1);
    kubernetes_discovery_free(d);
    kubernetes_testserver_stop(&s);
    collector_free(&c);
    kubernetes_sd_config_release(&config);
    kubernetes_backoff_initial_ms = 250;
}

static void test_paged_list_and_scripted_failures(void **state) {
    (void)state;
    kubernetes_testserver s;
    collector c;
    kubernetes_sd_config config;
    kubernetes_backoff_initial_ms = 20;
    kubernetes_list_page_size = 2;
    char cert[512], key[512];
    snprintf(cert, sizeof cert, "%s/server.crt", certs);
    snprintf(key, sizeof key, "%s/server.key", certs);
    kubernetes_discovery *d = NULL;
    /* Start the server first so the pods exist before the first list. */
    const char *args[] = {"--tls-cert", cert, "--tls-key", key, "--token", "s3cret", NULL};
    assert_int_equal(kubernetes_testserver_start(&s, 1, args), 0);
    for (int i = 0; i < 5; i++) {
        char name[16], ip[16];
        snprintf(name, sizeof name, "p%d", i);
        snprintf(ip, sizeof ip, "10.0.1.%d", i + 1);
        apply_pod(&s, "b", name, "x", ip);
    }
    assert_int_equal(kubernetes_testserver_post(&s, "/fail", "{\"kind\":\"list\",\"status\":500}"),
                     0);
    char yaml[1024];
    snprintf(yaml, sizeof yaml,
             "role: pod\napi_server: %s\nbearer_token: s3cret\ntls_config: {ca_file: %s/ca.crt}\n"
             "namespaces: {names: [b]}\n",
             s.url, certs);
    strata_error err;
    assert_int_equal(decode("<t>", yaml, &config, &err), 0);
    collector_init(&c);
    d = kubernetes_discovery_new(&config, collect, &c, &err);
    assert_non_null(d);
    WAIT_UNTIL(lists_of(d) == 1);
    kubernetes_discovery_stats st;
    stats(d, &st);
    assert_int_equal(st.errors, 1);
    assert_string_equal(st.last_error, "namespace b: list pods: HTTP 500: scripted failure 500");
    /* The first successful list delivered all five pods at once, over three pages. */
    assert_int_equal(c.first_call_groups, 5);
    assert_int_equal(targets_of(&c, "pod/b/p4"), 1);
    char *requests = kubernetes_testserver_get(&s, "/requests");
    assert_non_null(strstr(requests, "\"path\": \"/api/v1/namespaces/b/pods\", \"query\": "
                                     "{\"limit\": \"2\", \"continue\": \"4\"}"));
    free(requests);
    kubernetes_discovery_free(d);
    kubernetes_testserver_stop(&s);
    collector_free(&c);
    kubernetes_sd_config_release(&config);
    kubernetes_list_page_size = 500;
    kubernetes_backoff_initial_ms = 250;
}

/* The client checks the server's certificate against the configured CA and the server the
 * token: a wrong CA or a wrong token is an error and no targets. */
static void test_ca_and_token_checked(void **state) {
    (void)state;
    char cert[512], key[512];
    snprintf(cert, sizeof cert, "%s/server.crt", certs);
    snprintf(key, sizeof key, "%s/server.key", certs);
    const char *args[] = {"--tls-cert", cert, "--tls-key", key, "--token", "s3cret", NULL};
    kubernetes_testserver s;
    assert_int_equal(kubernetes_testserver_start(&s, 1, args), 0);
    apply_pod(&s, "a", "p", "x", "10.0.0.1");
    const char *cases[][2] = {
        {"bearer_token: s3cret\ntls_config: {ca_file: %s/other-ca.crt}\n", "certificate"},
        {"bearer_token: wrong\ntls_config: {ca_file: %s/ca.crt}\n",
         "list pods: HTTP 401: Unauthorized"},
        {"bearer_token: s3cret\n", "certificate"}, /* the system CAs do not know ours */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char tail[512], yaml[1024];
        snprintf(tail, sizeof tail, cases[i][0], certs);
        snprintf(yaml, sizeof yaml, "role: pod\napi_server: %s\n%s", s.url, tail);
        kubernetes_sd_config config;
        strata_error err;
        assert_int_equal(decode("<t>", yaml, &config, &err), 0);
        collector c;
        collector_init(&c);
        kubernetes_discovery *d = kubernetes_discovery_new(&config, collect, &c, &err);
        assert_non_null(d);
        WAIT_UNTIL(errors_of(d) >= 1);
        kubernetes_discovery_stats st;
        stats(d, &st);
        if (strstr(st.last_error, cases[i][1]) == NULL)
            fail_msg("case %zu: %s", i, st.last_error);
        assert_false(st.synced);
        kubernetes_discovery_free(d);
        assert_int_equal(c.calls, 0);
        collector_free(&c);
        kubernetes_sd_config_release(&config);
    }
    kubernetes_testserver_stop(&s);
}

static void test_in_cluster_own_namespace(void **state) {
    (void)state;
    char cert[512], key[512], sa[512], path[600];
    snprintf(cert, sizeof cert, "%s/server.crt", certs);
    snprintf(key, sizeof key, "%s/server.key", certs);
    snprintf(sa, sizeof sa, "%s/serviceaccount", certs);
    char command[2048];
    snprintf(command, sizeof command, "mkdir -p %s && cp %s/ca.crt %s/ca.crt", sa, certs, sa);
    assert_int_equal(system(command), 0);
    snprintf(path, sizeof path, "%s/token", sa);
    write_file(path, "sa-token\n");
    snprintf(path, sizeof path, "%s/namespace", sa);
    write_file(path, "monitoring");
    const char *args[] = {"--tls-cert", cert, "--tls-key", key, "--token", "sa-token", NULL};
    kubernetes_testserver s;
    assert_int_equal(kubernetes_testserver_start(&s, 1, args), 0);
    apply_pod(&s, "monitoring", "mine", "x", "10.0.0.1");
    apply_pod(&s, "other", "theirs", "x", "10.0.0.2");

    kubernetes_sd_config config;
    strata_error err;
    assert_int_equal(decode("<t>", "role: pod\nnamespaces: {own_namespace: true}\n", &config, &err),
                     0);
    collector c;
    collector_init(&c);
    unsetenv("KUBERNETES_SERVICE_HOST");
    assert_null(kubernetes_discovery_new(&config, collect, &c, &err));
    assert_int_equal(err.code, STRATA_FAILED_PRECONDITION);
    assert_non_null(strstr(err.message, "KUBERNETES_SERVICE_HOST"));

    char port[16];
    snprintf(port, sizeof port, "%d", s.api_port);
    setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1", 1);
    setenv("KUBERNETES_SERVICE_PORT", port, 1);
    kubernetes_service_account_dir = sa;
    kubernetes_discovery *d = kubernetes_discovery_new(&config, collect, &c, &err);
    assert_non_null(d);
    WAIT_UNTIL(lists_of(d) == 1);
    assert_int_equal(targets_of(&c, "pod/monitoring/mine"), 1);
    assert_int_equal(targets_of(&c, "pod/other/theirs"), -1);
    kubernetes_discovery_free(d);
    char *requests = kubernetes_testserver_get(&s, "/requests");
    assert_non_null(strstr(requests, "\"path\": \"/api/v1/namespaces/monitoring/pods\""));
    assert_non_null(strstr(requests, "\"authorization\": \"Bearer sa-token\""));
    free(requests);
    kubernetes_service_account_dir = KUBERNETES_DEFAULT_SERVICE_ACCOUNT_DIR;
    unsetenv("KUBERNETES_SERVICE_HOST");
    unsetenv("KUBERNETES_SERVICE_PORT");
    kubernetes_testserver_stop(&s);
    collector_free(&c);
    kubernetes_sd_config_release(&config);
}

/* base64 of a whole file, for kubeconfig *-data fields. */
static char *file_base64(const char *path) {
    char command[1024];
    snprintf(command, sizeof command, "base64 -w0 '%s'", path);
    FILE *p = popen(command, "r");
    assert_non_null(p);
    char *out = calloc(1, 16384);
    assert_non_null(out);
    size_t n = fread(out, 1, 16383, p);
    out[n] = '\0';
    pclose(p);
    return out;
}

/* A kind-style kubeconfig: CA and client certificate inline, the server requiring the client
 * certificate; plus a token user. */
static void test_kubeconfig_client_certificate(void **state) {
    (void)state;
    char cert[512], key[512], ca[512], client_cert[512], client_key[512];
    snprintf(cert, sizeof cert, "%s/server.crt", certs);
    snprintf(key, sizeof key, "%s/server.key", certs);
    snprintf(ca, sizeof ca, "%s/ca.crt", certs);
    snprintf(client_cert, sizeof client_cert, "%s/client.crt", certs);
    snprintf(client_key, sizeof client_key, "%s/client.key", certs);
    const char *args[] = {"--tls-cert", cert, "--tls-key", key, "--client-ca", ca, NULL};
    kubernetes_testserver s;
    assert_int_equal(kubernetes_testserver_start(&s, 1, args), 0);
    apply_pod(&s, "team", "p", "x", "10.0.0.1");
    char *ca_data = file_base64(ca), *cert_data = file_base64(client_cert),
         *key_data = file_base64(client_key);
    char kubeconfig[32768], path[512];
    /* The server name in the URL is not 127.0.0.1: tls-server-name is what is checked. */
    snprintf(kubeconfig, sizeof kubeconfig,
             "apiVersion: v1\nkind: Config\ncurrent-context: kind-test\n"
             "clusters:\n- name: other\n  cluster: {server: https://10.9.9.9:1}\n"
             "- name: kind-test\n  cluster:\n    server: %s\n"
             "    certificate-authority-data: %s\n    tls-server-name: kubernetes.test\n"
             "contexts:\n- name: kind-test\n  context: {cluster: kind-test, user: kind-test, "
             "namespace: team}\n"
             "users:\n- name: kind-test\n  user:\n    client-certificate-data: %s\n"
             "    client-key-data: %s\npreferences: {}\n",
             s.url, ca_data, cert_data, key_data);
    free(ca_data);
    free(cert_data);
    free(key_data);
    snprintf(path, sizeof path, "%s/kubeconfig", certs);
    write_file(path, kubeconfig);

    char yaml[1024];
    snprintf(yaml, sizeof yaml,
             "role: pod\nkubeconfig_file: %s\nnamespaces: {own_namespace: true}\n", path);
    kubernetes_sd_config config;
    strata_error err;
    assert_int_equal(decode("<t>", yaml, &config, &err), 0);
    collector c;
    collector_init(&c);
    kubernetes_discovery *d = kubernetes_discovery_new(&config, collect, &c, &err);
    if (d == NULL)
        fail_msg("%s", err.message);
    WAIT_UNTIL(lists_of(d) == 1);
    assert_int_equal(targets_of(&c, "pod/team/p"), 1);
    kubernetes_discovery_free(d);
    char *requests = kubernetes_testserver_get(&s, "/requests");
    assert_non_null(strstr(requests, "\"client_cert\": {\"commonName\": \"strata-test\"}"));
    assert_non_null(strstr(requests, "/api/v1/namespaces/team/pods"));
    free(requests);
    collector_free(&c);
    kubernetes_sd_config_release(&config);

    /* exec users are refused with a clear error. */
    write_file(path, "current-context: eks\nclusters: [{name: c, cluster: {server: https://x}}]\n"
                     "contexts: [{name: eks, context: {cluster: c, user: u}}]\n"
                     "users: [{name: u, user: {exec: {command: aws}}}]\n");
    assert_int_equal(decode("<t>", yaml, &config, &err), 0);
    assert_null(kubernetes_discovery_new(&config, collect, &c, &err));
    assert_int_equal(err.code, STRATA_UNIMPLEMENTED);
    assert_non_null(strstr(err.message, "exec or auth-provider credentials are not supported"));
    kubernetes_sd_config_release(&config);
    kubernetes_testserver_stop(&s);
}

static void kubeconfig_fails(const char *text, strata_status code, const char *message) {
    char path[512], yaml[1024];
    snprintf(path, sizeof path, "%s/bad-kubeconfig", certs);
    write_file(path, text);
    snprintf(yaml, sizeof yaml, "role: pod\nkubeconfig_file: %s\n", path);
    kubernetes_sd_config config;
    strata_error err;
    assert_int_equal(decode("<t>", yaml, &config, &err), 0);
    assert_null(kubernetes_discovery_new(&config, NULL, NULL, &err));
    assert_int_equal(err.code, code);
    if (strstr(err.message, message) == NULL)
        fail_msg("%s", err.message);
    kubernetes_sd_config_release(&config);
}

static void test_kubeconfig_errors(void **state) {
    (void)state;
    kubeconfig_fails("clusters: []\n", STRATA_INVALID_ARGUMENT,
                     "bad-kubeconfig: no current-context");
    kubeconfig_fails("current-context: a\ncontexts: [{name: b, context: {cluster: c}}]\n",
                     STRATA_INVALID_ARGUMENT, "context \"a\" not found");
    kubeconfig_fails("current-context: a\ncontexts: [{name: a, context: {cluster: c}}]\n",
                     STRATA_INVALID_ARGUMENT, "context \"a\" names no cluster with a server");
    kubeconfig_fails("current-context: a\ncontexts: [{name: a, context: {cluster: c, user: u}}]\n"
                     "clusters: [{name: c, cluster: {server: 'https://x', "
                     "certificate-authority-data: 'not*base64'}}]\n",
                     STRATA_INVALID_ARGUMENT, "certificate-authority-data: invalid base64 data");
    kubeconfig_fails("current-context: a\ncontexts: [{name: a, context: {cluster: c, user: u}}]\n"
                     "clusters: [{name: c, cluster: {server: 'https://x'}}]\n",
                     STRATA_INVALID_ARGUMENT, "user \"u\" not found");
    kubeconfig_fails("current-context: a\n\tbad", STRATA_INVALID_ARGUMENT, "kubeconfig: ");
    char path[512], yaml[1024];
    snprintf(path, sizeof path, "%s/no-such-kubeconfig", certs);
    snprintf(yaml, sizeof yaml, "role: pod\nkubeconfig_file: %s\n", path);
    kubernetes_sd_config config;
    strata_error err;
    assert_int_equal(decode("<t>", yaml, &config, &err), 0);
    assert_null(kubernetes_discovery_new(&config, NULL, NULL, &err));
    assert_int_equal(err.code, STRATA_NOT_FOUND);
    kubernetes_sd_config_release(&config);
}

static int setup_certs(void **state) {
    (void)state;
    return kubernetes_testserver_make_certs(certs, sizeof certs);
}

static int remove_certs(void **state) {
    (void)state;
    char command[512];
    snprintf(command, sizeof command, "rm -rf '%s'", certs);
    return system(command) == 0 ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pod_targets_and_meta_labels),
        cmocka_unit_test(test_pod_edge_cases),
        cmocka_unit_test(test_config_decode),
        cmocka_unit_test(test_pods_added_modified_deleted),
        cmocka_unit_test(test_relist_after_410_event),
        cmocka_unit_test(test_relist_after_410_status),
        cmocka_unit_test(test_watch_resumes_after_timeout),
        cmocka_unit_test(test_malformed_and_oversized_events),
        cmocka_unit_test(test_paged_list_and_scripted_failures),
        cmocka_unit_test(test_ca_and_token_checked),
        cmocka_unit_test(test_in_cluster_own_namespace),
        cmocka_unit_test(test_kubeconfig_client_certificate),
        cmocka_unit_test(test_kubeconfig_errors),
    };
    return cmocka_run_group_tests(tests, setup_certs, remove_certs);
}
