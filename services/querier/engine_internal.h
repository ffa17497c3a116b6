/*
 * engine_internal.h - what the engine's files share. Not a contract.
 *   engine.c          the block driver (on block_workers' threads), metadata queries, retries
 *   engine_samples.c  series and samples a selector picks in a block; the per-sample view
 *   engine_select.c   the profiles a query covers (selection and duplicates)
 *   engine_range.c    query_range
 *   engine_merge.c    merges and singles into call trees
 *   engine_fanout.c   a merge shared out over several queriers
 */
#ifndef STRATA_QUERIER_ENGINE_INTERNAL_H
#define STRATA_QUERIER_ENGINE_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "block/block_reader.h"
#include "block_workers.h"
#include "common/hash.h"
#include "engine.h"

/* Runs on one block with its reader open and locked; `index` is the block's position in the
 * query's block list, `partial` the calling worker's partial result. */
typedef int (*block_fn)(indexed_block *b, size_t index, block_reader *r, void *partial,
                        strata_error *err);

/* Runs fn over blocks[0..n) with up to `workers` threads (partials[0..workers)). With skips
 * non-NULL, a block whose data fails its checks (fn fails with DATA_LOSS) is left out instead of
 * failing the query: skipped[index] is set and stats counts it (fn must not have changed its
 * partial then). */
int engine_for_each_block(query_engine *e, indexed_block **blocks, size_t n, block_fn fn,
                          void **partials, size_t workers, bool *skipped, query_stats *stats,
                          strata_error *err);

/* What a query's first pass read ahead, kept for its next pass. A pass drops each block's
 * read-ahead bytes when it is done with the block (cached readers keep decoded pages, not raw
 * bytes); but a small fresh block is fetched whole by its reader's first read, and dropping that
 * after a merge's selection pass made the merge pass fetch the block again (one more GET per
 * block, serial on each merging thread). A pass given a keep leaves the bytes while the query's
 * total stays within budget; the query drops them at its end (engine_drop_kept_readahead). */
typedef struct readahead_keep {
    atomic_size_t bytes; /* kept so far */
    size_t budget;
    bool *kept; /* per block of the query */
} readahead_keep;

#define READAHEAD_KEEP_BUDGET ((size_t)256 << 20)

/* A keep for n blocks (kept NULL when out of memory: nothing is kept then). */
void readahead_keep_init(readahead_keep *k, size_t n);
/* Drops what passes kept of blocks[0..n) and frees k's array. */
void engine_drop_kept_readahead(indexed_block **blocks, size_t n, readahead_keep *k);
/* engine_for_each_block keeping read-ahead bytes in k (NULL: drops them, as the plain one). */
int engine_for_each_block_keep(query_engine *e, indexed_block **blocks, size_t n, block_fn fn,
                               void **partials, size_t workers, bool *skipped, query_stats *stats,
                               readahead_keep *k, strata_error *err);
size_t engine_worker_count(const query_engine *e, size_t n_blocks);
/* Threads for passes over small tables (selection, ranges, labels): fetch_parallelism, since a
 * cold reader waits on the bucket; merges keep engine_worker_count (each worker holds a tree). */
size_t engine_fetch_worker_count(const query_engine *e, size_t n_blocks);

/* ---- engine_samples.c: series and samples a selector picks --------------------------------- */

/* A pprof sample label whose name its series also has is seen as exported_<name>. */
#define EXPORTED_PREFIX "exported_"

/* Series ids of r matching sel (all series when NULL) and type (when given), ascending; *ids is
 * malloc'd. In a block with sample labels, a matcher naming a label a series lacks selects the
 * series when some sample of it can match (engine.h). */
int engine_select_series(block_reader *r, const selector *sel, const profile_type *type,
                         uint32_t **ids, size_t *n, strata_error *err);
/* Whether some matcher of sel names a label the series lacks (one for its samples' labels). */
bool engine_has_sample_matchers(const selector *sel, const label_set *series);
/* Whether a sample of the series with sample labels `set` passes the matchers naming labels the
 * series lacks. */
bool engine_sample_matches(const selector *sel, const label_set *series, const label_set *set);
/* Whether some matcher of sel names a sample label of r (sample labels can change what it
 * selects there). */
int engine_matchers_name_sample_labels(block_reader *r, const selector *sel, bool *out,
                                       strata_error *err);

/* What a block's samples need beyond their stack: whether they pass the selector's matchers on
 * sample labels (in a block with sample labels, for series lacking a matcher's label), and
 * which label frame they go under when the tree groups by labels. Both depend only on (series,
 * label set), so each pair is worked out once per block and cached; a block and query with
 * neither (the common case) skips all of it. */
typedef struct sample_view {
    block_reader *r;
    const selector *sel;
    const calltree_grouping *grouping; /* NULL, or labels grouped by */
    calltree *tree;                    /* label frames are interned here */
    bool filter;                       /* some selected series has sample matchers */
    bool by_time;                      /* each profile's rows under its time frame */
    bool active;                       /* filter, grouping or by_time */
    strata_u64_map time_frames;        /* by_time: profile time -> its time frame + 1 */
    strata_u64_map cache;              /* (series << 32 | set) + 1 -> result << 1 | pass */
    uint64_t *by_set;                  /* per label set: the cached result for stamp's series */
    uint32_t *stamp;                   /* per label set: series + 1 whose result by_set holds */
    size_t n_sets;
    calltree_label *labels; /* scratch: a label frame's labels */
    char **names;           /* scratch: exported_<name> names */
    size_t cap_labels;
} sample_view;

#define VIEW_NO_FRAME UINT32_MAX

/* Sets up the view for the given profiles of r (any order); tree may be NULL when not grouping. */
int sample_view_init(sample_view *v, block_reader *r, const selector *sel, calltree *tree,
                     const block_profile *profiles, size_t n, strata_error *err);
void sample_view_free(sample_view *v);
/* Whether a sample of `series` with label set `set` passes, and its label frame (VIEW_NO_FRAME:
 * none). */
int sample_view_lookup(sample_view *v, uint32_t series, uint32_t set, bool *pass, uint32_t *frame,
                       strata_error *err);
/* The time frame of profile p's samples (grouping by timestamp), interned once per time. */
int sample_view_time_frame(sample_view *v, const block_profile *p, uint32_t *frame,
                           strata_error *err);

/* sample_view_lookup through a per-set array for the series at hand (samples come by series). */
static inline int sample_view_get(sample_view *v, uint32_t series, uint32_t set, bool *pass,
                                  uint32_t *frame, strata_error *err) {
    if (set >= v->n_sets)
        return strata_error_set(err, STRATA_DATA_LOSS, "label set %u out of range", set);
    if (v->stamp[set] != series + 1) {
        if (sample_view_lookup(v, series, set, pass, frame, err) != 0)
            return -1;
        v->stamp[set] = series + 1;
        v->by_set[set] = (uint64_t)*frame << 1 | (*pass ? 1u : 0u);
        return 0;
    }
    *pass = (v->by_set[set] & 1) != 0;
    *frame = (uint32_t)(v->by_set[set] >> 1);
    return 0;
}

/* The profiles a query covers in one block, ordered by (series, time). */
typedef struct block_selection {
    block_profile *profiles;
    size_t n;
    bool *dropped; /* per profile: a duplicate counted elsewhere; NULL when none is */
    /* not selected here (engine_select_profiles' defer): the block cannot hold a copy of another
     * block's profile, so the pass that reads it selects its profiles as it goes */
    bool deferred;
} block_selection;

/*
 * Selects, in each of blocks[0..n), the profiles of sel's profile type matching sel with
 * start <= time <= end, into out[0..n), and marks duplicates: profiles of the same series (label
 * set) with the same time, duration, period and samples (the same stacks, compared by content:
 * locations, functions and mappings, with the same summed values) as one counted before them.
 * This is the compactor's rule (block_merge.c), so an answer is the same before, during and
 * after compaction. Candidates are found by (series, time, duration, period, total) first; only
 * they have their samples read and fingerprinted. Blocks whose data fails its checks are left out
 * (skipped[i], counted in stats), as engine_for_each_block does. keep (may be NULL) keeps what
 * the selection read ahead for the query's merge pass. With defer, blocks that cannot hold a
 * copy (a compacted block alone in its time range) are not read: their selection is marked
 * deferred, for a pass that needs each profile once and can select as it reads (a range query:
 * a day of hourly blocks is then never copied into arrays).
 */
int engine_select_profiles(query_engine *e, indexed_block **blocks, size_t n_blocks,
                           const selector *sel, int64_t start_ns, int64_t end_ns, bool defer,
                           block_selection *out, bool *skipped, query_stats *stats,
                           readahead_keep *keep, strata_error *err);
void block_selections_free(block_selection *s, size_t n);

struct query_engine {
    query_engine_options opts;
    block_index *index;
    query_fanout fanout;    /* fanout.members NULL: every merge runs here alone */
    block_workers *workers; /* the block driver's helper threads */
};

/* Helper threads the engine's block driver has started (block_workers_started): a count that
 * stays put while queries come one after another. */
size_t engine_block_threads_started(query_engine *e);

/* NOT_FOUND, or DATA_LOSS when the only blocks that could have matched were left out. */
int engine_no_profiles(const query_stats *stats, strata_error *err);

/* One attempt of a query over the index's current view of the blocks. */
typedef int (*engine_attempt_fn)(query_engine *e, void *arg, strata_error *err);
/* Runs attempt again while it fails with ABORTED (a block deleted under it), a few times. */
int engine_retry(query_engine *e, engine_attempt_fn attempt, void *arg, strata_error *err);

typedef struct shared_tree shared_tree;

typedef struct merge_query {
    const selector *sel;
    int64_t start_ns, end_ns;
    bool base;
    bool samples_count;
    uint64_t max_bytes;
    bool use_rollups;            /* add a fully covered series' rollup instead of its sample rows */
    block_selection *selections; /* per block, set by run_merge_attempt */
    size_t workers;              /* threads merging partial trees, set by run_merge_attempt */
    uint64_t selected_rows;      /* sample rows of the selected profiles, likewise */
    struct shared_tree *shared;  /* set by run_merge_attempt */
    const char *query_text;      /* sel as the client wrote it (for peers); NULL: no fan-out */
} merge_query;

/* What merging a set of blocks gives besides the tree. */
typedef struct merge_outcome {
    merge_result result;
    query_stats stats;
    uint64_t passed; /* sample rows that passed sample-label matchers */
    bool filtered;   /* some block filtered samples by their labels */
} merge_outcome;

/* Merges the selected, non-dropped profiles of blocks[i] (q->selections[i]) for every i without
 * skip[i] into tree; blocks whose data fails its checks are added to skip and counted. */
int engine_merge_blocks(query_engine *e, merge_query *q, indexed_block **blocks, size_t n_blocks,
                        bool *skip, calltree *tree, merge_outcome *out, strata_error *err);
/* Adds from into tree (the smaller into the larger, swapping them when from is larger); from is
 * left with what is not needed any more. */
int engine_merge_tree(calltree *tree, calltree *from, strata_error *err);
/* The merge_result of an outcome, or NOT_FOUND when nothing matched. */
int engine_merge_outcome(const merge_outcome *o, merge_result *result, strata_error *err);
/* Adds src's counts (profiles, samples, totals, times, period) into dst. */
void engine_merge_results_add(merge_result *dst, const merge_result *src);

/* RESOURCE_EXHAUSTED, naming max_query_bytes, when a merged tree of `bytes` is over q's bound. */
int engine_check_merged_bytes(const merge_query *q, size_t bytes, strata_error *err);

/* Selects q's profiles in blocks[0..n) (duplicates dropped, engine_select_profiles) and merges
 * them into tree (engine_merge_blocks); out gathers the counts. q->selections is set only during
 * the call. */
int engine_select_and_merge(query_engine *e, merge_query *q, indexed_block **blocks,
                            size_t n_blocks, calltree *tree, merge_outcome *out, strata_error *err);

/* engine_fanout.c: whether a merge over blocks[0..n) goes to peers, and doing so. */
bool engine_fanout_wanted(const query_engine *e, const merge_query *q, indexed_block **blocks,
                          size_t n_blocks);
int engine_fanout_merge(query_engine *e, const char *tenant, merge_query *q, indexed_block **blocks,
                        size_t n_blocks, calltree *tree, merge_outcome *out, strata_error *err);

#endif
