/*
 * block_writer_internal.h - the block writer's private types, shared by its files (block_writer.h
 * is the contract and the design).
 *
 * The writer is one struct worked on by one file per concept:
 *   - block_writer.c: lifecycle (options, new, free), the open profile (start, add pairs,
 *     commit), the symbolized path (begin / add_sample / end), profiles given as stack ids,
 *     counts, memory, and the block's meta.json;
 *   - block_writer_dict.c: the dictionary: strings, mappings, functions, locations, stacks (the
 *     parent-pointer tree and the whole-stack cache), series and sample label sets, with the id
 *     path's interning calls (block_writer_intern_*) that are its public face;
 *   - block_writer_pprof.c: translating a decoded pprof into the dictionary and its profiles;
 *   - block_writer_spool.c: a spooled writer's profiles, streamed into the spool file as they come;
 *   - block_writer_detach.c: cutting a block, with the symbols it uses, off a long-lived writer;
 *   - block_writer_encode.c: block_writer_finish: ordering and encoding every table as pages of
 *     columns, spooled or in memory.
 *
 * The struct's fields fall in two kinds, grouped below. Long-lived state is what blocks are made
 * of: the dictionary (which a long-lived writer keeps across detaches), the profiles and samples
 * of the block being built, the open profile, and a spooled writer's streams. Per-call scratch
 * (the `scratch` and `pprof` members) holds nothing a later call relies on, except that the pprof
 * translation is reused while the same pprof comes again (block_writer_add_profile, once per
 * sample type); its arrays are kept only to save allocating them on every call.
 *
 * The small helpers every path calls per sample or per frame are static inline here, so that
 * splitting the writer into files costs no call on its hot paths.
 */
#ifndef STRATA_BLOCK_WRITER_INTERNAL_H
#define STRATA_BLOCK_WRITER_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "block/block_encoder.h"
#include "block/block_format.h"
#include "block/block_rollup.h"
#include "block/block_writer.h"
#include "block/ulid.h"
#include "common/array.h"
#include "common/hash.h"
#include "common/radix_sort.h"

typedef struct w_mapping {
    uint64_t start, limit, offset;
    uint32_t file, build_id, flags;
} w_mapping;

typedef struct w_function {
    uint32_t name, system_name, file;
    int64_t start_line;
} w_function;

typedef struct w_location {
    uint64_t address;
    uint32_t mapping; /* mapping row + 1; 0 = none */
    uint32_t first_line;
    uint32_t line_count;
    uint32_t flags;
} w_location;

typedef struct w_line {
    uint32_t function;
    int64_t line;
} w_line;

typedef struct w_stack {
    uint32_t parent; /* stack id; 0 = root */
    uint32_t location;
} w_stack;

typedef struct w_series {
    uint32_t type[5]; /* name, sample_type, sample_unit, period_type, period_unit (string ids) */
    uint32_t delta;
    uint32_t first_label; /* into label_words, in pairs */
    uint32_t label_count;
    uint32_t n_profiles;
} w_series;

typedef struct w_profile {
    int64_t time_ns, duration_ns, period, total;
    uint64_t first_sample;
    uint32_t sample_count;
    uint32_t series;
} w_profile;

/* A sample of the open profile: key = stack << 32 | label set (0 = no sample labels), so one
 * radix sort by key orders by (stack, label set); payload = the value's bits. */
typedef strata_sort_record w_pair;

static inline w_pair make_pair(uint32_t stack, uint32_t set, int64_t value) {
    return (w_pair){(uint64_t)stack << 32 | set, (uint64_t)value};
}

static inline uint32_t pair_stack(const w_pair *p) {
    return (uint32_t)(p->key >> 32);
}

static inline uint32_t pair_label_set(const w_pair *p) {
    return (uint32_t)p->key;
}

static inline int64_t pair_value(const w_pair *p) {
    int64_t v;
    memcpy(&v, &p->payload, sizeof v);
    return v;
}

/* A pprof sample label set (format version 2): its (name, value) string id pairs in set_words,
 * sorted by name. Set id = row + 1; 0 is the empty set. */
typedef struct w_label_set {
    uint32_t first; /* into set_words, in pairs */
    uint32_t count;
} w_label_set;

/* A pprof sample whose stack missed the whole-stack cache, interned after the profile's other
 * samples in root-first order so consecutive stacks share their interned prefix. */
typedef struct stack_miss {
    size_t sample; /* index into pprof.samples */
} stack_miss;

/* Per pprof sample while adding a pprof: its whole-stack fingerprint, its frames (block location
 * ids, leaf first, in pprof.frames) and the stack it resolves to. */
typedef struct sample_scratch {
    uint64_t key;   /* fingerprint, first 64 bits (non-zero) */
    uint32_t check; /* fingerprint, 32 more bits */
    uint32_t stack; /* SAMPLE_SKIPPED when every value column is zero */
    size_t frames;  /* offset into pprof.frames */
    uint32_t n_frames;
} sample_scratch;

#define SAMPLE_SKIPPED UINT32_MAX

/* A location as the dictionary takes it: lines given apart (loc.first_line unused). */
typedef struct location_item {
    w_location loc; /* first_line unused */
    const w_line *lines;
} location_item;

/* Per-call scratch of the symbolized and id paths and of series and label set interning. */
typedef struct block_writer_scratch {
    uint32_t *frames; /* the symbolized path: a sample's location ids */
    size_t cap_frames;
    w_line *lines; /* a location's lines being interned */
    size_t cap_lines;
    uint32_t *labels; /* a series' (name, value) string id pairs, sorted by name */
    size_t cap_labels;
    uint32_t *set; /* the pairs of the label set being interned, after a count word */
    size_t cap_set;
} block_writer_scratch;

/* What adding a pprof translates and computes (block_writer_pprof.c). */
typedef struct block_writer_pprof_scratch {
    /* The pprof whose symbols *_ids translate: the ingester adds each pprof once per sample type,
     * and the translation is reused when the same profile, with the same symbol content
     * (fingerprint), comes again. */
    const pprof_profile *translated;
    uint64_t translated_fingerprint;
    /* pprof mapping / function / location index -> block id (mappings: id + 1), pprof string
     * index -> block string id (UINT32_MAX: not yet interned) */
    uint32_t *mapping_ids, *function_ids, *location_ids, *string_ids;
    size_t cap_mapping_ids, cap_function_ids, cap_location_ids, cap_string_ids;
    /* when the pprof's location ids are small: pprof location id -> block location id + 1 */
    uint32_t *block_location_by_id;
    size_t cap_block_location_by_id, n_block_location_by_id;
    /* per pprof string: a 128-bit hash of its bytes, computed on first use (0 = not yet) */
    uint64_t *string_hashes;
    size_t cap_string_hashes;
    /* per pprof function while translating: its content fingerprint */
    uint64_t *function_keys;
    uint32_t *function_checks;
    size_t cap_function_keys, cap_function_checks;
    /* per pprof location while translating: its fingerprint */
    uint64_t *location_keys;
    uint32_t *location_checks;
    size_t cap_location_keys, cap_location_checks;
    /* per pprof profile: every sample's block location ids and fingerprint, and the samples that
     * missed the whole-stack cache */
    uint32_t *frames;
    size_t cap_frames;
    sample_scratch *samples;
    size_t cap_samples;
    stack_miss *misses;
    size_t n_misses, cap_misses;
    uint32_t *sample_sets; /* per pprof sample: its label set */
    size_t cap_sample_sets;
} block_writer_pprof_scratch;

struct block_writer {
    /* ---- long-lived: configuration and lifecycle ------------------------------------------ */
    block_writer_options options;
    char *tenant;
    bool finished;
    bool detached; /* made by block_writer_detach: it only finishes */

    /* ---- long-lived: the dictionary (block_writer_dict.c) ---------------------------------- */
    strata_intern strings;
    w_mapping *mappings;
    size_t n_mappings, cap_mappings;
    strata_slot_map mapping_index;
    w_function *functions;
    size_t n_functions, cap_functions;
    strata_slot_map function_index;
    /* a pprof function's content (its strings' bytes and start line) -> function id, so a
     * function seen before costs no string interning */
    strata_slot_map function_content_index;
    w_location *locations;
    size_t n_locations, cap_locations;
    strata_slot_map location_index;
    w_line *lines;
    size_t n_lines, cap_lines;
    w_stack *stacks; /* row i holds stack id i + 1 */
    size_t n_stacks, cap_stacks;
    strata_slot_map stack_index; /* ((parent << 32) | location) + 1 -> stack id */
    /* the last stack interned through the tree, root first, and its node at each depth */
    uint32_t *chain_locations, *chain_nodes;
    size_t chain_len, cap_chain_locations, cap_chain_nodes;
    /* whole-stack cache: 96-bit fingerprint of a location sequence -> stack id, as
     * key = first 64 bits, value = (next 32 bits << 32) | stack id, so a probe is one slot */
    strata_slot_map stack_cache;

    w_series *series;
    size_t n_series, cap_series;
    strata_slot_map series_index;
    uint32_t *label_words; /* (name, value) string id pairs */
    size_t n_label_words, cap_label_words;

    /* pprof sample label sets, de-duplicated by content */
    w_label_set *label_sets;
    size_t n_label_sets, cap_label_sets;
    strata_slot_map label_set_index;
    uint32_t *set_words; /* (name, value) string id pairs */
    size_t n_set_words, cap_set_words;

    /* The dictionary's id (docs/block-format.md 6.12), drawn at the first detach: every block cut
     * from this writer, and the writer itself when it finishes, says which of the dictionary's
     * stacks its own stacks are, so a reader translates each stack once over all of them. */
    bool has_dictionary;
    ulid dictionary;
    uint32_t dictionary_stacks;    /* a detached block: the dictionary's stack count at the cut */
    uint32_t dictionary_locations; /* and its location count */
    uint32_t dictionary_functions; /* and its function count */
    /* The dictionary's location and function counts at the previous cut: kept by the long-lived
     * writer, handed to the detached block, whose locations and functions above them (new since
     * that cut) go last. */
    uint32_t locations_at_last_cut, functions_at_last_cut, stacks_at_last_cut;
    /* A detached block once renumbered (block_writer_encode.c): its first function, location,
     * line and stack new since the previous cut, where a row group starts (the row count where
     * nothing is new, 0 for the first cut: every row is new, and no group is cut short). */
    uint32_t first_new_function, first_new_location, first_new_line, first_new_stack;
    uint32_t *stack_origins;    /* a detached block: per stack row, the dictionary's stack id */
    uint32_t *location_origins; /* and per location row, the dictionary's location id + 1 */
    uint32_t *function_origins; /* and per function row, the dictionary's function id + 1 */

    /* ---- long-lived until the block is cut: profiles and samples ----------------------------- */
    w_profile *profiles;
    size_t n_profiles, cap_profiles;
    uint32_t *sample_stacks;
    int64_t *sample_values;
    size_t n_samples, cap_sample_stacks, cap_sample_values;
    /* per sample: its label set; valid for [0, n_samples) only once some kept sample has one
     * (samples_labelled), so blocks without sample labels never fill it */
    uint32_t *sample_label_sets;
    size_t cap_sample_label_sets;
    bool samples_labelled;

    /* ---- the open profile: from its start to its commit or abort ----------------------------- */
    bool open;
    w_profile current;
    w_pair *pairs, *pairs_tmp; /* its samples; pairs_tmp: the radix sort's buffer */
    size_t n_pairs, cap_pairs, cap_pairs_tmp;

    /* ---- a spooled writer (block_writer_spool.c) -------------------------------------------- */
    /* A spooled writer (block_writer_new_spooled) encodes its profiles, samples, rollup_stacks
     * and series_label_sets tables into the spool file as profiles come, in (series, time) order,
     * and holds no sample: the profile's samples pass through sample_* (as scratch), the rollups
     * are summed one series at a time. */
    block_object *spool;
    block_table_encoder spool_profiles, spool_samples, spool_rollups, spool_series_sets;
    block_rollup_builder *spool_rollup;
    block_rollup_series *spool_rollup_series; /* per block series */
    size_t cap_spool_rollup_series;
    uint32_t spool_series;     /* the writer's id of the series being written; UINT32_MAX: none */
    uint32_t spool_series_out; /* its id in the block (the series written before it) */
    bool spool_scale;          /* its rollups multiply values by the period */
    int64_t spool_last_time, spool_min_time, spool_max_time;
    uint32_t *spool_set_stamp; /* per label set id: spool_series_out + 1 that last used it */
    size_t cap_spool_set_stamp;
    uint32_t *spool_sets; /* the distinct label sets of the current series */
    size_t n_spool_sets, cap_spool_sets;
    bool spool_broken; /* a profile failed half-written into the spool: only freeing is left */

    /* ---- per-call scratch ------------------------------------------------------------------- */
    block_writer_scratch scratch;
    block_writer_pprof_scratch pprof;
};

/* The finish-time orderings (block_writer_encode.c): series by (type, labels), strings with
 * label/type strings first, profiles by (series, time). The meta (block_writer.c) reads them too.
 */
typedef struct block_order {
    uint32_t *series_order; /* new series id -> old */
    uint32_t *series_new;   /* old -> new, UINT32_MAX if the series has no profiles */
    size_t n_series;
    uint32_t *string_new; /* old string id -> new */
    uint32_t *string_order;
    uint32_t *profile_order; /* position -> profile index */
    /* sample label sets: old set id -> new (0 for none and for sets no sample uses), numbered in
     * old id order so that (stack, label set) order is kept; version 2 when any is used */
    uint32_t *set_new;
    size_t n_sets;
    int version;
} block_order;

/* ---- growing arrays ----------------------------------------------------------------------------
 */

/* Ensures arr has room for `need` elements (common/array.h's growth), or returns OOM from the
 * enclosing function (which has a `strata_error *err`). */
#define ENSURE_OR_OOM(arr, cap, need)                                                              \
    do {                                                                                           \
        if (STRATA_ARRAY_RESERVE_OR_OOM(arr, cap, need, err) != 0)                                 \
            return -1;                                                                             \
    } while (0)

/* ---- profiles (block_writer.c) ----------------------------------------------------------------
 */

/* FAILED_PRECONDITION unless profiles and symbols may still be added. */
int block_writer_check_writable(const block_writer *w, strata_error *err);
/* Opens a profile of the series (labels, type); its samples are then pushed as pairs. */
int block_writer_profile_start(block_writer *w, const label_set *labels, const profile_type *type,
                               int64_t time_ns, int64_t duration_ns, int64_t period,
                               strata_error *err);
/* Sorts the open profile's pairs by (stack, label set), sums duplicates, drops zeros, appends the
 * samples and the profile (or spools them) and closes it. */
int block_writer_profile_commit(block_writer *w, strata_error *err);

static inline int block_writer_profile_push(block_writer *w, uint32_t stack, uint32_t set,
                                            int64_t value, strata_error *err) {
    ENSURE_OR_OOM(w->pairs, w->cap_pairs, w->n_pairs + 1);
    w->pairs[w->n_pairs++] = make_pair(stack, set, value);
    return 0;
}

/* meta.json's fields for the block the order describes, whose data object is object_size bytes. */
int block_writer_fill_meta(const block_writer *w, const block_order *o, uint64_t object_size,
                           block_meta *meta, strata_error *err);

/* ---- the dictionary (block_writer_dict.c) ------------------------------------------------------
 */

int block_writer_dict_string(block_writer *w, const char *s, size_t len, uint32_t *id,
                             strata_error *err);
int block_writer_dict_cstr(block_writer *w, const char *s, uint32_t *id, strata_error *err);
int block_writer_dict_mapping(block_writer *w, const w_mapping *m, uint32_t *id, strata_error *err);
int block_writer_dict_function(block_writer *w, const w_function *f, uint32_t *id,
                               strata_error *err);

/* Fingerprint-keyed tables (functions, locations): the key is a 64-bit fingerprint and the value
 * (check << 32) | id, so finding a record costs one slot and never reads the record itself. Two
 * fingerprints sharing 64 bits but not the check chain to a re-hashed key. */
static inline bool block_writer_fingerprint_find(const strata_slot_map *m, uint64_t key,
                                                 uint32_t check, uint32_t *id) {
    if (m->slots == NULL)
        return false;
    for (;;) {
        size_t i = strata_hash_u64(key) & m->mask;
        while (m->slots[i].key != key) {
            if (m->slots[i].key == 0)
                return false;
            i = (i + 1) & m->mask;
        }
        if ((uint32_t)(m->slots[i].value >> 32) == check) {
            *id = (uint32_t)m->slots[i].value;
            return true;
        }
        key = strata_hash_u64(key) | 1;
    }
}

/* Finds the record with fingerprint (key, check), or claims the fresh slot to store it under
 * (*found false; the caller sets the value to (check << 32) | id). NULL when out of memory. */
strata_u64_slot *block_writer_dict_fingerprint_slot(strata_slot_map *m, uint64_t key,
                                                    uint32_t check, bool *found);
void block_writer_dict_location_fingerprint(const location_item *item, uint64_t *key,
                                            uint32_t *check);
/* Interns a location whose fingerprint is (key, check), after checking it. */
int block_writer_dict_location_fingerprinted(block_writer *w, const location_item *item,
                                             uint64_t key, uint32_t check, uint32_t *id,
                                             strata_error *err);
int block_writer_dict_location(block_writer *w, const location_item *item, uint32_t *id,
                               strata_error *err);

/* Interns a stack given as block location ids, leaf first, through the parent-pointer tree. */
int block_writer_dict_stack_chain(block_writer *w, const uint32_t *locations, size_t n,
                                  uint32_t *stack, strata_error *err);

/* The whole-stack cache: a stack (block location ids, leaf first) is found by a 96-bit
 * fingerprint. Samples repeat the same stacks profile after profile, so most stacks cost one
 * fingerprint and one lookup instead of one lookup per frame. A false match needs a 96-bit
 * collision (probability ~n^2 / 2^97). */
static inline void block_writer_stack_fingerprint(const uint32_t *locations, size_t n,
                                                  uint64_t *key, uint32_t *check) {
    uint64_t a, b;
    strata_hash_bytes_pair(locations, n * sizeof *locations, 0x5eed, 0xc0ffee, &a, &b);
    *key = a | 1;
    *check = (uint32_t)(b >> 32);
}

enum { STACK_CACHE_MISS, STACK_CACHE_HIT, STACK_CACHE_COLLISION };

static inline int block_writer_stack_cache_find(const block_writer *w, uint64_t key, uint32_t check,
                                                uint32_t *stack) {
    const strata_slot_map *m = &w->stack_cache;
    if (m->slots == NULL)
        return STACK_CACHE_MISS;
    size_t i = strata_hash_u64(key) & m->mask;
    while (m->slots[i].key != key) {
        if (m->slots[i].key == 0)
            return STACK_CACHE_MISS;
        i = (i + 1) & m->mask;
    }
    uint64_t value = m->slots[i].value;
    if ((uint32_t)(value >> 32) != check)
        return STACK_CACHE_COLLISION; /* 64-bit collision: this stack is not cached */
    *stack = (uint32_t)value;
    return STACK_CACHE_HIT;
}

int block_writer_dict_stack_cache_add(block_writer *w, uint64_t key, uint32_t check, uint32_t stack,
                                      strata_error *err);
/* Finds a whole stack in the cache, or interns it and remembers it. */
int block_writer_dict_stack_cached(block_writer *w, const uint32_t *locations, size_t n,
                                   uint32_t *stack, strata_error *err);

/* Orders string ids by their bytes. */
int block_writer_dict_compare_strings(const block_writer *w, uint32_t a, uint32_t b);
/* qsort_r order of series ids (ctx: the writer): by profile type, then labels. */
int block_writer_dict_compare_series(const void *a, const void *b, void *ctx);
int block_writer_dict_series(block_writer *w, const label_set *labels, const profile_type *type,
                             uint32_t *id, strata_error *err);
/* Interns the set of the n (name, value) string id pairs at scratch.set + 1. */
int block_writer_dict_label_set(block_writer *w, uint32_t n, bool last_wins, uint32_t *id,
                                strata_error *err);

/* ---- spooling (block_writer_spool.c) -----------------------------------------------------------
 */

/* FAILED_PRECONDITION unless a profile of series at time_ns may come next into the spool. */
int block_writer_spool_check_order(block_writer *w, uint32_t series, int64_t time_ns,
                                   strata_error *err);
/* Ends the series being written (rollups, series_label_sets rows); 0 when none is. */
int block_writer_spool_end_series(block_writer *w, strata_error *err);
/* profile commit for a spooled writer: the open profile's kept samples (pairs[0, kept)) and its
 * row go straight into the spool. */
int block_writer_spool_commit(block_writer *w, size_t kept, int64_t total, bool labelled,
                              strata_error *err);

/* ---- encoding (block_writer_encode.c) ----------------------------------------------------------
 */

/* qsort order of uint32_t values. */
int block_writer_compare_u32(const void *a, const void *b);

#endif
