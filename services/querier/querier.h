/*
 * querier.h - the stateless querier: Parca's QueryService on gRPC and the same operations as JSON
 * over HTTP, answered from the blocks in the bucket.
 *
 * The querier wires together the block index (discovery and readers), the engine (pruning,
 * selection, range and merge execution) and lib/calltree (reports). It owns no sockets: the caller
 * registers its gRPC methods and HTTP routes on servers it runs (shared with other services in
 * `strata all`). In one process, the ingester's block announcements reach the querier through
 * querier_announce_block, so fresh blocks are visible at once; across processes the index's
 * periodic listing (sync_interval, default 1 s, while queries come; block_index.h) finds them.
 *
 * Per-tenant limits (lib/limits: `limits` and `overrides` in this section, key max_query_bytes;
 * the other keys of lib/limits are the ingester's and are ignored here). Each merge of a tree
 * (querier_build_tree: merge, single and both sides of a diff) is bounded by its tenant's
 * max_query_bytes, the override's or `limits`' (0: the section's max_query_bytes); over it the
 * query fails with RESOURCE_EXHAUSTED, "tenant <t>: " before the engine's message, which names
 * max_query_bytes and its value, and strata_querier_limited_queries_total counts it (no tenant
 * label: tenants are chosen by clients). They take effect at start.
 */
#ifndef STRATA_QUERIER_H
#define STRATA_QUERIER_H

#include <stdbool.h>
#include <stdint.h>

#include "bucket/bucket.h"
#include "calltree/calltree.h"
#include "common/error.h"
#include "config/config.h"
#include "engine.h"
#include "http/http.h"
#include "limits/limits.h"
#include "metrics/metrics.h"
#include "rpc/rpc.h"

#define QUERIER_SERVICE "/parca.query.v1alpha1.QueryService/"

/* How a querier reaches its peers' gRPC ports (Prometheus' tls_config names): plaintext unless
 * enabled or ca_file / cert_file is set. */
typedef struct querier_peer_tls_config {
    bool enabled;
    char *ca_file;
    char *cert_file; /* client certificate (mutual TLS), with key_file */
    char *key_file;
    char *server_name;
} querier_peer_tls_config;

typedef struct querier_config {
    int64_t sync_interval_ns;
    int64_t idle_sync_interval_ns; /* 0: 10 x sync_interval */
    int64_t full_sync_interval_ns; /* 0: every listing is full */
    uint64_t max_query_bytes;
    int64_t parallelism;
    int64_t fetch_parallelism; /* threads for selection, ranges and labels (cold: bucket waits) */
    int64_t query_threads;
    uint64_t max_open_blocks;
    uint64_t max_open_block_bytes; /* 0: cached readers bounded by count only */
    uint64_t max_report_nodes;     /* flame graph nodes and table rows per answer (default 20000) */
    /* lib/bucket/bucket_cache.h over the block data objects: "" (default) for none */
    char *disk_cache_directory;
    uint64_t disk_cache_max_bytes;
    char *external_url; /* this HTTP port as users reach it, for ShareProfile links; "": relative */
    config_string_list announce_addresses; /* nng URLs of ingesters' block announcements */
    /* fan-out (peers.h): other queriers' gRPC host:port, each resolved to all its addresses */
    config_string_list peers;
    int64_t peer_refresh_interval_ns;
    int64_t peer_timeout_ns;
    uint64_t fanout_min_rows; /* merges selecting fewer sample rows are not shared out */
    int64_t share_threads;    /* pool merging other queriers' shares (0: query_threads) */
    querier_peer_tls_config peer_tls;
    char *peer_bearer_token_file; /* sent to peers as "authorization: Bearer" */
    limits_values limits;         /* per tenant: max_query_bytes (0 = max_query_bytes above) */
    limits_overrides overrides;   /* tenant -> the keys of `limits` that differ */
} querier_config;

extern const config_field querier_config_fields[];

typedef struct querier querier;

int querier_new(const querier_config *config, bucket *store, metrics_registry *registry,
                querier **out, strata_error *err);
int querier_register_grpc(querier *q, rpc_server *server, strata_error *err);
int querier_register_http(querier *q, http_server *server, strata_error *err);
int querier_start(querier *q, strata_error *err);
bool querier_ready(querier *q, const char **reason);
void querier_free(querier *q);
/* Makes a block that was just committed visible at once. */
void querier_announce_block(querier *q, const char *tenant, const char *block_id);

/* ---- shared by the gRPC and JSON front ends ---------------------------------------------- */

typedef enum profile_selection_mode {
    SELECTION_SINGLE,
    SELECTION_MERGE,
} profile_selection_mode;

typedef struct profile_selection {
    profile_selection_mode mode;
    const char *query;
    int64_t start_ns; /* merge */
    int64_t end_ns;   /* merge */
    int64_t time_ns;  /* single */
} profile_selection;

typedef struct query_tree_result {
    calltree *tree;
    merge_result main; /* B (or the only profile) */
    merge_result base; /* A, for diffs */
    profile_type type; /* of the main selection */
} query_tree_result;

/* Builds the finalized tree of one selection, or of a diff of a (base) against b when a is given,
 * with frames grouped by group_by (Parca's group_by: frame fields and pprof labels;
 * CALLTREE_GROUP_EXACT with every sample label for a PPROF export). Each merge is bounded by the
 * tenant's max_query_bytes (querier_tenant_max_query_bytes). */
int querier_build_tree(querier *q, const char *tenant, const profile_selection *a,
                       const profile_selection *b, bool absolute, const calltree_grouping *group_by,
                       query_tree_result *out, strata_error *err);
void query_tree_result_free(query_tree_result *r);
/* Fills report options (unit, totals, pprof metadata) for a tree result. max_nodes is what the
 * client asked for (0: nothing), capped at the querier's max_report_nodes. */
void querier_report_options(const querier *q, const query_tree_result *r,
                            double node_trim_threshold, uint64_t max_nodes,
                            calltree_report_options *opts);

/* The step of a range query, as Parca: step_ns when positive, else (end - start) / limit when a
 * limit is given, else (end - start) / 300; never under 1 s, and raised so that [start, end]
 * touches at most `limit` epoch-aligned buckets (points) when limit > 0. */
int64_t querier_range_step(int64_t start_ns, int64_t end_ns, int64_t step_ns, uint64_t limit);

/* A one-line, printable-ASCII summary of what a query left out (skipped corrupt blocks, identical
 * profiles counted once), "" when nothing. Also logs and counts skipped blocks. */
void querier_warnings(querier *q, const query_stats *a, const query_stats *b, char *out,
                      size_t cap);

query_engine *querier_engine(querier *q);

/* The tenant's max_query_bytes: its override's, else `limits`', else the section's. */
uint64_t querier_tenant_max_query_bytes(const querier *q, const char *tenant);

#endif
