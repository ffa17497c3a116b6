/*
 * block_writer.c - see block_writer.h for the design and block_format.h for the layout.
 */
#include "block/block_writer.h"

#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

#include "block/block_encoder.h"
#include "block/block_format.h"
#include "block/block_rollup.h"
#include "block/ulid.h"
#include "common/clock.h"
#include "common/hash.h"
#include "common/radix_sort.h"

#define DEFAULT_PAGE_SIZE (64u * 1024u)
#define MAX_PAGE_SIZE (16u << 20)
#define MAX_COLUMNS 8

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

/* A u64 -> u64 hash table (open addressing, linear probing, grown at 50% load) whose key and value
 * share one 16-byte slot, so a probe costs one cache miss: the stack table grows to millions of
 * entries per block, the symbol tables to hundreds of thousands. Key 0 marks an empty slot. */
typedef struct map_slot {
    uint64_t key;
    uint64_t value;
} map_slot;

typedef struct slot_map {
    map_slot *slots;
    size_t count;
    size_t mask;
} slot_map;

/* A pprof sample whose stack missed the whole-stack cache, interned after the profile's other
 * samples in root-first order so consecutive stacks share their interned prefix. */
typedef struct stack_miss {
    size_t sample; /* index into sample_scratch */
} stack_miss;

/* Per pprof sample while adding a pprof: its whole-stack fingerprint, its frames (block location
 * ids, leaf first, in profile_frames) and the stack it resolves to. */
typedef struct sample_scratch {
    uint64_t key;   /* fingerprint, first 64 bits (non-zero) */
    uint32_t check; /* fingerprint, 32 more bits */
    uint32_t stack; /* SAMPLE_SKIPPED when every value column is zero */
    size_t frames;  /* offset into profile_frames */
    uint32_t n_frames;
} sample_scratch;

#define SAMPLE_SKIPPED UINT32_MAX

struct block_writer {
    block_writer_options options;
    char *tenant;
    strata_intern strings;

    w_mapping *mappings;
    size_t n_mappings, cap_mappings;
    slot_map mapping_index;
    w_function *functions;
    size_t n_functions, cap_functions;
    slot_map function_index;
    /* a pprof function's content (its strings' bytes and start line) -> function id, so a
     * function seen before costs no string interning */
    slot_map function_content_index;
    w_location *locations;
    size_t n_locations, cap_locations;
    slot_map location_index;
    w_line *lines;
    size_t n_lines, cap_lines;
    w_stack *stacks; /* row i holds stack id i + 1 */
    size_t n_stacks, cap_stacks;
    slot_map stack_index; /* ((parent << 32) | location) + 1 -> stack id */
    /* the last stack interned through the tree, root first, and its node at each depth */
    uint32_t *chain_locations, *chain_nodes;
    size_t chain_len, cap_chain_locations, cap_chain_nodes;
    /* whole-stack cache: 96-bit fingerprint of a location sequence -> stack id, as
     * key = first 64 bits, value = (next 32 bits << 32) | stack id, so a probe is one slot */
    slot_map stack_cache;
    uint32_t *frame_scratch;
    size_t cap_frame_scratch;
    /* per pprof profile: every sample's block location ids and fingerprint, and the samples that
     * missed the cache */
    uint32_t *profile_frames;
    size_t cap_profile_frames;
    sample_scratch *samples_scratch;
    size_t cap_samples_scratch;
    stack_miss *misses;
    size_t n_misses, cap_misses;

    w_series *series;
    size_t n_series, cap_series;
    slot_map series_index;
    uint32_t *label_words; /* (name, value) string id pairs */
    size_t n_label_words, cap_label_words;

    /* pprof sample label sets, de-duplicated by content */
    w_label_set *label_sets;
    size_t n_label_sets, cap_label_sets;
    slot_map label_set_index;
    uint32_t *set_words; /* (name, value) string id pairs */
    size_t n_set_words, cap_set_words;
    uint32_t *set_scratch; /* the pairs of the set being interned */
    size_t cap_set_scratch;
    uint32_t *pprof_sample_sets; /* per pprof sample while adding a pprof: its label set */
    size_t cap_pprof_sample_sets;

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

    /* per-profile scratch, reused */
    w_pair *pairs, *pairs_tmp;
    size_t n_pairs, cap_pairs, cap_pairs_tmp;
    uint32_t *pprof_mapping_ids, *pprof_function_ids, *pprof_location_ids, *pprof_string_ids;
    size_t cap_pprof_mappings, cap_pprof_functions, cap_pprof_locations, cap_pprof_strings;
    /* when the pprof's location ids are small: pprof location id -> block location id + 1 */
    uint32_t *block_location_by_id;
    size_t cap_block_location_by_id, n_block_location_by_id;
    /* per pprof string: a 128-bit hash of its bytes, computed on first use (0 = not yet) */
    uint64_t *pprof_string_hashes;
    size_t cap_pprof_string_hashes;
    /* per pprof function while translating: its content fingerprint */
    uint64_t *function_keys;
    uint32_t *function_checks;
    size_t cap_function_keys, cap_function_checks;
    /* per pprof location while translating: its fingerprint */
    uint64_t *location_keys;
    uint32_t *location_checks;
    size_t cap_location_keys, cap_location_checks;
    w_line *line_scratch;
    size_t cap_line_scratch;
    /* The pprof whose symbols pprof_*_ids translate: the ingester adds each pprof once per sample
     * type, and the translation is reused when the same profile, with the same symbol content
     * (fingerprint), comes again. */
    const pprof_profile *translated;
    uint64_t translated_fingerprint;
    uint32_t *label_scratch;
    size_t cap_label_scratch;

    bool open;
    w_profile current;
    bool finished;
    bool detached; /* made by block_writer_detach: it only finishes */

    /* The dictionary's id (docs/block-format.md 6.12), drawn at the first detach: every block cut
     * from this writer, and the writer itself when it finishes, says which of the dictionary's
     * stacks its own stacks are, so a reader translates each stack once over all of them. */
    bool has_dictionary;
    ulid dictionary;
    uint32_t dictionary_stacks;    /* a detached block: the dictionary's stack count at the cut */
    uint32_t dictionary_locations; /* and its location count */
    uint32_t *stack_origins;       /* a detached block: per stack row, the dictionary's stack id */
    uint32_t *location_origins;    /* and per location row, the dictionary's location id + 1 */

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
};

/* ---- small helpers ---------------------------------------------------------------------- */

static void *grow_array(void *ptr, size_t *cap, size_t need, size_t elem) {
    size_t n = *cap ? *cap : 16;
    while (n < need) {
        if (n > SIZE_MAX / 2 / elem)
            return NULL;
        n *= 2;
    }
    void *p = realloc(ptr, n * elem);
    if (p != NULL)
        *cap = n;
    return p;
}

/* Ensures arr has room for `need` elements, or returns OOM from the enclosing function. */
#define ENSURE_OR_OOM(arr, cap, need)                                                              \
    do {                                                                                           \
        if ((need) > (cap)) {                                                                      \
            void *grown_ = grow_array((arr), &(cap), (need), sizeof *(arr));                       \
            if (grown_ == NULL)                                                                    \
                return strata_error_oom(err);                                                      \
            (arr) = grown_;                                                                        \
        }                                                                                          \
    } while (0)

static int intern_string(block_writer *w, const char *s, size_t len, uint32_t *id,
                         strata_error *err) {
    if (strata_intern_add(&w->strings, s == NULL ? "" : s, s == NULL ? 0 : len, id) != 0)
        return strata_error_set(err, STRATA_RESOURCE_EXHAUSTED,
                                "block writer: string table is full or out of memory (%zu strings)",
                                w->strings.count);
    return 0;
}

static int intern_cstr(block_writer *w, const char *s, uint32_t *id, strata_error *err) {
    return intern_string(w, s, s == NULL ? 0 : strlen(s), id, err);
}

/* Interns pprof string `index` once per translated pprof: pprof_string_ids remembers it (a pprof
 * names most strings many times: a function's name is often its system name, files repeat). */
static int intern_pprof_string(block_writer *w, const pprof_profile *p, int64_t index, uint32_t *id,
                               strata_error *err) {
    if (index >= 0 && (size_t)index < p->n_strings && w->pprof_string_ids[index] != UINT32_MAX) {
        *id = w->pprof_string_ids[index];
        return 0;
    }
    pprof_string s = pprof_string_at(p, index);
    if (intern_string(w, s.ptr, s.len, id, err) != 0)
        return -1;
    if (index >= 0 && (size_t)index < p->n_strings)
        w->pprof_string_ids[index] = *id;
    return 0;
}

static int slot_map_grow(slot_map *m) {
    size_t cap = m->slots == NULL ? (size_t)1 << 12 : (m->mask + 1) * 2;
    map_slot *slots = calloc(cap, sizeof *slots);
    if (slots == NULL)
        return -1;
    if (m->slots != NULL) {
        for (size_t i = 0; i <= m->mask; i++) {
            if (m->slots[i].key == 0)
                continue;
            size_t j = strata_hash_u64(m->slots[i].key) & (cap - 1);
            while (slots[j].key != 0)
                j = (j + 1) & (cap - 1);
            slots[j] = m->slots[i];
        }
    }
    free(m->slots);
    m->slots = slots;
    m->mask = cap - 1;
    return 0;
}

/* Finds key, or claims an empty slot for it (*inserted true, value UINT64_MAX: the caller sets
 * it). Returns NULL on allocation failure. The slot is valid until the next claim. */
static map_slot *slot_map_claim(slot_map *m, uint64_t key, bool *inserted) {
    if ((m->slots == NULL || (m->count + 1) * 2 > m->mask + 1) && slot_map_grow(m) != 0)
        return NULL;
    size_t i = strata_hash_u64(key) & m->mask;
    for (;;) {
        map_slot *slot = &m->slots[i];
        if (slot->key == key) {
            *inserted = false;
            return slot;
        }
        if (slot->key == 0) {
            slot->key = key;
            slot->value = UINT64_MAX;
            m->count++;
            *inserted = true;
            return slot;
        }
        i = (i + 1) & m->mask;
    }
}

static size_t slot_map_bytes(const slot_map *m) {
    return m->slots == NULL ? 0 : (m->mask + 1) * sizeof *m->slots;
}

typedef bool (*dedup_equal_fn)(const block_writer *w, uint64_t id, const void *item);

/* Finds the entry equal to item among those stored under hash h (re-hashing on collisions), or the
 * fresh slot to insert it under (*found false; the caller stores the new id there). The caller
 * has already made room to append, so inserting cannot fail after this. */
static uint64_t *dedup_slot(slot_map *m, uint64_t h, dedup_equal_fn equal, const block_writer *w,
                            const void *item, bool *found) {
    uint64_t key = h != 0 ? h : 1;
    for (;;) {
        bool inserted;
        map_slot *slot = slot_map_claim(m, key, &inserted);
        if (slot == NULL)
            return NULL;
        if (inserted) {
            *found = false;
            return &slot->value;
        }
        if (equal(w, slot->value, item)) {
            *found = true;
            return &slot->value;
        }
        key = strata_hash_u64(key) | 1;
    }
}

/* Fingerprint-keyed tables (functions, locations): the key is a 64-bit fingerprint and the value
 * (check << 32) | id, so finding a record costs one slot and never reads the record itself. Two
 * fingerprints sharing 64 bits but not the check chain to a re-hashed key. */
static bool fingerprint_find(const slot_map *m, uint64_t key, uint32_t check, uint32_t *id) {
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
static map_slot *fingerprint_slot(slot_map *m, uint64_t key, uint32_t check, bool *found) {
    for (;;) {
        bool inserted;
        map_slot *slot = slot_map_claim(m, key, &inserted);
        if (slot == NULL)
            return NULL;
        if (inserted || (uint32_t)(slot->value >> 32) == check) {
            *found = !inserted;
            return slot;
        }
        key = strata_hash_u64(key) | 1;
    }
}

static inline void prefetch_slot(const slot_map *m, uint64_t key) {
    if (m->slots != NULL)
        __builtin_prefetch(&m->slots[strata_hash_u64(key) & m->mask]);
}

/* ---- symbols ---------------------------------------------------------------------------- */

static bool mapping_equal(const block_writer *w, uint64_t id, const void *item) {
    const w_mapping *a = item;
    if (id >= w->n_mappings)
        return false;
    const w_mapping *b = &w->mappings[id];
    return a->start == b->start && a->limit == b->limit && a->offset == b->offset &&
           a->file == b->file && a->build_id == b->build_id && a->flags == b->flags;
}

static int intern_mapping(block_writer *w, const w_mapping *m, uint32_t *id, strata_error *err) {
    ENSURE_OR_OOM(w->mappings, w->cap_mappings, w->n_mappings + 1);
    uint64_t h = strata_hash_combine(strata_hash_combine(m->start, m->limit), m->offset);
    h = strata_hash_combine(h, (uint64_t)m->file << 32 | m->build_id);
    h = strata_hash_combine(h, m->flags);
    bool found;
    uint64_t *slot = dedup_slot(&w->mapping_index, h, mapping_equal, w, m, &found);
    if (slot == NULL)
        return strata_error_oom(err);
    if (!found) {
        *slot = w->n_mappings;
        w->mappings[w->n_mappings++] = *m;
    }
    *id = (uint32_t)*slot;
    return 0;
}

static void function_fingerprint(const w_function *f, uint64_t *key, uint32_t *check) {
    strata_fingerprint fp;
    strata_fingerprint_init(&fp, 3);
    strata_fingerprint_add(&fp, (uint64_t)f->name << 32 | f->system_name);
    strata_fingerprint_add(&fp, f->file);
    strata_fingerprint_add(&fp, (uint64_t)f->start_line);
    strata_fingerprint_finish(&fp, key, check);
}

static int intern_function(block_writer *w, const w_function *f, uint32_t *id, strata_error *err) {
    ENSURE_OR_OOM(w->functions, w->cap_functions, w->n_functions + 1);
    uint64_t key;
    uint32_t check;
    function_fingerprint(f, &key, &check);
    bool found;
    map_slot *slot = fingerprint_slot(&w->function_index, key, check, &found);
    if (slot == NULL)
        return strata_error_oom(err);
    if (!found) {
        slot->value = (uint64_t)check << 32 | w->n_functions;
        w->functions[w->n_functions++] = *f;
    }
    *id = (uint32_t)slot->value;
    return 0;
}

typedef struct location_item {
    w_location loc; /* first_line unused */
    const w_line *lines;
} location_item;

static void location_fingerprint(const location_item *item, uint64_t *key, uint32_t *check) {
    strata_fingerprint fp;
    strata_fingerprint_init(&fp, 3 + 2 * (uint64_t)item->loc.line_count);
    strata_fingerprint_add(&fp, item->loc.address);
    strata_fingerprint_add(&fp, (uint64_t)item->loc.mapping << 32 | item->loc.flags);
    strata_fingerprint_add(&fp, item->loc.line_count);
    for (uint32_t i = 0; i < item->loc.line_count; i++) {
        strata_fingerprint_add(&fp, item->lines[i].function);
        strata_fingerprint_add(&fp, (uint64_t)item->lines[i].line);
    }
    strata_fingerprint_finish(&fp, key, check);
}

/* The one set of rules a location must meet to enter a block, whichever path brings it: a pprof
 * pushed through WriteRaw (the ingester), the symbolized path, or the id path (the compactor's
 * merge, copying locations out of blocks the ingester wrote). So whatever the ingester accepted,
 * the merge accepts too. The mapping is 0 (none) or an interned mapping id + 1; every line names
 * an interned function; and a location may have no lines at all: an address with its mapping only
 * (stripped binaries, [vdso], deleted executables), kept as it is and shown by queries as its
 * address. */
static int check_location(const block_writer *w, const location_item *item, strata_error *err) {
    if (item->loc.mapping > w->n_mappings)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "block writer: location mapping %u out of range (%zu mappings)",
                                item->loc.mapping, w->n_mappings);
    if (item->loc.line_count > 0 && item->lines == NULL)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "block writer: location has %u lines but no line array",
                                item->loc.line_count);
    for (uint32_t i = 0; i < item->loc.line_count; i++) {
        if (item->lines[i].function >= w->n_functions)
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "block writer: line function %u out of range (%zu functions)",
                                    item->lines[i].function, w->n_functions);
    }
    return 0;
}

/* Interns a location whose fingerprint is (key, check), after check_location. */
static int intern_location_fingerprinted(block_writer *w, const location_item *item, uint64_t key,
                                         uint32_t check, uint32_t *id, strata_error *err) {
    if (check_location(w, item, err) != 0)
        return -1;
    if (w->n_locations >= UINT32_MAX - 2 || w->n_lines + item->loc.line_count >= UINT32_MAX)
        return strata_error_set(err, STRATA_RESOURCE_EXHAUSTED,
                                "block writer: too many locations for one block");
    ENSURE_OR_OOM(w->locations, w->cap_locations, w->n_locations + 1);
    ENSURE_OR_OOM(w->lines, w->cap_lines, w->n_lines + item->loc.line_count);
    bool found;
    map_slot *slot = fingerprint_slot(&w->location_index, key, check, &found);
    if (slot == NULL)
        return strata_error_oom(err);
    if (!found) {
        slot->value = (uint64_t)check << 32 | w->n_locations;
        w_location loc = item->loc;
        loc.first_line = (uint32_t)w->n_lines;
        if (loc.line_count > 0)
            memcpy(&w->lines[w->n_lines], item->lines, loc.line_count * sizeof *item->lines);
        w->n_lines += loc.line_count;
        w->locations[w->n_locations++] = loc;
    }
    *id = (uint32_t)slot->value;
    return 0;
}

static int intern_location(block_writer *w, const location_item *item, uint32_t *id,
                           strata_error *err) {
    uint64_t key;
    uint32_t check;
    location_fingerprint(item, &key, &check);
    return intern_location_fingerprinted(w, item, key, check, id, err);
}

/* Stack ids are rows + 1; (parent, location) is an exact 64-bit key, so no equality check. */
static int intern_stack(block_writer *w, uint32_t parent, uint32_t location, uint32_t *id,
                        strata_error *err) {
    slot_map *m = &w->stack_index;
    if ((m->slots == NULL || (m->count + 1) * 2 > m->mask + 1) && slot_map_grow(m) != 0)
        return strata_error_oom(err);
    uint64_t key = ((uint64_t)parent << 32 | location) + 1;
    size_t i = strata_hash_u64(key) & m->mask;
    for (;;) {
        uint64_t k = m->slots[i].key;
        if (k == key) {
            *id = (uint32_t)m->slots[i].value;
            return 0;
        }
        if (k == 0)
            break;
        i = (i + 1) & m->mask;
    }
    if (w->n_stacks >= UINT32_MAX - 2)
        return strata_error_set(err, STRATA_RESOURCE_EXHAUSTED,
                                "block writer: too many distinct stacks for one block");
    ENSURE_OR_OOM(w->stacks, w->cap_stacks, w->n_stacks + 1);
    w->stacks[w->n_stacks].parent = parent;
    w->stacks[w->n_stacks].location = location;
    w->n_stacks++;
    m->slots[i].key = key;
    m->slots[i].value = w->n_stacks;
    m->count++;
    *id = (uint32_t)w->n_stacks;
    return 0;
}

/* ---- series ----------------------------------------------------------------------------- */

static int compare_string_ids(const block_writer *w, uint32_t a, uint32_t b) {
    if (a == b)
        return 0;
    uint32_t la = w->strings.lengths[a], lb = w->strings.lengths[b];
    int c = memcmp(w->strings.strings[a], w->strings.strings[b], la < lb ? la : lb);
    if (c != 0)
        return c;
    return la < lb ? -1 : la > lb ? 1 : 0;
}

typedef struct series_item {
    uint32_t type[5];
    uint32_t delta;
    const uint32_t *labels; /* pairs */
    uint32_t label_count;
} series_item;

static bool series_equal(const block_writer *w, uint64_t id, const void *item) {
    const series_item *a = item;
    if (id >= w->n_series)
        return false;
    const w_series *b = &w->series[id];
    return memcmp(a->type, b->type, sizeof a->type) == 0 && a->delta == b->delta &&
           a->label_count == b->label_count &&
           memcmp(a->labels, &w->label_words[b->first_label],
                  2 * (size_t)a->label_count * sizeof *a->labels) == 0;
}

static int collect_labels(block_writer *w, const label_set *labels, uint32_t *count,
                          strata_error *err) {
    size_t n = labels == NULL ? 0 : labels->count;
    ENSURE_OR_OOM(w->label_scratch, w->cap_label_scratch, 2 * n + 2);
    uint32_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const strata_label *l = &labels->labels[i];
        if (l->value == NULL || l->value[0] == '\0')
            continue;
        size_t name_len = l->name == NULL ? 0 : strlen(l->name);
        if (!label_name_is_valid(l->name == NULL ? "" : l->name, name_len))
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "block writer: invalid label name \"%s\"",
                                    l->name == NULL ? "" : l->name);
        if (strcmp(l->name, STRATA_LABEL_NAME) == 0)
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "block writer: labels must not contain %s; the profile type "
                                    "carries the name",
                                    STRATA_LABEL_NAME);
        if (intern_string(w, l->name, name_len, &w->label_scratch[2 * k], err) != 0 ||
            intern_cstr(w, l->value, &w->label_scratch[2 * k + 1], err) != 0)
            return -1;
        k++;
    }
    /* insertion sort by name: label sets are small */
    for (uint32_t i = 1; i < k; i++) {
        uint32_t name = w->label_scratch[2 * i], value = w->label_scratch[2 * i + 1];
        uint32_t j = i;
        while (j > 0 && compare_string_ids(w, w->label_scratch[2 * (j - 1)], name) > 0) {
            w->label_scratch[2 * j] = w->label_scratch[2 * (j - 1)];
            w->label_scratch[2 * j + 1] = w->label_scratch[2 * (j - 1) + 1];
            j--;
        }
        w->label_scratch[2 * j] = name;
        w->label_scratch[2 * j + 1] = value;
    }
    for (uint32_t i = 1; i < k; i++) {
        if (w->label_scratch[2 * i] == w->label_scratch[2 * (i - 1)])
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "block writer: label \"%s\" appears twice",
                                    w->strings.strings[w->label_scratch[2 * i]]);
    }
    *count = k;
    return 0;
}

static int intern_type(block_writer *w, const profile_type *type, series_item *item,
                       strata_error *err) {
    if (type == NULL || type->name == NULL || type->name[0] == '\0')
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "block writer: profile type has no name");
    const char *parts[5] = {type->name, type->sample_type, type->sample_unit, type->period_type,
                            type->period_unit};
    for (int i = 0; i < 5; i++) {
        if (intern_cstr(w, parts[i], &item->type[i], err) != 0)
            return -1;
    }
    item->delta = type->delta ? 1 : 0;
    return 0;
}

static int intern_series(block_writer *w, const label_set *labels, const profile_type *type,
                         uint32_t *id, strata_error *err) {
    series_item item;
    if (intern_type(w, type, &item, err) != 0 ||
        collect_labels(w, labels, &item.label_count, err) != 0)
        return -1;
    item.labels = w->label_scratch;
    ENSURE_OR_OOM(w->series, w->cap_series, w->n_series + 1);
    ENSURE_OR_OOM(w->label_words, w->cap_label_words, w->n_label_words + 2 * item.label_count);
    uint64_t h = strata_hash_bytes(item.type, sizeof item.type, item.delta);
    h = strata_hash_bytes(item.labels, 2 * (size_t)item.label_count * sizeof *item.labels, h);
    bool found;
    uint64_t *slot = dedup_slot(&w->series_index, h, series_equal, w, &item, &found);
    if (slot == NULL)
        return strata_error_oom(err);
    if (!found) {
        w_series *s = &w->series[w->n_series];
        memcpy(s->type, item.type, sizeof s->type);
        s->delta = item.delta;
        s->first_label = (uint32_t)w->n_label_words;
        s->label_count = item.label_count;
        s->n_profiles = 0;
        if (item.label_count > 0)
            memcpy(&w->label_words[w->n_label_words], item.labels,
                   2 * (size_t)item.label_count * sizeof *item.labels);
        w->n_label_words += 2 * item.label_count;
        *slot = w->n_series++;
    }
    *id = (uint32_t)*slot;
    return 0;
}

/* ---- sample label sets ------------------------------------------------------------------ */

static bool label_set_equal(const block_writer *w, uint64_t id, const void *item) {
    const uint32_t *words = item; /* count, then the pairs */
    if (id == 0 || id > w->n_label_sets)
        return false;
    const w_label_set *b = &w->label_sets[id - 1];
    return b->count == words[0] &&
           memcmp(&w->set_words[b->first], words + 1, 2 * (size_t)b->count * sizeof *words) == 0;
}

/* Interns the set of the n (name, value) string id pairs at set_scratch + 1 (set_scratch[0] is
 * scratch for the count). The pairs are sorted by name first (a stable sort); of pairs with one
 * name the last is kept when last_wins (pprof: as Parca, the last value of a repeated key wins),
 * else a repeated name is INVALID_ARGUMENT. n == 0 gives the empty set, id 0. */
static int intern_label_set(block_writer *w, uint32_t n, bool last_wins, uint32_t *id,
                            strata_error *err) {
    uint32_t *pairs = w->set_scratch + 1;
    for (uint32_t i = 1; i < n; i++) { /* insertion sort: sets are small */
        uint32_t name = pairs[2 * i], value = pairs[2 * i + 1];
        uint32_t j = i;
        while (j > 0 && compare_string_ids(w, pairs[2 * (j - 1)], name) > 0) {
            pairs[2 * j] = pairs[2 * (j - 1)];
            pairs[2 * j + 1] = pairs[2 * (j - 1) + 1];
            j--;
        }
        pairs[2 * j] = name;
        pairs[2 * j + 1] = value;
    }
    uint32_t k = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (k > 0 && pairs[2 * (k - 1)] == pairs[2 * i]) {
            if (!last_wins)
                return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                        "block writer: sample label \"%s\" appears twice in a set",
                                        w->strings.strings[pairs[2 * i]]);
            pairs[2 * (k - 1) + 1] = pairs[2 * i + 1];
            continue;
        }
        pairs[2 * k] = pairs[2 * i];
        pairs[2 * k + 1] = pairs[2 * i + 1];
        k++;
    }
    if (k == 0) {
        *id = 0;
        return 0;
    }
    if (w->n_label_sets >= UINT32_MAX - 2)
        return strata_error_set(err, STRATA_RESOURCE_EXHAUSTED,
                                "block writer: too many sample label sets for one block");
    w->set_scratch[0] = k;
    ENSURE_OR_OOM(w->label_sets, w->cap_label_sets, w->n_label_sets + 1);
    ENSURE_OR_OOM(w->set_words, w->cap_set_words, w->n_set_words + 2 * (size_t)k);
    uint64_t h = strata_hash_bytes(w->set_scratch, (1 + 2 * (size_t)k) * sizeof *pairs, 0x1abe1);
    bool found;
    uint64_t *slot = dedup_slot(&w->label_set_index, h, label_set_equal, w, w->set_scratch, &found);
    if (slot == NULL)
        return strata_error_oom(err);
    if (!found) {
        w->label_sets[w->n_label_sets] = (w_label_set){(uint32_t)w->n_set_words, k};
        memcpy(&w->set_words[w->n_set_words], pairs, 2 * (size_t)k * sizeof *pairs);
        w->n_set_words += 2 * (size_t)k;
        *slot = ++w->n_label_sets;
    }
    *id = (uint32_t)*slot;
    return 0;
}

/* The label set of pprof sample i: its string labels (numeric labels, and labels with an empty
 * key or value, are dropped, as Parca does), with the pprof's strings interned once each. */
static int pprof_sample_label_set(block_writer *w, const pprof_profile *p, size_t i, uint32_t *id,
                                  strata_error *err) {
    const pprof_sample *s = &p->samples[i];
    if (s->label_offset > p->n_sample_labels ||
        s->label_count > p->n_sample_labels - s->label_offset)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "pprof sample %zu: labels out of range", i);
    ENSURE_OR_OOM(w->set_scratch, w->cap_set_scratch, 2 * (size_t)s->label_count + 1);
    uint32_t n = 0;
    for (uint32_t j = 0; j < s->label_count; j++) {
        const pprof_label *l = &p->sample_labels[s->label_offset + j];
        if (l->str <= 0 || l->key <= 0 || pprof_string_at(p, l->str).len == 0 ||
            pprof_string_at(p, l->key).len == 0)
            continue;
        if (intern_pprof_string(w, p, l->key, &w->set_scratch[1 + 2 * n], err) != 0 ||
            intern_pprof_string(w, p, l->str, &w->set_scratch[2 + 2 * n], err) != 0)
            return -1;
        n++;
    }
    return intern_label_set(w, n, true, id, err);
}

/* Same labels, as (key, str) string indexes, as the previous sample's: the same set. */
static bool same_pprof_labels(const pprof_profile *p, const pprof_sample *a,
                              const pprof_sample *b) {
    if (a->label_count != b->label_count)
        return false;
    for (uint32_t j = 0; j < a->label_count; j++) {
        const pprof_label *x = &p->sample_labels[a->label_offset + j];
        const pprof_label *y = &p->sample_labels[b->label_offset + j];
        if (x->key != y->key || x->str != y->str)
            return false;
    }
    return true;
}

/* Resolves every kept pprof sample's label set into pprof_sample_sets; false in *labelled when the
 * pprof has no sample labels at all (the array is then not filled). */
static int resolve_pprof_label_sets(block_writer *w, const pprof_profile *p, bool *labelled,
                                    strata_error *err) {
    *labelled = false;
    if (p->n_sample_labels == 0)
        return 0;
    ENSURE_OR_OOM(w->pprof_sample_sets, w->cap_pprof_sample_sets, p->n_samples + 1);
    size_t prev = SIZE_MAX;
    for (size_t i = 0; i < p->n_samples; i++) {
        w->pprof_sample_sets[i] = 0;
        if (w->samples_scratch[i].stack == SAMPLE_SKIPPED || p->samples[i].label_count == 0)
            continue;
        if (prev != SIZE_MAX && same_pprof_labels(p, &p->samples[prev], &p->samples[i])) {
            w->pprof_sample_sets[i] = w->pprof_sample_sets[prev];
            continue;
        }
        if (pprof_sample_label_set(w, p, i, &w->pprof_sample_sets[i], err) != 0)
            return -1;
        prev = i;
    }
    *labelled = true;
    return 0;
}

/* ---- profiles --------------------------------------------------------------------------- */

void block_writer_options_default(block_writer_options *options) {
    options->page_size = DEFAULT_PAGE_SIZE;
    options->zstd_level = 3;
    options->tenant = "anonymous";
    options->compaction_level = 1;
    options->write_rollups = true;
}

block_writer *block_writer_new(const block_writer_options *options, strata_error *err) {
    block_writer *w = calloc(1, sizeof *w);
    if (w == NULL) {
        strata_error_oom(err);
        return NULL;
    }
    block_writer_options_default(&w->options);
    if (options != NULL)
        w->options = *options;
    if (w->options.page_size < 256)
        w->options.page_size = 256;
    if (w->options.page_size > MAX_PAGE_SIZE)
        w->options.page_size = MAX_PAGE_SIZE;
    const char *tenant = w->options.tenant != NULL ? w->options.tenant : "anonymous";
    w->tenant = strdup(tenant);
    uint32_t empty;
    if (w->tenant == NULL || strata_intern_init(&w->strings) != 0 ||
        strata_intern_add(&w->strings, "", 0, &empty) != 0) {
        block_writer_free(w);
        strata_error_oom(err);
        return NULL;
    }
    w->options.tenant = w->tenant;
    return w;
}

void block_writer_free(block_writer *w) {
    if (w == NULL)
        return;
    free(w->tenant);
    strata_intern_free(&w->strings);
    free(w->mappings);
    free(w->mapping_index.slots);
    free(w->functions);
    free(w->function_index.slots);
    free(w->function_content_index.slots);
    free(w->pprof_string_hashes);
    free(w->function_keys);
    free(w->function_checks);
    free(w->locations);
    free(w->location_index.slots);
    free(w->lines);
    free(w->stacks);
    free(w->stack_origins);
    free(w->location_origins);
    free(w->stack_index.slots);
    free(w->chain_locations);
    free(w->chain_nodes);
    free(w->profile_frames);
    free(w->misses);
    free(w->stack_cache.slots);
    free(w->samples_scratch);
    free(w->frame_scratch);
    free(w->series);
    free(w->series_index.slots);
    free(w->label_words);
    free(w->label_sets);
    free(w->label_set_index.slots);
    free(w->set_words);
    free(w->set_scratch);
    free(w->pprof_sample_sets);
    free(w->sample_label_sets);
    free(w->profiles);
    free(w->sample_stacks);
    free(w->sample_values);
    free(w->pairs);
    free(w->pairs_tmp);
    free(w->pprof_mapping_ids);
    free(w->pprof_function_ids);
    free(w->pprof_location_ids);
    free(w->pprof_string_ids);
    free(w->block_location_by_id);
    free(w->location_keys);
    free(w->location_checks);
    free(w->line_scratch);
    free(w->label_scratch);
    block_table_encoder_free(&w->spool_profiles);
    block_table_encoder_free(&w->spool_samples);
    block_table_encoder_free(&w->spool_rollups);
    block_table_encoder_free(&w->spool_series_sets);
    block_rollup_builder_free(w->spool_rollup);
    block_object_free(w->spool);
    free(w->spool_rollup_series);
    free(w->spool_set_stamp);
    free(w->spool_sets);
    free(w);
}

block_writer *block_writer_new_spooled(const block_writer_options *options, int fd,
                                       strata_error *err) {
    block_writer *w = block_writer_new(options, err);
    if (w == NULL)
        return NULL;
    w->spool_series = UINT32_MAX;
    w->spool = block_object_new_file(fd, w->options.page_size, w->options.zstd_level, err);
    if (w->spool == NULL ||
        (w->options.write_rollups && (w->spool_rollup = block_rollup_builder_new(err)) == NULL)) {
        block_writer_free(w);
        return NULL;
    }
    /* every column, the label_set ones too: a version 1 footer leaves them out (block_encoder.h) */
    block_table_encoder_begin(&w->spool_profiles, w->spool, BLOCK_TABLE_PROFILES,
                              block_table_schema_get(BLOCK_TABLE_PROFILES)->n_columns);
    block_table_encoder_begin(&w->spool_samples, w->spool, BLOCK_TABLE_SAMPLES,
                              block_table_schema_get(BLOCK_TABLE_SAMPLES)->n_columns);
    block_table_encoder_begin(&w->spool_rollups, w->spool, BLOCK_TABLE_ROLLUP_STACKS,
                              block_table_schema_get(BLOCK_TABLE_ROLLUP_STACKS)->n_columns);
    block_table_encoder_begin(&w->spool_series_sets, w->spool, BLOCK_TABLE_SERIES_LABEL_SETS,
                              block_table_schema_get(BLOCK_TABLE_SERIES_LABEL_SETS)->n_columns);
    return w;
}

/* ---- spooling (block_writer_new_spooled) ------------------------------------------------- */

static int compare_series(const void *a, const void *b, void *ctx);

/* A spooled writer takes the profiles of one series after another, in the block's series order,
 * and each series' profiles in time order. */
static int spool_check_order(block_writer *w, uint32_t series, int64_t time_ns, strata_error *err) {
    if (w->spool_series == UINT32_MAX)
        return 0;
    if (series == w->spool_series) {
        if (time_ns < w->spool_last_time)
            return strata_error_set(err, STRATA_FAILED_PRECONDITION,
                                    "block writer: a spooled block takes a series' profiles in "
                                    "time order (%lld after %lld)",
                                    (long long)time_ns, (long long)w->spool_last_time);
        return 0;
    }
    if (w->series[series].n_profiles == 0 && compare_series(&w->spool_series, &series, w) < 0)
        return 0;
    return strata_error_set(err, STRATA_FAILED_PRECONDITION,
                            "block writer: a spooled block takes series in (profile type, "
                            "labels) order, each series once");
}

static int spool_rollup_row(void *ctx, uint32_t stack, uint32_t set, int64_t value,
                            strata_error *err) {
    block_writer *w = ctx;
    (void)err; /* encoder allocation failures are reported when the table ends */
    block_table_encoder *t = &w->spool_rollups;
    block_table_encoder_put(t, BLOCK_COL_ROLLUP_STACKS_STACK, stack);
    block_table_encoder_put(t, BLOCK_COL_ROLLUP_STACKS_VALUE, (uint64_t)value);
    block_table_encoder_put(t, BLOCK_COL_ROLLUP_STACKS_LABEL_SET, set);
    block_table_encoder_end_row(t);
    return 0;
}

static int compare_u32(const void *a, const void *b);

/* Ends the series being written: its rollup rows and rollup_series entry, its series_label_sets
 * rows. */
static int spool_end_series(block_writer *w, strata_error *err) {
    if (w->spool_series == UINT32_MAX)
        return 0;
    uint32_t out = w->spool_series_out;
    ENSURE_OR_OOM(w->spool_rollup_series, w->cap_spool_rollup_series, (size_t)out + 1);
    if (w->options.write_rollups &&
        block_rollup_builder_end_series(w->spool_rollup, spool_rollup_row, w,
                                        &w->spool_rollup_series[out], err) != 0)
        return -1;
    if (w->n_spool_sets > 1)
        qsort(w->spool_sets, w->n_spool_sets, sizeof *w->spool_sets, compare_u32);
    for (size_t i = 0; i < w->n_spool_sets; i++) {
        block_table_encoder_put(&w->spool_series_sets, BLOCK_COL_SERIES_LABEL_SETS_SERIES, out);
        block_table_encoder_put(&w->spool_series_sets, BLOCK_COL_SERIES_LABEL_SETS_LABEL_SET,
                                w->spool_sets[i]);
        block_table_encoder_end_row(&w->spool_series_sets);
    }
    w->n_spool_sets = 0;
    w->spool_series_out++;
    w->spool_series = UINT32_MAX;
    return 0;
}

/* Notes the label sets of the open profile's kept samples (pairs[0, kept)) for its series. */
static int spool_note_sets(block_writer *w, size_t kept, strata_error *err) {
    size_t need = w->n_label_sets + 1;
    if (need > w->cap_spool_set_stamp) {
        size_t old = w->cap_spool_set_stamp;
        ENSURE_OR_OOM(w->spool_set_stamp, w->cap_spool_set_stamp, need);
        memset(w->spool_set_stamp + old, 0, (w->cap_spool_set_stamp - old) * sizeof(uint32_t));
    }
    uint32_t stamp = w->spool_series_out + 1;
    for (size_t i = 0; i < kept; i++) {
        uint32_t set = pair_label_set(&w->pairs[i]);
        if (set == 0 || w->spool_set_stamp[set] == stamp)
            continue;
        w->spool_set_stamp[set] = stamp;
        ENSURE_OR_OOM(w->spool_sets, w->cap_spool_sets, w->n_spool_sets + 1);
        w->spool_sets[w->n_spool_sets++] = set;
    }
    return 0;
}

/* commit_profile for a spooled writer: the open profile's kept samples (pairs[0, kept)) and its
 * row go straight into the spool. */
static int spool_commit(block_writer *w, size_t kept, int64_t total, bool labelled,
                        strata_error *err) {
    w_profile *p = &w->current;
    if (p->series != w->spool_series) {
        if (spool_end_series(w, err) != 0)
            return -1;
        const w_series *s = &w->series[p->series];
        w->spool_series = p->series;
        w->spool_scale =
            block_rollup_scale(w->strings.strings[s->type[1]], w->strings.strings[s->type[2]]);
    }
    if (labelled && spool_note_sets(w, kept, err) != 0)
        return -1;
    ENSURE_OR_OOM(w->sample_stacks, w->cap_sample_stacks, kept + 1);
    ENSURE_OR_OOM(w->sample_values, w->cap_sample_values, kept + 1);
    ENSURE_OR_OOM(w->sample_label_sets, w->cap_sample_label_sets, kept + 1);
    w->spool_broken = true; /* until the profile is written whole */
    block_table_encoder *t = &w->spool_samples;
    for (size_t i = 0; i < kept; i++) {
        w->sample_stacks[i] = pair_stack(&w->pairs[i]);
        w->sample_values[i] = pair_value(&w->pairs[i]);
        w->sample_label_sets[i] = pair_label_set(&w->pairs[i]);
        block_table_encoder_put(t, BLOCK_COL_SAMPLES_STACK, w->sample_stacks[i]);
        block_table_encoder_put(t, BLOCK_COL_SAMPLES_VALUE, (uint64_t)w->sample_values[i]);
        block_table_encoder_put(t, BLOCK_COL_SAMPLES_LABEL_SET, w->sample_label_sets[i]);
        block_table_encoder_end_row(t);
    }
    t = &w->spool_profiles;
    block_table_encoder_put(t, BLOCK_COL_PROFILES_SERIES, w->spool_series_out);
    block_table_encoder_put(t, BLOCK_COL_PROFILES_TIME, (uint64_t)p->time_ns);
    block_table_encoder_put(t, BLOCK_COL_PROFILES_DURATION, (uint64_t)p->duration_ns);
    block_table_encoder_put(t, BLOCK_COL_PROFILES_PERIOD, (uint64_t)p->period);
    block_table_encoder_put(t, BLOCK_COL_PROFILES_TOTAL, (uint64_t)total);
    block_table_encoder_put(t, BLOCK_COL_PROFILES_FIRST_SAMPLE, w->n_samples);
    block_table_encoder_put(t, BLOCK_COL_PROFILES_SAMPLE_COUNT, kept);
    block_table_encoder_end_row(t);
    if (w->options.write_rollups) {
        block_rollup_profile rp = {w->spool_series_out, w->spool_scale ? p->period : 1,
                                   w->sample_stacks,    labelled ? w->sample_label_sets : NULL,
                                   w->sample_values,    (uint32_t)kept};
        if (block_rollup_builder_add(w->spool_rollup, &rp, err) != 0)
            return -1;
    }
    if (w->n_profiles == 0 || p->time_ns < w->spool_min_time)
        w->spool_min_time = p->time_ns;
    if (w->n_profiles == 0 || p->time_ns > w->spool_max_time)
        w->spool_max_time = p->time_ns;
    w->spool_last_time = p->time_ns;
    w->spool_broken = false;
    w->samples_labelled |= labelled;
    w->n_samples += kept;
    w->n_profiles++;
    w->series[p->series].n_profiles++;
    w->open = false;
    w->n_pairs = 0;
    return 0;
}

static int check_writable(const block_writer *w, strata_error *err) {
    if (w->spool_broken)
        return strata_error_set(err, STRATA_FAILED_PRECONDITION,
                                "block writer: a profile failed half-way into the spool; the "
                                "block cannot be finished");
    if (w->finished)
        return strata_error_set(err, STRATA_FAILED_PRECONDITION, "block writer: already finished");
    if (w->detached)
        return strata_error_set(err, STRATA_FAILED_PRECONDITION,
                                "block writer: a detached block can only be finished");
    return 0;
}

static int start_profile(block_writer *w, const label_set *labels, const profile_type *type,
                         int64_t time_ns, int64_t duration_ns, int64_t period, strata_error *err) {
    if (check_writable(w, err) != 0)
        return -1;
    if (w->open)
        return strata_error_set(err, STRATA_FAILED_PRECONDITION,
                                "block writer: a profile is already open; end it first");
    if (w->n_profiles >= UINT32_MAX - 1)
        return strata_error_set(err, STRATA_RESOURCE_EXHAUSTED,
                                "block writer: too many profiles for one block");
    memset(&w->current, 0, sizeof w->current);
    if (intern_series(w, labels, type, &w->current.series, err) != 0)
        return -1;
    if (w->spool != NULL && spool_check_order(w, w->current.series, time_ns, err) != 0)
        return -1;
    w->current.time_ns = time_ns;
    w->current.duration_ns = duration_ns;
    w->current.period = period;
    w->n_pairs = 0;
    w->open = true;
    return 0;
}

static int push_pair(block_writer *w, uint32_t stack, uint32_t set, int64_t value,
                     strata_error *err) {
    ENSURE_OR_OOM(w->pairs, w->cap_pairs, w->n_pairs + 1);
    w->pairs[w->n_pairs++] = make_pair(stack, set, value);
    return 0;
}

/* Sorts the open profile's pairs by (stack, label set). */
static int sort_pairs(block_writer *w, strata_error *err) {
    ENSURE_OR_OOM(w->pairs_tmp, w->cap_pairs_tmp, w->n_pairs);
    strata_radix_sort(w->pairs, w->pairs_tmp, w->n_pairs);
    return 0;
}

/* Sorts the open profile's pairs by (stack, label set), sums duplicates, drops zeros, appends the
 * samples and the profile. */
static int commit_profile(block_writer *w, strata_error *err) {
    if (sort_pairs(w, err) != 0)
        return -1;
    size_t kept = 0;
    int64_t total = 0;
    bool labelled = false;
    for (size_t i = 0; i < w->n_pairs;) {
        uint64_t key = w->pairs[i].key;
        uint32_t stack = pair_stack(&w->pairs[i]), set = pair_label_set(&w->pairs[i]);
        int64_t sum = 0;
        for (; i < w->n_pairs && w->pairs[i].key == key; i++) {
            if (__builtin_add_overflow(sum, pair_value(&w->pairs[i]), &sum))
                return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                        "block writer: sample values of stack %u overflow int64",
                                        stack);
        }
        if (sum == 0)
            continue;
        if (__builtin_add_overflow(total, sum, &total))
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "block writer: the profile's total overflows int64");
        w->pairs[kept] = make_pair(stack, set, sum);
        labelled |= set != 0;
        kept++;
    }
    if (w->spool != NULL)
        return spool_commit(w, kept, total, labelled, err);
    ENSURE_OR_OOM(w->sample_stacks, w->cap_sample_stacks, w->n_samples + kept);
    ENSURE_OR_OOM(w->sample_values, w->cap_sample_values, w->n_samples + kept);
    ENSURE_OR_OOM(w->profiles, w->cap_profiles, w->n_profiles + 1);
    if (labelled || w->samples_labelled) {
        ENSURE_OR_OOM(w->sample_label_sets, w->cap_sample_label_sets, w->n_samples + kept + 1);
        if (!w->samples_labelled) /* the first labelled samples: the earlier ones have none */
            memset(w->sample_label_sets, 0, w->n_samples * sizeof *w->sample_label_sets);
        w->samples_labelled = true;
        for (size_t i = 0; i < kept; i++)
            w->sample_label_sets[w->n_samples + i] = pair_label_set(&w->pairs[i]);
    }
    for (size_t i = 0; i < kept; i++) {
        w->sample_stacks[w->n_samples + i] = pair_stack(&w->pairs[i]);
        w->sample_values[w->n_samples + i] = pair_value(&w->pairs[i]);
    }
    w->current.first_sample = w->n_samples;
    w->current.sample_count = (uint32_t)kept;
    w->current.total = total;
    w->n_samples += kept;
    w->profiles[w->n_profiles++] = w->current;
    w->series[w->current.series].n_profiles++;
    w->open = false;
    w->n_pairs = 0;
    return 0;
}

/* ---- pprof path ------------------------------------------------------------------------- */

static int translate_mappings(block_writer *w, const pprof_profile *p, strata_error *err) {
    w->n_block_location_by_id = 0; /* rebuilt once the locations are translated */
    ENSURE_OR_OOM(w->pprof_string_ids, w->cap_pprof_strings, p->n_strings + 1);
    memset(w->pprof_string_ids, 0xff, (p->n_strings + 1) * sizeof *w->pprof_string_ids);
    ENSURE_OR_OOM(w->pprof_mapping_ids, w->cap_pprof_mappings, p->n_mappings + 1);
    for (size_t i = 0; i < p->n_mappings; i++) {
        const pprof_mapping *pm = &p->mappings[i];
        w_mapping m = {pm->memory_start, pm->memory_limit, pm->file_offset, 0, 0, 0};
        m.flags = (pm->has_functions ? BLOCK_MAPPING_HAS_FUNCTIONS : 0) |
                  (pm->has_filenames ? BLOCK_MAPPING_HAS_FILENAMES : 0) |
                  (pm->has_line_numbers ? BLOCK_MAPPING_HAS_LINE_NUMBERS : 0) |
                  (pm->has_inline_frames ? BLOCK_MAPPING_HAS_INLINE_FRAMES : 0);
        uint32_t id;
        if (intern_pprof_string(w, p, pm->filename, &m.file, err) != 0 ||
            intern_pprof_string(w, p, pm->build_id, &m.build_id, err) != 0 ||
            intern_mapping(w, &m, &id, err) != 0)
            return -1;
        w->pprof_mapping_ids[i] = id + 1;
    }
    return 0;
}

/* The 128-bit hash of pprof string `index`, memoized for the pprof being translated. */
static const uint64_t *pprof_string_hash(block_writer *w, const pprof_profile *p, int64_t index) {
    static const uint64_t none[2] = {1, 1};
    if (index < 0 || (size_t)index >= p->n_strings)
        return none; /* invalid: the full path reports it */
    uint64_t *h = &w->pprof_string_hashes[2 * (size_t)index];
    if (h[0] == 0) {
        strata_hash_bytes_pair(p->strings[index].ptr, p->strings[index].len, 0x57a7, 0x5eed5, &h[0],
                               &h[1]);
        h[0] |= 1;
    }
    return h;
}

static void pprof_function_fingerprint(block_writer *w, const pprof_profile *p,
                                       const pprof_function *pf, uint64_t *key, uint32_t *check) {
    const int64_t strings[3] = {pf->name, pf->system_name, pf->filename};
    strata_fingerprint fp;
    strata_fingerprint_init(&fp, 7);
    for (int i = 0; i < 3; i++) {
        const uint64_t *h = pprof_string_hash(w, p, strings[i]);
        strata_fingerprint_add(&fp, h[0]);
        strata_fingerprint_add(&fp, h[1]);
    }
    strata_fingerprint_add(&fp, (uint64_t)pf->start_line);
    strata_fingerprint_finish(&fp, key, check);
}

/* Interns pprof function i through its strings, and remembers it by content. */
static int intern_pprof_function(block_writer *w, const pprof_profile *p, size_t i, uint64_t key,
                                 uint32_t check, strata_error *err) {
    const pprof_function *pf = &p->functions[i];
    w_function f = {0, 0, 0, pf->start_line};
    if (intern_pprof_string(w, p, pf->name, &f.name, err) != 0 ||
        intern_pprof_string(w, p, pf->system_name, &f.system_name, err) != 0 ||
        intern_pprof_string(w, p, pf->filename, &f.file, err) != 0 ||
        intern_function(w, &f, &w->pprof_function_ids[i], err) != 0)
        return -1;
    bool found;
    map_slot *slot = fingerprint_slot(&w->function_content_index, key, check, &found);
    if (slot == NULL)
        return strata_error_oom(err);
    if (!found)
        slot->value = (uint64_t)check << 32 | w->pprof_function_ids[i];
    return 0;
}

/* Two passes, as for locations: fingerprint every function by content (its strings' bytes) and
 * prefetch its slot, then look them up; only functions never seen intern their strings. */
static int translate_functions(block_writer *w, const pprof_profile *p, strata_error *err) {
    ENSURE_OR_OOM(w->pprof_function_ids, w->cap_pprof_functions, p->n_functions + 1);
    ENSURE_OR_OOM(w->function_keys, w->cap_function_keys, p->n_functions + 1);
    ENSURE_OR_OOM(w->function_checks, w->cap_function_checks, p->n_functions + 1);
    ENSURE_OR_OOM(w->pprof_string_hashes, w->cap_pprof_string_hashes, 2 * p->n_strings + 2);
    memset(w->pprof_string_hashes, 0, (2 * p->n_strings + 2) * sizeof *w->pprof_string_hashes);
    for (size_t i = 0; i < p->n_functions; i++) {
        pprof_function_fingerprint(w, p, &p->functions[i], &w->function_keys[i],
                                   &w->function_checks[i]);
        prefetch_slot(&w->function_content_index, w->function_keys[i]);
    }
    for (size_t i = 0; i < p->n_functions; i++) {
        uint64_t key = w->function_keys[i];
        uint32_t check = w->function_checks[i];
        if (!fingerprint_find(&w->function_content_index, key, check, &w->pprof_function_ids[i]) &&
            intern_pprof_function(w, p, i, key, check, err) != 0)
            return -1;
    }
    return 0;
}

/* The block location pprof location i names (its mapping and functions already translated),
 * with its lines in w->line_scratch. */
static int pprof_location_item(block_writer *w, const pprof_profile *p, size_t i,
                               location_item *item, strata_error *err) {
    const pprof_location *pl = &p->locations[i];
    memset(item, 0, sizeof *item);
    item->loc.address = pl->address;
    item->loc.flags = pl->is_folded ? BLOCK_LOCATION_IS_FOLDED : 0;
    if (pl->mapping_id != 0) {
        const pprof_mapping *m = pprof_find_mapping(p, pl->mapping_id);
        if (m == NULL)
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "pprof location %llu: mapping %llu is not defined",
                                    (unsigned long long)pl->id, (unsigned long long)pl->mapping_id);
        item->loc.mapping = w->pprof_mapping_ids[m - p->mappings];
    }
    if (pl->line_offset > p->n_lines || pl->line_count > p->n_lines - pl->line_offset)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "pprof location %llu: lines out of range",
                                (unsigned long long)pl->id);
    ENSURE_OR_OOM(w->line_scratch, w->cap_line_scratch, (size_t)pl->line_count + 1);
    for (uint32_t j = 0; j < pl->line_count; j++) {
        const pprof_line *line = &p->lines[pl->line_offset + j];
        const pprof_function *f = pprof_find_function(p, line->function_id);
        if (f == NULL)
            return strata_error_set(
                err, STRATA_INVALID_ARGUMENT, "pprof location %llu: function %llu is not defined",
                (unsigned long long)pl->id, (unsigned long long)line->function_id);
        w->line_scratch[j].function = w->pprof_function_ids[f - p->functions];
        w->line_scratch[j].line = line->line;
    }
    item->loc.line_count = pl->line_count;
    item->lines = w->line_scratch;
    return 0;
}

/* A fingerprint of everything translate_* read from p: arrays, counts, fields and string bytes. */
static uint64_t symbols_fingerprint(const pprof_profile *p) {
    uint64_t h = strata_hash_combine(p->n_mappings, p->n_functions);
    h = strata_hash_combine(h, (uint64_t)p->n_locations << 32 ^ p->n_lines);
    h = strata_hash_combine(h,
                            (uint64_t)(uintptr_t)p->mappings ^ (uint64_t)(uintptr_t)p->functions);
    h = strata_hash_combine(h, (uint64_t)(uintptr_t)p->locations ^ (uint64_t)(uintptr_t)p->lines);
    for (size_t i = 0; i < p->n_mappings; i++) {
        const pprof_mapping *m = &p->mappings[i];
        h = strata_hash_combine(h, m->id ^ m->memory_start);
        h = strata_hash_combine(h, m->memory_limit ^ m->file_offset << 1);
        h = strata_hash_combine(h, (uint64_t)m->filename << 32 ^ (uint64_t)m->build_id);
        h = strata_hash_combine(h, (uint64_t)m->has_functions | (uint64_t)m->has_filenames << 1 |
                                       (uint64_t)m->has_line_numbers << 2 |
                                       (uint64_t)m->has_inline_frames << 3);
    }
    for (size_t i = 0; i < p->n_functions; i++) {
        const pprof_function *f = &p->functions[i];
        h = strata_hash_combine(h, f->id ^ (uint64_t)f->name << 32 ^ (uint64_t)f->system_name);
        h = strata_hash_combine(h, (uint64_t)f->filename << 32 ^ (uint64_t)f->start_line);
    }
    for (size_t i = 0; i < p->n_locations; i++) {
        const pprof_location *l = &p->locations[i];
        h = strata_hash_combine(h, l->id ^ l->mapping_id << 1);
        h = strata_hash_combine(h, l->address ^ (uint64_t)l->line_offset << 32 ^
                                       (uint64_t)l->line_count << 1 ^ (uint64_t)l->is_folded);
    }
    for (size_t i = 0; i < p->n_lines; i++)
        h = strata_hash_combine(h, p->lines[i].function_id ^ (uint64_t)p->lines[i].line << 1);
    for (size_t i = 0; i < p->n_strings; i++)
        h = strata_hash_bytes(p->strings[i].ptr, p->strings[i].len, h);
    return h;
}

/* With small pprof location ids (the usual 1..n), a sample's frames translate with one load per
 * frame: id -> block location id, instead of id -> pprof index -> block id. */
static int map_location_ids(block_writer *w, const pprof_profile *p, strata_error *err) {
    const pprof_id_index *ix = &p->location_index;
    w->n_block_location_by_id = 0;
    if (ix->dense == NULL)
        return 0;
    ENSURE_OR_OOM(w->block_location_by_id, w->cap_block_location_by_id, ix->dense_len + 1);
    for (size_t id = 0; id < ix->dense_len; id++) {
        uint32_t index = ix->dense[id];
        w->block_location_by_id[id] = index == 0 ? 0 : w->pprof_location_ids[index - 1] + 1;
    }
    w->n_block_location_by_id = ix->dense_len;
    return 0;
}

/* Two passes: fingerprint every location and prefetch its slot, then look them up, so the
 * lookups (mostly hits: an agent's pushes repeat their locations) overlap their cache misses. */
static int translate_locations(block_writer *w, const pprof_profile *p, strata_error *err) {
    ENSURE_OR_OOM(w->pprof_location_ids, w->cap_pprof_locations, p->n_locations + 1);
    ENSURE_OR_OOM(w->location_keys, w->cap_location_keys, p->n_locations + 1);
    ENSURE_OR_OOM(w->location_checks, w->cap_location_checks, p->n_locations + 1);
    location_item item;
    for (size_t i = 0; i < p->n_locations; i++) {
        if (pprof_location_item(w, p, i, &item, err) != 0)
            return -1;
        location_fingerprint(&item, &w->location_keys[i], &w->location_checks[i]);
        prefetch_slot(&w->location_index, w->location_keys[i]);
    }
    for (size_t i = 0; i < p->n_locations; i++) {
        uint64_t key = w->location_keys[i];
        uint32_t check = w->location_checks[i];
        if (fingerprint_find(&w->location_index, key, check, &w->pprof_location_ids[i]))
            continue;
        if (pprof_location_item(w, p, i, &item, err) != 0 ||
            intern_location_fingerprinted(w, &item, key, check, &w->pprof_location_ids[i], err) !=
                0)
            return -1;
    }
    return map_location_ids(w, p, err);
}

/* Interns a stack given as block location ids, leaf first, through the parent-pointer tree. The
 * prefix it shares (root first) with the previous stack interned here is not looked up again: its
 * nodes are remembered, and stacks are never removed from a writer. */
static int intern_stack_chain(block_writer *w, const uint32_t *locations, size_t n, uint32_t *stack,
                              strata_error *err) {
    ENSURE_OR_OOM(w->chain_locations, w->cap_chain_locations, n + 1);
    ENSURE_OR_OOM(w->chain_nodes, w->cap_chain_nodes, n + 1);
    size_t depth = 0, limit = n < w->chain_len ? n : w->chain_len;
    while (depth < limit && w->chain_locations[depth] == locations[n - 1 - depth])
        depth++;
    w->chain_len = depth;
    uint32_t node = depth > 0 ? w->chain_nodes[depth - 1] : 0;
    for (; depth < n; depth++) {
        uint32_t location = locations[n - 1 - depth];
        if (intern_stack(w, node, location, &node, err) != 0)
            return -1;
        w->chain_locations[depth] = location;
        w->chain_nodes[depth] = node;
        w->chain_len = depth + 1;
    }
    *stack = node;
    return 0;
}

/* The whole-stack cache: a stack (block location ids, leaf first) is found by a 96-bit
 * fingerprint. Samples repeat the same stacks profile after profile, so most stacks cost one
 * fingerprint and one lookup instead of one lookup per frame. A false match needs a 96-bit
 * collision (probability ~n^2 / 2^97). */
static void stack_fingerprint(const uint32_t *locations, size_t n, uint64_t *key, uint32_t *check) {
    uint64_t a, b;
    strata_hash_bytes_pair(locations, n * sizeof *locations, 0x5eed, 0xc0ffee, &a, &b);
    *key = a | 1;
    *check = (uint32_t)(b >> 32);
}

enum { STACK_CACHE_MISS, STACK_CACHE_HIT, STACK_CACHE_COLLISION };

static inline const map_slot *stack_cache_slot(const block_writer *w, uint64_t key) {
    return &w->stack_cache.slots[strata_hash_u64(key) & w->stack_cache.mask];
}

static int stack_cache_find(const block_writer *w, uint64_t key, uint32_t check, uint32_t *stack) {
    const slot_map *m = &w->stack_cache;
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

static int stack_cache_add(block_writer *w, uint64_t key, uint32_t check, uint32_t stack,
                           strata_error *err) {
    bool inserted;
    map_slot *slot = slot_map_claim(&w->stack_cache, key, &inserted);
    if (slot == NULL)
        return strata_error_oom(err);
    if (inserted) /* else already cached (or a 64-bit collision, left uncached) */
        slot->value = (uint64_t)check << 32 | stack;
    return 0;
}

/* Finds a whole stack in the cache, or interns it and remembers it. */
static int intern_stack_cached(block_writer *w, const uint32_t *locations, size_t n,
                               uint32_t *stack, strata_error *err) {
    uint64_t key;
    uint32_t check;
    stack_fingerprint(locations, n, &key, &check);
    switch (stack_cache_find(w, key, check, stack)) {
        case STACK_CACHE_HIT:
            return 0;
        case STACK_CACHE_COLLISION:
            return intern_stack_chain(w, locations, n, stack, err);
        default:
            break;
    }
    if (intern_stack_chain(w, locations, n, stack, err) != 0)
        return -1;
    return stack_cache_add(w, key, check, *stack, err);
}

/* Translates pprof sample i's locations (leaf first) to block ids at w->profile_frames + at. */
static int pprof_sample_frames(block_writer *w, const pprof_profile *p, size_t i, size_t at,
                               strata_error *err) {
    const pprof_sample *s = &p->samples[i];
    if (s->location_offset > p->n_sample_location_ids ||
        s->location_count > p->n_sample_location_ids - s->location_offset)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "pprof sample %zu: locations out of range", i);
    ENSURE_OR_OOM(w->profile_frames, w->cap_profile_frames, at + s->location_count + 1);
    const uint64_t *ids = &p->sample_location_ids[s->location_offset];
    uint32_t *frames = &w->profile_frames[at];
    const uint32_t *by_id = w->block_location_by_id;
    size_t n_by_id = w->n_block_location_by_id;
    uint32_t j = 0;
    for (; n_by_id > 0 && j < s->location_count; j++) {
        if (ids[j] >= n_by_id || by_id[ids[j]] == 0)
            break; /* undefined: reported below */
        frames[j] = by_id[ids[j]] - 1;
    }
    for (; j < s->location_count; j++) {
        const pprof_location *l = pprof_find_location(p, ids[j]);
        if (l == NULL)
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "pprof sample %zu: location %llu is not defined", i,
                                    (unsigned long long)ids[j]);
        frames[j] = w->pprof_location_ids[l - p->locations];
    }
    return 0;
}

/* Root-first lexicographic order of the missed stacks, so that consecutive ones share prefixes. */
static int compare_misses(const void *a, const void *b, void *ctx) {
    const block_writer *w = ctx;
    const sample_scratch *x = &w->samples_scratch[((const stack_miss *)a)->sample];
    const sample_scratch *y = &w->samples_scratch[((const stack_miss *)b)->sample];
    const uint32_t *fx = w->profile_frames + x->frames, *fy = w->profile_frames + y->frames;
    size_t nx = x->n_frames, ny = y->n_frames, n = nx < ny ? nx : ny;
    for (size_t i = 0; i < n; i++) {
        uint32_t u = fx[nx - 1 - i], v = fy[ny - 1 - i];
        if (u != v)
            return u < v ? -1 : 1;
    }
    return nx < ny ? -1 : nx > ny;
}

/* Interns the stacks that missed the cache, in root-first order, and remembers them. */
static int intern_missed_stacks(block_writer *w, strata_error *err) {
    if (w->n_misses > 1)
        qsort_r(w->misses, w->n_misses, sizeof *w->misses, compare_misses, w);
    for (size_t m = 0; m < w->n_misses; m++) {
        sample_scratch *sc = &w->samples_scratch[w->misses[m].sample];
        if (intern_stack_chain(w, w->profile_frames + sc->frames, sc->n_frames, &sc->stack, err) !=
                0 ||
            stack_cache_add(w, sc->key, sc->check, sc->stack, err) != 0)
            return -1;
    }
    return 0;
}

/* Pass 1 over a pprof's samples: translates the frames of every sample with a non-zero value in
 * one of the value columns, fingerprints them and prefetches their cache slots, so that pass 2's
 * lookups do not wait on memory one after the other. */
static int fingerprint_pprof_samples(block_writer *w, const pprof_profile *p, const size_t *columns,
                                     size_t n_columns, strata_error *err) {
    size_t n_values = p->n_samples * p->n_sample_types, used = 0;
    ENSURE_OR_OOM(w->samples_scratch, w->cap_samples_scratch, p->n_samples + 1);
    for (size_t i = 0; i < p->n_samples; i++) {
        sample_scratch *sc = &w->samples_scratch[i];
        bool any = false;
        for (size_t c = 0; c < n_columns; c++) {
            size_t at = (size_t)p->samples[i].value_offset + columns[c];
            if (at >= n_values)
                return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                        "pprof sample %zu: value out of range", i);
            any |= p->sample_values[at] != 0;
        }
        sc->stack = SAMPLE_SKIPPED;
        if (!any)
            continue;
        if (pprof_sample_frames(w, p, i, used, err) != 0)
            return -1;
        sc->frames = used;
        sc->n_frames = p->samples[i].location_count;
        used += sc->n_frames;
        stack_fingerprint(w->profile_frames + sc->frames, sc->n_frames, &sc->key, &sc->check);
        sc->stack = 0;
        if (w->stack_cache.slots != NULL)
            __builtin_prefetch(stack_cache_slot(w, sc->key));
    }
    return 0;
}

/* Resolves the stack of every sample fingerprint_pprof_samples kept: cached stacks in pass 2,
 * the others interned together afterwards. */
static int resolve_pprof_stacks(block_writer *w, const pprof_profile *p, const size_t *columns,
                                size_t n_columns, strata_error *err) {
    if (fingerprint_pprof_samples(w, p, columns, n_columns, err) != 0)
        return -1;
    w->n_misses = 0;
    for (size_t i = 0; i < p->n_samples; i++) {
        sample_scratch *sc = &w->samples_scratch[i];
        if (sc->stack == SAMPLE_SKIPPED)
            continue;
        int found = stack_cache_find(w, sc->key, sc->check, &sc->stack);
        if (found == STACK_CACHE_COLLISION &&
            intern_stack_chain(w, w->profile_frames + sc->frames, sc->n_frames, &sc->stack, err) !=
                0)
            return -1;
        if (found == STACK_CACHE_MISS) {
            ENSURE_OR_OOM(w->misses, w->cap_misses, w->n_misses + 1);
            w->misses[w->n_misses++].sample = i;
        }
    }
    return intern_missed_stacks(w, err);
}

/* Adds value column `column` of a pprof whose stacks resolve_pprof_stacks resolved, as one
 * profile. */
static int add_pprof_column(block_writer *w, const label_set *labels, const profile_type *type,
                            int64_t time_ns, int64_t duration_ns, int64_t period,
                            const pprof_profile *p, size_t column, bool labelled,
                            strata_error *err) {
    if (start_profile(w, labels, type, time_ns, duration_ns, period, err) != 0)
        return -1;
    for (size_t i = 0; i < p->n_samples; i++) {
        uint32_t stack = w->samples_scratch[i].stack;
        int64_t value = p->sample_values[(size_t)p->samples[i].value_offset + column];
        uint32_t set = labelled ? w->pprof_sample_sets[i] : 0;
        if (stack != SAMPLE_SKIPPED && value != 0 && push_pair(w, stack, set, value, err) != 0) {
            block_writer_abort_profile(w);
            return -1;
        }
    }
    if (commit_profile(w, err) != 0) {
        block_writer_abort_profile(w);
        return -1;
    }
    return 0;
}

/* Translates p's symbols, unless the same profile with the same symbol content was translated
 * last (reuse), then resolves the stacks of the given columns and adds one profile per column. */
static int add_pprof(block_writer *w, const label_set *labels, const profile_type *types,
                     const size_t *columns, size_t n, int64_t time_ns, int64_t duration_ns,
                     int64_t period, const pprof_profile *p, bool reuse, strata_error *err) {
    if (check_writable(w, err) != 0)
        return -1;
    if (w->open)
        return strata_error_set(err, STRATA_FAILED_PRECONDITION,
                                "block writer: a profile is already open; end it first");
    for (size_t c = 0; c < n; c++) {
        if (p == NULL || columns[c] >= p->n_sample_types)
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "block writer: sample type index %zu out of range (profile "
                                    "has %zu sample types)",
                                    columns[c], p == NULL ? (size_t)0 : p->n_sample_types);
    }
    uint64_t fingerprint = reuse ? symbols_fingerprint(p) : 0;
    if (!reuse || w->translated != p || w->translated_fingerprint != fingerprint) {
        w->translated = NULL;
        if (translate_mappings(w, p, err) != 0 || translate_functions(w, p, err) != 0 ||
            translate_locations(w, p, err) != 0)
            return -1;
        if (reuse) {
            w->translated = p;
            w->translated_fingerprint = fingerprint;
        }
    }
    bool labelled;
    if (resolve_pprof_stacks(w, p, columns, n, err) != 0 ||
        resolve_pprof_label_sets(w, p, &labelled, err) != 0)
        return -1;
    for (size_t c = 0; c < n; c++) {
        if (add_pprof_column(w, labels, &types[c], time_ns, duration_ns, period, p, columns[c],
                             labelled, err) != 0)
            return -1;
    }
    return 0;
}

int block_writer_add_profile(block_writer *w, const label_set *labels, const profile_type *type,
                             int64_t time_ns, int64_t duration_ns, int64_t period,
                             const pprof_profile *p, size_t sample_type_index, strata_error *err) {
    return add_pprof(w, labels, type, &sample_type_index, 1, time_ns, duration_ns, period, p, true,
                     err);
}

int block_writer_add_profile_types(block_writer *w, const label_set *labels,
                                   const profile_type *types, const size_t *sample_type_indexes,
                                   size_t n, int64_t time_ns, int64_t duration_ns, int64_t period,
                                   const pprof_profile *p, strata_error *err) {
    return add_pprof(w, labels, types, sample_type_indexes, n, time_ns, duration_ns, period, p,
                     false, err);
}

/* ---- symbolized path -------------------------------------------------------------------- */

int block_writer_begin_profile(block_writer *w, const label_set *labels, const profile_type *type,
                               int64_t time_ns, int64_t duration_ns, int64_t period,
                               strata_error *err) {
    return start_profile(w, labels, type, time_ns, duration_ns, period, err);
}

static int intern_frame(block_writer *w, const block_frame *f, uint32_t *location,
                        strata_error *err) {
    location_item item;
    memset(&item, 0, sizeof item);
    item.loc.address = f->address;
    if ((f->mapping_file != NULL && f->mapping_file[0] != '\0') ||
        (f->build_id != NULL && f->build_id[0] != '\0')) {
        w_mapping m;
        memset(&m, 0, sizeof m);
        uint32_t id;
        if (intern_cstr(w, f->mapping_file, &m.file, err) != 0 ||
            intern_cstr(w, f->build_id, &m.build_id, err) != 0 ||
            intern_mapping(w, &m, &id, err) != 0)
            return -1;
        item.loc.mapping = id + 1;
    }
    w_function fn = {0, 0, 0, f->start_line};
    w_line line = {0, f->line};
    if (intern_cstr(w, f->function_name, &fn.name, err) != 0 ||
        intern_cstr(w, f->system_name, &fn.system_name, err) != 0 ||
        intern_cstr(w, f->file_name, &fn.file, err) != 0 ||
        intern_function(w, &fn, &line.function, err) != 0)
        return -1;
    item.loc.line_count = 1;
    item.lines = &line;
    return intern_location(w, &item, location, err);
}

/* The label set of a sample's labels given as a label_set (empty values dropped). */
static int sample_label_set(block_writer *w, const label_set *labels, uint32_t *id,
                            strata_error *err) {
    size_t n = labels == NULL ? 0 : labels->count;
    ENSURE_OR_OOM(w->set_scratch, w->cap_set_scratch, 2 * n + 1);
    uint32_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const strata_label *l = &labels->labels[i];
        if (l->name == NULL || l->name[0] == '\0' || l->value == NULL || l->value[0] == '\0')
            continue;
        if (intern_cstr(w, l->name, &w->set_scratch[1 + 2 * k], err) != 0 ||
            intern_cstr(w, l->value, &w->set_scratch[2 + 2 * k], err) != 0)
            return -1;
        k++;
    }
    return intern_label_set(w, k, false, id, err);
}

int block_writer_add_sample(block_writer *w, const block_frame *frames, size_t n_frames,
                            int64_t value, strata_error *err) {
    return block_writer_add_sample_labels(w, frames, n_frames, NULL, value, err);
}

int block_writer_add_sample_labels(block_writer *w, const block_frame *frames, size_t n_frames,
                                   const label_set *sample_labels, int64_t value,
                                   strata_error *err) {
    if (!w->open)
        return strata_error_set(err, STRATA_FAILED_PRECONDITION,
                                "block writer: add_sample without begin_profile");
    if (n_frames > 0 && frames == NULL)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "block writer: frames is NULL");
    if (value == 0)
        return 0;
    ENSURE_OR_OOM(w->frame_scratch, w->cap_frame_scratch, n_frames + 1);
    for (size_t j = 0; j < n_frames; j++) {
        if (intern_frame(w, &frames[j], &w->frame_scratch[j], err) != 0)
            return -1;
    }
    uint32_t stack, set = 0;
    if (intern_stack_cached(w, w->frame_scratch, n_frames, &stack, err) != 0 ||
        (sample_labels != NULL && sample_label_set(w, sample_labels, &set, err) != 0))
        return -1;
    return push_pair(w, stack, set, value, err);
}

int block_writer_end_profile(block_writer *w, strata_error *err) {
    if (!w->open)
        return strata_error_set(err, STRATA_FAILED_PRECONDITION,
                                "block writer: end_profile without begin_profile");
    if (commit_profile(w, err) != 0) {
        block_writer_abort_profile(w);
        return -1;
    }
    return 0;
}

void block_writer_abort_profile(block_writer *w) {
    w->open = false;
    w->n_pairs = 0;
}

/* ---- id path ---------------------------------------------------------------------------- */

int block_writer_intern_string(block_writer *w, const char *s, size_t len, uint32_t *id,
                               strata_error *err) {
    if (check_writable(w, err) != 0)
        return -1;
    return intern_string(w, s, len, id, err);
}

static int check_string_id(const block_writer *w, uint32_t id, const char *what,
                           strata_error *err) {
    if (id >= w->strings.count)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "block writer: %s string id %u out of range (%zu strings)", what,
                                id, w->strings.count);
    return 0;
}

int block_writer_intern_mapping(block_writer *w, const block_writer_mapping *m, uint32_t *id,
                                strata_error *err) {
    if (check_writable(w, err) != 0 || check_string_id(w, m->file, "mapping file", err) != 0 ||
        check_string_id(w, m->build_id, "mapping build id", err) != 0)
        return -1;
    w_mapping wm = {m->memory_start, m->memory_limit, m->file_offset,
                    m->file,         m->build_id,     m->flags};
    return intern_mapping(w, &wm, id, err);
}

int block_writer_intern_function(block_writer *w, uint32_t name, uint32_t system_name,
                                 uint32_t file, int64_t start_line, uint32_t *id,
                                 strata_error *err) {
    if (check_writable(w, err) != 0 || check_string_id(w, name, "function name", err) != 0 ||
        check_string_id(w, system_name, "function system name", err) != 0 ||
        check_string_id(w, file, "function file", err) != 0)
        return -1;
    w_function f = {name, system_name, file, start_line};
    return intern_function(w, &f, id, err);
}

int block_writer_intern_location(block_writer *w, uint64_t address, uint32_t mapping,
                                 uint32_t flags, const block_writer_line *lines, uint32_t n_lines,
                                 uint32_t *id, strata_error *err) {
    if (check_writable(w, err) != 0)
        return -1;
    if (n_lines > 0 && lines == NULL)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "block writer: location has %u lines but no line array", n_lines);
    ENSURE_OR_OOM(w->line_scratch, w->cap_line_scratch, (size_t)n_lines + 1);
    for (uint32_t i = 0; i < n_lines; i++) {
        w->line_scratch[i].function = lines[i].function;
        w->line_scratch[i].line = lines[i].line;
    }
    location_item item;
    memset(&item, 0, sizeof item);
    item.loc.address = address;
    item.loc.mapping = mapping;
    item.loc.flags = flags;
    item.loc.line_count = n_lines;
    item.lines = w->line_scratch;
    return intern_location(w, &item, id, err); /* check_location applies the rules */
}

int block_writer_intern_stack(block_writer *w, uint32_t parent, uint32_t location, uint32_t *id,
                              strata_error *err) {
    if (check_writable(w, err) != 0)
        return -1;
    if (parent > w->n_stacks || location >= w->n_locations)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "block writer: stack (parent %u, location %u) out of range (%zu "
                                "stacks, %zu locations)",
                                parent, location, w->n_stacks, w->n_locations);
    return intern_stack(w, parent, location, id, err);
}

int block_writer_intern_stack_path(block_writer *w, const uint32_t *locations, size_t n,
                                   uint32_t *id, strata_error *err) {
    if (check_writable(w, err) != 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (locations[i] >= w->n_locations)
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "block writer: stack location %u out of range (%zu locations)",
                                    locations[i], w->n_locations);
    }
    if (n == 0) {
        *id = 0;
        return 0;
    }
    return intern_stack_cached(w, locations, n, id, err);
}

int block_writer_intern_label_set(block_writer *w, const uint32_t *pairs, size_t n, uint32_t *id,
                                  strata_error *err) {
    if (check_writable(w, err) != 0)
        return -1;
    if (n > UINT32_MAX / 4 || (n > 0 && pairs == NULL))
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "block writer: bad label set");
    ENSURE_OR_OOM(w->set_scratch, w->cap_set_scratch, 2 * n + 1);
    for (size_t i = 0; i < 2 * n; i++) {
        if (check_string_id(w, pairs[i], "sample label", err) != 0)
            return -1;
        if (pairs[i] == 0)
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "block writer: a sample label's name and value must not be "
                                    "empty");
        w->set_scratch[1 + i] = pairs[i];
    }
    return intern_label_set(w, (uint32_t)n, false, id, err);
}

int block_writer_add_profile_samples(block_writer *w, const label_set *labels,
                                     const profile_type *type, int64_t time_ns, int64_t duration_ns,
                                     int64_t period, const uint32_t *stacks,
                                     const uint32_t *label_sets, const int64_t *values, size_t n,
                                     strata_error *err) {
    for (size_t i = 0; i < n; i++) {
        if (stacks[i] > w->n_stacks)
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "block writer: sample stack %u out of range (%zu stacks)",
                                    stacks[i], w->n_stacks);
        if (label_sets != NULL && label_sets[i] > w->n_label_sets)
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "block writer: sample label set %u out of range (%zu sets)",
                                    label_sets[i], w->n_label_sets);
    }
    ENSURE_OR_OOM(w->pairs, w->cap_pairs, n);
    if (start_profile(w, labels, type, time_ns, duration_ns, period, err) != 0)
        return -1;
    for (size_t i = 0; i < n; i++)
        w->pairs[i] = make_pair(stacks[i], label_sets != NULL ? label_sets[i] : 0, values[i]);
    w->n_pairs = n;
    if (commit_profile(w, err) != 0) {
        block_writer_abort_profile(w);
        return -1;
    }
    return 0;
}

int block_writer_add_profile_stacks(block_writer *w, const label_set *labels,
                                    const profile_type *type, int64_t time_ns, int64_t duration_ns,
                                    int64_t period, const uint32_t *stacks, const int64_t *values,
                                    size_t n, strata_error *err) {
    return block_writer_add_profile_samples(w, labels, type, time_ns, duration_ns, period, stacks,
                                            NULL, values, n, err);
}

size_t block_writer_profile_count(const block_writer *w) {
    return w->n_profiles;
}

uint64_t block_writer_sample_count(const block_writer *w) {
    return w->n_samples;
}

size_t block_writer_memory_bytes(const block_writer *w) {
    const strata_intern *s = &w->strings;
    size_t bytes = sizeof *w + s->n_chunks * s->chunk_cap + s->cap * (sizeof(char *) + 4) +
                   (s->slot_mask + 1) * (4 + 8);
    bytes += w->cap_mappings * sizeof *w->mappings + slot_map_bytes(&w->mapping_index);
    bytes += w->cap_functions * sizeof *w->functions + slot_map_bytes(&w->function_index);
    bytes += slot_map_bytes(&w->function_content_index);
    bytes += (w->cap_pprof_string_hashes + w->cap_function_keys) * 8 + w->cap_function_checks * 4;
    bytes += w->cap_locations * sizeof *w->locations + slot_map_bytes(&w->location_index);
    bytes += w->cap_lines * sizeof *w->lines;
    bytes += w->cap_stacks * sizeof *w->stacks;
    if (w->stack_index.slots != NULL)
        bytes += (w->stack_index.mask + 1) * sizeof *w->stack_index.slots;
    bytes += (w->cap_chain_locations + w->cap_chain_nodes) * 4;
    bytes += w->cap_profile_frames * 4 + w->cap_misses * sizeof *w->misses;
    bytes += w->cap_samples_scratch * sizeof *w->samples_scratch + slot_map_bytes(&w->stack_cache);
    bytes += w->cap_frame_scratch * sizeof *w->frame_scratch;
    bytes += w->cap_series * sizeof *w->series + slot_map_bytes(&w->series_index);
    bytes += w->cap_label_words * sizeof *w->label_words;
    bytes += w->cap_label_sets * sizeof *w->label_sets + slot_map_bytes(&w->label_set_index);
    bytes += (w->cap_set_words + w->cap_set_scratch + w->cap_pprof_sample_sets +
              w->cap_sample_label_sets) *
             4;
    bytes += w->cap_profiles * sizeof *w->profiles;
    bytes += w->cap_sample_stacks * sizeof *w->sample_stacks;
    bytes += w->cap_sample_values * sizeof *w->sample_values;
    bytes += (w->cap_pairs + w->cap_pairs_tmp) * sizeof *w->pairs;
    bytes += (w->cap_pprof_mappings + w->cap_pprof_functions + w->cap_pprof_locations +
              w->cap_pprof_strings + w->cap_location_checks) *
             4;
    bytes += w->cap_location_keys * sizeof *w->location_keys;
    bytes += w->cap_block_location_by_id * sizeof *w->block_location_by_id;
    bytes += w->cap_line_scratch * sizeof *w->line_scratch + w->cap_label_scratch * 4;
    if (w->spool != NULL) {
        bytes += block_table_encoder_memory_bytes(&w->spool_profiles) +
                 block_table_encoder_memory_bytes(&w->spool_samples) +
                 block_table_encoder_memory_bytes(&w->spool_rollups) +
                 block_table_encoder_memory_bytes(&w->spool_series_sets);
        bytes += w->spool_rollup != NULL ? block_rollup_builder_memory_bytes(w->spool_rollup) : 0;
        bytes += w->cap_spool_rollup_series * sizeof *w->spool_rollup_series;
        bytes += (w->cap_spool_set_stamp + w->cap_spool_sets) * 4;
    }
    return bytes;
}

/* ---- detaching a block ------------------------------------------------------------------ */

#define DETACH_UNUSED UINT32_MAX

/* Old id -> new id for every table a detached block copies; DETACH_UNUSED where unused. Stack
 * entries are indexed by stack row and hold the new stack id (row + 1). */
typedef struct detach_maps {
    uint32_t *stacks, *locations, *functions, *mappings, *strings, *series;
    uint32_t *label_sets; /* indexed by set id (0 = none), new id; DETACH_UNUSED where unused */
} detach_maps;

static void detach_maps_free(detach_maps *m) {
    free(m->label_sets);
    free(m->stacks);
    free(m->locations);
    free(m->functions);
    free(m->mappings);
    free(m->strings);
    free(m->series);
}

static uint32_t *unused_map(size_t n) {
    uint32_t *map = malloc((n + 1) * sizeof *map);
    if (map != NULL)
        memset(map, 0xff, (n + 1) * sizeof *map);
    return map;
}

static int detach_maps_init(const block_writer *w, detach_maps *m, strata_error *err) {
    memset(m, 0, sizeof *m);
    m->stacks = unused_map(w->n_stacks);
    m->locations = unused_map(w->n_locations);
    m->functions = unused_map(w->n_functions);
    m->mappings = unused_map(w->n_mappings);
    m->strings = unused_map(w->strings.count);
    m->series = unused_map(w->n_series);
    m->label_sets = unused_map(w->n_label_sets + 1);
    if (m->stacks == NULL || m->locations == NULL || m->functions == NULL || m->mappings == NULL ||
        m->strings == NULL || m->series == NULL || m->label_sets == NULL) {
        detach_maps_free(m);
        return strata_error_oom(err);
    }
    return 0;
}

/* Marks (with 0) every stack the block's samples use, with all its ancestors, then numbers the
 * marked ones in row order and marks their locations. A parent is always interned before its
 * children, so one sweep from the highest id down marks every ancestor (sequential reads of the
 * dictionary instead of a walk to the root per sample), and row order keeps parents first. */
static uint32_t detach_number_stacks(const block_writer *w, detach_maps *m) {
    size_t top = 0;
    for (size_t i = 0; i < w->n_samples; i++) {
        uint32_t s = w->sample_stacks[i];
        if (s != 0) {
            m->stacks[s - 1] = 0;
            top = s > top ? s : top;
        }
    }
    for (size_t i = top; i-- > 0;) {
        uint32_t parent = w->stacks[i].parent;
        if (m->stacks[i] == 0 && parent != 0)
            m->stacks[parent - 1] = 0;
    }
    uint32_t n = 0;
    for (size_t i = 0; i < w->n_stacks; i++) {
        if (m->stacks[i] == DETACH_UNUSED)
            continue;
        m->stacks[i] = ++n;
        m->locations[w->stacks[i].location] = 0;
    }
    return n;
}

/* Numbers the marked locations and marks their mappings and functions, then numbers those and
 * marks their strings. */
static void detach_number_symbols(const block_writer *w, detach_maps *m, uint32_t counts[3]) {
    uint32_t n = 0;
    for (size_t i = 0; i < w->n_locations; i++) {
        if (m->locations[i] == DETACH_UNUSED)
            continue;
        const w_location *l = &w->locations[i];
        m->locations[i] = n++;
        if (l->mapping != 0)
            m->mappings[l->mapping - 1] = 0;
        for (uint32_t j = 0; j < l->line_count; j++)
            m->functions[w->lines[l->first_line + j].function] = 0;
    }
    counts[0] = n;
    n = 0;
    for (size_t i = 0; i < w->n_functions; i++) {
        if (m->functions[i] == DETACH_UNUSED)
            continue;
        m->functions[i] = n++;
        m->strings[w->functions[i].name] = 0;
        m->strings[w->functions[i].system_name] = 0;
        m->strings[w->functions[i].file] = 0;
    }
    counts[1] = n;
    n = 0;
    for (size_t i = 0; i < w->n_mappings; i++) {
        if (m->mappings[i] == DETACH_UNUSED)
            continue;
        m->mappings[i] = n++;
        m->strings[w->mappings[i].file] = 0;
        m->strings[w->mappings[i].build_id] = 0;
    }
    counts[2] = n;
}

/* Numbers (in id order, so sorted order is kept) the label sets the block's samples use, and
 * marks their strings. */
static void detach_number_label_sets(const block_writer *w, detach_maps *m) {
    m->label_sets[0] = 0;
    if (!w->samples_labelled)
        return;
    for (size_t i = 0; i < w->n_samples; i++)
        m->label_sets[w->sample_label_sets[i]] = 0;
    uint32_t n = 0;
    for (size_t id = 1; id <= w->n_label_sets; id++) {
        if (m->label_sets[id] == DETACH_UNUSED)
            continue;
        m->label_sets[id] = ++n;
        const w_label_set *set = &w->label_sets[id - 1];
        for (uint32_t j = 0; j < 2 * set->count; j++)
            m->strings[w->set_words[set->first + j]] = 0;
    }
}

/* Marks the series that have profiles in this block and their strings, numbers both. */
static void detach_number_series(const block_writer *w, detach_maps *m) {
    uint32_t n = 0;
    for (size_t i = 0; i < w->n_series; i++) {
        const w_series *s = &w->series[i];
        if (s->n_profiles == 0)
            continue;
        m->series[i] = n++;
        for (int t = 0; t < 5; t++)
            m->strings[s->type[t]] = 0;
        for (uint32_t j = 0; j < 2 * s->label_count; j++)
            m->strings[w->label_words[s->first_label + j]] = 0;
    }
    m->strings[0] = 0; /* "" is always string 0 */
    n = 0;
    for (size_t i = 0; i < w->strings.count; i++)
        if (m->strings[i] != DETACH_UNUSED)
            m->strings[i] = n++;
}

/* Copies the marked strings, mappings, functions, locations with their lines, and stacks into d,
 * renumbered. */
static int detach_copy_symbols(const block_writer *w, const detach_maps *m, block_writer *d,
                               const uint32_t counts[3], uint32_t n_stacks, strata_error *err) {
    for (size_t i = 1; i < w->strings.count; i++) {
        uint32_t id;
        if (m->strings[i] == DETACH_UNUSED)
            continue;
        if (strata_intern_add(&d->strings, w->strings.strings[i], w->strings.lengths[i], &id) != 0)
            return strata_error_oom(err);
        if (id != m->strings[i])
            return strata_error_set(err, STRATA_INTERNAL,
                                    "block writer: string %zu renumbered "
                                    "%u, expected %u",
                                    i, id, m->strings[i]);
    }
    ENSURE_OR_OOM(d->mappings, d->cap_mappings, counts[2]);
    ENSURE_OR_OOM(d->functions, d->cap_functions, counts[1]);
    ENSURE_OR_OOM(d->locations, d->cap_locations, counts[0]);
    ENSURE_OR_OOM(d->stacks, d->cap_stacks, n_stacks);
    d->stack_origins = malloc(((size_t)n_stacks + 1) * sizeof *d->stack_origins);
    d->location_origins = malloc(((size_t)counts[0] + 1) * sizeof *d->location_origins);
    if (d->stack_origins == NULL || d->location_origins == NULL)
        return strata_error_oom(err);
    for (size_t i = 0; i < w->n_mappings; i++) {
        if (m->mappings[i] == DETACH_UNUSED)
            continue;
        w_mapping x = w->mappings[i];
        x.file = m->strings[x.file];
        x.build_id = m->strings[x.build_id];
        d->mappings[d->n_mappings++] = x;
    }
    for (size_t i = 0; i < w->n_functions; i++) {
        if (m->functions[i] == DETACH_UNUSED)
            continue;
        w_function f = w->functions[i];
        f.name = m->strings[f.name];
        f.system_name = m->strings[f.system_name];
        f.file = m->strings[f.file];
        d->functions[d->n_functions++] = f;
    }
    for (size_t i = 0; i < w->n_locations; i++) {
        if (m->locations[i] == DETACH_UNUSED)
            continue;
        w_location l = w->locations[i];
        ENSURE_OR_OOM(d->lines, d->cap_lines, d->n_lines + l.line_count);
        for (uint32_t j = 0; j < l.line_count; j++) {
            w_line line = w->lines[l.first_line + j];
            line.function = m->functions[line.function];
            d->lines[d->n_lines + j] = line;
        }
        l.first_line = (uint32_t)d->n_lines;
        d->n_lines += l.line_count;
        if (l.mapping != 0)
            l.mapping = m->mappings[l.mapping - 1] + 1;
        d->location_origins[d->n_locations] = (uint32_t)i + 1;
        d->locations[d->n_locations++] = l;
    }
    for (size_t i = 0; i < w->n_stacks; i++) {
        if (m->stacks[i] == DETACH_UNUSED)
            continue;
        w_stack s = w->stacks[i];
        s.parent = s.parent == 0 ? 0 : m->stacks[s.parent - 1];
        s.location = m->locations[s.location];
        d->stack_origins[d->n_stacks] = (uint32_t)i + 1;
        d->stacks[d->n_stacks++] = s;
    }
    return 0;
}

/* Copies the block's series, profiles and samples into d, renumbered. */
static int detach_copy_profiles(const block_writer *w, const detach_maps *m, block_writer *d,
                                strata_error *err) {
    for (size_t i = 0; i < w->n_series; i++) {
        if (m->series[i] == DETACH_UNUSED)
            continue;
        const w_series *s = &w->series[i];
        ENSURE_OR_OOM(d->series, d->cap_series, d->n_series + 1);
        ENSURE_OR_OOM(d->label_words, d->cap_label_words, d->n_label_words + 2 * s->label_count);
        w_series x = *s;
        for (int t = 0; t < 5; t++)
            x.type[t] = m->strings[s->type[t]];
        x.first_label = (uint32_t)d->n_label_words;
        for (uint32_t j = 0; j < 2 * s->label_count; j++)
            d->label_words[d->n_label_words++] = m->strings[w->label_words[s->first_label + j]];
        d->series[d->n_series++] = x;
    }
    ENSURE_OR_OOM(d->profiles, d->cap_profiles, w->n_profiles);
    ENSURE_OR_OOM(d->sample_stacks, d->cap_sample_stacks, w->n_samples);
    ENSURE_OR_OOM(d->sample_values, d->cap_sample_values, w->n_samples);
    for (size_t i = 0; i < w->n_profiles; i++) {
        d->profiles[i] = w->profiles[i];
        d->profiles[i].series = m->series[w->profiles[i].series];
    }
    d->n_profiles = w->n_profiles;
    for (size_t i = 0; i < w->n_samples; i++) {
        uint32_t s = w->sample_stacks[i];
        d->sample_stacks[i] = s == 0 ? 0 : m->stacks[s - 1];
    }
    if (w->n_samples > 0)
        memcpy(d->sample_values, w->sample_values, w->n_samples * sizeof *w->sample_values);
    d->n_samples = w->n_samples;
    if (!w->samples_labelled)
        return 0;
    for (size_t id = 1; id <= w->n_label_sets; id++) {
        if (m->label_sets[id] == DETACH_UNUSED)
            continue;
        const w_label_set *set = &w->label_sets[id - 1];
        ENSURE_OR_OOM(d->label_sets, d->cap_label_sets, d->n_label_sets + 1);
        ENSURE_OR_OOM(d->set_words, d->cap_set_words, d->n_set_words + 2 * (size_t)set->count);
        d->label_sets[d->n_label_sets++] = (w_label_set){(uint32_t)d->n_set_words, set->count};
        for (uint32_t j = 0; j < 2 * set->count; j++)
            d->set_words[d->n_set_words++] = m->strings[w->set_words[set->first + j]];
    }
    ENSURE_OR_OOM(d->sample_label_sets, d->cap_sample_label_sets, w->n_samples + 1);
    for (size_t i = 0; i < w->n_samples; i++)
        d->sample_label_sets[i] = m->label_sets[w->sample_label_sets[i]];
    d->samples_labelled = true;
    return 0;
}

int block_writer_detach(block_writer *w, block_writer **block, strata_error *err) {
    *block = NULL;
    if (check_writable(w, err) != 0)
        return -1;
    if (w->open)
        return strata_error_set(err, STRATA_FAILED_PRECONDITION,
                                "block writer: a profile is still open; end it before detaching");
    if (w->spool != NULL)
        return strata_error_set(err, STRATA_FAILED_PRECONDITION,
                                "block writer: a spooled block cannot be detached");
    if (w->n_profiles == 0)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "block writer: no profiles were added; nothing to detach");
    if (!w->has_dictionary) {
        if (ulid_new(&w->dictionary, err) != 0)
            return -1;
        w->has_dictionary = true;
    }
    detach_maps m;
    if (detach_maps_init(w, &m, err) != 0)
        return -1;
    block_writer *d = block_writer_new(&w->options, err);
    int rc = -1;
    if (d != NULL) {
        uint32_t counts[3];
        uint32_t n_stacks = detach_number_stacks(w, &m);
        detach_number_symbols(w, &m, counts);
        detach_number_label_sets(w, &m);
        detach_number_series(w, &m);
        rc = detach_copy_symbols(w, &m, d, counts, n_stacks, err);
        if (rc == 0)
            rc = detach_copy_profiles(w, &m, d, err);
    }
    detach_maps_free(&m);
    if (rc != 0) {
        block_writer_free(d);
        return -1;
    }
    d->detached = true;
    d->has_dictionary = true;
    d->dictionary = w->dictionary;
    d->dictionary_stacks = (uint32_t)w->n_stacks;
    d->dictionary_locations = (uint32_t)w->n_locations;
    w->n_profiles = 0;
    w->n_samples = 0;
    w->samples_labelled = false;
    for (size_t i = 0; i < w->n_series; i++)
        w->series[i].n_profiles = 0;
    *block = d;
    return 0;
}

/* ---- encoding (finish) ------------------------------------------------------------------ */

/* A table being encoded at finish: the writer, the object, the format version (which decides
 * whether version 2 columns are written) and the table encoder (block_encoder.h). */
typedef struct encoder {
    block_writer *w;
    block_object *object;
    int version;
    block_table_encoder table;
    strata_error *err;
} encoder;

static void enc_begin_table(encoder *e, int table_id) {
    const block_table_schema *schema = block_table_schema_get(table_id);
    int n_cols = e->version >= BLOCK_FORMAT_VERSION_LABELS ? schema->n_columns : schema->n_required;
    block_table_encoder_begin(&e->table, e->object, table_id, n_cols);
}

static inline void enc_put(encoder *e, int col, uint64_t v) {
    block_table_encoder_put(&e->table, col, v);
}

static void enc_put_bytes(encoder *e, int col, const char *s, size_t len) {
    block_table_encoder_put_bytes(&e->table, col, s, len);
}

static inline void enc_end_row(encoder *e) {
    block_table_encoder_end_row(&e->table);
}

static int enc_end_table(encoder *e) {
    return block_table_encoder_end(&e->table, e->table.n_cols, e->err);
}

/* The finish-time orderings: series by (type, labels), strings with label/type strings first,
 * profiles by (series, time). */
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

static void block_order_free(block_order *o) {
    free(o->set_new);
    free(o->series_order);
    free(o->series_new);
    free(o->string_new);
    free(o->string_order);
    free(o->profile_order);
}

static int compare_series(const void *a, const void *b, void *ctx) {
    const block_writer *w = ctx;
    const w_series *x = &w->series[*(const uint32_t *)a], *y = &w->series[*(const uint32_t *)b];
    for (int i = 0; i < 5; i++) {
        int c = compare_string_ids(w, x->type[i], y->type[i]);
        if (c != 0)
            return c;
    }
    if (x->delta != y->delta)
        return x->delta < y->delta ? -1 : 1;
    uint32_t n = x->label_count < y->label_count ? x->label_count : y->label_count;
    for (uint32_t i = 0; i < 2 * n; i++) {
        int c = compare_string_ids(w, w->label_words[x->first_label + i],
                                   w->label_words[y->first_label + i]);
        if (c != 0)
            return c;
    }
    return x->label_count < y->label_count ? -1 : x->label_count > y->label_count;
}

static int compare_strings_ctx(const void *a, const void *b, void *ctx) {
    return compare_string_ids(ctx, *(const uint32_t *)a, *(const uint32_t *)b);
}

typedef struct profile_sort_ctx {
    const block_writer *w;
    const uint32_t *series_new;
} profile_sort_ctx;

static int compare_profiles(const void *a, const void *b, void *ctx) {
    const profile_sort_ctx *c = ctx;
    uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;
    const w_profile *x = &c->w->profiles[i], *y = &c->w->profiles[j];
    uint32_t sx = c->series_new[x->series], sy = c->series_new[y->series];
    if (sx != sy)
        return sx < sy ? -1 : 1;
    if (x->time_ns != y->time_ns)
        return x->time_ns < y->time_ns ? -1 : 1;
    return i < j ? -1 : i > j;
}

static int order_series(block_writer *w, block_order *o, strata_error *err) {
    o->series_order = malloc((w->n_series + 1) * sizeof *o->series_order);
    o->series_new = malloc((w->n_series + 1) * sizeof *o->series_new);
    if (o->series_order == NULL || o->series_new == NULL)
        return strata_error_oom(err);
    o->n_series = 0;
    for (size_t i = 0; i < w->n_series; i++) {
        o->series_new[i] = UINT32_MAX;
        if (w->series[i].n_profiles > 0)
            o->series_order[o->n_series++] = (uint32_t)i;
    }
    qsort_r(o->series_order, o->n_series, sizeof *o->series_order, compare_series, w);
    for (size_t i = 0; i < o->n_series; i++)
        o->series_new[o->series_order[i]] = (uint32_t)i;
    return 0;
}

/* Numbers the sample label sets the block's samples use (in old id order) and picks the format
 * version: 2 with sample labels, else 1 (a block without them is exactly a version 1 block). */
static int order_label_sets(block_writer *w, block_order *o, strata_error *err) {
    o->set_new = calloc(w->n_label_sets + 1, sizeof *o->set_new);
    if (o->set_new == NULL)
        return strata_error_oom(err);
    o->n_sets = 0;
    if (w->samples_labelled && w->spool != NULL) { /* spooled samples keep the writer's ids */
        for (size_t id = 1; id <= w->n_label_sets; id++)
            o->set_new[id] = (uint32_t)id;
        o->n_sets = w->n_label_sets;
    } else if (w->samples_labelled) {
        for (size_t i = 0; i < w->n_samples; i++)
            o->set_new[w->sample_label_sets[i]] = 1;
        o->set_new[0] = 0;
        for (size_t id = 1; id <= w->n_label_sets; id++)
            if (o->set_new[id] != 0)
                o->set_new[id] = (uint32_t)++o->n_sets;
    }
    o->version = o->n_sets > 0 ? BLOCK_FORMAT_VERSION_LABELS : BLOCK_FORMAT_VERSION_MIN;
    return 0;
}

/* Marks string id for the sorted first region of the string table. */
static void claim_low_string(block_order *o, uint32_t id, size_t *k) {
    if (o->string_new[id] == UINT32_MAX) {
        o->string_new[id] = 0;
        o->string_order[(*k)++] = id;
    }
}

/* Label and type strings of the kept series, and the names and values of the used sample label
 * sets, first (sorted, so postings sort by string), then the rest in first-seen order. "" stays
 * id 0: it sorts first and is always included. */
static int order_strings(block_writer *w, block_order *o, strata_error *err) {
    size_t n = w->strings.count;
    o->string_new = malloc((n + 1) * sizeof *o->string_new);
    o->string_order = malloc((n + 1) * sizeof *o->string_order);
    if (o->string_new == NULL || o->string_order == NULL)
        return strata_error_oom(err);
    for (size_t i = 0; i < n; i++)
        o->string_new[i] = UINT32_MAX;
    size_t k = 0;
    o->string_order[k++] = 0;
    o->string_new[0] = 0;
    for (size_t s = 0; s < o->n_series; s++) {
        const w_series *ser = &w->series[o->series_order[s]];
        for (uint32_t i = 0; i < 5; i++) {
            if (o->string_new[ser->type[i]] == UINT32_MAX) {
                o->string_new[ser->type[i]] = 0;
                o->string_order[k++] = ser->type[i];
            }
        }
        for (uint32_t i = 0; i < 2 * ser->label_count; i++)
            claim_low_string(o, w->label_words[ser->first_label + i], &k);
    }
    for (size_t id = 1; o->n_sets > 0 && id <= w->n_label_sets; id++) {
        const w_label_set *set = &w->label_sets[id - 1];
        for (uint32_t i = 0; o->set_new[id] != 0 && i < 2 * set->count; i++)
            claim_low_string(o, w->set_words[set->first + i], &k);
    }
    qsort_r(o->string_order, k, sizeof *o->string_order, compare_strings_ctx, w);
    for (size_t i = 0; i < k; i++)
        o->string_new[o->string_order[i]] = (uint32_t)i;
    for (size_t i = 0; i < n; i++) {
        if (o->string_new[i] == UINT32_MAX) {
            o->string_new[i] = (uint32_t)k;
            o->string_order[k++] = (uint32_t)i;
        }
    }
    return 0;
}

static int order_profiles(block_writer *w, block_order *o, strata_error *err) {
    o->profile_order = malloc((w->n_profiles + 1) * sizeof *o->profile_order);
    if (o->profile_order == NULL)
        return strata_error_oom(err);
    for (size_t i = 0; i < w->n_profiles; i++)
        o->profile_order[i] = (uint32_t)i;
    profile_sort_ctx ctx = {w, o->series_new};
    qsort_r(o->profile_order, w->n_profiles, sizeof *o->profile_order, compare_profiles, &ctx);
    return 0;
}

/* One origin table (its column 0): origins[i], or i + 1 (the dictionary's own rows) without them.
 */
static int write_origin_table(encoder *e, int table, const uint32_t *origins, size_t n) {
    enc_begin_table(e, table);
    for (size_t i = 0; i < n; i++) {
        enc_put(e, 0, origins != NULL ? origins[i] : (uint64_t)i + 1);
        enc_end_row(e);
    }
    return enc_end_table(e);
}

/* Tables stack_origins, location_origins and dictionary (docs/block-format.md 6.12), for a writer
 * with a dictionary id: a detached block maps its stacks to the dictionary's, a dictionary writer
 * finishing itself holds the dictionary's own stacks (origin = stack id). */
static int write_dictionary_tables(encoder *e) {
    block_writer *w = e->w;
    if (!w->has_dictionary || w->n_stacks == 0)
        return 0;
    if (write_origin_table(e, BLOCK_TABLE_STACK_ORIGINS, w->stack_origins, w->n_stacks) != 0 ||
        write_origin_table(e, BLOCK_TABLE_LOCATION_ORIGINS, w->location_origins, w->n_locations) !=
            0)
        return -1;
    enc_begin_table(e, BLOCK_TABLE_DICTIONARY);
    enc_put_bytes(e, BLOCK_COL_DICTIONARY_ID, (const char *)w->dictionary.bytes,
                  sizeof w->dictionary.bytes);
    enc_put(e, BLOCK_COL_DICTIONARY_STACK_COUNT,
            w->stack_origins != NULL ? w->dictionary_stacks : w->n_stacks);
    enc_put(e, BLOCK_COL_DICTIONARY_LOCATION_COUNT,
            w->location_origins != NULL ? w->dictionary_locations : w->n_locations);
    enc_end_row(e);
    return enc_end_table(e);
}

static int write_symbol_tables(encoder *e, const block_order *o) {
    block_writer *w = e->w;
    enc_begin_table(e, BLOCK_TABLE_STRINGS);
    for (size_t i = 0; i < w->strings.count; i++) {
        uint32_t id = o->string_order[i];
        enc_put_bytes(e, 0, w->strings.strings[id], w->strings.lengths[id]);
        enc_end_row(e);
    }
    if (enc_end_table(e) != 0)
        return -1;
    const uint32_t *sn = o->string_new;
    enc_begin_table(e, BLOCK_TABLE_MAPPINGS);
    for (size_t i = 0; i < w->n_mappings; i++) {
        const w_mapping *m = &w->mappings[i];
        enc_put(e, BLOCK_COL_MAPPINGS_START, m->start);
        enc_put(e, BLOCK_COL_MAPPINGS_LIMIT, m->limit);
        enc_put(e, BLOCK_COL_MAPPINGS_OFFSET, m->offset);
        enc_put(e, BLOCK_COL_MAPPINGS_FILE, sn[m->file]);
        enc_put(e, BLOCK_COL_MAPPINGS_BUILD_ID, sn[m->build_id]);
        enc_put(e, BLOCK_COL_MAPPINGS_FLAGS, m->flags);
        enc_end_row(e);
    }
    if (enc_end_table(e) != 0)
        return -1;
    enc_begin_table(e, BLOCK_TABLE_FUNCTIONS);
    for (size_t i = 0; i < w->n_functions; i++) {
        const w_function *f = &w->functions[i];
        enc_put(e, BLOCK_COL_FUNCTIONS_NAME, sn[f->name]);
        enc_put(e, BLOCK_COL_FUNCTIONS_SYSTEM_NAME, sn[f->system_name]);
        enc_put(e, BLOCK_COL_FUNCTIONS_FILE, sn[f->file]);
        enc_put(e, BLOCK_COL_FUNCTIONS_START_LINE, (uint64_t)f->start_line);
        enc_end_row(e);
    }
    if (enc_end_table(e) != 0)
        return -1;
    enc_begin_table(e, BLOCK_TABLE_LOCATIONS);
    for (size_t i = 0; i < w->n_locations; i++) {
        const w_location *l = &w->locations[i];
        enc_put(e, BLOCK_COL_LOCATIONS_MAPPING, l->mapping);
        enc_put(e, BLOCK_COL_LOCATIONS_ADDRESS, l->address);
        enc_put(e, BLOCK_COL_LOCATIONS_FIRST_LINE, l->first_line);
        enc_put(e, BLOCK_COL_LOCATIONS_LINE_COUNT, l->line_count);
        enc_put(e, BLOCK_COL_LOCATIONS_FLAGS, l->flags);
        enc_end_row(e);
    }
    if (enc_end_table(e) != 0)
        return -1;
    enc_begin_table(e, BLOCK_TABLE_LINES);
    for (size_t i = 0; i < w->n_lines; i++) {
        enc_put(e, BLOCK_COL_LINES_FUNCTION, w->lines[i].function);
        enc_put(e, BLOCK_COL_LINES_LINE, (uint64_t)w->lines[i].line);
        enc_end_row(e);
    }
    if (enc_end_table(e) != 0)
        return -1;
    enc_begin_table(e, BLOCK_TABLE_STACKS);
    for (size_t i = 0; i < w->n_stacks; i++) {
        enc_put(e, BLOCK_COL_STACKS_PARENT_DELTA, (uint64_t)(i + 1) - w->stacks[i].parent);
        enc_put(e, BLOCK_COL_STACKS_LOCATION, w->stacks[i].location);
        enc_end_row(e);
    }
    if (enc_end_table(e) != 0)
        return -1;
    return write_dictionary_tables(e);
}

typedef struct posting_entry {
    uint32_t name, value, series;
} posting_entry;

static int compare_postings(const void *a, const void *b) {
    const posting_entry *x = a, *y = b;
    if (x->name != y->name)
        return x->name < y->name ? -1 : 1;
    if (x->value != y->value)
        return x->value < y->value ? -1 : 1;
    return x->series < y->series ? -1 : x->series > y->series;
}

static int write_series_tables(encoder *e, const block_order *o) {
    block_writer *w = e->w;
    const uint32_t *sn = o->string_new;
    enc_begin_table(e, BLOCK_TABLE_SERIES);
    uint64_t first_label = 0;
    for (size_t i = 0; i < o->n_series; i++) {
        const w_series *s = &w->series[o->series_order[i]];
        for (int t = 0; t < 5; t++)
            enc_put(e, BLOCK_COL_SERIES_NAME + t, sn[s->type[t]]);
        enc_put(e, BLOCK_COL_SERIES_DELTA, s->delta);
        enc_put(e, BLOCK_COL_SERIES_FIRST_LABEL, first_label);
        enc_put(e, BLOCK_COL_SERIES_LABEL_COUNT, s->label_count);
        first_label += s->label_count;
        enc_end_row(e);
    }
    if (enc_end_table(e) != 0)
        return -1;
    posting_entry *entries = malloc((first_label + 1) * sizeof *entries);
    if (entries == NULL)
        return strata_error_oom(e->err);
    size_t n = 0;
    enc_begin_table(e, BLOCK_TABLE_SERIES_LABELS);
    for (size_t i = 0; i < o->n_series; i++) {
        const w_series *s = &w->series[o->series_order[i]];
        for (uint32_t l = 0; l < s->label_count; l++) {
            posting_entry pe = {sn[w->label_words[s->first_label + 2 * l]],
                                sn[w->label_words[s->first_label + 2 * l + 1]], (uint32_t)i};
            enc_put(e, BLOCK_COL_SERIES_LABELS_NAME, pe.name);
            enc_put(e, BLOCK_COL_SERIES_LABELS_VALUE, pe.value);
            enc_end_row(e);
            entries[n++] = pe;
        }
    }
    int rc = enc_end_table(e);
    qsort(entries, n, sizeof *entries, compare_postings);
    if (rc == 0) {
        enc_begin_table(e, BLOCK_TABLE_POSTINGS);
        for (size_t i = 0; i < n;) {
            size_t j = i;
            while (j < n && entries[j].name == entries[i].name &&
                   entries[j].value == entries[i].value)
                j++;
            enc_put(e, BLOCK_COL_POSTINGS_NAME, entries[i].name);
            enc_put(e, BLOCK_COL_POSTINGS_VALUE, entries[i].value);
            enc_put(e, BLOCK_COL_POSTINGS_FIRST, i);
            enc_put(e, BLOCK_COL_POSTINGS_SERIES_COUNT, j - i);
            enc_end_row(e);
            i = j;
        }
        rc = enc_end_table(e);
    }
    if (rc == 0) {
        enc_begin_table(e, BLOCK_TABLE_POSTING_SERIES);
        for (size_t i = 0; i < n; i++) {
            enc_put(e, 0, entries[i].series);
            enc_end_row(e);
        }
        rc = enc_end_table(e);
    }
    free(entries);
    return rc;
}

static int write_profile_tables(encoder *e, const block_order *o) {
    block_writer *w = e->w;
    enc_begin_table(e, BLOCK_TABLE_PROFILES);
    uint64_t first = 0;
    for (size_t i = 0; i < w->n_profiles; i++) {
        const w_profile *p = &w->profiles[o->profile_order[i]];
        enc_put(e, BLOCK_COL_PROFILES_SERIES, o->series_new[p->series]);
        enc_put(e, BLOCK_COL_PROFILES_TIME, (uint64_t)p->time_ns);
        enc_put(e, BLOCK_COL_PROFILES_DURATION, (uint64_t)p->duration_ns);
        enc_put(e, BLOCK_COL_PROFILES_PERIOD, (uint64_t)p->period);
        enc_put(e, BLOCK_COL_PROFILES_TOTAL, (uint64_t)p->total);
        enc_put(e, BLOCK_COL_PROFILES_FIRST_SAMPLE, first);
        enc_put(e, BLOCK_COL_PROFILES_SAMPLE_COUNT, p->sample_count);
        first += p->sample_count;
        enc_end_row(e);
    }
    if (enc_end_table(e) != 0)
        return -1;
    enc_begin_table(e, BLOCK_TABLE_SAMPLES);
    for (size_t i = 0; i < w->n_profiles; i++) {
        const w_profile *p = &w->profiles[o->profile_order[i]];
        for (uint32_t s = 0; s < p->sample_count; s++) {
            enc_put(e, BLOCK_COL_SAMPLES_STACK, w->sample_stacks[p->first_sample + s]);
            enc_put(e, BLOCK_COL_SAMPLES_VALUE, (uint64_t)w->sample_values[p->first_sample + s]);
            if (o->n_sets > 0)
                enc_put(e, BLOCK_COL_SAMPLES_LABEL_SET,
                        o->set_new[w->sample_label_sets[p->first_sample + s]]);
            enc_end_row(e);
        }
    }
    return enc_end_table(e);
}

static int compare_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* The version 2 tables: label_sets and label_set_labels (the used sets, renumbered), and
 * series_label_sets (per series, the distinct sets its samples use, ascending). */
static int write_label_set_tables(encoder *e, const block_order *o) {
    block_writer *w = e->w;
    if (o->n_sets == 0)
        return 0;
    const uint32_t *sn = o->string_new;
    enc_begin_table(e, BLOCK_TABLE_LABEL_SETS);
    uint64_t first = 0;
    for (size_t id = 1; id <= w->n_label_sets; id++) {
        if (o->set_new[id] == 0)
            continue;
        enc_put(e, BLOCK_COL_LABEL_SETS_FIRST_LABEL, first);
        enc_put(e, BLOCK_COL_LABEL_SETS_LABEL_COUNT, w->label_sets[id - 1].count);
        first += w->label_sets[id - 1].count;
        enc_end_row(e);
    }
    if (enc_end_table(e) != 0)
        return -1;
    enc_begin_table(e, BLOCK_TABLE_LABEL_SET_LABELS);
    for (size_t id = 1; id <= w->n_label_sets; id++) {
        const w_label_set *set = &w->label_sets[id - 1];
        for (uint32_t i = 0; o->set_new[id] != 0 && i < set->count; i++) {
            enc_put(e, BLOCK_COL_LABEL_SET_LABELS_NAME, sn[w->set_words[set->first + 2 * i]]);
            enc_put(e, BLOCK_COL_LABEL_SET_LABELS_VALUE, sn[w->set_words[set->first + 2 * i + 1]]);
            enc_end_row(e);
        }
    }
    if (enc_end_table(e) != 0)
        return -1;
    if (w->spool != NULL) /* spooled: series_label_sets was written as the series came */
        return 0;
    /* profiles come sorted by series: collect each series' distinct sets with a stamp per set */
    uint32_t *stamp = calloc(o->n_sets + 1, sizeof *stamp);
    uint32_t *sets = malloc((o->n_sets + 1) * sizeof *sets);
    if (stamp == NULL || sets == NULL) {
        free(stamp);
        free(sets);
        return strata_error_oom(e->err);
    }
    enc_begin_table(e, BLOCK_TABLE_SERIES_LABEL_SETS);
    for (size_t i = 0; i < w->n_profiles;) {
        uint32_t series = o->series_new[w->profiles[o->profile_order[i]].series];
        size_t n = 0;
        for (;
             i < w->n_profiles && o->series_new[w->profiles[o->profile_order[i]].series] == series;
             i++) {
            const w_profile *p = &w->profiles[o->profile_order[i]];
            for (uint32_t s = 0; s < p->sample_count; s++) {
                uint32_t set = o->set_new[w->sample_label_sets[p->first_sample + s]];
                if (set != 0 && stamp[set] != series + 1) {
                    stamp[set] = series + 1;
                    sets[n++] = set;
                }
            }
        }
        qsort(sets, n, sizeof *sets, compare_u32);
        for (size_t k = 0; k < n; k++) {
            enc_put(e, BLOCK_COL_SERIES_LABEL_SETS_SERIES, series);
            enc_put(e, BLOCK_COL_SERIES_LABEL_SETS_LABEL_SET, sets[k]);
            enc_end_row(e);
        }
    }
    free(stamp);
    free(sets);
    return enc_end_table(e);
}

/* The optional rollup tables (block_rollup.h): rollup_stacks streamed from the builder, then
 * rollup_series, one row per series. */
typedef struct rollup_sink {
    encoder *e;
    const uint32_t *set_new; /* the builder sees old label set ids */
} rollup_sink;

static int put_rollup_row(void *ctx, uint32_t stack, uint32_t set, int64_t value,
                          strata_error *err) {
    rollup_sink *sink = ctx;
    encoder *e = sink->e;
    (void)err; /* encoder allocation failures are reported by enc_end_table */
    enc_put(e, BLOCK_COL_ROLLUP_STACKS_STACK, stack);
    enc_put(e, BLOCK_COL_ROLLUP_STACKS_VALUE, (uint64_t)value);
    enc_put(e, BLOCK_COL_ROLLUP_STACKS_LABEL_SET, sink->set_new[set]);
    enc_end_row(e);
    return 0;
}

static void rollup_inputs(const block_writer *w, const block_order *o, block_rollup_profile *in) {
    for (size_t i = 0; i < w->n_profiles; i++) {
        const w_profile *p = &w->profiles[o->profile_order[i]];
        const w_series *s = &w->series[p->series];
        bool scale =
            block_rollup_scale(w->strings.strings[s->type[1]], w->strings.strings[s->type[2]]);
        in[i] =
            (block_rollup_profile){o->series_new[p->series],
                                   scale ? p->period : 1,
                                   w->sample_stacks + p->first_sample,
                                   o->n_sets > 0 ? w->sample_label_sets + p->first_sample : NULL,
                                   w->sample_values + p->first_sample,
                                   p->sample_count};
    }
}

static int write_rollup_tables(encoder *e, const block_order *o) {
    block_writer *w = e->w;
    if (!w->options.write_rollups)
        return 0;
    block_rollup_profile *in = malloc((w->n_profiles + 1) * sizeof *in);
    block_rollup_series *series = malloc((o->n_series + 1) * sizeof *series);
    int rc = (in != NULL && series != NULL) ? 0 : strata_error_oom(e->err);
    if (rc == 0) {
        rollup_inputs(w, o, in);
        rollup_sink sink = {e, o->set_new};
        enc_begin_table(e, BLOCK_TABLE_ROLLUP_STACKS);
        rc = block_rollup_build(in, w->n_profiles, o->n_series, w->n_stacks + 1, put_rollup_row,
                                &sink, series, e->err);
        if (rc == 0)
            rc = enc_end_table(e);
    }
    if (rc == 0) {
        enc_begin_table(e, BLOCK_TABLE_ROLLUP_SERIES);
        for (size_t i = 0; i < o->n_series; i++) {
            enc_put(e, BLOCK_COL_ROLLUP_SERIES_PROFILE_COUNT, series[i].profile_count);
            enc_put(e, BLOCK_COL_ROLLUP_SERIES_FIRST_STACK, series[i].first_stack);
            enc_put(e, BLOCK_COL_ROLLUP_SERIES_STACK_COUNT, series[i].stack_count);
            enc_end_row(e);
        }
        rc = enc_end_table(e);
    }
    free(in);
    free(series);
    return rc;
}

static int encode_block(block_writer *w, const block_order *o, strata_buffer *data,
                        strata_error *err) {
    encoder e;
    memset(&e, 0, sizeof e);
    e.w = w;
    e.err = err;
    e.version = o->version;
    size_t base = data->len;
    e.object = block_object_new_buffer(data, w->options.page_size, w->options.zstd_level, err);
    if (e.object == NULL)
        return -1;
    int rc = -1;
    if (write_symbol_tables(&e, o) == 0 && write_series_tables(&e, o) == 0 &&
        write_label_set_tables(&e, o) == 0 && write_profile_tables(&e, o) == 0 &&
        write_rollup_tables(&e, o) == 0)
        rc = block_object_finish(e.object, o->version, err);
    block_table_encoder_free(&e.table);
    block_object_free(e.object);
    if (rc != 0)
        data->len = base;
    return rc;
}

/* ---- meta ------------------------------------------------------------------------------- */

static int append_type_text(const block_writer *w, const w_series *s, strata_buffer *out) {
    for (int i = 0; i < 5; i++) {
        if ((i > 0 && strata_buffer_append_byte(out, ':') != 0) ||
            strata_buffer_append(out, w->strings.strings[s->type[i]],
                                 w->strings.lengths[s->type[i]]) != 0)
            return -1;
    }
    if (s->delta && strata_buffer_append_str(out, ":delta") != 0)
        return -1;
    return strata_buffer_append_byte(out, '\0');
}

static int compare_cstr(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorts and removes duplicates from a list of owned strings. */
static size_t sort_unique(char **items, size_t n) {
    qsort(items, n, sizeof *items, compare_cstr);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (k > 0 && strcmp(items[k - 1], items[i]) == 0) {
            free(items[i]);
            continue;
        }
        items[k++] = items[i];
    }
    return k;
}

static int meta_profile_types(const block_writer *w, const block_order *o, block_meta *meta,
                              strata_error *err) {
    meta->profile_types = calloc(o->n_series + 1, sizeof *meta->profile_types);
    if (meta->profile_types == NULL)
        return strata_error_oom(err);
    strata_buffer text = STRATA_BUFFER_INIT;
    for (size_t i = 0; i < o->n_series; i++) {
        strata_buffer_reset(&text);
        if (append_type_text(w, &w->series[o->series_order[i]], &text) != 0 ||
            (meta->profile_types[meta->n_profile_types] = strdup((char *)text.data)) == NULL) {
            strata_buffer_free(&text);
            return strata_error_oom(err);
        }
        meta->n_profile_types++;
    }
    strata_buffer_free(&text);
    meta->n_profile_types = sort_unique(meta->profile_types, meta->n_profile_types);
    return 0;
}

static int meta_label_names(const block_writer *w, const block_order *o, block_meta *meta,
                            strata_error *err) {
    meta->label_names = calloc(w->n_label_words / 2 + 1, sizeof *meta->label_names);
    if (meta->label_names == NULL)
        return strata_error_oom(err);
    for (size_t i = 0; i < o->n_series; i++) {
        const w_series *s = &w->series[o->series_order[i]];
        for (uint32_t l = 0; l < s->label_count; l++) {
            const char *name = w->strings.strings[w->label_words[s->first_label + 2 * l]];
            if ((meta->label_names[meta->n_label_names] = strdup(name)) == NULL)
                return strata_error_oom(err);
            meta->n_label_names++;
        }
    }
    meta->n_label_names = sort_unique(meta->label_names, meta->n_label_names);
    return 0;
}

static int fill_meta(const block_writer *w, const block_order *o, uint64_t object_size,
                     block_meta *meta, strata_error *err) {
    block_meta_init(meta);
    if (ulid_new(&meta->id, err) != 0)
        return -1;
    int64_t min_ns = w->spool != NULL ? w->spool_min_time : INT64_MAX;
    int64_t max_ns = w->spool != NULL ? w->spool_max_time : INT64_MIN;
    for (size_t i = 0; w->spool == NULL && i < w->n_profiles; i++) {
        if (w->profiles[i].time_ns < min_ns)
            min_ns = w->profiles[i].time_ns;
        if (w->profiles[i].time_ns > max_ns)
            max_ns = w->profiles[i].time_ns;
    }
    /* floor division so negative times still bound correctly */
    meta->min_time_ms = min_ns / STRATA_NS_PER_MS - (min_ns % STRATA_NS_PER_MS < 0);
    meta->max_time_ms = max_ns / STRATA_NS_PER_MS - (max_ns % STRATA_NS_PER_MS < 0) + 1;
    meta->num_samples = w->n_samples;
    meta->num_series = o->n_series;
    meta->num_profiles = w->n_profiles;
    meta->compaction_level = w->options.compaction_level;
    meta->version = BLOCK_META_VERSION;
    meta->format_version = o->version;
    meta->tenant = strdup(w->tenant);
    meta->files = calloc(1, sizeof *meta->files);
    if (meta->tenant == NULL || meta->files == NULL)
        return strata_error_oom(err);
    meta->files[0].rel_path = strdup(BLOCK_DATA_FILE);
    if (meta->files[0].rel_path == NULL)
        return strata_error_oom(err);
    meta->files[0].size_bytes = object_size;
    meta->n_files = 1;
    if (block_meta_set_sources(meta, &meta->id, 1, err) != 0)
        return -1;
    return meta_profile_types(w, o, meta, err) != 0 ? -1 : meta_label_names(w, o, meta, err);
}

/* Renumbers a detached block's locations by (mapping, address) and its functions by first use in
 * that order, so that the DELTA-encoded address and function columns hold small steps (fresh
 * agent blocks about 16% smaller than in first-seen order; block-format.md 6.4). A detached
 * writer only finishes, so nothing else holds these ids; it runs here, in the ingester's flush
 * thread, not in block_writer_detach under the ingester's lock. Out of memory, the order is kept:
 * the block is the same, only larger. */
static void renumber_symbols_by_address(block_writer *w) {
    size_t n = w->n_locations, nf = w->n_functions;
    strata_sort_record *keys = malloc(2 * n * sizeof *keys + 1);
    uint32_t *new_location = malloc(n * sizeof *new_location + 1);
    uint32_t *new_function = malloc(nf * sizeof *new_function + 1);
    w_location *locations = malloc(n * sizeof *locations + 1);
    w_line *lines = malloc(w->n_lines * sizeof *lines + 1);
    w_function *functions = malloc(nf * sizeof *functions + 1);
    if (keys == NULL || new_location == NULL || new_function == NULL || locations == NULL ||
        lines == NULL || functions == NULL) {
        free(keys);
        free(new_location);
        free(new_function);
        free(locations);
        free(lines);
        free(functions);
        return;
    }
    /* by (mapping, address, id): stable sorts by the address, then by the mapping */
    for (size_t i = 0; i < n; i++)
        keys[i] = (strata_sort_record){w->locations[i].address, i};
    strata_radix_sort(keys, keys + n, n);
    for (size_t k = 0; k < n; k++)
        keys[k].key = w->locations[keys[k].payload].mapping;
    strata_radix_sort(keys, keys + n, n);
    memset(new_function, 0xff, nf * sizeof *new_function);
    uint32_t n_functions = 0;
    size_t n_lines = 0;
    for (size_t k = 0; k < n; k++) {
        w_location l = w->locations[keys[k].payload];
        new_location[keys[k].payload] = (uint32_t)k;
        for (uint32_t j = 0; j < l.line_count; j++) {
            w_line line = w->lines[l.first_line + j];
            if (new_function[line.function] == UINT32_MAX) {
                new_function[line.function] = n_functions;
                functions[n_functions++] = w->functions[line.function];
            }
            line.function = new_function[line.function];
            lines[n_lines + j] = line;
        }
        l.first_line = (uint32_t)n_lines;
        n_lines += l.line_count;
        locations[k] = l;
    }
    for (size_t i = 0; i < nf; i++) /* functions no line names keep their relative order */
        if (new_function[i] == UINT32_MAX)
            functions[n_functions++] = w->functions[i];
    for (size_t i = 0; i < w->n_stacks; i++)
        w->stacks[i].location = new_location[w->stacks[i].location];
    if (w->location_origins != NULL) { /* keys[k].payload is now location k's old row */
        for (size_t k = 0; k < n; k++)
            keys[k].key = w->location_origins[keys[k].payload];
        for (size_t k = 0; k < n; k++)
            w->location_origins[k] = (uint32_t)keys[k].key;
    }
    free(w->locations);
    free(w->lines);
    free(w->functions);
    w->locations = locations;
    w->cap_locations = n;
    w->lines = lines;
    w->cap_lines = w->n_lines;
    w->functions = functions;
    w->cap_functions = nf;
    free(keys);
    free(new_location);
    free(new_function);
}

/* The spooled tables, ended with the columns of the block's version. */
static int end_spooled_tables(block_writer *w, int version, strata_error *err) {
    bool v2 = version >= BLOCK_FORMAT_VERSION_LABELS;
    int samples_cols = v2 ? block_table_schema_get(BLOCK_TABLE_SAMPLES)->n_columns
                          : block_table_schema_get(BLOCK_TABLE_SAMPLES)->n_required;
    int rollup_cols = v2 ? block_table_schema_get(BLOCK_TABLE_ROLLUP_STACKS)->n_columns
                         : block_table_schema_get(BLOCK_TABLE_ROLLUP_STACKS)->n_required;
    if (block_table_encoder_end(&w->spool_profiles, w->spool_profiles.n_cols, err) != 0 ||
        block_table_encoder_end(&w->spool_samples, samples_cols, err) != 0)
        return -1;
    if (w->options.write_rollups &&
        block_table_encoder_end(&w->spool_rollups, rollup_cols, err) != 0)
        return -1;
    if (v2 && block_table_encoder_end(&w->spool_series_sets, w->spool_series_sets.n_cols, err) != 0)
        return -1;
    return 0;
}

/* rollup_series of a spooled block: the entries its series got as they ended. */
static int write_spooled_rollup_series(encoder *e, const block_order *o) {
    block_writer *w = e->w;
    if (!w->options.write_rollups)
        return 0;
    enc_begin_table(e, BLOCK_TABLE_ROLLUP_SERIES);
    for (size_t i = 0; i < o->n_series; i++) {
        const block_rollup_series *r = &w->spool_rollup_series[i];
        enc_put(e, BLOCK_COL_ROLLUP_SERIES_PROFILE_COUNT, r->profile_count);
        enc_put(e, BLOCK_COL_ROLLUP_SERIES_FIRST_STACK, r->first_stack);
        enc_put(e, BLOCK_COL_ROLLUP_SERIES_STACK_COUNT, r->stack_count);
        enc_end_row(e);
    }
    return enc_end_table(e);
}

/* block_writer_finish of a spooled writer: the spooled tables are ended, the others (symbols,
 * series, label sets, rollup_series) written after them, then the footer. Series came in block
 * order (spool_check_order), so the ids the spooled rows carry are the ones order_series gives. */
static int finish_spooled(block_writer *w, block_meta *meta, strata_error *err) {
    block_order o;
    memset(&o, 0, sizeof o);
    encoder e;
    memset(&e, 0, sizeof e);
    int rc = -1;
    if (spool_end_series(w, err) != 0 || order_series(w, &o, err) != 0 ||
        order_label_sets(w, &o, err) != 0 || order_strings(w, &o, err) != 0)
        goto done;
    if (o.n_series != w->spool_series_out) {
        strata_error_set(err, STRATA_INTERNAL, "block writer: %zu series spooled, %zu to write",
                         (size_t)w->spool_series_out, o.n_series);
        goto done;
    }
    e.w = w;
    e.err = err;
    e.version = o.version;
    e.object = w->spool;
    if (end_spooled_tables(w, o.version, err) == 0 && write_symbol_tables(&e, &o) == 0 &&
        write_series_tables(&e, &o) == 0 && write_label_set_tables(&e, &o) == 0 &&
        write_spooled_rollup_series(&e, &o) == 0 &&
        block_object_finish(w->spool, o.version, err) == 0) {
        rc = fill_meta(w, &o, block_object_size(w->spool), meta, err);
        if (rc != 0)
            block_meta_free(meta);
    }
done:
    block_table_encoder_free(&e.table);
    block_order_free(&o);
    if (rc == 0)
        w->finished = true;
    return rc;
}

int block_writer_finish(block_writer *w, strata_buffer *data, block_meta *meta, strata_error *err) {
    if (w->finished)
        return strata_error_set(err, STRATA_FAILED_PRECONDITION, "block writer: already finished");
    if (w->open)
        return strata_error_set(err, STRATA_FAILED_PRECONDITION,
                                "block writer: a profile is still open; end it before finishing");
    if (w->n_profiles == 0)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "block writer: no profiles were added; an empty block is not "
                                "written");
    if (w->spool_broken)
        return check_writable(w, err);
    if (w->spool != NULL)
        return finish_spooled(w, meta, err);
    if (w->detached)
        renumber_symbols_by_address(w);
    block_order o;
    memset(&o, 0, sizeof o);
    size_t base = data->len;
    int rc = -1;
    if (order_series(w, &o, err) == 0 && order_label_sets(w, &o, err) == 0 &&
        order_strings(w, &o, err) == 0 && order_profiles(w, &o, err) == 0 &&
        encode_block(w, &o, data, err) == 0) {
        rc = fill_meta(w, &o, data->len - base, meta, err);
        if (rc != 0) {
            block_meta_free(meta);
            data->len = base;
        }
    }
    block_order_free(&o);
    if (rc == 0)
        w->finished = true;
    return rc;
}
