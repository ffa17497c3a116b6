/*
 * bucket.h - object storage, the one place Strata keeps data (blocks, meta.json, marks).
 *
 * A bucket is a flat namespace of immutable-by-convention objects addressed by keys, as in S3,
 * Azure Blob Storage and Thanos objstore. Every service talks to it through this interface; the
 * backend (FILESYSTEM here; S3 and AZURE later, each in its own file behind bucket_backend.h) is
 * chosen by configuration, so callers never change when a backend is added.
 *
 * Keys are '/'-separated relative paths such as "01HX.../meta.json". A key is rejected with
 * INVALID_ARGUMENT when it is empty, longer than BUCKET_KEY_MAX, starts or ends with '/', contains
 * "//", or has a "." or ".." segment (keys are C strings, so they cannot contain NUL). Those rules
 * keep keys portable across backends and make path traversal impossible on the filesystem.
 *
 * Semantics every backend provides:
 *   - bucket_upload is atomic: readers see the previous object or the whole new one, never a part;
 *     once it returns 0 the object is durable. Uploading an existing key replaces it.
 *   - bucket_get appends the object to a buffer; NOT_FOUND when there is no such object.
 *   - bucket_get_range appends up to `length` bytes from `offset` (BUCKET_TO_END for the rest).
 *     A range reaching past the end returns the bytes that exist; offset == size returns nothing;
 *     offset > size is OUT_OF_RANGE; a missing object is NOT_FOUND.
 *   - bucket_delete of a missing key succeeds (deletion is idempotent).
 *   - bucket_iterate lists keys under a directory in lexicographic (byte) order, like Thanos Iter:
 *     `dir` is "" for the top or a directory with or without a trailing '/'. Non-recursive
 *     listing yields the objects directly in dir and each sub-directory once, as "dir/sub/";
 *     recursive listing yields every object below dir. A missing directory lists nothing.
 *   - Keys are given and returned without the bucket's prefix (see below).
 * Every function is safe to call from several threads at once on the same bucket.
 *
 * Configuration follows Thanos objstore YAML:
 *     type: FILESYSTEM          # case-insensitive; S3 and AZURE are planned
 *     config:
 *       directory: /var/lib/strata
 *     prefix: tenant-a          # optional; slashes trimmed; every key is stored under it
 * bucket_open_config decodes it from a node of the config module, so a service config embeds it
 * (`bucket:` as a CONFIG_RAW field) and errors point into the service's file.
 *
 * Each bucket counts operations and failures per operation (bucket_stats) for the metrics module;
 * a listing counts once per request it sends (a page of up to 1,000 names on S3 and AZURE).
 * NOT_FOUND and OUT_OF_RANGE answers are outcomes, not failures, and are not counted as failures.
 */
#ifndef STRATA_BUCKET_H
#define STRATA_BUCKET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/buffer.h"
#include "common/error.h"
#include "config/config.h"

#define BUCKET_KEY_MAX 1024
/* bucket_get_range length meaning "to the end of the object". */
#define BUCKET_TO_END UINT64_MAX
/* Return value of a bucket_iter_fn that ends the iteration early (bucket_iterate returns 0). */
#define BUCKET_ITER_STOP 1

typedef struct bucket bucket;

typedef struct bucket_object_attributes {
    uint64_t size;
    int64_t last_modified_ns; /* since the Unix epoch */
} bucket_object_attributes;

typedef enum bucket_op {
    BUCKET_OP_UPLOAD,
    BUCKET_OP_GET,
    BUCKET_OP_GET_RANGE,
    BUCKET_OP_ATTRIBUTES,
    BUCKET_OP_EXISTS,
    BUCKET_OP_DELETE,
    BUCKET_OP_ITERATE,
    BUCKET_OP_COUNT,
} bucket_op;

typedef struct bucket_stats {
    uint64_t operations[BUCKET_OP_COUNT];
    uint64_t failures[BUCKET_OP_COUNT];
} bucket_stats;

/* Called once per key; returns 0 to go on, BUCKET_ITER_STOP to stop, or -1 (after filling err)
 * to abort: bucket_iterate then returns -1 with that error. */
typedef int (*bucket_iter_fn)(const char *key, void *ctx, strata_error *err);

/* ---- Opening ----------------------------------------------------------------------------------
 */

/* Opens from a Thanos objstore mapping node (type, config, prefix). Errors name the position in
 * the YAML: "strata.yaml:4:3: bucket.config: unknown key \"directry\"". Unknown types are
 * INVALID_ARGUMENT; known but not yet built types (S3, AZURE, GCS, ...) are UNIMPLEMENTED. */
int bucket_open_config(const config_node *node, bucket **out, strata_error *err);
int bucket_open_yaml_file(const char *path, bucket **out, strata_error *err);
/* `name` is the source name in error messages. */
int bucket_open_yaml_string(const char *name, const char *yaml, size_t len, bucket **out,
                            strata_error *err);
/* A FILESYSTEM bucket rooted at directory (created if missing), with an optional prefix. */
int bucket_open_filesystem(const char *directory, const char *prefix, bucket **out,
                           strata_error *err);
/* Closes the bucket; calls in progress on other threads must have returned. NULL is allowed. */
void bucket_close(bucket *b);

/* ---- Objects ----------------------------------------------------------------------------------
 */

int bucket_upload(bucket *b, const char *key, const void *data, size_t len, strata_error *err);
/* bucket_upload of the first size bytes of the open file fd (read with pread; the file offset is
 * not used), holding at most one part of it in memory at a time: S3 and AZURE upload in parts
 * above their part size, FILESYSTEM copies it in pieces. For objects too large to hold (merged
 * blocks, written to a spool file first). */
int bucket_upload_file(bucket *b, const char *key, int fd, uint64_t size, strata_error *err);
int bucket_get(bucket *b, const char *key, strata_buffer *out, strata_error *err);
int bucket_get_range(bucket *b, const char *key, uint64_t offset, uint64_t length,
                     strata_buffer *out, strata_error *err);
int bucket_attributes(bucket *b, const char *key, bucket_object_attributes *out, strata_error *err);
int bucket_exists(bucket *b, const char *key, bool *out, strata_error *err);
int bucket_delete(bucket *b, const char *key, strata_error *err);
int bucket_iterate(bucket *b, const char *dir, bool recursive, bucket_iter_fn fn, void *ctx,
                   strata_error *err);
/* bucket_iterate of the names in dir that sort after `after` (a name in dir, without '/'; ""
 * lists everything). S3 starts the listing there (start-after), so the newest ULIDs of a
 * directory holding 10,000 blocks come in one request; FILESYSTEM reads the directory and AZURE
 * (whose List Blobs cannot start at a name) lists it whole, both skipping what comes before. */
int bucket_iterate_after(bucket *b, const char *dir, const char *after, bool recursive,
                         bucket_iter_fn fn, void *ctx, strata_error *err);

/* ---- Introspection ----------------------------------------------------------------------------
 */

/* "FILESYSTEM", "S3", ... */
const char *bucket_type(const bucket *b);
/* The trimmed prefix ("" for none). */
const char *bucket_prefix(const bucket *b);
/* A consistent-enough snapshot of the counters (each read atomically). */
void bucket_get_stats(const bucket *b, bucket_stats *out);
/* Thanos' operation label: "upload", "get", "get_range", "attributes", "exists", "delete",
 * "iter". */
const char *bucket_op_name(bucket_op op);
/* 0 if key is a valid object key, else INVALID_ARGUMENT saying why. */
int bucket_validate_key(const char *key, strata_error *err);

#endif
