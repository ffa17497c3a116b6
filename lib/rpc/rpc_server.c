/*
 * rpc_server.c - the unary gRPC server; see rpc.h for the design.
 */
#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "common/thread.h"
#include "common/array.h"
#include "common/auth.h"
#include "common/clock.h"
#include "common/tenant.h"
#include "common/textfile.h"
#include "common/tsan.h"
#include "rpc/rpc.h"
#include "rpc/rpc_internal.h"

/* The request metadata (headers) one call may carry: 16 MiB, what grpc-go (the clients Parca users
 * run) accepts. grpc core 1.51 defaults to 8 KiB, which refuses legitimate clients with a few large
 * headers (a bearer token, tracing baggage, cookies through a proxy), and a limit anywhere below
 * what clients may send makes grpc core fail such calls in its transport, where at 64 KiB it was
 * seen closing the connection under the other calls on it. Under this limit every header reaches
 * the handler, and one that is wrong, such as a 10 MiB x-scope-orgid, is refused for that call
 * alone with INVALID_ARGUMENT (common/tenant.h). A call over it gets RESOURCE_EXHAUSTED from the
 * transport; the other calls on its connection carry on (integration_attacks). */
#define RPC_SERVER_MAX_METADATA_BYTES (16 * 1024 * 1024)

/* Accept slots kept posted per completion queue. A slot is re-posted as soon as its call arrives,
 * so this bounds only the accept burst, not the number of calls in flight. */
#define REQUEST_SLOTS_PER_QUEUE 32

typedef struct method_counters {
    atomic_uint_fast64_t streams; /* client streams being collected or handled (held in memory) */
    atomic_uint_fast64_t started;
    atomic_uint_fast64_t in_flight;
    atomic_uint_fast64_t finished[RPC_STATUS_COUNT];
} method_counters;

typedef struct rpc_method {
    char *path;
    size_t path_len;
    rpc_handler handler; /* exactly one of handler and sync_handler is set */
    rpc_sync_handler sync_handler;
    void *arg;
    size_t stream_max_bytes;   /* 0: unary; else client streaming, collected up to this size */
    size_t stream_max_calls;   /* streams held at once; more are refused at once */
    method_counters *counters; /* separate allocation: atomics never move */
} rpc_method;

typedef struct rpc_worker {
    rpc_server *server;
    grpc_completion_queue *cq;
    pthread_t thread;
    bool thread_running;
} rpc_worker;

struct rpc_server {
    grpc_server *grpc;
    grpc_completion_queue *shutdown_cq;
    rpc_worker *workers;
    size_t n_workers;
    rpc_method *methods;
    size_t n_methods;
    size_t cap_methods;
    int port;
    bool started;
    const strata_auth *auth; /* NULL: no authentication */
    atomic_uint_fast64_t unimplemented;

    pthread_mutex_t lock;  /* guards draining, live and handled */
    bool draining;         /* shutting down: new calls are answered UNAVAILABLE */
    pthread_cond_t change; /* signalled when live or handled drops to 0 */
    size_t live;           /* rpc_call structs allocated (posted slots and calls) */
    size_t handled;        /* calls given to handlers and not yet over */
};

typedef enum tag_kind { TAG_ACCEPTED, TAG_RECEIVED, TAG_CLOSED, TAG_SENT } tag_kind;

/* What grpc hands back from the completion queue: which call, which operation. */
typedef struct rpc_tag {
    rpc_call *call;
    tag_kind kind;
} rpc_tag;

struct rpc_call {
    rpc_worker *worker; /* NULL for a bridged call */
    rpc_server *server;
    const rpc_bridge *bridge; /* NULL for a grpc core call; else &bridge_copy */
    rpc_bridge bridge_copy;
    char *bridge_trailer_key, *bridge_trailer_value;
    const rpc_method *method; /* NULL for unknown methods */
    grpc_call *grpc;
    grpc_call_details details;
    grpc_metadata_array metadata;
    grpc_byte_buffer *request_message;
    grpc_slice request;   /* the request flattened into one slice */
    strata_buffer stream; /* a client stream's messages so far, each framed by its uvarint size */
    grpc_byte_buffer *response_message;
    char *peer;          /* gpr_malloc'd by grpc */
    int close_cancelled; /* written by grpc when TAG_CLOSED completes */
    bool handled;        /* given to a handler (counted in server->handled) */
    bool holds_stream;   /* counted in method->counters->streams until freed */
    atomic_bool cancelled;
    atomic_bool finished;
    atomic_int refs;
    strata_status status;  /* what the handler answered */
    rpc_tag tags[4];       /* indexed by tag_kind */
    grpc_metadata trailer; /* one trailing metadata entry, when has_trailer */
    bool has_trailer;
};

static const char unknown_peer[] = "unknown";

/* ---------------------------------------------------------------------------------------------
 * Call state
 */

/* Counts a call struct allocated (+1) or freed (-1, together with its handled count). */
static void count_call(rpc_server *s, int delta, bool was_handled) {
    pthread_mutex_lock(&s->lock);
    s->live = delta > 0 ? s->live + 1 : s->live - 1;
    if (was_handled)
        s->handled--;
    if (s->live == 0 || s->handled == 0)
        pthread_cond_broadcast(&s->change);
    pthread_mutex_unlock(&s->lock);
}

/* Decides whether a new call goes to its handler: yes unless the server is draining. */
static bool admit_call(rpc_server *s) {
    pthread_mutex_lock(&s->lock);
    bool admitted = !s->draining;
    if (admitted)
        s->handled++;
    pthread_mutex_unlock(&s->lock);
    return admitted;
}

static rpc_call *call_new(rpc_worker *w) {
    rpc_call *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    c->worker = w;
    c->server = w->server;
    grpc_call_details_init(&c->details);
    grpc_metadata_array_init(&c->metadata);
    c->request = grpc_empty_slice();
    for (int k = 0; k < 4; k++) {
        c->tags[k].call = c;
        c->tags[k].kind = (tag_kind)k;
    }
    atomic_init(&c->cancelled, false);
    atomic_init(&c->finished, false);
    atomic_init(&c->refs, 0);
    count_call(w->server, +1, false);
    return c;
}

/* The status a call ended with, for the counters. */
static strata_status call_final_status(const rpc_call *c) {
    if (!c->close_cancelled)
        return c->status;
    if (rpc_call_deadline_remaining_ns(c) <= 0)
        return STRATA_DEADLINE_EXCEEDED;
    return STRATA_CANCELLED;
}

static void call_count_end(const rpc_call *c) {
    if (c->method == NULL)
        return;
    method_counters *m = c->method->counters;
    atomic_fetch_add(&m->finished[call_final_status(c)], 1);
    atomic_fetch_sub(&m->in_flight, 1);
}

static void call_free(rpc_call *c) {
    rpc_server *s = c->worker->server;
    if (c->holds_stream)
        atomic_fetch_sub(&c->method->counters->streams, 1);
    if (c->grpc != NULL) {
        call_count_end(c);
        grpc_call_unref(c->grpc);
    }
    grpc_call_details_destroy(&c->details);
    grpc_metadata_array_destroy(&c->metadata);
    if (c->request_message != NULL)
        grpc_byte_buffer_destroy(c->request_message);
    if (c->response_message != NULL)
        grpc_byte_buffer_destroy(c->response_message);
    grpc_slice_unref(c->request);
    strata_buffer_free(&c->stream);
    if (c->has_trailer) {
        grpc_slice_unref(c->trailer.key);
        grpc_slice_unref(c->trailer.value);
    }
    gpr_free(c->peer);
    bool handled = c->handled;
    free(c);
    count_call(s, -1, handled);
}

static void call_release(rpc_call *c) {
    if (atomic_fetch_sub_explicit(&c->refs, 1, memory_order_acq_rel) == 1)
        call_free(c);
}

/* Posts one accept slot on the worker's queue. */
static int post_request_slot(rpc_worker *w) {
    rpc_call *c = call_new(w);
    if (c == NULL)
        return -1;
    strata_tsan_release(&c->tags[TAG_ACCEPTED]);
    grpc_call_error e = grpc_server_request_call(
        w->server->grpc, &c->grpc, &c->details, &c->metadata, w->cq, w->cq, &c->tags[TAG_ACCEPTED]);
    if (e != GRPC_CALL_OK) {
        call_free(c);
        return -1;
    }
    return 0;
}

static const rpc_method *find_method(const rpc_server *s, grpc_slice path) {
    size_t len = GRPC_SLICE_LENGTH(path);
    const uint8_t *p = GRPC_SLICE_START_PTR(path);
    for (size_t i = 0; i < s->n_methods; i++) {
        if (s->methods[i].path_len == len && memcmp(s->methods[i].path, p, len) == 0)
            return &s->methods[i];
    }
    return NULL;
}

/* ---------------------------------------------------------------------------------------------
 * Finishing
 */

static grpc_byte_buffer *byte_buffer_from_slice(grpc_slice slice) {
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&slice, 1);
    grpc_slice_unref(slice);
    return bb;
}

/* Sends initial metadata, the response (when OK) and the status; takes `response` (may be NULL). */
static void call_send_status(rpc_call *c, strata_status code, const char *message,
                             grpc_byte_buffer *response) {
    grpc_op ops[3];
    size_t n = 0;
    memset(ops, 0, sizeof(ops));
    ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    if (response != NULL) {
        c->response_message = response;
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = response;
    }
    grpc_slice details = grpc_slice_from_copied_string(message != NULL ? message : "");
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = (grpc_status_code)code;
    ops[n].data.send_status_from_server.status_details = message != NULL ? &details : NULL;
    if (c->has_trailer) {
        ops[n].data.send_status_from_server.trailing_metadata_count = 1;
        ops[n].data.send_status_from_server.trailing_metadata = &c->trailer;
    }
    n++;
    c->status = code;
    grpc_call *call = c->grpc; /* read before the hand-off: the completion may free c */
    strata_tsan_release(&c->tags[TAG_SENT]);
    grpc_call_error e = grpc_call_start_batch(call, ops, n, &c->tags[TAG_SENT], NULL);
    grpc_slice_unref(details);
    if (e != GRPC_CALL_OK)
        call_release(c); /* no completion will come: drop the handler's reference here */
}

int rpc_call_set_trailer(rpc_call *c, const char *key, const char *value) {
    if (atomic_load(&c->finished) || c->has_trailer || c->bridge_trailer_key != NULL)
        return -1;
    for (const char *p = key; *p != '\0'; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '_' ||
              *p == '.'))
            return -1;
    for (const char *p = value; *p != '\0'; p++)
        if (*p < 0x20 || *p > 0x7e)
            return -1; /* ASCII-printable: what gRPC allows in a non-binary value */
    if (c->bridge != NULL) {
        c->bridge_trailer_key = strdup(key);
        c->bridge_trailer_value = strdup(value);
        if (c->bridge_trailer_key == NULL || c->bridge_trailer_value == NULL) {
            free(c->bridge_trailer_key);
            free(c->bridge_trailer_value);
            c->bridge_trailer_key = c->bridge_trailer_value = NULL;
            return -1;
        }
        return 0;
    }
    c->trailer.key = grpc_slice_from_copied_string(key);
    c->trailer.value = grpc_slice_from_copied_string(value);
    c->has_trailer = true;
    return 0;
}

static bool claim_finish(rpc_call *c) {
    return !atomic_exchange(&c->finished, true);
}

/* Hands a bridged call's outcome to its transport and frees the call. */
static void bridge_finish(rpc_call *c, strata_status code, const char *message,
                          strata_buffer *response) {
    rpc_server *s = c->server;
    c->status = code;
    c->bridge->finish(c->bridge->ctx, code, message, response, c->bridge_trailer_key,
                      c->bridge_trailer_value);
    strata_buffer_free(response);
    method_counters *m = c->method->counters;
    atomic_fetch_add(&m->finished[(unsigned)code < RPC_STATUS_COUNT ? code : STRATA_UNKNOWN], 1);
    atomic_fetch_sub(&m->in_flight, 1);
    free(c->bridge_trailer_key);
    free(c->bridge_trailer_value);
    bool handled = c->handled;
    free(c);
    count_call(s, -1, handled);
}

void rpc_call_finish(rpc_call *c, strata_status code, const char *message, const void *response,
                     size_t response_len) {
    if (!claim_finish(c))
        return;
    if (c->bridge != NULL) {
        strata_buffer copy = STRATA_BUFFER_INIT;
        if (code == STRATA_OK && strata_buffer_append(&copy, response, response_len) != 0) {
            code = STRATA_RESOURCE_EXHAUSTED;
            message = "out of memory copying the response";
        }
        bridge_finish(c, code, message, &copy);
        return;
    }
    grpc_byte_buffer *bb = NULL;
    if (code == STRATA_OK)
        bb = byte_buffer_from_slice(grpc_slice_from_copied_buffer(response, response_len));
    call_send_status(c, code, message, bb);
}

void rpc_call_finish_buffer(rpc_call *c, strata_status code, const char *message,
                            strata_buffer *response) {
    if (!claim_finish(c)) {
        strata_buffer_free(response);
        return;
    }
    if (c->bridge != NULL) {
        strata_buffer taken = *response;
        strata_buffer_init(response);
        if (code != STRATA_OK)
            strata_buffer_free(&taken);
        bridge_finish(c, code, message, &taken);
        return;
    }
    grpc_byte_buffer *bb = NULL;
    if (code == STRATA_OK && response->len > 0) {
        bb = byte_buffer_from_slice(grpc_slice_new(response->data, response->len, free));
        strata_buffer_init(response); /* the slice owns the bytes now */
    } else if (code == STRATA_OK) {
        bb = byte_buffer_from_slice(grpc_empty_slice());
    }
    strata_buffer_free(response);
    call_send_status(c, code, message, bb);
}

/* ---------------------------------------------------------------------------------------------
 * Call events, all on the call's worker thread
 */

static void run_sync_handler(rpc_call *c, const uint8_t *req, size_t len) {
    strata_buffer response = STRATA_BUFFER_INIT;
    strata_error err;
    strata_error_clear(&err);
    if (c->method->sync_handler(c, req, len, &response, &err, c->method->arg) == 0) {
        rpc_call_finish_buffer(c, STRATA_OK, NULL, &response);
        return;
    }
    strata_buffer_free(&response);
    rpc_call_finish(c, err.code == STRATA_OK ? STRATA_UNKNOWN : err.code, err.message, NULL, 0);
}

/* The subject of the client certificate mutual TLS verified, into out; false when none. */
static bool client_subject(rpc_call *c, char *out, size_t size) {
    grpc_auth_context *ctx = grpc_call_auth_context(c->grpc);
    if (ctx == NULL)
        return false;
    grpc_auth_property_iterator it =
        grpc_auth_context_find_properties_by_name(ctx, GRPC_X509_SUBJECT_PROPERTY_NAME);
    const grpc_auth_property *p = grpc_auth_property_iterator_next(&it);
    bool found = p != NULL && p->value_length < size;
    if (found) {
        memcpy(out, p->value, p->value_length);
        out[p->value_length] = '\0';
    }
    grpc_auth_context_release(ctx);
    return found;
}

/* Authentication (common/auth.h) when a call arrives, before its message is read or any handler
 * runs; false when the call was refused (and finished). */
static bool authorized(rpc_call *c, const strata_auth *auth) {
    const char *authorization = NULL, *tenant_value = NULL;
    size_t authorization_len = 0, tenant_len = 0;
    (void)rpc_call_metadata(c, "authorization", &authorization, &authorization_len);
    (void)rpc_call_metadata(c, STRATA_TENANT_HEADER, &tenant_value, &tenant_len);
    char subject[1024];
    bool has_subject = client_subject(c, subject, sizeof subject);
    strata_tenant tenant;
    strata_error tenant_err, err;
    strata_error_clear(&err);
    bool tenant_ok = strata_tenant_from_header(tenant_value, tenant_len, &tenant, &tenant_err) == 0;
    if (strata_auth_check(auth, authorization, authorization_len, has_subject ? subject : NULL,
                          tenant_ok ? tenant.name : "", &err) == 0)
        return true;
    if (!tenant_ok && err.code == STRATA_PERMISSION_DENIED)
        err = tenant_err; /* a known credential, a malformed tenant: say what is wrong with it */
    rpc_call_finish(c, err.code, err.message, NULL, 0);
    return false;
}

static void dispatch(rpc_call *c, const uint8_t *req, size_t len) {
    c->peer = grpc_call_get_peer(c->grpc);
    if (c->method->sync_handler != NULL)
        run_sync_handler(c, req, len);
    else
        c->method->handler(c, req, len, c->method->arg);
}

static void start_receive(rpc_call *c);

/* One message of a client stream arrived (request_message), or the stream ended (NULL): frames it
 * into c->stream and asks for the next, or hands the collected stream to the handler. */
static void on_stream_message(rpc_call *c, grpc_slice message) {
    size_t len = GRPC_SLICE_LENGTH(message);
    size_t max = c->method->stream_max_bytes;
    if (len > max || c->stream.len > max - len) {
        grpc_slice_unref(message);
        rpc_call_finish(c, STRATA_RESOURCE_EXHAUSTED, "the client stream is over its size limit",
                        NULL, 0);
        return;
    }
    int rc = strata_buffer_append_uvarint(&c->stream, len);
    if (rc == 0)
        rc = strata_buffer_append(&c->stream, GRPC_SLICE_START_PTR(message), len);
    grpc_slice_unref(message);
    if (rc != 0) {
        rpc_call_finish(c, STRATA_RESOURCE_EXHAUSTED, "out of memory collecting the client stream",
                        NULL, 0);
        return;
    }
    start_receive(c);
}

static void on_received(rpc_call *c, bool ok) {
    if (!ok) {
        call_release(c); /* cancelled before the request arrived: nobody to answer */
        return;
    }
    bool streaming = c->method->stream_max_bytes > 0;
    if (c->request_message == NULL && streaming) {
        dispatch(c, c->stream.data, c->stream.len); /* the client half-closed: all is in */
        return;
    }
    if (c->request_message == NULL) {
        rpc_call_finish(c, STRATA_INTERNAL, "unary call without a request message", NULL, 0);
        return;
    }
    grpc_byte_buffer_reader reader;
    if (!grpc_byte_buffer_reader_init(&reader, c->request_message)) {
        rpc_call_finish(c, STRATA_INTERNAL, "cannot decompress the request message", NULL, 0);
        return;
    }
    grpc_slice message = grpc_byte_buffer_reader_readall(&reader);
    grpc_byte_buffer_reader_destroy(&reader);
    grpc_byte_buffer_destroy(c->request_message);
    c->request_message = NULL;
    if (streaming) {
        on_stream_message(c, message);
        return;
    }
    grpc_slice_unref(c->request);
    c->request = message;
    dispatch(c, GRPC_SLICE_START_PTR(c->request), GRPC_SLICE_LENGTH(c->request));
}

static int start_close_watch(rpc_call *c) {
    grpc_op op;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &c->close_cancelled;
    grpc_call *call = c->grpc;
    strata_tsan_release(&c->tags[TAG_CLOSED]);
    return grpc_call_start_batch(call, &op, 1, &c->tags[TAG_CLOSED], NULL) == GRPC_CALL_OK ? 0 : -1;
}

static void start_receive(rpc_call *c) {
    grpc_op op;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &c->request_message;
    grpc_call *call = c->grpc;
    strata_tsan_release(&c->tags[TAG_RECEIVED]);
    if (grpc_call_start_batch(call, &op, 1, &c->tags[TAG_RECEIVED], NULL) != GRPC_CALL_OK) {
        grpc_call_cancel(c->grpc, NULL);
        call_release(c);
    }
}

/* Answers a call the server does not hand to a handler. */
static void answer_now(rpc_call *c, strata_status code, const char *message) {
    claim_finish(c);
    call_send_status(c, code, message, NULL);
}

static void answer_unimplemented(rpc_call *c) {
    char message[256];
    size_t len = GRPC_SLICE_LENGTH(c->details.method);
    int shown = len > 200 ? 200 : (int)len;
    snprintf(message, sizeof(message), "unknown method %.*s", shown,
             (const char *)GRPC_SLICE_START_PTR(c->details.method));
    atomic_fetch_add(&c->worker->server->unimplemented, 1);
    answer_now(c, STRATA_UNIMPLEMENTED, message);
}

/* Counts a client stream against its method's limit (each holds up to stream_max_bytes in memory
 * until it is over); false when the method is at its limit. */
static bool hold_stream(rpc_call *c) {
    atomic_uint_fast64_t *streams = &c->method->counters->streams;
    if (atomic_fetch_add(streams, 1) >= c->method->stream_max_calls) {
        atomic_fetch_sub(streams, 1);
        return false;
    }
    c->holds_stream = true;
    return true;
}

static void on_accepted(rpc_call *c, bool ok) {
    rpc_worker *w = c->worker;
    if (!ok) { /* the server is shutting down: the slot is returned unused */
        call_free(c);
        return;
    }
    post_request_slot(w); /* on failure this queue has one slot less; the others keep serving */
    c->method = find_method(w->server, c->details.method);
    if (c->method != NULL) {
        atomic_fetch_add(&c->method->counters->started, 1);
        atomic_fetch_add(&c->method->counters->in_flight, 1);
    }
    c->handled = c->method != NULL && admit_call(w->server);
    atomic_store(&c->refs, 2); /* the close watch, and the request/handler/finish path */
    if (start_close_watch(c) != 0) {
        c->close_cancelled = 1;
        atomic_store(&c->cancelled, true);
        grpc_call_cancel(c->grpc, NULL);
        call_release(c);
    }
    if (c->method == NULL)
        answer_unimplemented(c);
    else if (!c->handled)
        answer_now(c, STRATA_UNAVAILABLE, "server is shutting down");
    else if (w->server->auth != NULL && !authorized(c, w->server->auth))
        return; /* refused before its message is read */
    else if (c->method->stream_max_bytes > 0 && !hold_stream(c))
        answer_now(c, STRATA_RESOURCE_EXHAUSTED,
                   "too many client streams of this method in flight: retry later");
    else
        start_receive(c);
}

static void on_closed(rpc_call *c) {
    if (c->close_cancelled)
        atomic_store(&c->cancelled, true);
    call_release(c);
}

static void handle_event(grpc_event ev) {
    rpc_tag *tag = ev.tag;
    switch (tag->kind) {
        case TAG_ACCEPTED:
            on_accepted(tag->call, ev.success != 0);
            break;
        case TAG_RECEIVED:
            on_received(tag->call, ev.success != 0);
            break;
        case TAG_CLOSED:
            on_closed(tag->call);
            break;
        case TAG_SENT:
            call_release(tag->call);
            break;
    }
}

static void *worker_main(void *arg) {
    rpc_worker *w = arg;
    for (;;) {
        grpc_event ev = grpc_completion_queue_next(w->cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN)
            return NULL;
        strata_tsan_acquire(ev.tag);
        if (ev.type == GRPC_OP_COMPLETE)
            handle_event(ev);
    }
}

/* ---------------------------------------------------------------------------------------------
 * Call accessors
 */

const char *rpc_call_method(const rpc_call *c) {
    return c->method->path;
}

bool rpc_call_metadata(const rpc_call *c, const char *key, const char **value, size_t *value_len) {
    if (c->bridge != NULL)
        return c->bridge->metadata(c->bridge->ctx, key, value, value_len);
    size_t key_len = strlen(key);
    for (size_t i = 0; i < c->metadata.count; i++) {
        const grpc_metadata *md = &c->metadata.metadata[i];
        if (GRPC_SLICE_LENGTH(md->key) != key_len ||
            strncasecmp((const char *)GRPC_SLICE_START_PTR(md->key), key, key_len) != 0)
            continue;
        *value = (const char *)GRPC_SLICE_START_PTR(md->value);
        *value_len = GRPC_SLICE_LENGTH(md->value);
        return true;
    }
    return false;
}

const char *rpc_call_peer(const rpc_call *c) {
    if (c->bridge != NULL)
        return c->bridge->peer != NULL ? c->bridge->peer : unknown_peer;
    return c->peer != NULL ? c->peer : unknown_peer;
}

int64_t rpc_call_deadline_remaining_ns(const rpc_call *c) {
    if (c->bridge != NULL)
        return c->bridge->deadline_ns == INT64_MAX ? INT64_MAX
                                                   : c->bridge->deadline_ns - strata_monotonic_ns();
    gpr_timespec deadline = gpr_convert_clock_type(c->details.deadline, GPR_CLOCK_MONOTONIC);
    if (gpr_time_cmp(deadline, gpr_inf_future(GPR_CLOCK_MONOTONIC)) == 0)
        return INT64_MAX;
    gpr_timespec left = gpr_time_sub(deadline, gpr_now(GPR_CLOCK_MONOTONIC));
    return left.tv_sec * INT64_C(1000000000) + left.tv_nsec;
}

bool rpc_call_is_cancelled(rpc_call *c) {
    return atomic_load(&c->cancelled) || rpc_call_deadline_remaining_ns(c) <= 0;
}

/* ---------------------------------------------------------------------------------------------
 * Bridged calls
 */

int rpc_server_call_bridged(rpc_server *s, const char *path, const uint8_t *request,
                            size_t request_len, const rpc_bridge *bridge, strata_error *err) {
    const rpc_method *m = NULL;
    size_t len = strlen(path);
    for (size_t i = 0; i < s->n_methods && m == NULL; i++)
        if (s->methods[i].path_len == len && memcmp(s->methods[i].path, path, len) == 0)
            m = &s->methods[i];
    if (m == NULL) {
        atomic_fetch_add(&s->unimplemented, 1);
        return strata_error_set(err, STRATA_UNIMPLEMENTED, "unknown method %.200s", path);
    }
    if (m->stream_max_bytes > 0)
        return strata_error_set(err, STRATA_UNIMPLEMENTED,
                                "%.200s is a client-streaming method: call it over gRPC (HTTP/2)",
                                path);
    rpc_call *c = calloc(1, sizeof *c);
    if (c == NULL)
        return strata_error_oom(err);
    c->server = s;
    c->method = m;
    c->bridge_copy = *bridge;
    c->bridge = &c->bridge_copy;
    atomic_init(&c->cancelled, false);
    atomic_init(&c->finished, false);
    atomic_init(&c->refs, 1);
    count_call(s, +1, false);
    atomic_fetch_add(&m->counters->started, 1);
    atomic_fetch_add(&m->counters->in_flight, 1);
    c->handled = admit_call(s);
    if (!c->handled)
        rpc_call_finish(c, STRATA_UNAVAILABLE, "server is shutting down", NULL, 0);
    else if (m->sync_handler != NULL)
        run_sync_handler(c, request, request_len);
    else
        m->handler(c, request, request_len, m->arg);
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * Server lifecycle
 */

static int create_queues(rpc_server *s, int threads, strata_error *err) {
    s->workers = calloc((size_t)threads, sizeof(*s->workers));
    if (s->workers == NULL)
        return strata_error_oom(err);
    s->shutdown_cq = grpc_completion_queue_create_for_next(NULL);
    grpc_server_register_completion_queue(s->grpc, s->shutdown_cq, NULL);
    for (int i = 0; i < threads; i++) {
        s->workers[i].server = s;
        s->workers[i].cq = grpc_completion_queue_create_for_next(NULL);
        grpc_server_register_completion_queue(s->grpc, s->workers[i].cq, NULL);
        s->n_workers++;
    }
    return 0;
}

static bool is_set(const char *s) {
    return s != NULL && s[0] != '\0';
}

/* TLS credentials from the options' PEM files (mutual TLS with a client CA file). */
static grpc_server_credentials *tls_credentials(const rpc_server_options *o, strata_error *err) {
    char *cert = NULL, *key = NULL, *ca = NULL;
    grpc_server_credentials *creds = NULL;
    if (strata_textfile_read(o->tls_cert_file, "rpc: tls cert_file", &cert, NULL, err) != 0 ||
        strata_textfile_read(o->tls_key_file, "rpc: tls key_file", &key, NULL, err) != 0 ||
        (is_set(o->tls_client_ca_file) &&
         strata_textfile_read(o->tls_client_ca_file, "rpc: tls client_ca_file", &ca, NULL, err) !=
             0))
        goto out;
    grpc_ssl_pem_key_cert_pair pair = {.private_key = key, .cert_chain = cert};
    creds = grpc_ssl_server_credentials_create_ex(
        ca, &pair, 1,
        ca != NULL ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                   : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE,
        NULL);
    if (creds == NULL)
        strata_error_set(err, STRATA_INVALID_ARGUMENT,
                         "rpc: tls: grpc refused the certificate, key or client CA");
out:
    free(cert);
    free(key);
    free(ca);
    return creds;
}

static int bind_port(rpc_server *s, const rpc_server_options *o, strata_error *err) {
    bool tls = is_set(o->tls_cert_file) || is_set(o->tls_key_file);
    if (tls && !(is_set(o->tls_cert_file) && is_set(o->tls_key_file)))
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "rpc: tls needs both cert_file and key_file");
    if (!tls && is_set(o->tls_client_ca_file))
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "rpc: tls client_ca_file needs cert_file and key_file");
    grpc_server_credentials *creds =
        tls ? tls_credentials(o, err) : grpc_insecure_server_credentials_create();
    if (creds == NULL)
        return -1;
    s->port = grpc_server_add_http2_port(s->grpc, o->listen_address, creds);
    grpc_server_credentials_release(creds);
    if (s->port == 0)
        return strata_error_set(err, STRATA_UNAVAILABLE, "rpc: cannot listen on %s%s",
                                o->listen_address,
                                tls ? " (or the TLS certificate and key do not match)" : "");
    return 0;
}

static int check_options(const rpc_server_options *o, strata_error *err) {
    if (o == NULL || o->listen_address == NULL || o->listen_address[0] == '\0')
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "rpc: listen address missing");
    if (o->threads < 0 || o->threads > 256)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "rpc: thread count %d out of range 0..256", o->threads);
    return 0;
}

rpc_server *rpc_server_new(const rpc_server_options *o, strata_error *err) {
    if (check_options(o, err) != 0)
        return NULL;
    rpc_server *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        strata_error_oom(err);
        return NULL;
    }
    if (strata_mutex_init(&s->lock, err) != 0) {
        free(s);
        return NULL;
    }
    if (strata_cond_init(&s->change, true, err) != 0) {
        pthread_mutex_destroy(&s->lock);
        free(s);
        return NULL;
    }
    atomic_init(&s->unimplemented, 0);
    grpc_init();
    grpc_arg args[3];
    rpc_message_size_args(args, o->max_receive_message_bytes, o->max_send_message_bytes);
    args[2].type = GRPC_ARG_INTEGER;
    args[2].key = GRPC_ARG_MAX_METADATA_SIZE;
    args[2].value.integer = RPC_SERVER_MAX_METADATA_BYTES;
    grpc_channel_args channel_args = {3, args};
    s->grpc = grpc_server_create(&channel_args, NULL);
    s->auth = o->auth;
    int threads = o->threads == 0 ? RPC_DEFAULT_THREADS : o->threads;
    if (create_queues(s, threads, err) != 0 || bind_port(s, o, err) != 0) {
        rpc_server_shutdown(s, 0);
        return NULL;
    }
    return s;
}

int rpc_server_port(const rpc_server *s) {
    return s->port;
}

static int check_method_path(const rpc_server *s, const char *path, strata_error *err) {
    if (s->started)
        return strata_error_set(err, STRATA_FAILED_PRECONDITION,
                                "rpc: method %s registered after start", path);
    const char *slash = path[0] == '/' ? strchr(path + 1, '/') : NULL;
    if (slash == NULL || slash == path + 1 || slash[1] == '\0' || strchr(slash + 1, '/') != NULL)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "rpc: method path \"%s\" is not /service/method", path);
    for (size_t i = 0; i < s->n_methods; i++) {
        if (strcmp(s->methods[i].path, path) == 0)
            return strata_error_set(err, STRATA_ALREADY_EXISTS, "rpc: method %s registered twice",
                                    path);
    }
    return 0;
}

static int add_method(rpc_server *s, const char *path, rpc_method m, strata_error *err) {
    if (check_method_path(s, path, err) != 0)
        return -1;
    if (STRATA_ARRAY_RESERVE_OR_OOM(s->methods, s->cap_methods, s->n_methods + 1, err) != 0)
        return -1;
    m.path = strdup(path);
    m.path_len = strlen(path);
    m.counters = calloc(1, sizeof(*m.counters));
    if (m.path == NULL || m.counters == NULL) {
        free(m.path);
        free(m.counters);
        return strata_error_oom(err);
    }
    s->methods[s->n_methods++] = m;
    return 0;
}

int rpc_server_add_method(rpc_server *s, const char *path, rpc_handler handler, void *arg,
                          strata_error *err) {
    rpc_method m = {.handler = handler, .arg = arg};
    return add_method(s, path, m, err);
}

int rpc_server_add_sync_method(rpc_server *s, const char *path, rpc_sync_handler handler, void *arg,
                               strata_error *err) {
    rpc_method m = {.sync_handler = handler, .arg = arg};
    return add_method(s, path, m, err);
}

int rpc_server_add_client_stream_method(rpc_server *s, const char *path, rpc_handler handler,
                                        void *arg, size_t max_bytes, size_t max_calls,
                                        strata_error *err) {
    if (max_bytes == 0 || max_calls == 0)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "rpc: a client-streaming method needs size and call limits");
    rpc_method m = {.handler = handler,
                    .arg = arg,
                    .stream_max_bytes = max_bytes,
                    .stream_max_calls = max_calls};
    return add_method(s, path, m, err);
}

bool rpc_stream_next(const uint8_t **p, const uint8_t *end, const uint8_t **message, size_t *len) {
    uint64_t n;
    if (*p >= end || !strata_uvarint_get(p, end, &n) || n > (uint64_t)(end - *p))
        return false;
    *message = *p;
    *len = (size_t)n;
    *p += n;
    return true;
}

int rpc_server_start(rpc_server *s, strata_error *err) {
    if (s->started)
        return strata_error_set(err, STRATA_FAILED_PRECONDITION, "rpc: server already started");
    for (size_t i = 0; i < s->n_workers; i++) {
        if (pthread_create(&s->workers[i].thread, NULL, worker_main, &s->workers[i]) != 0)
            return strata_error_set(err, STRATA_RESOURCE_EXHAUSTED,
                                    "rpc: cannot start worker thread");
        s->workers[i].thread_running = true;
    }
    grpc_server_start(s->grpc);
    s->started = true;
    for (size_t i = 0; i < s->n_workers; i++) {
        for (int k = 0; k < REQUEST_SLOTS_PER_QUEUE; k++) {
            if (post_request_slot(&s->workers[i]) != 0)
                return strata_error_set(err, STRATA_RESOURCE_EXHAUSTED,
                                        "rpc: cannot post accept slots");
        }
    }
    return 0;
}

/* Phase one of shutdown: new calls are answered UNAVAILABLE while the calls already handed to
 * handlers finish. Returns false if some are still running at `deadline_ns` (monotonic). This
 * phase exists because grpc's own graceful shutdown (GOAWAY, then closing the connection when its
 * last stream ends) lets the client's late frames reset the connection, which can destroy the
 * last responses before the client reads them. */
static bool drain_handled_calls(rpc_server *s, int64_t deadline_ns) {
    struct timespec until = {.tv_sec = deadline_ns / STRATA_NS_PER_SEC,
                             .tv_nsec = deadline_ns % STRATA_NS_PER_SEC};
    pthread_mutex_lock(&s->lock);
    s->draining = true;
    int rc = 0;
    while (s->handled > 0 && rc == 0)
        rc = pthread_cond_timedwait(&s->change, &s->lock, &until);
    bool drained = s->handled == 0;
    pthread_mutex_unlock(&s->lock);
    return drained;
}

/* Phase two: grpc stops accepting; if calls are still running they are cancelled. */
static void stop_grpc_server(rpc_server *s, bool cancel) {
    static char shutdown_tag;
    grpc_server_shutdown_and_notify(s->grpc, s->shutdown_cq, &shutdown_tag);
    if (cancel)
        grpc_server_cancel_all_calls(s->grpc);
    grpc_completion_queue_next(s->shutdown_cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
}

static void wait_until_no_calls(rpc_server *s) {
    pthread_mutex_lock(&s->lock);
    while (s->live > 0)
        pthread_cond_wait(&s->change, &s->lock);
    pthread_mutex_unlock(&s->lock);
}

/* Shuts a completion queue down and consumes what is left on it. */
static void drain_queue(grpc_completion_queue *cq) {
    grpc_completion_queue_shutdown(cq);
    for (;;) {
        grpc_event ev = grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN)
            break;
    }
    grpc_completion_queue_destroy(cq);
}

static void stop_workers(rpc_server *s) {
    for (size_t i = 0; i < s->n_workers; i++) {
        rpc_worker *w = &s->workers[i];
        if (w->thread_running) {
            grpc_completion_queue_shutdown(w->cq);
            pthread_join(w->thread, NULL);
            grpc_completion_queue_destroy(w->cq);
        } else {
            drain_queue(w->cq);
        }
    }
    drain_queue(s->shutdown_cq);
}

static void free_methods(rpc_server *s) {
    for (size_t i = 0; i < s->n_methods; i++) {
        free(s->methods[i].path);
        free(s->methods[i].counters);
    }
    free(s->methods);
}

void rpc_server_shutdown(rpc_server *s, int64_t grace_ns) {
    if (s == NULL)
        return;
    if (s->shutdown_cq != NULL) {
        int64_t deadline = strata_monotonic_ns() + (grace_ns > 0 ? grace_ns : 0);
        bool drained = !s->started || drain_handled_calls(s, deadline);
        stop_grpc_server(s, !drained);
        wait_until_no_calls(s);
    }
    grpc_server_destroy(s->grpc);
    if (s->shutdown_cq != NULL)
        stop_workers(s);
    free(s->workers);
    free_methods(s);
    pthread_cond_destroy(&s->change);
    pthread_mutex_destroy(&s->lock);
    free(s);
    grpc_shutdown();
}

/* ---------------------------------------------------------------------------------------------
 * Metrics
 */

size_t rpc_server_method_count(const rpc_server *s) {
    return s->n_methods;
}

int rpc_server_method_stats(rpc_server *s, size_t index, rpc_method_stats *out) {
    if (index >= s->n_methods)
        return -1;
    method_counters *m = s->methods[index].counters;
    out->method = s->methods[index].path;
    out->started = atomic_load(&m->started);
    out->in_flight = atomic_load(&m->in_flight);
    for (int i = 0; i < RPC_STATUS_COUNT; i++)
        out->finished[i] = atomic_load(&m->finished[i]);
    return 0;
}

uint64_t rpc_server_unimplemented_calls(rpc_server *s) {
    return atomic_load(&s->unimplemented);
}
