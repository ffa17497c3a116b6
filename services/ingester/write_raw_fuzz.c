/*
 * write_raw_fuzz.c - libFuzzer target for ingest_request_parse: arbitrary bytes as a
 * WriteRawRequest, through the wire walk that checks every label string, protobuf-c and
 * pprof_decode. Checks that a refusal leaves the request empty with INVALID_ARGUMENT or
 * RESOURCE_EXHAUSTED, and that whatever is accepted holds only text fit to store: every label
 * name and value, every profile type part and every pprof string valid UTF-8 without NUL, label
 * names valid, __name__ never among the labels.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"
#include "write_raw.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(bool ok) {
    if (!ok)
        abort();
}

static void check_text(const char *s) {
    check(s != NULL && strata_utf8_check_text(s, strlen(s), NULL) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ingest_limits limits;
    ingest_limits_default(&limits);
    limits.max_series_per_request = 64;
    limits.pprof.max_decompressed_bytes = 1 << 20;
    limits.pprof.max_samples = 10000;
    ingest_request req;
    ingest_reject_reason reason;
    strata_error err;
    if (ingest_request_parse(data, size, &limits, 1, &req, &reason, &err) != 0) {
        check(err.code == STRATA_INVALID_ARGUMENT || err.code == STRATA_RESOURCE_EXHAUSTED);
        check(reason != INGEST_REJECT_NONE);
        check(req.n_series == 0 && req.n_pprofs == 0 && req.n_profiles == 0);
        ingest_request_free(&req);
        return 0;
    }
    check(reason == INGEST_REJECT_NONE);
    for (size_t i = 0; i < req.n_series; i++) {
        const label_set *ls = &req.series_labels[i];
        for (size_t j = 0; j < ls->count; j++) {
            check_text(ls->labels[j].name);
            check_text(ls->labels[j].value);
            check(label_name_is_valid(ls->labels[j].name, strlen(ls->labels[j].name)));
            check(strcmp(ls->labels[j].name, STRATA_LABEL_NAME) != 0);
        }
    }
    for (size_t i = 0; i < req.n_pprofs; i++)
        for (size_t j = 0; j < req.pprofs[i].n_strings; j++)
            check(strata_utf8_check_text(req.pprofs[i].strings[j].ptr, req.pprofs[i].strings[j].len,
                                         NULL) == 0);
    for (size_t i = 0; i < req.n_profiles; i++) {
        const profile_type *t = &req.profiles[i].type;
        check(req.profiles[i].series_index < req.n_series);
        check(req.profiles[i].pprof_index < req.n_pprofs);
        check_text(t->name);
        check_text(t->sample_type);
        check_text(t->sample_unit);
        check_text(t->period_type);
        check_text(t->period_unit);
    }
    ingest_request_free(&req);
    return 0;
}
