/*
 * bucket_index.h - bucket-index.json, the per-tenant summary of a tenant's blocks and deletion
 * marks that the compactor writes each cycle and queriers read at start.
 *
 * Without it a querier that starts has to list the tenant and fetch every block's meta.json (one
 * GET per block; thousands for a busy tenant). With it, one GET of `<tenant>/bucket-index.json`
 * gives every block's meta and the deletion marks known to the compactor; the querier then
 * continues with its incremental listing as before, which stays the source of truth (it finds the
 * blocks written after the index and drops blocks deleted since). The index is therefore only an
 * accelerator: a missing, stale or unreadable index costs speed, never correctness.
 *
 *   {"version": 1, "updated_at": 1700000000,
 *    "blocks": [ <meta.json object>, ... ],
 *    "block_deletion_marks": [{"id": "01J...", "deletion_time": 1700000000}, ...]}
 *
 * `blocks` holds each committed block's meta.json object exactly as in the block (so the index
 * needs no format of its own for them), sorted by ULID; `updated_at` and `deletion_time` are unix
 * seconds. Decoding is strict about the version and field types (INVALID_ARGUMENT naming the
 * element) and tolerant of unknown fields, like meta.json.
 */
#ifndef STRATA_BLOCK_BUCKET_INDEX_H
#define STRATA_BLOCK_BUCKET_INDEX_H

#include <stddef.h>
#include <stdint.h>

#include "block/block_meta.h"
#include "common/buffer.h"
#include "common/error.h"

#define BUCKET_INDEX_FILE "bucket-index.json"
#define BUCKET_INDEX_VERSION 1

typedef struct bucket_index_mark {
    ulid id;
    int64_t deletion_time; /* unix seconds */
} bucket_index_mark;

typedef struct bucket_index {
    int64_t updated_at; /* unix seconds */
    block_meta *blocks;
    size_t n_blocks, cap_blocks;
    bucket_index_mark *marks;
    size_t n_marks, cap_marks;
} bucket_index;

void bucket_index_init(bucket_index *ix);
void bucket_index_free(bucket_index *ix);
/* Appends a deep copy of meta. */
int bucket_index_add_block(bucket_index *ix, const block_meta *meta, strata_error *err);
int bucket_index_add_mark(bucket_index *ix, const ulid *id, int64_t deletion_time,
                          strata_error *err);
/* The deletion time of id's mark, or -1 when the index knows no mark for it. */
int64_t bucket_index_mark_time(const bucket_index *ix, const ulid *id);

/* Appends the JSON text (blocks and marks sorted by ULID) to out. */
int bucket_index_encode(bucket_index *ix, strata_buffer *out, strata_error *err);
/* Parses the JSON text into a zeroed *ix. */
int bucket_index_decode(const char *json, size_t len, bucket_index *ix, strata_error *err);

#endif
