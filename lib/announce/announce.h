/*
 * announce.h - block announcements between processes over nng pub/sub.
 *
 * Why. A querier finds blocks by listing the bucket every sync_interval (about 1 s). Writers of
 * blocks (ingesters, later the compactor) also announce each block they commit, so a querier in
 * another process can add it at once instead of waiting for its next listing. Announcements are
 * only a shortcut: the listing stays the source of truth, so losing any announcement delays a
 * block by at most one listing and never loses it.
 *
 * Shape. A writer runs one announce_publisher, an nng PUB socket listening on a URL such as
 * "tcp://0.0.0.0:7072". A querier runs one announce_subscriber: one SUB socket that dials every
 * configured publisher in the background (NNG_FLAG_NONBLOCK; nng redials every 100 ms to 1 s
 * after a refused or lost connection), so publishers and subscribers start in any order. A
 * receive thread validates each message and calls the callback with its tenant and ULID.
 *
 * Wire format (version 1), one message per block, ASCII:
 *
 *   "strata-block v1 <tenant> <ulid>\n"
 *
 * where tenant is 1-150 characters of [A-Za-z0-9_.-] other than "." and ".." (the ingester's
 * tenant rule, so it is safe as a bucket prefix) and ulid is the canonical 26-character upper-case
 * Crockford base32 form with a first character 0-7 (as ulid_format writes it, i.e. the block's
 * directory name). Anything else (another magic or version, extra or missing fields, a missing
 * newline, NUL bytes, more than ANNOUNCE_MESSAGE_MAX bytes) is dropped and counted as malformed;
 * the callback never sees it. A future v2 must be understood by subscribers before publishers
 * send it.
 *
 * Failure modes, all accepted because the bucket listing repairs them within one sync_interval:
 * - Nobody listening: pub/sub has no acknowledgements. A message published while a subscriber is
 *   not (yet) connected, including the first few hundred milliseconds after it dials, is lost.
 * - Slow subscriber: each subscriber connection has a queue of ANNOUNCE_QUEUE_DEPTH messages on
 *   both ends; when a slow callback lets it fill, newer messages are dropped for that subscriber
 *   only. Publishing never blocks, so it is safe on the ingester's path before acknowledgements.
 * - Restarts: a restarted publisher is redialled within about 1 s; a restarted subscriber gets no
 *   replay (the querier lists the bucket when it starts anyway).
 * - Duplicates and stale news: two writers may announce the same block, and an announced block
 *   may be known already or deleted since. The callback must be idempotent and must read the
 *   block's meta.json before trusting it; an announcement is a hint, not a proof.
 * - Hostile peers: subscribers only dial configured addresses and validate every message, so a
 *   bad publisher can at worst make a querier look for blocks that do not exist. A message over
 *   ANNOUNCE_RECV_MAX bytes makes nng close that TCP connection (it is then redialled).
 * - Ordering: in order per publisher; no order across publishers.
 *
 * Threads. Publishing is thread-safe. The subscriber's callback runs on its receive thread, one
 * call at a time; it must be quick and must not free the subscriber. announce_subscriber_free
 * stops the thread (it polls every 100 ms), joins it, then closes the socket, so it returns within
 * about 100 ms plus one callback, and no callback runs after it. (Closing first would be simpler,
 * but nng 1.5.2 can deadlock closing a socket another thread is receiving on: nanomsg/nng#1543.)
 * The publisher must not be freed while another thread is in announce_publish.
 *
 * nng 1.5.2 defect: nng_close can hang for ever when the socket's TCP connection is receiving at
 * that moment (reproduced on this machine: a SUB socket fed by a busy PUB, whether or not anyone
 * calls recv; nng's single reaper thread then stays stuck, so later closes in the process hang as
 * well). Both free functions therefore close on a helper thread and wait at most 1 s; past that
 * they return anyway and abandon the socket (its memory stays with nng). Free is meant for process
 * shutdown; do not create and free subscribers in a loop under traffic.
 */
#ifndef STRATA_ANNOUNCE_H
#define STRATA_ANNOUNCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "common/tenant.h"

/* Longest valid message: "strata-block v1 " + 150-character tenant + " " + 26 + "\n" = 194. */
#define ANNOUNCE_MESSAGE_MAX 256
/* Messages above this size are refused by nng itself (the TCP connection is closed). */
#define ANNOUNCE_RECV_MAX 4096
/* Queue depth per connection on the publishing and on the subscribing side. */
#define ANNOUNCE_QUEUE_DEPTH 1024
/* Dial URLs per subscriber. */
#define ANNOUNCE_MAX_PUBLISHERS 64
#define ANNOUNCE_TENANT_MAX STRATA_TENANT_MAX_LENGTH
#define ANNOUNCE_ULID_LEN 26

/* ---- publisher ---------------------------------------------------------------------------- */

typedef struct announce_publisher announce_publisher;

typedef struct announce_publisher_stats {
    uint64_t published; /* messages handed to nng (delivered to whoever was connected) */
    uint64_t failed;    /* announce_publish calls that returned -1 */
} announce_publisher_stats;

/* Opens a PUB socket listening on url ("tcp://0.0.0.0:7072", "tcp://127.0.0.1:0" for any free
 * port, "inproc://name"). NULL on failure: INVALID_ARGUMENT for a bad URL, UNAVAILABLE when the
 * address cannot be bound (for example in use). */
announce_publisher *announce_publisher_new(const char *url, strata_error *err);
/* Sends one announcement to every connected subscriber; never blocks. INVALID_ARGUMENT if tenant
 * or ulid is not valid (see above), UNAVAILABLE if nng refused the message. */
int announce_publish(announce_publisher *pub, const char *tenant, const char *ulid,
                     strata_error *err);
/* The TCP port the publisher is bound to (useful after ":0"), or 0 for other transports. */
int announce_publisher_port(const announce_publisher *pub);
void announce_publisher_get_stats(const announce_publisher *pub, announce_publisher_stats *out);
/* Closes the socket; messages still queued for slow subscribers are discarded. NULL is a no-op. */
void announce_publisher_free(announce_publisher *pub);

/* ---- subscriber --------------------------------------------------------------------------- */

typedef struct announce_subscriber announce_subscriber;

/* Called on the receive thread for each valid announcement; tenant and ulid are NUL-terminated
 * and valid only during the call. */
typedef void (*announce_block_fn)(void *ctx, const char *tenant, const char *ulid);

typedef struct announce_subscriber_stats {
    uint64_t received;  /* valid announcements passed to the callback */
    uint64_t malformed; /* messages dropped by validation */
} announce_subscriber_stats;

/* Opens a SUB socket, starts dialling each of the n URLs (1 <= n <= ANNOUNCE_MAX_PUBLISHERS) in
 * the background and starts the receive thread. A publisher that is down is retried forever, so
 * only a malformed or unsupported URL fails here (INVALID_ARGUMENT). NULL on failure. */
announce_subscriber *announce_subscriber_new(const char *const *urls, size_t n,
                                             announce_block_fn callback, void *ctx,
                                             strata_error *err);
/* Counters for /metrics, readable from any thread. */
void announce_subscriber_get_stats(const announce_subscriber *sub, announce_subscriber_stats *out);
/* Stops and joins the receive thread, closes the socket and frees everything. NULL is a no-op.
 * Must not be called from the callback. */
void announce_subscriber_free(announce_subscriber *sub);

/* ---- validation (shared by both ends, exposed for tests and callers) --------------------------
 */

/* The tenant rule of common/tenant.h (1-150 characters of [A-Za-z0-9_.-], not "." or ".."). */
bool announce_tenant_is_valid(const char *tenant, size_t len);
/* Exactly 26 upper-case Crockford base32 characters, the first 0-7. */
bool announce_ulid_is_valid(const char *ulid, size_t len);
/* Parses one message of len bytes. On success copies the fields (NUL-terminated) into tenant
 * (ANNOUNCE_TENANT_MAX + 1 bytes) and ulid (ANNOUNCE_ULID_LEN + 1 bytes) and returns true. */
bool announce_parse_message(const void *data, size_t len, char *tenant, char *ulid);

#endif
