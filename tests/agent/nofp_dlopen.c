/*
 * nofp_dlopen.c - a program without frame pointers that maps a library while it runs, for the
 * agent's test of walks that leave a process's list (tests/integration/test_agent.py,
 * AgentLateLibraryTest). Built -O2 -g -fomit-frame-pointer, as is the library
 * (nofp_late_lib.c: late_outer -> late_middle -> late_inner).
 *
 *   nofp_dlopen LIBRARY CPU_SECONDS
 *
 * It burns 0.3 s of CPU in main -> early_spin (the agent lists the process meanwhile, without the
 * library), prints "ready", waits for a line on stdin (the test stops the agent before it sends
 * one), then dlopen()s LIBRARY and burns CPU_SECONDS of CPU in main -> late_outer -> late_middle ->
 * late_inner. A walk that meets the library's code before the agent has listed it again goes off
 * the list; with no frame pointers, its frame-pointer step cannot reach main.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define HOT __attribute__((noinline, noclone))

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

HOT unsigned long early_spin(double seconds) {
    volatile unsigned long table[64];
    unsigned long h = 88172645463325252UL;
    for (double end = cpu_now() + seconds; cpu_now() < end;)
        for (int r = 0; r < 100000; r++) {
            h ^= h << 13, h ^= h >> 7, h ^= h << 17;
            table[h & 63] += h;
        }
    return h ^ table[h & 63];
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: nofp_dlopen LIBRARY CPU_SECONDS\n");
        return 2;
    }
    double seconds = atof(argv[2]);
    unsigned long h = early_spin(0.3);
    printf("ready\n");
    fflush(stdout);
    char line[16];
    if (fgets(line, sizeof line, stdin) == NULL)
        return 2;
    void *lib = dlopen(argv[1], RTLD_NOW);
    if (lib == NULL) {
        fprintf(stderr, "nofp_dlopen: %s\n", dlerror());
        return 3;
    }
    unsigned long (*late_outer)(unsigned long) =
        (unsigned long (*)(unsigned long))(void (*)(void))dlsym(lib, "late_outer");
    if (late_outer == NULL) {
        fprintf(stderr, "nofp_dlopen: %s\n", dlerror());
        return 3;
    }
    for (double end = cpu_now() + seconds; cpu_now() < end;)
        h = late_outer(h) + 1; /* not a tail call: main stays on the stack */
    printf("%lu\n", h & 1);
    return 0;
}
