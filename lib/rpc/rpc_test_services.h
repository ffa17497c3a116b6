/*
 * rpc_test_services.h - test services shared by rpc_test and rpc_echo_server (not a library API).
 *
 *   /test.Echo/Echo          sync: returns the request
 *   /test.Echo/Metadata      sync: request is a metadata key; returns its value or NOT_FOUND
 *   /test.Echo/Peer          sync: returns the peer address
 *   /test.Echo/Deadline      sync: returns the time left in ms, or "none"
 *   /test.Echo/Fail          sync: fails with INVALID_ARGUMENT "bad request: <request>"
 *   /test.Other/Upper        sync: returns the request in upper case (a second service)
 *   /test.Async/Delay        async: request "<ms>:<payload>"; a delayer thread answers the payload
 *                            after <ms> milliseconds
 *   /test.Async/WaitCancel   async: answered only once the call is cancelled (or after 30 s)
 *   /test.Async/Gate         async: returns the request once test_delayer_open_gate is called (or
 *                            after 30 s)
 *   /test.Stream/Join        client stream: answers "<count>:<m1>|<m2>|..." (64 KiB, 4 at once)
 *   /test.Stream/Gated       client stream held like Gate (returns the framed stream); at most 2
 *                            at once
 */
#ifndef STRATA_RPC_TEST_SERVICES_H
#define STRATA_RPC_TEST_SERVICES_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "rpc/rpc.h"

typedef struct test_delay_item test_delay_item;

/* Finishes asynchronous calls from its own thread, like the ingester's flush loop does. */
typedef struct test_delayer {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    test_delay_item *items; /* guarded by lock */
    size_t pending;         /* guarded by lock */
    size_t peak_pending;    /* guarded by lock */
    bool stop;              /* guarded by lock */
    atomic_bool gate_open;
    atomic_size_t finished;
    atomic_size_t finished_cancelled; /* calls that were cancelled when finished */
} test_delayer;

int test_delayer_start(test_delayer *d);
/* Stops the thread once every queued call has been finished. */
void test_delayer_stop(test_delayer *d);
size_t test_delayer_peak(test_delayer *d);
/* Releases the calls held by /test.Async/Gate, and every later one. */
void test_delayer_open_gate(test_delayer *d);

int test_register_services(rpc_server *server, test_delayer *delayer, strata_error *err);

#endif
