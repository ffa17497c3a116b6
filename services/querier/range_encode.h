/*
 * range_encode.h - a QueryRange answer as Parca's QueryRangeResponse, written straight to bytes.
 *
 * A day of 100 series at a 60 s step is 144,000 MetricsSample messages; building a protobuf-c
 * struct and a Timestamp struct for each, then sizing and packing them through protobuf-c's
 * reflection, cost as much as the query itself. This writes the same wire format in two passes
 * over the points (sizes, then bytes) into one reserved buffer (lib/common/protobuf_writer.h).
 */
#ifndef STRATA_QUERIER_RANGE_ENCODE_H
#define STRATA_QUERIER_RANGE_ENCODE_H

#include "common/buffer.h"
#include "common/error.h"
#include "engine.h"

/* Appends the QueryRangeResponse of series[0..n) to out (fields in number order; zero scalars
 * omitted, as proto3). */
int range_encode_response(const range_series *series, size_t n, strata_buffer *out,
                          strata_error *err);

#endif
