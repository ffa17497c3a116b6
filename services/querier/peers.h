/*
 * peers.h - the other queriers a querier shares merges with (engine.h, "fan-out").
 *
 * Who. The `peers` list of the querier's configuration: entries "host:port" naming the gRPC ports
 * of queriers. Each entry is resolved through DNS to every address it has, at start and every
 * peer_refresh_interval, so one entry naming a Kubernetes headless service stands for every
 * querier pod behind it, as pods come and go; a static list of addresses works the same way.
 * No new infrastructure: DNS is there in every deployment, and the list may name this querier
 * too (every pod gets the same configuration). Each address is asked who it is (Info): a random
 * id per process, so a querier leaves itself out, and one querier reachable at two addresses
 * counts once. An address that does not answer Info is not a peer until it does.
 *
 * Which shard. The members of a merge are the coordinator and the live peers ordered by the hash
 * of their instance ids; the coordinator cuts the query's time range into one shard per member
 * and shard k goes to member k (engine_fanout.c). Every querier that sees the same peers agrees on
 * the order, so a part of the time line is usually merged by the same querier whichever querier
 * coordinates, and its readers and pages stay warm in that querier's cache instead of every
 * querier's.
 *
 * Serving. PeerService/MergeShard runs on its own pool of share_threads, apart from the query
 * pool: a coordinator waits for its peers on a query thread, and shares queued behind such
 * waiting queries on the peer could otherwise wait for each other across queriers.
 */
#ifndef STRATA_QUERIER_PEERS_H
#define STRATA_QUERIER_PEERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "engine.h"
#include "metrics/metrics.h"
#include "rpc/rpc.h"

#define PEER_SERVICE "/strata.querier.v1.PeerService/"
#define PEER_PROTOCOL 2 /* 2: shards of time, selected and de-duplicated by the peer */

typedef struct querier_peers querier_peers;

typedef struct querier_peers_options {
    const char *const *entries; /* "host:port", each resolved to all its addresses */
    size_t n_entries;
    int64_t refresh_interval_ns;
    int64_t timeout_ns;          /* per MergeShard call */
    uint64_t min_rows;           /* merges selecting fewer sample rows are not shared out */
    rpc_channel_options channel; /* TLS and bearer token towards peers */
} querier_peers_options;

/* Creates the peer set (no thread yet) with a fresh instance id. */
int querier_peers_new(const querier_peers_options *opts, metrics_registry *registry,
                      querier_peers **out, strata_error *err);
/* Resolves and checks the peers once, then keeps doing so every refresh_interval on a thread. */
int querier_peers_start(querier_peers *p, strata_error *err);
/* Refreshes now (tests, and the thread). */
void querier_peers_refresh(querier_peers *p);
void querier_peers_free(querier_peers *p);
const char *querier_peers_instance_id(const querier_peers *p);
/* Live peers now. */
size_t querier_peers_count(querier_peers *p);
/* The engine's fan-out over these peers. */
query_fanout querier_peers_fanout(querier_peers *p);

#endif
