/*
 * strata_config.c - see strata_config.h.
 */
#include "strata_config.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "common/clock.h"

/* Bounds of thread counts, intervals and delays (lib/config: CONFIG_DEFINE_BOUNDS). */
CONFIG_DEFINE_BOUNDS(server_grpc_threads_bounds, CONFIG_INT64, "0", "1024")
CONFIG_DEFINE_BOUNDS(server_shutdown_grace_bounds, CONFIG_DURATION, NULL, "1h")
CONFIG_DEFINE_BOUNDS(server_http_max_connections_bounds, CONFIG_UINT64, "16", "1048576")
CONFIG_DEFINE_BOUNDS(server_http_max_connections_per_address_bounds, CONFIG_UINT64, NULL, "1048576")
CONFIG_DEFINE_BOUNDS(server_http_header_timeout_bounds, CONFIG_DURATION, "100ms", "10m")
CONFIG_DEFINE_BOUNDS(server_http_read_timeout_bounds, CONFIG_DURATION, "1s", "1h")
CONFIG_DEFINE_BOUNDS(server_http_idle_timeout_bounds, CONFIG_DURATION, "1s", "1h")
CONFIG_DEFINE_BOUNDS(server_http_io_threads_bounds, CONFIG_INT64, "1", "64")
CONFIG_DEFINE_BOUNDS(server_http_handler_threads_bounds, CONFIG_INT64, "1", "1024")

static const config_field server_tls_fields[] = {
    {.key = "cert_file", .kind = CONFIG_STRING, .offset = offsetof(server_tls_config, cert_file)},
    {.key = "key_file", .kind = CONFIG_STRING, .offset = offsetof(server_tls_config, key_file)},
    {.key = "client_ca_file",
     .kind = CONFIG_STRING,
     .offset = offsetof(server_tls_config, client_ca_file)},
    {.key = NULL},
};

static const config_field server_auth_token_fields[] = {
    {.key = "token", .kind = CONFIG_STRING, .offset = offsetof(server_auth_token, token)},
    {.key = "token_file", .kind = CONFIG_STRING, .offset = offsetof(server_auth_token, token_file)},
    {.key = "tenants",
     .kind = CONFIG_STRING_LIST,
     .offset = offsetof(server_auth_token, tenants),
     .required = true},
    {.key = NULL},
};

static const config_field server_auth_certificate_fields[] = {
    {.key = "subject",
     .kind = CONFIG_STRING,
     .offset = offsetof(server_auth_certificate, subject),
     .required = true},
    {.key = "tenants",
     .kind = CONFIG_STRING_LIST,
     .offset = offsetof(server_auth_certificate, tenants),
     .required = true},
    {.key = NULL},
};

static const config_field server_auth_fields[] = {
    {.key = "tokens",
     .kind = CONFIG_STRUCT_LIST,
     .offset = offsetof(server_auth_config, tokens),
     .fields = server_auth_token_fields,
     .elem_size = sizeof(server_auth_token)},
    {.key = "client_certificates",
     .kind = CONFIG_STRUCT_LIST,
     .offset = offsetof(server_auth_config, client_certificates),
     .fields = server_auth_certificate_fields,
     .elem_size = sizeof(server_auth_certificate)},
    {.key = NULL},
};

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
     .default_text = "0",
     .decode = server_grpc_threads_bounds},
    {.key = "shutdown_grace",
     .kind = CONFIG_DURATION,
     .offset = offsetof(server_config, shutdown_grace_ns),
     .default_text = "10s",
     .decode = server_shutdown_grace_bounds},
    {.key = "cors_allowed_origins",
     .kind = CONFIG_STRING_LIST,
     .offset = offsetof(server_config, cors_allowed_origins),
     .default_text = "[]"},
    {.key = "http_max_connections",
     .kind = CONFIG_UINT64,
     .offset = offsetof(server_config, http_max_connections),
     .default_text = "16384",
     .decode = server_http_max_connections_bounds},
    {.key = "http_max_connections_per_address",
     .kind = CONFIG_UINT64,
     .offset = offsetof(server_config, http_max_connections_per_address),
     .default_text = "256",
     .decode = server_http_max_connections_per_address_bounds},
    {.key = "http_header_timeout",
     .kind = CONFIG_DURATION,
     .offset = offsetof(server_config, http_header_timeout_ns),
     .default_text = "10s",
     .decode = server_http_header_timeout_bounds},
    {.key = "http_read_timeout",
     .kind = CONFIG_DURATION,
     .offset = offsetof(server_config, http_read_timeout_ns),
     .default_text = "2m",
     .decode = server_http_read_timeout_bounds},
    {.key = "http_idle_timeout",
     .kind = CONFIG_DURATION,
     .offset = offsetof(server_config, http_idle_timeout_ns),
     .default_text = "60s",
     .decode = server_http_idle_timeout_bounds},
    {.key = "http_io_threads",
     .kind = CONFIG_INT64,
     .offset = offsetof(server_config, http_io_threads),
     .default_text = "2",
     .decode = server_http_io_threads_bounds},
    {.key = "http_handler_threads",
     .kind = CONFIG_INT64,
     .offset = offsetof(server_config, http_handler_threads),
     .default_text = "16",
     .decode = server_http_handler_threads_bounds},
    {.key = "tls",
     .kind = CONFIG_STRUCT,
     .offset = offsetof(server_config, tls),
     .fields = server_tls_fields},
    {.key = "auth",
     .kind = CONFIG_STRUCT,
     .offset = offsetof(server_config, auth),
     .fields = server_auth_fields},
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
    if (rc == 0) {
        out->root.node = config_document_root(doc);
        out->root.doc = config_document_ref(doc);
    }
    config_document_free(doc); /* raw nodes keep their own references */
    if (rc != 0)
        strata_config_free(out);
    return rc;
}

/* The node at section.key, else section, else NULL (the document is empty). */
static const config_node *node_at(const strata_config *c, const char *section, const char *key) {
    const config_node *sec = c->root.node ? config_node_get(c->root.node, section) : NULL;
    const config_node *n = sec && key ? config_node_get(sec, key) : NULL;
    return n ? n : sec;
}

/* An error at the node, or naming the file when the section is absent. */
static int error_at(const strata_config *c, const config_node *n, strata_error *err,
                    const char *what, const char *message) {
    if (n != NULL)
        return config_node_error(err, n, "%s", message);
    return strata_error_set(err, STRATA_INVALID_ARGUMENT, "%s: %s: %s",
                            c->root.doc ? config_document_name(c->root.doc) : "config", what,
                            message);
}

/* Writes ns as the largest whole unit it is a multiple of ("10s", "1500ms"). */
static void format_duration(int64_t ns, char *out, size_t size) {
    static const struct {
        int64_t ns;
        const char *unit;
    } units[] = {{3600 * STRATA_NS_PER_SEC, "h"},
                 {60 * STRATA_NS_PER_SEC, "m"},
                 {STRATA_NS_PER_SEC, "s"},
                 {STRATA_NS_PER_MS, "ms"},
                 {1000, "us"},
                 {1, "ns"}};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (ns % units[i].ns == 0 || units[i].ns == 1) {
            snprintf(out, size, "%lld%s", (long long)(ns / units[i].ns), units[i].unit);
            return;
        }
}

/* Queriers read deletion marks from the bucket index at least every ten sync_intervals, or every
 * idle_sync_interval when idle if that is longer (docs/storage.md; the compactor writes the index
 * right after it marks), so a block must stay that long after its mark or a querier may still
 * read it when it goes. The queriers' intervals are this file's (the defaults, 1s and 10 x that,
 * when the compactor runs alone with no querier section): delete_delay >= 10 x sync_interval and
 * >= idle_sync_interval. 0 is allowed, as Thanos' --delete-delay=0: delete at the next cycle, for
 * tests (a query holding the block retries). */
static int check_delete_delay(const strata_config *c, strata_error *err) {
    int64_t min = 10 * c->querier.sync_interval_ns;
    bool idle_rules = c->querier.idle_sync_interval_ns > min;
    if (idle_rules)
        min = c->querier.idle_sync_interval_ns;
    if (c->compactor.delete_delay_ns >= min || c->compactor.delete_delay_ns == 0)
        return 0;
    char have[32], need[32], interval[32], message[256];
    format_duration(c->compactor.delete_delay_ns, have, sizeof have);
    format_duration(min, need, sizeof need);
    format_duration(idle_rules ? c->querier.idle_sync_interval_ns : c->querier.sync_interval_ns,
                    interval, sizeof interval);
    const char *key = idle_rules ? "idle_sync_interval" : "sync_interval";
    const config_node *n = node_at(c, "compactor", "delete_delay");
    if (n != NULL && config_node_get_kind(n) == CONFIG_NODE_SCALAR) {
        snprintf(message, sizeof message,
                 "%s is below the minimum %s (%squerier.%s %s: queriers must see a deletion "
                 "mark before the block goes)",
                 config_node_scalar(n, NULL), need, idle_rules ? "" : "10 x ", key, interval);
        return error_at(c, n, err, "compactor.delete_delay", message);
    }
    snprintf(message, sizeof message,
             "%s makes the minimum compactor.delete_delay %s, above its value %s", interval, need,
             have);
    char path[64];
    snprintf(path, sizeof path, "querier.%s", key);
    return error_at(c, node_at(c, "querier", key), err, path, message);
}

/* server.tls and server.auth: what can be checked without reading the files they name. */
static int check_tls_and_auth(const strata_config *c, strata_error *err) {
    const server_tls_config *tls = &c->server.tls;
    if ((tls->cert_file != NULL) != (tls->key_file != NULL))
        return error_at(c, node_at(c, "server", "tls"), err, "server.tls",
                        "cert_file and key_file go together");
    if (tls->client_ca_file != NULL && tls->cert_file == NULL)
        return error_at(c, node_at(c, "server", "tls"), err, "server.tls",
                        "client_ca_file needs cert_file and key_file");
    const server_auth_config *auth = &c->server.auth;
    const server_auth_token *tokens = auth->tokens.items;
    for (size_t i = 0; i < auth->tokens.count; i++)
        if ((tokens[i].token != NULL) == (tokens[i].token_file != NULL)) {
            char message[96];
            snprintf(message, sizeof message, "tokens[%zu]: want one of token and token_file", i);
            return error_at(c, node_at(c, "server", "auth"), err, "server.auth", message);
        }
    if (auth->client_certificates.count > 0 && tls->client_ca_file == NULL)
        return error_at(c, node_at(c, "server", "auth"), err, "server.auth",
                        "client_certificates need server.tls.client_ca_file (mutual TLS)");
    return 0;
}

int strata_config_validate(const strata_config *config, const char *mode, strata_error *err) {
    if (check_tls_and_auth(config, err) != 0)
        return -1;
    bool all = strcmp(mode, "all") == 0;
    if (!((all && config->compactor.enabled) || strcmp(mode, "compactor") == 0))
        return 0;
    if (compactor_config_validate(&config->compactor, err) != 0) {
        const config_node *n = node_at(config, "compactor", "block_ranges");
        char message[sizeof err->message];
        snprintf(message, sizeof message, "%s", err->message);
        if (n != NULL) /* "compactor.block_ranges[1]: ..." at the list's position */
            return strata_error_set(err, STRATA_INVALID_ARGUMENT, "%s:%u:%u: %s",
                                    config_document_name(config->root.doc), config_node_line(n),
                                    config_node_column(n), message);
        return strata_error_set(
            err, STRATA_INVALID_ARGUMENT, "%s: %s",
            config->root.doc ? config_document_name(config->root.doc) : "config", message);
    }
    return check_delete_delay(config, err);
}

void strata_config_free(strata_config *config) {
    scrape_configs_free(&config->scrape);
    config_document_free(config->root.doc);
    config->root = (config_raw){0};
    config_free(top_fields, config);
}
