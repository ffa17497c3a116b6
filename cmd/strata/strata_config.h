/*
 * strata_config.h - the configuration file of `strata all` and of each single service: one YAML
 * file with a section per concern, decoded strictly (unknown keys are errors with file:line:col).
 *
 *   server:    listen addresses, log level, shutdown grace, gRPC threads, the HTTP server's limits
 *   bucket:    Thanos objstore config (type, config, prefix)
 *   ingester:  see services/ingester/ingester.h
 *   querier:   see services/querier/querier.h
 *   compactor: see services/compactor/compactor.h
 *   scraper:   see services/scraper/scrape_config.h (the service: where to push, limits)
 *   scrape_configs: Prometheus-style scrape jobs (services/scraper/scrape_config.h); decoded at
 *              load time in every mode, so -check-config and SIGHUP reloads reject a bad job
 *
 * Validation happens in two steps, neither of which starts anything: strata_config_load decodes
 * the file with every field's bounds (thread counts, intervals, delays, connection limits), and
 * strata_config_validate adds the rules that depend on the mode and on several sections (the
 * compactor's block_ranges and its delete_delay against the queriers' sync_interval). Both report
 * errors as file:line:col: key: problem.
 */
#ifndef STRATA_CMD_CONFIG_H
#define STRATA_CMD_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"
#include "config/config.h"
#include "compactor.h"
#include "ingester.h"
#include "querier.h"
#include "scrape_config.h"

/* TLS on both ports (docs/security.md): all NULL = plaintext. */
typedef struct server_tls_config {
    char *cert_file;      /* PEM certificate (chain) */
    char *key_file;       /* PEM private key */
    char *client_ca_file; /* PEM CAs; set = mutual TLS, clients must present a certificate */
} server_tls_config;

/* server.auth (docs/security.md): credentials and the tenants each allows. */
typedef struct server_auth_token {
    char *token;      /* the token itself, or */
    char *token_file; /* a file holding it (whitespace around it ignored) */
    config_string_list tenants;
} server_auth_token;

typedef struct server_auth_certificate {
    char *subject; /* the verified client certificate's subject, "CN=agent" (RFC 4514) */
    config_string_list tenants;
} server_auth_certificate;

typedef struct server_auth_config {
    config_struct_list tokens;              /* server_auth_token */
    config_struct_list client_certificates; /* server_auth_certificate */
} server_auth_config;

typedef struct server_config {
    char *http_listen_address;
    char *grpc_listen_address;
    char *log_level;
    char *ui_directory; /* static web UI served at "/" by the querier's HTTP port; "" = none */
    int64_t grpc_threads;
    int64_t shutdown_grace_ns;
    /* The HTTP server's limits (lib/http/http.h) */
    uint64_t http_max_connections;
    uint64_t http_max_connections_per_address; /* 0 = no cap */
    int64_t http_header_timeout_ns;
    int64_t http_read_timeout_ns;
    int64_t http_idle_timeout_ns;
    int64_t http_io_threads;
    int64_t http_handler_threads;
    server_tls_config tls;
    server_auth_config auth;                 /* no entries: no authentication */
    config_string_list cors_allowed_origins; /* lib/http: origins whose pages may call; "*": any */
} server_config;

typedef struct strata_config {
    server_config server;
    config_raw bucket;
    ingester_config ingester;
    querier_config querier;
    compactor_config compactor;
    scraper_config scraper;
    config_raw scrape_configs_node;
    scrape_configs scrape; /* decoded from scrape_configs_node */
    config_raw root;       /* the document, for positions in strata_config_validate */
} strata_config;

/* Loads and decodes path; on failure err says where and why. */
int strata_config_load(const char *path, strata_config *out, strata_error *err);
/* The rules for running mode ("all", "ingester", "querier", "compactor", "scraper") that field
 * bounds cannot express; INVALID_ARGUMENT with file:line:col. */
int strata_config_validate(const strata_config *config, const char *mode, strata_error *err);
void strata_config_free(strata_config *config);

#endif
