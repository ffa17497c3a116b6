/*
 * block_dump.c - see block_dump.h.
 */
#include "block/block_dump.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "common/hash.h"

void block_dump_options_default(block_dump_options *options) {
    options->max_profiles = 100;
    options->top_stacks = 10;
    options->max_frames = 64;
}

static void dump_meta(const block_meta *m, FILE *out) {
    char id[ULID_STRING_LEN + 1];
    ulid_format(&m->id, id);
    fprintf(out, "block %s\n", id);
    fprintf(out, "  tenant: %s\n", m->tenant == NULL ? "" : m->tenant);
    fprintf(out, "  time: [%" PRId64 ", %" PRId64 ") ms\n", m->min_time_ms, m->max_time_ms);
    fprintf(out, "  stats: %" PRIu64 " samples, %" PRIu64 " series, %" PRIu64 " profiles\n",
            m->num_samples, m->num_series, m->num_profiles);
    fprintf(out, "  compaction: level %d, %zu sources, %zu parents\n", m->compaction_level,
            m->n_sources, m->n_parents);
    fprintf(out, "  format version: %d\n", m->format_version);
    for (size_t i = 0; i < m->n_files; i++)
        fprintf(out, "  file: %s (%" PRIu64 " bytes)\n", m->files[i].rel_path,
                m->files[i].size_bytes);
}

static void dump_tables(const block_reader *r, FILE *out) {
    fprintf(out, "data object format version: %u\n", block_reader_format_version(r));
    fprintf(out, "tables:\n");
    for (int id = 1; id <= BLOCK_TABLE_MAX; id++) {
        bool labels = id >= BLOCK_TABLE_LABEL_SETS && id <= BLOCK_TABLE_SERIES_LABEL_SETS;
        if (!block_reader_has_table(r, id))
            fprintf(out, "  %-17s     absent (%s)\n", block_table_name(id),
                    labels ? "no sample labels" : "optional");
        else
            fprintf(out, "  %-17s %10" PRIu64 " rows %12" PRIu64 " bytes\n", block_table_name(id),
                    block_reader_row_count(r, id), block_reader_table_stored_bytes(r, id));
    }
}

/* Per series: profiles covered, rollup rows and their sum (the series' merged total). */
static int dump_rollups(block_reader *r, size_t max, FILE *out, strata_error *err) {
    if (!block_reader_has_rollups(r)) {
        fprintf(out, "rollups: none (a block written before rollup tables)\n");
        return 0;
    }
    size_t n = block_reader_series_count(r);
    fprintf(out, "rollups: %zu series\n", n);
    block_samples s = {0};
    int rc = 0;
    for (uint32_t i = 0; rc == 0 && i < n && i < max; i++) {
        block_rollup_series info = {0};
        s.len = 0;
        rc = block_reader_series_rollup_info(r, i, &info, err);
        if (rc == 0 && info.profile_count < BLOCK_ROLLUP_MIN_PROFILES) {
            fprintf(out, "  series %u: %u profile, no rollup\n", i, info.profile_count);
            continue;
        }
        if (rc == 0)
            rc = block_reader_series_rollup(r, i, &s, err);
        uint64_t sum = 0;
        for (size_t k = 0; rc == 0 && k < s.len; k++)
            sum += (uint64_t)s.values[k];
        if (rc == 0)
            fprintf(out,
                    "  series %u: %u profiles, %u stacks from row %" PRIu64 ", total %" PRId64 "\n",
                    i, info.profile_count, info.stack_count, info.first_stack, (int64_t)sum);
    }
    if (rc == 0 && n > max)
        fprintf(out, "  ... %zu more\n", n - max);
    block_samples_free(&s);
    return rc;
}

static int dump_series(const block_reader *r, FILE *out, strata_error *err) {
    strata_buffer text = STRATA_BUFFER_INIT;
    fprintf(out, "series: %zu\n", block_reader_series_count(r));
    for (uint32_t s = 0; s < block_reader_series_count(r); s++) {
        strata_buffer_reset(&text);
        if (profile_type_format(block_reader_series_type(r, s), &text) != 0 ||
            strata_buffer_append_byte(&text, ' ') != 0 ||
            label_set_format(block_reader_series_labels(r, s), &text) != 0 ||
            strata_buffer_append_byte(&text, '\0') != 0) {
            strata_buffer_free(&text);
            return strata_error_oom(err);
        }
        fprintf(out, "  %u %s\n", s, (const char *)text.data);
    }
    strata_buffer_free(&text);
    return 0;
}

/* Appends `{a="1"}` for label set id and a NUL. */
static int format_label_set(block_reader *r, uint32_t id, strata_buffer *text, strata_error *err) {
    const label_set *set;
    strata_buffer_reset(text);
    if (block_reader_label_set(r, id, &set, err) != 0)
        return -1;
    if (label_set_format(set, text) != 0 || strata_buffer_append_byte(text, '\0') != 0)
        return strata_error_oom(err);
    return 0;
}

/* The sample label sets (version 2) and, per series, the sets its samples use. */
static int dump_label_sets(block_reader *r, size_t max, FILE *out, strata_error *err) {
    if (!block_reader_has_sample_labels(r)) {
        fprintf(out, "sample label sets: none\n");
        return 0;
    }
    size_t n = block_reader_label_set_count(r);
    fprintf(out, "sample label sets: %zu\n", n);
    strata_buffer text = STRATA_BUFFER_INIT;
    int rc = 0;
    for (uint32_t id = 1; rc == 0 && id <= n && id <= max; id++) {
        rc = format_label_set(r, id, &text, err);
        if (rc == 0)
            fprintf(out, "  %u %s\n", id, (const char *)text.data);
    }
    if (rc == 0 && n > max)
        fprintf(out, "  ... %zu more\n", n - max);
    for (uint32_t s = 0; rc == 0 && s < block_reader_series_count(r) && s < max; s++) {
        const uint32_t *ids;
        size_t k;
        rc = block_reader_series_label_sets(r, s, &ids, &k, err);
        if (rc != 0 || k == 0)
            continue;
        fprintf(out, "  series %u uses", s);
        for (size_t i = 0; i < k && i < max; i++)
            fprintf(out, " %u", ids[i]);
        fprintf(out, "%s\n", k > max ? " ..." : "");
    }
    strata_buffer_free(&text);
    return rc;
}

static void dump_profiles(const block_profile *p, size_t n, size_t max, FILE *out) {
    fprintf(out, "profiles: %zu\n", n);
    for (size_t i = 0; i < n && i < max; i++)
        fprintf(out,
                "  series %u time %" PRId64 " duration %" PRId64 " period %" PRId64
                " total %" PRId64 " samples %u\n",
                p[i].series_id, p[i].time_ns, p[i].duration_ns, p[i].period, p[i].total,
                p[i].sample_count);
    if (n > max)
        fprintf(out, "  ... %zu more\n", n - max);
}

typedef struct stack_total {
    uint32_t stack;
    uint32_t label_set;
    int64_t value;
} stack_total;

static int compare_totals(const void *a, const void *b) {
    const stack_total *x = a, *y = b;
    if (x->value != y->value)
        return x->value > y->value ? -1 : 1;
    if (x->stack != y->stack)
        return x->stack < y->stack ? -1 : 1;
    return x->label_set < y->label_set ? -1 : x->label_set > y->label_set;
}

static int print_stack(block_reader *r, uint32_t stack, size_t max_frames, FILE *out,
                       strata_error *err) {
    uint32_t *locs = malloc((max_frames + 1) * sizeof *locs);
    if (locs == NULL)
        return strata_error_oom(err);
    size_t depth;
    int rc = block_reader_stack(r, stack, locs, max_frames, &depth, err);
    for (size_t i = 0; rc == 0 && i < depth && i < max_frames; i++) {
        block_location loc;
        rc = block_reader_location(r, locs[i], &loc, err);
        for (uint32_t l = 0; rc == 0 && l < loc.n_lines; l++) {
            block_function f;
            rc = block_reader_function(r, loc.lines[l].function_id, &f, err);
            if (rc == 0)
                fprintf(out, "      %s%s\n", f.name, l + 1 < loc.n_lines ? " (inlined)" : "");
        }
        if (rc == 0 && loc.n_lines == 0)
            fprintf(out, "      0x%" PRIx64 "\n", loc.address);
    }
    if (rc == 0 && depth > max_frames)
        fprintf(out, "      ... %zu more frames\n", depth - max_frames);
    free(locs);
    return rc;
}

/* Sums samples per (stack, label set) over the profiles whose series has type t. */
static int sum_stacks(block_reader *r, const block_profile *p, size_t n, const profile_type *t,
                      strata_u64_map *sums, strata_error *err) {
    block_samples s = {0};
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        if (!profile_type_equal(block_reader_series_type(r, p[i].series_id), t))
            continue;
        s.len = 0;
        rc = block_reader_read_samples(r, &p[i], 1, &s, err);
        for (size_t k = 0; rc == 0 && k < s.len; k++) {
            uint64_t set = s.label_sets != NULL ? s.label_sets[k] : 0;
            uint64_t *v = strata_u64_map_upsert(sums, (set << 32 | s.stacks[k]) + 1, 0, NULL);
            if (v == NULL)
                rc = strata_error_oom(err);
            else
                *v = (uint64_t)*v + (uint64_t)s.values[k];
        }
    }
    block_samples_free(&s);
    return rc;
}

static int dump_top_for_type(block_reader *r, const block_profile *p, size_t n,
                             const profile_type *t, const block_dump_options *o, FILE *out,
                             strata_error *err) {
    strata_u64_map sums = {0};
    if (sum_stacks(r, p, n, t, &sums, err) != 0) {
        strata_u64_map_free(&sums);
        return -1;
    }
    stack_total *totals = malloc((sums.count + 1) * sizeof *totals);
    if (totals == NULL) {
        strata_u64_map_free(&sums);
        return strata_error_oom(err);
    }
    size_t k = 0;
    for (size_t i = 0; sums.slots != NULL && i <= sums.mask; i++) {
        if (sums.slots[i].key != 0) {
            totals[k].stack = (uint32_t)(sums.slots[i].key - 1);
            totals[k].label_set = (uint32_t)((sums.slots[i].key - 1) >> 32);
            int64_t v;
            memcpy(&v, &sums.slots[i].value, sizeof v);
            totals[k++].value = v;
        }
    }
    strata_u64_map_free(&sums);
    qsort(totals, k, sizeof *totals, compare_totals);
    strata_buffer text = STRATA_BUFFER_INIT;
    int rc = profile_type_format(t, &text) | strata_buffer_append_byte(&text, '\0');
    if (rc != 0)
        rc = strata_error_oom(err);
    else
        fprintf(out, "top stacks for %s (%zu distinct):\n", (const char *)text.data, k);
    for (size_t i = 0; rc == 0 && i < k && i < o->top_stacks; i++) {
        fprintf(out, "  #%zu value %" PRId64 " stack %u", i + 1, totals[i].value, totals[i].stack);
        if (totals[i].label_set != 0 &&
            (rc = format_label_set(r, totals[i].label_set, &text, err)) == 0)
            fprintf(out, " labels %s", (const char *)text.data);
        fprintf(out, "\n");
        if (rc == 0)
            rc = print_stack(r, totals[i].stack, o->max_frames, out, err);
    }
    strata_buffer_free(&text);
    free(totals);
    return rc;
}

static int dump_top_stacks(block_reader *r, const block_profile *p, size_t n,
                           const block_dump_options *o, FILE *out, strata_error *err) {
    size_t n_series = block_reader_series_count(r);
    for (uint32_t s = 0; s < n_series; s++) {
        const profile_type *t = block_reader_series_type(r, s);
        bool seen = false;
        for (uint32_t e = 0; e < s && !seen; e++)
            seen = profile_type_equal(block_reader_series_type(r, e), t);
        if (!seen && dump_top_for_type(r, p, n, t, o, out, err) != 0)
            return -1;
    }
    return 0;
}

int block_dump(block_reader *r, const block_meta *meta, FILE *out,
               const block_dump_options *options, strata_error *err) {
    block_dump_options o;
    block_dump_options_default(&o);
    if (options != NULL)
        o = *options;
    if (meta != NULL)
        dump_meta(meta, out);
    dump_tables(r, out);
    if (dump_series(r, out, err) != 0)
        return -1;
    block_profile *profiles = NULL;
    size_t n = 0;
    int rc = block_reader_profiles(r, NULL, 0, INT64_MIN, INT64_MAX, &profiles, &n, err);
    if (rc == 0) {
        dump_profiles(profiles, n, o.max_profiles, out);
        rc = dump_label_sets(r, o.max_profiles, out, err);
    }
    if (rc == 0) {
        rc = dump_rollups(r, o.max_profiles, out, err);
    }
    if (rc == 0) {
        if (o.top_stacks > 0)
            rc = dump_top_stacks(r, profiles, n, &o, out, err);
    }
    free(profiles);
    return rc;
}
