/*
 * limits.h - per-tenant limits with defaults and overrides: how many pprof samples per second a
 * tenant may write (a token bucket with a burst) and how many series it may keep active, as
 * Grafana Mimir's and Pyroscope's operators know them.
 *
 * Configuration. Two YAML mappings that a service embeds in its section (the ingester:
 * `ingester.limits` and `ingester.overrides`; the querier: `querier.limits` and
 * `querier.overrides`; docs/configuration.md). Each service reads the keys it enforces and
 * ignores the others (the ingester the first four, the querier max_query_bytes):
 *
 *     limits:                         # every tenant, unless overridden; 0 = unlimited
 *       ingestion_rate_samples: 0     # pprof samples per second
 *       ingestion_burst_samples: 0    # the bucket's size; 0 = 10 x the rate (10 s of it)
 *       max_active_series: 0          # series written within the window
 *       active_series_window: 10m
 *       max_query_bytes: 0            # memory one merge may use; 0 = querier.max_query_bytes
 *     overrides:                      # tenant -> only the keys that differ
 *       team-a: {ingestion_rate_samples: 100000, max_active_series: 50000}
 *       team-b: {ingestion_rate_samples: 0}    # lifts the default
 *
 * limits_values_fields decodes `limits:` (with the defaults above); LIMITS_OVERRIDES_FIELD
 * decodes `overrides:`, strictly: each tenant obeys common/tenant.h's rule and each override takes
 * only the keys of `limits:`, with the same types and bounds, errors naming file:line:col. An
 * override sets only the keys it names; the others are the tenant's defaults, so a reload that
 * changes a default changes it for overridden tenants too. A limit is one member of
 * limits_values and one row of limits_values_fields (8 bytes each); overrides accept it with no
 * other change. max_query_bytes creates no tenant state here: the querier only resolves it
 * (limits_resolve) per query.
 *
 * Rate. A token bucket per tenant: ingestion_burst_samples tokens, refilled continuously at
 * ingestion_rate_samples per second; a tenant seen for the first time starts with a full bucket.
 * A request takes as many tokens as it has pprof samples (DESIGN.md's unit: one stack with its
 * values, whatever the number of sample types), or is refused whole and takes none. A request
 * larger than the burst can never pass, and its message says so. The burst defaults to 10 s of
 * the rate because agents and scrapers push every 10 s: one push of a whole window at the limit
 * rate fits.
 *
 * Active series. A series is what a query shows as one line: one profile type and one label set
 * (a pprof with two sample types writes two series). The caller hashes each series of a request
 * to 64 bits. Per tenant a hash table maps each series to the time of its last accepted write; a
 * series is active for active_series_window after that. A request whose new series (not active)
 * would take the tenant past max_active_series is refused whole; a request that writes only
 * active series passes (and refreshes them), so a tenant at its limit keeps writing what it
 * already writes. The table never holds more than max_active_series entries: slots of 16 bytes
 * at a load of at most 1/2 make at most 64 bytes per active series (twice that for a moment while
 * expired series are dropped, which rebuilds the table). Expired series are dropped at most every
 * window / 10 and, when a tenant is at its limit, before refusing (at most once a second), so a
 * refusal counts only series written within the window, give or take a second. Hashes are keyed
 * with a random per-process seed, so clients cannot aim their series at one slot of the table.
 *
 * Tenants. State is held only for tenants with a rate or series limit (any other tenant costs one
 * lookup and nothing else), and dropped once it holds nothing a fresh state would not: when the
 * tenant has been idle for its window (every series expired) and for the time its bucket takes to
 * refill (a full bucket is a fresh one; at most 1 h, after which an idle tenant starts full). A
 * sweep runs from limits_admit at most every LIMITS_SWEEP_INTERVAL_NS, so idle tenants go within
 * that much more. A tenant's state costs about 200 bytes plus its series table.
 *
 * Threads. Every function may be called from any thread. A read-write lock guards the tenant
 * table and the configuration (read: requests; write: adding a tenant, sweeping, applying a new
 * configuration), and a mutex per tenant guards its bucket and series, so requests of different
 * tenants never wait on each other, and one tenant's requests are serialised only for their
 * bucket arithmetic and series probes. Hot path, for a limited tenant: one read lock, a hash of
 * the tenant name, the tenant's mutex, two probes per series; for an unlimited one: the lock, the
 * hash and a binary search over the overrides; with no limit configured for anyone: one atomic
 * load (limits_enabled).
 *
 * Time. The caller passes now_ns (a monotonic clock; a fake one in tests); going backwards is
 * read as no time passing.
 */
#ifndef STRATA_LIMITS_H
#define STRATA_LIMITS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "config/config.h"

/* How often limits_admit sweeps out idle tenants. */
#define LIMITS_SWEEP_INTERVAL_NS (INT64_C(10) * 1000000000)

/* One tenant's limits. 0 means unlimited for each count. */
typedef struct limits_values {
    uint64_t ingestion_rate_samples;  /* pprof samples per second */
    uint64_t ingestion_burst_samples; /* token bucket size; 0 = 10 x ingestion_rate_samples */
    uint64_t max_active_series;       /* series written within active_series_window */
    int64_t active_series_window_ns;  /* default 10 min; 10s-24h */
    uint64_t max_query_bytes;         /* querier, per merge; 0 = querier.max_query_bytes */
} limits_values;

/* The `limits:` mapping, with its defaults and bounds. */
extern const config_field limits_values_fields[];

/* One tenant's override: values holds the keys whose bit is set in `set` (bit i = row i of
 * limits_values_fields); the other keys are the defaults'. */
typedef struct limits_override {
    char *tenant;
    limits_values values;
    uint32_t set;
} limits_override;

/* The `overrides:` mapping, sorted by tenant (names are unique: YAML keys are). */
typedef struct limits_overrides {
    limits_override *items;
    size_t count;
} limits_overrides;

/* CONFIG_CUSTOM decoder and release of a limits_overrides (use LIMITS_OVERRIDES_FIELD). */
int limits_overrides_decode(const config_node *node, void *dst, strata_error *err);
void limits_overrides_release(void *dst);

/* A config_field row for an `overrides:` mapping stored at member_ of type_. */
#define LIMITS_OVERRIDES_FIELD(key_, type_, member_)                                               \
    {                                                                                              \
        .key = (key_), .kind = CONFIG_CUSTOM, .offset = offsetof(type_, member_),                  \
        .elem_size = sizeof(limits_overrides), .decode = limits_overrides_decode,                  \
        .release = limits_overrides_release                                                        \
    }

/* The tenant's limits: defaults with its override (if any) applied, and the burst resolved (0
 * becomes 10 x the rate). overrides may be NULL. */
void limits_resolve(const limits_values *defaults, const limits_overrides *overrides,
                    const char *tenant, limits_values *out);

typedef struct limits_enforcer limits_enforcer;

/* Copies defaults and overrides (overrides may be NULL). */
int limits_new(const limits_values *defaults, const limits_overrides *overrides,
               limits_enforcer **out, strata_error *err);
/* Replaces the configuration (a reload). Each tenant's state carries over: its active series stay
 * counted, its tokens are capped at its new burst; a tenant whose series limit goes from 0 to a
 * number starts counting from empty, and state of a tenant left without limits is dropped. */
int limits_apply(limits_enforcer *l, const limits_values *defaults,
                 const limits_overrides *overrides, strata_error *err);
void limits_free(limits_enforcer *l);

/* The tenant's limits now (limits_resolve on the current configuration), so a caller computes
 * only what they need: no series hashes for a tenant without max_active_series. */
void limits_tenant_values(limits_enforcer *l, const char *tenant, limits_values *out);

/* False when no tenant has any limit: callers may skip limits_admit and what they compute for
 * it. */
bool limits_enabled(const limits_enforcer *l);

/* Why a request was refused. */
typedef enum limits_reason {
    LIMITS_NONE,   /* admitted, or failed for another reason (out of memory) */
    LIMITS_RATE,   /* ingestion_rate_samples / ingestion_burst_samples */
    LIMITS_SERIES, /* max_active_series */
} limits_reason;

/* "none", "rate", "series": a metric label value. */
const char *limits_reason_name(limits_reason reason);

/* Admits or refuses, as a whole, a request of n_samples pprof samples writing the series
 * series[0..n_series) (64-bit hashes in any order, repeats allowed; the array is overwritten;
 * NULL when n_series is 0) for tenant at now_ns. Admitted (0): its tokens are taken and its series
 * are active as of now_ns. Refused (-1, *reason LIMITS_RATE or LIMITS_SERIES): nothing changes,
 * and err is RESOURCE_EXHAUSTED naming the tenant, the limit and its value:
 *   tenant team-a: ingestion rate limit 100000 samples/s (burst 1000000) exceeded: the request
 *     has 1200000 samples, more than the burst
 *   tenant team-a: ingestion rate limit 100 samples/s (burst 200) exceeded: the request has 150
 *     samples, 50 are available (the rate refills them)
 *   tenant team-a: active series limit 4 exceeded: 3 series active within 10m, the request adds 2
 * Out of memory: -1 with *reason LIMITS_NONE (some of the request's new series may then count as
 * active; its tokens are not taken). */
int limits_admit(limits_enforcer *l, const char *tenant, int64_t now_ns, uint64_t n_samples,
                 uint64_t *series, size_t n_series, limits_reason *reason, strata_error *err);

/* Drops the state of tenants idle past their expiry (see above). limits_admit calls it itself at
 * most every LIMITS_SWEEP_INTERVAL_NS; tests call it with their clock. */
void limits_sweep(limits_enforcer *l, int64_t now_ns);

typedef struct limits_stats {
    uint64_t tenants; /* tenants whose state is held */
    uint64_t series;  /* entries of their series tables (active, or expired and not yet dropped) */
    uint64_t bytes;   /* memory of the tenant table, the states and their series tables */
} limits_stats;

void limits_get_stats(limits_enforcer *l, limits_stats *out);
/* Entries of tenant's series table; 0 when no state is held for it. */
uint64_t limits_tenant_series(limits_enforcer *l, const char *tenant);

#endif
