/*
 * calltree_report.c - parca.query.v1alpha1.QueryResponse from a finalized call tree: FLAMEGRAPH
 * (table form), TOP and PPROF. See calltree.h for what each report contains.
 *
 * Messages are assembled as protobuf-c structs in a handful of arrays sized up front (one per
 * message type, never one allocation per node) and packed once into the caller's buffer.
 * Strings point into the tree's intern arena, which outlives the call.
 */
#include "arrow/arrow_ipc.h"
#include "calltree/calltree_internal.h"
#include "common/array.h"
#include "pprof/pprof.h"

#include <stdlib.h>
#include <stdio.h>
#include <string.h>

typedef Parca__Query__V1alpha1__QueryResponse QueryResponse;
typedef Parca__Query__V1alpha1__Flamegraph Flamegraph;
typedef Parca__Query__V1alpha1__FlamegraphRootNode FlamegraphRootNode;
typedef Parca__Query__V1alpha1__FlamegraphNode FlamegraphNode;
typedef Parca__Query__V1alpha1__FlamegraphNodeMeta FlamegraphNodeMeta;
typedef Parca__Query__V1alpha1__Top Top;
typedef Parca__Query__V1alpha1__TopNode TopNode;
typedef Parca__Query__V1alpha1__TopNodeMeta TopNodeMeta;
typedef Parca__Metastore__V1alpha1__Function PbFunction;
typedef Parca__Metastore__V1alpha1__Mapping PbMapping;
typedef Parca__Metastore__V1alpha1__Location PbLocation;
typedef Parca__Metastore__V1alpha1__Line PbLine;

static char *mutable_str(const char *s) {
    return (char *)s; /* protobuf-c's string fields are char * but only read when packing */
}

static size_t str_len(const calltree *t, uint32_t sid) {
    return t->strings.lengths[sid];
}

/* Packs resp at the end of out. */
static int pack_response(const QueryResponse *resp, strata_buffer *out, strata_error *err) {
    size_t size = protobuf_c_message_get_packed_size(&resp->base);
    if (strata_buffer_reserve(out, size) != 0)
        return strata_error_oom(err);
    size_t written = protobuf_c_message_pack(&resp->base, out->data + out->len);
    if (written != size)
        return strata_error_set(err, STRATA_INTERNAL, "call tree: packed %zu bytes, expected %zu",
                                written, size);
    out->len += size;
    return 0;
}

/* ---- symbol tables shared by the flame graph and top ---- */

typedef struct symbol_tables {
    uint32_t *str_index; /* tree string id -> string_table index; 0 = unassigned (or "") */
    char **strings;
    size_t n_strings;
    uint32_t *frame_index; /* frame -> 1-based function / location index; 0 = not yet emitted */
    PbFunction *functions;
    PbFunction **function_ptrs;
    PbLocation *locations;
    PbLocation **location_ptrs;
    PbLine *lines;
    PbLine **line_ptrs;
    size_t n_functions;
    PbMapping *mappings;
    PbMapping **mapping_ptrs;
    size_t n_mappings;
    strata_u64_map mapping_map; /* (file sid << 32 | build id sid) + 1 -> 1-based mapping index */
} symbol_tables;

static void symbol_tables_free(symbol_tables *s) {
    free(s->str_index);
    free(s->strings);
    free(s->frame_index);
    free(s->functions);
    free(s->function_ptrs);
    free(s->locations);
    free(s->location_ptrs);
    free(s->lines);
    free(s->line_ptrs);
    free(s->mappings);
    free(s->mapping_ptrs);
    strata_u64_map_free(&s->mapping_map);
}

static int symbol_tables_init(symbol_tables *s, const calltree *t) {
    memset(s, 0, sizeof *s);
    size_t nf = t->n_frames ? t->n_frames : 1;
    s->str_index = calloc(t->strings.count ? t->strings.count : 1, sizeof *s->str_index);
    s->strings = malloc((1 + FRAME_NSTR * nf) * sizeof *s->strings);
    s->frame_index = calloc(nf, sizeof *s->frame_index);
    s->functions = malloc(nf * sizeof *s->functions);
    s->function_ptrs = malloc(nf * sizeof *s->function_ptrs);
    s->locations = malloc(nf * sizeof *s->locations);
    s->location_ptrs = malloc(nf * sizeof *s->location_ptrs);
    s->lines = malloc(nf * sizeof *s->lines);
    s->line_ptrs = malloc(nf * sizeof *s->line_ptrs);
    s->mappings = malloc(nf * sizeof *s->mappings);
    s->mapping_ptrs = malloc(nf * sizeof *s->mapping_ptrs);
    if (s->str_index == NULL || s->strings == NULL || s->frame_index == NULL ||
        s->functions == NULL || s->function_ptrs == NULL || s->locations == NULL ||
        s->location_ptrs == NULL || s->lines == NULL || s->line_ptrs == NULL ||
        s->mappings == NULL || s->mapping_ptrs == NULL ||
        strata_u64_map_init(&s->mapping_map, 64) != 0) {
        symbol_tables_free(s);
        return -1;
    }
    s->strings[s->n_strings++] = mutable_str("");
    return 0;
}

static uint32_t string_index(symbol_tables *s, const calltree *t, uint32_t sid) {
    if (str_len(t, sid) == 0)
        return 0;
    if (s->str_index[sid] == 0) {
        s->str_index[sid] = (uint32_t)s->n_strings;
        s->strings[s->n_strings++] = mutable_str(calltree_string(t, sid));
    }
    return s->str_index[sid];
}

/* 1-based index of the frame's mapping, 0 when it has neither file nor build id. */
static int mapping_index(symbol_tables *s, const calltree *t, uint32_t f, uint32_t *out) {
    uint32_t file = calltree_frame_sid(t, f, FRAME_MAPPING_FILE),
             build = calltree_frame_sid(t, f, FRAME_BUILD_ID);
    *out = 0;
    if (str_len(t, file) == 0 && str_len(t, build) == 0)
        return 0;
    bool inserted;
    uint64_t *slot = strata_u64_map_upsert(&s->mapping_map, ((uint64_t)file << 32 | build) + 1,
                                           s->n_mappings + 1, &inserted);
    if (slot == NULL)
        return -1;
    if (inserted) {
        PbMapping *m = &s->mappings[s->n_mappings];
        parca__metastore__v1alpha1__mapping__init(m);
        m->file = mutable_str(calltree_string(t, file));
        m->build_id = mutable_str(calltree_string(t, build));
        m->file_string_index = string_index(s, t, file);
        m->build_id_string_index = string_index(s, t, build);
        m->has_functions = true;
        s->mapping_ptrs[s->n_mappings++] = m;
    }
    *out = (uint32_t)*slot;
    return 0;
}

static void fill_function(symbol_tables *s, const calltree *t, uint32_t f, PbFunction *fn) {
    parca__metastore__v1alpha1__function__init(fn);
    fn->name = mutable_str(calltree_frame_string(t, f, FRAME_NAME));
    fn->system_name = mutable_str(calltree_frame_string(t, f, FRAME_SYSTEM_NAME));
    fn->filename = mutable_str(calltree_frame_string(t, f, FRAME_FILENAME));
    fn->start_line = calltree_frame_start_line(t, f);
    if (s != NULL) {
        fn->name_string_index = string_index(s, t, calltree_frame_sid(t, f, FRAME_NAME));
        fn->system_name_string_index =
            string_index(s, t, calltree_frame_sid(t, f, FRAME_SYSTEM_NAME));
        fn->filename_string_index = string_index(s, t, calltree_frame_sid(t, f, FRAME_FILENAME));
    }
}

/* Emits the frame's Function, Location (and Mapping) once; returns its 1-based index. */
static int frame_symbols(symbol_tables *s, const calltree *t, uint32_t f, uint32_t *index) {
    if (s->frame_index[f] != 0) {
        *index = s->frame_index[f];
        return 0;
    }
    size_t k = s->n_functions;
    fill_function(s, t, f, &s->functions[k]);
    uint32_t mi;
    if (mapping_index(s, t, f, &mi) != 0)
        return -1;
    PbLine *line = &s->lines[k];
    parca__metastore__v1alpha1__line__init(line);
    const calltree_frame_location *fl = calltree_frame_loc(t, f);
    line->line = fl->line != 0 ? fl->line : calltree_frame_start_line(t, f);
    line->function_index = (uint32_t)(k + 1);
    s->line_ptrs[k] = line;
    PbLocation *loc = &s->locations[k];
    parca__metastore__v1alpha1__location__init(loc);
    loc->address = fl->address;
    loc->n_lines = 1;
    loc->lines = &s->line_ptrs[k];
    loc->mapping_index = mi;
    s->function_ptrs[k] = &s->functions[k];
    s->location_ptrs[k] = loc;
    s->n_functions++;
    s->frame_index[f] = (uint32_t)(k + 1);
    *index = (uint32_t)(k + 1);
    return 0;
}

/* ---- flame graph ---- */

typedef struct flame_build {
    FlamegraphNode *nodes;     /* by emit position (0 unused: the root) */
    FlamegraphNodeMeta *metas; /* by emit position */
    FlamegraphNode **child_ptrs;
    uint32_t *emit; /* node -> emit position */
} flame_build;

static void flame_build_free(flame_build *b) {
    free(b->nodes);
    free(b->metas);
    free(b->child_ptrs);
    free(b->emit);
}

static int64_t node_diff(const calltree *t, uint32_t v) {
    return t->diff ? t->total[v] - t->total_base[v] : 0;
}

/* Links each emitted node to its kept children, in sorted order. Returns the root's children. */
static FlamegraphNode **link_children(const calltree *t, const calltree_selection *sel,
                                      flame_build *b, size_t *n_root_children) {
    size_t cursor = 0;
    FlamegraphNode **root_children = b->child_ptrs;
    for (size_t e = 0; e < sel->n_order; e++) {
        uint32_t v = sel->order[e];
        FlamegraphNode **slice = &b->child_ptrs[cursor];
        size_t k = 0;
        for (uint32_t i = t->child_offset[v]; i < t->child_offset[v + 1]; i++)
            if (sel->keep[t->children[i]])
                slice[k++] = &b->nodes[b->emit[t->children[i]]];
        cursor += k;
        if (e == 0) {
            *n_root_children = k;
        } else {
            b->nodes[e].children = slice;
            b->nodes[e].n_children = k;
        }
    }
    return root_children;
}

/* Fills node messages and symbols; returns the maximum depth in *height. */
static int fill_flame_nodes(const calltree *t, const calltree_selection *sel, flame_build *b,
                            symbol_tables *s, uint32_t *depth, int32_t *height) {
    *height = 0;
    depth[CALLTREE_ROOT] = 0;
    for (size_t e = 1; e < sel->n_order; e++) {
        uint32_t v = sel->order[e];
        b->emit[v] = (uint32_t)e;
        depth[v] = depth[t->parent[v]] + 1;
        if ((int32_t)depth[v] > *height)
            *height = (int32_t)depth[v];
        uint32_t loc;
        if (frame_symbols(s, t, t->frame[v], &loc) != 0)
            return -1;
        FlamegraphNodeMeta *meta = &b->metas[e];
        parca__query__v1alpha1__flamegraph_node_meta__init(meta);
        meta->function = &s->functions[loc - 1];
        uint32_t mi = s->locations[loc - 1].mapping_index;
        meta->mapping = mi ? &s->mappings[mi - 1] : NULL;
        meta->location_index = loc;
        FlamegraphNode *n = &b->nodes[e];
        parca__query__v1alpha1__flamegraph_node__init(n);
        n->meta = meta;
        n->cumulative = t->total[v];
        n->diff = node_diff(t, v);
    }
    return 0;
}

static int encode_flamegraph(const calltree *t, const calltree_report_options *opts,
                             QueryResponse *resp, strata_buffer *out, strata_error *err) {
    calltree_selection sel;
    if (calltree_select(t, t->total, opts->node_trim_threshold, opts->max_nodes, &sel, err) != 0)
        return -1;
    symbol_tables s;
    flame_build b = {malloc(sel.n_order * sizeof *b.nodes), malloc(sel.n_order * sizeof *b.metas),
                     malloc(sel.n_order * sizeof *b.child_ptrs),
                     malloc(t->n_nodes * sizeof *b.emit)};
    uint32_t *depth = malloc(t->n_nodes * sizeof *depth);
    bool tables_ok = symbol_tables_init(&s, t) == 0;
    int rc = -1;
    int32_t height;
    if (!tables_ok || b.nodes == NULL || b.metas == NULL || b.child_ptrs == NULL ||
        b.emit == NULL || depth == NULL || fill_flame_nodes(t, &sel, &b, &s, depth, &height) != 0) {
        strata_error_oom(err);
        goto out;
    }
    FlamegraphRootNode root = PARCA__QUERY__V1ALPHA1__FLAMEGRAPH_ROOT_NODE__INIT;
    root.cumulative = t->total[CALLTREE_ROOT];
    root.diff = node_diff(t, CALLTREE_ROOT);
    root.children = link_children(t, &sel, &b, &root.n_children);
    Flamegraph fg = PARCA__QUERY__V1ALPHA1__FLAMEGRAPH__INIT;
    fg.root = &root;
    fg.total = fg.untrimmed_total = t->total[CALLTREE_ROOT];
    fg.unit = mutable_str(opts->unit != NULL ? opts->unit : "");
    fg.height = height;
    fg.string_table = s.strings;
    fg.n_string_table = s.n_strings;
    fg.locations = s.location_ptrs;
    fg.n_locations = s.n_functions;
    fg.function = s.function_ptrs;
    fg.n_function = s.n_functions;
    fg.mapping = s.mapping_ptrs;
    fg.n_mapping = s.n_mappings;
    fg.trimmed = sel.trimmed;
    resp->report_case = PARCA__QUERY__V1ALPHA1__QUERY_RESPONSE__REPORT_FLAMEGRAPH;
    resp->flamegraph = &fg;
    rc = pack_response(resp, out, err);
out:
    if (tables_ok)
        symbol_tables_free(&s);
    flame_build_free(&b);
    free(depth);
    calltree_selection_free(&sel);
    return rc;
}

/* ---- top ---- */

static void fill_top_node(const calltree *t, const calltree_frame_stats *r, TopNode *n,
                          TopNodeMeta *meta, PbFunction *fn, PbMapping *m) {
    fill_function(NULL, t, r->frame, fn);
    parca__metastore__v1alpha1__mapping__init(m);
    m->file = mutable_str(calltree_frame_string(t, r->frame, FRAME_MAPPING_FILE));
    m->build_id = mutable_str(calltree_frame_string(t, r->frame, FRAME_BUILD_ID));
    parca__query__v1alpha1__top_node_meta__init(meta);
    meta->function = fn;
    meta->mapping = (m->file[0] != '\0' || m->build_id[0] != '\0') ? m : NULL;
    parca__query__v1alpha1__top_node__init(n);
    n->meta = meta;
    n->flat = r->flat;
    n->cumulative = r->cumulative;
    n->diff = t->diff ? r->cumulative - r->cumulative_base : 0;
}

static int encode_top(const calltree *t, const calltree_report_options *opts, QueryResponse *resp,
                      strata_buffer *out, strata_error *err) {
    calltree_frame_stats *rows;
    size_t n;
    if (calltree_frame_stats_compute(t, &rows, &n, err) != 0)
        return -1;
    size_t all = n;
    if (opts->max_nodes > 0 && n > opts->max_nodes)
        n = opts->max_nodes; /* the largest flat values: rows are sorted */
    size_t cap = n ? n : 1;
    TopNode *nodes = malloc(cap * sizeof *nodes);
    TopNode **ptrs = malloc(cap * sizeof *ptrs);
    TopNodeMeta *metas = malloc(cap * sizeof *metas);
    PbFunction *fns = malloc(cap * sizeof *fns);
    PbMapping *maps = malloc(cap * sizeof *maps);
    int rc = -1;
    if (nodes == NULL || ptrs == NULL || metas == NULL || fns == NULL || maps == NULL) {
        strata_error_oom(err);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        fill_top_node(t, &rows[i], &nodes[i], &metas[i], &fns[i], &maps[i]);
        ptrs[i] = &nodes[i];
    }
    Top top = PARCA__QUERY__V1ALPHA1__TOP__INIT;
    top.list = ptrs;
    top.n_list = n;
    top.reported = n > INT32_MAX ? INT32_MAX : (int32_t)n;
    top.total = all > INT32_MAX ? INT32_MAX : (int32_t)all;
    top.unit = mutable_str(opts->unit != NULL ? opts->unit : "");
    resp->report_case = PARCA__QUERY__V1ALPHA1__QUERY_RESPONSE__REPORT_TOP;
    resp->top = &top;
    rc = pack_response(resp, out, err);
out:
    free(rows);
    free(nodes);
    free(ptrs);
    free(metas);
    free(fns);
    free(maps);
    return rc;
}

/* ---- flame graph as Arrow (FLAMEGRAPH_ARROW) ----
 *
 * One row per node the flame graph shows (calltree_select: the same nodes as FLAMEGRAPH_TABLE,
 * depth-first, row 0 the root), with Parca's column names: labels_only, location_address,
 * mapping_file, mapping_build_id, location_line, inlined, function_startline, function_name,
 * function_system_name, function_file_name (strings dictionary-encoded), children (row numbers),
 * parent (-1 for the root), cumulative, flat, diff, timestamp and value_offset (0: no flame chart),
 * depth, and one dictionary column "labels.<name>" per pprof label a shown label frame carries.
 * A label frame's row has labels_only, its labels in those columns ("" in other rows) and its
 * "name=value" text as function_name. */

/* A dictionary column over the tree's string ids. */
typedef struct arrow_dict {
    int32_t *index_of_sid; /* sid -> dictionary index + 1 */
    const char **values;
    size_t *lengths;
    size_t n;
    int32_t *rows;
} arrow_dict;

static void arrow_dict_free(arrow_dict *d) {
    free(d->index_of_sid);
    free(d->values);
    free(d->lengths);
    free(d->rows);
}

static int arrow_dict_init(arrow_dict *d, const calltree *t, size_t rows) {
    memset(d, 0, sizeof *d);
    size_t n = t->strings.count + 1;
    d->index_of_sid = calloc(n, sizeof *d->index_of_sid);
    d->values = malloc(n * sizeof *d->values);
    d->lengths = malloc(n * sizeof *d->lengths);
    d->rows = malloc((rows ? rows : 1) * sizeof *d->rows);
    return d->index_of_sid && d->values && d->lengths && d->rows ? 0 : -1;
}

static void arrow_dict_set(arrow_dict *d, const calltree *t, size_t row, uint32_t sid) {
    if (d->index_of_sid[sid] == 0) {
        d->values[d->n] = calltree_string(t, sid);
        d->lengths[d->n] = t->strings.lengths[sid];
        d->index_of_sid[sid] = (int32_t)++d->n;
    }
    d->rows[row] = d->index_of_sid[sid] - 1;
}

#define MAX_ARROW_LABELS 64

/* The label columns: each distinct label name of the shown label frames, as its string id. */
static size_t arrow_label_names(const calltree *t, const uint32_t *nodes, size_t n_rows,
                                uint32_t *names) {
    size_t n = 0;
    for (size_t e = 1; e < n_rows; e++) {
        uint32_t f = t->frame[nodes[e]];
        for (uint32_t i = 0; i < t->frame_extra[f].label_count; i++) {
            uint32_t sid = t->label_words[t->frame_extra[f].label_first + 2 * i];
            bool seen = false;
            for (size_t k = 0; k < n && !seen; k++)
                seen = names[k] == sid;
            if (!seen && n < MAX_ARROW_LABELS)
                names[n++] = sid;
        }
    }
    return n;
}

/* Adds the "labels.<name>" columns of the rows (row e: node nodes[e], row 0 the root). */
static int add_label_columns(arrow_writer *w, const calltree *t, const uint32_t *nodes, size_t n) {
    uint32_t names[MAX_ARROW_LABELS];
    size_t n_names = arrow_label_names(t, nodes, n, names);
    int rc = 0;
    for (size_t k = 0; k < n_names && rc == 0; k++) {
        arrow_dict d;
        if (arrow_dict_init(&d, t, n) != 0) {
            arrow_dict_free(&d);
            return -1;
        }
        for (size_t e = 0; e < n; e++) {
            uint32_t f = t->frame[nodes[e]], value = t->empty_sid;
            for (uint32_t i = 0; e > 0 && i < t->frame_extra[f].label_count; i++) {
                const uint32_t *pair = &t->label_words[t->frame_extra[f].label_first + 2 * i];
                if (pair[0] == names[k])
                    value = pair[1];
            }
            arrow_dict_set(&d, t, e, value);
        }
        char column[256];
        snprintf(column, sizeof column, "labels.%s", calltree_string(t, names[k]));
        arrow_add_dict_binary(w, column, d.rows, n, d.values, d.lengths, d.n);
        arrow_dict_free(&d);
    }
    return rc;
}

enum { DICT_MAPPING, DICT_BUILD, DICT_NAME, DICT_SYSTEM, DICT_FILE, N_DICTS };

/* Row `row` of the five dictionary columns holds frame f's strings (a label frame's "name=value"
 * text as its function name). */
static void arrow_dicts_set_frame(arrow_dict *dicts, const calltree *t, size_t row, uint32_t f) {
    arrow_dict_set(&dicts[DICT_MAPPING], t, row, calltree_frame_sid(t, f, FRAME_MAPPING_FILE));
    arrow_dict_set(&dicts[DICT_BUILD], t, row, calltree_frame_sid(t, f, FRAME_BUILD_ID));
    arrow_dict_set(&dicts[DICT_NAME], t, row,
                   calltree_frame_is_labels(t, f) ? t->frame_label[f]
                                                  : calltree_frame_sid(t, f, FRAME_NAME));
    arrow_dict_set(&dicts[DICT_SYSTEM], t, row, calltree_frame_sid(t, f, FRAME_SYSTEM_NAME));
    arrow_dict_set(&dicts[DICT_FILE], t, row, calltree_frame_sid(t, f, FRAME_FILENAME));
}

static void add_dict_column(arrow_writer *w, const char *name, const arrow_dict *d, size_t n) {
    arrow_add_dict_binary(w, name, d->rows, n, d->values, d->lengths, d->n);
}

/* The rows of a flame graph record: row e shows node[e]'s frame (CALLTREE_ROOT for row 0) with
 * these values, and children[child_offsets[e] .. child_offsets[e + 1]) are its rows. */
typedef struct fg_rows {
    size_t n;
    uint32_t *node;
    int64_t *cum, *flat, *diff, *time, *offset;
    int32_t *parent;
    uint32_t *depth;
    int32_t *child_offsets; /* n + 1 */
    uint32_t *children;
    int32_t height;
} fg_rows;

static void fg_rows_free(fg_rows *r) {
    free(r->node);
    free(r->cum);
    free(r->flat);
    free(r->diff);
    free(r->time);
    free(r->offset);
    free(r->parent);
    free(r->depth);
    free(r->child_offsets);
    free(r->children);
}

static int fg_rows_alloc(fg_rows *r, size_t n, strata_error *err) {
    memset(r, 0, sizeof *r);
    size_t m = n ? n : 1;
    r->n = n;
    r->node = malloc(m * sizeof *r->node);
    r->cum = malloc(m * sizeof *r->cum);
    r->flat = malloc(m * sizeof *r->flat);
    r->diff = malloc(m * sizeof *r->diff);
    r->time = calloc(m, sizeof *r->time);
    r->offset = calloc(m, sizeof *r->offset);
    r->parent = malloc(m * sizeof *r->parent);
    r->depth = malloc(m * sizeof *r->depth);
    r->child_offsets = malloc((n + 1) * sizeof *r->child_offsets);
    r->children = malloc(m * sizeof *r->children);
    if (r->node && r->cum && r->flat && r->diff && r->time && r->offset && r->parent && r->depth &&
        r->child_offsets && r->children)
        return 0;
    fg_rows_free(r);
    return strata_error_oom(err);
}

/* A flame graph's rows: the selected nodes depth-first, children in the tree's order. */
static int flamegraph_rows(const calltree *t, const calltree_selection *sel, fg_rows *rows,
                           strata_error *err) {
    size_t n = sel->n_order;
    uint32_t *row_of = malloc((t->n_nodes ? t->n_nodes : 1) * sizeof *row_of);
    if (row_of == NULL || fg_rows_alloc(rows, n, err) != 0) {
        free(row_of);
        return row_of == NULL ? strata_error_oom(err) : -1;
    }
    for (size_t e = 0; e < n; e++) {
        uint32_t v = sel->order[e];
        row_of[v] = (uint32_t)e;
        rows->node[e] = v;
        rows->depth[e] = v == CALLTREE_ROOT ? 0 : rows->depth[row_of[t->parent[v]]] + 1;
        if ((int32_t)rows->depth[e] > rows->height)
            rows->height = (int32_t)rows->depth[e];
        rows->parent[e] = v == CALLTREE_ROOT ? -1 : (int32_t)row_of[t->parent[v]];
        rows->cum[e] = t->total[v];
        rows->flat[e] = t->self[v];
        rows->diff[e] = node_diff(t, v);
    }
    size_t k = 0;
    for (size_t e = 0; e < n; e++) {
        uint32_t v = sel->order[e];
        rows->child_offsets[e] = (int32_t)k;
        for (uint32_t i = t->child_offset[v]; i < t->child_offset[v + 1]; i++)
            if (sel->keep[t->children[i]])
                rows->children[k++] = row_of[t->children[i]];
    }
    rows->child_offsets[n] = (int32_t)k;
    free(row_of);
    return 0;
}

/* ---- the flame chart (group_by timestamp, REPORT_TYPE_FLAMECHART) ----
 *
 * The tree holds each profile timestamp's samples under a time frame (calltree_frame_time). The
 * chart takes the time frames in time order and merges each one's subtree into the chart, Parca's
 * way: a subtree's node joins the *last* chart row under the same parent when that row has the
 * same frame and the profile continues it in time (it starts at most a tenth of the previous
 * profile's duration after that profile ended, or overlaps it); otherwise it starts a new row.
 * So a function that runs through consecutive profiles is one wide row, and one that stops and
 * starts again is two. A row's timestamp is the start of its first profile, its value_offset the
 * sum of the cumulatives of the rows before it under its parent (plus the parent's offset). */

typedef struct chart_row {
    uint32_t node; /* a tree node of the row's frame */
    uint32_t parent, depth;
    uint32_t last_child, next_sibling, first_child; /* rows; UINT32_MAX: none */
    int64_t cum, flat, diff;
    int64_t time;                     /* the first profile's */
    int64_t last_time, last_duration; /* the last profile merged in */
} chart_row;

typedef struct chart {
    chart_row *rows;
    size_t n, cap;
} chart;

#define NO_ROW UINT32_MAX

static int chart_add_row(chart *c, uint32_t parent, uint32_t node, int64_t time, uint32_t *out) {
    if (c->n >= NO_ROW || STRATA_ARRAY_RESERVE(c->rows, c->cap, c->n + 1) != 0)
        return -1; /* a row id must fit in 32 bits and never be NO_ROW */
    uint32_t id = (uint32_t)c->n++;
    c->rows[id] = (chart_row){node, parent, 0, NO_ROW, NO_ROW, NO_ROW, 0, 0, 0, time, time, 0};
    if (id != 0) {
        chart_row *p = &c->rows[parent];
        c->rows[id].depth = p->depth + 1;
        if (p->last_child == NO_ROW)
            p->first_child = id;
        else
            c->rows[p->last_child].next_sibling = id;
        p->last_child = id;
    }
    *out = id;
    return 0;
}

/* Whether a profile at `time` continues row r. */
static bool chart_continues(const chart_row *r, int64_t time) {
    if (time <= r->last_time || r->last_duration <= 0)
        return false;
    return time - (r->last_time + r->last_duration) <= r->last_duration / 10;
}

/* Merges tree node v (of a profile at time, lasting duration) into the chart under row. */
static int chart_merge_node(chart *c, const calltree *t, uint32_t row, uint32_t v, int64_t time,
                            int64_t duration) {
    uint32_t last = c->rows[row].last_child, target;
    if (last != NO_ROW && t->frame[c->rows[last].node] == t->frame[v] &&
        chart_continues(&c->rows[last], time))
        target = last;
    else if (chart_add_row(c, row, v, time, &target) != 0)
        return -1;
    chart_row *r = &c->rows[target];
    r->cum += t->total[v];
    r->flat += t->self[v];
    r->diff += node_diff(t, v);
    r->last_time = time;
    r->last_duration = duration;
    for (uint32_t i = t->child_offset[v]; i < t->child_offset[v + 1]; i++)
        if (chart_merge_node(c, t, target, t->children[i], time, duration) != 0)
            return -1;
    return 0;
}

typedef struct chart_group {
    int64_t time, duration;
    uint32_t node; /* a time frame's node, or a code node straight under the root */
    bool timed;
} chart_group;

static int compare_groups(const void *a, const void *b) {
    const chart_group *x = a, *y = b;
    if (x->time != y->time)
        return (x->time > y->time) - (x->time < y->time);
    if (x->duration != y->duration)
        return (x->duration > y->duration) - (x->duration < y->duration);
    return (x->node > y->node) - (x->node < y->node);
}

/* The chart's rows, in time order under the root. */
static int chart_build(const calltree *t, chart *c) {
    size_t n = t->child_offset[1] - t->child_offset[0];
    chart_group *groups = malloc((n ? n : 1) * sizeof *groups);
    uint32_t root;
    if (groups == NULL || chart_add_row(c, 0, CALLTREE_ROOT, 0, &root) != 0) {
        free(groups);
        return -1;
    }
    c->rows[root].cum = t->total[CALLTREE_ROOT];
    c->rows[root].flat = t->self[CALLTREE_ROOT];
    c->rows[root].diff = node_diff(t, CALLTREE_ROOT);
    for (size_t i = 0; i < n; i++) {
        uint32_t v = t->children[t->child_offset[0] + i];
        groups[i] = (chart_group){0, 0, v, false};
        groups[i].timed = calltree_frame_time(t, t->frame[v], &groups[i].time, &groups[i].duration);
    }
    qsort(groups, n, sizeof *groups, compare_groups);
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        uint32_t v = groups[i].node;
        if (!groups[i].timed) {
            rc = chart_merge_node(c, t, root, v, 0, 0);
            continue;
        }
        for (uint32_t k = t->child_offset[v]; rc == 0 && k < t->child_offset[v + 1]; k++)
            rc = chart_merge_node(c, t, root, t->children[k], groups[i].time, groups[i].duration);
    }
    free(groups);
    return rc;
}

/* Each row's value_offset: its parent's plus the cumulatives of the rows before it under that
 * parent (dropped ones included, so trimming leaves gaps rather than shifting rows). */
static void chart_offsets(const chart *c, int64_t *offset) {
    offset[0] = 0;
    for (size_t id = 0; id < c->n; id++) { /* parents come before their children */
        int64_t run = offset[id];
        for (uint32_t ch = c->rows[id].first_child; ch != NO_ROW; ch = c->rows[ch].next_sibling) {
            offset[ch] = run;
            run += c->rows[ch].cum;
        }
    }
}

/* Fills rows from the kept chart rows, depth-first with children in time order. */
static void chart_emit(const chart *c, const bool *keep, const int64_t *offset, uint32_t *stack,
                       uint32_t *out_of, fg_rows *rows) {
    size_t sp = 0, e = 0;
    stack[sp++] = 0;
    while (sp > 0) {
        uint32_t id = stack[--sp];
        const chart_row *r = &c->rows[id];
        out_of[id] = (uint32_t)e;
        rows->node[e] = r->node;
        rows->cum[e] = r->cum;
        rows->flat[e] = r->flat;
        rows->diff[e] = r->diff;
        rows->time[e] = r->time;
        rows->offset[e] = offset[id];
        rows->depth[e] = r->depth;
        rows->parent[e] = id == 0 ? -1 : (int32_t)out_of[r->parent];
        if ((int32_t)r->depth > rows->height)
            rows->height = (int32_t)r->depth;
        e++;
        size_t first = sp;
        for (uint32_t ch = r->first_child; ch != NO_ROW; ch = c->rows[ch].next_sibling)
            if (keep[ch])
                stack[sp++] = ch;
        for (size_t a = first, b = sp; a + 1 < b; a++, b--) { /* the earliest child on top */
            uint32_t tmp = stack[a];
            stack[a] = stack[b - 1];
            stack[b - 1] = tmp;
        }
    }
    /* children lists, each in emission (time) order: counted, then placed */
    size_t n = rows->n;
    memset(rows->child_offsets, 0, (n + 1) * sizeof *rows->child_offsets);
    for (size_t i = 1; i < n; i++)
        rows->child_offsets[rows->parent[i] + 1]++;
    for (size_t i = 0; i < n; i++)
        rows->child_offsets[i + 1] += rows->child_offsets[i];
    uint32_t *fill = stack; /* reused: children placed per row so far */
    memset(fill, 0, n * sizeof *fill);
    for (size_t i = 1; i < n; i++) {
        int32_t p = rows->parent[i];
        rows->children[rows->child_offsets[p] + (int32_t)fill[p]++] = (uint32_t)i;
    }
}

/* The flame chart's rows (trimmed by opts) into rows; *trimmed grows by what was dropped. */
static int chart_rows(const calltree *t, const calltree_report_options *opts, fg_rows *rows,
                      int64_t *trimmed, strata_error *err) {
    chart c = {0};
    uint32_t *parent = NULL, *stack = NULL, *out_of = NULL;
    int64_t *weight = NULL, *offset = NULL;
    bool *keep = NULL;
    int rc = chart_build(t, &c) != 0 ? strata_error_oom(err) : 0;
    size_t n = c.n;
    if (rc == 0) {
        parent = malloc(n * sizeof *parent);
        weight = malloc(n * sizeof *weight);
        offset = malloc(n * sizeof *offset);
        keep = malloc(n * sizeof *keep);
        stack = malloc(n * sizeof *stack);
        out_of = malloc(n * sizeof *out_of);
        if (!parent || !weight || !offset || !keep || !stack || !out_of)
            rc = strata_error_oom(err);
    }
    for (size_t i = 0; rc == 0 && i < n; i++) {
        parent[i] = c.rows[i].parent;
        weight[i] = c.rows[i].cum;
    }
    if (rc == 0 && calltree_trim_rows(n, parent, weight, opts->node_trim_threshold, opts->max_nodes,
                                      keep, trimmed) != 0)
        rc = strata_error_oom(err);
    size_t kept = 0;
    for (size_t i = 0; rc == 0 && i < n; i++)
        kept += keep[i];
    if (rc == 0)
        rc = fg_rows_alloc(rows, kept, err);
    if (rc == 0) {
        chart_offsets(&c, offset);
        chart_emit(&c, keep, offset, stack, out_of, rows);
    }
    free(c.rows);
    free(parent);
    free(weight);
    free(offset);
    free(keep);
    free(stack);
    free(out_of);
    return rc;
}

/* Writes the Arrow record of rows (see the section comment above for the columns). */
static int write_flamegraph_record(const calltree *t, const fg_rows *rows, strata_buffer *record,
                                   strata_error *err) {
    size_t n = rows->n, m = n ? n : 1;
    bool *labels_only = calloc(m, sizeof *labels_only);
    bool *inlined = calloc(m, sizeof *inlined);
    uint64_t *address = calloc(m, sizeof *address);
    int64_t *line = calloc(m, sizeof *line), *start_line = calloc(m, sizeof *start_line);
    int64_t *depth = malloc(m * sizeof *depth);
    arrow_dict dicts[N_DICTS];
    bool ok = labels_only && inlined && address && line && start_line && depth;
    for (int k = 0; k < N_DICTS; k++)
        ok = arrow_dict_init(&dicts[k], t, n) == 0 && ok;
    int rc = -1;
    if (!ok) {
        strata_error_oom(err);
        goto out;
    }
    for (size_t e = 0; e < n; e++) {
        depth[e] = rows->depth[e];
        uint32_t v = rows->node[e];
        if (v == CALLTREE_ROOT) {
            for (int k = 0; k < N_DICTS; k++)
                arrow_dict_set(&dicts[k], t, e, t->empty_sid);
            continue;
        }
        uint32_t f = t->frame[v];
        const calltree_frame_location *loc = calltree_frame_loc(t, f);
        labels_only[e] = calltree_frame_is_labels(t, f);
        inlined[e] = loc->inlined;
        address[e] = loc->address;
        line[e] = loc->line;
        start_line[e] = calltree_frame_start_line(t, f);
        arrow_dicts_set_frame(dicts, t, e, f);
    }
    arrow_writer w;
    arrow_writer_init(&w);
    arrow_add_bool(&w, "labels_only", labels_only, n, false);
    arrow_add_int(&w, "location_address", 64, false, address, n);
    add_dict_column(&w, "mapping_file", &dicts[DICT_MAPPING], n);
    add_dict_column(&w, "mapping_build_id", &dicts[DICT_BUILD], n);
    arrow_add_int_narrowed(&w, "location_line", false, line, n);
    arrow_add_bool(&w, "inlined", inlined, n, true);
    arrow_add_int_narrowed(&w, "function_startline", false, start_line, n);
    add_dict_column(&w, "function_name", &dicts[DICT_NAME], n);
    add_dict_column(&w, "function_system_name", &dicts[DICT_SYSTEM], n);
    add_dict_column(&w, "function_file_name", &dicts[DICT_FILE], n);
    arrow_add_list_uint32(&w, "children", rows->child_offsets, n, rows->children);
    arrow_add_int(&w, "parent", 32, true, rows->parent, n);
    arrow_add_int_narrowed(&w, "cumulative", false, rows->cum, n);
    arrow_add_int_narrowed(&w, "flat", false, rows->flat, n);
    arrow_add_int_narrowed(&w, "diff", true, rows->diff, n);
    arrow_add_int(&w, "timestamp", 64, true, rows->time, n);
    arrow_add_int_narrowed(&w, "value_offset", false, rows->offset, n);
    arrow_add_int_narrowed(&w, "depth", false, depth, n);
    if (add_label_columns(&w, t, rows->node, n) != 0)
        w.failed = true;
    rc = arrow_writer_finish(&w, n, record, err);
    arrow_writer_free(&w);
out:
    free(labels_only);
    free(inlined);
    free(address);
    free(line);
    free(start_line);
    free(depth);
    for (int d = 0; d < N_DICTS; d++)
        arrow_dict_free(&dicts[d]);
    return rc;
}

static int encode_flamegraph_arrow(const calltree *t, const calltree_report_options *opts,
                                   QueryResponse *resp, strata_buffer *out, strata_error *err) {
    fg_rows rows;
    int64_t trimmed = 0;
    int rc;
    if (calltree_get_grouping(t)->by_timestamp) {
        rc = chart_rows(t, opts, &rows, &trimmed, err);
    } else {
        calltree_selection sel;
        if (calltree_select(t, t->total, opts->node_trim_threshold, opts->max_nodes, &sel, err) !=
            0)
            return -1;
        trimmed = sel.trimmed;
        rc = flamegraph_rows(t, &sel, &rows, err);
        calltree_selection_free(&sel);
    }
    if (rc != 0)
        return -1;
    strata_buffer record = STRATA_BUFFER_INIT;
    rc = write_flamegraph_record(t, &rows, &record, err);
    if (rc == 0) {
        Parca__Query__V1alpha1__FlamegraphArrow fa = PARCA__QUERY__V1ALPHA1__FLAMEGRAPH_ARROW__INIT;
        fa.record.data = record.data;
        fa.record.len = record.len;
        fa.unit = mutable_str(opts->unit != NULL ? opts->unit : "");
        fa.height = rows.height;
        fa.trimmed = trimmed;
        resp->report_case = PARCA__QUERY__V1ALPHA1__QUERY_RESPONSE__REPORT_FLAMEGRAPH_ARROW;
        resp->flamegraph_arrow = &fa;
        rc = pack_response(resp, out, err);
    }
    strata_buffer_free(&record);
    fg_rows_free(&rows);
    return rc;
}

/* ---- callgraph ----
 *
 * One node per frame (TOP's rows: flat, and cumulative counting a frame once per stack), one edge
 * per caller -> callee pair of frames found as parent and child nodes, weighing the sum of those
 * children's cumulatives. At most max_nodes nodes (TOP's first rows), with the edges among them.
 * Ids are "<row>" and "<caller row>-<callee row>". */

typedef Parca__Query__V1alpha1__Callgraph Callgraph;
typedef Parca__Query__V1alpha1__CallgraphNode CallgraphNode;
typedef Parca__Query__V1alpha1__CallgraphNodeMeta CallgraphNodeMeta;
typedef Parca__Query__V1alpha1__CallgraphEdge CallgraphEdge;

typedef struct callgraph_build {
    calltree_frame_stats *rows;
    size_t n_rows;
    uint32_t *row_of;    /* frame -> row + 1; 0: not a node */
    strata_u64_map keys; /* caller row << 32 | callee row, + 1 -> edge + 1 */
    int64_t *edge_cum;
    uint32_t *edge_from, *edge_to;
    size_t n_edges, cap_edges;
    CallgraphNode *nodes;
    CallgraphNode **node_ptrs;
    CallgraphNodeMeta *metas;
    PbFunction *fns;
    PbMapping *maps;
    CallgraphEdge *edges;
    CallgraphEdge **edge_ptrs;
    char (*node_ids)[24];
    char (*edge_ids)[48];
} callgraph_build;

static void callgraph_free(callgraph_build *b) {
    free(b->rows);
    free(b->row_of);
    strata_u64_map_free(&b->keys);
    free(b->edge_cum);
    free(b->edge_from);
    free(b->edge_to);
    free(b->nodes);
    free(b->node_ptrs);
    free(b->metas);
    free(b->fns);
    free(b->maps);
    free(b->edges);
    free(b->edge_ptrs);
    free(b->node_ids);
    free(b->edge_ids);
}

static int callgraph_add_edge(callgraph_build *b, uint32_t from, uint32_t to, int64_t cum) {
    bool inserted;
    uint64_t *slot = strata_u64_map_upsert(&b->keys, ((uint64_t)from << 32 | to) + 1, 0, &inserted);
    if (slot == NULL)
        return -1;
    if (inserted) {
        if (b->n_edges == b->cap_edges) {
            size_t cap = strata_array_capacity(b->cap_edges, b->n_edges + 1);
            int64_t *c = strata_array_resize(b->edge_cum, cap, sizeof *c);
            if (c == NULL)
                return -1;
            b->edge_cum = c;
            uint32_t *f = strata_array_resize(b->edge_from, cap, sizeof *f);
            if (f == NULL)
                return -1;
            b->edge_from = f;
            uint32_t *t = strata_array_resize(b->edge_to, cap, sizeof *t);
            if (t == NULL)
                return -1;
            b->edge_to = t;
            b->cap_edges = cap;
        }
        b->edge_cum[b->n_edges] = 0;
        b->edge_from[b->n_edges] = from;
        b->edge_to[b->n_edges] = to;
        *slot = ++b->n_edges;
    }
    b->edge_cum[*slot - 1] += cum;
    return 0;
}

static int callgraph_collect(const calltree *t, const calltree_report_options *opts,
                             callgraph_build *b, strata_error *err) {
    if (calltree_frame_stats_compute(t, &b->rows, &b->n_rows, err) != 0)
        return -1;
    if (opts->max_nodes > 0 && b->n_rows > opts->max_nodes)
        b->n_rows = opts->max_nodes;
    b->row_of = calloc(t->n_frames + 1, sizeof *b->row_of);
    if (b->row_of == NULL || strata_u64_map_init(&b->keys, 64) != 0)
        return strata_error_oom(err);
    for (size_t i = 0; i < b->n_rows; i++)
        b->row_of[b->rows[i].frame] = (uint32_t)i + 1;
    /* Nodes in depth-first order over the sorted child lists, not in the order they were made
     * (which depends on the order the query's workers merged): edges come out in the same order
     * for the same tree however it was built. */
    uint32_t *stack = malloc((t->n_nodes + 1) * sizeof *stack);
    if (stack == NULL)
        return strata_error_oom(err);
    size_t sp = 0;
    stack[sp++] = CALLTREE_ROOT;
    while (sp > 0) {
        uint32_t node = stack[--sp];
        uint32_t parent = node == CALLTREE_ROOT ? CALLTREE_ROOT : calltree_node_parent(t, node);
        uint32_t from = parent == CALLTREE_ROOT ? 0 : b->row_of[calltree_node_frame(t, parent)];
        uint32_t to = node == CALLTREE_ROOT ? 0 : b->row_of[calltree_node_frame(t, node)];
        if (from != 0 && to != 0 && callgraph_add_edge(b, from - 1, to - 1, t->total[node]) != 0) {
            free(stack);
            return strata_error_oom(err);
        }
        for (size_t i = calltree_child_count(t, node); i > 0; i--)
            stack[sp++] = calltree_child_at(t, node, i - 1); /* the first child pops first */
    }
    free(stack);
    return 0;
}

static int encode_callgraph(const calltree *t, const calltree_report_options *opts,
                            QueryResponse *resp, strata_buffer *out, strata_error *err) {
    callgraph_build b;
    memset(&b, 0, sizeof b);
    int rc = -1;
    if (callgraph_collect(t, opts, &b, err) != 0)
        goto out;
    size_t nn = b.n_rows ? b.n_rows : 1, ne = b.n_edges ? b.n_edges : 1;
    b.nodes = malloc(nn * sizeof *b.nodes);
    b.node_ptrs = malloc(nn * sizeof *b.node_ptrs);
    b.metas = malloc(nn * sizeof *b.metas);
    b.fns = malloc(nn * sizeof *b.fns);
    b.maps = malloc(nn * sizeof *b.maps);
    b.node_ids = malloc(nn * sizeof *b.node_ids);
    b.edges = malloc(ne * sizeof *b.edges);
    b.edge_ptrs = malloc(ne * sizeof *b.edge_ptrs);
    b.edge_ids = malloc(ne * sizeof *b.edge_ids);
    if (b.nodes == NULL || b.node_ptrs == NULL || b.metas == NULL || b.fns == NULL ||
        b.maps == NULL || b.node_ids == NULL || b.edges == NULL || b.edge_ptrs == NULL ||
        b.edge_ids == NULL) {
        strata_error_oom(err);
        goto out;
    }
    for (size_t i = 0; i < b.n_rows; i++) {
        const calltree_frame_stats *r = &b.rows[i];
        fill_function(NULL, t, r->frame, &b.fns[i]);
        PbMapping *m = &b.maps[i];
        parca__metastore__v1alpha1__mapping__init(m);
        m->file = mutable_str(calltree_frame_string(t, r->frame, FRAME_MAPPING_FILE));
        m->build_id = mutable_str(calltree_frame_string(t, r->frame, FRAME_BUILD_ID));
        parca__query__v1alpha1__callgraph_node_meta__init(&b.metas[i]);
        b.metas[i].function = &b.fns[i];
        b.metas[i].mapping = (m->file[0] != '\0' || m->build_id[0] != '\0') ? m : NULL;
        snprintf(b.node_ids[i], sizeof b.node_ids[i], "%u", (unsigned)i);
        parca__query__v1alpha1__callgraph_node__init(&b.nodes[i]);
        b.nodes[i].id = b.node_ids[i];
        b.nodes[i].meta = &b.metas[i];
        b.nodes[i].flat = r->flat;
        b.nodes[i].cumulative = r->cumulative;
        b.node_ptrs[i] = &b.nodes[i];
    }
    for (size_t i = 0; i < b.n_edges; i++) {
        CallgraphEdge *e = &b.edges[i];
        parca__query__v1alpha1__callgraph_edge__init(e);
        snprintf(b.edge_ids[i], sizeof b.edge_ids[i], "%u-%u", b.edge_from[i], b.edge_to[i]);
        e->id = b.edge_ids[i];
        e->source = b.node_ids[b.edge_from[i]];
        e->target = b.node_ids[b.edge_to[i]];
        e->cumulative = b.edge_cum[i];
        b.edge_ptrs[i] = e;
    }
    Callgraph cg = PARCA__QUERY__V1ALPHA1__CALLGRAPH__INIT;
    cg.nodes = b.node_ptrs;
    cg.n_nodes = b.n_rows;
    cg.edges = b.edge_ptrs;
    cg.n_edges = b.n_edges;
    cg.cumulative = t->total[CALLTREE_ROOT];
    resp->report_case = PARCA__QUERY__V1ALPHA1__QUERY_RESPONSE__REPORT_CALLGRAPH;
    resp->callgraph = &cg;
    rc = pack_response(resp, out, err);
out:
    callgraph_free(&b);
    return rc;
}

/* ---- the table as Arrow (TABLE_ARROW) ----
 *
 * One row per frame, TOP's rows in TOP's order, with Parca's columns: mapping_file,
 * mapping_build_id, location_address, location_line, function_startline, function_name,
 * function_system_name, function_file_name, cumulative, cumulative_diff, flat, flat_diff, and
 * callers / callees: the rows of the frames calling it and called by it (CALLGRAPH's edges). */

/* The rows of one end of every edge, grouped by the other end: offsets n + 1, values n_edges. */
static int edge_lists(const callgraph_build *b, bool callers, int32_t *offsets, int64_t *values) {
    size_t n = b->n_rows;
    int32_t *fill = calloc(n + 1, sizeof *fill);
    if (fill == NULL)
        return -1;
    memset(offsets, 0, (n + 1) * sizeof *offsets);
    for (size_t e = 0; e < b->n_edges; e++)
        offsets[(callers ? b->edge_to[e] : b->edge_from[e]) + 1]++;
    for (size_t i = 0; i < n; i++)
        offsets[i + 1] += offsets[i];
    for (size_t e = 0; e < b->n_edges; e++) {
        uint32_t row = callers ? b->edge_to[e] : b->edge_from[e];
        values[offsets[row] + fill[row]++] = callers ? b->edge_from[e] : b->edge_to[e];
    }
    free(fill);
    return 0;
}

static int build_table_arrow(const calltree *t, const callgraph_build *b, strata_buffer *record,
                             strata_error *err) {
    size_t n = b->n_rows, m = n ? n : 1;
    uint64_t *address = malloc(m * sizeof *address);
    int64_t *line = malloc(m * sizeof *line), *start_line = malloc(m * sizeof *start_line);
    int64_t *cum = malloc(m * sizeof *cum), *cum_diff = malloc(m * sizeof *cum_diff);
    int64_t *flat = malloc(m * sizeof *flat), *flat_diff = malloc(m * sizeof *flat_diff);
    int32_t *caller_offsets = malloc((n + 1) * sizeof *caller_offsets);
    int32_t *callee_offsets = malloc((n + 1) * sizeof *callee_offsets);
    int64_t *callers = malloc((b->n_edges + 1) * sizeof *callers);
    int64_t *callees = malloc((b->n_edges + 1) * sizeof *callees);
    arrow_dict dicts[N_DICTS];
    bool ok = address && line && start_line && cum && cum_diff && flat && flat_diff &&
              caller_offsets && callee_offsets && callers && callees;
    for (int k = 0; k < N_DICTS; k++)
        ok = arrow_dict_init(&dicts[k], t, n) == 0 && ok;
    int rc = -1;
    if (!ok || edge_lists(b, true, caller_offsets, callers) != 0 ||
        edge_lists(b, false, callee_offsets, callees) != 0) {
        strata_error_oom(err);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        const calltree_frame_stats *r = &b->rows[i];
        uint32_t f = r->frame;
        const calltree_frame_location *loc = calltree_frame_loc(t, f);
        address[i] = loc->address;
        line[i] = loc->line;
        start_line[i] = calltree_frame_start_line(t, f);
        cum[i] = r->cumulative;
        flat[i] = r->flat;
        cum_diff[i] = t->diff ? r->cumulative - r->cumulative_base : 0;
        flat_diff[i] = t->diff ? r->flat - r->flat_base : 0;
        arrow_dicts_set_frame(dicts, t, i, f);
    }
    arrow_writer w;
    arrow_writer_init(&w);
    add_dict_column(&w, "mapping_file", &dicts[DICT_MAPPING], n);
    add_dict_column(&w, "mapping_build_id", &dicts[DICT_BUILD], n);
    arrow_add_int(&w, "location_address", 64, false, address, n);
    arrow_add_int(&w, "location_line", 64, true, line, n);
    arrow_add_int(&w, "function_startline", 64, true, start_line, n);
    add_dict_column(&w, "function_name", &dicts[DICT_NAME], n);
    add_dict_column(&w, "function_system_name", &dicts[DICT_SYSTEM], n);
    add_dict_column(&w, "function_file_name", &dicts[DICT_FILE], n);
    arrow_add_int(&w, "cumulative", 64, true, cum, n);
    arrow_add_int(&w, "cumulative_diff", 64, true, cum_diff, n);
    arrow_add_int(&w, "flat", 64, true, flat, n);
    arrow_add_int(&w, "flat_diff", 64, true, flat_diff, n);
    arrow_add_list(&w, "callers", caller_offsets, n, 64, true, callers);
    arrow_add_list(&w, "callees", callee_offsets, n, 64, true, callees);
    rc = arrow_writer_finish(&w, n, record, err);
    arrow_writer_free(&w);
out:
    free(address);
    free(line);
    free(start_line);
    free(cum);
    free(cum_diff);
    free(flat);
    free(flat_diff);
    free(caller_offsets);
    free(callee_offsets);
    free(callers);
    free(callees);
    for (int d = 0; d < N_DICTS; d++)
        arrow_dict_free(&dicts[d]);
    return rc;
}

static int encode_table_arrow(const calltree *t, const calltree_report_options *opts,
                              QueryResponse *resp, strata_buffer *out, strata_error *err) {
    callgraph_build b;
    memset(&b, 0, sizeof b);
    strata_buffer record = STRATA_BUFFER_INIT;
    int rc = callgraph_collect(t, opts, &b, err);
    if (rc == 0)
        rc = build_table_arrow(t, &b, &record, err);
    if (rc == 0) {
        Parca__Query__V1alpha1__TableArrow ta = PARCA__QUERY__V1ALPHA1__TABLE_ARROW__INIT;
        ta.record.data = record.data;
        ta.record.len = record.len;
        ta.unit = mutable_str(opts->unit != NULL ? opts->unit : "");
        resp->report_case = PARCA__QUERY__V1ALPHA1__QUERY_RESPONSE__REPORT_TABLE_ARROW;
        resp->table_arrow = &ta;
        rc = pack_response(resp, out, err);
    }
    strata_buffer_free(&record);
    callgraph_free(&b);
    return rc;
}

/* ---- source: a file's lines with the values spent on them ----
 *
 * A node is one line of one location, so summing per line over the nodes whose frame is in the
 * file of the build gives what Parca sums per sample: a line's cumulative adds each node's total
 * (a recursive stack through the line counts each time, as Parca counts each occurrence), and
 * its flat adds the self of nodes that are leaves, which is exactly their self. Lines past the
 * end of the text (a stale upload) are left out, as Parca does. */

static int encode_source(const calltree *t, const calltree_report_options *opts,
                         QueryResponse *resp, strata_buffer *out, strata_error *err) {
    const calltree_source *src = &opts->source;
    if (src->build_id == NULL || src->filename == NULL || src->text == NULL)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "REPORT_TYPE_SOURCE needs source_reference (build_id, filename) "
                                "and the uploaded source");
    size_t n_lines = 0;
    for (size_t i = 0; i < src->text_len; i++)
        n_lines += src->text[i] == '\n';
    int64_t *cumulative = calloc(n_lines + 1, sizeof *cumulative);
    int64_t *flat = calloc(n_lines + 1, sizeof *flat);
    uint8_t *in_file = calloc((size_t)t->n_frames + 1, 1); /* frame in the file of the build */
    int rc = cumulative == NULL || flat == NULL || in_file == NULL ? strata_error_oom(err) : 0;
    for (uint32_t f = 0; rc == 0 && f < t->n_frames; f++)
        in_file[f] = !calltree_frame_is_labels(t, f) &&
                     strcmp(calltree_frame_string(t, f, FRAME_BUILD_ID), src->build_id) == 0 &&
                     strcmp(calltree_frame_string(t, f, FRAME_FILENAME), src->filename) == 0;
    for (uint32_t n = 1; rc == 0 && n < t->n_nodes; n++) {
        uint32_t f = t->frame[n];
        int64_t line = calltree_frame_loc(t, f)->line;
        if (!in_file[f] || line < 1 || (uint64_t)line > n_lines)
            continue;
        cumulative[line - 1] += t->total[n];
        flat[line - 1] += t->self[n];
    }
    strata_buffer record = STRATA_BUFFER_INIT;
    if (rc == 0) {
        arrow_writer w;
        arrow_writer_init(&w);
        arrow_add_int(&w, "cumulative", 64, true, cumulative, n_lines);
        arrow_add_int(&w, "flat", 64, true, flat, n_lines);
        rc = arrow_writer_finish(&w, n_lines, &record, err);
        arrow_writer_free(&w);
    }
    if (rc == 0) {
        Parca__Query__V1alpha1__Source so = PARCA__QUERY__V1ALPHA1__SOURCE__INIT;
        so.record.data = record.data;
        so.record.len = record.len;
        so.source = (char *)src->text;
        so.unit = mutable_str(opts->unit != NULL ? opts->unit : "");
        resp->report_case = PARCA__QUERY__V1ALPHA1__QUERY_RESPONSE__REPORT_SOURCE;
        resp->source = &so;
        resp->total = t->total[0];
        rc = pack_response(resp, out, err);
    }
    strata_buffer_free(&record);
    free(cumulative);
    free(flat);
    free(in_file);
    return rc;
}

/* ---- profile metadata: the binaries the profile's frames come from, and opts' labels ---- */

static int compare_cstrings(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int encode_profile_metadata(const calltree *t, const calltree_report_options *opts,
                                   QueryResponse *resp, strata_buffer *out, strata_error *err) {
    char **files = malloc((t->n_frames + 1) * sizeof *files);
    if (files == NULL)
        return strata_error_oom(err);
    size_t n = 0;
    for (uint32_t f = 0; f < t->n_frames; f++) {
        const char *file = calltree_frame_string(t, f, FRAME_MAPPING_FILE);
        if (file[0] != '\0')
            files[n++] = mutable_str(file);
    }
    qsort(files, n, sizeof *files, compare_cstrings);
    size_t unique = 0;
    for (size_t i = 0; i < n; i++)
        if (unique == 0 || strcmp(files[unique - 1], files[i]) != 0)
            files[unique++] = files[i];
    Parca__Query__V1alpha1__ProfileMetadata md = PARCA__QUERY__V1ALPHA1__PROFILE_METADATA__INIT;
    md.mapping_files = files;
    md.n_mapping_files = unique;
    md.labels = (char **)opts->metadata_labels;
    md.n_labels = opts->n_metadata_labels;
    resp->report_case = PARCA__QUERY__V1ALPHA1__QUERY_RESPONSE__REPORT_PROFILE_METADATA;
    resp->profile_metadata = &md;
    int rc = pack_response(resp, out, err);
    free(files);
    return rc;
}

/* ---- pprof ----
 *
 * A faithful export: a node's frame is one line of a location, and a run of frames joined by
 * `inlined` (leaf first) is one Location. Functions, Mappings and Locations are de-duplicated
 * through small content-keyed tables (dedup_table), so a profile exported from an exact tree has
 * the locations, lines, addresses and mappings it was stored with. Each node remembers the
 * location that starts at it and the node above that location, so every sample's location list
 * is a walk of memoized hops. */

/* Content-addressed ids: hash -> 1-based id, confirmed against the stored key bytes; a genuine
 * 64-bit collision re-hashes with the next seed (as the tree's frame map does). */
typedef struct dedup_table {
    strata_u64_map map;
    strata_buffer keys; /* concatenated key bytes */
    size_t *key_offset; /* per id (0-based): offset into keys; entry n = end */
    size_t n, cap;      /* cap: key_offset's capacity, n + 1 entries used */
} dedup_table;

static void dedup_free(dedup_table *d) {
    strata_u64_map_free(&d->map);
    strata_buffer_free(&d->keys);
    free(d->key_offset);
}

static int dedup_init(dedup_table *d) {
    memset(d, 0, sizeof *d);
    if (STRATA_ARRAY_RESERVE(d->key_offset, d->cap, 65) != 0 ||
        strata_u64_map_init(&d->map, 64) != 0)
        return -1;
    d->key_offset[0] = 0;
    return 0;
}

/* The 1-based id of key, adding it when new (*added then true). */
static int dedup_find(dedup_table *d, const void *key, size_t len, uint64_t *id, bool *added) {
    *added = false;
    for (uint64_t seed = 0;; seed++) {
        uint64_t h = strata_hash_bytes(key, len, seed);
        h = h ? h : 1;
        bool inserted;
        uint64_t *slot = strata_u64_map_upsert(&d->map, h, d->n + 1, &inserted);
        if (slot == NULL)
            return -1;
        if (!inserted) {
            size_t at = d->key_offset[*slot - 1], n = d->key_offset[*slot] - at;
            if (n != len || memcmp(d->keys.data + at, key, len) != 0)
                continue;
            *id = *slot;
            return 0;
        }
        if (STRATA_ARRAY_RESERVE(d->key_offset, d->cap, d->n + 2) != 0)
            return -1;
        if (strata_buffer_append(&d->keys, key, len) != 0)
            return -1;
        d->n++;
        d->key_offset[d->n] = d->keys.len;
        *id = d->n;
        *added = true;
        return 0;
    }
}

typedef struct pprof_build {
    pprof_profile p;
    size_t cap_mappings, cap_locations, cap_lines, cap_functions, cap_strings;
    uint32_t *str_index;   /* tree string id -> pprof string index; 0 = unassigned (or "") */
    uint64_t *loc_of_node; /* node -> id of the location starting at it; 0 = not yet */
    uint32_t *after_node;  /* node -> the node above that location */
    uint32_t *depth;       /* node -> number of locations from it to the root */
    uint32_t *order;       /* nodes depth-first in sorted child order: ids and strings come out
                              the same however the tree was built (merge order, fan-out) */
    dedup_table functions, mappings, locations;
    uint64_t *scratch; /* a location's key under construction */
    size_t cap_scratch;
} pprof_build;

static void pprof_build_free(pprof_build *b) {
    free(b->p.sample_types);
    free(b->p.samples);
    free(b->p.sample_labels);
    free(b->p.sample_location_ids);
    free(b->p.sample_values);
    free(b->p.mappings);
    free(b->p.locations);
    free(b->p.lines);
    free(b->p.functions);
    free(b->p.strings);
    free(b->str_index);
    free(b->loc_of_node);
    free(b->after_node);
    free(b->depth);
    free(b->order);
    free(b->scratch);
    dedup_free(&b->functions);
    dedup_free(&b->mappings);
    dedup_free(&b->locations);
}

static int pprof_add_string(pprof_build *b, const char *s, size_t len, int64_t *index) {
    *index = 0;
    if (len == 0)
        return 0;
    if (STRATA_ARRAY_RESERVE(b->p.strings, b->cap_strings, b->p.n_strings + 1) != 0)
        return -1;
    pprof_string *e = &b->p.strings[b->p.n_strings];
    e->ptr = s;
    e->len = (uint32_t)len;
    *index = (int64_t)b->p.n_strings++;
    return 0;
}

static int pprof_tree_string(pprof_build *b, const calltree *t, uint32_t sid, int64_t *index) {
    if (b->str_index[sid] == 0 && str_len(t, sid) != 0) {
        int64_t i;
        if (pprof_add_string(b, calltree_string(t, sid), str_len(t, sid), &i) != 0)
            return -1;
        b->str_index[sid] = (uint32_t)i;
    }
    *index = b->str_index[sid];
    return 0;
}

static int pprof_cstring(pprof_build *b, const char *s, int64_t *index) {
    return pprof_add_string(b, s != NULL ? s : "", s != NULL ? strlen(s) : 0, index);
}

/* The pprof Function id of frame f: one per distinct (name, system name, file, start line). */
static int pprof_function_id(const calltree *t, pprof_build *b, uint32_t f, uint64_t *id) {
    struct {
        uint32_t name, system_name, filename, pad;
        int64_t start_line;
    } key = {calltree_frame_sid(t, f, FRAME_NAME), calltree_frame_sid(t, f, FRAME_SYSTEM_NAME),
             calltree_frame_sid(t, f, FRAME_FILENAME), 0, calltree_frame_start_line(t, f)};
    bool added;
    if (dedup_find(&b->functions, &key, sizeof key, id, &added) != 0)
        return -1;
    if (!added)
        return 0;
    if (STRATA_ARRAY_RESERVE(b->p.functions, b->cap_functions, b->p.n_functions + 1) != 0)
        return -1;
    pprof_function *fn = &b->p.functions[b->p.n_functions++];
    memset(fn, 0, sizeof *fn);
    fn->id = *id;
    fn->start_line = key.start_line;
    return pprof_tree_string(b, t, key.name, &fn->name) != 0 ||
                   pprof_tree_string(b, t, key.system_name, &fn->system_name) != 0 ||
                   pprof_tree_string(b, t, key.filename, &fn->filename) != 0
               ? -1
               : 0;
}

/* The pprof Mapping id of frame f (0: none): one per distinct file, build id, range and flags. */
static int pprof_mapping_id(const calltree *t, pprof_build *b, uint32_t f, uint64_t *id) {
    const calltree_frame_location *fl = calltree_frame_loc(t, f);
    struct {
        uint32_t file, build_id, flags, pad;
        uint64_t start, limit, offset;
    } key = {calltree_frame_sid(t, f, FRAME_MAPPING_FILE),
             calltree_frame_sid(t, f, FRAME_BUILD_ID),
             fl->mapping_flags,
             0,
             fl->memory_start,
             fl->memory_limit,
             fl->file_offset};
    *id = 0;
    if (str_len(t, key.file) == 0 && str_len(t, key.build_id) == 0 && key.start == 0 &&
        key.limit == 0)
        return 0;
    bool added;
    if (dedup_find(&b->mappings, &key, sizeof key, id, &added) != 0)
        return -1;
    if (!added)
        return 0;
    if (STRATA_ARRAY_RESERVE(b->p.mappings, b->cap_mappings, b->p.n_mappings + 1) != 0)
        return -1;
    pprof_mapping *m = &b->p.mappings[b->p.n_mappings++];
    memset(m, 0, sizeof *m);
    m->id = *id;
    m->memory_start = key.start;
    m->memory_limit = key.limit;
    m->file_offset = key.offset;
    m->has_functions = (key.flags & CALLTREE_MAPPING_HAS_FUNCTIONS) != 0;
    m->has_filenames = (key.flags & CALLTREE_MAPPING_HAS_FILENAMES) != 0;
    m->has_line_numbers = (key.flags & CALLTREE_MAPPING_HAS_LINE_NUMBERS) != 0;
    m->has_inline_frames = (key.flags & CALLTREE_MAPPING_HAS_INLINE_FRAMES) != 0;
    return pprof_tree_string(b, t, key.file, &m->filename) != 0 ||
                   pprof_tree_string(b, t, key.build_id, &m->build_id) != 0
               ? -1
               : 0;
}

static int scratch_push(pprof_build *b, size_t *n, uint64_t v) {
    if (STRATA_ARRAY_RESERVE(b->scratch, b->cap_scratch, *n + 1) != 0)
        return -1;
    b->scratch[(*n)++] = v;
    return 0;
}

/* The location that starts at node v: v and the frames it is inlined into. Its key is (mapping,
 * address, folded, then function id and line per frame); a new one is appended to the profile. */
static int pprof_location_at(const calltree *t, pprof_build *b, uint32_t v) {
    uint32_t f = t->frame[v];
    const calltree_frame_location *fl = calltree_frame_loc(t, f);
    uint64_t mapping;
    if (pprof_mapping_id(t, b, f, &mapping) != 0)
        return -1;
    size_t n = 0;
    if (scratch_push(b, &n, mapping) != 0 || scratch_push(b, &n, fl->address) != 0 ||
        scratch_push(b, &n, fl->folded) != 0)
        return -1;
    uint32_t u = v;
    for (;;) { /* the location's lines, innermost first */
        uint32_t uf = t->frame[u];
        const calltree_frame_location *ul = calltree_frame_loc(t, uf);
        if (!ul->lineless) {
            uint64_t fn;
            int64_t line = ul->line != 0 ? ul->line : calltree_frame_start_line(t, uf);
            if (pprof_function_id(t, b, uf, &fn) != 0 || scratch_push(b, &n, fn) != 0 ||
                scratch_push(b, &n, (uint64_t)line) != 0)
                return -1;
        }
        uint32_t up = t->parent[u];
        if (!ul->inlined || up == CALLTREE_ROOT || calltree_frame_is_labels(t, t->frame[up]))
            break;
        u = up;
    }
    b->after_node[v] = t->parent[u];
    bool added;
    uint64_t id;
    if (dedup_find(&b->locations, b->scratch, n * sizeof *b->scratch, &id, &added) != 0)
        return -1;
    b->loc_of_node[v] = id;
    if (!added)
        return 0;
    if (STRATA_ARRAY_RESERVE(b->p.locations, b->cap_locations, b->p.n_locations + 1) != 0)
        return -1;
    pprof_location *loc = &b->p.locations[b->p.n_locations++];
    memset(loc, 0, sizeof *loc);
    loc->id = id;
    loc->mapping_id = mapping;
    loc->address = fl->address;
    loc->is_folded = fl->folded;
    loc->line_offset = (uint32_t)b->p.n_lines;
    for (size_t i = 3; i + 1 < n; i += 2) {
        if (STRATA_ARRAY_RESERVE(b->p.lines, b->cap_lines, b->p.n_lines + 1) != 0)
            return -1;
        pprof_line *line = &b->p.lines[b->p.n_lines++];
        line->function_id = b->scratch[i];
        line->line = (int64_t)b->scratch[i + 1];
        line->column = 0;
    }
    loc->line_count = (uint32_t)(b->p.n_lines - loc->line_offset);
    return 0;
}

/* The locations of every sample's path (B's), and each location start's depth in locations. A
 * node inside an inlined run is not a start for the samples that pass through it, so locations
 * are found by walking from each sample's leaf, memoized per start node. Node ids put ancestors
 * first, so depths are one forward pass. */
/* A label frame's node ends a sample's locations, as the root does: it is no location. */
static bool is_label_node(const calltree *t, uint32_t v) {
    return v != CALLTREE_ROOT && calltree_frame_is_labels(t, t->frame[v]);
}

/* The node where a sample's locations end: the root, or the label frame above its stack. */
static uint32_t sample_top(const calltree *t, const pprof_build *b, uint32_t v) {
    while (v != CALLTREE_ROOT && !is_label_node(t, v))
        v = b->after_node[v];
    return v;
}

static int pprof_add_locations(const calltree *t, pprof_build *b, size_t *n_samples, size_t *n_ids,
                               size_t *n_labels) {
    *n_samples = *n_ids = *n_labels = 0;
    b->after_node[CALLTREE_ROOT] = CALLTREE_ROOT;
    for (size_t k = 1; k < t->n_nodes; k++) {
        uint32_t i = b->order[k];
        if (t->self[i] == 0)
            continue;
        for (uint32_t v = (uint32_t)i;
             v != CALLTREE_ROOT && !is_label_node(t, v) && b->loc_of_node[v] == 0;
             v = b->after_node[v])
            if (pprof_location_at(t, b, v) != 0)
                return -1;
    }
    for (size_t k = 1; k < t->n_nodes; k++) { /* depth stays 0 at the root and label frames */
        uint32_t v = b->order[k];
        if (b->loc_of_node[v] != 0)
            b->depth[v] = b->depth[b->after_node[v]] + 1;
    }
    for (size_t k = 0; k < t->n_nodes; k++) {
        uint32_t v = b->order[k];
        if (t->self[v] == 0)
            continue;
        (*n_samples)++;
        *n_ids += v == CALLTREE_ROOT ? 0 : b->depth[v];
        uint32_t top = sample_top(t, b, (uint32_t)v);
        *n_labels += top == CALLTREE_ROOT ? 0 : calltree_frame_label_count(t, t->frame[top]);
    }
    return 0;
}

/* The labels of the label frame at node top, as the sample's pprof labels. */
static int pprof_add_sample_labels(const calltree *t, pprof_build *b, uint32_t top,
                                   pprof_sample *s) {
    s->label_offset = (uint32_t)b->p.n_sample_labels;
    s->label_count = 0;
    if (top == CALLTREE_ROOT)
        return 0;
    const calltree_frame_extra *x = &t->frame_extra[t->frame[top]];
    for (uint32_t i = 0; i < x->label_count; i++) {
        pprof_label *l = &b->p.sample_labels[b->p.n_sample_labels++];
        memset(l, 0, sizeof *l);
        if (pprof_tree_string(b, t, t->label_words[x->label_first + 2 * i], &l->key) != 0 ||
            pprof_tree_string(b, t, t->label_words[x->label_first + 2 * i + 1], &l->str) != 0)
            return -1;
        s->label_count++;
    }
    return 0;
}

static int pprof_add_samples(const calltree *t, pprof_build *b) {
    size_t ids = 0;
    for (size_t k = 0; k < t->n_nodes; k++) {
        uint32_t i = b->order[k];
        if (t->self[i] == 0)
            continue;
        pprof_sample *s = &b->p.samples[b->p.n_samples];
        memset(s, 0, sizeof *s);
        s->location_offset = (uint32_t)ids;
        s->location_count = b->depth[i];
        s->value_offset = (uint32_t)b->p.n_samples;
        uint32_t v = (uint32_t)i;
        for (; v != CALLTREE_ROOT && !is_label_node(t, v); v = b->after_node[v])
            b->p.sample_location_ids[ids++] = b->loc_of_node[v];
        if (pprof_add_sample_labels(t, b, v, s) != 0)
            return -1;
        b->p.sample_values[b->p.n_samples++] = t->self[i];
    }
    b->p.n_sample_location_ids = ids;
    return 0;
}

static int pprof_fill_meta(pprof_build *b, const calltree_pprof_meta *m) {
    b->p.n_sample_types = 1;
    b->p.period = m->period;
    b->p.time_nanos = m->time_nanos;
    b->p.duration_nanos = m->duration_nanos;
    return pprof_cstring(b, m->sample_type, &b->p.sample_types[0].type) != 0 ||
                   pprof_cstring(b, m->sample_unit, &b->p.sample_types[0].unit) != 0 ||
                   pprof_cstring(b, m->period_type, &b->p.period_type.type) != 0 ||
                   pprof_cstring(b, m->period_unit, &b->p.period_type.unit) != 0
               ? -1
               : 0;
}

/* order[0..n_nodes): the nodes depth-first, children in their sorted order (finalized tree). The
 * stack of pending nodes is order's own tail, filled backwards: it never meets the head. */
static void sorted_preorder(const calltree *t, uint32_t *order) {
    size_t n = t->n_nodes, head = 0, top = n;
    order[--top] = CALLTREE_ROOT;
    while (top < n) {
        uint32_t v = order[top++];
        order[head++] = v;
        size_t c = calltree_child_count(t, v);
        for (size_t i = c; i > 0; i--)
            order[--top] = calltree_child_at(t, v, i - 1);
    }
}

static int build_pprof(const calltree *t, const calltree_report_options *opts, pprof_build *b) {
    memset(b, 0, sizeof *b);
    if (dedup_init(&b->functions) != 0 || dedup_init(&b->mappings) != 0 ||
        dedup_init(&b->locations) != 0)
        return -1;
    b->str_index = calloc(t->strings.count ? t->strings.count : 1, sizeof *b->str_index);
    b->loc_of_node = calloc(t->n_nodes, sizeof *b->loc_of_node);
    b->after_node = malloc(t->n_nodes * sizeof *b->after_node);
    b->depth = calloc(t->n_nodes, sizeof *b->depth);
    b->order = malloc(t->n_nodes * sizeof *b->order);
    b->p.sample_types = malloc(sizeof *b->p.sample_types);
    if (b->str_index == NULL || b->loc_of_node == NULL || b->after_node == NULL ||
        b->depth == NULL || b->order == NULL || b->p.sample_types == NULL)
        return -1;
    sorted_preorder(t, b->order);
    if (STRATA_ARRAY_RESERVE(b->p.strings, b->cap_strings, b->p.n_strings + 1) != 0)
        return -1;
    b->p.strings[0].ptr = ""; /* pprof's string_table[0] is always "" */
    b->p.strings[0].len = 0;
    b->p.n_strings = 1;
    if (pprof_fill_meta(b, &opts->pprof) != 0)
        return -1;
    size_t n_samples, n_ids, n_labels;
    if (pprof_add_locations(t, b, &n_samples, &n_ids, &n_labels) != 0 || n_ids > UINT32_MAX ||
        n_samples > UINT32_MAX || n_labels > UINT32_MAX)
        return -1;
    b->p.samples = malloc((n_samples ? n_samples : 1) * sizeof *b->p.samples);
    b->p.sample_location_ids = malloc((n_ids ? n_ids : 1) * sizeof *b->p.sample_location_ids);
    b->p.sample_values = malloc((n_samples ? n_samples : 1) * sizeof *b->p.sample_values);
    b->p.sample_labels = malloc((n_labels ? n_labels : 1) * sizeof *b->p.sample_labels);
    if (b->p.samples == NULL || b->p.sample_location_ids == NULL || b->p.sample_values == NULL ||
        b->p.sample_labels == NULL)
        return -1;
    return pprof_add_samples(t, b);
}

int calltree_encode_pprof(const calltree *t, const calltree_report_options *opts, bool gzip,
                          strata_buffer *out, strata_error *err) {
    if (calltree_require_finalized(t, err) != 0 || calltree_validate_options(opts, err) != 0)
        return -1;
    pprof_build b;
    int rc =
        build_pprof(t, opts, &b) != 0 ? strata_error_oom(err) : pprof_encode(&b.p, gzip, out, err);
    pprof_build_free(&b);
    return rc;
}

static int encode_pprof(const calltree *t, const calltree_report_options *opts, QueryResponse *resp,
                        strata_buffer *out, strata_error *err) {
    strata_buffer gz = STRATA_BUFFER_INIT;
    int rc = -1;
    if (calltree_encode_pprof(t, opts, true, &gz, err) != 0)
        goto out;
    resp->report_case = PARCA__QUERY__V1ALPHA1__QUERY_RESPONSE__REPORT_PPROF;
    resp->pprof.data = gz.data;
    resp->pprof.len = gz.len;
    rc = pack_response(resp, out, err);
out:
    strata_buffer_free(&gz);
    return rc;
}

/* ---- entry point ---- */

static const char *report_type_name(Parca__Query__V1alpha1__QueryRequest__ReportType type) {
    const ProtobufCEnumValue *v = protobuf_c_enum_descriptor_get_value(
        &parca__query__v1alpha1__query_request__report_type__descriptor, type);
    return v != NULL ? v->name : "unknown";
}

int calltree_encode_query_response(const calltree *t,
                                   Parca__Query__V1alpha1__QueryRequest__ReportType type,
                                   const calltree_report_options *opts, strata_buffer *out,
                                   strata_error *err) {
    if (calltree_require_finalized(t, err) != 0 || calltree_validate_options(opts, err) != 0)
        return -1;
    QueryResponse resp = PARCA__QUERY__V1ALPHA1__QUERY_RESPONSE__INIT;
    resp.total = opts->total;
    resp.filtered = opts->filtered;
    switch (type) {
        case PARCA__QUERY__V1ALPHA1__QUERY_REQUEST__REPORT_TYPE__REPORT_TYPE_FLAMEGRAPH_UNSPECIFIED:
        case PARCA__QUERY__V1ALPHA1__QUERY_REQUEST__REPORT_TYPE__REPORT_TYPE_FLAMEGRAPH_TABLE:
            return encode_flamegraph(t, opts, &resp, out, err);
        case PARCA__QUERY__V1ALPHA1__QUERY_REQUEST__REPORT_TYPE__REPORT_TYPE_TOP:
            return encode_top(t, opts, &resp, out, err);
        case PARCA__QUERY__V1ALPHA1__QUERY_REQUEST__REPORT_TYPE__REPORT_TYPE_PPROF:
            return encode_pprof(t, opts, &resp, out, err);
        case PARCA__QUERY__V1ALPHA1__QUERY_REQUEST__REPORT_TYPE__REPORT_TYPE_FLAMEGRAPH_ARROW:
        case PARCA__QUERY__V1ALPHA1__QUERY_REQUEST__REPORT_TYPE__REPORT_TYPE_FLAMECHART:
            return encode_flamegraph_arrow(t, opts, &resp, out, err);
        case PARCA__QUERY__V1ALPHA1__QUERY_REQUEST__REPORT_TYPE__REPORT_TYPE_TABLE_ARROW:
            return encode_table_arrow(t, opts, &resp, out, err);
        case PARCA__QUERY__V1ALPHA1__QUERY_REQUEST__REPORT_TYPE__REPORT_TYPE_CALLGRAPH:
            return encode_callgraph(t, opts, &resp, out, err);
        case PARCA__QUERY__V1ALPHA1__QUERY_REQUEST__REPORT_TYPE__REPORT_TYPE_PROFILE_METADATA:
            return encode_profile_metadata(t, opts, &resp, out, err);
        case PARCA__QUERY__V1ALPHA1__QUERY_REQUEST__REPORT_TYPE__REPORT_TYPE_SOURCE:
            return encode_source(t, opts, &resp, out, err);
        default:
            return strata_error_set(err, STRATA_UNIMPLEMENTED,
                                    "report type %s (%d) is not implemented",
                                    report_type_name(type), (int)type);
    }
}
