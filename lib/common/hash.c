/*
 * hash.c - see hash.h. Tables grow at 75% load (u64 map), 50% (slot map) and 60% (intern); growth
 * rehashes into a new array. The u64 map's slots are 16 bytes, four to a cache line, so at 3/4 a
 * probe sequence rarely leaves the line it starts in, and a merge's call tree of 2.7 M nodes keeps
 * its child map in 64 MiB instead of 128 (at 1/2 it measured no faster: the probes are prefetched).
 */
#include "common/hash.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common/array.h"

static inline uint64_t load_u64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

uint64_t strata_hash_bytes(const void *data, size_t len, uint64_t seed) {
    const uint8_t *p = data;
    uint64_t h = seed ^ (len * 0x9e3779b97f4a7c15ULL);
    while (len >= 8) {
        h = strata_hash_step(h, strata_hash_u64(load_u64(p)));
        p += 8;
        len -= 8;
    }
    uint64_t tail = 0;
    for (size_t i = 0; i < len; i++)
        tail |= (uint64_t)p[i] << (8 * i);
    h ^= strata_hash_u64(tail + len);
    return strata_hash_u64(h);
}

/* One 64x64->128-bit multiply per 16 bytes and chain (the wyhash construction): four times
 * fewer multiplies than strata_hash_bytes' word-at-a-time chain, for in-memory fingerprints that
 * are never stored. Each chain folds its own state into one operand and a secret into the
 * other, so the chains differ from the first block on. */
void strata_hash_bytes_pair(const void *data, size_t len, uint64_t seed_a, uint64_t seed_b,
                            uint64_t *a, uint64_t *b) {
    const uint8_t *p = data;
    uint64_t ha = strata_fold_mul(seed_a ^ STRATA_HASH_K0, len ^ STRATA_HASH_K1);
    uint64_t hb = strata_fold_mul(seed_b ^ STRATA_HASH_K2, len ^ STRATA_HASH_K3);
    size_t left = len;
    while (left > 16) {
        uint64_t w0 = load_u64(p), w1 = load_u64(p + 8);
        ha = strata_fold_mul(w0 ^ STRATA_HASH_K1, w1 ^ ha);
        hb = strata_fold_mul(w1 ^ STRATA_HASH_K3, w0 ^ hb);
        p += 16;
        left -= 16;
    }
    /* the last 1-16 bytes, zero-padded (the length was folded in first) */
    uint8_t last[16] = {0};
    if (left > 0) /* data may be NULL when len is 0 */
        memcpy(last, p, left);
    uint64_t w0 = load_u64(last), w1 = load_u64(last + 8);
    ha = strata_fold_mul(w0 ^ STRATA_HASH_K1, w1 ^ ha);
    hb = strata_fold_mul(w1 ^ STRATA_HASH_K3, w0 ^ hb);
    *a = strata_fold_mul(ha ^ STRATA_HASH_K2, STRATA_HASH_K0 ^ len);
    *b = strata_fold_mul(hb ^ STRATA_HASH_K0, STRATA_HASH_K2 ^ len);
}

static size_t capacity_for(size_t expected) {
    size_t cap = 16;
    while (cap < expected + expected / 3 + 1)
        cap *= 2;
    return cap;
}

/* Slots of a big map (a merge's call tree reaches millions of keys, probed at random) are
 * backed by transparent huge pages where the kernel allows it: with 4 KiB pages nearly every
 * probe of a 100 MB table also misses the TLB. */
#define HUGE_PAGE_BYTES ((size_t)2 << 20)

void *strata_table_alloc(size_t n, size_t size) {
    if (size != 0 && n > SIZE_MAX / size)
        return NULL;
    size_t bytes = n * size;
    if (bytes < 2 * HUGE_PAGE_BYTES || (bytes & (bytes - 1)) != 0)
        return calloc(n ? n : 1, size ? size : 1);
    void *a = aligned_alloc(HUGE_PAGE_BYTES, bytes); /* a power of two, a multiple of 2 MiB */
    if (a == NULL)
        return NULL;
    (void)madvise(a, bytes, MADV_HUGEPAGE); /* advice only: fine if refused */
    memset(a, 0, bytes);
    return a;
}

static strata_u64_slot *map_slots(size_t n) {
    return strata_table_alloc(n, sizeof(strata_u64_slot));
}

int strata_u64_map_init(strata_u64_map *m, size_t expected) {
    size_t cap = capacity_for(expected);
    m->slots = map_slots(cap);
    if (m->slots == NULL)
        return -1;
    m->count = 0;
    m->mask = cap - 1;
    return 0;
}

void strata_u64_map_free(strata_u64_map *m) {
    free(m->slots);
    memset(m, 0, sizeof *m);
}

void strata_u64_map_clear(strata_u64_map *m) {
    if (m->slots != NULL)
        memset(m->slots, 0, (m->mask + 1) * sizeof *m->slots);
    m->count = 0;
}

uint64_t *strata_u64_map_get(const strata_u64_map *m, uint64_t key) {
    if (m->slots == NULL)
        return NULL;
    size_t i = strata_hash_u64(key) & m->mask;
    for (;;) {
        uint64_t k = m->slots[i].key;
        if (k == key)
            return &m->slots[i].value;
        if (k == 0)
            return NULL;
        i = (i + 1) & m->mask;
    }
}

/* Moves the keys of the table *slots (capacity *mask + 1, or none) into fresh, an empty table of
 * cap slots, which then replaces it (both maps' growth). -1 when fresh is NULL: nothing changes. */
static int slots_rehash(strata_u64_slot **slots, size_t *mask, strata_u64_slot *fresh, size_t cap) {
    if (fresh == NULL)
        return -1;
    strata_u64_slot *old = *slots;
    for (size_t i = 0; old != NULL && i <= *mask; i++) {
        uint64_t k = old[i].key;
        if (k == 0)
            continue;
        size_t j = strata_hash_u64(k) & (cap - 1);
        while (fresh[j].key != 0)
            j = (j + 1) & (cap - 1);
        fresh[j] = old[i];
    }
    free(old);
    *slots = fresh;
    *mask = cap - 1;
    return 0;
}

static int u64_map_rehash(strata_u64_map *m, size_t cap) {
    return slots_rehash(&m->slots, &m->mask, map_slots(cap), cap);
}

static int u64_map_grow(strata_u64_map *m) {
    return u64_map_rehash(m, (m->mask + 1) * 2);
}

int strata_u64_map_reserve(strata_u64_map *m, size_t count) {
    size_t cap = capacity_for(count);
    if (m->slots == NULL)
        return strata_u64_map_init(m, count);
    return cap > m->mask + 1 ? u64_map_rehash(m, cap) : 0;
}

uint64_t *strata_u64_map_upsert(strata_u64_map *m, uint64_t key, uint64_t initial, bool *inserted) {
    if (m->slots == NULL && strata_u64_map_init(m, 16) != 0)
        return NULL;
    if ((m->count + 1) * 4 > (m->mask + 1) * 3 && u64_map_grow(m) != 0)
        return NULL;
    size_t i = strata_hash_u64(key) & m->mask;
    for (;;) {
        uint64_t k = m->slots[i].key;
        if (k == key) {
            if (inserted != NULL)
                *inserted = false;
            return &m->slots[i].value;
        }
        if (k == 0)
            break;
        i = (i + 1) & m->mask;
    }
    m->slots[i].key = key;
    m->slots[i].value = initial;
    m->count++;
    if (inserted != NULL)
        *inserted = true;
    return &m->slots[i].value;
}

int strata_slot_map_grow(strata_slot_map *m) {
    size_t cap = m->slots == NULL ? (size_t)1 << 12 : (m->mask + 1) * 2;
    return slots_rehash(&m->slots, &m->mask, calloc(cap, sizeof *m->slots), cap);
}

void strata_slot_map_free(strata_slot_map *m) {
    free(m->slots);
    memset(m, 0, sizeof *m);
}

#define INTERN_CHUNK (64 * 1024)

int strata_intern_init(strata_intern *t) {
    memset(t, 0, sizeof *t);
    t->slot_mask = 63;
    t->slots = calloc(64, sizeof *t->slots);
    t->slot_hashes = malloc(64 * sizeof *t->slot_hashes);
    if (t->slots == NULL || t->slot_hashes == NULL) {
        free(t->slots);
        free(t->slot_hashes);
        return -1;
    }
    return 0;
}

void strata_intern_free(strata_intern *t) {
    for (size_t i = 0; i < t->n_chunks; i++)
        free(t->chunks[i]);
    free(t->chunks);
    free(t->strings);
    free(t->lengths);
    free(t->slots);
    free(t->slot_hashes);
    memset(t, 0, sizeof *t);
}

static bool intern_lookup(const strata_intern *t, const char *s, size_t len, uint64_t h,
                          size_t *slot) {
    size_t i = h & t->slot_mask;
    for (;;) {
        uint32_t v = t->slots[i];
        if (v == 0) {
            *slot = i;
            return false;
        }
        uint32_t id = v - 1;
        if (t->slot_hashes[i] == h && t->lengths[id] == len &&
            memcmp(t->strings[id], s, len) == 0) {
            *slot = i;
            return true;
        }
        i = (i + 1) & t->slot_mask;
    }
}

bool strata_intern_find(const strata_intern *t, const char *s, size_t len, uint32_t *id) {
    size_t slot;
    if (t->slots == NULL || !intern_lookup(t, s, len, strata_hash_bytes(s, len, 0), &slot))
        return false;
    *id = t->slots[slot] - 1;
    return true;
}

static int intern_grow_slots(strata_intern *t) {
    size_t cap = (t->slot_mask + 1) * 2;
    uint32_t *slots = calloc(cap, sizeof *slots);
    uint64_t *hashes = malloc(cap * sizeof *hashes);
    if (slots == NULL || hashes == NULL) {
        free(slots);
        free(hashes);
        return -1;
    }
    for (size_t i = 0; i <= t->slot_mask; i++) {
        if (t->slots[i] == 0)
            continue;
        size_t j = t->slot_hashes[i] & (cap - 1);
        while (slots[j] != 0)
            j = (j + 1) & (cap - 1);
        slots[j] = t->slots[i];
        hashes[j] = t->slot_hashes[i];
    }
    free(t->slots);
    free(t->slot_hashes);
    t->slots = slots;
    t->slot_hashes = hashes;
    t->slot_mask = cap - 1;
    return 0;
}

static char *intern_copy(strata_intern *t, const char *s, size_t len) {
    if (t->n_chunks == 0 || t->chunk_used + len + 1 > t->chunk_cap) {
        size_t cap = len + 1 > INTERN_CHUNK ? len + 1 : INTERN_CHUNK;
        if (STRATA_ARRAY_RESERVE(t->chunks, t->cap_chunks, t->n_chunks + 1) != 0)
            return NULL;
        char *chunk = malloc(cap);
        if (chunk == NULL)
            return NULL;
        t->chunks[t->n_chunks++] = chunk;
        t->chunk_used = 0;
        t->chunk_cap = cap;
    }
    char *dst = t->chunks[t->n_chunks - 1] + t->chunk_used;
    if (len > 0)
        memcpy(dst, s, len);
    dst[len] = '\0';
    t->chunk_used += len + 1;
    return dst;
}

int strata_intern_add(strata_intern *t, const char *s, size_t len, uint32_t *id) {
    if (t->slots == NULL && strata_intern_init(t) != 0)
        return -1;
    if (len > UINT32_MAX)
        return -1;
    uint64_t h = strata_hash_bytes(s, len, 0);
    size_t slot;
    if (intern_lookup(t, s, len, h, &slot)) {
        *id = t->slots[slot] - 1;
        return 0;
    }
    if (t->count >= UINT32_MAX - 1)
        return -1;
    if (t->count == t->cap) {
        size_t cap = strata_array_capacity(t->cap, t->count + 1);
        const char **strings = strata_array_resize(t->strings, cap, sizeof *strings);
        if (strings == NULL)
            return -1;
        t->strings = strings;
        uint32_t *lengths = strata_array_resize(t->lengths, cap, sizeof *lengths);
        if (lengths == NULL)
            return -1;
        t->lengths = lengths;
        t->cap = cap;
    }
    char *copy = intern_copy(t, s, len);
    if (copy == NULL)
        return -1;
    uint32_t new_id = (uint32_t)t->count++;
    t->strings[new_id] = copy;
    t->lengths[new_id] = (uint32_t)len;
    t->total_bytes += len;
    t->slots[slot] = new_id + 1;
    t->slot_hashes[slot] = h;
    *id = new_id;
    if ((t->count * 10) > (t->slot_mask + 1) * 6 && intern_grow_slots(t) != 0)
        return -1; /* the string is interned; only the table failed to grow */
    return 0;
}
