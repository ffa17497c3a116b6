/*
 * write_raw.h - turning a WriteRaw request into validated profiles, with nothing stored yet.
 *
 * Parca's WriteRawRequest carries series (a label set with __name__ plus raw pprof payloads). This
 * module parses the protobuf, validates every label set and every pprof, and expands each pprof
 * into one profile per sample type, exactly as Parca does: a pprof with sample types
 * alloc_objects/alloc_space/inuse_objects/inuse_space becomes four profiles whose types are
 * `memory:alloc_objects:count:space:bytes` and so on, delta exactly when duration_nanos != 0.
 *
 * Every string is checked (common/utf8.h): label names and values, the deprecated tenant field
 * and every pprof string must be valid UTF-8 without NUL bytes, as Go's protobuf (so Parca)
 * demands. Label strings are checked on the wire bytes before protobuf-c unpacks them, because
 * protobuf-c's NUL-terminated copies would hide a NUL ("series 0 label \"job\" value: NUL byte at
 * offset 6"); pprof strings by pprof_decode ("series 0 sample 0: invalid pprof: string 17
 * (function 2 name): invalid UTF-8 at offset 3").
 *
 * Validation is all-or-nothing: the first problem rejects the whole request with
 * INVALID_ARGUMENT (or RESOURCE_EXHAUSTED for a limit) and a message that names the series, the
 * sample and the problem, so the caller can fix it; the ingester stores a request only after it
 * parsed completely, so a refused request has stored nothing, and other requests, concurrent or
 * on the same connection, are not affected. Parsing runs outside any lock, so concurrent requests
 * decode in parallel.
 */
#ifndef STRATA_INGESTER_WRITE_RAW_H
#define STRATA_INGESTER_WRITE_RAW_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "labels/labels.h"
#include "pprof/pprof.h"

typedef struct ingest_limits {
    size_t max_series_per_request; /* default 10,000 */
    size_t max_labels_per_series;  /* default 64, __name__ included */
    size_t max_label_name_bytes;   /* default 1,024 */
    size_t max_label_value_bytes;  /* default 4,096 */
    pprof_limits pprof;            /* samples per profile, stack depth, sizes */
} ingest_limits;

void ingest_limits_default(ingest_limits *limits);

/* One profile to store: one sample type of one pprof. */
typedef struct ingest_profile {
    size_t series_index;      /* into ingest_request.series_labels */
    size_t pprof_index;       /* into ingest_request.pprofs */
    size_t sample_type_index; /* which value of each sample */
    profile_type type;        /* owned */
    int64_t time_ns;
    int64_t duration_ns;
    int64_t period;
    size_t n_samples; /* samples with a non-zero value for this type */
} ingest_profile;

typedef struct ingest_request {
    label_set *series_labels; /* per request series, sorted, without __name__ */
    size_t n_series;
    pprof_profile *pprofs;
    size_t n_pprofs;
    ingest_profile *profiles;
    size_t n_profiles;
    size_t n_samples;       /* total non-zero samples over all profiles (one per sample type) */
    size_t n_pprof_samples; /* pprof samples with a non-zero value: DESIGN.md's unit, what the
                               ingestion rate limit counts */
    size_t raw_bytes;       /* sum of raw pprof payload sizes */
    char *node;             /* value of the `node` label of the first series, or NULL */
} ingest_request;

/* Why a request was rejected, as a short metric label value. */
typedef enum ingest_reject_reason {
    INGEST_REJECT_NONE,
    INGEST_REJECT_MALFORMED_REQUEST, /* not a WriteRawRequest */
    INGEST_REJECT_INVALID_LABELS,
    INGEST_REJECT_INVALID_PPROF,
    INGEST_REJECT_LIMIT,
    INGEST_REJECT_INTERNAL,
    INGEST_REJECT_INVALID_TENANT, /* x-scope-orgid breaks the tenant rule (common/tenant.h) */
} ingest_reject_reason;

const char *ingest_reject_reason_name(ingest_reject_reason reason);

/* Parses and validates a serialized WriteRawRequest. now_ns stands in for a pprof without
 * time_nanos. On failure *out is empty (safe to free) and *reason says why. */
int ingest_request_parse(const uint8_t *data, size_t len, const ingest_limits *limits,
                         int64_t now_ns, ingest_request *out, ingest_reject_reason *reason,
                         strata_error *err);
void ingest_request_free(ingest_request *req);

#endif
