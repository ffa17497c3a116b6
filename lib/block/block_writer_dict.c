/*
 * block_writer_dict.c - the block writer's dictionary: every string, mapping, function, location,
 * stack, series and sample label set a writer holds, each de-duplicated in a strata_slot_map
 * (common/hash.h) by content or by a 96-bit fingerprint, so interning is one or two hash lookups.
 *
 * Every way in (pprof, symbolized frames, the id path) interns through these functions, so a
 * location meets the same rules whichever way it came (check_location). The id path's public calls
 * (block_writer_intern_*) are here too: they only check the ids they are given and intern. Ids are
 * rows (stacks and label sets: rows + 1), never removed while the writer lives.
 */
#include <string.h>

#include "block/block_writer_internal.h"

/* ---- strings ----------------------------------------------------------------------------- */

int block_writer_dict_string(block_writer *w, const char *s, size_t len, uint32_t *id,
                             strata_error *err) {
    if (strata_intern_add(&w->strings, s == NULL ? "" : s, s == NULL ? 0 : len, id) != 0)
        return strata_error_set(err, STRATA_RESOURCE_EXHAUSTED,
                                "block writer: string table is full or out of memory (%zu strings)",
                                w->strings.count);
    return 0;
}

int block_writer_dict_cstr(block_writer *w, const char *s, uint32_t *id, strata_error *err) {
    return block_writer_dict_string(w, s, s == NULL ? 0 : strlen(s), id, err);
}

/* ---- de-duplicating tables --------------------------------------------------------------- */

typedef bool (*dedup_equal_fn)(const block_writer *w, uint64_t id, const void *item);

/* Finds the entry equal to item among those stored under hash h (re-hashing on collisions), or the
 * fresh slot to insert it under (*found false; the caller stores the new id there). The caller
 * has already made room to append, so inserting cannot fail after this. */
static uint64_t *dedup_slot(strata_slot_map *m, uint64_t h, dedup_equal_fn equal,
                            const block_writer *w, const void *item, bool *found) {
    uint64_t key = h != 0 ? h : 1;
    for (;;) {
        bool inserted;
        strata_u64_slot *slot = strata_slot_map_claim(m, key, &inserted);
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

/* Finds the record with fingerprint (key, check), or claims the fresh slot to store it under
 * (*found false; the caller sets the value to (check << 32) | id). NULL when out of memory. */
strata_u64_slot *block_writer_dict_fingerprint_slot(strata_slot_map *m, uint64_t key,
                                                    uint32_t check, bool *found) {
    for (;;) {
        bool inserted;
        strata_u64_slot *slot = strata_slot_map_claim(m, key, &inserted);
        if (slot == NULL)
            return NULL;
        if (inserted || (uint32_t)(slot->value >> 32) == check) {
            *found = !inserted;
            return slot;
        }
        key = strata_hash_u64(key) | 1;
    }
}

/* ---- symbols ----------------------------------------------------------------------------- */

static bool mapping_equal(const block_writer *w, uint64_t id, const void *item) {
    const w_mapping *a = item;
    if (id >= w->n_mappings)
        return false;
    const w_mapping *b = &w->mappings[id];
    return a->start == b->start && a->limit == b->limit && a->offset == b->offset &&
           a->file == b->file && a->build_id == b->build_id && a->flags == b->flags;
}

int block_writer_dict_mapping(block_writer *w, const w_mapping *m, uint32_t *id,
                              strata_error *err) {
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

int block_writer_dict_function(block_writer *w, const w_function *f, uint32_t *id,
                               strata_error *err) {
    ENSURE_OR_OOM(w->functions, w->cap_functions, w->n_functions + 1);
    uint64_t key;
    uint32_t check;
    function_fingerprint(f, &key, &check);
    bool found;
    strata_u64_slot *slot =
        block_writer_dict_fingerprint_slot(&w->function_index, key, check, &found);
    if (slot == NULL)
        return strata_error_oom(err);
    if (!found) {
        slot->value = (uint64_t)check << 32 | w->n_functions;
        w->functions[w->n_functions++] = *f;
    }
    *id = (uint32_t)slot->value;
    return 0;
}

void block_writer_dict_location_fingerprint(const location_item *item, uint64_t *key,
                                            uint32_t *check) {
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
int block_writer_dict_location_fingerprinted(block_writer *w, const location_item *item,
                                             uint64_t key, uint32_t check, uint32_t *id,
                                             strata_error *err) {
    if (check_location(w, item, err) != 0)
        return -1;
    if (w->n_locations >= UINT32_MAX - 2 || w->n_lines + item->loc.line_count >= UINT32_MAX)
        return strata_error_set(err, STRATA_RESOURCE_EXHAUSTED,
                                "block writer: too many locations for one block");
    ENSURE_OR_OOM(w->locations, w->cap_locations, w->n_locations + 1);
    ENSURE_OR_OOM(w->lines, w->cap_lines, w->n_lines + item->loc.line_count);
    bool found;
    strata_u64_slot *slot =
        block_writer_dict_fingerprint_slot(&w->location_index, key, check, &found);
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

int block_writer_dict_location(block_writer *w, const location_item *item, uint32_t *id,
                               strata_error *err) {
    uint64_t key;
    uint32_t check;
    block_writer_dict_location_fingerprint(item, &key, &check);
    return block_writer_dict_location_fingerprinted(w, item, key, check, id, err);
}

/* ---- stacks ------------------------------------------------------------------------------ */

/* Stack ids are rows + 1; (parent, location) is an exact 64-bit key, so no equality check. */
static int intern_stack(block_writer *w, uint32_t parent, uint32_t location, uint32_t *id,
                        strata_error *err) {
    strata_slot_map *m = &w->stack_index;
    if (strata_slot_map_make_room(m) != 0)
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

/* Interns a stack given as block location ids, leaf first, through the parent-pointer tree. The
 * prefix it shares (root first) with the previous stack interned here is not looked up again: its
 * nodes are remembered, and stacks are never removed from a writer. */
int block_writer_dict_stack_chain(block_writer *w, const uint32_t *locations, size_t n,
                                  uint32_t *stack, strata_error *err) {
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

int block_writer_dict_stack_cache_add(block_writer *w, uint64_t key, uint32_t check, uint32_t stack,
                                      strata_error *err) {
    bool inserted;
    strata_u64_slot *slot = strata_slot_map_claim(&w->stack_cache, key, &inserted);
    if (slot == NULL)
        return strata_error_oom(err);
    if (inserted) /* else already cached (or a 64-bit collision, left uncached) */
        slot->value = (uint64_t)check << 32 | stack;
    return 0;
}

/* Finds a whole stack in the cache, or interns it and remembers it. */
int block_writer_dict_stack_cached(block_writer *w, const uint32_t *locations, size_t n,
                                   uint32_t *stack, strata_error *err) {
    uint64_t key;
    uint32_t check;
    block_writer_stack_fingerprint(locations, n, &key, &check);
    switch (block_writer_stack_cache_find(w, key, check, stack)) {
        case STACK_CACHE_HIT:
            return 0;
        case STACK_CACHE_COLLISION:
            return block_writer_dict_stack_chain(w, locations, n, stack, err);
        default:
            break;
    }
    if (block_writer_dict_stack_chain(w, locations, n, stack, err) != 0)
        return -1;
    return block_writer_dict_stack_cache_add(w, key, check, *stack, err);
}

/* ---- series ------------------------------------------------------------------------------ */

int block_writer_dict_compare_strings(const block_writer *w, uint32_t a, uint32_t b) {
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
    ENSURE_OR_OOM(w->scratch.labels, w->scratch.cap_labels, 2 * n + 2);
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
        if (block_writer_dict_string(w, l->name, name_len, &w->scratch.labels[2 * k], err) != 0 ||
            block_writer_dict_cstr(w, l->value, &w->scratch.labels[2 * k + 1], err) != 0)
            return -1;
        k++;
    }
    /* insertion sort by name: label sets are small */
    for (uint32_t i = 1; i < k; i++) {
        uint32_t name = w->scratch.labels[2 * i], value = w->scratch.labels[2 * i + 1];
        uint32_t j = i;
        while (j > 0 &&
               block_writer_dict_compare_strings(w, w->scratch.labels[2 * (j - 1)], name) > 0) {
            w->scratch.labels[2 * j] = w->scratch.labels[2 * (j - 1)];
            w->scratch.labels[2 * j + 1] = w->scratch.labels[2 * (j - 1) + 1];
            j--;
        }
        w->scratch.labels[2 * j] = name;
        w->scratch.labels[2 * j + 1] = value;
    }
    for (uint32_t i = 1; i < k; i++) {
        if (w->scratch.labels[2 * i] == w->scratch.labels[2 * (i - 1)])
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "block writer: label \"%s\" appears twice",
                                    w->strings.strings[w->scratch.labels[2 * i]]);
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
        if (block_writer_dict_cstr(w, parts[i], &item->type[i], err) != 0)
            return -1;
    }
    item->delta = type->delta ? 1 : 0;
    return 0;
}

int block_writer_dict_series(block_writer *w, const label_set *labels, const profile_type *type,
                             uint32_t *id, strata_error *err) {
    series_item item;
    if (intern_type(w, type, &item, err) != 0 ||
        collect_labels(w, labels, &item.label_count, err) != 0)
        return -1;
    item.labels = w->scratch.labels;
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

int block_writer_dict_compare_series(const void *a, const void *b, void *ctx) {
    const block_writer *w = ctx;
    const w_series *x = &w->series[*(const uint32_t *)a], *y = &w->series[*(const uint32_t *)b];
    for (int i = 0; i < 5; i++) {
        int c = block_writer_dict_compare_strings(w, x->type[i], y->type[i]);
        if (c != 0)
            return c;
    }
    if (x->delta != y->delta)
        return x->delta < y->delta ? -1 : 1;
    uint32_t n = x->label_count < y->label_count ? x->label_count : y->label_count;
    for (uint32_t i = 0; i < 2 * n; i++) {
        int c = block_writer_dict_compare_strings(w, w->label_words[x->first_label + i],
                                                  w->label_words[y->first_label + i]);
        if (c != 0)
            return c;
    }
    return x->label_count < y->label_count ? -1 : x->label_count > y->label_count;
}

/* ---- sample label sets ------------------------------------------------------------------- */

static bool label_set_equal(const block_writer *w, uint64_t id, const void *item) {
    const uint32_t *words = item; /* count, then the pairs */
    if (id == 0 || id > w->n_label_sets)
        return false;
    const w_label_set *b = &w->label_sets[id - 1];
    return b->count == words[0] &&
           memcmp(&w->set_words[b->first], words + 1, 2 * (size_t)b->count * sizeof *words) == 0;
}

/* Interns the set of the n (name, value) string id pairs at scratch.set + 1 (scratch.set[0] is
 * scratch for the count). The pairs are sorted by name first (a stable sort); of pairs with one
 * name the last is kept when last_wins (pprof: as Parca, the last value of a repeated key wins),
 * else a repeated name is INVALID_ARGUMENT. n == 0 gives the empty set, id 0. */
int block_writer_dict_label_set(block_writer *w, uint32_t n, bool last_wins, uint32_t *id,
                                strata_error *err) {
    uint32_t *pairs = w->scratch.set + 1;
    for (uint32_t i = 1; i < n; i++) { /* insertion sort: sets are small */
        uint32_t name = pairs[2 * i], value = pairs[2 * i + 1];
        uint32_t j = i;
        while (j > 0 && block_writer_dict_compare_strings(w, pairs[2 * (j - 1)], name) > 0) {
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
    w->scratch.set[0] = k;
    ENSURE_OR_OOM(w->label_sets, w->cap_label_sets, w->n_label_sets + 1);
    ENSURE_OR_OOM(w->set_words, w->cap_set_words, w->n_set_words + 2 * (size_t)k);
    uint64_t h = strata_hash_bytes(w->scratch.set, (1 + 2 * (size_t)k) * sizeof *pairs, 0x1abe1);
    bool found;
    uint64_t *slot = dedup_slot(&w->label_set_index, h, label_set_equal, w, w->scratch.set, &found);
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

/* ---- id path ----------------------------------------------------------------------------- */

int block_writer_intern_string(block_writer *w, const char *s, size_t len, uint32_t *id,
                               strata_error *err) {
    if (block_writer_check_writable(w, err) != 0)
        return -1;
    return block_writer_dict_string(w, s, len, id, err);
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
    if (block_writer_check_writable(w, err) != 0 ||
        check_string_id(w, m->file, "mapping file", err) != 0 ||
        check_string_id(w, m->build_id, "mapping build id", err) != 0)
        return -1;
    w_mapping wm = {m->memory_start, m->memory_limit, m->file_offset,
                    m->file,         m->build_id,     m->flags};
    return block_writer_dict_mapping(w, &wm, id, err);
}

int block_writer_intern_function(block_writer *w, uint32_t name, uint32_t system_name,
                                 uint32_t file, int64_t start_line, uint32_t *id,
                                 strata_error *err) {
    if (block_writer_check_writable(w, err) != 0 ||
        check_string_id(w, name, "function name", err) != 0 ||
        check_string_id(w, system_name, "function system name", err) != 0 ||
        check_string_id(w, file, "function file", err) != 0)
        return -1;
    w_function f = {name, system_name, file, start_line};
    return block_writer_dict_function(w, &f, id, err);
}

int block_writer_intern_location(block_writer *w, uint64_t address, uint32_t mapping,
                                 uint32_t flags, const block_writer_line *lines, uint32_t n_lines,
                                 uint32_t *id, strata_error *err) {
    if (block_writer_check_writable(w, err) != 0)
        return -1;
    if (n_lines > 0 && lines == NULL)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "block writer: location has %u lines but no line array", n_lines);
    ENSURE_OR_OOM(w->scratch.lines, w->scratch.cap_lines, (size_t)n_lines + 1);
    for (uint32_t i = 0; i < n_lines; i++) {
        w->scratch.lines[i].function = lines[i].function;
        w->scratch.lines[i].line = lines[i].line;
    }
    location_item item;
    memset(&item, 0, sizeof item);
    item.loc.address = address;
    item.loc.mapping = mapping;
    item.loc.flags = flags;
    item.loc.line_count = n_lines;
    item.lines = w->scratch.lines;
    return block_writer_dict_location(w, &item, id, err); /* check_location applies the rules */
}

int block_writer_intern_stack(block_writer *w, uint32_t parent, uint32_t location, uint32_t *id,
                              strata_error *err) {
    if (block_writer_check_writable(w, err) != 0)
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
    if (block_writer_check_writable(w, err) != 0)
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
    return block_writer_dict_stack_cached(w, locations, n, id, err);
}

int block_writer_intern_label_set(block_writer *w, const uint32_t *pairs, size_t n, uint32_t *id,
                                  strata_error *err) {
    if (block_writer_check_writable(w, err) != 0)
        return -1;
    if (n > UINT32_MAX / 4 || (n > 0 && pairs == NULL))
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "block writer: bad label set");
    ENSURE_OR_OOM(w->scratch.set, w->scratch.cap_set, 2 * n + 1);
    for (size_t i = 0; i < 2 * n; i++) {
        if (check_string_id(w, pairs[i], "sample label", err) != 0)
            return -1;
        if (pairs[i] == 0)
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "block writer: a sample label's name and value must not be "
                                    "empty");
        w->scratch.set[1 + i] = pairs[i];
    }
    return block_writer_dict_label_set(w, (uint32_t)n, false, id, err);
}
