/*
 * bucket_filesystem.c - the FILESYSTEM backend: one file per object under a root directory.
 *
 * Every path is resolved relative to a descriptor of the root (openat and friends), and keys are
 * validated by the generic layer, so nothing outside the root is reachable through a key.
 *
 * Upload is crash-safe and atomic: the bytes go to a temporary file in the object's directory,
 * which is fsynced, renamed over the key and followed by an fsync of the directory; directories
 * created on the way are made durable by fsyncing their parents. Readers open a file once and
 * read from that inode, and rename replaces whole inodes, so a reader never sees a partial or
 * mixed object. Temporary names start with TMP_MARKER; iteration skips them and keys with such a
 * segment are rejected.
 *
 * Deleting an object removes the directories it leaves empty, up to the root, so listings stay
 * clean. That races with an upload creating a file in the same directory; upload retries when its
 * directory vanishes under it.
 *
 * Limitations of a filesystem as a bucket: a key cannot be both an object and a directory ("a"
 * and "a/b"); the second upload fails with FAILED_PRECONDITION. NFS is not supported.
 */
#include "bucket/bucket_backend.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/array.h"

#define TMP_MARKER ".strata-tmp."
#define UPLOAD_ATTEMPTS 16

typedef struct fs_bucket {
    int root_fd;
    char *root;
    atomic_uint_fast64_t tmp_counter;
} fs_bucket;

/* ---- Errors -----------------------------------------------------------------------------------
 */

static strata_status errno_status(int e) {
    switch (e) {
        case ENOENT:
        case ENOTDIR:
            return STRATA_NOT_FOUND;
        case ENOSPC:
        case EDQUOT:
        case EMFILE:
        case ENFILE:
        case ENOMEM:
            return STRATA_RESOURCE_EXHAUSTED;
        case EACCES:
        case EPERM:
        case EROFS:
            return STRATA_PERMISSION_DENIED;
        case EIO:
            return STRATA_UNAVAILABLE;
        default:
            return STRATA_INTERNAL;
    }
}

static int fs_error(const fs_bucket *fs, const char *op, const char *key, const char *step, int e,
                    strata_error *err) {
    return strata_error_set(err, errno_status(e), "filesystem bucket %s: %s \"%s\": %s: %s",
                            fs->root, op, key, step, strerror(e));
}

static int not_found(const fs_bucket *fs, const char *op, const char *key, strata_error *err) {
    return strata_error_set(err, STRATA_NOT_FOUND,
                            "filesystem bucket %s: %s \"%s\": no such object", fs->root, op, key);
}

/* Rejects keys the filesystem cannot hold: reserved temporary names, over-long segments. */
static int check_key(const char *key, strata_error *err) {
    for (const char *seg = key; seg != NULL;) {
        const char *slash = strchr(seg, '/');
        size_t n = slash != NULL ? (size_t)(slash - seg) : strlen(seg);
        if (n >= strlen(TMP_MARKER) && strncmp(seg, TMP_MARKER, strlen(TMP_MARKER)) == 0)
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "invalid object key \"%.200s\": names starting with \"%s\" "
                                    "are reserved by the filesystem bucket",
                                    key, TMP_MARKER);
        if (n > NAME_MAX)
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "invalid object key \"%.200s\": a segment is longer than %d "
                                    "bytes, which a filesystem bucket cannot store",
                                    key, NAME_MAX);
        seg = slash != NULL ? slash + 1 : NULL;
    }
    return 0;
}

static bool is_tmp_name(const char *name) {
    return strncmp(name, TMP_MARKER, strlen(TMP_MARKER)) == 0;
}

/* ---- Upload -----------------------------------------------------------------------------------
 */

static int write_all(int fd, const uint8_t *data, size_t len) {
    while (len > 0) {
        ssize_t n = write(fd, data, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        data += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Writes the body to fd: a file body in 1 MiB pieces. -1 with errno set on failure (EIO when the
 * body's file is shorter than its size). */
static int write_body(int fd, const bucket_upload_body *body) {
    if (body->data != NULL)
        return write_all(fd, body->data, body->size);
    size_t piece = (size_t)1 << 20;
    uint8_t *buf = malloc(piece);
    if (buf == NULL) {
        errno = ENOMEM;
        return -1;
    }
    int rc = 0;
    for (uint64_t off = 0; rc == 0 && off < body->size;) {
        size_t want = body->size - off < piece ? (size_t)(body->size - off) : piece;
        ssize_t n = pread(body->fd, buf, want, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (n == 0)
                errno = EIO;
            rc = -1;
        } else {
            rc = write_all(fd, buf, (size_t)n);
            off += (uint64_t)n;
        }
    }
    int saved = errno;
    free(buf);
    errno = saved;
    return rc;
}

/* Opens directory `path` (relative to the root, "" for the root), creating missing components
 * and making each creation durable. Returns an fd or -1 with errno set. */
static int open_dir_creating(const fs_bucket *fs, const char *path) {
    int fd = openat(fs->root_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    char segment[NAME_MAX + 1];
    for (const char *seg = path; fd >= 0 && *seg != '\0';) {
        const char *slash = strchr(seg, '/');
        size_t n = slash != NULL ? (size_t)(slash - seg) : strlen(seg);
        memcpy(segment, seg, n); /* n <= NAME_MAX, checked by check_key */
        segment[n] = '\0';
        int rc = mkdirat(fd, segment, 0755);
        if (rc == 0 && fsync(fd) != 0)
            rc = -1;
        else if (rc != 0 && errno == EEXIST)
            rc = 0;
        int next = rc == 0 ? openat(fd, segment, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
        int saved = errno;
        close(fd);
        errno = saved;
        fd = next;
        seg = slash != NULL ? slash + 1 : seg + n;
    }
    return fd;
}

/* Writes data to a new temporary file in dir_fd and makes it durable; fills tmp_name. */
static int write_temp(fs_bucket *fs, int dir_fd, const bucket_upload_body *body, char *tmp_name,
                      size_t tmp_len) {
    uint64_t n = atomic_fetch_add_explicit(&fs->tmp_counter, 1, memory_order_relaxed);
    snprintf(tmp_name, tmp_len, "%s%ld.%llu", TMP_MARKER, (long)getpid(), (unsigned long long)n);
    int fd = openat(dir_fd, tmp_name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    if (write_body(fd, body) != 0 || fsync(fd) != 0) {
        int saved = errno;
        close(fd);
        unlinkat(dir_fd, tmp_name, 0);
        errno = saved;
        return -1;
    }
    if (close(fd) != 0) {
        int saved = errno;
        unlinkat(dir_fd, tmp_name, 0);
        errno = saved;
        return -1;
    }
    return 0;
}

typedef enum upload_step { STEP_DIR, STEP_WRITE, STEP_RENAME, STEP_SYNC } upload_step;

/* One attempt; on failure *step says where and errno why. */
static int upload_once(fs_bucket *fs, const char *dir, const char *base,
                       const bucket_upload_body *body, upload_step *step) {
    *step = STEP_DIR;
    int dir_fd = open_dir_creating(fs, dir);
    if (dir_fd < 0)
        return -1;
    char tmp_name[64];
    *step = STEP_WRITE;
    int rc = write_temp(fs, dir_fd, body, tmp_name, sizeof tmp_name);
    if (rc == 0) {
        *step = STEP_RENAME;
        rc = renameat(dir_fd, tmp_name, dir_fd, base);
        if (rc != 0) {
            int saved = errno;
            unlinkat(dir_fd, tmp_name, 0);
            errno = saved;
        }
    }
    if (rc == 0) {
        *step = STEP_SYNC;
        rc = fsync(dir_fd);
    }
    int saved = errno;
    close(dir_fd);
    errno = saved;
    return rc;
}

static int upload_error(const fs_bucket *fs, const char *key, upload_step step, int e,
                        strata_error *err) {
    if (step == STEP_DIR && (e == ENOTDIR || e == EEXIST))
        return strata_error_set(err, STRATA_FAILED_PRECONDITION,
                                "filesystem bucket %s: upload \"%s\": an object exists where this "
                                "key needs a directory",
                                fs->root, key);
    if (step == STEP_RENAME && (e == EISDIR || e == ENOTEMPTY || e == EEXIST))
        return strata_error_set(err, STRATA_FAILED_PRECONDITION,
                                "filesystem bucket %s: upload \"%s\": objects exist below this "
                                "key, so it cannot also be an object",
                                fs->root, key);
    static const char *const steps[] = {"creating directory", "writing temporary file",
                                        "renaming into place", "syncing directory"};
    int rc = fs_error(fs, "upload", key, steps[step], e, err);
    if (e == ENOENT && err != NULL)
        err->code = STRATA_UNAVAILABLE; /* the directory kept vanishing: not a missing object */
    return rc;
}

static int fs_upload(void *impl, const char *key, const bucket_upload_body *body,
                     strata_error *err) {
    fs_bucket *fs = impl;
    if (check_key(key, err) != 0)
        return -1;
    const char *slash = strrchr(key, '/');
    size_t dir_len = slash != NULL ? (size_t)(slash - key) : 0;
    char dir[BUCKET_KEY_MAX * 2 + 2];
    memcpy(dir, key, dir_len);
    dir[dir_len] = '\0';
    const char *base = slash != NULL ? slash + 1 : key;
    upload_step step = STEP_DIR;
    for (int attempt = 0; attempt < UPLOAD_ATTEMPTS; attempt++) {
        if (upload_once(fs, dir, base, body, &step) == 0)
            return 0;
        /* ENOENT: a concurrent delete removed the (empty) directory; create it again. */
        if (errno != ENOENT || step == STEP_RENAME || step == STEP_SYNC)
            break;
    }
    return upload_error(fs, key, step, errno, err);
}

/* ---- Reads ------------------------------------------------------------------------------------
 */

/* Opens a regular file for key; NOT_FOUND for missing keys and for directories. */
static int open_object(const fs_bucket *fs, const char *op, const char *key, struct stat *st,
                       strata_error *err) {
    if (check_key(key, err) != 0)
        return -1;
    int fd = openat(fs->root_fd, key, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && (errno == ENOENT || errno == ENOTDIR))
        return not_found(fs, op, key, err);
    if (fd < 0)
        return fs_error(fs, op, key, "open", errno, err);
    if (fstat(fd, st) != 0) {
        int saved = errno;
        close(fd);
        return fs_error(fs, op, key, "stat", saved, err);
    }
    if (!S_ISREG(st->st_mode)) {
        close(fd);
        return not_found(fs, op, key, err);
    }
    return fd;
}

static int read_at(int fd, uint8_t *dst, size_t len, uint64_t offset, size_t *got) {
    *got = 0;
    while (*got < len) {
        ssize_t n = pread(fd, dst + *got, len - *got, (off_t)(offset + *got));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        if (n == 0)
            break; /* cannot happen for our immutable files; tolerate it */
        *got += (size_t)n;
    }
    return 0;
}

static int fs_get_range(void *impl, const char *key, uint64_t offset, uint64_t length,
                        strata_buffer *out, strata_error *err) {
    fs_bucket *fs = impl;
    struct stat st;
    int fd = open_object(fs, "get", key, &st, err);
    if (fd < 0)
        return -1;
    uint64_t size = (uint64_t)st.st_size;
    int rc = 0;
    if (offset > size) {
        rc = strata_error_set(err, STRATA_OUT_OF_RANGE,
                              "filesystem bucket %s: get \"%s\": offset %llu is past the end of "
                              "the %llu-byte object",
                              fs->root, key, (unsigned long long)offset, (unsigned long long)size);
    } else {
        uint64_t want = size - offset < length ? size - offset : length;
        size_t got = 0;
        if (want > SIZE_MAX || strata_buffer_reserve(out, (size_t)want) != 0)
            rc = strata_error_oom(err);
        else if (read_at(fd, out->data + out->len, (size_t)want, offset, &got) != 0)
            rc = fs_error(fs, "get", key, "read", errno, err);
        else
            out->len += got;
    }
    close(fd);
    return rc;
}

static int stat_object(const fs_bucket *fs, const char *key, struct stat *st, bool *found,
                       strata_error *err) {
    if (check_key(key, err) != 0)
        return -1;
    *found = false;
    if (fstatat(fs->root_fd, key, st, 0) != 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return 0;
        return fs_error(fs, "stat", key, "stat", errno, err);
    }
    *found = S_ISREG(st->st_mode);
    return 0;
}

static int fs_attributes(void *impl, const char *key, bucket_object_attributes *out,
                         strata_error *err) {
    fs_bucket *fs = impl;
    struct stat st;
    bool found;
    if (stat_object(fs, key, &st, &found, err) != 0)
        return -1;
    if (!found)
        return not_found(fs, "attributes", key, err);
    out->size = (uint64_t)st.st_size;
    out->last_modified_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    return 0;
}

static int fs_exists(void *impl, const char *key, bool *out, strata_error *err) {
    struct stat st;
    return stat_object(impl, key, &st, out, err);
}

/* ---- Delete -----------------------------------------------------------------------------------
 */

/* Removes now-empty directories from key's parent up to (not including) the root. Stops at the
 * first directory that is not empty or is already gone; neither is an error. */
static void prune_empty_parents(const fs_bucket *fs, const char *key) {
    char dir[BUCKET_KEY_MAX * 2 + 2];
    snprintf(dir, sizeof dir, "%s", key);
    for (char *slash = strrchr(dir, '/'); slash != NULL; slash = strrchr(dir, '/')) {
        *slash = '\0';
        if (unlinkat(fs->root_fd, dir, AT_REMOVEDIR) != 0)
            return;
    }
}

static int fs_delete(void *impl, const char *key, strata_error *err) {
    fs_bucket *fs = impl;
    if (check_key(key, err) != 0)
        return -1;
    if (unlinkat(fs->root_fd, key, 0) != 0) {
        /* No such object (or a directory, which is not an object): nothing to delete. */
        if (errno == ENOENT || errno == ENOTDIR || errno == EISDIR)
            return 0;
        return fs_error(fs, "delete", key, "unlink", errno, err);
    }
    prune_empty_parents(fs, key);
    return 0;
}

/* ---- Iterate ----------------------------------------------------------------------------------
 */

typedef struct name_list {
    char **names; /* directory names carry a trailing '/' */
    size_t count, cap;
} name_list;

static void name_list_free(name_list *l) {
    for (size_t i = 0; i < l->count; i++)
        free(l->names[i]);
    free(l->names);
}

static int name_list_add(name_list *l, const char *name, bool is_dir) {
    if (STRATA_ARRAY_RESERVE(l->names, l->cap, l->count + 1) != 0)
        return -1;
    size_t len = strlen(name);
    char *copy = malloc(len + 2);
    if (copy == NULL)
        return -1;
    memcpy(copy, name, len);
    copy[len] = is_dir ? '/' : '\0';
    copy[len + 1] = '\0';
    l->names[l->count++] = copy;
    return 0;
}

static int compare_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Classifies an entry as object or directory; false for anything else (sockets, dangling links). */
static bool entry_kind(DIR *d, const struct dirent *e, bool *is_dir) {
    if (e->d_type == DT_REG || e->d_type == DT_DIR) {
        *is_dir = e->d_type == DT_DIR;
        return true;
    }
    struct stat st;
    if (fstatat(dirfd(d), e->d_name, &st, 0) != 0)
        return false;
    *is_dir = S_ISDIR(st.st_mode);
    return *is_dir || S_ISREG(st.st_mode);
}

/* Reads directory `dir` ("" or "a/b/") into a sorted list. A missing directory is empty. */
static int read_names(const fs_bucket *fs, const char *dir, name_list *out, strata_error *err) {
    int fd = openat(fs->root_fd, dir[0] != '\0' ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 && (errno == ENOENT || errno == ENOTDIR))
        return 0;
    if (fd < 0)
        return fs_error(fs, "iter", dir, "open directory", errno, err);
    DIR *d = fdopendir(fd);
    if (d == NULL) {
        int saved = errno;
        close(fd);
        return fs_error(fs, "iter", dir, "open directory", saved, err);
    }
    int rc = 0;
    errno = 0;
    for (struct dirent *e = readdir(d); e != NULL && rc == 0; e = readdir(d)) {
        bool is_dir;
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 || is_tmp_name(e->d_name))
            continue;
        if (entry_kind(d, e, &is_dir) && name_list_add(out, e->d_name, is_dir) != 0)
            rc = strata_error_oom(err);
        errno = 0;
    }
    if (rc == 0 && errno != 0)
        rc = fs_error(fs, "iter", dir, "read directory", errno, err);
    closedir(d);
    if (rc == 0 && out->count > 1)
        qsort(out->names, out->count, sizeof *out->names, compare_names);
    return rc;
}

/* Returns 0 when done, 1 when the callback stopped, -1 on error. */
static int walk(const fs_bucket *fs, const char *dir, bool recursive, bucket_iter_fn fn, void *ctx,
                strata_error *err) {
    name_list names = {0};
    int rc = read_names(fs, dir, &names, err);
    size_t dir_len = strlen(dir);
    for (size_t i = 0; i < names.count && rc == 0; i++) {
        size_t name_len = strlen(names.names[i]);
        char *key = malloc(dir_len + name_len + 1);
        if (key == NULL) {
            rc = strata_error_oom(err);
            break;
        }
        memcpy(key, dir, dir_len);
        memcpy(key + dir_len, names.names[i], name_len + 1);
        bool is_dir = key[dir_len + name_len - 1] == '/';
        if (is_dir && recursive)
            rc = walk(fs, key, recursive, fn, ctx, err);
        else
            rc = fn(key, ctx, err);
        if (rc > 0)
            rc = 1;
        free(key);
    }
    name_list_free(&names);
    return rc;
}

/* A directory listing is one request; start_after is left to the generic layer (a directory is
 * read whole anyway). */
static int fs_iterate(void *impl, bucket_list_request *req, bucket_iter_fn fn, void *ctx,
                      strata_error *err) {
    const fs_bucket *fs = impl;
    req->requests = 1;
    if (req->dir[0] != '\0' && check_key(req->dir, err) != 0)
        return -1;
    int rc = walk(fs, req->dir, req->recursive, fn, ctx, err);
    return rc < 0 ? -1 : 0;
}

/* ---- Lifecycle --------------------------------------------------------------------------------
 */

static void fs_close(void *impl) {
    fs_bucket *fs = impl;
    if (fs == NULL)
        return;
    if (fs->root_fd >= 0)
        close(fs->root_fd);
    free(fs->root);
    free(fs);
}

/* A root that cannot be created is a setup problem, not a missing object. */
static strata_status root_status(int e) {
    return e == ENOENT || e == ENOTDIR ? STRATA_FAILED_PRECONDITION : errno_status(e);
}

/* mkdir -p for the root. */
static int make_root(const char *directory, strata_error *err) {
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s", directory) >= (int)sizeof path)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "filesystem bucket directory is too long: %.100s...", directory);
    for (char *p = path + 1; *p != '\0'; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST)
            return strata_error_set(err, root_status(errno),
                                    "filesystem bucket %s: cannot create directory %s: %s",
                                    directory, path, strerror(errno));
        *p = '/';
    }
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        return strata_error_set(err, root_status(errno),
                                "filesystem bucket %s: cannot create directory: %s", directory,
                                strerror(errno));
    return 0;
}

int bucket_filesystem_new(const char *directory, void **impl, strata_error *err) {
    *impl = NULL;
    if (directory == NULL || directory[0] == '\0')
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "filesystem bucket: directory must not be empty");
    if (make_root(directory, err) != 0)
        return -1;
    fs_bucket *fs = calloc(1, sizeof *fs);
    if (fs == NULL)
        return strata_error_oom(err);
    atomic_init(&fs->tmp_counter, 0);
    fs->root_fd = -1;
    fs->root = strdup(directory);
    if (fs->root == NULL) {
        fs_close(fs);
        return strata_error_oom(err);
    }
    fs->root_fd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fs->root_fd < 0) {
        int saved = errno;
        fs_close(fs);
        return strata_error_set(err, root_status(saved),
                                "filesystem bucket %s: cannot open directory: %s", directory,
                                strerror(saved));
    }
    *impl = fs;
    return 0;
}

const bucket_backend_ops bucket_filesystem_ops = {
    .type = "FILESYSTEM",
    .upload = fs_upload,
    .get_range = fs_get_range,
    .attributes = fs_attributes,
    .exists = fs_exists,
    .delete_object = fs_delete,
    .iterate = fs_iterate,
    .close = fs_close,
};

int bucket_open_filesystem(const char *directory, const char *prefix, bucket **out,
                           strata_error *err) {
    *out = NULL;
    void *impl = NULL;
    if (bucket_filesystem_new(directory, &impl, err) != 0)
        return -1;
    return bucket_new(&bucket_filesystem_ops, impl, prefix, out, err);
}
