/*
 * engine_fanout.c - a merge shared out over several queriers (engine.h, "fan-out"): the
 * coordinator's side (engine_fanout_merge) and the peer's (query_merge_share).
 *
 * Coordinator. By the time a merge gets here its profiles are selected in every block and the
 * duplicates across blocks are marked (engine_select.c): that needs every block, so it stays on
 * the coordinator, and it is the small part (series and profile tables). The sample pages, most
 * of the bytes and the CPU, are what is shared: query_fanout.assign maps each block to the
 * coordinator or a peer, weighing blocks by their selected sample rows. One thread per peer calls
 * query_fanout.run with the peer's share (block ids, each with its selected count and the indexes
 * of its dropped duplicates) while the coordinator merges its own blocks on the query's workers.
 * Blocks of a peer that failed, and blocks a peer could not find, are then merged here. All of it
 * goes into a private tree that replaces or joins the caller's only once everything succeeded, so
 * an attempt that fails (a block deleted under the query: ABORTED, retried by the engine) leaves
 * the caller's tree as it was.
 *
 * Peer. The share's blocks are looked up by id in the index (announced from the bucket when the
 * peer has not seen them yet: a block the coordinator learnt of a moment ago), selected with the
 * same selector and range (selection is deterministic in an immutable block, and the selected
 * count is compared to be sure), the coordinator's dropped profiles are marked, and the blocks are
 * merged as any merge merges blocks. The peer does not look for duplicates itself: the
 * coordinator chose which copy counts, over blocks the peer does not see.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block/block_rollup.h"
#include "engine.h"
#include "engine_internal.h"

void query_engine_set_fanout(query_engine *e, const query_fanout *fanout) {
    if (fanout == NULL || fanout->assign == NULL || fanout->run == NULL)
        memset(&e->fanout, 0, sizeof e->fanout);
    else
        e->fanout = *fanout;
}

/* Sample rows of a block's selected profiles that count. */
static uint64_t block_weight(const block_selection *s) {
    uint64_t rows = 0;
    for (size_t k = 0; k < s->n; k++)
        if (s->dropped == NULL || !s->dropped[k])
            rows += s->profiles[k].sample_count;
    return rows;
}

bool engine_fanout_wanted(const query_engine *e, const merge_query *q, size_t n_blocks) {
    if (e->fanout.assign == NULL || q->query_text == NULL || n_blocks < 2)
        return false;
    uint64_t rows = 0;
    size_t busy = 0;
    for (size_t i = 0; i < n_blocks; i++) {
        uint64_t w = block_weight(&q->selections[i]);
        rows += w;
        busy += w > 0;
    }
    return busy >= 2 && rows >= e->fanout.min_rows;
}

/* ---- coordinator ---------------------------------------------------------------------------- */

typedef struct share_job {
    query_engine *e;
    void *plan;
    size_t peer;
    merge_share share;
    merge_share_block *blocks;
    size_t *block_index; /* share block -> position in the query's block list */
    uint32_t *dropped;   /* every block's dropped indexes, one after another */
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
    free(job->blocks);
    free(job->block_index);
    free(job->dropped);
    free(job->res.missing);
    calltree_free(job->tree);
}

/* Fills job with peer p's blocks (owner p + 1). */
static int share_job_init(share_job *job, query_engine *e, void *plan, const char *tenant,
                          const merge_query *q, const calltree_grouping *grouping,
                          indexed_block **blocks, size_t n_blocks, const uint32_t *owner, size_t p,
                          strata_error *err) {
    size_t n = 0, n_dropped = 0;
    for (size_t i = 0; i < n_blocks; i++) {
        if (owner[i] != p + 1)
            continue;
        n++;
        const block_selection *s = &q->selections[i];
        for (size_t k = 0; s->dropped != NULL && k < s->n; k++)
            n_dropped += s->dropped[k];
    }
    *job = (share_job){.e = e, .plan = plan, .peer = p};
    job->blocks = calloc(n + 1, sizeof *job->blocks);
    job->block_index = calloc(n + 1, sizeof *job->block_index);
    job->dropped = calloc(n_dropped + 1, sizeof *job->dropped);
    job->res.missing = calloc(n + 1, sizeof *job->res.missing);
    if (!job->blocks || !job->block_index || !job->dropped || !job->res.missing)
        return strata_error_oom(err);
    size_t k = 0, d = 0;
    for (size_t i = 0; i < n_blocks; i++) {
        if (owner[i] != p + 1)
            continue;
        const block_selection *s = &q->selections[i];
        merge_share_block *b = &job->blocks[k];
        b->ulid = blocks[i]->ulid_text;
        b->selected = s->n;
        b->dropped = &job->dropped[d];
        for (size_t j = 0; s->dropped != NULL && j < s->n; j++)
            if (s->dropped[j])
                job->dropped[d++] = (uint32_t)j;
        b->n_dropped = (size_t)(&job->dropped[d] - b->dropped);
        job->block_index[k++] = i;
    }
    job->share = (merge_share){.tenant = tenant,
                               .query = q->query_text,
                               .start_ns = q->start_ns,
                               .end_ns = q->end_ns,
                               .base = q->base,
                               .use_rollups = q->use_rollups,
                               .max_query_bytes = q->max_bytes,
                               .grouping = grouping,
                               .blocks = job->blocks,
                               .n_blocks = n};
    if (calltree_create(&job->tree, 1024, err) != 0)
        return -1;
    return calltree_set_grouping(job->tree, grouping, err);
}

static void add_peer_stats(query_stats *dst, const query_stats *src) {
    if (src->skipped_blocks > 0 && dst->skipped_blocks == 0) {
        memcpy(dst->skipped_block, src->skipped_block, sizeof dst->skipped_block);
        memcpy(dst->skipped_error, src->skipped_error, sizeof dst->skipped_error);
    }
    dst->skipped_blocks += src->skipped_blocks;
}

/* Marks in redo the blocks of jobs that failed, or that their peer could not find. */
static bool blocks_to_redo(share_job *jobs, size_t n_jobs, bool *redo) {
    bool any = false;
    for (size_t j = 0; j < n_jobs; j++) {
        for (size_t k = 0; k < jobs[j].share.n_blocks; k++) {
            if (jobs[j].rc == 0 && !jobs[j].res.missing[k])
                continue;
            redo[jobs[j].block_index[k]] = false; /* redo[] is a skip mask */
            any = true;
        }
    }
    return any;
}

/* Adds what the peers that succeeded merged into acc and out. */
static int add_peer_results(share_job *jobs, size_t n_jobs, calltree *acc, merge_outcome *out,
                            strata_error *err) {
    for (size_t j = 0; j < n_jobs; j++) {
        if (jobs[j].rc != 0)
            continue;
        if (engine_merge_tree(acc, jobs[j].tree, err) != 0)
            return -1;
        engine_merge_results_add(&out->result, &jobs[j].res.result);
        add_peer_stats(&out->stats, &jobs[j].res.result.stats);
        out->passed += jobs[j].res.passed;
        out->filtered |= jobs[j].res.filtered;
    }
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

/* The coordinator's blocks (owner 0), then the peers' results and whatever they left, into acc. */
static int run_shares(query_engine *e, merge_query *q, indexed_block **blocks, size_t n_blocks,
                      bool *skipped, const uint32_t *owner, share_job *jobs, size_t n_jobs,
                      calltree *acc, merge_outcome *out, strata_error *err) {
    bool *mask = malloc((n_blocks + 1) * sizeof *mask);
    if (mask == NULL)
        return strata_error_oom(err);
    start_jobs(jobs, n_jobs);
    for (size_t i = 0; i < n_blocks; i++)
        mask[i] = skipped[i] || owner[i] != 0;
    int rc = engine_merge_blocks(e, q, blocks, n_blocks, mask, acc, out, err);
    join_jobs(jobs, n_jobs);
    for (size_t i = 0; i < n_blocks; i++)
        mask[i] = true;
    if (rc == 0 && blocks_to_redo(jobs, n_jobs, mask)) {
        for (size_t i = 0; i < n_blocks; i++)
            mask[i] = mask[i] || skipped[i];
        rc = engine_merge_blocks(e, q, blocks, n_blocks, mask, acc, out, err);
    }
    free(mask);
    if (rc == 0)
        rc = add_peer_results(jobs, n_jobs, acc, out, err);
    if (rc == 0)
        rc = engine_check_merged_bytes(q, calltree_memory_bytes(acc), err);
    return rc;
}

int engine_fanout_merge(query_engine *e, const char *tenant, merge_query *q, indexed_block **blocks,
                        size_t n_blocks, bool *skipped, calltree *tree, merge_outcome *out,
                        strata_error *err) {
    const char **ulids = calloc(n_blocks + 1, sizeof *ulids);
    uint64_t *weights = calloc(n_blocks + 1, sizeof *weights);
    uint32_t *owner = calloc(n_blocks + 1, sizeof *owner);
    if (ulids == NULL || weights == NULL || owner == NULL) {
        free(ulids);
        free(weights);
        free(owner);
        return strata_error_oom(err);
    }
    for (size_t i = 0; i < n_blocks; i++) {
        ulids[i] = blocks[i]->ulid_text;
        weights[i] = skipped[i] ? 0 : block_weight(&q->selections[i]);
    }
    void *plan = NULL;
    size_t peers = e->fanout.assign(e->fanout.arg, ulids, weights, n_blocks, owner, &plan);
    for (size_t i = 0; i < n_blocks; i++)
        if (weights[i] == 0 || owner[i] > peers)
            owner[i] = 0; /* nothing to send, or a peer that is not there */
    free(ulids);
    free(weights);
    share_job *jobs = peers > 0 ? calloc(peers, sizeof *jobs) : NULL;
    const calltree_grouping *grouping = calltree_get_grouping(tree);
    calltree *acc = NULL;
    int rc = 0;
    if (peers == 0)
        rc = engine_merge_blocks(e, q, blocks, n_blocks, skipped, tree, out, err);
    else if (jobs == NULL)
        rc = strata_error_oom(err);
    else if (calltree_create(&acc, 1024, err) != 0 ||
             calltree_set_grouping(acc, grouping, err) != 0)
        rc = -1;
    for (size_t p = 0; rc == 0 && jobs != NULL && p < peers; p++)
        rc =
            share_job_init(&jobs[p], e, plan, tenant, q, grouping, blocks, n_blocks, owner, p, err);
    if (rc == 0 && jobs != NULL)
        rc = run_shares(e, q, blocks, n_blocks, skipped, owner, jobs, peers, acc, out, err);
    if (rc == 0 && acc != NULL)
        rc = engine_merge_tree(tree, acc, err);
    for (size_t p = 0; jobs != NULL && p < peers; p++)
        share_job_free(&jobs[p]);
    free(jobs);
    free(owner);
    calltree_free(acc);
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
 * NULL when it is not in the bucket (res->missing[k]). */
static int acquire_share(query_engine *e, const merge_share *share, indexed_block ***all,
                         size_t *n_all, indexed_block **mine, merge_share_result *res,
                         strata_error *err) {
    for (int round = 0; round < 2; round++) {
        if (block_index_acquire(e->index, share->tenant, share->start_ns, share->end_ns, all, n_all,
                                err) != 0)
            return -1;
        qsort(*all, *n_all, sizeof **all, compare_block_ulids);
        bool announced = false;
        for (size_t k = 0; k < share->n_blocks; k++) {
            mine[k] = find_block(*all, *n_all, share->blocks[k].ulid);
            res->missing[k] = mine[k] == NULL;
            strata_error ignored;
            if (mine[k] == NULL && round == 0 &&
                block_index_announce(e->index, share->tenant, share->blocks[k].ulid, &ignored) == 0)
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

/* Checks each block's selection against the share and marks its dropped profiles. */
static int apply_share(const merge_share *share, const size_t *share_of, block_selection *sel,
                       const bool *skipped, size_t n, strata_error *err) {
    for (size_t i = 0; i < n; i++) {
        const merge_share_block *b = &share->blocks[share_of[i]];
        if (skipped[i])
            continue; /* failed its checks here: reported, not merged */
        if (sel[i].n != b->selected)
            return strata_error_set(err, STRATA_FAILED_PRECONDITION,
                                    "block %s: %zu profiles selected here, %llu by the querier "
                                    "that shared it out",
                                    b->ulid, sel[i].n, (unsigned long long)b->selected);
        if (b->n_dropped == 0)
            continue;
        if ((sel[i].dropped = calloc(sel[i].n, sizeof *sel[i].dropped)) == NULL)
            return strata_error_oom(err);
        for (size_t k = 0; k < b->n_dropped; k++) {
            if (b->dropped[k] >= sel[i].n)
                return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                        "block %s: dropped profile %u of %zu selected", b->ulid,
                                        b->dropped[k], sel[i].n);
            sel[i].dropped[b->dropped[k]] = true;
        }
    }
    return 0;
}

int query_merge_share(query_engine *e, const merge_share *share, const selector *sel,
                      calltree *tree, merge_share_result *res, strata_error *err) {
    memset(&res->result, 0, sizeof res->result);
    res->passed = 0;
    res->filtered = false;
    indexed_block **all = NULL, **mine = calloc(share->n_blocks + 1, sizeof *mine);
    size_t *share_of = calloc(share->n_blocks + 1, sizeof *share_of);
    size_t n_all = 0, n = 0;
    int rc = mine && share_of ? 0 : strata_error_oom(err);
    if (rc == 0)
        rc = acquire_share(e, share, &all, &n_all, mine, res, err);
    for (size_t k = 0; rc == 0 && k < share->n_blocks; k++)
        if (mine[k] != NULL) {
            share_of[n] = k;
            mine[n++] = mine[k];
        }
    bool *skipped = calloc(n + 1, sizeof *skipped);
    merge_query q = {.sel = sel,
                     .start_ns = share->start_ns,
                     .end_ns = share->end_ns,
                     .base = share->base,
                     .samples_count = block_rollup_scale(sel->profile_type.sample_type,
                                                         sel->profile_type.sample_unit),
                     .max_bytes = share->max_query_bytes,
                     .use_rollups = share->use_rollups};
    q.selections = calloc(n + 1, sizeof *q.selections);
    merge_outcome out = {0};
    readahead_keep keep;
    readahead_keep_init(&keep, n);
    if (rc == 0 && (skipped == NULL || q.selections == NULL))
        rc = strata_error_oom(err);
    if (rc == 0)
        rc = engine_select_profiles(e, mine, n, sel, share->start_ns, share->end_ns, q.selections,
                                    skipped, &out.stats, false, &keep, err);
    if (rc == 0)
        rc = apply_share(share, share_of, q.selections, skipped, n, err);
    if (rc == 0)
        rc = engine_merge_blocks(e, &q, mine, n, skipped, tree, &out, err);
    engine_drop_kept_readahead(mine, n, &keep);
    if (all != NULL)
        block_index_release_all(e->index, all, n_all);
    block_selections_free(q.selections, n);
    free(skipped);
    free(mine);
    free(share_of);
    if (rc != 0)
        return rc;
    res->result = out.result;
    res->result.stats = out.stats;
    res->passed = out.passed;
    res->filtered = out.filtered;
    return 0;
}
