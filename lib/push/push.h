/*
 * push.h - sends profiles to ingesters through Parca's WriteRaw, balanced over several addresses,
 * with a bounded queue, failover, retries and backoff. Shared by `strata agent` and the scraper.
 *
 * Design. A caller (the agent's window loop, the scraper's targets) hands over a batch of series
 * (labels + one raw pprof each); push_enqueue encodes it at once into one WriteRawRequest
 * (protobuf-c) and appends the bytes to a FIFO. It never waits on the network: sender threads
 * (one per address by default) take the oldest request and send it, so a slow or dead ingester
 * delays only what is already queued, never the caller.
 *
 *  - Balancing: each request starts on the next address in round-robin order.
 *  - Failover and retries: UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, ABORTED, INTERNAL
 *    and UNKNOWN move the request to the next address at once; once every address failed it, it
 *    waits at the head of the queue for a backoff (min_backoff doubling up to max_backoff, +-20%
 *    jitter, back to min_backoff after any success) before the next round. The queue stays in
 *    order: while the oldest request backs off, nothing newer overtakes it. A request is retried
 *    until it succeeds, is rejected, or is pushed out of the queue. Any other code
 *    (INVALID_ARGUMENT: no ingester will ever take it) drops the request.
 *  - Bounded memory: the queue holds at most max_queue_bytes of encoded requests (in flight
 *    included) and max_queue_requests requests. A new request that does not fit pushes out the
 *    oldest queued ones: when ingesters are away for long, the newest data wins and memory stays
 *    flat. A request larger than the whole byte bound is dropped at once.
 *  - Stats for /metrics: requests and series enqueued and acknowledged, failed attempts, drops
 *    by reason, queue depth, and per address acknowledged requests, errors and the last error.
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

#define PUSH_MAX_ADDRESSES 16
#define PUSH_WRITE_RAW_METHOD "/parca.profilestore.v1alpha1.ProfileStoreService/WriteRaw"

typedef struct pusher pusher;

typedef struct push_options {
    const char *const *addresses; /* host:port of each ingester; 1..PUSH_MAX_ADDRESSES */
    size_t n_addresses;
    const char *tenant;        /* x-scope-orgid; NULL = none */
    size_t max_queue_bytes;    /* 0 = 16 MiB */
    size_t max_queue_requests; /* 0 = no bound but the bytes */
    int64_t timeout_ns;        /* per attempt; 0 = 30 s */
    int64_t min_backoff_ns;    /* 0 = 500 ms */
    int64_t max_backoff_ns;    /* 0 = 30 s */
    unsigned senders;          /* sender threads; 0 = one per address */
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
    uint64_t requests; /* acknowledged by this address */
    uint64_t errors;   /* failed attempts on this address */
    char last_error[STRATA_ERROR_MESSAGE_MAX + 32];
} push_address_stats;

typedef struct push_stats {
    uint64_t enqueued_requests;
    uint64_t enqueued_series;
    uint64_t requests; /* acknowledged */
    uint64_t series;   /* acknowledged */
    uint64_t errors;   /* failed attempts, all addresses */
    uint64_t dropped[PUSH_DROP_REASONS];
    uint64_t dropped_series; /* series in dropped requests, all reasons */
    uint64_t queue_bytes;    /* queued, in flight included */
    uint64_t queue_requests; /* queued, in flight included */
    size_t n_addresses;
    push_address_stats addresses[PUSH_MAX_ADDRESSES];
    char last_error[STRATA_ERROR_MESSAGE_MAX + 32];
} push_stats;

/* Starts the senders. INVALID_ARGUMENT for no or too many addresses. */
pusher *pusher_new(const push_options *options, strata_error *err);

/* Encodes one WriteRawRequest of n series and queues it; never blocks on the network. Fails only
 * for out of memory (a dropped request is counted, not an error). */
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
