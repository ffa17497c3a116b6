/*
 * querier_internal.h - the querier's state, shared by querier.c and its two front ends.
 */
#ifndef STRATA_QUERIER_INTERNAL_H
#define STRATA_QUERIER_INTERNAL_H

#include "block_index.h"
#include "common/tenant.h"
#include "querier.h"
#include "peers.h"
#include "query_pool.h"

struct querier {
    querier_config config;
    metrics_registry *registry;
    bucket *store; /* the blocks' bucket, also read for sources (SOURCE) and shared profiles */
    bucket *block_store; /* what blocks are read through: store, or a disk cache over it */
    bucket *disk_cache;  /* the disk cache (block_store), NULL when none is configured */
    char *external_url;  /* querier_config's, owned; "" = links relative to the HTTP port */
    block_index *index;
    query_engine *engine;
    query_pool *pool;       /* runs gRPC queries off the completion-queue threads */
    query_pool *share_pool; /* runs other queriers' MergeShard calls (peers.h) */
    querier_peers *peers;   /* fan-out; present with an empty list when none is configured */
    int64_t share_delay_ns; /* STRATA_TEST_SHARE_DELAY_MS (peer_service.c) */
    metrics_gauge *shares_in_flight; /* other queriers' shares being merged here */
    bool started;
    metrics_counter_vec *queries;
    metrics_histogram_vec *durations;
    metrics_gauge *blocks_gauge;
    metrics_gauge *open_gauge;
    metrics_gauge *open_bytes_gauge;
    metrics_counter *evictions_for_count;
    metrics_counter *evictions_for_bytes;
    metrics_counter *page_cache_sheds;
    metrics_counter *syncs;
    metrics_counter *full_listings;
    metrics_counter *meta_reads;
    metrics_counter *from_bucket_index;
    metrics_counter *sync_failures;
    metrics_counter *skipped_blocks; /* corrupt blocks left out of answers */
    metrics_counter *limited;        /* merges refused for the tenant's max_query_bytes */
    metrics_counter *disk_cache_hits, *disk_cache_misses, *disk_cache_fetches;
    metrics_counter *disk_cache_evictions, *disk_cache_invalid, *disk_cache_write_errors;
    metrics_gauge *disk_cache_bytes;
};

/* Runs fn for the call on pool, off the gRPC thread, and finishes the call with its answer. */
void querier_offload(querier *q, query_pool *pool, rpc_call *call, const uint8_t *req, size_t len,
                     rpc_sync_handler fn);
/* PeerService (peer_service.c). */
int querier_register_peer_service(querier *q, rpc_server *server, strata_error *err);

/* The tenant of a call by the one rule (common/tenant.h): x-scope-orgid, anonymous when absent,
 * INVALID_ARGUMENT when the value breaks the rule. Resolved before anything is read. */
int querier_call_tenant(rpc_call *call, strata_tenant *out, strata_error *err);
/* Appends msg packed to out. */
int querier_pack(const ProtobufCMessage *msg, strata_buffer *out, strata_error *err);
/* INVALID_ARGUMENT: "request is not a valid <what> protobuf". */
int querier_bad_request(strata_error *err, const char *what);
/* Pyroscope's querier.v1.QuerierService (pyroscope_api.c). */
int querier_register_pyroscope_api(querier *q, rpc_server *server, strata_error *err);

/* Counts a finished query and its latency. */
void querier_observe(querier *q, const char *operation, strata_status code, int64_t start_ns);

#endif
