/*
 * bucket_config.c - opening a bucket from Thanos objstore YAML (type, config, prefix).
 *
 * The top level is decoded with the config module; `config` is kept as a raw node and decoded by
 * the backend chosen by `type`, so each backend owns its keys and reports errors at their
 * positions. Types Thanos knows but this build does not implement yet are listed so users get
 * "not supported in this build yet" rather than "unknown type".
 */
#include "bucket/bucket_backend.h"
#include "bucket/bucket_remote.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct bucket_yaml {
    char *type;
    config_raw config;
    char *prefix;
} bucket_yaml;

static const config_field bucket_yaml_fields[] = {
    {.key = "type", .kind = CONFIG_STRING, .offset = offsetof(bucket_yaml, type), .required = true},
    {.key = "config", .kind = CONFIG_RAW, .offset = offsetof(bucket_yaml, config)},
    {.key = "prefix",
     .kind = CONFIG_STRING,
     .offset = offsetof(bucket_yaml, prefix),
     .default_text = "\"\""},
    {0},
};

typedef struct filesystem_yaml {
    char *directory;
} filesystem_yaml;

static const config_field filesystem_yaml_fields[] = {
    {.key = "directory",
     .kind = CONFIG_STRING,
     .offset = offsetof(filesystem_yaml, directory),
     .required = true},
    {0},
};

/* Prefixes err with the node's position ("strata.yaml:5:16: bucket.config.directory"). */
static int wrap_at(const config_node *n, strata_error *err) {
    char path[256];
    config_node_path(n, path, sizeof path);
    return strata_error_wrap(err, "%s:%u:%u: %s", config_document_name(config_node_document(n)),
                             config_node_line(n), config_node_column(n), path);
}

static int open_filesystem(const config_node *bucket_node, const config_node *config, void **impl,
                           strata_error *err) {
    if (config == NULL)
        return config_node_error(err, bucket_node,
                                 "missing required key \"config\" (FILESYSTEM needs "
                                 "config.directory)");
    filesystem_yaml fy;
    if (config_decode(config, filesystem_yaml_fields, &fy, err) != 0)
        return -1;
    const config_node *dir_node = config_node_get(config, "directory");
    int rc = 0;
    if (fy.directory[0] == '\0')
        rc = config_node_error(err, dir_node, "directory must not be empty");
    else if (bucket_filesystem_new(fy.directory, impl, err) != 0)
        rc = wrap_at(dir_node, err);
    config_free(filesystem_yaml_fields, &fy);
    return rc;
}

/* Decodes the backend's `config` node (NULL when absent) into a backend instance. */
typedef int (*backend_open_fn)(const config_node *bucket_node, const config_node *config,
                               void **impl, strata_error *err);

typedef struct backend_entry {
    const char *type;
    const bucket_backend_ops *ops; /* NULL: known to Thanos, not built yet */
    backend_open_fn open;
} backend_entry;

static const backend_entry backends[] = {
    {"FILESYSTEM", &bucket_filesystem_ops, open_filesystem},
    {"S3", &bucket_s3_ops, bucket_s3_open_config},
    {"AZURE", &bucket_azure_ops, bucket_azure_open_config},
    {"GCS", NULL, NULL},
    {"SWIFT", NULL, NULL},
    {"COS", NULL, NULL},
    {"ALIYUNOSS", NULL, NULL},
    {"BOS", NULL, NULL},
    {"OCI", NULL, NULL},
    {"OBS", NULL, NULL},
};

#define N_BACKENDS (sizeof backends / sizeof backends[0])

static int find_backend(const config_node *type_node, const char *type, const backend_entry **out,
                        strata_error *err) {
    for (size_t i = 0; i < N_BACKENDS; i++) {
        if (strcasecmp(type, backends[i].type) != 0)
            continue;
        if (backends[i].ops == NULL) {
            config_node_error(err, type_node,
                              "bucket type \"%s\" is not supported in this build yet "
                              "(supported: FILESYSTEM, S3, AZURE)",
                              backends[i].type);
            if (err != NULL)
                err->code = STRATA_UNIMPLEMENTED;
            return -1;
        }
        *out = &backends[i];
        return 0;
    }
    return config_node_error(err, type_node,
                             "unknown bucket type \"%.64s\" (expected one of: FILESYSTEM, S3, "
                             "AZURE, GCS, SWIFT, COS, ALIYUNOSS, BOS, OCI, OBS)",
                             type);
}

static int open_decoded(const config_node *node, const bucket_yaml *by, bucket **out,
                        strata_error *err) {
    const backend_entry *backend = NULL;
    if (find_backend(config_node_get(node, "type"), by->type, &backend, err) != 0)
        return -1;
    void *impl = NULL;
    if (backend->open(node, by->config.node, &impl, err) != 0)
        return -1;
    if (bucket_new(backend->ops, impl, by->prefix, out, err) != 0) {
        const config_node *prefix = config_node_get(node, "prefix");
        return prefix != NULL ? wrap_at(prefix, err) : -1;
    }
    return 0;
}

int bucket_open_config(const config_node *node, bucket **out, strata_error *err) {
    *out = NULL;
    if (node == NULL)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "bucket configuration is missing (need type and config)");
    bucket_yaml by;
    if (config_decode(node, bucket_yaml_fields, &by, err) != 0)
        return -1;
    int rc = open_decoded(node, &by, out, err);
    config_free(bucket_yaml_fields, &by);
    return rc;
}

static int open_document(config_document *doc, bucket **out, strata_error *err) {
    const config_node *root = config_document_root(doc);
    int rc;
    if (root == NULL)
        rc = strata_error_set(err, STRATA_INVALID_ARGUMENT,
                              "%s: bucket configuration is empty (need type and config)",
                              config_document_name(doc));
    else
        rc = bucket_open_config(root, out, err);
    config_document_free(doc);
    return rc;
}

int bucket_open_yaml_file(const char *path, bucket **out, strata_error *err) {
    *out = NULL;
    config_document *doc = NULL;
    if (config_load_file(path, &doc, err) != 0)
        return -1;
    return open_document(doc, out, err);
}

int bucket_open_yaml_string(const char *name, const char *yaml, size_t len, bucket **out,
                            strata_error *err) {
    *out = NULL;
    config_document *doc = NULL;
    if (config_load_string(name, yaml, len, &doc, err) != 0)
        return -1;
    return open_document(doc, out, err);
}
