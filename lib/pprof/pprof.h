/*
 * pprof.h - decoding, validating and encoding pprof profiles (profile.proto, perftools.profiles).
 *
 * Design. A pprof arrives as (optionally gzipped) protobuf. The decoder is a hand-written,
 * single-pass wire-format reader: it inflates gzip if the first bytes are 1f 8b, then walks the
 * message once, filling flat arrays. Nothing is allocated per sample: sample location ids, sample
 * values and sample labels live in three shared arrays and each sample holds offsets into them;
 * strings are (pointer, length) views into the decoded byte buffer, which the profile owns. This
 * keeps decoding of agent-sized profiles (thousands of samples, deep stacks) to a handful of
 * allocations and lets the ingester hand the arrays straight to the block writer.
 *
 * Validation follows what Parca enforces on WriteRaw, so a profile we accept is one Parca would
 * accept: string_table[0] == "", every string valid UTF-8 without NUL bytes (as Go's protobuf, and
 * so Parca, demands of proto3 strings; NUL because stored strings are read as C strings), every
 * string index in range, mapping/location/function ids
 * non-zero and unique, every referenced id defined, each sample has exactly one value per sample
 * type, and the limits below. Every error names the offending element ("sample 12: location id 9
 * is not defined").
 *
 * Ids: pprof ids are arbitrary non-zero uint64s. After decoding, `location_index`, `function_index`
 * and `mapping_index` map an id to its array position in O(1) (dense ids take a direct table;
 * sparse ids a hash map), via pprof_find_location() and friends.
 *
 * Encoding writes canonical protobuf from a pprof_profile whose strings may point anywhere; it is
 * used by the querier (PPROF reports), the agent, tests and benchmarks.
 */
#ifndef STRATA_PPROF_H
#define STRATA_PPROF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buffer.h"
#include "common/error.h"
#include "common/hash.h"

/* A string view. Not NUL-terminated in general. */
typedef struct pprof_string {
    const char *ptr;
    uint32_t len;
} pprof_string;

typedef struct pprof_value_type {
    int64_t type; /* index into the string table */
    int64_t unit; /* index into the string table */
} pprof_value_type;

typedef struct pprof_label {
    int64_t key; /* string index */
    int64_t str; /* string index, 0 if numeric */
    int64_t num;
    int64_t num_unit; /* string index */
} pprof_label;

typedef struct pprof_sample {
    uint32_t location_offset; /* into pprof_profile.sample_location_ids */
    uint32_t location_count;  /* leaf first, as in pprof */
    uint32_t value_offset;    /* into pprof_profile.sample_values; n_sample_types values */
    uint32_t label_offset;    /* into pprof_profile.sample_labels */
    uint32_t label_count;
} pprof_sample;

typedef struct pprof_mapping {
    uint64_t id;
    uint64_t memory_start;
    uint64_t memory_limit;
    uint64_t file_offset;
    int64_t filename; /* string index */
    int64_t build_id; /* string index */
    bool has_functions;
    bool has_filenames;
    bool has_line_numbers;
    bool has_inline_frames;
} pprof_mapping;

typedef struct pprof_line {
    uint64_t function_id;
    int64_t line;
    int64_t column;
} pprof_line;

typedef struct pprof_location {
    uint64_t id;
    uint64_t mapping_id; /* 0 = none */
    uint64_t address;
    uint32_t line_offset; /* into pprof_profile.lines; innermost (inlined) first, as in pprof */
    uint32_t line_count;
    bool is_folded;
} pprof_location;

typedef struct pprof_function {
    uint64_t id;
    int64_t name;        /* string index */
    int64_t system_name; /* string index */
    int64_t filename;    /* string index */
    int64_t start_line;
} pprof_function;

/* Maps ids to array indexes. */
typedef struct pprof_id_index {
    uint32_t *dense; /* dense[id] = index + 1, when ids are small; else NULL */
    size_t dense_len;
    strata_u64_map sparse; /* id -> index, when ids are large */
} pprof_id_index;

typedef struct pprof_profile {
    pprof_value_type *sample_types;
    size_t n_sample_types;

    pprof_sample *samples;
    size_t n_samples;
    uint64_t *sample_location_ids; /* all samples' location ids, concatenated */
    size_t n_sample_location_ids;
    int64_t *sample_values; /* n_samples * n_sample_types, sample-major */
    pprof_label *sample_labels;
    size_t n_sample_labels;

    pprof_mapping *mappings;
    size_t n_mappings;
    pprof_location *locations;
    size_t n_locations;
    pprof_line *lines;
    size_t n_lines;
    pprof_function *functions;
    size_t n_functions;

    pprof_string *strings;
    size_t n_strings;

    int64_t drop_frames; /* string index */
    int64_t keep_frames; /* string index */
    int64_t time_nanos;
    int64_t duration_nanos;
    pprof_value_type period_type;
    int64_t period;
    int64_t *comments; /* string indexes */
    size_t n_comments;
    int64_t default_sample_type; /* string index */

    pprof_id_index location_index;
    pprof_id_index function_index;
    pprof_id_index mapping_index;

    /* Memory owned by the profile (the inflated bytes the strings point into, and arrays). */
    uint8_t *owned_bytes;
} pprof_profile;

typedef struct pprof_limits {
    size_t max_decompressed_bytes; /* default 64 MiB */
    size_t max_samples;            /* default 1,000,000 */
    size_t max_stack_depth;        /* locations per sample; default 1,024 */
    size_t max_sample_types;       /* default 32 */
    size_t max_string_length;      /* default 64 KiB */
} pprof_limits;

/* Fills limits with the defaults above. */
void pprof_limits_default(pprof_limits *limits);

/* Returns true if data starts with the gzip magic 1f 8b. */
bool pprof_is_gzip(const uint8_t *data, size_t len);

/* Decodes and validates a pprof (gzip sniffed). limits may be NULL for the defaults. *out need not
 * be initialised: it is overwritten, never freed. On failure *out is left empty (safe to free) and
 * err has STRATA_INVALID_ARGUMENT (malformed input), STRATA_RESOURCE_EXHAUSTED (over a limit, or
 * out of memory). Plain input larger than max_decompressed_bytes is refused like an oversized gzip.
 *
 * On success every sample has exactly n_sample_types values (sample i's start at
 * i * n_sample_types), and samples whose values are all zero are kept (the ingester drops them per
 * sample type). Every string table entry, used or not, must be valid UTF-8 without NUL bytes
 * (INVALID_ARGUMENT "string 17 (function 2 name): invalid UTF-8 at offset 3"). Protobuf groups are
 * refused. The decoded arrays may cost up to about 20 bytes per input byte in the worst case
 * (empty locations), so max_decompressed_bytes also bounds memory. */
int pprof_decode(const uint8_t *data, size_t len, const pprof_limits *limits, pprof_profile *out,
                 strata_error *err);

/* Builds location_index, function_index and mapping_index from the arrays; fails with
 * INVALID_ARGUMENT on a zero or duplicate id. pprof_decode calls it; code that assembles a profile
 * by hand (tests, the agent) calls it before using the pprof_find_* lookups. */
int pprof_profile_build_indexes(pprof_profile *p, strata_error *err);

/* Frees everything the profile owns and zeroes it. Safe on a zeroed profile. Arrays are freed with
 * free(), so a hand-assembled profile must malloc them (or zero the pointers before freeing). */
void pprof_profile_free(pprof_profile *p);

/* The string with index i, or "" if out of range. */
pprof_string pprof_string_at(const pprof_profile *p, int64_t i);

/* Array lookups by pprof id; NULL if the id is not defined. */
const pprof_location *pprof_find_location(const pprof_profile *p, uint64_t id);
const pprof_function *pprof_find_function(const pprof_profile *p, uint64_t id);
const pprof_mapping *pprof_find_mapping(const pprof_profile *p, uint64_t id);

/* Sample i's value for sample type t. */
static inline int64_t pprof_sample_value(const pprof_profile *p, size_t i, size_t t) {
    return p->sample_values[p->samples[i].value_offset + t];
}

/* Encodes p as protobuf into out (appending), gzip-compressed if gzip is true. The arrays of p must
 * be consistent: sample, label and line offsets are checked (INVALID_ARGUMENT), sample_values is
 * trusted to hold n_sample_types values at each value_offset. Ids and string indexes are written as
 * given, unchecked; id indexes are not needed. The output is canonical (fields in number order,
 * repeated scalars packed, zero scalars omitted), so encoding a decoded profile again gives the
 * same bytes. On failure out is left as it was. */
int pprof_encode(const pprof_profile *p, bool gzip, strata_buffer *out, strata_error *err);

/* gzip helpers shared with the scraper and tests. pprof_gunzip appends the inflated bytes to out
 * and fails with RESOURCE_EXHAUSTED past max_bytes. */
int pprof_gunzip(const uint8_t *data, size_t len, size_t max_bytes, strata_buffer *out,
                 strata_error *err);
int pprof_gzip(const uint8_t *data, size_t len, int level, strata_buffer *out, strata_error *err);

/* A gzip compressor kept across calls, for a caller that compresses many small profiles (the
 * agent: dozens per window): its state is made once instead of allocated, faulted in and freed
 * for every profile. pprof_gzip makes one for its one call. Not thread-safe. */
typedef struct pprof_gzipper pprof_gzipper;
int pprof_gzipper_new(int level, pprof_gzipper **out, strata_error *err);
/* Appends the gzip of data[0..len) to out. */
int pprof_gzipper_compress(pprof_gzipper *g, const uint8_t *data, size_t len, strata_buffer *out,
                           strata_error *err);
void pprof_gzipper_free(pprof_gzipper *g);

#endif
