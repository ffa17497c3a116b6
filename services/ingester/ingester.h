/*
 * ingester.h - the stateless ingester: Parca's ProfileStoreService/WriteRaw and
 * AgentsService/Agents on gRPC, writing blocks to a bucket; Pyroscope's Push (push_api.h), which
 * takes WriteRaw's path; and Parca's DebuginfoService for source uploads (debuginfo_service.h).
 *
 * The ingester wires four modules together: write_raw (parse and validate a request outside any
 * lock), batcher (group per tenant, flush a block every flush_interval, acknowledge after the
 * block is durable), agents (who pushed and when) and the metrics registry. It owns no sockets:
 * the caller creates the gRPC server (possibly shared with other services in `strata all`), lets
 * the ingester register its methods, and shuts the server down before stopping the ingester, so
 * every call in flight is acknowledged by a last flush.
 *
 * Every call (WriteRaw, Agents, GET /api/v1/agents) first resolves its tenant from x-scope-orgid
 * by the rule of common/tenant.h: absent means "anonymous", a value that breaks the rule is
 * INVALID_ARGUMENT (HTTP 400) and nothing is stored.
 *
 * Per-tenant limits (lib/limits: `limits` and `overrides` in this section). A WriteRaw that
 * parsed is checked against its tenant's ingestion rate (pprof samples per second, with a burst)
 * and active series (write_limits.h) before anything of it is stored; over a limit it is refused
 * whole with RESOURCE_EXHAUSTED naming the tenant, the limit and its value, counted in
 * strata_ingester_limited_requests_total{reason="rate"|"series"} and
 * strata_ingester_limited_samples_total{reason}, and logged with the tenant. The metrics carry no
 * tenant label: tenants are chosen by clients, unauthenticated, so a per-tenant label would let
 * any client add series to /metrics.
 */
#ifndef STRATA_INGESTER_H
#define STRATA_INGESTER_H

#include <stdbool.h>
#include <stdint.h>

#include "bucket/bucket.h"
#include "common/error.h"
#include "config/config.h"
#include "http/http.h"
#include "limits/limits.h"
#include "metrics/metrics.h"
#include "rpc/rpc.h"
#include "rpcweb/rpcweb.h"

#define INGESTER_WRITE_RAW_METHOD "/parca.profilestore.v1alpha1.ProfileStoreService/WriteRaw"
#define INGESTER_AGENTS_METHOD "/parca.profilestore.v1alpha1.AgentsService/Agents"

typedef struct ingester_config {
    int64_t flush_interval_ns;
    uint64_t max_block_bytes;
    uint64_t max_symbol_bytes;
    int64_t upload_attempts;
    uint64_t max_series_per_request;
    uint64_t max_labels_per_series;
    uint64_t max_samples_per_profile;
    uint64_t max_stack_depth;
    uint64_t max_profile_bytes;       /* decompressed pprof size */
    uint64_t max_source_upload_bytes; /* DebuginfoService: one source archive */
    char *announce_listen_address;    /* nng URL to publish committed blocks on; "" = off */
    limits_values limits;             /* every tenant's limits (0 = unlimited) */
    limits_overrides overrides;       /* per tenant: the keys of `limits` that differ */
} ingester_config;

/* The `ingester:` section of a service config (config_decode descriptors). */
extern const config_field ingester_config_fields[];

typedef struct ingester ingester;

/* The bucket and registry must outlive the ingester. */
int ingester_new(const ingester_config *config, bucket *store, metrics_registry *registry,
                 ingester **out, strata_error *err);
/* Tells fn about every block committed, before its writes are acknowledged (used by `strata all`
 * to make blocks visible to the in-process querier at once). Call before ingester_start. */
void ingester_set_block_listener(ingester *ing,
                                 void (*fn)(void *ctx, const char *tenant, const char *ulid),
                                 void *ctx);

/* Registers WriteRaw, Agents, Pyroscope's Push and the DebuginfoService on server (before it
 * starts). */
int ingester_register(ingester *ing, rpc_server *server, strata_error *err);
/* Serves GET /api/v1/agents (JSON) on server (before it starts). */
int ingester_register_http(ingester *ing, http_server *server, strata_error *err);
/* Serves Pyroscope's POST /ingest (pyroscope_ingest.h) through web, as WriteRaw calls of the rpc
 * server ingester_register filled (after rpcweb_new, before the HTTP server starts). */
int ingester_register_web(ingester *ing, rpcweb *web, strata_error *err);
int ingester_start(ingester *ing, strata_error *err);
/* Replaces the per-tenant limits with config's `limits` and `overrides` (a reload; other keys are
 * ignored): tenants keep their active series and tokens (limits_apply). Safe while serving. */
int ingester_apply_limits(ingester *ing, const ingester_config *config, strata_error *err);
/* True once started and not stopping; reason says why not. */
bool ingester_ready(const ingester *ing, const char **reason);
/* Flushes and acknowledges everything still open. Call after the gRPC server has shut down. */
void ingester_stop(ingester *ing);
void ingester_free(ingester *ing);

#endif
