/*
 * kubernetes_bench.c - the CPU cost of Kubernetes pod discovery on the client side: parsing a pod
 * list (or one watch event per pod) and building Prometheus's role-pod target groups.
 *
 *   kubernetes_bench [PODS]     (default 5000)
 *
 * Pods are shaped like a busy cluster's: 10 labels, 5 annotations, 2 containers with 3 ports and
 * 1 without, an init container, an owner reference, container statuses. Prints the list's size,
 * microseconds per pod for the list and for watch events, and the targets built.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buffer.h"
#include "common/clock.h"
#include "kubernetes/kubernetes.h"

static void append_pod(strata_buffer *b, int i) {
    strata_buffer_appendf(b,
                          "{\"metadata\":{\"name\":\"api-%d-7f9c\",\"namespace\":\"ns-%d\","
                          "\"uid\":\"0000-%08d\",\"resourceVersion\":\"%d\",\"labels\":{",
                          i, i % 50, i, 1000 + i);
    for (int l = 0; l < 10; l++)
        strata_buffer_appendf(b, "%s\"app.kubernetes.io/label-%d\":\"value-%d-%d\"", l ? "," : "",
                              l, l, i);
    strata_buffer_append_str(b, "},\"annotations\":{");
    for (int a = 0; a < 5; a++)
        strata_buffer_appendf(b, "%s\"strata.dev/annotation-%d\":\"some longer value %d\"",
                              a ? "," : "", a, i);
    strata_buffer_appendf(
        b,
        "},\"ownerReferences\":[{\"kind\":\"ReplicaSet\",\"name\":\"api-%d\",\"controller\":true}]}"
        ","
        "\"spec\":{\"nodeName\":\"node-%d\",\"containers\":["
        "{\"name\":\"app\",\"image\":\"shop/api:1.2\",\"ports\":[{\"name\":\"http\","
        "\"containerPort\":8080,\"protocol\":\"TCP\"},{\"name\":\"grpc\",\"containerPort\":9090,"
        "\"protocol\":\"TCP\"},{\"name\":\"pprof\",\"containerPort\":6060,\"protocol\":\"TCP\"}]},"
        "{\"name\":\"sidecar\",\"image\":\"envoy:1.29\"}],"
        "\"initContainers\":[{\"name\":\"migrate\",\"image\":\"shop/migrate:1\"}]},"
        "\"status\":{\"phase\":\"Running\",\"podIP\":\"10.%d.%d.%d\",\"hostIP\":\"192.168.0.%d\","
        "\"conditions\":[{\"type\":\"Ready\",\"status\":\"True\"}],\"containerStatuses\":["
        "{\"name\":\"app\",\"containerID\":\"containerd://%064d\"},"
        "{\"name\":\"sidecar\",\"containerID\":\"containerd://%064d\"}]}}",
        i, i % 100, (i >> 16) & 255, (i >> 8) & 255, i & 255, i % 100, i, i + 1);
}

int main(int argc, char **argv) {
    int pods = argc > 1 ? atoi(argv[1]) : 5000;
    strata_buffer list = STRATA_BUFFER_INIT;
    strata_buffer_append_str(&list, "{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"metadata\":"
                                    "{\"resourceVersion\":\"999\"},\"items\":[");
    for (int i = 0; i < pods; i++) {
        if (i > 0)
            strata_buffer_append_byte(&list, ',');
        append_pod(&list, i);
    }
    strata_buffer_append_str(&list, "]}");

    /* A list: one parse, one group per pod. */
    int64_t t0 = strata_process_cpu_ns();
    json_document *doc = NULL;
    strata_error err;
    if (json_parse((const char *)list.data, list.len, &doc, &err) != 0) {
        fprintf(stderr, "parse: %s\n", err.message);
        return 1;
    }
    const json_value *items = json_object_get(json_document_root(doc), "items");
    size_t targets = 0, labels = 0;
    for (size_t i = 0; i < json_array_length(items); i++) {
        target_group g;
        if (kubernetes_pod_target_group(json_array_at(items, i), &g, &err) != 0) {
            fprintf(stderr, "pod: %s\n", err.message);
            return 1;
        }
        targets += g.n_targets;
        labels += g.labels.count;
        target_group_free(&g);
    }
    json_document_free(doc);
    int64_t list_ns = strata_process_cpu_ns() - t0;

    /* Watch events: one parse per pod. */
    strata_buffer event = STRATA_BUFFER_INIT;
    t0 = strata_process_cpu_ns();
    for (int i = 0; i < pods; i++) {
        strata_buffer_reset(&event);
        strata_buffer_append_str(&event, "{\"type\":\"MODIFIED\",\"object\":");
        append_pod(&event, i);
        strata_buffer_append_byte(&event, '}');
        if (json_parse((const char *)event.data, event.len, &doc, &err) != 0)
            return 1;
        target_group g;
        if (kubernetes_pod_target_group(json_object_get(json_document_root(doc), "object"), &g,
                                        &err) != 0)
            return 1;
        target_group_free(&g);
        json_document_free(doc);
    }
    int64_t watch_ns = strata_process_cpu_ns() - t0;
    printf("pods=%d list_bytes=%zu targets=%zu group_labels_per_pod=%zu\n", pods, list.len, targets,
           labels / (size_t)(pods > 0 ? pods : 1));
    printf("list: %.1f ms CPU, %.1f us per pod\n", (double)list_ns / 1e6,
           (double)list_ns / 1e3 / pods);
    printf("watch events: %.1f ms CPU, %.1f us per event (including building the event text)\n",
           (double)watch_ns / 1e6, (double)watch_ns / 1e3 / pods);
    strata_buffer_free(&event);
    strata_buffer_free(&list);
    return 0;
}
