/*
 * radix_sort.c - see radix_sort.h.
 *
 * One histogram pass finds which bits vary (OR and AND of all keys); then one counting pass and
 * one scatter pass per varying 11-bit digit, ping-ponging between records and tmp. 2,048 buckets
 * of counts (16 KiB) stay in L1. Below 64 records an insertion sort is faster than clearing the
 * histogram.
 */
#include "common/radix_sort.h"

#include <string.h>

#define DIGIT_BITS 11
#define BUCKETS (1u << DIGIT_BITS)
#define SMALL 64

static void insertion_sort(strata_sort_record *r, size_t n) {
    for (size_t i = 1; i < n; i++) {
        strata_sort_record x = r[i];
        size_t j = i;
        while (j > 0 && r[j - 1].key > x.key) {
            r[j] = r[j - 1];
            j--;
        }
        r[j] = x;
    }
}

void strata_radix_sort(strata_sort_record *records, strata_sort_record *tmp, size_t n) {
    if (n < SMALL) {
        insertion_sort(records, n);
        return;
    }
    uint64_t all_or = 0, all_and = UINT64_MAX;
    for (size_t i = 0; i < n; i++) {
        all_or |= records[i].key;
        all_and &= records[i].key;
    }
    uint64_t varying = all_or ^ all_and;
    strata_sort_record *from = records, *to = tmp;
    for (unsigned shift = 0; shift < 64; shift += DIGIT_BITS) {
        if (((varying >> shift) & (BUCKETS - 1)) == 0)
            continue; /* every key has the same digit here */
        size_t count[BUCKETS] = {0};
        for (size_t i = 0; i < n; i++)
            count[(from[i].key >> shift) & (BUCKETS - 1)]++;
        size_t at = 0;
        for (size_t d = 0; d < BUCKETS; d++) {
            size_t c = count[d];
            count[d] = at;
            at += c;
        }
        for (size_t i = 0; i < n; i++)
            to[count[(from[i].key >> shift) & (BUCKETS - 1)]++] = from[i];
        strata_sort_record *t = from;
        from = to;
        to = t;
    }
    if (from != records)
        memcpy(records, from, n * sizeof *records);
}
