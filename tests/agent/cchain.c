/*
 * cchain.c - a CPU burner with a known call chain for the agent's tests:
 * main -> chain_a -> chain_b -> chain_c, where chain_c spins. Built with frame pointers and no
 * inlining. chain_c keeps a volatile local so that GCC gives it a frame; without one, GCC 12
 * omits the leaf's frame and a frame-pointer unwinder loses chain_b. Built with
 * -DCCHAIN_FRAMELESS_LEAF the counter is a global instead, chain_c gets no frame, and the agent
 * has to recover chain_b itself (agent/leaf.h).
 *
 *   cchain CPU_SECONDS [THREADS]
 *
 * Each thread burns CPU_SECONDS of its own CPU time (not wall time), so the work is the same on a
 * loaded machine.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double seconds;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

#ifdef CCHAIN_FRAMELESS_LEAF
static volatile unsigned long spins;
#endif

/* The leaf: calls nothing, so all samples land here with main -> a -> b -> c on the stack. */
__attribute__((noinline)) unsigned long chain_c(unsigned long n) {
#ifndef CCHAIN_FRAMELESS_LEAF
    volatile unsigned long spins = 0;
#endif
    for (unsigned long i = 0; i < n; i++)
        spins++;
    return spins;
}

__attribute__((noinline)) unsigned long chain_b(double until) {
    unsigned long r = 0;
    while (now() < until)
        r += chain_c(1000000);
    return r;
}

__attribute__((noinline)) unsigned long chain_a(double until) {
    return chain_b(until) + 1;
}

static void *thread_main(void *arg) {
    (void)arg;
    unsigned long r = chain_a(now() + seconds);
    return (void *)r;
}

int main(int argc, char **argv) {
    seconds = argc > 1 ? atof(argv[1]) : 5;
    int threads = argc > 2 ? atoi(argv[2]) : 1;
    pthread_t t[64];
    if (threads < 1 || threads > 64)
        return 2;
    for (int i = 1; i < threads; i++)
        if (pthread_create(&t[i], NULL, thread_main, NULL) != 0)
            return 1;
    unsigned long r = chain_a(now() + seconds);
    for (int i = 1; i < threads; i++)
        pthread_join(t[i], NULL);
    printf("%lu\n", r);
    return 0;
}
