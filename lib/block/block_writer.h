/*
 * block_writer.h - builds one immutable block (data object + meta), in memory or streamed to a
 * spool file (block_writer_new_spooled).
 *
 * Design. The writer accumulates profiles into de-duplicated tables and encodes them only at
 * block_writer_finish, so adding a profile is a handful of hash lookups per distinct symbol and one
 * per stack frame, with no allocation per sample:
 *
 *   - strings: one interned dictionary (common/hash.h) for every name in the block; a pprof's
 *     strings are interned once each per pprof;
 *   - mappings by content; functions and locations by a 96-bit content fingerprint
 *     (common/hash.h), so a lookup reads one table slot and never the record (a false match needs
 *     a 2^-96 collision). A pprof's own ids are translated once per profile through small
 *     per-profile caches (pprof id -> block id), so a sample's frames cost an array lookup each,
 *     and every sample type of a pprof reuses one translation (block_writer_add_profile_types);
 *   - stacks: a parent-pointer tree, (parent stack, location) -> stack id, so a whole stack is one
 *     integer (id 0 is the empty stack); a whole-stack cache (96-bit fingerprint of the location
 *     ids -> stack id) finds a stack seen before with one lookup, prefetched a pprof at a time;
 *   - series: (profile type, labels) -> series id;
 *   - sample label sets: a pprof sample's string labels (pprof.Labels: endpoint=/checkout), as
 *     a de-duplicated set of (name, value) string id pairs, id 0 for a sample without labels
 *     (numeric labels are dropped, as Parca does: Go heap profiles put a numeric `bytes` label
 *     on every sample, which would split every stack by allocation size);
 *   - samples: (stack id, label set, value) triples per profile, sorted by (stack, label set),
 *     with identical (stack, label set) pairs summed and zero values dropped; the profile's total
 *     is their sum. The label set array is only filled once some sample has labels.
 *
 * At finish, series are ordered by (profile type, labels), profiles by (series, time), label and
 * type strings (sample label names and values too) get the lowest string ids (so reading series
 * never touches symbol string pages),
 * and every table is written as zstd-compressed column pages with a footer index
 * (block_format.h, docs/block-format.md), followed by the per-series stack rollups
 * (block_rollup.h) that let merges over whole blocks skip the samples. meta is filled for
 * meta.json; the caller uploads the data object first and meta.json last. A block whose samples
 * carry labels is written in format version 2 (label set tables and columns); any other block
 * exactly as version 1, byte for byte as before labels existed.
 *
 * Three ways in: block_writer_add_profile takes a decoded pprof (the ingester); the begin / add
 * sample / end calls take already symbolized frames (the agent); the id path (intern string,
 * mapping, function, location, stack, then add_profile_stacks) copies symbols that another block
 * already interned, without going back to frames (the block merger, block_merge.h).
 *
 * Every way in checks a location against the same rules (one function in block_writer_dict.c),
 * so a block the ingester wrote can always be merged by the compactor: the mapping is none or one
 * of the writer's, each line names one of its functions, and a location may have no lines at all
 * (an unsymbolized address with its mapping: stripped binaries, [vdso], deleted executables, as
 * the eBPF agent sends them); its address and mapping are kept through writes and merges.
 *
 * A long-lived writer can cut a block at a time with block_writer_detach and keep its dictionaries
 * for the next one (the ingester does, once per flush: an agent's profiles repeat most of their
 * symbols and stacks from one push to the next).
 *
 * A writer is single-threaded. After an error in an add call the writer stays usable: the profile
 * is not added (symbols it introduced may remain, harmlessly).
 */
#ifndef STRATA_BLOCK_WRITER_H
#define STRATA_BLOCK_WRITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "block/block_meta.h"
#include "common/buffer.h"
#include "common/error.h"
#include "labels/labels.h"
#include "pprof/pprof.h"

typedef struct block_writer_options {
    size_t page_size;     /* target uncompressed bytes per column page; default 64 KiB */
    int zstd_level;       /* default 3 */
    const char *tenant;   /* recorded in meta; default "anonymous" */
    int compaction_level; /* recorded in meta; default 1 (a freshly ingested block) */
    bool write_rollups;   /* the optional per-series rollup tables (block_rollup.h); default
                             true; false writes a block as writers before them did */
} block_writer_options;

/* Fills options with the defaults. */
void block_writer_options_default(block_writer_options *options);

typedef struct block_writer block_writer;

/* options may be NULL for the defaults. Returns NULL on allocation failure. */
block_writer *block_writer_new(const block_writer_options *options, strata_error *err);
/* A writer that streams the block into fd (a file the caller opened for writing, empty; written
 * from offset 0 with pwrite) instead of holding it: the profiles, samples, rollup_stacks and
 * series_label_sets tables are encoded into it page by page as profiles are added, so the writer
 * holds the dictionaries (strings, symbols, stacks, series, label sets) and one series' rollup
 * sums, never the samples. The price is order: profiles must come series after series in the
 * block's series order (profile type, then labels, as block_writer_finish sorts them), and each
 * series' profiles in time order; anything else is FAILED_PRECONDITION (the block merger walks
 * its sources in exactly that order). block_writer_finish then writes the other tables and the
 * footer to fd and leaves *data untouched; meta says the object's size. A spooled writer cannot
 * be detached. When writing a profile fails half-way (out of memory, a failed write), the writer
 * can only be freed. */
block_writer *block_writer_new_spooled(const block_writer_options *options, int fd,
                                       strata_error *err);
void block_writer_free(block_writer *w);

/* Adds one profile: value column sample_type_index of p, for the series (type, labels). labels must
 * not contain __name__ (the type carries the name); labels with empty values are ignored. Samples
 * of value 0 are dropped and samples with identical stacks and sample labels summed. A sample's
 * string labels are kept as its label set (numeric ones and empty keys or values dropped; of a
 * key given twice the last value wins, as Parca). INVALID_ARGUMENT for an inconsistent pprof
 * (undefined ids, index out of range, a total overflowing int64). */
int block_writer_add_profile(block_writer *w, const label_set *labels, const profile_type *type,
                             int64_t time_ns, int64_t duration_ns, int64_t period,
                             const pprof_profile *p, size_t sample_type_index, strata_error *err);

/* Adds n profiles from one pprof at once, one per value column sample_type_indexes[i], for the
 * series (types[i], labels): the same as n block_writer_add_profile calls, but the pprof's
 * symbols are translated and its stacks resolved once for all of them (the ingester adds every
 * sample type of a pushed pprof this way). On an error, the profiles of the columns before the
 * failing one stay added. */
int block_writer_add_profile_types(block_writer *w, const label_set *labels,
                                   const profile_type *types, const size_t *sample_type_indexes,
                                   size_t n, int64_t time_ns, int64_t duration_ns, int64_t period,
                                   const pprof_profile *p, strata_error *err);

/* One symbolized frame. NULL strings mean "". */
typedef struct block_frame {
    const char *function_name;
    const char *system_name;
    const char *file_name;
    int64_t line;
    int64_t start_line;
    const char *mapping_file;
    const char *build_id;
    uint64_t address;
} block_frame;

/* Symbolized path: begin a profile, add samples (frames leaf first), end it. Only one profile is
 * open at a time; FAILED_PRECONDITION otherwise. */
int block_writer_begin_profile(block_writer *w, const label_set *labels, const profile_type *type,
                               int64_t time_ns, int64_t duration_ns, int64_t period,
                               strata_error *err);
int block_writer_add_sample(block_writer *w, const block_frame *frames, size_t n_frames,
                            int64_t value, strata_error *err);
/* As block_writer_add_sample, with the sample's pprof labels (NULL or empty: none; labels with an
 * empty value are dropped; a name given twice is INVALID_ARGUMENT). */
int block_writer_add_sample_labels(block_writer *w, const block_frame *frames, size_t n_frames,
                                   const label_set *sample_labels, int64_t value,
                                   strata_error *err);
int block_writer_end_profile(block_writer *w, strata_error *err);
/* Drops the open profile, if any. */
void block_writer_abort_profile(block_writer *w);

/* Id path: for tools that copy already interned symbols from other blocks (the block merger,
 * block_merge.h). The caller interns strings, then mappings and functions naming those strings,
 * locations naming those, and stacks (parent first) naming those, always with the ids this writer
 * returned; every table stays de-duplicated by content as on the other paths. Ids out of range are
 * INVALID_ARGUMENT. */
int block_writer_intern_string(block_writer *w, const char *s, size_t len, uint32_t *id,
                               strata_error *err);

typedef struct block_writer_mapping {
    uint64_t memory_start;
    uint64_t memory_limit;
    uint64_t file_offset;
    uint32_t file;     /* string id */
    uint32_t build_id; /* string id */
    uint32_t flags;    /* BLOCK_MAPPING_* */
} block_writer_mapping;

int block_writer_intern_mapping(block_writer *w, const block_writer_mapping *m, uint32_t *id,
                                strata_error *err);
/* name, system_name and file are string ids. */
int block_writer_intern_function(block_writer *w, uint32_t name, uint32_t system_name,
                                 uint32_t file, int64_t start_line, uint32_t *id,
                                 strata_error *err);

typedef struct block_writer_line {
    uint32_t function; /* function id */
    int64_t line;
} block_writer_line;

/* mapping is a mapping id + 1 (0 = none); lines innermost first, none or more (lines may be NULL
 * when n_lines is 0: an unsymbolized address); flags BLOCK_LOCATION_*. */
int block_writer_intern_location(block_writer *w, uint64_t address, uint32_t mapping,
                                 uint32_t flags, const block_writer_line *lines, uint32_t n_lines,
                                 uint32_t *id, strata_error *err);
/* The stack `location` below `parent` (a stack id; 0 = the root). Stack ids start at 1. */
int block_writer_intern_stack(block_writer *w, uint32_t parent, uint32_t location, uint32_t *id,
                              strata_error *err);
/* The stack of the given location ids (leaf first; n 0 is the empty stack), interned frame by
 * frame like the other paths, through the writer's whole-stack cache: a stack seen before costs
 * one lookup, not one per frame. */
int block_writer_intern_stack_path(block_writer *w, const uint32_t *locations, size_t n,
                                   uint32_t *id, strata_error *err);
/* Adds one profile whose samples are given as stack ids of this writer, in any order; as on the
 * other paths, identical stacks are summed and zero values dropped. */
int block_writer_add_profile_stacks(block_writer *w, const label_set *labels,
                                    const profile_type *type, int64_t time_ns, int64_t duration_ns,
                                    int64_t period, const uint32_t *stacks, const int64_t *values,
                                    size_t n, strata_error *err);
/* The sample label set of n (name, value) pairs of this writer's string ids (pairs[2i] the name,
 * pairs[2i+1] the value, none of them "" and names unique, in any order); n == 0 gives 0, the
 * empty set. Sets are de-duplicated by content. */
int block_writer_intern_label_set(block_writer *w, const uint32_t *pairs, size_t n, uint32_t *id,
                                  strata_error *err);
/* As block_writer_add_profile_stacks, with each sample's label set (ids from
 * block_writer_intern_label_set; label_sets NULL means none has labels): identical (stack, label
 * set) pairs are summed. */
int block_writer_add_profile_samples(block_writer *w, const label_set *labels,
                                     const profile_type *type, int64_t time_ns, int64_t duration_ns,
                                     int64_t period, const uint32_t *stacks,
                                     const uint32_t *label_sets, const int64_t *values, size_t n,
                                     strata_error *err);

/* Profiles added so far (open profile excluded). */
size_t block_writer_profile_count(const block_writer *w);
/* Samples kept so far (after dropping zeros and summing duplicates). */
uint64_t block_writer_sample_count(const block_writer *w);
/* Bytes of memory the writer holds, for cutting blocks at a size limit. */
size_t block_writer_memory_bytes(const block_writer *w);

/* Moves the profiles added so far into a new writer, *block, that holds exactly the strings,
 * symbols, stacks and series they use (renumbered, in the same relative order), and leaves w with
 * no profiles but with its whole dictionary of strings, symbols, stacks and series, so that the
 * next block's profiles find the symbols and stacks they repeat with one lookup each instead of
 * interning them again. *block can only be finished (block_writer_finish) and freed; it encodes
 * the same block that finishing w would have, minus entries no profile of it uses. Costs one pass
 * over the block's samples and the dictionary's arrays. The dictionary grows with everything ever
 * added: the caller bounds it with block_writer_memory_bytes, freeing w and starting afresh when
 * it is too large. FAILED_PRECONDITION if a profile is open or w was finished or is itself
 * detached; INVALID_ARGUMENT if w has no profiles. */
int block_writer_detach(block_writer *w, block_writer **block, strata_error *err);

/* Encodes the block: appends the data object to *data (a spooled writer: to its file) and fills
 * *meta (a new ULID, times, stats, compaction level, sources = [ulid], files, profile types and
 * label names; free it with block_meta_free). The writer can only be freed afterwards.
 * FAILED_PRECONDITION if a profile is still open or finish was already called; INVALID_ARGUMENT if
 * the block is empty. */
int block_writer_finish(block_writer *w, strata_buffer *data, block_meta *meta, strata_error *err);

#endif
