/*
 * calltree_json.c - JSON reports for the web UI and curl: Pyroscope's flamebearer and a
 * per-function table; the flamebearer's levels also as Pyroscope's protobuf FlameGraph (its query
 * API). See calltree.h for the exact shapes.
 *
 * Flamebearer layout: a node's x is its parent's x plus the totals of the siblings before it (all
 * of them, trimmed or not), computed per side in one forward pass over node ids (parents come
 * first). Kept nodes are bucketed by depth in depth-first pre-order, which is left-to-right within
 * a level.
 */
#include "calltree/calltree_internal.h"
#include "common/protobuf_writer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct flamebearer {
    const calltree *t;
    calltree_selection sel;
    int64_t *weight;    /* owned only for diff trees (B + A); else t->total */
    int64_t *x;         /* B side */
    int64_t *x_base;    /* A side */
    uint32_t *depth;    /* node -> depth */
    uint32_t *level_of; /* kept nodes grouped by depth, pre-order within a level */
    uint32_t *level_offset;
    uint32_t n_levels;
    uint32_t *name_index; /* tree string id -> names index; 0 = unassigned */
    uint32_t *names;      /* names index -> tree string id (index 0 is "total") */
    size_t n_names;
} flamebearer;

static void flamebearer_free(flamebearer *fb) {
    if (fb->weight != fb->t->total)
        free(fb->weight);
    free(fb->x);
    free(fb->x_base);
    free(fb->depth);
    free(fb->level_of);
    free(fb->level_offset);
    free(fb->name_index);
    free(fb->names);
    calltree_selection_free(&fb->sel);
}

static int compute_weights(flamebearer *fb) {
    const calltree *t = fb->t;
    if (!t->diff) {
        fb->weight = t->total;
        return 0;
    }
    fb->weight = malloc(t->n_nodes * sizeof *fb->weight);
    if (fb->weight == NULL)
        return -1;
    for (size_t i = 0; i < t->n_nodes; i++)
        fb->weight[i] = t->total[i] + t->total_base[i];
    return 0;
}

static void compute_positions(const calltree *t, const int64_t *total, int64_t *x) {
    x[CALLTREE_ROOT] = 0;
    for (size_t v = 0; v < t->n_nodes; v++) {
        int64_t run = x[v];
        for (uint32_t i = t->child_offset[v]; i < t->child_offset[v + 1]; i++) {
            x[t->children[i]] = run;
            run += total[t->children[i]];
        }
    }
}

/* Buckets the kept nodes by depth. */
static int group_levels(flamebearer *fb) {
    const calltree *t = fb->t;
    fb->depth[CALLTREE_ROOT] = 0;
    uint32_t max_depth = 0;
    for (size_t e = 1; e < fb->sel.n_order; e++) {
        uint32_t v = fb->sel.order[e];
        fb->depth[v] = fb->depth[t->parent[v]] + 1;
        if (fb->depth[v] > max_depth)
            max_depth = fb->depth[v];
    }
    fb->n_levels = max_depth + 1;
    fb->level_offset = calloc((size_t)fb->n_levels + 1, sizeof *fb->level_offset);
    fb->level_of = malloc(fb->sel.n_order * sizeof *fb->level_of);
    uint32_t *fill = malloc((size_t)fb->n_levels * sizeof *fill);
    if (fb->level_offset == NULL || fb->level_of == NULL || fill == NULL) {
        free(fill);
        return -1;
    }
    for (size_t e = 0; e < fb->sel.n_order; e++)
        fb->level_offset[fb->depth[fb->sel.order[e]] + 1]++;
    for (uint32_t d = 0; d < fb->n_levels; d++)
        fb->level_offset[d + 1] += fb->level_offset[d];
    memcpy(fill, fb->level_offset, (size_t)fb->n_levels * sizeof *fill);
    for (size_t e = 0; e < fb->sel.n_order; e++) {
        uint32_t v = fb->sel.order[e];
        fb->level_of[fill[fb->depth[v]]++] = v;
    }
    free(fill);
    return 0;
}

/* Names in first-use (pre-order) order; index 0 is the root's "total". */
static int assign_names(flamebearer *fb) {
    const calltree *t = fb->t;
    fb->name_index = calloc(t->strings.count ? t->strings.count : 1, sizeof *fb->name_index);
    fb->names = malloc(fb->sel.n_order * sizeof *fb->names);
    if (fb->name_index == NULL || fb->names == NULL)
        return -1;
    fb->n_names = 1;
    for (size_t e = 1; e < fb->sel.n_order; e++) {
        uint32_t sid = t->frame_label[t->frame[fb->sel.order[e]]];
        if (fb->name_index[sid] == 0) {
            fb->name_index[sid] = (uint32_t)fb->n_names;
            fb->names[fb->n_names++] = sid;
        }
    }
    return 0;
}

static int flamebearer_build(flamebearer *fb, const calltree_report_options *opts,
                             strata_error *err) {
    const calltree *t = fb->t;
    if (compute_weights(fb) != 0)
        return strata_error_oom(err);
    if (calltree_select(t, fb->weight, opts->node_trim_threshold, opts->max_nodes, &fb->sel, err) !=
        0)
        return -1;
    fb->x = malloc(t->n_nodes * sizeof *fb->x);
    fb->x_base = malloc(t->n_nodes * sizeof *fb->x_base);
    fb->depth = malloc(t->n_nodes * sizeof *fb->depth);
    if (fb->x == NULL || fb->x_base == NULL || fb->depth == NULL || group_levels(fb) != 0 ||
        assign_names(fb) != 0)
        return strata_error_oom(err);
    compute_positions(t, t->total, fb->x);
    if (t->total_base != NULL) /* a diff tree's (finalize makes both sides) */
        compute_positions(t, t->total_base, fb->x_base);
    return 0;
}

static uint32_t node_name_index(const flamebearer *fb, uint32_t v) {
    if (v == CALLTREE_ROOT)
        return 0;
    return fb->name_index[fb->t->frame_label[fb->t->frame[v]]];
}

/* The values of level d, left to right: 4 per node ([x delta, total, self, name index]), 7 for a
 * diff tree (side A's three first); into vals (room for 7 per node of the level). Returns how many;
 * raises *max_self to the level's largest self. */
static size_t level_values(const flamebearer *fb, uint32_t d, int64_t *vals, int64_t *max_self) {
    const calltree *t = fb->t;
    int64_t end = 0, end_base = 0;
    size_t n = 0;
    for (uint32_t i = fb->level_offset[d]; i < fb->level_offset[d + 1]; i++) {
        uint32_t v = fb->level_of[i];
        if (t->diff) {
            vals[n++] = fb->x_base[v] - end_base;
            vals[n++] = t->total_base[v];
            vals[n++] = t->self_base[v];
            end_base = fb->x_base[v] + t->total_base[v];
            if (t->self_base[v] > *max_self)
                *max_self = t->self_base[v];
        }
        vals[n++] = fb->x[v] - end;
        vals[n++] = t->total[v];
        vals[n++] = t->self[v];
        vals[n++] = node_name_index(fb, v);
        end = fb->x[v] + t->total[v];
        if (t->self[v] > *max_self)
            *max_self = t->self[v];
    }
    return n;
}

/* The most nodes any level holds. */
static size_t widest_level(const flamebearer *fb) {
    size_t widest = 1;
    for (uint32_t d = 0; d < fb->n_levels; d++)
        if (fb->level_offset[d + 1] - fb->level_offset[d] > widest)
            widest = fb->level_offset[d + 1] - fb->level_offset[d];
    return widest;
}

static void write_level(json_writer *w, const int64_t *vals, size_t n) {
    json_begin_array(w);
    for (size_t i = 0; i < n; i++)
        json_int(w, vals[i]);
    json_end_array(w);
}

static void write_flamebearer(const flamebearer *fb, const calltree_report_options *opts,
                              int64_t *vals, json_writer *w) {
    const calltree *t = fb->t;
    json_begin_object(w);
    json_key(w, "version");
    json_int(w, 1);
    json_key(w, "flamebearer");
    json_begin_object(w);
    json_key(w, "names");
    json_begin_array(w);
    json_string(w, "total");
    for (size_t i = 1; i < fb->n_names; i++)
        json_string_len(w, calltree_string(t, fb->names[i]), t->strings.lengths[fb->names[i]]);
    json_end_array(w);
    json_key(w, "levels");
    json_begin_array(w);
    int64_t max_self = 0;
    for (uint32_t d = 0; d < fb->n_levels; d++)
        write_level(w, vals, level_values(fb, d, vals, &max_self));
    json_end_array(w);
    json_key(w, "numTicks");
    json_int(w, t->total[CALLTREE_ROOT] + (t->diff ? t->total_base[CALLTREE_ROOT] : 0));
    json_key(w, "maxSelf");
    json_int(w, max_self);
    json_end_object(w);
    json_key(w, "metadata");
    json_begin_object(w);
    json_key(w, "format");
    json_string(w, t->diff ? "double" : "single");
    json_key(w, "units");
    json_string(w, opts->unit != NULL ? opts->unit : "");
    json_key(w, "name");
    json_string(w, opts->name != NULL ? opts->name : "");
    json_end_object(w);
    if (t->diff) {
        json_key(w, "leftTicks");
        json_int(w, t->total_base[CALLTREE_ROOT]);
        json_key(w, "rightTicks");
        json_int(w, t->total[CALLTREE_ROOT]);
    }
    json_key(w, "trimmed");
    json_int(w, fb->sel.trimmed);
    json_end_object(w);
}

/* Lays out t for opts into fb, with *vals room for the widest level's values; on failure fb
 * still needs flamebearer_free. */
static int flamebearer_layout(const calltree *t, const calltree_report_options *opts,
                              flamebearer *fb, int64_t **vals, strata_error *err) {
    memset(fb, 0, sizeof *fb);
    fb->t = t;
    *vals = NULL;
    if (calltree_require_finalized(t, err) != 0 || calltree_validate_options(opts, err) != 0 ||
        flamebearer_build(fb, opts, err) != 0)
        return -1;
    if ((*vals = malloc(widest_level(fb) * 7 * sizeof **vals)) == NULL)
        return strata_error_oom(err);
    return 0;
}

int calltree_write_flamebearer_json(const calltree *t, const calltree_report_options *opts,
                                    json_writer *w, strata_error *err) {
    flamebearer fb;
    int64_t *vals;
    int rc = flamebearer_layout(t, opts, &fb, &vals, err);
    if (rc == 0)
        write_flamebearer(&fb, opts, vals, w);
    free(vals);
    flamebearer_free(&fb);
    return rc;
}

/* ---- Pyroscope's querier.v1.FlameGraph / FlameGraphDiff, protobuf ---- */

/* Level{repeated int64 values = 1} (packed) as field 2 of the flame graph. */
static int put_level(strata_buffer *out, const int64_t *vals, size_t n) {
    size_t packed = 0;
    for (size_t i = 0; i < n; i++)
        packed += strata_pb_varint_size((uint64_t)vals[i]);
    size_t level = n > 0 ? strata_pb_len_field_size(1, packed) : 0;
    if (strata_buffer_append_uvarint(out, 2 << 3 | 2) != 0 ||
        strata_buffer_append_uvarint(out, level) != 0)
        return -1;
    if (n == 0)
        return 0;
    if (strata_buffer_append_uvarint(out, 1 << 3 | 2) != 0 ||
        strata_buffer_append_uvarint(out, packed) != 0)
        return -1;
    for (size_t i = 0; i < n; i++)
        if (strata_buffer_append_uvarint(out, (uint64_t)vals[i]) != 0)
            return -1;
    return 0;
}

static int put_flamegraph(const flamebearer *fb, int64_t *vals, strata_buffer *out) {
    const calltree *t = fb->t;
    if (strata_pb_append_len_field(out, 1, "total", 5) != 0)
        return -1;
    for (size_t i = 1; i < fb->n_names; i++)
        if (strata_pb_append_len_field(out, 1, calltree_string(t, fb->names[i]),
                                       t->strings.lengths[fb->names[i]]) != 0)
            return -1;
    int64_t max_self = 0;
    for (uint32_t d = 0; d < fb->n_levels; d++)
        if (put_level(out, vals, level_values(fb, d, vals, &max_self)) != 0)
            return -1;
    int64_t total = t->total[CALLTREE_ROOT] + (t->diff ? t->total_base[CALLTREE_ROOT] : 0);
    if (strata_pb_append_varint_field(out, 3, (uint64_t)total) != 0 ||
        strata_pb_append_varint_field(out, 4, (uint64_t)max_self) != 0)
        return -1;
    if (t->diff &&
        (strata_pb_append_varint_field(out, 5, (uint64_t)t->total_base[CALLTREE_ROOT]) != 0 ||
         strata_pb_append_varint_field(out, 6, (uint64_t)t->total[CALLTREE_ROOT]) != 0))
        return -1;
    return 0;
}

int calltree_encode_pyroscope_flamegraph(const calltree *t, const calltree_report_options *opts,
                                         strata_buffer *out, strata_error *err) {
    flamebearer fb;
    int64_t *vals;
    int rc = flamebearer_layout(t, opts, &fb, &vals, err);
    size_t len = out->len;
    if (rc == 0 && put_flamegraph(&fb, vals, out) != 0) {
        out->len = len;
        rc = strata_error_oom(err);
    }
    free(vals);
    flamebearer_free(&fb);
    return rc;
}

static void write_row(const calltree *t, const calltree_frame_stats *r, json_writer *w) {
    json_begin_object(w);
    json_key(w, "name");
    json_string(w, calltree_frame_string(t, r->frame, FRAME_NAME));
    json_key(w, "system_name");
    json_string(w, calltree_frame_string(t, r->frame, FRAME_SYSTEM_NAME));
    json_key(w, "filename");
    json_string(w, calltree_frame_string(t, r->frame, FRAME_FILENAME));
    json_key(w, "mapping_file");
    json_string(w, calltree_frame_string(t, r->frame, FRAME_MAPPING_FILE));
    json_key(w, "label");
    json_string(w, calltree_string(t, t->frame_label[r->frame]));
    if (t->group_by & CALLTREE_GROUP_LOCATION) {
        const calltree_frame_location *loc = calltree_frame_loc(t, r->frame);
        char hex[24];
        snprintf(hex, sizeof hex, "0x%llx", (unsigned long long)loc->address);
        json_key(w, "address");
        json_string(w, hex);
        json_key(w, "line");
        json_int(w, loc->line);
    }
    json_key(w, "flat");
    json_int(w, r->flat);
    json_key(w, "cumulative");
    json_int(w, r->cumulative);
    if (t->diff) {
        json_key(w, "flat_base");
        json_int(w, r->flat_base);
        json_key(w, "cumulative_base");
        json_int(w, r->cumulative_base);
        json_key(w, "flat_diff");
        json_int(w, r->flat - r->flat_base);
        json_key(w, "cumulative_diff");
        json_int(w, r->cumulative - r->cumulative_base);
    }
    json_end_object(w);
}

static int64_t abs_change(const calltree_frame_stats *r) {
    int64_t d = r->cumulative - r->cumulative_base;
    return d < 0 ? -d : d;
}

static int compare_change_desc(const void *a, const void *b) {
    const calltree_frame_stats *x = a, *y = b;
    int64_t dx = abs_change(x), dy = abs_change(y);
    if (dx != dy)
        return dx > dy ? -1 : 1;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

/* A diff table cut short keeps the largest changes (|cumulative B - A|), so frames that were
 * removed (B is 0) are not the first to go: rows are sorted by that change. */
static void sort_by_change(calltree_frame_stats *rows, size_t n) {
    qsort(rows, n, sizeof *rows, compare_change_desc);
}

int calltree_write_table_json(const calltree *t, const calltree_report_options *opts,
                              json_writer *w, strata_error *err) {
    calltree_frame_stats *rows;
    size_t n;
    if (calltree_frame_stats_compute(t, &rows, &n, err) != 0)
        return -1;
    json_begin_object(w);
    json_key(w, "unit");
    json_string(w, opts->unit != NULL ? opts->unit : "");
    json_key(w, "total");
    json_int(w, t->total[CALLTREE_ROOT]);
    json_key(w, "rows_total");
    json_uint(w, n);
    size_t shown = opts->max_nodes > 0 && n > opts->max_nodes ? opts->max_nodes : n;
    if (shown < n && t->diff)
        sort_by_change(rows, n);
    json_key(w, "rows");
    json_begin_array(w);
    for (size_t i = 0; i < shown; i++)
        write_row(t, &rows[i], w);
    json_end_array(w);
    json_end_object(w);
    free(rows);
    return 0;
}
