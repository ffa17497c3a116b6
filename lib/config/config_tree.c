/*
 * config_tree.c - loading YAML into the immutable node tree (see config.h).
 *
 * libyaml's event parser drives a recursive builder. Nodes and strings are carved from an arena of
 * chunks owned by the document, so the whole tree is freed at once and node addresses never move
 * (children point at their parents). Children are gathered in a temporary array per collection and
 * copied into the arena when the collection ends. Duplicate keys are found as each key is added,
 * with a per-mapping interner, so the first problem in file order is the one reported.
 */
#include "config/config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <yaml.h>

#include "common/array.h"
#include "common/hash.h"

#define ARENA_CHUNK_SIZE 16384

struct config_node {
    config_node_kind kind;
    bool plain;  /* scalar written without quotes */
    bool is_key; /* a mapping key: its path is its mapping's */
    unsigned line, column;
    config_document *doc;
    const config_node *parent;
    size_t index; /* position in the parent */
    const char *text;
    size_t len;
    size_t count;
    config_node **keys;  /* mappings only */
    config_node **items; /* sequence items or mapping values */
};

typedef struct arena_chunk {
    struct arena_chunk *next;
    size_t used, cap;
    max_align_t data[];
} arena_chunk;

struct config_document {
    atomic_size_t refs;
    char *name;
    config_node *root;
    arena_chunk *chunks;
};

/* ---- Arena ------------------------------------------------------------------------------------
 */

static void *arena_alloc(config_document *doc, size_t size) {
    size_t align = sizeof(max_align_t);
    size = (size + align - 1) / align * align;
    arena_chunk *c = doc->chunks;
    if (c == NULL || c->cap - c->used < size) {
        size_t cap = size > ARENA_CHUNK_SIZE ? size : ARENA_CHUNK_SIZE;
        c = malloc(sizeof *c + cap);
        if (c == NULL)
            return NULL;
        c->used = 0;
        c->cap = cap;
        c->next = doc->chunks;
        doc->chunks = c;
    }
    void *p = (char *)c->data + c->used;
    c->used += size;
    return p;
}

static void document_destroy(config_document *doc) {
    arena_chunk *c = doc->chunks;
    while (c != NULL) {
        arena_chunk *next = c->next;
        free(c);
        c = next;
    }
    free(doc->name);
    free(doc);
}

static config_document *document_new(const char *name) {
    config_document *doc = calloc(1, sizeof *doc);
    if (doc == NULL)
        return NULL;
    atomic_init(&doc->refs, 1);
    doc->name = strdup(name != NULL ? name : "<string>");
    if (doc->name == NULL) {
        free(doc);
        return NULL;
    }
    return doc;
}

/* ---- Errors -----------------------------------------------------------------------------------
 */

void config_node_path(const config_node *n, char *out, size_t out_len) {
    if (out_len == 0)
        return;
    out[0] = '\0';
    if (n != NULL && n->is_key)
        n = n->parent;
    /* Collect ancestors root-first; depth is bounded by CONFIG_MAX_DEPTH (+1 for the key). */
    const config_node *chain[CONFIG_MAX_DEPTH + 2];
    size_t depth = 0;
    for (const config_node *p = n; p != NULL && p->parent != NULL && depth < CONFIG_MAX_DEPTH + 2;
         p = p->parent)
        chain[depth++] = p;
    size_t used = 0;
    for (size_t i = depth; i-- > 0;) {
        const config_node *c = chain[i];
        int w;
        if (c->parent->kind == CONFIG_NODE_MAPPING)
            w = snprintf(out + used, out_len - used, "%s%s", used > 0 ? "." : "",
                         c->parent->keys[c->index]->text);
        else
            w = snprintf(out + used, out_len - used, "[%zu]", c->index);
        if (w < 0 || (size_t)w >= out_len - used)
            return; /* truncated; snprintf already terminated it */
        used += (size_t)w;
    }
}

int config_node_error(strata_error *err, const config_node *n, const char *fmt, ...) {
    if (err == NULL)
        return -1;
    char message[STRATA_ERROR_MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    if (n == NULL)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "%s", message);
    char path[256];
    config_node_path(n, path, sizeof path);
    if (path[0] == '\0')
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "%s:%u:%u: %s", n->doc->name, n->line,
                                n->column, message);
    return strata_error_set(err, STRATA_INVALID_ARGUMENT, "%s:%u:%u: %s: %s", n->doc->name, n->line,
                            n->column, path, message);
}

/* ---- Loader -----------------------------------------------------------------------------------
 */

typedef struct loader {
    yaml_parser_t parser;
    yaml_event_t event;
    bool have_event;
    config_document *doc;
    const char *text;
    size_t text_len;
    strata_error *err;
} loader;

typedef struct node_vec {
    config_node **keys;
    config_node **items;
    size_t count, cap;
} node_vec;

static int loader_error_at(loader *ld, const yaml_mark_t *mark, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int loader_error_at(loader *ld, const yaml_mark_t *mark, const char *fmt, ...) {
    if (ld->err == NULL)
        return -1;
    char message[STRATA_ERROR_MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    return strata_error_set(ld->err, STRATA_INVALID_ARGUMENT, "%s:%zu:%zu: %s", ld->doc->name,
                            mark->line + 1, mark->column + 1, message);
}

static int parser_error(loader *ld) {
    const yaml_parser_t *p = &ld->parser;
    if (p->error == YAML_MEMORY_ERROR)
        return strata_error_oom(ld->err);
    const char *problem = p->problem != NULL ? p->problem : "malformed YAML";
    yaml_mark_t mark = p->problem_mark;
    if (p->error == YAML_READER_ERROR) {
        /* Reader errors (bad UTF-8, control characters) carry a byte offset, not a mark. */
        mark.line = mark.column = 0;
        for (size_t i = 0; i < p->problem_offset && i < ld->text_len; i++) {
            if (ld->text[i] == '\n') {
                mark.line++;
                mark.column = 0;
            } else {
                mark.column++;
            }
        }
    }
    if (p->context != NULL)
        return loader_error_at(ld, &mark, "%s (%s at line %zu)", problem, p->context,
                               p->context_mark.line + 1);
    return loader_error_at(ld, &mark, "%s", problem);
}

static int next_event(loader *ld) {
    if (ld->have_event)
        yaml_event_delete(&ld->event);
    ld->have_event = false;
    if (!yaml_parser_parse(&ld->parser, &ld->event))
        return parser_error(ld);
    ld->have_event = true;
    return 0;
}

static int vec_push(node_vec *v, config_node *key, config_node *item) {
    if (v->count == v->cap) {
        size_t cap = strata_array_capacity(v->cap, v->count + 1);
        config_node **keys = strata_array_resize(v->keys, cap, sizeof *keys);
        if (keys == NULL)
            return -1;
        v->keys = keys;
        config_node **items = strata_array_resize(v->items, cap, sizeof *items);
        if (items == NULL)
            return -1;
        v->items = items;
        v->cap = cap;
    }
    v->keys[v->count] = key;
    v->items[v->count] = item;
    v->count++;
    return 0;
}

static void vec_free(node_vec *v) {
    free(v->keys);
    free(v->items);
}

static config_node *node_new(loader *ld, config_node_kind kind, const config_node *parent,
                             size_t index) {
    config_node *n = arena_alloc(ld->doc, sizeof *n);
    if (n == NULL)
        return NULL;
    memset(n, 0, sizeof *n);
    n->kind = kind;
    n->doc = ld->doc;
    n->parent = parent;
    n->index = index;
    n->line = (unsigned)ld->event.start_mark.line + 1;
    n->column = (unsigned)ld->event.start_mark.column + 1;
    return n;
}

/* Anchors and explicit tags are rejected for every node kind. */
static int check_anchor_and_tag(loader *ld, const yaml_char_t *anchor, const yaml_char_t *tag) {
    if (anchor != NULL)
        return loader_error_at(ld, &ld->event.start_mark,
                               "anchors (&%s) are not supported; repeat the value instead",
                               (const char *)anchor);
    if (tag != NULL)
        return loader_error_at(ld, &ld->event.start_mark,
                               "explicit tags (%s) are not supported; remove the tag",
                               (const char *)tag);
    return 0;
}

static int build_scalar(loader *ld, const config_node *parent, size_t index, config_node **out) {
    const yaml_event_t *e = &ld->event;
    if (check_anchor_and_tag(ld, e->data.scalar.anchor, e->data.scalar.tag) != 0)
        return -1;
    size_t len = e->data.scalar.length;
    if (memchr(e->data.scalar.value, '\0', len) != NULL)
        return loader_error_at(ld, &e->start_mark, "values must not contain NUL characters");
    config_node *n = node_new(ld, CONFIG_NODE_SCALAR, parent, index);
    char *text = arena_alloc(ld->doc, len + 1);
    if (n == NULL || text == NULL)
        return strata_error_oom(ld->err);
    memcpy(text, e->data.scalar.value, len);
    text[len] = '\0';
    n->text = text;
    n->len = len;
    n->plain = e->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
    *out = n;
    return 0;
}

static int build_node(loader *ld, const config_node *parent, size_t index, int depth,
                      config_node **out);

/* Moves the gathered children into the arena. */
static int vec_finish(loader *ld, node_vec *v, config_node *n, bool mapping) {
    n->count = v->count;
    if (v->count == 0)
        return 0;
    n->items = arena_alloc(ld->doc, v->count * sizeof *n->items);
    if (n->items == NULL)
        return strata_error_oom(ld->err);
    memcpy(n->items, v->items, v->count * sizeof *n->items);
    if (mapping) {
        n->keys = arena_alloc(ld->doc, v->count * sizeof *n->keys);
        if (n->keys == NULL)
            return strata_error_oom(ld->err);
        memcpy(n->keys, v->keys, v->count * sizeof *n->keys);
    }
    return 0;
}

static int build_sequence_items(loader *ld, config_node *n, int depth, node_vec *v) {
    for (;;) {
        if (next_event(ld) != 0)
            return -1;
        if (ld->event.type == YAML_SEQUENCE_END_EVENT)
            return 0;
        config_node *item = NULL;
        if (build_node(ld, n, v->count, depth + 1, &item) != 0)
            return -1;
        if (vec_push(v, NULL, item) != 0)
            return strata_error_oom(ld->err);
    }
}

static int build_sequence(loader *ld, const config_node *parent, size_t index, int depth,
                          config_node **out) {
    const yaml_event_t *e = &ld->event;
    if (check_anchor_and_tag(ld, e->data.sequence_start.anchor, e->data.sequence_start.tag) != 0)
        return -1;
    config_node *n = node_new(ld, CONFIG_NODE_SEQUENCE, parent, index);
    if (n == NULL)
        return strata_error_oom(ld->err);
    node_vec v = {0};
    int rc = build_sequence_items(ld, n, depth, &v);
    if (rc == 0)
        rc = vec_finish(ld, &v, n, false);
    vec_free(&v);
    *out = n;
    return rc;
}

/* Reads one key (must be a scalar) and rejects it if the mapping already has it. */
static int build_key(loader *ld, config_node *map, node_vec *v, strata_intern *seen,
                     config_node **out) {
    if (ld->event.type != YAML_SCALAR_EVENT)
        return loader_error_at(ld, &ld->event.start_mark,
                               "mapping keys must be plain strings, not lists or mappings");
    config_node *key = NULL;
    if (build_scalar(ld, map, v->count, &key) != 0)
        return -1;
    key->is_key = true;
    uint32_t id;
    if (strata_intern_add(seen, key->text, key->len, &id) != 0)
        return strata_error_oom(ld->err);
    if (id < v->count) {
        const config_node *first = v->keys[id];
        return config_node_error(ld->err, key, "duplicate key \"%s\" (first defined at line %u)",
                                 key->text, first->line);
    }
    *out = key;
    return 0;
}

static int build_mapping_entries(loader *ld, config_node *n, int depth, node_vec *v,
                                 strata_intern *seen) {
    for (;;) {
        if (next_event(ld) != 0)
            return -1;
        if (ld->event.type == YAML_MAPPING_END_EVENT)
            return 0;
        config_node *key = NULL;
        if (build_key(ld, n, v, seen, &key) != 0)
            return -1;
        if (vec_push(v, key, NULL) != 0)
            return strata_error_oom(ld->err);
        /* The value finds its key through the parent when it reports an error, so keep the
         * partially built mapping readable. */
        n->keys = v->keys;
        n->count = v->count;
        if (next_event(ld) != 0)
            return -1;
        if (build_node(ld, n, v->count - 1, depth + 1, &v->items[v->count - 1]) != 0)
            return -1;
    }
}

static int build_mapping(loader *ld, const config_node *parent, size_t index, int depth,
                         config_node **out) {
    const yaml_event_t *e = &ld->event;
    if (check_anchor_and_tag(ld, e->data.mapping_start.anchor, e->data.mapping_start.tag) != 0)
        return -1;
    config_node *n = node_new(ld, CONFIG_NODE_MAPPING, parent, index);
    if (n == NULL)
        return strata_error_oom(ld->err);
    node_vec v = {0};
    strata_intern seen;
    memset(&seen, 0, sizeof seen);
    n->keys = NULL;
    int rc = build_mapping_entries(ld, n, depth, &v, &seen);
    n->keys = NULL;
    n->count = 0;
    if (rc == 0)
        rc = vec_finish(ld, &v, n, true);
    strata_intern_free(&seen);
    vec_free(&v);
    *out = n;
    return rc;
}

static int build_node(loader *ld, const config_node *parent, size_t index, int depth,
                      config_node **out) {
    bool collection =
        ld->event.type == YAML_SEQUENCE_START_EVENT || ld->event.type == YAML_MAPPING_START_EVENT;
    if (collection && depth >= CONFIG_MAX_DEPTH)
        return loader_error_at(ld, &ld->event.start_mark, "nesting deeper than %d levels",
                               CONFIG_MAX_DEPTH);
    switch (ld->event.type) {
        case YAML_SCALAR_EVENT:
            return build_scalar(ld, parent, index, out);
        case YAML_SEQUENCE_START_EVENT:
            return build_sequence(ld, parent, index, depth, out);
        case YAML_MAPPING_START_EVENT:
            return build_mapping(ld, parent, index, depth, out);
        case YAML_ALIAS_EVENT:
            return loader_error_at(ld, &ld->event.start_mark,
                                   "aliases (*%s) are not supported; repeat the value instead",
                                   (const char *)ld->event.data.alias.anchor);
        default:
            return loader_error_at(ld, &ld->event.start_mark, "unexpected YAML event");
    }
}

static int expect_event(loader *ld, yaml_event_type_t type) {
    if (next_event(ld) != 0)
        return -1;
    if (ld->event.type != type)
        return loader_error_at(ld, &ld->event.start_mark, "unexpected YAML structure");
    return 0;
}

/* STREAM-START [DOCUMENT-START node DOCUMENT-END] STREAM-END; more documents are an error. */
static int load_stream(loader *ld) {
    if (expect_event(ld, YAML_STREAM_START_EVENT) != 0 || next_event(ld) != 0)
        return -1;
    if (ld->event.type == YAML_STREAM_END_EVENT)
        return 0;
    if (ld->event.type != YAML_DOCUMENT_START_EVENT)
        return loader_error_at(ld, &ld->event.start_mark, "unexpected YAML structure");
    if (next_event(ld) != 0)
        return -1;
    config_node *root = NULL;
    if (build_node(ld, NULL, 0, 0, &root) != 0)
        return -1;
    if (!(root->kind == CONFIG_NODE_SCALAR && config_node_is_null(root)))
        ld->doc->root = root;
    if (expect_event(ld, YAML_DOCUMENT_END_EVENT) != 0 || next_event(ld) != 0)
        return -1;
    if (ld->event.type == YAML_DOCUMENT_START_EVENT)
        return loader_error_at(ld, &ld->event.start_mark,
                               "a second YAML document (---) is not supported; use one per file");
    if (ld->event.type != YAML_STREAM_END_EVENT)
        return loader_error_at(ld, &ld->event.start_mark, "unexpected YAML structure");
    return 0;
}

int config_load_string(const char *name, const char *text, size_t len, config_document **out,
                       strata_error *err) {
    *out = NULL;
    loader ld = {.err = err, .text = text != NULL ? text : "", .text_len = text != NULL ? len : 0};
    ld.doc = document_new(name);
    if (ld.doc == NULL)
        return strata_error_oom(err);
    if (!yaml_parser_initialize(&ld.parser)) {
        document_destroy(ld.doc);
        return strata_error_oom(err);
    }
    yaml_parser_set_input_string(&ld.parser, (const unsigned char *)ld.text, ld.text_len);
    int rc = load_stream(&ld);
    if (ld.have_event)
        yaml_event_delete(&ld.event);
    yaml_parser_delete(&ld.parser);
    if (rc != 0) {
        document_destroy(ld.doc);
        return -1;
    }
    *out = ld.doc;
    return 0;
}

static int read_file(const char *path, char **text, size_t *len, strata_error *err) {
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return strata_error_set(err, errno == ENOENT ? STRATA_NOT_FOUND : STRATA_PERMISSION_DENIED,
                                "%s: cannot open config file: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "%s: not a regular file", path);
    }
    if ((uint64_t)st.st_size > CONFIG_MAX_FILE_SIZE) {
        fclose(f);
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "%s: config file is larger than %u bytes", path,
                                CONFIG_MAX_FILE_SIZE);
    }
    size_t size = (size_t)st.st_size;
    char *buf = malloc(size + 1);
    if (buf == NULL) {
        fclose(f);
        return strata_error_oom(err);
    }
    size_t got = fread(buf, 1, size, f);
    bool failed = ferror(f) != 0;
    fclose(f);
    if (failed || got != size) {
        free(buf);
        return strata_error_set(err, STRATA_UNAVAILABLE, "%s: cannot read config file", path);
    }
    *text = buf;
    *len = size;
    return 0;
}

int config_load_file(const char *path, config_document **out, strata_error *err) {
    *out = NULL;
    char *text = NULL;
    size_t len = 0;
    if (read_file(path, &text, &len, err) != 0)
        return -1;
    int rc = config_load_string(path, text, len, out, err);
    free(text);
    return rc;
}

config_document *config_document_ref(config_document *doc) {
    if (doc != NULL)
        atomic_fetch_add_explicit(&doc->refs, 1, memory_order_relaxed);
    return doc;
}

void config_document_free(config_document *doc) {
    if (doc == NULL)
        return;
    if (atomic_fetch_sub_explicit(&doc->refs, 1, memory_order_acq_rel) == 1)
        document_destroy(doc);
}

const config_node *config_document_root(const config_document *doc) {
    return doc != NULL ? doc->root : NULL;
}

const char *config_document_name(const config_document *doc) {
    return doc->name;
}

/* ---- Accessors --------------------------------------------------------------------------------
 */

config_node_kind config_node_get_kind(const config_node *n) {
    return n->kind;
}

unsigned config_node_line(const config_node *n) {
    return n->line;
}

unsigned config_node_column(const config_node *n) {
    return n->column;
}

config_document *config_node_document(const config_node *n) {
    return n->doc;
}

const char *config_node_scalar(const config_node *n, size_t *len) {
    if (n == NULL || n->kind != CONFIG_NODE_SCALAR)
        return NULL;
    if (len != NULL)
        *len = n->len;
    return n->text;
}

bool config_node_is_null(const config_node *n) {
    if (n == NULL || n->kind != CONFIG_NODE_SCALAR || !n->plain)
        return false;
    static const char *const nulls[] = {"", "~", "null", "Null", "NULL"};
    for (size_t i = 0; i < sizeof nulls / sizeof nulls[0]; i++)
        if (strcmp(n->text, nulls[i]) == 0)
            return true;
    return false;
}

size_t config_node_size(const config_node *n) {
    return n != NULL && n->kind != CONFIG_NODE_SCALAR ? n->count : 0;
}

const config_node *config_node_at(const config_node *n, size_t i) {
    if (n == NULL || n->kind == CONFIG_NODE_SCALAR || i >= n->count)
        return NULL;
    return n->items[i];
}

const config_node *config_node_key_at(const config_node *n, size_t i) {
    if (n == NULL || n->kind != CONFIG_NODE_MAPPING || i >= n->count)
        return NULL;
    return n->keys[i];
}

const config_node *config_node_get(const config_node *n, const char *key) {
    if (n == NULL || n->kind != CONFIG_NODE_MAPPING)
        return NULL;
    for (size_t i = 0; i < n->count; i++)
        if (strcmp(n->keys[i]->text, key) == 0)
            return n->items[i];
    return NULL;
}
