/*
 * block_merge_testdata.h - source blocks for tests of merged blocks: a FILESYSTEM bucket fixture,
 * blocks written as the ingester writes them (data object, then meta.json), and three sources (A,
 * B, C) whose answers the tests know. Shared by lib/block's block_merge_test (the merger) and the
 * querier's merged_block_test (the engine's answers over sources and over their merge), so the
 * data each checks is the same; the querier's API test uploads its own block with it too. Test code
 * only: it asserts with cmocka and keeps test-short names.
 */
#ifndef STRATA_BLOCK_MERGE_TESTDATA_H
#define STRATA_BLOCK_MERGE_TESTDATA_H

#include <stddef.h>
#include <stdint.h>

#include "block/block_merge.h"
#include "block/block_writer.h"
#include "block/ulid.h"
#include "bucket/bucket.h"

#define SEC INT64_C(1000000000)
#define BASE_NS (INT64_C(1764633600) * SEC) /* 2025-12-02T00:00:00Z */
#define MAX_FRAMES 6
#define MAX_SAMPLES 6
#define TENANT "anonymous"
#define CPU "process_cpu:samples:count:cpu:nanoseconds:delta"
#define MEM "memory:inuse_space:bytes:space:bytes"
#define API_CPU "process_cpu:samples:count:cpu:nanoseconds:delta{job=\"api\", pod=\"a-1\"}"

typedef struct tsample {
    const char *frames[MAX_FRAMES]; /* leaf first, NULL-terminated */
    int64_t value;
} tsample;

typedef struct tprofile {
    const char *type;
    const char *labels;
    int64_t time_ms;              /* after BASE_NS */
    tsample samples[MAX_SAMPLES]; /* up to the first with value 0 */
} tprofile;

typedef struct fixture {
    char dir[64];
    bucket *store;
} fixture;

/* A FILESYSTEM bucket in a new temporary directory; close removes it. */
void fixture_open(fixture *fx);
void fixture_close(fixture *fx);
/* Removes dir and everything under it. */
void remove_tree(const char *dir);
/* TENANT/<id>/<file>. */
void block_key(const ulid *id, const char *file, char *key, size_t cap);
/* Uploads a finished writer's block as the ingester does: data object first, meta.json last;
 * frees the writer. */
void upload_writer(bucket *store, block_writer *w, ulid *id);
/* The same for another tenant. */
void upload_writer_as(bucket *store, block_writer *w, const char *tenant, ulid *id);
void add_tprofile(block_writer *w, const tprofile *p);
/* Writes a level-1 block of the given profiles (in the given order) and returns its ULID. */
ulid write_source(bucket *store, const tprofile *profiles, size_t n);
/* block_merge of ids into store, failing the test with the error if it fails. */
void merge_ok(bucket *store, const ulid *ids, size_t n, const block_merge_options *opts,
              block_merge_result *result);

/* Block A: two services, CPU and memory; B: the same series (and one new) at overlapping times,
 * with symbols first used in a different order; C: later data of one series. */
extern const tprofile block_a[4];
extern const tprofile block_b[4];
extern const tprofile block_c[2];

#endif
