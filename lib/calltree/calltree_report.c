/*
 * calltree_report.c - parca.query.v1alpha1.QueryResponse from a finalized call tree: FLAMEGRAPH
 * (table form), TOP and PPROF. See calltree.h for what each report contains.
 *
 * Messages are assembled as protobuf-c structs in a handful of arrays sized up front (one per
 * message type, never one allocation per node) and packed once into the caller's buffer.
 * Strings point into the tree's intern arena, which outlives the call.
 */
#include "calltree/calltree_internal.h"
#include "pprof/pprof.h"

#include <stdlib.h>
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
    fn->start_line = t->frame_start_line[f];
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
    line->line = t->frame_start_line[f];
    line->function_index = (uint32_t)(k + 1);
    s->line_ptrs[k] = line;
    PbLocation *loc = &s->locations[k];
    parca__metastore__v1alpha1__location__init(loc);
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
    if (calltree_select(t, t->total, opts->node_trim_threshold, 0, &sel, err) != 0)
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
    top.reported = top.total = n > INT32_MAX ? INT32_MAX : (int32_t)n;
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

/* ---- pprof ---- */

typedef struct pprof_build {
    pprof_profile p;
    uint32_t *str_index; /* tree string id -> pprof string index; 0 = unassigned (or "") */
    uint32_t *frame_id;  /* frame -> pprof function / location id; 0 = unused */
    bool *used;          /* node lies on the path of a sample */
    uint32_t *depth;     /* node depth */
    strata_u64_map mapping_ids;
} pprof_build;

static void pprof_build_free(pprof_build *b) {
    free(b->p.sample_types);
    free(b->p.samples);
    free(b->p.sample_location_ids);
    free(b->p.sample_values);
    free(b->p.mappings);
    free(b->p.locations);
    free(b->p.lines);
    free(b->p.functions);
    free(b->p.strings);
    free(b->str_index);
    free(b->frame_id);
    free(b->used);
    free(b->depth);
    strata_u64_map_free(&b->mapping_ids);
}

static int64_t pprof_add_string(pprof_build *b, const char *s, size_t len) {
    if (len == 0)
        return 0;
    pprof_string *e = &b->p.strings[b->p.n_strings];
    e->ptr = s;
    e->len = (uint32_t)len;
    return (int64_t)b->p.n_strings++;
}

static int64_t pprof_tree_string(pprof_build *b, const calltree *t, uint32_t sid) {
    if (b->str_index[sid] == 0 && str_len(t, sid) != 0)
        b->str_index[sid] = (uint32_t)pprof_add_string(b, calltree_string(t, sid), str_len(t, sid));
    return b->str_index[sid];
}

static int64_t pprof_cstring(pprof_build *b, const char *s) {
    return s != NULL ? pprof_add_string(b, s, strlen(s)) : 0;
}

/* Marks nodes on sample paths, counts samples and location ids. */
static void pprof_mark_used(const calltree *t, pprof_build *b, size_t *n_samples, size_t *n_ids) {
    *n_samples = *n_ids = 0;
    b->depth[CALLTREE_ROOT] = 0;
    for (size_t i = 1; i < t->n_nodes; i++)
        b->depth[i] = b->depth[t->parent[i]] + 1;
    for (size_t i = 0; i < t->n_nodes; i++) {
        if (t->self[i] == 0)
            continue;
        (*n_samples)++;
        *n_ids += b->depth[i];
        for (uint32_t v = (uint32_t)i; v != CALLTREE_ROOT && !b->used[v]; v = t->parent[v])
            b->used[v] = true;
    }
}

static int pprof_alloc(const calltree *t, pprof_build *b, size_t n_samples, size_t n_ids) {
    size_t nf = t->n_frames ? t->n_frames : 1;
    b->p.sample_types = malloc(sizeof *b->p.sample_types);
    b->p.samples = malloc((n_samples ? n_samples : 1) * sizeof *b->p.samples);
    b->p.sample_location_ids = malloc((n_ids ? n_ids : 1) * sizeof *b->p.sample_location_ids);
    b->p.sample_values = malloc((n_samples ? n_samples : 1) * sizeof *b->p.sample_values);
    b->p.mappings = malloc(nf * sizeof *b->p.mappings);
    b->p.locations = malloc(nf * sizeof *b->p.locations);
    b->p.lines = malloc(nf * sizeof *b->p.lines);
    b->p.functions = malloc(nf * sizeof *b->p.functions);
    b->p.strings = malloc((5 + FRAME_NSTR * nf) * sizeof *b->p.strings);
    return b->p.sample_types && b->p.samples && b->p.sample_location_ids && b->p.sample_values &&
                   b->p.mappings && b->p.locations && b->p.lines && b->p.functions && b->p.strings
               ? 0
               : -1;
}

static int pprof_mapping_id(const calltree *t, pprof_build *b, uint32_t f, uint64_t *id) {
    uint32_t file = calltree_frame_sid(t, f, FRAME_MAPPING_FILE),
             build = calltree_frame_sid(t, f, FRAME_BUILD_ID);
    *id = 0;
    if (str_len(t, file) == 0 && str_len(t, build) == 0)
        return 0;
    bool inserted;
    uint64_t *slot = strata_u64_map_upsert(&b->mapping_ids, ((uint64_t)file << 32 | build) + 1,
                                           b->p.n_mappings + 1, &inserted);
    if (slot == NULL)
        return -1;
    if (inserted) {
        pprof_mapping *m = &b->p.mappings[b->p.n_mappings++];
        memset(m, 0, sizeof *m);
        m->id = *slot;
        m->filename = pprof_tree_string(b, t, file);
        m->build_id = pprof_tree_string(b, t, build);
        m->has_functions = true;
    }
    *id = *slot;
    return 0;
}

/* One function and one location per frame on a sample path, in node order. */
static int pprof_add_frames(const calltree *t, pprof_build *b) {
    for (size_t i = 1; i < t->n_nodes; i++) {
        uint32_t f = t->frame[i];
        if (!b->used[i] || b->frame_id[f] != 0)
            continue;
        uint64_t id = b->p.n_functions + 1;
        pprof_function *fn = &b->p.functions[b->p.n_functions++];
        fn->id = id;
        fn->name = pprof_tree_string(b, t, calltree_frame_sid(t, f, FRAME_NAME));
        fn->system_name = pprof_tree_string(b, t, calltree_frame_sid(t, f, FRAME_SYSTEM_NAME));
        fn->filename = pprof_tree_string(b, t, calltree_frame_sid(t, f, FRAME_FILENAME));
        fn->start_line = t->frame_start_line[f];
        pprof_location *loc = &b->p.locations[b->p.n_locations++];
        memset(loc, 0, sizeof *loc);
        loc->id = id;
        if (pprof_mapping_id(t, b, f, &loc->mapping_id) != 0)
            return -1;
        loc->line_offset = (uint32_t)b->p.n_lines;
        loc->line_count = 1;
        pprof_line *line = &b->p.lines[b->p.n_lines++];
        line->function_id = id;
        line->line = t->frame_start_line[f];
        line->column = 0;
        b->frame_id[f] = (uint32_t)id;
    }
    return 0;
}

static void pprof_add_samples(const calltree *t, pprof_build *b) {
    size_t ids = 0;
    for (size_t i = 0; i < t->n_nodes; i++) {
        if (t->self[i] == 0)
            continue;
        pprof_sample *s = &b->p.samples[b->p.n_samples];
        memset(s, 0, sizeof *s);
        s->location_offset = (uint32_t)ids;
        s->location_count = b->depth[i];
        s->value_offset = (uint32_t)b->p.n_samples;
        for (uint32_t v = (uint32_t)i; v != CALLTREE_ROOT; v = t->parent[v])
            b->p.sample_location_ids[ids++] = b->frame_id[t->frame[v]];
        b->p.sample_values[b->p.n_samples++] = t->self[i];
    }
    b->p.n_sample_location_ids = ids;
}

static void pprof_fill_meta(pprof_build *b, const calltree_pprof_meta *m) {
    b->p.n_sample_types = 1;
    b->p.sample_types[0].type = pprof_cstring(b, m->sample_type);
    b->p.sample_types[0].unit = pprof_cstring(b, m->sample_unit);
    b->p.period_type.type = pprof_cstring(b, m->period_type);
    b->p.period_type.unit = pprof_cstring(b, m->period_unit);
    b->p.period = m->period;
    b->p.time_nanos = m->time_nanos;
    b->p.duration_nanos = m->duration_nanos;
}

static int build_pprof(const calltree *t, const calltree_report_options *opts, pprof_build *b) {
    memset(b, 0, sizeof *b);
    b->str_index = calloc(t->strings.count ? t->strings.count : 1, sizeof *b->str_index);
    b->frame_id = calloc(t->n_frames ? t->n_frames : 1, sizeof *b->frame_id);
    b->used = calloc(t->n_nodes, sizeof *b->used);
    b->depth = malloc(t->n_nodes * sizeof *b->depth);
    if (b->str_index == NULL || b->frame_id == NULL || b->used == NULL || b->depth == NULL ||
        strata_u64_map_init(&b->mapping_ids, 64) != 0)
        return -1;
    size_t n_samples, n_ids;
    pprof_mark_used(t, b, &n_samples, &n_ids);
    if (n_ids > UINT32_MAX || n_samples > UINT32_MAX || pprof_alloc(t, b, n_samples, n_ids) != 0)
        return -1;
    b->p.strings[0].ptr = ""; /* pprof's string_table[0] is always "" */
    b->p.strings[0].len = 0;
    b->p.n_strings = 1;
    pprof_fill_meta(b, &opts->pprof);
    if (pprof_add_frames(t, b) != 0)
        return -1;
    pprof_add_samples(t, b);
    return 0;
}

static int encode_pprof(const calltree *t, const calltree_report_options *opts, QueryResponse *resp,
                        strata_buffer *out, strata_error *err) {
    pprof_build b;
    strata_buffer gz = STRATA_BUFFER_INIT;
    int rc = -1;
    if (build_pprof(t, opts, &b) != 0) {
        strata_error_oom(err);
        goto out;
    }
    if (pprof_encode(&b.p, true, &gz, err) != 0)
        goto out;
    resp->report_case = PARCA__QUERY__V1ALPHA1__QUERY_RESPONSE__REPORT_PPROF;
    resp->pprof.data = gz.data;
    resp->pprof.len = gz.len;
    rc = pack_response(resp, out, err);
out:
    pprof_build_free(&b);
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
        default:
            return strata_error_set(err, STRATA_UNIMPLEMENTED,
                                    "report type %s (%d) is not implemented",
                                    report_type_name(type), (int)type);
    }
}
