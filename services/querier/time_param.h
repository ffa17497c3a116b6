/*
 * time_param.h - the time syntax of the JSON API and the command-line client: Unix milliseconds,
 * RFC 3339 ("2026-12-02T12:00:00Z", fractions and offsets allowed), "now" or "now-<duration>"
 * ("now-1h", durations as in the config files).
 */
#ifndef STRATA_QUERIER_TIME_PARAM_H
#define STRATA_QUERIER_TIME_PARAM_H

#include <stdint.h>

#include "common/error.h"

/* Parses text into ns since the epoch; `name` prefixes the error message. */
int query_parse_time(const char *name, const char *text, int64_t now_ns, int64_t *out,
                     strata_error *err);

#endif
