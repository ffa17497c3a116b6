/*
 * nofp_chain.c - a CPU burner without frame pointers for the DWARF (.eh_frame) unwinding test
 * (tests/integration/test_agent.py, AgentDwarfUnwindTest). Built -O2 -g -fomit-frame-pointer with
 * gcc and with clang. Three hot paths, taking turns:
 *
 *   main -> nofp_outer -> nofp_middle -> nofp_inner          our code only; every function keeps
 *                                                            locals on the stack (the leaf's
 *                                                            512-byte table is past the red zone),
 *                                                            so each moves rsp and none has rbp
 *   main -> sort_round -> qsort (Debian's libc, no frame pointers) -> ... -> compare_items
 *   main -> clock_round -> clock_gettime (libc) -> the vDSO's clock_gettime (no system call)
 *
 * The functions are noinline (and noclone for GCC, so that no .constprop/.isra copies appear) and
 * use their callees' results after the call, so that no call is a tail call.
 *
 *   nofp_chain CPU_SECONDS
 *
 * It burns CPU_SECONDS of its own CPU time (not wall time), so the work is the same on a loaded
 * machine.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#if defined(__clang__)
#define HOT __attribute__((noinline))
#else
#define HOT __attribute__((noinline, noclone))
#endif

#define ITEMS 2048

struct item {
    unsigned long key;
    double weight;
    unsigned int tag[4];
};

static struct item items[ITEMS];

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The leaf of the first path: a 64-word table indexed by data, so it stays in memory. */
HOT unsigned long nofp_inner(unsigned long seed, int rounds) {
    unsigned long table[64];
    for (int i = 0; i < 64; i++)
        table[i] = seed * (unsigned long)(2 * i + 1) ^ (seed >> (i % 17));
    unsigned long h = seed;
    for (int r = 0; r < rounds; r++) {
        h = h * 6364136223846793005UL + 1442695040888963407UL;
        table[h >> 58] ^= h;
        h ^= table[(h >> 40) & 63];
    }
    return h ^ table[h & 63];
}

HOT unsigned long nofp_middle(unsigned long seed, int rounds) {
    unsigned long acc[8];
    for (int i = 0; i < 8; i++)
        acc[i] = nofp_inner(seed + (unsigned long)i, rounds) ^ (i > 0 ? acc[i - 1] >> 3 : 0);
    unsigned long r = 0;
    for (int i = 0; i < 8; i++)
        r = r * 31 + acc[(seed + (unsigned long)i) & 7];
    return r;
}

HOT unsigned long nofp_outer(unsigned long seed, int rounds) {
    unsigned long a = seed, b = ~seed, c = seed * 3;
    for (int i = 0; i < 4; i++) {
        unsigned long m = nofp_middle(a ^ (unsigned long)i, rounds);
        a = a * 5 + m;
        b ^= m >> 7;
        c += m * b;
    }
    return a ^ b ^ c;
}

/* The comparator qsort calls: some arithmetic on both keys, so samples land here too. */
HOT int compare_items(const void *pa, const void *pb) {
    const struct item *a = pa, *b = pb;
    unsigned long ka = a->key, kb = b->key;
    for (int i = 0; i < 6; i++) {
        ka = (ka ^ (ka >> 29)) * 0xbf58476d1ce4e5b9UL;
        kb = (kb ^ (kb >> 29)) * 0xbf58476d1ce4e5b9UL;
    }
    if (ka != kb)
        return ka < kb ? -1 : 1;
    return a->weight < b->weight ? -1 : a->weight > b->weight;
}

HOT unsigned long sort_round(unsigned long seed) {
    unsigned long h = seed | 1;
    for (int i = 0; i < ITEMS; i++) {
        h = h * 6364136223846793005UL + 1442695040888963407UL;
        items[i].key = h >> 16;
        items[i].weight = (double)(h & 0xffff);
        items[i].tag[0] = (unsigned int)i;
    }
    qsort(items, ITEMS, sizeof items[0], compare_items);
    return items[0].key ^ items[ITEMS / 2].key ^ h;
}

/* The vDSO path: CLOCK_MONOTONIC is read in user space, in the kernel's [vdso] mapping. */
HOT unsigned long clock_round(unsigned long seed) {
    struct timespec ts;
    unsigned long h = seed;
    for (int i = 0; i < 20000; i++) {
        clock_gettime(CLOCK_MONOTONIC, &ts);
        h = h * 31 + (unsigned long)ts.tv_nsec;
    }
    return h;
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 5;
    double until = cpu_now() + seconds;
    unsigned long r = 1;
    while (cpu_now() < until) {
        r += nofp_outer(r, 4000);
        r += sort_round(r);
        r += clock_round(r);
    }
    printf("%lu\n", r);
    return 0;
}
