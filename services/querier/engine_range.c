/*
 * engine_range.c - query_range and query_range_summed (engine.h): per group of series, one point
 * per step bucket, from the profiles table alone (no sample is read unless a matcher names pprof
 * sample labels: a profile then counts only its matching samples).
 *
 * Selection (engine_select.c) picks each block's profiles and drops copies first, or defers a
 * compacted block alone in its time range: its profiles go straight from the reader's pages into
 * the cells as the pass visits them, never copied into arrays. Each worker of the pass fills a
 * partial of groups (keyed by the sum_by labels for delta types, all labels otherwise, as Parca),
 * each group a dense array of cells indexed by bucket when the query has few enough buckets, a
 * map otherwise; the partials are merged at the end and the series sorted by labels, so the
 * answer does not depend on which worker read which block.
 */
#include "engine_internal.h"

#include <stdlib.h>
#include <string.h>

#include "common/array.h"
#include "common/hash.h"

/* ---- query_range -------------------------------------------------------------------------- */

/* One point under construction. */
typedef struct range_cell {
    int64_t bucket;
    int64_t value;      /* delta: sum; non-delta: sum at first_time */
    int64_t first_time; /* earliest profile time in the cell */
    int64_t first_duration;
    int32_t count;
    bool several_times; /* profiles at more than one timestamp */
} range_cell;

/* A group's points: dense (cells[i] is bucket first_bucket + i * step, in use when bit i of
 * in_use is set; the common case, one array index per profile) when the query has few enough
 * buckets, else sparse (cells in arrival order, found through cell_index). Dense cells are not
 * zeroed when made: a day at 1-minute steps is 1,440 cells (56 KiB) per group and partial, and
 * zeroing them was a fifth of a range query's CPU; the bitmap is 180 bytes. */
typedef struct range_group {
    label_set labels;
    uint64_t hash;
    range_cell *cells;
    uint64_t *in_use; /* dense: one bit per cell */
    size_t n_cells;   /* dense: the query's bucket count */
    size_t cap_cells;
    bool dense;
    strata_u64_map cell_index; /* sparse: bucket+1 -> cell index (buckets are >= 0 after offset) */
} range_group;

/* Dense groups while a query has at most this many buckets, and while a partial's dense cells
 * stay under RANGE_DENSE_CELLS (40 bytes each: 40 MiB); groups beyond that are sparse. */
#define RANGE_DENSE_BUCKETS 16384
#define RANGE_DENSE_CELLS ((size_t)1 << 20)

typedef struct range_query {
    block_selection *selections; /* per block */
    const selector *sel;
    int64_t start_ns, end_ns, step_ns;
    const char *const *sum_by;
    size_t n_sum_by;
    bool delta;
    bool samples_count;   /* multiply by period */
    int64_t first_bucket; /* bucket of start_ns */
    size_t n_buckets;     /* buckets from start_ns to end_ns; 0 when too many for dense groups */
} range_query;

typedef struct range_partial {
    const range_query *q;
    range_group *groups;
    size_t n_groups;
    size_t cap_groups;
    strata_u64_map group_index; /* hash -> group index + 1 chain via rehash */
    size_t dense_cells;         /* cells of its dense groups */
} range_partial;

static void range_group_free(range_group *g) {
    label_set_free(&g->labels);
    free(g->cells);
    free(g->in_use);
    strata_u64_map_free(&g->cell_index);
}

static void range_partial_free(range_partial *p) {
    for (size_t i = 0; i < p->n_groups; i++)
        range_group_free(&p->groups[i]);
    free(p->groups);
    strata_u64_map_free(&p->group_index);
    memset(p, 0, sizeof *p);
}

/* The labels a profile's series is grouped under: the sum_by labels for delta types, all labels
 * otherwise (Parca ignores sum_by for non-delta types). */
static int group_labels(const range_query *q, const label_set *series, label_set *out,
                        strata_error *err) {
    if (!q->delta)
        return label_set_copy(out, series, err);
    for (size_t i = 0; i < q->n_sum_by; i++) {
        const char *v = label_set_get(series, q->sum_by[i]);
        if (v != NULL && label_set_get(out, q->sum_by[i]) == NULL &&
            label_set_add(out, q->sum_by[i], strlen(q->sum_by[i]), v, strlen(v), err) != 0)
            return -1;
    }
    label_set_sort(out);
    return 0;
}

/* Finds or adds the group for labels (taking ownership of labels either way). */
static range_group *find_group(range_partial *p, label_set *labels, strata_error *err) {
    uint64_t h = label_set_hash(labels);
    uint64_t key = h | 1; /* non-zero */
    for (;;) {
        bool inserted;
        uint64_t *slot = strata_u64_map_upsert(&p->group_index, key, p->n_groups, &inserted);
        if (slot == NULL) {
            label_set_free(labels);
            strata_error_oom(err);
            return NULL;
        }
        if (!inserted) {
            range_group *g = &p->groups[*slot];
            if (label_set_compare(&g->labels, labels) == 0) {
                label_set_free(labels);
                return g;
            }
            key = strata_hash_u64(key) | 1; /* a hash collision: probe the next key */
            continue;
        }
        if (STRATA_ARRAY_RESERVE_OR_OOM(p->groups, p->cap_groups, p->n_groups + 1, err) != 0) {
            label_set_free(labels);
            return NULL;
        }
        range_group *g = &p->groups[p->n_groups];
        memset(g, 0, sizeof *g);
        size_t buckets = p->q->n_buckets;
        if (buckets > 0 && p->dense_cells + buckets <= RANGE_DENSE_CELLS) {
            g->cells = malloc(buckets * sizeof *g->cells);
            g->in_use = calloc((buckets + 63) / 64, sizeof *g->in_use);
            if (g->cells == NULL || g->in_use == NULL) {
                free(g->cells);
                free(g->in_use);
                g->cells = NULL;
                g->in_use = NULL;
                label_set_free(labels);
                strata_error_oom(err);
                return NULL;
            }
            g->dense = true;
            g->n_cells = g->cap_cells = buckets;
            p->dense_cells += buckets;
        }
        p->n_groups++;
        g->labels = *labels;
        g->hash = h;
        return g;
    }
}

/* Whether cell i of g holds a point (sparse cells always do). */
static bool cell_in_use(const range_group *g, size_t i) {
    return !g->dense || (g->in_use[i / 64] >> (i % 64) & 1);
}

static range_cell *find_cell(const range_query *q, range_group *g, int64_t time_bucket,
                             strata_error *err) {
    if (g->dense) {
        uint64_t i = ((uint64_t)time_bucket - (uint64_t)q->first_bucket) / (uint64_t)q->step_ns;
        if (time_bucket < q->first_bucket || i >= g->n_cells) {
            strata_error_set(err, STRATA_INTERNAL, "range: bucket outside the query's range");
            return NULL;
        }
        range_cell *c = &g->cells[i];
        if (!(g->in_use[i / 64] >> (i % 64) & 1)) {
            g->in_use[i / 64] |= (uint64_t)1 << (i % 64);
            memset(c, 0, sizeof *c);
            c->bucket = time_bucket;
            c->first_time = INT64_MAX;
        }
        return c;
    }
    bool inserted;
    uint64_t *slot = strata_u64_map_upsert(
        &g->cell_index, (uint64_t)time_bucket ^ 0x8000000000000000ULL, g->n_cells, &inserted);
    if (slot == NULL) {
        strata_error_oom(err);
        return NULL;
    }
    if (!inserted)
        return &g->cells[*slot];
    if (STRATA_ARRAY_RESERVE_OR_OOM(g->cells, g->cap_cells, g->n_cells + 1, err) != 0)
        return NULL;
    range_cell *c = &g->cells[g->n_cells++];
    memset(c, 0, sizeof *c);
    c->bucket = time_bucket;
    c->first_time = INT64_MAX;
    return c;
}

/* Folds one profile (or a partial cell) into a cell. */
static void cell_add(range_cell *c, bool delta, int64_t time, int64_t duration, int64_t value,
                     int32_t count, bool several) {
    if (c->count == 0) {
        c->first_time = time;
        c->first_duration = duration;
        c->value = value;
        c->count = count;
        c->several_times = several;
        return;
    }
    if (time != c->first_time)
        c->several_times = true;
    c->several_times |= several;
    if (delta) {
        c->value += value;
        c->count += count;
        if (time < c->first_time) {
            c->first_time = time;
            c->first_duration = duration;
        }
        return;
    }
    /* Non-delta: the earliest timestamp's profiles win the bucket. */
    if (time < c->first_time) {
        c->first_time = time;
        c->first_duration = duration;
        c->value = value;
        c->count = count;
    } else if (time == c->first_time) {
        c->value += value;
        c->count += count;
    }
}

static int64_t bucket_of(int64_t time, int64_t step) {
    int64_t b = time / step;
    if (time % step != 0 && time < 0)
        b--;
    return b * step;
}

/* The sum of a profile's samples that pass the view's sample-label filter; *any says whether
 * one did. */
static int profile_sample_total(sample_view *view, const block_profile *bp, block_samples *samples,
                                int64_t *total, bool *any, strata_error *err) {
    samples->len = 0;
    if (block_reader_read_samples(view->r, bp, 1, samples, err) != 0)
        return -1;
    uint64_t sum = 0;
    *any = false;
    for (size_t k = 0; k < samples->len; k++) {
        bool pass = false;
        uint32_t frame;
        uint32_t set = samples->label_sets != NULL ? samples->label_sets[k] : 0;
        if (sample_view_get(view, bp->series_id, set, &pass, &frame, err) != 0)
            return -1;
        if (pass) {
            sum += (uint64_t)samples->values[k];
            *any = true;
        }
    }
    memcpy(total, &sum, sizeof *total);
    return 0;
}

/* A block's pass over the range partial: profiles come sorted by (series, time), so the group
 * and the bucket of the last profile usually serve the next. */
typedef struct range_cursor {
    range_partial *p;
    block_reader *r;
    uint32_t last_series;
    range_group *g;
    size_t last_cell; /* SIZE_MAX: none */
    int64_t last_bucket;
} range_cursor;

/* Adds one profile, counting total for it, to its group's cell. */
static int range_add_profile(range_cursor *cur, const block_profile *bp, int64_t total,
                             strata_error *err) {
    const range_query *q = cur->p->q;
    if (bp->series_id != cur->last_series || cur->g == NULL) {
        cur->last_cell = SIZE_MAX;
        label_set labels = LABEL_SET_INIT;
        if (group_labels(q, block_reader_series_labels(cur->r, bp->series_id), &labels, err) != 0) {
            label_set_free(&labels);
            return -1;
        }
        if ((cur->g = find_group(cur->p, &labels, err)) == NULL)
            return -1;
        cur->last_series = bp->series_id;
    }
    range_cell *c;
    /* profiles of a series come in time order, several per step: the last bucket usually holds
     * this one too, found without a 64-bit division */
    if (cur->last_cell != SIZE_MAX && bp->time_ns >= cur->last_bucket &&
        (uint64_t)bp->time_ns - (uint64_t)cur->last_bucket < (uint64_t)q->step_ns) {
        c = &cur->g->cells[cur->last_cell];
    } else {
        int64_t time_bucket = bucket_of(bp->time_ns, q->step_ns);
        if ((c = find_cell(q, cur->g, time_bucket, err)) == NULL)
            return -1;
        cur->last_cell = (size_t)(c - cur->g->cells);
        cur->last_bucket = time_bucket;
    }
    int64_t value = q->samples_count ? total * bp->period : total;
    cell_add(c, q->delta, bp->time_ns, bp->duration_ns, value, 1, false);
    return 0;
}

static int range_visit_profile(void *arg, const block_profile *bp, strata_error *err) {
    return range_add_profile(arg, bp, bp->total, err);
}

/* Adds profiles[0..n) but the dropped ones; with sample-label matchers, only the samples whose
 * labels match count. */
static int range_add_selected(range_cursor *cur, const block_profile *profiles, size_t n,
                              const bool *dropped, strata_error *err) {
    const range_query *q = cur->p->q;
    int rc = -1;
    sample_view view;
    block_samples samples = {0};
    if (sample_view_init(&view, cur->r, q->sel, NULL, profiles, n, err) != 0)
        goto out;
    for (size_t i = 0; i < n; i++) {
        const block_profile *bp = &profiles[i];
        if (dropped != NULL && dropped[i])
            continue; /* counted in another block (or earlier in this one) */
        int64_t total = bp->total;
        if (view.filter &&
            engine_has_sample_matchers(q->sel, block_reader_series_labels(cur->r, bp->series_id))) {
            bool any = false;
            if (profile_sample_total(&view, bp, &samples, &total, &any, err) != 0)
                goto out;
            if (!any)
                continue;
        }
        if (range_add_profile(cur, bp, total, err) != 0)
            goto out;
    }
    rc = 0;
out:
    block_samples_free(&samples);
    sample_view_free(&view);
    return rc;
}

/* A deferred block (no copy of another block's profile can hide in it) selects as it reads:
 * its profiles go straight into the cells unless the matchers name sample labels, whose filter
 * needs them as an array. */
static int range_add_deferred(range_cursor *cur, strata_error *err) {
    const range_query *q = cur->p->q;
    uint32_t *ids = NULL;
    size_t n_ids = 0;
    if (engine_select_series(cur->r, q->sel, &q->sel->profile_type, &ids, &n_ids, err) != 0)
        return -1;
    bool by_samples = false;
    int rc = n_ids > 0 ? engine_matchers_name_sample_labels(cur->r, q->sel, &by_samples, err) : 0;
    if (rc == 0 && n_ids > 0 && !by_samples) {
        rc = block_reader_visit_profiles(cur->r, ids, n_ids, q->start_ns, q->end_ns,
                                         range_visit_profile, cur, err);
    } else if (rc == 0 && n_ids > 0) {
        block_profile *profiles = NULL;
        size_t n = 0;
        rc = block_reader_profiles(cur->r, ids, n_ids, q->start_ns, q->end_ns, &profiles, &n, err);
        if (rc == 0)
            rc = range_add_selected(cur, profiles, n, NULL, err);
        free(profiles);
    }
    free(ids);
    return rc;
}

static int block_range(indexed_block *b, size_t index, block_reader *r, void *partial,
                       strata_error *err) {
    range_partial *p = partial;
    const block_selection *selection = &p->q->selections[index];
    (void)b;
    range_cursor cur = {p, r, UINT32_MAX, NULL, SIZE_MAX, 0};
    if (selection->deferred)
        return range_add_deferred(&cur, err);
    return range_add_selected(&cur, selection->profiles, selection->n, selection->dropped, err);
}

/* Merges partial src into dst. */
static int range_partial_merge(range_partial *dst, range_partial *src, bool delta,
                               strata_error *err) {
    for (size_t i = 0; i < src->n_groups; i++) {
        range_group *sg = &src->groups[i];
        label_set labels = sg->labels;
        sg->labels = (label_set)LABEL_SET_INIT;
        range_group *dg = find_group(dst, &labels, err);
        if (dg == NULL)
            return -1;
        for (size_t c = 0; c < sg->n_cells; c++) {
            if (!cell_in_use(sg, c))
                continue;
            range_cell *sc = &sg->cells[c];
            range_cell *dc = find_cell(dst->q, dg, sc->bucket, err);
            if (dc == NULL)
                return -1;
            cell_add(dc, delta, sc->first_time, sc->first_duration, sc->value, sc->count,
                     sc->several_times);
        }
    }
    return 0;
}

static int compare_cells(const void *a, const void *b) {
    const range_cell *x = a, *y = b;
    return x->bucket < y->bucket ? -1 : x->bucket > y->bucket;
}

static int compare_series(const void *a, const void *b) {
    return label_set_compare(&((const range_series *)a)->labels,
                             &((const range_series *)b)->labels);
}

static void fill_point(const range_query *q, const range_cell *c, bool per_ns, range_point *pt) {
    pt->time_ns = q->delta ? c->bucket : c->first_time;
    pt->value = c->value;
    pt->count = c->count;
    pt->duration_ns = (!q->delta || !c->several_times) ? c->first_duration : q->step_ns;
    if (!q->delta || pt->duration_ns <= 0)
        pt->value_per_second = (double)c->value;
    else if (per_ns)
        pt->value_per_second = (double)c->value / (double)pt->duration_ns;
    else
        pt->value_per_second = (double)c->value / ((double)pt->duration_ns / 1e9);
}

static int series_from_group(const range_query *q, range_group *g, range_series *s,
                             strata_error *err) {
    const profile_type *t = &q->sel->profile_type;
    s->labels = g->labels;
    g->labels = (label_set)LABEL_SET_INIT;
    s->sample_type = strdup(q->samples_count ? t->period_type : t->sample_type);
    s->sample_unit = strdup(q->samples_count ? t->period_unit : t->sample_unit);
    s->period_type = strdup(t->period_type);
    s->period_unit = strdup(t->period_unit);
    s->points = calloc(g->n_cells + 1, sizeof *s->points);
    if (!s->sample_type || !s->sample_unit || !s->period_type || !s->period_unit || !s->points)
        return strata_error_oom(err);
    if (!g->dense) /* dense cells are in bucket order already */
        qsort(g->cells, g->n_cells, sizeof *g->cells, compare_cells);
    bool per_ns = strcmp(s->sample_unit, "nanoseconds") == 0;
    size_t n = 0;
    for (size_t c = 0; c < g->n_cells; c++)
        if (cell_in_use(g, c) && g->cells[c].count > 0)
            fill_point(q, &g->cells[c], per_ns, &s->points[n++]);
    s->n_points = n;
    return 0;
}

/* A range query's arguments, for each of its attempts (engine_retry). */
typedef struct range_call {
    const char *tenant;
    range_query params; /* the selector, range, step and sum_by; an attempt sets the rest */
    bool sum_every_profile;
    range_series **out;
    size_t *n;
    query_stats *stats;
} range_call;

static int query_range_attempt(query_engine *e, void *arg, strata_error *err) {
    const range_call *c = arg;
    const selector *sel = c->params.sel;
    int64_t start_ns = c->params.start_ns, end_ns = c->params.end_ns, step_ns = c->params.step_ns;
    range_series **out = c->out;
    size_t *n = c->n;
    query_stats *stats = c->stats;
    *out = NULL;
    *n = 0;
    memset(stats, 0, sizeof *stats);
    if (!sel->has_profile_type)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "the query must name a profile type, e.g. "
                                "process_cpu:samples:count:cpu:nanoseconds:delta{...}");
    if (step_ns <= 0 || end_ns < start_ns)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "step must be positive and end not before start");
    const profile_type *t = &sel->profile_type;
    range_query q = c->params;
    q.delta = t->delta || c->sum_every_profile;
    q.samples_count =
        strcmp(t->sample_type, "samples") == 0 && strcmp(t->sample_unit, "count") == 0;
    q.first_bucket = bucket_of(start_ns, step_ns);
    uint64_t span =
        ((uint64_t)bucket_of(end_ns, step_ns) - (uint64_t)q.first_bucket) / (uint64_t)step_ns;
    if (span < RANGE_DENSE_BUCKETS)
        q.n_buckets = (size_t)span + 1;
    indexed_block **blocks;
    size_t n_blocks;
    if (block_index_acquire(e->index, c->tenant, start_ns, end_ns, &blocks, &n_blocks, err) != 0)
        return -1;
    bool *skipped = calloc(n_blocks + 1, sizeof *skipped);
    q.selections = calloc(n_blocks + 1, sizeof *q.selections);
    if (skipped == NULL || q.selections == NULL) {
        free(skipped);
        free(q.selections);
        block_index_release_all(e->index, blocks, n_blocks);
        return strata_error_oom(err);
    }
    /* the range pass reads the profile pages selection decoded: nothing to keep for it */
    if (engine_select_profiles(e, blocks, n_blocks, sel, start_ns, end_ns, true, q.selections,
                               skipped, stats, NULL, err) != 0) {
        free(skipped);
        block_selections_free(q.selections, n_blocks);
        block_index_release_all(e->index, blocks, n_blocks);
        return -1;
    }
    size_t workers = engine_fetch_worker_count(e, n_blocks);
    range_partial *parts = calloc(workers, sizeof *parts);
    void **ptrs = calloc(workers, sizeof *ptrs);
    int rc = (parts && ptrs) ? 0 : strata_error_oom(err);
    for (size_t w = 0; rc == 0 && w < workers; w++) {
        parts[w].q = &q;
        ptrs[w] = &parts[w];
    }
    if (rc == 0)
        rc = engine_for_each_block(e, blocks, n_blocks, block_range, ptrs, workers, skipped, stats,
                                   err);
    block_index_release_all(e->index, blocks, n_blocks);
    free(skipped);
    block_selections_free(q.selections, n_blocks);
    for (size_t w = 1; rc == 0 && w < workers; w++)
        rc = range_partial_merge(&parts[0], &parts[w], q.delta, err);
    range_series *series = NULL;
    size_t count = rc == 0 ? parts[0].n_groups : 0;
    if (rc == 0 && (series = calloc(count + 1, sizeof *series)) == NULL)
        rc = strata_error_oom(err);
    for (size_t i = 0; rc == 0 && i < count; i++)
        rc = series_from_group(&q, &parts[0].groups[i], &series[i], err);
    for (size_t w = 0; parts != NULL && w < workers; w++)
        range_partial_free(&parts[w]);
    free(parts);
    free(ptrs);
    if (rc != 0) {
        query_range_free(series, count);
        return -1;
    }
    if (count == 0) {
        query_range_free(series, count);
        return engine_no_profiles(stats, err);
    }
    qsort(series, count, sizeof *series, compare_series);
    *out = series;
    *n = count;
    return 0;
}

void query_range_free(range_series *series, size_t n) {
    for (size_t i = 0; series != NULL && i < n; i++) {
        label_set_free(&series[i].labels);
        free(series[i].points);
        free(series[i].sample_type);
        free(series[i].sample_unit);
        free(series[i].period_type);
        free(series[i].period_unit);
    }
    free(series);
}

/* ---- entry points ---------------------------------------------------------------------------- */

static int run_range(query_engine *e, const char *tenant, const selector *sel, int64_t start_ns,
                     int64_t end_ns, int64_t step_ns, const char *const *sum_by, size_t n_sum_by,
                     bool sum_every_profile, range_series **out, size_t *n, query_stats *stats,
                     strata_error *err) {
    query_stats ignored;
    range_call c = {.tenant = tenant,
                    .params = {.sel = sel,
                               .start_ns = start_ns,
                               .end_ns = end_ns,
                               .step_ns = step_ns,
                               .sum_by = sum_by,
                               .n_sum_by = n_sum_by},
                    .sum_every_profile = sum_every_profile,
                    .out = out,
                    .n = n,
                    .stats = stats != NULL ? stats : &ignored};
    return engine_retry(e, query_range_attempt, &c, err);
}

int query_range(query_engine *e, const char *tenant, const selector *sel, int64_t start_ns,
                int64_t end_ns, int64_t step_ns, const char *const *sum_by, size_t n_sum_by,
                range_series **out, size_t *n, query_stats *stats, strata_error *err) {
    return run_range(e, tenant, sel, start_ns, end_ns, step_ns, sum_by, n_sum_by, false, out, n,
                     stats, err);
}

int query_range_summed(query_engine *e, const char *tenant, const selector *sel, int64_t start_ns,
                       int64_t end_ns, int64_t step_ns, const char *const *sum_by, size_t n_sum_by,
                       range_series **out, size_t *n, query_stats *stats, strata_error *err) {
    return run_range(e, tenant, sel, start_ns, end_ns, step_ns, sum_by, n_sum_by, true, out, n,
                     stats, err);
}
