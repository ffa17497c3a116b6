/*
 * write_limits.h - the write path's side of the per-tenant limits (lib/limits): what a parsed
 * WriteRaw request counts against them.
 *
 * Samples are pprof samples with a non-zero value (ingest_request.n_pprof_samples: DESIGN.md's
 * unit, one stack with its values whatever the number of sample types; zero samples are dropped
 * and cost nothing stored). Series are the series the request writes as queries show them: one
 * per (profile type, label set), so a pprof with two sample types writes two; each is hashed from
 * the label set's hash (computed once per request series) and its profile type's strings, and
 * only for a tenant with a series limit (hashing is most of the admission's cost). The
 * request is admitted or refused whole (limits_admit), after it parsed and before anything of it
 * is handed to the batcher, so a refused request has stored nothing.
 */
#ifndef STRATA_INGESTER_WRITE_LIMITS_H
#define STRATA_INGESTER_WRITE_LIMITS_H

#include <stdint.h>

#include "common/error.h"
#include "limits/limits.h"
#include "write_raw.h"

/* Admits req for tenant at now_ns (monotonic) or refuses it: -1 with *reason LIMITS_RATE or
 * LIMITS_SERIES and err RESOURCE_EXHAUSTED naming the tenant, the limit and its value, or
 * LIMITS_NONE when out of memory. Costs nothing when no tenant has a limit. */
int ingest_request_admit(limits_enforcer *l, const char *tenant, const ingest_request *req,
                         int64_t now_ns, limits_reason *reason, strata_error *err);

#endif
