/*
 * http_handlers.c - handler threads and deferred answers; see http.h.
 *
 * A request's answer is complete when its handler has returned and, if it deferred the answer,
 * http_deferred_finish has been called too; the two happen in either order, on any threads. The
 * one that completes the pair (under answer_lock) resumes the connection if the I/O thread
 * suspended it, and from then on only the I/O thread touches the request (it queues the response
 * in the access handler libmicrohttpd calls after the resume, and frees the request when the
 * response is done). Until then the request cannot be freed: a suspended connection is neither
 * polled nor closed by libmicrohttpd.
 *
 * Handler threads start when a request is queued and no idle thread is there to take it, up to
 * handler_threads; they live until the server stops. The queue is bounded only by the number of
 * connections (each has at most one request being handled).
 */
#include <stdlib.h>
#include <string.h>

#include "http/http_internal.h"

/* --- completing answers ---------------------------------------------------------------------- */

static void handling_done(http_server *s) {
    pthread_mutex_lock(&s->lock);
    if (--s->handling == 0)
        pthread_cond_broadcast(&s->idle);
    pthread_mutex_unlock(&s->lock);
}

/* With answer_lock held and the answer complete: resumes a suspended connection. Returns true when
 * the connection was not suspended (the caller, on the I/O thread, queues the response). */
static bool release_locked(http_request *r) {
    if (!r->suspended)
        return true;
    r->suspended = false;
    MHD_resume_connection(r->conn);
    return false;
}

bool http_run_handler(http_request *r) {
    http_server *s = r->server;
    r->route->fn(r->route->ctx, r, &r->resp);
    pthread_mutex_lock(&s->answer_lock);
    r->returned = true;
    if (!r->deferred)
        r->finished = true;
    bool complete = r->finished;
    bool queue_now = false;
    if (complete) {
        queue_now = release_locked(r);
    } else if (!r->suspended) {
        /* a nonblocking route deferred its answer: the connection waits without the I/O thread */
        MHD_suspend_connection(r->conn);
        r->suspended = true;
    }
    pthread_mutex_unlock(&s->answer_lock);
    if (complete)
        handling_done(s); /* r may be gone from here on unless queue_now */
    return queue_now;
}

bool http_request_answered(http_request *r) {
    http_server *s = r->server;
    pthread_mutex_lock(&s->answer_lock);
    r->returned = true;
    r->finished = true;
    bool queue_now = release_locked(r);
    pthread_mutex_unlock(&s->answer_lock);
    handling_done(s);
    return queue_now;
}

http_deferred *http_response_defer(http_response *resp) {
    http_request *r = (http_request *)((char *)resp - offsetof(http_request, resp));
    r->deferred = true;
    return (http_deferred *)r;
}

const http_request *http_deferred_request(http_deferred *d) {
    return (const http_request *)d;
}

http_response *http_deferred_response(http_deferred *d) {
    return &((http_request *)d)->resp;
}

void http_deferred_finish(http_deferred *d) {
    http_request *r = (http_request *)d;
    http_server *s = r->server;
    pthread_mutex_lock(&s->answer_lock);
    r->finished = true;
    bool complete = r->returned;
    if (complete)
        release_locked(r); /* a completed deferred answer always had its connection suspended */
    pthread_mutex_unlock(&s->answer_lock);
    if (complete)
        handling_done(s);
}

/* --- handler threads ------------------------------------------------------------------------- */

static void *worker_main(void *arg) {
    http_workers *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (w->head == NULL && !w->stopping) {
            w->idle++;
            pthread_cond_wait(&w->work, &w->mu);
            w->idle--;
        }
        if (w->head == NULL)
            break;
        http_request *r = w->head;
        w->head = r->next_queued;
        if (w->head == NULL)
            w->tail = NULL;
        w->queued--;
        pthread_mutex_unlock(&w->mu);
        (void)http_run_handler(r); /* the connection is suspended: never queued from here */
        pthread_mutex_lock(&w->mu);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

int http_workers_init(http_workers *w, size_t max_threads, strata_error *err) {
    memset(w, 0, sizeof *w);
    w->max_threads = max_threads > 0 ? max_threads : 1;
    w->threads = calloc(w->max_threads, sizeof *w->threads);
    if (w->threads == NULL)
        return strata_error_oom(err);
    if (pthread_mutex_init(&w->mu, NULL) != 0) {
        free(w->threads);
        w->threads = NULL;
        return strata_error_set(err, STRATA_INTERNAL, "cannot create mutex");
    }
    if (pthread_cond_init(&w->work, NULL) != 0) {
        pthread_mutex_destroy(&w->mu);
        free(w->threads);
        w->threads = NULL;
        return strata_error_set(err, STRATA_INTERNAL, "cannot create condition variable");
    }
    return 0;
}

int http_workers_submit(http_workers *w, http_request *r) {
    pthread_mutex_lock(&w->mu);
    r->next_queued = NULL;
    if (w->tail != NULL)
        w->tail->next_queued = r;
    else
        w->head = r;
    w->tail = r;
    w->queued++;
    if (w->queued > w->idle && w->n_threads < w->max_threads &&
        pthread_create(&w->threads[w->n_threads], NULL, worker_main, w) == 0)
        w->n_threads++;
    int rc = 0;
    if (w->n_threads == 0) { /* nobody would ever take it */
        w->head = w->tail = NULL;
        w->queued = 0;
        rc = -1;
    } else {
        pthread_cond_signal(&w->work);
    }
    pthread_mutex_unlock(&w->mu);
    return rc;
}

void http_workers_destroy(http_workers *w) {
    if (w->threads == NULL)
        return;
    pthread_mutex_lock(&w->mu);
    w->stopping = true;
    pthread_cond_broadcast(&w->work);
    pthread_mutex_unlock(&w->mu);
    for (size_t i = 0; i < w->n_threads; i++)
        pthread_join(w->threads[i], NULL);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->work);
    free(w->threads);
    w->threads = NULL;
}
