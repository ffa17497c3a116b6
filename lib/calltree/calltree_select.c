/*
 * calltree_select.c - what reports share: choosing the nodes to show (trimming) and per-frame
 * aggregates (flat, and cumulative counted once per stack). See calltree_internal.h.
 */
#include "calltree/calltree_internal.h"

#include <stdlib.h>
#include <string.h>

static size_t n_children(const calltree *t, uint32_t v) {
    return t->child_offset[v + 1] - t->child_offset[v];
}

static bool below_threshold(int64_t w, int64_t parent_w, double threshold) {
    return threshold > 0 && (double)w <= (double)parent_w * threshold / 100.0;
}

static int compare_i64_desc(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x < y) - (x > y);
}

/* Drops kept rows whose weight is not above the (max_nodes+1)-th largest kept weight. */
static int apply_max_nodes(size_t n, const uint32_t *parent, const int64_t *weight,
                           size_t max_nodes, size_t kept, bool *keep, int64_t *trimmed) {
    int64_t *w = malloc(kept * sizeof *w);
    if (w == NULL)
        return -1;
    size_t k = 0;
    for (size_t i = 1; i < n; i++)
        if (keep[i])
            w[k++] = weight[i];
    qsort(w, k, sizeof *w, compare_i64_desc);
    int64_t cutoff = w[max_nodes];
    free(w);
    for (size_t i = 1; i < n; i++) {
        if (!keep[i])
            continue;
        if (!keep[parent[i]]) {
            keep[i] = false;
        } else if (weight[i] <= cutoff) {
            keep[i] = false;
            *trimmed += weight[i];
        }
    }
    return 0;
}

int calltree_trim_rows(size_t n, const uint32_t *parent, const int64_t *weight, double threshold,
                       size_t max_nodes, bool *keep, int64_t *trimmed) {
    keep[0] = true;
    size_t kept = 0;
    for (size_t i = 1; i < n; i++) {
        keep[i] = false;
        uint32_t p = parent[i];
        if (!keep[p])
            continue;
        if (below_threshold(weight[i], weight[p], threshold)) {
            *trimmed += weight[i];
            continue;
        }
        keep[i] = true;
        kept++;
    }
    if (max_nodes > 0 && kept > max_nodes)
        return apply_max_nodes(n, parent, weight, max_nodes, kept, keep, trimmed);
    return 0;
}

/* Depth-first pre-order of the kept nodes. */
static int order_kept(const calltree *t, calltree_selection *sel) {
    uint32_t *stack = malloc(t->n_nodes * sizeof *stack);
    sel->order = malloc(t->n_nodes * sizeof *sel->order);
    if (stack == NULL || sel->order == NULL) {
        free(stack);
        return -1;
    }
    size_t sp = 0;
    stack[sp++] = CALLTREE_ROOT;
    while (sp > 0) {
        uint32_t v = stack[--sp];
        sel->order[sel->n_order++] = v;
        for (size_t i = n_children(t, v); i-- > 0;) {
            uint32_t c = t->children[t->child_offset[v] + i];
            if (sel->keep[c])
                stack[sp++] = c;
        }
    }
    free(stack);
    return 0;
}

int calltree_select(const calltree *t, const int64_t *weight, double threshold, size_t max_nodes,
                    calltree_selection *sel, strata_error *err) {
    memset(sel, 0, sizeof *sel);
    sel->keep = calloc(t->n_nodes, sizeof *sel->keep);
    if (sel->keep == NULL)
        return strata_error_oom(err);
    if (calltree_trim_rows(t->n_nodes, t->parent, weight, threshold, max_nodes, sel->keep,
                           &sel->trimmed) != 0 ||
        order_kept(t, sel) != 0) {
        calltree_selection_free(sel);
        return strata_error_oom(err);
    }
    return 0;
}

void calltree_selection_free(calltree_selection *sel) {
    free(sel->keep);
    free(sel->order);
    memset(sel, 0, sizeof *sel);
}

typedef struct outer_walk {
    uint32_t *cur;  /* frame -> deepest node with that frame on the current path */
    uint32_t *prev; /* node -> cur[frame] before the node was entered */
    uint32_t *stack;
    uint32_t *pos;
} outer_walk;

static void enter_node(const calltree *t, outer_walk *w, uint32_t c,
                       calltree_frame_stats *by_frame) {
    uint32_t f = t->frame[c];
    if (w->cur[f] == CALLTREE_NONE) {
        by_frame[f].cumulative += t->total[c];
        by_frame[f].cumulative_base += calltree_total_base_at(t, c);
    }
    w->prev[c] = w->cur[f];
    w->cur[f] = c;
}

/* Adds each frame's outermost nodes' totals: a frame counts once per stack. */
static void accumulate_cumulative(const calltree *t, outer_walk *w,
                                  calltree_frame_stats *by_frame) {
    for (size_t f = 0; f < t->n_frames; f++)
        w->cur[f] = CALLTREE_NONE;
    size_t sp = 0;
    w->stack[sp] = CALLTREE_ROOT;
    w->pos[sp++] = 0;
    while (sp > 0) {
        uint32_t v = w->stack[sp - 1];
        if (w->pos[sp - 1] < n_children(t, v)) {
            uint32_t c = t->children[t->child_offset[v] + w->pos[sp - 1]++];
            enter_node(t, w, c, by_frame);
            w->stack[sp] = c;
            w->pos[sp++] = 0;
            continue;
        }
        if (v != CALLTREE_ROOT)
            w->cur[t->frame[v]] = w->prev[v];
        sp--;
    }
}

static int compare_stats(const void *a, const void *b) {
    const calltree_frame_stats *x = a, *y = b;
    if (x->flat != y->flat)
        return x->flat > y->flat ? -1 : 1;
    if (x->cumulative != y->cumulative)
        return x->cumulative > y->cumulative ? -1 : 1;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

static bool stats_nonzero(const calltree_frame_stats *s) {
    return s->flat != 0 || s->cumulative != 0 || s->flat_base != 0 || s->cumulative_base != 0;
}

int calltree_frame_stats_compute(const calltree *t, calltree_frame_stats **rows, size_t *n_rows,
                                 strata_error *err) {
    *rows = NULL;
    *n_rows = 0;
    if (calltree_require_finalized(t, err) != 0)
        return -1;
    size_t nf = t->n_frames ? t->n_frames : 1;
    calltree_frame_stats *s = calloc(nf, sizeof *s);
    outer_walk w = {malloc(nf * sizeof *w.cur), malloc(t->n_nodes * sizeof *w.prev),
                    malloc(t->n_nodes * sizeof *w.stack), malloc(t->n_nodes * sizeof *w.pos)};
    int rc = -1;
    if (s == NULL || w.cur == NULL || w.prev == NULL || w.stack == NULL || w.pos == NULL) {
        free(s);
        strata_error_oom(err);
        goto out;
    }
    for (size_t i = 1; i < t->n_nodes; i++) {
        s[t->frame[i]].flat += t->self[i];
        s[t->frame[i]].flat_base += calltree_self_base_at(t, i);
    }
    accumulate_cumulative(t, &w, s);
    size_t n = 0;
    for (size_t f = 0; f < t->n_frames; f++) {
        s[f].frame = (uint32_t)f;
        s[f].rank = t->frame_rank[f];
        if (stats_nonzero(&s[f]))
            s[n++] = s[f];
    }
    qsort(s, n, sizeof *s, compare_stats);
    *rows = s;
    *n_rows = n;
    rc = 0;
out:
    free(w.cur);
    free(w.prev);
    free(w.stack);
    free(w.pos);
    return rc;
}
