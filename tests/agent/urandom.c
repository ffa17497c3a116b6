/*
 * urandom.c - a kernel-heavy load for the agent's tests: reads /dev/urandom until it has used
 * CPU_SECONDS of CPU time, nearly all of it in the kernel's random number generator.
 *
 *   urandom CPU_SECONDS
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 5;
    int fd = open("/dev/urandom", O_RDONLY);
    if (fd < 0)
        return 1;
    static char buf[1 << 16];
    struct timespec start, t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &start);
    unsigned long long total = 0;
    do {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n <= 0)
            return 1;
        total += (unsigned long long)n;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    } while ((double)(t.tv_sec - start.tv_sec) + (double)(t.tv_nsec - start.tv_nsec) / 1e9 <
             seconds);
    close(fd);
    printf("%llu\n", total);
    return 0;
}
