/*
 * block_meta.h - meta.json and the mark files of a block directory.
 *
 * meta.json follows Thanos (and Pyroscope) so operators and tools recognise it:
 *
 *   {"ulid": "01J...", "minTime": 1700000000000, "maxTime": 1700000010001,
 *    "stats": {"numSamples": 2000, "numSeries": 3, "numProfiles": 4},
 *    "compaction": {"level": 1, "sources": ["01J..."],
 *                   "parents": [{"ulid": "01J...", "minTime": ..., "maxTime": ...}]},
 *    "version": 1,
 *    "strata": {"version": 1, "tenant": "anonymous",
 *               "files": [{"rel_path": "profiles.strata", "size_bytes": 12345}],
 *               "profile_types": ["process_cpu:samples:count:cpu:nanoseconds:delta"],
 *               "label_names": ["job", "pod"]}}
 *
 * minTime and maxTime are milliseconds since the epoch; as in Prometheus/Thanos, minTime is
 * inclusive and maxTime exclusive (the last profile's time in ms, plus one). The `strata` object
 * carries the data format version and summaries a querier uses to prune blocks without opening
 * them. meta.json is written last: a block without it is incomplete and ignored.
 *
 * deletion-mark.json ({"id", "version": 1, "details", "deletion_time": unix seconds}) marks a block
 * for deletion after a delay; no-compact-mark.json ({"id", "version": 1, "details",
 * "no_compact_time": unix seconds, "reason"}) excludes it from compaction.
 *
 * Decoding is strict about types and required fields (INVALID_ARGUMENT naming the field) and
 * tolerant of unknown fields, so newer writers do not break older readers; an unknown meta
 * `version` or strata format version is rejected (INVALID_ARGUMENT, saying which version).
 */
#ifndef STRATA_BLOCK_META_H
#define STRATA_BLOCK_META_H

#include <stddef.h>
#include <stdint.h>

#include "block/ulid.h"
#include "common/buffer.h"
#include "common/error.h"

#define BLOCK_META_VERSION 1
#define BLOCK_MARK_VERSION 1

typedef struct block_meta_parent {
    ulid id;
    int64_t min_time_ms;
    int64_t max_time_ms;
} block_meta_parent;

typedef struct block_meta_file {
    char *rel_path;
    uint64_t size_bytes;
} block_meta_file;

typedef struct block_meta {
    ulid id;
    int64_t min_time_ms; /* inclusive */
    int64_t max_time_ms; /* exclusive */
    uint64_t num_samples;
    uint64_t num_series;
    uint64_t num_profiles;
    int compaction_level;
    ulid *sources;
    size_t n_sources;
    block_meta_parent *parents;
    size_t n_parents;
    int version; /* BLOCK_META_VERSION */
    /* strata extension */
    int format_version; /* BLOCK_FORMAT_VERSION of the data object */
    char *tenant;
    block_meta_file *files;
    size_t n_files;
    char **profile_types; /* sorted, canonical text form */
    size_t n_profile_types;
    char **label_names; /* sorted */
    size_t n_label_names;
} block_meta;

/* Zeroes meta (safe to free). */
void block_meta_init(block_meta *meta);
void block_meta_free(block_meta *meta);
/* Deep copy into a zeroed dst. */
int block_meta_copy(block_meta *dst, const block_meta *src, strata_error *err);
/* Appends meta.json (compact JSON) to out. */
int block_meta_encode(const block_meta *meta, strata_buffer *out, strata_error *err);
/* Parses meta.json into a zeroed *meta. */
int block_meta_decode(const char *json, size_t len, block_meta *meta, strata_error *err);

/* Decodes a meta.json object already parsed (e.g. one element of bucket-index.json). */
struct json_value;
int block_meta_decode_value(const struct json_value *value, block_meta *meta, strata_error *err);

/* Setters that copy: the compactor fills sources and parents of merged blocks. */
int block_meta_set_sources(block_meta *meta, const ulid *sources, size_t n, strata_error *err);
int block_meta_set_parents(block_meta *meta, const block_meta_parent *parents, size_t n,
                           strata_error *err);

/* details of the deletion marks the compactor writes on blocks a merged block replaces:
 * "compacted into <ULID of the merged block>". Queriers use it to keep such a block until its
 * replacement is visible. */
#define BLOCK_DELETION_COMPACTED_INTO "compacted into "

typedef struct block_deletion_mark {
    ulid id;
    int64_t deletion_time; /* unix seconds */
    char *details;         /* may be NULL */
} block_deletion_mark;

typedef struct block_no_compact_mark {
    ulid id;
    int64_t no_compact_time; /* unix seconds */
    char *reason;            /* "manual", ...; may be NULL */
    char *details;           /* may be NULL */
} block_no_compact_mark;

int block_deletion_mark_encode(const block_deletion_mark *mark, strata_buffer *out,
                               strata_error *err);
int block_deletion_mark_decode(const char *json, size_t len, block_deletion_mark *mark,
                               strata_error *err);
void block_deletion_mark_free(block_deletion_mark *mark);

int block_no_compact_mark_encode(const block_no_compact_mark *mark, strata_buffer *out,
                                 strata_error *err);
int block_no_compact_mark_decode(const char *json, size_t len, block_no_compact_mark *mark,
                                 strata_error *err);
void block_no_compact_mark_free(block_no_compact_mark *mark);

#endif
