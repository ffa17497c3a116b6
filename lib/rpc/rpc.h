/*
 * rpc.h - unary gRPC server and client on grpc core's C API (libgrpc, >= 1.45).
 *
 * The module is called "rpc" so that its header can never be confused with <grpc/grpc.h>. It hides
 * grpc core entirely: callers see method paths, byte buffers, metadata, status codes
 * (strata_status, which are gRPC's codes) and strata_error values. Messages are opaque bytes; the
 * services encode and decode them with protobuf-c.
 *
 * SERVER
 *
 *   rpc_server_new        binds the listen address (port 0 picks a free port, see rpc_server_port)
 *   rpc_server_add_method registers "/package.Service/Method" -> handler; any number of methods of
 *                         any number of services, before start
 *   rpc_server_start      starts the worker threads and begins accepting calls
 *   rpc_server_shutdown   stops accepting, lets calls in flight finish for a grace period, cancels
 *                         the rest, joins the threads and frees everything
 *
 * Threads and completion queues. Each worker thread owns one grpc completion queue and keeps a few
 * grpc_server_request_call slots posted on it. Every call is served on the queue that accepted it,
 * so all grpc events of one call are handled by one worker thread. Per-call state (struct rpc_call)
 * is heap-allocated; the tags handed to grpc point into it, one per operation: "accepted",
 * "request message received", "call closed" and "status sent".
 *
 * Call lifecycle. When a call arrives the worker starts two receive operations: the request message
 * and "close on server" (which completes when the call is over, and tells whether the client
 * cancelled, the deadline expired or the connection died). Once the request message is in, the
 * handler runs on the worker thread with the request as one contiguous buffer and an rpc_call
 * handle. The handler answers with rpc_call_finish() (or rpc_call_finish_buffer()), either before
 * it returns or later from any thread: the ingester, for example, acknowledges a write only once
 * the block holding it is durable. Handlers must not block; a worker thread blocked in a handler
 * stalls every call on its queue.
 *
 * Ownership. The rpc_call is reference counted internally (the close operation holds one
 * reference, the handler the other). The handler's reference ends with rpc_call_finish: after that
 * call the handle, the request bytes and any metadata pointers must not be used. Every call handed
 * to a handler must be finished exactly once, including calls that were cancelled meanwhile
 * (finishing a cancelled call is safe and cheap; the status then goes nowhere). Unknown methods are
 * answered with UNIMPLEMENTED by the server itself.
 *
 * Shutdown happens in two phases. First the server drains: calls arriving from then on are
 * answered UNAVAILABLE ("server is shutting down", which clients retry elsewhere) while the calls
 * already handed to handlers run to completion, for at most the grace period. Then grpc's own
 * shutdown closes the connections, cancelling whatever is still running. (Draining before grpc's
 * GOAWAY matters: grpc 1.51 closes a connection as soon as its last stream ends, and a client's
 * late frames then reset it, which can destroy responses the client has not read yet.)
 * rpc_server_shutdown returns only after every call handed to a handler has been finished, so
 * whatever finishes calls asynchronously (the ingester's flush loop) must keep running until it
 * returns; handlers that poll rpc_call_is_cancelled() can finish cancelled calls at once.
 *
 * Metrics. Each method keeps counters (started, in flight, finished by status code) readable at
 * any time with rpc_server_method_stats(); a call that the client cancelled or that ran past its
 * deadline counts as CANCELLED or DEADLINE_EXCEEDED whatever status the handler gave.
 *
 * CLIENT
 *
 *   rpc_channel_new / rpc_channel_free  one HTTP/2 connection (re)established lazily by grpc
 *   rpc_call_unary                      blocking unary call; thread-safe, any number of threads
 *                                       may call concurrently on one channel
 *
 * Client streaming (a request that is a stream of messages, one response: the DebuginfoService's
 * Upload) is served *collected*: the server gathers the stream's messages, up to a size limit given
 * at registration (RESOURCE_EXHAUSTED past it), and runs an (asynchronous) handler once the client
 * has half-closed, with the messages framed one after another (rpc_stream_next walks them);
 * rpc_call_client_stream is the client side. Such methods are gRPC only: bridged transports
 * (gRPC-Web, Connect unary) get UNIMPLEMENTED for them.
 *
 * Limits. Unary and collected client-streaming calls: server streaming and bidirectional calls are
 * not supported. TLS (and mutual TLS) on the server from PEM files in the options, on the client
 * from a CA file (and a client certificate) in the channel options. Messages are limited to 64 MiB
 * each way unless the options say otherwise. Method lookup is a linear scan (services have a
 * handful of methods).
 */
#ifndef STRATA_RPC_RPC_H
#define STRATA_RPC_RPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buffer.h"
#include "common/error.h"

#define RPC_DEFAULT_MAX_MESSAGE_BYTES ((size_t)64 << 20)
#define RPC_DEFAULT_THREADS 2
/* Number of status codes (OK .. UNAUTHENTICATED), the size of rpc_method_stats.finished. */
#define RPC_STATUS_COUNT 17

/* ---------------------------------------------------------------------------------------------
 * Server
 */

typedef struct rpc_server rpc_server;
typedef struct rpc_call rpc_call;

typedef struct rpc_server_options {
    /* "host:port", e.g. "0.0.0.0:7071" or "127.0.0.1:0" (port 0: any free port). Required. */
    const char *listen_address;
    /* Worker threads, one completion queue each; 0 means RPC_DEFAULT_THREADS. */
    int threads;
    /* Largest request and response message; 0 means RPC_DEFAULT_MAX_MESSAGE_BYTES. */
    size_t max_receive_message_bytes;
    size_t max_send_message_bytes;
    /* TLS: PEM files of the server's certificate (chain) and key. Both set: the port speaks only
     * TLS; both NULL or "": plaintext. tls_client_ca_file, optional, makes it mutual TLS: every
     * client must present a certificate signed by one of these CAs, or the handshake fails. Read
     * once, by rpc_server_new. */
    const char *tls_cert_file;
    const char *tls_key_file;
    const char *tls_client_ca_file;
    /* Authentication (common/auth.h), checked before every handler: a call without a known
     * bearer token or verified client certificate is answered UNAUTHENTICATED, one whose
     * x-scope-orgid its credential does not allow PERMISSION_DENIED. NULL: none. Must outlive
     * the server. */
    const struct strata_auth *auth;
} rpc_server_options;

/*
 * Asynchronous handler: runs on a worker thread with the request bytes (valid until the call is
 * finished) and must arrange for rpc_call_finish() to be called exactly once, now or later from any
 * thread. `arg` is the pointer given at registration.
 */
typedef void (*rpc_handler)(rpc_call *call, const uint8_t *request, size_t request_len, void *arg);

/*
 * Synchronous handler: appends the response to `response` and returns 0, or returns -1 with `err`
 * set (its code and message go to the client; a code of OK counts as UNKNOWN). Built on the same
 * path as rpc_handler; it must not block either.
 */
typedef int (*rpc_sync_handler)(rpc_call *call, const uint8_t *request, size_t request_len,
                                strata_buffer *response, strata_error *err, void *arg);

/* Creates a server bound to options->listen_address. Returns NULL with err set (INVALID_ARGUMENT
 * for bad options, UNAVAILABLE when the address cannot be bound, RESOURCE_EXHAUSTED). */
rpc_server *rpc_server_new(const rpc_server_options *options, strata_error *err);

/* The bound port (the one picked when the address said port 0). */
int rpc_server_port(const rpc_server *server);

/* Registers a method by full path ("/parca.profilestore.v1alpha1.ProfileStoreService/WriteRaw").
 * Only before rpc_server_start. Fails with INVALID_ARGUMENT for a path not of the form
 * "/service/method", ALREADY_EXISTS for a duplicate, FAILED_PRECONDITION after start. */
int rpc_server_add_method(rpc_server *server, const char *path, rpc_handler handler, void *arg,
                          strata_error *err);
int rpc_server_add_sync_method(rpc_server *server, const char *path, rpc_sync_handler handler,
                               void *arg, strata_error *err);

/* Registers a client-streaming method: handler runs once the client has sent its last message,
 * with request = every message, each preceded by its size as a uvarint (see rpc_stream_next); a
 * stream of more than max_bytes in all (> 0) is refused with RESOURCE_EXHAUSTED before that.
 * At most max_calls (> 0) such calls are held at once (collecting or handled, their bytes in
 * memory), so the method holds at most max_calls * max_bytes: a call beyond it is refused at
 * once with RESOURCE_EXHAUSTED, which clients retry. */
int rpc_server_add_client_stream_method(rpc_server *server, const char *path, rpc_handler handler,
                                        void *arg, size_t max_bytes, size_t max_calls,
                                        strata_error *err);
/* The next message of a collected client stream at [p, end): true with *message and *len set and
 * *p advanced; false at the end (or on a malformed frame, which the server never produces). */
bool rpc_stream_next(const uint8_t **p, const uint8_t *end, const uint8_t **message, size_t *len);
/* Starts the worker threads and accepting calls. On failure the server must still be given to
 * rpc_server_shutdown. */
int rpc_server_start(rpc_server *server, strata_error *err);

/* Stops accepting calls (new ones get UNAVAILABLE), waits up to grace_ns for the calls in flight
 * to complete, then cancels the rest, waits for their handlers to finish them, joins the workers
 * and frees the server. Works on a server that was never started. NULL is a no-op. */
void rpc_server_shutdown(rpc_server *server, int64_t grace_ns);

/* --- the call handle, valid in a handler until rpc_call_finish ------------------------------- */

/* Sends the status (code and optional message) and, when code is STRATA_OK, the response bytes
 * (copied). Callable from any thread, exactly once per call. */
void rpc_call_finish(rpc_call *call, strata_status code, const char *message, const void *response,
                     size_t response_len);

/* Like rpc_call_finish but takes the response's bytes without copying (for large responses);
 * `response` is left empty. */
void rpc_call_finish_buffer(rpc_call *call, strata_status code, const char *message,
                            strata_buffer *response);

/* Adds one trailing metadata entry to the call's status (e.g. a query's warnings), before
 * rpc_call_finish. key: lowercase letters, digits, '-', '_', '.'; value: printable ASCII. At most
 * one per call; -1 when refused. Not thread-safe against a concurrent finish. */
int rpc_call_set_trailer(rpc_call *call, const char *key, const char *value);

/* The method path, as registered. */
const char *rpc_call_method(const rpc_call *call);

/* Looks up request metadata by key, case-insensitively (gRPC lowercases keys): for example
 * "x-scope-orgid". Returns true and the value (not NUL-terminated) if present; with several
 * values for one key, the first. */
bool rpc_call_metadata(const rpc_call *call, const char *key, const char **value,
                       size_t *value_len);

/* The client's address as grpc reports it, e.g. "ipv4:127.0.0.1:53412" (never NULL). */
const char *rpc_call_peer(const rpc_call *call);

/* Time left until the call's deadline in ns: INT64_MAX when the client set none, <= 0 once it
 * has passed. */
int64_t rpc_call_deadline_remaining_ns(const rpc_call *call);

/* True once the call can no longer succeed: the client cancelled, the connection died, the
 * deadline passed or the server is past its shutdown grace period. Safe from any thread. */
bool rpc_call_is_cancelled(rpc_call *call);

/* --- bridged calls ---------------------------------------------------------------------------- */

/* A call that arrived by another transport (gRPC-Web or Connect on the HTTP port, lib/rpcweb): it
 * runs the same handler as a gRPC call of the method, through the same rpc_call functions. */
typedef struct rpc_bridge {
    /* Called exactly once, on whatever thread finishes the call, with the status and (when OK)
     * the response, whose bytes it may take (the buffer is freed after it returns), and the
     * call's trailing metadata entry (NULL, NULL when none). */
    void (*finish)(void *ctx, strata_status code, const char *message, strata_buffer *response,
                   const char *trailer_key, const char *trailer_value);
    /* rpc_call_metadata for this call (key lowercase). */
    bool (*metadata)(void *ctx, const char *key, const char **value, size_t *value_len);
    void *ctx;
    const char *peer;    /* rpc_call_peer; must outlive the call */
    int64_t deadline_ns; /* strata_monotonic_ns deadline; INT64_MAX: none */
} rpc_bridge;

/* Runs the method registered at path on request (valid until finish). Authentication is the
 * transport's. 0 when the call was handed over (finish follows, UNAVAILABLE while the server shuts
 * down); -1 with UNIMPLEMENTED for an unknown method, finish then not called. */
int rpc_server_call_bridged(rpc_server *server, const char *path, const uint8_t *request,
                            size_t request_len, const rpc_bridge *bridge, strata_error *err);

/* --- metrics -------------------------------------------------------------------------------- */

typedef struct rpc_method_stats {
    const char *method;                  /* path; valid while the server lives */
    uint64_t started;                    /* calls accepted */
    uint64_t in_flight;                  /* accepted, not yet over */
    uint64_t finished[RPC_STATUS_COUNT]; /* calls over, by final status code */
} rpc_method_stats;

/* Number of registered methods; stats are indexed 0 .. count-1 in registration order. */
size_t rpc_server_method_count(const rpc_server *server);
/* Fills *out with a snapshot of method `index`'s counters; returns -1 for a bad index. Each
 * counter is read atomically, the set is not a consistent snapshot. */
int rpc_server_method_stats(rpc_server *server, size_t index, rpc_method_stats *out);
/* Calls to methods nobody registered (answered UNIMPLEMENTED). */
uint64_t rpc_server_unimplemented_calls(rpc_server *server);

/* ---------------------------------------------------------------------------------------------
 * Client
 */

typedef struct rpc_channel rpc_channel;

typedef struct rpc_channel_options {
    /* 0 means RPC_DEFAULT_MAX_MESSAGE_BYTES. */
    size_t max_receive_message_bytes;
    size_t max_send_message_bytes;
    /* TLS: true, or any tls_* file set, makes the channel speak TLS. tls_ca_file: PEM CA
     * certificates to verify the server with (NULL: grpc's default roots). tls_cert_file and
     * tls_key_file, both or neither: the client certificate for mutual TLS. tls_server_name: the
     * name to verify the server's certificate against instead of the target's host. */
    bool tls;
    const char *tls_ca_file;
    const char *tls_cert_file;
    const char *tls_key_file;
    const char *tls_server_name;
    /* A file holding a bearer token (surrounding whitespace ignored), read once by
     * rpc_channel_new: every call then carries "authorization: Bearer <token>". */
    const char *bearer_token_file;
} rpc_channel_options;

typedef struct rpc_metadata {
    const char *key; /* any case; sent lowercased. Keys ending in "-bin" carry binary values. */
    const char *value;
    size_t value_len;
} rpc_metadata;

/* Creates a channel to "host:port" (or any grpc target URI). Connects lazily, so an unreachable
 * target shows up as UNAVAILABLE from rpc_call_unary. options may be NULL. Fails (NULL, err set)
 * only for a missing target or TLS files that cannot be read. */
rpc_channel *rpc_channel_new(const char *target, const rpc_channel_options *options,
                             strata_error *err);
/* Frees the channel; no call may be in progress on it. NULL is a no-op. */
void rpc_channel_free(rpc_channel *channel);

/*
 * Calls `method` with the request bytes and metadata, waiting at most timeout_ns (<= 0: no
 * deadline). On OK returns 0 with `response` holding exactly the response message (previous
 * contents are replaced). Otherwise returns -1 with err->code the call's status and err->message
 * the server's message (or grpc's description: DEADLINE_EXCEEDED on timeout, UNAVAILABLE when
 * nobody listens, INVALID_ARGUMENT for an illegal metadata key).
 */
int rpc_call_unary(rpc_channel *channel, const char *method, const void *request,
                   size_t request_len, const rpc_metadata *metadata, size_t metadata_count,
                   int64_t timeout_ns, strata_buffer *response, strata_error *err);

/* One message of a client stream. */
typedef struct rpc_stream_message {
    const void *data;
    size_t len;
} rpc_stream_message;

/* A client-streaming call: sends messages[0..n) in order, half-closes and waits for the one
 * response, as rpc_call_unary does. A server that fails the call early stops the sending; its
 * status is what comes back. */
int rpc_call_client_stream(rpc_channel *channel, const char *method,
                           const rpc_stream_message *messages, size_t n_messages,
                           const rpc_metadata *metadata, size_t metadata_count, int64_t timeout_ns,
                           strata_buffer *response, strata_error *err);

#endif
