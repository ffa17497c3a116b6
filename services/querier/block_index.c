/*
 * block_index.c - see block_index.h.
 *
 * The index is a flat array of entries guarded by one mutex; queries copy out the entries they
 * need (with a reference each) and work without the index lock. Listing and meta.json fetches run
 * without the lock too, so a slow bucket never blocks queries. Beside the array, the lineage
 * index (see "lineage" below) finds an entry by name and the entries related to a ULID, and keeps
 * each entry's hidden flag exact as entries come and go, so a query tests one flag per entry and
 * a listing costs O(blocks listed), not O(blocks x blocks), at tens of thousands of blocks.
 */
#include "block_index.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "block/block_format.h"
#include "block/bucket_index.h"
#include "common/thread.h"
#include "common/array.h"
#include "common/clock.h"
#include "common/hash.h"
#include "common/log.h"

typedef struct name_list {
    char **items;
    size_t count;
    size_t cap;
} name_list;

/* Deletion marks of known blocks are re-checked (and the tenants listed) every this many syncs,
 * and by the sync thread at least every MARK_RECHECK_SYNCS sync_intervals. */
#define MARK_RECHECK_SYNCS 10
/* A listing that is not full asks only for the ULIDs made since this long ago: blocks are named
 * when they are finished, just before their upload (block_writer), so a block committed now has a
 * ULID of a few seconds ago (a minute for a large merged block), and a writer's clock may be off
 * by some minutes. A block that is older still is found by the next full listing, or from the
 * compactor's bucket-index.json. */
#define RECENT_LISTING_LOOKBACK_MS (15 * 60 * 1000)
/* The sync thread lists at sync_interval while the querier has served a query within this long,
 * and at idle_sync_interval otherwise. */
#define BUSY_WINDOW_NS (60 * STRATA_NS_PER_SEC)
/* A query arriving at an idle querier waits at most this long for the listing it asks for. */
#define WAKE_WAIT_MAX_NS (5 * STRATA_NS_PER_SEC)

/* Blocks up to this many read-ahead windows are read whole when their reader opens. */
#define WHOLE_READ_WINDOWS 8

/* What a tenant's bucket-index.json looked like when last read: a recheck reads it again only when
 * its size or time changed (one attributes request instead of the whole index), and in any case
 * every MARK_RECHECK_SYNCS rechecks (stores whose times have a second's resolution). */
typedef struct index_seen {
    char *tenant;
    uint64_t size;
    int64_t last_modified_ns;
    unsigned skipped;
} index_seen;

struct block_index {
    block_index_options opts;
    bucket *store;
    pthread_mutex_t mu;
    pthread_cond_t wake;
    indexed_block **blocks;
    size_t n_blocks;
    size_t cap_blocks;
    uint64_t clock;
    uint64_t open_readers;
    uint64_t open_reader_bytes; /* sum of reader_bytes over entries with a reader */
    /* The lineage index (see "lineage" below): 64-bit keys -> lists of nodes, each naming an
     * indexed block that has the key's ULID as a source, as a parent, as its own ULID, or the
     * key's tenant/name as its directory. Maintained as blocks come and go. */
    strata_u64_map lineage;     /* key -> node number (index + 1) of its list's head; 0: empty */
    struct lineage_node *nodes; /* nodes[0..n_nodes): in a list or on the free list */
    size_t n_nodes, cap_nodes;
    uint32_t free_nodes; /* node number of the free list's head; 0: empty */
    size_t n_free;
    size_t n_dead_keys; /* keys in the map whose list is empty */
    /* Blocks left for good: marked for deletion and either replaced by an indexed block or expired.
     * Keys "tenant/ULID" -> hash map to position + 1; listings skip them (no meta.json or mark
     * fetch per listing while they wait delete_delay for deletion). Pruned when they are no longer
     * listed. */
    char **retired;
    size_t n_retired, cap_retired;
    strata_u64_map retired_map;
    pthread_mutex_t sync_mu; /* held by a sync: the tenant list and index_seen below */
    name_list tenants;       /* the bucket's tenants as last listed */
    index_seen *seen;
    size_t n_seen, cap_seen;
    bool has_tenants;
    bool relist_tenants; /* a query asked for a tenant with no known block */
    bool synced;
    /* The sync thread's schedule (guarded by mu; times from strata_monotonic_ns). */
    pthread_cond_t synced_cond; /* broadcast after every sync */
    int64_t last_query_ns;      /* the last block_index_acquire; 0: none yet */
    int64_t last_sync_ns;       /* when the last sync ended; 0: none yet */
    int64_t last_full_ns;       /* when the last full listing started */
    int64_t last_recheck_ns;    /* when the last mark recheck started */
    bool sync_requested;        /* a query found the index stale and waits for a sync */
    uint64_t sync_starts;       /* syncs begun (stats.syncs: ended) */
    bool stopping;
    bool started;
    pthread_t thread;
    block_index_stats stats;
};

void block_index_options_default(block_index_options *opts) {
    opts->sync_interval_ns = STRATA_NS_PER_SEC;
    opts->idle_sync_interval_ns = 0;
    opts->full_sync_interval_ns = 60 * STRATA_NS_PER_SEC;
    opts->max_open_readers = 1024;
    opts->max_open_reader_bytes = (uint64_t)1 << 30;
    opts->reader_cache_bytes = 16u << 20;
    /* One ranged GET of 1 MiB costs about what one of 4 KiB does on an object store (latency,
     * not bandwidth, and the same request fee), and a level-1 block is usually smaller: its
     * footer and every page then come in the one read at open. */
    opts->readahead_bytes = 1u << 20;
}

int block_index_new(const block_index_options *opts, bucket *store, block_index **out,
                    strata_error *err) {
    block_index *ix = calloc(1, sizeof *ix);
    if (ix == NULL)
        return strata_error_oom(err);
    ix->opts = *opts;
    ix->store = store;
    if (strata_u64_map_init(&ix->lineage, 64) != 0) {
        free(ix);
        return strata_error_oom(err);
    }
    if (strata_u64_map_init(&ix->retired_map, 64) != 0) {
        strata_u64_map_free(&ix->lineage);
        free(ix);
        return strata_error_oom(err);
    }
    pthread_condattr_t attr;
    if (pthread_condattr_init(&attr) != 0 ||
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC) != 0 ||
        pthread_mutex_init(&ix->mu, NULL) != 0 || pthread_mutex_init(&ix->sync_mu, NULL) != 0 ||
        pthread_cond_init(&ix->wake, &attr) != 0 ||
        pthread_cond_init(&ix->synced_cond, &attr) != 0) {
        strata_u64_map_free(&ix->lineage);
        strata_u64_map_free(&ix->retired_map);
        free(ix);
        return strata_error_set(err, STRATA_INTERNAL, "cannot initialise block index locks");
    }
    pthread_condattr_destroy(&attr);
    *out = ix;
    return 0;
}

static void entry_free(indexed_block *b) {
    if (b->reader != NULL)
        block_reader_close(b->reader);
    free(b->fetch_ctx);
    free(b->lineage_owned);
    block_meta_free(&b->meta);
    pthread_mutex_destroy(&b->mu);
    free(b->tenant);
    free(b);
}

/* ---- listing ------------------------------------------------------------------------------ */

static void name_list_free(name_list *l) {
    for (size_t i = 0; i < l->count; i++)
        free(l->items[i]);
    free(l->items);
    memset(l, 0, sizeof *l);
}

/* Collects the sub-directory names ("x" for "dir/x/") of a non-recursive listing. */
static int collect_dirs(const char *key, void *ctx, strata_error *err) {
    name_list *l = ctx;
    size_t len = strlen(key);
    if (len == 0 || key[len - 1] != '/')
        return 0;
    const char *start = key;
    const char *slash = memchr(key, '/', len - 1);
    while (slash != NULL && slash < key + len - 1) {
        start = slash + 1;
        slash = memchr(start, '/', (size_t)(key + len - 1 - start));
    }
    if (STRATA_ARRAY_RESERVE_OR_OOM(l->items, l->cap, l->count + 1, err) != 0)
        return -1;
    if ((l->items[l->count] = strndup(start, (size_t)(key + len - 1 - start))) == NULL)
        return strata_error_oom(err);
    l->count++;
    return 0;
}

static bool is_ulid(const char *s) {
    ulid u;
    return strlen(s) == ULID_STRING_LEN && ulid_parse(s, ULID_STRING_LEN, &u, NULL) == 0;
}

/* ---- lineage ------------------------------------------------------------------------------
 *
 * Which blocks a query sees. Every block holds the data of a set of level-1 blocks, its lineage:
 * compaction.sources, sorted and de-duplicated (the block itself when it lists none). Block Y
 * covers block X of the same tenant when Y's lineage is a superset of X's (for equal sets, when Y
 * has the higher level, then the greater ULID), or when Y lists X in compaction.parents. A block
 * that any other indexed block covers is hidden. Covering is transitive and the tie-break a strict
 * order, so each lineage is answered by its outermost indexed block alone, at any depth: a level-2
 * block under a level-4 block is hidden although the level-4 block's parents name only level-3
 * blocks, and whatever became of the level-3 block in between (hidden, retired, deleted).
 *
 * The index keeps node lists under 64-bit keys: under a ULID's key, a SOURCE node for each block
 * with that ULID in its lineage (tag: its position there), a PARENT node for each block listing it
 * as a parent (tag: the parent's position) and an ID node for the block with that ULID; under a
 * tenant/name key, the block in that directory (NAME). Every candidate covering X has X's first
 * source in its lineage, so X's state is decided by the SOURCE nodes under that one key and the
 * PARENT nodes under X's own ULID: a few nodes each (one per level of compaction), and a
 * superset check by binary searches. Keys are hashes: every node found is checked against the
 * real ULIDs and names.
 *
 * The hidden flags are kept exact as blocks come and go (under the index lock): a block that
 * arrives gets its own flag and hides what it covers (found through its lineage's keys and its
 * parents' keys); a block that leaves makes the blocks it may have hidden decide again. So the
 * cost is proportional to the changed block's sources, never to the whole index, and a fresh
 * level-1 block per second costs a few lookups. Nodes of removed blocks go to a free list, and
 * their keys stay in the map with empty lists; the structure is rebuilt when more than half of its
 * nodes or of its keys are unused. */

enum { NODE_SOURCE = 0, NODE_PARENT = 1, NODE_ID = 2, NODE_NAME = 3 };
#define NODE_KIND_SHIFT 30
#define NODE_POS_LIMIT (UINT32_C(1) << NODE_KIND_SHIFT)
#define NODE_TAG(kind, pos) ((uint32_t)(kind) << NODE_KIND_SHIFT | (uint32_t)(pos))
#define NODE_KIND(tag) ((tag) >> NODE_KIND_SHIFT)
#define NODE_POS(tag) ((tag) & (NODE_POS_LIMIT - 1))
/* Rebuild the node structure once this many nodes (and more than the used ones) are free, or
 * this many keys (and more than half) have empty lists. */
#define NODE_COMPACT_MIN 4096

typedef struct lineage_node {
    indexed_block *block;
    uint32_t next; /* node number (index + 1) of the next node in the list; 0 ends it */
    uint32_t tag;  /* NODE_TAG(kind, position in the block's lineage or parents) */
} lineage_node;

static uint64_t ulid_key(const ulid *id) {
    uint64_t h = strata_hash_bytes(id->bytes, sizeof id->bytes, 0);
    return h == 0 ? 1 : h;
}

static uint64_t name_key(const char *tenant, const char *id) {
    uint64_t h = strata_hash_combine(strata_hash_bytes(tenant, strlen(tenant), 0),
                                     strata_hash_bytes(id, strlen(id), 1));
    return h == 0 ? 1 : h;
}

/* The node number of key's first node; 0 when none. */
static uint32_t first_node(const block_index *ix, uint64_t key) {
    const uint64_t *head = strata_u64_map_get(&ix->lineage, key);
    return head == NULL ? 0 : (uint32_t)*head;
}

static int push_node(block_index *ix, uint64_t key, indexed_block *b, uint32_t tag,
                     strata_error *err) {
    uint32_t number = ix->free_nodes;
    if (number != 0) {
        ix->free_nodes = ix->nodes[number - 1].next;
        ix->n_free--;
    } else {
        /* node numbers are 1-based uint32_t: n_nodes stays below UINT32_MAX */
        if (ix->n_nodes >= UINT32_MAX - 1 ||
            STRATA_ARRAY_RESERVE(ix->nodes, ix->cap_nodes, ix->n_nodes + 1) != 0)
            return strata_error_oom(err);
        number = (uint32_t)++ix->n_nodes;
    }
    bool inserted = false;
    uint64_t *head = strata_u64_map_upsert(&ix->lineage, key, 0, &inserted);
    if (head == NULL) {
        ix->nodes[number - 1].next = ix->free_nodes; /* back to the free list */
        ix->free_nodes = number;
        ix->n_free++;
        return strata_error_oom(err);
    }
    if (!inserted && *head == 0)
        ix->n_dead_keys--;
    ix->nodes[number - 1] = (lineage_node){b, (uint32_t)*head, tag};
    *head = number;
    return 0;
}

/* Unlinks b's node with tag from key's list, if there. */
static void pop_node(block_index *ix, uint64_t key, const indexed_block *b, uint32_t tag) {
    uint64_t *head = strata_u64_map_get(&ix->lineage, key);
    if (head == NULL)
        return;
    uint32_t prev = 0;
    for (uint32_t n = (uint32_t)*head; n != 0; prev = n, n = ix->nodes[n - 1].next) {
        lineage_node *node = &ix->nodes[n - 1];
        if (node->block != b || node->tag != tag)
            continue;
        if (prev == 0)
            *head = node->next;
        else
            ix->nodes[prev - 1].next = node->next;
        if (*head == 0)
            ix->n_dead_keys++;
        node->block = NULL;
        node->next = ix->free_nodes;
        ix->free_nodes = n;
        ix->n_free++;
        return;
    }
}

static void unlink_block(block_index *ix, const indexed_block *b) {
    pop_node(ix, name_key(b->tenant, b->ulid_text), b, NODE_TAG(NODE_NAME, 0));
    pop_node(ix, ulid_key(&b->meta.id), b, NODE_TAG(NODE_ID, 0));
    for (size_t i = 0; i < b->n_lineage; i++)
        pop_node(ix, ulid_key(&b->lineage[i]), b, NODE_TAG(NODE_SOURCE, i));
    for (size_t j = 0; j < b->meta.n_parents; j++)
        pop_node(ix, ulid_key(&b->meta.parents[j].id), b, NODE_TAG(NODE_PARENT, j));
}

/* Adds b's nodes; on failure none stays. */
static int link_block(block_index *ix, indexed_block *b, strata_error *err) {
    int rc = push_node(ix, name_key(b->tenant, b->ulid_text), b, NODE_TAG(NODE_NAME, 0), err);
    if (rc == 0)
        rc = push_node(ix, ulid_key(&b->meta.id), b, NODE_TAG(NODE_ID, 0), err);
    for (size_t i = 0; i < b->n_lineage && rc == 0; i++)
        rc = push_node(ix, ulid_key(&b->lineage[i]), b, NODE_TAG(NODE_SOURCE, i), err);
    for (size_t j = 0; j < b->meta.n_parents && rc == 0; j++)
        rc = push_node(ix, ulid_key(&b->meta.parents[j].id), b, NODE_TAG(NODE_PARENT, j), err);
    if (rc != 0)
        unlink_block(ix, b);
    return rc;
}

static int compare_ulids(const void *a, const void *b) {
    return ulid_compare(a, b);
}

/* b's lineage: meta.sources when sorted and unique (as the merger writes them), else a sorted,
 * de-duplicated copy; the block itself when it lists no sources. */
static int init_lineage(indexed_block *b, strata_error *err) {
    const block_meta *m = &b->meta;
    if (m->n_sources >= NODE_POS_LIMIT || m->n_parents >= NODE_POS_LIMIT)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "block %s: too many sources or parents in meta.json", b->ulid_text);
    if (m->n_sources == 0) {
        b->lineage = &b->meta.id;
        b->n_lineage = 1;
        return 0;
    }
    bool sorted = true;
    for (size_t i = 1; i < m->n_sources && sorted; i++)
        sorted = ulid_compare(&m->sources[i - 1], &m->sources[i]) < 0;
    if (sorted) {
        b->lineage = m->sources;
        b->n_lineage = m->n_sources;
        return 0;
    }
    ulid *copy = malloc(m->n_sources * sizeof *copy);
    if (copy == NULL)
        return strata_error_oom(err);
    memcpy(copy, m->sources, m->n_sources * sizeof *copy);
    qsort(copy, m->n_sources, sizeof *copy, compare_ulids);
    size_t unique = 1;
    for (size_t i = 1; i < m->n_sources; i++)
        if (ulid_compare(&copy[unique - 1], &copy[i]) != 0)
            copy[unique++] = copy[i];
    b->lineage_owned = copy;
    b->lineage = copy;
    b->n_lineage = unique;
    return 0;
}

/* Of two blocks with the same lineage, the one that answers: the higher level, then the greater
 * ULID (then the greater directory name: a block copied under another name). */
static bool outranks(const indexed_block *y, const indexed_block *x) {
    if (y->meta.compaction_level != x->meta.compaction_level)
        return y->meta.compaction_level > x->meta.compaction_level;
    int c = ulid_compare(&y->meta.id, &x->meta.id);
    return c != 0 ? c > 0 : strcmp(y->ulid_text, x->ulid_text) > 0;
}

/* True when y's lineage covers x's (see above); from: where x's first source is in y's. */
static bool lineage_covers(const indexed_block *y, size_t from, const indexed_block *x) {
    if (y == x || y->n_lineage < x->n_lineage || strcmp(y->tenant, x->tenant) != 0)
        return false;
    if (y->n_lineage == x->n_lineage && !outranks(y, x))
        return false;
    size_t lo = from + 1;
    for (size_t i = 1; i < x->n_lineage; i++) {
        if (y->n_lineage - lo < x->n_lineage - i)
            return false;
        size_t a = lo, z = y->n_lineage;
        while (a < z) {
            size_t mid = a + (z - a) / 2;
            if (ulid_compare(&y->lineage[mid], &x->lineage[i]) < 0)
                a = mid + 1;
            else
                z = mid;
        }
        if (a == y->n_lineage || ulid_compare(&y->lineage[a], &x->lineage[i]) != 0)
            return false;
        lo = a + 1;
    }
    return true;
}

/* True when y (its parent number j) is x's merged block. */
static bool parent_covers(const indexed_block *y, size_t j, const indexed_block *x) {
    return y != x && ulid_compare(&y->meta.parents[j].id, &x->meta.id) == 0 &&
           strcmp(y->tenant, x->tenant) == 0;
}

/* Whether an indexed block other than x covers x (x need not be indexed). */
static bool covered_locked(const block_index *ix, const indexed_block *x) {
    for (uint32_t n = first_node(ix, ulid_key(&x->lineage[0])); n != 0; n = ix->nodes[n - 1].next) {
        const lineage_node *node = &ix->nodes[n - 1];
        size_t pos = NODE_POS(node->tag);
        if (NODE_KIND(node->tag) == NODE_SOURCE &&
            ulid_compare(&node->block->lineage[pos], &x->lineage[0]) == 0 &&
            lineage_covers(node->block, pos, x))
            return true;
    }
    for (uint32_t n = first_node(ix, ulid_key(&x->meta.id)); n != 0; n = ix->nodes[n - 1].next) {
        const lineage_node *node = &ix->nodes[n - 1];
        if (NODE_KIND(node->tag) == NODE_PARENT &&
            parent_covers(node->block, NODE_POS(node->tag), x))
            return true;
    }
    return false;
}

/* Re-decides (hide: b arrived) or decides again (b left) the blocks b may cover: those whose
 * first source is in b's lineage, and b's parents. */
static void update_covered_by_locked(block_index *ix, const indexed_block *b, bool arrived) {
    for (size_t i = 0; i < b->n_lineage; i++)
        for (uint32_t n = first_node(ix, ulid_key(&b->lineage[i])); n != 0;
             n = ix->nodes[n - 1].next) {
            const lineage_node *node = &ix->nodes[n - 1];
            indexed_block *x = node->block;
            if (NODE_KIND(node->tag) != NODE_SOURCE || NODE_POS(node->tag) != 0 || x == b ||
                x->hidden != !arrived || ulid_compare(&x->lineage[0], &b->lineage[i]) != 0)
                continue;
            x->hidden = arrived ? lineage_covers(b, i, x) : covered_locked(ix, x);
        }
    for (size_t j = 0; j < b->meta.n_parents; j++)
        for (uint32_t n = first_node(ix, ulid_key(&b->meta.parents[j].id)); n != 0;
             n = ix->nodes[n - 1].next) {
            const lineage_node *node = &ix->nodes[n - 1];
            indexed_block *x = node->block;
            if (NODE_KIND(node->tag) != NODE_ID || x->hidden != !arrived || !parent_covers(b, j, x))
                continue;
            x->hidden = arrived ? true : covered_locked(ix, x);
        }
}

/* Rebuilds the node structure without its free nodes and empty keys once they are the larger
 * part of it; left as it is when memory is short. */
static void compact_lineage_locked(block_index *ix) {
    bool nodes_wasted = ix->n_free >= NODE_COMPACT_MIN && ix->n_free * 2 > ix->n_nodes;
    bool keys_wasted =
        ix->n_dead_keys >= NODE_COMPACT_MIN && ix->n_dead_keys * 2 > ix->lineage.count;
    if (!nodes_wasted && !keys_wasted)
        return;
    strata_u64_map old_map = ix->lineage;
    lineage_node *old_nodes = ix->nodes;
    size_t old_n = ix->n_nodes, old_cap = ix->cap_nodes, old_free = ix->n_free;
    size_t old_dead = ix->n_dead_keys;
    uint32_t old_free_head = ix->free_nodes;
    ix->nodes = NULL;
    ix->n_nodes = ix->cap_nodes = ix->n_free = ix->n_dead_keys = 0;
    ix->free_nodes = 0;
    int rc = strata_u64_map_init(&ix->lineage, old_n - old_free);
    bool map_made = rc == 0;
    strata_error err;
    for (size_t i = 0; i < ix->n_blocks && rc == 0; i++)
        rc = link_block(ix, ix->blocks[i], &err);
    if (rc == 0) {
        strata_u64_map_free(&old_map);
        free(old_nodes);
        return;
    }
    if (map_made)
        strata_u64_map_free(&ix->lineage);
    free(ix->nodes);
    ix->lineage = old_map;
    ix->nodes = old_nodes;
    ix->n_nodes = old_n;
    ix->cap_nodes = old_cap;
    ix->n_free = old_free;
    ix->n_dead_keys = old_dead;
    ix->free_nodes = old_free_head;
}

static indexed_block *find_locked(block_index *ix, const char *tenant, const char *id) {
    for (uint32_t n = first_node(ix, name_key(tenant, id)); n != 0; n = ix->nodes[n - 1].next) {
        indexed_block *b = ix->nodes[n - 1].block;
        if (NODE_KIND(ix->nodes[n - 1].tag) == NODE_NAME && strcmp(b->ulid_text, id) == 0 &&
            strcmp(b->tenant, tenant) == 0)
            return b;
    }
    return NULL;
}

/* The names of one listing, for membership tests without scanning it: name_key -> position + 1,
 * or LISTED_AMBIGUOUS where two names share a key (membership then scans the list). */
#define LISTED_AMBIGUOUS UINT64_MAX

/* False when memory is short (is_listed then scans the list). */
static bool index_listing(strata_u64_map *m, const char *tenant, const name_list *ids) {
    if (strata_u64_map_init(m, ids->count) != 0)
        return false;
    for (size_t j = 0; j < ids->count; j++) {
        bool inserted = false;
        uint64_t *v = strata_u64_map_upsert(m, name_key(tenant, ids->items[j]), j + 1, &inserted);
        if (v == NULL) {
            strata_u64_map_free(m);
            return false;
        }
        if (!inserted && *v != LISTED_AMBIGUOUS && strcmp(ids->items[*v - 1], ids->items[j]) != 0)
            *v = LISTED_AMBIGUOUS;
    }
    return true;
}

/* Whether name is in ids; m from index_listing, or NULL. */
static bool is_listed(const strata_u64_map *m, const char *tenant, const name_list *ids,
                      const char *name) {
    if (m != NULL) {
        const uint64_t *v = strata_u64_map_get(m, name_key(tenant, name));
        if (v == NULL)
            return false;
        if (*v != LISTED_AMBIGUOUS)
            return strcmp(ids->items[*v - 1], name) == 0;
    }
    for (size_t j = 0; j < ids->count; j++)
        if (strcmp(ids->items[j], name) == 0)
            return true;
    return false;
}

/* ---- retired blocks ------------------------------------------------------------------------ */

static bool retired_has_locked(const block_index *ix, const char *tenant, const char *id) {
    const uint64_t *pos = strata_u64_map_get(&ix->retired_map, name_key(tenant, id));
    if (pos == NULL)
        return false;
    const char *key = ix->retired[*pos - 1];
    size_t tl = strlen(tenant);
    return strncmp(key, tenant, tl) == 0 && key[tl] == '/' && strcmp(key + tl + 1, id) == 0;
}

/* Best effort: a block not recorded is only loaded (and skipped) again. */
static void retire_locked(block_index *ix, const char *tenant, const char *id) {
    if (retired_has_locked(ix, tenant, id))
        return;
    if (STRATA_ARRAY_RESERVE(ix->retired, ix->cap_retired, ix->n_retired + 1) != 0)
        return;
    size_t len = strlen(tenant) + strlen(id) + 2;
    char *key = malloc(len);
    if (key == NULL)
        return;
    snprintf(key, len, "%s/%s", tenant, id);
    bool inserted = false;
    uint64_t *pos =
        strata_u64_map_upsert(&ix->retired_map, name_key(tenant, id), ix->n_retired + 1, &inserted);
    if (pos == NULL || !inserted) { /* out of memory, or a hash collision: not retired */
        free(key);
        return;
    }
    ix->retired[ix->n_retired++] = key;
}

/* Forgets retired blocks of tenant that are no longer listed (deleted); listing: ids indexed by
 * index_listing, or NULL. */
static void prune_retired_locked(block_index *ix, const char *tenant, const name_list *ids,
                                 const strata_u64_map *listing) {
    size_t tl = strlen(tenant), kept = 0;
    for (size_t i = 0; i < ix->n_retired; i++) {
        char *key = ix->retired[i];
        bool listed = true;
        if (strncmp(key, tenant, tl) == 0 && key[tl] == '/')
            listed = is_listed(listing, tenant, ids, key + tl + 1);
        if (listed)
            ix->retired[kept++] = key;
        else
            free(key);
    }
    if (kept == ix->n_retired)
        return;
    ix->n_retired = kept;
    strata_u64_map_clear(&ix->retired_map);
    for (size_t i = 0; i < ix->n_retired; i++) {
        const char *slash = strrchr(ix->retired[i], '/');
        char t[BUCKET_KEY_MAX];
        snprintf(t, sizeof t, "%.*s", (int)(slash - ix->retired[i]), ix->retired[i]);
        strata_u64_map_upsert(&ix->retired_map, name_key(t, slash + 1), i + 1, NULL);
    }
}

/* Whether tenant/id has deletion-mark.json and, for a mark the compactor wrote on a block that a
 * merged block replaces, that block's ULID (else replacement is ""). */
static int read_deletion_mark(block_index *ix, const char *tenant, const char *id, bool *marked,
                              char replacement[ULID_STRING_LEN + 1], strata_error *err) {
    *marked = false;
    replacement[0] = '\0';
    char key[BUCKET_KEY_MAX];
    snprintf(key, sizeof key, "%s/%s/%s", tenant, id, BLOCK_DELETION_MARK_FILE);
    strata_buffer json = STRATA_BUFFER_INIT;
    if (bucket_get(ix->store, key, &json, err) != 0) {
        strata_buffer_free(&json);
        return err->code == STRATA_NOT_FOUND ? 0 : -1;
    }
    *marked = true;
    block_deletion_mark mark;
    strata_error ignored;
    size_t prefix = strlen(BLOCK_DELETION_COMPACTED_INTO);
    if (block_deletion_mark_decode((const char *)json.data, json.len, &mark, &ignored) == 0) {
        const char *d = mark.details;
        if (d != NULL && strncmp(d, BLOCK_DELETION_COMPACTED_INTO, prefix) == 0 &&
            strlen(d + prefix) >= ULID_STRING_LEN) {
            snprintf(replacement, ULID_STRING_LEN + 1, "%.*s", ULID_STRING_LEN, d + prefix);
            if (!is_ulid(replacement))
                replacement[0] = '\0';
        }
        block_deletion_mark_free(&mark);
    }
    strata_buffer_free(&json);
    return 0;
}

/* Chains of replacements are at most this long (one per level). */
#define MAX_REPLACEMENT_DEPTH 8

static int announce_at(block_index *ix, const char *tenant, const char *id, int depth,
                       strata_error *err);

/* A block marked because a merged block replaces it stays in the index (hidden by the merged
 * block as soon as that is indexed) until the replacement is visible: this loads the replacement
 * now. Best effort: the next listing finds it anyway. */
static void load_replacement(block_index *ix, const char *tenant, const char *replacement,
                             int depth) {
    strata_error ignored;
    if (replacement[0] != '\0' && depth < MAX_REPLACEMENT_DEPTH)
        announce_at(ix, tenant, replacement, depth + 1, &ignored);
}

/* Reads tenant/id's meta.json into a new entry; *out NULL if the block is not committed yet or is
 * marked for deletion without a replacement. */
static int load_block(block_index *ix, const char *tenant, const char *id, int depth,
                      indexed_block **out, strata_error *err) {
    *out = NULL;
    char key[BUCKET_KEY_MAX];
    snprintf(key, sizeof key, "%s/%s/%s", tenant, id, BLOCK_META_FILE);
    strata_buffer json = STRATA_BUFFER_INIT;
    pthread_mutex_lock(&ix->mu);
    ix->stats.meta_reads++;
    pthread_mutex_unlock(&ix->mu);
    if (bucket_get(ix->store, key, &json, err) != 0) {
        strata_buffer_free(&json);
        return err->code == STRATA_NOT_FOUND ? 0 : -1;
    }
    bool marked = false, retire = false;
    indexed_block *b = calloc(1, sizeof *b);
    int rc = -1;
    if (b == NULL) {
        strata_error_oom(err);
        goto out;
    }
    if (strata_mutex_init(&b->mu, err) != 0) {
        free(b);
        b = NULL;
        goto out;
    }
    block_meta_init(&b->meta);
    snprintf(b->ulid_text, sizeof b->ulid_text, "%s", id);
    if ((b->tenant = strdup(tenant)) == NULL) {
        strata_error_oom(err);
        goto out;
    }
    if (block_meta_decode((const char *)json.data, json.len, &b->meta, err) != 0) {
        /* A damaged meta.json must not stop discovery of every other block; the compactor marks
         * such a block no-compact and operators see it in `strata bucket verify`. */
        char quoted[600];
        strata_log_debug("querier", "ignoring block with undecodable meta.json", "key=%s error=%s",
                         key, strata_log_quote(err->message, quoted, sizeof quoted));
        marked = true;
        rc = 0;
        goto out;
    }
    if (init_lineage(b, err) != 0)
        goto out;
    char replacement[ULID_STRING_LEN + 1];
    if (read_deletion_mark(ix, tenant, id, &marked, replacement, err) != 0)
        goto out;
    retire = marked;
    if (marked && replacement[0] != '\0') {
        /* Kept only while no indexed block holds its data yet: its replacement, or any block
         * descending from it (the replacement may be hidden, retired or deleted by now). */
        load_replacement(ix, tenant, replacement, depth);
        pthread_mutex_lock(&ix->mu);
        marked = covered_locked(ix, b);
        pthread_mutex_unlock(&ix->mu);
    }
    for (size_t i = 0; i < b->meta.n_files; i++)
        if (strcmp(b->meta.files[i].rel_path, BLOCK_DATA_FILE) == 0)
            b->data_size = b->meta.files[i].size_bytes;
    if (b->data_size == 0) {
        bucket_object_attributes attrs;
        snprintf(key, sizeof key, "%s/%s/%s", tenant, id, BLOCK_DATA_FILE);
        if (bucket_attributes(ix->store, key, &attrs, err) != 0)
            goto out;
        b->data_size = attrs.size;
    }
    rc = 0;
out:
    strata_buffer_free(&json);
    if (rc == 0 && marked && retire) {
        pthread_mutex_lock(&ix->mu);
        retire_locked(ix, tenant, id);
        pthread_mutex_unlock(&ix->mu);
    }
    if (rc == 0 && !marked)
        *out = b;
    else if (b != NULL)
        entry_free(b);
    return rc;
}

/* Adds b (its lineage set up) to the index: b is hidden if a block there covers it, and hides
 * the blocks it covers. */
static int add_entry_locked(block_index *ix, indexed_block *b, strata_error *err) {
    if (STRATA_ARRAY_RESERVE_OR_OOM(ix->blocks, ix->cap_blocks, ix->n_blocks + 1, err) != 0)
        return -1;
    if (link_block(ix, b, err) != 0)
        return -1;
    b->refs = 1; /* the index's own reference */
    b->slot = ix->n_blocks;
    ix->blocks[ix->n_blocks++] = b;
    b->hidden = covered_locked(ix, b);
    update_covered_by_locked(ix, b, true);
    return 0;
}

static void unref_locked(block_index *ix, indexed_block *b) {
    if (--b->refs > 0)
        return;
    if (b->reader != NULL) {
        ix->open_readers--;
        ix->open_reader_bytes -= b->reader_bytes;
    }
    entry_free(b);
}

/* Removes b from the index (queries holding it keep it alive); the blocks it covered decide
 * again whether another block covers them. */
static void remove_entry_locked(block_index *ix, indexed_block *b) {
    size_t i = b->slot;
    ix->blocks[i] = ix->blocks[--ix->n_blocks];
    ix->blocks[i]->slot = i;
    unlink_block(ix, b);
    update_covered_by_locked(ix, b, false);
    compact_lineage_locked(ix);
    b->removed = true;
    unref_locked(ix, b);
}

static int announce_at(block_index *ix, const char *tenant, const char *id, int depth,
                       strata_error *err) {
    pthread_mutex_lock(&ix->mu);
    bool known = find_locked(ix, tenant, id) != NULL || retired_has_locked(ix, tenant, id);
    pthread_mutex_unlock(&ix->mu);
    if (known)
        return 0;
    indexed_block *b;
    if (load_block(ix, tenant, id, depth, &b, err) != 0)
        return -1;
    if (b == NULL)
        return 0;
    pthread_mutex_lock(&ix->mu);
    int rc = 0;
    if (find_locked(ix, tenant, id) == NULL)
        rc = add_entry_locked(ix, b, err);
    else
        entry_free(b), b = NULL;
    if (rc != 0)
        entry_free(b);
    pthread_mutex_unlock(&ix->mu);
    return rc;
}

int block_index_announce(block_index *ix, const char *tenant, const char *id, strata_error *err) {
    return announce_at(ix, tenant, id, 0, err);
}

/* Drops index entries of tenant that are not in ids (deleted from the bucket). */
static void drop_missing(block_index *ix, const char *tenant, const name_list *ids) {
    strata_u64_map listing;
    const strata_u64_map *m = index_listing(&listing, tenant, ids) ? &listing : NULL;
    pthread_mutex_lock(&ix->mu);
    for (size_t i = 0; i < ix->n_blocks;) {
        indexed_block *b = ix->blocks[i];
        if (strcmp(b->tenant, tenant) == 0 && !is_listed(m, tenant, ids, b->ulid_text))
            remove_entry_locked(ix, b); /* moves the last entry to i */
        else
            i++;
    }
    prune_retired_locked(ix, tenant, ids, m);
    pthread_mutex_unlock(&ix->mu);
    if (m != NULL)
        strata_u64_map_free(&listing);
}

static indexed_block *entry_from_meta(const char *tenant, const block_meta *meta);

/* Adds the blocks of tenant's index that are neither known, retired nor marked (no meta.json
 * fetch: the index holds their meta); returns how many. */
static size_t add_index_blocks(block_index *ix, const char *tenant, const bucket_index *bi) {
    size_t added = 0;
    for (size_t i = 0; i < bi->n_blocks; i++) {
        if (bucket_index_mark_time(bi, &bi->blocks[i].id) >= 0)
            continue;
        char id[ULID_STRING_LEN + 1];
        ulid_format(&bi->blocks[i].id, id);
        pthread_mutex_lock(&ix->mu);
        bool known = find_locked(ix, tenant, id) != NULL || retired_has_locked(ix, tenant, id);
        pthread_mutex_unlock(&ix->mu);
        indexed_block *b = known ? NULL : entry_from_meta(tenant, &bi->blocks[i]);
        if (b == NULL)
            continue;
        strata_error err;
        pthread_mutex_lock(&ix->mu);
        if (find_locked(ix, tenant, b->ulid_text) == NULL && add_entry_locked(ix, b, &err) == 0) {
            b = NULL;
            added++;
            ix->stats.from_bucket_index++;
        }
        pthread_mutex_unlock(&ix->mu);
        if (b != NULL)
            entry_free(b);
    }
    return added;
}

/* The record of tenant's index as last read (created empty); NULL when out of memory. Called
 * with sync_mu held. */
static index_seen *seen_for(block_index *ix, const char *tenant) {
    for (size_t i = 0; i < ix->n_seen; i++)
        if (strcmp(ix->seen[i].tenant, tenant) == 0)
            return &ix->seen[i];
    if (STRATA_ARRAY_RESERVE(ix->seen, ix->cap_seen, ix->n_seen + 1) != 0)
        return NULL;
    index_seen *e = &ix->seen[ix->n_seen];
    *e = (index_seen){.tenant = strdup(tenant)};
    if (e->tenant == NULL)
        return NULL;
    ix->n_seen++;
    return e;
}

/* Whether tenant's bucket-index.json may have changed since it was last read: one attributes
 * request. *gone when there is none. Called with sync_mu held. */
static int index_may_have_changed(block_index *ix, const char *tenant, bool *changed, bool *gone,
                                  bucket_object_attributes *attrs, strata_error *err) {
    char key[BUCKET_KEY_MAX];
    snprintf(key, sizeof key, "%s/%s", tenant, BUCKET_INDEX_FILE);
    *changed = true;
    *gone = false;
    if (bucket_attributes(ix->store, key, attrs, err) != 0) {
        *gone = err->code == STRATA_NOT_FOUND;
        return *gone ? 0 : -1;
    }
    index_seen *seen = seen_for(ix, tenant);
    if (seen != NULL && seen->size == attrs->size &&
        seen->last_modified_ns == attrs->last_modified_ns &&
        seen->skipped + 1 < MARK_RECHECK_SYNCS) {
        seen->skipped++;
        *changed = false;
    }
    return 0;
}

static void remember_index(block_index *ix, const char *tenant,
                           const bucket_object_attributes *attrs) {
    index_seen *seen = seen_for(ix, tenant);
    if (seen != NULL) {
        seen->size = attrs->size;
        seen->last_modified_ns = attrs->last_modified_ns;
        seen->skipped = 0;
    }
}

/* Learns what the compactor's bucket-index.json of tenant says, when it changed since it was last
 * read: blocks the listings have not found (a merged block whose ULID is older than a recent
 * listing looks back), and known blocks that have been marked for deletion, which are dropped: at
 * once for retention marks, and for blocks a merged block replaces once an indexed block covers
 * them (until then they still answer queries, so no data goes missing between a mark and the
 * replacement's discovery).
 *
 * The compactor (the only writer of marks) rewrites the index at the end of every cycle: one
 * attributes request tells whether it changed, and one GET reads it, however many blocks the
 * tenant has, where reading every known block's deletion-mark.json cost one GET per block (at
 * 10,000 blocks, 1,000 requests a second). Only the known blocks the index lists as marked have
 * their mark read, for the replacement it names. Blocks merged away need no mark to disappear:
 * the merged block's lineage hides them as soon as it is indexed. A missing index means no
 * compactor has run, so nothing is marked; an unreadable one is logged and skipped (the next
 * recheck reads it again). Called with sync_mu held. */
static int apply_bucket_index(block_index *ix, const char *tenant, strata_error *err) {
    bucket_object_attributes attrs;
    bool changed, gone;
    if (index_may_have_changed(ix, tenant, &changed, &gone, &attrs, err) != 0)
        return -1;
    if (gone || !changed)
        return 0;
    char key[BUCKET_KEY_MAX];
    snprintf(key, sizeof key, "%s/%s", tenant, BUCKET_INDEX_FILE);
    strata_buffer json = STRATA_BUFFER_INIT;
    bucket_index bi;
    bucket_index_init(&bi);
    strata_error index_err;
    if (bucket_get(ix->store, key, &json, &index_err) != 0 ||
        bucket_index_decode((const char *)json.data, json.len, &bi, &index_err) != 0) {
        strata_buffer_free(&json);
        bucket_index_free(&bi);
        if (index_err.code == STRATA_NOT_FOUND)
            return 0;
        if (index_err.code != STRATA_INVALID_ARGUMENT) {
            *err = index_err;
            return -1;
        }
        char quoted[600];
        strata_log_warn("querier", "ignoring bucket index", "key=%s error=%s", key,
                        strata_log_quote(index_err.message, quoted, sizeof quoted));
        return 0;
    }
    strata_buffer_free(&json);
    add_index_blocks(ix, tenant, &bi);
    int rc = 0;
    bool pending = false; /* a marked block kept until its replacement is indexed */
    for (size_t j = 0; j < bi.n_marks && rc == 0; j++) {
        char id[ULID_STRING_LEN + 1];
        ulid_format(&bi.marks[j].id, id);
        pthread_mutex_lock(&ix->mu);
        bool known = find_locked(ix, tenant, id) != NULL;
        pthread_mutex_unlock(&ix->mu);
        bool marked = false;
        char replacement[ULID_STRING_LEN + 1];
        if (!known)
            continue;
        if ((rc = read_deletion_mark(ix, tenant, id, &marked, replacement, err)) != 0 || !marked)
            continue;
        load_replacement(ix, tenant, replacement, 0);
        pthread_mutex_lock(&ix->mu);
        indexed_block *b = find_locked(ix, tenant, id);
        if (b != NULL && (replacement[0] == '\0' || b->hidden)) {
            retire_locked(ix, tenant, id);
            remove_entry_locked(ix, b);
        } else if (b != NULL) {
            pending = true;
        }
        pthread_mutex_unlock(&ix->mu);
    }
    bucket_index_free(&bi);
    /* Unchanged, the index is skipped at later rechecks, unless a mark is still to be applied
     * (its block waits for its replacement, which a later listing indexes). */
    if (rc == 0 && !pending)
        remember_index(ix, tenant, &attrs);
    return rc;
}

/* The name a recent listing starts after: the smallest ULID of RECENT_LISTING_LOOKBACK_MS ago
 * (its time, then zeros: every ULID made since sorts after it). */
static void recent_listing_start(char out[ULID_STRING_LEN + 1]) {
    int64_t ms = strata_now_ns() / STRATA_NS_PER_MS - RECENT_LISTING_LOOKBACK_MS;
    ulid u = {{0}};
    for (int i = 5; i >= 0 && ms > 0; i--, ms >>= 8)
        u.bytes[i] = (uint8_t)(ms & 0xff);
    ulid_format(&u, out);
}

/* Lists tenant and loads the blocks it does not know. A full listing also drops the known blocks
 * that are gone; a recent one lists only the names after recent_listing_start, which on S3 is
 * one request however many blocks the tenant has (a FILESYSTEM directory is read whole; AZURE
 * lists whole too, see bucket_iterate_after). */
static int sync_tenant(block_index *ix, const char *tenant, bool full, bool recheck_marks,
                       strata_error *err) {
    name_list ids = {0};
    int rc = -1;
    char after[ULID_STRING_LEN + 1] = "";
    if (!full)
        recent_listing_start(after);
    if (bucket_iterate_after(ix->store, tenant, after, false, collect_dirs, &ids, err) != 0)
        goto out;
    for (size_t i = 0; i < ids.count; i++)
        if (is_ulid(ids.items[i]) && block_index_announce(ix, tenant, ids.items[i], err) != 0)
            goto out;
    if (full)
        drop_missing(ix, tenant, &ids);
    if (recheck_marks && apply_bucket_index(ix, tenant, err) != 0)
        goto out;
    rc = 0;
out:
    name_list_free(&ids);
    return rc;
}

/* Lists the tenants (the bucket's top directories) every MARK_RECHECK_SYNCS syncs, on every sync
 * while it knows none, and on the sync after a query asked for a tenant the index has no block of:
 * a new tenant's first blocks are then found within a sync of its first query (or at once through
 * an announcement), while an idle querier pays one listing of the tenants per ten syncs. */
static int sync_tenant_names(block_index *ix, bool relist, strata_error *err) {
    if (!relist && ix->has_tenants && ix->tenants.count > 0)
        return 0; /* with none yet (a new bucket), the tenants are all there is to list */
    name_list tenants = {0};
    if (bucket_iterate(ix->store, "", false, collect_dirs, &tenants, err) != 0) {
        name_list_free(&tenants);
        return -1;
    }
    name_list_free(&ix->tenants);
    ix->tenants = tenants;
    ix->has_tenants = true;
    return 0;
}

/* One sync: the tenants when due (see sync_tenant_names), then each tenant's listing (full or
 * recent), and with recheck the marks (apply_bucket_index). */
static int sync_round(block_index *ix, bool full, bool recheck, strata_error *err) {
    pthread_mutex_lock(&ix->mu);
    bool relist = recheck || ix->relist_tenants;
    ix->relist_tenants = false;
    int64_t started = strata_monotonic_ns();
    ix->sync_starts++;
    if (full)
        ix->last_full_ns = started;
    if (recheck)
        ix->last_recheck_ns = started;
    pthread_mutex_unlock(&ix->mu);
    pthread_mutex_lock(&ix->sync_mu); /* the tenant list: one sync at a time */
    int rc = sync_tenant_names(ix, relist, err);
    for (size_t i = 0; rc == 0 && i < ix->tenants.count; i++)
        rc = sync_tenant(ix, ix->tenants.items[i], full, recheck, err);
    pthread_mutex_unlock(&ix->sync_mu);
    pthread_mutex_lock(&ix->mu);
    ix->stats.syncs++;
    if (full)
        ix->stats.full_listings++;
    if (rc != 0)
        ix->stats.sync_failures++;
    else
        ix->synced = true;
    ix->last_sync_ns = strata_monotonic_ns();
    pthread_cond_broadcast(&ix->synced_cond);
    pthread_mutex_unlock(&ix->mu);
    return rc;
}

int block_index_sync(block_index *ix, strata_error *err) {
    pthread_mutex_lock(&ix->mu);
    bool recheck = ix->stats.syncs % MARK_RECHECK_SYNCS == 0;
    pthread_mutex_unlock(&ix->mu);
    return sync_round(ix, true, recheck, err);
}

int block_index_sync_recent(block_index *ix, strata_error *err) {
    pthread_mutex_lock(&ix->mu);
    bool recheck = ix->stats.syncs % MARK_RECHECK_SYNCS == 0;
    pthread_mutex_unlock(&ix->mu);
    return sync_round(ix, false, recheck, err);
}

/* An entry for a block known from bucket-index.json (no meta.json fetch); NULL when the meta
 * lacks the data object's size, so the listing loads the block as usual. */
static indexed_block *entry_from_meta(const char *tenant, const block_meta *meta) {
    uint64_t size = 0;
    for (size_t i = 0; i < meta->n_files; i++)
        if (strcmp(meta->files[i].rel_path, BLOCK_DATA_FILE) == 0)
            size = meta->files[i].size_bytes;
    if (size == 0)
        return NULL;
    indexed_block *b = calloc(1, sizeof *b);
    strata_error err;
    if (b == NULL)
        return NULL;
    if (strata_mutex_init(&b->mu, &err) != 0) {
        free(b);
        return NULL;
    }
    block_meta_init(&b->meta);
    ulid_format(&meta->id, b->ulid_text);
    b->data_size = size;
    if ((b->tenant = strdup(tenant)) == NULL || block_meta_copy(&b->meta, meta, &err) != 0 ||
        init_lineage(b, &err) != 0) {
        entry_free(b);
        return NULL;
    }
    return b;
}

/* Adds the unmarked blocks of tenant's bucket-index.json; a missing or bad index adds nothing. */
static void load_tenant_index(block_index *ix, const char *tenant) {
    char key[BUCKET_KEY_MAX];
    snprintf(key, sizeof key, "%s/%s", tenant, BUCKET_INDEX_FILE);
    strata_buffer json = STRATA_BUFFER_INIT;
    strata_error err;
    bucket_index bi;
    bucket_index_init(&bi);
    if (bucket_get(ix->store, key, &json, &err) != 0 ||
        bucket_index_decode((const char *)json.data, json.len, &bi, &err) != 0) {
        if (err.code != STRATA_NOT_FOUND) {
            char quoted[600];
            strata_log_warn("querier", "ignoring bucket index", "key=%s error=%s", key,
                            strata_log_quote(err.message, quoted, sizeof quoted));
        }
        strata_buffer_free(&json);
        return;
    }
    strata_buffer_free(&json);
    size_t added = add_index_blocks(ix, tenant, &bi);
    strata_log_info("querier", "loaded bucket index", "tenant=%s blocks=%zu updated_at=%lld",
                    tenant, added, (long long)bi.updated_at);
    bucket_index_free(&bi);
}

int block_index_load_bucket_indexes(block_index *ix, strata_error *err) {
    name_list tenants = {0};
    if (bucket_iterate(ix->store, "", false, collect_dirs, &tenants, err) != 0) {
        name_list_free(&tenants);
        return -1;
    }
    for (size_t i = 0; i < tenants.count; i++)
        load_tenant_index(ix, tenants.items[i]);
    name_list_free(&tenants);
    return 0;
}

static int64_t idle_sync_interval(const block_index_options *o) {
    return o->idle_sync_interval_ns > 0 ? o->idle_sync_interval_ns
                                        : MARK_RECHECK_SYNCS * o->sync_interval_ns;
}

static bool busy_locked(const block_index *ix, int64_t now) {
    return ix->last_query_ns != 0 && now - ix->last_query_ns < BUSY_WINDOW_NS;
}

/* The sync thread's schedule. While queries come (one within BUSY_WINDOW_NS), the tenants are
 * listed every sync_interval; idle, every idle_sync_interval, and a query arriving then asks for a
 * sync at once and waits for it (block_index_acquire), so an idle querier costs a few requests a
 * minute and still answers with what a busy one would know. A listing is full every
 * full_sync_interval (finding blocks older than a recent listing looks back and dropping deleted
 * ones), recent otherwise; marks are rechecked every tenth sync and at least every ten
 * sync_intervals. The listing a query asks for after idleness is a full one: whatever was
 * uploaded meanwhile, even under an old ULID (a block copied in from elsewhere), is in its answer.
 */
static void *sync_thread_main(void *arg) {
    block_index *ix = arg;
    pthread_mutex_lock(&ix->mu);
    while (!ix->stopping) {
        for (;;) {
            int64_t now = strata_monotonic_ns();
            int64_t interval =
                busy_locked(ix, now) ? ix->opts.sync_interval_ns : idle_sync_interval(&ix->opts);
            int64_t due = ix->last_sync_ns + interval;
            if (ix->stopping || ix->sync_requested || now >= due)
                break;
            struct timespec ts = {(time_t)(due / STRATA_NS_PER_SEC),
                                  (long)(due % STRATA_NS_PER_SEC)};
            pthread_cond_timedwait(&ix->wake, &ix->mu, &ts);
        }
        if (ix->stopping)
            break;
        bool woken = ix->sync_requested; /* by a query after idleness: a full listing */
        ix->sync_requested = false;
        int64_t now = strata_monotonic_ns();
        bool full = woken || now - ix->last_full_ns >= ix->opts.full_sync_interval_ns;
        bool recheck = ix->stats.syncs % MARK_RECHECK_SYNCS == 0 ||
                       now - ix->last_recheck_ns >= MARK_RECHECK_SYNCS * ix->opts.sync_interval_ns;
        pthread_mutex_unlock(&ix->mu);
        strata_error err;
        strata_error_clear(&err);
        if (sync_round(ix, full, recheck, &err) != 0) {
            char quoted[600];
            strata_log_warn("querier", "bucket sync failed", "error=%s",
                            strata_log_quote(err.message, quoted, sizeof quoted));
        }
        pthread_mutex_lock(&ix->mu);
    }
    pthread_mutex_unlock(&ix->mu);
    return NULL;
}

/* A query at an idle querier (none within BUSY_WINDOW_NS) asks the sync thread for a sync and
 * waits for it, up to a bound: what it answers then includes every block committed before it
 * arrived (at a busy querier, every block committed a sync_interval before). One listing per
 * return from idleness, not per query. Called with ix->mu held. */
static void note_query_locked(block_index *ix) {
    int64_t now = strata_monotonic_ns();
    bool idle = !busy_locked(ix, now);
    ix->last_query_ns = now;
    if (!ix->started || !idle)
        return;
    uint64_t target = ix->sync_starts + 1;
    ix->sync_requested = true;
    pthread_cond_broadcast(&ix->wake);
    int64_t wait = ix->opts.sync_interval_ns > STRATA_NS_PER_SEC ? ix->opts.sync_interval_ns
                                                                 : STRATA_NS_PER_SEC;
    int64_t deadline = now + (wait < WAKE_WAIT_MAX_NS ? wait : WAKE_WAIT_MAX_NS);
    struct timespec ts = {(time_t)(deadline / STRATA_NS_PER_SEC),
                          (long)(deadline % STRATA_NS_PER_SEC)};
    while (!ix->stopping && ix->stats.syncs < target &&
           pthread_cond_timedwait(&ix->synced_cond, &ix->mu, &ts) != ETIMEDOUT) {
    }
}

int block_index_start(block_index *ix, strata_error *err) {
    strata_error sync_err;
    if (block_index_load_bucket_indexes(ix, &sync_err) != 0) {
        char quoted[600];
        strata_log_warn("querier", "cannot read bucket indexes", "error=%s",
                        strata_log_quote(sync_err.message, quoted, sizeof quoted));
    }
    if (block_index_sync(ix, &sync_err) != 0) {
        char quoted[600];
        strata_log_warn("querier", "first bucket sync failed; retrying in the background",
                        "error=%s", strata_log_quote(sync_err.message, quoted, sizeof quoted));
    }
    if (pthread_create(&ix->thread, NULL, sync_thread_main, ix) != 0)
        return strata_error_set(err, STRATA_INTERNAL, "cannot start the bucket sync thread");
    ix->started = true;
    return 0;
}

void block_index_free(block_index *ix) {
    if (ix == NULL)
        return;
    pthread_mutex_lock(&ix->mu);
    ix->stopping = true;
    pthread_cond_broadcast(&ix->wake);
    pthread_mutex_unlock(&ix->mu);
    if (ix->started)
        pthread_join(ix->thread, NULL);
    for (size_t i = 0; i < ix->n_blocks; i++) { /* no lineage upkeep: it all goes */
        ix->blocks[i]->removed = true;
        unref_locked(ix, ix->blocks[i]);
    }
    free(ix->blocks);
    strata_u64_map_free(&ix->lineage);
    free(ix->nodes);
    for (size_t i = 0; i < ix->n_retired; i++)
        free(ix->retired[i]);
    free(ix->retired);
    strata_u64_map_free(&ix->retired_map);
    name_list_free(&ix->tenants);
    for (size_t i = 0; i < ix->n_seen; i++)
        free(ix->seen[i].tenant);
    free(ix->seen);
    pthread_mutex_destroy(&ix->mu);
    pthread_mutex_destroy(&ix->sync_mu);
    pthread_cond_destroy(&ix->wake);
    pthread_cond_destroy(&ix->synced_cond);
    free(ix);
}

/* ---- the reader cache ------------------------------------------------------------------- */

typedef enum eviction_reason {
    EVICT_NONE,
    EVICT_FOR_COUNT,
    EVICT_FOR_BYTES,
} eviction_reason;

/* Sets b's accounted bytes to what its reader holds now. The caller holds ix->mu and b->mu (or
 * otherwise knows no query is using the reader). */
static void account_reader_locked(block_index *ix, indexed_block *b) {
    size_t bytes = b->reader != NULL ? block_reader_memory_bytes(b->reader) : 0;
    ix->open_reader_bytes = ix->open_reader_bytes - b->reader_bytes + bytes;
    b->reader_bytes = bytes;
}

/* Closes b's reader; the caller holds ix->mu and b->mu. */
static void close_reader_locked(block_index *ix, indexed_block *b) {
    block_reader_close(b->reader);
    b->reader = NULL;
    free(b->fetch_ctx);
    b->fetch_ctx = NULL;
    ix->open_readers--;
    ix->open_reader_bytes -= b->reader_bytes;
    b->reader_bytes = 0;
}

/* Which bound the open readers exceed; opening: one more reader is about to open, so the count
 * bound needs room for it. */
static eviction_reason over_bound_locked(const block_index *ix, bool opening) {
    if (ix->opts.max_open_readers > 0 &&
        ix->open_readers + (opening ? 1 : 0) > ix->opts.max_open_readers)
        return EVICT_FOR_COUNT;
    if (ix->opts.max_open_reader_bytes > 0 &&
        ix->open_reader_bytes > ix->opts.max_open_reader_bytes)
        return EVICT_FOR_BYTES;
    return EVICT_NONE;
}

/* The least recently acquired entry with a reader that no query holds, among those acquired at
 * or after min_last_used; NULL if there is none. */
static indexed_block *idle_lru_locked(block_index *ix, uint64_t min_last_used) {
    indexed_block *victim = NULL;
    for (size_t i = 0; i < ix->n_blocks; i++) {
        indexed_block *b = ix->blocks[i];
        if (b->refs > 1 || b->reader == NULL || b->last_used < min_last_used)
            continue;
        if (victim == NULL || b->last_used < victim->last_used)
            victim = b;
    }
    return victim;
}

/* Over the byte bound, idle readers first give up their page caches (sample and profile pages,
 * decoded again by the next query that reads them anyway), least recently used first, before
 * any reader is closed: a reader's symbol tables and stack origins cost far more to decode again,
 * and closing readers in LRU order thrashes when a query spans more blocks than the bound holds
 * (every query would reopen every block). Called with ix->mu held. */
static void shed_page_caches_locked(block_index *ix) {
    for (;;) {
        if (ix->opts.max_open_reader_bytes == 0 ||
            ix->open_reader_bytes <= ix->opts.max_open_reader_bytes)
            return;
        indexed_block *victim = NULL;
        for (size_t i = 0; i < ix->n_blocks; i++) {
            indexed_block *b = ix->blocks[i];
            if (b->refs > 1 || b->reader == NULL || block_reader_page_cache_bytes(b->reader) == 0)
                continue;
            if (victim == NULL || b->last_used < victim->last_used)
                victim = b;
        }
        if (victim == NULL || pthread_mutex_trylock(&victim->mu) != 0)
            return;
        block_reader_drop_page_cache(victim->reader);
        account_reader_locked(ix, victim);
        pthread_mutex_unlock(&victim->mu);
        ix->stats.page_cache_sheds++;
    }
}

/* Closes least recently used idle readers while the cache exceeds a bound (see over_bound_locked)
 * and idle readers remain; called with ix->mu held. Only entries with the index's reference alone
 * are closed, so no query loses a reader it holds; one whose mutex is busy anyway is skipped. */
static void evict_readers_locked(block_index *ix, bool opening) {
    uint64_t min_last_used = 0;
    eviction_reason reason;
    shed_page_caches_locked(ix);
    while ((reason = over_bound_locked(ix, opening)) != EVICT_NONE) {
        indexed_block *victim = idle_lru_locked(ix, min_last_used);
        if (victim == NULL)
            return;
        if (pthread_mutex_trylock(&victim->mu) != 0) {
            min_last_used = victim->last_used + 1;
            continue;
        }
        close_reader_locked(ix, victim);
        pthread_mutex_unlock(&victim->mu);
        if (reason == EVICT_FOR_COUNT)
            ix->stats.reader_evictions_count++;
        else
            ix->stats.reader_evictions_bytes++;
    }
}

/* Accounts b's reader as a query gives b back, unless another query is using it (that one
 * accounts it when it gives b back). Called with ix->mu held. */
static void account_released_locked(block_index *ix, indexed_block *b) {
    if (pthread_mutex_trylock(&b->mu) != 0)
        return;
    account_reader_locked(ix, b);
    pthread_mutex_unlock(&b->mu);
}

/* ---- queries ------------------------------------------------------------------------------ */

static int compare_blocks_by_time(const void *a, const void *b) {
    const indexed_block *x = *(indexed_block *const *)a, *y = *(indexed_block *const *)b;
    if (x->meta.min_time_ms != y->meta.min_time_ms)
        return x->meta.min_time_ms < y->meta.min_time_ms ? -1 : 1;
    return strcmp(x->ulid_text, y->ulid_text);
}

int block_index_acquire(block_index *ix, const char *tenant, int64_t start_ns, int64_t end_ns,
                        indexed_block ***out, size_t *n, strata_error *err) {
    *out = NULL;
    *n = 0;
    int64_t start_ms = start_ns / STRATA_NS_PER_MS, end_ms = end_ns / STRATA_NS_PER_MS;
    pthread_mutex_lock(&ix->mu);
    note_query_locked(ix); /* may wait for a sync: before the blocks are counted */
    indexed_block **list = malloc((ix->n_blocks + 1) * sizeof *list);
    if (list == NULL) {
        pthread_mutex_unlock(&ix->mu);
        return strata_error_oom(err);
    }
    size_t count = 0;
    bool tenant_known = false;
    for (size_t i = 0; i < ix->n_blocks; i++) {
        indexed_block *b = ix->blocks[i];
        if (strcmp(b->tenant, tenant) != 0)
            continue;
        tenant_known = true;
        /* maxTime is exclusive; a block covers [minTime, maxTime). A block whose data another
         * indexed block holds (lineage, above) is skipped, so no profile is counted twice. */
        if (b->hidden || b->meta.max_time_ms <= start_ms || b->meta.min_time_ms > end_ms)
            continue;
        b->refs++;
        b->last_used = ++ix->clock;
        list[count++] = b;
    }
    if (!tenant_known) /* a new tenant: the next sync lists the tenants (see block_index_sync) */
        ix->relist_tenants = true;
    pthread_mutex_unlock(&ix->mu);
    qsort(list, count, sizeof *list, compare_blocks_by_time);
    *out = list;
    *n = count;
    return 0;
}

void block_index_release_all(block_index *ix, indexed_block **blocks, size_t n) {
    pthread_mutex_lock(&ix->mu);
    for (size_t i = 0; i < n; i++) {
        account_released_locked(ix, blocks[i]);
        unref_locked(ix, blocks[i]);
    }
    evict_readers_locked(ix, false);
    pthread_mutex_unlock(&ix->mu);
    free(blocks);
}

typedef struct block_fetch_ctx {
    bucket *store;
    char key[BUCKET_KEY_MAX];
} block_fetch_ctx;

static int fetch_from_bucket(void *ctx, uint64_t offset, uint64_t length, strata_buffer *out,
                             strata_error *err) {
    const block_fetch_ctx *f = ctx;
    strata_buffer_reset(out);
    if (bucket_get_range(f->store, f->key, offset, length, out, err) != 0)
        return -1;
    if (out->len != length)
        return strata_error_set(err, STRATA_DATA_LOSS, "%s: short read (%zu of %llu bytes)", f->key,
                                out->len, (unsigned long long)length);
    return 0;
}

int block_index_open_reader(block_index *ix, indexed_block *b, strata_error *err) {
    if (b->reader != NULL)
        return 0;
    pthread_mutex_lock(&ix->mu);
    evict_readers_locked(ix, true);
    pthread_mutex_unlock(&ix->mu);
    /* The reader keeps the ctx pointer for lazy fetches, so it must live with the entry. */
    block_fetch_ctx *ctx = malloc(sizeof *ctx);
    if (ctx == NULL)
        return strata_error_oom(err);
    ctx->store = ix->store;
    snprintf(ctx->key, sizeof ctx->key, "%s/%s/%s", b->tenant, b->ulid_text, BLOCK_DATA_FILE);
    block_reader_options opts;
    block_reader_options_default(&opts);
    opts.cache_bytes = ix->opts.reader_cache_bytes;
    opts.readahead = ix->opts.readahead_bytes;
    if (ix->opts.readahead_bytes > opts.tail_guess)
        opts.tail_guess = ix->opts.readahead_bytes;
    /* A block up to WHOLE_READ_WINDOWS read-ahead windows (a level-1 block, usually) comes in the
     * one read at open: a GET of 4 MiB costs about what one of 1 MiB does, where reading it a
     * window at a time took 11 GETs of a 3.9 MiB block (bench/README.md, bucket_bench). */
    if (ix->opts.readahead_bytes > 0 && b->data_size > opts.tail_guess &&
        b->data_size <= WHOLE_READ_WINDOWS * (uint64_t)ix->opts.readahead_bytes)
        opts.tail_guess = (size_t)b->data_size;
    if (block_reader_open(fetch_from_bucket, ctx, b->data_size, &opts, &b->reader, err) != 0) {
        free(ctx);
        return strata_error_wrap(err, "block %s/%s", b->tenant, b->ulid_text);
    }
    b->fetch_ctx = ctx;
    pthread_mutex_lock(&ix->mu);
    ix->open_readers++;
    account_reader_locked(ix, b);
    evict_readers_locked(ix, false);
    pthread_mutex_unlock(&ix->mu);
    return 0;
}

void block_index_reader_used(block_index *ix, indexed_block *b) {
    if (b->reader == NULL)
        return;
    pthread_mutex_lock(&ix->mu);
    account_reader_locked(ix, b);
    evict_readers_locked(ix, false);
    pthread_mutex_unlock(&ix->mu);
}

bool block_index_forget_if_gone(block_index *ix, indexed_block *b) {
    char key[BUCKET_KEY_MAX];
    snprintf(key, sizeof key, "%s/%s/%s", b->tenant, b->ulid_text, BLOCK_META_FILE);
    bool exists = true;
    strata_error err;
    if (bucket_exists(ix->store, key, &exists, &err) != 0 || exists)
        return false;
    pthread_mutex_lock(&ix->mu);
    if (!b->removed)
        remove_entry_locked(ix, b);
    pthread_mutex_unlock(&ix->mu);
    /* The block that replaced it may be newer than the last listing: list the tenant now, so the
     * query's next attempt sees it. A failure here only leaves that to the sync thread. */
    if (sync_tenant(ix, b->tenant, true, false, &err) != 0) {
        char quoted[600];
        strata_log_warn("querier", "tenant listing after a vanished block failed",
                        "tenant=%s error=%s", b->tenant,
                        strata_log_quote(err.message, quoted, sizeof quoted));
    }
    return true;
}

int block_index_tenants(block_index *ix, char ***out, size_t *n, strata_error *err) {
    name_list l = {0};
    pthread_mutex_lock(&ix->mu);
    int rc = 0;
    for (size_t i = 0; i < ix->n_blocks && rc == 0; i++) {
        bool seen = false;
        for (size_t j = 0; j < l.count && !seen; j++)
            seen = strcmp(l.items[j], ix->blocks[i]->tenant) == 0;
        if (seen)
            continue;
        char key[BUCKET_KEY_MAX];
        snprintf(key, sizeof key, "%s/", ix->blocks[i]->tenant);
        rc = collect_dirs(key, &l, err);
    }
    pthread_mutex_unlock(&ix->mu);
    if (rc != 0) {
        name_list_free(&l);
        return -1;
    }
    *out = l.items;
    *n = l.count;
    return 0;
}

void block_index_get_stats(block_index *ix, block_index_stats *out) {
    pthread_mutex_lock(&ix->mu);
    *out = ix->stats;
    out->blocks = ix->n_blocks;
    out->hidden = 0;
    for (size_t i = 0; i < ix->n_blocks; i++)
        out->hidden += ix->blocks[i]->hidden ? 1 : 0;
    out->readers_open = ix->open_readers;
    out->reader_bytes = ix->open_reader_bytes;
    pthread_mutex_unlock(&ix->mu);
}

bool block_index_synced(block_index *ix) {
    pthread_mutex_lock(&ix->mu);
    bool synced = ix->synced;
    pthread_mutex_unlock(&ix->mu);
    return synced;
}
