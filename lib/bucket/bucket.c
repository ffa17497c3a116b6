/*
 * bucket.c - the generic bucket layer: key validation, prefixing, statistics and dispatch to the
 * backend (see bucket.h and bucket_backend.h).
 *
 * Every operation runs with a local strata_error so the outcome can be classified (NOT_FOUND and
 * OUT_OF_RANGE are answers, not failures) even when the caller passes a NULL error.
 */
#include "bucket/bucket_backend.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* prefix + '/' + key + NUL */
#define FULL_KEY_MAX (2 * BUCKET_KEY_MAX + 2)

struct bucket {
    const bucket_backend_ops *ops;
    void *impl;
    char *prefix; /* trimmed; "" for none */
    size_t prefix_len;
    atomic_uint_fast64_t operations[BUCKET_OP_COUNT];
    atomic_uint_fast64_t failures[BUCKET_OP_COUNT];
};

/* ---- Keys -------------------------------------------------------------------------------------
 */

static int key_error(const char *key, const char *why, strata_error *err) {
    return strata_error_set(err, STRATA_INVALID_ARGUMENT, "invalid object key \"%.200s\": %s", key,
                            why);
}

int bucket_validate_key(const char *key, strata_error *err) {
    if (key == NULL || key[0] == '\0')
        return key_error("", "keys must not be empty", err);
    size_t len = strlen(key);
    if (len > BUCKET_KEY_MAX)
        return key_error(key, "keys must not be longer than 1024 bytes", err);
    if (key[0] == '/')
        return key_error(key, "keys are relative and must not start with '/'", err);
    if (key[len - 1] == '/')
        return key_error(key, "keys must not end with '/'", err);
    if (strstr(key, "//") != NULL)
        return key_error(key, "keys must not contain empty segments (\"//\")", err);
    for (const char *seg = key; seg != NULL;) {
        const char *slash = strchr(seg, '/');
        size_t n = slash != NULL ? (size_t)(slash - seg) : strlen(seg);
        if ((n == 1 && seg[0] == '.') || (n == 2 && seg[0] == '.' && seg[1] == '.'))
            return key_error(key, "keys must not contain \".\" or \"..\" segments", err);
        seg = slash != NULL ? slash + 1 : NULL;
    }
    return 0;
}

/* Writes prefix/key into out (FULL_KEY_MAX bytes); key must be valid. */
static void full_key(const bucket *b, const char *key, char *out) {
    if (b->prefix_len == 0) {
        memcpy(out, key, strlen(key) + 1);
        return;
    }
    memcpy(out, b->prefix, b->prefix_len);
    out[b->prefix_len] = '/';
    memcpy(out + b->prefix_len + 1, key, strlen(key) + 1);
}

/* ---- Lifecycle --------------------------------------------------------------------------------
 */

/* Trims slashes from both ends; "" and "/" mean no prefix. Validates what is left like a key. */
static int set_prefix(bucket *b, const char *prefix, strata_error *err) {
    if (prefix == NULL)
        prefix = "";
    while (*prefix == '/')
        prefix++;
    size_t len = strlen(prefix);
    while (len > 0 && prefix[len - 1] == '/')
        len--;
    b->prefix = strndup(prefix, len);
    if (b->prefix == NULL)
        return strata_error_oom(err);
    b->prefix_len = len;
    if (len > 0 && bucket_validate_key(b->prefix, err) != 0)
        return strata_error_wrap(err, "invalid bucket prefix");
    return 0;
}

int bucket_new(const bucket_backend_ops *ops, void *impl, const char *prefix, bucket **out,
               strata_error *err) {
    *out = NULL;
    bucket *b = calloc(1, sizeof *b);
    if (b == NULL) {
        ops->close(impl);
        return strata_error_oom(err);
    }
    b->ops = ops;
    b->impl = impl;
    for (size_t i = 0; i < BUCKET_OP_COUNT; i++) {
        atomic_init(&b->operations[i], 0);
        atomic_init(&b->failures[i], 0);
    }
    if (set_prefix(b, prefix, err) != 0) {
        bucket_close(b);
        return -1;
    }
    *out = b;
    return 0;
}

void *bucket_impl_of(const bucket *b, const bucket_backend_ops *ops) {
    return b != NULL && b->ops == ops ? b->impl : NULL;
}

void bucket_close(bucket *b) {
    if (b == NULL)
        return;
    b->ops->close(b->impl);
    free(b->prefix);
    free(b);
}

/* ---- Accounting -------------------------------------------------------------------------------
 */

/* Counts the operation, classifies the outcome and hands the error to the caller. */
static int finish(bucket *b, bucket_op op, int rc, const strata_error *local, strata_error *err) {
    atomic_fetch_add_explicit(&b->operations[op], 1, memory_order_relaxed);
    if (rc == 0)
        return 0;
    if (local->code != STRATA_NOT_FOUND && local->code != STRATA_OUT_OF_RANGE)
        atomic_fetch_add_explicit(&b->failures[op], 1, memory_order_relaxed);
    if (err != NULL)
        *err = *local;
    return -1;
}

void bucket_get_stats(const bucket *b, bucket_stats *out) {
    for (size_t i = 0; i < BUCKET_OP_COUNT; i++) {
        out->operations[i] = atomic_load_explicit(&b->operations[i], memory_order_relaxed);
        out->failures[i] = atomic_load_explicit(&b->failures[i], memory_order_relaxed);
    }
}

const char *bucket_op_name(bucket_op op) {
    static const char *const names[BUCKET_OP_COUNT] = {
        "upload", "get", "get_range", "attributes", "exists", "delete", "iter",
    };
    return (unsigned)op < BUCKET_OP_COUNT ? names[op] : "unknown";
}

const char *bucket_type(const bucket *b) {
    return b->ops->type;
}

const char *bucket_prefix(const bucket *b) {
    return b->prefix;
}

/* ---- Operations -------------------------------------------------------------------------------
 */

int bucket_upload(bucket *b, const char *key, const void *data, size_t len, strata_error *err) {
    strata_error local = {0};
    char full[FULL_KEY_MAX];
    int rc = bucket_validate_key(key, &local);
    if (rc == 0 && data == NULL && len > 0)
        rc =
            strata_error_set(&local, STRATA_INVALID_ARGUMENT, "upload of \"%.200s\": no data", key);
    if (rc == 0) {
        full_key(b, key, full);
        bucket_upload_body body = {data != NULL ? data : (const uint8_t *)"", -1, len};
        rc = b->ops->upload(b->impl, full, &body, &local);
    }
    return finish(b, BUCKET_OP_UPLOAD, rc, &local, err);
}

int bucket_upload_file(bucket *b, const char *key, int fd, uint64_t size, strata_error *err) {
    strata_error local = {0};
    char full[FULL_KEY_MAX];
    int rc = bucket_validate_key(key, &local);
    if (rc == 0 && fd < 0)
        rc =
            strata_error_set(&local, STRATA_INVALID_ARGUMENT, "upload of \"%.200s\": no file", key);
    if (rc == 0) {
        full_key(b, key, full);
        bucket_upload_body body = {NULL, fd, size};
        rc = b->ops->upload(b->impl, full, &body, &local);
    }
    return finish(b, BUCKET_OP_UPLOAD, rc, &local, err);
}

int bucket_upload_body_read(const bucket_upload_body *body, uint64_t offset, size_t len,
                            strata_buffer *scratch, const uint8_t **out, strata_error *err) {
    if (offset > body->size || len > body->size - offset)
        return strata_error_set(err, STRATA_INTERNAL,
                                "upload: range %llu+%zu outside the body's %llu bytes",
                                (unsigned long long)offset, len, (unsigned long long)body->size);
    if (body->data != NULL) {
        *out = body->data + offset;
        return 0;
    }
    strata_buffer_reset(scratch);
    if (strata_buffer_reserve(scratch, len + 1) != 0)
        return strata_error_oom(err);
    size_t got = 0;
    while (got < len) {
        ssize_t n = pread(body->fd, scratch->data + got, len - got, (off_t)(offset + got));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return strata_error_set(err, STRATA_UNAVAILABLE, "upload: reading the file to send: %s",
                                    n < 0 ? strerror(errno) : "shorter than its size");
        got += (size_t)n;
    }
    scratch->len = len;
    *out = scratch->data;
    return 0;
}

static int read_range(bucket *b, bucket_op op, const char *key, uint64_t offset, uint64_t length,
                      strata_buffer *out, strata_error *err) {
    strata_error local = {0};
    char full[FULL_KEY_MAX];
    int rc = bucket_validate_key(key, &local);
    if (rc == 0) {
        full_key(b, key, full);
        size_t before = out->len;
        rc = b->ops->get_range(b->impl, full, offset, length, out, &local);
        if (rc != 0)
            out->len = before;
    }
    return finish(b, op, rc, &local, err);
}

int bucket_get(bucket *b, const char *key, strata_buffer *out, strata_error *err) {
    return read_range(b, BUCKET_OP_GET, key, 0, BUCKET_TO_END, out, err);
}

int bucket_get_range(bucket *b, const char *key, uint64_t offset, uint64_t length,
                     strata_buffer *out, strata_error *err) {
    return read_range(b, BUCKET_OP_GET_RANGE, key, offset, length, out, err);
}

int bucket_attributes(bucket *b, const char *key, bucket_object_attributes *out,
                      strata_error *err) {
    strata_error local = {0};
    char full[FULL_KEY_MAX];
    int rc = bucket_validate_key(key, &local);
    if (rc == 0) {
        full_key(b, key, full);
        rc = b->ops->attributes(b->impl, full, out, &local);
    }
    return finish(b, BUCKET_OP_ATTRIBUTES, rc, &local, err);
}

int bucket_exists(bucket *b, const char *key, bool *out, strata_error *err) {
    strata_error local = {0};
    char full[FULL_KEY_MAX];
    *out = false;
    int rc = bucket_validate_key(key, &local);
    if (rc == 0) {
        full_key(b, key, full);
        rc = b->ops->exists(b->impl, full, out, &local);
    }
    return finish(b, BUCKET_OP_EXISTS, rc, &local, err);
}

int bucket_delete(bucket *b, const char *key, strata_error *err) {
    strata_error local = {0};
    char full[FULL_KEY_MAX];
    int rc = bucket_validate_key(key, &local);
    if (rc == 0) {
        full_key(b, key, full);
        rc = b->ops->delete_object(b->impl, full, &local);
    }
    return finish(b, BUCKET_OP_DELETE, rc, &local, err);
}

typedef struct strip_ctx {
    size_t strip;
    const char *start_after; /* full key or NULL */
    bucket_iter_fn fn;
    void *ctx;
} strip_ctx;

/* Hands the caller keys without the bucket prefix, dropping those at or before start_after (for
 * backends that cannot start a listing there). */
static int strip_prefix(const char *key, void *ctx, strata_error *err) {
    const strip_ctx *s = ctx;
    if (s->start_after != NULL && strcmp(key, s->start_after) <= 0)
        return 0;
    return s->fn(key + s->strip, s->ctx, err);
}

/* Turns "" / "a/b" / "a/b/" into "prefix/" / "prefix/a/b/" (or without prefix). */
static int iterate_dir(const bucket *b, const char *dir, char *out, strata_error *err) {
    size_t len = strlen(dir);
    if (len > 0 && dir[len - 1] == '/')
        len--;
    char trimmed[BUCKET_KEY_MAX + 1];
    if (len > BUCKET_KEY_MAX)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "invalid directory: longer than 1024 bytes");
    memcpy(trimmed, dir, len);
    trimmed[len] = '\0';
    if (len == 0) {
        memcpy(out, b->prefix, b->prefix_len);
        strcpy(out + b->prefix_len, b->prefix_len > 0 ? "/" : "");
        return 0;
    }
    if (bucket_validate_key(trimmed, err) != 0)
        return -1;
    full_key(b, trimmed, out);
    strcat(out, "/");
    return 0;
}

int bucket_iterate(bucket *b, const char *dir, bool recursive, bucket_iter_fn fn, void *ctx,
                   strata_error *err) {
    return bucket_iterate_after(b, dir, "", recursive, fn, ctx, err);
}

int bucket_iterate_after(bucket *b, const char *dir, const char *after, bool recursive,
                         bucket_iter_fn fn, void *ctx, strata_error *err) {
    strata_error local = {0};
    char full[FULL_KEY_MAX + 1], start_after[FULL_KEY_MAX + 1];
    bucket_list_request req = {.dir = full, .recursive = recursive};
    int rc = iterate_dir(b, dir != NULL ? dir : "", full, &local);
    if (rc == 0 && after != NULL && after[0] != '\0') {
        if (strchr(after, '/') != NULL || strlen(full) + strlen(after) > FULL_KEY_MAX)
            rc = strata_error_set(&local, STRATA_INVALID_ARGUMENT,
                                  "invalid listing start: a name without '/' expected");
        else
            req.start_after = strcat(strcpy(start_after, full), after);
    }
    if (rc == 0) {
        strip_ctx s = {.strip = b->prefix_len > 0 ? b->prefix_len + 1 : 0,
                       .start_after = req.start_after,
                       .fn = fn,
                       .ctx = ctx};
        rc = b->ops->iterate(b->impl, &req, strip_prefix, &s, &local);
    }
    /* Every request of the listing counts (a page holds up to 1,000 names): the operations
     * metric is what the store bills. */
    if (req.requests > 1)
        atomic_fetch_add_explicit(&b->operations[BUCKET_OP_ITERATE], req.requests - 1,
                                  memory_order_relaxed);
    return finish(b, BUCKET_OP_ITERATE, rc, &local, err);
}
