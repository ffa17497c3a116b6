/*
 * array.h - growing a malloc'd array: the one way every module does it.
 *
 * strata_array_grow(arr, &cap, need, elem) returns an array with room for at least `need`
 * elements of `elem` bytes: arr itself when need <= *cap, else arr realloc'd to max(need,
 * 2 x *cap, 16) elements with *cap updated. It returns NULL when the byte count would overflow
 * size_t or memory runs out; arr is then untouched and still the caller's, *cap unchanged.
 * Elements past the old capacity are uninitialised. Doubling keeps appends amortised O(1); the
 * overflow check is why modules must not write their own.
 *
 * STRATA_ARRAY_RESERVE(arr, cap, need), for an array lvalue and its capacity lvalue (a size_t),
 * makes room the same way and evaluates to 0, or -1 when it could not (arr and cap unchanged); its
 * arguments are evaluated more than once, so they must have no side effects:
 *
 *     if (STRATA_ARRAY_RESERVE(t->ids, t->cap_ids, t->n_ids + 1) != 0)
 *         return strata_error_oom(err);
 *     t->ids[t->n_ids++] = id;
 *
 * STRATA_ARRAY_RESERVE_OR_OOM(arr, cap, need, err) also sets err (strata_error_oom) on failure.
 *
 * Parallel arrays sharing one capacity (a struct of arrays) compute the new capacity once with
 * strata_array_capacity(cap, need) (cap itself when need <= cap, else max(need, 2 x cap, 16),
 * saturating) and move each array to it with strata_array_resize(arr, n, elem): realloc to room
 * for exactly n elements (at least one byte), or NULL with arr untouched when n x elem overflows
 * size_t or memory runs out. The shared capacity is stored only once every array has moved, so a
 * failure part way leaves the arrays that did move larger than the capacity says, never smaller:
 *
 *     size_t cap = strata_array_capacity(t->cap, t->n + 1);
 *     uint32_t *a = strata_array_resize(t->a, cap, sizeof *a);
 *     if (a == NULL)
 *         return -1;
 *     t->a = a;
 *     int64_t *b = strata_array_resize(t->b, cap, sizeof *b);
 *     if (b == NULL)
 *         return -1;
 *     t->b = b;
 *     t->cap = cap;
 * It reads and writes the pointer through memcpy, not through a `void **` cast of &arr (which
 * would access a `T *` object as a `void *` one: undefined behaviour under strict aliasing).
 */
#ifndef STRATA_COMMON_ARRAY_H
#define STRATA_COMMON_ARRAY_H

#include <stddef.h>

#include "common/error.h"

void *strata_array_grow(void *arr, size_t *cap, size_t need, size_t elem);

/* The capacity strata_array_grow would grow cap to for need elements (cap when need <= cap). */
size_t strata_array_capacity(size_t cap, size_t need);

/* arr realloc'd to room for exactly n elements of elem bytes, or NULL (arr untouched). */
void *strata_array_resize(void *arr, size_t n, size_t elem);

/* *arr_ptr (the address of any object pointer) grown as strata_array_grow grows it; 0 or -1. */
int strata_array_reserve(void *arr_ptr, size_t *cap, size_t need, size_t elem);

#define STRATA_ARRAY_RESERVE(arr, cap, need)                                                       \
    ((size_t)(need) <= (cap) ? 0 : strata_array_reserve(&(arr), &(cap), (need), sizeof *(arr)))

/* The same, failing as the library's functions fail: -1 with err set to RESOURCE_EXHAUSTED. */
#define STRATA_ARRAY_RESERVE_OR_OOM(arr, cap, need, err)                                           \
    (STRATA_ARRAY_RESERVE(arr, cap, need) == 0 ? 0 : strata_error_oom(err))

#endif
