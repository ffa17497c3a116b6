/*
 * cchain.c - a CPU burner with a known call chain for the agent's tests:
 * main -> chain_a -> chain_b -> chain_c, where chain_c spins. Built with frame pointers and no
 * inlining. chain_c keeps a volatile local so that GCC gives it a frame; without one, GCC 12
 * omits the leaf's frame and a frame-pointer unwinder loses chain_b.
 *
 *   cchain SECONDS [THREADS]
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double seconds;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

__attribute__((noinline)) unsigned long chain_c(double until) {
    volatile unsigned long spins = 0;
    while (now() < until)
        for (int i = 0; i < 100000; i++)
            spins++;
    return spins;
}

__attribute__((noinline)) unsigned long chain_b(double until) {
    return chain_c(until) + 1;
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
