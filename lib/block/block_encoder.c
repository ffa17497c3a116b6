/*
 * block_encoder.c - see block_encoder.h.
 */
#include "block/block_encoder.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "common/array.h"
#include "common/varint.h"

#define HEADER_LEN 16

struct block_object {
    strata_buffer *data; /* buffer object: appended here, from base */
    size_t base;
    int fd; /* file object: written here from offset 0; -1 for a buffer object */
    uint64_t size;
    int write_errno;      /* the first failed write */
    strata_buffer tables; /* footer body: the ended tables */
    uint64_t n_tables;
    ZSTD_CCtx *cctx;
    strata_buffer compressed;
    size_t page_size;
    int zstd_level;
};

static int write_all(int fd, const void *data, size_t len, uint64_t offset) {
    const uint8_t *p = data;
    while (len > 0) {
        ssize_t n = pwrite(fd, p, len, (off_t)offset);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return n < 0 ? errno : EIO;
        p += n;
        len -= (size_t)n;
        offset += (uint64_t)n;
    }
    return 0;
}

/* Appends bytes to the object; false (remembered) on failure. */
static bool object_append(block_object *o, const void *bytes, size_t len) {
    if (o->write_errno != 0)
        return false;
    if (o->fd < 0) {
        if (strata_buffer_append(o->data, bytes, len) != 0) {
            o->write_errno = ENOMEM;
            return false;
        }
    } else {
        int e = write_all(o->fd, bytes, len, o->size);
        if (e != 0) {
            o->write_errno = e;
            return false;
        }
    }
    o->size += len;
    return true;
}

static block_object *object_new(size_t page_size, int zstd_level, strata_error *err) {
    block_object *o = calloc(1, sizeof *o);
    if (o == NULL || (o->cctx = ZSTD_createCCtx()) == NULL) {
        free(o);
        strata_error_oom(err);
        return NULL;
    }
    o->fd = -1;
    o->page_size = page_size;
    o->zstd_level = zstd_level;
    return o;
}

/* A spool file that cannot be written (a full or failing disk) is the machine's trouble, not the
 * data's: UNAVAILABLE, which the compactor retries instead of counting against the sources. */
static int object_error(const block_object *o, const char *what, strata_error *err) {
    if (o->fd < 0 || o->write_errno == ENOMEM)
        return strata_error_set(err, STRATA_RESOURCE_EXHAUSTED, "block writer: out of memory %s",
                                what);
    return strata_error_set(err, STRATA_UNAVAILABLE, "block writer: writing the spool file %s: %s",
                            what, strerror(o->write_errno));
}

block_object *block_object_new_buffer(strata_buffer *data, size_t page_size, int zstd_level,
                                      strata_error *err) {
    block_object *o = object_new(page_size, zstd_level, err);
    if (o == NULL)
        return NULL;
    o->data = data;
    o->base = data->len;
    static const uint8_t zeros[HEADER_LEN];
    if (!object_append(o, zeros, sizeof zeros)) {
        block_object_free(o);
        strata_error_oom(err);
        return NULL;
    }
    return o;
}

block_object *block_object_new_file(int fd, size_t page_size, int zstd_level, strata_error *err) {
    block_object *o = object_new(page_size, zstd_level, err);
    if (o == NULL)
        return NULL;
    o->fd = fd;
    static const uint8_t zeros[HEADER_LEN];
    if (!object_append(o, zeros, sizeof zeros)) {
        object_error(o, "for the header", err);
        block_object_free(o);
        return NULL;
    }
    return o;
}

void block_object_free(block_object *o) {
    if (o == NULL)
        return;
    strata_buffer_free(&o->tables);
    strata_buffer_free(&o->compressed);
    ZSTD_freeCCtx(o->cctx);
    free(o);
}

uint64_t block_object_size(const block_object *o) {
    return o->size;
}

int block_object_finish(block_object *o, int version, strata_error *err) {
    strata_buffer tail = STRATA_BUFFER_INIT;
    int rc = strata_buffer_append_uvarint(&tail, o->n_tables);
    rc |= strata_buffer_append(&tail, o->tables.data, o->tables.len);
    uint64_t footer_len = tail.len;
    uint32_t crc = (uint32_t)crc32_z(0, tail.data, tail.len);
    rc |= strata_buffer_append_u64le(&tail, footer_len);
    rc |= strata_buffer_append_u32le(&tail, crc);
    rc |= strata_buffer_append_u32le(&tail, (uint32_t)version);
    rc |= strata_buffer_append(&tail, BLOCK_MAGIC, BLOCK_MAGIC_LEN);
    uint8_t header[HEADER_LEN];
    memcpy(header, BLOCK_MAGIC, BLOCK_MAGIC_LEN);
    for (int i = 0; i < 4; i++) {
        header[8 + i] = (uint8_t)((uint32_t)version >> (8 * i));
        header[12 + i] = 0;
    }
    if (rc != 0) {
        o->write_errno = ENOMEM;
    } else if (object_append(o, tail.data, tail.len)) {
        if (o->fd < 0)
            memcpy(o->data->data + o->base, header, sizeof header);
        else if ((rc = write_all(o->fd, header, sizeof header, 0)) != 0)
            o->write_errno = rc;
    }
    strata_buffer_free(&tail);
    if (o->write_errno != 0) {
        if (o->fd < 0)
            o->data->len = o->base;
        return object_error(o, "for the footer", err);
    }
    return 0;
}

/* ---- tables ------------------------------------------------------------------------------ */

static void reset_column(block_column_state *c) {
    strata_buffer_reset(&c->raw);
    c->prev = 0;
    c->min = INT64_MAX;
    c->max = INT64_MIN;
}

void block_table_encoder_begin(block_table_encoder *t, block_object *o, int table_id, int n_cols) {
    t->object = o;
    t->table_id = table_id;
    t->schema = block_table_schema_get(table_id);
    t->n_cols = n_cols;
    t->rows = t->group_first = t->group_rows = 0;
    t->n_groups = t->n_pages = 0;
    t->failed = false;
    for (int c = 0; c < n_cols; c++)
        reset_column(&t->cols[c]);
}

void block_table_encoder_put(block_table_encoder *t, int col, uint64_t v) {
    if (col >= t->n_cols)
        return; /* e.g. the label_set column of a version 1 block */
    block_column_state *c = &t->cols[col];
    uint64_t word;
    switch (t->schema->columns[col].encoding) {
        case BLOCK_ENC_SVARINT:
            word = strata_zigzag_encode(v);
            break;
        case BLOCK_ENC_DELTA:
            word = strata_zigzag_encode(v - c->prev);
            c->prev = v;
            break;
        default:
            word = v;
            break;
    }
    if (strata_buffer_append_uvarint(&c->raw, word) != 0)
        t->failed = true;
    int64_t s = strata_u64_as_i64(v);
    if (s < c->min)
        c->min = s;
    if (s > c->max)
        c->max = s;
}

void block_table_encoder_put_bytes(block_table_encoder *t, int col, const char *s, size_t len) {
    block_column_state *c = &t->cols[col];
    if (strata_buffer_append_uvarint(&c->raw, len) != 0 ||
        strata_buffer_append(&c->raw, s, len) != 0)
        t->failed = true;
}

/* Compresses one column page and appends it to the object; fills its record. */
static void write_page(block_table_encoder *t, int col, block_page_record *rec) {
    block_object *o = t->object;
    block_column_state *c = &t->cols[col];
    size_t bound = ZSTD_compressBound(c->raw.len);
    strata_buffer_reset(&o->compressed);
    if (strata_buffer_reserve(&o->compressed, bound) != 0) {
        t->failed = true;
        return;
    }
    size_t n = ZSTD_compressCCtx(o->cctx, o->compressed.data, bound, c->raw.data, c->raw.len,
                                 o->zstd_level);
    const uint8_t *stored = o->compressed.data;
    uint32_t codec = BLOCK_CODEC_ZSTD;
    if (ZSTD_isError(n) || n >= c->raw.len) {
        stored = c->raw.data;
        n = c->raw.len;
        codec = BLOCK_CODEC_NONE;
    }
    *rec = (block_page_record){o->size, n,     c->raw.len, codec, (uint32_t)crc32_z(0, stored, n),
                               c->min,  c->max};
    if (!object_append(o, stored, n))
        t->failed = true;
    reset_column(c);
}

static void flush_group(block_table_encoder *t) {
    if (t->group_rows == 0 || t->failed)
        return;
    if (STRATA_ARRAY_RESERVE(t->groups, t->cap_groups, 2 * (t->n_groups + 1)) != 0 ||
        STRATA_ARRAY_RESERVE(t->pages, t->cap_pages, t->n_pages + (size_t)t->n_cols) != 0) {
        t->failed = true;
        return;
    }
    t->groups[2 * t->n_groups] = t->group_first;
    t->groups[2 * t->n_groups + 1] = t->group_rows;
    t->n_groups++;
    for (int c = 0; c < t->n_cols && !t->failed; c++)
        write_page(t, c, &t->pages[t->n_pages++]);
    t->group_first += t->group_rows;
    t->group_rows = 0;
}

void block_table_encoder_end_row(block_table_encoder *t) {
    t->rows++;
    t->group_rows++;
    for (int c = 0; c < t->n_cols; c++) {
        if (t->cols[c].raw.len >= t->object->page_size) {
            flush_group(t);
            return;
        }
    }
}

void block_table_encoder_end_group(block_table_encoder *t) {
    flush_group(t);
}

int block_table_encoder_end(block_table_encoder *t, int n_cols, strata_error *err) {
    flush_group(t);
    block_object *o = t->object;
    if (n_cols > t->n_cols)
        n_cols = t->n_cols;
    strata_buffer *b = &o->tables;
    int rc = strata_buffer_append_uvarint(b, (uint64_t)t->table_id);
    rc |= strata_buffer_append_uvarint(b, t->rows);
    rc |= strata_buffer_append_uvarint(b, (uint64_t)n_cols);
    for (int c = 0; c < n_cols; c++) {
        rc |= strata_buffer_append_uvarint(b, (uint64_t)c);
        rc |= strata_buffer_append_uvarint(b, t->schema->columns[c].encoding);
        rc |= strata_buffer_append_uvarint(b, t->schema->columns[c].flags);
    }
    rc |= strata_buffer_append_uvarint(b, t->n_groups);
    for (size_t g = 0; g < t->n_groups && !t->failed; g++) {
        rc |= strata_buffer_append_uvarint(b, t->groups[2 * g]);
        rc |= strata_buffer_append_uvarint(b, t->groups[2 * g + 1]);
        for (int c = 0; c < n_cols; c++) {
            const block_page_record *p = &t->pages[g * (size_t)t->n_cols + (size_t)c];
            rc |= strata_buffer_append_uvarint(b, p->offset);
            rc |= strata_buffer_append_uvarint(b, p->stored);
            rc |= strata_buffer_append_uvarint(b, p->raw);
            rc |= strata_buffer_append_uvarint(b, p->codec);
            rc |= strata_buffer_append_u32le(b, p->crc);
            if (t->schema->columns[c].flags & BLOCK_COLUMN_HAS_MINMAX) {
                rc |= strata_buffer_append_svarint(b, p->min);
                rc |= strata_buffer_append_svarint(b, p->max);
            }
        }
    }
    if (o->write_errno != 0 && o->write_errno != ENOMEM) {
        char what[96];
        snprintf(what, sizeof what, "in table %s", t->schema->name);
        return object_error(o, what, err);
    }
    if (rc != 0 || t->failed)
        return strata_error_set(err, STRATA_RESOURCE_EXHAUSTED,
                                "block writer: out of memory encoding table %s", t->schema->name);
    o->n_tables++;
    return 0;
}

size_t block_table_encoder_memory_bytes(const block_table_encoder *t) {
    size_t bytes = t->cap_groups * sizeof *t->groups + t->cap_pages * sizeof *t->pages;
    for (int c = 0; c < BLOCK_ENCODER_MAX_COLUMNS; c++)
        bytes += t->cols[c].raw.cap;
    return bytes;
}

void block_table_encoder_free(block_table_encoder *t) {
    for (int c = 0; c < BLOCK_ENCODER_MAX_COLUMNS; c++)
        strata_buffer_free(&t->cols[c].raw);
    free(t->groups);
    free(t->pages);
    t->groups = NULL;
    t->pages = NULL;
    t->cap_groups = t->cap_pages = 0;
}
