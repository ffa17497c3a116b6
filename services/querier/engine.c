/*
 * engine.c - see engine.h. The engine's frame: its options and threads, the block driver every
 * operation runs on, the metadata queries (profile types, label names and values), and retries.
 *
 * Layout: a generic "for each matching block, in parallel" driver (engine_for_each_block) runs a
 * per-block function with the block's reader locked; each operation has a per-block function that
 * fills a per-worker partial result, and a merge step that combines the partials in block order
 * (labels here, ranges in engine_range.c, merges in engine_merge.c; which series and samples a
 * selector picks in engine_samples.c, which profiles in engine_select.c).
 *
 * The driver's workers are the caller's thread and helpers from the engine's block_workers, kept
 * for the engine's life: a query starts no thread (block_workers.h says why that cannot deadlock
 * when every helper is busy).
 */
#include "engine.h"
#include "engine_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/hash.h"

/* The most helper threads the block driver keeps: every pass asks for at most 63 (a worker count
 * is at most 64, the caller being one), so this lets 16 such passes run at once with all their
 * threads, as they did when each started its own; beyond it concurrent passes share helpers. */
#define ENGINE_BLOCK_THREADS 1008

void query_engine_options_default(query_engine_options *opts) {
    opts->max_query_bytes = (uint64_t)1 << 30;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    opts->parallelism = cpus > 0 ? (int)cpus : 2;
    opts->fetch_parallelism = 16;
    opts->use_rollups = true;
}

int query_engine_new(const query_engine_options *opts, block_index *index, query_engine **out,
                     strata_error *err) {
    query_engine *e = calloc(1, sizeof *e);
    if (e == NULL)
        return strata_error_oom(err);
    e->opts = *opts;
    if (e->opts.parallelism < 1)
        e->opts.parallelism = 1;
    e->index = index;
    if (block_workers_new(ENGINE_BLOCK_THREADS, &e->workers, err) != 0) {
        free(e);
        return -1;
    }
    *out = e;
    return 0;
}

void query_engine_free(query_engine *e) {
    if (e == NULL)
        return;
    block_workers_free(e->workers);
    free(e);
}

size_t engine_block_threads_started(query_engine *e) {
    return block_workers_started(e->workers);
}

/* ---- the parallel block driver ------------------------------------------------------------ */

typedef struct driver {
    block_index *index;
    indexed_block **blocks;
    size_t n_blocks;
    atomic_size_t next;
    atomic_bool failed;
    block_fn fn;
    void **partials; /* one per worker */
    bool *skipped;   /* per block; NULL: a block that fails fails the query */
    query_stats *stats;
    readahead_keep *keep; /* NULL: drop read-ahead after each block */
    pthread_mutex_t err_mu;
    strata_error err;
} driver;

/* Notes a block left out of the query (DATA_LOSS); the first one's name and error are kept. */
static void note_skipped(driver *d, size_t i, const strata_error *err) {
    indexed_block *b = d->blocks[i];
    pthread_mutex_lock(&d->err_mu);
    d->skipped[i] = true;
    if (d->stats->skipped_blocks++ == 0) {
        snprintf(d->stats->skipped_block, sizeof d->stats->skipped_block, "%.100s/%.26s", b->tenant,
                 b->ulid_text);
        size_t len = strnlen(err->message, sizeof d->stats->skipped_error - 1);
        memcpy(d->stats->skipped_error, err->message, len);
        d->stats->skipped_error[len] = '\0';
    }
    pthread_mutex_unlock(&d->err_mu);
}

/* Whether block i's read-ahead bytes stay for the query's next pass (reserving them in k). */
static bool keep_readahead(readahead_keep *k, size_t i, const block_reader *r) {
    if (k == NULL || k->kept == NULL)
        return false;
    size_t held = block_reader_readahead_bytes(r);
    size_t before = atomic_fetch_add(&k->bytes, held);
    if (before + held > k->budget) {
        atomic_fetch_sub(&k->bytes, held);
        return false;
    }
    k->kept[i] = true;
    return true;
}

void readahead_keep_init(readahead_keep *k, size_t n) {
    atomic_init(&k->bytes, 0);
    k->budget = READAHEAD_KEEP_BUDGET;
    k->kept = calloc(n + 1, sizeof *k->kept);
}

void engine_drop_kept_readahead(indexed_block **blocks, size_t n, readahead_keep *k) {
    for (size_t i = 0; k->kept != NULL && i < n; i++) {
        if (!k->kept[i])
            continue;
        pthread_mutex_lock(&blocks[i]->mu);
        if (blocks[i]->reader != NULL)
            block_reader_drop_readahead(blocks[i]->reader);
        pthread_mutex_unlock(&blocks[i]->mu);
    }
    free(k->kept);
    k->kept = NULL;
}

/* Worker `worker` of a pass (block_workers slot: 0 is the caller): takes the next block until
 * none is left or one failed. */
static void driver_worker(void *arg, size_t worker) {
    driver *d = arg;
    for (;;) {
        size_t i = atomic_fetch_add(&d->next, 1);
        if (i >= d->n_blocks || atomic_load(&d->failed))
            break;
        if (d->skipped != NULL && d->skipped[i])
            continue; /* left out by an earlier pass of the same query */
        indexed_block *b = d->blocks[i];
        strata_error err;
        strata_error_clear(&err);
        pthread_mutex_lock(&b->mu);
        int rc = block_index_open_reader(d->index, b, &err);
        if (rc == 0)
            rc = d->fn(b, i, b->reader, d->partials[worker], &err);
        /* What was read ahead is decoded by now or not needed: the cached reader keeps decoded
         * pages, not raw bytes (held across the query's passes, the windows of every block of a
         * long range would add up). */
        if (b->reader != NULL && !keep_readahead(d->keep, i, b->reader))
            block_reader_drop_readahead(b->reader);
        block_index_reader_used(d->index, b); /* decoding grew it */
        pthread_mutex_unlock(&b->mu);
        if (rc != 0 && err.code == STRATA_NOT_FOUND && block_index_forget_if_gone(d->index, b)) {
            /* Deleted after the compactor replaced it (or retention expired it): the query runs
             * again on the index's new view, which has the replacement instead. */
            strata_error_set(&err, STRATA_ABORTED, "block %s/%s vanished during the query",
                             b->tenant, b->ulid_text);
        }
        if (rc != 0 && err.code == STRATA_DATA_LOSS && d->skipped != NULL) {
            note_skipped(d, i, &err);
            continue;
        }
        if (rc != 0) {
            pthread_mutex_lock(&d->err_mu);
            if (!atomic_load(&d->failed))
                d->err = err;
            atomic_store(&d->failed, true);
            pthread_mutex_unlock(&d->err_mu);
            break;
        }
    }
}

int engine_for_each_block(query_engine *e, indexed_block **blocks, size_t n, block_fn fn,
                          void **partials, size_t workers, bool *skipped, query_stats *stats,
                          strata_error *err) {
    return engine_for_each_block_keep(e, blocks, n, fn, partials, workers, skipped, stats, NULL,
                                      err);
}

int engine_for_each_block_keep(query_engine *e, indexed_block **blocks, size_t n, block_fn fn,
                               void **partials, size_t workers, bool *skipped, query_stats *stats,
                               readahead_keep *k, strata_error *err) {
    driver d = {.index = e->index,
                .blocks = blocks,
                .n_blocks = n,
                .fn = fn,
                .partials = partials,
                .skipped = stats != NULL ? skipped : NULL,
                .stats = stats,
                .keep = k};
    atomic_init(&d.next, 0);
    atomic_init(&d.failed, false);
    if (pthread_mutex_init(&d.err_mu, NULL) != 0)
        return strata_error_set(err, STRATA_INTERNAL, "query: cannot initialise a mutex");
    strata_error_clear(&d.err);
    block_workers_run(e->workers, workers < 64 ? workers : 64, driver_worker, &d);
    pthread_mutex_destroy(&d.err_mu);
    if (atomic_load(&d.failed)) {
        if (err != NULL)
            *err = d.err;
        return -1;
    }
    return 0;
}

size_t engine_fetch_worker_count(const query_engine *e, size_t n_blocks) {
    size_t w = (size_t)(e->opts.fetch_parallelism > e->opts.parallelism ? e->opts.fetch_parallelism
                                                                        : e->opts.parallelism);
    if (w > n_blocks)
        w = n_blocks;
    if (w > 64)
        w = 64;
    return w == 0 ? 1 : w;
}

size_t engine_worker_count(const query_engine *e, size_t n_blocks) {
    size_t w = (size_t)e->opts.parallelism;
    if (w > n_blocks)
        w = n_blocks;
    if (w > 64)
        w = 64;
    return w == 0 ? 1 : w;
}

/* ---- string sets (profile types, label names and values) ---------------------------------- */

typedef struct string_set {
    strata_intern strings;
} string_set;

static int string_set_add(string_set *s, const char *text, size_t len, strata_error *err) {
    uint32_t id;
    if (strata_intern_add(&s->strings, text, len, &id) != 0)
        return strata_error_oom(err);
    return 0;
}

static int compare_cstrings(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Copies the union of the sets into a sorted malloc'd array. */
static int string_sets_collect(string_set *sets, size_t n_sets, char ***out, size_t *n,
                               strata_error *err) {
    string_set all;
    if (strata_intern_init(&all.strings) != 0)
        return strata_error_oom(err);
    int rc = 0;
    for (size_t s = 0; s < n_sets && rc == 0; s++)
        for (size_t i = 0; i < sets[s].strings.count && rc == 0; i++)
            rc = string_set_add(&all, sets[s].strings.strings[i], sets[s].strings.lengths[i], err);
    char **list = calloc(all.strings.count + 1, sizeof *list);
    if (rc == 0 && list == NULL)
        rc = strata_error_oom(err);
    for (size_t i = 0; rc == 0 && i < all.strings.count; i++)
        if ((list[i] = strdup(all.strings.strings[i])) == NULL)
            rc = strata_error_oom(err);
    if (rc == 0) {
        qsort(list, all.strings.count, sizeof *list, compare_cstrings);
        *out = list;
        *n = all.strings.count;
    } else if (list != NULL) {
        query_strings_free(list, all.strings.count);
    }
    strata_intern_free(&all.strings);
    return rc;
}

void query_strings_free(char **strings, size_t n) {
    for (size_t i = 0; strings != NULL && i < n; i++)
        free(strings[i]);
    free(strings);
}

/* ---- profile types ------------------------------------------------------------------------ */

int query_profile_types(query_engine *e, const char *tenant, int64_t start_ns, int64_t end_ns,
                        profile_type **out, size_t *n, strata_error *err) {
    *out = NULL;
    *n = 0;
    indexed_block **blocks;
    size_t n_blocks;
    if (block_index_acquire(e->index, tenant, start_ns, end_ns, &blocks, &n_blocks, err) != 0)
        return -1;
    /* meta.json lists each block's types, so no reader is needed. */
    string_set set;
    int rc = strata_intern_init(&set.strings) == 0 ? 0 : strata_error_oom(err);
    for (size_t i = 0; rc == 0 && i < n_blocks; i++)
        for (size_t t = 0; rc == 0 && t < blocks[i]->meta.n_profile_types; t++)
            rc = string_set_add(&set, blocks[i]->meta.profile_types[t],
                                strlen(blocks[i]->meta.profile_types[t]), err);
    block_index_release_all(e->index, blocks, n_blocks);
    char **texts = NULL;
    size_t count = 0;
    if (rc == 0)
        rc = string_sets_collect(&set, 1, &texts, &count, err);
    strata_intern_free(&set.strings);
    if (rc != 0)
        return -1;
    profile_type *types = calloc(count + 1, sizeof *types);
    if (types == NULL)
        rc = strata_error_oom(err);
    for (size_t i = 0; rc == 0 && i < count; i++)
        rc = profile_type_parse(texts[i], strlen(texts[i]), &types[i], err);
    query_strings_free(texts, count);
    if (rc != 0) {
        query_profile_types_free(types, count);
        return -1;
    }
    *out = types;
    *n = count;
    return 0;
}

void query_profile_types_free(profile_type *types, size_t n) {
    for (size_t i = 0; types != NULL && i < n; i++)
        profile_type_free(&types[i]);
    free(types);
}

/* ---- labels and values -------------------------------------------------------------------- */

typedef struct labels_query {
    const char *name; /* NULL: label names */
    const selector *sels;
    size_t n_sels;
    const profile_type *type;
} labels_query;

typedef struct labels_partial {
    string_set set;
    const labels_query *q;
} labels_partial;

static int add_series_labels(const labels_query *q, const label_set *labels, string_set *set,
                             strata_error *err) {
    for (size_t l = 0; l < labels->count; l++) {
        const strata_label *lab = &labels->labels[l];
        if (strcmp(lab->name, STRATA_LABEL_NAME) == 0)
            continue;
        if (q->name == NULL) {
            if (string_set_add(set, lab->name, strlen(lab->name), err) != 0)
                return -1;
        } else if (strcmp(lab->name, q->name) == 0) {
            if (string_set_add(set, lab->value, strlen(lab->value), err) != 0)
                return -1;
        }
    }
    return 0;
}

/* The pprof sample labels of a series' label sets that pass sel, as they appear in the series'
 * namespace: a name the series has too is listed as exported_<name>. */
static int add_sample_labels(const labels_query *q, block_reader *r, const selector *sel,
                             uint32_t series, string_set *set, strata_error *err) {
    const label_set *labels = block_reader_series_labels(r, series);
    const uint32_t *sets;
    size_t n_sets;
    if (block_reader_series_label_sets(r, series, &sets, &n_sets, err) != 0)
        return -1;
    char name[512];
    for (size_t k = 0; k < n_sets; k++) {
        const label_set *sample;
        if (block_reader_label_set(r, sets[k], &sample, err) != 0)
            return -1;
        if (!engine_sample_matches(sel, labels, sample))
            continue;
        for (size_t l = 0; l < sample->count; l++) {
            const strata_label *lab = &sample->labels[l];
            bool exported = label_set_get(labels, lab->name) != NULL;
            int len =
                snprintf(name, sizeof name, "%s%s", exported ? EXPORTED_PREFIX : "", lab->name);
            if (len < 0 || (size_t)len >= sizeof name)
                continue; /* a name too long to select by */
            if (q->name == NULL) {
                if (string_set_add(set, name, (size_t)len, err) != 0)
                    return -1;
            } else if (strcmp(name, q->name) == 0 &&
                       string_set_add(set, lab->value, strlen(lab->value), err) != 0) {
                return -1;
            }
        }
    }
    return 0;
}

static int block_labels(indexed_block *b, size_t index, block_reader *r, void *partial,
                        strata_error *err) {
    labels_partial *p = partial;
    (void)index;
    const labels_query *q = p->q;
    (void)b;
    size_t n_passes = q->n_sels > 0 ? q->n_sels : 1;
    for (size_t s = 0; s < n_passes; s++) {
        uint32_t *ids = NULL;
        size_t n = 0;
        const selector *sel = q->n_sels > 0 ? &q->sels[s] : NULL;
        if (engine_select_series(r, sel, q->type, &ids, &n, err) != 0)
            return -1;
        int rc = 0;
        for (size_t i = 0; rc == 0 && i < n; i++) {
            rc = add_series_labels(q, block_reader_series_labels(r, ids[i]), &p->set, err);
            if (rc == 0 && block_reader_has_sample_labels(r))
                rc = add_sample_labels(q, r, sel, ids[i], &p->set, err);
        }
        free(ids);
        if (rc != 0)
            return -1;
    }
    return 0;
}

static int query_labels_attempt(query_engine *e, const char *tenant, const char *name,
                                const selector *sels, size_t n_sels, const profile_type *type,
                                int64_t start_ns, int64_t end_ns, char ***out, size_t *n,
                                strata_error *err) {
    *out = NULL;
    *n = 0;
    indexed_block **blocks;
    size_t n_blocks;
    if (block_index_acquire(e->index, tenant, start_ns, end_ns, &blocks, &n_blocks, err) != 0)
        return -1;
    labels_query q = {name, sels, n_sels, type};
    size_t workers = engine_fetch_worker_count(e, n_blocks);
    labels_partial *parts = calloc(workers, sizeof *parts);
    void **ptrs = calloc(workers, sizeof *ptrs);
    string_set *sets = calloc(workers, sizeof *sets);
    bool *skipped = calloc(n_blocks + 1, sizeof *skipped);
    query_stats stats = {0};
    int rc = (parts && ptrs && sets && skipped) ? 0 : strata_error_oom(err);
    for (size_t w = 0; rc == 0 && w < workers; w++) {
        parts[w].q = &q;
        if (strata_intern_init(&parts[w].set.strings) != 0)
            rc = strata_error_oom(err);
        ptrs[w] = &parts[w];
    }
    if (rc == 0)
        rc = engine_for_each_block(e, blocks, n_blocks, block_labels, ptrs, workers, skipped,
                                   &stats, err);
    block_index_release_all(e->index, blocks, n_blocks);
    free(skipped);
    for (size_t w = 0; rc == 0 && w < workers; w++)
        sets[w] = parts[w].set;
    if (rc == 0)
        rc = string_sets_collect(sets, workers, out, n, err);
    for (size_t w = 0; parts != NULL && w < workers; w++)
        strata_intern_free(&parts[w].set.strings);
    free(parts);
    free(ptrs);
    free(sets);
    return rc;
}

int engine_no_profiles(const query_stats *stats, strata_error *err) {
    if (stats->skipped_blocks > 0)
        return strata_error_set(err, STRATA_DATA_LOSS,
                                "no readable profiles match the query: block %s was left out: %s",
                                stats->skipped_block, stats->skipped_error);
    return strata_error_set(err, STRATA_NOT_FOUND, "no profiles match the query in that range");
}

/* ---- retries over a changed view ------------------------------------------------------------ */

/* A query whose block was deleted under it (STRATA_ABORTED from the driver) runs again: the index
 * has dropped the block and shows its replacement. Deletion waits delete_delay after the
 * replacement appears, so more than a retry or two means something else is wrong. */
#define QUERY_ATTEMPTS 3

int engine_retry(query_engine *e, engine_attempt_fn attempt, void *arg, strata_error *err) {
    int rc = -1;
    for (int i = 0; i < QUERY_ATTEMPTS; i++) {
        rc = attempt(e, arg, err);
        if (rc == 0 || err->code != STRATA_ABORTED)
            break;
    }
    return rc;
}

typedef struct labels_call {
    const char *tenant, *name;
    const selector *sels;
    size_t n_sels;
    const profile_type *type;
    int64_t start_ns, end_ns;
    char ***out;
    size_t *n;
} labels_call;

static int labels_attempt(query_engine *e, void *arg, strata_error *err) {
    const labels_call *c = arg;
    return query_labels_attempt(e, c->tenant, c->name, c->sels, c->n_sels, c->type, c->start_ns,
                                c->end_ns, c->out, c->n, err);
}

int query_labels(query_engine *e, const char *tenant, const char *name, const selector *sels,
                 size_t n_sels, const profile_type *type, int64_t start_ns, int64_t end_ns,
                 char ***out, size_t *n, strata_error *err) {
    labels_call c = {tenant, name, sels, n_sels, type, start_ns, end_ns, out, n};
    return engine_retry(e, labels_attempt, &c, err);
}
