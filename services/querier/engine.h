/*
 * engine.h - query execution over the blocks of a block_index, with Parca's semantics
 * (reference: parca-api.md sections 1.3, 1.7 and 3).
 *
 * Every operation first prunes blocks by time (meta.json) and then, per block, series by the
 * selector through the block's label postings, before any profile or sample page is read:
 *   - metadata (profile types, label names and values) reads only series tables;
 *   - query_range reads only the profiles table (series, time, duration, period, total);
 *   - merge and single read the samples of the selected profiles, aggregate them per stack, and
 *     translate each distinct stack (not each sample) into the merged calltree. A merge whose
 *     range holds every profile a block has of a series reads that series' rollup instead (one
 *     row per distinct stack, pre-summed and pre-scaled by the writer: block_rollup.h), so long
 *     ranges over compacted blocks skip the sample scan; series cut by the range's edges, single
 *     profiles and blocks without rollups use the sample rows. Both give identical sums.
 * Values of `samples/count` profiles are multiplied by their period in ranges and merges, so CPU
 * shows as nanoseconds, as Parca does.
 *
 * pprof sample labels (format version 2 blocks), as Parca: they share the series labels'
 * namespace, a sample label whose name its series also has being seen as exported_<name>. A
 * selector matcher naming a label a series lacks is applied to each sample's labels: the series
 * is selected when one of its label sets (block_reader_series_label_sets) or an unlabelled
 * sample can match, and merges, singles and ranges count only the matching samples. A tree that
 * groups by labels (calltree_grouping: labels.<name>, or every sample label) gets each sample's
 * stack under the label frame of its grouped labels (series labels included), rows without any
 * of them under the root. Both are worked out once per (series, label set) in a block; a query
 * with neither costs nothing more than before.
 *
 * Memory per query is bounded by max_query_bytes (estimated from the samples and stacks a merge
 * holds; the engine's, or one a caller passes per query in query_options); past it the query
 * fails with RESOURCE_EXHAUSTED and a message instead of growing.
 * Blocks are processed in parallel by up to `parallelism` threads, each holding one block's reader:
 * the query's own and helpers the engine keeps from its first queries until it is freed
 * (block_workers.h), so a query starts no thread.
 */
#ifndef STRATA_QUERIER_ENGINE_H
#define STRATA_QUERIER_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "block_index.h"
#include "calltree/calltree.h"
#include "common/error.h"
#include "labels/labels.h"

typedef struct query_engine query_engine;

typedef struct query_engine_options {
    uint64_t max_query_bytes; /* default 1 GiB */
    int parallelism;          /* default: online CPUs */
    /* threads for the passes that read only small tables (selection, ranges, labels), which a cold
     * reader spends waiting on the bucket: default 16, at least parallelism, at most 64 */
    int fetch_parallelism;
    bool use_rollups; /* default true; false makes merges scan sample rows even where a block's
                         rollup covers a series (tests compare the two paths) */
} query_engine_options;

void query_engine_options_default(query_engine_options *opts);
int query_engine_new(const query_engine_options *opts, block_index *index, query_engine **out,
                     strata_error *err);
/* Joins the engine's helper threads; no query may be running. */
void query_engine_free(query_engine *e);

/* Distinct profile types with data in [start, end], sorted by their text form. */
int query_profile_types(query_engine *e, const char *tenant, int64_t start_ns, int64_t end_ns,
                        profile_type **out, size_t *n, strata_error *err);
void query_profile_types_free(profile_type *types, size_t n);

/* Label names (or the values of label `name` when name is non-NULL) of series matching every
 * selector in sels (any of them when n_sels > 1; all series when 0) and, if type is non-NULL, of
 * that profile type, with the pprof sample labels of their samples (exported_<name> where the
 * series has the name too; only label sets matching the selector's sample matchers). Sorted,
 * unique. __name__ is never listed. */
int query_labels(query_engine *e, const char *tenant, const char *name, const selector *sels,
                 size_t n_sels, const profile_type *type, int64_t start_ns, int64_t end_ns,
                 char ***out, size_t *n, strata_error *err);
void query_strings_free(char **strings, size_t n);

/* What a query left out or folded, for its answer's warnings. */
typedef struct query_stats {
    uint64_t duplicates;     /* profiles not counted: identical to one that was (a client retry) */
    uint64_t skipped_blocks; /* blocks left out because their data failed its checks */
    char skipped_block[128]; /* the first one: tenant/ULID */
    char skipped_error[256]; /* and its error */
} query_stats;

typedef struct range_point {
    int64_t time_ns;
    int64_t value;
    double value_per_second;
    int64_t duration_ns;
    int32_t count;
} range_point;

typedef struct range_series {
    label_set labels;
    range_point *points;
    size_t n_points;
    char *sample_type; /* after samples:count -> period conversion */
    char *sample_unit;
    char *period_type;
    char *period_unit;
} range_series;

/* The metrics graph: sel must name a profile type. step_ns > 0. NOT_FOUND when nothing matched
 * (as Parca). Identical profiles count once; stats (may be NULL) says what was left out. */
int query_range(query_engine *e, const char *tenant, const selector *sel, int64_t start_ns,
                int64_t end_ns, int64_t step_ns, const char *const *sum_by, size_t n_sum_by,
                range_series **out, size_t *n, query_stats *stats, strata_error *err);
/* The same with every type summed as delta types are (Pyroscope's SelectSeries): a gauge's
 * bucket holds the sum (and count) of all its profiles there, not the earliest one's, and sum_by
 * groups it too. */
int query_range_summed(query_engine *e, const char *tenant, const selector *sel, int64_t start_ns,
                       int64_t end_ns, int64_t step_ns, const char *const *sum_by, size_t n_sum_by,
                       range_series **out, size_t *n, query_stats *stats, strata_error *err);
void query_range_free(range_series *series, size_t n);

typedef struct merge_result {
    uint64_t profiles; /* profiles merged */
    uint64_t samples;  /* sample rows covered (read, or summarised by a rollup) */
    int64_t total;     /* sum of values added */
    int64_t min_time_ns;
    int64_t max_time_ns;
    int64_t period;      /* of the earliest profile (the smallest at a tie) */
    int64_t duration_ns; /* sum of profile durations */
    /* blocks whose stacks were translated through their writer dictionary's memo (fresh blocks
     * cut from one dictionary, docs/block-format.md 6.12) rather than one by one */
    uint64_t dictionary_blocks;
    query_stats stats; /* duplicates not counted, blocks left out */
} merge_result;

/* Adds every profile of sel's type matching sel with start <= time <= end into tree (into the
 * diff base side when base is true), with the tree's group-by (calltree_get_grouping: frame
 * fields, and pprof labels put above the stacks). Matchers on sample labels keep only the
 * matching samples. Identical profiles (same series, time, duration, period and samples: a
 * retried push) count once, as the compactor keeps one; a block whose data fails its checksums is
 * left out and named in result->stats. NOT_FOUND when nothing matched (no profile, or no sample
 * passing the sample-label matchers). */
int query_merge(query_engine *e, const char *tenant, const selector *sel, int64_t start_ns,
                int64_t end_ns, calltree *tree, bool base, merge_result *result, strata_error *err);
/* The profiles at exactly time_ns (millisecond precision, as Parca). */
int query_single(query_engine *e, const char *tenant, const selector *sel, int64_t time_ns,
                 calltree *tree, bool base, merge_result *result, strata_error *err);

/* What one merge or single may differ in from the engine's options (the querier's per-tenant
 * limits). A zero member takes the engine's value. */
typedef struct query_options {
    uint64_t max_query_bytes; /* this query's memory bound, instead of the engine's */
    const char *query_text;   /* sel as the client wrote it: needed to fan out (NULL: never) */
} query_options;

/* query_merge and query_single with per-query options (opts may be NULL: the engine's). A merge
 * over opts->max_query_bytes fails with RESOURCE_EXHAUSTED naming max_query_bytes and its value,
 * like one over the engine's. */
int query_merge_opts(query_engine *e, const char *tenant, const query_options *opts,
                     const selector *sel, int64_t start_ns, int64_t end_ns, calltree *tree,
                     bool base, merge_result *result, strata_error *err);
int query_single_opts(query_engine *e, const char *tenant, const query_options *opts,
                      const selector *sel, int64_t time_ns, calltree *tree, bool base,
                      merge_result *result, strata_error *err);

/* ---- fan-out: a merge shared out over several queriers (engine_fanout.c) ---------------------
 *
 * The querier that receives a big merge (the coordinator) cuts the query's time range into one
 * shard per member (itself and its live peers), balanced by the sample rows the blocks' meta.json
 * declare. Each member selects the profiles of its shard in the blocks the coordinator names,
 * drops the duplicates among them (a copy of a profile has the same series and time, so it falls
 * in the same shard) and merges them into a partial tree; the coordinator merges its own shard
 * meanwhile and then adds the peers' partial trees to its tree. The call-tree merge is
 * associative and a frame's fields are reconciled the same way whatever the order (calltree.h),
 * so the answer is the one the coordinator would give alone. A peer that fails (dies, times out,
 * answers an error) or cannot find one of its blocks has its shard merged by the coordinator.
 */

/* One member's shard of a merge. */
typedef struct merge_share {
    const char *tenant;
    const char *query;        /* the selector's text */
    int64_t start_ns, end_ns; /* the shard: profiles with start_ns <= time <= end_ns */
    bool base;
    bool use_rollups;
    uint64_t max_query_bytes;
    const calltree_grouping *grouping;
    const char *const *blocks; /* ULIDs of the coordinator's blocks that meet the shard */
    size_t n_blocks;
} merge_share;

/* What a share gives besides its tree. */
typedef struct merge_share_result {
    merge_result result; /* stats: duplicates dropped, blocks left out (failed checks) */
    uint64_t passed;     /* sample rows that passed sample-label matchers */
    bool filtered;
    bool *missing; /* per block of the share: not found there (n_blocks entries, caller's) */
} merge_share_result;

typedef struct query_fanout {
    /* The members a merge can use now: returns the number of peers (0: this querier alone) and
     * sets *self to this querier's place among the 1 + peers members, in an order every querier
     * agrees on (so a part of the time line goes to the same querier whichever one coordinates,
     * and that querier's readers are warm). Member m != *self is peer m (m < *self) or m - 1.
     * *plan (may stay NULL) is handed to run and release: the peers as they were chosen. */
    size_t (*members)(void *arg, size_t *self, void **plan);
    /* Runs share on peer p (blocking, on a thread of its own): adds the peer's partial tree into
     * tree (empty, with the share's grouping) and fills *res. -1 when the peer failed: the
     * coordinator merges the share itself. */
    int (*run)(void *arg, void *plan, size_t peer, const merge_share *share, calltree *tree,
               merge_share_result *res, strata_error *err);
    /* Ends a plan once every run is over (NULL: nothing to do). */
    void (*release)(void *arg, void *plan);
    void *arg;
    uint64_t min_rows; /* merges over blocks declaring fewer sample rows stay on the coordinator */
} query_fanout;

/* Installs fan-out (before any query); NULL or members NULL turns it off. */
void query_engine_set_fanout(query_engine *e, const query_fanout *fanout);

/* The peer's side: selects the profiles of the share's range in exactly share->blocks (sel parsed
 * from share->query), drops duplicates among them and merges them into tree, without fanning out.
 * A block the index lacks is looked up in the bucket (block_index_announce); one that is not there
 * either is marked in res->missing, and then nothing is merged (the coordinator merges the whole
 * share). Unlike query_merge, nothing matching is not an error (res->result.profiles is 0). */
int query_merge_share(query_engine *e, const merge_share *share, const selector *sel,
                      calltree *tree, merge_share_result *res, strata_error *err);

#endif
