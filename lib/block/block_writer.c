/*
 * block_writer.c - see block_writer.h for the design and block_format.h for the layout.
 */
#include "block/block_writer.h"

#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

#include "block/block_format.h"
#include "block/block_rollup.h"
#include "common/clock.h"
#include "common/hash.h"

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

typedef struct w_pair {
    uint32_t stack;
    int64_t value;
} w_pair;

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

struct stack_cache_entry {
    uint64_t check; /* second 64 bits of the fingerprint */
    uint32_t stack;
};

/* A pprof sample whose stack missed the whole-stack cache, interned after the profile's other
 * samples in root-first order so consecutive stacks share their interned prefix. */
typedef struct stack_miss {
    uint64_t key, check; /* whole-stack fingerprint */
    size_t frames;       /* offset into profile_frames, leaf first */
    size_t pair;         /* index into pairs */
    uint32_t n_frames;
} stack_miss;

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
    /* whole-stack cache: 128-bit fingerprint of a location sequence -> stack id */
    slot_map stack_cache; /* first 64 bits -> index into stack_cache_entries */
    struct stack_cache_entry *stack_cache_entries;
    size_t n_stack_cache, cap_stack_cache;
    uint32_t *frame_scratch;
    size_t cap_frame_scratch;
    /* per pprof profile: every sample's block location ids, and the samples that missed the cache
     */
    uint32_t *profile_frames;
    size_t cap_profile_frames;
    stack_miss *misses;
    size_t n_misses, cap_misses;

    w_series *series;
    size_t n_series, cap_series;
    slot_map series_index;
    uint32_t *label_words; /* (name, value) string id pairs */
    size_t n_label_words, cap_label_words;

    w_profile *profiles;
    size_t n_profiles, cap_profiles;
    uint32_t *sample_stacks;
    int64_t *sample_values;
    size_t n_samples, cap_sample_stacks, cap_sample_values;

    /* per-profile scratch, reused */
    w_pair *pairs;
    size_t n_pairs, cap_pairs;
    uint32_t *pprof_mapping_ids, *pprof_function_ids, *pprof_location_ids;
    size_t cap_pprof_mappings, cap_pprof_functions, cap_pprof_locations;
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

static int intern_pprof_string(block_writer *w, const pprof_profile *p, int64_t index, uint32_t *id,
                               strata_error *err) {
    pprof_string s = pprof_string_at(p, index);
    return intern_string(w, s.ptr, s.len, id, err);
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

static bool function_equal(const block_writer *w, uint64_t id, const void *item) {
    const w_function *a = item;
    if (id >= w->n_functions)
        return false;
    const w_function *b = &w->functions[id];
    return a->name == b->name && a->system_name == b->system_name && a->file == b->file &&
           a->start_line == b->start_line;
}

static int intern_function(block_writer *w, const w_function *f, uint32_t *id, strata_error *err) {
    ENSURE_OR_OOM(w->functions, w->cap_functions, w->n_functions + 1);
    uint64_t h = strata_hash_combine((uint64_t)f->name << 32 | f->system_name,
                                     (uint64_t)f->file << 32 ^ (uint64_t)f->start_line);
    bool found;
    uint64_t *slot = dedup_slot(&w->function_index, h, function_equal, w, f, &found);
    if (slot == NULL)
        return strata_error_oom(err);
    if (!found) {
        *slot = w->n_functions;
        w->functions[w->n_functions++] = *f;
    }
    *id = (uint32_t)*slot;
    return 0;
}

typedef struct location_item {
    w_location loc; /* first_line unused */
    const w_line *lines;
} location_item;

static bool location_equal(const block_writer *w, uint64_t id, const void *item) {
    const location_item *a = item;
    if (id >= w->n_locations)
        return false;
    const w_location *b = &w->locations[id];
    if (a->loc.address != b->address || a->loc.mapping != b->mapping ||
        a->loc.line_count != b->line_count || a->loc.flags != b->flags)
        return false;
    for (uint32_t i = 0; i < b->line_count; i++) {
        const w_line *x = &a->lines[i], *y = &w->lines[b->first_line + i];
        if (x->function != y->function || x->line != y->line)
            return false;
    }
    return true;
}

static int intern_location(block_writer *w, const location_item *item, uint32_t *id,
                           strata_error *err) {
    if (w->n_locations >= UINT32_MAX - 2 || w->n_lines + item->loc.line_count >= UINT32_MAX)
        return strata_error_set(err, STRATA_RESOURCE_EXHAUSTED,
                                "block writer: too many locations for one block");
    ENSURE_OR_OOM(w->locations, w->cap_locations, w->n_locations + 1);
    ENSURE_OR_OOM(w->lines, w->cap_lines, w->n_lines + item->loc.line_count);
    uint64_t h =
        strata_hash_combine(item->loc.address, (uint64_t)item->loc.mapping << 32 | item->loc.flags);
    for (uint32_t i = 0; i < item->loc.line_count; i++)
        h = strata_hash_combine(h, (uint64_t)item->lines[i].function << 32 ^
                                       (uint64_t)item->lines[i].line);
    bool found;
    uint64_t *slot = dedup_slot(&w->location_index, h, location_equal, w, item, &found);
    if (slot == NULL)
        return strata_error_oom(err);
    if (!found) {
        *slot = w->n_locations;
        w_location loc = item->loc;
        loc.first_line = (uint32_t)w->n_lines;
        memcpy(&w->lines[w->n_lines], item->lines, loc.line_count * sizeof *item->lines);
        w->n_lines += loc.line_count;
        w->locations[w->n_locations++] = loc;
    }
    *id = (uint32_t)*slot;
    return 0;
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
        memcpy(&w->label_words[w->n_label_words], item.labels,
               2 * (size_t)item.label_count * sizeof *item.labels);
        w->n_label_words += 2 * item.label_count;
        *slot = w->n_series++;
    }
    *id = (uint32_t)*slot;
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
    free(w->locations);
    free(w->location_index.slots);
    free(w->lines);
    free(w->stacks);
    free(w->stack_index.slots);
    free(w->chain_locations);
    free(w->chain_nodes);
    free(w->profile_frames);
    free(w->misses);
    free(w->stack_cache.slots);
    free(w->stack_cache_entries);
    free(w->frame_scratch);
    free(w->series);
    free(w->series_index.slots);
    free(w->label_words);
    free(w->profiles);
    free(w->sample_stacks);
    free(w->sample_values);
    free(w->pairs);
    free(w->pprof_mapping_ids);
    free(w->pprof_function_ids);
    free(w->pprof_location_ids);
    free(w->line_scratch);
    free(w->label_scratch);
    free(w);
}

static int check_writable(const block_writer *w, strata_error *err) {
    if (w->finished)
        return strata_error_set(err, STRATA_FAILED_PRECONDITION, "block writer: already finished");
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
    w->current.time_ns = time_ns;
    w->current.duration_ns = duration_ns;
    w->current.period = period;
    w->n_pairs = 0;
    w->open = true;
    return 0;
}

static int push_pair(block_writer *w, uint32_t stack, int64_t value, strata_error *err) {
    ENSURE_OR_OOM(w->pairs, w->cap_pairs, w->n_pairs + 1);
    w->pairs[w->n_pairs].stack = stack;
    w->pairs[w->n_pairs].value = value;
    w->n_pairs++;
    return 0;
}

static int compare_pairs(const void *a, const void *b) {
    uint32_t x = ((const w_pair *)a)->stack, y = ((const w_pair *)b)->stack;
    return x < y ? -1 : x > y;
}

/* Sorts the open profile's pairs by stack, sums duplicates, drops zeros, appends the samples and
 * the profile. */
static int commit_profile(block_writer *w, strata_error *err) {
    qsort(w->pairs, w->n_pairs, sizeof *w->pairs, compare_pairs);
    size_t kept = 0;
    int64_t total = 0;
    for (size_t i = 0; i < w->n_pairs;) {
        uint32_t stack = w->pairs[i].stack;
        int64_t sum = 0;
        for (; i < w->n_pairs && w->pairs[i].stack == stack; i++) {
            if (__builtin_add_overflow(sum, w->pairs[i].value, &sum))
                return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                        "block writer: sample values of stack %u overflow int64",
                                        stack);
        }
        if (sum == 0)
            continue;
        if (__builtin_add_overflow(total, sum, &total))
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "block writer: the profile's total overflows int64");
        w->pairs[kept].stack = stack;
        w->pairs[kept].value = sum;
        kept++;
    }
    ENSURE_OR_OOM(w->sample_stacks, w->cap_sample_stacks, w->n_samples + kept);
    ENSURE_OR_OOM(w->sample_values, w->cap_sample_values, w->n_samples + kept);
    ENSURE_OR_OOM(w->profiles, w->cap_profiles, w->n_profiles + 1);
    for (size_t i = 0; i < kept; i++) {
        w->sample_stacks[w->n_samples + i] = w->pairs[i].stack;
        w->sample_values[w->n_samples + i] = w->pairs[i].value;
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

static int translate_functions(block_writer *w, const pprof_profile *p, strata_error *err) {
    ENSURE_OR_OOM(w->pprof_function_ids, w->cap_pprof_functions, p->n_functions + 1);
    for (size_t i = 0; i < p->n_functions; i++) {
        const pprof_function *pf = &p->functions[i];
        w_function f = {0, 0, 0, pf->start_line};
        if (intern_pprof_string(w, p, pf->name, &f.name, err) != 0 ||
            intern_pprof_string(w, p, pf->system_name, &f.system_name, err) != 0 ||
            intern_pprof_string(w, p, pf->filename, &f.file, err) != 0 ||
            intern_function(w, &f, &w->pprof_function_ids[i], err) != 0)
            return -1;
    }
    return 0;
}

static int translate_location(block_writer *w, const pprof_profile *p, size_t i,
                              strata_error *err) {
    const pprof_location *pl = &p->locations[i];
    location_item item;
    memset(&item, 0, sizeof item);
    item.loc.address = pl->address;
    item.loc.flags = pl->is_folded ? BLOCK_LOCATION_IS_FOLDED : 0;
    if (pl->mapping_id != 0) {
        const pprof_mapping *m = pprof_find_mapping(p, pl->mapping_id);
        if (m == NULL)
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "pprof location %llu: mapping %llu is not defined",
                                    (unsigned long long)pl->id, (unsigned long long)pl->mapping_id);
        item.loc.mapping = w->pprof_mapping_ids[m - p->mappings];
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
    item.loc.line_count = pl->line_count;
    item.lines = w->line_scratch;
    return intern_location(w, &item, &w->pprof_location_ids[i], err);
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

static int translate_locations(block_writer *w, const pprof_profile *p, strata_error *err) {
    ENSURE_OR_OOM(w->pprof_location_ids, w->cap_pprof_locations, p->n_locations + 1);
    for (size_t i = 0; i < p->n_locations; i++) {
        if (translate_location(w, p, i, err) != 0)
            return -1;
    }
    return 0;
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

/* The whole-stack cache: a stack (block location ids, leaf first) is found by its 128-bit
 * fingerprint. Samples repeat the same stacks profile after profile, so most stacks cost two hashes
 * and one lookup instead of one lookup per frame. A false match needs a 128-bit collision
 * (probability ~n^2 / 2^129). */
static void stack_fingerprint(const uint32_t *locations, size_t n, uint64_t *key, uint64_t *check) {
    size_t bytes = n * sizeof *locations;
    *key = strata_hash_bytes(locations, bytes, 0x5eed) | 1;
    *check = strata_hash_bytes(locations, bytes, 0xc0ffee);
}

enum { STACK_CACHE_MISS, STACK_CACHE_HIT, STACK_CACHE_COLLISION };

static int stack_cache_find(const block_writer *w, uint64_t key, uint64_t check, uint32_t *stack) {
    const slot_map *m = &w->stack_cache;
    if (m->slots == NULL)
        return STACK_CACHE_MISS;
    size_t i = strata_hash_u64(key) & m->mask;
    while (m->slots[i].key != key) {
        if (m->slots[i].key == 0)
            return STACK_CACHE_MISS;
        i = (i + 1) & m->mask;
    }
    const struct stack_cache_entry *e = &w->stack_cache_entries[m->slots[i].value];
    if (e->check != check)
        return STACK_CACHE_COLLISION; /* 64-bit collision: this stack is not cached */
    *stack = e->stack;
    return STACK_CACHE_HIT;
}

static int stack_cache_add(block_writer *w, uint64_t key, uint64_t check, uint32_t stack,
                           strata_error *err) {
    ENSURE_OR_OOM(w->stack_cache_entries, w->cap_stack_cache, w->n_stack_cache + 1);
    bool inserted;
    map_slot *slot = slot_map_claim(&w->stack_cache, key, &inserted);
    if (slot == NULL)
        return strata_error_oom(err);
    if (!inserted)
        return 0; /* already cached (or a 64-bit collision, left uncached) */
    slot->value = w->n_stack_cache;
    w->stack_cache_entries[w->n_stack_cache].check = check;
    w->stack_cache_entries[w->n_stack_cache].stack = stack;
    w->n_stack_cache++;
    return 0;
}

/* Finds a whole stack in the cache, or interns it and remembers it. */
static int intern_stack_cached(block_writer *w, const uint32_t *locations, size_t n,
                               uint32_t *stack, strata_error *err) {
    uint64_t key, check;
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
    for (uint32_t j = 0; j < s->location_count; j++) {
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
    const stack_miss *x = a, *y = b;
    const uint32_t *fx = w->profile_frames + x->frames, *fy = w->profile_frames + y->frames;
    size_t nx = x->n_frames, ny = y->n_frames, n = nx < ny ? nx : ny;
    for (size_t i = 0; i < n; i++) {
        uint32_t u = fx[nx - 1 - i], v = fy[ny - 1 - i];
        if (u != v)
            return u < v ? -1 : 1;
    }
    return nx < ny ? -1 : nx > ny;
}

/* Interns the stacks that missed the cache, in root-first order, and fills in their pairs. */
static int intern_missed_stacks(block_writer *w, strata_error *err) {
    if (w->n_misses > 1)
        qsort_r(w->misses, w->n_misses, sizeof *w->misses, compare_misses, w);
    for (size_t m = 0; m < w->n_misses; m++) {
        const stack_miss *miss = &w->misses[m];
        uint32_t stack;
        if (intern_stack_chain(w, w->profile_frames + miss->frames, miss->n_frames, &stack, err) !=
                0 ||
            stack_cache_add(w, miss->key, miss->check, stack, err) != 0)
            return -1;
        w->pairs[miss->pair].stack = stack;
    }
    return 0;
}

static int add_pprof_samples(block_writer *w, const pprof_profile *p, size_t type_index,
                             strata_error *err) {
    size_t n_values = p->n_samples * p->n_sample_types;
    size_t used = 0; /* profile_frames taken by missed stacks */
    w->n_misses = 0;
    for (size_t i = 0; i < p->n_samples; i++) {
        size_t at = (size_t)p->samples[i].value_offset + type_index;
        if (at >= n_values)
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "pprof sample %zu: value out of range", i);
        int64_t value = p->sample_values[at];
        if (value == 0)
            continue;
        if (pprof_sample_frames(w, p, i, used, err) != 0)
            return -1;
        const uint32_t *frames = &w->profile_frames[used];
        size_t n = p->samples[i].location_count;
        uint64_t key, check;
        stack_fingerprint(frames, n, &key, &check);
        uint32_t stack = 0;
        int found = stack_cache_find(w, key, check, &stack);
        if (found == STACK_CACHE_COLLISION && intern_stack_chain(w, frames, n, &stack, err) != 0)
            return -1;
        if (found == STACK_CACHE_MISS) {
            ENSURE_OR_OOM(w->misses, w->cap_misses, w->n_misses + 1);
            stack_miss *miss = &w->misses[w->n_misses++];
            miss->key = key;
            miss->check = check;
            miss->frames = used;
            miss->n_frames = (uint32_t)n;
            miss->pair = w->n_pairs;
            used += n;
        }
        if (push_pair(w, stack, value, err) != 0)
            return -1;
    }
    return intern_missed_stacks(w, err);
}

int block_writer_add_profile(block_writer *w, const label_set *labels, const profile_type *type,
                             int64_t time_ns, int64_t duration_ns, int64_t period,
                             const pprof_profile *p, size_t sample_type_index, strata_error *err) {
    if (p == NULL || sample_type_index >= p->n_sample_types)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "block writer: sample type index %zu out of range (profile has "
                                "%zu sample types)",
                                sample_type_index, p == NULL ? (size_t)0 : p->n_sample_types);
    if (start_profile(w, labels, type, time_ns, duration_ns, period, err) != 0)
        return -1;
    uint64_t fingerprint = symbols_fingerprint(p);
    if (w->translated != p || w->translated_fingerprint != fingerprint) {
        w->translated = NULL;
        if (translate_mappings(w, p, err) != 0 || translate_functions(w, p, err) != 0 ||
            translate_locations(w, p, err) != 0) {
            block_writer_abort_profile(w);
            return -1;
        }
        w->translated = p;
        w->translated_fingerprint = fingerprint;
    }
    if (add_pprof_samples(w, p, sample_type_index, err) != 0 || commit_profile(w, err) != 0) {
        block_writer_abort_profile(w);
        return -1;
    }
    return 0;
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

int block_writer_add_sample(block_writer *w, const block_frame *frames, size_t n_frames,
                            int64_t value, strata_error *err) {
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
    uint32_t stack;
    if (intern_stack_cached(w, w->frame_scratch, n_frames, &stack, err) != 0)
        return -1;
    return push_pair(w, stack, value, err);
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
    if (mapping > w->n_mappings)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "block writer: location mapping %u out of range (%zu mappings)",
                                mapping, w->n_mappings);
    if (n_lines == 0 || lines == NULL)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "block writer: a location needs at least one line");
    ENSURE_OR_OOM(w->line_scratch, w->cap_line_scratch, n_lines);
    for (uint32_t i = 0; i < n_lines; i++) {
        if (lines[i].function >= w->n_functions)
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "block writer: line function %u out of range (%zu functions)",
                                    lines[i].function, w->n_functions);
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
    return intern_location(w, &item, id, err);
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

int block_writer_add_profile_stacks(block_writer *w, const label_set *labels,
                                    const profile_type *type, int64_t time_ns, int64_t duration_ns,
                                    int64_t period, const uint32_t *stacks, const int64_t *values,
                                    size_t n, strata_error *err) {
    for (size_t i = 0; i < n; i++) {
        if (stacks[i] > w->n_stacks)
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "block writer: sample stack %u out of range (%zu stacks)",
                                    stacks[i], w->n_stacks);
    }
    ENSURE_OR_OOM(w->pairs, w->cap_pairs, n);
    if (start_profile(w, labels, type, time_ns, duration_ns, period, err) != 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        w->pairs[i].stack = stacks[i];
        w->pairs[i].value = values[i];
    }
    w->n_pairs = n;
    if (commit_profile(w, err) != 0) {
        block_writer_abort_profile(w);
        return -1;
    }
    return 0;
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
    bytes += w->cap_locations * sizeof *w->locations + slot_map_bytes(&w->location_index);
    bytes += w->cap_lines * sizeof *w->lines;
    bytes += w->cap_stacks * sizeof *w->stacks;
    if (w->stack_index.slots != NULL)
        bytes += (w->stack_index.mask + 1) * sizeof *w->stack_index.slots;
    bytes += (w->cap_chain_locations + w->cap_chain_nodes) * 4;
    bytes += w->cap_profile_frames * 4 + w->cap_misses * sizeof *w->misses;
    bytes += w->cap_stack_cache * sizeof *w->stack_cache_entries + slot_map_bytes(&w->stack_cache);
    bytes += w->cap_frame_scratch * sizeof *w->frame_scratch;
    bytes += w->cap_series * sizeof *w->series + slot_map_bytes(&w->series_index);
    bytes += w->cap_label_words * sizeof *w->label_words;
    bytes += w->cap_profiles * sizeof *w->profiles;
    bytes += w->cap_sample_stacks * sizeof *w->sample_stacks;
    bytes += w->cap_sample_values * sizeof *w->sample_values;
    bytes += w->cap_pairs * sizeof *w->pairs;
    bytes += (w->cap_pprof_mappings + w->cap_pprof_functions + w->cap_pprof_locations) * 4;
    bytes += w->cap_line_scratch * sizeof *w->line_scratch + w->cap_label_scratch * 4;
    return bytes;
}

/* ---- encoding (finish) ------------------------------------------------------------------ */

typedef struct column_state {
    strata_buffer raw;
    uint64_t prev;
    int64_t min, max;
} column_state;

typedef struct encoder {
    block_writer *w;
    strata_buffer *data;
    size_t base;          /* where the object starts in data */
    strata_buffer tables; /* footer body: the encoded tables */
    uint64_t n_tables;
    ZSTD_CCtx *cctx;
    strata_buffer compressed;
    /* the table being written */
    int table_id;
    const block_table_schema *schema;
    column_state cols[MAX_COLUMNS];
    uint64_t rows, group_first, group_rows, n_pages;
    strata_buffer pages; /* page entries of the current table */
    bool failed;         /* an allocation failed; reported at the end of the table */
    strata_error *err;
} encoder;

static inline uint64_t zigzag(uint64_t v) {
    return (v << 1) ^ (0 - (v >> 63));
}

static inline int64_t as_signed(uint64_t v) {
    int64_t s;
    memcpy(&s, &v, sizeof s);
    return s;
}

static void enc_begin_table(encoder *e, int table_id) {
    e->table_id = table_id;
    e->schema = block_table_schema_get(table_id);
    e->rows = e->group_first = e->group_rows = e->n_pages = 0;
    strata_buffer_reset(&e->pages);
    for (int c = 0; c < e->schema->n_columns; c++) {
        strata_buffer_reset(&e->cols[c].raw);
        e->cols[c].prev = 0;
        e->cols[c].min = INT64_MAX;
        e->cols[c].max = INT64_MIN;
    }
}

static inline void enc_put(encoder *e, int col, uint64_t v) {
    column_state *c = &e->cols[col];
    uint64_t word;
    switch (e->schema->columns[col].encoding) {
        case BLOCK_ENC_SVARINT:
            word = zigzag(v);
            break;
        case BLOCK_ENC_DELTA:
            word = zigzag(v - c->prev);
            c->prev = v;
            break;
        default:
            word = v;
            break;
    }
    if (strata_buffer_append_uvarint(&c->raw, word) != 0)
        e->failed = true;
    int64_t s = as_signed(v);
    if (s < c->min)
        c->min = s;
    if (s > c->max)
        c->max = s;
}

static void enc_put_bytes(encoder *e, int col, const char *s, size_t len) {
    column_state *c = &e->cols[col];
    if (strata_buffer_append_uvarint(&c->raw, len) != 0 ||
        strata_buffer_append(&c->raw, s, len) != 0)
        e->failed = true;
}

/* Compresses one column page, appends it to the object and its entry to the page index. */
static void enc_write_page(encoder *e, int col) {
    column_state *c = &e->cols[col];
    size_t bound = ZSTD_compressBound(c->raw.len);
    strata_buffer_reset(&e->compressed);
    if (strata_buffer_reserve(&e->compressed, bound) != 0) {
        e->failed = true;
        return;
    }
    size_t n = ZSTD_compressCCtx(e->cctx, e->compressed.data, bound, c->raw.data, c->raw.len,
                                 e->w->options.zstd_level);
    const uint8_t *stored = e->compressed.data;
    uint64_t codec = BLOCK_CODEC_ZSTD;
    if (ZSTD_isError(n) || n >= c->raw.len) {
        stored = c->raw.data;
        n = c->raw.len;
        codec = BLOCK_CODEC_NONE;
    }
    uint32_t crc = (uint32_t)crc32_z(0, stored, n);
    uint64_t offset = e->data->len - e->base;
    if (strata_buffer_append(e->data, stored, n) != 0 ||
        strata_buffer_append_uvarint(&e->pages, offset) != 0 ||
        strata_buffer_append_uvarint(&e->pages, n) != 0 ||
        strata_buffer_append_uvarint(&e->pages, c->raw.len) != 0 ||
        strata_buffer_append_uvarint(&e->pages, codec) != 0 ||
        strata_buffer_append_u32le(&e->pages, crc) != 0)
        e->failed = true;
    if (e->schema->columns[col].flags & BLOCK_COLUMN_HAS_MINMAX) {
        if (strata_buffer_append_svarint(&e->pages, c->min) != 0 ||
            strata_buffer_append_svarint(&e->pages, c->max) != 0)
            e->failed = true;
    }
    strata_buffer_reset(&c->raw);
    c->prev = 0;
    c->min = INT64_MAX;
    c->max = INT64_MIN;
}

static void enc_flush_group(encoder *e) {
    if (e->group_rows == 0 || e->failed)
        return;
    if (strata_buffer_append_uvarint(&e->pages, e->group_first) != 0 ||
        strata_buffer_append_uvarint(&e->pages, e->group_rows) != 0)
        e->failed = true;
    for (int c = 0; c < e->schema->n_columns && !e->failed; c++)
        enc_write_page(e, c);
    e->n_pages++;
    e->group_first += e->group_rows;
    e->group_rows = 0;
}

static inline void enc_end_row(encoder *e) {
    e->rows++;
    e->group_rows++;
    for (int c = 0; c < e->schema->n_columns; c++) {
        if (e->cols[c].raw.len >= e->w->options.page_size) {
            enc_flush_group(e);
            return;
        }
    }
}

static int enc_end_table(encoder *e) {
    enc_flush_group(e);
    strata_buffer *t = &e->tables;
    int rc = strata_buffer_append_uvarint(t, (uint64_t)e->table_id);
    rc |= strata_buffer_append_uvarint(t, e->rows);
    rc |= strata_buffer_append_uvarint(t, (uint64_t)e->schema->n_columns);
    for (int c = 0; c < e->schema->n_columns; c++) {
        rc |= strata_buffer_append_uvarint(t, (uint64_t)c);
        rc |= strata_buffer_append_uvarint(t, e->schema->columns[c].encoding);
        rc |= strata_buffer_append_uvarint(t, e->schema->columns[c].flags);
    }
    rc |= strata_buffer_append_uvarint(t, e->n_pages);
    rc |= strata_buffer_append(t, e->pages.data, e->pages.len);
    if (rc != 0 || e->failed)
        return strata_error_set(e->err, STRATA_RESOURCE_EXHAUSTED,
                                "block writer: out of memory encoding table %s", e->schema->name);
    e->n_tables++;
    return 0;
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
} block_order;

static void block_order_free(block_order *o) {
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

/* Label and type strings of the kept series first (sorted, so postings sort by string), then the
 * rest in first-seen order. "" stays id 0: it sorts first and is always included. */
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
        for (uint32_t i = 0; i < 2 * ser->label_count; i++) {
            uint32_t id = w->label_words[ser->first_label + i];
            if (o->string_new[id] == UINT32_MAX) {
                o->string_new[id] = 0;
                o->string_order[k++] = id;
            }
        }
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
    return enc_end_table(e);
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
            enc_end_row(e);
        }
    }
    return enc_end_table(e);
}

/* The optional rollup tables (block_rollup.h): rollup_stacks streamed from the builder, then
 * rollup_series, one row per series. */
static int put_rollup_row(void *ctx, uint32_t stack, int64_t value, strata_error *err) {
    encoder *e = ctx;
    (void)err; /* encoder allocation failures are reported by enc_end_table */
    enc_put(e, BLOCK_COL_ROLLUP_STACKS_STACK, stack);
    enc_put(e, BLOCK_COL_ROLLUP_STACKS_VALUE, (uint64_t)value);
    enc_end_row(e);
    return 0;
}

static void rollup_inputs(const block_writer *w, const block_order *o, block_rollup_profile *in) {
    for (size_t i = 0; i < w->n_profiles; i++) {
        const w_profile *p = &w->profiles[o->profile_order[i]];
        const w_series *s = &w->series[p->series];
        bool scale =
            block_rollup_scale(w->strings.strings[s->type[1]], w->strings.strings[s->type[2]]);
        in[i] = (block_rollup_profile){o->series_new[p->series], scale ? p->period : 1,
                                       w->sample_stacks + p->first_sample,
                                       w->sample_values + p->first_sample, p->sample_count};
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
        enc_begin_table(e, BLOCK_TABLE_ROLLUP_STACKS);
        rc = block_rollup_build(in, w->n_profiles, o->n_series, w->n_stacks + 1, put_rollup_row, e,
                                series, e->err);
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

static int write_footer(encoder *e) {
    strata_buffer footer = STRATA_BUFFER_INIT;
    int rc = strata_buffer_append_uvarint(&footer, e->n_tables);
    rc |= strata_buffer_append(&footer, e->tables.data, e->tables.len);
    uint32_t crc = (uint32_t)crc32_z(0, footer.data, footer.len);
    rc |= strata_buffer_append(e->data, footer.data, footer.len);
    rc |= strata_buffer_append_u64le(e->data, footer.len);
    rc |= strata_buffer_append_u32le(e->data, crc);
    rc |= strata_buffer_append_u32le(e->data, BLOCK_FORMAT_VERSION);
    rc |= strata_buffer_append(e->data, BLOCK_MAGIC, BLOCK_MAGIC_LEN);
    strata_buffer_free(&footer);
    return rc != 0 ? strata_error_oom(e->err) : 0;
}

static void encoder_free(encoder *e) {
    strata_buffer_free(&e->tables);
    strata_buffer_free(&e->compressed);
    strata_buffer_free(&e->pages);
    for (int c = 0; c < MAX_COLUMNS; c++)
        strata_buffer_free(&e->cols[c].raw);
    ZSTD_freeCCtx(e->cctx);
}

static int encode_block(block_writer *w, const block_order *o, strata_buffer *data,
                        strata_error *err) {
    encoder e;
    memset(&e, 0, sizeof e);
    e.w = w;
    e.data = data;
    e.base = data->len;
    e.err = err;
    e.cctx = ZSTD_createCCtx();
    int rc = -1;
    if (e.cctx == NULL) {
        strata_error_oom(err);
    } else if (strata_buffer_append(data, BLOCK_MAGIC, BLOCK_MAGIC_LEN) != 0 ||
               strata_buffer_append_u32le(data, BLOCK_FORMAT_VERSION) != 0 ||
               strata_buffer_append_u32le(data, 0) != 0) {
        strata_error_oom(err);
    } else if (write_symbol_tables(&e, o) == 0 && write_series_tables(&e, o) == 0 &&
               write_profile_tables(&e, o) == 0 && write_rollup_tables(&e, o) == 0) {
        rc = write_footer(&e);
    }
    encoder_free(&e);
    if (rc != 0)
        data->len = e.base;
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
    int64_t min_ns = INT64_MAX, max_ns = INT64_MIN;
    for (size_t i = 0; i < w->n_profiles; i++) {
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
    meta->format_version = BLOCK_FORMAT_VERSION;
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

int block_writer_finish(block_writer *w, strata_buffer *data, block_meta *meta, strata_error *err) {
    if (check_writable(w, err) != 0)
        return -1;
    if (w->open)
        return strata_error_set(err, STRATA_FAILED_PRECONDITION,
                                "block writer: a profile is still open; end it before finishing");
    if (w->n_profiles == 0)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "block writer: no profiles were added; an empty block is not "
                                "written");
    block_order o;
    memset(&o, 0, sizeof o);
    size_t base = data->len;
    int rc = -1;
    if (order_series(w, &o, err) == 0 && order_strings(w, &o, err) == 0 &&
        order_profiles(w, &o, err) == 0 && encode_block(w, &o, data, err) == 0) {
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
