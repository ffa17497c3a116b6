/*
 * hash.h - hashing and the hash tables every hot path uses.
 *
 * strata_hash_bytes is a fast non-cryptographic 64-bit hash (8 bytes per step, multiply-xorshift
 * mixing); it is stable across runs and machines, so it may be stored (series fingerprints in
 * blocks use it).
 *
 * strata_u64_map maps a non-zero 64-bit key to a 64-bit value with open addressing and linear
 * probing. Key 0 marks an empty slot, so callers hash composite keys into non-zero u64s or add 1.
 * It is the building block for de-duplicating stacks ((parent, location) -> id), symbols and
 * series without per-entry allocation.
 *
 * strata_slot_map is its sibling for tables that are mostly probed for keys not yet in them: the
 * block writer's de-duplication, where a fresh block inserts most of what it looks up. Same slots,
 * same hash and probing, but kept at most half full (a miss ends after about 2.5 probes, not 8.5
 * at 3/4), and claiming a key hands back the slot itself, so a caller can keep a fingerprint's
 * check bits beside the id and chain on to a re-hashed key when they differ.
 *
 * strata_intern interns byte strings to dense ids 0..n-1, in first-seen order, copying each
 * distinct string once into an arena. It backs every string table Strata writes.
 */
#ifndef STRATA_COMMON_HASH_H
#define STRATA_COMMON_HASH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

uint64_t strata_hash_bytes(const void *data, size_t len, uint64_t seed);
/* A 128-bit fingerprint of data under two seeds (two 64-bit chains side by side, *a and *b), for
 * de-duplicating in memory: fast (one 128-bit multiply per 16 bytes and chain), stable across
 * runs, but not to be stored (its construction may change; strata_hash_bytes is the stored
 * hash). */
void strata_hash_bytes_pair(const void *data, size_t len, uint64_t seed_a, uint64_t seed_b,
                            uint64_t *a, uint64_t *b);

static inline uint64_t strata_hash_u64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

static inline uint64_t strata_hash_combine(uint64_t a, uint64_t b) {
    return strata_hash_u64(a ^ (b + 0x9e3779b97f4a7c15ULL + (a << 6) + (a >> 2)));
}

/* wyhash's mixing secrets and step: the 128-bit product of a and b, its halves folded. */
#define STRATA_HASH_K0 0xa0761d6478bd642fULL
#define STRATA_HASH_K1 0xe7037ed1a0b428dbULL
#define STRATA_HASH_K2 0x8ebc6af09c88c6e3ULL
#define STRATA_HASH_K3 0x589965cc75374cc3ULL

static inline uint64_t strata_fold_mul(uint64_t a, uint64_t b) {
    __uint128_t r = (__uint128_t)a * b;
    return (uint64_t)r ^ (uint64_t)(r >> 64);
}

/* One step of strata_hash_bytes' chain: folds the mixed 8-byte word m into h. */
static inline uint64_t strata_hash_step(uint64_t h, uint64_t m) {
    h = (h ^ m) * 0x100000001b3ULL;
    return h ^ (h >> 29);
}

/* An incremental fingerprint of a sequence of 64-bit words, for de-duplicating records by
 * content without comparing them: two independent chains (one 128-bit multiply per word each)
 * give a 64-bit key and 32 more bits of check, so two different records share both with
 * probability about 2^-96. In memory only, never stored. */
typedef struct strata_fingerprint {
    uint64_t a, b;
} strata_fingerprint;

static inline void strata_fingerprint_init(strata_fingerprint *f, uint64_t n_words) {
    f->a = 0x5eed ^ (n_words * 0x9e3779b97f4a7c15ULL);
    f->b = 0xc0ffee ^ (n_words * 0x9e3779b97f4a7c15ULL);
}

static inline void strata_fingerprint_add(strata_fingerprint *f, uint64_t word) {
    f->a = strata_fold_mul(word ^ STRATA_HASH_K1, f->a ^ STRATA_HASH_K0);
    f->b = strata_fold_mul(word ^ STRATA_HASH_K3, f->b ^ STRATA_HASH_K2);
}

/* key is never 0 (an empty slot in open-addressing tables). */
static inline void strata_fingerprint_finish(const strata_fingerprint *f, uint64_t *key,
                                             uint32_t *check) {
    *key = strata_hash_u64(f->a) | 1;
    *check = (uint32_t)(strata_hash_u64(f->b) >> 32);
}

/* A key and its value side by side: a probe that finds its key reads the value from the same
 * cache line (a call tree's child map is probed at random, millions of times per merge). */
typedef struct strata_u64_slot {
    uint64_t key; /* 0 = empty */
    uint64_t value;
} strata_u64_slot;

typedef struct strata_u64_map {
    strata_u64_slot *slots;
    size_t count;
    size_t mask; /* capacity - 1; capacity is a power of two */
} strata_u64_map;

/* n zeroed elements of size bytes for an open-addressing table: backed by transparent huge pages
 * where the kernel allows it once the table is big (see hash.c); free with free(). */
void *strata_table_alloc(size_t n, size_t size);

int strata_u64_map_init(strata_u64_map *m, size_t expected);
void strata_u64_map_free(strata_u64_map *m);
void strata_u64_map_clear(strata_u64_map *m);
/* Returns a pointer to the value for key, or NULL. key must be non-zero. */
uint64_t *strata_u64_map_get(const strata_u64_map *m, uint64_t key);
/* Finds or inserts key. On insert the value is set to `initial` and *inserted (if given) is true.
 * Returns NULL on allocation failure. The pointer is valid until the next insert. */
uint64_t *strata_u64_map_upsert(strata_u64_map *m, uint64_t key, uint64_t initial, bool *inserted);
/* Makes room for `count` keys in all, so inserts up to that many do not grow the table (each
 * growth rehashes every key into a table twice the size; a caller that knows its size skips the
 * steps). -1 on allocation failure, the map unchanged. */
int strata_u64_map_reserve(strata_u64_map *m, size_t count);
/* Hints the cache to fetch key's first slot: a caller about to probe many keys at random
 * prefetches a few ahead so the misses overlap. */
static inline void strata_u64_map_prefetch(const strata_u64_map *m, uint64_t key) {
    if (m->slots != NULL)
        __builtin_prefetch(&m->slots[strata_hash_u64(key) & m->mask]);
}

/* An open-addressing u64 -> u64 table with strata_u64_map's slots, hash and linear probing, grown
 * (doubling, from 4,096 slots at the first claim; plain calloc, no huge pages) before it passes
 * half full. The layout is the contract: a caller may probe `slots` itself from
 * strata_hash_u64(key) & mask in steps of one until it meets its key or an empty slot (key 0),
 * and insert there after strata_slot_map_make_room, counting the key in `count`. Zero-initialise
 * to start empty. */
typedef struct strata_slot_map {
    strata_u64_slot *slots; /* NULL until the first claim */
    size_t count;
    size_t mask; /* capacity - 1; capacity is a power of two */
} strata_slot_map;

/* Doubles the table (the first call allocates 4,096 slots), rehashing every key. -1 when out of
 * memory, the map unchanged. */
int strata_slot_map_grow(strata_slot_map *m);
void strata_slot_map_free(strata_slot_map *m);

/* Grows the map if one more key would take it past half full: 0, or -1 when out of memory. */
static inline int strata_slot_map_make_room(strata_slot_map *m) {
    if (m->slots == NULL || (m->count + 1) * 2 > m->mask + 1)
        return strata_slot_map_grow(m);
    return 0;
}

/* Finds key (non-zero), or claims an empty slot for it (*inserted true, value UINT64_MAX: the
 * caller sets it). Returns NULL on allocation failure. The slot is valid until the next claim.
 * Inline: the block writer claims once per new symbol, stack and label set. */
static inline strata_u64_slot *strata_slot_map_claim(strata_slot_map *m, uint64_t key,
                                                     bool *inserted) {
    if (strata_slot_map_make_room(m) != 0)
        return NULL;
    size_t i = strata_hash_u64(key) & m->mask;
    for (;;) {
        strata_u64_slot *slot = &m->slots[i];
        if (slot->key == key) {
            *inserted = false;
            return slot;
        }
        if (slot->key == 0) {
            slot->key = key;
            slot->value = UINT64_MAX;
            m->count++;
            *inserted = true;
            return slot;
        }
        i = (i + 1) & m->mask;
    }
}

/* The bytes the slots take. */
static inline size_t strata_slot_map_bytes(const strata_slot_map *m) {
    return m->slots == NULL ? 0 : (m->mask + 1) * sizeof *m->slots;
}

/* Hints the cache to fetch key's first slot (a caller about to look up many keys). */
static inline void strata_slot_map_prefetch(const strata_slot_map *m, uint64_t key) {
    if (m->slots != NULL)
        __builtin_prefetch(&m->slots[strata_hash_u64(key) & m->mask]);
}

typedef struct strata_intern {
    char **chunks; /* arena chunks holding the string bytes, NUL-terminated */
    size_t n_chunks;
    size_t cap_chunks;
    size_t chunk_used; /* bytes used in the last chunk */
    size_t chunk_cap;
    const char **strings; /* id -> string */
    uint32_t *lengths;    /* id -> length */
    size_t count;
    size_t cap;
    uint32_t *slots; /* open addressing table of id+1, 0 = empty */
    uint64_t *slot_hashes;
    size_t slot_mask;
    size_t total_bytes; /* sum of lengths */
} strata_intern;

int strata_intern_init(strata_intern *t);
void strata_intern_free(strata_intern *t);
/* Returns the id of the string (adding it if new) in *id. */
int strata_intern_add(strata_intern *t, const char *s, size_t len, uint32_t *id);
/* Returns true and the id if present. */
bool strata_intern_find(const strata_intern *t, const char *s, size_t len, uint32_t *id);

#endif
