/*
 * radix_sort.h - a stable sort of 16-byte records by a 64-bit key.
 *
 * The block writer sorts hundreds of thousands of records per flush (a profile's samples by
 * stack, a fresh block's locations by address). A least-significant-digit radix sort over 11-bit
 * digits does that in a few sequential passes instead of qsort's n log n compares through a
 * function pointer, and it skips every digit all keys share, so keys that vary in few bits (stack
 * ids of one block, addresses inside one binary) cost two or three passes. Records with equal
 * keys keep their input order, which lets callers sort by a composite key one part at a time,
 * minor part first.
 */
#ifndef STRATA_COMMON_RADIX_SORT_H
#define STRATA_COMMON_RADIX_SORT_H

#include <stddef.h>
#include <stdint.h>

typedef struct strata_sort_record {
    uint64_t key;
    uint64_t payload; /* carried along, never compared */
} strata_sort_record;

/* Sorts records[0..n) by key, stably. tmp must have room for n records (its contents are
 * overwritten). Never allocates. */
void strata_radix_sort(strata_sort_record *records, strata_sort_record *tmp, size_t n);

#endif
