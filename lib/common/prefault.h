/*
 * prefault.h - asking the kernel for the pages of memory about to be written, in one call.
 *
 * A merge over fresh blocks fills hundreds of megabytes of new memory (each block reader's
 * decoded symbol groups, its stack origins, the block bytes read from the bucket). Written one
 * 4 KiB page at a time, every page is a separate page fault; on the virtual machines Strata runs
 * on, a fault costs about 10 us (measured here: 350,000 faults were about a third of a cold
 * merge's 8 s of CPU). MADV_POPULATE_WRITE (Linux 5.14) maps the same pages in one system call,
 * for about half the cost. The memory must be writable and the caller about to write all of it:
 * populating memory that stays unused would only add to the RSS.
 */
#ifndef STRATA_COMMON_PREFAULT_H
#define STRATA_COMMON_PREFAULT_H

#include <stdbool.h>
#include <stddef.h>

/* Populates the whole pages inside [p, p + len) for writing (partial pages at either end are
 * left to fault as usual, so memory outside the range is never touched). A hint: false when
 * nothing was asked (fewer than 16 whole pages, not worth the call) or the kernel refused
 * (older kernels, memory locked out); the memory is usable either way. */
bool strata_prefault_write(void *p, size_t len);

#endif
