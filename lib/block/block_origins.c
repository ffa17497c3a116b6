/*
 * block_origins.c - see block_origins.h. Appending keeps the current chunk open: a stack that
 * continues its run costs nothing but the count; one that starts a run sets its bit and stores its
 * origin, in 16 bits while the chunk's origins stay within 65,535 of its first, else the chunk's
 * starts so far move to `wide` (they are the last entries of `offsets`, so that array simply
 * shrinks back) and the rest of the chunk follows them there.
 */
#include "block/block_origins.h"

#include <stdlib.h>
#include <string.h>

#include "common/array.h"

/* Moves the open chunk c's run starts from offsets to wide (whole origins). */
static int widen_chunk(block_origin_table *t, block_origin_chunk *c) {
    size_t k = t->n_offsets - c->first;
    if (t->n_wide + k + BLOCK_ORIGIN_CHUNK >= BLOCK_ORIGIN_WIDE ||
        STRATA_ARRAY_RESERVE(t->wide, t->cap_wide, t->n_wide + k + 1) != 0)
        return -1;
    for (size_t i = 0; i < k; i++)
        t->wide[t->n_wide + i] = c->base + t->offsets[c->first + i];
    t->n_offsets = c->first;
    c->first = (uint32_t)t->n_wide | BLOCK_ORIGIN_WIDE;
    t->n_wide += k;
    return 0;
}

/* Stores origin as the open chunk c's next run start. */
static int push_start(block_origin_table *t, block_origin_chunk *c, uint32_t origin) {
    if (!(c->first & BLOCK_ORIGIN_WIDE) && (origin < c->base || origin - c->base > UINT16_MAX) &&
        widen_chunk(t, c) != 0)
        return -1;
    if (c->first & BLOCK_ORIGIN_WIDE) {
        if (STRATA_ARRAY_RESERVE(t->wide, t->cap_wide, t->n_wide + 1) != 0)
            return -1;
        t->wide[t->n_wide++] = origin;
        return 0;
    }
    if (STRATA_ARRAY_RESERVE(t->offsets, t->cap_offsets, t->n_offsets + 1) != 0)
        return -1;
    t->offsets[t->n_offsets++] = (uint16_t)(origin - c->base);
    return 0;
}

int block_origin_table_append(block_origin_table *t, uint32_t origin) {
    size_t at = t->n % BLOCK_ORIGIN_CHUNK;
    if (at == 0) {
        if (t->n_offsets >= BLOCK_ORIGIN_WIDE ||
            STRATA_ARRAY_RESERVE(t->chunks, t->cap_chunks, t->n / BLOCK_ORIGIN_CHUNK + 1) != 0)
            return -1;
        block_origin_chunk *c = &t->chunks[t->n / BLOCK_ORIGIN_CHUNK];
        *c = (block_origin_chunk){1, origin, (uint32_t)t->n_offsets};
        if (push_start(t, c, origin) != 0)
            return -1;
    } else if (origin != t->last + 1 || t->last == UINT32_MAX) {
        block_origin_chunk *c = &t->chunks[t->n / BLOCK_ORIGIN_CHUNK];
        if (push_start(t, c, origin) != 0)
            return -1;
        c->starts |= (uint64_t)1 << at;
    }
    t->last = origin;
    t->n++;
    return 0;
}

/* realloc to exactly n items of size, keeping the array if that fails. */
static void *shrink_array(void *p, size_t n, size_t size, size_t *cap) {
    if (p == NULL || n == *cap)
        return p;
    void *q = realloc(p, (n > 0 ? n : 1) * size);
    if (q == NULL)
        return p;
    *cap = n;
    return q;
}

void block_origin_table_shrink(block_origin_table *t) {
    size_t n_chunks = (t->n + BLOCK_ORIGIN_CHUNK - 1) / BLOCK_ORIGIN_CHUNK;
    t->chunks = shrink_array(t->chunks, n_chunks, sizeof *t->chunks, &t->cap_chunks);
    t->offsets = shrink_array(t->offsets, t->n_offsets, sizeof *t->offsets, &t->cap_offsets);
    t->wide = shrink_array(t->wide, t->n_wide, sizeof *t->wide, &t->cap_wide);
}

size_t block_origin_table_bytes(const block_origin_table *t) {
    return t->cap_chunks * sizeof *t->chunks + t->cap_offsets * sizeof *t->offsets +
           t->cap_wide * sizeof *t->wide;
}

void block_origin_table_free(block_origin_table *t) {
    free(t->chunks);
    free(t->offsets);
    free(t->wide);
    memset(t, 0, sizeof *t);
}
