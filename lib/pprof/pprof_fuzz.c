/*
 * pprof_fuzz.c - libFuzzer target for the pprof decoder.
 *
 * Decodes arbitrary bytes (gzip or plain). A rejected input must fail with INVALID_ARGUMENT or
 * RESOURCE_EXHAUSTED and a message. An accepted one is re-encoded and decoded again, and both
 * profiles must agree on every count, stack and value; re-encoding the second must then give the
 * same bytes as the first (the encoding is canonical). Any disagreement aborts.
 *
 * Seeds: lib/pprof/fuzz-corpus/.   Run: ./pprof_fuzz -max_total_time=60 CORPUS_DIR
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pprof/pprof.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(bool ok, const char *what) {
    if (!ok) {
        fprintf(stderr, "pprof_fuzz: %s\n", what);
        abort();
    }
}

static void check_same_counts(const pprof_profile *a, const pprof_profile *b) {
    check(a->n_sample_types == b->n_sample_types, "sample type count differs");
    check(a->n_samples == b->n_samples, "sample count differs");
    check(a->n_sample_location_ids == b->n_sample_location_ids, "location id count differs");
    check(a->n_sample_labels == b->n_sample_labels, "label count differs");
    check(a->n_mappings == b->n_mappings, "mapping count differs");
    check(a->n_locations == b->n_locations, "location count differs");
    check(a->n_lines == b->n_lines, "line count differs");
    check(a->n_functions == b->n_functions, "function count differs");
    check(a->n_strings == b->n_strings, "string count differs");
    check(a->n_comments == b->n_comments, "comment count differs");
}

static void check_same_samples(const pprof_profile *a, const pprof_profile *b) {
    for (size_t i = 0; i < a->n_samples; i++) {
        const pprof_sample *sa = &a->samples[i], *sb = &b->samples[i];
        check(sa->location_count == sb->location_count, "stack depth differs");
        check(sa->label_count == sb->label_count, "sample label count differs");
        for (uint32_t j = 0; j < sa->location_count; j++)
            check(a->sample_location_ids[sa->location_offset + j] ==
                      b->sample_location_ids[sb->location_offset + j],
                  "stack differs");
        for (size_t t = 0; t < a->n_sample_types; t++)
            check(pprof_sample_value(a, i, t) == pprof_sample_value(b, i, t), "value differs");
    }
    for (size_t i = 0; i < a->n_strings; i++)
        check(a->strings[i].len == b->strings[i].len &&
                  (a->strings[i].len == 0 ||
                   memcmp(a->strings[i].ptr, b->strings[i].ptr, a->strings[i].len) == 0),
              "string differs");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    pprof_limits limits;
    pprof_limits_default(&limits);
    limits.max_decompressed_bytes = 4 << 20;
    pprof_profile first, second;
    strata_error err;
    if (pprof_decode(data, size, &limits, &first, &err) != 0) {
        check(err.code == STRATA_INVALID_ARGUMENT || err.code == STRATA_RESOURCE_EXHAUSTED,
              "unexpected error code");
        check(err.message[0] != '\0', "error without a message");
        pprof_profile_free(&first);
        return 0;
    }
    strata_buffer encoded = STRATA_BUFFER_INIT, again = STRATA_BUFFER_INIT;
    check(pprof_encode(&first, false, &encoded, &err) == 0, "re-encoding failed");
    /* Canonical output may be a little larger than the input (one value packed), so the size limit
     * does not apply to the second decode. */
    limits.max_decompressed_bytes = SIZE_MAX;
    check(pprof_decode(encoded.data, encoded.len, &limits, &second, &err) == 0,
          "decoding our own encoding failed");
    check_same_counts(&first, &second);
    check_same_samples(&first, &second);
    check(pprof_encode(&second, false, &again, &err) == 0, "second re-encoding failed");
    check(again.len == encoded.len && memcmp(again.data, encoded.data, encoded.len) == 0,
          "encoding is not canonical");
    strata_buffer_free(&encoded);
    strata_buffer_free(&again);
    pprof_profile_free(&first);
    pprof_profile_free(&second);
    return 0;
}
