/*
 * block_writer.c - the writer's lifecycle and its profiles (block_writer.h is the design,
 * block_writer_internal.h how the files divide the work).
 *
 * This file holds what every way in shares: creating and freeing a writer, the open profile
 * (its samples gathered as (stack, label set, value) pairs, sorted, summed and appended at
 * commit), the symbolized path (frames interned one by one), profiles given as stack ids, the
 * counts and memory the ingester and the compactor watch, and the block's meta.json. The
 * dictionary, the pprof translation, spooling, detaching and encoding live in their own files.
 */
#include <stdlib.h>
#include <string.h>

#include "block/block_writer_internal.h"
#include "common/clock.h"

#define DEFAULT_PAGE_SIZE (64u * 1024u)
#define MAX_PAGE_SIZE (16u << 20)

/* ---- lifecycle --------------------------------------------------------------------------- */

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
    strata_slot_map_free(&w->mapping_index);
    free(w->functions);
    strata_slot_map_free(&w->function_index);
    strata_slot_map_free(&w->function_content_index);
    free(w->pprof.string_hashes);
    free(w->pprof.function_keys);
    free(w->pprof.function_checks);
    free(w->locations);
    strata_slot_map_free(&w->location_index);
    free(w->lines);
    free(w->stacks);
    free(w->stack_origins);
    free(w->location_origins);
    free(w->function_origins);
    strata_slot_map_free(&w->stack_index);
    free(w->chain_locations);
    free(w->chain_nodes);
    free(w->pprof.frames);
    free(w->pprof.misses);
    strata_slot_map_free(&w->stack_cache);
    free(w->pprof.samples);
    free(w->scratch.frames);
    free(w->series);
    strata_slot_map_free(&w->series_index);
    free(w->label_words);
    free(w->label_sets);
    strata_slot_map_free(&w->label_set_index);
    free(w->set_words);
    free(w->scratch.set);
    free(w->pprof.sample_sets);
    free(w->sample_label_sets);
    free(w->profiles);
    free(w->sample_stacks);
    free(w->sample_values);
    free(w->pairs);
    free(w->pairs_tmp);
    free(w->pprof.mapping_ids);
    free(w->pprof.function_ids);
    free(w->pprof.location_ids);
    free(w->pprof.string_ids);
    free(w->pprof.block_location_by_id);
    free(w->pprof.location_keys);
    free(w->pprof.location_checks);
    free(w->scratch.lines);
    free(w->scratch.labels);
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

/* ---- the open profile -------------------------------------------------------------------- */

int block_writer_check_writable(const block_writer *w, strata_error *err) {
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

int block_writer_profile_start(block_writer *w, const label_set *labels, const profile_type *type,
                               int64_t time_ns, int64_t duration_ns, int64_t period,
                               strata_error *err) {
    if (block_writer_check_writable(w, err) != 0)
        return -1;
    if (w->open)
        return strata_error_set(err, STRATA_FAILED_PRECONDITION,
                                "block writer: a profile is already open; end it first");
    if (w->n_profiles >= UINT32_MAX - 1)
        return strata_error_set(err, STRATA_RESOURCE_EXHAUSTED,
                                "block writer: too many profiles for one block");
    memset(&w->current, 0, sizeof w->current);
    if (block_writer_dict_series(w, labels, type, &w->current.series, err) != 0)
        return -1;
    if (w->spool != NULL && block_writer_spool_check_order(w, w->current.series, time_ns, err) != 0)
        return -1;
    w->current.time_ns = time_ns;
    w->current.duration_ns = duration_ns;
    w->current.period = period;
    w->n_pairs = 0;
    w->open = true;
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
int block_writer_profile_commit(block_writer *w, strata_error *err) {
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
        return block_writer_spool_commit(w, kept, total, labelled, err);
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

/* ---- symbolized path --------------------------------------------------------------------- */

int block_writer_begin_profile(block_writer *w, const label_set *labels, const profile_type *type,
                               int64_t time_ns, int64_t duration_ns, int64_t period,
                               strata_error *err) {
    return block_writer_profile_start(w, labels, type, time_ns, duration_ns, period, err);
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
        if (block_writer_dict_cstr(w, f->mapping_file, &m.file, err) != 0 ||
            block_writer_dict_cstr(w, f->build_id, &m.build_id, err) != 0 ||
            block_writer_dict_mapping(w, &m, &id, err) != 0)
            return -1;
        item.loc.mapping = id + 1;
    }
    w_function fn = {0, 0, 0, f->start_line};
    w_line line = {0, f->line};
    if (block_writer_dict_cstr(w, f->function_name, &fn.name, err) != 0 ||
        block_writer_dict_cstr(w, f->system_name, &fn.system_name, err) != 0 ||
        block_writer_dict_cstr(w, f->file_name, &fn.file, err) != 0 ||
        block_writer_dict_function(w, &fn, &line.function, err) != 0)
        return -1;
    item.loc.line_count = 1;
    item.lines = &line;
    return block_writer_dict_location(w, &item, location, err);
}

/* The label set of a sample's labels given as a label_set (empty values dropped). */
static int sample_label_set(block_writer *w, const label_set *labels, uint32_t *id,
                            strata_error *err) {
    size_t n = labels == NULL ? 0 : labels->count;
    ENSURE_OR_OOM(w->scratch.set, w->scratch.cap_set, 2 * n + 1);
    uint32_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const strata_label *l = &labels->labels[i];
        if (l->name == NULL || l->name[0] == '\0' || l->value == NULL || l->value[0] == '\0')
            continue;
        if (block_writer_dict_cstr(w, l->name, &w->scratch.set[1 + 2 * k], err) != 0 ||
            block_writer_dict_cstr(w, l->value, &w->scratch.set[2 + 2 * k], err) != 0)
            return -1;
        k++;
    }
    return block_writer_dict_label_set(w, k, false, id, err);
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
    ENSURE_OR_OOM(w->scratch.frames, w->scratch.cap_frames, n_frames + 1);
    for (size_t j = 0; j < n_frames; j++) {
        if (intern_frame(w, &frames[j], &w->scratch.frames[j], err) != 0)
            return -1;
    }
    uint32_t stack, set = 0;
    if (block_writer_dict_stack_cached(w, w->scratch.frames, n_frames, &stack, err) != 0 ||
        (sample_labels != NULL && sample_label_set(w, sample_labels, &set, err) != 0))
        return -1;
    return block_writer_profile_push(w, stack, set, value, err);
}

int block_writer_end_profile(block_writer *w, strata_error *err) {
    if (!w->open)
        return strata_error_set(err, STRATA_FAILED_PRECONDITION,
                                "block writer: end_profile without begin_profile");
    if (block_writer_profile_commit(w, err) != 0) {
        block_writer_abort_profile(w);
        return -1;
    }
    return 0;
}

void block_writer_abort_profile(block_writer *w) {
    w->open = false;
    w->n_pairs = 0;
}

/* ---- profiles by stack id ---------------------------------------------------------------- */

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
    if (block_writer_profile_start(w, labels, type, time_ns, duration_ns, period, err) != 0)
        return -1;
    for (size_t i = 0; i < n; i++)
        w->pairs[i] = make_pair(stacks[i], label_sets != NULL ? label_sets[i] : 0, values[i]);
    w->n_pairs = n;
    if (block_writer_profile_commit(w, err) != 0) {
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

/* ---- counts ------------------------------------------------------------------------------ */

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
    bytes += w->cap_mappings * sizeof *w->mappings + strata_slot_map_bytes(&w->mapping_index);
    bytes += w->cap_functions * sizeof *w->functions + strata_slot_map_bytes(&w->function_index);
    bytes += strata_slot_map_bytes(&w->function_content_index);
    bytes += (w->pprof.cap_string_hashes + w->pprof.cap_function_keys) * 8 +
             w->pprof.cap_function_checks * 4;
    bytes += w->cap_locations * sizeof *w->locations + strata_slot_map_bytes(&w->location_index);
    bytes += w->cap_lines * sizeof *w->lines;
    bytes += w->cap_stacks * sizeof *w->stacks;
    bytes += strata_slot_map_bytes(&w->stack_index);
    bytes += (w->cap_chain_locations + w->cap_chain_nodes) * 4;
    bytes += w->pprof.cap_frames * 4 + w->pprof.cap_misses * sizeof *w->pprof.misses;
    bytes +=
        w->pprof.cap_samples * sizeof *w->pprof.samples + strata_slot_map_bytes(&w->stack_cache);
    bytes += w->scratch.cap_frames * sizeof *w->scratch.frames;
    bytes += w->cap_series * sizeof *w->series + strata_slot_map_bytes(&w->series_index);
    bytes += w->cap_label_words * sizeof *w->label_words;
    bytes += w->cap_label_sets * sizeof *w->label_sets + strata_slot_map_bytes(&w->label_set_index);
    bytes += (w->cap_set_words + w->scratch.cap_set + w->pprof.cap_sample_sets +
              w->cap_sample_label_sets) *
             4;
    bytes += w->cap_profiles * sizeof *w->profiles;
    bytes += w->cap_sample_stacks * sizeof *w->sample_stacks;
    bytes += w->cap_sample_values * sizeof *w->sample_values;
    bytes += (w->cap_pairs + w->cap_pairs_tmp) * sizeof *w->pairs;
    bytes += (w->pprof.cap_mapping_ids + w->pprof.cap_function_ids + w->pprof.cap_location_ids +
              w->pprof.cap_string_ids + w->pprof.cap_location_checks) *
             4;
    bytes += w->pprof.cap_location_keys * sizeof *w->pprof.location_keys;
    bytes += w->pprof.cap_block_location_by_id * sizeof *w->pprof.block_location_by_id;
    bytes += w->scratch.cap_lines * sizeof *w->scratch.lines + w->scratch.cap_labels * 4;
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

/* ---- meta -------------------------------------------------------------------------------- */

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

int block_writer_fill_meta(const block_writer *w, const block_order *o, uint64_t object_size,
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
