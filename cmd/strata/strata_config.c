/*
 * strata_config.c - see strata_config.h.
 */
#include "strata_config.h"

#include <stddef.h>
#include <string.h>

static const config_field server_fields[] = {
    {.key = "http_listen_address",
     .kind = CONFIG_STRING,
     .offset = offsetof(server_config, http_listen_address),
     .default_text = "0.0.0.0:7070"},
    {.key = "grpc_listen_address",
     .kind = CONFIG_STRING,
     .offset = offsetof(server_config, grpc_listen_address),
     .default_text = "0.0.0.0:7071"},
    {.key = "log_level",
     .kind = CONFIG_STRING,
     .offset = offsetof(server_config, log_level),
     .default_text = "info"},
    {.key = "ui_directory",
     .kind = CONFIG_STRING,
     .offset = offsetof(server_config, ui_directory),
     .default_text = "\"\""},
    {.key = "grpc_threads",
     .kind = CONFIG_INT64,
     .offset = offsetof(server_config, grpc_threads),
     .default_text = "0"},
    {.key = "shutdown_grace",
     .kind = CONFIG_DURATION,
     .offset = offsetof(server_config, shutdown_grace_ns),
     .default_text = "10s"},
    {.key = NULL},
};

static const config_field top_fields[] = {
    {.key = "server",
     .kind = CONFIG_STRUCT,
     .offset = offsetof(strata_config, server),
     .fields = server_fields},
    {.key = "bucket",
     .kind = CONFIG_RAW,
     .offset = offsetof(strata_config, bucket),
     .required = true},
    {.key = "ingester",
     .kind = CONFIG_STRUCT,
     .offset = offsetof(strata_config, ingester),
     .fields = ingester_config_fields},
    {.key = "querier",
     .kind = CONFIG_STRUCT,
     .offset = offsetof(strata_config, querier),
     .fields = querier_config_fields},
    {.key = "compactor",
     .kind = CONFIG_STRUCT,
     .offset = offsetof(strata_config, compactor),
     .fields = compactor_config_fields},
    {.key = "scraper",
     .kind = CONFIG_STRUCT,
     .offset = offsetof(strata_config, scraper),
     .fields = scraper_config_fields},
    {.key = "scrape_configs",
     .kind = CONFIG_RAW,
     .offset = offsetof(strata_config, scrape_configs_node)},
    {.key = NULL},
};

int strata_config_load(const char *path, strata_config *out, strata_error *err) {
    memset(out, 0, sizeof *out);
    config_document *doc = NULL;
    if (config_load_file(path, &doc, err) != 0)
        return -1;
    int rc = config_decode(config_document_root(doc), top_fields, out, err);
    if (rc == 0)
        rc = scrape_configs_decode(out->scrape_configs_node.node, &out->scrape, err);
    config_document_free(doc); /* the bucket's raw node keeps its own reference */
    if (rc != 0)
        strata_config_free(out);
    return rc;
}

void strata_config_free(strata_config *config) {
    scrape_configs_free(&config->scrape);
    config_free(top_fields, config);
}
