/*
 * push.c - WriteRaw sender: bounded queue, batches of what is ready, several calls in flight per
 * address, round-robin over ingesters, failover and backoff, per-series order. See push.h.
 *
 * Structures. A `request` is one push_enqueue call: its encoded WriteRawRequest and the keys of
 * its series. The queue is a singly linked list in enqueue order (seq). A sender thread builds a
 * `batch` by walking the queue (build_batch), moves the requests it takes out of the queue into
 * the batch, links the batch into the in-flight list and sends it; afterwards finish_batch frees
 * the requests, or merges them back into the queue by seq. A batch of several requests holds their
 * bytes once, concatenated in its own buffer (each request keeps its offset there), so memory is
 * counted the same in the queue and in flight; a failed batch copies each request's bytes back out.
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
#include "common/hash.h"
#include "parca/profilestore/v1alpha1/profilestore.pb-c.h"
#include "rpc/rpc.h"

/* Waiting after an allocation failure in a sender before it tries again. */
#define OOM_RETRY_NS (100 * STRATA_NS_PER_MS)

typedef struct request {
    strata_buffer bytes; /* the encoding; empty while in a batch of several (see offset) */
    size_t len;          /* encoded length */
    size_t offset;       /* in the batch's bytes, while in a batch of several */
    uint64_t *keys;      /* one per series, never 0 */
    size_t n_series;
    uint64_t seq;
    int64_t enqueued_ns;
    int64_t not_before_ns; /* backing off until then (CLOCK_MONOTONIC) */
    uint32_t tried;        /* addresses that failed it in this round, a bit each */
    bool alone;            /* a batch holding it was rejected: sent alone from now on */
    struct request *next;
} request;

typedef struct batch {
    request *first, *last; /* by seq */
    size_t n_requests, n_series, len;
    strata_buffer bytes; /* the concatenation, for more than one request */
    size_t address;
    bool alone;
    struct batch *prev, *next; /* the in-flight list */
} batch;

typedef struct push_address {
    char *target;
    rpc_channel *channel;
    size_t in_flight;
} push_address;

struct pusher {
    push_options o;
    char *tenant;
    push_address addresses[PUSH_MAX_ADDRESSES];
    size_t n_addresses;
    pthread_t *threads;
    unsigned n_threads;
    pthread_mutex_t mu;
    pthread_cond_t wake;    /* queue changed or stop */
    pthread_cond_t drained; /* queue empty and nothing in flight */
    request *head, *tail;
    size_t queued_bytes, queued_requests;
    size_t in_flight_bytes, in_flight_requests, in_flight_batches;
    batch *in_flight;       /* batches being sent */
    strata_u64_map blocked; /* build_batch's scratch: keys that may not be taken */
    uint64_t next_seq;
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

/* ---- series keys -------------------------------------------------------------------------- */

/* A key for a label set whatever the order of its labels: the sum of one hash per label. */
static uint64_t series_key(const label_set *labels) {
    uint64_t sum = 0;
    for (size_t i = 0; i < labels->count; i++) {
        const strata_label *l = &labels->labels[i];
        uint64_t name = strata_hash_bytes(l->name, strlen(l->name), 0x5e71e5);
        uint64_t value = strata_hash_bytes(l->value, strlen(l->value), 0x1abe1);
        sum += strata_hash_combine(name, value);
    }
    return strata_hash_u64(sum ^ labels->count) | 1;
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
    free(r->keys);
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
    p->queued_bytes -= r->len;
    p->queued_requests--;
    return r;
}

static void push_back(pusher *p, request *r) {
    r->next = NULL;
    if (p->tail != NULL)
        p->tail->next = r;
    else
        p->head = r;
    p->tail = r;
    p->queued_bytes += r->len;
    p->queued_requests++;
}

/* Puts a list of requests sorted by seq back into the queue, each in its place by seq. */
static void merge_back(pusher *p, request *list) {
    request **link = &p->head;
    while (list != NULL) {
        request *r = list;
        list = r->next;
        while (*link != NULL && (*link)->seq < r->seq)
            link = &(*link)->next;
        r->next = *link;
        *link = r;
        if (r->next == NULL)
            p->tail = r;
        link = &r->next;
        p->queued_bytes += r->len;
        p->queued_requests++;
    }
}

/* Would one more request of len bytes exceed a bound? In-flight requests hold memory too. */
static bool over_bounds(const pusher *p, size_t len) {
    if (p->queued_bytes + p->in_flight_bytes + len > p->o.max_queue_bytes)
        return true;
    return p->o.max_queue_requests != 0 &&
           p->queued_requests + p->in_flight_requests + 1 > p->o.max_queue_requests;
}

/* ---- building a batch (mu held) ----------------------------------------------------------- */

static int block_keys(pusher *p, const request *r) {
    for (size_t i = 0; i < r->n_series; i++)
        if (strata_u64_map_upsert(&p->blocked, r->keys[i], 0, NULL) == NULL)
            return -1;
    return 0;
}

static bool keys_blocked(const pusher *p, const request *r) {
    for (size_t i = 0; i < r->n_series; i++)
        if (strata_u64_map_get(&p->blocked, r->keys[i]) != NULL)
            return true;
    return false;
}

/* The next address in round-robin order with a free slot that has not failed `tried`; -1 if
 * none. */
static int pick_address(const pusher *p, uint32_t tried) {
    for (size_t i = 0; i < p->n_addresses; i++) {
        size_t a = (p->next_address + i) % p->n_addresses;
        if ((tried & (1u << a)) == 0 && p->addresses[a].in_flight < p->o.max_in_flight)
            return (int)a;
    }
    return -1;
}

static bool fits(const pusher *p, const batch *b, const request *r) {
    return b->len + r->len <= p->o.max_request_bytes &&
           b->n_series + r->n_series <= p->o.max_request_series;
}

static bool batch_full(const pusher *p, const batch *b) {
    return b->alone || b->len >= p->o.max_request_bytes || b->n_series >= p->o.max_request_series;
}

static void batch_append(batch *b, request *r) {
    r->next = NULL;
    if (b->last != NULL)
        b->last->next = r;
    else
        b->first = r;
    b->last = r;
    b->n_requests++;
    b->n_series += r->n_series;
    b->len += r->len;
}

/* Walks the queue oldest first and moves into b the requests that may go now (push.h: the order
 * rule), all to one address. Returns false when none may; *wake_at is then when a backoff ends
 * (INT64_MAX: nothing to wait for but a change). Allocation failures only end the walk early. */
static bool walk_queue(pusher *p, batch *b, int64_t now, int64_t *wake_at) {
    strata_u64_map_clear(&p->blocked);
    for (const batch *f = p->in_flight; f != NULL; f = f->next)
        for (const request *r = f->first; r != NULL; r = r->next)
            if (block_keys(p, r) != 0) {
                *wake_at = now + OOM_RETRY_NS;
                return false;
            }
    int address = -1;
    request **link = &p->head, *prev = NULL;
    while (*link != NULL && !batch_full(p, b)) {
        request *r = *link;
        bool take = false;
        if (!keys_blocked(p, r)) {
            if (r->not_before_ns > now) {
                if (r->not_before_ns < *wake_at)
                    *wake_at = r->not_before_ns;
            } else if (address < 0) {
                address = pick_address(p, r->tried);
                take = address >= 0;
            } else {
                take = (r->tried & (1u << address)) == 0 && !r->alone && fits(p, b, r);
            }
        }
        if (!take) {
            if (block_keys(p, r) != 0) { /* cannot remember what r holds back: stop, safely */
                if (now + OOM_RETRY_NS < *wake_at)
                    *wake_at = now + OOM_RETRY_NS;
                break;
            }
            prev = r;
            link = &r->next;
            continue;
        }
        *link = r->next;
        if (p->tail == r)
            p->tail = prev;
        p->queued_bytes -= r->len;
        p->queued_requests--;
        b->alone = r->alone;
        batch_append(b, r);
    }
    if (b->n_requests == 0)
        return false;
    b->address = (size_t)address;
    if (b->first->tried == 0) /* a retry does not move the cursor that balances new batches */
        p->next_address = ((size_t)address + 1) % p->n_addresses;
    return true;
}

/* Concatenates a batch of several requests into its own buffer, freeing theirs. Without the
 * memory, all but the first go back to the queue and the first goes alone. */
static void concatenate(pusher *p, batch *b) {
    if (b->n_requests < 2)
        return;
    if (strata_buffer_reserve(&b->bytes, b->len) != 0) {
        request *rest = b->first->next;
        b->first->next = NULL;
        b->last = b->first;
        b->n_requests = 1;
        b->n_series = b->first->n_series;
        b->len = b->first->len;
        merge_back(p, rest);
        return;
    }
    for (request *r = b->first; r != NULL; r = r->next) {
        r->offset = b->bytes.len;
        memcpy(b->bytes.data + b->bytes.len, r->bytes.data, r->len);
        b->bytes.len += r->len;
        strata_buffer_free(&r->bytes);
    }
}

/* Takes the next batch to send, if any may go now, and counts it in flight. */
static bool build_batch(pusher *p, batch *b, int64_t *wake_at) {
    memset(b, 0, sizeof *b);
    *wake_at = INT64_MAX;
    if (p->head == NULL || !walk_queue(p, b, strata_monotonic_ns(), wake_at))
        return false;
    concatenate(p, b);
    p->in_flight_bytes += b->len;
    p->in_flight_requests += b->n_requests;
    p->in_flight_batches++;
    p->addresses[b->address].in_flight++;
    b->next = p->in_flight;
    if (p->in_flight != NULL)
        p->in_flight->prev = b;
    p->in_flight = b;
    return true;
}

/* ---- finishing a batch (mu held) ---------------------------------------------------------- */

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

/* Gives each request of a batch of several its own bytes again. Returns the requests that got
 * them, in order; one that cannot (out of memory) is dropped. */
static request *take_back(pusher *p, batch *b) {
    request *list = b->first, *kept = NULL, **tail = &kept;
    b->first = b->last = NULL;
    while (list != NULL) {
        request *r = list;
        list = r->next;
        r->next = NULL;
        if (b->n_requests > 1 &&
            strata_buffer_append(&r->bytes, b->bytes.data + r->offset, r->len) != 0) {
            snprintf(p->stats.last_error, sizeof p->stats.last_error,
                     "RESOURCE_EXHAUSTED: out of memory keeping a failed request");
            drop(p, r, PUSH_DROP_QUEUE_FULL);
            continue;
        }
        *tail = r;
        tail = &r->next;
    }
    return kept;
}

/* A failed call: drop a request rejected alone; split a rejected batch into requests sent alone;
 * otherwise mark the requests as failed by this address and put them back in the queue, each in
 * its place, backing off those that every address failed in this round (push.h). */
static void on_failure(pusher *p, batch *b, const strata_error *err) {
    record_error(p, b->address, err);
    if (!retryable(err->code) && b->n_requests == 1) {
        drop(p, b->first, PUSH_DROP_REJECTED);
        b->first = b->last = NULL;
        return;
    }
    bool rejected = !retryable(err->code);
    request *list = take_back(p, b);
    uint32_t all = (uint32_t)((1ull << p->n_addresses) - 1);
    int64_t not_before = 0;
    for (request *r = list; r != NULL; r = r->next) {
        if (rejected) {
            r->alone = true;
            r->tried = 0;
            continue;
        }
        r->tried |= 1u << b->address;
        if (r->tried != all)
            continue;
        if (not_before == 0) {
            not_before = strata_monotonic_ns() + jittered(p, p->backoff_ns);
            p->backoff_ns =
                p->backoff_ns * 2 > p->o.max_backoff_ns ? p->o.max_backoff_ns : p->backoff_ns * 2;
        }
        r->tried = 0;
        r->not_before_ns = not_before;
    }
    merge_back(p, list);
}

static void on_success(pusher *p, batch *b) {
    p->stats.batches++;
    p->stats.addresses[b->address].batches++;
    p->stats.requests += b->n_requests;
    p->stats.series += b->n_series;
    p->backoff_ns = p->o.min_backoff_ns;
    while (b->first != NULL) {
        request *r = b->first;
        b->first = r->next;
        request_free(r);
    }
    b->last = NULL;
}

static void finish_batch(pusher *p, batch *b, int rc, const strata_error *err) {
    if (b->prev != NULL)
        b->prev->next = b->next;
    else
        p->in_flight = b->next;
    if (b->next != NULL)
        b->next->prev = b->prev;
    p->in_flight_bytes -= b->len;
    p->in_flight_requests -= b->n_requests;
    p->in_flight_batches--;
    p->addresses[b->address].in_flight--;
    if (rc == 0)
        on_success(p, b);
    else
        on_failure(p, b, err);
    strata_buffer_free(&b->bytes);
}

/* ---- senders ------------------------------------------------------------------------------ */

static int send_batch(pusher *p, const batch *b, strata_error *err) {
    rpc_metadata md = {"x-scope-orgid", p->tenant, p->tenant ? strlen(p->tenant) : 0};
    const uint8_t *data = b->n_requests > 1 ? b->bytes.data : b->first->bytes.data;
    strata_buffer response = STRATA_BUFFER_INIT;
    int rc = rpc_call_unary(p->addresses[b->address].channel, PUSH_WRITE_RAW_METHOD, data, b->len,
                            &md, p->tenant != NULL ? 1 : 0, p->o.timeout_ns, &response, err);
    strata_buffer_free(&response);
    return rc;
}

static void wait_until(pusher *p, int64_t deadline_ns) {
    if (deadline_ns == INT64_MAX) {
        pthread_cond_wait(&p->wake, &p->mu);
        return;
    }
    struct timespec ts = {(time_t)(deadline_ns / STRATA_NS_PER_SEC),
                          (long)(deadline_ns % STRATA_NS_PER_SEC)};
    (void)pthread_cond_timedwait(&p->wake, &p->mu, &ts);
}

static void *sender_main(void *arg) {
    pusher *p = arg;
    batch b;
    pthread_mutex_lock(&p->mu);
    while (!p->stop) {
        int64_t wake_at;
        if (!build_batch(p, &b, &wake_at)) {
            if (p->head == NULL && p->in_flight_batches == 0)
                pthread_cond_broadcast(&p->drained);
            wait_until(p, wake_at);
            continue;
        }
        if (p->head != NULL) /* another sender may take the rest to another address or slot */
            pthread_cond_signal(&p->wake);
        pthread_mutex_unlock(&p->mu);
        strata_error err;
        strata_error_clear(&err);
        int rc = send_batch(p, &b, &err);
        pthread_mutex_lock(&p->mu);
        finish_batch(p, &b, rc, &err);
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
    if (o->max_request_bytes == 0)
        o->max_request_bytes = PUSH_DEFAULT_MAX_REQUEST_BYTES;
    if (o->max_request_series == 0)
        o->max_request_series = PUSH_DEFAULT_MAX_REQUEST_SERIES;
    if (o->max_in_flight == 0)
        o->max_in_flight = PUSH_DEFAULT_MAX_IN_FLIGHT;
    if (o->timeout_ns == 0)
        o->timeout_ns = 30 * STRATA_NS_PER_SEC;
    if (o->min_backoff_ns == 0)
        o->min_backoff_ns = 500 * STRATA_NS_PER_MS;
    if (o->max_backoff_ns == 0)
        o->max_backoff_ns = 30 * STRATA_NS_PER_SEC;
    if (o->max_backoff_ns < o->min_backoff_ns)
        o->max_backoff_ns = o->min_backoff_ns;
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
        if ((a->channel = rpc_channel_new(target, options->channel, err)) == NULL)
            return -1;
        snprintf(p->stats.addresses[i].address, sizeof p->stats.addresses[i].address, "%s", target);
    }
    p->stats.n_addresses = p->n_addresses;
    return 0;
}

static int start_senders(pusher *p, strata_error *err) {
    if (p->o.max_in_flight > PUSH_MAX_IN_FLIGHT)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "max_in_flight is at most %d requests per address, got %u",
                                PUSH_MAX_IN_FLIGHT, p->o.max_in_flight);
    size_t n = p->n_addresses * p->o.max_in_flight;
    if ((p->threads = calloc(n, sizeof *p->threads)) == NULL)
        return strata_error_oom(err);
    for (size_t i = 0; i < n; i++) {
        if (pthread_create(&p->threads[i], NULL, sender_main, p) != 0)
            return strata_error_set(err, STRATA_INTERNAL, "cannot start the push threads");
        p->n_threads++;
    }
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
    if (strata_u64_map_init(&p->blocked, 64) != 0) {
        strata_error_oom(err);
        pusher_free(p);
        return NULL;
    }
    if ((options->tenant != NULL && (p->tenant = strdup(options->tenant)) == NULL &&
         strata_error_oom(err) != 0) ||
        open_addresses(p, options, err) != 0 || start_senders(p, err) != 0) {
        pusher_free(p);
        return NULL;
    }
    return p;
}

/* A request of n series, encoded and keyed, outside the lock. */
static request *request_new(const push_series *series, size_t n, strata_error *err) {
    request *r = calloc(1, sizeof *r);
    if (r == NULL || (r->keys = calloc(n ? n : 1, sizeof *r->keys)) == NULL) {
        free(r);
        return strata_error_oom(err), NULL;
    }
    if (push_write_raw_encode(series, n, &r->bytes, err) != 0) {
        request_free(r);
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        r->keys[i] = series_key(series[i].labels);
    r->n_series = n;
    r->len = r->bytes.len;
    return r;
}

int push_enqueue(pusher *p, const push_series *series, size_t n, strata_error *err) {
    request *r = request_new(series, n, err);
    if (r == NULL)
        return -1;
    pthread_mutex_lock(&p->mu);
    r->seq = p->next_seq++;
    r->enqueued_ns = strata_monotonic_ns();
    p->stats.enqueued_requests++;
    p->stats.enqueued_series += n;
    if (r->len > p->o.max_queue_bytes) {
        drop(p, r, PUSH_DROP_TOO_LARGE);
    } else {
        /* The newest data wins: push out the oldest until the new request fits. */
        while (p->head != NULL && over_bounds(p, r->len))
            drop(p, pop_head(p), PUSH_DROP_QUEUE_FULL);
        if (over_bounds(p, r->len)) { /* what is in flight alone leaves no room */
            drop(p, r, PUSH_DROP_QUEUE_FULL);
        } else {
            push_back(p, r);
            pthread_cond_signal(&p->wake);
        }
    }
    pthread_mutex_unlock(&p->mu);
    return 0;
}

int push_flush(pusher *p, int64_t deadline_ns) {
    pthread_mutex_lock(&p->mu);
    while ((p->head != NULL || p->in_flight_batches > 0) && !p->stop &&
           strata_monotonic_ns() < deadline_ns) {
        struct timespec ts = {(time_t)(deadline_ns / STRATA_NS_PER_SEC),
                              (long)(deadline_ns % STRATA_NS_PER_SEC)};
        if (pthread_cond_timedwait(&p->drained, &p->mu, &ts) == ETIMEDOUT)
            break;
    }
    int rc = p->head == NULL && p->in_flight_batches == 0 ? 0 : -1;
    pthread_mutex_unlock(&p->mu);
    return rc;
}

void push_stats_get(pusher *p, push_stats *out) {
    pthread_mutex_lock(&p->mu);
    *out = p->stats;
    out->queue_bytes = p->queued_bytes + p->in_flight_bytes;
    out->queue_requests = p->queued_requests + p->in_flight_requests;
    out->in_flight_batches = p->in_flight_batches;
    for (size_t i = 0; i < p->n_addresses; i++)
        out->addresses[i].in_flight = p->addresses[i].in_flight;
    int64_t oldest = p->head != NULL ? p->head->enqueued_ns : INT64_MAX;
    for (const batch *b = p->in_flight; b != NULL; b = b->next)
        if (b->first->enqueued_ns < oldest)
            oldest = b->first->enqueued_ns;
    out->lag_ns = oldest == INT64_MAX ? 0 : strata_monotonic_ns() - oldest;
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
    free(p->threads);
    while (p->head != NULL)
        request_free(pop_head(p));
    for (size_t i = 0; i < p->n_addresses; i++) {
        rpc_channel_free(p->addresses[i].channel);
        free(p->addresses[i].target);
    }
    strata_u64_map_free(&p->blocked);
    free(p->tenant);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->drained);
    pthread_mutex_destroy(&p->mu);
    free(p);
}
