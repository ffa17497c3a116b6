/*
 * nofp_late_lib.c - the library nofp_dlopen.c maps while it runs: late_outer -> late_middle ->
 * late_inner, about a millisecond of CPU a call. Built -O2 -g -fomit-frame-pointer -shared -fPIC;
 * each function keeps locals on the stack and uses its callee's result, so none is a tail call
 * and none keeps a frame pointer.
 */
#define HOT __attribute__((noinline, noclone))

HOT unsigned long late_inner(unsigned long seed) {
    volatile unsigned long table[64];
    for (int i = 0; i < 64; i++)
        table[i] = seed * (unsigned long)(2 * i + 1);
    unsigned long h = seed | 1;
    for (int r = 0; r < 400000; r++) {
        h = h * 6364136223846793005UL + 1442695040888963407UL;
        table[h >> 58] ^= h;
    }
    return h ^ table[h & 63];
}

HOT unsigned long late_middle(unsigned long seed) {
    volatile unsigned long keep[40];
    keep[seed & 31] = seed;
    return late_inner(seed + keep[seed & 31]) + keep[(seed >> 5) & 31];
}

unsigned long late_outer(unsigned long seed) {
    volatile unsigned long keep[40];
    keep[seed & 31] = seed;
    return late_middle(seed ^ keep[seed & 31]) * 3 + keep[(seed >> 7) & 31];
}
