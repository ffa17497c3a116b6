/*
 * compactor.h - the compactor: merges each tenant's small blocks into larger ones by level,
 * applies retention, and deletes replaced and expired blocks through deletion marks.
 *
 * One cycle per compaction_interval, per tenant (tenants are the top-level prefixes of the bucket):
 *
 *   1. Scan: one recursive listing of <tenant>/ shows every block directory and which of meta.json,
 *      deletion-mark.json and no-compact-mark.json it holds. meta.json is fetched once per block
 * and kept (blocks are immutable). An undecodable meta.json gets a no-compact mark.
 *   2. Reconcile: a block whose ULID appears in compaction.sources or compaction.parents of another
 *      committed block is already inside that block; it is marked for deletion. This is what makes
 *      compaction idempotent: killed after a merged block's meta.json was uploaded but before its
 *      sources were marked, the next cycle marks them instead of merging them again.
 *   3. Retention: blocks whose maxTime is older than the tenant's retention are marked.
 *   4. Delete: blocks marked at least delete_delay ago are deleted, meta.json first (the block
 *      leaves every listing-based view at once, exactly as an unfinished upload), then the data
 *      and other files, then deletion-mark.json last (so a deletion interrupted half-way is still
 *      marked and is finished by the next cycle). Directories without meta.json nor mark
 *      (unfinished uploads, merges killed before their meta.json) are deleted once their ULID is
 *      older than max(delete_delay, 1h), so a slow upload in progress is never touched.
 *   5. Compact: plan (planner.h), run each job with block_merge (block_merge.h; memory bounded by
 *      max_job_memory), announce the new block, then mark its sources; plan again until nothing is
 *      left. A job that fails with RESOURCE_EXHAUSTED is split in halves, recursively (a half of
 * one block is left as it is) and its window is not planned again by this process. A job that fails
 * because a source is corrupt or unreadable (the merger names it) marks that source no-compact with
 * the error as details, counts it, and goes on: the compactor never halts. A job that fails 3
 * cycles in a row with any other error that retrying does not cure (not a bucket error, not
 * UNAVAILABLE, DEADLINE_EXCEEDED, ABORTED, CANCELLED, PERMISSION_DENIED or UNAUTHENTICATED; each
 * job is tried once per cycle) is given up: its sources (or the one the error names) get a
 * no-compact mark with reason "repeated-failure", counted in strata_compactor_jobs_given_up_total
 * and strata_compactor_repeated_failure_marks_total, so it does not fail forever while level-1
 * blocks pile up; strata_compactor_failing_jobs shows the jobs still counting.
 *   6. Write <tenant>/bucket-index.json (bucket_index.h) for queriers that start.
 *
 * Readers stay consistent because queriers hide a block as soon as a committed block lists it in
 * sources or parents, and blocks disappear only delete_delay after their mark (see
 * docs/storage.md). Only one compactor may run per bucket.
 */
#ifndef STRATA_COMPACTOR_H
#define STRATA_COMPACTOR_H

#include <stdbool.h>
#include <stdint.h>

#include "block/block_merge.h"
#include "bucket/bucket.h"
#include "common/error.h"
#include "config/config.h"
#include "metrics/metrics.h"

typedef struct compactor_tenant_override {
    char *tenant;
    int64_t retention_ns;
} compactor_tenant_override;

typedef struct compactor_config {
    bool enabled; /* `strata all` runs the compactor only when true */
    int64_t compaction_interval_ns;
    config_string_list block_ranges; /* durations, smallest first */
    int64_t consistency_delay_ns;
    int64_t delete_delay_ns;
    int64_t retention_ns;                /* 0 = keep forever */
    config_struct_list tenant_overrides; /* compactor_tenant_override */
    uint64_t max_job_memory;
    int64_t progress_interval_ns;
    char *spool_directory; /* where merges spool their output block; NULL = $TMPDIR or /tmp */
} compactor_config;

extern const config_field compactor_config_fields[];

typedef struct compactor compactor;

/* block_merge's signature, so tests can wrap the real merger to inject failures. */
typedef int (*compactor_merge_fn)(bucket *store, const char *tenant, const ulid *sources, size_t n,
                                  const block_merge_options *opts, block_merge_result *out,
                                  strata_error *err);

typedef struct compactor_stats {
    uint64_t cycles;
    uint64_t jobs;
    uint64_t jobs_failed;
    uint64_t blocks_in;
    uint64_t blocks_out;
    uint64_t deletion_marks;
    uint64_t blocks_deleted;
    uint64_t partial_deleted;
    uint64_t no_compact_marks; /* every no-compact mark, repeated_failure_marks included */
    uint64_t splits;
    uint64_t jobs_given_up;          /* jobs that failed 3 cycles in a row (see below) */
    uint64_t repeated_failure_marks; /* their sources marked no-compact */
    uint64_t failing_jobs;           /* after the last cycle: jobs failing, not given up yet */
} compactor_stats;

/* Checks what the config decoder's bounds cannot: block_ranges (durations of at least 1ms, at most
 * PLANNER_MAX_RANGES, each a larger multiple of the one before). Creates nothing. */
int compactor_config_validate(const compactor_config *config, strata_error *err);
/* Validates the config (block_ranges) and registers the metrics. store and registry must outlive
 * the compactor; registry may be NULL. */
int compactor_new(const compactor_config *config, bucket *store, metrics_registry *registry,
                  compactor **out, strata_error *err);
/* Replaces block_merge (call before compactor_start). */
void compactor_set_merge_fn(compactor *c, compactor_merge_fn fn);
/* Tells fn about each merged block once its meta.json is stored, before its sources are marked. */
void compactor_set_block_listener(compactor *c,
                                  void (*fn)(void *ctx, const char *tenant, const char *ulid),
                                  void *ctx);
/* One cycle over every tenant now, in the caller's thread (what the compactor thread runs).
 * Fails only when the bucket cannot be listed; per-tenant and per-job problems are logged and
 * counted. */
int compactor_run_once(compactor *c, strata_error *err);
/* Starts the thread: a cycle at once, then every compaction_interval. */
int compactor_start(compactor *c, strata_error *err);
bool compactor_ready(const compactor *c, const char **reason);
/* Stops after the job in progress (a merge is not interrupted) and joins the thread. */
void compactor_stop(compactor *c);
void compactor_free(compactor *c);
void compactor_get_stats(compactor *c, compactor_stats *out);

#endif
