/*
 * bucket_cache.h - a bounded cache on local disk for ranged reads of immutable objects.
 *
 * Queriers read block data objects (profiles.strata) by ranges: the footer, page indexes,
 * symbol and sample pages. Such an object never changes once written (a block is named by a ULID
 * made when it was finished and is replaced only by another block under another name), so a range
 * read once can be kept on local disk and read from there after the memory caches let it go, and
 * after a restart: a restarted querier answers its first queries from its disk instead of with
 * thousands of ranged GETs (Thanos' caching bucket does the same for chunks and index ranges).
 *
 * bucket_cache_open wraps a bucket in another bucket. Reads of the keys the options call
 * cacheable are served in pages of page_bytes, aligned on the object; a read that misses fetches
 * the run of missing pages it needs in one ranged GET of the inner bucket and stores them. All
 * else (meta.json, marks, listings, attributes) goes to the inner bucket unchanged. An upload or a
 * delete of a cacheable key through the wrapper drops the key's pages; a change made behind the
 * wrapper's back is not seen, which is why only immutable objects may be called cacheable.
 *
 * On disk: DIRECTORY/v1/XX/HHHHHHHHHHHHHHHH-PPPPPPPP, H the 64-bit hash of the key (XX its top
 * byte) and P the page number. A file holds a 32-byte header (magic, key length, data length, a
 * hash of key and data), the key and the page's bytes. Files are written under a temporary name
 * and renamed, so readers see whole files; one whose header, key or hash does not match when it
 * is read (a crash before the data reached the disk, a damaged disk, another key of the same hash)
 * counts as invalid, is deleted and fetched again. At open the directory is read (names, sizes,
 * modification times as recency), so the cache survives restarts. The files' bytes stay within
 * max_bytes: the least recently used pages are deleted first. A page that cannot be written (disk
 * full, read-only) is still served, and counted.
 *
 * One process uses a directory at a time (an flock on DIRECTORY/v1/lock): a second one is
 * refused. Every function is safe from several threads at once, as a bucket's are.
 */
#ifndef STRATA_BUCKET_CACHE_H
#define STRATA_BUCKET_CACHE_H

#include <stdbool.h>
#include <stdint.h>

#include "bucket/bucket.h"

#define BUCKET_CACHE_DEFAULT_MAX_BYTES ((uint64_t)1 << 30)
#define BUCKET_CACHE_DEFAULT_PAGE_BYTES (1u << 20)
/* The most pages one miss fetches in one request (the rest in the next). */
#define BUCKET_CACHE_MAX_RUN_PAGES 64

typedef struct bucket_cache_options {
    const char *directory;        /* required; created if missing */
    uint64_t max_bytes;           /* 0: BUCKET_CACHE_DEFAULT_MAX_BYTES */
    uint32_t page_bytes;          /* 0: BUCKET_CACHE_DEFAULT_PAGE_BYTES; at least 512 */
    const char *cacheable_suffix; /* keys ending with it are cached; NULL or "": every key */
} bucket_cache_options;

typedef struct bucket_cache_stats {
    uint64_t hits;         /* pages read from the disk */
    uint64_t misses;       /* pages fetched from the inner bucket */
    uint64_t fetches;      /* ranged GETs sent for misses */
    uint64_t evictions;    /* pages deleted to stay within max_bytes */
    uint64_t invalid;      /* files that did not match their header, deleted */
    uint64_t write_errors; /* pages that could not be stored */
    uint64_t pages;        /* held now */
    uint64_t bytes;        /* held now: the files' sizes */
    uint64_t max_bytes;
} bucket_cache_stats;

/* Wraps inner, which stays the caller's: close the wrapper first, then inner. Reads what an
 * earlier process left in the directory. INVALID_ARGUMENT for a missing directory option or a
 * page size under 512; FAILED_PRECONDITION when another process has the directory open; the
 * directory's errors (permissions, not a directory) as UNAVAILABLE. */
int bucket_cache_open(bucket *inner, const bucket_cache_options *options, bucket **out,
                      strata_error *err);

/* The counters of a bucket bucket_cache_open made; false (and zeros) for any other bucket. */
bool bucket_cache_get_stats(const bucket *b, bucket_cache_stats *out);

#endif
