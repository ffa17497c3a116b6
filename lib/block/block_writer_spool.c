/*
 * block_writer_spool.c - a spooled writer (block_writer_new_spooled): each profile's row, samples
 * and series_label_sets rows go into the spool file as the profile is committed, and its rollups
 * are summed one series at a time, so the writer never holds a block's samples (the compactor's
 * merge of blocks too large for memory). Profiles must come in the block's (series, time) order.
 * The spool's tables are ended at finish (block_writer_encode.c).
 */
#include <stdlib.h>
#include <string.h>

#include "block/block_writer_internal.h"

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

/* A spooled writer takes the profiles of one series after another, in the block's series order,
 * and each series' profiles in time order. */
int block_writer_spool_check_order(block_writer *w, uint32_t series, int64_t time_ns,
                                   strata_error *err) {
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
    if (w->series[series].n_profiles == 0 &&
        block_writer_dict_compare_series(&w->spool_series, &series, w) < 0)
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

/* Ends the series being written: its rollup rows and rollup_series entry, its series_label_sets
 * rows. */
int block_writer_spool_end_series(block_writer *w, strata_error *err) {
    if (w->spool_series == UINT32_MAX)
        return 0;
    uint32_t out = w->spool_series_out;
    ENSURE_OR_OOM(w->spool_rollup_series, w->cap_spool_rollup_series, (size_t)out + 1);
    if (w->options.write_rollups &&
        block_rollup_builder_end_series(w->spool_rollup, spool_rollup_row, w,
                                        &w->spool_rollup_series[out], err) != 0)
        return -1;
    if (w->n_spool_sets > 1)
        qsort(w->spool_sets, w->n_spool_sets, sizeof *w->spool_sets, block_writer_compare_u32);
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

/* block_writer_profile_commit for a spooled writer: the open profile's kept samples (pairs[0,
 * kept)) and its row go straight into the spool. */
int block_writer_spool_commit(block_writer *w, size_t kept, int64_t total, bool labelled,
                              strata_error *err) {
    w_profile *p = &w->current;
    if (p->series != w->spool_series) {
        if (block_writer_spool_end_series(w, err) != 0)
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
