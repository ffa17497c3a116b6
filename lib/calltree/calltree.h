/*
 * calltree.h - the merged call tree every merge and diff query builds, and the reports rendered
 * from it (Parca QueryResponse: flame graph, top, pprof; JSON: Pyroscope flamebearer and a table).
 *
 * Design.
 * - A frame is one line of one location: function (name, system name, file, start line), the
 *   call site's line, the location's address and mapping (file, build id, range, offset, flags),
 *   and whether it is inlined into its caller (the next frame towards the root, same location).
 *   Which of those fields make a frame's identity is the tree's group-by (Parca's `group_by`),
 *   set before the first frame: CALLTREE_GROUP_FUNCTION_NAME (the query default, as Parca) merges
 *   every frame of one function name, whatever binary or build it came from, so two versions of a
 *   program line up by function; CALLTREE_GROUP_EXACT (the library default) keeps every location
 *   apart, which the PPROF report needs. A field outside the identity keeps the value all merged
 *   occurrences agree on, and is blanked (""/0) where they disagree, so the result does not depend
 *   on the order blocks were merged in. Strings are copied once into the tree's strata_intern
 *   arena, so callers may pass views into block pages that are released afterwards. Frame ids are
 *   dense, 0..n-1, in first-seen order.
 * - pprof sample labels (Parca's `group_by` `labels.<name>`, or bare `labels` for every sample
 *   label, as Parca before v0.23) put a *label frame* above the stacks: the querier inserts each
 *   sample's stack under the label frame of its grouped labels, one frame per distinct
 *   combination of them, named `name="value"` (pairs sorted by name, joined by ", "), as Parca's
 *   flame graph puts one labels node per combination; a sample with none of the grouped labels
 *   is not grouped: its stack starts at the root, as in Parca. A label frame is an ordinary frame
 *   of the tree in every report (its cumulative is the combination's share; TOP and the table list
 *   it with flat 0), identified by its labels whatever the group-by of code frames, and the PPROF
 *   report turns it back into the sample labels of the samples below it.
 * - Nodes form a prefix tree of frames. Node 0 is the root (no frame). calltree_child() finds or
 *   creates the child of (parent, frame) through one strata_u64_map keyed by the exact pair, so a
 *   node costs a few array slots and no malloc of its own. Nodes are kept in creation order, which
 *   puts every parent before its children: cumulative totals are one reverse pass.
 * - Each node carries two self values: `self` for the profile (side B, the one shown) and
 *   `self_base` for the diff base (side A). A merge or single query only uses `self`.
 * - calltree_finalize() computes cumulative totals for both sides and child lists sorted by frame
 *   (name, then system name, file, mapping file, build id, address, line), so every report is
 *   deterministic. It
 *   may be called again after more adds, merges or scaling; reports require a finalized tree and
 *   fail with FAILED_PRECONDITION otherwise.
 *
 * Diff semantics (as Parca). A node's cumulative is B's cumulative and its diff is B - A. In
 * relative mode (Parca's default) the side with the smaller root total is scaled up to the larger
 * before differencing; absolute mode compares raw values. calltree_apply_diff_mode() does this.
 *
 * Trimming. node_trim_threshold is a percentage: a child whose cumulative is <= its parent's
 * cumulative * threshold / 100 is dropped with its subtree and its cumulative added to `trimmed`
 * (threshold 0 keeps everything). Trimming weighs nodes by B's cumulative in the Parca reports; the
 * flamebearer weighs a diff tree by B + A (so nodes present only in A stay visible), a plain tree
 * by B. max_nodes (0 = unlimited) then keeps at most max_nodes nodes besides the
 * root: nodes whose weight is not above the (max_nodes+1)-th largest weight are dropped.
 *
 * Not thread-safe: one tree per thread; partial trees are combined with calltree_merge().
 * Sums are plain int64 additions: callers keep totals within int64 (profile values always are).
 * The FLAMEGRAPH report inlines Function (and Mapping) in every node's meta besides the tables, so
 * it costs about 145 bytes per node; use node_trim_threshold for large trees. Limits: fewer than
 * 2^32-1 nodes and frames (adds past that fail with RESOURCE_EXHAUSTED).
 */
#ifndef STRATA_CALLTREE_H
#define STRATA_CALLTREE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buffer.h"
#include "common/error.h"
#include "json/json.h"
#include "parca/query/v1alpha1/query.pb-c.h"
#include "strata/querier/v1/peer.pb-c.h"

#define CALLTREE_ROOT ((uint32_t)0)

typedef struct calltree calltree;

/* A byte string view; ptr may be NULL when len is 0. Need not be NUL-terminated. */
typedef struct calltree_str {
    const char *ptr;
    size_t len;
} calltree_str;

/* Builds a view of a NUL-terminated string (NULL gives ""). */
calltree_str calltree_cstr(const char *s);

/* The location side of a frame: where the code is. All zero for a frame without an address. */
typedef struct calltree_frame_location {
    uint64_t address;
    int64_t line;  /* the call site's line (0 when unknown) */
    bool inlined;  /* inlined into the next frame towards the root (same location) */
    bool folded;   /* pprof Location.is_folded */
    bool lineless; /* a location without lines: the frame's name is its address ("0x401234"), and
                      the PPROF report gives the location no Line */
    uint64_t memory_start; /* the mapping's range, offset and flags (pprof Mapping) */
    uint64_t memory_limit;
    uint64_t file_offset;
    uint32_t mapping_flags; /* CALLTREE_MAPPING_HAS_* */
} calltree_frame_location;

#define CALLTREE_MAPPING_HAS_FUNCTIONS 1u
#define CALLTREE_MAPPING_HAS_FILENAMES 2u
#define CALLTREE_MAPPING_HAS_LINE_NUMBERS 4u
#define CALLTREE_MAPPING_HAS_INLINE_FRAMES 8u

/* What the querier knows about one frame. */
typedef struct calltree_frame_desc {
    calltree_str name;
    calltree_str system_name;
    calltree_str filename;
    calltree_str mapping_file;
    calltree_str build_id;
    int64_t start_line;
    calltree_frame_location loc;
} calltree_frame_desc;

/* A frame as stored: NUL-terminated strings owned by the tree. */
typedef struct calltree_frame {
    const char *name;
    const char *system_name;
    const char *filename;
    const char *mapping_file;
    const char *build_id;
    int64_t start_line;
    calltree_frame_location loc;
} calltree_frame;

/* Group-by fields (Parca's GroupBy.fields). A frame's identity is the union of the chosen fields.
 */
/* "function_name": the function's name. */
#define CALLTREE_GROUP_FUNCTION_NAME 1u
/* "function_file_name": the function's source file. */
#define CALLTREE_GROUP_FILE_NAME 2u
/* "location_address": the exact location (address, mapping, lines, inlining). */
#define CALLTREE_GROUP_LOCATION 4u
/* "mapping_file": the binary. */
#define CALLTREE_GROUP_MAPPING_FILE 8u
/* Every field: nothing that differs is merged. */
#define CALLTREE_GROUP_EXACT 15u
#define CALLTREE_GROUP_DEFAULT CALLTREE_GROUP_FUNCTION_NAME

/* Parca's group_by, parsed: which fields make a code frame's identity, and which pprof sample
 * labels put label frames above the stacks. */
typedef struct calltree_grouping {
    unsigned mask;   /* CALLTREE_GROUP_*, never 0 (function_name when only labels are asked) */
    bool all_labels; /* bare "labels": every pprof sample label of a sample */
    char **labels;   /* "labels.<name>": the names, in request order, each once */
    size_t n_labels, cap_labels;
    /* "timestamp": each profile's samples go under a time frame (calltree_intern_time_frame) for
     * its timestamp, and the FLAMEGRAPH_ARROW report lays the tree out as a flame chart. */
    bool by_timestamp;
} calltree_grouping;

/* Parses Parca's group_by field names (fields[0..n)) into *out (overwritten; free it with
 * calltree_grouping_free); n == 0 gives the default (function_name); `timestamp` sets
 * by_timestamp. `labels.<name>` groups by
 * one label (a pprof sample label, or a series label: Parca has one namespace), bare `labels` by
 * every sample label. Unknown names, and `labels.` with an empty name, are INVALID_ARGUMENT
 * naming the field. */
int calltree_group_by_parse(const char *const *fields, size_t n, calltree_grouping *out,
                            strata_error *err);
/* Parses a comma-separated list ("function_name,labels.endpoint"); NULL or "" gives the
 * default. */
int calltree_group_by_parse_list(const char *list, calltree_grouping *out, strata_error *err);
/* Adds label `name` (a copy) unless present; INVALID_ARGUMENT for "". */
int calltree_grouping_add_label(calltree_grouping *g, const char *name, strata_error *err);
/* True when g groups by any pprof label. */
bool calltree_grouping_has_labels(const calltree_grouping *g);
void calltree_grouping_free(calltree_grouping *g);

/* One node's values, valid after calltree_finalize() (self values are valid at any time). */
typedef struct calltree_node_values {
    int64_t self;       /* B */
    int64_t total;      /* B cumulative */
    int64_t self_base;  /* A */
    int64_t total_base; /* A cumulative */
} calltree_node_values;

/* Lifecycle. expected_nodes sizes the tables (0 for a default); they grow as needed. A new tree
 * groups by CALLTREE_GROUP_EXACT. */
int calltree_create(calltree **out, size_t expected_nodes, strata_error *err);
void calltree_free(calltree *tree);
/* Makes room for n_nodes nodes in all, so a caller about to add many (a merge translating a
 * block's stack tree) grows the tables once instead of doubling them step by step. */
int calltree_reserve(calltree *tree, size_t n_nodes, strata_error *err);
/* Sets the group-by mask (CALLTREE_GROUP_*, non-zero) and groups by no label; FAILED_PRECONDITION
 * once frames exist. */
int calltree_set_group_by(calltree *tree, unsigned mask, strata_error *err);
/* Sets the whole group-by (mask and labels, copied); FAILED_PRECONDITION once frames exist. */
int calltree_set_grouping(calltree *tree, const calltree_grouping *group_by, strata_error *err);
unsigned calltree_group_by(const calltree *tree);
/* The tree's group-by (valid while the tree lives and its group-by is not set again). */
const calltree_grouping *calltree_get_grouping(const calltree *tree);

/* Interns a frame (copying its strings) and returns its id in *frame. */
int calltree_intern_frame(calltree *tree, const calltree_frame_desc *desc, uint32_t *frame,
                          strata_error *err);

/* A frame whose strings are already in the tree's string table (calltree_intern_string): for
 * callers that meet the same strings in many frames (a block's functions and mappings recur in
 * thousands of locations), which intern each string once instead of once per frame. */
typedef struct calltree_frame_ids {
    uint32_t name, system_name, filename, mapping_file, build_id; /* string ids */
    int64_t start_line;
    calltree_frame_location loc;
} calltree_frame_ids;

/* The id of s in the tree's string table (copied in on first use). */
int calltree_intern_string(calltree *tree, calltree_str s, uint32_t *id, strata_error *err);
/* calltree_intern_frame with string ids; INVALID_ARGUMENT for an id not in the table. */
int calltree_intern_frame_ids(calltree *tree, const calltree_frame_ids *desc, uint32_t *frame,
                              strata_error *err);

/* One pprof label. */
typedef struct calltree_label {
    calltree_str name;
    calltree_str value;
} calltree_label;

/* Interns the label frame of labels[0..n) (n >= 1, names non-empty and unique, any order; they
 * are sorted by name): its name is `name="value", ...` with values quoted as Prometheus label
 * values. Label frames are identified by their labels alone. */
int calltree_intern_label_frame(calltree *tree, const calltree_label *labels, size_t n,
                                uint32_t *frame, strata_error *err);
/* The time frame of profiles taken at time_ns lasting duration_ns (grouping by_timestamp): a
 * label frame whose labels are CALLTREE_TIME_LABEL and CALLTREE_DURATION_LABEL (decimal
 * nanoseconds), so it merges across partial trees as any label frame does. */
#define CALLTREE_TIME_LABEL "__timestamp__"
#define CALLTREE_DURATION_LABEL "__duration__"
int calltree_intern_time_frame(calltree *tree, int64_t time_ns, int64_t duration_ns,
                               uint32_t *frame, strata_error *err);
/* True, with its time and duration, when frame is a time frame. */
bool calltree_frame_time(const calltree *tree, uint32_t frame, int64_t *time_ns,
                         int64_t *duration_ns);
/* Labels of a label frame (0 for a code frame); the i-th pair's strings, valid while the tree
 * lives. */
size_t calltree_frame_label_count(const calltree *tree, uint32_t frame);
void calltree_frame_label_at(const calltree *tree, uint32_t frame, size_t i, const char **name,
                             const char **value);
/* Finds or creates the child of parent for frame. parent must be an existing node id. */
int calltree_child(calltree *tree, uint32_t parent, uint32_t frame, uint32_t *node,
                   strata_error *err);
/* Hints the cache to fetch where calltree_child(tree, parent, frame) will look: a caller
 * translating many stacks prefetches a few ahead so their cache misses overlap. */
void calltree_prefetch_child(const calltree *tree, uint32_t parent, uint32_t frame);
/* Convenience: walks frames[0..n) root to leaf from the root and returns the leaf in *node
 * (the root for n == 0). */
int calltree_insert_stack(calltree *tree, const uint32_t *frames, size_t n, uint32_t *node,
                          strata_error *err);
/* Adds value to the node's self (B) or self_base (A). Values may be negative. */
void calltree_add(calltree *tree, uint32_t node, int64_t value);
void calltree_add_base(calltree *tree, uint32_t node, int64_t value);
/* Marks the tree as a diff (calltree_add_base and merging a diff tree do this implicitly). A diff
 * tree's reports carry diffs: flamebearer "double" format, table diff columns. */
void calltree_set_diff(calltree *tree, bool diff);
bool calltree_is_diff(const calltree *tree);

/* Adds every node of src (both sides) into dst, interning src's frames into dst (with dst's
 * group-by). dst must not be src. dst is left un-finalized. */
int calltree_merge(calltree *dst, const calltree *src, strata_error *err);
/* Exchanges the contents of two trees without copying (each keeps its address): a tree built on
 * the side replaces an empty one in place, where a merge would copy every node. Neither may be
 * finalized. */
void calltree_swap(calltree *a, calltree *b);

/* Renumbers the nodes in depth-first order (each subtree a contiguous range of ids, children in
 * the order they were made), so walks of the finished tree read memory in order: a merge that
 * makes nodes level by level, or block after block, scatters a subtree's nodes over the arrays.
 * Node ids from before are invalid afterwards; the root stays CALLTREE_ROOT. Un-finalizes. */
int calltree_order_depth_first(calltree *tree, strata_error *err);
/* Computes cumulative totals and sorted child lists. */
int calltree_finalize(calltree *tree, strata_error *err);

/* Multiplies every self_base (calltree_scale_base) or self (calltree_scale_main) by num/den,
 * den > 0, num >= 0, rounding each node's product to the nearest integer, halves away from zero,
 * computed exactly in 128 bits and saturated to int64. Rounding is per node, so a scaled cumulative
 * is the sum of its rounded selfs and may differ from the rounded scaled cumulative by up to half a
 * unit per node below it. A finalized tree's totals are recomputed. */
int calltree_scale_base(calltree *tree, int64_t num, int64_t den, strata_error *err);
int calltree_scale_main(calltree *tree, int64_t num, int64_t den, strata_error *err);

/* Parca's diff modes on a finalized tree: relative (absolute == false) scales the side with the
 * smaller root cumulative by larger/smaller (nothing when either side is 0); absolute does
 * nothing. Totals are recomputed. */
int calltree_apply_diff_mode(calltree *tree, bool absolute, strata_error *err);

/* Accessors. */
/* About how many bytes the tree holds (its arrays, maps and strings), for memory limits. */
size_t calltree_memory_bytes(const calltree *tree);
size_t calltree_node_count(const calltree *tree); /* including the root */
size_t calltree_frame_count(const calltree *tree);
/* Frame of node (undefined for the root: returns UINT32_MAX), parent (root: UINT32_MAX). */
uint32_t calltree_node_frame(const calltree *tree, uint32_t node);
uint32_t calltree_node_parent(const calltree *tree, uint32_t node);
calltree_node_values calltree_node_get(const calltree *tree, uint32_t node);
/* The stored frame; strings valid while the tree lives. */
calltree_frame calltree_frame_get(const calltree *tree, uint32_t frame);
/* The frame's display name after finalize (flame graph names): the function name, else the file,
 * the binary or the address; when the grouping keeps frames of one name apart, what tells them
 * apart follows: " (<file>)" grouping by file, " [<binary>]" by binary, " 0x<address>" by
 * location. So two builds grouped by binary are "main.main [/v1/app]" and "main.main [/v2/app]".
 */
const char *calltree_frame_label(const calltree *tree, uint32_t frame);
/* After finalize: number of children and the i-th child in sorted order. */
size_t calltree_child_count(const calltree *tree, uint32_t node);
uint32_t calltree_child_at(const calltree *tree, uint32_t node, size_t i);

/* ---- views: Parca's filters, inverted stacks and the sandwich, over a merged tree ---------- */

/* String conditions compare case-insensitively (Parca's StringCondition). */
typedef enum calltree_match_op {
    CALLTREE_MATCH_EQUAL,
    CALLTREE_MATCH_NOT_EQUAL,
    CALLTREE_MATCH_CONTAINS,
    CALLTREE_MATCH_NOT_CONTAINS,
    CALLTREE_MATCH_STARTS_WITH,
    CALLTREE_MATCH_NOT_STARTS_WITH,
} calltree_match_op;

typedef struct calltree_string_match {
    bool set;
    calltree_match_op op;
    const char *value;
} calltree_string_match;

typedef struct calltree_number_match {
    bool set;
    bool not_equal;
    uint64_t value;
} calltree_number_match;

/* Parca's FilterCriteria: every set condition must hold. binary is the mapping file's base name;
 * line_number the call site's line, else the function's start line. binaries (the deprecated
 * BinaryFrameFilter): the base name is one of them (none: no condition). */
typedef struct calltree_criteria {
    calltree_string_match function_name, system_name, binary, filename;
    calltree_number_match address, line_number;
    const char *const *binaries;
    size_t n_binaries;
} calltree_criteria;

/* A stack filter keeps the stacks that satisfy its criteria: a positive condition (equal,
 * contains, starts with) when some frame of the stack meets it, a negative one when every frame
 * does (so "function name not contains X" keeps the stacks without X). A frame filter keeps, in
 * every stack, the frames that meet every condition. Label frames (group by labels) are never
 * tested nor removed. */
typedef struct calltree_filter {
    bool frames; /* a frame filter; else a stack filter */
    calltree_criteria criteria;
} calltree_filter;

/* What a query asks beyond the merge: filters in order, then the sandwich (stacks through the
 * function named sandwich, exactly, cut to begin at its outermost call: its callees; inverted, cut
 * at its innermost call and reversed: its callers), then inversion (code frames leaf first; label
 * frames stay on top). */
typedef struct calltree_view {
    const calltree_filter *filters;
    size_t n_filters;
    const char *sandwich; /* NULL: none */
    bool invert;
} calltree_view;

/* Whether v changes nothing (no filter, sandwich or inversion). */
bool calltree_view_is_identity(const calltree_view *v);
/* Builds, finalized, the tree of src's stacks (src finalized) seen through v: each stack (a node's
 * path, with the node's self on both sides) filtered, cut and turned as v says. *removed: the
 * main side's value of the stacks v dropped (QueryResponse.filtered). A stack whose frames are all
 * filtered away keeps its value on the root. */
int calltree_view_apply(const calltree *src, const calltree_view *v, calltree **out,
                        int64_t *removed, strata_error *err);

/* pprof metadata for REPORT_TYPE_PPROF; strings may be NULL (""). */
typedef struct calltree_pprof_meta {
    const char *sample_type;
    const char *sample_unit;
    const char *period_type;
    const char *period_unit;
    int64_t period;
    int64_t time_nanos;
    int64_t duration_nanos;
} calltree_pprof_meta;

/* What REPORT_TYPE_SOURCE reports on: one file of one build, and its text (NUL-terminated,
 * valid UTF-8: it goes into a proto3 string). */
typedef struct calltree_source {
    const char *build_id;
    const char *filename;
    const char *text;
    size_t text_len;
} calltree_source;

typedef struct calltree_report_options {
    double node_trim_threshold; /* percent, 0 = no trimming; negative or NaN is INVALID_ARGUMENT */
    size_t max_nodes; /* flame graph nodes (both forms), TOP entries, table rows; 0 = unlimited */
    const char *unit; /* Flamegraph.unit, Top.unit, flamebearer metadata.units; NULL = "" */
    const char *name; /* flamebearer metadata.name; NULL = "" */
    int64_t total;    /* QueryResponse.total: the samples shown (after a calltree_view) */
    int64_t filtered; /* QueryResponse.filtered: the samples a calltree_view removed */
    const char *const *metadata_labels; /* PROFILE_METADATA's labels */
    size_t n_metadata_labels;
    calltree_pprof_meta pprof;
    calltree_source source; /* REPORT_TYPE_SOURCE */
} calltree_report_options;

/*
 * Appends a packed parca.query.v1alpha1.QueryResponse to out, with total and filtered from opts.
 *
 * REPORT_TYPE_FLAMEGRAPH_TABLE (and the deprecated REPORT_TYPE_FLAMEGRAPH_UNSPECIFIED, which gets
 * the same message): `flamegraph` with root {cumulative, diff} and nested children (sorted as in
 * the tree, trimmed as above), each node's meta carrying
 *   - function {name, system_name, filename, start_line, *_string_index} inline,
 *   - mapping {file, build_id, *_string_index} inline when the frame has a mapping file or build
 * id,
 *   - location_index (1-based into `locations`, Parca's table convention) and line_index 0.
 * Tables: string_table ("" first, then strings in first-use order, depth-first), one Location per
 * emitted frame (the frame's address, one Line {line (the call site's, else start_line),
 * function_index 1-based}, mapping_index 1-based or 0 for none), one Function per frame, one
 * Mapping per distinct (file, build id). Ids
 * are left empty. unit from opts; height = the deepest emitted node's depth (root 0, so a stack of
 * n frames gives n); total = untrimmed_total = root cumulative; trimmed = sum of trimmed
 * cumulatives.
 *
 * REPORT_TYPE_TOP: `top` with one TopNode per frame that has a non-zero flat or cumulative on
 * either side: flat = sum of self, cumulative = sum of the totals of the frame's outermost nodes
 * (a frame counts once per stack, even when recursive), diff = cumulative B - cumulative A (same
 * once-per-stack rule; 0 for a plain tree); meta.function and meta.mapping filled as above. Sorted
 * by flat desc, then cumulative desc, then frame (name, system name, file, mapping, build id).
 * At most max_nodes entries (the first in that order): reported = entries sent, total = entries
 * there are.
 *
 * REPORT_TYPE_PPROF: `pprof` = gzipped pprof, faithful to what was stored when the tree groups by
 * CALLTREE_GROUP_EXACT: sample type and period from opts.pprof; one Function per distinct (name,
 * system name, file, start line); one Location per distinct location, made of a run of frames
 * joined by `inlined` (innermost first, one Line each with the call site's line), with the
 * frames' address and mapping; one Mapping per distinct (file, build id, range, offset, flags);
 * one sample per node with non-zero self whose locations are the node's path leaf first and whose
 * value is self (B's value for a diff tree); a label frame on the path is no location but gives
 * the sample its labels (pprof Label key and str). No trimming. Ids are dense from 1.
 *
 * REPORT_TYPE_CALLGRAPH: `callgraph`: one node per frame (TOP's rows and values, at most
 * max_nodes, ids "0", "1", ... in TOP's order), one edge per caller -> callee pair of those frames
 * seen as parent and child nodes (id "<source>-<target>", cumulative = the sum of those child
 * nodes' cumulatives; none from the root), cumulative = the root's.
 *
 * REPORT_TYPE_PROFILE_METADATA: `profile_metadata`: mapping_files = the distinct non-empty
 * mapping files of the tree's frames, sorted; labels = opts->metadata_labels.
 *
 * REPORT_TYPE_SOURCE: `source` {record, source = opts->source.text, unit} where record is an
 * Arrow IPC stream of one row per line of the text (a line per "\n", as Parca counts them) with
 * Int64 columns `cumulative` and `flat`: over the nodes whose frame has opts->source's build id
 * and file name, a line's cumulative sums their totals and its flat their self values (B's for a
 * diff). total = the root's cumulative. The tree should group by CALLTREE_GROUP_EXACT, which
 * keeps each frame's line and build id. INVALID_ARGUMENT when opts->source is not filled in.
 *
 * Other report types: UNIMPLEMENTED with a message naming the type.
 */
/* REPORT_TYPE_PPROF's profile alone (gzipped or not), appended to out. */
int calltree_encode_pprof(const calltree *tree, const calltree_report_options *opts, bool gzip,
                          strata_buffer *out, strata_error *err);
int calltree_encode_query_response(const calltree *tree,
                                   Parca__Query__V1alpha1__QueryRequest__ReportType report_type,
                                   const calltree_report_options *opts, strata_buffer *out,
                                   strata_error *err);

/*
 * Writes one JSON object (Pyroscope's flamebearer profile) to w:
 *   {"version":1,
 *    "flamebearer":{"names":[...],"levels":[[...],...],"numTicks":N,"maxSelf":M},
 *    "metadata":{"format":"single"|"double","units":unit,"name":name},
 *    "leftTicks":A,"rightTicks":B,   (diff only)
 *    "trimmed":T}
 * names[0] is "total" (the root); other entries are distinct frame labels (calltree_frame_label)
 * in first-use order.
 * levels[d] holds the nodes of depth d left to right (level 0 is the root alone). Single format,
 * 4 ints per node: [x delta, total, self, name index], where x delta is the node's x minus the end
 * (x + total) of the previous node in the same level (the first node of a level: its x). A node's
 * x is its parent's x plus the totals of its preceding siblings, trimmed siblings included, so
 * trimming leaves gaps instead of shifting nodes. Diff ("double") format, 7 ints per node as
 * Pyroscope's FlameGraphDiff: [x delta A, total A, self A, x delta B, total B, self B, name index],
 * positions computed per side the same way. "self" is the node's own self value (trimmed children
 * are not folded into it). numTicks = root total (A + B for a diff); maxSelf = the largest self on
 * either side among emitted nodes; trimmed = the weight (see trimming) of the dropped subtrees.
 */
int calltree_write_flamebearer_json(const calltree *tree, const calltree_report_options *opts,
                                    json_writer *w, strata_error *err);

/* The same names and levels as Pyroscope's querier.v1.FlameGraph message (its fields: names = 1,
 * levels = 2 as Level{values = 1, packed}, total = 3, max_self = 4), or FlameGraphDiff for a diff
 * tree (also leftTicks = 5: side A's total, rightTicks = 6: side B's), appended to out. */
int calltree_encode_pyroscope_flamegraph(const calltree *tree, const calltree_report_options *opts,
                                         strata_buffer *out, strata_error *err);

/*
 * Writes one JSON object to w: {"unit":u,"total":root cumulative,"rows_total":n,"rows":[row...]},
 * one row per frame as in REPORT_TYPE_TOP, sorted the same way, at most max_nodes of them (a diff
 * table cut short keeps, and is sorted by, the largest |cumulative_diff| instead):
 *   {"name","system_name","filename","mapping_file","label" (the flame graph's name),
 *    "address" ("0x..." hex) and "line" when grouping by location, "flat","cumulative"} and, for
 *   a diff tree, "flat_base" and "cumulative_base" (side A), "flat_diff" (flat B - flat A) and
 *   "cumulative_diff" (cumulative B - cumulative A). A frame with cumulative_base 0 is new in B,
 *   one with cumulative 0 was removed.
 */
int calltree_write_table_json(const calltree *tree, const calltree_report_options *opts,
                              json_writer *w, strata_error *err);

/* ---- partial trees between queriers (calltree_wire.c) ----------------------------------------
 * A querier that merges a share of a query's blocks sends its tree as a
 * strata.querier.v1.PartialTree (proto/strata/querier/v1/peer.proto); the querier answering the
 * client adds each partial to its own tree. Adding partials is calltree_merge, so the answer does
 * not depend on how blocks were shared out. */

/* Fills *out with t's strings, frames and nodes (arrays malloc'd; strings point into t, which must
 * outlive *out). Free with calltree_partial_free. */
int calltree_to_partial(const calltree *t, Strata__Querier__V1__PartialTree *out,
                        strata_error *err);
void calltree_partial_free(Strata__Querier__V1__PartialTree *p);
/* Adds a partial tree (from another process: every index is checked) into dst, interning its
 * frames under dst's group-by, as calltree_merge does. INVALID_ARGUMENT for a malformed one. */
int calltree_merge_partial(calltree *dst, const Strata__Querier__V1__PartialTree *p,
                           strata_error *err);

#endif
