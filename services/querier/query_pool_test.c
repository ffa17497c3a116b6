/*
 * query_pool_test.c - the query thread pool: queued tasks run on at most `threads` threads at once
 * (the bound HTTP and gRPC queries share), query_pool_run returns only after its task ran, a full
 * queue refuses at once without running the task, and freeing the pool runs what is queued.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "query_pool.h"

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static atomic_int running, max_running, ran;
static atomic_bool gate_open; /* busy tasks wait for it: overlap is a condition, not a timing */

static void busy_task(void *arg) {
    atomic_bool *finished = arg;
    int now = atomic_fetch_add(&running, 1) + 1;
    int seen = atomic_load(&max_running);
    while (now > seen && !atomic_compare_exchange_weak(&max_running, &seen, now))
        ;
    while (!atomic_load(&gate_open))
        sleep_ms(1);
    atomic_fetch_sub(&running, 1);
    atomic_fetch_add(&ran, 1);
    atomic_store(finished, true);
}

typedef struct caller {
    query_pool *pool;
    atomic_bool finished;
    bool finished_at_return;
    int rc;
} caller;

static void *call_run(void *arg) {
    caller *c = arg;
    strata_error err;
    c->rc = query_pool_run(c->pool, busy_task, &c->finished, &err);
    c->finished_at_return = atomic_load(&c->finished);
    return NULL;
}

static void test_run_waits_and_threads_bound_concurrency(void **state) {
    (void)state;
    enum { CALLERS = 6 };
    strata_error err;
    query_pool *pool = NULL;
    assert_int_equal(query_pool_new(2, 16, &pool, &err), 0);
    atomic_store(&running, 0);
    atomic_store(&max_running, 0);
    atomic_store(&ran, 0);
    atomic_store(&gate_open, false);
    caller callers[CALLERS];
    pthread_t threads[CALLERS];
    for (int i = 0; i < CALLERS; i++) {
        callers[i] = (caller){.pool = pool, .rc = -2};
        atomic_init(&callers[i].finished, false);
        assert_int_equal(pthread_create(&threads[i], NULL, call_run, &callers[i]), 0);
    }
    /* Both threads take a task and hold it: wait for that (60 s at most, for loaded machines),
     * then give a third task, were the bound broken, time to start before opening the gate. */
    for (int waited = 0; atomic_load(&running) < 2 && waited < 60000; waited++)
        sleep_ms(1);
    assert_int_equal(atomic_load(&running), 2);
    sleep_ms(50);
    assert_int_equal(atomic_load(&running), 2);
    for (int i = 0; i < CALLERS; i++) /* nobody returned while the tasks were held */
        assert_false(atomic_load(&callers[i].finished));
    atomic_store(&gate_open, true);
    for (int i = 0; i < CALLERS; i++) {
        pthread_join(threads[i], NULL);
        assert_int_equal(callers[i].rc, 0);
        assert_true(callers[i].finished_at_return);
    }
    assert_int_equal(atomic_load(&ran), CALLERS);
    assert_int_equal(atomic_load(&max_running), 2);
    query_pool_free(pool);
}

static atomic_bool release_blocker;
static atomic_int blocker_started;

static void blocking_task(void *arg) {
    (void)arg;
    atomic_fetch_add(&blocker_started, 1);
    while (!atomic_load(&release_blocker))
        sleep_ms(1);
}

static void counting_task(void *arg) {
    atomic_fetch_add((atomic_int *)arg, 1);
}

static void test_full_queue_refuses_without_running(void **state) {
    (void)state;
    strata_error err;
    query_pool *pool = NULL;
    assert_int_equal(query_pool_new(1, 1, &pool, &err), 0);
    atomic_store(&release_blocker, false);
    atomic_store(&blocker_started, 0);
    assert_int_equal(query_pool_submit(pool, blocking_task, NULL, &err), 0);
    while (atomic_load(&blocker_started) == 0)
        sleep_ms(1);
    atomic_int queued_ran = 0, refused_ran = 0;
    assert_int_equal(query_pool_submit(pool, counting_task, &queued_ran, &err), 0);
    assert_int_equal(query_pool_run(pool, counting_task, &refused_ran, &err), -1);
    assert_int_equal(err.code, STRATA_RESOURCE_EXHAUSTED);
    assert_non_null(strstr(err.message, "too many queries waiting"));
    atomic_store(&release_blocker, true);
    query_pool_free(pool); /* runs what is queued before returning */
    assert_int_equal(atomic_load(&queued_ran), 1);
    assert_int_equal(atomic_load(&refused_ran), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_run_waits_and_threads_bound_concurrency),
        cmocka_unit_test(test_full_queue_refuses_without_running),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
