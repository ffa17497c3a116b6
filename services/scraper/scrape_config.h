/*
 * scrape_config.h - `scrape_configs:` (Prometheus's shape, Parca's profiling_config) and the
 * `scraper:` section of the strata YAML config.
 *
 * A scrape config is decoded strictly from its YAML node, so every mistake names file, line and
 * key ("strata.yaml:14:5: scrape_configs[1].scrape_timeout: 15s is longer than scrape_interval
 * 10s"). Defaults follow Prometheus: scrape_interval 10s, scrape_timeout 10s or the interval if
 * that is smaller, scheme http. Parca's pprof endpoints are merged into every job: memory
 * (/debug/pprof/allocs), block, goroutine, mutex and process_cpu (/debug/pprof/profile, delta).
 * An entry of the job's `profiling_config.pprof_config` with a default's name overrides only the
 * keys it sets; a new name (fgprof) adds an endpoint, enabled unless it says otherwise.
 *
 * A delta endpoint asks the target for a profile over `seconds` (default: the scrape interval) with
 * `?seconds=N`; the target answers only after that time, so its request may take `seconds` plus
 * the scrape timeout.
 *
 * static_configs and file_sd_configs are decoded into plain structs for the providers in
 * scrape_discovery.h, kubernetes_sd_configs by lib/kubernetes (which checks them as Prometheus
 * does); relabel_configs is compiled by lib/relabel. New service-discovery keys
 * (kubernetes_sd_configs) are added to the field table in scrape_config.c and turned into providers
 * in scrape_discovery.c, nowhere else.
 */
#ifndef STRATA_SCRAPE_CONFIG_H
#define STRATA_SCRAPE_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "config/config.h"
#include "kubernetes/kubernetes.h"
#include "relabel/relabel.h"

#define SCRAPE_DEFAULT_INTERVAL_NS (INT64_C(10) * 1000000000)

typedef struct scrape_sample_type {
    char *type;
    char *unit;
} scrape_sample_type;

/* One profile endpoint of a job, after merging Parca's defaults. */
typedef struct scrape_endpoint {
    char *name; /* the profile name: __name__ of what it yields */
    char *path; /* without the job's path_prefix */
    bool enabled;
    bool delta;
    int64_t seconds_ns;                    /* delta: the profile window; 0 = the scrape interval */
    scrape_sample_type *keep_sample_types; /* empty: keep every sample type */
    size_t n_keep_sample_types;
} scrape_endpoint;

typedef struct scrape_static_config {
    config_string_list targets;
    config_string_map labels;
} scrape_static_config;

typedef struct scrape_file_sd_config {
    config_string_list files; /* paths; a '*' in the last element is a glob */
    int64_t refresh_interval_ns;
} scrape_file_sd_config;

typedef struct scrape_basic_auth {
    char *username;
    char *password;
    char *password_file;
} scrape_basic_auth;

typedef struct scrape_tls_config {
    char *ca_file;
    char *cert_file;
    char *key_file;
    char *server_name;
    bool insecure_skip_verify;
} scrape_tls_config;

typedef struct scrape_param {
    char *name;
    config_string_list values;
} scrape_param;

typedef struct scrape_params {
    scrape_param *items;
    size_t count;
} scrape_params;

/* profiling_config as written; scrape_configs_decode turns pprof_config into endpoints. */
typedef struct scrape_profiling_config {
    char *path_prefix;
    config_raw pprof_config;
} scrape_profiling_config;

typedef struct scrape_job_config {
    char *job_name;
    int64_t scrape_interval_ns;
    int64_t scrape_timeout_ns; /* after defaults: never 0 */
    char *scheme;
    scrape_params params;
    scrape_basic_auth basic_auth; /* username NULL: none */
    char *bearer_token;
    char *bearer_token_file;
    scrape_tls_config tls_config;
    uint64_t body_size_limit;                        /* 0: the scraper's max_response_bytes */
    config_struct_list static_configs;               /* of scrape_static_config */
    config_struct_list file_sd_configs;              /* of scrape_file_sd_config */
    kubernetes_sd_config_list kubernetes_sd_configs; /* lib/kubernetes, role pod */
    relabel_rules *relabel;                          /* relabel_configs, compiled by lib/relabel */
    scrape_profiling_config profiling_config;
    scrape_endpoint *endpoints; /* defaults first, then custom entries in document order */
    size_t n_endpoints;
    size_t cap_endpoints;
} scrape_job_config;

typedef struct scrape_configs {
    scrape_job_config *jobs;
    size_t n_jobs;
} scrape_configs;

/* The `scraper:` section. */
/* How the scraper's pushes reach the ingesters (Prometheus' tls_config names): plaintext unless
 * enabled or ca_file / cert_file is set. */
typedef struct scraper_push_tls_config {
    bool enabled;    /* TLS with the system CAs when no ca_file */
    char *ca_file;   /* PEM CAs to verify the ingesters with */
    char *cert_file; /* client certificate (mutual TLS), with key_file */
    char *key_file;
    char *server_name; /* verify the certificate against this name, not the address's host */
} scraper_push_tls_config;

typedef struct scraper_config {
    config_string_list ingester_addresses; /* empty: this process's gRPC address (strata all) */
    scraper_push_tls_config push_tls;
    char *bearer_token_file; /* sent as "authorization: Bearer" with every push; NULL = none */
    uint64_t max_response_bytes;
    int64_t push_timeout_ns;    /* per WriteRaw attempt */
    uint64_t max_queue_bytes;   /* encoded requests waiting; the oldest are dropped beyond it */
    uint64_t max_in_flight;     /* WriteRaw calls in flight per ingester address (lib/push) */
    uint64_t max_request_bytes; /* profiles ready at once ride in one WriteRaw up to this size */
} scraper_config;

extern const config_field scraper_config_fields[];
/* The fields of one static_configs entry, also the shape of a file_sd file's entries. */
extern const config_field scrape_static_config_fields[];

/* Decodes the `scrape_configs` sequence (NULL or null: no jobs). On failure *out is empty and err
 * names file, line and key. */
int scrape_configs_decode(const config_node *node, scrape_configs *out, strata_error *err);
void scrape_configs_free(scrape_configs *configs);
/* Frees one job's config (for owners that took a job out of scrape_configs). */
void scrape_job_config_free(scrape_job_config *job);

/* The job's endpoint by profile name, or NULL. */
const scrape_endpoint *scrape_job_endpoint(const scrape_job_config *job, const char *name);

#endif
