/*
 * batcher.h - groups accepted profiles into one block per tenant per flush, uploads each block,
 * and only then acknowledges the requests it holds.
 *
 * Design. Request threads call batcher_submit with a fully validated request: under one mutex its
 * profiles are added to the tenant's long-lived block writer and its acknowledgement callback is
 * queued with it. The flush thread wakes on a fixed beat, every flush_interval from its start
 * (not an interval after the last flush ended, so a write waits at most one interval for its cut
 * plus its block's upload), or at once when a writer's block grows past max_block_bytes, and,
 * under the mutex, cuts each tenant's block off its writer
 * (block_writer_detach: the writer keeps its dictionary of symbols and stacks, which agents'
 * next pushes mostly repeat, until it outgrows max_symbol_bytes or the tenant goes idle). Then,
 * outside the mutex: it finishes each block, uploads the data object, uploads meta.json last (the
 * commit point), and calls every queued callback: with success once meta.json is stored, or with
 * UNAVAILABLE after upload_attempts failed tries. So an acknowledged profile is always durable in
 * the bucket, and a failed one is reported so the client can retry. Submitting keeps working
 * while a flush uploads: every request that arrives meanwhile rides in the next block (group
 * commit), so the number of bucket writes does not grow with the number of clients.
 *
 * A block's data and meta are uploaded under <tenant>/<ULID>/; a failed upload may leave a data
 * object without meta.json, which readers ignore and the compactor cleans up after a delay.
 */
#ifndef STRATA_INGESTER_BATCHER_H
#define STRATA_INGESTER_BATCHER_H

#include <stdatomic.h>
#include <stdint.h>

#include "bucket/bucket.h"
#include "common/error.h"
#include "write_raw.h"

typedef struct batcher batcher;

/* Called exactly once per submitted request, from the flush thread; err is NULL on success. */
typedef void (*batcher_ack_fn)(void *ctx, const strata_error *err);

/* Called after a block is committed (meta.json stored) and before its writes are acknowledged,
 * so a querier told through it shows the data by the time the client hears back. */
typedef void (*batcher_block_fn)(void *ctx, const char *tenant, const char *ulid);

typedef struct batcher_options {
    int64_t flush_interval_ns; /* default 1 s */
    uint64_t max_block_bytes;  /* writer memory that triggers an early flush; default 256 MiB */
    uint64_t max_symbol_bytes; /* a tenant's symbol and stack dictionary kept across flushes is
                                  dropped once this large; default 256 MiB */
    int upload_attempts;       /* tries per object before giving up; default 5 */
    int64_t upload_backoff_ns; /* first retry delay, doubled each try; default 100 ms */
    batcher_block_fn on_block; /* optional */
    void *on_block_ctx;
} batcher_options;

/* Counters for /metrics; updated atomically, read with atomic_load. */
typedef struct batcher_stats {
    atomic_uint_fast64_t profiles_accepted;
    atomic_uint_fast64_t samples_accepted;
    atomic_uint_fast64_t blocks_written;
    atomic_uint_fast64_t bytes_written;
    atomic_uint_fast64_t upload_failures;   /* failed attempts, retried or not */
    atomic_uint_fast64_t flush_failures;    /* blocks given up on (requests got UNAVAILABLE) */
    atomic_uint_fast64_t flush_duration_ns; /* sum over flushes */
    atomic_uint_fast64_t flushes;
    atomic_uint_fast64_t last_flush_duration_ns;
    atomic_uint_fast64_t cut_duration_ns; /* sum over flushes: cutting blocks under the lock */
    atomic_uint_fast64_t symbol_resets;   /* dictionaries dropped at max_symbol_bytes */
} batcher_stats;

void batcher_options_default(batcher_options *opts);

/* The bucket must outlive the batcher. */
int batcher_new(const batcher_options *opts, bucket *store, batcher **out, strata_error *err);
/* Starts the flush thread. */
int batcher_start(batcher *b, strata_error *err);
/* Adds the request's profiles for tenant and queues ack. On error (out of memory, stopping) the
 * request is not acknowledged later: the caller answers it with err. */
int batcher_submit(batcher *b, const char *tenant, const ingest_request *req, batcher_ack_fn ack,
                   void *ack_ctx, strata_error *err);
/* Flushes what is open, acknowledges everything, stops the thread. Idempotent. */
void batcher_stop(batcher *b);
void batcher_free(batcher *b);
const batcher_stats *batcher_get_stats(const batcher *b);

#endif
