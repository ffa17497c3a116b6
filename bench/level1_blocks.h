/*
 * level1_blocks.h - agent-like level-1 blocks written straight into a bucket, as ingesters write
 * them, for the compaction benchmarks (compact_bench: the merger alone; compactor_bench: the
 * whole compactor service).
 */
#ifndef STRATA_BENCH_LEVEL1_BLOCKS_H
#define STRATA_BENCH_LEVEL1_BLOCKS_H

#include <stddef.h>
#include <stdint.h>

#include "bucket/bucket.h"

/*
 * Writes `minutes` of bench/agentgen data for `processes` processes (seed `seed`) under tenant:
 * one block per `block_seconds` of data (1: as an ingester flushing every second; longer, as
 * blocks an earlier compaction would have made, to reach a day of data without 86,400 files),
 * each second holding the processes whose 10 s profile ends in that second
 * (process i's profile of window w is at base_ns + (10 w + i mod 10) s + i us), data object
 * first and meta.json last. As the ingester, each block is cut (block_writer_detach) from one
 * long-lived dictionary writer, dropped when it passes 256 MiB (ingester.max_symbol_bytes), so the
 * blocks carry dictionary origins. Exits the benchmark with a message on any failure.
 */
void write_level1_blocks(bucket *store, const char *tenant, size_t processes, uint64_t seed,
                         double minutes, int64_t base_ns, int block_seconds);

#endif
