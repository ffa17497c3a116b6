/*
 * planner.h - which blocks the compactor merges next, and which blocks retention expires.
 *
 * Levels over aligned windows. The compactor is configured with block ranges, smallest first, each
 * dividing the next (default 5m, 2h, 24h). Range i has windows [k * range, (k + 1) * range) aligned
 * to the Unix epoch, and merging the blocks of one such window produces a block of level i + 2
 * (ingesters write level 1). A block is a candidate for range i when it lies entirely inside one
 * window of that range (minTime inclusive, maxTime exclusive), is not marked for deletion and has
 * no no-compact mark. A window becomes a job when it holds at least two candidates and it has
 * closed at least consistency_delay ago (window end + delay <= now): by then every ingester has
 * flushed what belongs in it, and late stragglers merge into the window's block on a later cycle.
 *
 * The plan holds the jobs of the smallest range that has any, oldest window first; they are
 * disjoint, so they can run in any order. The compactor runs them and plans again, so the level-2
 * blocks of a 2-hour window all exist before the 2-hour job that merges them is planned. Blocks
 * that straddle a window boundary of range i (an ingester block from 04:59.6 to 05:00.4) are left
 * to the first range whose window holds them whole; blocks larger than the largest range are never
 * merged. Overlapping blocks (retried writes, several ingesters) need nothing special: they fall
 * into the same window and the merger de-duplicates identical profiles.
 *
 * A job's output level is the larger of i + 2 and the highest source level (a window may hold a
 * block that an earlier, larger-range job happened to produce).
 *
 * Retention. A block expires when its maxTime is at or before now - retention (the whole block is
 * older than the retention period); retention 0 keeps everything. Blocks already marked are not
 * returned again.
 */
#ifndef STRATA_COMPACTOR_PLANNER_H
#define STRATA_COMPACTOR_PLANNER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "block/ulid.h"
#include "common/error.h"

#define PLANNER_MAX_RANGES 8

typedef struct plan_block {
    ulid id;
    int64_t min_time_ms; /* inclusive */
    int64_t max_time_ms; /* exclusive */
    int level;
    bool marked;     /* has deletion-mark.json */
    bool no_compact; /* has no-compact-mark.json */
} plan_block;

typedef struct plan_options {
    int64_t ranges_ms[PLANNER_MAX_RANGES]; /* smallest first, each dividing the next */
    size_t n_ranges;
    int64_t consistency_delay_ms;
    int64_t now_ms;
    /* Optional: true to leave a window out of the plan (e.g. one that exceeded the memory limit).
     */
    bool (*skip_window)(void *ctx, size_t range_index, int64_t window_start_ms);
    void *skip_ctx;
} plan_options;

typedef struct plan_job {
    size_t range_index;
    int64_t window_start_ms;
    int64_t window_end_ms;
    int level;      /* of the merged block */
    size_t *blocks; /* indices into the planner's input, oldest minTime first */
    size_t n_blocks;
} plan_job;

/* INVALID_ARGUMENT unless 1 <= n_ranges <= PLANNER_MAX_RANGES, every range > 0 and each range
 * divides the next. */
int plan_validate_ranges(const int64_t *ranges_ms, size_t n, strata_error *err);

/* The next jobs (see above); *jobs is malloc'd (NULL when there is nothing to do). */
int plan_compaction(const plan_block *blocks, size_t n, const plan_options *opts, plan_job **jobs,
                    size_t *n_jobs, strata_error *err);
void plan_jobs_free(plan_job *jobs, size_t n);

/* Indices of the blocks retention expires, written to expired (room for n); returns the count. */
size_t plan_retention(const plan_block *blocks, size_t n, int64_t now_ms, int64_t retention_ms,
                      size_t *expired);

#endif
