/*
 * pusher.c - WriteRaw sender with a bounded queue and backoff. See pusher.h.
 */
#include "pusher.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "parca/profilestore/v1alpha1/profilestore.pb-c.h"
#include "rpc/rpc.h"

#define WRITE_RAW_METHOD "/parca.profilestore.v1alpha1.ProfileStoreService/WriteRaw"

typedef struct request {
    strata_buffer bytes;
    size_t n_series;
    struct request *next;
} request;

struct agent_pusher {
    agent_pusher_options o;
    rpc_channel *channel;
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mu;
    pthread_cond_t wake;    /* queue changed or stop */
    pthread_cond_t drained; /* queue empty and nothing in flight */
    request *head, *tail;
    request *in_flight;
    bool stop;
    agent_pusher_stats stats;
    uint64_t rng;
};

typedef Parca__Profilestore__V1alpha1__Label label_pb;
typedef Parca__Profilestore__V1alpha1__RawSample sample_pb;
typedef Parca__Profilestore__V1alpha1__RawProfileSeries series_pb;
typedef Parca__Profilestore__V1alpha1__LabelSet label_set_pb;

/* Per-series protobuf-c views; nothing is copied. */
typedef struct series_views {
    label_pb *labels;
    label_pb **label_ptrs;
    label_set_pb set;
    sample_pb sample;
    sample_pb *sample_ptr;
    series_pb series;
} series_views;

static int fill_views(series_views *v, const agent_series *s, strata_error *err) {
    size_t n = s->labels->count;
    v->labels = calloc(n ? n : 1, sizeof *v->labels);
    v->label_ptrs = calloc(n ? n : 1, sizeof *v->label_ptrs);
    if (v->labels == NULL || v->label_ptrs == NULL)
        return strata_error_oom(err);
    for (size_t i = 0; i < n; i++) {
        parca__profilestore__v1alpha1__label__init(&v->labels[i]);
        v->labels[i].name = s->labels->labels[i].name;
        v->labels[i].value = s->labels->labels[i].value;
        v->label_ptrs[i] = &v->labels[i];
    }
    parca__profilestore__v1alpha1__label_set__init(&v->set);
    v->set.n_labels = n;
    v->set.labels = v->label_ptrs;
    parca__profilestore__v1alpha1__raw_sample__init(&v->sample);
    v->sample.raw_profile.data = s->pprof->data;
    v->sample.raw_profile.len = s->pprof->len;
    v->sample_ptr = &v->sample;
    parca__profilestore__v1alpha1__raw_profile_series__init(&v->series);
    v->series.labels = &v->set;
    v->series.n_samples = 1;
    v->series.samples = &v->sample_ptr;
    return 0;
}

int agent_write_raw_encode(const agent_series *series, size_t n, strata_buffer *out,
                           strata_error *err) {
    series_views *views = calloc(n ? n : 1, sizeof *views);
    series_pb **ptrs = calloc(n ? n : 1, sizeof *ptrs);
    int rc = -1;
    if (views == NULL || ptrs == NULL) {
        strata_error_oom(err);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        if (fill_views(&views[i], &series[i], err) != 0)
            goto out;
        ptrs[i] = &views[i].series;
    }
    Parca__Profilestore__V1alpha1__WriteRawRequest req =
        PARCA__PROFILESTORE__V1ALPHA1__WRITE_RAW_REQUEST__INIT;
    req.n_series = n;
    req.series = ptrs;
    size_t size = parca__profilestore__v1alpha1__write_raw_request__get_packed_size(&req);
    if (strata_buffer_reserve(out, size) != 0) {
        strata_error_oom(err);
        goto out;
    }
    out->len += parca__profilestore__v1alpha1__write_raw_request__pack(&req, out->data + out->len);
    rc = 0;
out:
    for (size_t i = 0; views != NULL && i < n; i++) {
        free(views[i].labels);
        free(views[i].label_ptrs);
    }
    free(views);
    free(ptrs);
    return rc;
}

static bool retryable(strata_status code) {
    switch (code) {
        case STRATA_UNAVAILABLE:
        case STRATA_DEADLINE_EXCEEDED:
        case STRATA_RESOURCE_EXHAUSTED:
        case STRATA_ABORTED:
        case STRATA_INTERNAL:
        case STRATA_UNKNOWN:
            return true;
        default:
            return false;
    }
}

static void request_free(request *r) {
    if (r == NULL)
        return;
    strata_buffer_free(&r->bytes);
    free(r);
}

static size_t queued_bytes(const agent_pusher *p) {
    return p->stats.queue_bytes + (p->in_flight != NULL ? p->in_flight->bytes.len : 0);
}

/* Unlinks the head of the queue (mu held). */
static request *pop_head(agent_pusher *p) {
    request *r = p->head;
    if (r == NULL)
        return NULL;
    p->head = r->next;
    if (p->head == NULL)
        p->tail = NULL;
    r->next = NULL;
    p->stats.queue_bytes -= r->bytes.len;
    p->stats.queue_requests--;
    return r;
}

static void push_front(agent_pusher *p, request *r) {
    r->next = p->head;
    p->head = r;
    if (p->tail == NULL)
        p->tail = r;
    p->stats.queue_bytes += r->bytes.len;
    p->stats.queue_requests++;
}

static void wait_until(agent_pusher *p, int64_t deadline_ns) {
    while (!p->stop && strata_monotonic_ns() < deadline_ns) {
        struct timespec ts = {(time_t)(deadline_ns / STRATA_NS_PER_SEC),
                              (long)(deadline_ns % STRATA_NS_PER_SEC)};
        if (pthread_cond_timedwait(&p->wake, &p->mu, &ts) == ETIMEDOUT)
            break;
    }
}

static int64_t jittered(agent_pusher *p, int64_t backoff) {
    p->rng = p->rng * 6364136223846793005ULL + 1442695040888963407ULL;
    int64_t spread = backoff / 5;
    if (spread == 0)
        return backoff;
    return backoff - spread + (int64_t)((p->rng >> 33) % (uint64_t)(2 * spread));
}

/* Handles a failed attempt (mu held): requeue or drop, and back off. */
static void on_failure(agent_pusher *p, request *r, const strata_error *err, int64_t *backoff) {
    p->stats.errors++;
    snprintf(p->stats.last_error, sizeof p->stats.last_error, "%.20s: %.500s",
             strata_status_name(err->code), err->message);
    if (!retryable(err->code)) {
        p->stats.dropped_requests++;
        request_free(r);
        return;
    }
    push_front(p, r);
    wait_until(p, strata_monotonic_ns() + jittered(p, *backoff));
    *backoff = *backoff * 2 > p->o.max_backoff_ns ? p->o.max_backoff_ns : *backoff * 2;
}

static int send_one(agent_pusher *p, const request *r, strata_error *err) {
    rpc_metadata md = {"x-scope-orgid", p->o.tenant, p->o.tenant ? strlen(p->o.tenant) : 0};
    strata_buffer response = STRATA_BUFFER_INIT;
    int rc = rpc_call_unary(p->channel, WRITE_RAW_METHOD, r->bytes.data, r->bytes.len, &md,
                            p->o.tenant != NULL ? 1 : 0, p->o.timeout_ns, &response, err);
    strata_buffer_free(&response);
    return rc;
}

static void *sender_main(void *arg) {
    agent_pusher *p = arg;
    int64_t backoff = p->o.min_backoff_ns;
    pthread_mutex_lock(&p->mu);
    while (!p->stop) {
        if (p->head == NULL) {
            pthread_cond_broadcast(&p->drained);
            pthread_cond_wait(&p->wake, &p->mu);
            continue;
        }
        request *r = p->in_flight = pop_head(p);
        pthread_mutex_unlock(&p->mu);
        strata_error err;
        strata_error_clear(&err);
        int rc = send_one(p, r, &err);
        pthread_mutex_lock(&p->mu);
        p->in_flight = NULL;
        if (rc == 0) {
            p->stats.requests++;
            p->stats.series += r->n_series;
            backoff = p->o.min_backoff_ns;
            request_free(r);
        } else {
            on_failure(p, r, &err, &backoff);
        }
    }
    pthread_cond_broadcast(&p->drained);
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static int init_sync(agent_pusher *p, strata_error *err) {
    pthread_condattr_t attr;
    if (pthread_condattr_init(&attr) != 0 ||
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC) != 0 ||
        pthread_cond_init(&p->wake, &attr) != 0 || pthread_cond_init(&p->drained, &attr) != 0 ||
        pthread_mutex_init(&p->mu, NULL) != 0)
        return strata_error_set(err, STRATA_INTERNAL, "cannot initialise pusher locks");
    pthread_condattr_destroy(&attr);
    return 0;
}

agent_pusher *agent_pusher_new(const agent_pusher_options *options, strata_error *err) {
    agent_pusher *p = calloc(1, sizeof *p);
    if (p == NULL)
        return strata_error_oom(err), NULL;
    p->o = *options;
    if (p->o.max_queue_bytes == 0)
        p->o.max_queue_bytes = (size_t)16 << 20;
    if (p->o.timeout_ns == 0)
        p->o.timeout_ns = 30 * STRATA_NS_PER_SEC;
    if (p->o.min_backoff_ns == 0)
        p->o.min_backoff_ns = 500 * STRATA_NS_PER_MS;
    if (p->o.max_backoff_ns == 0)
        p->o.max_backoff_ns = 30 * STRATA_NS_PER_SEC;
    p->rng = (uint64_t)strata_monotonic_ns();
    if (init_sync(p, err) != 0) {
        free(p);
        return NULL;
    }
    p->channel = rpc_channel_new(p->o.address, NULL, err);
    if (p->channel == NULL || pthread_create(&p->thread, NULL, sender_main, p) != 0) {
        if (p->channel != NULL)
            strata_error_set(err, STRATA_INTERNAL, "cannot start the push thread");
        agent_pusher_free(p);
        return NULL;
    }
    p->thread_started = true;
    return p;
}

int agent_pusher_enqueue(agent_pusher *p, const agent_series *series, size_t n, strata_error *err) {
    request *r = calloc(1, sizeof *r);
    if (r == NULL)
        return strata_error_oom(err);
    if (agent_write_raw_encode(series, n, &r->bytes, err) != 0) {
        request_free(r);
        return -1;
    }
    r->n_series = n;
    pthread_mutex_lock(&p->mu);
    while (p->head != NULL && queued_bytes(p) + r->bytes.len > p->o.max_queue_bytes) {
        request_free(pop_head(p));
        p->stats.dropped_requests++;
    }
    if (queued_bytes(p) + r->bytes.len > p->o.max_queue_bytes) {
        p->stats.dropped_requests++;
        request_free(r);
    } else {
        if (p->tail != NULL)
            p->tail->next = r;
        else
            p->head = r;
        p->tail = r;
        p->stats.queue_bytes += r->bytes.len;
        p->stats.queue_requests++;
    }
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    return 0;
}

int agent_pusher_flush(agent_pusher *p, int64_t deadline_ns) {
    pthread_mutex_lock(&p->mu);
    while ((p->head != NULL || p->in_flight != NULL) && !p->stop &&
           strata_monotonic_ns() < deadline_ns) {
        struct timespec ts = {(time_t)(deadline_ns / STRATA_NS_PER_SEC),
                              (long)(deadline_ns % STRATA_NS_PER_SEC)};
        if (pthread_cond_timedwait(&p->drained, &p->mu, &ts) == ETIMEDOUT)
            break;
    }
    int rc = p->head == NULL && p->in_flight == NULL ? 0 : -1;
    pthread_mutex_unlock(&p->mu);
    return rc;
}

void agent_pusher_stats_get(agent_pusher *p, agent_pusher_stats *out) {
    pthread_mutex_lock(&p->mu);
    *out = p->stats;
    pthread_mutex_unlock(&p->mu);
}

void agent_pusher_free(agent_pusher *p) {
    if (p == NULL)
        return;
    if (p->thread_started) {
        pthread_mutex_lock(&p->mu);
        p->stop = true;
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mu);
        pthread_join(p->thread, NULL);
    }
    while (p->head != NULL)
        request_free(pop_head(p));
    rpc_channel_free(p->channel);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->drained);
    pthread_mutex_destroy(&p->mu);
    free(p);
}
