/*
 * compactor.c - see compactor.h.
 *
 * State between cycles is only a cache: per tenant, the blocks seen by the last scan with their
 * decoded meta.json and deletion times (all immutable once written), the windows that exceeded the
 * memory limit, and the jobs that failed in a row. Everything else is re-read from the bucket each
 * cycle, so a restart loses nothing but the cache (a failing job's count starts again at 0).
 *
 * Failing jobs. A merge that fails because of what its sources hold fails the same way every
 * cycle. When the merger names the culprit (a corrupt source) it is marked at once. Otherwise the
 * job is remembered by its source set (an order-independent hash of the ULIDs) with a count of
 * consecutive failures; failures that retrying can cure (a bucket error, UNAVAILABLE,
 * DEADLINE_EXCEEDED, ABORTED, CANCELLED, PERMISSION_DENIED, UNAUTHENTICATED; RESOURCE_EXHAUSTED
 * splits the job) leave the count as it is, a success or a cycle that does not run the job forgets
 * it, and the MAX_JOB_FAILURES-th failure marks the sources no-compact (reason "repeated-failure",
 * the last error as details): the job is given up instead of failing forever while level-1 blocks
 * pile up.
 */
#include "compactor.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "block/block_format.h"
#include "block/bucket_index.h"
#include "common/array.h"
#include "common/clock.h"
#include "common/hash.h"
#include "common/log.h"
#include "planner.h"

#define COMPONENT "compactor"
/* Unfinished uploads are deleted only when older than max(delete_delay, this). */
#define PARTIAL_MIN_AGE_MS (60 * 60 * 1000)
/* Plan/run rounds per tenant and cycle (a safety net; each round makes progress). */
#define MAX_ROUNDS 10000
/* Consecutive failures (cycles) of one job with an error in the data before its sources are
 * marked no-compact. */
#define MAX_JOB_FAILURES 3

const config_field compactor_tenant_override_fields[] = {
    {.key = "tenant",
     .kind = CONFIG_STRING,
     .offset = offsetof(compactor_tenant_override, tenant),
     .required = true},
    {.key = "retention",
     .kind = CONFIG_DURATION,
     .offset = offsetof(compactor_tenant_override, retention_ns),
     .required = true},
    {.key = NULL},
};

/* Bounds of thread counts, intervals and delays (lib/config: CONFIG_DEFINE_BOUNDS). */
CONFIG_DEFINE_BOUNDS(compactor_compaction_interval_bounds, CONFIG_DURATION, "100ms", "24h")
CONFIG_DEFINE_BOUNDS(compactor_max_job_memory_bounds, CONFIG_BYTES, "1MiB", NULL)

const config_field compactor_config_fields[] = {
    {.key = "enabled",
     .kind = CONFIG_BOOL,
     .offset = offsetof(compactor_config, enabled),
     .default_text = "true"},
    {.key = "compaction_interval",
     .kind = CONFIG_DURATION,
     .offset = offsetof(compactor_config, compaction_interval_ns),
     .default_text = "1m",
     .decode = compactor_compaction_interval_bounds},
    {.key = "block_ranges",
     .kind = CONFIG_STRING_LIST,
     .offset = offsetof(compactor_config, block_ranges),
     .default_text = "[5m, 2h, 24h]"},
    {.key = "consistency_delay",
     .kind = CONFIG_DURATION,
     .offset = offsetof(compactor_config, consistency_delay_ns),
     .default_text = "1m"},
    {.key = "delete_delay",
     .kind = CONFIG_DURATION,
     .offset = offsetof(compactor_config, delete_delay_ns),
     .default_text = "30m"},
    {.key = "retention",
     .kind = CONFIG_DURATION,
     .offset = offsetof(compactor_config, retention_ns),
     .default_text = "0"},
    {.key = "tenant_overrides",
     .kind = CONFIG_STRUCT_LIST,
     .offset = offsetof(compactor_config, tenant_overrides),
     .fields = compactor_tenant_override_fields,
     .elem_size = sizeof(compactor_tenant_override),
     .default_text = "[]"},
    {.key = "max_job_memory",
     .kind = CONFIG_BYTES,
     .offset = offsetof(compactor_config, max_job_memory),
     .default_text = "1GiB",
     .decode = compactor_max_job_memory_bounds},
    {.key = "progress_interval",
     .kind = CONFIG_DURATION,
     .offset = offsetof(compactor_config, progress_interval_ns),
     .default_text = "10s"},
    {.key = "spool_directory",
     .kind = CONFIG_STRING,
     .offset = offsetof(compactor_config, spool_directory)},
    {.key = NULL},
};

/* One block directory as the last scan saw it. */
typedef struct block_entry {
    ulid id;
    char text[ULID_STRING_LEN + 1];
    bool has_meta;         /* meta.json listed */
    bool meta_ok;          /* meta decoded */
    bool deletion_mark;    /* deletion-mark.json listed */
    bool no_compact;       /* no-compact-mark.json listed */
    int64_t deletion_time; /* unix seconds; valid when deletion_mark */
    bool deletion_time_known;
    block_meta meta;
} block_entry;

typedef struct skipped_window {
    size_t range_index;
    int64_t start_ms;
    bool persistent; /* exceeded the memory limit: for the process' life; else this cycle */
} skipped_window;

/* A job that failed in its last attempt with an error retrying does not cure. */
typedef struct job_failure {
    uint64_t key;   /* job_key of its sources */
    uint64_t cycle; /* the tenant's cycle of the last attempt */
    int failures;   /* consecutive */
} job_failure;

typedef struct tenant_state {
    char *name;
    block_entry *entries;
    size_t n_entries, cap_entries;
    skipped_window *skipped; /* windows not to plan again (see skipped_window) */
    size_t n_skipped, cap_skipped;
    job_failure *failures; /* failing jobs, at most one entry per job */
    size_t n_failures, cap_failures;
    uint64_t cycle; /* compaction passes over this tenant */
    bool seen;      /* listed in the current cycle */
} tenant_state;

typedef struct compactor_metrics {
    metrics_counter *cycles;
    metrics_counter *jobs;
    metrics_counter *jobs_failed;
    metrics_counter *blocks_in;
    metrics_counter *blocks_out;
    metrics_counter *bytes_in;
    metrics_counter *bytes_out;
    metrics_counter *samples_in;
    metrics_counter *samples_out;
    metrics_counter *profiles_in;
    metrics_counter *duplicates;
    metrics_counter_vec *marks;
    metrics_counter *deletions;
    metrics_counter *partial_deletions;
    metrics_counter *no_compact;
    metrics_counter *splits;
    metrics_counter *jobs_given_up;
    metrics_counter *failure_marks;
    metrics_gauge *failing_jobs;
    metrics_gauge *lag;
    metrics_gauge *halted;
    metrics_gauge *last_success;
    metrics_gauge *blocks;
} compactor_metrics;

struct compactor {
    compactor_config config;
    bucket *store;
    plan_options plan;
    compactor_merge_fn merge;
    void (*listener)(void *ctx, const char *tenant, const char *ulid);
    void *listener_ctx;
    compactor_metrics m;
    tenant_state *tenants;
    size_t n_tenants, cap_tenants;
    pthread_mutex_t mu; /* guards stats, stopping and the wake-up */
    pthread_cond_t wake;
    compactor_stats stats;
    bool stopping;
    bool started;
    pthread_t thread;
};

static void count(compactor *c, uint64_t *stat, metrics_counter *counter, uint64_t n) {
    pthread_mutex_lock(&c->mu);
    *stat += n;
    pthread_mutex_unlock(&c->mu);
    metrics_counter_add(counter, (int64_t)n);
}

static bool stopping(compactor *c) {
    pthread_mutex_lock(&c->mu);
    bool s = c->stopping;
    pthread_mutex_unlock(&c->mu);
    return s;
}

static int64_t now_ms(void) {
    return strata_now_ns() / STRATA_NS_PER_MS;
}

static const char *quote(const char *s, char *buf, size_t len) {
    return strata_log_quote(s, buf, len);
}

/* ---- setup ------------------------------------------------------------------------------- */

static int create_metrics(compactor *c, metrics_registry *r, strata_error *err) {
    if (r == NULL)
        return 0;
    struct {
        metrics_counter **slot;
        const char *name, *help;
    } counters[] = {
        {&c->m.cycles, "strata_compactor_cycles_total", "Compaction cycles run."},
        {&c->m.jobs, "strata_compactor_jobs_total", "Merge jobs run (each split half counts)."},
        {&c->m.jobs_failed, "strata_compactor_jobs_failed_total",
         "Merge jobs that failed (corrupt sources, bucket errors, memory limit)."},
        {&c->m.blocks_in, "strata_compactor_blocks_in_total", "Source blocks merged."},
        {&c->m.blocks_out, "strata_compactor_blocks_out_total", "Merged blocks written."},
        {&c->m.bytes_in, "strata_compactor_bytes_in_total", "Bytes read from sources."},
        {&c->m.bytes_out, "strata_compactor_bytes_out_total", "Bytes of merged blocks written."},
        {&c->m.samples_in, "strata_compactor_samples_in_total", "Sample rows read from sources."},
        {&c->m.samples_out, "strata_compactor_samples_out_total",
         "Sample rows written to merged blocks."},
        {&c->m.profiles_in, "strata_compactor_profiles_in_total", "Profiles read from sources."},
        {&c->m.duplicates, "strata_compactor_duplicate_profiles_total",
         "Identical profiles dropped while merging."},
        {&c->m.deletions, "strata_compactor_blocks_deleted_total",
         "Marked blocks deleted after delete_delay."},
        {&c->m.partial_deletions, "strata_compactor_partial_blocks_deleted_total",
         "Unfinished uploads (no meta.json) deleted."},
        {&c->m.no_compact, "strata_compactor_no_compact_marks_total",
         "Blocks marked no-compact (corrupt or unreadable, or sources of a job given up)."},
        {&c->m.splits, "strata_compactor_job_splits_total",
         "Jobs split in halves after exceeding max_job_memory."},
        {&c->m.jobs_given_up, "strata_compactor_jobs_given_up_total",
         "Jobs given up after failing 3 cycles in a row with an error in the data (not the "
         "bucket); their sources are marked no-compact."},
        {&c->m.failure_marks, "strata_compactor_repeated_failure_marks_total",
         "Blocks marked no-compact because their job failed 3 cycles in a row."},
    };
    for (size_t i = 0; i < sizeof counters / sizeof counters[0]; i++) {
        metrics_opts o = {.name = counters[i].name, .help = counters[i].help};
        if ((*counters[i].slot = metrics_counter_new(r, &o, err)) == NULL)
            return -1;
    }
    static const char *const reason_label[] = {"reason"};
    metrics_opts o = {.name = "strata_compactor_deletion_marks_total",
                      .help = "Deletion marks written, by reason (compacted, retention).",
                      .label_names = reason_label,
                      .n_labels = 1};
    if ((c->m.marks = metrics_counter_vec_new(r, &o, err)) == NULL)
        return -1;
    struct {
        metrics_gauge **slot;
        const char *name, *help;
    } gauges[] = {
        {&c->m.lag, "strata_compactor_lag_seconds",
         "Now minus the maxTime of the newest block at level 2 or above (the oldest level-1 "
         "block's minTime where none exists yet), the largest over tenants."},
        {&c->m.halted, "strata_compactor_halted",
         "1 if compaction stopped on an error; the compactor never halts, so always 0."},
        {&c->m.last_success, "strata_compactor_last_successful_run_timestamp_seconds",
         "When the last cycle finished without a listing failure."},
        {&c->m.blocks, "strata_compactor_blocks", "Committed blocks seen by the last cycle."},
        {&c->m.failing_jobs, "strata_compactor_failing_jobs",
         "Jobs whose last attempt failed with an error in the data and that are not given up "
         "yet, over all tenants, after the last cycle."},
    };
    for (size_t i = 0; i < sizeof gauges / sizeof gauges[0]; i++) {
        metrics_opts go = {.name = gauges[i].name, .help = gauges[i].help};
        if ((*gauges[i].slot = metrics_gauge_new(r, &go, err)) == NULL)
            return -1;
    }
    metrics_gauge_set(c->m.halted, 0);
    return 0;
}

/* block_ranges as milliseconds, checked (a duration of at least 1ms each, increasing multiples). */
static int parse_ranges(const compactor_config *config, int64_t *ranges_ms, size_t *n,
                        strata_error *err) {
    const config_string_list *l = &config->block_ranges;
    if (l->count > PLANNER_MAX_RANGES)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "compactor.block_ranges: at most %d ranges", PLANNER_MAX_RANGES);
    for (size_t i = 0; i < l->count; i++) {
        int64_t ns;
        if (!config_parse_duration(l->items[i], &ns) || ns < STRATA_NS_PER_MS)
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "compactor.block_ranges[%zu]: want a duration of at least 1ms "
                                    "like 5m or 2h, got \"%s\"",
                                    i, l->items[i]);
        ranges_ms[i] = ns / STRATA_NS_PER_MS;
    }
    *n = l->count;
    if (plan_validate_ranges(ranges_ms, *n, err) != 0)
        return strata_error_wrap(err, "compactor");
    return 0;
}

int compactor_config_validate(const compactor_config *config, strata_error *err) {
    int64_t ranges_ms[PLANNER_MAX_RANGES];
    size_t n = 0;
    return parse_ranges(config, ranges_ms, &n, err);
}

int compactor_new(const compactor_config *config, bucket *store, metrics_registry *registry,
                  compactor **out, strata_error *err) {
    compactor *c = calloc(1, sizeof *c);
    if (c == NULL)
        return strata_error_oom(err);
    c->config = *config;
    c->store = store;
    c->merge = block_merge;
    pthread_condattr_t attr;
    if (pthread_condattr_init(&attr) != 0 ||
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC) != 0 ||
        pthread_mutex_init(&c->mu, NULL) != 0 || pthread_cond_init(&c->wake, &attr) != 0) {
        free(c);
        return strata_error_set(err, STRATA_INTERNAL, "cannot initialise compactor locks");
    }
    pthread_condattr_destroy(&attr);
    c->plan.consistency_delay_ms = config->consistency_delay_ns / STRATA_NS_PER_MS;
    const char *bad = NULL;
    if (config->compaction_interval_ns <= 0)
        bad = "compactor.compaction_interval: want more than 0";
    else if (config->consistency_delay_ns < 0 || config->delete_delay_ns < 0 ||
             config->retention_ns < 0)
        bad = "compactor: delays and retention must not be negative";
    else if (config->max_job_memory < (1u << 20))
        bad = "compactor.max_job_memory: want at least 1MiB";
    if (bad != NULL || parse_ranges(config, c->plan.ranges_ms, &c->plan.n_ranges, err) != 0 ||
        create_metrics(c, registry, err) != 0) {
        if (bad != NULL)
            strata_error_set(err, STRATA_INVALID_ARGUMENT, "%s", bad);
        compactor_free(c);
        return -1;
    }
    *out = c;
    return 0;
}

void compactor_set_merge_fn(compactor *c, compactor_merge_fn fn) {
    c->merge = fn;
}

void compactor_set_block_listener(compactor *c,
                                  void (*fn)(void *ctx, const char *tenant, const char *ulid),
                                  void *ctx) {
    c->listener = fn;
    c->listener_ctx = ctx;
}

static void entries_free(block_entry *entries, size_t n) {
    for (size_t i = 0; i < n; i++)
        block_meta_free(&entries[i].meta);
    free(entries);
}

static void tenant_free(tenant_state *t) {
    entries_free(t->entries, t->n_entries);
    free(t->skipped);
    free(t->failures);
    free(t->name);
}

void compactor_free(compactor *c) {
    if (c == NULL)
        return;
    compactor_stop(c);
    for (size_t i = 0; i < c->n_tenants; i++)
        tenant_free(&c->tenants[i]);
    free(c->tenants);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->wake);
    free(c);
}

void compactor_get_stats(compactor *c, compactor_stats *out) {
    pthread_mutex_lock(&c->mu);
    *out = c->stats;
    pthread_mutex_unlock(&c->mu);
}

/* ---- scanning ---------------------------------------------------------------------------- */

typedef struct scan_ctx {
    const char *tenant;
    size_t tenant_len;
    block_entry *entries;
    size_t n, cap;
} scan_ctx;

/* Keys arrive sorted, so the files of one block are adjacent. */
static int scan_key(const char *key, void *arg, strata_error *err) {
    scan_ctx *s = arg;
    const char *rest = key + s->tenant_len + 1; /* after "<tenant>/" */
    const char *slash = strchr(rest, '/');
    ulid id;
    if (slash == NULL || slash - rest != ULID_STRING_LEN ||
        ulid_parse(rest, ULID_STRING_LEN, &id, NULL) != 0)
        return 0; /* bucket-index.json, or not a block */
    const char *file = slash + 1;
    if (s->n == 0 || ulid_compare(&s->entries[s->n - 1].id, &id) != 0) {
        if (STRATA_ARRAY_RESERVE_OR_OOM(s->entries, s->cap, s->n + 1, err) != 0)
            return -1;
        block_entry *e = &s->entries[s->n++];
        memset(e, 0, sizeof *e);
        block_meta_init(&e->meta);
        e->id = id;
        ulid_format(&id, e->text);
    }
    block_entry *e = &s->entries[s->n - 1];
    if (strcmp(file, BLOCK_META_FILE) == 0)
        e->has_meta = true;
    else if (strcmp(file, BLOCK_DELETION_MARK_FILE) == 0)
        e->deletion_mark = true;
    else if (strcmp(file, BLOCK_NO_COMPACT_MARK_FILE) == 0)
        e->no_compact = true;
    return 0;
}

static block_entry *find_entry(block_entry *entries, size_t n, const ulid *id) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int cmp = ulid_compare(&entries[mid].id, id);
        if (cmp == 0)
            return &entries[mid];
        if (cmp < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

static void block_key(char *out, size_t len, const char *tenant, const char *id, const char *file) {
    snprintf(out, len, "%s/%s/%s", tenant, id, file);
}

static int write_no_compact_mark(compactor *c, const char *tenant, block_entry *e,
                                 const char *reason, const char *details);

/* Fills e->meta (from the previous scan's cache, else meta.json). */
static void load_meta(compactor *c, const char *tenant, block_entry *e, tenant_state *old) {
    block_entry *cached = old == NULL ? NULL : find_entry(old->entries, old->n_entries, &e->id);
    if (cached != NULL && cached->meta_ok) {
        e->meta = cached->meta; /* moved: the old entry is freed without it */
        block_meta_init(&cached->meta);
        cached->meta_ok = false;
        e->meta_ok = true;
        return;
    }
    char key[BUCKET_KEY_MAX];
    block_key(key, sizeof key, tenant, e->text, BLOCK_META_FILE);
    strata_buffer json = STRATA_BUFFER_INIT;
    strata_error err;
    strata_error_clear(&err);
    if (bucket_get(c->store, key, &json, &err) != 0) {
        if (err.code == STRATA_NOT_FOUND)
            e->has_meta = false; /* deleted since the listing */
        else
            strata_log_warn(COMPONENT, "cannot read meta.json", "tenant=%s ulid=%s error=%s",
                            tenant, e->text, quote(err.message, (char[600]){0}, 600));
    } else if (block_meta_decode((const char *)json.data, json.len, &e->meta, &err) != 0) {
        strata_log_warn(COMPONENT, "corrupt meta.json", "tenant=%s ulid=%s error=%s", tenant,
                        e->text, quote(err.message, (char[600]){0}, 600));
        if (!e->no_compact)
            write_no_compact_mark(c, tenant, e, "corrupt-meta", err.message);
    } else {
        e->meta_ok = true;
    }
    strata_buffer_free(&json);
}

/* Fills e->deletion_time (cache, else deletion-mark.json; an unreadable mark counts as now). */
static void load_deletion_time(compactor *c, const char *tenant, block_entry *e,
                               tenant_state *old) {
    block_entry *cached = old == NULL ? NULL : find_entry(old->entries, old->n_entries, &e->id);
    if (cached != NULL && cached->deletion_mark && cached->deletion_time_known) {
        e->deletion_time = cached->deletion_time;
        e->deletion_time_known = true;
        return;
    }
    char key[BUCKET_KEY_MAX];
    block_key(key, sizeof key, tenant, e->text, BLOCK_DELETION_MARK_FILE);
    strata_buffer json = STRATA_BUFFER_INIT;
    strata_error err;
    block_deletion_mark mark = {0};
    e->deletion_time = now_ms() / 1000;
    if (bucket_get(c->store, key, &json, &err) == 0 &&
        block_deletion_mark_decode((const char *)json.data, json.len, &mark, &err) == 0) {
        e->deletion_time = mark.deletion_time;
        block_deletion_mark_free(&mark);
    }
    e->deletion_time_known = true;
    strata_buffer_free(&json);
}

/* Lists tenant and replaces t's entries with what the bucket holds now. */
static int scan_tenant(compactor *c, tenant_state *t, strata_error *err) {
    scan_ctx s = {.tenant = t->name, .tenant_len = strlen(t->name)};
    if (bucket_iterate(c->store, t->name, true, scan_key, &s, err) != 0) {
        entries_free(s.entries, s.n);
        return -1;
    }
    tenant_state old = *t;
    for (size_t i = 0; i < s.n; i++) {
        if (s.entries[i].has_meta)
            load_meta(c, t->name, &s.entries[i], &old);
        if (s.entries[i].deletion_mark)
            load_deletion_time(c, t->name, &s.entries[i], &old);
    }
    entries_free(old.entries, old.n_entries);
    t->entries = s.entries;
    t->n_entries = s.n;
    t->cap_entries = s.cap;
    return 0;
}

/* ---- marks and deletion ------------------------------------------------------------------ */

static int write_deletion_mark(compactor *c, const char *tenant, block_entry *e, const char *reason,
                               const char *details) {
    block_deletion_mark mark = {
        .id = e->id, .deletion_time = now_ms() / 1000, .details = (char *)details};
    strata_buffer json = STRATA_BUFFER_INIT;
    strata_error err;
    char key[BUCKET_KEY_MAX];
    block_key(key, sizeof key, tenant, e->text, BLOCK_DELETION_MARK_FILE);
    int rc = block_deletion_mark_encode(&mark, &json, &err);
    if (rc == 0)
        rc = bucket_upload(c->store, key, json.data, json.len, &err);
    strata_buffer_free(&json);
    if (rc != 0) {
        strata_log_warn(COMPONENT, "cannot write deletion mark", "tenant=%s ulid=%s error=%s",
                        tenant, e->text, quote(err.message, (char[600]){0}, 600));
        return -1;
    }
    e->deletion_mark = true;
    e->deletion_time = mark.deletion_time;
    e->deletion_time_known = true;
    const char *label = reason;
    metrics_counter_inc(metrics_counter_vec_with(c->m.marks, &label));
    count(c, &c->stats.deletion_marks, NULL, 1);
    strata_log_info(COMPONENT, "marked for deletion", "tenant=%s ulid=%s reason=%s", tenant,
                    e->text, reason);
    return 0;
}

static int write_no_compact_mark(compactor *c, const char *tenant, block_entry *e,
                                 const char *reason, const char *details) {
    block_no_compact_mark mark = {.id = e->id,
                                  .no_compact_time = now_ms() / 1000,
                                  .reason = (char *)reason,
                                  .details = (char *)details};
    strata_buffer json = STRATA_BUFFER_INIT;
    strata_error err;
    char key[BUCKET_KEY_MAX];
    block_key(key, sizeof key, tenant, e->text, BLOCK_NO_COMPACT_MARK_FILE);
    int rc = block_no_compact_mark_encode(&mark, &json, &err);
    if (rc == 0)
        rc = bucket_upload(c->store, key, json.data, json.len, &err);
    strata_buffer_free(&json);
    if (rc != 0) {
        strata_log_warn(COMPONENT, "cannot write no-compact mark", "tenant=%s ulid=%s error=%s",
                        tenant, e->text, quote(err.message, (char[600]){0}, 600));
        return -1;
    }
    e->no_compact = true;
    count(c, &c->stats.no_compact_marks, c->m.no_compact, 1);
    strata_log_warn(COMPONENT, "marked no-compact", "tenant=%s ulid=%s reason=%s details=%s",
                    tenant, e->text, reason, quote(details, (char[600]){0}, 600));
    return 0;
}

typedef struct key_list {
    char **keys;
    size_t n, cap;
} key_list;

static int collect_key(const char *key, void *arg, strata_error *err) {
    key_list *l = arg;
    if (STRATA_ARRAY_RESERVE_OR_OOM(l->keys, l->cap, l->n + 1, err) != 0)
        return -1;
    if ((l->keys[l->n] = strdup(key)) == NULL)
        return strata_error_oom(err);
    l->n++;
    return 0;
}

static bool key_is_file(const char *key, const char *file) {
    size_t kl = strlen(key), fl = strlen(file);
    return kl > fl && key[kl - fl - 1] == '/' && strcmp(key + kl - fl, file) == 0;
}

/* Deletes every object of a block: meta.json first, deletion-mark.json last. */
static int delete_block(compactor *c, const char *tenant, const block_entry *e, strata_error *err) {
    char dir[BUCKET_KEY_MAX];
    snprintf(dir, sizeof dir, "%s/%s/", tenant, e->text);
    key_list l = {0};
    int rc = bucket_iterate(c->store, dir, true, collect_key, &l, err);
    for (int pass = 0; pass < 3 && rc == 0; pass++)
        for (size_t i = 0; i < l.n && rc == 0; i++) {
            bool meta = key_is_file(l.keys[i], BLOCK_META_FILE);
            bool mark = key_is_file(l.keys[i], BLOCK_DELETION_MARK_FILE);
            if ((pass == 0 && meta) || (pass == 1 && !meta && !mark) || (pass == 2 && mark))
                rc = bucket_delete(c->store, l.keys[i], err);
        }
    for (size_t i = 0; i < l.n; i++)
        free(l.keys[i]);
    free(l.keys);
    return rc;
}

/* Marks blocks that a committed block already contains (sources or parents). */
static void reconcile_replaced(compactor *c, tenant_state *t) {
    for (size_t i = 0; i < t->n_entries; i++) {
        const block_entry *y = &t->entries[i];
        if (!y->meta_ok)
            continue;
        for (size_t k = 0; k < y->meta.n_sources + y->meta.n_parents; k++) {
            const ulid *id = k < y->meta.n_sources ? &y->meta.sources[k]
                                                   : &y->meta.parents[k - y->meta.n_sources].id;
            if (ulid_compare(id, &y->id) == 0)
                continue;
            block_entry *x = find_entry(t->entries, t->n_entries, id);
            if (x == NULL || x->deletion_mark || !x->has_meta)
                continue;
            char details[128];
            snprintf(details, sizeof details, BLOCK_DELETION_COMPACTED_INTO "%s", y->text);
            write_deletion_mark(c, t->name, x, "compacted", details);
        }
    }
}

static int64_t tenant_retention_ns(const compactor *c, const char *tenant) {
    const compactor_tenant_override *o = c->config.tenant_overrides.items;
    for (size_t i = 0; i < c->config.tenant_overrides.count; i++)
        if (strcmp(o[i].tenant, tenant) == 0)
            return o[i].retention_ns;
    return c->config.retention_ns;
}

/* Marks the blocks past the tenant's retention; returns how many it marked. */
static size_t apply_retention(compactor *c, tenant_state *t) {
    int64_t retention_ms = tenant_retention_ns(c, t->name) / STRATA_NS_PER_MS;
    if (retention_ms <= 0)
        return 0;
    int64_t now = now_ms();
    size_t marked = 0;
    for (size_t i = 0; i < t->n_entries; i++) {
        block_entry *e = &t->entries[i];
        if (e->meta_ok && !e->deletion_mark && e->meta.max_time_ms <= now - retention_ms &&
            write_deletion_mark(c, t->name, e, "retention", "past the tenant's retention") == 0)
            marked++;
    }
    return marked;
}

static void delete_due(compactor *c, tenant_state *t) {
    int64_t now = now_ms();
    int64_t delay_ms = c->config.delete_delay_ns / STRATA_NS_PER_MS;
    int64_t partial_age = delay_ms > PARTIAL_MIN_AGE_MS ? delay_ms : PARTIAL_MIN_AGE_MS;
    for (size_t i = 0; i < t->n_entries; i++) {
        block_entry *e = &t->entries[i];
        bool due = e->deletion_mark && e->deletion_time * 1000 + delay_ms <= now;
        bool partial =
            !e->deletion_mark && !e->has_meta && ulid_time_ms(&e->id) + partial_age <= now;
        if (!due && !partial)
            continue;
        strata_error err;
        if (delete_block(c, t->name, e, &err) != 0) {
            strata_log_warn(COMPONENT, "cannot delete block", "tenant=%s ulid=%s error=%s", t->name,
                            e->text, quote(err.message, (char[600]){0}, 600));
            continue;
        }
        e->has_meta = e->meta_ok = e->deletion_mark = e->no_compact = false;
        if (due)
            count(c, &c->stats.blocks_deleted, c->m.deletions, 1);
        else
            count(c, &c->stats.partial_deleted, c->m.partial_deletions, 1);
        strata_log_info(COMPONENT, due ? "deleted block" : "deleted unfinished upload",
                        "tenant=%s ulid=%s", t->name, e->text);
    }
}

/* ---- compaction -------------------------------------------------------------------------- */

typedef struct job_ctx {
    compactor *c;
    tenant_state *t;
    const plan_job *job;
    int64_t last_progress_ns;
    int64_t started_ns;
} job_ctx;

static void on_progress(void *arg, const block_merge_stats *st, uint64_t done, uint64_t total) {
    job_ctx *j = arg;
    int64_t now = strata_monotonic_ns();
    if (now - j->last_progress_ns < j->c->config.progress_interval_ns && done < total)
        return;
    j->last_progress_ns = now;
    strata_log_info(COMPONENT, "merge progress",
                    "tenant=%s window_start=%lld series_done=%llu series_total=%llu "
                    "profiles_in=%llu samples_out=%llu elapsed_ms=%lld",
                    j->t->name, (long long)j->job->window_start_ms, (unsigned long long)done,
                    (unsigned long long)total, (unsigned long long)st->profiles_in,
                    (unsigned long long)st->samples_out,
                    (long long)((now - j->started_ns) / STRATA_NS_PER_MS));
}

static int add_entry(tenant_state *t, const block_merge_result *res, strata_error *err) {
    if (STRATA_ARRAY_RESERVE_OR_OOM(t->entries, t->cap_entries, t->n_entries + 1, err) != 0)
        return -1;
    block_entry e = {.id = res->id, .has_meta = true, .meta_ok = true};
    ulid_format(&res->id, e.text);
    if (block_meta_copy(&e.meta, &res->meta, err) != 0)
        return -1;
    /* Keep the array sorted: the new ULID is the newest unless clocks moved back. */
    size_t at = t->n_entries;
    while (at > 0 && ulid_compare(&t->entries[at - 1].id, &e.id) > 0)
        at--;
    memmove(&t->entries[at + 1], &t->entries[at], (t->n_entries - at) * sizeof *t->entries);
    t->entries[at] = e;
    t->n_entries++;
    return 0;
}

static void account_merge(compactor *c, const block_merge_stats *st, size_t n) {
    count(c, &c->stats.jobs, c->m.jobs, 1);
    count(c, &c->stats.blocks_in, c->m.blocks_in, n);
    count(c, &c->stats.blocks_out, c->m.blocks_out, 1);
    metrics_counter_add(c->m.bytes_in, (int64_t)st->bytes_read);
    metrics_counter_add(c->m.bytes_out, (int64_t)st->bytes_written);
    metrics_counter_add(c->m.samples_in, (int64_t)st->samples_in);
    metrics_counter_add(c->m.samples_out, (int64_t)st->samples_out);
    metrics_counter_add(c->m.profiles_in, (int64_t)st->profiles_in);
    metrics_counter_add(c->m.duplicates, (int64_t)st->duplicates);
}

/* After a successful merge: remember the block, announce it, then mark its sources. */
static void commit_merge(job_ctx *j, const ulid *ids, size_t n, const block_merge_result *res) {
    compactor *c = j->c;
    tenant_state *t = j->t;
    char text[ULID_STRING_LEN + 1];
    ulid_format(&res->id, text);
    account_merge(c, &res->stats, n);
    strata_log_info(
        COMPONENT, "merged",
        "tenant=%s ulid=%s level=%d sources=%zu profiles_in=%llu profiles_out=%llu "
        "duplicates=%llu samples=%llu bytes_in=%llu bytes_out=%llu elapsed_ms=%lld",
        t->name, text, res->meta.compaction_level, n, (unsigned long long)res->stats.profiles_in,
        (unsigned long long)res->stats.profiles_out, (unsigned long long)res->stats.duplicates,
        (unsigned long long)res->stats.samples_out, (unsigned long long)res->stats.bytes_read,
        (unsigned long long)res->stats.bytes_written,
        (long long)((strata_monotonic_ns() - j->started_ns) / STRATA_NS_PER_MS));
    strata_error err;
    if (add_entry(t, res, &err) != 0)
        strata_log_warn(COMPONENT, "cannot remember merged block", "ulid=%s", text);
    if (c->listener != NULL)
        c->listener(c->listener_ctx, t->name, text);
    char details[128];
    snprintf(details, sizeof details, BLOCK_DELETION_COMPACTED_INTO "%s", text);
    for (size_t i = 0; i < n; i++) {
        block_entry *src = find_entry(t->entries, t->n_entries, &ids[i]);
        if (src != NULL && !src->deletion_mark)
            write_deletion_mark(c, t->name, src, "compacted", details);
    }
}

static void skip_window(tenant_state *t, const plan_job *job, bool persistent) {
    if (STRATA_ARRAY_RESERVE(t->skipped, t->cap_skipped, t->n_skipped + 1) != 0)
        return; /* only costs a retry */
    t->skipped[t->n_skipped++] = (skipped_window){.range_index = job->range_index,
                                                  .start_ms = job->window_start_ms,
                                                  .persistent = persistent};
}

static bool is_skipped(void *ctx, size_t range_index, int64_t start_ms) {
    const tenant_state *t = ctx;
    for (size_t i = 0; i < t->n_skipped; i++)
        if (t->skipped[i].range_index == range_index && t->skipped[i].start_ms == start_ms)
            return true;
    return false;
}

/* The source a merge error names ("block <tenant>/<ULID>: ..."), if it is one of ids. */
static block_entry *failed_source(tenant_state *t, const char *message, const ulid *ids, size_t n) {
    char prefix[BUCKET_KEY_MAX];
    snprintf(prefix, sizeof prefix, "block %s/", t->name);
    const char *at = strstr(message, prefix);
    ulid id;
    if (at == NULL || strlen(at + strlen(prefix)) < ULID_STRING_LEN ||
        ulid_parse(at + strlen(prefix), ULID_STRING_LEN, &id, NULL) != 0)
        return NULL;
    for (size_t i = 0; i < n; i++)
        if (ulid_compare(&ids[i], &id) == 0)
            return find_entry(t->entries, t->n_entries, &id);
    return NULL;
}

/* Each source's page cache: the sources together get at most a quarter of the job's memory (an
 * ingester's 5-minute window is 300 blocks), within [256 KiB, 4 MiB]: the merger reads each
 * source's series in order, so a few pages per table are enough. */
static size_t reader_cache_for(uint64_t memory, size_t n_sources) {
    uint64_t share = memory / 4 / (n_sources ? n_sources : 1);
    if (share < (256u << 10))
        return 256u << 10;
    return share > (4u << 20) ? 4u << 20 : (size_t)share;
}

/* A job's identity across cycles: its source set, in any order. */
static uint64_t job_key(const ulid *ids, size_t n) {
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += strata_hash_bytes(ids[i].bytes, sizeof ids[i].bytes, 0x5eed);
    return strata_hash_u64(sum ^ (uint64_t)n << 48);
}

static job_failure *find_failure(tenant_state *t, uint64_t key) {
    for (size_t i = 0; i < t->n_failures; i++)
        if (t->failures[i].key == key)
            return &t->failures[i];
    return NULL;
}

static void forget_failure(tenant_state *t, uint64_t key) {
    job_failure *f = find_failure(t, key);
    if (f != NULL)
        *f = t->failures[--t->n_failures];
}

/* Counts a failure of the job `key` in this cycle (once per cycle; `counts` false only keeps the
 * count) and returns its consecutive failures, 0 if it cannot be remembered. */
static int note_failure(tenant_state *t, uint64_t key, bool counts) {
    job_failure *f = find_failure(t, key);
    if (f == NULL) {
        if (!counts)
            return 0;
        if (STRATA_ARRAY_RESERVE(t->failures, t->cap_failures, t->n_failures + 1) != 0)
            return 0; /* only delays giving up */
        f = &t->failures[t->n_failures++];
        *f = (job_failure){.key = key, .cycle = t->cycle, .failures = 0};
    } else if (f->cycle == t->cycle) {
        return f->failures; /* already counted in this cycle */
    }
    f->cycle = t->cycle;
    if (counts)
        f->failures++;
    return f->failures;
}

/* Whether retrying the same merge may succeed: the bucket failed, or the error says so. */
static bool failure_is_transient(const strata_error *err, bool bucket_error) {
    switch (err->code) {
        case STRATA_UNAVAILABLE:
        case STRATA_DEADLINE_EXCEEDED:
        case STRATA_ABORTED:
        case STRATA_CANCELLED:
        case STRATA_RESOURCE_EXHAUSTED:
        case STRATA_PERMISSION_DENIED: /* credentials: an operator's fix, not the data's */
        case STRATA_UNAUTHENTICATED:
            return true;
        default:
            return bucket_error;
    }
}

/* Gives up a job that failed MAX_JOB_FAILURES cycles in a row: marks the source the error names,
 * else every source, no-compact. Returns true when every mark was written. */
static bool give_up_job(job_ctx *j, const ulid *ids, size_t n, int level, int failures,
                        const strata_error *err) {
    compactor *c = j->c;
    tenant_state *t = j->t;
    char details[700], quoted[600];
    snprintf(details, sizeof details, "merge failed %d cycles in a row: %s: %s", failures,
             strata_status_name(err->code), err->message);
    strata_log_error(COMPONENT, "job failed repeatedly; marking its sources no-compact",
                     "tenant=%s level=%d window_start=%lld sources=%zu failures=%d code=%s "
                     "error=%s",
                     t->name, level, (long long)j->job->window_start_ms, n, failures,
                     strata_status_name(err->code), quote(err->message, quoted, sizeof quoted));
    block_entry *named = failed_source(t, err->message, ids, n);
    bool all = true;
    for (size_t i = 0; i < n; i++) {
        block_entry *e = find_entry(t->entries, t->n_entries, &ids[i]);
        if (e == NULL || e->no_compact || (named != NULL && e != named))
            continue;
        if (write_no_compact_mark(c, t->name, e, "repeated-failure", details) != 0) {
            all = false;
            continue;
        }
        count(c, &c->stats.repeated_failure_marks, c->m.failure_marks, 1);
    }
    if (all)
        count(c, &c->stats.jobs_given_up, c->m.jobs_given_up, 1);
    return all;
}

/* Merges ids into one block at level, splitting on RESOURCE_EXHAUSTED. Returns false when the
 * window should not be planned again in this cycle. */
static bool merge_sources(job_ctx *j, const ulid *ids, size_t n, int level, bool split) {
    compactor *c = j->c;
    if (n < 2 && split)
        return true; /* a lone half stays as it is */
    block_merge_options opts;
    block_merge_options_default(&opts);
    opts.compaction_level = level;
    opts.memory_limit = (size_t)c->config.max_job_memory;
    opts.reader_cache_bytes = reader_cache_for(c->config.max_job_memory, n);
    opts.spool_directory = c->config.spool_directory;
    opts.progress = on_progress;
    opts.progress_ctx = j;
    block_merge_result res;
    memset(&res, 0, sizeof res);
    block_meta_init(&res.meta);
    strata_error err;
    strata_error_clear(&err);
    int rc = c->merge(c->store, j->t->name, ids, n, &opts, &res, &err);
    uint64_t key = job_key(ids, n);
    if (rc == 0) {
        forget_failure(j->t, key);
        commit_merge(j, ids, n, &res);
        block_merge_result_free(&res);
        return true;
    }
    bool bucket_error = res.bucket_error;
    block_merge_result_free(&res);
    count(c, &c->stats.jobs_failed, c->m.jobs_failed, 1);
    char quoted[600];
    if (err.code == STRATA_RESOURCE_EXHAUSTED) {
        strata_log_warn(COMPONENT, "merge exceeds max_job_memory; splitting",
                        "tenant=%s window_start=%lld sources=%zu error=%s", j->t->name,
                        (long long)j->job->window_start_ms, n,
                        quote(err.message, quoted, sizeof quoted));
        skip_window(j->t, j->job, true);
        count(c, &c->stats.splits, c->m.splits, 1);
        merge_sources(j, ids, n / 2, level, true);
        merge_sources(j, ids + n / 2, n - n / 2, level, true);
        return true;
    }
    block_entry *bad = failed_source(j->t, err.message, ids, n);
    if (bad != NULL && (err.code == STRATA_DATA_LOSS || err.code == STRATA_INVALID_ARGUMENT ||
                        err.code == STRATA_NOT_FOUND || err.code == STRATA_OUT_OF_RANGE)) {
        write_no_compact_mark(c, j->t->name, bad, "corrupt", err.message);
        forget_failure(j->t, key);
        return true; /* planned again without it */
    }
    bool transient = failure_is_transient(&err, bucket_error);
    int failures = note_failure(j->t, key, !transient);
    strata_log_error(COMPONENT, "merge failed",
                     "tenant=%s level=%d window_start=%lld sources=%zu code=%s transient=%s "
                     "failures=%d max_failures=%d error=%s",
                     j->t->name, level, (long long)j->job->window_start_ms, n,
                     strata_status_name(err.code), transient ? "true" : "false", failures,
                     MAX_JOB_FAILURES, quote(err.message, quoted, sizeof quoted));
    if (!transient && failures >= MAX_JOB_FAILURES &&
        give_up_job(j, ids, n, level, failures, &err)) {
        forget_failure(j->t, key);
        return true; /* planned again without the marked sources */
    }
    return false;
}

/* Plans and runs jobs until the plan is empty. */
static void compact_tenant(compactor *c, tenant_state *t) {
    t->cycle++;
    for (int round = 0; round < MAX_ROUNDS && !stopping(c); round++) {
        plan_block *blocks = malloc((t->n_entries + 1) * sizeof *blocks);
        size_t *owner = malloc((t->n_entries + 1) * sizeof *owner);
        if (blocks == NULL || owner == NULL) {
            free(blocks);
            free(owner);
            return;
        }
        size_t n = 0;
        for (size_t i = 0; i < t->n_entries; i++) {
            const block_entry *e = &t->entries[i];
            if (!e->meta_ok)
                continue;
            blocks[n] = (plan_block){.id = e->id,
                                     .min_time_ms = e->meta.min_time_ms,
                                     .max_time_ms = e->meta.max_time_ms,
                                     .level = e->meta.compaction_level,
                                     .marked = e->deletion_mark,
                                     .no_compact = e->no_compact};
            owner[n++] = i;
        }
        free(owner);
        plan_options o = c->plan;
        o.now_ms = now_ms();
        o.skip_window = is_skipped;
        o.skip_ctx = t;
        plan_job *jobs = NULL;
        size_t n_jobs = 0;
        strata_error err;
        int rc = plan_compaction(blocks, n, &o, &jobs, &n_jobs, &err);
        for (size_t k = 0; rc == 0 && k < n_jobs && !stopping(c); k++) {
            ulid *ids = malloc(jobs[k].n_blocks * sizeof *ids);
            if (ids == NULL)
                break;
            for (size_t b = 0; b < jobs[k].n_blocks; b++)
                ids[b] = blocks[jobs[k].blocks[b]].id;
            /* The same sources already failed in this cycle (planned again over a larger range
             * once their window was skipped): the same data fails the same way. */
            const job_failure *failed = find_failure(t, job_key(ids, jobs[k].n_blocks));
            if (failed != NULL && failed->cycle == t->cycle) {
                skip_window(t, &jobs[k], false);
                free(ids);
                continue;
            }
            job_ctx j = {.c = c, .t = t, .job = &jobs[k], .started_ns = strata_monotonic_ns()};
            j.last_progress_ns = j.started_ns;
            if (!merge_sources(&j, ids, jobs[k].n_blocks, jobs[k].level, false))
                skip_window(t, &jobs[k], false);
            free(ids);
        }
        plan_jobs_free(jobs, n_jobs);
        free(blocks);
        if (rc != 0 || n_jobs == 0)
            break;
    }
    /* Failures other than the memory limit are retried next cycle. */
    size_t kept = 0;
    for (size_t i = 0; i < t->n_skipped; i++)
        if (t->skipped[i].persistent)
            t->skipped[kept++] = t->skipped[i];
    t->n_skipped = kept;
    /* A failing job not run in this cycle (its source set changed, or it was interrupted) starts
     * counting again. */
    kept = 0;
    for (size_t i = 0; i < t->n_failures; i++)
        if (t->failures[i].cycle == t->cycle)
            t->failures[kept++] = t->failures[i];
    t->n_failures = kept;
}

/* ---- bucket index, lag, cycle ------------------------------------------------------------ */

static void write_bucket_index(compactor *c, tenant_state *t) {
    bucket_index ix;
    bucket_index_init(&ix);
    ix.updated_at = now_ms() / 1000;
    strata_error err;
    int rc = 0;
    for (size_t i = 0; i < t->n_entries && rc == 0; i++) {
        const block_entry *e = &t->entries[i];
        if (!e->meta_ok || !e->has_meta)
            continue;
        rc = bucket_index_add_block(&ix, &e->meta, &err);
        if (rc == 0 && e->deletion_mark)
            rc = bucket_index_add_mark(&ix, &e->id, e->deletion_time, &err);
    }
    strata_buffer json = STRATA_BUFFER_INIT;
    char key[BUCKET_KEY_MAX];
    snprintf(key, sizeof key, "%s/%s", t->name, BUCKET_INDEX_FILE);
    if (rc == 0)
        rc = bucket_index_encode(&ix, &json, &err);
    if (rc == 0)
        rc = bucket_upload(c->store, key, json.data, json.len, &err);
    if (rc != 0)
        strata_log_warn(COMPONENT, "cannot write bucket index", "tenant=%s error=%s", t->name,
                        quote(err.message, (char[600]){0}, 600));
    strata_buffer_free(&json);
    bucket_index_free(&ix);
}

/* now - maxTime of the newest block at level >= 2; with none, now - the oldest minTime. */
static int64_t tenant_lag_ms(const tenant_state *t, int64_t now, size_t *blocks) {
    int64_t newest_compacted = INT64_MIN, oldest = INT64_MAX;
    for (size_t i = 0; i < t->n_entries; i++) {
        const block_entry *e = &t->entries[i];
        if (!e->meta_ok || e->deletion_mark)
            continue;
        (*blocks)++;
        if (e->meta.compaction_level >= 2 && e->meta.max_time_ms > newest_compacted)
            newest_compacted = e->meta.max_time_ms;
        if (e->meta.min_time_ms < oldest)
            oldest = e->meta.min_time_ms;
    }
    if (newest_compacted != INT64_MIN)
        return now - newest_compacted;
    return oldest == INT64_MAX ? 0 : now - oldest;
}

static void run_tenant(compactor *c, tenant_state *t) {
    strata_error err;
    if (scan_tenant(c, t, &err) != 0) {
        strata_log_warn(COMPONENT, "cannot list tenant", "tenant=%s error=%s", t->name,
                        quote(err.message, (char[600]){0}, 600));
        return;
    }
    reconcile_replaced(c, t);
    /* Queriers learn retention marks from the bucket index (a block merged away needs none: its
     * replacement hides it), so new ones go into it now, not after this cycle's merges, which
     * can outlast delete_delay. */
    if (apply_retention(c, t) > 0)
        write_bucket_index(c, t);
    delete_due(c, t);
    compact_tenant(c, t);
    write_bucket_index(c, t);
}

static int collect_tenant(const char *key, void *arg, strata_error *err) {
    size_t len = strlen(key);
    if (len < 2 || key[len - 1] != '/')
        return 0;
    key_list *l = arg;
    if (collect_key(key, l, err) != 0)
        return -1;
    l->keys[l->n - 1][len - 1] = '\0';
    return 0;
}

static tenant_state *tenant_get(compactor *c, const char *name) {
    for (size_t i = 0; i < c->n_tenants; i++)
        if (strcmp(c->tenants[i].name, name) == 0)
            return &c->tenants[i];
    if (STRATA_ARRAY_RESERVE(c->tenants, c->cap_tenants, c->n_tenants + 1) != 0)
        return NULL;
    tenant_state *t = &c->tenants[c->n_tenants];
    memset(t, 0, sizeof *t);
    if ((t->name = strdup(name)) == NULL)
        return NULL;
    c->n_tenants++;
    return t;
}

int compactor_run_once(compactor *c, strata_error *err) {
    key_list tenants = {0};
    if (bucket_iterate(c->store, "", false, collect_tenant, &tenants, err) != 0) {
        for (size_t i = 0; i < tenants.n; i++)
            free(tenants.keys[i]);
        free(tenants.keys);
        return -1;
    }
    int64_t lag = 0;
    size_t blocks = 0;
    for (size_t i = 0; i < tenants.n && !stopping(c); i++) {
        tenant_state *t = tenant_get(c, tenants.keys[i]);
        if (t == NULL)
            continue;
        run_tenant(c, t);
        int64_t l = tenant_lag_ms(t, now_ms(), &blocks);
        if (l > lag)
            lag = l;
    }
    size_t failing = 0;
    for (size_t i = 0; i < c->n_tenants; i++)
        failing += c->tenants[i].n_failures;
    pthread_mutex_lock(&c->mu);
    c->stats.failing_jobs = failing;
    pthread_mutex_unlock(&c->mu);
    metrics_gauge_set(c->m.failing_jobs, (int64_t)failing);
    for (size_t i = 0; i < tenants.n; i++)
        free(tenants.keys[i]);
    free(tenants.keys);
    metrics_gauge_set(c->m.lag, lag / 1000);
    metrics_gauge_set(c->m.blocks, (int64_t)blocks);
    metrics_gauge_set(c->m.last_success, now_ms() / 1000);
    count(c, &c->stats.cycles, c->m.cycles, 1);
    return 0;
}

/* ---- thread ------------------------------------------------------------------------------ */

static void *compactor_main(void *arg) {
    compactor *c = arg;
    strata_log_info(COMPONENT, "started", "interval_ms=%lld ranges=%zu",
                    (long long)(c->config.compaction_interval_ns / STRATA_NS_PER_MS),
                    c->plan.n_ranges);
    while (!stopping(c)) {
        strata_error err;
        strata_error_clear(&err);
        if (compactor_run_once(c, &err) != 0)
            strata_log_warn(COMPONENT, "cycle failed", "error=%s",
                            quote(err.message, (char[600]){0}, 600));
        int64_t deadline = strata_monotonic_ns() + c->config.compaction_interval_ns;
        struct timespec ts = {(time_t)(deadline / STRATA_NS_PER_SEC),
                              (long)(deadline % STRATA_NS_PER_SEC)};
        pthread_mutex_lock(&c->mu);
        while (!c->stopping && pthread_cond_timedwait(&c->wake, &c->mu, &ts) != ETIMEDOUT) {
        }
        pthread_mutex_unlock(&c->mu);
    }
    return NULL;
}

int compactor_start(compactor *c, strata_error *err) {
    if (pthread_create(&c->thread, NULL, compactor_main, c) != 0)
        return strata_error_set(err, STRATA_INTERNAL, "cannot start the compactor thread");
    c->started = true;
    return 0;
}

bool compactor_ready(const compactor *c, const char **reason) {
    if (!c->started) {
        *reason = "compactor not started";
        return false;
    }
    return true;
}

void compactor_stop(compactor *c) {
    pthread_mutex_lock(&c->mu);
    c->stopping = true;
    pthread_cond_broadcast(&c->wake);
    pthread_mutex_unlock(&c->mu);
    if (c->started)
        pthread_join(c->thread, NULL);
    c->started = false;
}
