/*
 * block_origins.h - a fresh block's stack origins held compactly in memory (block_reader.h,
 * docs/block-format.md 6.12).
 *
 * A block cut from a writer's long-lived dictionary gives each of its stacks (ids 0..n, in order)
 * the dictionary's id for it, its origin: strictly increasing with the stack id. A querier keeps
 * the origins of every fresh block it holds open, and a one-second block of 100 agents has some
 * 800,000 stacks, so how they are held is most of what an open fresh block costs.
 *
 * The origins come in runs of consecutive dictionary ids (a block's stacks are mostly ones the
 * dictionary numbered one after another: 44,000 runs for 812,000 stacks in a late block of the
 * agent benchmark). So per chunk of BLOCK_ORIGIN_CHUNK (64) stacks the table keeps a mask of the
 * stacks that start a run (whose origin is not the one before + 1; the chunk's first always does)
 * and, per run start, its origin: as 16 bits above the chunk's first origin, or whole (32 bits) in
 * `wide` for a chunk whose origins spread wider. A stack's origin is its run's first origin plus
 * its distance from the run's start, found with one popcount and one count of leading zeros.
 * That is 0.25 bytes per stack plus 2 per run (about 0.4 bytes per stack on the agent data; the
 * 16-bit offset of every stack it replaced took 2.1), and 2.25 per stack at worst, when no two
 * neighbours are consecutive.
 */
#ifndef STRATA_BLOCK_ORIGINS_H
#define STRATA_BLOCK_ORIGINS_H

#include <stddef.h>
#include <stdint.h>

#define BLOCK_ORIGIN_CHUNK 64
#define BLOCK_ORIGIN_WIDE 0x80000000u /* in block_origin_chunk.first: the starts are in wide */

typedef struct block_origin_chunk {
    uint64_t starts; /* bit i: the chunk's stack i starts a run (bit 0 always) */
    uint32_t base;   /* the origin of the chunk's first stack */
    uint32_t first;  /* where the chunk's run starts begin in offsets, or in wide | WIDE */
} block_origin_chunk;

typedef struct block_origin_table {
    block_origin_chunk *chunks;
    uint16_t *offsets; /* per run start of a narrow chunk: its origin - the chunk's base */
    uint32_t *wide;    /* per run start of a wide chunk: its origin */
    size_t n;          /* origins appended (stack ids 0..n-1) */
    size_t cap_chunks, n_offsets, cap_offsets, n_wide, cap_wide;
    uint32_t last; /* the last origin appended */
} block_origin_table;

/* Appends the origin of stack id t->n (any value: increasing is the reader's check, not this
 * table's). Returns 0, or -1 when out of memory (the table stays valid, without it). */
int block_origin_table_append(block_origin_table *t, uint32_t origin);

/* Gives back the slack of the arrays grown while appending (after the last append). */
void block_origin_table_shrink(block_origin_table *t);

/* Bytes the table holds. */
size_t block_origin_table_bytes(const block_origin_table *t);

void block_origin_table_free(block_origin_table *t);

/* The set bits of x. __builtin_popcountll is a call into libgcc on x86-64 without POPCNT (the
 * baseline Debian builds for), which a lookup per stack per block cannot afford. */
static inline unsigned block_origin_popcount(uint64_t x) {
#if defined(__POPCNT__) || defined(__aarch64__)
    return (unsigned)__builtin_popcountll(x);
#else
    x = x - ((x >> 1) & 0x5555555555555555ull);
    x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
    x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0full;
    return (unsigned)((x * 0x0101010101010101ull) >> 56);
#endif
}

/* The origin of stack id (< t->n). */
static inline uint32_t block_origin_table_get(const block_origin_table *t, uint32_t id) {
    const block_origin_chunk *c = &t->chunks[id / BLOCK_ORIGIN_CHUNK];
    unsigned at = id % BLOCK_ORIGIN_CHUNK;
    uint64_t upto = c->starts & (UINT64_MAX >> (63 - at)); /* run starts at or before id */
    unsigned run = block_origin_popcount(upto) - 1;
    unsigned run_start = 63 - (unsigned)__builtin_clzll(upto);
    uint32_t first = (c->first & BLOCK_ORIGIN_WIDE) ? t->wide[(c->first & ~BLOCK_ORIGIN_WIDE) + run]
                                                    : c->base + t->offsets[c->first + run];
    return first + (at - run_start);
}

#endif
