/*
 * sleeper.c - a thread that blocks at a known call chain, for the agent's off-CPU test:
 * main -> wait_a -> wait_b, where wait_b sleeps 10 ms at a time until SECONDS of wall time have
 * passed, then prints how long it slept in total (nanoseconds, CLOCK_MONOTONIC around each sleep).
 *
 *   sleeper SECONDS
 *
 * wait_b enters the kernel with its own syscall instruction, not through libc: Debian's libc is
 * built without frame pointers, and a frame-pointer unwinder stops inside it (issue 21 item 1);
 * this program tests the off-CPU tracing, not that unwinding. Built with frame pointers and no
 * inlining, like cchain.c.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Inlined into wait_b, so the syscall is made from wait_b itself, which has a frame. */
static inline __attribute__((always_inline)) long raw_nanosleep(const struct timespec *req) {
    long ret;
#if defined(__x86_64__)
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"((long)SYS_nanosleep), "D"(req), "S"(0)
                     : "rcx", "r11", "memory");
#elif defined(__aarch64__)
    register long x8 __asm__("x8") = SYS_nanosleep;
    register long x0 __asm__("x0") = (long)req;
    register long x1 __asm__("x1") = 0;
    __asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1) : "memory");
    ret = x0;
#else
#error "sleeper.c: no raw syscall for this architecture"
#endif
    return ret;
}

/* The blocking leaf: every off-CPU stack of this program should end here. */
__attribute__((noinline)) int64_t wait_b(int64_t until) {
    volatile int64_t slept = 0;
    struct timespec ten_ms = {0, 10 * 1000 * 1000};
    while (now_ns() < until) {
        int64_t t0 = now_ns();
        raw_nanosleep(&ten_ms);
        slept += now_ns() - t0;
    }
    return slept;
}

__attribute__((noinline)) int64_t wait_a(int64_t until) {
    return wait_b(until) + 0;
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 2;
    int64_t slept = wait_a(now_ns() + (int64_t)(seconds * 1e9));
    printf("%lld\n", (long long)slept);
    return 0;
}
