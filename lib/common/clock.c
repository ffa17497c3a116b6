/*
 * clock.c - see clock.h.
 */
#include "common/clock.h"

#include <time.h>

static int64_t read_clock(clockid_t id) {
    struct timespec ts;
    if (clock_gettime(id, &ts) != 0)
        return 0;
    return (int64_t)ts.tv_sec * STRATA_NS_PER_SEC + ts.tv_nsec;
}

int64_t strata_now_ns(void) {
    return read_clock(CLOCK_REALTIME);
}

int64_t strata_monotonic_ns(void) {
    return read_clock(CLOCK_MONOTONIC);
}

int64_t strata_process_cpu_ns(void) {
    return read_clock(CLOCK_PROCESS_CPUTIME_ID);
}
