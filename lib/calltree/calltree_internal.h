/*
 * calltree_internal.h - the tree's representation and helpers shared by calltree.c (building,
 * merging, finalizing), calltree_report.c (QueryResponse) and calltree_json.c. Not a contract.
 *
 * Nodes and frames are structs of arrays indexed by id. After finalize, the children of node v are
 * children[child_offset[v] .. child_offset[v + 1]) sorted by frame_rank.
 */
#ifndef STRATA_CALLTREE_INTERNAL_H
#define STRATA_CALLTREE_INTERNAL_H

#include "calltree/calltree.h"
#include "common/hash.h"

#define CALLTREE_NONE UINT32_MAX

enum {
    FRAME_NAME,
    FRAME_SYSTEM_NAME,
    FRAME_FILENAME,
    FRAME_MAPPING_FILE,
    FRAME_BUILD_ID,
    FRAME_NSTR
};

/* A frame's fields besides its strings. A label frame (pprof sample labels grouped by) has
 * label_count > 0 pairs at label_words[label_first..]; its name is their display text. */
typedef struct calltree_frame_extra {
    int64_t start_line;
    calltree_frame_location loc;
    uint32_t label_first; /* into label_words, in (name, value) string id pairs */
    uint32_t label_count;
} calltree_frame_extra;

/* Which node is the child of parent with frame: an open-addressing table (linear probing, at most
 * 75 % full) of 8-byte slots, each a node id with 32 bits of the hash of its (parent, frame) as a
 * tag; the key itself is the node's parent and frame, read from those arrays when a tag matches.
 * A table of (key, value) pairs took 16 bytes a slot, 64 MiB for the 2.7 M nodes of a merge of
 * 100 agent-profiled processes, a quarter of that merge's memory. */
typedef struct calltree_child_index {
    uint64_t *slots; /* tag << 32 | node id; 0 = empty (the root is no node's child) */
    size_t count;
    size_t mask; /* capacity - 1, a power of two */
} calltree_child_index;

struct calltree {
    strata_intern strings;
    unsigned group_by;          /* CALLTREE_GROUP_*: which fields make a frame's identity */
    uint32_t empty_sid;         /* the string id of "" */
    calltree_grouping grouping; /* group_by with the pprof labels grouped by (owned copies) */
    uint32_t *label_words;      /* label frames' (name, value) string id pairs */
    size_t n_label_words, cap_label_words;

    uint32_t *frame_str; /* FRAME_NSTR string ids per frame */
    calltree_frame_extra *frame_extra;
    uint32_t *frame_label; /* string id of the display name; valid when finalized */
    size_t n_frames;
    size_t frames_cap;
    strata_u64_map frame_map; /* hash of the identity fields (re-seeded on collision) -> frame id */

    uint32_t *parent;
    uint32_t *frame;
    int64_t *self;
    /* The base side of a diff: NULL until a base value is added (a merge's tree has none, and
     * 8 bytes a node, twice over with total_base, were a sixth of a big merge's memory). A
     * finalized diff tree always has both; read them through calltree_self_base_at and
     * calltree_total_base_at where a tree may not be a diff. */
    int64_t *self_base;
    size_t n_nodes;
    size_t nodes_cap;
    calltree_child_index child_map; /* NULL slots once finalized, until the next insert */

    /* Valid when finalized. */
    int64_t *total;
    int64_t *total_base;    /* NULL when self_base is */
    uint32_t *child_offset; /* n_nodes + 1 */
    uint32_t *children;     /* n_nodes - 1 */
    uint32_t *frame_rank;   /* frame id -> position in sorted frame order */
    bool finalized;
    bool diff;
    bool base_lost; /* a base value found no memory for self_base: finalize fails */
};

static inline int64_t calltree_self_base_at(const calltree *t, size_t node) {
    return t->self_base != NULL ? t->self_base[node] : 0;
}

static inline int64_t calltree_total_base_at(const calltree *t, size_t node) {
    return t->total_base != NULL ? t->total_base[node] : 0;
}

static inline const char *calltree_string(const calltree *t, uint32_t id) {
    return t->strings.strings[id];
}

static inline const char *calltree_frame_string(const calltree *t, uint32_t frame, int which) {
    return t->strings.strings[t->frame_str[(size_t)frame * FRAME_NSTR + (size_t)which]];
}

static inline uint32_t calltree_frame_sid(const calltree *t, uint32_t frame, int which) {
    return t->frame_str[(size_t)frame * FRAME_NSTR + (size_t)which];
}

static inline const calltree_frame_location *calltree_frame_loc(const calltree *t, uint32_t frame) {
    return &t->frame_extra[frame].loc;
}

static inline int64_t calltree_frame_start_line(const calltree *t, uint32_t frame) {
    return t->frame_extra[frame].start_line;
}

static inline bool calltree_frame_is_labels(const calltree *t, uint32_t frame) {
    return t->frame_extra[frame].label_count > 0;
}

/* FAILED_PRECONDITION unless finalized. */
int calltree_require_finalized(const calltree *t, strata_error *err);

/* Which nodes a report shows. keep[v] is true for kept nodes (the root always); order lists kept
 * nodes depth-first pre-order in sorted child order; trimmed is the summed weight of the roots of
 * dropped subtrees. */
typedef struct calltree_selection {
    bool *keep;
    uint32_t *order;
    size_t n_order;
    int64_t trimmed;
} calltree_selection;

/* weight is the per-node value trimming compares (owned by the caller, n_nodes entries). */
int calltree_select(const calltree *t, const int64_t *weight, double threshold_percent,
                    size_t max_nodes, calltree_selection *sel, strata_error *err);
void calltree_selection_free(calltree_selection *sel);
/* The trimming rule of calltree_select over any rows 0..n) whose parents come before them (row 0
 * the root): keep[i] says whether row i stays, *trimmed grows by the weight of each dropped row
 * whose parent stays. -1 when out of memory. */
int calltree_trim_rows(size_t n, const uint32_t *parent, const int64_t *weight, double threshold,
                       size_t max_nodes, bool *keep, int64_t *trimmed);

/* Per-frame aggregates for TOP and the table. */
typedef struct calltree_frame_stats {
    uint32_t frame;
    uint32_t rank; /* frame_rank[frame], the tie-breaker */
    int64_t flat;
    int64_t cumulative;
    int64_t flat_base;
    int64_t cumulative_base;
} calltree_frame_stats;

/* Fills *rows with one entry per frame with any non-zero value, sorted by flat desc, cumulative
 * desc, then frame rank. */
int calltree_frame_stats_compute(const calltree *t, calltree_frame_stats **rows, size_t *n_rows,
                                 strata_error *err);

int calltree_validate_options(const calltree_report_options *opts, strata_error *err);

#endif
