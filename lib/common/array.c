/*
 * array.c - see array.h.
 */
#include "array.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ARRAY_MIN_CAPACITY 16

size_t strata_array_capacity(size_t cap, size_t need) {
    if (need <= cap)
        return cap;
    size_t n = ARRAY_MIN_CAPACITY; /* doubled, saturating, once past half the minimum */
    if (cap >= ARRAY_MIN_CAPACITY / 2)
        n = cap > SIZE_MAX / 2 ? SIZE_MAX : cap * 2;
    return n < need ? need : n;
}

void *strata_array_resize(void *arr, size_t n, size_t elem) {
    if (elem != 0 && n > SIZE_MAX / elem)
        return NULL;
    size_t bytes = n * elem;
    return realloc(arr, bytes > 0 ? bytes : 1);
}

void *strata_array_grow(void *arr, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap)
        return arr;
    size_t n = strata_array_capacity(*cap, need);
    void *grown = strata_array_resize(arr, n, elem);
    if (grown == NULL)
        return NULL;
    *cap = n;
    return grown;
}

int strata_array_reserve(void *arr_ptr, size_t *cap, size_t need, size_t elem) {
    void *arr;
    memcpy(&arr, arr_ptr, sizeof arr);
    void *grown = strata_array_grow(arr, cap, need, elem);
    if (grown == NULL)
        return -1;
    memcpy(arr_ptr, &grown, sizeof grown);
    return 0;
}
