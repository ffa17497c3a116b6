/*
 * block_rollup.c - see block_rollup.h.
 */
#include "block/block_rollup.h"

#include <stdlib.h>
#include <string.h>

#include "block/block_format.h"
#include "common/hash.h"

bool block_rollup_scale(const char *sample_type, const char *sample_unit) {
    return strcmp(sample_type, "samples") == 0 && strcmp(sample_unit, "count") == 0;
}

typedef struct rollup_state {
    uint64_t *sum;     /* per stack id: wrapping sum of the rows without labels, current series */
    uint32_t *stamp;   /* per stack id: series id + 1 that last touched sum */
    uint64_t *touched; /* (stack << 32 | label set) of every row of the current series */
    size_t n_touched, cap_touched;
    strata_u64_map labelled; /* (stack << 32 | label set != 0) -> wrapping sum, current series */
    bool labelled_used;
} rollup_state;

static int compare_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static int touch(rollup_state *st, uint64_t key, strata_error *err) {
    if (st->n_touched == st->cap_touched) {
        size_t cap = st->cap_touched ? st->cap_touched * 2 : 1024;
        uint64_t *grown = realloc(st->touched, cap * sizeof *grown);
        if (grown == NULL)
            return strata_error_oom(err);
        st->touched = grown;
        st->cap_touched = cap;
    }
    st->touched[st->n_touched++] = key;
    return 0;
}

/* Adds a labelled row's value into the map. */
static int add_labelled(rollup_state *st, uint32_t stack, uint32_t set, uint64_t value,
                        strata_error *err) {
    uint64_t key = (uint64_t)stack << 32 | set;
    if (st->labelled.slots == NULL && strata_u64_map_init(&st->labelled, 1024) != 0)
        return strata_error_oom(err);
    bool inserted;
    uint64_t *sum = strata_u64_map_upsert(&st->labelled, key, 0, &inserted);
    if (sum == NULL)
        return strata_error_oom(err);
    if (inserted && touch(st, key, err) != 0)
        return -1;
    *sum += value; /* wrapping, as documented */
    st->labelled_used = true;
    return 0;
}

/* Adds one profile's rows into the sums of series `stamp` - 1. */
static int add_profile(rollup_state *st, const block_rollup_profile *p, size_t n_stacks,
                       uint32_t stamp, strata_error *err) {
    uint64_t mult = (uint64_t)p->multiplier;
    for (uint32_t i = 0; i < p->n_samples; i++) {
        uint32_t stack = p->stacks[i];
        if (stack >= n_stacks)
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "rollup: stack id %u out of range", stack);
        uint32_t set = p->label_sets != NULL ? p->label_sets[i] : 0;
        if (set != 0) {
            if (add_labelled(st, stack, set, (uint64_t)p->values[i] * mult, err) != 0)
                return -1;
            continue;
        }
        if (st->stamp[stack] != stamp) {
            st->stamp[stack] = stamp;
            st->sum[stack] = 0;
            if (touch(st, (uint64_t)stack << 32, err) != 0)
                return -1;
        }
        st->sum[stack] += (uint64_t)p->values[i] * mult; /* wrapping, as documented */
    }
    return 0;
}

/* Emits the non-zero sums of the current series in (stack, label set) order. */
static int emit_series(rollup_state *st, block_rollup_row_fn row, void *ctx, block_rollup_series *s,
                       uint64_t *next_row, strata_error *err) {
    qsort(st->touched, st->n_touched, sizeof *st->touched, compare_u64);
    s->first_stack = *next_row;
    s->stack_count = 0;
    for (size_t i = 0; i < st->n_touched; i++) {
        uint32_t stack = (uint32_t)(st->touched[i] >> 32), set = (uint32_t)st->touched[i];
        uint64_t sum =
            set == 0 ? st->sum[stack] : *strata_u64_map_get(&st->labelled, st->touched[i]);
        if (sum == 0)
            continue;
        int64_t value;
        memcpy(&value, &sum, sizeof value);
        if (row(ctx, stack, set, value, err) != 0)
            return -1;
        s->stack_count++;
    }
    *next_row += s->stack_count;
    st->n_touched = 0;
    if (st->labelled_used)
        strata_u64_map_clear(&st->labelled);
    st->labelled_used = false;
    return 0;
}

int block_rollup_build(const block_rollup_profile *profiles, size_t n_profiles, size_t n_series,
                       size_t n_stacks, block_rollup_row_fn row, void *ctx,
                       block_rollup_series *series, strata_error *err) {
    if (n_series >= UINT32_MAX)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "rollup: too many series");
    memset(series, 0, n_series * sizeof *series);
    rollup_state st = {0};
    st.sum = malloc((n_stacks + 1) * sizeof *st.sum);
    st.stamp = calloc(n_stacks + 1, sizeof *st.stamp);
    int rc = (st.sum != NULL && st.stamp != NULL) ? 0 : strata_error_oom(err);
    uint64_t next_row = 0;
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
        series[s].profile_count = (uint32_t)(j - i);
        series[s].first_stack = next_row;
        if (j - i < BLOCK_ROLLUP_MIN_PROFILES) { /* its sample rows are as short: no rollup */
            i = j;
            continue;
        }
        for (; rc == 0 && i < j; i++)
            rc = add_profile(&st, &profiles[i], n_stacks, s + 1, err);
        if (rc == 0)
            rc = emit_series(&st, row, ctx, &series[s], &next_row, err);
    }
    /* Series without profiles keep stack_count 0; their first_stack points where rows would go. */
    uint64_t at = 0;
    for (size_t s = 0; rc == 0 && s < n_series; s++) {
        if (series[s].profile_count == 0)
            series[s].first_stack = at;
        at = series[s].first_stack + series[s].stack_count;
    }
    free(st.sum);
    free(st.stamp);
    free(st.touched);
    strata_u64_map_free(&st.labelled);
    return rc;
}
