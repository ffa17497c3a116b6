/*
 * write_limits.c - see write_limits.h.
 */
#include "write_limits.h"

#include <stdlib.h>
#include <string.h>

#include "common/hash.h"
#include "labels/labels.h"

/* Requests with at most this many profiles (or series) hash on the stack. */
#define STACK_HASHES 64

static uint64_t string_hash(const char *s, uint64_t seed) {
    return strata_hash_bytes(s, strlen(s), seed);
}

static uint64_t profile_type_hash(const profile_type *t) {
    uint64_t h = strata_hash_u64(t->delta ? 2 : 1);
    h = strata_hash_combine(h, string_hash(t->name, 11));
    h = strata_hash_combine(h, string_hash(t->sample_type, 12));
    h = strata_hash_combine(h, string_hash(t->sample_unit, 13));
    h = strata_hash_combine(h, string_hash(t->period_type, 14));
    return strata_hash_combine(h, string_hash(t->period_unit, 15));
}

int ingest_request_admit(limits_enforcer *l, const char *tenant, const ingest_request *req,
                         int64_t now_ns, limits_reason *reason, strata_error *err) {
    *reason = LIMITS_NONE;
    if (!limits_enabled(l))
        return 0;
    limits_values v;
    limits_tenant_values(l, tenant, &v);
    if (v.ingestion_rate_samples == 0 && v.max_active_series == 0)
        return 0;
    if (v.max_active_series == 0) /* no series to hash */
        return limits_admit(l, tenant, now_ns, req->n_pprof_samples, NULL, 0, reason, err);
    uint64_t stack_series[STACK_HASHES], stack_labels[STACK_HASHES];
    uint64_t *series = stack_series, *labels = stack_labels;
    if (req->n_profiles > STACK_HASHES &&
        (series = malloc(req->n_profiles * sizeof *series)) == NULL)
        return strata_error_oom(err);
    if (req->n_series > STACK_HASHES && (labels = malloc(req->n_series * sizeof *labels)) == NULL) {
        if (series != stack_series)
            free(series);
        return strata_error_oom(err);
    }
    for (size_t i = 0; i < req->n_series; i++)
        labels[i] = label_set_hash(&req->series_labels[i]);
    for (size_t i = 0; i < req->n_profiles; i++) {
        const ingest_profile *p = &req->profiles[i];
        series[i] = strata_hash_combine(labels[p->series_index], profile_type_hash(&p->type));
    }
    int rc =
        limits_admit(l, tenant, now_ns, req->n_pprof_samples, series, req->n_profiles, reason, err);
    if (series != stack_series)
        free(series);
    if (labels != stack_labels)
        free(labels);
    return rc;
}
