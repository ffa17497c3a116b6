/*
 * kubernetes_pod_fuzz.c - libFuzzer target: arbitrary bytes as a watch event line; when they parse
 * as JSON, the object (or the event's object) becomes a target group, whose label sets must be
 * valid Prometheus label sets.
 */
#include <stdint.h>
#include <stdlib.h>

#include "kubernetes/kubernetes.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    json_document *doc = NULL;
    if (json_parse((const char *)data, size, &doc, NULL) != 0)
        return 0;
    const json_value *root = json_document_root(doc);
    const json_value *object = json_object_get(root, "object");
    target_group g;
    if (kubernetes_pod_target_group(object != NULL ? object : root, &g, NULL) == 0) {
        if (g.labels.count > 0 && label_set_validate(&g.labels, NULL) != 0)
            abort();
        for (size_t i = 0; i < g.n_targets; i++) {
            label_set merged = LABEL_SET_INIT;
            if (target_group_merge_labels(&g, i, &merged, NULL) != 0 ||
                label_set_validate(&merged, NULL) != 0 ||
                label_set_get(&merged, DISCOVERY_ADDRESS_LABEL) == NULL)
                abort();
            label_set_free(&merged);
        }
        target_group_free(&g);
    }
    json_document_free(doc);
    return 0;
}
