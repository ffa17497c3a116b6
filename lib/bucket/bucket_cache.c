/*
 * bucket_cache.c - ranged reads of immutable objects kept on local disk. See bucket_cache.h.
 *
 * The index of what is on disk lives in memory: an array of page slots, a hash map from a page's
 * id (hash of key and page number) to its slot, and a doubly linked recency list through the
 * slots (head: most recently used). The map is never shrunk key by key (it has no removal): a
 * dropped page's slot is freed and its map entry left pointing at a slot that no longer carries
 * its id, which lookups treat as absent; the map is rebuilt from the live slots when such stale
 * entries outnumber them. File reads, fetches and file writes run without the lock; the lock
 * covers the index, renames into place and deletions, so the index and the directory agree.
 */
#include "bucket/bucket_cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bucket/bucket_backend.h"
#include "common/array.h"
#include "common/buffer.h"
#include "common/hash.h"

#define FILE_MAGIC UINT64_C(0x3176726574617274) /* "tratrev1" little-endian: a version too */
#define HEADER_BYTES 32
#define KEY_SEED UINT64_C(0x6b63616368656b65)
#define DATA_SEED UINT64_C(0x6b63616368656461)
#define NO_SLOT 0u

typedef struct page_slot {
    uint64_t id;       /* 0: free */
    uint64_t key_hash; /* names the file, with page */
    uint32_t page;
    uint32_t bytes;      /* the file's size */
    uint32_t prev, next; /* recency list: slot index + 1, NO_SLOT at the ends */
} page_slot;

typedef struct bucket_cache {
    bucket *inner;
    char *root;  /* DIRECTORY/v1 */
    int lock_fd; /* DIRECTORY/v1/lock, flock'ed while open: one process per directory */
    char *suffix;
    size_t suffix_len;
    uint64_t max_bytes;
    uint32_t page_bytes;
    pthread_mutex_t mu;
    strata_u64_map by_id; /* page id -> slot index + 1 (stale when the slot's id differs) */
    page_slot *slots;
    size_t n_slots, cap_slots;
    uint32_t free_head; /* free slots, through next */
    uint32_t head, tail;
    size_t live;
    bucket_cache_stats stats;
    atomic_uint_fast64_t temp_counter;
} bucket_cache;

extern const bucket_backend_ops bucket_cache_ops;

/* ---- Names ------------------------------------------------------------------------------------
 */

static uint64_t key_hash_of(const char *key) {
    return strata_hash_bytes(key, strlen(key), KEY_SEED);
}

static uint64_t page_id(uint64_t key_hash, uint32_t page) {
    uint64_t id = strata_hash_combine(key_hash, (uint64_t)page + 1);
    return id != 0 ? id : 1;
}

static void page_path(const bucket_cache *c, uint64_t key_hash, uint32_t page, char *out,
                      size_t cap) {
    snprintf(out, cap, "%s/%02x/%016llx-%08x", c->root, (unsigned)(key_hash >> 56),
             (unsigned long long)key_hash, (unsigned)page);
}

static bool cacheable(const bucket_cache *c, const char *key) {
    size_t len = strlen(key);
    return c->suffix_len == 0 || (len >= c->suffix_len &&
                                  memcmp(key + len - c->suffix_len, c->suffix, c->suffix_len) == 0);
}

/* ---- The index (called with mu held) ----------------------------------------------------------
 */

static page_slot *slot_at(bucket_cache *c, uint32_t index_plus1) {
    return &c->slots[index_plus1 - 1];
}

static void list_unlink(bucket_cache *c, uint32_t s) {
    page_slot *p = slot_at(c, s);
    if (p->prev != NO_SLOT)
        slot_at(c, p->prev)->next = p->next;
    else
        c->head = p->next;
    if (p->next != NO_SLOT)
        slot_at(c, p->next)->prev = p->prev;
    else
        c->tail = p->prev;
    p->prev = p->next = NO_SLOT;
}

static void list_push_front(bucket_cache *c, uint32_t s) {
    page_slot *p = slot_at(c, s);
    p->prev = NO_SLOT;
    p->next = c->head;
    if (c->head != NO_SLOT)
        slot_at(c, c->head)->prev = s;
    c->head = s;
    if (c->tail == NO_SLOT)
        c->tail = s;
}

static uint32_t find_locked(bucket_cache *c, uint64_t id) {
    const uint64_t *v = strata_u64_map_get(&c->by_id, id);
    if (v == NULL || *v == 0 || *v > c->n_slots || slot_at(c, (uint32_t)*v)->id != id)
        return NO_SLOT;
    return (uint32_t)*v;
}

/* Rebuilds the map from the live slots once stale entries outnumber them. */
static int compact_map_locked(bucket_cache *c) {
    if (c->by_id.count <= 2 * c->live + 64)
        return 0;
    strata_u64_map fresh;
    if (strata_u64_map_init(&fresh, c->live + 16) != 0)
        return -1;
    for (size_t i = 0; i < c->n_slots; i++)
        if (c->slots[i].id != 0 &&
            strata_u64_map_upsert(&fresh, c->slots[i].id, i + 1, NULL) == NULL) {
            strata_u64_map_free(&fresh);
            return -1;
        }
    strata_u64_map_free(&c->by_id);
    c->by_id = fresh;
    return 0;
}

/* Forgets slot s and deletes its file. */
static void drop_locked(bucket_cache *c, uint32_t s) {
    page_slot *p = slot_at(c, s);
    char path[PATH_MAX];
    page_path(c, p->key_hash, p->page, path, sizeof path);
    (void)unlink(path);
    list_unlink(c, s);
    c->stats.bytes -= p->bytes;
    c->stats.pages--;
    c->live--;
    p->id = 0;
    p->next = c->free_head;
    c->free_head = s;
}

static void evict_locked(bucket_cache *c) {
    while (c->stats.bytes > c->max_bytes && c->tail != NO_SLOT) {
        drop_locked(c, c->tail);
        c->stats.evictions++;
    }
}

/* Records a page now on disk as the most recent; NO_SLOT when out of memory. */
static uint32_t insert_locked(bucket_cache *c, uint64_t key_hash, uint32_t page, uint32_t bytes) {
    uint64_t id = page_id(key_hash, page);
    uint32_t s = find_locked(c, id);
    if (s != NO_SLOT) { /* another reader stored it meanwhile: the file was replaced */
        page_slot *p = slot_at(c, s);
        c->stats.bytes = c->stats.bytes - p->bytes + bytes;
        p->bytes = bytes;
        list_unlink(c, s);
        list_push_front(c, s);
        return s;
    }
    if (c->free_head != NO_SLOT) {
        s = c->free_head;
        c->free_head = slot_at(c, s)->next;
    } else {
        if (c->n_slots >= UINT32_MAX - 1 ||
            STRATA_ARRAY_RESERVE(c->slots, c->cap_slots, c->n_slots + 1) != 0)
            return NO_SLOT;
        s = (uint32_t)++c->n_slots;
    }
    if (compact_map_locked(c) != 0 || strata_u64_map_upsert(&c->by_id, id, s, NULL) == NULL) {
        slot_at(c, s)->id = 0;
        slot_at(c, s)->next = c->free_head;
        c->free_head = s;
        return NO_SLOT;
    }
    *strata_u64_map_get(&c->by_id, id) = s; /* a stale entry may have held another slot */
    *slot_at(c, s) = (page_slot){.id = id, .key_hash = key_hash, .page = page, .bytes = bytes};
    list_push_front(c, s);
    c->stats.bytes += bytes;
    c->stats.pages++;
    c->live++;
    return s;
}

/* ---- Page files -------------------------------------------------------------------------------
 */

static uint64_t content_hash(const char *key, size_t key_len, const uint8_t *data, size_t len) {
    return strata_hash_combine(strata_hash_bytes(key, key_len, KEY_SEED),
                               strata_hash_bytes(data, len, DATA_SEED));
}

static void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static bool read_all(int fd, uint8_t *buf, size_t len) {
    size_t got = 0;
    while (got < len) {
        ssize_t n = read(fd, buf + got, len - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        got += (size_t)n;
    }
    return true;
}

static bool write_all(int fd, const uint8_t *buf, size_t len) {
    size_t done = 0;
    while (done < len) {
        ssize_t n = write(fd, buf + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return false;
        done += (size_t)n;
    }
    return true;
}

typedef enum read_outcome { PAGE_ABSENT, PAGE_READ, PAGE_INVALID } read_outcome;

/* Reads the file of page into scratch (data from *data_at, *len bytes), checking it against key. */
static read_outcome read_page_file(const bucket_cache *c, const char *key, uint64_t key_hash,
                                   uint32_t page, strata_buffer *scratch, size_t *data_at,
                                   size_t *len) {
    char path[PATH_MAX];
    page_path(c, key_hash, page, path, sizeof path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return PAGE_ABSENT; /* evicted meanwhile */
    struct stat st;
    size_t key_len = strlen(key);
    read_outcome rc = PAGE_INVALID;
    strata_buffer_reset(scratch);
    if (fstat(fd, &st) != 0 || st.st_size < HEADER_BYTES ||
        (uint64_t)st.st_size > HEADER_BYTES + key_len + (uint64_t)c->page_bytes ||
        strata_buffer_reserve(scratch, (size_t)st.st_size) != 0 ||
        !read_all(fd, scratch->data, (size_t)st.st_size))
        goto out;
    const uint8_t *h = scratch->data;
    uint64_t stored_key_len = strata_load_u64le(h + 8), stored_len = strata_load_u64le(h + 16);
    if (strata_load_u64le(h) != FILE_MAGIC || stored_key_len != key_len ||
        stored_len != (uint64_t)st.st_size - HEADER_BYTES - key_len ||
        memcmp(h + HEADER_BYTES, key, key_len) != 0 ||
        strata_load_u64le(h + 24) !=
            content_hash(key, key_len, h + HEADER_BYTES + key_len, (size_t)stored_len))
        goto out;
    *data_at = HEADER_BYTES + key_len;
    *len = (size_t)stored_len;
    rc = PAGE_READ;
out:
    close(fd);
    return rc;
}

/* Writes page (data, len bytes) under a temporary name; its path in tmp. */
static bool write_temp_file(bucket_cache *c, const char *key, const uint8_t *data, size_t len,
                            char *tmp, size_t cap) {
    unsigned long long n = atomic_fetch_add(&c->temp_counter, 1);
    snprintf(tmp, cap, "%s/tmp/%ld-%llu", c->root, (long)getpid(), n);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return false;
    size_t key_len = strlen(key);
    uint8_t header[HEADER_BYTES];
    put_u64(header, FILE_MAGIC);
    put_u64(header + 8, key_len);
    put_u64(header + 16, len);
    put_u64(header + 24, content_hash(key, key_len, data, len));
    bool ok = write_all(fd, header, sizeof header) &&
              write_all(fd, (const uint8_t *)key, key_len) && write_all(fd, data, len);
    if (close(fd) != 0)
        ok = false;
    if (!ok)
        (void)unlink(tmp);
    return ok;
}

/* Stores a fetched page: written, renamed into place and indexed (then the cache evicts). */
static void store_page(bucket_cache *c, const char *key, uint64_t key_hash, uint32_t page,
                       const uint8_t *data, size_t len) {
    char tmp[PATH_MAX], path[PATH_MAX], dir[PATH_MAX];
    size_t key_len = strlen(key);
    if (HEADER_BYTES + key_len + len > (uint64_t)c->max_bytes) {
        pthread_mutex_lock(&c->mu);
        c->stats.write_errors++; /* larger than the whole cache */
        pthread_mutex_unlock(&c->mu);
        return;
    }
    bool ok = write_temp_file(c, key, data, len, tmp, sizeof tmp);
    page_path(c, key_hash, page, path, sizeof path);
    snprintf(dir, sizeof dir, "%s/%02x", c->root, (unsigned)(key_hash >> 56));
    pthread_mutex_lock(&c->mu);
    if (ok && rename(tmp, path) != 0) {
        ok = (errno == ENOENT && mkdir(dir, 0755) == 0) && rename(tmp, path) == 0;
        if (!ok)
            (void)unlink(tmp);
    }
    if (ok &&
        insert_locked(c, key_hash, page, (uint32_t)(HEADER_BYTES + key_len + len)) == NO_SLOT) {
        (void)unlink(path);
        ok = false;
    }
    if (ok)
        evict_locked(c);
    else
        c->stats.write_errors++;
    pthread_mutex_unlock(&c->mu);
}

/* Drops every page of key (an upload or a delete through the cache). */
static void drop_key(bucket_cache *c, const char *key) {
    uint64_t kh = key_hash_of(key);
    pthread_mutex_lock(&c->mu);
    /* the pages of a key are not linked to each other: walk the slots (uploads and deletes of
     * cached keys are rare next to reads) */
    for (size_t i = 0; i < c->n_slots; i++)
        if (c->slots[i].id != 0 && c->slots[i].key_hash == kh)
            drop_locked(c, (uint32_t)i + 1);
    pthread_mutex_unlock(&c->mu);
}

/* ---- Reads ------------------------------------------------------------------------------------
 */

/* The cached page, copied into scratch; false on a miss (an invalid file is dropped). */
static bool cached_page(bucket_cache *c, const char *key, uint64_t kh, uint32_t page,
                        strata_buffer *scratch, size_t *data_at, size_t *len) {
    uint64_t id = page_id(kh, page);
    pthread_mutex_lock(&c->mu);
    bool known = find_locked(c, id) != NO_SLOT;
    pthread_mutex_unlock(&c->mu);
    if (!known)
        return false;
    read_outcome r = read_page_file(c, key, kh, page, scratch, data_at, len);
    pthread_mutex_lock(&c->mu);
    uint32_t s = find_locked(c, id);
    if (r == PAGE_READ && s != NO_SLOT) {
        list_unlink(c, s);
        list_push_front(c, s);
        c->stats.hits++;
    } else if (r == PAGE_INVALID && s != NO_SLOT) {
        drop_locked(c, s);
        c->stats.invalid++;
    }
    pthread_mutex_unlock(&c->mu);
    return r == PAGE_READ;
}

/* The number of pages from first (a miss) through last that are not cached, at most
 * BUCKET_CACHE_MAX_RUN_PAGES: one request fetches them. */
static uint32_t missing_run(bucket_cache *c, uint64_t kh, uint32_t first, uint32_t last) {
    uint32_t run = 1;
    pthread_mutex_lock(&c->mu);
    while (run < BUCKET_CACHE_MAX_RUN_PAGES && first + run <= last &&
           find_locked(c, page_id(kh, first + run)) == NO_SLOT)
        run++;
    pthread_mutex_unlock(&c->mu);
    return run;
}

static int out_of_range(const char *key, uint64_t offset, strata_error *err) {
    return strata_error_set(err, STRATA_OUT_OF_RANGE,
                            "range read of \"%.200s\": offset %llu is past the end", key,
                            (unsigned long long)offset);
}

/* Appends [*pos, end) of a page (data, len bytes, starting at page_start) to out; advances *pos
 * to the page's end. OUT_OF_RANGE when *pos lies past the page's end (only the first page of a
 * read can: later ones start where the one before ended). */
static int take_page_bytes(const char *key, uint64_t page_start, const uint8_t *data, size_t len,
                           uint64_t *pos, uint64_t end, strata_buffer *out, strata_error *err) {
    uint64_t skip = *pos - page_start;
    if (skip > len)
        return out_of_range(key, *pos, err);
    uint64_t stop = end - page_start < len ? end - page_start : len;
    if (stop > skip && strata_buffer_append(out, data + skip, (size_t)(stop - skip)) != 0)
        return strata_error_oom(err);
    *pos = page_start + len;
    return 0;
}

/* Fetches pages [first, first + run) in one request, stores them and takes what the read wants;
 * *eof when the object ended within them. */
static int fetch_pages(bucket_cache *c, const char *key, uint64_t kh, uint32_t first, uint32_t run,
                       uint64_t *pos, uint64_t end, strata_buffer *out, bool *eof,
                       strata_error *err) {
    uint64_t start = (uint64_t)first * c->page_bytes, want = (uint64_t)run * c->page_bytes;
    strata_buffer got = STRATA_BUFFER_INIT;
    pthread_mutex_lock(&c->mu);
    c->stats.fetches++;
    pthread_mutex_unlock(&c->mu);
    if (bucket_get_range(c->inner, key, start, want, &got, err) != 0) {
        strata_buffer_free(&got);
        return -1;
    }
    pthread_mutex_lock(&c->mu);
    c->stats.misses += (got.len + c->page_bytes - 1) / c->page_bytes; /* pages that exist */
    pthread_mutex_unlock(&c->mu);
    for (uint32_t i = 0; i < run && (uint64_t)i * c->page_bytes < got.len; i++) {
        size_t at = (size_t)i * c->page_bytes;
        size_t len = got.len - at < c->page_bytes ? got.len - at : c->page_bytes;
        store_page(c, key, kh, first + i, got.data + at, len);
    }
    *eof = got.len < want;
    int rc = take_page_bytes(key, start, got.data, got.len, pos, end, out, err);
    strata_buffer_free(&got);
    return rc;
}

static int cache_get_range(void *impl, const char *key, uint64_t offset, uint64_t length,
                           strata_buffer *out, strata_error *err) {
    bucket_cache *c = impl;
    uint64_t end =
        length == BUCKET_TO_END || length > UINT64_MAX - offset ? UINT64_MAX : offset + length;
    uint64_t last_page = end == UINT64_MAX ? UINT64_MAX : (end - 1) / c->page_bytes;
    if (!cacheable(c, key) || length == 0 || offset / c->page_bytes >= UINT32_MAX)
        return bucket_get_range(c->inner, key, offset, length, out, err);
    if (last_page >= UINT32_MAX)
        last_page = UINT32_MAX - 1;
    uint64_t kh = key_hash_of(key), pos = offset;
    strata_buffer scratch = STRATA_BUFFER_INIT;
    int rc = 0;
    bool eof = false;
    while (rc == 0 && !eof && pos < end && pos / c->page_bytes <= last_page) {
        uint32_t page = (uint32_t)(pos / c->page_bytes);
        uint64_t page_start = (uint64_t)page * c->page_bytes;
        size_t data_at, len;
        if (cached_page(c, key, kh, page, &scratch, &data_at, &len)) {
            rc = take_page_bytes(key, page_start, scratch.data + data_at, len, &pos, end, out, err);
            eof = len < c->page_bytes;
        } else {
            uint32_t run = missing_run(c, kh, page, (uint32_t)last_page);
            rc = fetch_pages(c, key, kh, page, run, &pos, end, out, &eof, err);
        }
    }
    strata_buffer_free(&scratch);
    return rc;
}

/* ---- Everything else goes to the inner bucket ------------------------------------------------
 */

static int cache_upload(void *impl, const char *key, const bucket_upload_body *body,
                        strata_error *err) {
    bucket_cache *c = impl;
    int rc = body->data != NULL ? bucket_upload(c->inner, key, body->data, body->size, err)
                                : bucket_upload_file(c->inner, key, body->fd, body->size, err);
    if (cacheable(c, key))
        drop_key(c, key); /* after: a read racing the upload cannot keep the old bytes */
    return rc;
}

static int cache_attributes(void *impl, const char *key, bucket_object_attributes *out,
                            strata_error *err) {
    return bucket_attributes(((bucket_cache *)impl)->inner, key, out, err);
}

static int cache_exists(void *impl, const char *key, bool *out, strata_error *err) {
    return bucket_exists(((bucket_cache *)impl)->inner, key, out, err);
}

static int cache_delete(void *impl, const char *key, strata_error *err) {
    bucket_cache *c = impl;
    int rc = bucket_delete(c->inner, key, err);
    if (cacheable(c, key))
        drop_key(c, key);
    return rc;
}

static int cache_iterate(void *impl, bucket_list_request *req, bucket_iter_fn fn, void *ctx,
                         strata_error *err) {
    bucket_cache *c = impl;
    size_t dir_len = strlen(req->dir);
    const char *after = req->start_after != NULL ? req->start_after + dir_len : "";
    req->requests = 1;
    return bucket_iterate_after(c->inner, req->dir, after, req->recursive, fn, ctx, err);
}

static void cache_close(void *impl) {
    bucket_cache *c = impl;
    if (c == NULL)
        return;
    if (c->lock_fd >= 0)
        close(c->lock_fd); /* releases the lock */
    pthread_mutex_destroy(&c->mu);
    strata_u64_map_free(&c->by_id);
    free(c->slots);
    free(c->root);
    free(c->suffix);
    free(c);
}

const bucket_backend_ops bucket_cache_ops = {
    .type = "CACHE",
    .upload = cache_upload,
    .get_range = cache_get_range,
    .attributes = cache_attributes,
    .exists = cache_exists,
    .delete_object = cache_delete,
    .iterate = cache_iterate,
    .close = cache_close,
};

/* ---- Opening: what an earlier process left ----------------------------------------------------
 */

static int make_dirs(const char *path, strata_error *err) {
    char p[PATH_MAX];
    if (snprintf(p, sizeof p, "%s", path) >= (int)sizeof p)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "cache directory is too long");
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s != '\0')
            continue;
        char saved = *s;
        *s = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST)
            return strata_error_set(err, STRATA_UNAVAILABLE,
                                    "cache directory %s: cannot create %s: %s", path, p,
                                    strerror(errno));
        if ((*s = saved) == '\0')
            return 0;
    }
}

typedef struct found_page {
    uint64_t key_hash;
    uint32_t page, bytes;
    int64_t mtime_ns;
} found_page;

static int by_mtime(const void *a, const void *b) {
    const found_page *x = a, *y = b;
    return (x->mtime_ns > y->mtime_ns) - (x->mtime_ns < y->mtime_ns);
}

/* The value of n lowercase hex digits; false if any is not one. */
static bool parse_hex(const char *s, size_t n, uint64_t *out) {
    *out = 0;
    for (size_t i = 0; i < n; i++) {
        int d = s[i] >= '0' && s[i] <= '9'   ? s[i] - '0'
                : s[i] >= 'a' && s[i] <= 'f' ? s[i] - 'a' + 10
                                             : -1;
        if (d < 0)
            return false;
        *out = *out << 4 | (uint64_t)d;
    }
    return true;
}

/* Parses a page file's name, HHHHHHHHHHHHHHHH-PPPPPPPP. */
static bool parse_page_name(const char *name, uint64_t *key_hash, uint32_t *page) {
    uint64_t p;
    if (strlen(name) != 25 || name[16] != '-' || !parse_hex(name, 16, key_hash) ||
        !parse_hex(name + 17, 8, &p) || p >= UINT32_MAX)
        return false;
    *page = (uint32_t)p;
    return true;
}

/* Collects the page files of one XX directory; deletes what is not one. */
static int scan_dir(const char *dir, unsigned top, found_page **found, size_t *n, size_t *cap) {
    DIR *d = opendir(dir);
    if (d == NULL)
        return 0;
    int rc = 0;
    for (struct dirent *e; rc == 0 && (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.')
            continue;
        uint64_t kh;
        uint32_t page;
        struct stat st;
        if (!parse_page_name(e->d_name, &kh, &page) || (kh >> 56) != top ||
            fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode) ||
            st.st_size < HEADER_BYTES || st.st_size > UINT32_MAX) {
            (void)unlinkat(dirfd(d), e->d_name, 0);
            continue;
        }
        if (STRATA_ARRAY_RESERVE(*found, *cap, *n + 1) != 0) {
            rc = -1;
            break;
        }
        (*found)[(*n)++] =
            (found_page){kh, page, (uint32_t)st.st_size,
                         (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec};
    }
    closedir(d);
    return rc;
}

/* Takes the directory for this process: two processes in one directory would each index and
 * evict by their own view (budgets wrong, pages deleted under the other), so the second is
 * refused with FAILED_PRECONDITION. */
static int lock_directory(bucket_cache *c, strata_error *err) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/lock", c->root);
    c->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (c->lock_fd < 0)
        return strata_error_set(err, STRATA_UNAVAILABLE, "cache directory %s: %s", c->root,
                                strerror(errno));
    if (flock(c->lock_fd, LOCK_EX | LOCK_NB) != 0)
        return strata_error_set(
            err, errno == EWOULDBLOCK ? STRATA_FAILED_PRECONDITION : STRATA_UNAVAILABLE,
            "cache directory %s is in use by another process (give each "
            "querier a directory of its own): %s",
            c->root, strerror(errno));
    return 0;
}

/* Empties tmp/ (writes a crash cut short) and indexes the pages, oldest first. */
static int load_existing(bucket_cache *c, strata_error *err) {
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/tmp", c->root);
    DIR *d = opendir(dir);
    if (d != NULL) {
        for (struct dirent *e; (e = readdir(d)) != NULL;)
            if (e->d_name[0] != '.')
                (void)unlinkat(dirfd(d), e->d_name, 0);
        closedir(d);
    }
    if (make_dirs(dir, err) != 0)
        return -1;
    found_page *found = NULL;
    size_t n = 0, cap = 0;
    int rc = 0;
    for (unsigned top = 0; top < 256 && rc == 0; top++) {
        snprintf(dir, sizeof dir, "%s/%02x", c->root, top);
        rc = scan_dir(dir, top, &found, &n, &cap);
    }
    if (rc == 0 && n > 0) {
        qsort(found, n, sizeof *found, by_mtime);
        pthread_mutex_lock(&c->mu);
        for (size_t i = 0; i < n && rc == 0; i++)
            if (insert_locked(c, found[i].key_hash, found[i].page, found[i].bytes) == NO_SLOT)
                rc = -1;
        evict_locked(c); /* max_bytes may be smaller than last time */
        pthread_mutex_unlock(&c->mu);
    }
    free(found);
    return rc == 0 ? 0 : strata_error_oom(err);
}

int bucket_cache_open(bucket *inner, const bucket_cache_options *options, bucket **out,
                      strata_error *err) {
    *out = NULL;
    if (options->directory == NULL || options->directory[0] == '\0')
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "bucket cache: no directory");
    if (options->page_bytes != 0 && options->page_bytes < 512)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "bucket cache: page size %u is under 512 bytes",
                                (unsigned)options->page_bytes);
    bucket_cache *c = calloc(1, sizeof *c);
    if (c == NULL)
        return strata_error_oom(err);
    c->inner = inner;
    c->lock_fd = -1;
    c->max_bytes = options->max_bytes != 0 ? options->max_bytes : BUCKET_CACHE_DEFAULT_MAX_BYTES;
    c->page_bytes =
        options->page_bytes != 0 ? options->page_bytes : BUCKET_CACHE_DEFAULT_PAGE_BYTES;
    c->stats.max_bytes = c->max_bytes;
    const char *suffix = options->cacheable_suffix != NULL ? options->cacheable_suffix : "";
    size_t root_len = strlen(options->directory) + 4;
    if (pthread_mutex_init(&c->mu, NULL) != 0) {
        free(c);
        return strata_error_oom(err);
    }
    atomic_init(&c->temp_counter, 0);
    c->suffix_len = strlen(suffix);
    if ((c->suffix = strdup(suffix)) == NULL || (c->root = malloc(root_len)) == NULL ||
        strata_u64_map_init(&c->by_id, 1024) != 0) {
        cache_close(c);
        return strata_error_oom(err);
    }
    snprintf(c->root, root_len, "%s/v1", options->directory);
    if (make_dirs(c->root, err) != 0 || lock_directory(c, err) != 0 || load_existing(c, err) != 0) {
        cache_close(c);
        return -1;
    }
    return bucket_new(&bucket_cache_ops, c, NULL, out, err);
}

bool bucket_cache_get_stats(const bucket *b, bucket_cache_stats *out) {
    memset(out, 0, sizeof *out);
    bucket_cache *c = bucket_impl_of(b, &bucket_cache_ops);
    if (c == NULL)
        return false;
    pthread_mutex_lock(&c->mu);
    *out = c->stats;
    pthread_mutex_unlock(&c->mu);
    return true;
}
