/*
 * block_reader_fuzz.c - libFuzzer target: opens arbitrary bytes as a block and, when that
 * succeeds, walks every series, profile, sample (and its sample label set), series' label sets,
 * rollup row, stack, location, function and mapping. Any crash, leak, sanitizer report or hang is
 * a bug; errors are expected.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "block/block_reader.h"

static void walk_stack(block_reader *r, uint32_t stack) {
    uint32_t locs[128];
    size_t depth;
    strata_error err;
    if (block_reader_stack(r, stack, locs, 128, &depth, &err) != 0)
        return;
    for (size_t i = 0; i < depth && i < 128; i++) {
        block_location loc;
        if (block_reader_location(r, locs[i], &loc, &err) != 0)
            return;
        block_mapping m;
        if (loc.has_mapping && block_reader_mapping(r, loc.mapping_id, &m, &err) != 0)
            return;
        for (uint32_t l = 0; l < loc.n_lines; l++) {
            block_function f;
            if (block_reader_function(r, loc.lines[l].function_id, &f, &err) != 0)
                return;
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    block_memory_source src = {data, size};
    block_reader_options opt;
    block_reader_options_default(&opt);
    opt.tail_guess = 512; /* exercise the second footer fetch too */
    opt.cache_bytes = 1 << 16;
    /* Mutations almost never keep CRCs valid; check them on odd sizes only, so the decoders
     * behind the checksums get fuzzed too. */
    opt.verify_checksums = (size & 1) != 0;
    block_reader *r;
    strata_error err;
    if (block_reader_open(block_memory_fetch, &src, size, &opt, &r, &err) != 0)
        return 0;
    for (uint32_t s = 0; s < block_reader_series_count(r); s++) {
        (void)block_reader_series_labels(r, s);
        (void)block_reader_series_type(r, s);
    }
    block_profile *p = NULL;
    size_t n = 0;
    if (block_reader_profiles(r, NULL, 0, INT64_MIN, INT64_MAX, &p, &n, &err) == 0) {
        block_samples samples = {0};
        for (size_t i = 0; i < n; i++) {
            samples.len = 0;
            if (block_reader_read_samples(r, &p[i], 1, &samples, &err) != 0)
                break;
            for (size_t k = 0; k < samples.len; k++) {
                walk_stack(r, samples.stacks[k]);
                const label_set *set;
                if (samples.label_sets != NULL)
                    (void)block_reader_label_set(r, samples.label_sets[k], &set, &err);
            }
        }
        block_samples_free(&samples);
    }
    free(p);
    for (uint32_t s = 0; s < block_reader_series_count(r); s++) {
        const uint32_t *sets;
        size_t n_sets;
        if (block_reader_series_label_sets(r, s, &sets, &n_sets, &err) != 0)
            break;
    }
    block_samples rollup = {0};
    for (uint32_t s = 0; block_reader_has_rollups(r) && s < block_reader_series_count(r); s++) {
        rollup.len = 0;
        if (block_reader_series_rollup(r, s, &rollup, &err) != 0)
            break;
        for (size_t k = 0; k < rollup.len; k++)
            walk_stack(r, rollup.stacks[k]);
    }
    block_samples_free(&rollup);
    block_stack_origins origins;
    if (block_reader_stack_origins(r, &origins, &err) == 0 && origins.stacks != NULL) {
        uint64_t sum = 0; /* read every origin: the reader promised n_stacks + 1, n_locations and
                          n_functions */
        for (size_t i = 0; i <= origins.n_stacks; i++)
            sum += block_stack_origin(&origins, (uint32_t)i);
        for (size_t i = 0; i < origins.n_locations; i++)
            sum += origins.location_origin[i];
        for (size_t i = 0; origins.function_origin != NULL && i < origins.n_functions; i++)
            sum += origins.function_origin[i];
        (void)sum;
    }
    block_reader_close(r);
    return 0;
}
