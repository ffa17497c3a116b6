/*
 * scrape_discovery.h - the service-discovery providers of one scrape job, behind the contract of
 * lib/discovery (target groups through a discovery_update_fn).
 *
 * scrape_discovery_start is the one place where a job's *_sd_configs become providers:
 *   static_configs   one group per entry (source "static/<i>"), delivered once, before start
 * returns file_sd_configs  Prometheus's file format: a YAML or JSON list of {targets: [...],
 * labels: {...}} per file; one group per entry (source "<path>:<i>"), each target labelled
 *                    __meta_filepath. The patterns (a '*' glob is allowed in the file name) are
 *                    checked every second for files that appeared, vanished or changed (mtime,
 *                    size, inode) and every file is re-read every refresh_interval. A file that
 *                    fails to parse keeps its previous targets and is logged; a vanished file's
 *                    groups are sent empty (the source is gone).
 * A provider for another mechanism (kubernetes_sd_configs) is started here too; until the
 * Kubernetes provider lands, a job with kubernetes_sd_configs logs a warning and gets no targets
 * from it.
 *
 * The callback runs on the starting thread (static) or on the provider's own thread (files);
 * scrape_discovery_stop joins those threads, after which the callback is never called again.
 */
#ifndef STRATA_SCRAPE_DISCOVERY_H
#define STRATA_SCRAPE_DISCOVERY_H

#include "common/error.h"
#include "discovery/discovery.h"
#include "scrape_config.h"

#define SCRAPE_FILE_SD_CHECK_NS (INT64_C(1000000000))
/* A file_sd file larger than this is refused (the config module's limit). */

typedef struct scrape_discovery scrape_discovery;

/* Starts every provider of job. The job config must outlive the returned handle. */
scrape_discovery *scrape_discovery_start(const scrape_job_config *job, discovery_update_fn update,
                                         void *ctx, strata_error *err);
/* Stops and joins the providers. NULL is a no-op. */
void scrape_discovery_stop(scrape_discovery *d);

/* Reads one file_sd file into groups (sources "<path>:<i>"); exposed for tests. On failure err
 * names the file and line. */
int scrape_file_sd_read(const char *path, target_group **groups, size_t *n_groups,
                        strata_error *err);
/* The same for a loaded document (path names the sources and __meta_filepath). */
int scrape_file_sd_parse(const config_document *doc, const char *path, target_group **groups,
                         size_t *n_groups, strata_error *err);

#endif
