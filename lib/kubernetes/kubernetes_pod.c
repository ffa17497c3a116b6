/*
 * kubernetes_pod.c - a Pod object as Prometheus's role pod sees it: one target group, one target
 * per container port (or per container without ports), __meta_kubernetes_* labels.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kubernetes/kubernetes.h"

#define META "__meta_kubernetes_"
#define POD META "pod_"

void kubernetes_sanitize_label_name(const char *name, char *out, size_t out_len) {
    if (out_len == 0)
        return;
    size_t i = 0;
    for (; name[i] != '\0' && i + 1 < out_len; i++) {
        char c = name[i];
        bool ok =
            (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
        out[i] = ok ? c : '_';
    }
    out[i] = '\0';
}

/* The string at key of v, or "" (absent and non-string fields read as empty, as Go's zero value).
 */
static const char *str(const json_value *v, const char *key) {
    const char *s = NULL;
    return json_get_string(json_object_get(v, key), &s, NULL) ? s : "";
}

/* Appends; the sets are sorted (and de-duplicated) once at the end, which is much cheaper than
 * keeping them sorted label by label. */
static int set(label_set *set_, const char *name, const char *value, strata_error *err) {
    return label_set_add(set_, name, strlen(name), value, strlen(value), err);
}

/* Two label or annotation names may sanitize to the same label name; as in Prometheus (a map),
 * the later one wins. The set is sorted stably, so the later one is the last of its run. */
static void dedupe_keep_last(label_set *labels) {
    size_t kept = 0;
    for (size_t i = 0; i < labels->count; i++) {
        strata_label *l = &labels->labels[i];
        if (i + 1 < labels->count && strcmp(l->name, labels->labels[i + 1].name) == 0) {
            free(l->name);
            free(l->value);
            continue;
        }
        labels->labels[kept++] = *l;
    }
    labels->count = kept;
}

/* out = prefix + kind + middle + sanitized name, truncated to fit. */
static void meta_name(char *out, size_t out_len, const char *kind, const char *middle,
                      const char *sanitized) {
    const char *parts[] = {POD, kind, middle, sanitized};
    size_t used = 0;
    for (size_t p = 0; p < 4; p++) {
        size_t len = strlen(parts[p]);
        if (len > out_len - 1 - used)
            len = out_len - 1 - used;
        memcpy(out + used, parts[p], len);
        used += len;
    }
    out[used] = '\0';
}

/* __meta_kubernetes_pod_<kind>_<name> = value and ..._<kind>present_<name> = "true" for every
 * entry of an object of strings (metadata.labels, metadata.annotations). */
static int add_meta_map(label_set *labels, const json_value *map, const char *kind,
                        strata_error *err) {
    size_t n = json_object_size(map);
    for (size_t i = 0; i < n; i++) {
        const char *value = NULL;
        if (!json_get_string(json_object_value_at(map, i), &value, NULL))
            value = "";
        char sanitized[256], name[320];
        kubernetes_sanitize_label_name(json_object_key_at(map, i), sanitized, sizeof sanitized);
        meta_name(name, sizeof name, kind, "_", sanitized);
        if (set(labels, name, value, err) != 0)
            return -1;
        meta_name(name, sizeof name, kind, "present_", sanitized);
        if (set(labels, name, "true", err) != 0)
            return -1;
    }
    return 0;
}

/* The Ready condition's status lower-cased, "unknown" without one (Prometheus podReady). */
static const char *pod_ready(const json_value *status) {
    const json_value *conditions = json_object_get(status, "conditions");
    for (size_t i = 0; i < json_array_length(conditions); i++) {
        const json_value *c = json_array_at(conditions, i);
        if (strcmp(str(c, "type"), "Ready") != 0)
            continue;
        const char *s = str(c, "status");
        if (strcmp(s, "True") == 0)
            return "true";
        if (strcmp(s, "False") == 0)
            return "false";
        return "unknown";
    }
    return "unknown";
}

/* The owner reference with controller: true (client-go's GetControllerOf). */
static const json_value *controller_of(const json_value *meta) {
    const json_value *owners = json_object_get(meta, "ownerReferences");
    for (size_t i = 0; i < json_array_length(owners); i++) {
        const json_value *o = json_array_at(owners, i);
        bool controller = false;
        if (json_get_bool(json_object_get(o, "controller"), &controller) && controller)
            return o;
    }
    return NULL;
}

static int add_group_labels(label_set *labels, const json_value *pod, strata_error *err) {
    const json_value *meta = json_object_get(pod, "metadata");
    const json_value *spec = json_object_get(pod, "spec");
    const json_value *status = json_object_get(pod, "status");
    if (set(labels, META "namespace", str(meta, "namespace"), err) != 0 ||
        set(labels, POD "name", str(meta, "name"), err) != 0 ||
        set(labels, POD "ip", str(status, "podIP"), err) != 0 ||
        set(labels, POD "ready", pod_ready(status), err) != 0 ||
        set(labels, POD "phase", str(status, "phase"), err) != 0 ||
        set(labels, POD "node_name", str(spec, "nodeName"), err) != 0 ||
        set(labels, POD "host_ip", str(status, "hostIP"), err) != 0 ||
        set(labels, POD "uid", str(meta, "uid"), err) != 0 ||
        add_meta_map(labels, json_object_get(meta, "labels"), "label", err) != 0 ||
        add_meta_map(labels, json_object_get(meta, "annotations"), "annotation", err) != 0)
        return -1;
    const json_value *controller = controller_of(meta);
    if (controller != NULL && str(controller, "kind")[0] != '\0' &&
        set(labels, POD "controller_kind", str(controller, "kind"), err) != 0)
        return -1;
    if (controller != NULL && str(controller, "name")[0] != '\0' &&
        set(labels, POD "controller_name", str(controller, "name"), err) != 0)
        return -1;
    return 0;
}

/* The containerID of the status entry named like the container ("" when not started). */
static const char *container_id(const json_value *statuses, const char *name) {
    for (size_t i = 0; i < json_array_length(statuses); i++) {
        const json_value *s = json_array_at(statuses, i);
        if (strcmp(str(s, "name"), name) == 0)
            return str(s, "containerID");
    }
    return "";
}

static int add_container_labels(label_set *t, const json_value *container, const char *id,
                                bool init, strata_error *err) {
    return set(t, POD "container_name", str(container, "name"), err) != 0 ||
                   set(t, POD "container_id", id, err) != 0 ||
                   set(t, POD "container_image", str(container, "image"), err) != 0 ||
                   set(t, POD "container_init", init ? "true" : "false", err) != 0
               ? -1
               : 0;
}

static int add_container_targets(target_group *g, const char *ip, const json_value *container,
                                 const char *id, bool init, strata_error *err) {
    const json_value *ports = json_object_get(container, "ports");
    size_t n_ports = json_array_length(ports);
    if (n_ports > KUBERNETES_MAX_PORTS)
        return strata_error_set(err, STRATA_RESOURCE_EXHAUSTED,
                                "%s: more than %d ports in container %s", g->source,
                                KUBERNETES_MAX_PORTS, str(container, "name"));
    bool v6 = strchr(ip, ':') != NULL;
    if (n_ports == 0) {
        label_set *t = target_group_add_target(g, err);
        if (t == NULL || set(t, DISCOVERY_ADDRESS_LABEL, ip, err) != 0)
            return -1;
        return add_container_labels(t, container, id, init, err);
    }
    for (size_t i = 0; i < n_ports; i++) {
        const json_value *port = json_array_at(ports, i);
        int64_t number = 0;
        if (!json_get_int64(json_object_get(port, "containerPort"), &number) || number < 0 ||
            number > 65535)
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "%s: container %s has a port without a valid containerPort",
                                    g->source, str(container, "name"));
        char number_text[16], address[128];
        snprintf(number_text, sizeof number_text, "%d", (int)number);
        snprintf(address, sizeof address, "%s%s%s:%s", v6 ? "[" : "", ip, v6 ? "]" : "",
                 number_text);
        label_set *t = target_group_add_target(g, err);
        if (t == NULL || set(t, DISCOVERY_ADDRESS_LABEL, address, err) != 0 ||
            add_container_labels(t, container, id, init, err) != 0 ||
            set(t, POD "container_port_name", str(port, "name"), err) != 0 ||
            set(t, POD "container_port_number", number_text, err) != 0 ||
            set(t, POD "container_port_protocol", str(port, "protocol"), err) != 0)
            return -1;
    }
    return 0;
}

static int add_targets(target_group *g, const json_value *pod, const char *ip, strata_error *err) {
    const json_value *spec = json_object_get(pod, "spec");
    const json_value *status = json_object_get(pod, "status");
    const json_value *containers = json_object_get(spec, "containers");
    const json_value *inits = json_object_get(spec, "initContainers");
    if (json_array_length(containers) + json_array_length(inits) > KUBERNETES_MAX_CONTAINERS)
        return strata_error_set(err, STRATA_RESOURCE_EXHAUSTED, "%s: more than %d containers",
                                g->source, KUBERNETES_MAX_CONTAINERS);
    for (int init = 0; init <= 1; init++) {
        const json_value *list = init ? inits : containers;
        const json_value *statuses =
            json_object_get(status, init ? "initContainerStatuses" : "containerStatuses");
        for (size_t i = 0; i < json_array_length(list); i++) {
            const json_value *c = json_array_at(list, i);
            const char *id = container_id(statuses, str(c, "name"));
            if (add_container_targets(g, ip, c, id, init, err) != 0)
                return -1;
        }
    }
    return 0;
}

int kubernetes_pod_target_group(const json_value *pod, target_group *out, strata_error *err) {
    memset(out, 0, sizeof *out);
    const json_value *meta = json_object_get(pod, "metadata");
    const char *ns = str(meta, "namespace"), *name = str(meta, "name");
    if (ns[0] == '\0' || name[0] == '\0')
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "pod without metadata.namespace or metadata.name");
    char source[512];
    int n = snprintf(source, sizeof source, "pod/%s/%s", ns, name);
    if (n < 0 || (size_t)n >= sizeof source)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "pod name too long");
    if (target_group_init(out, source, err) != 0)
        return -1;
    /* PodIP is empty while a pod starts or after eviction: no targets, the source is gone. */
    const char *ip = str(json_object_get(pod, "status"), "podIP");
    if (ip[0] == '\0')
        return 0;
    if (add_group_labels(&out->labels, pod, err) != 0 || add_targets(out, pod, ip, err) != 0) {
        target_group_free(out);
        return -1;
    }
    label_set_sort(&out->labels);
    dedupe_keep_last(&out->labels);
    for (size_t i = 0; i < out->n_targets; i++)
        label_set_sort(&out->targets[i]);
    return 0;
}
