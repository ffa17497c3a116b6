/*
 * config_decode.c - decoding mapping nodes into C structs through config_field tables.
 *
 * A table is walked three times: zero_fields (validates the descriptors and zeroes the storage, so
 * release is always safe), then decode_mapping (entries in document order, so the first problem in
 * the file is the one reported; then absent keys: required check or default), and on failure or
 * at the end of the struct's life free_fields.
 */
#include "config/config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int decode_fields(const config_node *map, bool check_required, const config_field *fields,
                         void *out, strata_error *err);
static void free_fields(const config_field *fields, void *out);

static void *field_ptr(void *out, const config_field *f) {
    return (char *)out + f->offset;
}

/* "a list", "a mapping" or the quoted scalar text, for "expected X, got Y". */
static void describe(const config_node *n, char *out, size_t out_len) {
    switch (config_node_get_kind(n)) {
        case CONFIG_NODE_SEQUENCE:
            snprintf(out, out_len, "a list");
            break;
        case CONFIG_NODE_MAPPING:
            snprintf(out, out_len, "a mapping");
            break;
        default: {
            size_t len;
            const char *text = config_node_scalar(n, &len);
            snprintf(out, out_len, "\"%.64s%s\"", text, len > 64 ? "..." : "");
            break;
        }
    }
}

static int type_error(const config_node *n, const char *expected, strata_error *err) {
    char got[80];
    describe(n, got, sizeof got);
    return config_node_error(err, n, "expected %s, got %s", expected, got);
}

/* ---- Descriptor validation and zeroing --------------------------------------------------------
 */

static int descriptor_error(const config_field *f, const char *problem, strata_error *err) {
    return strata_error_set(err, STRATA_INTERNAL, "config descriptor for key \"%s\": %s",
                            f->key != NULL ? f->key : "", problem);
}

static int zero_field(const config_field *f, void *out, strata_error *err);

static int zero_fields(const config_field *fields, void *out, strata_error *err) {
    for (const config_field *f = fields; f->key != NULL; f++)
        if (zero_field(f, out, err) != 0)
            return -1;
    return 0;
}

static int zero_field(const config_field *f, void *out, strata_error *err) {
    void *p = field_ptr(out, f);
    if (f->key[0] == '\0')
        return descriptor_error(f, "empty key", err);
    switch (f->kind) {
        case CONFIG_STRING:
            *(char **)p = NULL;
            return 0;
        case CONFIG_BOOL:
            *(bool *)p = false;
            return 0;
        case CONFIG_INT64:
        case CONFIG_DURATION:
            *(int64_t *)p = 0;
            return 0;
        case CONFIG_UINT64:
        case CONFIG_BYTES:
            *(uint64_t *)p = 0;
            return 0;
        case CONFIG_DOUBLE:
            *(double *)p = 0.0;
            return 0;
        case CONFIG_STRING_LIST:
            memset(p, 0, sizeof(config_string_list));
            return 0;
        case CONFIG_STRING_MAP:
            memset(p, 0, sizeof(config_string_map));
            return 0;
        case CONFIG_STRUCT:
            if (f->fields == NULL)
                return descriptor_error(f, "CONFIG_STRUCT needs a fields table", err);
            return zero_fields(f->fields, p, err);
        case CONFIG_STRUCT_LIST:
            if (f->fields == NULL || f->elem_size == 0)
                return descriptor_error(f, "CONFIG_STRUCT_LIST needs fields and elem_size", err);
            memset(p, 0, sizeof(config_struct_list));
            return 0;
        case CONFIG_RAW:
            memset(p, 0, sizeof(config_raw));
            return 0;
        case CONFIG_CUSTOM:
            if (f->decode == NULL || f->elem_size == 0)
                return descriptor_error(f, "CONFIG_CUSTOM needs decode and elem_size", err);
            memset(p, 0, f->elem_size);
            return 0;
    }
    return descriptor_error(f, "unknown kind", err);
}

/* ---- Values -----------------------------------------------------------------------------------
 */

static int dup_scalar(const config_node *n, const char *expected, char **out, strata_error *err) {
    if (config_node_get_kind(n) != CONFIG_NODE_SCALAR)
        return type_error(n, expected, err);
    const char *text = config_node_is_null(n) ? "" : config_node_scalar(n, NULL);
    *out = strdup(text);
    return *out == NULL ? strata_error_oom(err) : 0;
}

static const char *scalar_or_null(const config_node *n) {
    return config_node_scalar(n, NULL);
}

static int decode_string_list(const config_node *n, config_string_list *out, strata_error *err) {
    if (config_node_get_kind(n) != CONFIG_NODE_SEQUENCE)
        return type_error(n, "a list of strings", err);
    size_t count = config_node_size(n);
    if (count == 0)
        return 0;
    out->items = calloc(count, sizeof *out->items);
    if (out->items == NULL)
        return strata_error_oom(err);
    for (size_t i = 0; i < count; i++) {
        if (dup_scalar(config_node_at(n, i), "a string", &out->items[i], err) != 0)
            return -1;
        out->count++;
    }
    return 0;
}

static int decode_string_map(const config_node *n, config_string_map *out, strata_error *err) {
    if (config_node_get_kind(n) != CONFIG_NODE_MAPPING)
        return type_error(n, "a mapping of strings to strings", err);
    size_t count = config_node_size(n);
    if (count == 0)
        return 0;
    out->keys = calloc(count, sizeof *out->keys);
    out->values = calloc(count, sizeof *out->values);
    if (out->keys == NULL || out->values == NULL)
        return strata_error_oom(err);
    for (size_t i = 0; i < count; i++) {
        if (dup_scalar(config_node_key_at(n, i), "a string", &out->keys[i], err) != 0)
            return -1;
        out->count++;
        if (dup_scalar(config_node_at(n, i), "a string", &out->values[i], err) != 0)
            return -1;
    }
    return 0;
}

static int decode_struct_list(const config_field *f, const config_node *n, config_struct_list *out,
                              strata_error *err) {
    if (config_node_get_kind(n) != CONFIG_NODE_SEQUENCE)
        return type_error(n, "a list of mappings", err);
    size_t count = config_node_size(n);
    if (count == 0)
        return 0;
    out->items = calloc(count, f->elem_size);
    if (out->items == NULL)
        return strata_error_oom(err);
    for (size_t i = 0; i < count; i++) {
        void *elem = (char *)out->items + i * f->elem_size;
        const config_node *item = config_node_at(n, i);
        if (zero_fields(f->fields, elem, err) != 0)
            return -1;
        out->count++; /* from here on the element is released with the list */
        if (config_node_get_kind(item) != CONFIG_NODE_MAPPING)
            return type_error(item, "a mapping", err);
        if (decode_fields(item, true, f->fields, elem, err) != 0)
            return -1;
    }
    return 0;
}

static int parse_number(const config_field *f, const config_node *n, void *p, strata_error *err);

/* Parses, then runs the field's check (bounds) if it names one. */
static int decode_number(const config_field *f, const config_node *n, void *p, strata_error *err) {
    if (parse_number(f, n, p, err) != 0)
        return -1;
    return f->decode != NULL ? f->decode(n, p, err) : 0;
}

static int parse_number(const config_field *f, const config_node *n, void *p, strata_error *err) {
    const char *text = scalar_or_null(n);
    switch (f->kind) {
        case CONFIG_BOOL:
            if (text == NULL || !config_parse_bool(text, p))
                return type_error(n, "true or false", err);
            return 0;
        case CONFIG_INT64:
            if (text == NULL || !config_parse_int64(text, p))
                return type_error(n, "a 64-bit integer", err);
            return 0;
        case CONFIG_UINT64:
            if (text == NULL || !config_parse_uint64(text, p))
                return type_error(n, "a non-negative 64-bit integer", err);
            return 0;
        case CONFIG_DOUBLE:
            if (text == NULL || !config_parse_double(text, p))
                return type_error(n, "a number like 0.5 or 1e3", err);
            return 0;
        case CONFIG_DURATION:
            if (text == NULL || !config_parse_duration(text, p))
                return type_error(n, "a duration like 10s, 1m30s or 500ms", err);
            return 0;
        default:
            if (text == NULL || !config_parse_bytes(text, p))
                return type_error(n, "a byte size like 64MiB, 1GB or 1048576", err);
            return 0;
    }
}

/* Decodes a present, non-null node into the field's storage. */
static int decode_value(const config_field *f, const config_node *n, void *out, strata_error *err) {
    void *p = field_ptr(out, f);
    switch (f->kind) {
        case CONFIG_STRING:
            return dup_scalar(n, "a string", (char **)p, err);
        case CONFIG_STRING_LIST:
            return decode_string_list(n, p, err);
        case CONFIG_STRING_MAP:
            return decode_string_map(n, p, err);
        case CONFIG_STRUCT:
            if (config_node_get_kind(n) != CONFIG_NODE_MAPPING)
                return type_error(n, "a mapping", err);
            return decode_fields(n, true, f->fields, p, err);
        case CONFIG_STRUCT_LIST:
            return decode_struct_list(f, n, p, err);
        case CONFIG_RAW: {
            config_raw *raw = p;
            raw->node = n;
            raw->doc = config_document_ref(config_node_document(n));
            return 0;
        }
        case CONFIG_CUSTOM:
            return f->decode(n, p, err);
        default:
            return decode_number(f, n, p, err);
    }
}

/* Decodes the descriptor's default text as if it had been written in the file. */
static int apply_default(const config_field *f, void *out, strata_error *err) {
    config_document *doc = NULL;
    if (config_load_string("<default>", f->default_text, strlen(f->default_text), &doc, err) != 0) {
        strata_error_wrap(err, "invalid default for key \"%s\"", f->key);
        if (err != NULL && err->code == STRATA_INVALID_ARGUMENT)
            err->code = STRATA_INTERNAL;
        return -1;
    }
    const config_node *root = config_document_root(doc);
    int rc = 0;
    if (root != NULL && decode_value(f, root, out, err) != 0) {
        strata_error_wrap(err, "invalid default for key \"%s\"", f->key);
        if (err != NULL)
            err->code = STRATA_INTERNAL;
        rc = -1;
    }
    config_document_free(doc);
    return rc;
}

/* ---- Mappings ---------------------------------------------------------------------------------
 */

static const config_field *find_field(const config_field *fields, const char *key) {
    for (const config_field *f = fields; f->key != NULL; f++)
        if (strcmp(f->key, key) == 0)
            return f;
    return NULL;
}

static int unknown_key(const config_node *key, const config_field *fields, strata_error *err) {
    char known[200];
    size_t used = 0;
    known[0] = '\0';
    for (const config_field *f = fields; f->key != NULL && used < sizeof known; f++) {
        int w = snprintf(known + used, sizeof known - used, "%s%s", used > 0 ? ", " : "", f->key);
        if (w < 0)
            break;
        used += (size_t)w;
    }
    if (used >= sizeof known)
        memcpy(known + sizeof known - 4, "...", 4);
    const char *name = config_node_scalar(key, NULL);
    if (used == 0)
        return config_node_error(err, key, "unknown key \"%.100s\" (no keys are allowed here)",
                                 name);
    return config_node_error(err, key, "unknown key \"%.100s\" (expected one of: %s)", name, known);
}

static int decode_present(const config_node *map, const config_field *fields, void *out,
                          strata_error *err) {
    for (size_t i = 0; i < config_node_size(map); i++) {
        const config_node *key = config_node_key_at(map, i);
        const config_field *f = find_field(fields, config_node_scalar(key, NULL));
        if (f == NULL)
            return unknown_key(key, fields, err);
        const config_node *value = config_node_at(map, i);
        if (!config_node_is_null(value) && decode_value(f, value, out, err) != 0)
            return -1;
    }
    return 0;
}

static int decode_absent(const config_node *map, bool check_required, const config_field *fields,
                         void *out, strata_error *err) {
    for (const config_field *f = fields; f->key != NULL; f++) {
        const config_node *value = config_node_get(map, f->key);
        if (value != NULL && !config_node_is_null(value))
            continue;
        if (f->required && check_required) {
            if (value != NULL)
                return config_node_error(err, value, "a value is required");
            if (map != NULL)
                return config_node_error(err, map, "missing required key \"%s\"", f->key);
            return strata_error_set(err, STRATA_INVALID_ARGUMENT, "missing required key \"%s\"",
                                    f->key);
        }
        if (f->default_text != NULL) {
            if (apply_default(f, out, err) != 0)
                return -1;
        } else if (f->kind == CONFIG_STRUCT) {
            if (decode_fields(NULL, false, f->fields, field_ptr(out, f), err) != 0)
                return -1;
        }
    }
    return 0;
}

static int decode_fields(const config_node *map, bool check_required, const config_field *fields,
                         void *out, strata_error *err) {
    if (map != NULL && config_node_is_null(map))
        map = NULL;
    if (map != NULL && config_node_get_kind(map) != CONFIG_NODE_MAPPING)
        return type_error(map, "a mapping", err);
    if (map != NULL && decode_present(map, fields, out, err) != 0)
        return -1;
    return decode_absent(map, check_required, fields, out, err);
}

int config_decode(const config_node *node, const config_field *fields, void *out,
                  strata_error *err) {
    if (zero_fields(fields, out, err) != 0)
        return -1;
    if (decode_fields(node, true, fields, out, err) != 0) {
        free_fields(fields, out);
        return -1;
    }
    return 0;
}

int config_decode_document(const config_document *doc, const config_field *fields, void *out,
                           strata_error *err) {
    if (config_decode(config_document_root(doc), fields, out, err) != 0) {
        if (config_document_root(doc) == NULL)
            strata_error_wrap(err, "%s", config_document_name(doc));
        return -1;
    }
    return 0;
}

/* ---- Release ----------------------------------------------------------------------------------
 */

static void free_strings(char **items, size_t count) {
    for (size_t i = 0; i < count; i++)
        free(items[i]);
    free(items);
}

static void free_field(const config_field *f, void *out) {
    void *p = field_ptr(out, f);
    switch (f->kind) {
        case CONFIG_STRING:
            free(*(char **)p);
            *(char **)p = NULL;
            return;
        case CONFIG_STRING_LIST: {
            config_string_list *l = p;
            free_strings(l->items, l->count);
            memset(l, 0, sizeof *l);
            return;
        }
        case CONFIG_STRING_MAP: {
            config_string_map *m = p;
            free_strings(m->keys, m->count);
            free_strings(m->values, m->count);
            memset(m, 0, sizeof *m);
            return;
        }
        case CONFIG_STRUCT:
            free_fields(f->fields, p);
            return;
        case CONFIG_STRUCT_LIST: {
            config_struct_list *l = p;
            for (size_t i = 0; i < l->count; i++)
                free_fields(f->fields, (char *)l->items + i * f->elem_size);
            free(l->items);
            memset(l, 0, sizeof *l);
            return;
        }
        case CONFIG_RAW: {
            config_raw *raw = p;
            config_document_free(raw->doc);
            memset(raw, 0, sizeof *raw);
            return;
        }
        case CONFIG_CUSTOM:
            if (f->release != NULL)
                f->release(p);
            memset(p, 0, f->elem_size);
            return;
        default:
            return; /* plain numbers own nothing */
    }
}

static void free_fields(const config_field *fields, void *out) {
    for (const config_field *f = fields; f->key != NULL; f++)
        free_field(f, out);
}

void config_free(const config_field *fields, void *out) {
    if (fields != NULL && out != NULL)
        free_fields(fields, out);
}

/* ---- Bounds -----------------------------------------------------------------------------------
 */

/* Parses a bound written like a value of kind into the output of its type. */
static bool parse_bound(config_kind kind, const char *text, int64_t *i, uint64_t *u, double *d) {
    switch (kind) {
        case CONFIG_INT64:
            return config_parse_int64(text, i);
        case CONFIG_DURATION:
            return config_parse_duration(text, i);
        case CONFIG_UINT64:
            return config_parse_uint64(text, u);
        case CONFIG_BYTES:
            return config_parse_bytes(text, u);
        case CONFIG_DOUBLE:
            return config_parse_double(text, d);
        default:
            return false;
    }
}

/* Sets *cmp to <0, 0 or >0 as the value is below, equal to or above the bound; false if the bound
 * does not parse. */
static bool compare_bound(config_kind kind, const void *value, const char *bound, int *cmp) {
    int64_t i = 0;
    uint64_t u = 0;
    double d = 0;
    if (!parse_bound(kind, bound, &i, &u, &d))
        return false;
    if (kind == CONFIG_INT64 || kind == CONFIG_DURATION) {
        int64_t v = *(const int64_t *)value;
        *cmp = v < i ? -1 : v > i;
    } else if (kind == CONFIG_UINT64 || kind == CONFIG_BYTES) {
        uint64_t v = *(const uint64_t *)value;
        *cmp = v < u ? -1 : v > u;
    } else {
        double v = *(const double *)value;
        *cmp = v < d ? -1 : v > d;
    }
    return true;
}

int config_check_bounds(const config_node *node, config_kind kind, const void *value,
                        const char *min, const char *max, strata_error *err) {
    const char *text = scalar_or_null(node);
    const char *bounds[2] = {min, max};
    for (int side = 0; side < 2; side++) {
        int cmp = 0;
        if (bounds[side] == NULL)
            continue;
        if (!compare_bound(kind, value, bounds[side], &cmp))
            return strata_error_set(err, STRATA_INTERNAL,
                                    "config bound \"%s\" is not a value of its field's kind",
                                    bounds[side]);
        if (side == 0 && cmp < 0)
            return config_node_error(err, node, "%.64s is below the minimum %s", text ? text : "",
                                     min);
        if (side == 1 && cmp > 0)
            return config_node_error(err, node, "%.64s is above the maximum %s", text ? text : "",
                                     max);
    }
    return 0;
}
