/*
 * calltree.c - building, merging, scaling and finalizing call trees. See calltree.h.
 *
 * Frame lookup hashes the five interned string ids. The u64 map stores only the hash, so a hit is
 * confirmed against the stored tuple; on a genuine 64-bit collision the key is re-hashed with the
 * next seed, which keeps lookups exact without storing tuples in the map. Child lookup needs no
 * hashing of our own: (parent, frame) packs exactly into 64 bits. A label frame's key is its
 * display name (`a="1", b="2"`, pairs sorted, values escaped: one text per label set) with a kind
 * bit no code frame has, so label sets and functions never merge.
 */
#include "calltree/calltree_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/array.h"

#define DEFAULT_NODES 1024
#define MAX_IDS ((size_t)UINT32_MAX - 1)

__extension__ typedef __int128 calltree_i128;

calltree_str calltree_cstr(const char *s) {
    calltree_str v = {s != NULL ? s : "", s != NULL ? strlen(s) : 0};
    return v;
}

/* Grows the node arrays to hold at least `need` nodes (common/array.h's capacity). */
static int grow_nodes_to(calltree *t, size_t need) {
    size_t cap = strata_array_capacity(t->nodes_cap, need);
    uint32_t *parent = strata_array_resize(t->parent, cap, sizeof *parent);
    if (parent != NULL)
        t->parent = parent;
    uint32_t *frame = strata_array_resize(t->frame, cap, sizeof *frame);
    if (frame != NULL)
        t->frame = frame;
    int64_t *self = strata_array_resize(t->self, cap, sizeof *self);
    if (self != NULL)
        t->self = self;
    int64_t *self_base = NULL;
    if (t->self_base != NULL) {
        self_base = strata_array_resize(t->self_base, cap, sizeof *self_base);
        if (self_base != NULL)
            t->self_base = self_base;
    }
    if (parent == NULL || frame == NULL || self == NULL || (t->self_base != NULL && !self_base))
        return -1;
    t->nodes_cap = cap;
    return 0;
}

/* Makes self_base, zeroed for the nodes there are, on the first base value. */
static int ensure_self_base(calltree *t) {
    if (t->self_base != NULL)
        return 0;
    t->self_base = calloc(t->nodes_cap ? t->nodes_cap : 1, sizeof *t->self_base);
    return t->self_base != NULL ? 0 : -1;
}

static int grow_nodes(calltree *t) {
    return grow_nodes_to(t, t->n_nodes + 1);
}

static int grow_frames(calltree *t) {
    size_t cap = strata_array_capacity(t->frames_cap, t->n_frames + 1);
    uint32_t *str = strata_array_resize(t->frame_str, cap, FRAME_NSTR * sizeof *str);
    if (str != NULL)
        t->frame_str = str;
    calltree_frame_extra *extra = strata_array_resize(t->frame_extra, cap, sizeof *extra);
    if (extra != NULL)
        t->frame_extra = extra;
    if (str == NULL || extra == NULL)
        return -1;
    t->frames_cap = cap;
    return 0;
}

static int child_index_reserve(calltree *t, size_t nodes);
static void child_index_free(calltree_child_index *c);

static int new_node(calltree *t, uint32_t parent, uint32_t frame, uint32_t *node) {
    if (t->n_nodes == t->nodes_cap && grow_nodes(t) != 0)
        return -1;
    size_t id = t->n_nodes++;
    t->parent[id] = parent;
    t->frame[id] = frame;
    t->self[id] = 0;
    if (t->self_base != NULL)
        t->self_base[id] = 0;
    *node = (uint32_t)id;
    t->finalized = false;
    return 0;
}

int calltree_create(calltree **out, size_t expected_nodes, strata_error *err) {
    *out = NULL;
    calltree *t = calloc(1, sizeof *t);
    if (t == NULL)
        return strata_error_oom(err);
    size_t expected = expected_nodes ? expected_nodes : DEFAULT_NODES;
    uint32_t root;
    t->group_by = CALLTREE_GROUP_EXACT;
    t->grouping.mask = CALLTREE_GROUP_EXACT;
    if (strata_intern_init(&t->strings) != 0 ||
        strata_intern_add(&t->strings, "", 0, &t->empty_sid) != 0 ||
        child_index_reserve(t, expected) != 0 || strata_u64_map_init(&t->frame_map, 256) != 0 ||
        new_node(t, CALLTREE_NONE, CALLTREE_NONE, &root) != 0) {
        calltree_free(t);
        return strata_error_oom(err);
    }
    *out = t;
    return 0;
}

static void free_finalized(calltree *t) {
    free(t->total);
    free(t->total_base);
    free(t->child_offset);
    free(t->children);
    free(t->frame_rank);
    free(t->frame_label);
    t->total = t->total_base = NULL;
    t->child_offset = t->children = t->frame_rank = t->frame_label = NULL;
    t->finalized = false;
}

void calltree_free(calltree *t) {
    if (t == NULL)
        return;
    calltree_grouping_free(&t->grouping);
    free(t->label_words);
    strata_intern_free(&t->strings);
    strata_u64_map_free(&t->frame_map);
    child_index_free(&t->child_map);
    free(t->frame_str);
    free(t->frame_extra);
    free(t->parent);
    free(t->frame);
    free(t->self);
    free(t->self_base);
    free_finalized(t);
    free(t);
}

static int intern_str(calltree *t, calltree_str s, uint32_t *id) {
    if (s.ptr == NULL || s.len == 0)
        return strata_intern_add(&t->strings, "", 0, id);
    return strata_intern_add(&t->strings, s.ptr, s.len, id);
}

int calltree_set_group_by(calltree *t, unsigned mask, strata_error *err) {
    calltree_grouping g = {.mask = mask};
    return calltree_set_grouping(t, &g, err);
}

int calltree_set_grouping(calltree *t, const calltree_grouping *g, strata_error *err) {
    if (t->n_frames > 0)
        return strata_error_set(err, STRATA_FAILED_PRECONDITION,
                                "call tree: group-by is set before the first frame");
    if (g->mask == 0 || (g->mask & ~(unsigned)CALLTREE_GROUP_EXACT) != 0)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "call tree: bad group-by mask %#x",
                                g->mask);
    calltree_grouping copy = {
        .mask = g->mask, .all_labels = g->all_labels, .by_timestamp = g->by_timestamp};
    for (size_t i = 0; i < g->n_labels; i++) {
        if (calltree_grouping_add_label(&copy, g->labels[i], err) != 0) {
            calltree_grouping_free(&copy);
            return -1;
        }
    }
    calltree_grouping_free(&t->grouping);
    t->grouping = copy;
    t->group_by = g->mask;
    return 0;
}

unsigned calltree_group_by(const calltree *t) {
    return t->group_by;
}

const calltree_grouping *calltree_get_grouping(const calltree *t) {
    return &t->grouping;
}

/* A frame's identity under the tree's group-by: the chosen fields, every other one zero. Built
 * with memset so padding compares and hashes equal. */
#define FRAME_KEY_LABELS (1u << 31) /* a label frame: only sid[FRAME_NAME] counts */

typedef struct frame_key {
    uint32_t sid[FRAME_NSTR];
    uint32_t flags; /* inlined | folded << 1 | lineless << 2 | mapping_flags << 3, or
                       FRAME_KEY_LABELS */
    uint64_t address;
    int64_t line;
    int64_t start_line;
    uint64_t memory_start;
    uint64_t memory_limit;
    uint64_t file_offset;
} frame_key;

static void make_key(unsigned group_by, const uint32_t sid[FRAME_NSTR],
                     const calltree_frame_extra *x, frame_key *k) {
    memset(k, 0, sizeof *k);
    if (x->label_count > 0) { /* a label frame: its labels, as its display name */
        k->sid[FRAME_NAME] = sid[FRAME_NAME];
        k->flags = FRAME_KEY_LABELS;
        return;
    }
    if (group_by & CALLTREE_GROUP_LOCATION) { /* the exact location: everything */
        memcpy(k->sid, sid, sizeof k->sid);
        k->flags = (uint32_t)x->loc.inlined | (uint32_t)x->loc.folded << 1 |
                   (uint32_t)x->loc.lineless << 2 | x->loc.mapping_flags << 3;
        k->address = x->loc.address;
        k->line = x->loc.line;
        k->start_line = x->start_line;
        k->memory_start = x->loc.memory_start;
        k->memory_limit = x->loc.memory_limit;
        k->file_offset = x->loc.file_offset;
        return;
    }
    if (group_by & CALLTREE_GROUP_FUNCTION_NAME)
        k->sid[FRAME_NAME] = sid[FRAME_NAME];
    if (group_by & CALLTREE_GROUP_FILE_NAME)
        k->sid[FRAME_FILENAME] = sid[FRAME_FILENAME];
    if (group_by & CALLTREE_GROUP_MAPPING_FILE)
        k->sid[FRAME_MAPPING_FILE] = sid[FRAME_MAPPING_FILE];
}

/* Keeps what every occurrence of a frame agrees on: a field outside the identity that differs
 * between occurrences is blanked, so the result does not depend on the order of merging. */
static void reconcile_frame(calltree *t, uint32_t f, const uint32_t sid[FRAME_NSTR],
                            const calltree_frame_extra *x) {
    uint32_t *stored = &t->frame_str[(size_t)f * FRAME_NSTR];
    for (int i = 0; i < FRAME_NSTR; i++)
        if (stored[i] != sid[i])
            stored[i] = t->empty_sid;
    calltree_frame_extra *y = &t->frame_extra[f];
    if (y->start_line != x->start_line)
        y->start_line = 0;
    if (y->loc.address != x->loc.address)
        y->loc.address = 0;
    if (y->loc.line != x->loc.line)
        y->loc.line = 0;
    y->loc.inlined = y->loc.inlined && x->loc.inlined;
    y->loc.folded = y->loc.folded && x->loc.folded;
    y->loc.lineless = y->loc.lineless && x->loc.lineless;
    if (y->loc.memory_start != x->loc.memory_start || y->loc.memory_limit != x->loc.memory_limit ||
        y->loc.file_offset != x->loc.file_offset) {
        y->loc.memory_start = y->loc.memory_limit = y->loc.file_offset = 0;
    }
    y->loc.mapping_flags &= x->loc.mapping_flags;
}

/* Finds the frame with these fields under the tree's group-by, inserting it if absent. Room for a
 * new frame is made first, so a failed insert never leaves the map pointing past the frame
 * arrays. */
static int find_or_add_frame(calltree *t, const uint32_t sid[FRAME_NSTR],
                             const calltree_frame_extra *x, uint32_t *frame, strata_error *err) {
    if (t->n_frames >= MAX_IDS)
        return strata_error_set(err, STRATA_RESOURCE_EXHAUSTED, "call tree: too many frames");
    if (t->n_frames == t->frames_cap && grow_frames(t) != 0)
        return strata_error_oom(err);
    frame_key key;
    make_key(t->group_by, sid, x, &key);
    for (uint64_t seed = 0;; seed++) {
        uint64_t h = strata_hash_bytes(&key, sizeof key, seed);
        h = h ? h : 1;
        bool inserted;
        uint64_t *slot = strata_u64_map_upsert(&t->frame_map, h, t->n_frames, &inserted);
        if (slot == NULL)
            return strata_error_oom(err);
        if (!inserted) {
            frame_key other;
            make_key(t->group_by, &t->frame_str[*slot * FRAME_NSTR], &t->frame_extra[*slot],
                     &other);
            if (memcmp(&other, &key, sizeof key) != 0)
                continue; /* a 64-bit collision: try the next seed */
            *frame = (uint32_t)*slot;
            if (t->group_by != CALLTREE_GROUP_EXACT && x->label_count == 0)
                reconcile_frame(t, *frame, sid, x);
            return 0;
        }
        memcpy(&t->frame_str[t->n_frames * FRAME_NSTR], sid, FRAME_NSTR * sizeof sid[0]);
        t->frame_extra[t->n_frames] = *x;
        *frame = (uint32_t)t->n_frames++;
        t->finalized = false;
        return 0;
    }
}

int calltree_intern_frame(calltree *t, const calltree_frame_desc *d, uint32_t *frame,
                          strata_error *err) {
    uint32_t sid[FRAME_NSTR];
    if (intern_str(t, d->name, &sid[FRAME_NAME]) != 0 ||
        intern_str(t, d->system_name, &sid[FRAME_SYSTEM_NAME]) != 0 ||
        intern_str(t, d->filename, &sid[FRAME_FILENAME]) != 0 ||
        intern_str(t, d->mapping_file, &sid[FRAME_MAPPING_FILE]) != 0 ||
        intern_str(t, d->build_id, &sid[FRAME_BUILD_ID]) != 0)
        return strata_error_oom(err);
    calltree_frame_extra x = {d->start_line, d->loc, 0, 0};
    return find_or_add_frame(t, sid, &x, frame, err);
}

int calltree_intern_string(calltree *t, calltree_str s, uint32_t *id, strata_error *err) {
    return intern_str(t, s, id) != 0 ? strata_error_oom(err) : 0;
}

int calltree_intern_frame_ids(calltree *t, const calltree_frame_ids *d, uint32_t *frame,
                              strata_error *err) {
    uint32_t sid[FRAME_NSTR];
    sid[FRAME_NAME] = d->name;
    sid[FRAME_SYSTEM_NAME] = d->system_name;
    sid[FRAME_FILENAME] = d->filename;
    sid[FRAME_MAPPING_FILE] = d->mapping_file;
    sid[FRAME_BUILD_ID] = d->build_id;
    for (int i = 0; i < FRAME_NSTR; i++)
        if (sid[i] >= t->strings.count)
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "call tree: string id %u is not in the table", sid[i]);
    calltree_frame_extra x = {d->start_line, d->loc, 0, 0};
    return find_or_add_frame(t, sid, &x, frame, err);
}

/* Appends value quoted as a Prometheus label value: "...", with \\, \" and \n escaped. */
static int append_quoted(strata_buffer *b, calltree_str v) {
    if (strata_buffer_append_byte(b, '"') != 0)
        return -1;
    for (size_t i = 0; i < v.len; i++) {
        char c = v.ptr[i];
        const char *esc = c == '\\' ? "\\\\" : c == '"' ? "\\\"" : c == '\n' ? "\\n" : NULL;
        if (esc != NULL ? strata_buffer_append_str(b, esc) != 0
                        : strata_buffer_append_byte(b, (uint8_t)c) != 0)
            return -1;
    }
    return strata_buffer_append_byte(b, '"');
}

static int compare_labels(const void *a, const void *b) {
    const calltree_label *x = a, *y = b;
    size_t n = x->name.len < y->name.len ? x->name.len : y->name.len;
    int c = n > 0 ? memcmp(x->name.ptr, y->name.ptr, n) : 0;
    if (c != 0)
        return c;
    return (x->name.len > y->name.len) - (x->name.len < y->name.len);
}

int calltree_intern_label_frame(calltree *t, const calltree_label *labels, size_t n,
                                uint32_t *frame, strata_error *err) {
    if (n == 0 || n > UINT32_MAX / 4)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "call tree: a label frame needs at least one label");
    calltree_label *sorted = malloc(n * sizeof *sorted);
    if (sorted == NULL)
        return strata_error_oom(err);
    memcpy(sorted, labels, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, compare_labels);
    strata_buffer text = STRATA_BUFFER_INIT;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        if (sorted[i].name.len == 0 || (i > 0 && compare_labels(&sorted[i - 1], &sorted[i]) == 0))
            rc = strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                  "call tree: label names must be non-empty and unique");
        else if ((i > 0 && strata_buffer_append_str(&text, ", ") != 0) ||
                 strata_buffer_append(&text, sorted[i].name.ptr, sorted[i].name.len) != 0 ||
                 strata_buffer_append_byte(&text, '=') != 0 ||
                 append_quoted(&text, sorted[i].value) != 0)
            rc = strata_error_oom(err);
    }
    size_t words = t->n_label_words;
    uint32_t sid[FRAME_NSTR] = {0};
    if (rc == 0 &&
        STRATA_ARRAY_RESERVE(t->label_words, t->cap_label_words, t->n_label_words + 2 * n) != 0)
        rc = strata_error_oom(err);
    for (int i = 0; rc == 0 && i < FRAME_NSTR; i++)
        sid[i] = t->empty_sid;
    if (rc == 0 && strata_intern_add(&t->strings, text.len > 0 ? (const char *)text.data : "",
                                     text.len, &sid[FRAME_NAME]) != 0)
        rc = strata_error_oom(err);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        if (intern_str(t, sorted[i].name, &t->label_words[t->n_label_words]) != 0 ||
            intern_str(t, sorted[i].value, &t->label_words[t->n_label_words + 1]) != 0)
            rc = strata_error_oom(err);
        t->n_label_words += 2;
    }
    if (rc == 0) {
        calltree_frame_extra x;
        memset(&x, 0, sizeof x);
        x.label_first = (uint32_t)words;
        x.label_count = (uint32_t)n;
        size_t before = t->n_frames;
        rc = find_or_add_frame(t, sid, &x, frame, err);
        if (rc != 0 || t->n_frames == before)
            t->n_label_words = words; /* known already: its pairs are stored */
    } else {
        t->n_label_words = words;
    }
    strata_buffer_free(&text);
    free(sorted);
    return rc;
}

int calltree_intern_time_frame(calltree *t, int64_t time_ns, int64_t duration_ns, uint32_t *frame,
                               strata_error *err) {
    char ts[24], dur[24];
    snprintf(ts, sizeof ts, "%lld", (long long)time_ns);
    snprintf(dur, sizeof dur, "%lld", (long long)duration_ns);
    calltree_label labels[2] = {{calltree_cstr(CALLTREE_TIME_LABEL), calltree_cstr(ts)},
                                {calltree_cstr(CALLTREE_DURATION_LABEL), calltree_cstr(dur)}};
    return calltree_intern_label_frame(t, labels, 2, frame, err);
}

bool calltree_frame_time(const calltree *t, uint32_t f, int64_t *time_ns, int64_t *duration_ns) {
    if (calltree_frame_label_count(t, f) != 2)
        return false;
    const char *name, *value;
    bool have_time = false, have_duration = false;
    for (size_t i = 0; i < 2; i++) {
        calltree_frame_label_at(t, f, i, &name, &value);
        if (strcmp(name, CALLTREE_TIME_LABEL) == 0) {
            *time_ns = strtoll(value, NULL, 10);
            have_time = true;
        } else if (strcmp(name, CALLTREE_DURATION_LABEL) == 0) {
            *duration_ns = strtoll(value, NULL, 10);
            have_duration = true;
        }
    }
    return have_time && have_duration;
}

size_t calltree_frame_label_count(const calltree *t, uint32_t f) {
    return f < t->n_frames ? t->frame_extra[f].label_count : 0;
}

void calltree_frame_label_at(const calltree *t, uint32_t f, size_t i, const char **name,
                             const char **value) {
    *name = *value = "";
    if (f >= t->n_frames || i >= t->frame_extra[f].label_count)
        return;
    const uint32_t *pair = &t->label_words[t->frame_extra[f].label_first + 2 * i];
    *name = calltree_string(t, pair[0]);
    *value = calltree_string(t, pair[1]);
}

/* ---- the child index (calltree_internal.h) ---- */

static uint64_t child_hash(uint32_t parent, uint32_t frame) {
    return strata_hash_u64(((uint64_t)parent << 32 | frame) + 1);
}

static uint64_t child_tag(uint64_t hash) {
    return hash & 0xffffffff00000000ULL;
}

static size_t child_capacity(size_t nodes) {
    size_t cap = 16;
    while (cap * 3 < (nodes + 1) * 4)
        cap *= 2;
    return cap;
}

static void child_index_free(calltree_child_index *c) {
    free(c->slots);
    memset(c, 0, sizeof *c);
}

/* Puts node id (known not to be there) into slots of capacity mask + 1. */
static void child_index_place(uint64_t *slots, size_t mask, uint64_t hash, uint32_t id) {
    size_t i = hash & mask;
    while (slots[i] != 0)
        i = (i + 1) & mask;
    slots[i] = child_tag(hash) | id;
}

/* Makes the index cap slots and puts every node but the root in it: growth (the tags keep only
 * half of each hash, so the others come from the nodes' parents and frames), and the rebuild
 * after calltree_finalize or a renumbering dropped it. */
static int child_index_rebuild(calltree *t, size_t cap) {
    uint64_t *slots = strata_table_alloc(cap, sizeof *slots);
    if (slots == NULL)
        return -1;
    for (size_t id = 1; id < t->n_nodes; id++)
        child_index_place(slots, cap - 1, child_hash(t->parent[id], t->frame[id]), (uint32_t)id);
    free(t->child_map.slots);
    t->child_map.slots = slots;
    t->child_map.mask = cap - 1;
    t->child_map.count = t->n_nodes > 0 ? t->n_nodes - 1 : 0;
    return 0;
}

/* Room in the index for nodes nodes (and the index itself, if dropped). */
static int child_index_reserve(calltree *t, size_t nodes) {
    size_t cap = child_capacity(nodes);
    if (t->child_map.slots != NULL && cap <= t->child_map.mask + 1)
        return 0;
    return child_index_rebuild(t, cap);
}

int calltree_reserve(calltree *t, size_t n_nodes, strata_error *err) {
    if (n_nodes > MAX_IDS)
        n_nodes = MAX_IDS;
    if (n_nodes > t->nodes_cap && grow_nodes_to(t, n_nodes) != 0)
        return strata_error_oom(err);
    if (t->child_map.slots != NULL && child_index_reserve(t, n_nodes) != 0)
        return strata_error_oom(err);
    return 0;
}

void calltree_prefetch_child(const calltree *t, uint32_t parent, uint32_t frame) {
    if (t->child_map.slots != NULL)
        __builtin_prefetch(&t->child_map.slots[child_hash(parent, frame) & t->child_map.mask]);
}

int calltree_child(calltree *t, uint32_t parent, uint32_t frame, uint32_t *node,
                   strata_error *err) {
    if (parent >= t->n_nodes || frame >= t->n_frames)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "call tree: node %u or frame %u out of range", parent, frame);
    uint64_t hash = child_hash(parent, frame);
    /* One probe whether the child exists or not (merges create millions of nodes): room for a
     * new node is made first, so an inserted key always gets its node. */
    if (t->n_nodes >= MAX_IDS)
        return strata_error_set(err, STRATA_RESOURCE_EXHAUSTED, "call tree: too many nodes");
    if (t->n_nodes == t->nodes_cap && grow_nodes(t) != 0)
        return strata_error_oom(err);
    calltree_child_index *c = &t->child_map;
    if ((c->slots == NULL || (c->count + 1) * 4 > (c->mask + 1) * 3) &&
        child_index_reserve(t, t->n_nodes + 1) != 0)
        return strata_error_oom(err);
    size_t i = hash & c->mask;
    for (uint64_t s; (s = c->slots[i]) != 0; i = (i + 1) & c->mask) {
        uint32_t id = (uint32_t)s;
        if (child_tag(s) == child_tag(hash) && t->parent[id] == parent && t->frame[id] == frame) {
            *node = id;
            return 0;
        }
    }
    uint32_t id;
    if (new_node(t, parent, frame, &id) != 0) /* cannot fail: capacity was made above */
        return strata_error_oom(err);
    c->slots[i] = child_tag(hash) | id;
    c->count++;
    *node = id;
    return 0;
}

int calltree_insert_stack(calltree *t, const uint32_t *frames, size_t n, uint32_t *node,
                          strata_error *err) {
    uint32_t cur = CALLTREE_ROOT;
    for (size_t i = 0; i < n; i++)
        if (calltree_child(t, cur, frames[i], &cur, err) != 0)
            return -1;
    *node = cur;
    return 0;
}

void calltree_add(calltree *t, uint32_t node, int64_t value) {
    if (node < t->n_nodes) {
        t->self[node] += value;
        t->finalized = false;
    }
}

void calltree_add_base(calltree *t, uint32_t node, int64_t value) {
    if (node < t->n_nodes) {
        if (value != 0 && ensure_self_base(t) != 0) {
            t->base_lost = true; /* reported by calltree_finalize */
            return;
        }
        if (value != 0)
            t->self_base[node] += value;
        t->diff = true;
        t->finalized = false;
    }
}

void calltree_set_diff(calltree *t, bool diff) {
    t->diff = diff;
}

bool calltree_is_diff(const calltree *t) {
    return t->diff;
}

/* Interns label frame f of src into dst. */
static int merge_label_frame(calltree *dst, const calltree *src, uint32_t f, uint32_t *out,
                             strata_error *err) {
    size_t n = src->frame_extra[f].label_count;
    calltree_label *labels = malloc(n * sizeof *labels);
    if (labels == NULL)
        return strata_error_oom(err);
    for (size_t i = 0; i < n; i++) {
        const char *name, *value;
        calltree_frame_label_at(src, f, i, &name, &value);
        labels[i].name = calltree_cstr(name);
        labels[i].value = calltree_cstr(value);
    }
    int rc = calltree_intern_label_frame(dst, labels, n, out, err);
    free(labels);
    return rc;
}

/* Interns every frame of src into dst; map[src frame] = dst frame. */
static int merge_frames(calltree *dst, const calltree *src, uint32_t *map, strata_error *err) {
    for (size_t f = 0; f < src->n_frames; f++) {
        if (calltree_frame_is_labels(src, (uint32_t)f)) {
            if (merge_label_frame(dst, src, (uint32_t)f, &map[f], err) != 0)
                return -1;
            continue;
        }
        calltree_frame fr = calltree_frame_get(src, (uint32_t)f);
        calltree_frame_desc d = {calltree_cstr(fr.name),
                                 calltree_cstr(fr.system_name),
                                 calltree_cstr(fr.filename),
                                 calltree_cstr(fr.mapping_file),
                                 calltree_cstr(fr.build_id),
                                 fr.start_line,
                                 fr.loc};
        if (calltree_intern_frame(dst, &d, &map[f], err) != 0)
            return -1;
    }
    return 0;
}

void calltree_swap(calltree *a, calltree *b) {
    calltree tmp = *a;
    *a = *b;
    *b = tmp;
}

int calltree_merge(calltree *dst, const calltree *src, strata_error *err) {
    if (dst == src)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "call tree: cannot merge a tree into itself");
    uint32_t *fmap = malloc((src->n_frames ? src->n_frames : 1) * sizeof *fmap);
    uint32_t *nmap = malloc(src->n_nodes * sizeof *nmap);
    int rc = -1;
    if (fmap == NULL || nmap == NULL) {
        strata_error_oom(err);
        goto out;
    }
    if (merge_frames(dst, src, fmap, err) != 0)
        goto out;
    nmap[0] = CALLTREE_ROOT;
    for (size_t i = 1; i < src->n_nodes; i++)
        if (calltree_child(dst, nmap[src->parent[i]], fmap[src->frame[i]], &nmap[i], err) != 0)
            goto out;
    if (src->self_base != NULL && ensure_self_base(dst) != 0) {
        strata_error_oom(err);
        goto out;
    }
    for (size_t i = 0; i < src->n_nodes; i++) {
        dst->self[nmap[i]] += src->self[i];
        if (src->self_base != NULL)
            dst->self_base[nmap[i]] += src->self_base[i];
    }
    dst->diff = dst->diff || src->diff;
    dst->finalized = false;
    rc = 0;
out:
    free(fmap);
    free(nmap);
    return rc;
}

/* ---- finalize ---- */

typedef struct frame_sort_entry {
    const char *s[FRAME_NSTR];
    uint64_t address;
    int64_t line;
    const calltree_frame_extra *x; /* the rest, so that no two distinct frames tie */
    uint32_t id;
} frame_sort_entry;

static int compare_frames(const void *a, const void *b) {
    const frame_sort_entry *x = a, *y = b;
    for (int i = 0; i < FRAME_NSTR; i++) {
        int c = strcmp(x->s[i], y->s[i]);
        if (c != 0)
            return c;
    }
    if (x->address != y->address)
        return x->address < y->address ? -1 : 1;
    if (x->line != y->line)
        return x->line < y->line ? -1 : 1;
    if (x->x->start_line != y->x->start_line)
        return x->x->start_line < y->x->start_line ? -1 : 1;
    const calltree_frame_location *p = &x->x->loc, *q = &y->x->loc;
    uint64_t keys_x[] = {p->inlined,      p->folded,      p->lineless,     p->memory_start,
                         p->memory_limit, p->file_offset, p->mapping_flags};
    uint64_t keys_y[] = {q->inlined,      q->folded,      q->lineless,     q->memory_start,
                         q->memory_limit, q->file_offset, q->mapping_flags};
    for (size_t i = 0; i < sizeof keys_x / sizeof keys_x[0]; i++)
        if (keys_x[i] != keys_y[i])
            return keys_x[i] < keys_y[i] ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static int rank_frames(calltree *t) {
    size_t n = t->n_frames ? t->n_frames : 1;
    frame_sort_entry *e = malloc(n * sizeof *e);
    t->frame_rank = malloc(n * sizeof *t->frame_rank);
    if (e == NULL || t->frame_rank == NULL) {
        free(e);
        return -1;
    }
    for (size_t f = 0; f < t->n_frames; f++) {
        for (int i = 0; i < FRAME_NSTR; i++)
            e[f].s[i] = calltree_frame_string(t, (uint32_t)f, i);
        e[f].address = t->frame_extra[f].loc.address;
        e[f].line = t->frame_extra[f].loc.line;
        e[f].x = &t->frame_extra[f];
        e[f].id = (uint32_t)f;
    }
    qsort(e, t->n_frames, sizeof *e, compare_frames);
    for (size_t r = 0; r < t->n_frames; r++)
        t->frame_rank[e[r].id] = (uint32_t)r;
    free(e);
    return 0;
}

static int compare_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Sorts children[lo, hi) by frame rank, using keys as scratch. */
static void sort_children(const calltree *t, uint32_t *children, size_t n, uint64_t *keys) {
    if (n < 2)
        return;
    for (size_t i = 0; i < n; i++)
        keys[i] = (uint64_t)t->frame_rank[t->frame[children[i]]] << 32 | children[i];
    qsort(keys, n, sizeof *keys, compare_u64);
    for (size_t i = 0; i < n; i++)
        children[i] = (uint32_t)keys[i];
}

static int build_children(calltree *t) {
    size_t n = t->n_nodes;
    t->child_offset = calloc(n + 1, sizeof *t->child_offset);
    t->children = malloc((n > 1 ? n - 1 : 1) * sizeof *t->children);
    uint32_t *fill = malloc(n * sizeof *fill);
    uint64_t *keys = malloc((n > 1 ? n - 1 : 1) * sizeof *keys);
    if (t->child_offset == NULL || t->children == NULL || fill == NULL || keys == NULL) {
        free(fill);
        free(keys);
        return -1;
    }
    for (size_t i = 1; i < n; i++)
        t->child_offset[t->parent[i] + 1]++;
    for (size_t i = 0; i < n; i++)
        t->child_offset[i + 1] += t->child_offset[i];
    memcpy(fill, t->child_offset, n * sizeof *fill);
    for (size_t i = 1; i < n; i++)
        t->children[fill[t->parent[i]]++] = (uint32_t)i;
    for (size_t i = 0; i < n; i++)
        sort_children(t, &t->children[t->child_offset[i]],
                      t->child_offset[i + 1] - t->child_offset[i], keys);
    free(fill);
    free(keys);
    return 0;
}

static void compute_totals(calltree *t) {
    memcpy(t->total, t->self, t->n_nodes * sizeof *t->total);
    for (size_t i = t->n_nodes; i-- > 1;)
        t->total[t->parent[i]] += t->total[i];
    if (t->total_base == NULL)
        return;
    memcpy(t->total_base, t->self_base, t->n_nodes * sizeof *t->total_base);
    for (size_t i = t->n_nodes; i-- > 1;)
        t->total_base[t->parent[i]] += t->total_base[i];
}

/* The display name of frame f (see calltree_frame_label). */
static int label_frame(calltree *t, uint32_t f, uint32_t *sid) {
    const calltree_frame_location *loc = &t->frame_extra[f].loc;
    const char *name = calltree_frame_string(t, f, FRAME_NAME);
    const char *file = calltree_frame_string(t, f, FRAME_FILENAME);
    const char *mapping = calltree_frame_string(t, f, FRAME_MAPPING_FILE);
    char hex[24];
    snprintf(hex, sizeof hex, "0x%llx", (unsigned long long)loc->address);
    const char *base = name;
    if (base[0] == '\0')
        base = file;
    if (base[0] == '\0')
        base = mapping;
    if (base[0] == '\0')
        base = loc->address != 0 ? hex : "unknown";
    strata_buffer text = STRATA_BUFFER_INIT;
    int rc = strata_buffer_append_str(&text, base);
    /* Frames of one name kept apart by the grouping get labels apart too, so the flame graph's
     * names (and the table rows carrying them) say which binary, file or address each is. */
    if (rc == 0 && name[0] != '\0' && (t->group_by & CALLTREE_GROUP_FILE_NAME) && file[0] != '\0')
        rc = strata_buffer_appendf(&text, " (%s)", file);
    if (rc == 0 && name[0] != '\0' && (t->group_by & CALLTREE_GROUP_MAPPING_FILE) &&
        mapping[0] != '\0' && base != mapping)
        rc = strata_buffer_appendf(&text, " [%s]", mapping);
    if (rc == 0 && (t->group_by & CALLTREE_GROUP_LOCATION) && loc->address != 0 &&
        strcmp(base, hex) != 0)
        rc = strata_buffer_appendf(&text, " %s", hex);
    if (rc == 0)
        rc = strata_intern_add(&t->strings, (const char *)text.data, text.len, sid);
    strata_buffer_free(&text);
    return rc;
}

static int label_frames(calltree *t) {
    t->frame_label = malloc((t->n_frames ? t->n_frames : 1) * sizeof *t->frame_label);
    if (t->frame_label == NULL)
        return -1;
    for (size_t f = 0; f < t->n_frames; f++)
        if (label_frame(t, (uint32_t)f, &t->frame_label[f]) != 0)
            return -1;
    return 0;
}

/* Moves element i of array (n elements of elem bytes) to pre[i], through scratch (as big). */
static void permute_array(void *array, size_t n, size_t elem, const uint32_t *pre, void *scratch) {
    const char *in = array;
    char *out = scratch;
    for (size_t i = 0; i < n; i++)
        memcpy(out + (size_t)pre[i] * elem, in + i * elem, elem);
    memcpy(array, scratch, n * elem);
}

int calltree_order_depth_first(calltree *t, strata_error *err) {
    size_t n = t->n_nodes;
    if (n < 3)
        return 0;
    uint32_t *pre = malloc(n * sizeof *pre), *next = malloc(n * sizeof *next);
    void *scratch = malloc(n * sizeof(int64_t));
    if (pre == NULL || next == NULL || scratch == NULL) {
        free(pre);
        free(next);
        free(scratch);
        return strata_error_oom(err);
    }
    free_finalized(t);
    child_index_free(&t->child_map); /* holds the old ids: rebuilt on the next insert */
    /* Parents have lower ids than their children, so subtree sizes add up in one backward pass
     * and positions come in one forward pass: a node's subtree takes the range after the ranges of
     * its earlier siblings. No walk chases pointers, so the random accesses overlap. */
    for (size_t i = 0; i < n; i++)
        next[i] = 1; /* subtree size, for now */
    for (size_t i = n; i-- > 1;)
        next[t->parent[i]] += next[i];
    pre[0] = 0;
    next[0] = 1;
    for (size_t i = 1; i < n; i++) {
        uint32_t p = t->parent[i], size = next[i];
        pre[i] = next[p]; /* next[p]: where p's next child's subtree goes */
        next[p] += size;
        next[i] = pre[i] + 1;
    }
    free(next);
    for (size_t i = 1; i < n; i++)
        t->parent[i] = pre[t->parent[i]];
    permute_array(t->parent, n, sizeof *t->parent, pre, scratch);
    permute_array(t->frame, n, sizeof *t->frame, pre, scratch);
    permute_array(t->self, n, sizeof *t->self, pre, scratch);
    if (t->self_base != NULL)
        permute_array(t->self_base, n, sizeof *t->self_base, pre, scratch);
    free(scratch);
    free(pre);
    return 0;
}

int calltree_finalize(calltree *t, strata_error *err) {
    free_finalized(t);
    /* The child map serves only inserts, and a finalized tree is usually done growing: it goes
     * before the finalized arrays come, so a merge's peak holds one or the other (over a
     * compacted block of 2.8 M nodes the map is 64-128 MiB). An insert after this rebuilds it. */
    if (t->base_lost)
        return strata_error_set(err, STRATA_RESOURCE_EXHAUSTED,
                                "call tree: out of memory for the base side of a diff");
    child_index_free(&t->child_map);
    if (t->diff && ensure_self_base(t) != 0) /* a diff tree always has both sides */
        return strata_error_oom(err);
    t->total = malloc(t->n_nodes * sizeof *t->total);
    if (t->self_base != NULL)
        t->total_base = malloc(t->n_nodes * sizeof *t->total_base);
    if (t->total == NULL || (t->self_base != NULL && t->total_base == NULL) ||
        rank_frames(t) != 0 || build_children(t) != 0 || label_frames(t) != 0) {
        free_finalized(t);
        return strata_error_oom(err);
    }
    compute_totals(t);
    t->finalized = true;
    return 0;
}

int calltree_require_finalized(const calltree *t, strata_error *err) {
    if (!t->finalized)
        return strata_error_set(err, STRATA_FAILED_PRECONDITION, "call tree: not finalized");
    return 0;
}

/* ---- scaling ---- */

static int64_t scale_value(int64_t v, int64_t num, int64_t den) {
    calltree_i128 p = (calltree_i128)v * num;
    calltree_i128 q = p / den, r = p % den;
    calltree_i128 ar = r < 0 ? -r : r;
    if (2 * ar >= den)
        q += p < 0 ? -1 : 1;
    if (q > INT64_MAX)
        return INT64_MAX;
    if (q < INT64_MIN)
        return INT64_MIN;
    return (int64_t)q;
}

static int scale_array(calltree *t, int64_t *values, int64_t num, int64_t den, strata_error *err) {
    if (den <= 0 || num < 0)
        return strata_error_set(
            err, STRATA_INVALID_ARGUMENT,
            "call tree: scale factor %lld/%lld must be non-negative with a positive "
            "denominator",
            (long long)num, (long long)den);
    for (size_t i = 0; values != NULL && i < t->n_nodes; i++)
        values[i] = scale_value(values[i], num, den);
    if (t->finalized)
        compute_totals(t);
    return 0;
}

int calltree_scale_base(calltree *t, int64_t num, int64_t den, strata_error *err) {
    return scale_array(t, t->self_base, num, den, err); /* NULL: all zero, nothing changes */
}

int calltree_scale_main(calltree *t, int64_t num, int64_t den, strata_error *err) {
    return scale_array(t, t->self, num, den, err);
}

int calltree_apply_diff_mode(calltree *t, bool absolute, strata_error *err) {
    if (calltree_require_finalized(t, err) != 0)
        return -1;
    int64_t a = calltree_total_base_at(t, 0), b = t->total[0];
    if (absolute || a <= 0 || b <= 0 || a == b)
        return 0;
    if (a < b)
        return calltree_scale_base(t, b, a, err);
    return calltree_scale_main(t, a, b, err);
}

/* ---- accessors ---- */

static size_t map_bytes(const strata_u64_map *m) {
    return m->slots != NULL ? (m->mask + 1) * sizeof *m->slots : 0;
}

size_t calltree_memory_bytes(const calltree *t) {
    const strata_intern *in = &t->strings;
    size_t bytes = sizeof *t + map_bytes(&t->frame_map);
    if (t->child_map.slots != NULL)
        bytes += (t->child_map.mask + 1) * sizeof *t->child_map.slots;
    bytes += t->nodes_cap * (2 * sizeof(uint32_t) + sizeof(int64_t));
    if (t->self_base != NULL)
        bytes += t->nodes_cap * sizeof(int64_t);
    bytes += t->frames_cap * (FRAME_NSTR * sizeof(uint32_t) + sizeof(calltree_frame_extra));
    bytes += t->cap_label_words * sizeof(uint32_t);
    bytes += in->cap * (sizeof(char *) + sizeof(uint32_t)) + in->total_bytes + in->count +
             (in->slots != NULL ? (in->slot_mask + 1) * (sizeof(uint32_t) + sizeof(uint64_t)) : 0);
    if (t->finalized)
        bytes += t->n_nodes * (sizeof(int64_t) + 2 * sizeof(uint32_t)) +
                 (t->total_base != NULL ? t->n_nodes * sizeof(int64_t) : 0) +
                 t->n_frames * 2 * sizeof(uint32_t);
    return bytes;
}

size_t calltree_node_count(const calltree *t) {
    return t->n_nodes;
}

size_t calltree_frame_count(const calltree *t) {
    return t->n_frames;
}

uint32_t calltree_node_frame(const calltree *t, uint32_t node) {
    return node < t->n_nodes ? t->frame[node] : CALLTREE_NONE;
}

uint32_t calltree_node_parent(const calltree *t, uint32_t node) {
    return node < t->n_nodes ? t->parent[node] : CALLTREE_NONE;
}

calltree_node_values calltree_node_get(const calltree *t, uint32_t node) {
    calltree_node_values v = {0, 0, 0, 0};
    if (node >= t->n_nodes)
        return v;
    v.self = t->self[node];
    v.self_base = calltree_self_base_at(t, node);
    if (t->finalized) {
        v.total = t->total[node];
        v.total_base = calltree_total_base_at(t, node);
    }
    return v;
}

const char *calltree_frame_label(const calltree *t, uint32_t f) {
    if (f >= t->n_frames || !t->finalized)
        return "";
    return calltree_string(t, t->frame_label[f]);
}

calltree_frame calltree_frame_get(const calltree *t, uint32_t f) {
    calltree_frame fr;
    memset(&fr, 0, sizeof fr);
    fr.name = fr.system_name = fr.filename = fr.mapping_file = fr.build_id = "";
    if (f >= t->n_frames)
        return fr;
    fr.name = calltree_frame_string(t, f, FRAME_NAME);
    fr.system_name = calltree_frame_string(t, f, FRAME_SYSTEM_NAME);
    fr.filename = calltree_frame_string(t, f, FRAME_FILENAME);
    fr.mapping_file = calltree_frame_string(t, f, FRAME_MAPPING_FILE);
    fr.build_id = calltree_frame_string(t, f, FRAME_BUILD_ID);
    fr.start_line = t->frame_extra[f].start_line;
    fr.loc = t->frame_extra[f].loc;
    return fr;
}

size_t calltree_child_count(const calltree *t, uint32_t node) {
    if (!t->finalized || node >= t->n_nodes)
        return 0;
    return t->child_offset[node + 1] - t->child_offset[node];
}

uint32_t calltree_child_at(const calltree *t, uint32_t node, size_t i) {
    if (i >= calltree_child_count(t, node))
        return CALLTREE_NONE;
    return t->children[t->child_offset[node] + i];
}

/* ---- group-by ---- */

static const struct {
    const char *name;
    unsigned mask;
} group_by_fields[] = {
    {"function_name", CALLTREE_GROUP_FUNCTION_NAME},
    {"function_file_name", CALLTREE_GROUP_FILE_NAME},
    {"location_address", CALLTREE_GROUP_LOCATION},
    {"mapping_file", CALLTREE_GROUP_MAPPING_FILE},
};

void calltree_grouping_free(calltree_grouping *g) {
    for (size_t i = 0; g->labels != NULL && i < g->n_labels; i++)
        free(g->labels[i]);
    free(g->labels);
    g->labels = NULL;
    g->n_labels = g->cap_labels = 0;
    g->all_labels = false;
}

bool calltree_grouping_has_labels(const calltree_grouping *g) {
    return g->all_labels || g->n_labels > 0;
}

static int add_label_name(calltree_grouping *g, const char *name, size_t len, strata_error *err) {
    if (len == 0)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "group_by labels.: the label name is empty");
    for (size_t i = 0; i < g->n_labels; i++)
        if (strlen(g->labels[i]) == len && memcmp(g->labels[i], name, len) == 0)
            return 0;
    if (STRATA_ARRAY_RESERVE_OR_OOM(g->labels, g->cap_labels, g->n_labels + 1, err) != 0)
        return -1;
    char *copy = malloc(len + 1);
    if (copy == NULL)
        return strata_error_oom(err);
    memcpy(copy, name, len);
    copy[len] = '\0';
    g->labels[g->n_labels++] = copy;
    return 0;
}

int calltree_grouping_add_label(calltree_grouping *g, const char *name, strata_error *err) {
    return add_label_name(g, name, name != NULL ? strlen(name) : 0, err);
}

static int group_by_field(const char *name, size_t len, calltree_grouping *g, strata_error *err) {
    for (size_t i = 0; i < sizeof group_by_fields / sizeof group_by_fields[0]; i++) {
        if (strlen(group_by_fields[i].name) == len &&
            memcmp(group_by_fields[i].name, name, len) == 0) {
            g->mask |= group_by_fields[i].mask;
            return 0;
        }
    }
    if (len == 6 && memcmp(name, "labels", 6) == 0) {
        g->all_labels = true;
        return 0;
    }
    if (len == 9 && memcmp(name, "timestamp", 9) == 0) {
        g->by_timestamp = true;
        return 0;
    }
    if (len >= 7 && memcmp(name, "labels.", 7) == 0)
        return add_label_name(g, name + 7, len - 7, err);
    return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                            "group_by: unknown field \"%.*s\" (want function_name, "
                            "function_file_name, location_address, mapping_file, timestamp, "
                            "labels or labels.<name>)",
                            (int)(len > 64 ? 64 : len), name);
}

int calltree_group_by_parse(const char *const *fields, size_t n, calltree_grouping *out,
                            strata_error *err) {
    calltree_grouping g = {.mask = 0};
    for (size_t i = 0; i < n; i++) {
        if (group_by_field(fields[i], strlen(fields[i]), &g, err) != 0) {
            calltree_grouping_free(&g);
            return -1;
        }
    }
    if (g.mask == 0)
        g.mask = CALLTREE_GROUP_DEFAULT;
    *out = g;
    return 0;
}

int calltree_group_by_parse_list(const char *list, calltree_grouping *out, strata_error *err) {
    calltree_grouping g = {.mask = 0};
    for (const char *p = list; p != NULL && *p != '\0';) {
        const char *end = strchr(p, ',');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        if (len > 0 && group_by_field(p, len, &g, err) != 0) {
            calltree_grouping_free(&g);
            return -1;
        }
        p = end != NULL ? end + 1 : p + len;
    }
    if (g.mask == 0)
        g.mask = CALLTREE_GROUP_DEFAULT;
    *out = g;
    return 0;
}

int calltree_validate_options(const calltree_report_options *opts, strata_error *err) {
    if (isnan(opts->node_trim_threshold) || opts->node_trim_threshold < 0)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "node_trim_threshold must be a non-negative percentage");
    return 0;
}
