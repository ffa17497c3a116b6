/*
 * query_pool.c - see query_pool.h. A ring buffer of tasks under one mutex and condition variable.
 *
 * When the pool has been idle for TRIM_DELAY_NS after its last query, one of its threads hands
 * the allocator's free memory back to the kernel (malloc_trim): a merge allocates and frees
 * hundreds of MiB in pieces that glibc keeps in its per-thread arenas, and without this the
 * process's RSS crept up by about the size of a merge with every query (22 MiB to 465 MiB over
 * ten merges of a compacted block of 2.7 M call-tree nodes), though nothing was in use between
 * them. Not at once: a dashboard's burst of queries reuses the memory instead of faulting it in
 * again for each (trimming after every query cost a range query of a day of 100 series a third
 * of its CPU in page faults).
 */
#include "query_pool.h"

#include <malloc.h>
#include <pthread.h>
#include <time.h>

#include "common/thread.h"
#include "common/clock.h"

#define TRIM_DELAY_NS (INT64_C(2) * 1000000000)
#include <stdbool.h>
#include <stdlib.h>

typedef struct task {
    query_task_fn fn;
    void *arg;
} task;

struct query_pool {
    pthread_mutex_t mu;
    pthread_cond_t ready;
    task *ring;
    size_t cap, head, count;
    size_t running;      /* tasks being run */
    int64_t trim_due_ns; /* when to trim, if still idle (0: nothing to trim) */
    bool stopping;
    pthread_t *threads;
    size_t n_threads;
};

static void *pool_main(void *arg) {
    query_pool *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->count == 0 && !p->stopping) {
            if (p->trim_due_ns == 0) {
                pthread_cond_wait(&p->ready, &p->mu);
                continue;
            }
            int64_t now = strata_monotonic_ns();
            if (now >= p->trim_due_ns) { /* idle since the last query: give the memory back */
                p->trim_due_ns = 0;
                pthread_mutex_unlock(&p->mu);
                malloc_trim(0);
                pthread_mutex_lock(&p->mu);
                continue;
            }
            struct timespec until = {(time_t)(p->trim_due_ns / 1000000000),
                                     (long)(p->trim_due_ns % 1000000000)};
            pthread_cond_timedwait(&p->ready, &p->mu, &until);
        }
        if (p->count == 0)
            break;
        task t = p->ring[p->head];
        p->head = (p->head + 1) % p->cap;
        p->count--;
        p->running++;
        pthread_mutex_unlock(&p->mu);
        t.fn(t.arg);
        pthread_mutex_lock(&p->mu);
        if (--p->running == 0 && p->count == 0)
            p->trim_due_ns = strata_monotonic_ns() + TRIM_DELAY_NS;
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int query_pool_new(size_t threads, size_t max_queued, query_pool **out, strata_error *err) {
    query_pool *p = calloc(1, sizeof *p);
    if (p == NULL)
        return strata_error_oom(err);
    p->cap = max_queued > 0 ? max_queued : 1;
    p->ring = calloc(p->cap, sizeof *p->ring);
    p->threads = calloc(threads > 0 ? threads : 1, sizeof *p->threads);
    if (p->ring == NULL || p->threads == NULL) {
        free(p->ring);
        free(p->threads);
        free(p);
        return strata_error_oom(err);
    }
    int rc = strata_mutex_init(&p->mu, err);
    /* timed waits by the monotonic clock, as trim_due_ns */
    if (rc == 0 && (rc = strata_cond_init(&p->ready, true, err)) != 0)
        pthread_mutex_destroy(&p->mu);
    if (rc != 0) {
        free(p->ring);
        free(p->threads);
        free(p);
        return -1;
    }
    for (size_t i = 0; i < (threads > 0 ? threads : 1); i++) {
        if (pthread_create(&p->threads[i], NULL, pool_main, p) != 0) {
            query_pool_free(p);
            return strata_error_set(err, STRATA_INTERNAL, "cannot start query threads");
        }
        p->n_threads++;
    }
    *out = p;
    return 0;
}

int query_pool_submit(query_pool *p, query_task_fn fn, void *arg, strata_error *err) {
    pthread_mutex_lock(&p->mu);
    int rc = 0;
    if (p->stopping)
        rc = strata_error_set(err, STRATA_UNAVAILABLE, "querier is shutting down");
    else if (p->count == p->cap)
        rc = strata_error_set(err, STRATA_RESOURCE_EXHAUSTED,
                              "too many queries waiting (%zu); retry later", p->cap);
    if (rc == 0) {
        p->ring[(p->head + p->count) % p->cap] = (task){fn, arg};
        p->count++;
        pthread_cond_signal(&p->ready);
    }
    pthread_mutex_unlock(&p->mu);
    return rc;
}

typedef struct waited_task {
    query_task_fn fn;
    void *arg;
    pthread_mutex_t mu;
    pthread_cond_t done_cond;
    bool done;
} waited_task;

static void run_waited(void *arg) {
    waited_task *w = arg;
    w->fn(w->arg);
    pthread_mutex_lock(&w->mu);
    w->done = true;
    pthread_cond_signal(&w->done_cond);
    pthread_mutex_unlock(&w->mu);
}

int query_pool_run(query_pool *p, query_task_fn fn, void *arg, strata_error *err) {
    waited_task w = {.fn = fn, .arg = arg};
    if (pthread_mutex_init(&w.mu, NULL) != 0)
        return strata_error_oom(err);
    if (pthread_cond_init(&w.done_cond, NULL) != 0) {
        pthread_mutex_destroy(&w.mu);
        return strata_error_oom(err);
    }
    int rc = query_pool_submit(p, run_waited, &w, err);
    if (rc == 0) {
        pthread_mutex_lock(&w.mu);
        while (!w.done)
            pthread_cond_wait(&w.done_cond, &w.mu);
        pthread_mutex_unlock(&w.mu);
    }
    pthread_mutex_destroy(&w.mu);
    pthread_cond_destroy(&w.done_cond);
    return rc;
}

void query_pool_free(query_pool *p) {
    if (p == NULL)
        return;
    pthread_mutex_lock(&p->mu);
    p->stopping = true;
    pthread_cond_broadcast(&p->ready);
    pthread_mutex_unlock(&p->mu);
    for (size_t i = 0; i < p->n_threads; i++)
        pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->ready);
    free(p->ring);
    free(p->threads);
    free(p);
}
