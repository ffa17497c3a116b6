/*
 * query_pool.h - a fixed pool of threads that run queries off the gRPC completion-queue threads.
 *
 * gRPC handlers must not block their worker thread (lib/rpc), and a merge over a day of data takes
 * real CPU time, so the querier's handlers only enqueue work here; a pool thread runs it and
 * finishes the call. The queue is bounded: when it is full the call is refused at once with
 * RESOURCE_EXHAUSTED instead of piling up.
 *
 * HTTP queries run here too: their handlers defer the answer (lib/http's http_response_defer) and
 * the pool thread finishes it, so no HTTP thread waits for a query, and query_threads bounds the
 * merges running at once, and the memory they take, whichever API they came from.
 */
#ifndef STRATA_QUERIER_QUERY_POOL_H
#define STRATA_QUERIER_QUERY_POOL_H

#include <stddef.h>

#include "common/error.h"

typedef struct query_pool query_pool;
typedef void (*query_task_fn)(void *arg);

int query_pool_new(size_t threads, size_t max_queued, query_pool **out, strata_error *err);
/* Queues fn(arg); RESOURCE_EXHAUSTED when the queue is full, UNAVAILABLE when stopping. */
int query_pool_submit(query_pool *p, query_task_fn fn, void *arg, strata_error *err);
/* Queues fn(arg) and waits until a pool thread has run it, for callers that may block (tools,
 * tests); servers submit and finish the call from the task instead. Fails as query_pool_submit
 * does, and then fn does not run. Must not be called from a pool thread (it would wait for itself).
 */
int query_pool_run(query_pool *p, query_task_fn fn, void *arg, strata_error *err);
/* Runs what is queued, then joins the threads and frees the pool. */
void query_pool_free(query_pool *p);

#endif
