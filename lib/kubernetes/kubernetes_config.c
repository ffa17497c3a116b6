/*
 * kubernetes_config.c - decoding and checking a `kubernetes_sd_configs` entry.
 *
 * The field tables make decoding strict (unknown keys are errors with file:line); the checks after
 * it are Prometheus's SDConfig.UnmarshalYAML rules, reported at the offending key.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "kubernetes/kubernetes.h"

static const config_field selector_fields[] = {
    {.key = "role",
     .kind = CONFIG_STRING,
     .offset = offsetof(kubernetes_selector, role),
     .required = true},
    {.key = "label", .kind = CONFIG_STRING, .offset = offsetof(kubernetes_selector, label)},
    {.key = "field", .kind = CONFIG_STRING, .offset = offsetof(kubernetes_selector, field)},
    {.key = NULL},
};

static const config_field basic_auth_fields[] = {
    {.key = "username", .kind = CONFIG_STRING, .offset = offsetof(kubernetes_basic_auth, username)},
    {.key = "password", .kind = CONFIG_STRING, .offset = offsetof(kubernetes_basic_auth, password)},
    {.key = "password_file",
     .kind = CONFIG_STRING,
     .offset = offsetof(kubernetes_basic_auth, password_file)},
    {.key = NULL},
};

static const config_field tls_fields[] = {
    {.key = "ca_file", .kind = CONFIG_STRING, .offset = offsetof(kubernetes_tls_config, ca_file)},
    {.key = "cert_file",
     .kind = CONFIG_STRING,
     .offset = offsetof(kubernetes_tls_config, cert_file)},
    {.key = "key_file", .kind = CONFIG_STRING, .offset = offsetof(kubernetes_tls_config, key_file)},
    {.key = "server_name",
     .kind = CONFIG_STRING,
     .offset = offsetof(kubernetes_tls_config, server_name)},
    {.key = "insecure_skip_verify",
     .kind = CONFIG_BOOL,
     .offset = offsetof(kubernetes_tls_config, insecure_skip_verify),
     .default_text = "false"},
    {.key = NULL},
};

static const config_field namespaces_fields[] = {
    {.key = "own_namespace",
     .kind = CONFIG_BOOL,
     .offset = offsetof(kubernetes_namespaces, own_namespace),
     .default_text = "false"},
    {.key = "names", .kind = CONFIG_STRING_LIST, .offset = offsetof(kubernetes_namespaces, names)},
    {.key = NULL},
};

static const config_field sd_fields[] = {
    {.key = "role",
     .kind = CONFIG_STRING,
     .offset = offsetof(kubernetes_sd_config, role),
     .required = true},
    {.key = "api_server",
     .kind = CONFIG_STRING,
     .offset = offsetof(kubernetes_sd_config, api_server)},
    {.key = "kubeconfig_file",
     .kind = CONFIG_STRING,
     .offset = offsetof(kubernetes_sd_config, kubeconfig_file)},
    {.key = "namespaces",
     .kind = CONFIG_STRUCT,
     .offset = offsetof(kubernetes_sd_config, namespaces),
     .fields = namespaces_fields},
    {.key = "selectors",
     .kind = CONFIG_STRUCT_LIST,
     .offset = offsetof(kubernetes_sd_config, selectors),
     .fields = selector_fields,
     .elem_size = sizeof(kubernetes_selector)},
    {.key = "bearer_token",
     .kind = CONFIG_STRING,
     .offset = offsetof(kubernetes_sd_config, bearer_token)},
    {.key = "bearer_token_file",
     .kind = CONFIG_STRING,
     .offset = offsetof(kubernetes_sd_config, bearer_token_file)},
    {.key = "basic_auth",
     .kind = CONFIG_STRUCT,
     .offset = offsetof(kubernetes_sd_config, basic_auth),
     .fields = basic_auth_fields},
    {.key = "tls_config",
     .kind = CONFIG_STRUCT,
     .offset = offsetof(kubernetes_sd_config, tls_config),
     .fields = tls_fields},
    {.key = NULL},
};

/* The node of key in mapping n, or n itself, so errors point as close as possible. */
static const config_node *at(const config_node *n, const char *key) {
    const config_node *v = config_node_get(n, key);
    return v != NULL ? v : n;
}

static bool has_basic_auth(const kubernetes_basic_auth *b) {
    return b->username != NULL || b->password != NULL || b->password_file != NULL;
}

static bool has_tls_options(const kubernetes_tls_config *t) {
    return t->ca_file != NULL || t->cert_file != NULL || t->key_file != NULL ||
           t->server_name != NULL || t->insecure_skip_verify;
}

static int check_selectors(const config_node *node, const kubernetes_sd_config *c,
                           strata_error *err) {
    const config_node *list = config_node_get(node, "selectors");
    const kubernetes_selector *sel = c->selectors.items;
    for (size_t i = 0; i < c->selectors.count; i++) {
        const config_node *item = config_node_at(list, i);
        if (strcmp(sel[i].role, "pod") != 0)
            return config_node_error(err, at(item, "role"),
                                     "selector role \"%s\" is not supported with discovery role "
                                     "pod (only pod selectors)",
                                     sel[i].role);
        if (sel[i].label == NULL && sel[i].field == NULL)
            return config_node_error(err, item, "a selector needs label or field");
        if (i > 0)
            return config_node_error(err, item, "selector role pod is given more than once");
    }
    return 0;
}

static int check_auth(const config_node *node, const kubernetes_sd_config *c, strata_error *err) {
    bool basic = has_basic_auth(&c->basic_auth);
    if (c->bearer_token != NULL && c->bearer_token_file != NULL)
        return config_node_error(err, at(node, "bearer_token_file"),
                                 "bearer_token and bearer_token_file exclude each other");
    if (basic && (c->bearer_token != NULL || c->bearer_token_file != NULL))
        return config_node_error(err, at(node, "basic_auth"),
                                 "basic_auth excludes bearer_token and bearer_token_file");
    if (basic && c->basic_auth.username == NULL)
        return config_node_error(err, at(node, "basic_auth"), "basic_auth needs a username");
    if (c->basic_auth.password != NULL && c->basic_auth.password_file != NULL)
        return config_node_error(err, at(node, "basic_auth"),
                                 "password and password_file exclude each other");
    if ((c->tls_config.cert_file == NULL) != (c->tls_config.key_file == NULL))
        return config_node_error(err, at(node, "tls_config"),
                                 "cert_file and key_file must be given together");
    return 0;
}

static int check_config(const config_node *node, const kubernetes_sd_config *c, strata_error *err) {
    if (strcmp(c->role, "pod") != 0) {
        if (strcmp(c->role, "node") == 0 || strcmp(c->role, "service") == 0 ||
            strcmp(c->role, "endpoints") == 0 || strcmp(c->role, "endpointslice") == 0 ||
            strcmp(c->role, "ingress") == 0)
            return config_node_error(err, at(node, "role"),
                                     "role \"%s\" is not supported (only pod)", c->role);
        return config_node_error(err, at(node, "role"), "unknown role \"%s\" (only pod)", c->role);
    }
    if (c->api_server != NULL && c->kubeconfig_file != NULL)
        return config_node_error(err, at(node, "kubeconfig_file"),
                                 "api_server and kubeconfig_file exclude each other");
    if (c->api_server != NULL && strncmp(c->api_server, "http://", 7) != 0 &&
        strncmp(c->api_server, "https://", 8) != 0)
        return config_node_error(err, at(node, "api_server"),
                                 "api_server must be an http:// or https:// URL");
    bool client_options = c->bearer_token != NULL || c->bearer_token_file != NULL ||
                          has_basic_auth(&c->basic_auth) || has_tls_options(&c->tls_config);
    if (c->kubeconfig_file != NULL && client_options)
        return config_node_error(err, at(node, "kubeconfig_file"),
                                 "kubeconfig_file excludes bearer_token, bearer_token_file, "
                                 "basic_auth and tls_config (the kubeconfig says how to connect)");
    if (c->api_server == NULL && c->kubeconfig_file == NULL && client_options)
        return config_node_error(err, node,
                                 "authentication and tls_config need api_server (in-cluster "
                                 "discovery uses the service account)");
    for (size_t i = 0; i < c->namespaces.names.count; i++)
        if (c->namespaces.names.items[i][0] == '\0')
            return config_node_error(err, at(node, "namespaces"), "empty namespace name");
    if (check_auth(node, c, err) != 0)
        return -1;
    return check_selectors(node, c, err);
}

/* Relative paths are relative to the directory of the file the config came from (as Prometheus
 * resolves them). */
static int resolve_path(const config_node *node, char **path, strata_error *err) {
    if (*path == NULL || (*path)[0] == '/' || (*path)[0] == '\0')
        return 0;
    const char *doc = config_document_name(config_node_document(node));
    const char *slash = doc != NULL ? strrchr(doc, '/') : NULL;
    if (slash == NULL)
        return 0;
    size_t dir_len = (size_t)(slash - doc) + 1, len = strlen(*path);
    char *joined = malloc(dir_len + len + 1);
    if (joined == NULL)
        return strata_error_oom(err);
    memcpy(joined, doc, dir_len);
    memcpy(joined + dir_len, *path, len + 1);
    free(*path);
    *path = joined;
    return 0;
}

int kubernetes_sd_config_decode(const config_node *node, void *dst, strata_error *err) {
    kubernetes_sd_config *c = dst;
    if (config_node_get_kind(node) != CONFIG_NODE_MAPPING)
        return config_node_error(err, node, "expected a mapping");
    if (config_decode(node, sd_fields, c, err) != 0)
        return -1;
    if (check_config(node, c, err) != 0 || resolve_path(node, &c->kubeconfig_file, err) != 0 ||
        resolve_path(node, &c->bearer_token_file, err) != 0 ||
        resolve_path(node, &c->basic_auth.password_file, err) != 0 ||
        resolve_path(node, &c->tls_config.ca_file, err) != 0 ||
        resolve_path(node, &c->tls_config.cert_file, err) != 0 ||
        resolve_path(node, &c->tls_config.key_file, err) != 0) {
        config_free(sd_fields, c);
        return -1;
    }
    return 0;
}

void kubernetes_sd_config_release(void *dst) {
    config_free(sd_fields, dst);
}

int kubernetes_sd_configs_decode(const config_node *node, void *dst, strata_error *err) {
    kubernetes_sd_config_list *list = dst;
    memset(list, 0, sizeof *list);
    if (config_node_get_kind(node) != CONFIG_NODE_SEQUENCE)
        return config_node_error(err, node, "expected a sequence of kubernetes_sd_configs");
    size_t n = config_node_size(node);
    if (n == 0)
        return 0;
    list->items = calloc(n, sizeof *list->items);
    if (list->items == NULL)
        return strata_error_oom(err);
    for (size_t i = 0; i < n; i++) {
        if (kubernetes_sd_config_decode(config_node_at(node, i), &list->items[i], err) != 0) {
            kubernetes_sd_configs_release(list);
            return -1;
        }
        list->count = i + 1;
    }
    return 0;
}

void kubernetes_sd_configs_release(void *dst) {
    kubernetes_sd_config_list *list = dst;
    for (size_t i = 0; i < list->count; i++)
        kubernetes_sd_config_release(&list->items[i]);
    free(list->items);
    memset(list, 0, sizeof *list);
}
