/*
 * block_merge.h - merges N blocks of one tenant into one new block: the compactor's data path.
 *
 * What a merged block holds. Exactly the profiles of its sources, with one exception: identical
 * profiles - same series (profile type and label set), same timestamp, same duration and period,
 * and the same samples after symbolization (the same stacks of the same frames with the same pprof
 * sample labels, the same values) - are kept once and counted as duplicates. Retried writes produce
 * such copies, often in two different blocks, and queries must not count them twice. Profiles of
 * one series at the same timestamp with different content are all kept. Source time ranges may
 * overlap.
 *
 * Design. Sources are read through block_reader with ranged fetches from the bucket; no source is
 * ever downloaded whole. Every source's series table is sorted by (profile type, labels), so the
 * merger walks the series of all sources in that global order, like a k-way merge of sorted runs,
 * and handles one output series at a time:
 *
 *   1. the series' profiles of each source (the profiles table, pruned by the footer's min/max),
 *      ordered by (time, source);
 *   2. per run of equal timestamps, the samples of those profiles, their stacks and sample label
 *      sets translated into the output's symbol space, sorted by (stack, label set), compared with
 *      the profiles already kept at that timestamp (duplicates dropped), and added to the block
 *      writer. Profiles that differ only in their samples' labels are not duplicates.
 *
 * Symbols are re-interned lazily: a source's stack is translated the first time a sample uses it,
 * with its locations, their functions and mappings, and their strings; a sample label set the
 * first time a sample has it. The output is version 2 when a kept sample has labels (any source
 * of version 2 with labels), else version 1. Per source, translation
 * tables map source ids to output ids (4 bytes per source row), so each distinct source symbol is
 * interned once. Small sources (more stack nodes than samples, as 1 s blocks of deep stacks are)
 * translate whole stacks through the writer's whole-stack cache; larger ones node by node, parent
 * first, stopping at the nearest translated ancestor. Symbols no kept sample uses are not copied.
 *
 * Memory. The merger holds one output series' profile list, one timestamp run's samples, the
 * translation tables and each source reader's bounded page cache. The output block is streamed:
 * the merger walks series in the block's order and each series' profiles in time order, exactly
 * the order a spooled block writer (block_writer_new_spooled) needs, so the profiles, samples and
 * rollup rows are compressed into a spool file (options.spool_directory, an unnamed file that no
 * crash leaves behind) as they are produced, and the writer holds only the output's dictionaries
 * (strings, symbols, the stack tree and its indexes: 40-80 bytes per stack node) and one series'
 * rollup sums. A merge's memory therefore grows with the distinct stacks and symbols of its
 * sources, not with their samples or time span. The merger estimates all of it after every series
 * and fails with RESOURCE_EXHAUSTED, naming the estimate and the limit, as soon as the estimate
 * passes options.memory_limit, and before reading any data when the sources' meta.json series
 * counts alone predict more: the compactor then splits the job into smaller ones instead of being
 * killed for memory. The spool needs disk space for the output block (about its sources' size).
 *
 * Output. The data object is uploaded from the spool first (bucket_upload_file: in parts, one in
 * memory at a time), meta.json last (the commit rule of docs/block-format.md), under
 * <tenant>/<new ULID>/. meta.json records compaction.level (the
 * sources' maximum plus one unless given), sources (the sorted union of the sources' sources),
 * parents (the merged blocks with their time ranges), stats and the time range of the profiles
 * kept. Nothing is uploaded before the merge has succeeded; if meta.json cannot be uploaded the
 * data object is deleted again (best effort: without meta.json it is invisible anyway).
 *
 * Errors. A source that cannot be read or is corrupt fails the merge with the reader's code
 * (DATA_LOSS for damaged data, INVALID_ARGUMENT for something that is not a block or has an
 * unknown version, NOT_FOUND for a missing meta.json or data object) and a message starting with
 * "block <tenant>/<ULID>: ", so the compactor can mark exactly that block no-compact. Sources of
 * another tenant (meta.json's strata.tenant) or a repeated source are INVALID_ARGUMENT. A bucket
 * call that fails (other than a missing or short object: an unreachable bucket, a refused upload)
 * sets result.bucket_error, so callers can tell errors worth retrying from errors in the data.
 * Every location a source holds can be merged, including locations without lines (an address and
 * its mapping only), which keep their address and mapping (block_writer.h).
 *
 * block_merge is synchronous and single-threaded; run several merges in parallel on different
 * sources if needed. It is safe to call concurrently on the same bucket.
 */
#ifndef STRATA_BLOCK_MERGE_H
#define STRATA_BLOCK_MERGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "block/block_meta.h"
#include "block/ulid.h"
#include "bucket/bucket.h"
#include "common/error.h"

/* Counters of one merge; also what the progress callback sees while it runs. */
typedef struct block_merge_stats {
    size_t sources;         /* blocks merged */
    uint64_t series_in;     /* sum of the sources' series */
    uint64_t series_out;    /* series of the new block (done so far, while running) */
    uint64_t profiles_in;   /* sum of the sources' profiles (read so far, while running) */
    uint64_t profiles_out;  /* profiles written */
    uint64_t duplicates;    /* identical profiles dropped (profiles_in - profiles_out at the end) */
    uint64_t samples_in;    /* sample rows read */
    uint64_t samples_out;   /* sample rows written */
    uint64_t bytes_read;    /* fetched from the bucket: meta.json files and data object ranges */
    uint64_t bytes_written; /* uploaded: the data object and meta.json */
    size_t peak_memory_bytes;  /* the merger's largest memory estimate (what the limit checks) */
    size_t dictionary_sources; /* sources translated through a dictionary shared with others */
} block_merge_stats;

/* Called after each output series (at most about every series_total / 100 series, and at the
 * end); series_done of series_total global series. Must not call back into the merge. */
typedef void (*block_merge_progress_fn)(void *ctx, const block_merge_stats *stats,
                                        uint64_t series_done, uint64_t series_total);

typedef struct block_merge_options {
    int compaction_level;        /* level of the new block; 0 (default) = max of the sources + 1 */
    size_t memory_limit;         /* bytes the merge may hold (estimate); default 1 GiB */
    size_t page_size;            /* the writer's page size; 0 = the writer's default */
    int zstd_level;              /* the writer's zstd level; 0 = the writer's default */
    size_t reader_cache_bytes;   /* per source page cache; 0 = default (4 MiB) */
    const char *spool_directory; /* where the output is spooled; NULL or "" = $TMPDIR or /tmp */
    block_merge_progress_fn progress; /* optional */
    void *progress_ctx;
} block_merge_options;

void block_merge_options_default(block_merge_options *options);

typedef struct block_merge_result {
    ulid id;         /* the new block */
    block_meta meta; /* its meta.json as uploaded; free with block_merge_result_free */
    block_merge_stats stats;
    /* After a failure: true when it came from a bucket call (reading a source's meta.json or data,
     * uploading the new block) that failed for another reason than a missing or short object, so
     * the same merge may succeed when retried; false when it came from the sources' content or
     * the merge itself (what the compactor counts towards marking a job's sources no-compact). */
    bool bucket_error;
} block_merge_result;

void block_merge_result_free(block_merge_result *result);

/* Merges the n blocks `sources` of tenant (keys <tenant>/<ULID>/...) into one new block in the
 * same bucket and fills *out (zeroed first; free it with block_merge_result_free, also after a
 * failure, where stats say how far it got). opts may be NULL for the defaults. n must be at least
 * 1 (merging one block rewrites it, e.g. to raise its level or drop duplicates). The sources are
 * left untouched: marking them for deletion is the caller's job, after this returns 0. */
int block_merge(bucket *store, const char *tenant, const ulid *sources, size_t n,
                const block_merge_options *opts, block_merge_result *out, strata_error *err);

#endif
