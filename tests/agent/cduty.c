/*
 * cduty.c - a light CPU load with a known call chain for the agent's end-to-end tests
 * (tests/integration/test_agent_compaction.py): main -> duty_outer -> duty_middle -> duty_leaf,
 * built with frame pointers and no inlining. It burns PERCENT of every 50 ms period and sleeps
 * the rest, so several copies run under the agent for tens of seconds at a small cost. The
 * middle function reads CLOCK_MONOTONIC (through the vDSO) between spins of a few hundred
 * nanoseconds, so about a tenth of the samples land in [vdso].
 *
 *   cduty WALL_SECONDS [PERCENT]     (PERCENT defaults to 20)
 *
 * It exits after WALL_SECONDS of wall time and prints the number of spins.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The leaf: spins on a volatile local (so GCC gives it a frame) and calls nothing. */
__attribute__((noinline)) unsigned long duty_leaf(unsigned long n) {
    volatile unsigned long spins = 0;
    for (unsigned long i = 0; i < n; i++)
        spins++;
    return spins;
}

/* Spins until `until` (monotonic seconds), reading the clock between short spins. */
__attribute__((noinline)) unsigned long duty_middle(double until) {
    unsigned long r = 0;
    while (now() < until)
        r += duty_leaf(200);
    return r;
}

/* One period: busy for `busy` seconds, then asleep until the period ends. */
__attribute__((noinline)) unsigned long duty_outer(double period, double busy) {
    double start = now();
    unsigned long r = duty_middle(start + busy);
    double rest = start + period - now();
    if (rest > 0) {
        struct timespec ts = {(time_t)rest, (long)((rest - (double)(time_t)rest) * 1e9)};
        nanosleep(&ts, NULL);
    }
    return r;
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 5;
    double percent = argc > 2 ? atof(argv[2]) : 20;
    if (seconds <= 0 || percent <= 0 || percent > 100)
        return 2;
    const double period = 0.05;
    double end = now() + seconds;
    unsigned long r = 0;
    while (now() < end)
        r += duty_outer(period, period * percent / 100);
    printf("%lu\n", r);
    return 0;
}
