/*
 * calltree_wire.c - a call tree as a strata.querier.v1.PartialTree message, so a querier can merge
 * a share of a query's blocks and send its partial tree to the querier that answers the client.
 *
 * Design. The message mirrors the tree's own structs of arrays (calltree_internal.h): the string
 * table, each frame's five string ids and its location fields, the (name, value) pairs of label
 * frames, and the nodes in creation order, which puts every parent before its children. Encoding
 * is a copy of those arrays; nothing is sorted or finalized.
 *
 * Adding a partial tree to another (calltree_merge_partial) is calltree_merge with the source read
 * from the message: each frame is interned into the destination under the destination's group-by
 * (so fields the partial blanked because its occurrences disagreed stay blank, as they would in a
 * single tree: the merge does not depend on which querier merged which block), then each node is
 * found or made under its mapped parent and its two self values added. The message comes from
 * another process: every count, index and parent is checked before use, and a message that breaks
 * a rule is INVALID_ARGUMENT with what was wrong, leaving dst with whatever was added before.
 */
#include <stdlib.h>
#include <string.h>

#include "calltree/calltree_internal.h"

typedef Strata__Querier__V1__PartialTree partial_tree_pb;

#define FLAG_INLINED 1u
#define FLAG_FOLDED 2u
#define FLAG_LINELESS 4u

void calltree_partial_free(partial_tree_pb *p) {
    free(p->strings);
    free(p->frame_strings);
    free(p->frame_start_line);
    free(p->frame_address);
    free(p->frame_line);
    free(p->frame_flags);
    free(p->frame_memory_start);
    free(p->frame_memory_limit);
    free(p->frame_file_offset);
    free(p->frame_mapping_flags);
    free(p->frame_label_count);
    free(p->label_strings);
    free(p->node_parent);
    free(p->node_frame);
    free(p->node_self);
    free(p->node_self_base);
    strata__querier__v1__partial_tree__init(p);
}

static void *alloc_array(size_t n, size_t elem) {
    return malloc((n > 0 ? n : 1) * elem);
}

static int alloc_frames(partial_tree_pb *p, size_t n) {
    p->n_frame_strings = n * FRAME_NSTR;
    p->n_frame_start_line = p->n_frame_address = p->n_frame_line = p->n_frame_flags = n;
    p->n_frame_memory_start = p->n_frame_memory_limit = p->n_frame_file_offset = n;
    p->n_frame_mapping_flags = p->n_frame_label_count = n;
    p->frame_strings = alloc_array(n * FRAME_NSTR, sizeof *p->frame_strings);
    p->frame_start_line = alloc_array(n, sizeof *p->frame_start_line);
    p->frame_address = alloc_array(n, sizeof *p->frame_address);
    p->frame_line = alloc_array(n, sizeof *p->frame_line);
    p->frame_flags = alloc_array(n, sizeof *p->frame_flags);
    p->frame_memory_start = alloc_array(n, sizeof *p->frame_memory_start);
    p->frame_memory_limit = alloc_array(n, sizeof *p->frame_memory_limit);
    p->frame_file_offset = alloc_array(n, sizeof *p->frame_file_offset);
    p->frame_mapping_flags = alloc_array(n, sizeof *p->frame_mapping_flags);
    p->frame_label_count = alloc_array(n, sizeof *p->frame_label_count);
    return p->frame_strings && p->frame_start_line && p->frame_address && p->frame_line &&
                   p->frame_flags && p->frame_memory_start && p->frame_memory_limit &&
                   p->frame_file_offset && p->frame_mapping_flags && p->frame_label_count
               ? 0
               : -1;
}

static void fill_frame(const calltree *t, size_t f, partial_tree_pb *p, size_t *label_word) {
    for (int k = 0; k < FRAME_NSTR; k++)
        p->frame_strings[f * FRAME_NSTR + (size_t)k] = t->frame_str[f * FRAME_NSTR + (size_t)k];
    const calltree_frame_extra *x = &t->frame_extra[f];
    p->frame_start_line[f] = x->start_line;
    p->frame_address[f] = x->loc.address;
    p->frame_line[f] = x->loc.line;
    p->frame_flags[f] = (x->loc.inlined ? FLAG_INLINED : 0) | (x->loc.folded ? FLAG_FOLDED : 0) |
                        (x->loc.lineless ? FLAG_LINELESS : 0);
    p->frame_memory_start[f] = x->loc.memory_start;
    p->frame_memory_limit[f] = x->loc.memory_limit;
    p->frame_file_offset[f] = x->loc.file_offset;
    p->frame_mapping_flags[f] = x->loc.mapping_flags;
    p->frame_label_count[f] = x->label_count;
    for (uint32_t i = 0; i < 2 * x->label_count; i++)
        p->label_strings[(*label_word)++] = t->label_words[x->label_first + i];
}

int calltree_to_partial(const calltree *t, partial_tree_pb *p, strata_error *err) {
    strata__querier__v1__partial_tree__init(p);
    size_t n_strings = t->strings.count, n_frames = t->n_frames, n_nodes = t->n_nodes;
    size_t n_label_words = 0;
    for (size_t f = 0; f < n_frames; f++)
        n_label_words += 2 * (size_t)t->frame_extra[f].label_count;
    p->strings = alloc_array(n_strings, sizeof *p->strings);
    p->label_strings = alloc_array(n_label_words, sizeof *p->label_strings);
    p->node_parent = alloc_array(n_nodes, sizeof *p->node_parent);
    p->node_frame = alloc_array(n_nodes, sizeof *p->node_frame);
    p->node_self = alloc_array(n_nodes, sizeof *p->node_self);
    p->node_self_base = alloc_array(n_nodes, sizeof *p->node_self_base);
    if (alloc_frames(p, n_frames) != 0 || !p->strings || !p->label_strings || !p->node_parent ||
        !p->node_frame || !p->node_self || !p->node_self_base) {
        calltree_partial_free(p);
        return strata_error_oom(err);
    }
    p->n_strings = n_strings;
    for (size_t i = 0; i < n_strings; i++)
        p->strings[i] = (ProtobufCBinaryData){t->strings.lengths[i],
                                              (uint8_t *)(uintptr_t)t->strings.strings[i]};
    size_t label_word = 0;
    for (size_t f = 0; f < n_frames; f++)
        fill_frame(t, f, p, &label_word);
    p->n_label_strings = n_label_words;
    p->n_node_parent = p->n_node_frame = n_nodes > 0 ? n_nodes - 1 : 0;
    for (size_t i = 1; i < n_nodes; i++) {
        p->node_parent[i - 1] = t->parent[i];
        p->node_frame[i - 1] = t->frame[i];
    }
    p->n_node_self = p->n_node_self_base = n_nodes;
    memcpy(p->node_self, t->self, n_nodes * sizeof *t->self);
    if (t->self_base != NULL)
        memcpy(p->node_self_base, t->self_base, n_nodes * sizeof *t->self_base);
    else
        memset(p->node_self_base, 0, n_nodes * sizeof *p->node_self_base);
    p->diff = t->diff;
    return 0;
}

/* ---- adding a partial tree --------------------------------------------------------------------
 */

static int bad(strata_error *err, const char *what) {
    return strata_error_set(err, STRATA_INVALID_ARGUMENT, "partial call tree: %s", what);
}

/* The counts must agree with each other before any array is indexed. */
static int check_shape(const partial_tree_pb *p, strata_error *err) {
    size_t n_frames = p->n_frame_label_count;
    if (p->n_frame_strings != n_frames * FRAME_NSTR || p->n_frame_start_line != n_frames ||
        p->n_frame_address != n_frames || p->n_frame_line != n_frames ||
        p->n_frame_flags != n_frames || p->n_frame_memory_start != n_frames ||
        p->n_frame_memory_limit != n_frames || p->n_frame_file_offset != n_frames ||
        p->n_frame_mapping_flags != n_frames)
        return bad(err, "frame arrays of different lengths");
    if (p->n_node_self == 0 || p->n_node_self_base != p->n_node_self ||
        p->n_node_parent != p->n_node_self - 1 || p->n_node_frame != p->n_node_parent)
        return bad(err, "node arrays of different lengths (or no root)");
    if (n_frames >= UINT32_MAX || p->n_node_self >= UINT32_MAX || p->n_strings >= UINT32_MAX)
        return bad(err, "too many frames, nodes or strings");
    size_t words = 0;
    for (size_t f = 0; f < n_frames; f++)
        words += 2 * (size_t)p->frame_label_count[f];
    if (words != p->n_label_strings)
        return bad(err, "label pairs do not add up to the label counts");
    for (size_t i = 0; i < p->n_frame_strings; i++)
        if (p->frame_strings[i] >= p->n_strings)
            return bad(err, "a frame names a string outside the table");
    for (size_t i = 0; i < p->n_label_strings; i++)
        if (p->label_strings[i] >= p->n_strings)
            return bad(err, "a label names a string outside the table");
    return 0;
}

static calltree_str wire_str(const partial_tree_pb *p, uint32_t id) {
    return (calltree_str){(const char *)p->strings[id].data, p->strings[id].len};
}

static int add_label_frame(calltree *dst, const partial_tree_pb *p, size_t f, size_t first_word,
                           uint32_t *out, strata_error *err) {
    size_t n = p->frame_label_count[f];
    calltree_label *labels = malloc(n * sizeof *labels);
    if (labels == NULL)
        return strata_error_oom(err);
    for (size_t i = 0; i < n; i++) {
        labels[i].name = wire_str(p, p->label_strings[first_word + 2 * i]);
        labels[i].value = wire_str(p, p->label_strings[first_word + 2 * i + 1]);
    }
    int rc = calltree_intern_label_frame(dst, labels, n, out, err);
    free(labels);
    return rc;
}

static int add_frames(calltree *dst, const partial_tree_pb *p, uint32_t *map, strata_error *err) {
    size_t word = 0;
    for (size_t f = 0; f < p->n_frame_label_count; f++) {
        if (p->frame_label_count[f] > 0) {
            if (add_label_frame(dst, p, f, word, &map[f], err) != 0)
                return -1;
            word += 2 * (size_t)p->frame_label_count[f];
            continue;
        }
        const uint32_t *sid = &p->frame_strings[f * FRAME_NSTR];
        uint32_t flags = p->frame_flags[f];
        calltree_frame_desc d = {wire_str(p, sid[FRAME_NAME]),
                                 wire_str(p, sid[FRAME_SYSTEM_NAME]),
                                 wire_str(p, sid[FRAME_FILENAME]),
                                 wire_str(p, sid[FRAME_MAPPING_FILE]),
                                 wire_str(p, sid[FRAME_BUILD_ID]),
                                 p->frame_start_line[f],
                                 {.address = p->frame_address[f],
                                  .line = p->frame_line[f],
                                  .inlined = (flags & FLAG_INLINED) != 0,
                                  .folded = (flags & FLAG_FOLDED) != 0,
                                  .lineless = (flags & FLAG_LINELESS) != 0,
                                  .memory_start = p->frame_memory_start[f],
                                  .memory_limit = p->frame_memory_limit[f],
                                  .file_offset = p->frame_file_offset[f],
                                  .mapping_flags = p->frame_mapping_flags[f]}};
        if (calltree_intern_frame(dst, &d, &map[f], err) != 0)
            return -1;
    }
    return 0;
}

static int add_nodes(calltree *dst, const partial_tree_pb *p, const uint32_t *fmap, uint32_t *nmap,
                     strata_error *err) {
    nmap[0] = CALLTREE_ROOT;
    for (size_t i = 1; i < p->n_node_self; i++) {
        uint32_t parent = p->node_parent[i - 1], frame = p->node_frame[i - 1];
        if (parent >= i)
            return bad(err, "a node comes before its parent");
        if (frame >= p->n_frame_label_count)
            return bad(err, "a node names a frame outside the table");
        if (calltree_child(dst, nmap[parent], fmap[frame], &nmap[i], err) != 0)
            return -1;
    }
    for (size_t i = 0; i < p->n_node_self; i++) {
        if (p->node_self[i] != 0)
            calltree_add(dst, nmap[i], p->node_self[i]);
        if (p->node_self_base[i] != 0)
            calltree_add_base(dst, nmap[i], p->node_self_base[i]);
    }
    if (p->diff)
        calltree_set_diff(dst, true);
    return 0;
}

int calltree_merge_partial(calltree *dst, const partial_tree_pb *p, strata_error *err) {
    if (check_shape(p, err) != 0)
        return -1;
    uint32_t *fmap = alloc_array(p->n_frame_label_count, sizeof *fmap);
    uint32_t *nmap = alloc_array(p->n_node_self, sizeof *nmap);
    int rc = fmap && nmap ? 0 : strata_error_oom(err);
    if (rc == 0)
        rc = add_frames(dst, p, fmap, err);
    if (rc == 0)
        rc = add_nodes(dst, p, fmap, nmap, err);
    free(fmap);
    free(nmap);
    return rc;
}
