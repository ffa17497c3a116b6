/*
 * fanout_loopback.h - fan-out inside one process, for the engine's tests: the peers are other
 * query engines (each over its own block index of the same bucket), and every partial tree goes
 * through the wire format (calltree_to_partial, packed, unpacked, calltree_merge_partial), so a
 * test sees what a coordinator would get from a peer over gRPC, minus the network. The coordinator
 * is member offset % (n_peers + 1) of the merge (it takes that shard of time; the peers the
 * others, in order). A peer marked failing answers -1, as one that died does.
 */
#ifndef STRATA_QUERIER_FANOUT_LOOPBACK_H
#define STRATA_QUERIER_FANOUT_LOOPBACK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine.h"

#define LOOPBACK_MAX_PEERS 4

typedef struct loopback_fanout {
    query_engine *peers[LOOPBACK_MAX_PEERS];
    size_t n_peers;
    bool failing[LOOPBACK_MAX_PEERS];
    size_t offset;
    atomic_uint shares;        /* shares a peer merged */
    atomic_uint shares_failed; /* shares a failing peer refused */
    atomic_uint blocks_missing;
    int64_t last_start_ns[LOOPBACK_MAX_PEERS]; /* the range of each peer's last share */
    int64_t last_end_ns[LOOPBACK_MAX_PEERS];
} loopback_fanout;

/* Makes coordinator fan out every merge (min_rows 0) to lb's peers. */
void loopback_fanout_install(query_engine *coordinator, loopback_fanout *lb);

#endif
