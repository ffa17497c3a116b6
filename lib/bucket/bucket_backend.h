/*
 * bucket_backend.h - the contract between the generic bucket layer and a storage backend.
 *
 * bucket.c validates keys, applies the prefix, counts operations and then calls the backend
 * through this vtable with full keys (prefix included). A backend therefore only maps the
 * semantics documented in bucket.h onto its store: each operation must be safe to call from many
 * threads at once, NOT_FOUND / OUT_OF_RANGE must be reported with exactly those codes, and
 * `iterate` must yield full keys in lexicographic order (the generic layer strips the prefix).
 *
 * Adding a backend (S3, AZURE) means one new file with a `bucket_<name>_open_config` function and
 * one row in the type table in bucket_config.c; no caller changes. A store that answers HTTP fills
 * a bucket_remote_dialect (bucket_remote.h) and uses the shared remote operations.
 */
#ifndef STRATA_BUCKET_BACKEND_H
#define STRATA_BUCKET_BACKEND_H

#include "bucket/bucket.h"

/* What an upload sends: size bytes in memory (data), or the first size bytes of an open file (fd,
 * read with pread), so that a large object never has to sit in memory whole. */
typedef struct bucket_upload_body {
    const uint8_t *data; /* NULL for a file body */
    int fd;
    uint64_t size;
} bucket_upload_body;

/* Points *out at the body's bytes [offset, offset + len), which must lie within it: in place for
 * a memory body, read into scratch (reset first) for a file body. UNAVAILABLE when the file
 * cannot be read or is shorter than its size (the local disk's trouble, worth retrying). */
int bucket_upload_body_read(const bucket_upload_body *body, uint64_t offset, size_t len,
                            strata_buffer *scratch, const uint8_t **out, strata_error *err);

/* One listing. A backend that can ask its store to start after a key (S3's start-after) should:
 * the generic layer drops names at or before start_after anyway, so one that cannot (AZURE's List
 * Blobs) lists the directory whole and stays correct, only dearer. */
typedef struct bucket_list_request {
    const char *dir;         /* full key: "" or ends with '/' */
    const char *start_after; /* full key; NULL: from the start */
    bool recursive;
    uint64_t requests; /* set by the backend: requests sent (pages of a remote listing) */
} bucket_list_request;

typedef struct bucket_backend_ops {
    const char *type; /* "FILESYSTEM" */
    int (*upload)(void *impl, const char *key, const bucket_upload_body *body, strata_error *err);
    int (*get_range)(void *impl, const char *key, uint64_t offset, uint64_t length,
                     strata_buffer *out, strata_error *err);
    int (*attributes)(void *impl, const char *key, bucket_object_attributes *out,
                      strata_error *err);
    int (*exists)(void *impl, const char *key, bool *out, strata_error *err);
    int (*delete_object)(void *impl, const char *key, strata_error *err);
    /* Lists req->dir; see bucket_list_request. */
    int (*iterate)(void *impl, bucket_list_request *req, bucket_iter_fn fn, void *ctx,
                   strata_error *err);
    void (*close)(void *impl);
} bucket_backend_ops;

/* Wraps a backend in a bucket; prefix may be NULL. On failure the backend is closed. */
int bucket_new(const bucket_backend_ops *ops, void *impl, const char *prefix, bucket **out,
               strata_error *err);

/* The backend of b when it was made with ops (bucket_new), else NULL: how a wrapper such as
 * bucket_cache finds its own state behind a bucket it made. */
void *bucket_impl_of(const bucket *b, const bucket_backend_ops *ops);

/* FILESYSTEM: opens (creating if needed) the root directory. */
int bucket_filesystem_new(const char *directory, void **impl, strata_error *err);
extern const bucket_backend_ops bucket_filesystem_ops;

#endif
