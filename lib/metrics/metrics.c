/*
 * metrics.c - registry, registration and lock-free updates; see metrics.h.
 */
#include "metrics/metrics.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/array.h"
#include "metrics/metrics_internal.h"

static const double default_latency_buckets[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                 0.5,   1,    2.5,   5,    10};

#define DROPPED_NAME "strata_metrics_children_dropped_total"

const double *metrics_default_latency_buckets(size_t *n) {
    *n = sizeof default_latency_buckets / sizeof default_latency_buckets[0];
    return default_latency_buckets;
}

int metrics_exponential_buckets(double start, double factor, size_t count, double *out,
                                strata_error *err) {
    if (!(start > 0) || !(factor > 1) || !isfinite(start) || !isfinite(factor) || count == 0 ||
        count > METRICS_MAX_BUCKETS)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "exponential buckets need start > 0, factor > 1, 1..%d buckets",
                                METRICS_MAX_BUCKETS);
    double v = start;
    for (size_t i = 0; i < count; i++) {
        out[i] = v;
        v *= factor;
    }
    if (!isfinite(out[count - 1]))
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "exponential buckets overflow");
    return 0;
}

/* --- validation ------------------------------------------------------------------------------ */

static bool is_name_char(char c, bool first, bool colon_ok) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_')
        return true;
    if (c == ':')
        return colon_ok;
    return !first && c >= '0' && c <= '9';
}

static bool valid_name(const char *s, bool colon_ok) {
    if (s == NULL || s[0] == '\0')
        return false;
    for (size_t i = 0; s[i] != '\0'; i++)
        if (!is_name_char(s[i], i == 0, colon_ok))
            return false;
    return true;
}

static int validate_labels(const metrics_opts *o, bool histogram, strata_error *err) {
    if (o->n_labels > METRICS_MAX_LABELS || (o->n_labels > 0 && o->label_names == NULL))
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "metric %s: bad label list", o->name);
    for (size_t i = 0; i < o->n_labels; i++) {
        const char *l = o->label_names[i];
        if (!valid_name(l, false) || strncmp(l, "__", 2) == 0)
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "metric %s: invalid label name %s", o->name, l ? l : "(null)");
        if (histogram && strcmp(l, "le") == 0)
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "histogram %s: label name le is reserved", o->name);
        for (size_t j = 0; j < i; j++)
            if (strcmp(l, o->label_names[j]) == 0)
                return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                        "metric %s: duplicate label name %s", o->name, l);
    }
    return 0;
}

/* Copies the bucket bounds to use into *bounds (malloc'd), dropping a trailing +Inf. */
static int resolve_bounds(const metrics_opts *o, double **bounds, size_t *n, strata_error *err) {
    const double *src = o->buckets;
    size_t count = o->n_buckets;
    if (src == NULL || count == 0)
        src = metrics_default_latency_buckets(&count);
    if (count > 0 && isinf(src[count - 1]) && src[count - 1] > 0)
        count--;
    if (count == 0 || count > METRICS_MAX_BUCKETS)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "histogram %s: need 1..%d buckets",
                                o->name, METRICS_MAX_BUCKETS);
    for (size_t i = 0; i < count; i++)
        if (!isfinite(src[i]) || (i > 0 && !(src[i] > src[i - 1])))
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "histogram %s: buckets must be finite and increasing", o->name);
    *bounds = malloc(count * sizeof **bounds);
    if (*bounds == NULL)
        return strata_error_oom(err);
    memcpy(*bounds, src, count * sizeof **bounds);
    *n = count;
    return 0;
}

/* --- families and series --------------------------------------------------------------------- */

typedef union family_storage {
    struct metrics_counter_vec c;
    struct metrics_gauge_vec g;
    struct metrics_histogram_vec h;
} family_storage;

typedef union series_storage {
    struct metrics_counter c;
    struct metrics_gauge g;
    struct metrics_histogram h;
} series_storage;

static void free_strings(char **v, size_t n) {
    if (v == NULL)
        return;
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

static char **dup_strings(const char *const *src, size_t n) {
    char **out = calloc(n ? n : 1, sizeof *out);
    if (out == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        out[i] = strdup(src[i]);
        if (out[i] == NULL) {
            free_strings(out, n);
            return NULL;
        }
    }
    return out;
}

static void series_free(metrics_series *s, size_t n_labels) {
    if (s == NULL)
        return;
    free(s->buckets);
    free_strings(s->label_values, n_labels);
    free((series_storage *)(void *)s);
}

static metrics_series *series_new(metrics_family *f, const char *const *values, uint64_t hash) {
    series_storage *st = calloc(1, sizeof *st);
    if (st == NULL)
        return NULL;
    metrics_series *s = &st->c.s;
    s->family = f;
    s->hash = hash;
    if (f->type == METRICS_FAMILY_HISTOGRAM) {
        s->buckets = calloc(f->n_bounds + 1, sizeof *s->buckets);
        if (s->buckets == NULL)
            goto fail;
        atomic_init(&s->sum_bits, metrics_double_to_bits(0.0));
    }
    atomic_init(&s->value, f->kind == METRICS_DOUBLE ? metrics_double_to_bits(0.0) : 0);
    if (f->n_labels > 0) {
        s->label_values = dup_strings(values, f->n_labels);
        if (s->label_values == NULL)
            goto fail;
    }
    return s;
fail:
    series_free(s, f->n_labels);
    return NULL;
}

static void family_free(metrics_family *f) {
    if (f == NULL)
        return;
    for (size_t i = 0; i < f->n_children; i++)
        series_free(f->children[i], f->n_labels);
    free(f->children);
    strata_u64_map_free(&f->index);
    pthread_rwlock_destroy(&f->lock);
    free(f->name);
    free(f->help);
    free_strings(f->label_names, f->n_labels);
    free(f->bounds);
    free((family_storage *)(void *)f);
}

static int family_fill(metrics_family *f, const metrics_opts *o, strata_error *err) {
    f->name = strdup(o->name);
    f->help = strdup(o->help);
    f->label_names = dup_strings(o->label_names, o->n_labels);
    if (f->name == NULL || f->help == NULL || f->label_names == NULL)
        return strata_error_oom(err);
    if (f->type == METRICS_FAMILY_HISTOGRAM &&
        resolve_bounds(o, &f->bounds, &f->n_bounds, err) != 0)
        return -1;
    if (strata_u64_map_init(&f->index, 8) != 0)
        return strata_error_oom(err);
    return 0;
}

static metrics_family *family_new(metrics_registry *r, metrics_family_type type, bool is_vec,
                                  const metrics_opts *o, strata_error *err) {
    family_storage *st = calloc(1, sizeof *st);
    if (st == NULL) {
        strata_error_oom(err);
        return NULL;
    }
    metrics_family *f = &st->c.f;
    f->registry = r;
    f->type = type;
    f->kind = type == METRICS_FAMILY_HISTOGRAM ? METRICS_DOUBLE : o->kind;
    f->is_vec = is_vec;
    f->n_labels = o->n_labels;
    f->max_children =
        is_vec ? (o->max_children ? o->max_children : METRICS_DEFAULT_MAX_CHILDREN) : 1;
    if (pthread_rwlock_init(&f->lock, NULL) != 0) {
        free(st);
        strata_error_set(err, STRATA_INTERNAL, "metric %s: cannot create lock", o->name);
        return NULL;
    }
    if (family_fill(f, o, err) != 0) {
        family_free(f);
        return NULL;
    }
    return f;
}

static bool same_bounds(const metrics_family *f, const metrics_opts *o) {
    double *bounds = NULL;
    size_t n = 0;
    if (resolve_bounds(o, &bounds, &n, NULL) != 0)
        return false;
    bool same = n == f->n_bounds && memcmp(bounds, f->bounds, n * sizeof *bounds) == 0;
    free(bounds);
    return same;
}

static bool same_definition(const metrics_family *f, metrics_family_type type, bool is_vec,
                            const metrics_opts *o) {
    if (f->type != type || f->is_vec != is_vec || strcmp(f->help, o->help) != 0 ||
        f->n_labels != o->n_labels)
        return false;
    if (type != METRICS_FAMILY_HISTOGRAM && f->kind != o->kind)
        return false;
    for (size_t i = 0; i < f->n_labels; i++)
        if (strcmp(f->label_names[i], o->label_names[i]) != 0)
            return false;
    return type != METRICS_FAMILY_HISTOGRAM || same_bounds(f, o);
}

static int validate_opts(const metrics_opts *o, metrics_family_type type, bool is_vec,
                         strata_error *err) {
    if (o == NULL || !valid_name(o->name, true))
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "invalid metric name %s",
                                o && o->name ? o->name : "(null)");
    if (o->help == NULL)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "metric %s: help is required",
                                o->name);
    if (o->kind != METRICS_INT64 && o->kind != METRICS_DOUBLE)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "metric %s: bad value kind", o->name);
    if (is_vec && o->n_labels == 0)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "metric %s: a vec needs labels",
                                o->name);
    if (!is_vec && o->n_labels != 0)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "metric %s: labels need the _vec constructor", o->name);
    return validate_labels(o, type == METRICS_FAMILY_HISTOGRAM, err);
}

static int registry_append(metrics_registry *r, metrics_family *f, strata_error *err) {
    if (STRATA_ARRAY_RESERVE_OR_OOM(r->families, r->cap_families, r->n_families + 1, err) != 0)
        return -1;
    r->families[r->n_families++] = f;
    return 0;
}

/* Creates the single series of a plain family. */
static int family_add_only_child(metrics_family *f, strata_error *err) {
    metrics_series *s = series_new(f, NULL, 0);
    f->children = malloc(sizeof *f->children);
    if (s == NULL || f->children == NULL) {
        series_free(s, f->n_labels);
        return strata_error_oom(err);
    }
    f->children[0] = s;
    f->n_children = f->cap_children = 1;
    return 0;
}

static metrics_family *find_or_create_locked(metrics_registry *r, metrics_family_type type,
                                             bool is_vec, const metrics_opts *o,
                                             strata_error *err) {
    for (size_t i = 0; i < r->n_families; i++) {
        metrics_family *f = r->families[i];
        if (strcmp(f->name, o->name) != 0)
            continue;
        if (same_definition(f, type, is_vec, o))
            return f;
        strata_error_set(err, STRATA_ALREADY_EXISTS,
                         "metric %s is already registered with another definition", o->name);
        return NULL;
    }
    metrics_family *f = family_new(r, type, is_vec, o, err);
    if (f == NULL)
        return NULL;
    if ((!is_vec && family_add_only_child(f, err) != 0) || registry_append(r, f, err) != 0) {
        family_free(f);
        return NULL;
    }
    return f;
}

static metrics_family *register_family(metrics_registry *r, metrics_family_type type, bool is_vec,
                                       const metrics_opts *o, strata_error *err) {
    if (r == NULL) {
        strata_error_set(err, STRATA_INVALID_ARGUMENT, "no metrics registry");
        return NULL;
    }
    if (validate_opts(o, type, is_vec, err) != 0)
        return NULL;
    pthread_mutex_lock(&r->lock);
    metrics_family *f = find_or_create_locked(r, type, is_vec, o, err);
    pthread_mutex_unlock(&r->lock);
    return f;
}

metrics_counter *metrics_counter_new(metrics_registry *r, const metrics_opts *o,
                                     strata_error *err) {
    metrics_family *f = register_family(r, METRICS_FAMILY_COUNTER, false, o, err);
    return f ? (metrics_counter *)(void *)f->children[0] : NULL;
}

metrics_gauge *metrics_gauge_new(metrics_registry *r, const metrics_opts *o, strata_error *err) {
    metrics_family *f = register_family(r, METRICS_FAMILY_GAUGE, false, o, err);
    return f ? (metrics_gauge *)(void *)f->children[0] : NULL;
}

metrics_histogram *metrics_histogram_new(metrics_registry *r, const metrics_opts *o,
                                         strata_error *err) {
    metrics_family *f = register_family(r, METRICS_FAMILY_HISTOGRAM, false, o, err);
    return f ? (metrics_histogram *)(void *)f->children[0] : NULL;
}

metrics_counter_vec *metrics_counter_vec_new(metrics_registry *r, const metrics_opts *o,
                                             strata_error *err) {
    metrics_family *f = register_family(r, METRICS_FAMILY_COUNTER, true, o, err);
    return (metrics_counter_vec *)(void *)f;
}

metrics_gauge_vec *metrics_gauge_vec_new(metrics_registry *r, const metrics_opts *o,
                                         strata_error *err) {
    metrics_family *f = register_family(r, METRICS_FAMILY_GAUGE, true, o, err);
    return (metrics_gauge_vec *)(void *)f;
}

metrics_histogram_vec *metrics_histogram_vec_new(metrics_registry *r, const metrics_opts *o,
                                                 strata_error *err) {
    metrics_family *f = register_family(r, METRICS_FAMILY_HISTOGRAM, true, o, err);
    return (metrics_histogram_vec *)(void *)f;
}

/* --- vec children ---------------------------------------------------------------------------- */

static uint64_t hash_values(const char *const *values, size_t n) {
    uint64_t h = 0x6d657472696373ULL;
    for (size_t i = 0; i < n; i++)
        h = strata_hash_combine(h, strata_hash_bytes(values[i], strlen(values[i]), i));
    return h ? h : 1;
}

static bool values_equal(const metrics_series *s, const char *const *values, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(s->label_values[i], values[i]) != 0)
            return false;
    return true;
}

static metrics_series *lookup_locked(const metrics_family *f, const char *const *values,
                                     uint64_t hash) {
    uint64_t *slot = strata_u64_map_get(&f->index, hash);
    for (metrics_series *s = slot ? (metrics_series *)(uintptr_t)*slot : NULL; s != NULL;
         s = s->next_same_hash)
        if (values_equal(s, values, f->n_labels))
            return s;
    return NULL;
}

static int children_reserve(metrics_family *f) {
    return STRATA_ARRAY_RESERVE(f->children, f->cap_children, f->n_children + 1);
}

/* Inserts a new child; *capped is set when the family is full. Caller holds the write lock. */
static metrics_series *insert_locked(metrics_family *f, const char *const *values, uint64_t hash,
                                     bool *capped) {
    if (f->n_children >= f->max_children) {
        *capped = true;
        return NULL;
    }
    if (children_reserve(f) != 0)
        return NULL;
    metrics_series *s = series_new(f, values, hash);
    if (s == NULL)
        return NULL;
    bool inserted = false;
    uint64_t *slot = strata_u64_map_upsert(&f->index, hash, (uint64_t)(uintptr_t)s, &inserted);
    if (slot == NULL) {
        series_free(s, f->n_labels);
        return NULL;
    }
    if (!inserted) {
        s->next_same_hash = (metrics_series *)(uintptr_t)*slot;
        *slot = (uint64_t)(uintptr_t)s;
    }
    f->children[f->n_children++] = s;
    return s;
}

static void count_dropped(metrics_family *f) {
    metrics_registry *r = f->registry;
    if (r->dropped == NULL || &r->dropped->f == f)
        return;
    const char *values[1] = {f->name};
    metrics_counter_inc(metrics_counter_vec_with(r->dropped, values));
}

static metrics_series *family_with(metrics_family *f, const char *const *values) {
    if (f == NULL || values == NULL)
        return NULL;
    for (size_t i = 0; i < f->n_labels; i++)
        if (values[i] == NULL)
            return NULL;
    uint64_t hash = hash_values(values, f->n_labels);
    pthread_rwlock_rdlock(&f->lock);
    metrics_series *s = lookup_locked(f, values, hash);
    pthread_rwlock_unlock(&f->lock);
    if (s != NULL)
        return s;
    bool capped = false;
    pthread_rwlock_wrlock(&f->lock);
    s = lookup_locked(f, values, hash);
    if (s == NULL)
        s = insert_locked(f, values, hash, &capped);
    pthread_rwlock_unlock(&f->lock);
    if (capped)
        count_dropped(f);
    return s;
}

metrics_counter *metrics_counter_vec_with(metrics_counter_vec *v, const char *const *values) {
    return (metrics_counter *)(void *)family_with(v ? &v->f : NULL, values);
}

metrics_gauge *metrics_gauge_vec_with(metrics_gauge_vec *v, const char *const *values) {
    return (metrics_gauge *)(void *)family_with(v ? &v->f : NULL, values);
}

metrics_histogram *metrics_histogram_vec_with(metrics_histogram_vec *v, const char *const *values) {
    return (metrics_histogram *)(void *)family_with(v ? &v->f : NULL, values);
}

/* --- atomic updates -------------------------------------------------------------------------- */

static void atomic_add_double(_Atomic uint64_t *p, double delta) {
    uint64_t old = atomic_load_explicit(p, memory_order_relaxed);
    uint64_t next;
    do {
        next = metrics_double_to_bits(metrics_bits_to_double(old) + delta);
    } while (!atomic_compare_exchange_weak_explicit(p, &old, next, memory_order_relaxed,
                                                    memory_order_relaxed));
}

static void series_add_int(metrics_series *s, int64_t delta) {
    if (s->family->kind == METRICS_DOUBLE)
        atomic_add_double(&s->value, (double)delta);
    else /* unsigned wrap-around is two's complement addition of int64 */
        atomic_fetch_add_explicit(&s->value, (uint64_t)delta, memory_order_relaxed);
}

static void series_add_double(metrics_series *s, double delta) {
    if (s->family->kind == METRICS_DOUBLE)
        atomic_add_double(&s->value, delta);
    else if (fabs(delta) < 9.2e18)
        atomic_fetch_add_explicit(&s->value, (uint64_t)llround(delta), memory_order_relaxed);
}

static void series_set_int(metrics_series *s, int64_t v) {
    uint64_t bits =
        s->family->kind == METRICS_DOUBLE ? metrics_double_to_bits((double)v) : (uint64_t)v;
    atomic_store_explicit(&s->value, bits, memory_order_relaxed);
}

static void series_set_double(metrics_series *s, double v) {
    uint64_t bits;
    if (s->family->kind == METRICS_DOUBLE)
        bits = metrics_double_to_bits(v);
    else if (isnan(v))
        return;
    else if (fabs(v) < 9.2e18)
        bits = (uint64_t)llround(v);
    else
        bits = v > 0 ? (uint64_t)INT64_MAX : (uint64_t)INT64_MIN;
    atomic_store_explicit(&s->value, bits, memory_order_relaxed);
}

double metrics_series_value(const metrics_series *s) {
    uint64_t bits = atomic_load_explicit(&s->value, memory_order_relaxed);
    if (s->family->kind == METRICS_DOUBLE)
        return metrics_bits_to_double(bits);
    int64_t v;
    memcpy(&v, &bits, sizeof v);
    return (double)v;
}

void metrics_counter_inc(metrics_counter *c) {
    if (c != NULL)
        series_add_int(&c->s, 1);
}

void metrics_counter_add(metrics_counter *c, int64_t delta) {
    if (c != NULL && delta > 0)
        series_add_int(&c->s, delta);
}

void metrics_counter_add_double(metrics_counter *c, double delta) {
    if (c != NULL && delta > 0)
        series_add_double(&c->s, delta);
}

void metrics_counter_set(metrics_counter *c, int64_t value) {
    if (c != NULL)
        series_set_int(&c->s, value);
}

void metrics_counter_set_double(metrics_counter *c, double value) {
    if (c != NULL)
        series_set_double(&c->s, value);
}

double metrics_counter_value(const metrics_counter *c) {
    return c ? metrics_series_value(&c->s) : 0;
}

void metrics_gauge_set(metrics_gauge *g, int64_t value) {
    if (g != NULL)
        series_set_int(&g->s, value);
}

void metrics_gauge_set_double(metrics_gauge *g, double value) {
    if (g != NULL)
        series_set_double(&g->s, value);
}

void metrics_gauge_add(metrics_gauge *g, int64_t delta) {
    if (g != NULL)
        series_add_int(&g->s, delta);
}

void metrics_gauge_add_double(metrics_gauge *g, double delta) {
    if (g != NULL && !isnan(delta))
        series_add_double(&g->s, delta);
}

void metrics_gauge_inc(metrics_gauge *g) {
    metrics_gauge_add(g, 1);
}

void metrics_gauge_dec(metrics_gauge *g) {
    metrics_gauge_add(g, -1);
}

double metrics_gauge_value(const metrics_gauge *g) {
    return g ? metrics_series_value(&g->s) : 0;
}

/* Index of the first bound >= value, or n_bounds for the +Inf bucket. */
static size_t bucket_index(const metrics_family *f, double value) {
    size_t lo = 0, hi = f->n_bounds;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (value <= f->bounds[mid])
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

void metrics_histogram_observe(metrics_histogram *h, double value) {
    if (h == NULL || isnan(value))
        return;
    metrics_series *s = &h->s;
    atomic_fetch_add_explicit(&s->buckets[bucket_index(s->family, value)], 1, memory_order_relaxed);
    atomic_add_double(&s->sum_bits, value);
}

void metrics_histogram_observe_ns(metrics_histogram *h, int64_t duration_ns) {
    metrics_histogram_observe(h, (double)duration_ns / 1e9);
}

uint64_t metrics_histogram_count(const metrics_histogram *h) {
    if (h == NULL)
        return 0;
    uint64_t total = 0;
    for (size_t i = 0; i <= h->s.family->n_bounds; i++)
        total += atomic_load_explicit(&h->s.buckets[i], memory_order_relaxed);
    return total;
}

double metrics_histogram_sum(const metrics_histogram *h) {
    if (h == NULL)
        return 0;
    return metrics_bits_to_double(atomic_load_explicit(&h->s.sum_bits, memory_order_relaxed));
}

/* --- registry -------------------------------------------------------------------------------- */

static int registry_init_locks(metrics_registry *r, strata_error *err) {
    if (pthread_mutex_init(&r->lock, NULL) != 0)
        return strata_error_set(err, STRATA_INTERNAL, "cannot create registry lock");
    if (pthread_mutex_init(&r->collect_lock, NULL) != 0) {
        pthread_mutex_destroy(&r->lock);
        return strata_error_set(err, STRATA_INTERNAL, "cannot create registry lock");
    }
    return 0;
}

metrics_registry *metrics_registry_new(strata_error *err) {
    metrics_registry *r = calloc(1, sizeof *r);
    if (r == NULL) {
        strata_error_oom(err);
        return NULL;
    }
    if (registry_init_locks(r, err) != 0) {
        free(r);
        return NULL;
    }
    static const char *const dropped_labels[] = {"metric"};
    r->dropped = metrics_counter_vec_new(
        r,
        &(metrics_opts){.name = DROPPED_NAME,
                        .help = "Label sets not recorded because the metric reached its limit "
                                "of children.",
                        .label_names = dropped_labels,
                        .n_labels = 1,
                        .max_children = SIZE_MAX},
        err);
    if (r->dropped == NULL) {
        metrics_registry_free(r);
        return NULL;
    }
    return r;
}

void metrics_registry_free(metrics_registry *r) {
    if (r == NULL)
        return;
    for (size_t i = 0; i < r->n_families; i++)
        family_free(r->families[i]);
    free(r->families);
    free(r->collectors);
    metrics_process_state_free(r->process);
    pthread_mutex_destroy(&r->lock);
    pthread_mutex_destroy(&r->collect_lock);
    free(r);
}

static metrics_registry *default_registry;
static pthread_once_t default_once = PTHREAD_ONCE_INIT;

static void create_default_registry(void) {
    default_registry = metrics_registry_new(NULL);
}

metrics_registry *metrics_default_registry(void) {
    pthread_once(&default_once, create_default_registry);
    return default_registry;
}

int metrics_registry_add_collector(metrics_registry *r, metrics_collect_fn fn, void *ctx,
                                   strata_error *err) {
    if (r == NULL || fn == NULL)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "collector needs a registry and fn");
    int rc = 0;
    pthread_mutex_lock(&r->collect_lock);
    if (STRATA_ARRAY_RESERVE_OR_OOM(r->collectors, r->cap_collectors, r->n_collectors + 1, err) !=
        0) {
        rc = -1;
        goto out;
    }
    r->collectors[r->n_collectors++] = (metrics_collector){fn, ctx};
out:
    pthread_mutex_unlock(&r->collect_lock);
    return rc;
}

bool metrics_registry_remove_collector(metrics_registry *r, metrics_collect_fn fn, void *ctx) {
    if (r == NULL)
        return false;
    bool found = false;
    pthread_mutex_lock(&r->collect_lock);
    for (size_t i = 0; i < r->n_collectors && !found; i++) {
        if (r->collectors[i].fn != fn || r->collectors[i].ctx != ctx)
            continue;
        memmove(&r->collectors[i], &r->collectors[i + 1],
                (r->n_collectors - i - 1) * sizeof r->collectors[0]);
        r->n_collectors--;
        found = true;
    }
    pthread_mutex_unlock(&r->collect_lock);
    return found;
}

static void run_collectors(metrics_registry *r) {
    pthread_mutex_lock(&r->collect_lock);
    for (size_t i = 0; i < r->n_collectors; i++)
        r->collectors[i].fn(r->collectors[i].ctx);
    pthread_mutex_unlock(&r->collect_lock);
}

static int compare_families(const void *a, const void *b) {
    const metrics_family *fa = *(metrics_family *const *)a;
    const metrics_family *fb = *(metrics_family *const *)b;
    return strcmp(fa->name, fb->name);
}

/* Copies the family list so rendering does not hold the registry lock. Families live until the
 * registry is freed, so the pointers stay valid. */
static metrics_family **snapshot_families(metrics_registry *r, size_t *n) {
    pthread_mutex_lock(&r->lock);
    *n = r->n_families;
    metrics_family **v = malloc((*n ? *n : 1) * sizeof *v);
    if (v != NULL && *n > 0)
        memcpy(v, r->families, *n * sizeof *v);
    pthread_mutex_unlock(&r->lock);
    return v;
}

int metrics_registry_render(metrics_registry *r, strata_buffer *out, strata_error *err) {
    if (r == NULL)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "no metrics registry");
    run_collectors(r);
    size_t n = 0;
    metrics_family **families = snapshot_families(r, &n);
    if (families == NULL)
        return strata_error_oom(err);
    qsort(families, n, sizeof *families, compare_families);
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++)
        if (metrics_render_family(families[i], out) != 0)
            rc = strata_error_oom(err);
    free(families);
    return rc;
}
