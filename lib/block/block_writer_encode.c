/*
 * block_writer_encode.c - block_writer_finish: the block's orders (series by type and labels,
 * label and type strings first, profiles by series and time, the used label sets), then every
 * table written as zstd-compressed column pages through block_encoder.h, in format version 1, or 2
 * when samples carry label sets. A detached block first renumbers its locations by address, so
 * the address columns delta-encode small. A spooled writer's sample tables are already in its
 * spool file; its finish ends them and writes the rest after them.
 */
#include <stdlib.h>
#include <string.h>

#include "block/block_writer_internal.h"

/* ---- tables ------------------------------------------------------------------------------ */

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
    int n_cols = e->version >= BLOCK_FORMAT_VERSION_LABELS || schema->optional_tail
                     ? schema->n_columns
                     : schema->n_required;
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

static void enc_end_group(encoder *e) {
    block_table_encoder_end_group(&e->table);
}

static int enc_end_table(encoder *e) {
    return block_table_encoder_end(&e->table, e->table.n_cols, e->err);
}

/* ---- orders ------------------------------------------------------------------------------ */

static void block_order_free(block_order *o) {
    free(o->set_new);
    free(o->series_order);
    free(o->series_new);
    free(o->string_new);
    free(o->string_order);
    free(o->profile_order);
}

static int compare_strings_ctx(const void *a, const void *b, void *ctx) {
    return block_writer_dict_compare_strings(ctx, *(const uint32_t *)a, *(const uint32_t *)b);
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
    qsort_r(o->series_order, o->n_series, sizeof *o->series_order, block_writer_dict_compare_series,
            w);
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
 * sets, first (sorted, so postings sort by string), then the mappings' files and build ids, then
 * the rest in first-seen order. "" stays id 0: it sorts first and is always included. A reader
 * decodes strings a page at a time, and reads every mapping with its strings when it first needs
 * a symbol: next to the labels (which it reads at open), they cost no page of their own, where
 * spread among the function names they had each fresh block's reader decode most of its string
 * pages, though a merge needs only the names no block before it showed. */
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
    for (size_t i = 0; i < w->n_mappings; i++) {
        uint32_t ids[2] = {w->mappings[i].file, w->mappings[i].build_id};
        for (int j = 0; j < 2; j++) {
            if (o->string_new[ids[j]] == UINT32_MAX) {
                o->string_new[ids[j]] = (uint32_t)k;
                o->string_order[k++] = ids[j];
            }
        }
    }
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

/* ---- symbols ----------------------------------------------------------------------------- */

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

/* Tables stack_origins, location_origins, function_origins and dictionary (docs/block-format.md
 * 6.12), for a writer with a dictionary id: a detached block maps its stacks to the dictionary's,
 * a dictionary writer finishing itself holds the dictionary's own stacks (origin = stack id). */
static int write_dictionary_tables(encoder *e) {
    block_writer *w = e->w;
    if (!w->has_dictionary || w->n_stacks == 0)
        return 0;
    if (write_origin_table(e, BLOCK_TABLE_STACK_ORIGINS, w->stack_origins, w->n_stacks) != 0 ||
        write_origin_table(e, BLOCK_TABLE_LOCATION_ORIGINS, w->location_origins, w->n_locations) !=
            0 ||
        write_origin_table(e, BLOCK_TABLE_FUNCTION_ORIGINS, w->function_origins, w->n_functions) !=
            0)
        return -1;
    enc_begin_table(e, BLOCK_TABLE_DICTIONARY);
    enc_put_bytes(e, BLOCK_COL_DICTIONARY_ID, (const char *)w->dictionary.bytes,
                  sizeof w->dictionary.bytes);
    enc_put(e, BLOCK_COL_DICTIONARY_STACK_COUNT,
            w->stack_origins != NULL ? w->dictionary_stacks : w->n_stacks);
    enc_put(e, BLOCK_COL_DICTIONARY_LOCATION_COUNT,
            w->location_origins != NULL ? w->dictionary_locations : w->n_locations);
    enc_put(e, BLOCK_COL_DICTIONARY_FUNCTION_COUNT,
            w->function_origins != NULL ? w->dictionary_functions : w->n_functions);
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
        if (i == w->first_new_function) /* what is new to the dictionary in groups of its own */
            enc_end_group(e);
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
        if (i == w->first_new_location)
            enc_end_group(e);
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
        if (i == w->first_new_line)
            enc_end_group(e);
        enc_put(e, BLOCK_COL_LINES_FUNCTION, w->lines[i].function);
        enc_put(e, BLOCK_COL_LINES_LINE, (uint64_t)w->lines[i].line);
        enc_end_row(e);
    }
    if (enc_end_table(e) != 0)
        return -1;
    enc_begin_table(e, BLOCK_TABLE_STACKS);
    for (size_t i = 0; i < w->n_stacks; i++) {
        if (i == w->first_new_stack)
            enc_end_group(e);
        enc_put(e, BLOCK_COL_STACKS_PARENT_DELTA, (uint64_t)(i + 1) - w->stacks[i].parent);
        enc_put(e, BLOCK_COL_STACKS_LOCATION, w->stacks[i].location);
        enc_end_row(e);
    }
    if (enc_end_table(e) != 0)
        return -1;
    return write_dictionary_tables(e);
}

/* ---- series, label sets, profiles and rollups -------------------------------------------- */

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

int block_writer_compare_u32(const void *a, const void *b) {
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
        qsort(sets, n, sizeof *sets, block_writer_compare_u32);
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

/* ---- finish ------------------------------------------------------------------------------ */

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

/* Puts the functions of order (new id -> old id; new_function is its inverse) new to the
 * dictionary since the previous cut after the others, each part in its order (for the reason
 * locations go so: a merge decodes only the groups holding functions no earlier block showed it),
 * and keeps both arrays each other's inverse. Returns the first new one's id (0 for the first
 * cut). */
static uint32_t order_new_functions_last(const block_writer *w, uint32_t *order,
                                         uint32_t *new_function) {
    size_t nf = w->n_functions;
    uint32_t cut = w->functions_at_last_cut, k = 0, first_new = 0;
    if (w->function_origins == NULL || cut == 0)
        return 0;
    for (int part = 0; part < 2; part++) { /* a stable partition: old (origin <= cut), then new */
        if (part == 1)
            first_new = k;
        for (size_t i = 0; i < nf; i++)
            if ((w->function_origins[order[i]] > cut) == (part == 1))
                new_function[order[i]] = k++;
    }
    for (uint32_t old = 0; old < nf; old++)
        order[new_function[old]] = old;
    return first_new;
}

/* Where the rows new since the previous cut start in a renumbered detached block (see
 * first_new_function in block_writer_internal.h), past the functions and locations, which the
 * renumbering found. */
static void find_first_new_rows(block_writer *w) {
    uint32_t k = w->first_new_location;
    w->first_new_line = 0;
    if (k > 0)
        w->first_new_line = k < w->n_locations ? w->locations[k].first_line : (uint32_t)w->n_lines;
    w->first_new_stack = 0;
    if (w->stack_origins != NULL && w->stacks_at_last_cut > 0) {
        uint32_t s = 0; /* stacks keep the dictionary's order: the new ones are last */
        while (s < w->n_stacks && w->stack_origins[s] <= w->stacks_at_last_cut)
            s++;
        w->first_new_stack = s;
    }
}

/* Renumbers a detached block's locations by (mapping, address) and its functions by first use in
 * that order, so that the DELTA-encoded address and function columns hold small steps (fresh
 * agent blocks about 16% smaller than in first-seen order; block-format.md 6.4). The locations
 * new to the dictionary since the previous cut come after the others (each part in that order):
 * a querier merging consecutive fresh blocks translates, of each, only what the blocks before it
 * did not hold, and reads symbols a row group at a time, so what is new must share few groups
 * (spread by address over every group, it had each reader decode all of its symbols). A detached
 * writer only finishes, so nothing else holds these ids; it runs here, in the ingester's flush
 * thread, not in block_writer_detach under the ingester's lock. Out of memory, the order is kept:
 * the block is the same, only larger. The functions new since the previous cut go last likewise.
 */
static void renumber_symbols_by_address(block_writer *w) {
    size_t n = w->n_locations, nf = w->n_functions;
    strata_sort_record *keys = malloc(2 * n * sizeof *keys + 1);
    uint32_t *new_location = malloc(n * sizeof *new_location + 1);
    uint32_t *new_function = malloc(nf * sizeof *new_function + 1);
    uint32_t *function_order = malloc(nf * sizeof *function_order + 1); /* new id -> old */
    uint32_t *function_origins = malloc(nf * sizeof *function_origins + 1);
    w_location *locations = malloc(n * sizeof *locations + 1);
    w_line *lines = malloc(w->n_lines * sizeof *lines + 1);
    w_function *functions = malloc(nf * sizeof *functions + 1);
    if (keys == NULL || new_location == NULL || new_function == NULL || function_order == NULL ||
        locations == NULL || lines == NULL || functions == NULL || function_origins == NULL) {
        free(function_origins);
        free(keys);
        free(new_location);
        free(new_function);
        free(function_order);
        free(locations);
        free(lines);
        free(functions);
        return;
    }
    /* by (new, mapping, address, id): stable sorts by the address, by the mapping, then by
     * whether the location is new since the previous cut */
    for (size_t i = 0; i < n; i++)
        keys[i] = (strata_sort_record){w->locations[i].address, i};
    strata_radix_sort(keys, keys + n, n);
    for (size_t k = 0; k < n; k++)
        keys[k].key = w->locations[keys[k].payload].mapping;
    strata_radix_sort(keys, keys + n, n);
    if (w->location_origins != NULL && w->locations_at_last_cut > 0) {
        for (size_t k = 0; k < n; k++)
            keys[k].key = w->location_origins[keys[k].payload] > w->locations_at_last_cut;
        strata_radix_sort(keys, keys + n, n);
        uint32_t k = 0;
        while (k < n && keys[k].key == 0)
            k++;
        w->first_new_location = k;
    }
    memset(new_function, 0xff, nf * sizeof *new_function);
    uint32_t n_functions = 0;
    for (size_t k = 0; k < n; k++) {
        const w_location *l = &w->locations[keys[k].payload];
        for (uint32_t j = 0; j < l->line_count; j++) {
            uint32_t f = w->lines[l->first_line + j].function;
            if (new_function[f] == UINT32_MAX) {
                new_function[f] = n_functions;
                function_order[n_functions++] = f;
            }
        }
    }
    for (uint32_t i = 0; i < nf; i++) /* functions no line names keep their relative order */
        if (new_function[i] == UINT32_MAX)
            function_order[n_functions++] = i;
    w->first_new_function = order_new_functions_last(w, function_order, new_function);
    for (size_t k = 0; k < nf; k++) {
        functions[k] = w->functions[function_order[k]];
        if (w->function_origins != NULL)
            function_origins[k] = w->function_origins[function_order[k]];
    }
    size_t n_lines = 0;
    for (size_t k = 0; k < n; k++) {
        w_location l = w->locations[keys[k].payload];
        new_location[keys[k].payload] = (uint32_t)k;
        for (uint32_t j = 0; j < l.line_count; j++) {
            w_line line = w->lines[l.first_line + j];
            line.function = new_function[line.function];
            lines[n_lines + j] = line;
        }
        l.first_line = (uint32_t)n_lines;
        n_lines += l.line_count;
        locations[k] = l;
    }
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
    if (w->function_origins != NULL) {
        free(w->function_origins);
        w->function_origins = function_origins;
        function_origins = NULL;
    }
    free(function_origins);
    w->locations = locations;
    w->cap_locations = n;
    w->lines = lines;
    w->cap_lines = w->n_lines;
    w->functions = functions;
    w->cap_functions = nf;
    find_first_new_rows(w);
    free(keys);
    free(new_location);
    free(new_function);
    free(function_order);
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
 * order (block_writer_spool_check_order), so the ids the spooled rows carry are the ones
 * order_series gives. */
static int finish_spooled(block_writer *w, block_meta *meta, strata_error *err) {
    block_order o;
    memset(&o, 0, sizeof o);
    encoder e;
    memset(&e, 0, sizeof e);
    int rc = -1;
    if (block_writer_spool_end_series(w, err) != 0 || order_series(w, &o, err) != 0 ||
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
        rc = block_writer_fill_meta(w, &o, block_object_size(w->spool), meta, err);
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
        return block_writer_check_writable(w, err);
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
        rc = block_writer_fill_meta(w, &o, data->len - base, meta, err);
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
