/*
 * pusher.h - sends the agent's profiles to an ingester through Parca's WriteRaw, with a bounded
 * queue, retries and backoff.
 *
 * Design. Each window produces one WriteRawRequest holding one series per process (its labels,
 * one raw gzipped pprof). agent_pusher_enqueue encodes it at once (protobuf-c) and appends the
 * bytes to a FIFO; a single sender thread pushes the oldest request, so the sampling loop never
 * waits on the network.
 *
 *  - Retries: UNAVAILABLE, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, ABORTED, INTERNAL and UNKNOWN
 *    are retried with exponential backoff (min_backoff doubling up to max_backoff, with +-20%
 *    jitter); any other error (INVALID_ARGUMENT: the ingester will never take it) drops the
 *    request. Every failed attempt counts in stats.errors.
 *  - Bounded memory: the queue holds at most max_queue_bytes of encoded requests. When a new
 *    request does not fit, the oldest queued requests are dropped (counted in
 *    stats.dropped_requests) - when the ingester is away for long, the newest data wins, and the
 *    agent's memory stays flat.
 *  - agent_pusher_flush waits (up to a deadline) until the queue is empty, for a clean exit.
 */
#ifndef STRATA_AGENT_PUSHER_H
#define STRATA_AGENT_PUSHER_H

#include <stddef.h>
#include <stdint.h>

#include "common/buffer.h"
#include "common/error.h"
#include "labels/labels.h"

typedef struct agent_pusher agent_pusher;

typedef struct agent_pusher_options {
    const char *address;    /* host:port of an ingester */
    const char *tenant;     /* x-scope-orgid; NULL = none */
    size_t max_queue_bytes; /* 0 = 16 MiB */
    int64_t timeout_ns;     /* per attempt; 0 = 30 s */
    int64_t min_backoff_ns; /* 0 = 500 ms */
    int64_t max_backoff_ns; /* 0 = 30 s */
} agent_pusher_options;

typedef struct agent_series {
    const label_set *labels;
    const strata_buffer *pprof;
} agent_series;

typedef struct agent_pusher_stats {
    uint64_t requests;         /* acknowledged */
    uint64_t series;           /* acknowledged */
    uint64_t errors;           /* failed attempts */
    uint64_t dropped_requests; /* given up (queue full or not retryable) */
    uint64_t queue_bytes;
    uint64_t queue_requests;
    char last_error[STRATA_ERROR_MESSAGE_MAX + 32];
} agent_pusher_stats;

agent_pusher *agent_pusher_new(const agent_pusher_options *options, strata_error *err);

/* Encodes one WriteRawRequest of n series and queues it. */
int agent_pusher_enqueue(agent_pusher *p, const agent_series *series, size_t n, strata_error *err);

/* Encodes a WriteRawRequest (exposed for tests). */
int agent_write_raw_encode(const agent_series *series, size_t n, strata_buffer *out,
                           strata_error *err);

/* Waits until the queue is empty or deadline_ns (CLOCK_MONOTONIC) passes; 0 if empty. */
int agent_pusher_flush(agent_pusher *p, int64_t deadline_ns);

void agent_pusher_stats_get(agent_pusher *p, agent_pusher_stats *out);

/* Stops the sender (abandoning what is queued) and frees everything. NULL is a no-op. */
void agent_pusher_free(agent_pusher *p);

#endif
