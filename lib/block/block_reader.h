/*
 * block_reader.h - reads a block's data object through ranged fetches.
 *
 * Design. The reader never needs the whole object. block_reader_open fetches the object's tail
 * once (a guess of 64 KiB, or exactly the footer if it is bigger), checks the trailer (magic,
 * version) and the footer's CRC-32, and parses the page index. It then loads the series tables
 * (series, labels, postings), which are small and needed by every query, plus the string pages
 * they reference: writers give label strings the lowest ids, so symbol string pages are not read.
 *
 * Everything else is fetched lazily, page by page, through the caller's fetch callback (a bucket
 * range read, a file pread, a memory slice), and verified (CRC-32 of the stored bytes, zstd frame
 * size, exact value count) before use:
 *   - profiles pages are skipped using their series and time min/max from the footer;
 *   - samples pages are read only for the profiles asked for;
 *   - rollup pages (optional tables: per series, the block's summed samples per stack) only for
 *     the series asked for;
 *   - symbol tables (mappings, functions, locations, lines, stacks) are decoded completely on first
 *     use, strings page by page;
 *   - sample label sets (format version 2: pprof labels such as endpoint=/checkout) and the sets
 *     each series uses, decoded completely on first use; a sample's label set id comes with its
 *     row (block_samples.label_sets).
 * Decoded profile and sample pages live in a cache bounded by cache_bytes (evicted wholesale when
 * full); symbol and string pages stay until close, so strings handed out stay valid.
 * Counters of bytes fetched (total and per table) let tests and metrics see what a query read.
 *
 * Format versions 1 and 2 are read alike; a version 1 block has no sample labels (every sample's
 * label set is 0).
 *
 * Corrupt input (bad checksums, truncation, out-of-range ids, malformed varints) yields DATA_LOSS
 * with a message naming the table, column and page; an unknown format version or a non-block
 * INVALID_ARGUMENT. The reader never trusts a length or id it has not checked.
 *
 * A reader is not thread-safe; open one per thread or serialise calls.
 */
#ifndef STRATA_BLOCK_READER_H
#define STRATA_BLOCK_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "block/block_format.h"
#include "block/block_origins.h"
#include "block/block_rollup.h"
#include "common/buffer.h"
#include "common/error.h"
#include "labels/labels.h"

/* Reads `length` bytes at `offset` of the object into out (which the reader has reset). Must
 * deliver exactly length bytes or fail. */
typedef int (*block_fetch_fn)(void *ctx, uint64_t offset, uint64_t length, strata_buffer *out,
                              strata_error *err);

typedef struct block_reader_options {
    size_t tail_guess;     /* bytes fetched from the end at open; default 64 KiB */
    size_t readahead;      /* 0 (default): each page is its own fetch. Otherwise a page fetch
                              that misses reads this many bytes from the page on (within the data
                              area), and the next pages inside them come from memory: an object
                              store charges per request and takes milliseconds for each, so a
                              cold read of many small pages costs far fewer, larger requests. The
                              bytes read are kept (a few windows, and the tail read at open) until
                              block_reader_drop_readahead or close. */
    size_t cache_bytes;    /* budget for decoded profile and sample pages; default 256 MiB */
    bool verify_checksums; /* default true; false only to salvage damaged blocks, and for fuzzing
                              the decoders behind the checksums */
} block_reader_options;

void block_reader_options_default(block_reader_options *options);

typedef struct block_reader block_reader;

/* Opens a block of object_size bytes. options may be NULL. */
int block_reader_open(block_fetch_fn fetch, void *ctx, uint64_t object_size,
                      const block_reader_options *options, block_reader **out, strata_error *err);
void block_reader_close(block_reader *r);

/* A fetch callback over a byte array in memory; ctx is a block_memory_source. */
typedef struct block_memory_source {
    const uint8_t *data;
    size_t len;
} block_memory_source;
int block_memory_fetch(void *ctx, uint64_t offset, uint64_t length, strata_buffer *out,
                       strata_error *err);

/* Bytes fetched so far: in total, and for pages of one table (block_table_id). */
uint64_t block_reader_bytes_fetched(const block_reader *r);
uint64_t block_reader_table_bytes_fetched(const block_reader *r, int table_id);
/* Bytes the table's pages take in the object (compressed, page headers excluded); 0 if absent. */
uint64_t block_reader_table_stored_bytes(const block_reader *r, int table_id);
/* Whether a row group of the table starts at row (a reader decodes a group whole). */
bool block_reader_group_starts_at(const block_reader *r, int table_id, uint64_t row);

/* Approximate bytes the reader holds: decoded pages (cached and pinned), decoded symbol tables
 * and I/O buffers. */
size_t block_reader_memory_bytes(const block_reader *r);
/* Of that, the decoded pages of profiles, samples and rollups kept for the next read (bounded by
 * options.cache_bytes), and dropping them: a cache of many readers sheds these before it closes
 * a reader, whose symbol tables cost more to decode again. */
size_t block_reader_page_cache_bytes(const block_reader *r);
/* Frees the bytes kept by read-ahead (options.readahead) and the fetch and inflate buffers;
 * later misses fetch again. */
void block_reader_drop_readahead(block_reader *r);
/* What block_reader_drop_readahead would free. */
size_t block_reader_readahead_bytes(const block_reader *r);
void block_reader_drop_page_cache(block_reader *r);
/* Frees the decoded symbol tables and stack tree (mappings, functions, lines, locations, stacks)
 * and the location origins; they are decoded again if asked for. For a caller that has copied
 * what it needs (a merge that translated a block's stacks): pointers into them from earlier
 * calls are invalid afterwards. Strings and the stack origins stay. */
void block_reader_drop_symbols(block_reader *r);

/* Whether the footer lists the table (a known id; tables 15-17 only in version 2 blocks). */
bool block_reader_has_table(const block_reader *r, int table_id);
/* Row counts from the footer. */
uint64_t block_reader_row_count(const block_reader *r, int table_id);

/* ---- series ---- */

size_t block_reader_series_count(const block_reader *r);
/* Labels (sorted, without __name__) and profile type of a series; NULL if id is out of range. */
const label_set *block_reader_series_labels(const block_reader *r, uint32_t series_id);
const profile_type *block_reader_series_type(const block_reader *r, uint32_t series_id);
/* Series matching the selector's profile type (if any) and all its matchers, ascending ids, via
 * the postings. *ids is malloc'd (free it); NULL with *n 0 when nothing matches. */
int block_reader_select(block_reader *r, const selector *sel, uint32_t **ids, size_t *n,
                        strata_error *err);

/* ---- profiles and samples ---- */

typedef struct block_profile {
    uint32_t series_id;
    uint32_t sample_count;
    int64_t time_ns;
    int64_t duration_ns;
    int64_t period;
    int64_t total;
    uint64_t first_sample; /* row in the samples table */
} block_profile;

/* Profiles of the given series (ascending ids; NULL means every series) with start_ns <= time_ns
 * <= end_ns, ordered by (series, time). Appends to a malloc'd *out array of *n entries (set *out
 * NULL and *n 0 before the first call). Pages whose series or time range cannot match are not
 * fetched. */
int block_reader_profiles(block_reader *r, const uint32_t *series_ids, size_t n_series,
                          int64_t start_ns, int64_t end_ns, block_profile **out, size_t *n,
                          strata_error *err);

/* Called for each selected profile; p is valid during the call only. Non-zero stops the visit. */
typedef int (*block_profile_fn)(void *arg, const block_profile *p, strata_error *err);

/* The same profiles as block_reader_profiles, handed to fn one at a time in the same order
 * instead of copied into an array (a range query only sums them). Every page that may match is
 * loaded and checked before the first call, so a block whose profile pages are damaged fails
 * (DATA_LOSS) before handing out any profile. */
int block_reader_visit_profiles(block_reader *r, const uint32_t *series_ids, size_t n_series,
                                int64_t start_ns, int64_t end_ns, block_profile_fn fn, void *arg,
                                strata_error *err);

/* (stack id, value, label set) rows; (stack id, label set) ascending within one profile. */
typedef struct block_samples {
    uint32_t *stacks;
    int64_t *values;
    /* each row's sample label set (0 = none); NULL while every row so far has none (then rows
     * appended later without labels leave it NULL too) */
    uint32_t *label_sets;
    size_t len;
    size_t cap;
} block_samples;

void block_samples_free(block_samples *s);
/* Appends the samples of n profiles (in the given order) to out. */
int block_reader_read_samples(block_reader *r, const block_profile *profiles, size_t n,
                              block_samples *out, strata_error *err);

/* A run of sample rows read in place from the reader's decoded pages: row i is (stacks[i],
 * values[i] as a two's complement int64, label_sets ? label_sets[i] : 0). Stack ids are checked
 * (below the stack count) and so are label set ids. Valid only during the visit's callback. */
typedef struct block_row_run {
    const uint32_t *stacks;
    const uint64_t *values;
    const uint64_t *label_sets; /* NULL: every row has none */
    size_t n;
} block_row_run;

/* Called per run of one profile's rows (a profile's rows may span runs); returns 0 to go on, or
 * -1 after filling err. */
typedef int (*block_row_fn)(void *arg, size_t profile, const block_row_run *run, strata_error *err);

/* Visits the samples of n profiles (in the given order) without copying them: the same rows as
 * block_reader_read_samples, for readers that only sum them. */
int block_reader_visit_samples(block_reader *r, const block_profile *profiles, size_t n,
                               block_row_fn fn, void *arg, strata_error *err);

/* ---- rollups (optional: block_rollup.h, docs/block-format.md section 6.10) ---- */

/* True when the block has the rollup tables; blocks written before them have none. */
bool block_reader_has_rollups(const block_reader *r);
/* A series' rollup entry: how many profiles of the series the block holds (a query whose range
 * returns that many of them covers all of them) and where its rollup rows lie. The small
 * rollup_series table is read and checked on first use. FAILED_PRECONDITION for a block without
 * rollups, INVALID_ARGUMENT for a series id out of range. */
int block_reader_series_rollup_info(block_reader *r, uint32_t series_id, block_rollup_series *out,
                                    strata_error *err);
/* Appends a series' rollup rows to out: (stack id, label set) ascending, each value the sum over
 * all the series' profiles in the block of that (stack, label set)'s values, scaled as a merge
 * scales them. Fetches
 * only the rollup_stacks pages holding the series' rows. FAILED_PRECONDITION for a series with
 * fewer than BLOCK_ROLLUP_MIN_PROFILES profiles, which has no rollup (read its samples). */
int block_reader_series_rollup(block_reader *r, uint32_t series_id, block_samples *out,
                               strata_error *err);
/* The same rows visited in place (block_reader_visit_samples); profile is 0 in every call. */
int block_reader_visit_series_rollup(block_reader *r, uint32_t series_id, block_row_fn fn,
                                     void *arg, strata_error *err);

/* ---- sample label sets (format version 2) ---- */

/* The block's format version (1 or 2). */
uint32_t block_reader_format_version(const block_reader *r);
/* True when the block can hold sample labels (version 2); false for version 1 blocks. */
bool block_reader_has_sample_labels(const block_reader *r);
/* Number of distinct label sets (ids 1..n; 0 is the empty set). */
size_t block_reader_label_set_count(const block_reader *r);
/* The labels of set id (sorted by name; id 0 gives the empty set), valid until close. The label
 * set tables are read and checked on first use. INVALID_ARGUMENT for an id out of range. */
int block_reader_label_set(block_reader *r, uint32_t id, const label_set **out, strata_error *err);
/* Whether some label set of the block has a label `name` (false for a version 1 block). */
int block_reader_has_sample_label_name(block_reader *r, const char *name, bool *out,
                                       strata_error *err);
/* The non-empty label sets a series' samples (and rollup rows) use, ascending, valid until close;
 * none (n 0) for a version 1 block. INVALID_ARGUMENT for a series out of range. */
int block_reader_series_label_sets(block_reader *r, uint32_t series_id, const uint32_t **ids,
                                   size_t *n, strata_error *err);

/* ---- symbols ---- */

typedef struct block_line {
    uint32_t function_id;
    int64_t line;
} block_line;

typedef struct block_location {
    uint64_t address;
    bool has_mapping;
    uint32_t mapping_id;
    bool is_folded;
    const block_line *lines; /* innermost (inlined) first; valid until close */
    uint32_t n_lines;
} block_location;

typedef struct block_function {
    const char *name; /* NUL-terminated; valid until close */
    const char *system_name;
    const char *file;
    int64_t start_line;
} block_function;

typedef struct block_mapping {
    uint64_t memory_start;
    uint64_t memory_limit;
    uint64_t file_offset;
    const char *file;
    const char *build_id;
    uint32_t flags; /* BLOCK_MAPPING_* */
} block_mapping;

/* Location ids of a stack, leaf first, into locations[0..cap); *depth is the full depth (may exceed
 * cap: call again with more room). Stack 0 is the empty stack. */
int block_reader_stack(block_reader *r, uint32_t stack_id, uint32_t *locations, size_t cap,
                       size_t *depth, strata_error *err);
/* One node of the stack tree: the parent stack (always a smaller id; 0 is the empty stack) and
 * the location this stack adds below it. Walking ids upwards from parents lets a reader translate
 * each distinct stack once, reusing its parent's translation. */
int block_reader_stack_node(block_reader *r, uint32_t stack_id, uint32_t *parent,
                            uint32_t *location, strata_error *err);

/* Where a block's stacks come from in the writer's dictionary (docs/block-format.md 6.12). The
 * ingester cuts each flush's block from one long-lived dictionary per tenant; every such block
 * names the dictionary (a 16-byte id) and, per stack, the dictionary's stack id (its origin). Two
 * blocks of one dictionary hold the same stack content under the same origin, so a reader that
 * translates stacks (a merge) translates each origin once over all of them; locations likewise.
 * Stack origins are strictly increasing in stack id and within 1..dictionary_stacks, location
 * origins within 1..dictionary_locations, function origins (blocks written since they were added)
 * within 1..dictionary_functions (checked); the empty stack's origin is 0.
 *
 * Stack origins are kept by runs of consecutive origins, in about half a byte per stack
 * (block_origins.h); read them with block_stack_origin. */

typedef struct block_stack_origins {
    uint8_t dictionary[16];
    uint32_t dictionary_stacks;
    uint32_t dictionary_locations;
    uint32_t dictionary_functions;    /* 0 without function origins */
    const block_origin_table *stacks; /* index = stack id; NULL: the block has no origins */
    size_t n_stacks;
    /* index = location id: the dictionary's location, 1..dictionary_locations (locations are
     * reordered per block, so these are not ordered; they are distinct in a well-formed block) */
    const uint32_t *location_origin;
    size_t n_locations;
    /* index = function id: the dictionary's function, 1..dictionary_functions (not ordered);
     * NULL for a block written before function origins */
    const uint32_t *function_origin;
    size_t n_functions;
} block_stack_origins;

/* The origin of stack (0..n_stacks) of a block with origins (stacks not NULL). */
static inline uint32_t block_stack_origin(const block_stack_origins *o, uint32_t stack) {
    return block_origin_table_get(o->stacks, stack);
}

/* Fills out (stacks NULL for a block without the tables, which is no error); the arrays live
 * until close. Loads only the two small tables, not the stack tree. */
int block_reader_stack_origins(block_reader *r, block_stack_origins *out, strata_error *err);

int block_reader_location(block_reader *r, uint32_t location_id, block_location *out,
                          strata_error *err);
int block_reader_function(block_reader *r, uint32_t function_id, block_function *out,
                          strata_error *err);
int block_reader_mapping(block_reader *r, uint32_t mapping_id, block_mapping *out,
                         strata_error *err);
/* String id -> NUL-terminated string valid until close. */
int block_reader_string(block_reader *r, uint32_t string_id, const char **out, size_t *len,
                        strata_error *err);

#endif
