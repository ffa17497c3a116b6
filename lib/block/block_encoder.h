/*
 * block_encoder.h - writes a block's data object: column pages and the footer that indexes them
 * (docs/block-format.md, sections 3-5).
 *
 * Design. A block_object is the object being written, in memory (appended to a buffer) or to a
 * file (a spool, written front to back, so a large block never sits in memory whole). Any number
 * of table encoders write into one object at once: each buffers the raw values of its current row
 * group, one buffer per column, and when a column's buffer reaches the page size compresses every
 * column of the group with zstd and appends the pages to the object. Pages of different tables may
 * therefore interleave, which the format allows: the footer names every page's offset. A table's
 * page entries are kept as records until the table ends, so the number of columns listed in the
 * footer can still be chosen then: a writer that streams samples before it knows whether any has
 * sample labels encodes the label_set column and leaves it out of a version 1 footer (its pages
 * stay in the object, unreferenced, a few bytes of zeros after compression).
 *
 * block_object_finish appends the footer and trailer and writes the 16-byte header (a file's is
 * reserved when it is opened and written last, since the version is only known then).
 *
 * Errors: allocation failures and failed writes are remembered and reported when the table ends
 * (block_table_encoder_end) or the object finishes, with a message naming the table or the write.
 * Single-threaded.
 */
#ifndef STRATA_BLOCK_ENCODER_H
#define STRATA_BLOCK_ENCODER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "block/block_format.h"
#include "common/buffer.h"
#include "common/error.h"

#define BLOCK_ENCODER_MAX_COLUMNS 8

typedef struct block_object block_object;

/* An object appended to data (from its current end). */
block_object *block_object_new_buffer(strata_buffer *data, size_t page_size, int zstd_level,
                                      strata_error *err);
/* An object written to fd from its offset 0 on (the caller truncates it and owns it). */
block_object *block_object_new_file(int fd, size_t page_size, int zstd_level, strata_error *err);
void block_object_free(block_object *o);
/* Bytes of the object so far. */
uint64_t block_object_size(const block_object *o);
/* Appends the footer (the tables ended so far) and trailer, and writes the header with version.
 * On failure a buffer object's bytes are removed again. */
int block_object_finish(block_object *o, int version, strata_error *err);

typedef struct block_page_record {
    uint64_t offset, stored, raw;
    uint32_t codec, crc;
    int64_t min, max;
} block_page_record;

typedef struct block_column_state {
    strata_buffer raw;
    uint64_t prev;
    int64_t min, max;
} block_column_state;

/* One table being written. Zero it before its first block_table_encoder_begin; free it with
 * block_table_encoder_free. */
typedef struct block_table_encoder {
    block_object *object;
    int table_id;
    const block_table_schema *schema;
    int n_cols; /* columns encoded */
    block_column_state cols[BLOCK_ENCODER_MAX_COLUMNS];
    uint64_t rows, group_first, group_rows;
    uint64_t *groups; /* per row group: first row, row count */
    size_t n_groups, cap_groups;
    block_page_record *pages; /* per row group, n_cols records */
    size_t n_pages, cap_pages;
    bool failed; /* an allocation failed; reported when the table ends */
} block_table_encoder;

/* Starts table table_id with its first n_cols columns (of its schema) in object o. */
void block_table_encoder_begin(block_table_encoder *t, block_object *o, int table_id, int n_cols);
void block_table_encoder_put(block_table_encoder *t, int col, uint64_t v);
void block_table_encoder_put_bytes(block_table_encoder *t, int col, const char *s, size_t len);
/* Ends a row; writes the row group when a column's page is full. */
void block_table_encoder_end_row(block_table_encoder *t);
/* Writes the row group now, if it has rows, so the next row starts a group: rows a reader will
 * want without the ones before (a fresh block's symbols new to its dictionary) get groups of
 * their own, and decoding them decodes nothing else. */
void block_table_encoder_end_group(block_table_encoder *t);
/* Writes the last row group and adds the table to the object's footer with its first n_cols
 * columns (at most the encoded ones). */
int block_table_encoder_end(block_table_encoder *t, int n_cols, strata_error *err);
size_t block_table_encoder_memory_bytes(const block_table_encoder *t);
void block_table_encoder_free(block_table_encoder *t);

#endif
