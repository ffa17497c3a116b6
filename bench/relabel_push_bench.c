/*
 * relabel_push_bench.c - what one scrape target costs in lib/relabel and lib/push.
 *
 *   relabel: a Kubernetes-style rule list (keep on an annotation, hashmod sharding, address
 *            rewrite, labelmap of pod labels, labeldrop) over a 30-label discovery set; CPU ns per
 *            relabel_apply.
 *   push:    requests of one series (12 labels, a 20 KiB pprof) enqueued and pushed to 1 and 2
 *            local gRPC WriteRaw servers that decode and acknowledge them; enqueue CPU ns per
 *            request and end-to-end requests/s.
 *
 *   relabel_push_bench [--iterations N] [--requests N]
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "parca/profilestore/v1alpha1/profilestore.pb-c.h"
#include "push/push.h"
#include "relabel/relabel.h"
#include "rpc/rpc.h"

static const char rules_yaml[] =
    "relabel_configs:\n"
    "- {action: keep, source_labels: [__meta_kubernetes_pod_annotation_strata_scrape], regex: "
    "\"true\"}\n"
    "- {action: hashmod, source_labels: [__address__], modulus: 4, target_label: __tmp_hash}\n"
    "- {action: keep, source_labels: [__tmp_hash], regex: \"0|1|2|3\"}\n"
    "- source_labels: [__address__, __meta_kubernetes_pod_annotation_strata_port]\n"
    "  regex: \"([^:]+)(:[0-9]+)?;([0-9]+)\"\n"
    "  target_label: __address__\n"
    "  replacement: \"$1:$3\"\n"
    "- {action: labelmap, regex: \"__meta_kubernetes_pod_label_(.+)\"}\n"
    "- {source_labels: [__meta_kubernetes_namespace], target_label: namespace}\n"
    "- {source_labels: [__meta_kubernetes_pod_name], target_label: pod}\n"
    "- {action: labeldrop, regex: \"pod_template_hash|controller_revision_hash\"}\n";

static void die(const char *what, const strata_error *err) {
    fprintf(stderr, "relabel_push_bench: %s: %s\n", what, err != NULL ? err->message : "");
    exit(1);
}

static void discovery_labels(label_set *set, int i) {
    char text[2048];
    snprintf(
        text, sizeof text,
        "{__address__=\"10.1.%d.%d:8080\", __meta_kubernetes_namespace=\"team-%d\", "
        "__meta_kubernetes_pod_name=\"api-%d-7d9f\", __meta_kubernetes_pod_uid=\"u-%d\", "
        "__meta_kubernetes_pod_node_name=\"node-%d\", __meta_kubernetes_pod_ip=\"10.1.%d.%d\", "
        "__meta_kubernetes_pod_ready=\"true\", __meta_kubernetes_pod_phase=\"Running\", "
        "__meta_kubernetes_pod_annotation_strata_scrape=\"true\", "
        "__meta_kubernetes_pod_annotation_strata_port=\"6060\", "
        "__meta_kubernetes_pod_container_name=\"api\", "
        "__meta_kubernetes_pod_container_port_number=\"8080\", "
        "__meta_kubernetes_pod_container_port_name=\"http\", "
        "__meta_kubernetes_pod_controller_kind=\"ReplicaSet\", "
        "__meta_kubernetes_pod_controller_name=\"api-%d\", "
        "__meta_kubernetes_pod_label_app=\"api\", __meta_kubernetes_pod_label_tier=\"web\", "
        "__meta_kubernetes_pod_label_version=\"v1.%d\", "
        "__meta_kubernetes_pod_label_pod_template_hash=\"7d9f\", "
        "__meta_kubernetes_pod_labelpresent_app=\"true\", "
        "__meta_kubernetes_pod_host_ip=\"192.168.0.%d\", job=\"kubernetes-pods\", "
        "__scheme__=\"http\", __metrics_path__=\"/debug/pprof/profile\", "
        "__scrape_interval__=\"10s\", __scrape_timeout__=\"10s\", a1=\"x\", a2=\"y\", "
        "a3=\"z\", a4=\"w\"}",
        i / 250, i % 250, i % 7, i, i, i % 50, i / 250, i % 250, i, i % 9, i % 50);
    strata_error err;
    if (label_set_from_text(text, set, &err) != 0)
        die("labels", &err);
}

static void bench_relabel(long iterations) {
    config_document *doc = NULL;
    relabel_rules *rules = NULL;
    strata_error err;
    if (config_load_string("bench.yaml", rules_yaml, strlen(rules_yaml), &doc, &err) != 0 ||
        relabel_rules_decode(config_node_get(config_document_root(doc), "relabel_configs"), &rules,
                             &err) != 0)
        die("rules", &err);
    config_document_free(doc);
    label_set base[100];
    for (int i = 0; i < 100; i++)
        discovery_labels(&base[i], i);
    long kept = 0;
    int64_t cpu0 = strata_process_cpu_ns();
    for (long i = 0; i < iterations; i++) {
        label_set set;
        bool keep = false;
        if (label_set_copy(&set, &base[i % 100], &err) != 0 ||
            relabel_apply(rules, &set, &keep, &err) != 0)
            die("relabel", &err);
        kept += keep;
        label_set_free(&set);
    }
    int64_t cpu = strata_process_cpu_ns() - cpu0;
    printf("relabel: %zu rules on %zu labels: %.2f us CPU per target (copy included), %ld of %ld "
           "kept\n",
           relabel_rules_count(rules), base[0].count, (double)cpu / (double)iterations / 1e3, kept,
           iterations);
    for (int i = 0; i < 100; i++)
        label_set_free(&base[i]);
    relabel_rules_free(rules);
}

static int on_write_raw(rpc_call *call, const uint8_t *request, size_t len, strata_buffer *response,
                        strata_error *err, void *arg) {
    (void)call, (void)response, (void)arg;
    Parca__Profilestore__V1alpha1__WriteRawRequest *req =
        parca__profilestore__v1alpha1__write_raw_request__unpack(NULL, len, request);
    if (req == NULL)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "bad request");
    parca__profilestore__v1alpha1__write_raw_request__free_unpacked(req, NULL);
    return 0;
}

static rpc_server *start_server(char *address, size_t len) {
    strata_error err;
    rpc_server_options o = {.listen_address = "127.0.0.1:0", .threads = 2};
    rpc_server *s = rpc_server_new(&o, &err);
    if (s == NULL ||
        rpc_server_add_sync_method(s, PUSH_WRITE_RAW_METHOD, on_write_raw, NULL, &err) != 0 ||
        rpc_server_start(s, &err) != 0)
        die("server", &err);
    snprintf(address, len, "127.0.0.1:%d", rpc_server_port(s));
    return s;
}

static void bench_push(size_t n_addresses, long requests) {
    char addr_text[2][64];
    rpc_server *servers[2];
    const char *addresses[2];
    for (size_t i = 0; i < n_addresses; i++) {
        servers[i] = start_server(addr_text[i], sizeof addr_text[i]);
        addresses[i] = addr_text[i];
    }
    push_options o = {.addresses = addresses, .n_addresses = n_addresses};
    strata_error err;
    pusher *p = pusher_new(&o, &err);
    if (p == NULL)
        die("pusher", &err);
    label_set labels = LABEL_SET_INIT;
    if (label_set_from_text("{__name__=\"process_cpu\", job=\"kubernetes-pods\", instance=\"10.1.0."
                            "1:6060\", namespace=\"team-1\", pod=\"api-1-7d9f\", app=\"api\", "
                            "tier=\"web\", version=\"v1.1\", container=\"api\", node=\"node-1\", "
                            "__delta__=\"true\", region=\"eu\"}",
                            &labels, &err) != 0)
        die("labels", &err);
    static uint8_t pprof[20 << 10];
    for (size_t i = 0; i < sizeof pprof; i++)
        pprof[i] = (uint8_t)(i * 2654435761u >> 13);
    push_series s = {&labels, pprof, sizeof pprof};
    int64_t wall0 = strata_monotonic_ns();
    int64_t enqueue_ns = 0;
    for (long i = 0; i < requests; i++) {
        int64_t t0 = strata_monotonic_ns();
        if (push_enqueue(p, &s, 1, &err) != 0)
            die("enqueue", &err);
        enqueue_ns += strata_monotonic_ns() - t0;
        if (i % 256 == 255) /* keep within the queue bound: this measures throughput */
            (void)push_flush(p, strata_monotonic_ns() + 60 * STRATA_NS_PER_SEC);
    }
    if (push_flush(p, strata_monotonic_ns() + 60 * STRATA_NS_PER_SEC) != 0)
        die("flush timed out", NULL);
    double secs = (double)(strata_monotonic_ns() - wall0) / 1e9;
    push_stats st;
    push_stats_get(p, &st);
    printf("push: %zu ingester(s), %ld requests of 1 series (20 KiB pprof): %.0f requests/s, "
           "enqueue %.1f us per request (encode included), acknowledged %llu, dropped %llu\n",
           n_addresses, requests, (double)requests / secs, (double)enqueue_ns / requests / 1e3,
           (unsigned long long)st.requests,
           (unsigned long long)(st.dropped[0] + st.dropped[1] + st.dropped[2]));
    pusher_free(p);
    label_set_free(&labels);
    for (size_t i = 0; i < n_addresses; i++)
        rpc_server_shutdown(servers[i], STRATA_NS_PER_SEC);
}

int main(int argc, char **argv) {
    long iterations = 200000, requests = 20000;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--iterations") == 0)
            iterations = atol(argv[i + 1]);
        else if (strcmp(argv[i], "--requests") == 0)
            requests = atol(argv[i + 1]);
    }
    bench_relabel(iterations);
    bench_push(1, requests);
    bench_push(2, requests);
    return 0;
}
