/*
 * agent_bench_load.c - the load for bench/agent_bench.py: THREADS threads spin through a
 * main -> load_a -> load_b -> load_c call chain for SECONDS of wall time and print how many work
 * units they completed, so the slowdown a profiler causes shows as fewer units.
 *
 *   agent_bench_load SECONDS THREADS
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double deadline;
static atomic_ulong units;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

__attribute__((noinline)) static unsigned long load_c(unsigned long n) {
    volatile unsigned long x = 0;
    for (unsigned long i = 0; i < n; i++)
        x += i ^ (x >> 3);
    return x;
}

__attribute__((noinline)) static unsigned long load_b(void) {
    unsigned long done = 0;
    while (now() < deadline) {
        load_c(100000);
        done++;
    }
    return done;
}

__attribute__((noinline)) static void *load_a(void *arg) {
    (void)arg;
    atomic_fetch_add(&units, load_b());
    return NULL;
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 60;
    int threads = argc > 2 ? atoi(argv[2]) : 2;
    pthread_t t[256];
    if (threads < 1 || threads > 256)
        return 2;
    deadline = now() + seconds;
    for (int i = 0; i < threads; i++)
        if (pthread_create(&t[i], NULL, load_a, NULL) != 0)
            return 1;
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    printf("%lu\n", (unsigned long)atomic_load(&units));
    return 0;
}
