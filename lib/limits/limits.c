/*
 * limits.c - see limits.h.
 *
 * Layout. A limits_enforcer holds the configuration (defaults, sorted overrides) and a chained hash
 * table of tenant states, all under one read-write lock that prefers writers (so a sweep or a
 * reload is not starved by a stream of requests). A tenant state holds its resolved limits, its
 * bucket and its series table (strata_u64_map: keyed series hash -> last accepted write, ns)
 * under its own mutex. Requests take the read lock; a request for a limited tenant without state
 * takes the write lock once to add it.
 */
#include "limits.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/types.h>
#include <time.h>

#include "common/hash.h"
#include "common/tenant.h"

#define NS_PER_SEC INT64_C(1000000000)
/* An idle tenant's state is kept at most this long for its bucket to refill. */
#define MAX_REFILL_NS (INT64_C(3600) * NS_PER_SEC)
/* Drops of expired series when a tenant is at its limit, at most one per this. */
#define PRESSURE_PURGE_NS NS_PER_SEC

/* ---- configuration ---------------------------------------------------------------------------
 */

CONFIG_DEFINE_BOUNDS(rate_bounds, CONFIG_UINT64, NULL, "1000000000000")
CONFIG_DEFINE_BOUNDS(burst_bounds, CONFIG_UINT64, NULL, "1000000000000000")
CONFIG_DEFINE_BOUNDS(series_bounds, CONFIG_UINT64, NULL, "100000000")
CONFIG_DEFINE_BOUNDS(window_bounds, CONFIG_DURATION, "10s", "24h")

/* `limits:`. An override is decoded with the same rows (the same keys, types and bounds); its `set`
 * bits say which keys it gave. Every member is 8 bytes (merge_override copies them so). */
const config_field limits_values_fields[] = {
    {.key = "ingestion_rate_samples",
     .kind = CONFIG_UINT64,
     .offset = offsetof(limits_values, ingestion_rate_samples),
     .default_text = "0",
     .decode = rate_bounds},
    {.key = "ingestion_burst_samples",
     .kind = CONFIG_UINT64,
     .offset = offsetof(limits_values, ingestion_burst_samples),
     .default_text = "0",
     .decode = burst_bounds},
    {.key = "max_active_series",
     .kind = CONFIG_UINT64,
     .offset = offsetof(limits_values, max_active_series),
     .default_text = "0",
     .decode = series_bounds},
    {.key = "active_series_window",
     .kind = CONFIG_DURATION,
     .offset = offsetof(limits_values, active_series_window_ns),
     .default_text = "10m",
     .decode = window_bounds},
    {.key = "max_query_bytes",
     .kind = CONFIG_BYTES,
     .offset = offsetof(limits_values, max_query_bytes),
     .default_text = "0"},
    {.key = NULL},
};

_Static_assert(sizeof(limits_values) == 5 * sizeof(uint64_t),
               "every limits_values member is 8 bytes (merge_override)");

static int compare_overrides(const void *a, const void *b) {
    return strcmp(((const limits_override *)a)->tenant, ((const limits_override *)b)->tenant);
}

void limits_overrides_release(void *dst) {
    limits_overrides *o = dst;
    for (size_t i = 0; i < o->count; i++)
        free(o->items[i].tenant);
    free(o->items);
    o->items = NULL;
    o->count = 0;
}

int limits_overrides_decode(const config_node *node, void *dst, strata_error *err) {
    limits_overrides *out = dst;
    memset(out, 0, sizeof *out);
    if (config_node_get_kind(node) != CONFIG_NODE_MAPPING)
        return config_node_error(err, node,
                                 "expected a mapping of tenant to limits, like {team-a: "
                                 "{ingestion_rate_samples: 100000}}");
    size_t n = config_node_size(node);
    if (n == 0)
        return 0;
    out->items = calloc(n, sizeof *out->items);
    if (out->items == NULL)
        return strata_error_oom(err);
    for (size_t i = 0; i < n; i++) {
        const config_node *key = config_node_key_at(node, i), *value = config_node_at(node, i);
        size_t len = 0;
        const char *tenant = config_node_scalar(key, &len);
        if (tenant == NULL || !strata_tenant_is_valid(tenant, len)) {
            config_node_error(err, key, "tenant \"%.160s\" is not valid: a tenant is %s",
                              tenant != NULL ? tenant : "", STRATA_TENANT_RULE);
            goto fail;
        }
        limits_override *o = &out->items[out->count];
        if (config_decode(value, limits_values_fields, &o->values, err) != 0)
            goto fail;
        if ((o->tenant = strdup(tenant)) == NULL) {
            strata_error_oom(err);
            goto fail;
        }
        out->count++;
        for (uint32_t f = 0; limits_values_fields[f].key != NULL; f++) {
            const config_node *v = config_node_get_kind(value) == CONFIG_NODE_MAPPING
                                       ? config_node_get(value, limits_values_fields[f].key)
                                       : NULL;
            if (v != NULL && !config_node_is_null(v))
                o->set |= UINT32_C(1) << f;
        }
    }
    if (out->count > 1) /* items is NULL without overrides: no qsort(NULL, 0) (UBSan) */
        qsort(out->items, out->count, sizeof *out->items, compare_overrides);
    return 0;
fail:
    limits_overrides_release(out);
    return -1;
}

static const limits_override *find_override(const limits_overrides *o, const char *tenant) {
    if (o == NULL || o->count == 0)
        return NULL;
    limits_override key = {.tenant = (char *)tenant};
    return bsearch(&key, o->items, o->count, sizeof *o->items, compare_overrides);
}

static void merge_override(limits_values *v, const limits_override *o) {
    for (uint32_t f = 0; limits_values_fields[f].key != NULL; f++)
        if (o->set & (UINT32_C(1) << f))
            memcpy((char *)v + limits_values_fields[f].offset,
                   (const char *)&o->values + limits_values_fields[f].offset, sizeof(uint64_t));
}

void limits_resolve(const limits_values *defaults, const limits_overrides *overrides,
                    const char *tenant, limits_values *out) {
    *out = *defaults;
    const limits_override *o = find_override(overrides, tenant);
    if (o != NULL)
        merge_override(out, o);
    if (out->ingestion_burst_samples == 0)
        out->ingestion_burst_samples = out->ingestion_rate_samples > UINT64_MAX / 10
                                           ? UINT64_MAX
                                           : 10 * out->ingestion_rate_samples;
}

static bool has_limit(const limits_values *v) {
    return v->ingestion_rate_samples != 0 || v->max_active_series != 0;
}

/* ---- tenant state ----------------------------------------------------------------------------
 */

typedef struct tenant_state {
    struct tenant_state *next; /* hash chain */
    uint64_t name_hash;
    pthread_mutex_t mu;
    limits_values v; /* resolved; changed only under the table's write lock */
    /* Under mu: */
    double tokens;
    int64_t tokens_at_ns;
    strata_u64_map series;        /* keyed series hash -> last accepted write (ns) */
    int64_t oldest_ns;            /* no entry is older than this (a lower bound) */
    int64_t next_purge_ns;        /* the next periodic drop of expired series */
    int64_t last_purge_ns;        /* the last drop, periodic or under pressure */
    _Atomic int64_t last_used_ns; /* the last limits_admit for the tenant */
    char name[];
} tenant_state;

struct limits_enforcer {
    pthread_rwlock_t lock;
    /* Under lock: */
    limits_values defaults;
    limits_overrides overrides; /* own copy, sorted */
    tenant_state **buckets;
    size_t n_buckets; /* a power of two */
    size_t n_tenants;
    /* Lock-free: */
    atomic_bool enabled;
    _Atomic int64_t next_sweep_ns;
    uint64_t seed; /* keys series hashes and tenant names */
};

static void tenant_free(tenant_state *t) {
    if (t == NULL)
        return;
    strata_u64_map_free(&t->series);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

static int64_t window_of(const tenant_state *t) {
    return t->v.active_series_window_ns > 0 ? t->v.active_series_window_ns : 1;
}

/* How long an idle tenant's state still holds something a fresh one would not. */
static int64_t expiry_of(const tenant_state *t) {
    int64_t e = 0;
    if (t->v.max_active_series != 0)
        e = window_of(t);
    if (t->v.ingestion_rate_samples != 0) {
        double refill =
            (double)t->v.ingestion_burst_samples / (double)t->v.ingestion_rate_samples * 1e9;
        int64_t r = refill >= (double)MAX_REFILL_NS ? MAX_REFILL_NS : (int64_t)refill + 1;
        if (r > e)
            e = r;
    }
    return e;
}

static uint64_t name_hash(const limits_enforcer *l, const char *tenant, size_t len) {
    return strata_hash_bytes(tenant, len, l->seed);
}

static tenant_state *find_tenant(const limits_enforcer *l, const char *tenant, uint64_t h) {
    for (tenant_state *t = l->buckets[h & (l->n_buckets - 1)]; t != NULL; t = t->next)
        if (t->name_hash == h && strcmp(t->name, tenant) == 0)
            return t;
    return NULL;
}

/* Under the write lock. */
static int grow_table(limits_enforcer *l) {
    size_t n = l->n_buckets * 2;
    tenant_state **b = calloc(n, sizeof *b);
    if (b == NULL)
        return -1;
    for (size_t i = 0; i < l->n_buckets; i++) {
        tenant_state *t = l->buckets[i];
        while (t != NULL) {
            tenant_state *next = t->next;
            t->next = b[t->name_hash & (n - 1)];
            b[t->name_hash & (n - 1)] = t;
            t = next;
        }
    }
    free(l->buckets);
    l->buckets = b;
    l->n_buckets = n;
    return 0;
}

/* Under the write lock: the tenant's state, added with a full bucket if absent. */
static tenant_state *add_tenant(limits_enforcer *l, const char *tenant, size_t len, uint64_t h,
                                const limits_values *v, int64_t now_ns) {
    tenant_state *t = find_tenant(l, tenant, h);
    if (t != NULL)
        return t;
    if (l->n_tenants >= l->n_buckets && grow_table(l) != 0)
        return NULL;
    t = calloc(1, sizeof *t + len + 1);
    if (t == NULL)
        return NULL;
    if (pthread_mutex_init(&t->mu, NULL) != 0) {
        free(t);
        return NULL;
    }
    memcpy(t->name, tenant, len + 1);
    t->name_hash = h;
    t->v = *v;
    t->tokens = (double)v->ingestion_burst_samples;
    t->tokens_at_ns = now_ns;
    t->oldest_ns = now_ns;
    t->next_purge_ns = now_ns + window_of(t) / 10;
    t->last_purge_ns = now_ns;
    atomic_store(&t->last_used_ns, now_ns);
    size_t b = h & (l->n_buckets - 1);
    t->next = l->buckets[b];
    l->buckets[b] = t;
    l->n_tenants++;
    return t;
}

/* Under the write lock: unlinks and frees every tenant for which drop(t, ctx) is true. */
static void remove_tenants(limits_enforcer *l, bool (*drop)(const tenant_state *t, const void *ctx),
                           const void *ctx) {
    for (size_t i = 0; i < l->n_buckets; i++) {
        tenant_state **link = &l->buckets[i];
        while (*link != NULL) {
            tenant_state *t = *link;
            if (drop(t, ctx)) {
                *link = t->next;
                tenant_free(t);
                l->n_tenants--;
            } else {
                link = &t->next;
            }
        }
    }
}

/* ---- series ----------------------------------------------------------------------------------
 */

static uint64_t series_key(const limits_enforcer *l, uint64_t hash) {
    uint64_t k = strata_hash_combine(l->seed, hash);
    return k != 0 ? k : 1;
}

/* Under t->mu: rebuilds the table without the series last written at or before now - window. Out
 * of memory leaves the table as it was (the series expire at a later drop). */
static void purge_series(tenant_state *t, int64_t now_ns) {
    int64_t cutoff = now_ns - window_of(t);
    t->last_purge_ns = now_ns;
    t->next_purge_ns = now_ns + window_of(t) / 10;
    if (t->series.slots == NULL || t->oldest_ns > cutoff)
        return; /* nothing can have expired */
    size_t live = 0;
    int64_t oldest = now_ns;
    for (size_t i = 0; i <= t->series.mask; i++)
        if (t->series.slots[i].key != 0 && (int64_t)t->series.slots[i].value > cutoff) {
            live++;
            if ((int64_t)t->series.slots[i].value < oldest)
                oldest = (int64_t)t->series.slots[i].value;
        }
    if (live == t->series.count) {
        t->oldest_ns = oldest;
        return;
    }
    strata_u64_map fresh;
    if (strata_u64_map_init(&fresh, live > 16 ? live : 16) != 0)
        return;
    for (size_t i = 0; i <= t->series.mask; i++)
        if (t->series.slots[i].key != 0 && (int64_t)t->series.slots[i].value > cutoff &&
            strata_u64_map_upsert(&fresh, t->series.slots[i].key, t->series.slots[i].value, NULL) ==
                NULL) {
            strata_u64_map_free(&fresh); /* not reached: init made room for every live entry */
            return;
        }
    strata_u64_map_free(&t->series);
    t->series = fresh;
    t->oldest_ns = oldest;
}

static int compare_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Under t->mu: moves the keys the table lacks to the front of keys[], sorted and without
 * repeats; returns how many. */
static size_t partition_new(const tenant_state *t, uint64_t *keys, size_t n) {
    size_t n_new = 0;
    for (size_t i = 0; i < n; i++)
        if (strata_u64_map_get(&t->series, keys[i]) == NULL) {
            uint64_t k = keys[i];
            keys[i] = keys[n_new];
            keys[n_new++] = k;
        }
    if (n_new > 1) {
        qsort(keys, n_new, sizeof *keys, compare_u64);
        size_t w = 1;
        for (size_t i = 1; i < n_new; i++)
            if (keys[i] != keys[w - 1])
                keys[w++] = keys[i];
        n_new = w;
    }
    return n_new;
}

/* Writes a duration as its largest whole unit ("10m", "90s"). */
static void format_duration(int64_t ns, char *out, size_t size) {
    static const struct {
        int64_t ns;
        const char *unit;
    } units[] = {{3600 * NS_PER_SEC, "h"}, {60 * NS_PER_SEC, "m"}, {NS_PER_SEC, "s"},
                 {1000000, "ms"},          {1000, "us"},           {1, "ns"}};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (ns % units[i].ns == 0 || units[i].ns == 1) {
            snprintf(out, size, "%" PRId64 "%s", ns / units[i].ns, units[i].unit);
            return;
        }
}

/* ---- admission -------------------------------------------------------------------------------
 */

static void refill(tenant_state *t, int64_t now_ns) {
    if (now_ns > t->tokens_at_ns) {
        double burst = (double)t->v.ingestion_burst_samples;
        t->tokens += (double)(now_ns - t->tokens_at_ns) * (double)t->v.ingestion_rate_samples / 1e9;
        if (t->tokens > burst)
            t->tokens = burst;
        t->tokens_at_ns = now_ns;
    }
}

/* Under the table lock (read or write) and t->mu. */
static int admit_locked(tenant_state *t, int64_t now_ns, uint64_t n_samples, uint64_t *keys,
                        size_t n_keys, limits_reason *reason, strata_error *err) {
    const limits_values *v = &t->v;
    if (v->ingestion_rate_samples != 0) {
        refill(t, now_ns);
        if ((double)n_samples > t->tokens) {
            *reason = LIMITS_RATE;
            if (n_samples > v->ingestion_burst_samples)
                return strata_error_set(
                    err, STRATA_RESOURCE_EXHAUSTED,
                    "tenant %s: ingestion rate limit %" PRIu64 " samples/s (burst %" PRIu64
                    ") exceeded: the request has %" PRIu64 " samples, more than the burst",
                    t->name, v->ingestion_rate_samples, v->ingestion_burst_samples, n_samples);
            return strata_error_set(err, STRATA_RESOURCE_EXHAUSTED,
                                    "tenant %s: ingestion rate limit %" PRIu64
                                    " samples/s (burst %" PRIu64 ") exceeded: the request has "
                                    "%" PRIu64 " samples, %" PRIu64
                                    " are available (the rate refills them)",
                                    t->name, v->ingestion_rate_samples, v->ingestion_burst_samples,
                                    n_samples, (uint64_t)t->tokens);
        }
    }
    size_t n_new = 0;
    if (v->max_active_series != 0) {
        if (now_ns >= t->next_purge_ns)
            purge_series(t, now_ns);
        n_new = partition_new(t, keys, n_keys);
        if (t->series.count + n_new > v->max_active_series &&
            now_ns - t->last_purge_ns >= PRESSURE_PURGE_NS) {
            purge_series(t, now_ns); /* at the limit: count only what is still active */
            n_new = partition_new(t, keys, n_keys);
        }
        if (t->series.count + n_new > v->max_active_series) {
            char window[32];
            format_duration(window_of(t), window, sizeof window);
            *reason = LIMITS_SERIES;
            return strata_error_set(err, STRATA_RESOURCE_EXHAUSTED,
                                    "tenant %s: active series limit %" PRIu64
                                    " exceeded: %zu series active within %s, the request adds "
                                    "%zu",
                                    t->name, v->max_active_series, t->series.count, window, n_new);
        }
        /* Commit: new series first (the only step that can fail), then refresh the rest. */
        for (size_t i = 0; i < n_new; i++)
            if (strata_u64_map_upsert(&t->series, keys[i], (uint64_t)now_ns, NULL) == NULL) {
                *reason = LIMITS_NONE;
                return strata_error_oom(err); /* the series added so far are active: harmless */
            }
        for (size_t i = n_new; i < n_keys; i++) {
            uint64_t *last = strata_u64_map_get(&t->series, keys[i]);
            if (last != NULL && (int64_t)*last < now_ns)
                *last = (uint64_t)now_ns;
        }
    }
    if (v->ingestion_rate_samples != 0)
        t->tokens -= (double)n_samples;
    return 0;
}

static bool can_use_random_seed(uint64_t *seed) {
    return getrandom(seed, sizeof *seed, GRND_NONBLOCK) == (ssize_t)sizeof *seed;
}

/* Under the write lock (or before the limits are shared): own copies, sorted. */
static int copy_config(limits_enforcer *l, const limits_values *defaults,
                       const limits_overrides *overrides, strata_error *err) {
    limits_overrides copy = {0};
    size_t n = overrides != NULL ? overrides->count : 0;
    if (n > 0 && (copy.items = calloc(n, sizeof *copy.items)) == NULL)
        return strata_error_oom(err);
    for (size_t i = 0; i < n; i++) {
        copy.items[i] = overrides->items[i];
        if ((copy.items[i].tenant = strdup(overrides->items[i].tenant)) == NULL) {
            limits_overrides_release(&copy);
            return strata_error_oom(err);
        }
        copy.count++;
    }
    if (copy.count > 1) /* items is NULL without overrides: no qsort(NULL, 0) (UBSan) */
        qsort(copy.items, copy.count, sizeof *copy.items, compare_overrides);
    bool enabled = has_limit(defaults);
    for (size_t i = 0; i < copy.count && !enabled; i++) {
        limits_values v;
        limits_resolve(defaults, &copy, copy.items[i].tenant, &v);
        enabled = has_limit(&v);
    }
    limits_overrides_release(&l->overrides);
    l->overrides = copy;
    l->defaults = *defaults;
    atomic_store(&l->enabled, enabled);
    return 0;
}

int limits_new(const limits_values *defaults, const limits_overrides *overrides,
               limits_enforcer **out, strata_error *err) {
    limits_enforcer *l = calloc(1, sizeof *l);
    if (l == NULL)
        return strata_error_oom(err);
    pthread_rwlockattr_t attr;
    if (pthread_rwlockattr_init(&attr) != 0) {
        free(l);
        return strata_error_oom(err);
    }
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    int rc = pthread_rwlock_init(&l->lock, &attr);
    pthread_rwlockattr_destroy(&attr);
    if (rc != 0) {
        free(l);
        return strata_error_set(err, STRATA_INTERNAL, "limits: cannot create a lock");
    }
    if (!can_use_random_seed(&l->seed)) /* no entropy yet (early boot): a time-based seed */
        l->seed = strata_hash_u64((uint64_t)time(NULL) ^ (uint64_t)(uintptr_t)l);
    l->n_buckets = 64;
    if ((l->buckets = calloc(l->n_buckets, sizeof *l->buckets)) == NULL) {
        limits_free(l);
        return strata_error_oom(err);
    }
    if (copy_config(l, defaults, overrides, err) != 0) {
        limits_free(l);
        return -1;
    }
    *out = l;
    return 0;
}

/* Re-resolves a tenant under the write lock; true when it is left without limits. */
static bool reapply_tenant(const tenant_state *ct, const void *ctx) {
    const limits_enforcer *l = ctx;
    tenant_state *t = (tenant_state *)ct;
    limits_values v;
    limits_resolve(&l->defaults, &l->overrides, t->name, &v);
    if (!has_limit(&v))
        return true;
    pthread_mutex_lock(&t->mu);
    if (v.ingestion_rate_samples != 0 && t->v.ingestion_rate_samples == 0) {
        t->tokens = (double)v.ingestion_burst_samples; /* newly limited: starts full */
        t->tokens_at_ns = atomic_load(&t->last_used_ns);
    }
    if (t->tokens > (double)v.ingestion_burst_samples)
        t->tokens = (double)v.ingestion_burst_samples;
    if (v.max_active_series == 0)
        strata_u64_map_free(&t->series);
    t->v = v;
    pthread_mutex_unlock(&t->mu);
    return false;
}

int limits_apply(limits_enforcer *l, const limits_values *defaults,
                 const limits_overrides *overrides, strata_error *err) {
    pthread_rwlock_wrlock(&l->lock);
    int rc = copy_config(l, defaults, overrides, err);
    if (rc == 0)
        remove_tenants(l, reapply_tenant, l);
    pthread_rwlock_unlock(&l->lock);
    return rc;
}

void limits_free(limits_enforcer *l) {
    if (l == NULL)
        return;
    for (size_t i = 0; i < l->n_buckets; i++) {
        tenant_state *t = l->buckets[i];
        while (t != NULL) {
            tenant_state *next = t->next;
            tenant_free(t);
            t = next;
        }
    }
    free(l->buckets);
    limits_overrides_release(&l->overrides);
    pthread_rwlock_destroy(&l->lock);
    free(l);
}

bool limits_enabled(const limits_enforcer *l) {
    return l != NULL && atomic_load(&l->enabled);
}

const char *limits_reason_name(limits_reason reason) {
    switch (reason) {
        case LIMITS_NONE:
            return "none";
        case LIMITS_RATE:
            return "rate";
        case LIMITS_SERIES:
            return "series";
    }
    return "unknown";
}

static bool idle_expired(const tenant_state *t, const void *ctx) {
    int64_t now_ns = *(const int64_t *)ctx;
    return now_ns - atomic_load(&t->last_used_ns) >= expiry_of(t);
}

void limits_sweep(limits_enforcer *l, int64_t now_ns) {
    pthread_rwlock_wrlock(&l->lock);
    remove_tenants(l, idle_expired, &now_ns);
    pthread_rwlock_unlock(&l->lock);
}

static void maybe_sweep(limits_enforcer *l, int64_t now_ns) {
    int64_t due = atomic_load(&l->next_sweep_ns);
    if (now_ns < due)
        return;
    if (atomic_compare_exchange_strong(&l->next_sweep_ns, &due, now_ns + LIMITS_SWEEP_INTERVAL_NS))
        limits_sweep(l, now_ns);
}

int limits_admit(limits_enforcer *l, const char *tenant, int64_t now_ns, uint64_t n_samples,
                 uint64_t *series, size_t n_series, limits_reason *reason, strata_error *err) {
    *reason = LIMITS_NONE;
    if (!limits_enabled(l))
        return 0;
    maybe_sweep(l, now_ns);
    size_t len = strlen(tenant);
    uint64_t h = name_hash(l, tenant, len);
    pthread_rwlock_rdlock(&l->lock);
    tenant_state *t = find_tenant(l, tenant, h);
    if (t == NULL) {
        limits_values v;
        limits_resolve(&l->defaults, &l->overrides, tenant, &v);
        if (!has_limit(&v)) {
            pthread_rwlock_unlock(&l->lock);
            return 0;
        }
        pthread_rwlock_unlock(&l->lock);
        pthread_rwlock_wrlock(&l->lock);
        limits_resolve(&l->defaults, &l->overrides, tenant, &v); /* a reload may have run */
        if (!has_limit(&v)) {
            pthread_rwlock_unlock(&l->lock);
            return 0;
        }
        if ((t = add_tenant(l, tenant, len, h, &v, now_ns)) == NULL) {
            pthread_rwlock_unlock(&l->lock);
            return strata_error_oom(err);
        }
    }
    for (size_t i = 0; i < n_series; i++)
        series[i] = series_key(l, series[i]);
    pthread_mutex_lock(&t->mu);
    atomic_store(&t->last_used_ns, now_ns);
    int rc = admit_locked(t, now_ns, n_samples, series, n_series, reason, err);
    pthread_mutex_unlock(&t->mu);
    pthread_rwlock_unlock(&l->lock);
    return rc;
}

void limits_get_stats(limits_enforcer *l, limits_stats *out) {
    memset(out, 0, sizeof *out);
    pthread_rwlock_rdlock(&l->lock);
    out->tenants = l->n_tenants;
    out->bytes = l->n_buckets * sizeof *l->buckets;
    for (size_t i = 0; i < l->n_buckets; i++)
        for (tenant_state *t = l->buckets[i]; t != NULL; t = t->next) {
            pthread_mutex_lock(&t->mu);
            out->series += t->series.count;
            out->bytes += sizeof *t + strlen(t->name) + 1;
            if (t->series.slots != NULL)
                out->bytes += (t->series.mask + 1) * 2 * sizeof(uint64_t);
            pthread_mutex_unlock(&t->mu);
        }
    pthread_rwlock_unlock(&l->lock);
}

void limits_tenant_values(limits_enforcer *l, const char *tenant, limits_values *out) {
    pthread_rwlock_rdlock(&l->lock);
    limits_resolve(&l->defaults, &l->overrides, tenant, out);
    pthread_rwlock_unlock(&l->lock);
}

uint64_t limits_tenant_series(limits_enforcer *l, const char *tenant) {
    uint64_t n = 0;
    pthread_rwlock_rdlock(&l->lock);
    tenant_state *t = find_tenant(l, tenant, name_hash(l, tenant, strlen(tenant)));
    if (t != NULL) {
        pthread_mutex_lock(&t->mu);
        n = t->series.count;
        pthread_mutex_unlock(&t->mu);
    }
    pthread_rwlock_unlock(&l->lock);
    return n;
}
