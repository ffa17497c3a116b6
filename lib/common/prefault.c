/*
 * prefault.c - MADV_POPULATE_WRITE over the whole pages of a range. See prefault.h.
 */
#include "common/prefault.h"

#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14; older headers lack it, older kernels say EINVAL */
#endif

/* Below this many whole pages, the faults cost less than the call and its page-table walk. */
#define PREFAULT_MIN_PAGES 16

bool strata_prefault_write(void *p, size_t len) {
    long ps = sysconf(_SC_PAGESIZE); /* from the auxiliary vector: no system call */
    size_t page_size = ps > 0 ? (size_t)ps : 4096;
    if (p == NULL || len < PREFAULT_MIN_PAGES * page_size)
        return false;
    uintptr_t start = ((uintptr_t)p + page_size - 1) & ~(uintptr_t)(page_size - 1);
    uintptr_t end = ((uintptr_t)p + len) & ~(uintptr_t)(page_size - 1);
    if (end <= start || (end - start) / page_size < PREFAULT_MIN_PAGES)
        return false;
    return madvise((void *)start, end - start, MADV_POPULATE_WRITE) == 0;
}
