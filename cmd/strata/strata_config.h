/*
 * strata_config.h - the configuration file of `strata all` and of each single service: one YAML
 * file with a section per concern, decoded strictly (unknown keys are errors with file:line:col).
 *
 *   server:    listen addresses, log level, shutdown grace
 *   bucket:    Thanos objstore config (type, config, prefix)
 *   ingester:  see services/ingester/ingester.h
 *   querier:   see services/querier/querier.h
 *   compactor: see services/compactor/compactor.h
 *   scraper:   see services/scraper/scrape_config.h (the service: where to push, limits)
 *   scrape_configs: Prometheus-style scrape jobs (services/scraper/scrape_config.h); decoded at
 *              load time in every mode, so -check-config and SIGHUP reloads reject a bad job
 */
#ifndef STRATA_CMD_CONFIG_H
#define STRATA_CMD_CONFIG_H

#include <stdint.h>

#include "common/error.h"
#include "config/config.h"
#include "compactor.h"
#include "ingester.h"
#include "querier.h"
#include "scrape_config.h"

typedef struct server_config {
    char *http_listen_address;
    char *grpc_listen_address;
    char *log_level;
    char *ui_directory; /* static web UI served at "/" by the querier's HTTP port; "" = none */
    int64_t grpc_threads;
    int64_t shutdown_grace_ns;
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
} strata_config;

/* Loads and decodes path; on failure err says where and why. */
int strata_config_load(const char *path, strata_config *out, strata_error *err);
void strata_config_free(strata_config *config);

#endif
