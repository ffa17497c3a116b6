/*
 * bucket_conformance.h - the behaviour every bucket backend must show, as a cmocka suite.
 *
 * The suite is written only against bucket.h, so each backend's test (FILESYSTEM now; S3 against
 * radosgw and AZURE against Azurite later) runs the same checks: put/get, overwrite, ranged reads,
 * missing keys, attributes, delete, ordered listing (flat and recursive, 1,000 objects), early
 * stop, key validation, statistics and concurrent writers and readers.
 *
 * Each test gets a fresh, empty bucket from `open` and hands it back to `cleanup` (which closes it
 * and removes whatever the test left behind). Link bucket_conformance.c into the test executable.
 */
#ifndef STRATA_BUCKET_CONFORMANCE_H
#define STRATA_BUCKET_CONFORMANCE_H

#include "bucket/bucket.h"

typedef struct bucket_conformance_backend {
    const char *name; /* cmocka group name, e.g. "bucket_conformance_filesystem" */
    int (*open)(void *ctx, bucket **out, strata_error *err);
    void (*cleanup)(void *ctx, bucket *b);
    void *ctx;
} bucket_conformance_backend;

/* Runs the suite; returns the number of failed tests (0 on success). Not reentrant. */
int bucket_conformance_run(const bucket_conformance_backend *backend);

#endif
