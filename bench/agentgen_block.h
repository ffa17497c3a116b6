/*
 * agentgen_block.h - writes bench/agentgen's profiles straight into a block writer.
 *
 * Design. The pprof path (agentgen_profile, then block_writer_add_profile) builds every profile's
 * stacks frame by frame and interns them frame by frame again in the writer: an hour of 100 agents
 * (72 M samples) took about 17 minutes on two threads, a day (1.7 G samples) would take hours,
 * while every stack recurs in every profile that draws it. This path writes the same content
 * through the writer's id path (block_writer.h: intern string, mapping, function, location, stack
 * path, then add_profile_stacks), with caches that live as long as one block writer:
 *   - (binary, rank) -> block stack id, an array: a drawn stack costs one lookup, and each stack
 *     is built (agentgen_stack) and interned once per block;
 *   - binary -> mapping id, (binary, function) -> function id, address (which identifies a
 *     frame) -> location id, consulted only while a stack is new to the block.
 * A profile then costs its Zipf draws, one lookup per drawn stack and the writer's
 * add_profile_stacks.
 *
 * Same content, same ids. Symbols and stacks new to the block are interned in the order the pprof
 * path interns them: the profile's mappings (binary, then kernel), then functions and locations in
 * sample order, frame by frame leaf first, then the profile's new stacks root-first in
 * lexicographic order of their location ids, as the writer orders its stack-cache misses. So a
 * block written this way holds the same series, profiles, samples and symbols as one written
 * through the pprof path, with the same ids (bench/agentgen_block_test.c compares both through
 * block_reader and reports whether the data objects are byte-identical too).
 *
 * Single-threaded, like the writer and the generator it uses.
 */
#ifndef STRATA_BENCH_AGENTGEN_BLOCK_H
#define STRATA_BENCH_AGENTGEN_BLOCK_H

#include <stddef.h>
#include <stdint.h>

#include "agentgen.h"
#include "block/block_writer.h"

typedef struct agentgen_writer agentgen_writer;

/* g must outlive the writer; the writer uses g's draws scratch, as agentgen_profile does. */
agentgen_writer *agentgen_writer_new(agentgen *g, strata_error *err);
void agentgen_writer_free(agentgen_writer *aw);

/* Directs the following adds at w, a writer no other code adds to: forgets the ids of the
 * previous one. w may be NULL (no target until the next start). */
void agentgen_writer_start(agentgen_writer *aw, block_writer *w);

/* Adds `process`'s profile of `window` to the current writer, as
 *   block_writer_add_profile(w, labels, type, time_ns, duration_ns, agentgen_period(g), &p,
 *                            sample_type_index, err)
 * with p from agentgen_profile(g, process, window, &p) would: sample_type_index 0 is samples/count,
 * 1 cpu/nanoseconds. FAILED_PRECONDITION without a writer, INVALID_ARGUMENT for another index. */
int agentgen_writer_add(agentgen_writer *aw, size_t process, uint64_t window,
                        const label_set *labels, const profile_type *type, int64_t time_ns,
                        int64_t duration_ns, size_t sample_type_index, strata_error *err);

#endif
