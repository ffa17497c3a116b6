/*
 * block_writer_pprof.c - adding a decoded pprof (block_writer_add_profile, _types): translating its
 * own ids (strings, mappings, functions, locations) into the dictionary's once per pprof, resolving
 * every sample's stack through the whole-stack cache, and adding one profile per sample type.
 *
 * The translation lives in the writer's pprof scratch and is reused while the same pprof comes
 * again; lookups are done in two passes (fingerprint and prefetch every item, then look them up)
 * so that the cache misses of a pprof's thousands of lookups overlap.
 */
#include <stdlib.h>
#include <string.h>

#include "block/block_writer_internal.h"

/* ---- symbols ----------------------------------------------------------------------------- */

/* Interns pprof string `index` once per translated pprof: pprof.string_ids remembers it (a pprof
 * names most strings many times: a function's name is often its system name, files repeat). */
static int intern_pprof_string(block_writer *w, const pprof_profile *p, int64_t index, uint32_t *id,
                               strata_error *err) {
    if (index >= 0 && (size_t)index < p->n_strings && w->pprof.string_ids[index] != UINT32_MAX) {
        *id = w->pprof.string_ids[index];
        return 0;
    }
    pprof_string s = pprof_string_at(p, index);
    if (block_writer_dict_string(w, s.ptr, s.len, id, err) != 0)
        return -1;
    if (index >= 0 && (size_t)index < p->n_strings)
        w->pprof.string_ids[index] = *id;
    return 0;
}

static int translate_mappings(block_writer *w, const pprof_profile *p, strata_error *err) {
    w->pprof.n_block_location_by_id = 0; /* rebuilt once the locations are translated */
    ENSURE_OR_OOM(w->pprof.string_ids, w->pprof.cap_string_ids, p->n_strings + 1);
    memset(w->pprof.string_ids, 0xff, (p->n_strings + 1) * sizeof *w->pprof.string_ids);
    ENSURE_OR_OOM(w->pprof.mapping_ids, w->pprof.cap_mapping_ids, p->n_mappings + 1);
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
            block_writer_dict_mapping(w, &m, &id, err) != 0)
            return -1;
        w->pprof.mapping_ids[i] = id + 1;
    }
    return 0;
}

/* The 128-bit hash of pprof string `index`, memoized for the pprof being translated. */
static const uint64_t *pprof_string_hash(block_writer *w, const pprof_profile *p, int64_t index) {
    static const uint64_t none[2] = {1, 1};
    if (index < 0 || (size_t)index >= p->n_strings)
        return none; /* invalid: the full path reports it */
    uint64_t *h = &w->pprof.string_hashes[2 * (size_t)index];
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
        block_writer_dict_function(w, &f, &w->pprof.function_ids[i], err) != 0)
        return -1;
    bool found;
    strata_u64_slot *slot =
        block_writer_dict_fingerprint_slot(&w->function_content_index, key, check, &found);
    if (slot == NULL)
        return strata_error_oom(err);
    if (!found)
        slot->value = (uint64_t)check << 32 | w->pprof.function_ids[i];
    return 0;
}

/* Two passes, as for locations: fingerprint every function by content (its strings' bytes) and
 * prefetch its slot, then look them up; only functions never seen intern their strings. */
static int translate_functions(block_writer *w, const pprof_profile *p, strata_error *err) {
    ENSURE_OR_OOM(w->pprof.function_ids, w->pprof.cap_function_ids, p->n_functions + 1);
    ENSURE_OR_OOM(w->pprof.function_keys, w->pprof.cap_function_keys, p->n_functions + 1);
    ENSURE_OR_OOM(w->pprof.function_checks, w->pprof.cap_function_checks, p->n_functions + 1);
    ENSURE_OR_OOM(w->pprof.string_hashes, w->pprof.cap_string_hashes, 2 * p->n_strings + 2);
    memset(w->pprof.string_hashes, 0, (2 * p->n_strings + 2) * sizeof *w->pprof.string_hashes);
    for (size_t i = 0; i < p->n_functions; i++) {
        pprof_function_fingerprint(w, p, &p->functions[i], &w->pprof.function_keys[i],
                                   &w->pprof.function_checks[i]);
        strata_slot_map_prefetch(&w->function_content_index, w->pprof.function_keys[i]);
    }
    for (size_t i = 0; i < p->n_functions; i++) {
        uint64_t key = w->pprof.function_keys[i];
        uint32_t check = w->pprof.function_checks[i];
        if (!block_writer_fingerprint_find(&w->function_content_index, key, check,
                                           &w->pprof.function_ids[i]) &&
            intern_pprof_function(w, p, i, key, check, err) != 0)
            return -1;
    }
    return 0;
}

/* The block location pprof location i names (its mapping and functions already translated),
 * with its lines in w->scratch.lines. */
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
        item->loc.mapping = w->pprof.mapping_ids[m - p->mappings];
    }
    if (pl->line_offset > p->n_lines || pl->line_count > p->n_lines - pl->line_offset)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "pprof location %llu: lines out of range",
                                (unsigned long long)pl->id);
    ENSURE_OR_OOM(w->scratch.lines, w->scratch.cap_lines, (size_t)pl->line_count + 1);
    for (uint32_t j = 0; j < pl->line_count; j++) {
        const pprof_line *line = &p->lines[pl->line_offset + j];
        const pprof_function *f = pprof_find_function(p, line->function_id);
        if (f == NULL)
            return strata_error_set(
                err, STRATA_INVALID_ARGUMENT, "pprof location %llu: function %llu is not defined",
                (unsigned long long)pl->id, (unsigned long long)line->function_id);
        w->scratch.lines[j].function = w->pprof.function_ids[f - p->functions];
        w->scratch.lines[j].line = line->line;
    }
    item->loc.line_count = pl->line_count;
    item->lines = w->scratch.lines;
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
    w->pprof.n_block_location_by_id = 0;
    if (ix->dense == NULL)
        return 0;
    ENSURE_OR_OOM(w->pprof.block_location_by_id, w->pprof.cap_block_location_by_id,
                  ix->dense_len + 1);
    for (size_t id = 0; id < ix->dense_len; id++) {
        uint32_t index = ix->dense[id];
        w->pprof.block_location_by_id[id] = index == 0 ? 0 : w->pprof.location_ids[index - 1] + 1;
    }
    w->pprof.n_block_location_by_id = ix->dense_len;
    return 0;
}

/* Two passes: fingerprint every location and prefetch its slot, then look them up, so the
 * lookups (mostly hits: an agent's pushes repeat their locations) overlap their cache misses. */
static int translate_locations(block_writer *w, const pprof_profile *p, strata_error *err) {
    ENSURE_OR_OOM(w->pprof.location_ids, w->pprof.cap_location_ids, p->n_locations + 1);
    ENSURE_OR_OOM(w->pprof.location_keys, w->pprof.cap_location_keys, p->n_locations + 1);
    ENSURE_OR_OOM(w->pprof.location_checks, w->pprof.cap_location_checks, p->n_locations + 1);
    location_item item;
    for (size_t i = 0; i < p->n_locations; i++) {
        if (pprof_location_item(w, p, i, &item, err) != 0)
            return -1;
        block_writer_dict_location_fingerprint(&item, &w->pprof.location_keys[i],
                                               &w->pprof.location_checks[i]);
        strata_slot_map_prefetch(&w->location_index, w->pprof.location_keys[i]);
    }
    for (size_t i = 0; i < p->n_locations; i++) {
        uint64_t key = w->pprof.location_keys[i];
        uint32_t check = w->pprof.location_checks[i];
        if (block_writer_fingerprint_find(&w->location_index, key, check,
                                          &w->pprof.location_ids[i]))
            continue;
        if (pprof_location_item(w, p, i, &item, err) != 0 ||
            block_writer_dict_location_fingerprinted(w, &item, key, check,
                                                     &w->pprof.location_ids[i], err) != 0)
            return -1;
    }
    return map_location_ids(w, p, err);
}

/* ---- stacks ------------------------------------------------------------------------------ */

/* Translates pprof sample i's locations (leaf first) to block ids at w->pprof.frames + at. */
static int pprof_sample_frames(block_writer *w, const pprof_profile *p, size_t i, size_t at,
                               strata_error *err) {
    const pprof_sample *s = &p->samples[i];
    if (s->location_offset > p->n_sample_location_ids ||
        s->location_count > p->n_sample_location_ids - s->location_offset)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "pprof sample %zu: locations out of range", i);
    ENSURE_OR_OOM(w->pprof.frames, w->pprof.cap_frames, at + s->location_count + 1);
    const uint64_t *ids = &p->sample_location_ids[s->location_offset];
    uint32_t *frames = &w->pprof.frames[at];
    const uint32_t *by_id = w->pprof.block_location_by_id;
    size_t n_by_id = w->pprof.n_block_location_by_id;
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
        frames[j] = w->pprof.location_ids[l - p->locations];
    }
    return 0;
}

/* Root-first lexicographic order of the missed stacks, so that consecutive ones share prefixes. */
static int compare_misses(const void *a, const void *b, void *ctx) {
    const block_writer *w = ctx;
    const sample_scratch *x = &w->pprof.samples[((const stack_miss *)a)->sample];
    const sample_scratch *y = &w->pprof.samples[((const stack_miss *)b)->sample];
    const uint32_t *fx = w->pprof.frames + x->frames, *fy = w->pprof.frames + y->frames;
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
    if (w->pprof.n_misses > 1)
        qsort_r(w->pprof.misses, w->pprof.n_misses, sizeof *w->pprof.misses, compare_misses, w);
    for (size_t m = 0; m < w->pprof.n_misses; m++) {
        sample_scratch *sc = &w->pprof.samples[w->pprof.misses[m].sample];
        if (block_writer_dict_stack_chain(w, w->pprof.frames + sc->frames, sc->n_frames, &sc->stack,
                                          err) != 0 ||
            block_writer_dict_stack_cache_add(w, sc->key, sc->check, sc->stack, err) != 0)
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
    ENSURE_OR_OOM(w->pprof.samples, w->pprof.cap_samples, p->n_samples + 1);
    for (size_t i = 0; i < p->n_samples; i++) {
        sample_scratch *sc = &w->pprof.samples[i];
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
        block_writer_stack_fingerprint(w->pprof.frames + sc->frames, sc->n_frames, &sc->key,
                                       &sc->check);
        sc->stack = 0;
        strata_slot_map_prefetch(&w->stack_cache, sc->key);
    }
    return 0;
}

/* Resolves the stack of every sample fingerprint_pprof_samples kept: cached stacks in pass 2,
 * the others interned together afterwards. */
static int resolve_pprof_stacks(block_writer *w, const pprof_profile *p, const size_t *columns,
                                size_t n_columns, strata_error *err) {
    if (fingerprint_pprof_samples(w, p, columns, n_columns, err) != 0)
        return -1;
    w->pprof.n_misses = 0;
    for (size_t i = 0; i < p->n_samples; i++) {
        sample_scratch *sc = &w->pprof.samples[i];
        if (sc->stack == SAMPLE_SKIPPED)
            continue;
        int found = block_writer_stack_cache_find(w, sc->key, sc->check, &sc->stack);
        if (found == STACK_CACHE_COLLISION &&
            block_writer_dict_stack_chain(w, w->pprof.frames + sc->frames, sc->n_frames, &sc->stack,
                                          err) != 0)
            return -1;
        if (found == STACK_CACHE_MISS) {
            ENSURE_OR_OOM(w->pprof.misses, w->pprof.cap_misses, w->pprof.n_misses + 1);
            w->pprof.misses[w->pprof.n_misses++].sample = i;
        }
    }
    return intern_missed_stacks(w, err);
}

/* ---- sample label sets ------------------------------------------------------------------- */

/* The label set of pprof sample i: its string labels (numeric labels, and labels with an empty
 * key or value, are dropped, as Parca does), with the pprof's strings interned once each. */
static int pprof_sample_label_set(block_writer *w, const pprof_profile *p, size_t i, uint32_t *id,
                                  strata_error *err) {
    const pprof_sample *s = &p->samples[i];
    if (s->label_offset > p->n_sample_labels ||
        s->label_count > p->n_sample_labels - s->label_offset)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "pprof sample %zu: labels out of range", i);
    ENSURE_OR_OOM(w->scratch.set, w->scratch.cap_set, 2 * (size_t)s->label_count + 1);
    uint32_t n = 0;
    for (uint32_t j = 0; j < s->label_count; j++) {
        const pprof_label *l = &p->sample_labels[s->label_offset + j];
        if (l->str <= 0 || l->key <= 0 || pprof_string_at(p, l->str).len == 0 ||
            pprof_string_at(p, l->key).len == 0)
            continue;
        if (intern_pprof_string(w, p, l->key, &w->scratch.set[1 + 2 * n], err) != 0 ||
            intern_pprof_string(w, p, l->str, &w->scratch.set[2 + 2 * n], err) != 0)
            return -1;
        n++;
    }
    return block_writer_dict_label_set(w, n, true, id, err);
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

/* Resolves every kept pprof sample's label set into pprof.sample_sets; false in *labelled when the
 * pprof has no sample labels at all (the array is then not filled). */
static int resolve_pprof_label_sets(block_writer *w, const pprof_profile *p, bool *labelled,
                                    strata_error *err) {
    *labelled = false;
    if (p->n_sample_labels == 0)
        return 0;
    ENSURE_OR_OOM(w->pprof.sample_sets, w->pprof.cap_sample_sets, p->n_samples + 1);
    size_t prev = SIZE_MAX;
    for (size_t i = 0; i < p->n_samples; i++) {
        w->pprof.sample_sets[i] = 0;
        if (w->pprof.samples[i].stack == SAMPLE_SKIPPED || p->samples[i].label_count == 0)
            continue;
        if (prev != SIZE_MAX && same_pprof_labels(p, &p->samples[prev], &p->samples[i])) {
            w->pprof.sample_sets[i] = w->pprof.sample_sets[prev];
            continue;
        }
        if (pprof_sample_label_set(w, p, i, &w->pprof.sample_sets[i], err) != 0)
            return -1;
        prev = i;
    }
    *labelled = true;
    return 0;
}

/* ---- profiles ---------------------------------------------------------------------------- */

/* Adds value column `column` of a pprof whose stacks resolve_pprof_stacks resolved, as one
 * profile. */
static int add_pprof_column(block_writer *w, const label_set *labels, const profile_type *type,
                            int64_t time_ns, int64_t duration_ns, int64_t period,
                            const pprof_profile *p, size_t column, bool labelled,
                            strata_error *err) {
    if (block_writer_profile_start(w, labels, type, time_ns, duration_ns, period, err) != 0)
        return -1;
    for (size_t i = 0; i < p->n_samples; i++) {
        uint32_t stack = w->pprof.samples[i].stack;
        int64_t value = p->sample_values[(size_t)p->samples[i].value_offset + column];
        uint32_t set = labelled ? w->pprof.sample_sets[i] : 0;
        if (stack != SAMPLE_SKIPPED && value != 0 &&
            block_writer_profile_push(w, stack, set, value, err) != 0) {
            block_writer_abort_profile(w);
            return -1;
        }
    }
    if (block_writer_profile_commit(w, err) != 0) {
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
    if (block_writer_check_writable(w, err) != 0)
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
    if (!reuse || w->pprof.translated != p || w->pprof.translated_fingerprint != fingerprint) {
        w->pprof.translated = NULL;
        if (translate_mappings(w, p, err) != 0 || translate_functions(w, p, err) != 0 ||
            translate_locations(w, p, err) != 0)
            return -1;
        if (reuse) {
            w->pprof.translated = p;
            w->pprof.translated_fingerprint = fingerprint;
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
