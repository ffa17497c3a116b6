/*
 * scraper_internal.h - the scraper's state, shared by scraper.c (jobs, targets, the scrape
 * thread) and scrape_api.c (Targets over gRPC and JSON). Not a contract.
 *
 * Ownership: the scraper owns its jobs; a job owns its config, its discovered groups, its active
 * targets and its dropped label sets. A target holds a reference to its job, so a target that is
 * still in flight when its job is replaced keeps the job (config, endpoints) alive until the
 * request ends; such a target is "retired": off every list, freed by the scrape thread when its
 * request completes. Everything mutable is guarded by scraper.mu.
 */
#ifndef STRATA_SCRAPER_INTERNAL_H
#define STRATA_SCRAPER_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "discovery/discovery.h"
#include "common/buffer.h"
#include "labels/labels.h"
#include "scrape_discovery.h"
#include "scraper.h"

#define SCRAPE_LAST_ERROR_MAX 512

typedef struct scrape_job scrape_job;

/* Good scrapes waiting to be handed to the sink together (scrape thread only). */
#define SCRAPE_BATCH_MAX 64
#define SCRAPE_BATCH_NS (INT64_C(100) * 1000000)
typedef struct scrape_batch {
    label_set labels[SCRAPE_BATCH_MAX];
    strata_buffer bodies[SCRAPE_BATCH_MAX];
    size_t n;
    int64_t first_mono_ns;
} scrape_batch;

typedef struct scrape_target {
    scrape_job *job; /* referenced */
    const scrape_endpoint *endpoint;
    label_set discovered; /* before relabeling */
    label_set labels;     /* final, __name__ included */
    char *url;
    uint64_t identity;
    int64_t interval_ns;
    int64_t request_timeout_ns;
    /* mutable, under scraper.mu */
    int64_t next_mono_ns;
    bool in_flight;
    bool retired;
    scrape_health health;
    char last_error[SCRAPE_LAST_ERROR_MAX];
    int64_t last_scrape_ns; /* wall clock of the last scrape's start; 0 = never */
    int64_t last_duration_ns;
} scrape_target;

struct scrape_job {
    scraper *owner;
    int refs; /* 1 while listed in the scraper, plus one per target */
    scrape_job_config config;
    target_group *groups;
    size_t n_groups, cap_groups;
    scrape_target **targets;
    size_t n_targets;
    label_set *dropped; /* discovered labels of dropped targets */
    size_t n_dropped, cap_dropped;
    scrape_discovery *discovery;
    metrics_counter *scrapes;
    metrics_counter *failures;
    metrics_counter *bytes;
    metrics_histogram *duration;
    metrics_gauge *active_gauge;
    metrics_gauge *dropped_gauge;
};

struct scraper {
    pthread_mutex_t mu;
    scrape_job **jobs;
    size_t n_jobs;
    uint64_t max_response_bytes;
    scraper_sink_fn sink;
    void *sink_ctx;
    pusher *push; /* owned when the options gave no sink */
    metrics_registry *registry;
    metrics_counter_vec *scrapes_vec;
    metrics_counter_vec *failures_vec;
    metrics_counter_vec *bytes_vec;
    metrics_histogram_vec *duration_vec;
    metrics_gauge_vec *targets_vec;
    metrics_counter *push_enqueued;
    metrics_counter *push_acked;
    metrics_counter_vec *push_dropped;
    metrics_counter *push_errors;
    metrics_counter *push_batches;
    metrics_gauge *push_in_flight;
    metrics_gauge *push_queue_bytes;
    metrics_gauge *push_lag;
    /* scrape thread */
    void *multi;                       /* CURLM */
    struct scrape_transfer *transfers; /* in flight; only the scrape thread touches the list */
    scrape_batch batch;
    pthread_t thread;
    bool started;
    bool stopping;
    bool rescan;          /* targets changed: look for due ones now */
    int64_t next_scan_ns; /* earliest due time seen at the last scan */
    int64_t last_scan_ns;
};

#endif
