/*
 * push.c - WriteRaw sender: bounded queue, round-robin over ingesters, failover and backoff. See
 * push.h.
 */
#include "push/push.h"

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

#define MAX_SENDERS 64

typedef struct request {
    strata_buffer bytes;
    size_t n_series;
    bool started;          /* has been tried at least once */
    size_t address;        /* where the next attempt goes */
    size_t round_fails;    /* failed attempts since the last backoff */
    int64_t not_before_ns; /* backing off until then (CLOCK_MONOTONIC) */
    struct request *next;
} request;

typedef struct push_address {
    char *target;
    rpc_channel *channel;
} push_address;

struct pusher {
    push_options o;
    char *tenant;
    push_address addresses[PUSH_MAX_ADDRESSES];
    size_t n_addresses;
    pthread_t threads[MAX_SENDERS];
    unsigned n_threads;
    pthread_mutex_t mu;
    pthread_cond_t wake;    /* queue changed or stop */
    pthread_cond_t drained; /* queue empty and nothing in flight */
    request *head, *tail;
    size_t queued_bytes, queued_requests;
    size_t in_flight_bytes, in_flight_requests;
    size_t next_address; /* round-robin cursor */
    int64_t backoff_ns;  /* the next backoff; min_backoff after a success */
    bool stop;
    push_stats stats;
    uint64_t rng;
};

/* ---- encoding ----------------------------------------------------------------------------- */

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

static int fill_views(series_views *v, const push_series *s, strata_error *err) {
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
    v->sample.raw_profile.data = (uint8_t *)s->pprof;
    v->sample.raw_profile.len = s->pprof_len;
    v->sample_ptr = &v->sample;
    parca__profilestore__v1alpha1__raw_profile_series__init(&v->series);
    v->series.labels = &v->set;
    v->series.n_samples = 1;
    v->series.samples = &v->sample_ptr;
    return 0;
}

int push_write_raw_encode(const push_series *series, size_t n, strata_buffer *out,
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

/* ---- the queue (mu held) ------------------------------------------------------------------ */

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

const char *push_drop_reason_name(push_drop_reason reason) {
    switch (reason) {
        case PUSH_DROP_QUEUE_FULL:
            return "queue_full";
        case PUSH_DROP_TOO_LARGE:
            return "too_large";
        case PUSH_DROP_REJECTED:
            return "rejected";
        case PUSH_DROP_REASONS:
            break;
    }
    return "unknown";
}

static void request_free(request *r) {
    if (r == NULL)
        return;
    strata_buffer_free(&r->bytes);
    free(r);
}

static void drop(pusher *p, request *r, push_drop_reason reason) {
    p->stats.dropped[reason]++;
    p->stats.dropped_series += r->n_series;
    request_free(r);
}

static request *pop_head(pusher *p) {
    request *r = p->head;
    if (r == NULL)
        return NULL;
    p->head = r->next;
    if (p->head == NULL)
        p->tail = NULL;
    r->next = NULL;
    p->queued_bytes -= r->bytes.len;
    p->queued_requests--;
    return r;
}

static void push_front(pusher *p, request *r) {
    r->next = p->head;
    p->head = r;
    if (p->tail == NULL)
        p->tail = r;
    p->queued_bytes += r->bytes.len;
    p->queued_requests++;
}

static void push_back(pusher *p, request *r) {
    if (p->tail != NULL)
        p->tail->next = r;
    else
        p->head = r;
    p->tail = r;
    p->queued_bytes += r->bytes.len;
    p->queued_requests++;
}

/* Would one more request of len bytes exceed a bound? In-flight requests hold memory too. */
static bool over_bounds(const pusher *p, size_t len) {
    if (p->queued_bytes + p->in_flight_bytes + len > p->o.max_queue_bytes)
        return true;
    return p->o.max_queue_requests != 0 &&
           p->queued_requests + p->in_flight_requests + 1 > p->o.max_queue_requests;
}

/* ---- senders ------------------------------------------------------------------------------ */

/* Waits for a wake-up or until deadline_ns, whichever comes first (mu held). */
static void wait_once(pusher *p, int64_t deadline_ns) {
    struct timespec ts = {(time_t)(deadline_ns / STRATA_NS_PER_SEC),
                          (long)(deadline_ns % STRATA_NS_PER_SEC)};
    (void)pthread_cond_timedwait(&p->wake, &p->mu, &ts);
}

static int64_t jittered(pusher *p, int64_t backoff) {
    p->rng = p->rng * 6364136223846793005ULL + 1442695040888963407ULL;
    int64_t spread = backoff / 5;
    if (spread == 0)
        return backoff;
    return backoff - spread + (int64_t)((p->rng >> 33) % (uint64_t)(2 * spread));
}

static void record_error(pusher *p, size_t address, const strata_error *err) {
    push_address_stats *as = &p->stats.addresses[address];
    p->stats.errors++;
    as->errors++;
    snprintf(as->last_error, sizeof as->last_error, "%.20s: %.500s", strata_status_name(err->code),
             err->message);
    snprintf(p->stats.last_error, sizeof p->stats.last_error, "%.20s: %.500s",
             strata_status_name(err->code), err->message);
}

/* A failed attempt: drop the request, or requeue it at the front for the next address; once
 * every address failed it, it waits out a backoff there (holding back the queue, which stays in
 * order) before the next round. */
static void on_failure(pusher *p, request *r, size_t address, const strata_error *err) {
    record_error(p, address, err);
    if (!retryable(err->code)) {
        drop(p, r, PUSH_DROP_REJECTED);
        return;
    }
    r->address = (address + 1) % p->n_addresses;
    if (++r->round_fails >= p->n_addresses) {
        r->round_fails = 0;
        r->not_before_ns = strata_monotonic_ns() + jittered(p, p->backoff_ns);
        p->backoff_ns =
            p->backoff_ns * 2 > p->o.max_backoff_ns ? p->o.max_backoff_ns : p->backoff_ns * 2;
    }
    push_front(p, r);
    pthread_cond_broadcast(&p->wake);
}

static int send_one(pusher *p, const request *r, size_t address, strata_error *err) {
    rpc_metadata md = {"x-scope-orgid", p->tenant, p->tenant ? strlen(p->tenant) : 0};
    strata_buffer response = STRATA_BUFFER_INIT;
    int rc = rpc_call_unary(p->addresses[address].channel, PUSH_WRITE_RAW_METHOD, r->bytes.data,
                            r->bytes.len, &md, p->tenant != NULL ? 1 : 0, p->o.timeout_ns,
                            &response, err);
    strata_buffer_free(&response);
    return rc;
}

/* Takes the oldest request and picks its address (mu held). */
static request *take(pusher *p, size_t *address) {
    request *r = pop_head(p);
    if (!r->started) {
        r->started = true;
        r->address = p->next_address;
        p->next_address = (p->next_address + 1) % p->n_addresses;
    }
    *address = r->address;
    p->in_flight_bytes += r->bytes.len;
    p->in_flight_requests++;
    return r;
}

static void *sender_main(void *arg) {
    pusher *p = arg;
    pthread_mutex_lock(&p->mu);
    while (!p->stop) {
        if (p->head == NULL) {
            if (p->in_flight_requests == 0)
                pthread_cond_broadcast(&p->drained);
            pthread_cond_wait(&p->wake, &p->mu);
            continue;
        }
        if (p->head->not_before_ns > strata_monotonic_ns()) {
            wait_once(p, p->head->not_before_ns);
            continue;
        }
        size_t address;
        request *r = take(p, &address);
        pthread_mutex_unlock(&p->mu);
        strata_error err;
        strata_error_clear(&err);
        int rc = send_one(p, r, address, &err);
        pthread_mutex_lock(&p->mu);
        p->in_flight_bytes -= r->bytes.len;
        p->in_flight_requests--;
        if (rc == 0) {
            p->stats.requests++;
            p->stats.series += r->n_series;
            p->stats.addresses[address].requests++;
            p->backoff_ns = p->o.min_backoff_ns;
            request_free(r);
        } else {
            on_failure(p, r, address, &err);
        }
    }
    pthread_cond_broadcast(&p->drained);
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* ---- lifecycle ---------------------------------------------------------------------------- */

static int init_sync(pusher *p, strata_error *err) {
    pthread_condattr_t attr;
    if (pthread_condattr_init(&attr) != 0)
        return strata_error_set(err, STRATA_INTERNAL, "cannot initialise pusher locks");
    int rc = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC) != 0 ||
             pthread_cond_init(&p->wake, &attr) != 0 ||
             pthread_cond_init(&p->drained, &attr) != 0 || pthread_mutex_init(&p->mu, NULL) != 0;
    pthread_condattr_destroy(&attr);
    if (rc != 0)
        return strata_error_set(err, STRATA_INTERNAL, "cannot initialise pusher locks");
    return 0;
}

static void apply_defaults(push_options *o) {
    if (o->max_queue_bytes == 0)
        o->max_queue_bytes = (size_t)16 << 20;
    if (o->timeout_ns == 0)
        o->timeout_ns = 30 * STRATA_NS_PER_SEC;
    if (o->min_backoff_ns == 0)
        o->min_backoff_ns = 500 * STRATA_NS_PER_MS;
    if (o->max_backoff_ns == 0)
        o->max_backoff_ns = 30 * STRATA_NS_PER_SEC;
    if (o->max_backoff_ns < o->min_backoff_ns)
        o->max_backoff_ns = o->min_backoff_ns;
    if (o->senders == 0)
        o->senders = (unsigned)o->n_addresses;
    if (o->senders > MAX_SENDERS)
        o->senders = MAX_SENDERS;
}

static int open_addresses(pusher *p, const push_options *options, strata_error *err) {
    if (options->n_addresses == 0 || options->n_addresses > PUSH_MAX_ADDRESSES)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "the pusher needs 1 to %d ingester addresses, got %zu",
                                PUSH_MAX_ADDRESSES, options->n_addresses);
    for (size_t i = 0; i < options->n_addresses; i++) {
        const char *target = options->addresses[i];
        if (target == NULL || target[0] == '\0')
            return strata_error_set(err, STRATA_INVALID_ARGUMENT, "empty ingester address");
        push_address *a = &p->addresses[i];
        if ((a->target = strdup(target)) == NULL)
            return strata_error_oom(err);
        p->n_addresses++;
        if ((a->channel = rpc_channel_new(target, NULL, err)) == NULL)
            return -1;
        snprintf(p->stats.addresses[i].address, sizeof p->stats.addresses[i].address, "%s", target);
    }
    p->stats.n_addresses = p->n_addresses;
    return 0;
}

pusher *pusher_new(const push_options *options, strata_error *err) {
    pusher *p = calloc(1, sizeof *p);
    if (p == NULL)
        return strata_error_oom(err), NULL;
    p->o = *options;
    apply_defaults(&p->o);
    p->backoff_ns = p->o.min_backoff_ns;
    p->rng = (uint64_t)strata_monotonic_ns();
    if (init_sync(p, err) != 0) {
        free(p);
        return NULL;
    }
    if ((options->tenant != NULL && (p->tenant = strdup(options->tenant)) == NULL &&
         strata_error_oom(err) != 0) ||
        open_addresses(p, options, err) != 0) {
        pusher_free(p);
        return NULL;
    }
    for (unsigned i = 0; i < p->o.senders; i++) {
        if (pthread_create(&p->threads[i], NULL, sender_main, p) != 0) {
            strata_error_set(err, STRATA_INTERNAL, "cannot start the push threads");
            pusher_free(p);
            return NULL;
        }
        p->n_threads++;
    }
    return p;
}

int push_enqueue(pusher *p, const push_series *series, size_t n, strata_error *err) {
    request *r = calloc(1, sizeof *r);
    if (r == NULL)
        return strata_error_oom(err);
    if (push_write_raw_encode(series, n, &r->bytes, err) != 0) {
        request_free(r);
        return -1;
    }
    r->n_series = n;
    pthread_mutex_lock(&p->mu);
    p->stats.enqueued_requests++;
    p->stats.enqueued_series += n;
    if (r->bytes.len > p->o.max_queue_bytes) {
        drop(p, r, PUSH_DROP_TOO_LARGE);
    } else {
        /* The newest data wins: push out the oldest until the new request fits. */
        while (p->head != NULL && over_bounds(p, r->bytes.len))
            drop(p, pop_head(p), PUSH_DROP_QUEUE_FULL);
        if (over_bounds(p, r->bytes.len)) /* what is in flight alone leaves no room */
            drop(p, r, PUSH_DROP_QUEUE_FULL);
        else
            push_back(p, r);
    }
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    return 0;
}

int push_flush(pusher *p, int64_t deadline_ns) {
    pthread_mutex_lock(&p->mu);
    while ((p->head != NULL || p->in_flight_requests > 0) && !p->stop &&
           strata_monotonic_ns() < deadline_ns) {
        struct timespec ts = {(time_t)(deadline_ns / STRATA_NS_PER_SEC),
                              (long)(deadline_ns % STRATA_NS_PER_SEC)};
        if (pthread_cond_timedwait(&p->drained, &p->mu, &ts) == ETIMEDOUT)
            break;
    }
    int rc = p->head == NULL && p->in_flight_requests == 0 ? 0 : -1;
    pthread_mutex_unlock(&p->mu);
    return rc;
}

void push_stats_get(pusher *p, push_stats *out) {
    pthread_mutex_lock(&p->mu);
    *out = p->stats;
    out->queue_bytes = p->queued_bytes + p->in_flight_bytes;
    out->queue_requests = p->queued_requests + p->in_flight_requests;
    pthread_mutex_unlock(&p->mu);
}

void pusher_free(pusher *p) {
    if (p == NULL)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->mu);
    for (unsigned i = 0; i < p->n_threads; i++)
        pthread_join(p->threads[i], NULL);
    while (p->head != NULL)
        request_free(pop_head(p));
    for (size_t i = 0; i < p->n_addresses; i++) {
        rpc_channel_free(p->addresses[i].channel);
        free(p->addresses[i].target);
    }
    free(p->tenant);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->drained);
    pthread_mutex_destroy(&p->mu);
    free(p);
}
