/*
 * block_merge.c - see block_merge.h for the design.
 */
#include "block/block_merge.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "block/block_format.h"
#include "block/block_reader.h"
#include "block/block_writer.h"
#include "common/array.h"

#define DEFAULT_MEMORY_LIMIT ((size_t)1 << 30)
#define DEFAULT_READER_CACHE ((size_t)4 << 20)
/* Bytes per source series (the merger's series_ref, the writer's series entry and its index
 * slot), used to predict a merge's memory from the sources' meta.json before reading anything. */
#define MERGE_BYTES_PER_SERIES 96
/* Longest tenant name (tenant ids are short; this keeps every key far below BUCKET_KEY_MAX). */
#define TENANT_MAX 512

/* The translation of one ingester dictionary's stacks and locations into the output, shared by
 * every source cut from it (docs/block-format.md 6.12: one dictionary id and origin, one content),
 * so a stack or location that 300 one-second blocks repeat is translated once, not 300 times. */
typedef struct merge_dictionary {
    uint8_t id[16];
    uint32_t *stacks;    /* dictionary stack id -> output stack id (0 = not yet; 0 is the root) */
    size_t n_stacks;     /* entries */
    uint32_t *locations; /* dictionary location origin (1-based) -> output location + 1 */
    size_t n_locations;
    uint64_t source_stacks; /* stack rows of the sources that could share it */
    size_t sources;
} merge_dictionary;

/* One source block: its meta.json, reader, and the translation of its symbols into the output. */
typedef struct merge_source {
    char name[TENANT_MAX + ULID_STRING_LEN + 2]; /* "<tenant>/<ULID>", for errors */
    char key[TENANT_MAX + ULID_STRING_LEN + 40]; /* the data object's key, for fetches */
    bucket *store;
    bool *bucket_error; /* the result's bucket_error */
    block_meta meta;
    uint64_t data_size;
    block_reader *reader;
    /* source id -> output id + 1 (0 = not translated yet); stacks: output stack id (ids start
     * at 1, so 0 is free to mean "not yet"). */
    uint32_t *stack_map;
    size_t n_stacks;
    uint32_t *location_map;
    size_t n_locations;
    uint32_t *function_map;
    size_t n_functions;
    uint32_t *mapping_map;
    size_t n_mappings;
    uint32_t *label_set_map; /* indexed by sample label set id (0 = none; maps to 0) */
    size_t n_label_sets;
    bool whole_stacks; /* translate whole stacks (see translate_stack) */
    /* A source cut from a shared dictionary translates its stacks and locations through it
     * (stack_map and location_map then stay NULL): origins give each row's dictionary id. */
    merge_dictionary *dict;
    block_stack_origins origins;     /* the reader's: stack id -> dictionary stack */
    const uint32_t *location_origin; /* index = location id; NULL once stacks_translated */
    bool stacks_translated;          /* every stack is in dict (translate_all_stacks) */
} merge_source;

/* One series of one source, in the global series order. */
typedef struct series_ref {
    const profile_type *type;
    const label_set *labels;
    uint32_t source;
    uint32_t series;
} series_ref;

/* One candidate profile of the output series being merged. */
typedef struct candidate {
    block_profile profile;
    uint32_t source;
    uint32_t order; /* position in the source, so equal times keep a stable order */
} candidate;

typedef struct out_pair {
    uint32_t stack;
    uint32_t label_set;
    int64_t value;
} out_pair;

/* One profile's samples in output stack ids, sorted by stack, summed, zeros dropped. */
typedef struct kept_profile {
    int64_t duration_ns, period;
    size_t first, count; /* into the run's pair arrays */
} kept_profile;

typedef struct merge_state {
    bucket *store;
    const char *tenant;
    block_merge_options opts;
    merge_source *sources;
    size_t n_sources;
    block_writer *writer;
    int spool_fd; /* the writer's spool file (open_spool); -1 before */
    block_merge_stats *stats;
    bool *bucket_error; /* the result's bucket_error */

    series_ref *refs;
    size_t n_refs;
    uint64_t series_total;

    block_profile *fetched; /* one source's profiles of the current series */
    size_t n_fetched;
    candidate *cands;
    size_t n_cands, cap_cands;
    block_samples samples;
    uint32_t *chain; /* stack translation scratch: untranslated source stacks, leaf first */
    size_t cap_chain;
    block_writer_line *lines;
    size_t cap_lines;
    /* samples of the profiles kept in the current timestamp run */
    uint32_t *run_stacks;
    uint32_t *run_sets; /* their sample label sets */
    int64_t *run_values;
    size_t n_run, cap_run;
    uint32_t *set_pairs; /* label set translation scratch: (name, value) output string ids */
    size_t cap_set_pairs;
    out_pair *pairs; /* one profile's translated samples */
    size_t cap_pairs;
    kept_profile *kept;
    size_t n_kept, cap_kept;
    merge_dictionary *dicts;
    size_t n_dicts;
} merge_state;

/* ---- helpers ----------------------------------------------------------------------------- */

static int source_error(const merge_source *s, strata_error *err) {
    return strata_error_wrap(err, "block %s", s->name);
}

void block_merge_options_default(block_merge_options *options) {
    memset(options, 0, sizeof *options);
    options->memory_limit = DEFAULT_MEMORY_LIMIT;
}

void block_merge_result_free(block_merge_result *result) {
    if (result == NULL)
        return;
    block_meta_free(&result->meta);
    memset(result, 0, sizeof *result);
}

/* ---- opening sources ---------------------------------------------------------------------- */

static int fetch_range(void *ctx, uint64_t offset, uint64_t length, strata_buffer *out,
                       strata_error *err) {
    merge_source *s = ctx;
    strata_buffer_reset(out);
    if (bucket_get_range(s->store, s->key, offset, length, out, err) != 0) {
        if (err->code == STRATA_OUT_OF_RANGE) /* shorter than meta.json says: truncated */
            err->code = STRATA_DATA_LOSS;
        else if (err->code != STRATA_NOT_FOUND)
            *s->bucket_error = true;
        return -1;
    }
    if (out->len != length)
        return strata_error_set(err, STRATA_DATA_LOSS, "%s: short read (%zu of %llu bytes)", s->key,
                                out->len, (unsigned long long)length);
    return 0;
}

static int read_meta(merge_state *m, merge_source *s, strata_error *err) {
    char key[sizeof s->key];
    snprintf(key, sizeof key, "%s/%s", s->name, BLOCK_META_FILE);
    strata_buffer json = STRATA_BUFFER_INIT;
    int rc = bucket_get(m->store, key, &json, err);
    if (rc != 0 && err->code != STRATA_NOT_FOUND)
        *m->bucket_error = true;
    if (rc == 0) {
        m->stats->bytes_read += json.len;
        rc = block_meta_decode((const char *)json.data, json.len, &s->meta, err);
        if (rc != 0)
            strata_error_wrap(err, "%s", BLOCK_META_FILE);
    }
    strata_buffer_free(&json);
    if (rc != 0)
        return -1;
    if (s->meta.tenant == NULL || strcmp(s->meta.tenant, m->tenant) != 0)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "meta.json names tenant \"%s\", not \"%s\"",
                                s->meta.tenant ? s->meta.tenant : "", m->tenant);
    for (size_t i = 0; i < s->meta.n_files; i++) {
        if (strcmp(s->meta.files[i].rel_path, BLOCK_DATA_FILE) == 0)
            s->data_size = s->meta.files[i].size_bytes;
    }
    if (s->data_size == 0)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "meta.json lists no %s",
                                BLOCK_DATA_FILE);
    return 0;
}

static int alloc_map(uint32_t **map, size_t *n, uint64_t rows, strata_error *err) {
    *n = (size_t)rows;
    *map = calloc(*n + 1, sizeof **map);
    return *map == NULL ? strata_error_oom(err) : 0;
}

static int open_source(merge_state *m, merge_source *s, strata_error *err) {
    block_reader_options ro;
    block_reader_options_default(&ro);
    ro.cache_bytes = m->opts.reader_cache_bytes;
    if (block_reader_open(fetch_range, s, s->data_size, &ro, &s->reader, err) != 0)
        return -1;
    block_reader *r = s->reader;
    s->n_stacks = block_reader_row_count(r, BLOCK_TABLE_STACKS);
    s->n_locations = block_reader_row_count(r, BLOCK_TABLE_LOCATIONS);
    if (alloc_map(&s->function_map, &s->n_functions,
                  block_reader_row_count(r, BLOCK_TABLE_FUNCTIONS), err) != 0 ||
        alloc_map(&s->mapping_map, &s->n_mappings, block_reader_row_count(r, BLOCK_TABLE_MAPPINGS),
                  err) != 0 ||
        alloc_map(&s->label_set_map, &s->n_label_sets, block_reader_label_set_count(r), err) != 0)
        return -1;
    m->stats->series_in += block_reader_series_count(r);
    s->whole_stacks = s->n_stacks > block_reader_row_count(r, BLOCK_TABLE_SAMPLES);
    return 0;
}

static void close_source(merge_source *s) {
    block_reader_close(s->reader);
    block_meta_free(&s->meta);
    free(s->stack_map);
    free(s->location_map);
    free(s->function_map);
    free(s->mapping_map);
    free(s->label_set_map);
}

/* ---- memory ------------------------------------------------------------------------------ */

static size_t memory_estimate(const merge_state *m) {
    size_t bytes = block_writer_memory_bytes(m->writer);
    for (size_t i = 0; i < m->n_sources; i++) {
        const merge_source *s = &m->sources[i];
        if (s->reader != NULL)
            bytes += block_reader_memory_bytes(s->reader);
        bytes += (s->n_functions + s->n_mappings + s->n_label_sets + 5) * 4;
        if (s->dict == NULL)
            bytes += (s->n_stacks + s->n_locations) * 4;
    }
    for (size_t i = 0; i < m->n_dicts; i++)
        bytes += (m->dicts[i].n_stacks + m->dicts[i].n_locations) * 4;
    bytes += m->n_refs * sizeof *m->refs + m->cap_cands * sizeof *m->cands;
    bytes += m->samples.cap * (m->samples.label_sets != NULL ? 16 : 12) + m->cap_run * 16 +
             m->cap_pairs * sizeof *m->pairs;
    bytes += m->cap_set_pairs * 4;
    bytes += m->cap_kept * sizeof *m->kept;
    return bytes;
}

static int check_memory(merge_state *m, size_t extra, const char *when, strata_error *err) {
    size_t bytes = memory_estimate(m) + extra;
    if (bytes > m->stats->peak_memory_bytes)
        m->stats->peak_memory_bytes = bytes;
    if (bytes > m->opts.memory_limit)
        return strata_error_set(err, STRATA_RESOURCE_EXHAUSTED,
                                "block merge: memory estimate %zu bytes exceeds the limit of %zu "
                                "bytes %s; merge fewer or smaller blocks",
                                bytes, m->opts.memory_limit, when);
    return 0;
}

/* Before reading any data: the merger holds an entry per source series and the writer one per
 * output series at least (the samples go to the spool, so they do not count). */
static int predict_memory(merge_state *m, strata_error *err) {
    uint64_t series = 0;
    for (size_t i = 0; i < m->n_sources; i++)
        series += m->sources[i].meta.num_series;
    uint64_t predicted = series * MERGE_BYTES_PER_SERIES;
    if (predicted > m->opts.memory_limit)
        return strata_error_set(err, STRATA_RESOURCE_EXHAUSTED,
                                "block merge: %llu series in %zu blocks need about %llu bytes, "
                                "over the limit of %zu bytes; merge fewer blocks",
                                (unsigned long long)series, m->n_sources,
                                (unsigned long long)predicted, m->opts.memory_limit);
    return 0;
}

/* ---- shared dictionaries ---------------------------------------------------------------- */

/* Where a source stack's (id 1..n_stacks) output stack id is kept: its dictionary's entry or the
 * source's own. */
static inline uint32_t *stack_slot(merge_source *s, uint32_t id) {
    return s->dict != NULL ? &s->dict->stacks[block_stack_origin(&s->origins, id)]
                           : &s->stack_map[id];
}

/* Where a source location's output location + 1 is kept. */
static inline uint32_t *location_slot(merge_source *s, uint32_t id) {
    return s->dict != NULL ? &s->dict->locations[s->location_origin[id]] : &s->location_map[id];
}

static merge_dictionary *find_dictionary(merge_state *m, const uint8_t id[16]) {
    for (size_t i = 0; i < m->n_dicts; i++)
        if (memcmp(m->dicts[i].id, id, 16) == 0)
            return &m->dicts[i];
    return NULL;
}

/* Groups the sources by the dictionary they were cut from. A dictionary is shared when its map
 * (4 bytes per dictionary stack and location) is no larger than the per-source maps it replaces,
 * i.e. when its sources hold together at least as many stack rows as it has stacks; other sources
 * get maps of their own. */
static int assign_dictionaries(merge_state *m, strata_error *err) {
    m->dicts = calloc(m->n_sources + 1, sizeof *m->dicts);
    block_stack_origins *origins = calloc(m->n_sources + 1, sizeof *origins);
    int rc = (m->dicts != NULL && origins != NULL) ? 0 : strata_error_oom(err);
    for (size_t i = 0; rc == 0 && i < m->n_sources; i++) {
        merge_source *s = &m->sources[i];
        if (block_reader_stack_origins(s->reader, &origins[i], err) != 0) {
            rc = source_error(s, err);
            break;
        }
        if (origins[i].stacks == NULL)
            continue;
        merge_dictionary *d = find_dictionary(m, origins[i].dictionary);
        if (d == NULL) {
            d = &m->dicts[m->n_dicts++];
            memcpy(d->id, origins[i].dictionary, 16);
        }
        if (origins[i].dictionary_stacks + (size_t)1 > d->n_stacks)
            d->n_stacks = origins[i].dictionary_stacks + (size_t)1;
        if (origins[i].dictionary_locations + (size_t)1 > d->n_locations)
            d->n_locations = origins[i].dictionary_locations + (size_t)1;
        d->source_stacks += s->n_stacks;
        d->sources++;
    }
    for (size_t i = 0; rc == 0 && i < m->n_sources; i++) {
        merge_source *s = &m->sources[i];
        merge_dictionary *d =
            origins[i].stacks != NULL ? find_dictionary(m, origins[i].dictionary) : NULL;
        if (d != NULL && d->sources >= 2 && d->source_stacks >= d->n_stacks) {
            s->dict = d;
            s->origins = origins[i];
            s->location_origin = origins[i].location_origin;
            m->stats->dictionary_sources++;
            continue;
        }
        if (alloc_map(&s->stack_map, &s->n_stacks, s->n_stacks, err) != 0 ||
            alloc_map(&s->location_map, &s->n_locations, s->n_locations, err) != 0)
            rc = -1;
    }
    /* the shared maps, only for dictionaries that are used */
    for (size_t i = 0; rc == 0 && i < m->n_dicts; i++) {
        merge_dictionary *d = &m->dicts[i];
        if (d->sources < 2 || d->source_stacks < d->n_stacks) {
            d->n_stacks = d->n_locations = 0;
            continue;
        }
        d->stacks = calloc(d->n_stacks, sizeof *d->stacks);
        d->locations = calloc(d->n_locations, sizeof *d->locations);
        if (d->stacks == NULL || d->locations == NULL)
            rc = strata_error_oom(err);
    }
    free(origins);
    return rc;
}

static void free_dictionaries(merge_state *m) {
    for (size_t i = 0; i < m->n_dicts; i++) {
        free(m->dicts[i].stacks);
        free(m->dicts[i].locations);
    }
    free(m->dicts);
}

/* ---- symbol translation ------------------------------------------------------------------ */

static int translate_string(merge_state *m, const char *s, uint32_t *out, strata_error *err) {
    return block_writer_intern_string(m->writer, s, s == NULL ? 0 : strlen(s), out, err);
}

static int translate_mapping(merge_state *m, merge_source *s, uint32_t id, uint32_t *out,
                             strata_error *err) {
    if (s->mapping_map[id] != 0) {
        *out = s->mapping_map[id] - 1;
        return 0;
    }
    block_mapping bm;
    if (block_reader_mapping(s->reader, id, &bm, err) != 0)
        return source_error(s, err);
    block_writer_mapping wm = {bm.memory_start, bm.memory_limit, bm.file_offset, 0, 0, bm.flags};
    if (translate_string(m, bm.file, &wm.file, err) != 0 ||
        translate_string(m, bm.build_id, &wm.build_id, err) != 0 ||
        block_writer_intern_mapping(m->writer, &wm, out, err) != 0)
        return -1;
    s->mapping_map[id] = *out + 1;
    return 0;
}

static int translate_function(merge_state *m, merge_source *s, uint32_t id, uint32_t *out,
                              strata_error *err) {
    if (id >= s->n_functions)
        return strata_error_set(err, STRATA_DATA_LOSS, "block %s: function id %u out of range",
                                s->name, id);
    if (s->function_map[id] != 0) {
        *out = s->function_map[id] - 1;
        return 0;
    }
    block_function bf;
    if (block_reader_function(s->reader, id, &bf, err) != 0)
        return source_error(s, err);
    uint32_t name, system_name, file;
    if (translate_string(m, bf.name, &name, err) != 0 ||
        translate_string(m, bf.system_name, &system_name, err) != 0 ||
        translate_string(m, bf.file, &file, err) != 0 ||
        block_writer_intern_function(m->writer, name, system_name, file, bf.start_line, out, err) !=
            0)
        return -1;
    s->function_map[id] = *out + 1;
    return 0;
}

static int translate_location(merge_state *m, merge_source *s, uint32_t id, uint32_t *out,
                              strata_error *err) {
    if (id >= s->n_locations)
        return strata_error_set(err, STRATA_DATA_LOSS, "block %s: location id %u out of range",
                                s->name, id);
    uint32_t *done = location_slot(s, id);
    if (*done != 0) {
        *out = *done - 1;
        return 0;
    }
    block_location bl;
    if (block_reader_location(s->reader, id, &bl, err) != 0)
        return source_error(s, err);
    uint32_t mapping = 0;
    if (bl.has_mapping) {
        if (bl.mapping_id >= s->n_mappings)
            return strata_error_set(err, STRATA_DATA_LOSS, "block %s: mapping id %u out of range",
                                    s->name, bl.mapping_id);
        uint32_t mid;
        if (translate_mapping(m, s, bl.mapping_id, &mid, err) != 0)
            return -1;
        mapping = mid + 1;
    }
    if (STRATA_ARRAY_RESERVE_OR_OOM(m->lines, m->cap_lines, bl.n_lines, err) != 0)
        return -1;
    for (uint32_t i = 0; i < bl.n_lines; i++) {
        m->lines[i].line = bl.lines[i].line;
        if (translate_function(m, s, bl.lines[i].function_id, &m->lines[i].function, err) != 0)
            return -1;
    }
    if (block_writer_intern_location(m->writer, bl.address, mapping,
                                     bl.is_folded ? BLOCK_LOCATION_IS_FOLDED : 0, m->lines,
                                     bl.n_lines, out, err) != 0)
        return -1;
    *location_slot(s, id) = *out + 1;
    return 0;
}

/* Translates a source's sample label set (its names and values re-interned as output strings). */
static int translate_label_set(merge_state *m, merge_source *s, uint32_t id, uint32_t *out,
                               strata_error *err) {
    if (id == 0) {
        *out = 0;
        return 0;
    }
    if (id > s->n_label_sets)
        return strata_error_set(err, STRATA_DATA_LOSS, "block %s: label set %u out of range",
                                s->name, id);
    if (s->label_set_map[id] != 0) {
        *out = s->label_set_map[id] - 1;
        return 0;
    }
    const label_set *set;
    if (block_reader_label_set(s->reader, id, &set, err) != 0)
        return source_error(s, err);
    if (STRATA_ARRAY_RESERVE_OR_OOM(m->set_pairs, m->cap_set_pairs, 2 * set->count + 1, err) != 0)
        return -1;
    for (size_t i = 0; i < set->count; i++) {
        if (translate_string(m, set->labels[i].name, &m->set_pairs[2 * i], err) != 0 ||
            translate_string(m, set->labels[i].value, &m->set_pairs[2 * i + 1], err) != 0)
            return -1;
    }
    if (block_writer_intern_label_set(m->writer, m->set_pairs, set->count, out, err) != 0)
        return -1;
    s->label_set_map[id] = *out + 1;
    return 0;
}

/* Translates a whole source stack at once: its frames' locations, then one lookup in the writer's
 * whole-stack cache (frames are interned only when the stack is new to the output). */
static int translate_stack_path(merge_state *m, merge_source *s, uint32_t id, uint32_t *out,
                                strata_error *err) {
    size_t n = 0;
    for (uint32_t at = id; at != 0;) {
        uint32_t parent, location;
        if (block_reader_stack_node(s->reader, at, &parent, &location, err) != 0)
            return source_error(s, err);
        if (parent >= at)
            return strata_error_set(err, STRATA_DATA_LOSS,
                                    "block %s: stack %u has parent %u (not an earlier stack)",
                                    s->name, at, parent);
        if (STRATA_ARRAY_RESERVE_OR_OOM(m->chain, m->cap_chain, n + 1, err) != 0 ||
            translate_location(m, s, location, &m->chain[n], err) != 0)
            return -1;
        n++;
        at = parent;
    }
    if (block_writer_intern_stack_path(m->writer, m->chain, n, out, err) != 0)
        return -1;
    *stack_slot(s, id) = *out;
    return 0;
}

/* A source cut from a shared dictionary has its whole stack tree translated the first time one of
 * its samples is, in id order (a parent is always an earlier stack, so each node costs one intern
 * under its translated parent), and then the reader's decoded symbols and stack tree are freed:
 * the source keeps only its stack origins (4 bytes per stack), and a sample's stack costs one
 * lookup. 300 one-second sources of a window are thus translated one after another instead of
 * all holding their decoded trees at once. The ingester cuts a block with exactly the stacks its
 * samples use, so nothing is translated in vain. */
static int translate_all_stacks(merge_state *m, merge_source *s, strata_error *err) {
    for (uint32_t id = 1; id <= s->n_stacks; id++) {
        uint32_t *slot = stack_slot(s, id);
        if (*slot != 0)
            continue;
        uint32_t parent, location, loc;
        if (block_reader_stack_node(s->reader, id, &parent, &location, err) != 0)
            return source_error(s, err);
        if (parent >= id)
            return strata_error_set(err, STRATA_DATA_LOSS,
                                    "block %s: stack %u has parent %u (not an earlier stack)",
                                    s->name, id, parent);
        uint32_t base = parent == 0 ? 0 : *stack_slot(s, parent);
        if (translate_location(m, s, location, &loc, err) != 0 ||
            block_writer_intern_stack(m->writer, base, loc, &base, err) != 0)
            return -1;
        *stack_slot(s, id) = base;
    }
    block_reader_drop_symbols(s->reader);
    s->location_origin = NULL;
    s->stacks_translated = true;
    return 0;
}

/* Translates a source stack. Blocks with more stack nodes than samples (small blocks: every sample
 * brings its own deep suffix) translate whole stacks through the writer's stack cache, so stacks
 * that many sources share cost one lookup each; larger blocks translate node by node, walking up
 * only to the nearest translated ancestor, so each node costs one lookup in all. */
static int translate_stack(merge_state *m, merge_source *s, uint32_t id, uint32_t *out,
                           strata_error *err) {
    if (id > s->n_stacks)
        return strata_error_set(err, STRATA_DATA_LOSS, "block %s: stack id %u out of range",
                                s->name, id);
    if (s->dict != NULL && !s->stacks_translated && translate_all_stacks(m, s, err) != 0)
        return -1;
    if (id == 0 || *stack_slot(s, id) != 0) {
        *out = id == 0 ? 0 : *stack_slot(s, id);
        return 0;
    }
    if (s->whole_stacks && s->dict == NULL)
        return translate_stack_path(m, s, id, out, err);
    size_t n = 0;
    uint32_t at = id;
    while (at != 0 && *stack_slot(s, at) == 0) {
        if (STRATA_ARRAY_RESERVE_OR_OOM(m->chain, m->cap_chain, n + 1, err) != 0)
            return -1;
        m->chain[n++] = at;
        uint32_t parent, location;
        if (block_reader_stack_node(s->reader, at, &parent, &location, err) != 0)
            return source_error(s, err);
        if (parent >= at)
            return strata_error_set(err, STRATA_DATA_LOSS,
                                    "block %s: stack %u has parent %u (not an earlier stack)",
                                    s->name, at, parent);
        at = parent;
    }
    uint32_t base = at == 0 ? 0 : *stack_slot(s, at);
    while (n > 0) {
        uint32_t node = m->chain[--n], parent, location, loc;
        if (block_reader_stack_node(s->reader, node, &parent, &location, err) != 0)
            return source_error(s, err);
        if (translate_location(m, s, location, &loc, err) != 0 ||
            block_writer_intern_stack(m->writer, base, loc, &base, err) != 0)
            return -1;
        *stack_slot(s, node) = base;
    }
    *out = base;
    return 0;
}

/* ---- global series order ----------------------------------------------------------------- */

static int compare_strings(const char *a, const char *b) {
    return strcmp(a ? a : "", b ? b : "");
}

static int compare_refs(const void *pa, const void *pb) {
    const series_ref *a = pa, *b = pb;
    int c;
    if ((c = compare_strings(a->type->name, b->type->name)) != 0 ||
        (c = compare_strings(a->type->sample_type, b->type->sample_type)) != 0 ||
        (c = compare_strings(a->type->sample_unit, b->type->sample_unit)) != 0 ||
        (c = compare_strings(a->type->period_type, b->type->period_type)) != 0 ||
        (c = compare_strings(a->type->period_unit, b->type->period_unit)) != 0)
        return c;
    if (a->type->delta != b->type->delta)
        return a->type->delta ? 1 : -1;
    if ((c = label_set_compare(a->labels, b->labels)) != 0)
        return c;
    return a->source != b->source ? (a->source < b->source ? -1 : 1) : 0;
}

static bool same_series(const series_ref *a, const series_ref *b) {
    return profile_type_equal(a->type, b->type) && label_set_compare(a->labels, b->labels) == 0;
}

/* Every (source, series) pair, sorted so that equal series of different sources are adjacent. */
static int order_series(merge_state *m, strata_error *err) {
    size_t total = 0;
    for (size_t i = 0; i < m->n_sources; i++)
        total += block_reader_series_count(m->sources[i].reader);
    m->refs = calloc(total + 1, sizeof *m->refs);
    if (m->refs == NULL)
        return strata_error_oom(err);
    for (size_t i = 0; i < m->n_sources; i++) {
        const block_reader *r = m->sources[i].reader;
        size_t count = block_reader_series_count(r);
        for (uint32_t j = 0; j < count; j++) {
            series_ref *ref = &m->refs[m->n_refs++];
            ref->type = block_reader_series_type(r, j);
            ref->labels = block_reader_series_labels(r, j);
            ref->source = (uint32_t)i;
            ref->series = j;
        }
    }
    qsort(m->refs, m->n_refs, sizeof *m->refs, compare_refs);
    for (size_t i = 0; i < m->n_refs; i++)
        m->series_total += i == 0 || !same_series(&m->refs[i - 1], &m->refs[i]);
    return 0;
}

/* ---- merging one series ------------------------------------------------------------------ */

static int compare_candidates(const void *pa, const void *pb) {
    const candidate *a = pa, *b = pb;
    if (a->profile.time_ns != b->profile.time_ns)
        return a->profile.time_ns < b->profile.time_ns ? -1 : 1;
    if (a->source != b->source)
        return a->source < b->source ? -1 : 1;
    return a->order < b->order ? -1 : a->order > b->order;
}

static int collect_candidates(merge_state *m, const series_ref *refs, size_t n, strata_error *err) {
    m->n_cands = 0;
    for (size_t i = 0; i < n; i++) {
        merge_source *s = &m->sources[refs[i].source];
        free(m->fetched);
        m->fetched = NULL;
        m->n_fetched = 0;
        if (block_reader_profiles(s->reader, &refs[i].series, 1, INT64_MIN, INT64_MAX, &m->fetched,
                                  &m->n_fetched, err) != 0)
            return source_error(s, err);
        if (STRATA_ARRAY_RESERVE_OR_OOM(m->cands, m->cap_cands, m->n_cands + m->n_fetched, err) !=
            0)
            return -1;
        for (size_t j = 0; j < m->n_fetched; j++) {
            candidate *c = &m->cands[m->n_cands++];
            c->profile = m->fetched[j];
            c->source = refs[i].source;
            c->order = (uint32_t)j;
        }
    }
    m->stats->profiles_in += m->n_cands;
    if (m->n_cands > 1) /* series without profiles (a damaged block) leave none: no qsort of NULL */
        qsort(m->cands, m->n_cands, sizeof *m->cands, compare_candidates);
    return 0;
}

static int compare_out_pairs(const void *pa, const void *pb) {
    const out_pair *a = pa, *b = pb;
    if (a->stack != b->stack)
        return a->stack < b->stack ? -1 : 1;
    return a->label_set < b->label_set ? -1 : a->label_set > b->label_set;
}

/* Reads a candidate's samples, translates them and appends them to the run arrays in canonical
 * form (sorted by output (stack, label set), equal pairs summed, zeros dropped). *first and
 * *count say where. */
static int load_canonical(merge_state *m, const candidate *c, size_t *first, size_t *count,
                          strata_error *err) {
    merge_source *s = &m->sources[c->source];
    m->samples.len = 0;
    if (block_reader_read_samples(s->reader, &c->profile, 1, &m->samples, err) != 0)
        return source_error(s, err);
    m->stats->samples_in += m->samples.len;
    size_t n = m->samples.len;
    if (m->n_run + n + 1 > m->cap_run) {
        size_t cap = strata_array_capacity(m->cap_run, m->n_run + n + 1);
        uint32_t *stacks = strata_array_resize(m->run_stacks, cap, sizeof *stacks);
        if (stacks == NULL)
            return strata_error_oom(err);
        m->run_stacks = stacks;
        int64_t *values = strata_array_resize(m->run_values, cap, sizeof *values);
        if (values == NULL)
            return strata_error_oom(err);
        m->run_values = values;
        uint32_t *sets = strata_array_resize(m->run_sets, cap, sizeof *sets);
        if (sets == NULL)
            return strata_error_oom(err);
        m->run_sets = sets;
        m->cap_run = cap;
    }
    if (STRATA_ARRAY_RESERVE_OR_OOM(m->pairs, m->cap_pairs, n + 1, err) != 0)
        return -1;
    out_pair *pairs = m->pairs;
    bool sorted = true;
    const uint32_t *sets = m->samples.label_sets; /* NULL: no sample of this profile has any */
    for (size_t i = 0; i < n; i++) {
        if (translate_stack(m, s, m->samples.stacks[i], &pairs[i].stack, err) != 0 ||
            translate_label_set(m, s, sets != NULL ? sets[i] : 0, &pairs[i].label_set, err) != 0)
            return -1;
        pairs[i].value = m->samples.values[i];
        sorted = sorted && (i == 0 || compare_out_pairs(&pairs[i - 1], &pairs[i]) < 0);
    }
    if (!sorted)
        qsort(pairs, n, sizeof *pairs, compare_out_pairs);
    *first = m->n_run;
    for (size_t i = 0; i < n;) {
        uint32_t stack = pairs[i].stack, set = pairs[i].label_set;
        int64_t sum = 0;
        for (; i < n && pairs[i].stack == stack && pairs[i].label_set == set; i++)
            sum = (int64_t)((uint64_t)sum + (uint64_t)pairs[i].value);
        if (sum == 0)
            continue;
        m->run_stacks[m->n_run] = stack;
        m->run_sets[m->n_run] = set;
        m->run_values[m->n_run] = sum;
        m->n_run++;
    }
    *count = m->n_run - *first;
    return 0;
}

static bool is_duplicate(const merge_state *m, const candidate *c, size_t first, size_t count) {
    for (size_t k = 0; k < m->n_kept; k++) {
        const kept_profile *p = &m->kept[k];
        if (p->duration_ns != c->profile.duration_ns || p->period != c->profile.period ||
            p->count != count)
            continue;
        if (memcmp(&m->run_stacks[p->first], &m->run_stacks[first], count * 4) == 0 &&
            memcmp(&m->run_sets[p->first], &m->run_sets[first], count * 4) == 0 &&
            memcmp(&m->run_values[p->first], &m->run_values[first], count * 8) == 0)
            return true;
    }
    return false;
}

/* Merges the candidates [from, to), all of one timestamp. */
static int merge_run(merge_state *m, const series_ref *ref, size_t from, size_t to,
                     strata_error *err) {
    m->n_run = 0;
    m->n_kept = 0;
    for (size_t i = from; i < to; i++) {
        const candidate *c = &m->cands[i];
        size_t first = 0, count = 0;
        if (load_canonical(m, c, &first, &count, err) != 0)
            return -1;
        if (is_duplicate(m, c, first, count)) {
            m->stats->duplicates++;
            m->n_run = first;
            continue;
        }
        if (block_writer_add_profile_samples(m->writer, ref->labels, ref->type, c->profile.time_ns,
                                             c->profile.duration_ns, c->profile.period,
                                             &m->run_stacks[first], &m->run_sets[first],
                                             &m->run_values[first], count, err) != 0)
            return -1;
        m->stats->profiles_out++;
        m->stats->samples_out += count;
        if (STRATA_ARRAY_RESERVE_OR_OOM(m->kept, m->cap_kept, m->n_kept + 1, err) != 0)
            return -1;
        m->kept[m->n_kept++] =
            (kept_profile){c->profile.duration_ns, c->profile.period, first, count};
    }
    return 0;
}

static int merge_series(merge_state *m, const series_ref *refs, size_t n, strata_error *err) {
    if (collect_candidates(m, refs, n, err) != 0)
        return -1;
    for (size_t i = 0; i < m->n_cands;) {
        size_t j = i + 1;
        while (j < m->n_cands && m->cands[j].profile.time_ns == m->cands[i].profile.time_ns)
            j++;
        if (merge_run(m, &refs[0], i, j, err) != 0)
            return -1;
        i = j;
    }
    m->stats->series_out++;
    return 0;
}

static int merge_all_series(merge_state *m, strata_error *err) {
    uint64_t done = 0, step = m->series_total / 100 + 1;
    for (size_t i = 0; i < m->n_refs;) {
        size_t j = i + 1;
        while (j < m->n_refs && same_series(&m->refs[i], &m->refs[j]))
            j++;
        if (merge_series(m, &m->refs[i], j - i, err) != 0)
            return -1;
        i = j;
        done++;
        if (check_memory(m, 0, "while merging series", err) != 0)
            return -1;
        if (m->opts.progress != NULL && (done % step == 0 || done == m->series_total))
            m->opts.progress(m->opts.progress_ctx, m->stats, done, m->series_total);
    }
    return 0;
}

/* ---- output ------------------------------------------------------------------------------ */

static int compare_ulids(const void *a, const void *b) {
    return ulid_compare(a, b);
}

/* sources: the sorted, de-duplicated union of the sources' sources; parents: the sources. */
static int fill_lineage(merge_state *m, block_meta *meta, strata_error *err) {
    size_t total = 0;
    for (size_t i = 0; i < m->n_sources; i++)
        total += m->sources[i].meta.n_sources > 0 ? m->sources[i].meta.n_sources : 1;
    ulid *ids = malloc(total * sizeof *ids);
    block_meta_parent *parents = malloc(m->n_sources * sizeof *parents);
    int rc = -1;
    if (ids == NULL || parents == NULL) {
        strata_error_oom(err);
        goto out;
    }
    size_t n = 0;
    for (size_t i = 0; i < m->n_sources; i++) {
        const block_meta *sm = &m->sources[i].meta;
        if (sm->n_sources == 0)
            ids[n++] = sm->id;
        for (size_t j = 0; j < sm->n_sources; j++)
            ids[n++] = sm->sources[j];
        parents[i] = (block_meta_parent){sm->id, sm->min_time_ms, sm->max_time_ms};
    }
    qsort(ids, n, sizeof *ids, compare_ulids);
    size_t unique = 0;
    for (size_t i = 0; i < n; i++) {
        if (unique == 0 || ulid_compare(&ids[unique - 1], &ids[i]) != 0)
            ids[unique++] = ids[i];
    }
    rc = block_meta_set_sources(meta, ids, unique, err) != 0 ||
                 block_meta_set_parents(meta, parents, m->n_sources, err) != 0
             ? -1
             : 0;
out:
    free(ids);
    free(parents);
    return rc;
}

static int upload_block(merge_state *m, const block_meta *meta, strata_error *err) {
    strata_buffer json = STRATA_BUFFER_INIT;
    if (block_meta_encode(meta, &json, err) != 0) {
        strata_buffer_free(&json);
        return -1;
    }
    char text[ULID_STRING_LEN + 1], data_key[TENANT_MAX + 64], meta_key[TENANT_MAX + 64];
    ulid_format(&meta->id, text);
    snprintf(data_key, sizeof data_key, "%s/%s/%s", m->tenant, text, BLOCK_DATA_FILE);
    snprintf(meta_key, sizeof meta_key, "%s/%s/%s", m->tenant, text, BLOCK_META_FILE);
    int rc = -1;
    uint64_t size = meta->files[0].size_bytes;
    if (bucket_upload_file(m->store, data_key, m->spool_fd, size, err) != 0) {
        *m->bucket_error = true;
        strata_error_wrap(err, "uploading %s", data_key);
        goto out;
    }
    m->stats->bytes_written += size;
    if (bucket_upload(m->store, meta_key, json.data, json.len, err) != 0) {
        *m->bucket_error = true;
        strata_error_wrap(err, "uploading %s", meta_key);
        strata_error ignored;
        strata_error_clear(&ignored);
        (void)bucket_delete(m->store, data_key, &ignored); /* invisible anyway; tidy up */
        goto out;
    }
    m->stats->bytes_written += json.len;
    rc = 0;
out:
    strata_buffer_free(&json);
    return rc;
}

static int finish_block(merge_state *m, block_merge_result *out, strata_error *err) {
    if (block_writer_profile_count(m->writer) == 0)
        return strata_error_set(err, STRATA_FAILED_PRECONDITION,
                                "block merge: the sources hold no profiles; nothing to write");
    /* The samples are in the spool already; finishing orders and encodes the dictionaries, about
     * a third more than they hold. */
    if (check_memory(m, block_writer_memory_bytes(m->writer) / 3, "to encode the block", err) != 0)
        return -1;
    strata_buffer unused = STRATA_BUFFER_INIT; /* a spooled writer writes to its file */
    if (block_writer_finish(m->writer, &unused, &out->meta, err) != 0)
        return -1;
    if (fill_lineage(m, &out->meta, err) != 0 || upload_block(m, &out->meta, err) != 0)
        return -1;
    out->id = out->meta.id;
    return 0;
}

/* ---- entry point ------------------------------------------------------------------------- */

static int check_arguments(const char *tenant, const ulid *sources, size_t n, strata_error *err) {
    if (tenant == NULL || tenant[0] == '\0' || strchr(tenant, '/') != NULL ||
        strlen(tenant) > TENANT_MAX)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "block merge: invalid tenant");
    if (n == 0 || sources == NULL)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "block merge: no source blocks");
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < i; j++) {
            if (ulid_compare(&sources[i], &sources[j]) == 0) {
                char text[ULID_STRING_LEN + 1];
                ulid_format(&sources[i], text);
                return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                        "block merge: source %s is given twice", text);
            }
        }
    }
    return 0;
}

/* Reads every meta.json first, so a merge too big for the memory limit fails before reading
 * data; then opens the readers. */
static int open_all(merge_state *m, const ulid *ids, strata_error *err) {
    int level = 0;
    for (size_t i = 0; i < m->n_sources; i++) {
        merge_source *s = &m->sources[i];
        char text[ULID_STRING_LEN + 1];
        ulid_format(&ids[i], text);
        snprintf(s->name, sizeof s->name, "%s/%s", m->tenant, text);
        snprintf(s->key, sizeof s->key, "%s/%s", s->name, BLOCK_DATA_FILE);
        s->store = m->store;
        s->bucket_error = m->bucket_error;
        if (read_meta(m, s, err) != 0)
            return source_error(s, err);
        if (s->meta.compaction_level > level)
            level = s->meta.compaction_level;
    }
    if (m->opts.compaction_level <= 0)
        m->opts.compaction_level = level + 1;
    if (predict_memory(m, err) != 0)
        return -1;
    for (size_t i = 0; i < m->n_sources; i++) {
        if (open_source(m, &m->sources[i], err) != 0)
            return source_error(&m->sources[i], err);
    }
    return 0;
}

/* The output block's spool: an anonymous file in dir (NULL: $TMPDIR, else /tmp). O_TMPFILE makes
 * a file no crash can leave behind; where the filesystem lacks it, a named file is unlinked at
 * once. */
static int open_spool(const char *dir, int *fd, strata_error *err) {
    if (dir == NULL || dir[0] == '\0')
        dir = getenv("TMPDIR");
    if (dir == NULL || dir[0] == '\0')
        dir = "/tmp";
    *fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (*fd >= 0)
        return 0;
    char path[4096];
    if (snprintf(path, sizeof path, "%s/strata-merge-XXXXXX", dir) >= (int)sizeof path)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "block merge: spool directory path too long");
    *fd = mkostemp(path, O_CLOEXEC);
    if (*fd < 0)
        return strata_error_set(err, STRATA_UNAVAILABLE,
                                "block merge: cannot create a spool file in %s: %s", dir,
                                strerror(errno));
    unlink(path);
    return 0;
}

static int new_writer(merge_state *m, strata_error *err) {
    block_writer_options wo;
    block_writer_options_default(&wo);
    if (m->opts.page_size > 0)
        wo.page_size = m->opts.page_size;
    if (m->opts.zstd_level != 0)
        wo.zstd_level = m->opts.zstd_level;
    wo.tenant = m->tenant;
    wo.compaction_level = m->opts.compaction_level;
    if (open_spool(m->opts.spool_directory, &m->spool_fd, err) != 0)
        return -1;
    m->writer = block_writer_new_spooled(&wo, m->spool_fd, err);
    return m->writer == NULL ? -1 : 0;
}

static void free_state(merge_state *m) {
    for (size_t i = 0; m->sources != NULL && i < m->n_sources; i++)
        close_source(&m->sources[i]);
    free(m->sources);
    block_writer_free(m->writer);
    if (m->spool_fd >= 0)
        close(m->spool_fd);
    free(m->refs);
    free(m->fetched);
    free(m->cands);
    block_samples_free(&m->samples);
    free(m->chain);
    free(m->lines);
    free(m->run_stacks);
    free(m->run_sets);
    free(m->run_values);
    free(m->set_pairs);
    free(m->pairs);
    free(m->kept);
    free_dictionaries(m);
}

int block_merge(bucket *store, const char *tenant, const ulid *sources, size_t n,
                const block_merge_options *opts, block_merge_result *out, strata_error *err) {
    memset(out, 0, sizeof *out);
    block_meta_init(&out->meta);
    if (check_arguments(tenant, sources, n, err) != 0)
        return -1;
    merge_state m;
    memset(&m, 0, sizeof m);
    m.spool_fd = -1;
    m.store = store;
    m.tenant = tenant;
    m.stats = &out->stats;
    m.bucket_error = &out->bucket_error;
    if (opts != NULL)
        m.opts = *opts;
    else
        block_merge_options_default(&m.opts);
    if (m.opts.memory_limit == 0)
        m.opts.memory_limit = DEFAULT_MEMORY_LIMIT;
    if (m.opts.reader_cache_bytes == 0)
        m.opts.reader_cache_bytes = DEFAULT_READER_CACHE;
    out->stats.sources = n;
    int rc = -1;
    m.sources = calloc(n, sizeof *m.sources);
    if (m.sources == NULL) {
        strata_error_oom(err);
        goto out;
    }
    m.n_sources = n;
    for (size_t i = 0; i < n; i++)
        block_meta_init(&m.sources[i].meta);
    if (open_all(&m, sources, err) != 0 || assign_dictionaries(&m, err) != 0 ||
        new_writer(&m, err) != 0 || order_series(&m, err) != 0 || merge_all_series(&m, err) != 0)
        goto out;
    rc = finish_block(&m, out, err);
out:
    for (size_t i = 0; i < m.n_sources; i++) {
        if (m.sources[i].reader != NULL)
            out->stats.bytes_read += block_reader_bytes_fetched(m.sources[i].reader);
    }
    free_state(&m);
    return rc;
}
