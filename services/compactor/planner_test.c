/*
 * planner_test.c - the planner as a table: block sets in, expected jobs out; and retention.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "planner.h"

#define MIN INT64_C(60000)
#define HOUR (60 * MIN)
#define MAX_BLOCKS 8
#define MAX_JOBS 4

/* A block as min/max minutes (with seconds as fractions via ms) and level; 'm' marked, 'n'
 * no-compact. */
typedef struct tblock {
    int64_t min_ms, max_ms;
    int level;
    char flag;
} tblock;

typedef struct tjob {
    size_t range_index;
    int64_t window_start_ms;
    int level;
    size_t blocks[MAX_BLOCKS];
    size_t n_blocks;
} tjob;

typedef struct tcase {
    const char *name;
    int64_t now_ms;
    tblock blocks[MAX_BLOCKS];
    size_t n_blocks;
    tjob jobs[MAX_JOBS];
    size_t n_jobs;
    int64_t skip_window; /* -1: none */
} tcase;

static bool skip_one(void *ctx, size_t range_index, int64_t window_start_ms) {
    const tcase *c = ctx;
    return range_index == 0 && window_start_ms == c->skip_window;
}

static const tcase cases[] = {
    {.name = "empty", .now_ms = 10 * MIN, .n_blocks = 0, .n_jobs = 0, .skip_window = -1},
    {.name = "three level-1 blocks in a closed 5m window",
     .now_ms = 10 * MIN,
     .blocks = {{0, 1000, 1, 0}, {1000, 2000, 1, 0}, {2000, 3000, 1, 0}},
     .n_blocks = 3,
     .jobs = {{0, 0, 2, {0, 1, 2}, 3}},
     .n_jobs = 1,
     .skip_window = -1},
    {.name = "window closed but within the consistency delay",
     .now_ms = 5 * MIN + 30000,
     .blocks = {{0, 1000, 1, 0}, {1000, 2000, 1, 0}},
     .n_blocks = 2,
     .n_jobs = 0,
     .skip_window = -1},
    {.name = "window still open",
     .now_ms = 4 * MIN,
     .blocks = {{0, 1000, 1, 0}, {1000, 2000, 1, 0}},
     .n_blocks = 2,
     .n_jobs = 0,
     .skip_window = -1},
    {.name = "a lone block is never rewritten",
     .now_ms = 30 * HOUR,
     .blocks = {{0, 1000, 1, 0}},
     .n_blocks = 1,
     .n_jobs = 0,
     .skip_window = -1},
    {.name = "two windows, oldest first, sources by minTime",
     .now_ms = 20 * MIN,
     .blocks = {{6 * MIN, 6 * MIN + 500, 1, 0},
                {1000, 2000, 1, 0},
                {5 * MIN, 5 * MIN + 500, 1, 0},
                {0, 1000, 1, 0}},
     .n_blocks = 4,
     .jobs = {{0, 0, 2, {3, 1}, 2}, {0, 5 * MIN, 2, {2, 0}, 2}},
     .n_jobs = 2,
     .skip_window = -1},
    {.name = "a block straddling 5m boundaries waits for the 2h range",
     .now_ms = 20 * MIN,
     .blocks = {{0, 1000, 1, 0}, {1000, 2000, 1, 0}, {5 * MIN - 500, 5 * MIN + 500, 1, 0}},
     .n_blocks = 3,
     .jobs = {{0, 0, 2, {0, 1}, 2}},
     .n_jobs = 1,
     .skip_window = -1},
    {.name = "2h range: level-2 blocks and a straddler once the 2h window closed",
     .now_ms = 3 * HOUR,
     .blocks = {{0, 5 * MIN, 2, 0},
                {5 * MIN - 500, 5 * MIN + 500, 1, 0},
                {5 * MIN, 10 * MIN, 2, 0},
                {2 * HOUR + 1000, 2 * HOUR + 2000, 1, 0}},
     .n_blocks = 4,
     .jobs = {{1, 0, 3, {0, 1, 2}, 3}},
     .n_jobs = 1,
     .skip_window = -1},
    {.name = "the 2h range waits while 5m jobs exist",
     .now_ms = 3 * HOUR,
     .blocks = {{0, 5 * MIN, 2, 0},
                {5 * MIN, 10 * MIN, 2, 0},
                {HOUR, HOUR + 1, 1, 0},
                {HOUR + 1, HOUR + 2, 1, 0}},
     .n_blocks = 4,
     .jobs = {{0, HOUR, 2, {2, 3}, 2}},
     .n_jobs = 1,
     .skip_window = -1},
    {.name = "24h range after the 2h range",
     .now_ms = 50 * HOUR,
     .blocks = {{0, 2 * HOUR, 3, 0}, {2 * HOUR, 4 * HOUR, 3, 0}, {24 * HOUR, 26 * HOUR, 3, 0}},
     .n_blocks = 3,
     .jobs = {{2, 0, 4, {0, 1}, 2}},
     .n_jobs = 1,
     .skip_window = -1},
    {.name = "marked and no-compact blocks are left out",
     .now_ms = 10 * MIN,
     .blocks = {{0, 1000, 1, 'm'}, {1000, 2000, 1, 'n'}, {2000, 3000, 1, 0}, {3000, 4000, 1, 0}},
     .n_blocks = 4,
     .jobs = {{0, 0, 2, {2, 3}, 2}},
     .n_jobs = 1,
     .skip_window = -1},
    {.name = "only one block left besides marked ones: nothing",
     .now_ms = 10 * MIN,
     .blocks = {{0, 1000, 1, 'm'}, {1000, 2000, 1, 'n'}, {2000, 3000, 1, 0}},
     .n_blocks = 3,
     .n_jobs = 0,
     .skip_window = -1},
    {.name = "a late level-1 block merges into the window's level-2 block",
     .now_ms = 10 * MIN,
     .blocks = {{0, 4 * MIN, 2, 0}, {2 * MIN, 2 * MIN + 10, 1, 0}},
     .n_blocks = 2,
     .jobs = {{0, 0, 2, {0, 1}, 2}},
     .n_jobs = 1,
     .skip_window = -1},
    {.name = "overlapping blocks (retried writes) merge together",
     .now_ms = 10 * MIN,
     .blocks = {{1000, 3000, 1, 0}, {1000, 3000, 1, 0}, {2000, 4000, 1, 0}},
     .n_blocks = 3,
     .jobs = {{0, 0, 2, {0, 1, 2}, 3}},
     .n_jobs = 1,
     .skip_window = -1},
    {.name = "output level is at least the highest source level",
     .now_ms = 10 * MIN,
     .blocks = {{0, 1000, 3, 0}, {1000, 2000, 1, 0}},
     .n_blocks = 2,
     .jobs = {{0, 0, 3, {0, 1}, 2}},
     .n_jobs = 1,
     .skip_window = -1},
    {.name = "a skipped window is left out",
     .now_ms = 20 * MIN,
     .blocks = {{0, 1000, 1, 0},
                {1000, 2000, 1, 0},
                {5 * MIN, 5 * MIN + 1, 1, 0},
                {5 * MIN + 1, 5 * MIN + 2, 1, 0}},
     .n_blocks = 4,
     .jobs = {{0, 5 * MIN, 2, {2, 3}, 2}},
     .n_jobs = 1,
     .skip_window = 0},
    {.name = "blocks before the epoch align too",
     .now_ms = 10 * MIN,
     .blocks = {{-2000, -1000, 1, 0}, {-1000, 0, 1, 0}, {0, 1000, 1, 0}},
     .n_blocks = 3,
     .jobs = {{0, -5 * MIN, 2, {0, 1}, 2}},
     .n_jobs = 1,
     .skip_window = -1},
};

static void test_plan_table(void **state) {
    (void)state;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const tcase *tc = &cases[c];
        plan_block blocks[MAX_BLOCKS];
        strata_error err;
        for (size_t i = 0; i < tc->n_blocks; i++) {
            memset(&blocks[i], 0, sizeof blocks[i]);
            assert_int_equal(ulid_new(&blocks[i].id, &err), 0);
            blocks[i].min_time_ms = tc->blocks[i].min_ms;
            blocks[i].max_time_ms = tc->blocks[i].max_ms;
            blocks[i].level = tc->blocks[i].level;
            blocks[i].marked = tc->blocks[i].flag == 'm';
            blocks[i].no_compact = tc->blocks[i].flag == 'n';
        }
        plan_options o = {.ranges_ms = {5 * MIN, 2 * HOUR, 24 * HOUR},
                          .n_ranges = 3,
                          .consistency_delay_ms = MIN,
                          .now_ms = tc->now_ms,
                          .skip_window = tc->skip_window != -1 ? skip_one : NULL,
                          .skip_ctx = (void *)tc};
        plan_job *jobs;
        size_t n_jobs;
        assert_int_equal(plan_compaction(blocks, tc->n_blocks, &o, &jobs, &n_jobs, &err), 0);
        if (n_jobs != tc->n_jobs)
            fail_msg("%s: %zu jobs, want %zu", tc->name, n_jobs, tc->n_jobs);
        for (size_t j = 0; j < n_jobs; j++) {
            const tjob *want = &tc->jobs[j];
            if (jobs[j].range_index != want->range_index ||
                jobs[j].window_start_ms != want->window_start_ms || jobs[j].level != want->level ||
                jobs[j].n_blocks != want->n_blocks)
                fail_msg("%s: job %zu: range %zu window %lld level %d n %zu", tc->name, j,
                         jobs[j].range_index, (long long)jobs[j].window_start_ms, jobs[j].level,
                         jobs[j].n_blocks);
            assert_int_equal(jobs[j].window_end_ms - jobs[j].window_start_ms,
                             o.ranges_ms[want->range_index]);
            for (size_t b = 0; b < want->n_blocks; b++)
                if (jobs[j].blocks[b] != want->blocks[b])
                    fail_msg("%s: job %zu block %zu is %zu, want %zu", tc->name, j, b,
                             jobs[j].blocks[b], want->blocks[b]);
        }
        plan_jobs_free(jobs, n_jobs);
    }
}

static void test_validate_ranges(void **state) {
    (void)state;
    strata_error err;
    int64_t good[] = {5 * MIN, 2 * HOUR, 24 * HOUR};
    assert_int_equal(plan_validate_ranges(good, 3, &err), 0);
    int64_t not_multiple[] = {5 * MIN, 7 * MIN};
    assert_int_equal(plan_validate_ranges(not_multiple, 2, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "block_ranges[1]"));
    int64_t shrinking[] = {2 * HOUR, 5 * MIN};
    assert_int_equal(plan_validate_ranges(shrinking, 2, &err), -1);
    int64_t zero[] = {0};
    assert_int_equal(plan_validate_ranges(zero, 1, &err), -1);
    assert_int_equal(plan_validate_ranges(good, 0, &err), -1);
}

static void test_retention(void **state) {
    (void)state;
    plan_block blocks[5];
    memset(blocks, 0, sizeof blocks);
    int64_t max_times[] = {1000, 5000, 5001, 9000, 2000};
    for (size_t i = 0; i < 5; i++) {
        blocks[i].min_time_ms = max_times[i] - 500;
        blocks[i].max_time_ms = max_times[i];
    }
    blocks[4].marked = true; /* already expired and marked */
    size_t expired[5];
    /* now 10000, retention 5000: everything ending at or before 5000 expires. */
    size_t n = plan_retention(blocks, 5, 10000, 5000, expired);
    assert_int_equal(n, 2);
    assert_int_equal(expired[0], 0);
    assert_int_equal(expired[1], 1);
    assert_int_equal(plan_retention(blocks, 5, 10000, 0, expired), 0);
    n = plan_retention(blocks, 5, 100000, 1, expired);
    assert_int_equal(n, 4);
    assert_int_equal(expired[3], 3);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_table),
        cmocka_unit_test(test_validate_ranges),
        cmocka_unit_test(test_retention),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
