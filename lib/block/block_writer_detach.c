/*
 * block_writer_detach.c - cutting a block off a long-lived writer (block_writer_detach): the
 * profiles added since the last cut, with just the symbols, stacks, series and label sets they
 * use, renumbered into a new writer that can only finish. The long-lived writer keeps its
 * dictionary for the next block, and both carry the dictionary's id, so readers translate what
 * consecutive blocks share once (docs/block-format.md 6.12).
 */
#include <stdlib.h>
#include <string.h>

#include "block/block_writer_internal.h"

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
    d->function_origins = malloc(((size_t)counts[1] + 1) * sizeof *d->function_origins);
    if (d->stack_origins == NULL || d->location_origins == NULL || d->function_origins == NULL)
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
        d->function_origins[d->n_functions] = (uint32_t)i + 1;
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
    if (block_writer_check_writable(w, err) != 0)
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
    d->dictionary_functions = (uint32_t)w->n_functions;
    d->locations_at_last_cut = w->locations_at_last_cut;
    d->functions_at_last_cut = w->functions_at_last_cut;
    d->stacks_at_last_cut = w->stacks_at_last_cut;
    w->locations_at_last_cut = (uint32_t)w->n_locations;
    w->functions_at_last_cut = (uint32_t)w->n_functions;
    w->stacks_at_last_cut = (uint32_t)w->n_stacks;
    w->n_profiles = 0;
    w->n_samples = 0;
    w->samples_labelled = false;
    for (size_t i = 0; i < w->n_series; i++)
        w->series[i].n_profiles = 0;
    *block = d;
    return 0;
}
