/*
 * block_workers.h - the threads that help a query's caller through its blocks (engine.c's block
 * driver), kept for the engine's life instead of created for each query.
 *
 * A pass over a query's blocks runs on its caller's thread (worker 0) and on up to n - 1 helpers
 * at once (workers 1..n-1), each taking the next unclaimed block until none is left. Helpers are
 * threads of this pool, started the first time a pass finds too few of them idle and kept until
 * the pool is freed: a querier serving a steady load creates no thread per query (a merge used to
 * start up to 63 and join them, and a dashboard's range queries one pass after another).
 *
 * No deadlock, however busy. The caller never waits for a helper to become free: it works through
 * the blocks itself, and when it runs out, the slots no helper has taken yet are withdrawn (there
 * is nothing left for them); it then waits only for helpers already running its slots, which are
 * finishing blocks they claimed. So a pass may run on fewer threads than it asked for when the
 * pool is at max_threads or cannot start a thread, never on none, and a pass may run inside a
 * helper (a nested query) without waiting on itself. Concurrent passes each get their own helpers
 * up to max_threads, as each had its own threads before.
 */
#ifndef STRATA_QUERIER_BLOCK_WORKERS_H
#define STRATA_QUERIER_BLOCK_WORKERS_H

#include <stddef.h>

#include "common/error.h"

typedef struct block_workers block_workers;

/* Runs one worker of a pass: slot 0 on the caller, 1..n-1 on helpers. A slot's work must be
 * optional: slot 0 alone must finish the pass (the workers share the pass's work, each taking
 * what is left). */
typedef void (*block_worker_fn)(void *arg, size_t slot);

/* A pool of at most max_threads helpers (none started yet). */
int block_workers_new(size_t max_threads, block_workers **out, strata_error *err);
/* Runs fn(arg, 0) on the calling thread and fn(arg, s) for s in 1..n-1 on helpers that take them
 * while it runs, starting helpers when too few are idle; returns when fn(arg, 0) and every slot
 * a helper took have returned. Slots left untaken do not run. */
void block_workers_run(block_workers *p, size_t n, block_worker_fn fn, void *arg);
/* Helper threads started since the pool was made (never fewer: helpers stay until the pool is
 * freed). */
size_t block_workers_started(block_workers *p);
/* Joins the helpers and frees the pool; no pass may be running. */
void block_workers_free(block_workers *p);

#endif
