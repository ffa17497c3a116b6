/*
 * arrow_ipc.c - see arrow_ipc.h.
 *
 * Flatbuffers, as this writer builds them: the buffer opens with the uoffset of its root table.
 * A table is preceded by its vtable (uint16 vtable size, uint16 table size, then one uint16 per
 * field slot: the field's offset in the table, 0 when absent) and begins with an int32 soffset,
 * table position minus vtable position. Fields are laid out largest first after that soffset (the
 * table 8-aligned), so each is aligned to its size. A uoffset field holds target position minus
 * the field's own position; targets always come later in the buffer (the front-to-back order
 * below), so they are written as 0 and patched. Strings are a uint32 length, the bytes and a NUL;
 * vectors a uint32 count and the elements (16-byte structs 8-aligned).
 *
 * An IPC stream is a sequence of encapsulated messages (0xFFFFFFFF, int32 metadata length, the
 * Message flatbuffer padded to 8 bytes, then the message body), closed by 0xFFFFFFFF 0x00000000.
 */
#include "arrow/arrow_ipc.h"

#include <stdlib.h>
#include <string.h>

#include "common/array.h"

/* Message.fbs / Schema.fbs constants. */
#define METADATA_V5 4
#define HEADER_SCHEMA 1
#define HEADER_DICTIONARY_BATCH 2
#define HEADER_RECORD_BATCH 3
#define TYPE_INT 2
#define TYPE_BINARY 4
#define TYPE_BOOL 6
#define TYPE_LIST 12

typedef enum column_kind { COL_INT, COL_BOOL, COL_DICT, COL_LIST } column_kind;

struct arrow_column {
    char *name;
    column_kind kind;
    int bit_width; /* COL_INT */
    bool is_signed;
    bool nullable;
    size_t n;
    strata_buffer values;       /* ints, bool bitmap, dict indices (int32), list child (uint32) */
    strata_buffer offsets;      /* COL_LIST: int32 x (n + 1) */
    strata_buffer dict_offsets; /* COL_DICT: int32 x (n_dict + 1) */
    strata_buffer dict_data;
    size_t n_dict, n_child;
    int64_t dict_id;
};

void arrow_writer_init(arrow_writer *w) {
    memset(w, 0, sizeof *w);
}

void arrow_writer_free(arrow_writer *w) {
    for (size_t i = 0; i < w->n_columns; i++) {
        arrow_column *c = &w->columns[i];
        free(c->name);
        strata_buffer_free(&c->values);
        strata_buffer_free(&c->offsets);
        strata_buffer_free(&c->dict_offsets);
        strata_buffer_free(&c->dict_data);
    }
    free(w->columns);
    memset(w, 0, sizeof *w);
}

static arrow_column *add_column(arrow_writer *w, const char *name, column_kind kind, size_t n) {
    if (w->failed)
        return NULL;
    if (STRATA_ARRAY_RESERVE(w->columns, w->cap_columns, w->n_columns + 1) != 0) {
        w->failed = true;
        return NULL;
    }
    arrow_column *c = &w->columns[w->n_columns];
    memset(c, 0, sizeof *c);
    if ((c->name = strdup(name)) == NULL) {
        w->failed = true;
        return NULL;
    }
    c->kind = kind;
    c->n = n;
    w->n_columns++;
    return c;
}

void arrow_add_int(arrow_writer *w, const char *name, int bit_width, bool is_signed,
                   const void *values, size_t n) {
    arrow_column *c = add_column(w, name, COL_INT, n);
    if (c == NULL)
        return;
    c->bit_width = bit_width;
    c->is_signed = is_signed;
    if (n > 0 && strata_buffer_append(&c->values, values, n * (size_t)(bit_width / 8)) != 0)
        w->failed = true;
}

/* The narrowest width (8 ... 64) holding every value, unsigned or not. */
static int narrow_width(const int64_t *values, size_t n, bool is_signed) {
    int64_t lo = 0, hi = 0;
    for (size_t i = 0; i < n; i++) {
        lo = values[i] < lo ? values[i] : lo;
        hi = values[i] > hi ? values[i] : hi;
    }
    for (int bits = 8; bits < 64; bits *= 2) {
        int64_t max = is_signed ? ((int64_t)1 << (bits - 1)) - 1 : ((int64_t)1 << bits) - 1;
        int64_t min = is_signed ? -((int64_t)1 << (bits - 1)) : 0;
        if (lo >= min && hi <= max)
            return bits;
    }
    return 64;
}

void arrow_add_int_narrowed(arrow_writer *w, const char *name, bool is_signed,
                            const int64_t *values, size_t n) {
    for (size_t i = 0; i < n && !is_signed; i++)
        if (values[i] < 0)
            is_signed = true; /* never wraps a negative value into an unsigned column */
    int bits = narrow_width(values, n, is_signed);
    if (bits == 64) {
        arrow_add_int(w, name, 64, is_signed, values, n);
        return;
    }
    void *narrow = malloc((n ? n : 1) * (size_t)(bits / 8));
    if (narrow == NULL) {
        w->failed = true;
        return;
    }
    for (size_t i = 0; i < n; i++) {
        if (bits == 8)
            ((uint8_t *)narrow)[i] = (uint8_t)values[i];
        else if (bits == 16)
            ((uint16_t *)narrow)[i] = (uint16_t)values[i];
        else
            ((uint32_t *)narrow)[i] = (uint32_t)values[i];
    }
    arrow_add_int(w, name, bits, is_signed, narrow, n);
    free(narrow);
}

void arrow_add_bool(arrow_writer *w, const char *name, const bool *values, size_t n,
                    bool nullable) {
    arrow_column *c = add_column(w, name, COL_BOOL, n);
    if (c == NULL)
        return;
    c->nullable = nullable;
    size_t bytes = (n + 7) / 8;
    if (strata_buffer_reserve(&c->values, bytes + 1) != 0) {
        w->failed = true;
        return;
    }
    memset(c->values.data, 0, bytes + 1);
    for (size_t i = 0; i < n; i++)
        if (values[i])
            c->values.data[i / 8] |= (uint8_t)(1u << (i % 8));
    c->values.len = bytes;
}

void arrow_add_dict_binary(arrow_writer *w, const char *name, const int32_t *indices, size_t n,
                           const char *const *dict, const size_t *dict_len, size_t n_dict) {
    arrow_column *c = add_column(w, name, COL_DICT, n);
    if (c == NULL)
        return;
    c->n_dict = n_dict;
    int32_t offset = 0;
    int rc = (n > 0 ? strata_buffer_append(&c->values, indices, n * sizeof *indices) : 0) |
             strata_buffer_append(&c->dict_offsets, &offset, sizeof offset);
    for (size_t k = 0; k < n_dict && rc == 0; k++) {
        offset += (int32_t)dict_len[k];
        rc = (dict_len[k] > 0 ? strata_buffer_append(&c->dict_data, dict[k], dict_len[k]) : 0) |
             strata_buffer_append(&c->dict_offsets, &offset, sizeof offset);
    }
    if (rc != 0)
        w->failed = true;
}

void arrow_add_list(arrow_writer *w, const char *name, const int32_t *offsets, size_t n,
                    int child_bit_width, bool child_signed, const void *values) {
    arrow_column *c = add_column(w, name, COL_LIST, n);
    if (c == NULL)
        return;
    c->bit_width = child_bit_width;
    c->is_signed = child_signed;
    c->n_child = (size_t)offsets[n];
    size_t bytes = c->n_child * (size_t)(child_bit_width / 8);
    if (strata_buffer_append(&c->offsets, offsets, (n + 1) * sizeof *offsets) != 0 ||
        (bytes > 0 && strata_buffer_append(&c->values, values, bytes) != 0))
        w->failed = true;
}

void arrow_add_list_uint32(arrow_writer *w, const char *name, const int32_t *offsets, size_t n,
                           const uint32_t *values) {
    arrow_add_list(w, name, offsets, n, 32, false, values);
}

/* ---- flatbuffers, front to back ------------------------------------------------------------ */

typedef struct fb {
    strata_buffer b;
    bool failed;
} fb;

static void fb_append(fb *f, const void *p, size_t n) {
    if (strata_buffer_append(&f->b, p, n) != 0)
        f->failed = true;
}

static void fb_pad(fb *f, size_t align) {
    static const uint8_t zeros[8];
    size_t pad = (align - f->b.len % align) % align;
    fb_append(f, zeros, pad);
}

static void put_le(uint8_t *p, uint64_t v, int size) {
    for (int i = 0; i < size; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Points the uoffset at field_pos to target (written after it). */
static void fb_patch(fb *f, size_t field_pos, size_t target) {
    if (!f->failed)
        put_le(f->b.data + field_pos, target - field_pos, 4);
}

typedef struct fb_field {
    int slot;
    int size;       /* 1, 2, 4 or 8 bytes; uoffsets are 4 */
    uint64_t value; /* scalars; 0 for uoffsets (patched later) */
} fb_field;

/* Writes a table (its vtable first); field_pos[i] receives fields[i]'s position. */
static size_t fb_table(fb *f, const fb_field *fields, size_t n, size_t *field_pos) {
    int slots = 0;
    for (size_t i = 0; i < n; i++)
        if (fields[i].slot + 1 > slots)
            slots = fields[i].slot + 1;
    /* layout: soffset at 0, then fields by descending size */
    size_t at[16], size = 4;
    for (int sz = 8; sz >= 1; sz /= 2)
        for (size_t i = 0; i < n; i++) {
            if (fields[i].size != sz)
                continue;
            size = (size + (size_t)sz - 1) / (size_t)sz * (size_t)sz;
            at[i] = size;
            size += (size_t)sz;
        }
    size = (size + 3) / 4 * 4;
    uint16_t vt[2 + 16] = {(uint16_t)(4 + 2 * slots), (uint16_t)size};
    for (size_t i = 0; i < n; i++)
        vt[2 + fields[i].slot] = (uint16_t)at[i];
    fb_pad(f, 2);
    size_t vt_pos = f->b.len;
    uint8_t vt_bytes[36];
    for (int i = 0; i < 2 + slots; i++)
        put_le(vt_bytes + 2 * i, vt[i], 2);
    fb_append(f, vt_bytes, (size_t)(4 + 2 * slots));
    fb_pad(f, 8);
    size_t table = f->b.len;
    uint8_t body[128] = {0};
    put_le(body, (uint64_t)(int64_t)(table - vt_pos), 4);
    for (size_t i = 0; i < n; i++) {
        put_le(body + at[i], fields[i].value, fields[i].size);
        field_pos[i] = table + at[i];
    }
    fb_append(f, body, size);
    return table;
}

static size_t fb_string(fb *f, const char *s) {
    fb_pad(f, 4);
    size_t pos = f->b.len;
    uint8_t len[4];
    put_le(len, strlen(s), 4);
    fb_append(f, len, 4);
    fb_append(f, s, strlen(s) + 1);
    return pos;
}

/* A vector of n uoffsets; element i is at the returned position + 4 + 4 i. */
static size_t fb_offset_vector(fb *f, size_t n) {
    fb_pad(f, 4);
    size_t pos = f->b.len;
    uint8_t count[4];
    put_le(count, n, 4);
    fb_append(f, count, 4);
    for (size_t i = 0; i < n; i++)
        fb_append(f, "\0\0\0\0", 4);
    return pos;
}

/* A vector of n 16-byte structs of two int64s (FieldNode, Buffer). */
static size_t fb_pair_vector(fb *f, const int64_t *pairs, size_t n) {
    fb_pad(f, 4);
    if ((f->b.len + 4) % 8 != 0)
        fb_append(f, "\0\0\0\0", 4);
    size_t pos = f->b.len;
    uint8_t count[4];
    put_le(count, n, 4);
    fb_append(f, count, 4);
    for (size_t i = 0; i < 2 * n; i++) {
        uint8_t v[8];
        put_le(v, (uint64_t)pairs[i], 8);
        fb_append(f, v, 8);
    }
    return pos;
}

/* ---- messages ------------------------------------------------------------------------------- */

/* The Message table at the root; returns the position of its header uoffset to patch. */
static size_t begin_message(fb *f, int header_type, int64_t body_length) {
    fb_append(f, "\0\0\0\0", 4); /* root uoffset */
    fb_field fields[] = {{0, 2, METADATA_V5},
                         {1, 1, (uint64_t)header_type},
                         {2, 4, 0},
                         {3, 8, (uint64_t)body_length}};
    size_t pos[4];
    size_t table = fb_table(f, fields, 4, pos);
    fb_patch(f, 0, table);
    return pos[2];
}

static size_t int_type(fb *f, int bit_width, bool is_signed) {
    fb_field fields[] = {{0, 4, (uint64_t)bit_width}, {1, 1, is_signed}};
    size_t pos[2];
    return fb_table(f, fields, 2, pos);
}

static size_t empty_table(fb *f) {
    size_t pos[1];
    return fb_table(f, NULL, 0, pos);
}

/* A Field table (and what it points to). */
static size_t write_field(fb *f, const char *name, bool nullable, int type, int bit_width,
                          bool is_signed, bool list, int64_t dict_id) {
    fb_field fields[6] = {{0, 4, 0}, {1, 1, nullable}, {2, 1, (uint64_t)type},
                          {3, 4, 0}, {5, 4, 0},        {4, 4, 0}};
    size_t n = dict_id >= 0 ? 6 : 5, pos[6];
    size_t table = fb_table(f, fields, n, pos);
    fb_patch(f, pos[0], fb_string(f, name));
    fb_patch(f, pos[3],
             type == TYPE_INT && !list ? int_type(f, bit_width, is_signed) : empty_table(f));
    size_t children = fb_offset_vector(f, list ? 1 : 0);
    fb_patch(f, pos[4], children);
    if (list) /* the element type: Int of the list's width and sign */
        fb_patch(f, children + 4,
                 write_field(f, "item", true, TYPE_INT, bit_width, is_signed, false, -1));
    if (dict_id >= 0) {
        fb_field enc[] = {{0, 8, (uint64_t)dict_id}, {1, 4, 0}};
        size_t epos[2];
        fb_patch(f, pos[5], fb_table(f, enc, 2, epos));
        fb_patch(f, epos[1], int_type(f, 32, true));
    }
    return table;
}

static void write_schema(fb *f, const arrow_writer *w) {
    size_t header = begin_message(f, HEADER_SCHEMA, 0);
    fb_field fields[] = {{1, 4, 0}};
    size_t pos[1];
    fb_patch(f, header, fb_table(f, fields, 1, pos));
    size_t vec = fb_offset_vector(f, w->n_columns);
    fb_patch(f, pos[0], vec);
    for (size_t i = 0; i < w->n_columns; i++) {
        const arrow_column *c = &w->columns[i];
        size_t field;
        switch (c->kind) {
            case COL_INT:
                field =
                    write_field(f, c->name, false, TYPE_INT, c->bit_width, c->is_signed, false, -1);
                break;
            case COL_BOOL:
                field = write_field(f, c->name, c->nullable, TYPE_BOOL, 0, false, false, -1);
                break;
            case COL_DICT:
                field = write_field(f, c->name, false, TYPE_BINARY, 0, false, false, c->dict_id);
                break;
            default:
                field =
                    write_field(f, c->name, false, TYPE_LIST, c->bit_width, c->is_signed, true, -1);
                break;
        }
        fb_patch(f, vec + 4 + 4 * i, field);
    }
}

/* The body of a batch and its FieldNodes and Buffers as (length, null count) and (offset,
 * length) pairs. */
typedef struct batch {
    strata_buffer body;
    int64_t *nodes, *buffers;
    size_t n_nodes, n_buffers;     /* pairs */
    size_t cap_nodes, cap_buffers; /* entries: two a pair */
    bool failed;
} batch;

static void batch_free(batch *b) {
    strata_buffer_free(&b->body);
    free(b->nodes);
    free(b->buffers);
}

static void push_pair(int64_t **arr, size_t *n, size_t *cap, int64_t a, int64_t b, bool *failed) {
    if (STRATA_ARRAY_RESERVE(*arr, *cap, 2 * (*n + 1)) != 0) {
        *failed = true;
        return;
    }
    (*arr)[2 * *n] = a;
    (*arr)[2 * *n + 1] = b;
    (*n)++;
}

static void batch_node(batch *b, size_t length) {
    push_pair(&b->nodes, &b->n_nodes, &b->cap_nodes, (int64_t)length, 0, &b->failed);
}

static void batch_buffer(batch *b, const void *data, size_t len) {
    static const uint8_t zeros[8];
    size_t pad = (8 - b->body.len % 8) % 8;
    if (strata_buffer_append(&b->body, zeros, pad) != 0 ||
        (len > 0 && strata_buffer_append(&b->body, data, len) != 0))
        b->failed = true;
    push_pair(&b->buffers, &b->n_buffers, &b->cap_buffers, (int64_t)(b->body.len - len),
              (int64_t)len, &b->failed);
}

static void batch_column(batch *b, const arrow_column *c) {
    batch_node(b, c->n);
    batch_buffer(b, NULL, 0); /* validity: none, no nulls */
    if (c->kind == COL_LIST) {
        batch_buffer(b, c->offsets.data, c->offsets.len);
        batch_node(b, c->n_child);
        batch_buffer(b, NULL, 0);
    }
    batch_buffer(b, c->values.data, c->values.len);
}

/* Writes the RecordBatch table of b; returns its position. */
static size_t write_record_batch(fb *f, const batch *b, size_t length) {
    fb_field fields[] = {{0, 8, (uint64_t)length}, {1, 4, 0}, {2, 4, 0}};
    size_t pos[3];
    size_t table = fb_table(f, fields, 3, pos);
    fb_patch(f, pos[1], fb_pair_vector(f, b->nodes, b->n_nodes));
    fb_patch(f, pos[2], fb_pair_vector(f, b->buffers, b->n_buffers));
    return table;
}

/* Appends one encapsulated message: metadata f, then body. */
static int emit(strata_buffer *out, fb *f, const batch *b) {
    static const uint8_t zeros[8];
    fb_pad(f, 8);
    if (f->failed || (b != NULL && b->failed))
        return -1;
    uint8_t prefix[8] = {0xff, 0xff, 0xff, 0xff};
    put_le(prefix + 4, f->b.len, 4);
    int rc = strata_buffer_append(out, prefix, 8) | strata_buffer_append(out, f->b.data, f->b.len);
    if (b != NULL) {
        size_t pad = (8 - b->body.len % 8) % 8;
        rc |= strata_buffer_append(out, b->body.data, b->body.len) |
              strata_buffer_append(out, zeros, pad);
    }
    return rc != 0 ? -1 : 0;
}

static int64_t padded(size_t n) {
    return (int64_t)((n + 7) / 8 * 8);
}

int arrow_writer_finish(arrow_writer *w, size_t n_rows, strata_buffer *out, strata_error *err) {
    if (w->failed)
        return strata_error_oom(err);
    int64_t next_dict = 0;
    for (size_t i = 0; i < w->n_columns; i++) {
        if (w->columns[i].n != n_rows)
            return strata_error_set(err, STRATA_INTERNAL, "arrow column %s has %zu rows, not %zu",
                                    w->columns[i].name, w->columns[i].n, n_rows);
        w->columns[i].dict_id = w->columns[i].kind == COL_DICT ? next_dict++ : -1;
    }
    int rc = 0;
    fb f = {STRATA_BUFFER_INIT, false};
    write_schema(&f, w);
    rc = emit(out, &f, NULL);
    strata_buffer_free(&f.b);
    for (size_t i = 0; i < w->n_columns && rc == 0; i++) {
        const arrow_column *c = &w->columns[i];
        if (c->kind != COL_DICT)
            continue;
        batch b;
        memset(&b, 0, sizeof b);
        batch_node(&b, c->n_dict);
        batch_buffer(&b, NULL, 0);
        batch_buffer(&b, c->dict_offsets.data, c->dict_offsets.len);
        batch_buffer(&b, c->dict_data.data, c->dict_data.len);
        fb d = {STRATA_BUFFER_INIT, false};
        size_t header = begin_message(&d, HEADER_DICTIONARY_BATCH, padded(b.body.len));
        fb_field fields[] = {{0, 8, (uint64_t)c->dict_id}, {1, 4, 0}};
        size_t pos[2];
        fb_patch(&d, header, fb_table(&d, fields, 2, pos));
        fb_patch(&d, pos[1], write_record_batch(&d, &b, c->n_dict));
        rc = emit(out, &d, &b);
        strata_buffer_free(&d.b);
        batch_free(&b);
    }
    if (rc == 0) {
        batch b;
        memset(&b, 0, sizeof b);
        for (size_t i = 0; i < w->n_columns; i++) {
            const arrow_column *c = &w->columns[i];
            if (c->kind == COL_DICT) { /* the column itself is its int32 indices */
                batch_node(&b, c->n);
                batch_buffer(&b, NULL, 0);
                batch_buffer(&b, c->values.data, c->values.len);
            } else {
                batch_column(&b, c);
            }
        }
        fb r = {STRATA_BUFFER_INIT, false};
        size_t header = begin_message(&r, HEADER_RECORD_BATCH, padded(b.body.len));
        fb_patch(&r, header, write_record_batch(&r, &b, n_rows));
        rc = emit(out, &r, &b);
        strata_buffer_free(&r.b);
        batch_free(&b);
    }
    static const uint8_t eos[8] = {0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0};
    if (rc == 0)
        rc = strata_buffer_append(out, eos, 8);
    return rc != 0 ? strata_error_oom(err) : 0;
}
