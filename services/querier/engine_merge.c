/*
 * engine_merge.c - merges and singles into a call tree (engine.h): every selected profile's
 * samples summed per stack, and each distinct stack translated once into the tree.
 *
 * Each worker of the pass sums a block's rows per stack id in an array (a series whose profiles
 * the range covers whole reads its rollup instead: one row per distinct stack, already summed),
 * then translates only the stacks it summed into its partial tree, level by level so probes of
 * the tree's child maps can be prefetched. Blocks cut from one writer dictionary (fresh blocks of
 * an ingester) share one memo of translated stacks per query, in a tree shared under a lock, so a
 * stack is translated once however many blocks hold it. Rows needing more than their stack (pprof
 * sample-label filters, label or time frames) go through engine_samples.c's per-sample view. The
 * partial trees and the shared one are merged into the caller's tree only when every block
 * succeeded, so a retried attempt starts from the caller's tree as it was.
 */
#include "engine_internal.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block/block_format.h"
#include "block/block_rollup.h"
#include "common/array.h"
#include "common/clock.h"
#include "common/hash.h"

/* ---- merge and single --------------------------------------------------------------------- */

/* Translations of one writer dictionary's stacks (docs/block-format.md 6.12): the call tree node
 * of each dictionary stack translated so far, plus one (0 where not yet). The blocks the ingester
 * cuts from one dictionary name each stack's origin in it, so a merge over minutes of fresh
 * blocks translates a stack once instead of once per block, as over one compacted block. */
/* Per-block translation state: block location -> calltree frames (root-most first). */
/* Functions as the tree being built knows them: the string ids of name, system name and file
 * (id + 1; 0 = not yet) and the start line, per slot (a block's function id, or a dictionary's
 * function origin). A function recurs in many locations (27 K functions in 195 K locations in a
 * compacted block of agent data), and interning its strings anew for each one (length, hash,
 * compare, five strings per frame) cost a fifth of a merge. */
typedef struct function_memo {
    uint32_t *ids; /* 3 per slot */
    int64_t *start_line;
    size_t n; /* slots */
} function_memo;

static void function_memo_free(function_memo *fm) {
    free(fm->ids);
    free(fm->start_line);
    memset(fm, 0, sizeof *fm);
}

/* A block's function and mapping strings in the tree, for one block's translation. A block cut
 * from a writer dictionary with function origins (docs/block-format.md 6.12) uses its
 * dictionary's function memo, kept for the whole query: a function one block showed is not
 * decoded again from the next (its group of the functions table, and the string pages its names
 * are on, stay unread), so a fresh block decodes only the functions new to it. Other blocks use
 * their own, grown on first use. */
typedef struct symbol_ids {
    function_memo own;             /* slot = the block's function id */
    function_memo *dictionary;     /* NULL, or slot = function_slot[function id] */
    const uint32_t *function_slot; /* the block's function origins */
    size_t n_function_slots;
    uint32_t *mapping; /* 2 per mapping id: file, build id */
    size_t n_mappings;
} symbol_ids;

static void symbol_ids_free(symbol_ids *ids) {
    function_memo_free(&ids->own);
    free(ids->mapping);
    memset(ids, 0, sizeof *ids);
}

typedef struct frame_memo {
    symbol_ids *ids;      /* the block's strings in the tree; NULL: interned frame by frame */
    const uint32_t *slot; /* location id -> index into offset and count; NULL: the id itself */
    uint32_t *offset;     /* per slot: offset+1 into frames, 0 = not translated yet */
    uint16_t *count;
    uint32_t *frames;
    size_t n_frames, cap_frames;
    uint32_t *path; /* scratch: stack ids waiting for translation */
    size_t cap_path;
} frame_memo;

static void frame_memo_free(frame_memo *m);

typedef struct dictionary_memo {
    uint8_t id[16];
    uint32_t *node;          /* index = dictionary stack id: node + 1, 0 = not yet */
    uint64_t *translated;    /* one bit per entry of node: node != 0 (stack_memo) */
    size_t n;                /* entries in node */
    frame_memo *frames;      /* indexed by dictionary location id (slot = the block's origins) */
    size_t n_locations;      /* entries in frames' offset and count */
    function_memo functions; /* indexed by dictionary function id (blocks with function origins) */
} dictionary_memo;

typedef struct memo_set {
    dictionary_memo *memos;
    size_t n, cap;
    uint64_t bytes;
} memo_set;

static void memo_set_free(memo_set *set) {
    for (size_t i = 0; i < set->n; i++) {
        free(set->memos[i].node);
        free(set->memos[i].translated);
        if (set->memos[i].frames != NULL)
            frame_memo_free(set->memos[i].frames);
        free(set->memos[i].frames);
        function_memo_free(&set->memos[i].functions);
    }
    free(set->memos);
    memset(set, 0, sizeof *set);
}

/* Sums per stack of one writer dictionary, shared by a query's workers (translate_sums): each
 * worker adds a block's per-stack sums with relaxed atomic adds, outside the tree's lock, and the
 * query adds them to the shared tree once, at its end (add_dictionary_sums_to_tree). One array
 * for the query, not one per worker: it is as long as the dictionary (21 MiB for 2.7 M stacks),
 * and a worker each would make a fresh query's memory grow with the machine's cores. The array is
 * cut into chunks that never move once made, so a worker can make room for a block of a bigger
 * dictionary (under the tree's lock) while others add to the chunks they made sure of. */
#define SUMS_CHUNK_BITS 16
#define SUMS_CHUNK ((size_t)1 << SUMS_CHUNK_BITS)
#define SUMS_MAX_CHUNKS ((((size_t)UINT32_MAX) >> SUMS_CHUNK_BITS) + 1)

typedef struct dictionary_sums {
    uint8_t id[16];
    _Atomic uint64_t **chunks; /* SUMS_MAX_CHUNKS entries; index = stack id >> SUMS_CHUNK_BITS */
    size_t n_chunks;           /* chunks made: [0, n_chunks) are all non-NULL */
} dictionary_sums;

/* The query's tree for blocks with stack origins (translate_sums), shared by the workers. */
typedef struct shared_tree {
    pthread_mutex_t mu;
    calltree *tree;
    memo_set memos;
    dictionary_sums *sums; /* per dictionary; made and grown under mu (it moves: keep chunks) */
    size_t n_sums, cap_sums;
    uint64_t sums_bytes;
    uint64_t bytes; /* tree, memos and sums, as of the last block */
} shared_tree;

/* The query's sums for the block's dictionary, with chunks for every stack it may name; *out NULL
 * (no error) past budget bytes: the block's sums then go into the shared tree under its lock.
 * Called with shared->mu held. */
static int dictionary_sums_for(shared_tree *shared, uint64_t budget, const block_stack_origins *o,
                               dictionary_sums **out, strata_error *err) {
    *out = NULL;
    dictionary_sums *d = NULL;
    for (size_t i = 0; i < shared->n_sums && d == NULL; i++)
        if (memcmp(shared->sums[i].id, o->dictionary, sizeof o->dictionary) == 0)
            d = &shared->sums[i];
    size_t need = ((size_t)o->dictionary_stacks >> SUMS_CHUNK_BITS) + 1;
    size_t have = d != NULL ? d->n_chunks : 0;
    uint64_t more = need > have ? (uint64_t)(need - have) * SUMS_CHUNK * sizeof(uint64_t) : 0;
    if (d == NULL)
        more += SUMS_MAX_CHUNKS * sizeof *d->chunks;
    if (shared->sums_bytes + more > budget)
        return 0;
    if (d == NULL) {
        if (STRATA_ARRAY_RESERVE_OR_OOM(shared->sums, shared->cap_sums, shared->n_sums + 1, err) !=
            0)
            return -1;
        d = &shared->sums[shared->n_sums];
        memset(d, 0, sizeof *d);
        memcpy(d->id, o->dictionary, sizeof d->id);
        if ((d->chunks = calloc(SUMS_MAX_CHUNKS, sizeof *d->chunks)) == NULL)
            return strata_error_oom(err);
        shared->n_sums++;
        shared->sums_bytes += SUMS_MAX_CHUNKS * sizeof *d->chunks;
    }
    for (; d->n_chunks < need; d->n_chunks++) {
        if ((d->chunks[d->n_chunks] = calloc(SUMS_CHUNK, sizeof **d->chunks)) == NULL)
            return strata_error_oom(err);
        shared->sums_bytes += SUMS_CHUNK * sizeof **d->chunks;
    }
    *out = d;
    return 0;
}

static void shared_sums_free(shared_tree *shared) {
    for (size_t i = 0; i < shared->n_sums; i++) {
        for (size_t c = 0; c < shared->sums[i].n_chunks; c++)
            free((void *)shared->sums[i].chunks[c]);
        free(shared->sums[i].chunks);
    }
    free(shared->sums);
    shared->sums = NULL;
    shared->n_sums = 0;
    shared->sums_bytes = 0;
}

/* Where a merge remembers the call-tree node of each stack it translated: node[slot] = node + 1
 * (0 = not yet), slot = origin[stack] for a block cut from a writer dictionary (one memo serves
 * every such block of a query), else the stack id. translated, when given, holds the same answer
 * one bit per slot: a dictionary's memo of millions of stacks is checked for every stack of every
 * fresh block, and the bits fit the cache where the nodes do not. */
typedef struct stack_memo {
    uint32_t *node;
    const block_stack_origins *origins; /* NULL: slot = stack id */
    uint64_t *translated;
} stack_memo;

static inline uint32_t memo_slot(const stack_memo *sm, uint32_t stack) {
    return sm->origins != NULL ? block_stack_origin(sm->origins, stack) : stack;
}

static inline bool memo_has(const stack_memo *sm, uint32_t slot) {
    if (sm->translated != NULL)
        return (sm->translated[slot >> 6] >> (slot & 63)) & 1;
    return sm->node[slot] != 0;
}

static inline void memo_record(stack_memo *sm, uint32_t slot, uint32_t node) {
    sm->node[slot] = node + 1;
    if (sm->translated != NULL)
        sm->translated[slot >> 6] |= (uint64_t)1 << (slot & 63);
}

/* A block's stacks that a merge must translate, in the order it translates them: level by
 * level (a stack's level is one more than its parent's, or 1 when the parent is already in the
 * tree), so no stack in a level waits on another and the child-map probes of a few stacks ahead
 * can be prefetched (a compacted block of deep stacks adds millions of nodes, each a random probe
 * of a table far bigger than the cache; translated one chain at a time, every probe waited on the
 * one before). Within a level stacks keep ascending ids, so parents (always earlier ids) still come
 * first where levels are clamped. Reused from block to block: level is all zero between plans. */
typedef struct stack_plan_entry {
    uint32_t slot;          /* the stack's memo slot */
    uint32_t parent_slot;   /* its parent's */
    uint32_t location;      /* the block's location id */
    uint32_t location_slot; /* the location's frame memo slot (frame_slot) */
} stack_plan_entry;

#define PLAN_MAX_LEVEL 255

typedef struct stack_plan {
    uint8_t *level; /* per block stack id: 0 = not planned, else its level (clamped) */
    size_t cap_level;
    stack_plan_entry *entries;
    size_t n_entries, cap_entries;
    uint32_t *path; /* scratch: stack ids of one walk, leaf first */
    size_t cap_path;
    size_t per_level[PLAN_MAX_LEVEL + 1];
} stack_plan;

static void stack_plan_free(stack_plan *plan) {
    free(plan->level);
    free(plan->entries);
    free(plan->path);
    memset(plan, 0, sizeof *plan);
}

/* Grows an array of n elements of size elem to exactly need elements, the new ones zeroed; NULL
 * (p untouched) when out of memory or the size overflows. */
static void *grow_zeroed(void *p, size_t n, size_t need, size_t elem) {
    void *grown = strata_array_resize(p, need, elem);
    if (grown != NULL)
        memset((char *)grown + n * elem, 0, (need - n) * elem);
    return grown;
}

typedef struct merge_partial {
    const merge_query *q;
    calltree *tree;
    merge_result result;
    uint64_t passed; /* rows counted */
    bool filtered;   /* some block filtered samples by their labels */
    memo_set memos;  /* for blocks with origins that cannot go to the shared tree */
    /* per stack id sums, reused from block to block (all zero between blocks: add_stack_sums
     * clears what it reads), so a block costs no fresh pages to fault in and zero */
    int64_t *per_stack;
    size_t cap_per_stack;
    uint64_t *touched;  /* row_sums.touched, reused likewise (all clear between blocks) */
    size_t cap_touched; /* in bits */
    stack_plan plan;    /* the stacks to translate, reused likewise */
} merge_partial;

/* The memo for the block's dictionary in set, grown to its stack and location counts; *out NULL
 * (no error) when the set would outgrow budget bytes: the block is then translated on its own, as
 * a block without origins is. */
static int dictionary_memo_for(memo_set *set, uint64_t budget, const block_stack_origins *o,
                               dictionary_memo **out, strata_error *err) {
    *out = NULL;
    dictionary_memo *m = NULL;
    for (size_t i = 0; i < set->n && m == NULL; i++)
        if (memcmp(set->memos[i].id, o->dictionary, sizeof o->dictionary) == 0)
            m = &set->memos[i];
    size_t need = (size_t)o->dictionary_stacks + 1, need_l = (size_t)o->dictionary_locations + 1;
    size_t have = m != NULL ? m->n : 0, have_l = m != NULL ? m->n_locations : 0;
    size_t grow = need > have ? need - have : 0, grow_l = need_l > have_l ? need_l - have_l : 0;
    size_t need_f = o->function_origin != NULL ? (size_t)o->dictionary_functions + 1 : 0;
    size_t have_f = m != NULL ? m->functions.n : 0;
    size_t grow_f = need_f > have_f ? need_f - have_f : 0;
    uint64_t more = (uint64_t)grow * (sizeof(uint32_t) + 1) + (uint64_t)grow_l * 6 +
                    (uint64_t)grow_f * (3 * sizeof(uint32_t) + sizeof(int64_t));
    if (set->bytes + more > budget)
        return 0;
    if (m == NULL) {
        if (STRATA_ARRAY_RESERVE_OR_OOM(set->memos, set->cap, set->n + 1, err) != 0)
            return -1;
        m = &set->memos[set->n++];
        memset(m, 0, sizeof *m);
        memcpy(m->id, o->dictionary, sizeof m->id);
        m->frames = calloc(1, sizeof *m->frames);
        if (m->frames == NULL)
            return strata_error_oom(err);
    }
    if (grow > 0) {
        uint32_t *node =
            m->n == 0 ? calloc(need, sizeof *node) : grow_zeroed(m->node, m->n, need, sizeof *node);
        if (node != NULL)
            m->node = node;
        size_t words = (m->n + 63) / 64, need_words = (need + 63) / 64;
        uint64_t *bits = m->n == 0 ? calloc(need_words, sizeof *bits)
                                   : grow_zeroed(m->translated, words, need_words, sizeof *bits);
        if (bits != NULL)
            m->translated = bits;
        if (node == NULL || bits == NULL)
            return strata_error_oom(err);
        if (m->n == 0) {
            node[0] = CALLTREE_ROOT + 1; /* the empty stack */
            bits[0] = 1;
        }
        m->n = need;
    }
    if (grow_l > 0) {
        uint32_t *offset = grow_zeroed(m->frames->offset, have_l, need_l, sizeof *offset);
        if (offset != NULL)
            m->frames->offset = offset;
        uint16_t *count = grow_zeroed(m->frames->count, have_l, need_l, sizeof *count);
        if (count != NULL)
            m->frames->count = count;
        if (offset == NULL || count == NULL)
            return strata_error_oom(err);
        m->n_locations = need_l;
    }
    if (grow_f > 0) {
        function_memo *fm = &m->functions;
        uint32_t *ids = grow_zeroed(fm->ids, 3 * have_f, 3 * need_f, sizeof *ids);
        if (ids != NULL)
            fm->ids = ids;
        int64_t *start_line = grow_zeroed(fm->start_line, have_f, need_f, sizeof *start_line);
        if (start_line != NULL)
            fm->start_line = start_line;
        if (ids == NULL || start_line == NULL)
            return strata_error_oom(err);
        fm->n = need_f;
    }
    set->bytes += more;
    *out = m;
    return 0;
}

static void frame_memo_free(frame_memo *m) {
    free(m->offset);
    free(m->count);
    free(m->frames);
    free(m->path);
}

static inline uint32_t frame_slot(const frame_memo *m, uint32_t location) {
    return m->slot != NULL ? m->slot[location] : location;
}

static int push_frame(frame_memo *m, uint32_t frame, strata_error *err) {
    if (STRATA_ARRAY_RESERVE_OR_OOM(m->frames, m->cap_frames, m->n_frames + 1, err) != 0)
        return -1;
    m->frames[m->n_frames++] = frame;
    return 0;
}

static calltree_str str_of(const char *s) {
    return calltree_cstr(s != NULL ? s : "");
}

/* The location side of a frame: address and mapping. Mapping flags share their bit values with
 * the calltree's (checked below). */
static calltree_frame_location frame_location(const block_location *loc, const block_mapping *map) {
    calltree_frame_location fl = {.address = loc->address, .folded = loc->is_folded};
    if (map != NULL) {
        fl.memory_start = map->memory_start;
        fl.memory_limit = map->memory_limit;
        fl.file_offset = map->file_offset;
        fl.mapping_flags = map->flags;
    }
    return fl;
}

_Static_assert(BLOCK_MAPPING_HAS_FUNCTIONS == CALLTREE_MAPPING_HAS_FUNCTIONS &&
                   BLOCK_MAPPING_HAS_FILENAMES == CALLTREE_MAPPING_HAS_FILENAMES &&
                   BLOCK_MAPPING_HAS_LINE_NUMBERS == CALLTREE_MAPPING_HAS_LINE_NUMBERS &&
                   BLOCK_MAPPING_HAS_INLINE_FRAMES == CALLTREE_MAPPING_HAS_INLINE_FRAMES,
               "mapping flags differ between the block format and the call tree");

/* An unsymbolized location becomes a frame named by its address, so no sample is lost. */
static int intern_address_frame(calltree *tree, const block_location *loc, const block_mapping *map,
                                uint32_t *frame, strata_error *err) {
    char name[32];
    snprintf(name, sizeof name, "0x%llx", (unsigned long long)loc->address);
    calltree_frame_desc d = {calltree_cstr(name),
                             calltree_cstr(""),
                             calltree_cstr(""),
                             str_of(map ? map->file : NULL),
                             str_of(map ? map->build_id : NULL),
                             0,
                             frame_location(loc, map)};
    d.loc.lineless = true;
    return calltree_intern_frame(tree, &d, frame, err);
}

/* The tree's string ids of n strings, through cache (n per entry, id + 1; 0 = not yet), whose
 * table is allocated on first use with `entries` entries. */
static int cached_string_ids(calltree *tree, uint32_t **cache, size_t *n_cache, size_t entries,
                             size_t index, const char *const *strings, uint32_t *ids, size_t n,
                             strata_error *err) {
    if (*cache == NULL) {
        *cache = calloc(entries * n, sizeof **cache);
        if (*cache == NULL)
            return strata_error_oom(err);
        *n_cache = entries;
    }
    uint32_t *slot = index < *n_cache ? *cache + index * n : NULL;
    for (size_t i = 0; i < n; i++) {
        if (slot != NULL && slot[i] != 0) {
            ids[i] = slot[i] - 1;
            continue;
        }
        if (calltree_intern_string(tree, str_of(strings[i]), &ids[i], err) != 0)
            return -1;
        if (slot != NULL)
            slot[i] = ids[i] + 1;
    }
    return 0;
}

/* The tree's string ids of function id's name, system name and file, and its start line, from
 * the memo ids names (the block's own, or its dictionary's), the function decoded only when the
 * memo lacks it. */
static int function_string_ids(block_reader *r, calltree *tree, symbol_ids *ids, uint32_t id,
                               uint32_t out[3], int64_t *start_line, strata_error *err) {
    function_memo *fm = &ids->own;
    size_t slot = id;
    if (ids->dictionary != NULL && id < ids->n_function_slots) {
        fm = ids->dictionary;
        slot = ids->function_slot[id];
    } else if (fm->ids == NULL) {
        size_t n = (size_t)block_reader_row_count(r, BLOCK_TABLE_FUNCTIONS) + 1;
        fm->ids = calloc(3 * n, sizeof *fm->ids);
        fm->start_line = calloc(n, sizeof *fm->start_line);
        if (fm->ids == NULL || fm->start_line == NULL)
            return strata_error_oom(err);
        fm->n = n;
    }
    bool memo = slot < fm->n;
    if (memo && fm->ids[3 * slot] != 0) {
        for (int i = 0; i < 3; i++)
            out[i] = fm->ids[3 * slot + i] - 1;
        *start_line = fm->start_line[slot];
        return 0;
    }
    block_function fn;
    if (block_reader_function(r, id, &fn, err) != 0)
        return -1;
    const char *strings[3] = {fn.name, fn.system_name, fn.file};
    for (int i = 0; i < 3; i++)
        if (calltree_intern_string(tree, str_of(strings[i]), &out[i], err) != 0)
            return -1;
    *start_line = fn.start_line;
    if (memo) {
        for (int i = 0; i < 3; i++)
            fm->ids[3 * slot + i] = out[i] + 1;
        fm->start_line[slot] = fn.start_line;
    }
    return 0;
}

/* Translates location id into frames (root-most first: the outer function before inlined ones,
 * which are marked as inlined into it). */
static int translate_location(block_reader *r, calltree *tree, frame_memo *m, uint32_t loc_id,
                              strata_error *err) {
    block_location loc;
    block_mapping map;
    const block_mapping *mp = NULL;
    if (block_reader_location(r, loc_id, &loc, err) != 0)
        return -1;
    if (loc.has_mapping) {
        if (block_reader_mapping(r, loc.mapping_id, &map, err) != 0)
            return -1;
        mp = &map;
    }
    size_t start = m->n_frames;
    if (loc.n_lines == 0) {
        uint32_t frame;
        if (intern_address_frame(tree, &loc, mp, &frame, err) != 0 ||
            push_frame(m, frame, err) != 0)
            return -1;
    }
    symbol_ids *ids = m->ids;
    uint32_t mapping_ids[2];
    if (loc.n_lines > 0 && ids != NULL) {
        const char *strings[2] = {mp ? mp->file : NULL, mp ? mp->build_id : NULL};
        size_t n = (size_t)block_reader_row_count(r, BLOCK_TABLE_MAPPINGS) + 1;
        if (cached_string_ids(tree, &ids->mapping, &ids->n_mappings, n, mp ? loc.mapping_id + 1 : 0,
                              strings, mapping_ids, 2, err) != 0)
            return -1;
    }
    for (uint32_t i = loc.n_lines; i-- > 0;) {
        uint32_t frame;
        if (ids != NULL) {
            uint32_t fn_ids[3];
            int64_t start_line = 0;
            if (function_string_ids(r, tree, ids, loc.lines[i].function_id, fn_ids, &start_line,
                                    err) != 0)
                return -1;
            calltree_frame_ids d = {fn_ids[0],
                                    fn_ids[1],
                                    fn_ids[2],
                                    mapping_ids[0],
                                    mapping_ids[1],
                                    start_line,
                                    frame_location(&loc, mp)};
            d.loc.line = loc.lines[i].line;
            d.loc.inlined = i + 1 < loc.n_lines; /* lines[0] is the innermost */
            if (calltree_intern_frame_ids(tree, &d, &frame, err) != 0)
                return -1;
        } else {
            block_function fn;
            if (block_reader_function(r, loc.lines[i].function_id, &fn, err) != 0)
                return -1;
            calltree_frame_desc d = {str_of(fn.name),
                                     str_of(fn.system_name),
                                     str_of(fn.file),
                                     str_of(mp ? mp->file : NULL),
                                     str_of(mp ? mp->build_id : NULL),
                                     fn.start_line,
                                     frame_location(&loc, mp)};
            d.loc.line = loc.lines[i].line;
            d.loc.inlined = i + 1 < loc.n_lines;
            if (calltree_intern_frame(tree, &d, &frame, err) != 0)
                return -1;
        }
        if (push_frame(m, frame, err) != 0)
            return -1;
    }
    m->offset[frame_slot(m, loc_id)] = (uint32_t)start + 1;
    m->count[frame_slot(m, loc_id)] = (uint16_t)(m->n_frames - start);
    return 0;
}

/* Marks `stack` and its ancestors neither in the memo nor in the plan yet, with their levels. */
static int plan_stack(block_reader *r, stack_plan *plan, const stack_memo *sm, uint32_t stack,
                      strata_error *err) {
    size_t n_path = 0;
    uint32_t id = stack;
    while (!memo_has(sm, memo_slot(sm, id)) && plan->level[id] == 0) { /* stack 0 always is */
        if (STRATA_ARRAY_RESERVE_OR_OOM(plan->path, plan->cap_path, n_path + 1, err) != 0)
            return -1;
        plan->path[n_path++] = id;
        uint32_t parent, loc;
        if (block_reader_stack_node(r, id, &parent, &loc, err) != 0)
            return -1;
        id = parent;
    }
    unsigned level = memo_has(sm, memo_slot(sm, id)) ? 0 : plan->level[id];
    while (n_path > 0) {
        if (level < PLAN_MAX_LEVEL)
            level++;
        plan->level[plan->path[--n_path]] = (uint8_t)level;
        plan->per_level[level]++;
        plan->n_entries++;
    }
    return 0;
}

/* Lays the marked stacks out by level (a counting sort over the block's stack ids, which clears
 * the marks). */
static int plan_order(block_reader *r, stack_plan *plan, const stack_memo *sm, const frame_memo *m,
                      size_t n_stacks, strata_error *err) {
    if (plan->n_entries > plan->cap_entries) {
        free(plan->entries);
        plan->entries = malloc(plan->n_entries * sizeof *plan->entries);
        plan->cap_entries = plan->entries != NULL ? plan->n_entries : 0;
        if (plan->entries == NULL)
            return strata_error_oom(err);
    }
    size_t at = 0;
    for (unsigned l = 0; l <= PLAN_MAX_LEVEL; l++) {
        size_t n = plan->per_level[l];
        plan->per_level[l] = at;
        at += n;
    }
    for (size_t id = 1; id < n_stacks; id++) {
        if ((id & 7) == 0 && id + 8 <= n_stacks) { /* skip unmarked stacks eight at a time */
            uint64_t word;
            memcpy(&word, plan->level + id, sizeof word);
            if (word == 0) {
                id += 7;
                continue;
            }
        }
        unsigned level = plan->level[id];
        if (level == 0)
            continue;
        plan->level[id] = 0;
        uint32_t parent, loc;
        if (block_reader_stack_node(r, (uint32_t)id, &parent, &loc, err) != 0)
            return -1;
        plan->entries[plan->per_level[level]++] = (stack_plan_entry){
            .slot = memo_slot(sm, (uint32_t)id),
            .parent_slot = memo_slot(sm, parent),
            .location = loc,
            .location_slot = frame_slot(m, loc),
        };
    }
    memset(plan->per_level, 0, sizeof plan->per_level);
    return 0;
}

/* How far apart translate_plan's prefetch stages are, in stacks. */
#define PLAN_PREFETCH 8

/* Translates the planned stacks into tree, in plan order, recording each stack's node. */
static int translate_plan(block_reader *r, calltree *tree, frame_memo *m, stack_memo *sm,
                          const stack_plan *plan, strata_error *err) {
    const stack_plan_entry *e = plan->entries;
    size_t n = plan->n_entries;
    for (size_t i = 0; i < n; i++) {
        /* Three stages ahead: the location's frame offset; its first frame and the parent's node;
         * then the child map's slot for the two. */
        if (i + 3 * PLAN_PREFETCH < n)
            __builtin_prefetch(&m->offset[e[i + 3 * PLAN_PREFETCH].location_slot]);
        if (i + 2 * PLAN_PREFETCH < n) {
            const stack_plan_entry *ahead = &e[i + 2 * PLAN_PREFETCH];
            uint32_t offset = m->offset[ahead->location_slot];
            __builtin_prefetch(&sm->node[ahead->parent_slot]);
            if (offset != 0)
                __builtin_prefetch(&m->frames[offset - 1]);
        }
        if (i + PLAN_PREFETCH < n) {
            const stack_plan_entry *ahead = &e[i + PLAN_PREFETCH];
            uint32_t parent = sm->node[ahead->parent_slot];
            uint32_t offset = m->offset[ahead->location_slot];
            if (parent != 0 && offset != 0)
                calltree_prefetch_child(tree, parent - 1, m->frames[offset - 1]);
        }
        uint32_t parent = sm->node[e[i].parent_slot];
        if (parent == 0)
            return strata_error_set(err, STRATA_INTERNAL,
                                    "merge: a stack's parent was not translated before it");
        uint32_t node = parent - 1, ls = e[i].location_slot;
        if (m->offset[ls] == 0 && translate_location(r, tree, m, e[i].location, err) != 0)
            return -1;
        const uint32_t *frames = m->frames + m->offset[ls] - 1;
        for (uint16_t f = 0; f < m->count[ls]; f++)
            if (calltree_child(tree, node, frames[f], &node, err) != 0)
                return -1;
        memo_record(sm, e[i].slot, node);
    }
    return 0;
}

/* Where a block's rows are summed: per stack id for rows shown from the root, per (label frame,
 * stack) for rows grouped under a label frame; rows failing a sample-label filter are left out. */
typedef struct row_sums {
    int64_t *per_stack; /* indexed by stack id */
    size_t n_stacks;
    /* One bit per stack whose sum was touched: the stacks are read back in ascending order (the
     * arrays indexed by stack id are then read in order, not at random, which over fresh blocks
     * was a third of a merge) and a query of one series in a block of many reads only its own
     * stacks' words. Cleared as the sums are read. */
    uint64_t *touched;
    sample_view *view;      /* NULL when no sample needs more than its stack */
    strata_u64_map grouped; /* ((label frame + 1) << 32 | stack) -> wrapping sum */
    uint64_t passed;        /* rows counted */
} row_sums;

static inline void add_to_stack(row_sums *sums, uint32_t stack, uint64_t value) {
    sums->touched[stack >> 6] |= (uint64_t)1 << (stack & 63);
    *(uint64_t *)&sums->per_stack[stack] += value;
}

/* Adds a run of (stack, value) rows of one series to the sums in wrapping arithmetic, the values
 * multiplied by mult: the same sums whether rows come from samples or rollups. The rows are read
 * in place from the reader's pages (block_reader_visit_samples): copying them out first was a
 * third of a merge over fresh blocks of real Go profiles. */
static int add_rows(const block_row_run *run, int64_t mult, uint32_t series, uint32_t time_frame,
                    row_sums *sums, strata_error *err) {
    if (sums->view == NULL) {
        for (size_t i = 0; i < run->n; i++) {
            uint64_t stack = run->stacks[i];
            if (stack >= sums->n_stacks)
                return strata_error_set(err, STRATA_DATA_LOSS, "stack id %llu out of range",
                                        (unsigned long long)stack);
            add_to_stack(sums, (uint32_t)stack, run->values[i] * (uint64_t)mult);
        }
        sums->passed += run->n;
        return 0;
    }
    for (size_t i = 0; i < run->n; i++) {
        uint64_t stack = run->stacks[i];
        if (stack >= sums->n_stacks)
            return strata_error_set(err, STRATA_DATA_LOSS, "stack id %llu out of range",
                                    (unsigned long long)stack);
        uint64_t value = run->values[i] * (uint64_t)mult;
        bool pass = false;
        uint32_t frame = VIEW_NO_FRAME;
        uint32_t set = run->label_sets != NULL ? (uint32_t)run->label_sets[i] : 0;
        if (sample_view_get(sums->view, series, set, &pass, &frame, err) != 0)
            return -1;
        if (!pass)
            continue;
        sums->passed++;
        if (time_frame != VIEW_NO_FRAME)
            frame = time_frame; /* grouping by time replaces label frames */
        if (frame == VIEW_NO_FRAME) {
            add_to_stack(sums, (uint32_t)stack, value);
            continue;
        }
        uint64_t *sum =
            strata_u64_map_upsert(&sums->grouped, ((uint64_t)frame + 1) << 32 | stack, 0, NULL);
        if (sum == NULL)
            return strata_error_oom(err);
        *sum += value;
    }
    return 0;
}

/* What a visit of sample or rollup rows adds them with (add_row_run). */
typedef struct row_visit {
    const merge_query *q;
    const block_profile *profiles;
    bool rollup; /* values already scaled */
    row_sums *sums;
    uint64_t rows;
} row_visit;

static int add_row_run(void *arg, size_t profile, const block_row_run *run, strata_error *err) {
    row_visit *v = arg;
    const block_profile *p = &v->profiles[profile];
    int64_t mult = !v->rollup && v->q->samples_count ? p->period : 1;
    v->rows += run->n;
    uint32_t time_frame = VIEW_NO_FRAME;
    sample_view *view = v->sums->view;
    if (view != NULL && view->by_time && sample_view_time_frame(view, p, &time_frame, err) != 0)
        return -1;
    return add_rows(run, mult, p->series_id, time_frame, v->sums, err);
}

/* Sums the samples of profiles into sums. */
static int aggregate_samples(block_reader *r, const merge_query *q, const block_profile *profiles,
                             size_t n, row_sums *sums, merge_result *res, strata_error *err) {
    row_visit v = {.q = q, .profiles = profiles, .sums = sums};
    if (block_reader_visit_samples(r, profiles, n, add_row_run, &v, err) != 0)
        return -1;
    res->samples += v.rows;
    return 0;
}

/* The profiles of one series (profiles[0..n), all of one series, in range) through the series'
 * rollup, when the block has one and they are all of the series' profiles in the block (a series
 * with a single profile has no rollup: its rows are as short); *used
 * says whether it applied. The rollup's values are already scaled as aggregate_samples scales
 * them, so the sums are identical. Samples count the sample rows the profiles cover. */
static int aggregate_rollup(block_reader *r, const merge_query *q, const block_profile *profiles,
                            size_t n, row_sums *sums, merge_result *res, bool *used,
                            strata_error *err) {
    *used = false;
    if (!q->use_rollups || (sums->view != NULL && sums->view->by_time) ||
        n < BLOCK_ROLLUP_MIN_PROFILES || !block_reader_has_rollups(r))
        return 0;
    block_rollup_series info = {0};
    if (block_reader_series_rollup_info(r, profiles[0].series_id, &info, err) != 0)
        return -1;
    if (info.profile_count != n)
        return 0; /* the range cuts through the series: scan its rows */
    row_visit v = {.q = q, .profiles = profiles, .rollup = true, .sums = sums};
    if (block_reader_visit_series_rollup(r, profiles[0].series_id, add_row_run, &v, err) != 0)
        return -1;
    for (size_t i = 0; i < n; i++)
        res->samples += profiles[i].sample_count;
    *used = true;
    return 0;
}

/* The result's period is the earliest profile's (the smallest at a tie), so it does not depend on
 * the order in which workers happened to merge blocks. */
static bool earlier_period(int64_t time_ns, int64_t period, const merge_result *res) {
    return time_ns < res->min_time_ns || (time_ns == res->min_time_ns && period < res->period);
}

static void note_profiles(merge_result *res, const block_profile *profiles, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const block_profile *p = &profiles[i];
        if (res->profiles == 0 || earlier_period(p->time_ns, p->period, res))
            res->period = p->period;
        if (res->profiles == 0 || p->time_ns < res->min_time_ns)
            res->min_time_ns = p->time_ns;
        if (res->profiles == 0 || p->time_ns > res->max_time_ns)
            res->max_time_ns = p->time_ns;
        res->duration_ns += p->duration_ns;
        res->profiles++;
    }
}

/* The node of block stack `stack` under label frame `frame` (below the root), translating it on
 * first use; nodes caches ((frame + 1) << 32 | stack id) -> node, the label frame's own node
 * under stack id 0, so stacks sharing a prefix under one label frame translate it once. */
static int grouped_stack_node(block_reader *r, calltree *tree, frame_memo *m, strata_u64_map *nodes,
                              uint32_t frame, uint32_t stack, uint32_t *out, strata_error *err) {
    uint64_t hi = ((uint64_t)frame + 1) << 32;
    size_t n_pending = 0;
    uint32_t id = stack;
    const uint64_t *known;
    while ((known = strata_u64_map_get(nodes, hi | id)) == NULL && id != 0) {
        if (STRATA_ARRAY_RESERVE_OR_OOM(m->path, m->cap_path, n_pending + 1, err) != 0)
            return -1;
        m->path[n_pending++] = id;
        uint32_t parent, loc;
        if (block_reader_stack_node(r, id, &parent, &loc, err) != 0)
            return -1;
        id = parent;
    }
    uint32_t node;
    if (known != NULL) {
        node = (uint32_t)*known;
    } else { /* the label frame's node */
        if (calltree_child(tree, CALLTREE_ROOT, frame, &node, err) != 0)
            return -1;
        if (strata_u64_map_upsert(nodes, hi, node, NULL) == NULL)
            return strata_error_oom(err);
    }
    while (n_pending > 0) {
        uint32_t s_id = m->path[--n_pending], parent, loc;
        if (block_reader_stack_node(r, s_id, &parent, &loc, err) != 0)
            return -1;
        uint32_t ls = frame_slot(m, loc);
        if (m->offset[ls] == 0 && translate_location(r, tree, m, loc, err) != 0)
            return -1;
        const uint32_t *frames = m->frames + m->offset[ls] - 1;
        for (uint16_t f = 0; f < m->count[ls]; f++)
            if (calltree_child(tree, node, frames[f], &node, err) != 0)
                return -1;
        if (strata_u64_map_upsert(nodes, hi | s_id, node, NULL) == NULL)
            return strata_error_oom(err);
    }
    *out = node;
    return 0;
}

/* Adds the rows summed per (label frame, stack) to the partial tree, under their label frames. */
static int add_grouped(block_reader *r, merge_partial *p, frame_memo *m,
                       const strata_u64_map *grouped, strata_error *err) {
    strata_u64_map nodes;
    if (strata_u64_map_init(&nodes, grouped->count * 2) != 0)
        return strata_error_oom(err);
    int rc = 0;
    for (size_t i = 0; rc == 0 && i <= grouped->mask; i++) {
        uint64_t key = grouped->slots[i].key;
        int64_t value;
        memcpy(&value, &grouped->slots[i].value, sizeof value);
        if (key == 0 || value == 0)
            continue;
        p->result.total += value;
        uint32_t node = CALLTREE_ROOT;
        rc = grouped_stack_node(r, p->tree, m, &nodes, (uint32_t)(key >> 32) - 1, (uint32_t)key,
                                &node, err);
        if (rc == 0 && p->q->base)
            calltree_add_base(p->tree, node, value);
        else if (rc == 0)
            calltree_add(p->tree, node, value);
        else if (err->code == STRATA_DATA_LOSS)
            err->code = STRATA_INTERNAL; /* as in merge_profiles_into */
    }
    strata_u64_map_free(&nodes);
    return rc;
}

/* Sizes in messages: "512 KiB" below 1 MiB (a tenant's small override), else MiB. */
static void format_limit(uint64_t bytes, char *out, size_t size) {
    if (bytes < ((uint64_t)1 << 20))
        snprintf(out, size, "%llu KiB", (unsigned long long)(bytes >> 10));
    else
        snprintf(out, size, "%llu MiB", (unsigned long long)(bytes >> 20));
}

/* Samples are read in batches of profiles so memory stays bounded by the stack table. */
#define MERGE_BATCH_SAMPLES (1u << 20)

/* Series the range covers go through their rollups; the profiles of the rest are scanned in
 * batches, as many series per batch as fit. */
static int sum_rows(block_reader *r, merge_partial *p, const block_profile *profiles, size_t n,
                    row_sums *sums, strata_error *err) {
    block_profile *scan = malloc((n + 1) * sizeof *scan);
    if (scan == NULL)
        return strata_error_oom(err);
    size_t n_scan = 0;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n;) {
        size_t end = i; /* profiles are ordered by series: [i, end) is one series */
        while (end < n && profiles[end].series_id == profiles[i].series_id)
            end++;
        bool used = false;
        rc = aggregate_rollup(r, p->q, profiles + i, end - i, sums, &p->result, &used, err);
        if (rc == 0 && !used) {
            memcpy(scan + n_scan, profiles + i, (end - i) * sizeof *scan);
            n_scan += end - i;
        }
        i = end;
    }
    for (size_t i = 0; rc == 0 && i < n_scan;) {
        size_t j = i;
        uint64_t batch = 0;
        while (j < n_scan && (j == i || batch + scan[j].sample_count <= MERGE_BATCH_SAMPLES))
            batch += scan[j++].sample_count;
        rc = aggregate_samples(r, p->q, scan + i, j - i, sums, &p->result, err);
        i = j;
    }
    free(scan);
    return rc;
}

/* Walks the touched stacks in ascending order: summed_next gives each in *stack. */
typedef struct summed_iter {
    const uint64_t *bits;
    size_t words, word;
    uint64_t rest; /* bits of words[word] not yet given */
} summed_iter;

static inline summed_iter summed_begin(const row_sums *sums) {
    summed_iter it = {sums->touched, (sums->n_stacks + 63) / 64, 0, 0};
    if (it.words > 0)
        it.rest = it.bits[0];
    return it;
}

static inline bool summed_next(summed_iter *it, uint32_t *stack) {
    while (it->rest == 0) {
        if (++it->word >= it->words)
            return false;
        it->rest = it->bits[it->word];
    }
    *stack = (uint32_t)(it->word * 64 + (size_t)__builtin_ctzll(it->rest));
    it->rest &= it->rest - 1;
    return true;
}

static void summed_clear(row_sums *sums) {
    memset(sums->touched, 0, (sums->n_stacks + 63) / 64 * sizeof *sums->touched);
}

/* Translates the stacks with sums that are not in the tree yet (memo, indexed by origin[stack]
 * when origin is given, else by stack id: node + 1, 0 = not yet): planned first, so the tree grows
 * once, by what they add, then translated level by level (stack_plan). */
static int translate_summed_stacks(block_reader *r, calltree *tree, frame_memo *m, stack_plan *plan,
                                   stack_memo *sm, const row_sums *sums, strata_error *err) {
    if (sums->n_stacks > plan->cap_level) {
        free(plan->level);
        plan->level = calloc(sums->n_stacks, 1);
        plan->cap_level = plan->level != NULL ? sums->n_stacks : 0;
        if (plan->level == NULL)
            return strata_error_oom(err);
    }
    plan->n_entries = 0;
    int rc = 0;
    summed_iter it = summed_begin(sums);
    for (uint32_t s; rc == 0 && summed_next(&it, &s);)
        if (sums->per_stack[s] != 0 && !memo_has(sm, memo_slot(sm, s)))
            rc = plan_stack(r, plan, sm, s, err);
    if (rc == 0 && plan->n_entries > 0)
        rc = plan_order(r, plan, sm, m, sums->n_stacks, err);
    if (rc != 0) { /* leave no marks for the next block */
        memset(plan->level, 0, sums->n_stacks);
        memset(plan->per_level, 0, sizeof plan->per_level);
        return -1;
    }
    if (plan->n_entries == 0)
        return 0;
    if (calltree_reserve(tree, calltree_node_count(tree) + plan->n_entries, err) != 0)
        return -1;
    if (translate_plan(r, tree, m, sm, plan, err) != 0) {
        if (err->code == STRATA_DATA_LOSS)
            err->code = STRATA_INTERNAL; /* part of the block is in the tree: it cannot be left
                                            out any more, so the query fails */
        return -1;
    }
    return 0;
}

/* Adds the per-stack sums to tree, each stack translated through memo (see
 * translate_summed_stacks), and clears them. */
static int add_stack_sums(block_reader *r, const merge_query *q, calltree *tree, frame_memo *m,
                          stack_plan *plan, stack_memo *sm, row_sums *sums, merge_result *res,
                          strata_error *err) {
    if (translate_summed_stacks(r, tree, m, plan, sm, sums, err) != 0)
        return -1;
    summed_iter it = summed_begin(sums);
    for (uint32_t s; summed_next(&it, &s);) {
        int64_t value = sums->per_stack[s];
        if (value == 0)
            continue; /* summed to zero */
        sums->per_stack[s] = 0;
        res->total += value;
        uint32_t node = sm->node[memo_slot(sm, s)] - 1;
        if (q->base)
            calltree_add_base(tree, node, value);
        else
            calltree_add(tree, node, value);
    }
    summed_clear(sums);
    return 0;
}

/* Moves the per-stack sums into the query's sums per dictionary stack (origin[stack]), and
 * clears them: no lock, no tree (relaxed atomic adds: workers may add to one stack at once, and
 * nothing reads the sums before every worker is done); the query adds them to the shared tree
 * once, at its end. */
static void add_dictionary_sums(row_sums *sums, const block_stack_origins *origins,
                                _Atomic uint64_t *const *chunks, merge_result *res) {
    summed_iter it = summed_begin(sums);
    for (uint32_t s; summed_next(&it, &s);) {
        int64_t value = sums->per_stack[s];
        if (value == 0)
            continue;
        sums->per_stack[s] = 0;
        res->total += value;
        uint32_t id = block_stack_origin(origins, s);
        atomic_fetch_add_explicit(&chunks[id >> SUMS_CHUNK_BITS][id & (SUMS_CHUNK - 1)],
                                  (uint64_t)value, memory_order_relaxed); /* wrapping */
    }
    summed_clear(sums);
}

/* The symbol ids for a block of dictionary memo dm: its function memo where the block has
 * function origins. */
static symbol_ids dictionary_symbol_ids(dictionary_memo *dm, const block_stack_origins *origins) {
    symbol_ids ids = {0};
    if (origins->function_origin != NULL && dm->functions.n > origins->dictionary_functions) {
        ids.dictionary = &dm->functions;
        ids.function_slot = origins->function_origin;
        ids.n_function_slots = origins->n_functions;
    }
    return ids;
}

/* Puts a block's sums into a tree. A block cut from a writer dictionary (its stacks have
 * origins) whose rows need nothing but their stacks goes into the query's shared tree, under its
 * lock, through the query's memo of that dictionary: each dictionary stack is translated once per
 * query however many blocks hold it, and the workers' trees do not repeat it (the lock is held
 * only to translate; summing rows, the bulk of a block, runs unlocked). Any other block goes into
 * the worker's own tree, through a memo of its stacks (of the worker's for its dictionary, when
 * sample labels make rows need more than their stacks). */
static int translate_sums(block_reader *r, merge_partial *p, row_sums *sums, strata_error *err) {
    const merge_query *q = p->q;
    block_stack_origins origins;
    if (block_reader_stack_origins(r, &origins, err) != 0)
        return -1;
    bool has_origins = origins.stacks != NULL && origins.n_stacks + 1 == sums->n_stacks &&
                       origins.n_locations == block_reader_row_count(r, BLOCK_TABLE_LOCATIONS);
    dictionary_memo *dm = NULL;
    int rc = 0;
    if (has_origins && sums->view == NULL) {
        shared_tree *shared = q->shared;
        dictionary_sums *by_origin = NULL;
        /* The chunk table, not the dictionary_sums: shared->sums moves when another worker adds a
         * dictionary, the chunk table never does. */
        _Atomic uint64_t **chunks = NULL;
        pthread_mutex_lock(&shared->mu);
        rc = dictionary_memo_for(&shared->memos, q->max_bytes / 4, &origins, &dm, err);
        /* Sums per dictionary stack cost the whole dictionary (zeroed, then read back at the
         * end): worth it only for a query whose rows are many next to it (all processes, not
         * one: 7.2 M rows against 2.7 M dictionary stacks, not 72 K). */
        if (rc == 0 && dm != NULL && q->selected_rows >= (uint64_t)origins.dictionary_stacks / 2)
            rc = dictionary_sums_for(shared, q->max_bytes / 4, &origins, &by_origin, err);
        if (by_origin != NULL)
            chunks = by_origin->chunks;
        if (rc == 0 && dm != NULL) {
            symbol_ids ids = dictionary_symbol_ids(dm, &origins);
            stack_memo sm = {dm->node, &origins, dm->translated};
            p->result.dictionary_blocks++;
            dm->frames->slot = origins.location_origin;
            dm->frames->ids = &ids;
            if (by_origin != NULL) /* only what is new needs the lock */
                rc = translate_summed_stacks(r, shared->tree, dm->frames, &p->plan, &sm, sums, err);
            else
                rc = add_stack_sums(r, q, shared->tree, dm->frames, &p->plan, &sm, sums, &p->result,
                                    err);
            dm->frames->slot = NULL;
            dm->frames->ids = NULL;
            symbol_ids_free(&ids);
        }
        shared->bytes =
            calltree_memory_bytes(shared->tree) + shared->memos.bytes + shared->sums_bytes;
        pthread_mutex_unlock(&shared->mu);
        if (rc == 0 && dm != NULL && chunks != NULL)
            add_dictionary_sums(sums, &origins, chunks, &p->result);
        if (rc != 0 || dm != NULL)
            return rc;
    }
    if (has_origins) {
        uint64_t budget = q->max_bytes / (q->workers ? q->workers : 1) / 4;
        rc = dictionary_memo_for(&p->memos, budget, &origins, &dm, err);
    }
    size_t n_locations = (size_t)block_reader_row_count(r, BLOCK_TABLE_LOCATIONS) + 1;
    symbol_ids ids = {0};
    if (rc == 0 && dm != NULL) /* the memo of p->memos serves p->tree, add_grouped's too */
        ids = dictionary_symbol_ids(dm, &origins);
    frame_memo m = {.ids = &ids};
    uint32_t *own = NULL;
    if (rc == 0 && (dm == NULL || sums->grouped.count > 0)) {
        m.offset = calloc(n_locations, sizeof *m.offset);
        m.count = calloc(n_locations, sizeof *m.count);
        if (m.offset == NULL || m.count == NULL)
            rc = strata_error_oom(err);
    }
    if (rc == 0 && dm == NULL) {
        own = calloc(sums->n_stacks, sizeof *own);
        if (own == NULL) {
            rc = strata_error_oom(err);
        } else {
            own[0] = CALLTREE_ROOT + 1; /* the empty stack */
            stack_memo sm = {.node = own};
            rc = add_stack_sums(r, q, p->tree, &m, &p->plan, &sm, sums, &p->result, err);
        }
    } else if (rc == 0) {
        p->result.dictionary_blocks++;
        dm->frames->slot = origins.location_origin;
        dm->frames->ids = &ids;
        stack_memo sm = {dm->node, &origins, dm->translated};
        rc = add_stack_sums(r, q, p->tree, dm->frames, &p->plan, &sm, sums, &p->result, err);
        dm->frames->slot = NULL;
        dm->frames->ids = NULL;
    }
    if (rc == 0 && sums->grouped.count > 0)
        rc = add_grouped(r, p, &m, &sums->grouped, err);
    free(own);
    frame_memo_free(&m);
    symbol_ids_free(&ids);
    return rc;
}

static int merge_profiles_into(block_reader *r, merge_partial *p, const block_profile *profiles,
                               size_t n, strata_error *err) {
    const merge_query *q = p->q;
    size_t n_stacks = (size_t)block_reader_row_count(r, BLOCK_TABLE_STACKS) + 1;
    size_t n_locations = (size_t)block_reader_row_count(r, BLOCK_TABLE_LOCATIONS) + 1;
    uint64_t need =
        (uint64_t)n_stacks * 12 + (uint64_t)n_locations * 6 + (uint64_t)MERGE_BATCH_SAMPLES * 12;
    if (need > q->max_bytes) {
        char limit[32];
        format_limit(q->max_bytes, limit, sizeof limit);
        return strata_error_set(err, STRATA_RESOURCE_EXHAUSTED,
                                "query needs about %llu MiB, more than the limit of %s "
                                "(max_query_bytes); narrow the time range or the selector",
                                (unsigned long long)(need >> 20), limit);
    }
    if (n_stacks > p->cap_per_stack) {
        free(p->per_stack);
        p->per_stack = calloc(n_stacks, sizeof *p->per_stack);
        p->cap_per_stack = p->per_stack != NULL ? n_stacks : 0;
    }
    int64_t *per_stack = p->per_stack;
    int rc = per_stack == NULL ? strata_error_oom(err) : 0;
    sample_view view;
    row_sums sums = {.per_stack = per_stack, .n_stacks = n_stacks};
    if (n_stacks > p->cap_touched) {
        free(p->touched);
        p->touched = calloc((n_stacks + 63) / 64, sizeof *p->touched);
        p->cap_touched = p->touched != NULL ? n_stacks : 0;
    }
    sums.touched = p->touched;
    if (rc == 0 && sums.touched == NULL)
        rc = strata_error_oom(err);
    if (rc == 0)
        rc = sample_view_init(&view, r, q->sel, p->tree, profiles, n, err);
    else
        memset(&view, 0, sizeof view);
    if (rc == 0 && view.active) {
        sums.view = &view;
        if (strata_u64_map_init(&sums.grouped, 256) != 0)
            rc = strata_error_oom(err);
    }
    if (rc == 0)
        rc = sum_rows(r, p, profiles, n, &sums, err);
    p->passed += sums.passed;
    p->filtered |= view.filter;
    if (rc == 0)
        rc = translate_sums(r, p, &sums, err);
    if (rc == 0)
        note_profiles(&p->result, profiles, n);
    if (rc != 0 && per_stack != NULL) /* the sums may be left half read */
        memset(per_stack, 0, n_stacks * sizeof *per_stack);
    if (rc != 0 && sums.touched != NULL)
        summed_clear(&sums);
    strata_u64_map_free(&sums.grouped);
    sample_view_free(&view);
    return rc;
}

/* The partial trees of all workers must fit max_query_bytes together: each worker checks its own
 * against its share after every block, so a merge of millions of distinct functions fails with a
 * message instead of growing the process past the limit. */
static int check_tree_memory(const merge_partial *p, strata_error *err) {
    shared_tree *shared = p->q->shared;
    pthread_mutex_lock(&shared->mu);
    uint64_t shared_bytes = shared->bytes;
    pthread_mutex_unlock(&shared->mu);
    uint64_t room = p->q->max_bytes > shared_bytes ? p->q->max_bytes - shared_bytes : 0;
    uint64_t share = room / (p->q->workers ? p->q->workers : 1);
    size_t bytes = calltree_memory_bytes(p->tree) + p->memos.bytes;
    if (bytes <= share && shared_bytes <= p->q->max_bytes)
        return 0;
    bytes += shared_bytes;
    char need[32], limit[32];
    format_limit(bytes, need, sizeof need);
    format_limit(p->q->max_bytes, limit, sizeof limit);
    return strata_error_set(err, STRATA_RESOURCE_EXHAUSTED,
                            "the merged call tree needs more than %s (max_query_bytes %s over %zu "
                            "threads); narrow the time range or the selector",
                            need, limit, p->q->workers);
}

int engine_check_merged_bytes(const merge_query *q, size_t bytes, strata_error *err) {
    if (bytes <= q->max_bytes)
        return 0;
    char need[32], limit[32];
    format_limit(bytes, need, sizeof need);
    format_limit(q->max_bytes, limit, sizeof limit);
    return strata_error_set(err, STRATA_RESOURCE_EXHAUSTED,
                            "the merged call tree needs more than %s (max_query_bytes %s); narrow "
                            "the time range or the selector",
                            need, limit);
}

static int merge_block_profiles(block_reader *r, merge_partial *p, const block_selection *selection,
                                strata_error *err) {
    if (selection->dropped == NULL)
        return merge_profiles_into(r, p, selection->profiles, selection->n, err);
    block_profile *kept = malloc(selection->n * sizeof *kept);
    if (kept == NULL)
        return strata_error_oom(err);
    size_t n = 0;
    for (size_t i = 0; i < selection->n; i++)
        if (!selection->dropped[i])
            kept[n++] = selection->profiles[i];
    int rc = n > 0 ? merge_profiles_into(r, p, kept, n, err) : 0;
    free(kept);
    return rc;
}

static int block_merge(indexed_block *b, size_t index, block_reader *r, void *partial,
                       strata_error *err) {
    merge_partial *p = partial;
    const block_selection *selection = &p->q->selections[index];
    (void)b;
    if (selection->n == 0)
        return 0;
    if (merge_block_profiles(r, p, selection, err) != 0)
        return -1;
    return check_tree_memory(p, err);
}

void engine_merge_results_add(merge_result *dst, const merge_result *src) {
    if (src->profiles == 0)
        return;
    if (dst->profiles == 0 || earlier_period(src->min_time_ns, src->period, dst))
        dst->period = src->period;
    if (dst->profiles == 0 || src->min_time_ns < dst->min_time_ns)
        dst->min_time_ns = src->min_time_ns;
    if (dst->profiles == 0 || src->max_time_ns > dst->max_time_ns)
        dst->max_time_ns = src->max_time_ns;
    dst->profiles += src->profiles;
    dst->samples += src->samples;
    dst->total += src->total;
    dst->duration_ns += src->duration_ns;
    dst->dictionary_blocks += src->dictionary_blocks;
}

/* Adds the query's dictionary sums to the shared tree, through the memo of each dictionary, which
 * translated every stack a worker summed. */
static int add_dictionary_sums_to_tree(shared_tree *shared, bool base, strata_error *err) {
    for (size_t d = 0; d < shared->n_sums; d++) {
        const dictionary_sums *ds = &shared->sums[d];
        const dictionary_memo *m = NULL;
        for (size_t i = 0; i < shared->memos.n && m == NULL; i++)
            if (memcmp(shared->memos.memos[i].id, ds->id, sizeof ds->id) == 0)
                m = &shared->memos.memos[i];
        for (size_t c = 0; c < ds->n_chunks; c++) {
            for (size_t k = 0; k < SUMS_CHUNK; k++) {
                int64_t value =
                    (int64_t)atomic_load_explicit(&ds->chunks[c][k], memory_order_relaxed);
                if (value == 0)
                    continue;
                size_t id = (c << SUMS_CHUNK_BITS) + k;
                if (m == NULL || id >= m->n || m->node[id] == 0)
                    return strata_error_set(err, STRATA_INTERNAL,
                                            "merge: dictionary stack %zu summed but not translated",
                                            id);
                if (base)
                    calltree_add_base(shared->tree, m->node[id] - 1, value);
                else
                    calltree_add(shared->tree, m->node[id] - 1, value);
            }
        }
    }
    return 0;
}

/* Merges the selected profiles of blocks[0..n) (q->selections, by position) into tree, leaving out
 * blocks with skip[i] set (DATA_LOSS blocks are added to skip and counted in out->stats). Each
 * worker builds a partial tree (no locking while merging blocks), merged into the caller's tree
 * only when every block succeeded, so an attempt that fails because a block vanished leaves the
 * caller's tree untouched for the retry. */
int engine_merge_blocks(query_engine *e, merge_query *q, indexed_block **blocks, size_t n_blocks,
                        bool *skip, calltree *tree, merge_outcome *out, strata_error *err) {
    size_t active = 0;
    q->selected_rows = 0;
    for (size_t i = 0; i < n_blocks; i++) {
        if (skip[i] || q->selections[i].n == 0)
            continue;
        active++;
        for (size_t k = 0; k < q->selections[i].n; k++)
            q->selected_rows += q->selections[i].profiles[k].sample_count;
    }
    if (active == 0)
        return 0;
    size_t workers = engine_worker_count(e, active);
    q->workers = workers;
    shared_tree shared = {.tree = NULL};
    q->shared = &shared;
    merge_partial *parts = calloc(workers, sizeof *parts);
    void **ptrs = calloc(workers, sizeof *ptrs);
    int rc = (parts && ptrs) ? 0 : strata_error_oom(err);
    bool mutex_made = false;
    if (rc == 0 && pthread_mutex_init(&shared.mu, NULL) != 0)
        rc = strata_error_set(err, STRATA_INTERNAL, "query: cannot create a mutex");
    else if (rc == 0)
        mutex_made = true;
    if (rc == 0)
        rc = calltree_create(&shared.tree, 1024, err);
    if (rc == 0)
        rc = calltree_set_grouping(shared.tree, calltree_get_grouping(tree), err);
    for (size_t w = 0; rc == 0 && w < workers; w++) {
        parts[w].q = q;
        ptrs[w] = &parts[w];
        rc = calltree_create(&parts[w].tree, 1024, err);
        if (rc == 0)
            rc = calltree_set_grouping(parts[w].tree, calltree_get_grouping(tree), err);
    }
    if (rc == 0)
        rc = engine_for_each_block(e, blocks, n_blocks, block_merge, ptrs, workers, skip,
                                   &out->stats, err);
    if (rc == 0)
        rc = add_dictionary_sums_to_tree(&shared, q->base, err);
    for (size_t w = 0; parts != NULL && w < workers; w++) {
        out->passed += parts[w].passed;
        out->filtered |= parts[w].filtered;
    }
    /* The shared tree first: over fresh blocks it is usually the biggest. An empty caller's
     * tree (not a diff's second side) takes a tree as it is: merging would copy every node. */
    for (size_t t = 0; rc == 0 && t <= workers; t++) {
        calltree *from = t == 0 ? shared.tree : parts[t - 1].tree;
        rc = engine_merge_tree(tree, from, err);
    }
    for (size_t w = 0; rc == 0 && w < workers; w++)
        engine_merge_results_add(&out->result, &parts[w].result);
    for (size_t w = 0; parts != NULL && w < workers; w++) {
        calltree_free(parts[w].tree);
        memo_set_free(&parts[w].memos);
        free(parts[w].per_stack);
        free(parts[w].touched);
        stack_plan_free(&parts[w].plan);
    }
    calltree_free(shared.tree);
    memo_set_free(&shared.memos);
    shared_sums_free(&shared);
    if (mutex_made)
        pthread_mutex_destroy(&shared.mu);
    q->shared = NULL;
    free(parts);
    free(ptrs);
    return rc;
}

int engine_merge_tree(calltree *tree, calltree *from, strata_error *err) {
    calltree_node_values root = calltree_node_get(from, CALLTREE_ROOT);
    if (calltree_node_count(from) == 1 && calltree_frame_count(from) == 0 && root.self == 0 &&
        root.self_base == 0)
        return 0; /* nothing went there */
    if (calltree_node_count(tree) == 1 && calltree_frame_count(tree) == 0 &&
        !calltree_is_diff(tree)) {
        calltree_swap(tree, from);
        return 0;
    }
    /* A merge costs the nodes it adds: add the smaller tree to the larger (the merge is
     * commutative: frames reconcile the same way, and reports walk the tree in sorted order). */
    if (calltree_node_count(from) > calltree_node_count(tree))
        calltree_swap(tree, from);
    return calltree_merge(tree, from, err);
}

int engine_merge_outcome(const merge_outcome *o, merge_result *result, strata_error *err) {
    *result = o->result;
    result->stats = o->stats;
    if (result->profiles == 0)
        return engine_no_profiles(&result->stats, err);
    if (o->filtered && o->passed == 0)
        return strata_error_set(err, STRATA_NOT_FOUND,
                                "no samples match the query's pprof sample labels in that range");
    return 0;
}

int engine_select_and_merge(query_engine *e, merge_query *q, indexed_block **blocks,
                            size_t n_blocks, calltree *tree, merge_outcome *out,
                            strata_error *err) {
    bool *skipped = calloc(n_blocks + 1, sizeof *skipped);
    q->selections = calloc(n_blocks + 1, sizeof *q->selections);
    readahead_keep keep;
    readahead_keep_init(&keep, n_blocks);
    int rc = (skipped && q->selections) ? 0 : strata_error_oom(err);
    if (rc == 0)
        rc = engine_select_profiles(e, blocks, n_blocks, q->sel, q->start_ns, q->end_ns, false,
                                    q->selections, skipped, &out->stats, &keep, err);
    if (rc == 0)
        rc = engine_merge_blocks(e, q, blocks, n_blocks, skipped, tree, out, err);
    engine_drop_kept_readahead(blocks, n_blocks, &keep);
    block_selections_free(q->selections, n_blocks);
    q->selections = NULL;
    free(skipped);
    return rc;
}

static int run_merge_attempt(query_engine *e, const char *tenant, merge_query *q, calltree *tree,
                             merge_result *result, strata_error *err) {
    memset(result, 0, sizeof *result);
    indexed_block **blocks;
    size_t n_blocks;
    if (block_index_acquire(e->index, tenant, q->start_ns, q->end_ns, &blocks, &n_blocks, err) != 0)
        return -1;
    merge_outcome out = {0};
    int rc = engine_fanout_wanted(e, q, blocks, n_blocks)
                 ? engine_fanout_merge(e, tenant, q, blocks, n_blocks, tree, &out, err)
                 : engine_select_and_merge(e, q, blocks, n_blocks, tree, &out, err);
    block_index_release_all(e->index, blocks, n_blocks);
    if (rc != 0) {
        result->stats = out.stats;
        return rc;
    }
    return engine_merge_outcome(&out, result, err);
}

/* ---- entry points ---------------------------------------------------------------------------- */

typedef struct merge_call {
    const char *tenant;
    merge_query *q;
    calltree *tree;
    merge_result *result;
} merge_call;

static int merge_attempt(query_engine *e, void *arg, strata_error *err) {
    const merge_call *c = arg;
    return run_merge_attempt(e, c->tenant, c->q, c->tree, c->result, err);
}

static int run_merge(query_engine *e, const char *tenant, merge_query *q, calltree *tree,
                     merge_result *result, strata_error *err) {
    merge_call c = {tenant, q, tree, result};
    return engine_retry(e, merge_attempt, &c, err);
}

static int check_merge_selector(const selector *sel, strata_error *err) {
    if (!sel->has_profile_type)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "the query must name a profile type, e.g. "
                                "process_cpu:samples:count:cpu:nanoseconds:delta{...}");
    return 0;
}

/* The same rule the block writer's rollups are scaled by. */
static bool is_samples_count(const profile_type *t) {
    return block_rollup_scale(t->sample_type, t->sample_unit);
}

static uint64_t max_bytes_of(const query_engine *e, const query_options *opts) {
    return opts != NULL && opts->max_query_bytes != 0 ? opts->max_query_bytes
                                                      : e->opts.max_query_bytes;
}

int query_merge_opts(query_engine *e, const char *tenant, const query_options *opts,
                     const selector *sel, int64_t start_ns, int64_t end_ns, calltree *tree,
                     bool base, merge_result *result, strata_error *err) {
    if (check_merge_selector(sel, err) != 0)
        return -1;
    if (end_ns < start_ns)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "end is before start");
    merge_query q = {.sel = sel,
                     .start_ns = start_ns,
                     .end_ns = end_ns,
                     .base = base,
                     .samples_count = is_samples_count(&sel->profile_type),
                     .max_bytes = max_bytes_of(e, opts),
                     .use_rollups = e->opts.use_rollups,
                     .query_text = opts != NULL ? opts->query_text : NULL};
    return run_merge(e, tenant, &q, tree, result, err);
}

int query_single_opts(query_engine *e, const char *tenant, const query_options *opts,
                      const selector *sel, int64_t time_ns, calltree *tree, bool base,
                      merge_result *result, strata_error *err) {
    if (check_merge_selector(sel, err) != 0)
        return -1;
    int64_t ms = time_ns / STRATA_NS_PER_MS;
    /* One profile per series: rows are as cheap as a rollup. */
    merge_query q = {.sel = sel,
                     .start_ns = ms * STRATA_NS_PER_MS,
                     .end_ns = ms * STRATA_NS_PER_MS + STRATA_NS_PER_MS - 1,
                     .base = base,
                     .samples_count = is_samples_count(&sel->profile_type),
                     .max_bytes = max_bytes_of(e, opts),
                     .use_rollups = false,
                     .query_text = opts != NULL ? opts->query_text : NULL};
    return run_merge(e, tenant, &q, tree, result, err);
}

int query_merge(query_engine *e, const char *tenant, const selector *sel, int64_t start_ns,
                int64_t end_ns, calltree *tree, bool base, merge_result *result,
                strata_error *err) {
    return query_merge_opts(e, tenant, NULL, sel, start_ns, end_ns, tree, base, result, err);
}

int query_single(query_engine *e, const char *tenant, const selector *sel, int64_t time_ns,
                 calltree *tree, bool base, merge_result *result, strata_error *err) {
    return query_single_opts(e, tenant, NULL, sel, time_ns, tree, base, result, err);
}
