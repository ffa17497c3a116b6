/*
 * block_workers.c - see block_workers.h. Passes waiting for helpers are queued oldest first under
 * one mutex; a helper takes the next slot of the oldest pass, and a pass leaves the queue when
 * its last slot is taken or when its caller has finished (block_workers_run withdraws it).
 *
 * How many threads. A pass asks for its slots when it is queued: if the helpers not running a
 * slot (idle, or about to be) are fewer than the slots waiting, the caller starts the difference,
 * up to max_threads. Passes one after another reuse the same helpers (a pass returns only once
 * its helpers are done, and they are idle by then); only passes at once add threads, as many as
 * the most that ever ran together asked for.
 */
#include "block_workers.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

/* One pass of block_workers_run, on its caller's stack: slots next..n-1 are still to take. */
typedef struct pass {
    block_worker_fn fn;
    void *arg;
    size_t next;       /* the next slot to hand out */
    size_t n;          /* slots 1..n-1 are the helpers' */
    size_t running;    /* slots handed out whose fn has not returned */
    bool queued;       /* in the pool's queue (slots left to take) */
    struct pass *link; /* the next pass in the queue */
} pass;

struct block_workers {
    pthread_mutex_t mu;
    pthread_cond_t work; /* a pass was queued, or the pool is stopping */
    pthread_cond_t done; /* a helper finished a slot */
    pass *head, *tail;   /* queued passes, oldest first */
    size_t waiting;      /* slots of queued passes not taken yet */
    size_t busy;         /* helpers running a slot */
    pthread_t *threads;
    size_t n_threads, max_threads;
    bool stopping;
};

/* Takes the next slot of the oldest pass; called with mu held and a pass queued. */
static pass *take_slot(block_workers *p, size_t *slot) {
    pass *s = p->head;
    *slot = s->next++;
    s->running++;
    p->waiting--;
    p->busy++;
    if (s->next == s->n) { /* every slot taken */
        p->head = s->link;
        if (p->head == NULL)
            p->tail = NULL;
        s->queued = false;
    }
    return s;
}

static void *helper_main(void *arg) {
    block_workers *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->head == NULL && !p->stopping)
            pthread_cond_wait(&p->work, &p->mu);
        if (p->head == NULL)
            break; /* stopping */
        size_t slot;
        pass *s = take_slot(p, &slot);
        pthread_mutex_unlock(&p->mu);
        s->fn(s->arg, slot);
        pthread_mutex_lock(&p->mu);
        p->busy--;
        if (--s->running == 0) /* the last access to s: its caller may return once it sees 0 */
            pthread_cond_broadcast(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int block_workers_new(size_t max_threads, block_workers **out, strata_error *err) {
    block_workers *p = calloc(1, sizeof *p);
    if (p == NULL)
        return strata_error_oom(err);
    p->max_threads = max_threads;
    p->threads = calloc(max_threads + 1, sizeof *p->threads);
    if (p->threads == NULL) {
        free(p);
        return strata_error_oom(err);
    }
    int rc = pthread_mutex_init(&p->mu, NULL);
    if (rc == 0 && (rc = pthread_cond_init(&p->work, NULL)) != 0)
        pthread_mutex_destroy(&p->mu);
    if (rc == 0 && (rc = pthread_cond_init(&p->done, NULL)) != 0) {
        pthread_cond_destroy(&p->work);
        pthread_mutex_destroy(&p->mu);
    }
    if (rc != 0) {
        free(p->threads);
        free(p);
        return strata_error_set(err, STRATA_INTERNAL, "query: cannot create the block workers");
    }
    *out = p;
    return 0;
}

/* Starts helpers while fewer are free than slots wait (mu held). A thread that cannot start is
 * not retried: the pass runs on the threads there are. */
static void start_helpers(block_workers *p) {
    while (p->n_threads < p->max_threads && p->n_threads - p->busy < p->waiting) {
        if (pthread_create(&p->threads[p->n_threads], NULL, helper_main, p) != 0)
            break;
        p->n_threads++;
    }
}

/* Takes s out of the queue with the slots no helper took (mu held). */
static void withdraw(block_workers *p, pass *s) {
    pass **at = &p->head, *prev = NULL;
    while (*at != s) {
        prev = *at;
        at = &(*at)->link;
    }
    *at = s->link;
    if (p->tail == s)
        p->tail = prev;
    p->waiting -= s->n - s->next;
    s->queued = false;
}

void block_workers_run(block_workers *p, size_t n, block_worker_fn fn, void *arg) {
    if (n <= 1) {
        fn(arg, 0);
        return;
    }
    pass s = {.fn = fn, .arg = arg, .next = 1, .n = n, .queued = true};
    pthread_mutex_lock(&p->mu);
    if (p->tail != NULL)
        p->tail->link = &s;
    else
        p->head = &s;
    p->tail = &s;
    p->waiting += n - 1;
    start_helpers(p);
    for (size_t i = 1; i < n; i++) /* a helper for each slot (waking them all would wake idle
                                    * helpers beyond the pass's) */
        pthread_cond_signal(&p->work);
    pthread_mutex_unlock(&p->mu);
    fn(arg, 0);
    pthread_mutex_lock(&p->mu);
    if (s.queued) /* the work is done: the slots no helper took have nothing left to do */
        withdraw(p, &s);
    while (s.running > 0)
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

size_t block_workers_started(block_workers *p) {
    pthread_mutex_lock(&p->mu);
    size_t n = p->n_threads;
    pthread_mutex_unlock(&p->mu);
    return n;
}

void block_workers_free(block_workers *p) {
    if (p == NULL)
        return;
    pthread_mutex_lock(&p->mu);
    p->stopping = true;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    for (size_t i = 0; i < p->n_threads; i++)
        pthread_join(p->threads[i], NULL);
    pthread_cond_destroy(&p->done);
    pthread_cond_destroy(&p->work);
    pthread_mutex_destroy(&p->mu);
    free(p->threads);
    free(p);
}
