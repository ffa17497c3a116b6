/*
 * calltree_view.c - Parca's stack and frame filters, the sandwich and inverted call stacks, as a
 * new tree built from a merged one (see calltree_view in calltree.h).
 *
 * A merged tree holds everything these views need: the stacks of a profile are exactly the paths
 * of the nodes with a non-zero self, each weighing that self (on both sides of a diff). So a view
 * walks the finished tree depth first, keeping the path from the root, and inserts each weighed
 * path, transformed, into a new tree with the same grouping. The cost is one pass over the nodes
 * plus the inserts (a path is at most the tree's height), and the merge itself is never repeated.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "calltree/calltree.h"

bool calltree_view_is_identity(const calltree_view *v) {
    return v == NULL || (v->n_filters == 0 && v->sandwich == NULL && !v->invert);
}

/* ---- matching ---------------------------------------------------------------------------------
 */

static bool is_negative(calltree_match_op op) {
    return op == CALLTREE_MATCH_NOT_EQUAL || op == CALLTREE_MATCH_NOT_CONTAINS ||
           op == CALLTREE_MATCH_NOT_STARTS_WITH;
}

static bool contains_nocase(const char *hay, const char *needle) {
    size_t n = strlen(needle);
    for (const char *p = hay; n == 0 || *p != '\0'; p++) {
        if (strncasecmp(p, needle, n) == 0)
            return true;
        if (*p == '\0')
            break;
    }
    return false;
}

/* The positive form of the condition (equal, contains, starts with) on s. */
static bool positive_match(const calltree_string_match *m, const char *s) {
    switch (m->op) {
        case CALLTREE_MATCH_EQUAL:
        case CALLTREE_MATCH_NOT_EQUAL:
            return strcasecmp(s, m->value) == 0;
        case CALLTREE_MATCH_CONTAINS:
        case CALLTREE_MATCH_NOT_CONTAINS:
            return contains_nocase(s, m->value);
        case CALLTREE_MATCH_STARTS_WITH:
        case CALLTREE_MATCH_NOT_STARTS_WITH:
            return strncasecmp(s, m->value, strlen(m->value)) == 0;
    }
    return false;
}

static const char *base_name(const char *path) {
    const char *slash = strrchr(path, '/');
    return slash != NULL ? slash + 1 : path;
}

static uint64_t frame_line(const calltree_frame *f) {
    return (uint64_t)(f->loc.line != 0 ? f->loc.line : f->start_line);
}

/* Which of a criteria's conditions a frame meets in their positive form: bit i for condition i
 * (function, system name, binary, file, address, line), in the order of `conditions` below. */
enum { COND_FUNCTION, COND_SYSTEM, COND_BINARY, COND_FILE, COND_ADDRESS, COND_LINE, COND_COUNT };

static bool number_positive(const calltree_number_match *m, uint64_t v) {
    return v == m->value; /* equal; not_equal is its negation */
}

static bool condition_set(const calltree_criteria *c, int i) {
    switch (i) {
        case COND_FUNCTION:
            return c->function_name.set;
        case COND_SYSTEM:
            return c->system_name.set;
        case COND_BINARY:
            return c->binary.set;
        case COND_FILE:
            return c->filename.set;
        case COND_ADDRESS:
            return c->address.set;
        case COND_LINE:
            return c->line_number.set;
    }
    return false;
}

static bool condition_negative(const calltree_criteria *c, int i) {
    switch (i) {
        case COND_FUNCTION:
            return is_negative(c->function_name.op);
        case COND_SYSTEM:
            return is_negative(c->system_name.op);
        case COND_BINARY:
            return is_negative(c->binary.op);
        case COND_FILE:
            return is_negative(c->filename.op);
        case COND_ADDRESS:
            return c->address.not_equal;
        case COND_LINE:
            return c->line_number.not_equal;
    }
    return false;
}

static bool condition_positive(const calltree_criteria *c, int i, const calltree_frame *f) {
    switch (i) {
        case COND_FUNCTION:
            return positive_match(&c->function_name, f->name);
        case COND_SYSTEM:
            return positive_match(&c->system_name, f->system_name);
        case COND_BINARY:
            return positive_match(&c->binary, base_name(f->mapping_file));
        case COND_FILE:
            return positive_match(&c->filename, f->filename);
        case COND_ADDRESS:
            return number_positive(&c->address, f->loc.address);
        case COND_LINE:
            return number_positive(&c->line_number, frame_line(f));
    }
    return false;
}

static bool in_binaries(const calltree_criteria *c, const calltree_frame *f) {
    if (c->n_binaries == 0)
        return true;
    const char *b = base_name(f->mapping_file);
    for (size_t i = 0; i < c->n_binaries; i++)
        if (strcmp(b, c->binaries[i]) == 0 || strcmp(f->mapping_file, c->binaries[i]) == 0)
            return true;
    return false;
}

/* A frame filter's test: every condition, as written, holds for the frame. */
static bool frame_meets(const calltree_criteria *c, const calltree_frame *f) {
    for (int i = 0; i < COND_COUNT; i++)
        if (condition_set(c, i) && condition_positive(c, i, f) == condition_negative(c, i))
            return false;
    return in_binaries(c, f);
}

/* ---- the walk ------------------------------------------------------------------------------- */

typedef struct view_state {
    const calltree *src;
    const calltree_view *view;
    calltree *dst;
    uint32_t *frame_map; /* src frame -> dst frame + 1; 0: not interned yet */
    uint32_t *path;      /* src frames of the current node's path, root's child first */
    uint32_t *work;      /* a transformed stack */
    bool *is_label;      /* per src frame: a label frame */
    int64_t removed;
} view_state;

static int map_frame(view_state *st, uint32_t f, uint32_t *out, strata_error *err) {
    if (st->frame_map[f] != 0) {
        *out = st->frame_map[f] - 1;
        return 0;
    }
    size_t n_labels = calltree_frame_label_count(st->src, f);
    int rc;
    if (n_labels > 0) {
        calltree_label *labels = calloc(n_labels, sizeof *labels);
        if (labels == NULL)
            return strata_error_oom(err);
        for (size_t i = 0; i < n_labels; i++) {
            const char *name, *value;
            calltree_frame_label_at(st->src, f, i, &name, &value);
            labels[i] = (calltree_label){calltree_cstr(name), calltree_cstr(value)};
        }
        rc = calltree_intern_label_frame(st->dst, labels, n_labels, out, err);
        free(labels);
    } else {
        calltree_frame fr = calltree_frame_get(st->src, f);
        calltree_frame_desc d = {.name = calltree_cstr(fr.name),
                                 .system_name = calltree_cstr(fr.system_name),
                                 .filename = calltree_cstr(fr.filename),
                                 .mapping_file = calltree_cstr(fr.mapping_file),
                                 .build_id = calltree_cstr(fr.build_id),
                                 .start_line = fr.start_line,
                                 .loc = fr.loc};
        rc = calltree_intern_frame(st->dst, &d, out, err);
    }
    if (rc == 0)
        st->frame_map[f] = *out + 1;
    return rc;
}

/* Whether the stack frames[0..n) passes a stack filter (see calltree_filter). */
static bool stack_passes(const view_state *st, const calltree_criteria *c, const uint32_t *frames,
                         size_t n) {
    for (int i = 0; i < COND_COUNT; i++) {
        if (!condition_set(c, i))
            continue;
        bool negative = condition_negative(c, i), any = false;
        for (size_t k = 0; k < n && !any; k++) {
            if (st->is_label[frames[k]])
                continue;
            calltree_frame f = calltree_frame_get(st->src, frames[k]);
            any = condition_positive(c, i, &f);
        }
        if (any == negative)
            return false;
    }
    if (c->n_binaries > 0) {
        bool any = false;
        for (size_t k = 0; k < n && !any; k++) {
            if (st->is_label[frames[k]])
                continue;
            calltree_frame f = calltree_frame_get(st->src, frames[k]);
            any = in_binaries(c, &f);
        }
        if (!any)
            return false;
    }
    return true;
}

/* Applies the view to frames[0..n) in place; returns the new length, or -1 when the stack is
 * dropped. */
static long transform(view_state *st, uint32_t *frames, size_t n) {
    const calltree_view *v = st->view;
    for (size_t i = 0; i < v->n_filters; i++) {
        const calltree_filter *flt = &v->filters[i];
        if (!flt->frames) {
            if (!stack_passes(st, &flt->criteria, frames, n))
                return -1;
            continue;
        }
        size_t kept = 0;
        for (size_t k = 0; k < n; k++) {
            calltree_frame f = calltree_frame_get(st->src, frames[k]);
            if (st->is_label[frames[k]] || frame_meets(&flt->criteria, &f))
                frames[kept++] = frames[k];
        }
        n = kept;
    }
    size_t labels = 0; /* label frames come first on a path */
    while (labels < n && st->is_label[frames[labels]])
        labels++;
    size_t from = labels, to = n; /* the code frames kept: [from, to) */
    if (v->sandwich != NULL) {
        long first = -1, last = -1;
        for (size_t k = labels; k < n; k++) {
            if (strcmp(calltree_frame_get(st->src, frames[k]).name, v->sandwich) != 0)
                continue;
            if (first < 0)
                first = (long)k;
            last = (long)k;
        }
        if (first < 0)
            return -1;
        if (v->invert)
            to = (size_t)last + 1;
        else
            from = (size_t)first;
    }
    memmove(frames + labels, frames + from, (to - from) * sizeof *frames);
    n = labels + (to - from);
    if (v->invert)
        for (size_t a = labels, b = n; a + 1 < b; a++, b--) {
            uint32_t t = frames[a];
            frames[a] = frames[b - 1];
            frames[b - 1] = t;
        }
    return (long)n;
}

/* Inserts the stack of src node `node` (its path is st->path[0..depth)). */
static int add_stack(view_state *st, uint32_t node, size_t depth, strata_error *err) {
    calltree_node_values nv = calltree_node_get(st->src, node);
    if (nv.self == 0 && nv.self_base == 0)
        return 0;
    memcpy(st->work, st->path, depth * sizeof *st->work);
    long n = transform(st, st->work, depth);
    if (n < 0) {
        st->removed += nv.self;
        return 0;
    }
    for (long k = 0; k < n; k++)
        if (map_frame(st, st->work[k], &st->work[k], err) != 0)
            return -1;
    uint32_t leaf;
    if (calltree_insert_stack(st->dst, st->work, (size_t)n, &leaf, err) != 0)
        return -1;
    calltree_add(st->dst, leaf, nv.self);
    calltree_add_base(st->dst, leaf, nv.self_base);
    return 0;
}

/* Depth-first over src with an explicit stack of (node, next child). */
static int walk(view_state *st, strata_error *err) {
    size_t n_nodes = calltree_node_count(st->src);
    uint32_t *nodes = malloc(n_nodes * sizeof *nodes);
    size_t *next = malloc(n_nodes * sizeof *next);
    int rc = 0;
    if (nodes == NULL || next == NULL) {
        rc = strata_error_oom(err);
        goto out;
    }
    size_t top = 0;
    nodes[0] = CALLTREE_ROOT;
    next[0] = 0;
    rc = add_stack(st, CALLTREE_ROOT, 0, err);
    while (rc == 0) {
        uint32_t node = nodes[top];
        if (next[top] == calltree_child_count(st->src, node)) {
            if (top == 0)
                break;
            top--;
            continue;
        }
        uint32_t child = calltree_child_at(st->src, node, next[top]++);
        st->path[top] = calltree_node_frame(st->src, child);
        top++;
        nodes[top] = child;
        next[top] = 0;
        rc = add_stack(st, child, top, err);
    }
out:
    free(nodes);
    free(next);
    return rc;
}

int calltree_view_apply(const calltree *src, const calltree_view *v, calltree **out,
                        int64_t *removed, strata_error *err) {
    *out = NULL;
    *removed = 0;
    size_t n_frames = calltree_frame_count(src), n_nodes = calltree_node_count(src);
    view_state st = {.src = src, .view = v};
    st.frame_map = calloc(n_frames + 1, sizeof *st.frame_map);
    st.is_label = calloc(n_frames + 1, sizeof *st.is_label);
    st.path = malloc((n_nodes + 1) * sizeof *st.path);
    st.work = malloc((n_nodes + 1) * sizeof *st.work);
    int rc = -1;
    if (st.frame_map == NULL || st.is_label == NULL || st.path == NULL || st.work == NULL) {
        strata_error_oom(err);
        goto out;
    }
    for (size_t f = 0; f < n_frames; f++)
        st.is_label[f] = calltree_frame_label_count(src, (uint32_t)f) > 0;
    if (calltree_create(&st.dst, 0, err) != 0)
        goto out;
    calltree_set_diff(st.dst, calltree_is_diff(src));
    if (calltree_set_grouping(st.dst, calltree_get_grouping(src), err) != 0 ||
        walk(&st, err) != 0 || calltree_finalize(st.dst, err) != 0)
        goto out;
    *out = st.dst;
    st.dst = NULL;
    *removed = st.removed;
    rc = 0;
out:
    calltree_free(st.dst);
    free(st.frame_map);
    free(st.is_label);
    free(st.path);
    free(st.work);
    return rc;
}
