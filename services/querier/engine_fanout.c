/*
 * engine_fanout.c - a merge shared out over several queriers (engine.h, "fan-out"): the
 * coordinator's side (engine_fanout_merge) and the peer's (query_merge_share).
 *
 * Shards of time. The coordinator cuts the query's range into one shard per member (itself and
 * the peers query_fanout.members names, in the order every querier agrees on), and each member
 * selects, de-duplicates and merges the profiles of its shard. Time is what makes shards
 * independent: a copy of a profile (a client's retried push) has the profile's series and time,
 * so both fall in one shard, where the member finds the copy exactly as a lone querier would
 * (engine_select.c: the first in block order counts, and a shard's blocks keep the query's
 * order); and a profile falls in exactly one shard. An earlier design shared out blocks instead:
 * the coordinator had to select every block and find duplicates across all of them before any
 * peer could start, and on a cold querier that selection (every block's series and profile
 * tables, fetched from the bucket) was most of the wall time, so fan-out made merges slower.
 *
 * Where to cut. Shards are balanced by the sample rows the blocks' meta.json declare (a block's
 * rows counted at its start), and a cut is made only at a block's start and never inside a
 * compacted block's range when another cut will do: a series' rollup answers only for all of its
 * profiles in a block, so a cut compacted block would have its rows scanned on both sides.
 * Level-1 blocks are short, so a cut meets few of them; one that is met is read by both members,
 * each selecting its own profiles. With too few places to cut there are fewer shards.
 *
 * Who gets which shard. Shard k goes to member k of the agreed order (peers.c sorts by instance
 * id) whichever querier coordinates: a dashboard refreshing "the last hour" through any querier
 * sends each part of the hour to the querier that merged it last time, whose readers are warm.
 *
 * Failures. A peer's shard names the blocks the coordinator sees in it, and the peer uses exactly
 * these (its own view may lag or lead). A peer that fails (dies, times out, answers an error) or
 * cannot find one of the blocks has its whole shard merged by the coordinator afterwards. All of
 * it goes into a private tree that replaces or joins the caller's only once everything succeeded,
 * so an attempt that fails (a block deleted under the query: ABORTED, retried by the engine)
 * leaves the caller's tree as it was.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block/block_rollup.h"
#include "common/clock.h"
#include "engine.h"
#include "engine_internal.h"

void query_engine_set_fanout(query_engine *e, const query_fanout *fanout) {
    if (fanout == NULL || fanout->members == NULL || fanout->run == NULL)
        memset(&e->fanout, 0, sizeof e->fanout);
    else
        e->fanout = *fanout;
}

/* ---- shards -----------------------------------------------------------------------------------
 */

typedef struct time_shard {
    int64_t start_ns, end_ns; /* inclusive */
} time_shard;

/* A block's range in ns, [min, max), saturating (meta times are milliseconds). */
static int64_t ms_to_ns(int64_t ms) {
    if (ms > INT64_MAX / STRATA_NS_PER_MS)
        return INT64_MAX;
    if (ms < INT64_MIN / STRATA_NS_PER_MS)
        return INT64_MIN;
    return ms * STRATA_NS_PER_MS;
}

/* Whether block b holds profiles that can fall in [start, end]. */
static bool block_meets(const indexed_block *b, int64_t start, int64_t end) {
    return ms_to_ns(b->meta.min_time_ms) <= end && ms_to_ns(b->meta.max_time_ms) > start;
}

typedef struct weighted_start {
    int64_t at; /* the block's start, clipped to the query */
    double rows;
} weighted_start;

typedef struct span {
    int64_t min, max; /* [min, max) */
} span;

static int compare_starts(const void *a, const void *b) {
    const weighted_start *x = a, *y = b;
    return (x->at > y->at) - (x->at < y->at);
}

static int compare_spans(const void *a, const void *b) {
    const span *x = a, *y = b;
    return (x->min > y->min) - (x->min < y->min);
}

/* Sorts spans and merges overlapping ones; returns how many are left. */
static size_t merge_spans(span *s, size_t n) {
    if (n == 0)
        return 0;
    qsort(s, n, sizeof *s, compare_spans);
    size_t out = 0;
    for (size_t i = 1; i < n; i++) {
        if (s[i].min < s[out].max) {
            if (s[i].max > s[out].max)
                s[out].max = s[i].max;
        } else {
            s[++out] = s[i];
        }
    }
    return out + 1;
}

/* Whether t lies strictly inside one of the merged spans (a cut there splits a compacted block). */
static bool inside_span(const span *s, size_t n, int64_t t) {
    size_t lo = 0, hi = n; /* the first span with min >= t */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s[mid].min < t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo > 0 && t < s[lo - 1].max;
}

/* A block's declared rows, scaled to the part of its range the query covers. */
static double rows_in_range(const indexed_block *b, int64_t start, int64_t end) {
    int64_t min = ms_to_ns(b->meta.min_time_ms), max = ms_to_ns(b->meta.max_time_ms);
    double rows = (double)b->meta.num_samples;
    if (max <= min)
        return rows;
    double lo = (double)(min > start ? min : start), hi = (double)(max - 1 < end ? max - 1 : end);
    double covered = hi >= lo ? (hi - lo + 1) / ((double)max - (double)min) : 0;
    return rows * (covered < 1 ? covered : 1);
}

typedef struct cut {
    int64_t at;
    double before; /* rows of blocks starting before at */
} cut;

/* The places a cut can go (block starts inside the range, outside compacted blocks, with rows on
 * both sides), ascending, into cuts; returns how many. starts is sorted. */
static size_t find_cuts(const weighted_start *starts, size_t n, int64_t start, int64_t end,
                        const span *compacted, size_t n_compacted, double total, cut *cuts) {
    size_t count = 0;
    double before = 0;
    for (size_t i = 0; i < n; i++) {
        bool first_at = i == 0 || starts[i].at != starts[i - 1].at;
        if (first_at && starts[i].at > start && starts[i].at <= end && before > 0 &&
            before < total && !inside_span(compacted, n_compacted, starts[i].at))
            cuts[count++] = (cut){starts[i].at, before};
        before += starts[i].rows;
    }
    return count;
}

/* Of cuts[from..n), the one whose rows before it are nearest target (before ascends). */
static size_t nearest_cut(const cut *cuts, size_t from, size_t n, double target) {
    size_t lo = from, hi = n; /* the first with before >= target */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cuts[mid].before < target)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == n)
        return n - 1;
    if (lo > from && target - cuts[lo - 1].before < cuts[lo].before - target)
        return lo - 1;
    return lo;
}

/* Cuts [start, end] into at most want shards (shards[want]) of about equal rows; returns how
 * many (0: out of memory). */
static size_t plan_shards(indexed_block **blocks, size_t n, int64_t start, int64_t end, size_t want,
                          time_shard *shards, strata_error *err) {
    weighted_start *starts = calloc(n + 1, sizeof *starts);
    span *compacted = calloc(n + 1, sizeof *compacted);
    cut *cuts = calloc(n + 1, sizeof *cuts);
    if (starts == NULL || compacted == NULL || cuts == NULL) {
        free(starts);
        free(compacted);
        free(cuts);
        strata_error_oom(err);
        return 0;
    }
    size_t n_compacted = 0;
    double total = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t min = ms_to_ns(blocks[i]->meta.min_time_ms);
        starts[i] =
            (weighted_start){min > start ? min : start, rows_in_range(blocks[i], start, end)};
        total += starts[i].rows;
        if (blocks[i]->meta.compaction_level > 1)
            compacted[n_compacted++] = (span){min, ms_to_ns(blocks[i]->meta.max_time_ms)};
    }
    qsort(starts, n, sizeof *starts, compare_starts);
    n_compacted = merge_spans(compacted, n_compacted);
    size_t n_cuts = find_cuts(starts, n, start, end, compacted, n_compacted, total, cuts);
    size_t count = 0, next = 0;
    int64_t from = start;
    for (size_t k = 1; k < want && next < n_cuts; k++) {
        size_t c = nearest_cut(cuts, next, n_cuts, total * (double)k / (double)want);
        shards[count++] = (time_shard){from, cuts[c].at - 1};
        from = cuts[c].at;
        next = c + 1;
    }
    shards[count++] = (time_shard){from, end};
    free(starts);
    free(compacted);
    free(cuts);
    return count;
}

bool engine_fanout_wanted(const query_engine *e, const merge_query *q, indexed_block **blocks,
                          size_t n_blocks) {
    if (e->fanout.members == NULL || q->query_text == NULL || n_blocks < 2)
        return false;
    double rows = 0;
    for (size_t i = 0; i < n_blocks; i++)
        rows += rows_in_range(blocks[i], q->start_ns, q->end_ns);
    return rows >= (double)e->fanout.min_rows;
}

/* ---- coordinator ---------------------------------------------------------------------------- */

typedef struct share_job {
    query_engine *e;
    void *plan;
    size_t peer;
    merge_share share;
    const char **ulids;
    indexed_block **blocks; /* the coordinator's, for merging the shard here */
    calltree *tree;
    merge_share_result res;
    strata_error err;
    int rc;
    bool started;
    pthread_t thread;
} share_job;

static void *share_job_run(void *arg) {
    share_job *job = arg;
    job->rc = job->e->fanout.run(job->e->fanout.arg, job->plan, job->peer, &job->share, job->tree,
                                 &job->res, &job->err);
    return NULL;
}

static void share_job_free(share_job *job) {
    free(job->ulids);
    free(job->blocks);
    free(job->res.missing);
    calltree_free(job->tree);
}

/* Fills job with the shard and the blocks that meet it. */
static int share_job_init(share_job *job, query_engine *e, void *plan, size_t peer,
                          const char *tenant, const merge_query *q,
                          const calltree_grouping *grouping, indexed_block **blocks,
                          size_t n_blocks, time_shard shard, strata_error *err) {
    *job = (share_job){.e = e, .plan = plan, .peer = peer};
    job->ulids = calloc(n_blocks + 1, sizeof *job->ulids);
    job->blocks = calloc(n_blocks + 1, sizeof *job->blocks);
    job->res.missing = calloc(n_blocks + 1, sizeof *job->res.missing);
    if (!job->ulids || !job->blocks || !job->res.missing)
        return strata_error_oom(err);
    size_t n = 0;
    for (size_t i = 0; i < n_blocks; i++) {
        if (!block_meets(blocks[i], shard.start_ns, shard.end_ns))
            continue;
        job->blocks[n] = blocks[i];
        job->ulids[n++] = blocks[i]->ulid_text;
    }
    job->share = (merge_share){.tenant = tenant,
                               .query = q->query_text,
                               .start_ns = shard.start_ns,
                               .end_ns = shard.end_ns,
                               .base = q->base,
                               .use_rollups = q->use_rollups,
                               .max_query_bytes = q->max_bytes,
                               .grouping = grouping,
                               .blocks = job->ulids,
                               .n_blocks = n};
    if (calltree_create(&job->tree, 1024, err) != 0)
        return -1;
    return calltree_set_grouping(job->tree, grouping, err);
}

/* Merges the blocks of q that meet shard, over the shard's range, into tree. */
static int merge_shard_here(query_engine *e, const merge_query *q, indexed_block **blocks,
                            size_t n_blocks, time_shard shard, calltree *tree, merge_outcome *out,
                            strata_error *err) {
    indexed_block **mine = calloc(n_blocks + 1, sizeof *mine);
    if (mine == NULL)
        return strata_error_oom(err);
    size_t n = 0;
    for (size_t i = 0; i < n_blocks; i++)
        if (block_meets(blocks[i], shard.start_ns, shard.end_ns))
            mine[n++] = blocks[i];
    merge_query part = *q;
    part.start_ns = shard.start_ns;
    part.end_ns = shard.end_ns;
    int rc = n > 0 ? engine_select_and_merge(e, &part, mine, n, tree, out, err) : 0;
    free(mine);
    return rc;
}

static bool share_failed(const share_job *job) {
    if (job->rc != 0)
        return true;
    for (size_t k = 0; k < job->share.n_blocks; k++)
        if (job->res.missing[k])
            return true;
    return false;
}

static void add_peer_stats(query_stats *dst, const query_stats *src) {
    if (src->skipped_blocks > 0 && dst->skipped_blocks == 0) {
        memcpy(dst->skipped_block, src->skipped_block, sizeof dst->skipped_block);
        memcpy(dst->skipped_error, src->skipped_error, sizeof dst->skipped_error);
    }
    dst->skipped_blocks += src->skipped_blocks;
    dst->duplicates += src->duplicates;
}

/* Adds a peer's tree and counts into acc and out, or merges its shard here when it failed. */
static int gather_share(query_engine *e, const merge_query *q, share_job *job, calltree *acc,
                        merge_outcome *out, strata_error *err) {
    if (job->share.n_blocks == 0)
        return 0;
    if (share_failed(job)) {
        time_shard shard = {job->share.start_ns, job->share.end_ns};
        return merge_shard_here(e, q, job->blocks, job->share.n_blocks, shard, acc, out, err);
    }
    if (engine_merge_tree(acc, job->tree, err) != 0)
        return -1;
    engine_merge_results_add(&out->result, &job->res.result);
    add_peer_stats(&out->stats, &job->res.result.stats);
    out->passed += job->res.passed;
    out->filtered |= job->res.filtered;
    return 0;
}

static void start_jobs(share_job *jobs, size_t n_jobs) {
    for (size_t j = 0; j < n_jobs; j++) {
        if (jobs[j].share.n_blocks == 0)
            continue;
        strata_error_clear(&jobs[j].err);
        if (pthread_create(&jobs[j].thread, NULL, share_job_run, &jobs[j]) != 0)
            jobs[j].rc = -1; /* merged here instead */
        else
            jobs[j].started = true;
    }
}

static void join_jobs(share_job *jobs, size_t n_jobs) {
    for (size_t j = 0; j < n_jobs; j++)
        if (jobs[j].started)
            pthread_join(jobs[j].thread, NULL);
}

/* Runs the shards: member self's here, the others on their peers (jobs[0..n_jobs)). */
static int run_shards(query_engine *e, const merge_query *q, indexed_block **blocks,
                      size_t n_blocks, const time_shard *own, share_job *jobs, size_t n_jobs,
                      calltree *acc, merge_outcome *out, strata_error *err) {
    start_jobs(jobs, n_jobs);
    int rc = own != NULL ? merge_shard_here(e, q, blocks, n_blocks, *own, acc, out, err) : 0;
    join_jobs(jobs, n_jobs);
    for (size_t j = 0; rc == 0 && j < n_jobs; j++)
        rc = gather_share(e, q, &jobs[j], acc, out, err);
    if (rc == 0)
        rc = engine_check_merged_bytes(q, calltree_memory_bytes(acc), err);
    return rc;
}

/* Shares the merge out over the plan's members; shards[k] is member k's. */
static int fan_out(query_engine *e, const char *tenant, merge_query *q, indexed_block **blocks,
                   size_t n_blocks, void *plan, size_t self, const time_shard *shards,
                   size_t n_shards, calltree *tree, merge_outcome *out, strata_error *err) {
    share_job *jobs = calloc(n_shards, sizeof *jobs);
    const calltree_grouping *grouping = calltree_get_grouping(tree);
    calltree *acc = NULL;
    int rc = jobs != NULL ? 0 : strata_error_oom(err);
    if (rc == 0 &&
        (calltree_create(&acc, 1024, err) != 0 || calltree_set_grouping(acc, grouping, err) != 0))
        rc = -1;
    size_t n_jobs = 0;
    for (size_t m = 0; rc == 0 && m < n_shards; m++) {
        if (m == self)
            continue;
        size_t peer = m < self ? m : m - 1;
        rc = share_job_init(&jobs[n_jobs++], e, plan, peer, tenant, q, grouping, blocks, n_blocks,
                            shards[m], err);
    }
    if (rc == 0)
        rc = run_shards(e, q, blocks, n_blocks, self < n_shards ? &shards[self] : NULL, jobs,
                        n_jobs, acc, out, err);
    if (rc == 0)
        rc = engine_merge_tree(tree, acc, err);
    for (size_t j = 0; j < n_jobs; j++)
        share_job_free(&jobs[j]);
    free(jobs);
    calltree_free(acc);
    return rc;
}

int engine_fanout_merge(query_engine *e, const char *tenant, merge_query *q, indexed_block **blocks,
                        size_t n_blocks, calltree *tree, merge_outcome *out, strata_error *err) {
    void *plan = NULL;
    size_t self = 0;
    size_t peers = e->fanout.members(e->fanout.arg, &self, &plan);
    time_shard *shards = peers > 0 ? calloc(peers + 1, sizeof *shards) : NULL;
    size_t n_shards = 0;
    int rc = 0;
    if (shards != NULL)
        n_shards = plan_shards(blocks, n_blocks, q->start_ns, q->end_ns, peers + 1, shards, err);
    else if (peers > 0)
        rc = strata_error_oom(err);
    if (rc == 0 && peers > 0 && n_shards == 0)
        rc = -1; /* out of memory, said by plan_shards */
    if (rc == 0 && n_shards > 1)
        rc = fan_out(e, tenant, q, blocks, n_blocks, plan, self, shards, n_shards, tree, out, err);
    else if (rc == 0)
        rc = engine_select_and_merge(e, q, blocks, n_blocks, tree, out, err);
    free(shards);
    if (e->fanout.release != NULL)
        e->fanout.release(e->fanout.arg, plan);
    return rc;
}

/* ---- peer ----------------------------------------------------------------------------------- */

static int compare_block_ulids(const void *a, const void *b) {
    const indexed_block *x = *(indexed_block *const *)a, *y = *(indexed_block *const *)b;
    return strcmp(x->ulid_text, y->ulid_text);
}

static indexed_block *find_block(indexed_block **sorted, size_t n, const char *id) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(sorted[mid]->ulid_text, id);
        if (c == 0)
            return sorted[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* Acquires the tenant's blocks of the share's range, announcing from the bucket the share's blocks
 * the index does not hold yet (once). *all is what to release; mine[k] the share's k-th block or
 * NULL when it is not in the bucket (res->missing[k]). Returns whether every block was found. */
static int acquire_share(query_engine *e, const merge_share *share, indexed_block ***all,
                         size_t *n_all, indexed_block **mine, merge_share_result *res,
                         bool *complete, strata_error *err) {
    for (int round = 0; round < 2; round++) {
        if (block_index_acquire(e->index, share->tenant, share->start_ns, share->end_ns, all, n_all,
                                err) != 0)
            return -1;
        qsort(*all, *n_all, sizeof **all, compare_block_ulids);
        bool announced = false;
        *complete = true;
        for (size_t k = 0; k < share->n_blocks; k++) {
            mine[k] = find_block(*all, *n_all, share->blocks[k]);
            res->missing[k] = mine[k] == NULL;
            *complete = *complete && mine[k] != NULL;
            strata_error ignored;
            if (mine[k] == NULL && round == 0 &&
                block_index_announce(e->index, share->tenant, share->blocks[k], &ignored) == 0)
                announced = true;
        }
        if (!announced)
            return 0;
        block_index_release_all(e->index, *all, *n_all);
        *all = NULL;
        *n_all = 0;
    }
    return 0;
}

int query_merge_share(query_engine *e, const merge_share *share, const selector *sel,
                      calltree *tree, merge_share_result *res, strata_error *err) {
    memset(&res->result, 0, sizeof res->result);
    res->passed = 0;
    res->filtered = false;
    indexed_block **all = NULL, **mine = calloc(share->n_blocks + 1, sizeof *mine);
    size_t n_all = 0;
    bool complete = false;
    int rc = mine != NULL ? 0 : strata_error_oom(err);
    if (rc == 0)
        rc = acquire_share(e, share, &all, &n_all, mine, res, &complete, err);
    merge_query q = {.sel = sel,
                     .start_ns = share->start_ns,
                     .end_ns = share->end_ns,
                     .base = share->base,
                     .samples_count = block_rollup_scale(sel->profile_type.sample_type,
                                                         sel->profile_type.sample_unit),
                     .max_bytes = share->max_query_bytes,
                     .use_rollups = share->use_rollups};
    merge_outcome out = {0};
    /* The blocks keep the coordinator's order (its index's), so the same copy of a duplicate
     * counts. A block missing here: the coordinator merges the whole shard, nothing to do. */
    if (rc == 0 && complete)
        rc = engine_select_and_merge(e, &q, mine, share->n_blocks, tree, &out, err);
    if (all != NULL)
        block_index_release_all(e->index, all, n_all);
    free(mine);
    if (rc != 0)
        return rc;
    res->result = out.result;
    res->result.stats = out.stats;
    res->passed = out.passed;
    res->filtered = out.filtered;
    return 0;
}
