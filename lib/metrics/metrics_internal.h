/*
 * metrics_internal.h - structures shared by the metrics implementation files (registry and
 * updates in metrics.c, text rendering in metrics_render.c, /proc readers in metrics_process.c).
 * Not part of the contract; see metrics.h.
 *
 * Public handle types wrap the internal ones as their only member, and objects are allocated as a
 * union of the wrappers, so converting between a wrapper pointer and the internal pointer is the
 * well-defined "pointer to a struct and its first member" conversion.
 */
#ifndef STRATA_METRICS_INTERNAL_H
#define STRATA_METRICS_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "common/hash.h"
#include "metrics/metrics.h"

typedef enum metrics_family_type {
    METRICS_FAMILY_COUNTER,
    METRICS_FAMILY_GAUGE,
    METRICS_FAMILY_HISTOGRAM,
} metrics_family_type;

struct metrics_family;

typedef struct metrics_series {
    struct metrics_family *family;
    /* Counters and gauges: int64 two's complement or IEEE double bits, per family->kind. */
    _Atomic uint64_t value;
    /* Histograms: per-bucket (not cumulative) counts, n_bounds + 1 entries, the last for +Inf. */
    _Atomic uint64_t *buckets;
    _Atomic uint64_t sum_bits;
    char **label_values; /* family->n_labels strings */
    uint64_t hash;
    struct metrics_series *next_same_hash;
} metrics_series;

typedef struct metrics_family {
    metrics_registry *registry;
    char *name;
    char *help;
    metrics_family_type type;
    metrics_value_kind kind;
    bool is_vec;
    char **label_names;
    size_t n_labels;
    double *bounds;
    size_t n_bounds;
    size_t max_children;
    pthread_rwlock_t lock; /* children, index */
    metrics_series **children;
    size_t n_children;
    size_t cap_children;
    strata_u64_map index; /* nonzero(hash of label values) -> first metrics_series* */
} metrics_family;

struct metrics_counter {
    metrics_series s;
};
struct metrics_gauge {
    metrics_series s;
};
struct metrics_histogram {
    metrics_series s;
};
struct metrics_counter_vec {
    metrics_family f;
};
struct metrics_gauge_vec {
    metrics_family f;
};
struct metrics_histogram_vec {
    metrics_family f;
};

typedef struct metrics_collector {
    metrics_collect_fn fn;
    void *ctx;
} metrics_collector;

typedef struct metrics_process_state metrics_process_state;

struct metrics_registry {
    pthread_mutex_t lock; /* families, process */
    metrics_family **families;
    size_t n_families;
    size_t cap_families;
    pthread_mutex_t collect_lock; /* collectors; held while they run */
    metrics_collector *collectors;
    size_t n_collectors;
    size_t cap_collectors;
    metrics_counter_vec *dropped; /* strata_metrics_children_dropped_total{metric} */
    metrics_process_state *process;
};

static inline double metrics_bits_to_double(uint64_t bits) {
    union {
        uint64_t u;
        double d;
    } v = {.u = bits};
    return v.d;
}

static inline uint64_t metrics_double_to_bits(double d) {
    union {
        uint64_t u;
        double d;
    } v = {.d = d};
    return v.u;
}

/* Value of a counter or gauge series as a double. */
double metrics_series_value(const metrics_series *s);
/* Appends the shortest decimal that reads back as exactly v ("+Inf", "-Inf", "NaN" too). */
int metrics_format_double(strata_buffer *out, double v);
/* Renders one family (called by metrics_registry_render). */
int metrics_render_family(metrics_family *f, strata_buffer *out);
/* Frees the process metrics state (registry teardown). */
void metrics_process_state_free(metrics_process_state *p);

#endif
