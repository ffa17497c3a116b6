/*
 * block_rollup.c - see block_rollup.h.
 */
#include "block/block_rollup.h"

#include <stdlib.h>
#include <string.h>

#include "block/block_format.h"
#include "common/array.h"
#include "common/hash.h"

bool block_rollup_scale(const char *sample_type, const char *sample_unit) {
    return strcmp(sample_type, "samples") == 0 && strcmp(sample_unit, "count") == 0;
}

struct block_rollup_builder {
    uint64_t *sum;     /* per stack id: wrapping sum of the rows without labels, current series */
    uint32_t *stamp;   /* per stack id: the series stamp that last touched sum */
    size_t n_stacks;   /* entries of sum and stamp */
    uint32_t series;   /* stamp of the current series (series ended so far + 1) */
    uint32_t profiles; /* profiles added to the current series */
    uint64_t next_row; /* rows emitted so far */
    uint64_t *touched; /* (stack << 32 | label set) of every row of the current series */
    size_t n_touched, cap_touched;
    strata_u64_map labelled; /* (stack << 32 | label set != 0) -> wrapping sum, current series */
    bool labelled_used;
};

static int compare_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

block_rollup_builder *block_rollup_builder_new(strata_error *err) {
    block_rollup_builder *b = calloc(1, sizeof *b);
    if (b == NULL) {
        strata_error_oom(err);
        return NULL;
    }
    b->series = 1;
    return b;
}

void block_rollup_builder_free(block_rollup_builder *b) {
    if (b == NULL)
        return;
    free(b->sum);
    free(b->stamp);
    free(b->touched);
    strata_u64_map_free(&b->labelled);
    free(b);
}

size_t block_rollup_builder_memory_bytes(const block_rollup_builder *b) {
    return sizeof *b + b->n_stacks * 12 + b->cap_touched * 8 +
           (b->labelled.slots != NULL ? (b->labelled.mask + 1) * 16 : 0);
}

/* Makes sum and stamp hold stack ids below need (new entries unstamped). */
static int ensure_stacks(block_rollup_builder *b, size_t need, strata_error *err) {
    if (need <= b->n_stacks)
        return 0;
    size_t n = strata_array_capacity(b->n_stacks, need);
    if (n > (size_t)UINT32_MAX + 1)
        n = (size_t)UINT32_MAX + 1;
    uint64_t *sum = strata_array_resize(b->sum, n, sizeof *sum);
    if (sum == NULL)
        return strata_error_oom(err);
    b->sum = sum;
    uint32_t *stamp = strata_array_resize(b->stamp, n, sizeof *stamp);
    if (stamp == NULL)
        return strata_error_oom(err);
    memset(stamp + b->n_stacks, 0, (n - b->n_stacks) * sizeof *stamp);
    b->stamp = stamp;
    b->n_stacks = n;
    return 0;
}

static int touch(block_rollup_builder *b, uint64_t key, strata_error *err) {
    if (STRATA_ARRAY_RESERVE_OR_OOM(b->touched, b->cap_touched, b->n_touched + 1, err) != 0)
        return -1;
    b->touched[b->n_touched++] = key;
    return 0;
}

/* Adds a labelled row's value into the map. */
static int add_labelled(block_rollup_builder *b, uint32_t stack, uint32_t set, uint64_t value,
                        strata_error *err) {
    uint64_t key = (uint64_t)stack << 32 | set;
    if (b->labelled.slots == NULL && strata_u64_map_init(&b->labelled, 1024) != 0)
        return strata_error_oom(err);
    bool inserted;
    uint64_t *sum = strata_u64_map_upsert(&b->labelled, key, 0, &inserted);
    if (sum == NULL)
        return strata_error_oom(err);
    if (inserted && touch(b, key, err) != 0)
        return -1;
    *sum += value; /* wrapping, as documented */
    b->labelled_used = true;
    return 0;
}

int block_rollup_builder_add(block_rollup_builder *b, const block_rollup_profile *p,
                             strata_error *err) {
    uint64_t mult = (uint64_t)p->multiplier;
    b->profiles++;
    for (uint32_t i = 0; i < p->n_samples; i++) {
        uint32_t stack = p->stacks[i];
        uint32_t set = p->label_sets != NULL ? p->label_sets[i] : 0;
        if (set != 0) {
            if (add_labelled(b, stack, set, (uint64_t)p->values[i] * mult, err) != 0)
                return -1;
            continue;
        }
        if (stack >= b->n_stacks && ensure_stacks(b, (size_t)stack + 1, err) != 0)
            return -1;
        if (b->stamp[stack] != b->series) {
            b->stamp[stack] = b->series;
            b->sum[stack] = 0;
            if (touch(b, (uint64_t)stack << 32, err) != 0)
                return -1;
        }
        b->sum[stack] += (uint64_t)p->values[i] * mult; /* wrapping, as documented */
    }
    return 0;
}

/* Forgets the current series' sums and starts the next series. */
static void next_series(block_rollup_builder *b) {
    b->n_touched = 0;
    if (b->labelled_used)
        strata_u64_map_clear(&b->labelled);
    b->labelled_used = false;
    b->profiles = 0;
    if (++b->series == 0) { /* stamps wrapped: every stamp must read as "not this series" */
        if (b->n_stacks > 0)
            memset(b->stamp, 0, b->n_stacks * sizeof *b->stamp);
        b->series = 1;
    }
}

int block_rollup_builder_end_series(block_rollup_builder *b, block_rollup_row_fn row, void *ctx,
                                    block_rollup_series *s, strata_error *err) {
    s->profile_count = b->profiles;
    s->first_stack = b->next_row;
    s->stack_count = 0;
    if (b->profiles >= BLOCK_ROLLUP_MIN_PROFILES) { /* else its sample rows are as short */
        if (b->n_touched > 1)
            qsort(b->touched, b->n_touched, sizeof *b->touched, compare_u64);
        for (size_t i = 0; i < b->n_touched; i++) {
            uint32_t stack = (uint32_t)(b->touched[i] >> 32), set = (uint32_t)b->touched[i];
            uint64_t sum =
                set == 0 ? b->sum[stack] : *strata_u64_map_get(&b->labelled, b->touched[i]);
            if (sum == 0)
                continue;
            int64_t value;
            memcpy(&value, &sum, sizeof value);
            if (row(ctx, stack, set, value, err) != 0)
                return -1;
            s->stack_count++;
        }
        b->next_row += s->stack_count;
    }
    next_series(b);
    return 0;
}

int block_rollup_build(const block_rollup_profile *profiles, size_t n_profiles, size_t n_series,
                       size_t n_stacks, block_rollup_row_fn row, void *ctx,
                       block_rollup_series *series, strata_error *err) {
    if (n_series >= UINT32_MAX)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "rollup: too many series");
    memset(series, 0, n_series * sizeof *series);
    block_rollup_builder *b = block_rollup_builder_new(err);
    int rc = b != NULL ? ensure_stacks(b, n_stacks + 1, err) : -1;
    for (size_t i = 0; rc == 0 && i < n_profiles;) {
        uint32_t s = profiles[i].series;
        if (s >= n_series || (i > 0 && s < profiles[i - 1].series)) {
            rc = strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                  "rollup: profiles not sorted by series, or series %u out of "
                                  "range",
                                  s);
            break;
        }
        size_t j = i;
        while (j < n_profiles && profiles[j].series == s)
            j++;
        if (j - i < BLOCK_ROLLUP_MIN_PROFILES) { /* no rollup: skip the sums */
            series[s] = (block_rollup_series){(uint32_t)(j - i), b->next_row, 0};
            i = j;
            continue;
        }
        for (; rc == 0 && i < j; i++) {
            for (uint32_t k = 0; k < profiles[i].n_samples; k++)
                if (profiles[i].stacks[k] >= n_stacks)
                    rc =
                        strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                         "rollup: stack id %u out of range", profiles[i].stacks[k]);
            if (rc == 0)
                rc = block_rollup_builder_add(b, &profiles[i], err);
        }
        if (rc == 0)
            rc = block_rollup_builder_end_series(b, row, ctx, &series[s], err);
    }
    /* Series without profiles keep stack_count 0; their first_stack points where rows would go. */
    uint64_t at = 0;
    for (size_t s = 0; rc == 0 && s < n_series; s++) {
        if (series[s].profile_count == 0)
            series[s].first_stack = at;
        at = series[s].first_stack + series[s].stack_count;
    }
    block_rollup_builder_free(b);
    return rc;
}
