/*
 * planner.c - see planner.h.
 */
#include "planner.h"

#include <stdlib.h>

#include "common/array.h"

int plan_validate_ranges(const int64_t *ranges_ms, size_t n, strata_error *err) {
    if (n == 0 || n > PLANNER_MAX_RANGES)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "block_ranges: want 1 to %d ranges, got %zu", PLANNER_MAX_RANGES,
                                n);
    for (size_t i = 0; i < n; i++) {
        if (ranges_ms[i] <= 0)
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "block_ranges[%zu]: want at least 1ms", i);
        if (i > 0 && (ranges_ms[i] <= ranges_ms[i - 1] || ranges_ms[i] % ranges_ms[i - 1] != 0))
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "block_ranges[%zu]: %lldms is not a larger multiple of the "
                                    "range before it (%lldms)",
                                    i, (long long)ranges_ms[i], (long long)ranges_ms[i - 1]);
    }
    return 0;
}

/* Floor division, so windows before the epoch are aligned too. */
static int64_t window_start(int64_t t, int64_t range) {
    int64_t q = t / range;
    if (t % range != 0 && t < 0)
        q--;
    return q * range;
}

typedef struct candidate {
    size_t index;
    int64_t window;
    int64_t min_time_ms;
} candidate;

static int compare_candidates(const void *a, const void *b) {
    const candidate *x = a, *y = b;
    if (x->window != y->window)
        return x->window < y->window ? -1 : 1;
    if (x->min_time_ms != y->min_time_ms)
        return x->min_time_ms < y->min_time_ms ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

void plan_jobs_free(plan_job *jobs, size_t n) {
    for (size_t i = 0; i < n; i++)
        free(jobs[i].blocks);
    free(jobs);
}

/* The jobs planned so far: the caller's array, its count and its capacity. */
typedef struct job_list {
    plan_job **jobs;
    size_t *n_jobs;
    size_t cap;
} job_list;

/* Appends the job for cands[from, to) of range i. */
static int add_job(const plan_block *blocks, const candidate *cands, size_t from, size_t to,
                   size_t i, int64_t range, job_list *l, strata_error *err) {
    if (STRATA_ARRAY_RESERVE_OR_OOM(*l->jobs, l->cap, *l->n_jobs + 1, err) != 0)
        return -1;
    size_t *n_jobs = l->n_jobs;
    plan_job *job = &(*l->jobs)[*n_jobs];
    *job = (plan_job){.range_index = i,
                      .window_start_ms = cands[from].window,
                      .window_end_ms = cands[from].window + range,
                      .level = (int)i + 2};
    if ((job->blocks = malloc((to - from) * sizeof *job->blocks)) == NULL)
        return strata_error_oom(err);
    for (size_t k = from; k < to; k++) {
        job->blocks[job->n_blocks++] = cands[k].index;
        if (blocks[cands[k].index].level > job->level)
            job->level = blocks[cands[k].index].level;
    }
    (*n_jobs)++;
    return 0;
}

/* The jobs of range i (appended to l). */
static int plan_range(const plan_block *blocks, size_t n, const plan_options *o, size_t i,
                      candidate *cands, job_list *l, strata_error *err) {
    int64_t range = o->ranges_ms[i];
    size_t count = 0;
    for (size_t b = 0; b < n; b++) {
        const plan_block *pb = &blocks[b];
        if (pb->marked || pb->no_compact || pb->max_time_ms <= pb->min_time_ms)
            continue;
        int64_t w = window_start(pb->min_time_ms, range);
        if (window_start(pb->max_time_ms - 1, range) != w)
            continue; /* straddles a boundary of this range */
        cands[count++] = (candidate){.index = b, .window = w, .min_time_ms = pb->min_time_ms};
    }
    qsort(cands, count, sizeof *cands, compare_candidates);
    for (size_t from = 0; from < count;) {
        size_t to = from + 1;
        while (to < count && cands[to].window == cands[from].window)
            to++;
        int64_t w = cands[from].window;
        bool closed = w + range + o->consistency_delay_ms <= o->now_ms;
        bool skipped = o->skip_window != NULL && o->skip_window(o->skip_ctx, i, w);
        if (to - from >= 2 && closed && !skipped &&
            add_job(blocks, cands, from, to, i, range, l, err) != 0)
            return -1;
        from = to;
    }
    return 0;
}

int plan_compaction(const plan_block *blocks, size_t n, const plan_options *opts, plan_job **jobs,
                    size_t *n_jobs, strata_error *err) {
    *jobs = NULL;
    *n_jobs = 0;
    if (plan_validate_ranges(opts->ranges_ms, opts->n_ranges, err) != 0)
        return -1;
    if (n == 0)
        return 0;
    candidate *cands = malloc(n * sizeof *cands);
    if (cands == NULL)
        return strata_error_oom(err);
    int rc = 0;
    job_list l = {jobs, n_jobs, 0};
    for (size_t i = 0; i < opts->n_ranges && rc == 0 && *n_jobs == 0; i++)
        rc = plan_range(blocks, n, opts, i, cands, &l, err);
    free(cands);
    if (rc != 0) {
        plan_jobs_free(*jobs, *n_jobs);
        *jobs = NULL;
        *n_jobs = 0;
    }
    return rc;
}

size_t plan_retention(const plan_block *blocks, size_t n, int64_t now_ms, int64_t retention_ms,
                      size_t *expired) {
    if (retention_ms <= 0)
        return 0;
    size_t count = 0;
    for (size_t i = 0; i < n; i++)
        if (!blocks[i].marked && blocks[i].max_time_ms <= now_ms - retention_ms)
            expired[count++] = i;
    return count;
}
