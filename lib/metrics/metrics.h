/*
 * metrics.h - a Prometheus metrics registry: counters, gauges and histograms, optionally with
 * labels, rendered in the text exposition format 0.0.4.
 *
 * Model. A registry holds metric families by name. A family has a type (counter, gauge,
 * histogram), help text, a value kind (int64 or double, for counters and gauges), zero or more
 * label names and, for histograms, bucket upper bounds. A family without labels has exactly one
 * series, created at registration; its handle (metrics_counter, metrics_gauge, metrics_histogram)
 * is what hot paths update. A family with labels (a "vec") creates a child series the first time
 * a set of label values is used; children are found by a hash of the values under a read lock and
 * are never freed before the registry, so callers on hot paths look a child up once and keep the
 * pointer. Each vec caps its number of children (opts.max_children, default
 * METRICS_DEFAULT_MAX_CHILDREN); past the cap the lookup returns NULL and the registry counts the
 * drop in strata_metrics_children_dropped_total{metric="<name>"}.
 *
 * Hot path. Updates are lock-free C11 atomics on one 64-bit word: fetch_add for int64 values, a
 * compare-and-swap loop on the IEEE bits for doubles. A histogram observation is a binary search
 * over the bounds plus one atomic bucket increment and one atomic add to the sum. Every update
 * function accepts NULL and then does nothing, so a failed lookup never crashes a caller. Counters
 * ignore negative and NaN increments (they only go up).
 *
 * Registration is get-or-create: registering a name again with an identical definition (type,
 * help, kind, labels, buckets) returns the existing metric, so independent modules (two HTTP
 * servers, say) can share one family; a different definition fails with ALREADY_EXISTS. Names
 * must match [a-zA-Z_:][a-zA-Z0-9_:]*, label names [a-zA-Z_][a-zA-Z0-9_]* without a leading "__";
 * "le" is reserved for histograms. Registration takes a mutex and is meant for start-up.
 *
 * Scraping. metrics_registry_render() first runs the registered collectors (callbacks that copy
 * values owned elsewhere into gauges or counters: per-method gRPC counts kept by the rpc module,
 * process CPU and memory), then writes every family sorted by name, and every child sorted by its
 * label values, so the output is stable. Families of a vec that has no children yet are omitted.
 * Within one histogram child the _count is the sum of the buckets, so `+Inf` and _count always
 * agree; _sum may trail by observations in flight during the scrape.
 *
 * Registries. metrics_default_registry() is the process-wide registry that services and /metrics
 * use; it lives until exit. Tests create their own with metrics_registry_new(). When several
 * services run in one process (the all-in-one `strata` binary) they share the default registry
 * and avoid clashes by convention: service-specific metrics are named strata_<service>_<what>
 * (strata_ingester_blocks_written_total, strata_querier_queries_total); metrics every service has
 * in common (http_requests_total, process_*) are registered get-or-create and told apart by their
 * labels (handler, method, service). A process that wants fully separate sets uses one registry
 * per service and serves each on its own endpoint.
 *
 * Thread safety: all functions may be called from any thread, except metrics_registry_free(),
 * which requires that no other thread uses the registry or its metrics.
 */
#ifndef STRATA_METRICS_H
#define STRATA_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buffer.h"
#include "common/error.h"

/* Content-Type of metrics_registry_render() output. */
#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

#define METRICS_DEFAULT_MAX_CHILDREN 10000
#define METRICS_MAX_LABELS 16
#define METRICS_MAX_BUCKETS 64

typedef struct metrics_registry metrics_registry;

/* Handles to one series. */
typedef struct metrics_counter metrics_counter;
typedef struct metrics_gauge metrics_gauge;
typedef struct metrics_histogram metrics_histogram;

/* Handles to a family with labels. */
typedef struct metrics_counter_vec metrics_counter_vec;
typedef struct metrics_gauge_vec metrics_gauge_vec;
typedef struct metrics_histogram_vec metrics_histogram_vec;

typedef enum metrics_value_kind {
    METRICS_INT64 = 0, /* exact integer arithmetic; rendered as an integer */
    METRICS_DOUBLE = 1,
} metrics_value_kind;

/* Definition of a metric. Zero-initialise and set what you need, for example
 *   metrics_counter_new(reg, &(metrics_opts){.name = "x_total", .help = "Xs seen."}, &err); */
typedef struct metrics_opts {
    const char *name;
    const char *help;               /* required; may be "" */
    metrics_value_kind kind;        /* counters and gauges; histograms are always double */
    const char *const *label_names; /* vecs only: n_labels names (1..METRICS_MAX_LABELS) */
    size_t n_labels;
    const double *buckets; /* histograms: strictly increasing finite upper bounds; */
    size_t n_buckets;      /* NULL/0 = metrics_default_latency_buckets() */
    size_t max_children;   /* vecs: 0 = METRICS_DEFAULT_MAX_CHILDREN */
} metrics_opts;

/* The default latency buckets in seconds: 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5,
 * 10 (Prometheus' defaults). Sets *n. */
const double *metrics_default_latency_buckets(size_t *n);
/* Fills out[0..count) with start, start*factor, ... Returns -1 (INVALID_ARGUMENT) unless
 * start > 0, factor > 1 and 1 <= count <= METRICS_MAX_BUCKETS. */
int metrics_exponential_buckets(double start, double factor, size_t count, double *out,
                                strata_error *err);

/* --- registries ------------------------------------------------------------------------------ */

metrics_registry *metrics_registry_new(strata_error *err);
void metrics_registry_free(metrics_registry *r);
/* The process-wide registry, created on first use; NULL only if that allocation failed. */
metrics_registry *metrics_default_registry(void);

/* Appends the whole registry in text format 0.0.4 to out. Runs the collectors first. Fails only
 * when out of memory (out may then hold a partial rendering). */
int metrics_registry_render(metrics_registry *r, strata_buffer *out, strata_error *err);

/* A collector runs at the start of each render, serialised with other collectors of the same
 * registry, and sets values of metrics it registered beforehand. It must not render or free the
 * registry. */
typedef void (*metrics_collect_fn)(void *ctx);
int metrics_registry_add_collector(metrics_registry *r, metrics_collect_fn fn, void *ctx,
                                   strata_error *err);
/* Removes the (fn, ctx) collector; when this returns the callback is not running and will not run
 * again, so ctx may be freed. Returns false if it was not registered. */
bool metrics_registry_remove_collector(metrics_registry *r, metrics_collect_fn fn, void *ctx);

/* Registers process_cpu_seconds_total, process_resident_memory_bytes, process_virtual_memory_bytes,
 * process_open_fds, process_max_fds and process_start_time_seconds, read from /proc/self at each
 * scrape. Idempotent. */
int metrics_register_process_metrics(metrics_registry *r, strata_error *err);

/* --- registration (get-or-create) ------------------------------------------------------------ */

metrics_counter *metrics_counter_new(metrics_registry *r, const metrics_opts *o, strata_error *err);
metrics_gauge *metrics_gauge_new(metrics_registry *r, const metrics_opts *o, strata_error *err);
metrics_histogram *metrics_histogram_new(metrics_registry *r, const metrics_opts *o,
                                         strata_error *err);
metrics_counter_vec *metrics_counter_vec_new(metrics_registry *r, const metrics_opts *o,
                                             strata_error *err);
metrics_gauge_vec *metrics_gauge_vec_new(metrics_registry *r, const metrics_opts *o,
                                         strata_error *err);
metrics_histogram_vec *metrics_histogram_vec_new(metrics_registry *r, const metrics_opts *o,
                                                 strata_error *err);

/* The child for label values (one per label name, any UTF-8, in the order of the names), created
 * on first use. NULL if v is NULL, a value is NULL, the cap was reached (counted as dropped) or
 * memory ran out. */
metrics_counter *metrics_counter_vec_with(metrics_counter_vec *v, const char *const *values);
metrics_gauge *metrics_gauge_vec_with(metrics_gauge_vec *v, const char *const *values);
metrics_histogram *metrics_histogram_vec_with(metrics_histogram_vec *v, const char *const *values);

/* --- updates (lock-free; NULL handles are ignored) ------------------------------------------- */

void metrics_counter_inc(metrics_counter *c);
/* Negative deltas are ignored. On a double counter adds (double)delta. */
void metrics_counter_add(metrics_counter *c, int64_t delta);
/* Negative and NaN deltas are ignored. On an int64 counter adds llround(delta). */
void metrics_counter_add_double(metrics_counter *c, double delta);
/* For collectors mirroring a monotonic total kept elsewhere; hot paths use add. */
void metrics_counter_set(metrics_counter *c, int64_t value);
void metrics_counter_set_double(metrics_counter *c, double value);
double metrics_counter_value(const metrics_counter *c);

void metrics_gauge_set(metrics_gauge *g, int64_t value);
void metrics_gauge_set_double(metrics_gauge *g, double value);
void metrics_gauge_add(metrics_gauge *g, int64_t delta);
void metrics_gauge_add_double(metrics_gauge *g, double delta);
void metrics_gauge_inc(metrics_gauge *g);
void metrics_gauge_dec(metrics_gauge *g);
double metrics_gauge_value(const metrics_gauge *g);

/* NaN observations are ignored. */
void metrics_histogram_observe(metrics_histogram *h, double value);
/* Observes a duration given in nanoseconds, in seconds. */
void metrics_histogram_observe_ns(metrics_histogram *h, int64_t duration_ns);
/* Totals for tests and collectors: the observation count and the sum. */
uint64_t metrics_histogram_count(const metrics_histogram *h);
double metrics_histogram_sum(const metrics_histogram *h);

#endif
