/*
 * arrow_ipc.h - a small Arrow IPC stream writer (columnar format 1.0, metadata version V5), from
 * the specification: one schema message, one dictionary batch per dictionary-encoded column, one
 * record batch, and the end-of-stream marker. What Parca's Arrow reports need, and no more:
 *
 *   bool                    (values as a bitmap)
 *   int 8/16/32/64, signed or not
 *   binary dictionary       (int32 indices into a dictionary of byte strings)
 *   list<int>               (int32 offsets into one child array of ints)
 *
 * No nulls (null counts are 0 and validity buffers empty, which the format allows), no
 * compression. Messages are flatbuffers (Message.fbs, Schema.fbs), built front to back: a table
 * is written before what it points to, and each forward offset is patched once its target is
 * written; every buffer of the body is 8-byte aligned.
 *
 * Usage: arrow_writer_init, then one arrow_add_* per column in schema order (the writer copies
 * what it needs), then arrow_writer_finish with the row count, and arrow_writer_free.
 */
#ifndef STRATA_ARROW_IPC_H
#define STRATA_ARROW_IPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buffer.h"
#include "common/error.h"

typedef struct arrow_column arrow_column;

typedef struct arrow_writer {
    arrow_column *columns;
    size_t n_columns, cap_columns;
    bool failed; /* out of memory in an add: finish reports it */
} arrow_writer;

void arrow_writer_init(arrow_writer *w);
void arrow_writer_free(arrow_writer *w);

/* n values each; bit_width 8, 16, 32 or 64; values of that width (int8_t ... uint64_t). */
void arrow_add_int(arrow_writer *w, const char *name, int bit_width, bool is_signed,
                   const void *values, size_t n);
/* An int column of the narrowest width (8, 16, 32 or 64 bits) that holds every value, as Parca
 * writes its flame graph's counts: unsigned when asked and no value is negative, else signed
 * (two's complement bits of the narrow width). */
void arrow_add_int_narrowed(arrow_writer *w, const char *name, bool is_signed,
                            const int64_t *values, size_t n);
void arrow_add_bool(arrow_writer *w, const char *name, const bool *values, size_t n, bool nullable);
/* Row i holds dict[indices[i]]; dict[0..n_dict) are byte strings of dict_len[k] bytes. */
void arrow_add_dict_binary(arrow_writer *w, const char *name, const int32_t *indices, size_t n,
                           const char *const *dict, const size_t *dict_len, size_t n_dict);
/* Row i holds values[offsets[i] .. offsets[i + 1]); offsets has n + 1 entries; the values are
 * ints of child_bit_width (8 ... 64). */
void arrow_add_list(arrow_writer *w, const char *name, const int32_t *offsets, size_t n,
                    int child_bit_width, bool child_signed, const void *values);
void arrow_add_list_uint32(arrow_writer *w, const char *name, const int32_t *offsets, size_t n,
                           const uint32_t *values);

/* Appends the IPC stream of the columns (each of n_rows rows) to out. */
int arrow_writer_finish(arrow_writer *w, size_t n_rows, strata_buffer *out, strata_error *err);

#endif
