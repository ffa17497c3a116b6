/*
 * block_rollup.h - per-series stack rollups, the optional rollup tables of a block
 * (docs/block-format.md, section 6.10).
 *
 * Design. A merge over a long range reads every (profile, stack) sample row of every selected
 * series, although for a block the range covers completely the answer per series is always the
 * same: the sum, over the series' profiles, of each stack's value. The writer therefore stores
 * that sum once per (series, stack), already scaled exactly as the querier's merge scales a
 * profile's samples (multiplied by the profile's period when the series' type is `samples:count`,
 * so CPU sums as nanoseconds; unscaled otherwise), summed in wrapping 64-bit arithmetic, so that
 * adding a series' rollup gives bit-for-bit what adding its sample rows gives. Stacks whose sum
 * is 0 are left out (they add nothing to a merge). A series with fewer than
 * BLOCK_ROLLUP_MIN_PROFILES profiles gets no rollup rows: its sample rows are no longer than a
 * rollup would be, and freshly ingested blocks (one profile per series, typically) would
 * otherwise store every sample twice.
 *
 * block_rollup_build computes the rollups from a block's profiles in (series, time) order,
 * handing each rollup row to a callback (the writer encodes it straight into the rollup_stacks
 * table, so no second copy of the rows is held) and filling one entry per series. It needs one
 * accumulator and one stamp per stack id (12 bytes each), plus the distinct stacks of one series.
 *
 * Sample labels (format version 2). A row is a (stack, label set) pair: samples of one stack with
 * different pprof label sets stay apart, so a rollup can still be grouped and filtered by sample
 * label. Rows without labels (label set 0) use the per-stack accumulators above; labelled rows, a
 * hash map keyed by (stack, label set), so blocks without labels cost nothing more.
 *
 * block_rollup_scale tells whether a profile type's values are multiplied by the period; the
 * querier's merge uses the same rule, so the two cannot drift apart.
 */
#ifndef STRATA_BLOCK_ROLLUP_H
#define STRATA_BLOCK_ROLLUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

/* True when a merge multiplies a profile's values by its period: sample type "samples", unit
 * "count" (Parca shows such CPU profiles as nanoseconds). */
bool block_rollup_scale(const char *sample_type, const char *sample_unit);

/* One profile, as the rollup builder sees it: its series (ids ascending across the input), the
 * multiplier of its values (its period, or 1) and its sample rows. */
typedef struct block_rollup_profile {
    uint32_t series;
    int64_t multiplier;
    const uint32_t *stacks;     /* stack ids, each < n_stacks */
    const uint32_t *label_sets; /* per sample: its label set (0 = none); NULL when all are 0 */
    const int64_t *values;
    uint32_t n_samples;
} block_rollup_profile;

/* One series' entry of the rollup_series table. */
typedef struct block_rollup_series {
    uint32_t profile_count; /* profiles of the series in the block; the series has a rollup only
                               when this is at least BLOCK_ROLLUP_MIN_PROFILES */
    uint64_t first_stack;   /* first row in rollup_stacks */
    uint32_t stack_count;   /* rows in rollup_stacks */
} block_rollup_series;

/* Receives the rollup rows in table order: series ascending, (stack, label set) ascending within
 * a series. Returns 0, or -1 with err set to stop the build. */
typedef int (*block_rollup_row_fn)(void *ctx, uint32_t stack, uint32_t label_set, int64_t value,
                                   strata_error *err);

/* Builds the rollups of n_profiles profiles sorted by series, for series ids 0..n_series-1 and
 * stack ids 0..n_stacks-1, calling row for every rollup row and filling series[0..n_series).
 * INVALID_ARGUMENT if the profiles are not sorted by series or an id is out of range. */
int block_rollup_build(const block_rollup_profile *profiles, size_t n_profiles, size_t n_series,
                       size_t n_stacks, block_rollup_row_fn row, void *ctx,
                       block_rollup_series *series, strata_error *err);

/* Incremental building, one series at a time, for a writer that streams its tables (block_writer
 * with a spool): profiles are added as they come, and each series is ended before the next one
 * starts. The builder sizes its per-stack arrays to the largest stack id seen, so the stack table
 * may grow while it runs. block_rollup_build is this builder run over a whole array. */
typedef struct block_rollup_builder block_rollup_builder;

block_rollup_builder *block_rollup_builder_new(strata_error *err);
void block_rollup_builder_free(block_rollup_builder *b);
/* Adds one profile of the current series. */
int block_rollup_builder_add(block_rollup_builder *b, const block_rollup_profile *p,
                             strata_error *err);
/* Ends the current series: fills *s (its profiles, its first row, its rows) and, when it has at
 * least BLOCK_ROLLUP_MIN_PROFILES profiles, emits its rows through row; then starts the next. */
int block_rollup_builder_end_series(block_rollup_builder *b, block_rollup_row_fn row, void *ctx,
                                    block_rollup_series *s, strata_error *err);
/* Bytes the builder holds. */
size_t block_rollup_builder_memory_bytes(const block_rollup_builder *b);

#endif
