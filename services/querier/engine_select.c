/*
 * engine_select.c - which profiles a query covers: selection by series and time in every block,
 * and one count per profile however often it was stored. See engine_internal.h.
 *
 * Why at query time. A client that retries after a lost acknowledgement stores the same profile
 * twice, often in two level-1 blocks. The compactor keeps one of them when it merges the blocks
 * (block_merge.c: same series, time, duration, period and canonical samples), so a query that
 * counted both would answer 2x until compaction and 1x after. The querier applies the same rule,
 * so an answer does not change under the user's feet.
 *
 * How, cheaply. Duplicates are rare, so the common case must cost next to nothing:
 *   1. every block's profiles are selected as before (series postings, time pruning), and each
 *      profile gets a key: hash(series labels, time, duration, period, total);
 *   2. one hash map over all keys finds candidates, profiles whose key another profile shares;
 *      without candidates the query goes on at once;
 *   3. only candidates have their samples read: each sample's stack is hashed by content (the
 *      locations' addresses, mappings, lines and functions, walked through the block's stack tree
 *      and memoized per stack) and so is its pprof sample label set (names and values, memoized
 *      per set), values are summed per (stack, label set) with zero sums dropped (as the
 *      compactor's canonical form), and the profile's fingerprint is the wrapping sum of
 *      hash(stack, label set, value) over those pairs, independent of row order; so profiles
 *      that differ only in their samples' labels are not duplicates, as in the compactor;
 *   4. among candidates with equal key and fingerprint the first (block order, then row order)
 *      is counted and the others are marked dropped.
 * Only blocks where a copy can hide are looked at: a level-1 block (an ingester's flush may hold
 * a client's retry), and blocks whose time ranges overlap another selected block's. A compacted
 * block alone in its time range was de-duplicated by the compactor, so a range query over a day
 * of hourly compacted blocks hashes nothing at all.
 * Identity rests on 64-bit hashes of labels and contents; a false match needs a collision of both
 * the key and the fingerprint between profiles of one series at one timestamp.
 */
#include "engine_internal.h"

#include <stdlib.h>
#include <string.h>

#include "common/array.h"
#include "common/hash.h"

/* ---- step 1: selection ---------------------------------------------------------------------- */

typedef struct select_pass {
    const selector *sel;
    int64_t start_ns, end_ns;
    block_selection *out;
    uint64_t **keys;    /* per block, per profile */
    const bool *checks; /* per block: may hold a copy of a profile stored elsewhere */
    bool defer;         /* blocks that cannot are left to the pass that reads them */
} select_pass;

static uint64_t profile_key(uint64_t series, const block_profile *p) {
    uint64_t h = strata_hash_combine(series, (uint64_t)p->time_ns);
    h = strata_hash_combine(h, (uint64_t)p->duration_ns);
    h = strata_hash_combine(h, (uint64_t)p->period);
    h = strata_hash_combine(h, (uint64_t)p->total);
    return h | 1; /* non-zero for the map */
}

static int select_block(indexed_block *b, size_t index, block_reader *r, void *partial,
                        strata_error *err) {
    select_pass *pass = partial;
    (void)b;
    uint32_t *ids = NULL;
    size_t n_ids = 0;
    block_selection *out = &pass->out[index];
    if (pass->defer && !pass->checks[index]) {
        out->deferred = true;
        return 0;
    }
    if (engine_select_series(r, pass->sel, &pass->sel->profile_type, &ids, &n_ids, err) != 0)
        return -1;
    int rc = 0;
    if (n_ids > 0)
        rc = block_reader_profiles(r, ids, n_ids, pass->start_ns, pass->end_ns, &out->profiles,
                                   &out->n, err);
    free(ids);
    if (rc != 0) { /* the block may be skipped: it must not keep half a selection */
        free(out->profiles);
        out->profiles = NULL;
        out->n = 0;
        return -1;
    }
    if (out->n == 0 || !pass->checks[index])
        return 0;
    uint64_t *keys = malloc(out->n * sizeof *keys);
    if (keys == NULL)
        return strata_error_oom(err);
    uint32_t last = UINT32_MAX;
    uint64_t series = 0;
    for (size_t i = 0; i < out->n; i++) {
        if (out->profiles[i].series_id != last) {
            last = out->profiles[i].series_id;
            series = label_set_hash(block_reader_series_labels(r, last));
        }
        keys[i] = profile_key(series, &out->profiles[i]);
    }
    pass->keys[index] = keys;
    return 0;
}

/* ---- step 2: candidates ------------------------------------------------------------------- */

/* Marks profiles whose key another profile shares; returns how many blocks have candidates. */
static int find_candidates(block_selection *sel, uint64_t **keys, size_t n_blocks, bool **cand,
                           size_t *n_cand, strata_error *err) {
    size_t total = 0;
    for (size_t b = 0; b < n_blocks; b++)
        total += sel[b].n;
    *n_cand = 0;
    if (total < 2)
        return 0;
    strata_u64_map map;
    if (strata_u64_map_init(&map, total) != 0)
        return strata_error_oom(err);
    int rc = 0;
    for (size_t b = 0; rc == 0 && b < n_blocks; b++) {
        for (size_t i = 0; rc == 0 && keys[b] != NULL && i < sel[b].n; i++) {
            bool inserted;
            uint64_t *slot =
                strata_u64_map_upsert(&map, keys[b][i], (uint64_t)b << 32 | i, &inserted);
            if (slot == NULL) {
                rc = strata_error_oom(err);
                break;
            }
            if (inserted)
                continue;
            size_t fb = (size_t)(*slot >> 32), fi = (size_t)(*slot & 0xffffffffu);
            size_t mark[2][2] = {{fb, fi}, {b, i}};
            for (int k = 0; k < 2 && rc == 0; k++) {
                size_t mb = mark[k][0];
                if (cand[mb] == NULL && (cand[mb] = calloc(sel[mb].n, sizeof **cand)) == NULL)
                    rc = strata_error_oom(err);
                else if (!cand[mb][mark[k][1]]) {
                    cand[mb][mark[k][1]] = true;
                    (*n_cand)++;
                }
            }
        }
    }
    strata_u64_map_free(&map);
    return rc;
}

/* ---- step 3: fingerprints of candidates --------------------------------------------------- */

static uint64_t hash_str(uint64_t h, const char *s) {
    return strata_hash_combine(h, s != NULL ? strata_hash_bytes(s, strlen(s), 0) : 0);
}

static int location_hash(block_reader *r, uint32_t id, uint64_t *out, strata_error *err) {
    block_location loc;
    if (block_reader_location(r, id, &loc, err) != 0)
        return -1;
    uint64_t h = strata_hash_combine(loc.address, loc.is_folded);
    if (loc.has_mapping) {
        block_mapping m;
        if (block_reader_mapping(r, loc.mapping_id, &m, err) != 0)
            return -1;
        h = hash_str(hash_str(h, m.file), m.build_id);
        h = strata_hash_combine(h, m.memory_start);
        h = strata_hash_combine(h, m.memory_limit);
        h = strata_hash_combine(h, m.file_offset);
    }
    for (uint32_t i = 0; i < loc.n_lines; i++) {
        block_function fn;
        if (block_reader_function(r, loc.lines[i].function_id, &fn, err) != 0)
            return -1;
        h = hash_str(hash_str(hash_str(h, fn.name), fn.system_name), fn.file);
        h = strata_hash_combine(h, (uint64_t)fn.start_line);
        h = strata_hash_combine(h, (uint64_t)loc.lines[i].line);
    }
    *out = h;
    return 0;
}

typedef struct stack_hasher {
    strata_u64_map stacks;    /* stack id + 1 -> content hash */
    strata_u64_map locations; /* location id + 1 -> content hash */
    strata_u64_map sets;      /* sample label set id + 1 -> content hash */
    uint32_t *path;           /* scratch: unhashed ancestors, leaf first */
    size_t cap_path;
} stack_hasher;

static int location_hash_memo(block_reader *r, stack_hasher *sh, uint32_t loc, uint64_t *out,
                              strata_error *err) {
    const uint64_t *known = strata_u64_map_get(&sh->locations, (uint64_t)loc + 1);
    if (known != NULL) {
        *out = *known;
        return 0;
    }
    if (location_hash(r, loc, out, err) != 0)
        return -1;
    if (strata_u64_map_upsert(&sh->locations, (uint64_t)loc + 1, *out, NULL) == NULL)
        return strata_error_oom(err);
    return 0;
}

/* The content hash of stack `id`: its parent's combined with its location's, memoized, over the
 * unhashed ancestors collected leaf first and hashed root first (no recursion). */
static int stack_hash(block_reader *r, stack_hasher *sh, uint32_t id, uint64_t *out,
                      strata_error *err) {
    size_t n = 0;
    uint64_t h = 0x5354524154414e53ULL; /* the empty stack */
    for (uint32_t cur = id; cur != 0;) {
        const uint64_t *known = strata_u64_map_get(&sh->stacks, (uint64_t)cur + 1);
        if (known != NULL) {
            h = *known;
            break;
        }
        if (STRATA_ARRAY_RESERVE_OR_OOM(sh->path, sh->cap_path, n + 1, err) != 0)
            return -1;
        sh->path[n++] = cur;
        uint32_t parent, loc;
        if (block_reader_stack_node(r, cur, &parent, &loc, err) != 0)
            return -1;
        cur = parent;
    }
    while (n > 0) {
        uint32_t s = sh->path[--n], parent, loc;
        uint64_t lh;
        if (block_reader_stack_node(r, s, &parent, &loc, err) != 0 ||
            location_hash_memo(r, sh, loc, &lh, err) != 0)
            return -1;
        h = strata_hash_combine(h, lh);
        if (strata_u64_map_upsert(&sh->stacks, (uint64_t)s + 1, h, NULL) == NULL)
            return strata_error_oom(err);
    }
    *out = h;
    return 0;
}

/* The content hash of a sample label set: its (name, value) pairs, sorted by name in blocks; 0
 * for the empty set. */
static int label_set_content_hash(block_reader *r, stack_hasher *sh, uint32_t id, uint64_t *out,
                                  strata_error *err) {
    if (id == 0) {
        *out = 0;
        return 0;
    }
    const uint64_t *known = strata_u64_map_get(&sh->sets, (uint64_t)id + 1);
    if (known != NULL) {
        *out = *known;
        return 0;
    }
    const label_set *set;
    if (block_reader_label_set(r, id, &set, err) != 0)
        return -1;
    uint64_t h = 0x4c4142454c534554ULL;
    for (size_t i = 0; i < set->count; i++)
        h = hash_str(hash_str(h, set->labels[i].name), set->labels[i].value);
    if (strata_u64_map_upsert(&sh->sets, (uint64_t)id + 1, h, NULL) == NULL)
        return strata_error_oom(err);
    *out = h;
    return 0;
}

typedef struct hashed_row {
    uint64_t stack;
    uint64_t set; /* content hash of the sample label set; 0 = none */
    int64_t value;
} hashed_row;

static int compare_rows(const void *a, const void *b) {
    const hashed_row *x = a, *y = b;
    if (x->stack != y->stack)
        return x->stack > y->stack ? 1 : -1;
    return (x->set > y->set) - (x->set < y->set);
}

static int fingerprint_profile(block_reader *r, stack_hasher *sh, const block_profile *p,
                               uint64_t *out, strata_error *err) {
    block_samples s = {0};
    if (block_reader_read_samples(r, p, 1, &s, err) != 0)
        return -1;
    hashed_row *rows = malloc((s.len + 1) * sizeof *rows);
    int rc = rows != NULL ? 0 : strata_error_oom(err);
    for (size_t i = 0; rc == 0 && i < s.len; i++) {
        rows[i].value = s.values[i];
        rc = stack_hash(r, sh, s.stacks[i], &rows[i].stack, err);
        if (rc == 0)
            rc = label_set_content_hash(r, sh, s.label_sets != NULL ? s.label_sets[i] : 0,
                                        &rows[i].set, err);
    }
    if (rc == 0) {
        qsort(rows, s.len, sizeof *rows, compare_rows);
        uint64_t fp = 0, distinct = 0;
        for (size_t i = 0; i < s.len;) {
            uint64_t stack = rows[i].stack, set = rows[i].set, sum = 0;
            for (; i < s.len && rows[i].stack == stack && rows[i].set == set; i++)
                sum += (uint64_t)rows[i].value;
            if (sum == 0)
                continue; /* as the compactor's canonical form */
            /* without labels exactly as before labels were stored */
            uint64_t key = set == 0 ? stack : strata_hash_combine(stack, set);
            fp += strata_hash_combine(key, sum);
            distinct++;
        }
        *out = strata_hash_combine(fp, distinct);
    }
    free(rows);
    block_samples_free(&s);
    return rc;
}

typedef struct fingerprint_pass {
    block_selection *sel;
    bool **cand;
    uint64_t **fingerprints; /* per block with candidates, per profile */
} fingerprint_pass;

static int fingerprint_block(indexed_block *b, size_t index, block_reader *r, void *partial,
                             strata_error *err) {
    fingerprint_pass *pass = partial;
    (void)b;
    if (pass->cand[index] == NULL)
        return 0;
    const block_selection *sel = &pass->sel[index];
    uint64_t *fps = calloc(sel->n, sizeof *fps);
    stack_hasher sh;
    memset(&sh, 0, sizeof sh);
    int rc = fps != NULL && strata_u64_map_init(&sh.stacks, 256) == 0 &&
                     strata_u64_map_init(&sh.locations, 256) == 0 &&
                     strata_u64_map_init(&sh.sets, 16) == 0
                 ? 0
                 : strata_error_oom(err);
    for (size_t i = 0; rc == 0 && i < sel->n; i++)
        if (pass->cand[index][i])
            rc = fingerprint_profile(r, &sh, &sel->profiles[i], &fps[i], err);
    strata_u64_map_free(&sh.stacks);
    strata_u64_map_free(&sh.locations);
    strata_u64_map_free(&sh.sets);
    free(sh.path);
    if (rc != 0) {
        free(fps);
        return -1;
    }
    pass->fingerprints[index] = fps;
    return 0;
}

/* ---- step 4: drop all but the first of each identical group ------------------------------- */

static int drop_duplicates(block_selection *sel, size_t n_blocks, uint64_t **keys, bool **cand,
                           uint64_t **fps, size_t n_cand, uint64_t *dropped, strata_error *err) {
    strata_u64_map seen;
    if (strata_u64_map_init(&seen, n_cand) != 0)
        return strata_error_oom(err);
    int rc = 0;
    for (size_t b = 0; rc == 0 && b < n_blocks; b++) {
        if (cand[b] == NULL || fps[b] == NULL)
            continue;
        for (size_t i = 0; i < sel[b].n; i++) {
            if (!cand[b][i])
                continue;
            bool inserted;
            uint64_t key = strata_hash_combine(keys[b][i], fps[b][i]) | 1;
            if (strata_u64_map_upsert(&seen, key, 1, &inserted) == NULL) {
                rc = strata_error_oom(err);
                break;
            }
            if (inserted)
                continue;
            if (sel[b].dropped == NULL &&
                (sel[b].dropped = calloc(sel[b].n, sizeof *sel[b].dropped)) == NULL) {
                rc = strata_error_oom(err);
                break;
            }
            sel[b].dropped[i] = true;
            (*dropped)++;
        }
    }
    strata_u64_map_free(&seen);
    return rc;
}

/* ---- which blocks can hold copies --------------------------------------------------------- */

typedef struct block_span {
    int64_t min_ms, max_ms;
    size_t index;
} block_span;

static int compare_spans(const void *a, const void *b) {
    const block_span *x = a, *y = b;
    return (x->min_ms > y->min_ms) - (x->min_ms < y->min_ms);
}

/* checks[i]: block i is level 1, or its time range meets another block's (ranges are compared
 * inclusively, which can only add blocks to look at). */
static int blocks_to_check(indexed_block **blocks, size_t n, bool *checks, strata_error *err) {
    block_span *spans = malloc((n + 1) * sizeof *spans);
    if (spans == NULL)
        return strata_error_oom(err);
    for (size_t i = 0; i < n; i++) {
        spans[i] = (block_span){blocks[i]->meta.min_time_ms, blocks[i]->meta.max_time_ms, i};
        checks[i] = blocks[i]->meta.compaction_level <= 1;
    }
    qsort(spans, n, sizeof *spans, compare_spans);
    size_t first = 0; /* the current run of overlapping blocks is spans[first..i) */
    int64_t run_max = n > 0 ? spans[0].max_ms : 0;
    for (size_t i = 1; i < n; i++) {
        if (spans[i].min_ms > run_max) {
            first = i;
            run_max = spans[i].max_ms;
            continue;
        }
        for (size_t k = first; k <= i; k++)
            checks[spans[k].index] = true;
        first = i; /* earlier members are marked; later overlaps mark from here on */
        if (spans[i].max_ms > run_max)
            run_max = spans[i].max_ms;
    }
    free(spans);
    return 0;
}

/* ---- entry point -------------------------------------------------------------------------- */

/* Frees an array of n allocated arrays of any element type (a macro: reading a `T *` element
 * through a `void **` would break strict aliasing). */
#define FREE_ARRAYS(arrays, n)                                                                     \
    do {                                                                                           \
        for (size_t i_ = 0; (arrays) != NULL && i_ < (n); i_++)                                    \
            free((arrays)[i_]);                                                                    \
        free(arrays);                                                                              \
    } while (0)

int engine_select_profiles(query_engine *e, indexed_block **blocks, size_t n_blocks,
                           const selector *sel, int64_t start_ns, int64_t end_ns, bool defer,
                           block_selection *out, bool *skipped, query_stats *stats,
                           readahead_keep *keep, strata_error *err) {
    size_t workers = engine_fetch_worker_count(e, n_blocks);
    select_pass *passes = calloc(workers, sizeof *passes);
    void **ptrs = calloc(workers, sizeof *ptrs);
    uint64_t **keys = calloc(n_blocks + 1, sizeof *keys);
    bool **cand = calloc(n_blocks + 1, sizeof *cand);
    uint64_t **fps = calloc(n_blocks + 1, sizeof *fps);
    fingerprint_pass *fpass = calloc(workers, sizeof *fpass);
    bool *checks = calloc(n_blocks + 1, sizeof *checks);
    int rc = (passes && ptrs && keys && cand && fps && fpass && checks) ? 0 : strata_error_oom(err);
    if (rc == 0)
        rc = blocks_to_check(blocks, n_blocks, checks, err);
    for (size_t w = 0; rc == 0 && w < workers; w++) {
        passes[w] = (select_pass){sel, start_ns, end_ns, out, keys, checks, defer};
        ptrs[w] = &passes[w];
    }
    if (rc == 0)
        rc = engine_for_each_block_keep(e, blocks, n_blocks, select_block, ptrs, workers, skipped,
                                        stats, keep, err);
    size_t n_cand = 0;
    if (rc == 0)
        rc = find_candidates(out, keys, n_blocks, cand, &n_cand, err);
    if (rc == 0 && n_cand > 0) {
        for (size_t w = 0; w < workers; w++) {
            fpass[w] = (fingerprint_pass){out, cand, fps};
            ptrs[w] = &fpass[w];
        }
        rc = engine_for_each_block(e, blocks, n_blocks, fingerprint_block, ptrs, workers, skipped,
                                   stats, err);
        if (rc == 0)
            rc = drop_duplicates(out, n_blocks, keys, cand, fps, n_cand, &stats->duplicates, err);
    }
    free(passes);
    free(ptrs);
    free(fpass);
    free(checks);
    FREE_ARRAYS(keys, n_blocks);
    FREE_ARRAYS(cand, n_blocks);
    FREE_ARRAYS(fps, n_blocks);
    return rc;
}

void block_selections_free(block_selection *s, size_t n) {
    for (size_t i = 0; s != NULL && i < n; i++) {
        free(s[i].profiles);
        free(s[i].dropped);
    }
    free(s);
}
