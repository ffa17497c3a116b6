/*
 * agent_bench_service.c - one of the many services of bench/agent_bench.py's busy node. Built once
 * per service with -DSERVICE=N, so every service is a binary of its own (its own build id and
 * symbol table, as the processes of a real node are), it wakes every PERIOD_MS, walks a call
 * chain of 8-24 of its 64 functions chosen by a pseudo-random walk (many distinct stacks, as a
 * real service has), spins WORK_US at the bottom and sleeps again, until killed.
 *
 *   agent_bench_service
 */
#include <stdint.h>
#include <time.h>

#ifndef SERVICE
#define SERVICE 0
#endif
#define PERIOD_MS 25
#define WORK_US 500

static uint64_t state = 0x9e3779b97f4a7c15ULL * (SERVICE + 1);

static uint64_t next_random(void) {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
}

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

__attribute__((noinline)) static void spin(void) {
    double until = now_us() + WORK_US;
    volatile uint64_t x = SERVICE;
    while (now_us() < until)
        for (int i = 0; i < 1000; i++)
            x += (uint64_t)i ^ (x >> 3);
}

typedef void (*step_fn)(int depth);
static step_fn steps[64];

/* Step k calls one of the 64 steps (chosen at random) until depth runs out, then spins. */
#define STEP(k)                                                                                    \
    __attribute__((noinline)) static void step_##k(int depth) {                                    \
        volatile int guard = k;                                                                    \
        if (depth <= 0)                                                                            \
            spin();                                                                                \
        else                                                                                       \
            steps[next_random() % 64](depth - 1);                                                  \
        (void)guard;                                                                               \
    }
#define STEP8(a)                                                                                   \
    STEP(a##0) STEP(a##1) STEP(a##2) STEP(a##3) STEP(a##4) STEP(a##5) STEP(a##6) STEP(a##7)
STEP8(1)
STEP8(2)
STEP8(3)
STEP8(4)
STEP8(5)
STEP8(6)
STEP8(7)
STEP8(8)
#define SET8(a, base)                                                                              \
    steps[base + 0] = step_##a##0, steps[base + 1] = step_##a##1, steps[base + 2] = step_##a##2,   \
                 steps[base + 3] = step_##a##3, steps[base + 4] = step_##a##4,                     \
                 steps[base + 5] = step_##a##5, steps[base + 6] = step_##a##6,                     \
                 steps[base + 7] = step_##a##7

int main(void) {
    SET8(1, 0);
    SET8(2, 8);
    SET8(3, 16);
    SET8(4, 24);
    SET8(5, 32);
    SET8(6, 40);
    SET8(7, 48);
    SET8(8, 56);
    struct timespec period = {0, PERIOD_MS * 1000000L};
    for (;;) {
        steps[next_random() % 64](8 + (int)(next_random() % 17));
        nanosleep(&period, NULL);
    }
}
