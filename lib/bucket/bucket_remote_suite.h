/*
 * bucket_remote_suite.h - tests shared by the S3 and AZURE backends against real servers.
 *
 * Runs the backend-independent conformance suite (bucket_conformance.h) with each test in a fresh
 * prefix of the server's bucket, then what only remote stores need checking: large objects going
 * through multipart / block upload (read back whole and by ranges crossing part boundaries),
 * listing across many pages, and prefixes isolating tenants. The backend's test file provides
 * `open`, which builds Thanos YAML for the server from the environment plus `extra` lines inside
 * `config:` (for example "  part_size: 5MiB\n").
 */
#ifndef STRATA_BUCKET_REMOTE_SUITE_H
#define STRATA_BUCKET_REMOTE_SUITE_H

#include <stdbool.h>

#include "bucket/bucket.h"

typedef int (*bucket_remote_open_fn)(const char *prefix, const char *extra, bucket **out,
                                     strata_error *err);

/* Returns the number of failed tests. with_conformance false runs only the remote-specific
 * tests (for a variant such as ListObjects v1). `large_extra` is added to the config of the
 * large-object test (S3: a small part_size); may be "". */
int bucket_remote_suite_run(const char *name, bucket_remote_open_fn open, const char *large_extra,
                            bool with_conformance);

/* A prefix no other run uses ("<name>-<pid>-<n>"). */
void bucket_remote_unique_prefix(const char *name, char *out, size_t out_len);

/* Deletes every object under the bucket's prefix. */
void bucket_remote_empty(bucket *b);

#endif
