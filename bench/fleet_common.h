/*
 * fleet_common.h - what bench/fleet_targets and bench/fleet_agents (the load generators of
 * bench/fleet_bench.py) share.
 *
 * A fresh timestamp per profile without re-encoding it. The fleet benchmark measures how long a
 * profile takes from its scrape or push to a query that shows it, so every profile served or
 * pushed must carry its own time_nanos, and Strata stores the pprof's time_nanos (the ingester's
 * receive time only when it is 0). Re-encoding and re-gzipping every profile would cost the load
 * generator more than Strata's own ingest (an agent-like profile is ~150 KB gzipped). Instead a
 * profile is gzipped once with time_nanos left out (0 is not encoded), and each send puts a tiny
 * gzip member in front of it holding only the protobuf field `time_nanos` (field 9, a varint).
 * Both are standard: gzip allows concatenated members (Go's reader and Strata's lib/pprof inflate
 * them as one stream), and concatenated protobuf messages parse as one message, so the receiver
 * decodes the profile with that time. The member goes first so that the last member, whose ISIZE
 * trailer lib/pprof uses to size its output, is still the profile's. The member is a stored
 * (uncompressed) deflate block, built by hand: a few dozen bytes and a CRC, no deflate state.
 */
#ifndef STRATA_BENCH_FLEET_COMMON_H
#define STRATA_BENCH_FLEET_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "common/buffer.h"

/* The largest time member: 10 header + 5 stored-block + 11 payload + 8 trailer bytes. */
#define FLEET_TIME_MEMBER_MAX 40

/* Writes the gzip member that sets time_nanos to time_ns into out; returns its length. */
size_t fleet_time_member(int64_t time_ns, uint8_t out[FLEET_TIME_MEMBER_MAX]);

/* Appends the whole file to out; -1 (errno set) if it cannot be read. */
int fleet_read_file(const char *path, strata_buffer *out);

#endif
