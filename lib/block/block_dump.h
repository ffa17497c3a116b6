/*
 * block_dump.h - a human-readable dump of a block, for `strata block dump PATH` and debugging.
 *
 * Prints, in order: meta.json's fields (if given), the page index summary (rows, pages, stored
 * bytes per table), every series (profile type and labels), profiles (time, duration, period,
 * total, sample count; up to max_profiles), the sample label sets (format version 2: each set
 * and the sets each series uses), the rollups per series (profiles, stack rows and their total;
 * up to max_profiles series), and for each profile type the top_stacks (stack, label set) pairs
 * by summed value, each as function names leaf first. Output is plain text meant for people; its
 * layout may change between versions.
 */
#ifndef STRATA_BLOCK_DUMP_H
#define STRATA_BLOCK_DUMP_H

#include <stddef.h>
#include <stdio.h>

#include "block/block_meta.h"
#include "block/block_reader.h"
#include "common/error.h"

typedef struct block_dump_options {
    size_t max_profiles; /* profiles listed; 0 = none; default 100 */
    size_t top_stacks;   /* stacks per profile type; 0 = none; default 10 */
    size_t max_frames;   /* frames printed per stack; default 64 */
} block_dump_options;

void block_dump_options_default(block_dump_options *options);

/* Writes the dump to out. meta and options may be NULL. Fails on read errors (the block's
 * message) or OOM; output written before the failure stays written. */
int block_dump(block_reader *r, const block_meta *meta, FILE *out,
               const block_dump_options *options, strata_error *err);

#endif
