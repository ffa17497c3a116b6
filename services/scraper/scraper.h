/*
 * scraper.h - the scraper service: Prometheus-style pull of pprof from HTTP targets, pushed to
 * ingesters through WriteRaw (lib/push).
 *
 * Pipeline, per job:
 *   providers (scrape_discovery.h) -> target groups -> for each target and each enabled pprof
 *   endpoint: labels = group + target labels, plus job, __scheme__, __param_<name> and
 *   __name__ = the endpoint's profile name (the "discovered labels") -> relabel_configs
 *   (lib/relabel; a dropped set becomes a dropped target) -> instance = __address__ unless set,
 *   URL from __scheme__, __address__, path_prefix + path and params (__param_* labels win) ->
 *   every label starting with "__" but __name__ removed (the final labels).
 * A target is thus one (address, profile) pair, as in Parca, with its own health and last error.
 * Targets are identified by their final labels and URL; rediscovering the same target keeps its
 * schedule and health.
 *
 * Scraping. One thread drives every request through libcurl's multi interface, so 1,000 targets
 * cost sockets, not threads. Each target starts at a fixed offset inside its interval (a hash of
 * its identity, as Prometheus spreads its loops) and then every scrape_interval; a request has
 * scrape_timeout (a delta endpoint: its profile window plus scrape_timeout, since the target
 * answers only after the window) and the job's body_size_limit (else the scraper's
 * max_response_bytes). A scrape fails, and the target turns unhealthy with a one-line last error,
 * on a connection error, a timeout, a status other than 200, a body over the limit, or a body that
 * is not a valid pprof profile (checked with lib/pprof). keep_sample_type re-encodes the profile
 * with only those sample types. Good scrapes are handed to the sink (by default a lib/push pusher
 * to the configured ingesters) in batches of up to 64 or every 100 ms, one WriteRaw request per
 * batch; the pusher queues without waiting on the network, so a slow ingester never delays
 * scraping; its drops are counted in /metrics. Idle connections to targets are kept between
 * scrapes (up to 4,096).
 *
 * Reload. scraper_apply replaces every job: the new providers start first (if one cannot, the
 * running jobs stay), a target that is in both keeps its health, last scrape and schedule, the old
 * providers stop and their requests in flight are discarded. The scraper: section is read once.
 *
 * API. ScrapeService/Targets on gRPC (parca.scrape.v1alpha1) and GET /api/v1/targets (the same as
 * protojson: {"targets":{"<job>":{"targets":[{"discoveredLabels":{"labels":[...]},"labels":...,
 * "lastError":"","lastScrape":"RFC 3339","lastScrapeDuration":"0.012s","url":"...",
 * "health":"HEALTH_GOOD"}]}}}), both with the state filter (any, active, dropped; HTTP
 * ?state=active|dropped).
 *
 * Metrics: strata_scraper_scrapes_total{job}, strata_scraper_scrape_failures_total{job},
 * strata_scraper_scrape_duration_seconds{job}, strata_scraper_scraped_bytes_total{job},
 * strata_scraper_targets{job,state}, and the pusher's strata_scraper_push_* counters.
 *
 * Thread safety: every function is called by the owner thread; discovery callbacks, the scrape
 * thread and API handlers synchronise internally.
 */
#ifndef STRATA_SCRAPER_H
#define STRATA_SCRAPER_H

#include "common/error.h"
#include "http/http.h"
#include "metrics/metrics.h"
#include "push/push.h"
#include "rpc/rpc.h"
#include "scrape_config.h"

#define SCRAPER_TARGETS_METHOD "/parca.scrape.v1alpha1.ScrapeService/Targets"
#define SCRAPER_TARGETS_PATH "/api/v1/targets"

typedef struct scraper scraper;

/* Receives good scrapes; must not block (push_enqueue's contract). */
typedef int (*scraper_sink_fn)(void *ctx, const push_series *series, size_t n, strata_error *err);

typedef struct scraper_options {
    const scraper_config *config; /* copied as needed */
    /* ingester host:port list when config->ingester_addresses is empty (strata all: its own
     * gRPC address) */
    const char *default_ingester;
    metrics_registry *registry;
    scraper_sink_fn sink; /* NULL: a pusher to the ingesters */
    void *sink_ctx;
} scraper_options;

scraper *scraper_new(const scraper_options *options, strata_error *err);
/* Replaces every job with configs (taken over: *configs is left empty, also on failure). */
int scraper_apply(scraper *s, scrape_configs *configs, strata_error *err);
/* Starts the scrape thread. */
int scraper_start(scraper *s, strata_error *err);
int scraper_register_grpc(scraper *s, rpc_server *server, strata_error *err);
int scraper_register_http(scraper *s, http_server *server, strata_error *err);
/* Stops providers and the scrape thread, then flushes the pusher for up to a second. */
void scraper_stop(scraper *s);
void scraper_free(scraper *s);

/* Health as in parca.scrape.v1alpha1.Target.Health. */
typedef enum scrape_health {
    SCRAPE_HEALTH_UNKNOWN = 0,
    SCRAPE_HEALTH_GOOD = 1,
    SCRAPE_HEALTH_BAD = 2,
} scrape_health;

/* Target states for the API filter (TargetsRequest.State). */
typedef enum scrape_state_filter {
    SCRAPE_STATE_ANY = 0,
    SCRAPE_STATE_ACTIVE = 1,
    SCRAPE_STATE_DROPPED = 2,
} scrape_state_filter;

/* Appends the Targets response as protojson to out (see the top comment). */
int scraper_targets_json(scraper *s, scrape_state_filter state, strata_buffer *out,
                         strata_error *err);
/* Appends the encoded parca.scrape.v1alpha1.TargetsResponse to out. */
int scraper_targets_proto(scraper *s, scrape_state_filter state, strata_buffer *out,
                          strata_error *err);

#endif
