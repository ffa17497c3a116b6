/*
 * kubepods_test.c - Kubernetes labels for processes: a fake API server (tests/kubernetes) holds
 * pods on two nodes; the agent watches node-1's and labels a process whose cgroup named a
 * synthetic container id with its namespace, pod and container, and shows the pod's
 * __meta_kubernetes_* labels to relabeling (a hook, and the agent's real -relabel-config rules).
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

#include "agent_cli.h"
#include "common/clock.h"
#include "kubepods.h"
#include "kubernetes_testserver.h"
#include "proclabels.h"
#include "relabel/relabel.h"

#define ID_APP "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define ID_SIDECAR "1111111111111111111111111111111111111111111111111111111111111111"
#define ID_OTHER_NODE "2222222222222222222222222222222222222222222222222222222222222222"

static void apply(const kubernetes_testserver *s, const char *name, const char *node,
                  const char *app_id, const char *sidecar_id) {
    char json[2048];
    snprintf(json, sizeof json,
             "{\"metadata\":{\"name\":\"%s\",\"namespace\":\"shop\",\"labels\":{\"app\":\"cart\"}},"
             "\"spec\":{\"nodeName\":\"%s\",\"containers\":["
             "{\"name\":\"app\",\"image\":\"shop/cart:3\",\"ports\":[{\"containerPort\":8080},"
             "{\"containerPort\":6060}]},{\"name\":\"envoy\",\"image\":\"envoy:1\"}]},"
             "\"status\":{\"phase\":\"Running\",\"podIP\":\"10.0.0.5\",\"containerStatuses\":["
             "{\"name\":\"app\",\"containerID\":\"containerd://%s\"},"
             "{\"name\":\"envoy\",\"containerID\":\"cri-o://%s\"}]}}",
             name, node, app_id, sidecar_id);
    assert_int_equal(kubernetes_testserver_post(s, "/apply", json), 0);
}

static agent_proc process_in(const char *container_id) {
    agent_proc p;
    memset(&p, 0, sizeof p);
    p.pid = 4242;
    strcpy(p.comm, "cart");
    p.executable = "/app/cart";
    p.cgroup = "/kubepods/burstable/pod-x/" ID_APP;
    snprintf(p.container_id, sizeof p.container_id, "%s", container_id);
    return p;
}

/* Relabeling sees the pod's discovery labels: copy the pod label app into `app`. */
static int copy_app(void *ctx, label_set *labels, bool *drop, strata_error *err) {
    (void)ctx;
    *drop = false;
    const char *app = label_set_get(labels, "__meta_kubernetes_pod_label_app");
    return app != NULL ? label_set_set(labels, "app", app, err) : 0;
}

static char *format(const label_set *ls) {
    strata_buffer text = STRATA_BUFFER_INIT;
    assert_int_equal(label_set_format(ls, &text), 0);
    char *s = strata_buffer_detach(&text, NULL);
    assert_non_null(s);
    return s;
}

static bool known(agent_kubepods *k, const char *id) {
    label_set ls = LABEL_SET_INIT;
    bool found = false;
    assert_int_equal(agent_kubepods_add_labels(k, id, &ls, &found, NULL), 0);
    label_set_free(&ls);
    return found;
}

static void test_process_gets_pod_labels(void **state) {
    (void)state;
    kubernetes_testserver s;
    assert_int_equal(kubernetes_testserver_start(&s, 0, NULL), 0);
    apply(&s, "cart-5d8f", "node-1", ID_APP, ID_SIDECAR);
    apply(&s, "cart-elsewhere", "node-2", ID_OTHER_NODE, "33");

    agent_kubepods_options ko = {.node = "node-1", .api_server = s.url};
    strata_error err;
    agent_kubepods *k = agent_kubepods_new(&ko, &err);
    if (k == NULL)
        fail_msg("%s", err.message);
    assert_true(agent_kubepods_wait_synced(k, 20000));

    agent_proc p = process_in(ID_APP);
    agent_label_options o = {"node-1", copy_app, NULL, k};
    label_set ls;
    bool drop;
    assert_int_equal(agent_process_labels(&p, 4242, "cart", &o, &ls, &drop, &err), 0);
    assert_false(drop);
    char *text = format(&ls);
    assert_string_equal(text, "{__name__=\"strata_agent\", app=\"cart\", comm=\"cart\", "
                              "container=\"app\", container_id=\"" ID_APP "\", "
                              "executable=\"/app/cart\", namespace=\"shop\", node=\"node-1\", "
                              "pid=\"4242\", pod=\"cart-5d8f\"}");
    free(text);
    label_set_free(&ls);

    /* The agent's -relabel-config rules (lib/relabel) on the pod's labels: pod labels mapped,
     * sidecars dropped. */
    char path[] = "/tmp/kubepods_relabel_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *yaml = "relabel_configs:\n"
                       "- {action: labelmap, regex: __meta_kubernetes_pod_label_(.+)}\n"
                       "- {action: drop, source_labels: [__meta_kubernetes_pod_container_name], "
                       "regex: envoy}\n";
    assert_int_equal(write(fd, yaml, strlen(yaml)), (ssize_t)strlen(yaml));
    close(fd);
    relabel_rules *rules = NULL;
    if (relabel_rules_load_file(path, &rules, &err) != 0)
        fail_msg("%s", err.message);
    unlink(path);
    agent_label_options ro = {"node-1", agent_relabel_with_rules, rules, k};
    assert_int_equal(agent_process_labels(&p, 4242, "cart", &ro, &ls, &drop, &err), 0);
    assert_false(drop);
    assert_string_equal(label_set_get(&ls, "app"), "cart");
    assert_string_equal(label_set_get(&ls, "pod"), "cart-5d8f");
    label_set_free(&ls);
    agent_proc sidecar = process_in(ID_SIDECAR);
    assert_int_equal(agent_process_labels(&sidecar, 4243, "envoy", &ro, &ls, &drop, &err), 0);
    assert_true(drop);
    label_set_free(&ls);
    relabel_rules_free(rules);

    /* The discovery labels themselves, before finalisation. */
    bool found;
    label_set meta = LABEL_SET_INIT;
    assert_int_equal(agent_kubepods_add_labels(k, ID_SIDECAR, &meta, &found, &err), 0);
    assert_true(found);
    assert_string_equal(label_set_get(&meta, "container"), "envoy");
    assert_string_equal(label_set_get(&meta, "__meta_kubernetes_pod_container_id"),
                        "cri-o://" ID_SIDECAR);
    assert_string_equal(label_set_get(&meta, "__meta_kubernetes_pod_container_image"), "envoy:1");
    assert_string_equal(label_set_get(&meta, "__meta_kubernetes_pod_node_name"), "node-1");
    assert_string_equal(label_set_get(&meta, "__meta_kubernetes_pod_phase"), "Running");
    assert_null(label_set_get(&meta, "__address__"));
    assert_null(label_set_get(&meta, "__meta_kubernetes_pod_container_port_number"));
    label_set_free(&meta);

    /* A pod of another node is not watched; a process outside any container is untouched. */
    assert_false(known(k, ID_OTHER_NODE));
    p = process_in("");
    assert_int_equal(agent_process_labels(&p, 4242, "cart", &o, &ls, &drop, &err), 0);
    assert_null(label_set_get(&ls, "pod"));
    assert_null(label_set_get(&ls, "namespace"));
    label_set_free(&ls);

    /* Pods come and go. */
    apply(&s, "cart-new", "node-1", "44", "55");
    int64_t deadline = strata_monotonic_ns() + 20000000000LL;
    while (!known(k, "44") && strata_monotonic_ns() < deadline)
        usleep(10000);
    assert_true(known(k, "44"));
    assert_int_equal(kubernetes_testserver_post(&s, "/delete",
                                                "{\"namespace\":\"shop\",\"name\":\"cart-5d8f\"}"),
                     0);
    while (known(k, ID_APP) && strata_monotonic_ns() < deadline)
        usleep(10000);
    assert_false(known(k, ID_APP));
    assert_false(known(k, ID_SIDECAR));
    assert_true(known(k, "44"));

    agent_kubepods_free(k);
    char *requests = kubernetes_testserver_get(&s, "/requests");
    assert_non_null(strstr(requests, "\"fieldSelector\": \"spec.nodeName=node-1\""));
    free(requests);
    kubernetes_testserver_stop(&s);
}

/* Groups fed by hand: one entry per container however many ports, the runtime prefix dropped,
 * a pod's containers replaced when it changes. */
static void test_update_by_hand(void **state) {
    (void)state;
    agent_kubepods *k = agent_kubepods_new_empty(NULL);
    assert_non_null(k);
    target_group g;
    assert_int_equal(target_group_init(&g, "pod/ns/p", NULL), 0);
    assert_int_equal(label_set_set(&g.labels, "__meta_kubernetes_namespace", "ns", NULL), 0);
    assert_int_equal(label_set_set(&g.labels, "__meta_kubernetes_pod_name", "p", NULL), 0);
    for (int port = 0; port < 2; port++) {
        label_set *t = target_group_add_target(&g, NULL);
        assert_int_equal(label_set_set(t, "__address__", port ? "1.2.3.4:2" : "1.2.3.4:1", NULL),
                         0);
        assert_int_equal(label_set_set(t, "__meta_kubernetes_pod_container_name", "c", NULL), 0);
        assert_int_equal(
            label_set_set(t, "__meta_kubernetes_pod_container_id", "docker://abc", NULL), 0);
    }
    agent_kubepods_update(k, &g, 1);
    label_set ls = LABEL_SET_INIT;
    bool found;
    assert_int_equal(agent_kubepods_add_labels(k, "abc", &ls, &found, NULL), 0);
    assert_true(found);
    label_set_sort(&ls);
    char *text = format(&ls);
    assert_string_equal(text, "{__meta_kubernetes_namespace=\"ns\", "
                              "__meta_kubernetes_pod_container_id=\"docker://abc\", "
                              "__meta_kubernetes_pod_container_name=\"c\", "
                              "__meta_kubernetes_pod_name=\"p\", container=\"c\", "
                              "namespace=\"ns\", pod=\"p\"}");
    free(text);
    label_set_free(&ls);
    /* The same source with no targets: gone. */
    target_group_free(&g);
    assert_int_equal(target_group_init(&g, "pod/ns/p", NULL), 0);
    agent_kubepods_update(k, &g, 1);
    assert_false(known(k, "abc"));
    target_group_free(&g);
    agent_kubepods_free(k);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_process_gets_pod_labels),
        cmocka_unit_test(test_update_by_hand),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
