/*
 * block_workers_test.c - the block driver's helper threads: a pass runs slot 0 on its caller and
 * the others on helpers, each at most once, and its work is done exactly once; passes one after
 * another reuse the helpers instead of starting threads; a pool without helpers, or one whose
 * helpers are all busy (a pass run from inside a helper), still finishes every pass on its
 * callers; concurrent passes each finish.
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

#include "block_workers.h"

#define MAX_ITEMS 256
#define MAX_SLOTS 16

static void sleep_us(long us) {
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000L};
    nanosleep(&ts, NULL);
}

/* A pass's work: items taken one at a time by whichever slot comes first, as the block driver
 * takes blocks. */
typedef struct work {
    block_workers *pool;
    size_t slots;
    size_t n_items;
    atomic_size_t next;
    atomic_int done[MAX_ITEMS];      /* times each item was done */
    atomic_int slot_runs[MAX_SLOTS]; /* times each slot ran */
    atomic_int bad_slots;            /* slots out of the pass's range */
    pthread_t caller;
    atomic_bool slot0_on_caller;
    bool wait_for_helper; /* slot 0 starts once a helper has taken a slot (or after 10 s) */
    long sleep_us;        /* per item */
    size_t nested_items;  /* > 0: each item runs a pass of its own with this many items */
    atomic_int nested_ok; /* nested passes whose items were all done once */
} work;

static void run_pass(work *w);

static void work_init(work *w, block_workers *p, size_t slots, size_t n_items) {
    memset(w, 0, sizeof *w);
    w->pool = p;
    w->slots = slots;
    w->n_items = n_items;
}

/* Whether every item was done once, slot 0 ran once on the caller and no slot ran twice. */
static bool done_once(work *w) {
    bool ok = atomic_load(&w->bad_slots) == 0 && atomic_load(&w->slot_runs[0]) == 1 &&
              atomic_load(&w->slot0_on_caller);
    for (size_t i = 0; i < w->n_items; i++)
        ok &= atomic_load(&w->done[i]) == 1;
    for (size_t s = 1; s < w->slots; s++)
        ok &= atomic_load(&w->slot_runs[s]) <= 1;
    return ok;
}

static void do_work(void *arg, size_t slot) {
    work *w = arg;
    if (slot >= w->slots || slot >= MAX_SLOTS) { /* checked by expect_done_once */
        atomic_fetch_add(&w->bad_slots, 1);
        return;
    }
    atomic_fetch_add(&w->slot_runs[slot], 1);
    if (slot == 0) {
        atomic_store(&w->slot0_on_caller, pthread_equal(pthread_self(), w->caller) != 0);
        for (int i = 0; w->wait_for_helper && i < 10000; i++) {
            int helpers = 0;
            for (size_t s = 1; s < w->slots; s++)
                helpers += atomic_load(&w->slot_runs[s]);
            if (helpers > 0)
                break;
            sleep_us(1000);
        }
    }
    for (;;) {
        size_t i = atomic_fetch_add(&w->next, 1);
        if (i >= w->n_items)
            break;
        if (w->nested_items > 0) {
            static work inner[MAX_ITEMS]; /* one per outer item: only its taker uses it */
            work *in = &inner[i];
            work_init(in, w->pool, w->slots, w->nested_items);
            run_pass(in);
            if (done_once(in))
                atomic_fetch_add(&w->nested_ok, 1);
        }
        if (w->sleep_us > 0)
            sleep_us(w->sleep_us);
        atomic_fetch_add(&w->done[i], 1);
    }
}

static void run_pass(work *w) {
    w->caller = pthread_self();
    block_workers_run(w->pool, w->slots, do_work, w);
}

static block_workers *new_pool(size_t max_threads) {
    strata_error err;
    block_workers *p = NULL;
    assert_int_equal(block_workers_new(max_threads, &p, &err), 0);
    assert_non_null(p);
    assert_int_equal(block_workers_started(p), 0); /* threads start when a pass needs them */
    return p;
}

static void test_caller_and_helpers_share_a_pass(void **state) {
    (void)state;
    block_workers *p = new_pool(8);
    static work w;
    work_init(&w, p, 4, 200);
    w.sleep_us = 100;
    w.wait_for_helper = true;
    run_pass(&w);
    assert_true(done_once(&w));
    int helper_runs = 0;
    for (size_t s = 1; s < w.slots; s++)
        helper_runs += atomic_load(&w.slot_runs[s]);
    assert_true(helper_runs >= 1);
    assert_true(block_workers_started(p) >= 1 && block_workers_started(p) <= 3);
    block_workers_free(p);
}

static void test_passes_reuse_helpers(void **state) {
    (void)state;
    block_workers *p = new_pool(8);
    static work w;
    size_t started = 0;
    for (int pass = 0; pass < 50; pass++) {
        work_init(&w, p, 4, 32);
        run_pass(&w);
        assert_true(done_once(&w));
        if (pass == 0)
            started = block_workers_started(p);
        assert_int_equal(block_workers_started(p), started); /* none started after the first */
    }
    assert_true(started <= 3);
    block_workers_free(p);
}

static void test_pool_without_helpers_runs_on_the_caller(void **state) {
    (void)state;
    block_workers *p = new_pool(0);
    static work w;
    work_init(&w, p, 8, 64);
    run_pass(&w);
    assert_true(done_once(&w));
    for (size_t s = 1; s < w.slots; s++)
        assert_int_equal(atomic_load(&w.slot_runs[s]), 0); /* withdrawn: nothing left for them */
    assert_int_equal(block_workers_started(p), 0);
    block_workers_free(p);
}

/* Passes run from inside helpers of a pool too small for them all: every helper busy, the
 * callers finish the passes themselves instead of waiting for a free helper. */
static void test_nested_passes_on_a_busy_pool_finish(void **state) {
    (void)state;
    block_workers *p = new_pool(2);
    static work w;
    work_init(&w, p, 4, 12);
    w.nested_items = 40;
    run_pass(&w);
    assert_true(done_once(&w));
    assert_int_equal(atomic_load(&w.nested_ok), 12);
    assert_true(block_workers_started(p) <= 2);
    block_workers_free(p);
}

typedef struct pass_caller {
    block_workers *pool;
    work w;
    int passes_ok;
} pass_caller;

static void *call_passes(void *arg) {
    pass_caller *c = arg;
    for (int pass = 0; pass < 20; pass++) {
        work_init(&c->w, c->pool, 4, 48);
        c->w.sleep_us = pass % 4 == 0 ? 50 : 0;
        run_pass(&c->w);
        c->passes_ok += done_once(&c->w);
    }
    return NULL;
}

static void test_concurrent_passes(void **state) {
    (void)state;
    enum { CALLERS = 4 };
    block_workers *p = new_pool(16);
    static pass_caller callers[CALLERS];
    pthread_t threads[CALLERS];
    for (int i = 0; i < CALLERS; i++) {
        memset(&callers[i], 0, sizeof callers[i]);
        callers[i].pool = p;
        assert_int_equal(pthread_create(&threads[i], NULL, call_passes, &callers[i]), 0);
    }
    for (int i = 0; i < CALLERS; i++) {
        assert_int_equal(pthread_join(threads[i], NULL), 0);
        assert_int_equal(callers[i].passes_ok, 20);
    }
    assert_true(block_workers_started(p) <= CALLERS * 3);
    block_workers_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_caller_and_helpers_share_a_pass),
        cmocka_unit_test(test_passes_reuse_helpers),
        cmocka_unit_test(test_pool_without_helpers_runs_on_the_caller),
        cmocka_unit_test(test_nested_passes_on_a_busy_pool_finish),
        cmocka_unit_test(test_concurrent_passes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
