/*
 * push.h - sends profiles to ingesters through Parca's WriteRaw, balanced over several addresses,
 * with batching, several requests in flight per address, a bounded queue, failover, retries and
 * backoff that never reorder a series. Shared by `strata agent` and the scraper.
 *
 * Design. A caller (the agent's window loop, the scraper's targets) hands over a request: a few
 * series (labels + one raw pprof each). push_enqueue encodes it at once into one WriteRawRequest
 * (protobuf-c), computes a key per series (a hash of its labels, whatever their order) and appends
 * it to a FIFO. It never waits on the network: sender threads send, so a slow or dead ingester
 * delays only what is already queued, never the caller.
 *
 *  - Batching: the ingester acknowledges a write only once the block holding it is durable, after
 *    its next flush (about 1 s), so one request per call would cap a pusher at one request per
 *    flush. A sender therefore takes every queued request it may send and sends them as one
 *    WriteRaw, up to max_request_bytes and max_request_series. WriteRawRequest is `repeated
 *    RawProfileSeries series = 2` and nothing else is set, and concatenated protobuf messages
 *    parse as one whose repeated fields are concatenated, so a batch is the queued encodings
 *    copied end to end: nothing is encoded twice. A request larger than max_request_bytes goes
 *    alone. The 3 MiB default stays under the 4 MiB message limit that gRPC servers have unless
 *    configured otherwise (a Parca server among them), far under Strata's own 64 MiB and 10,000
 *    series per request; at 4 in flight and a 1 s flush it carries about 12 MiB/s per address.
 *  - Pipelining: up to max_in_flight WriteRaw calls per address at once (one sender thread per
 *    slot; rpc_call_unary blocks), so an address delivers max_in_flight batches per flush.
 *  - Order, the rule: the profiles of one series (one key) reach the ingesters in the order they
 *    were enqueued, and none is sent while an earlier one of its series is in a call in flight
 *    or waiting in the queue (to be retried, or backing off). A sender walks the queue oldest
 *    first and takes a request only if none of its series is in a call in flight and none
 *    belongs to an older request it passed over (backing off, or not fitting this batch or its
 *    address). So a series is in at most one call at a time, wherever that call goes, and a
 *    request that fails is back in the queue, in its place, before anything newer of its series
 *    can be sent: retries and failover never let a later profile be stored before an earlier
 *    one, while other series go ahead. Several requests of one series may share a batch, in
 *    order: the ingester stores a request whole or not at all. Hash collisions only hold a
 *    request back longer.
 *  - Balancing: each batch goes to the next address in round-robin order that has a free slot
 *    and has not failed the batch's first request in this round.
 *  - Failover and retries: UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, ABORTED, INTERNAL
 *    and UNKNOWN put the batch's requests back in the queue, each marked as failed by that address,
 *    so they go to another address at once; once every address failed a request it waits out a
 *    backoff (min_backoff doubling up to max_backoff, +-20% jitter, back to min_backoff after any
 *    success) before the next round. A request is retried until it succeeds, is rejected, or is
 *    pushed out of the queue. Any other code (INVALID_ARGUMENT: no ingester will ever take it)
 *    means one request of the batch is bad, since the ingester rejects a whole request for one
 *    bad series: a batch of several requests is split, each sent alone from then on, and only a
 *    request rejected alone is dropped.
 *  - Bounded memory: the queue holds at most max_queue_bytes of encoded requests (in flight
 *    included: a batch holds its requests' bytes, once) and max_queue_requests requests. A new
 *    request that does not fit pushes out the oldest queued ones: when ingesters are away for
 *    long, the newest data wins and memory stays flat. A request larger than the whole byte bound
 *    is dropped at once.
 *  - Stats for /metrics: requests and series enqueued and acknowledged, batches (WriteRaw calls)
 *    acknowledged, failed calls, drops by reason, queue depth, calls in flight, the age of the
 *    oldest request not yet acknowledged (the pusher's lag), and per address acknowledged
 *    batches, errors, calls in flight and the last error.
 *  - An optional tenant goes in the x-scope-orgid header.
 *  - push_flush waits (up to a deadline) until the queue is empty, for a clean exit.
 */
#ifndef STRATA_PUSH_H
#define STRATA_PUSH_H

#include <stddef.h>
#include <stdint.h>

#include "common/buffer.h"
#include "common/error.h"
#include "labels/labels.h"
#include "rpc/rpc.h"

#define PUSH_MAX_ADDRESSES 16
#define PUSH_MAX_IN_FLIGHT 64
#define PUSH_DEFAULT_MAX_IN_FLIGHT 4
#define PUSH_DEFAULT_MAX_REQUEST_BYTES ((size_t)3 << 20)
#define PUSH_DEFAULT_MAX_REQUEST_SERIES 1000
#define PUSH_WRITE_RAW_METHOD "/parca.profilestore.v1alpha1.ProfileStoreService/WriteRaw"

typedef struct pusher pusher;

typedef struct push_options {
    const char *const *addresses; /* host:port of each ingester; 1..PUSH_MAX_ADDRESSES */
    size_t n_addresses;
    const char *tenant;        /* x-scope-orgid; NULL = none */
    size_t max_queue_bytes;    /* 0 = 16 MiB */
    size_t max_queue_requests; /* 0 = no bound but the bytes */
    size_t max_request_bytes;  /* one WriteRaw's size; 0 = 3 MiB */
    size_t max_request_series; /* series in one WriteRaw; 0 = 1,000 */
    unsigned max_in_flight;    /* WriteRaw calls in flight per address; 0 = 4; at most 64 */
    int64_t timeout_ns;        /* per attempt; 0 = 30 s */
    int64_t min_backoff_ns;    /* 0 = 500 ms */
    int64_t max_backoff_ns;    /* 0 = 30 s */
    /* TLS and bearer token of the channels (rpc.h; read when the pusher starts); NULL =
     * plaintext, no token. Message size limits in it are used as given. */
    const rpc_channel_options *channel;
} push_options;

typedef struct push_series {
    const label_set *labels;
    const uint8_t *pprof; /* raw (usually gzipped) pprof bytes */
    size_t pprof_len;
} push_series;

typedef enum push_drop_reason {
    PUSH_DROP_QUEUE_FULL, /* pushed out of the queue by newer requests */
    PUSH_DROP_TOO_LARGE,  /* larger than max_queue_bytes on its own */
    PUSH_DROP_REJECTED,   /* an ingester answered a code that is not worth retrying */
    PUSH_DROP_REASONS,
} push_drop_reason;

typedef struct push_address_stats {
    char address[128];
    uint64_t batches;   /* WriteRaw calls acknowledged by this address */
    uint64_t errors;    /* failed WriteRaw calls on this address */
    uint64_t in_flight; /* WriteRaw calls in flight now */
    char last_error[STRATA_ERROR_MESSAGE_MAX + 32];
} push_address_stats;

typedef struct push_stats {
    uint64_t enqueued_requests;
    uint64_t enqueued_series;
    uint64_t requests; /* enqueued requests acknowledged */
    uint64_t series;   /* acknowledged */
    uint64_t batches;  /* WriteRaw calls acknowledged, each carrying one or more requests */
    uint64_t errors;   /* failed WriteRaw calls, all addresses */
    uint64_t dropped[PUSH_DROP_REASONS]; /* enqueued requests dropped, by reason */
    uint64_t dropped_series;             /* series in dropped requests, all reasons */
    uint64_t queue_bytes;                /* queued, in flight included */
    uint64_t queue_requests;             /* queued, in flight included */
    uint64_t in_flight_batches;          /* WriteRaw calls in flight now, all addresses */
    int64_t lag_ns; /* age of the oldest request neither acknowledged nor dropped; 0 if none */
    size_t n_addresses;
    push_address_stats addresses[PUSH_MAX_ADDRESSES];
    char last_error[STRATA_ERROR_MESSAGE_MAX + 32];
} push_stats;

/* Starts the senders (max_in_flight per address). INVALID_ARGUMENT for no or too many addresses
 * or max_in_flight over PUSH_MAX_IN_FLIGHT. */
pusher *pusher_new(const push_options *options, strata_error *err);

/* Encodes one WriteRawRequest of n series and queues it; never blocks on the network. Fails only
 * for out of memory (a dropped request is counted, not an error). The request may ride in one
 * WriteRaw with others, but is never split. */
int push_enqueue(pusher *p, const push_series *series, size_t n, strata_error *err);

/* Encodes a WriteRawRequest, appending to out (exposed for tests and benchmarks). */
int push_write_raw_encode(const push_series *series, size_t n, strata_buffer *out,
                          strata_error *err);

/* Waits until the queue is empty and nothing is in flight, or deadline_ns (CLOCK_MONOTONIC)
 * passes; 0 if empty, -1 otherwise. */
int push_flush(pusher *p, int64_t deadline_ns);

void push_stats_get(pusher *p, push_stats *out);

/* Drop reason as a /metrics label value ("queue_full", "too_large", "rejected"). */
const char *push_drop_reason_name(push_drop_reason reason);

/* Stops the senders (abandoning what is queued; an attempt in flight ends at its timeout at the
 * latest) and frees everything. NULL is a no-op. */
void pusher_free(pusher *p);

#endif
