/*
 * block_index.h - the querier's view of the bucket: which blocks exist per tenant, their
 * meta.json, and open readers for them.
 *
 * Discovery. At start, each tenant's bucket-index.json (written by the compactor) supplies the
 * meta of every block it lists without a deletion mark, saving one meta.json fetch per block, and
 * a full listing of every tenant finds the rest. A sync thread then lists each tenant and reads
 * meta.json of blocks it has not seen (a block without meta.json is still being written, or was
 * abandoned, and is ignored; so is one whose meta.json cannot be decoded). Its cost on the bucket
 * grows with what changes, not with the blocks there (block_index.c, sync_thread_main): most
 * listings are recent ones, asking only for the ULIDs of the last 15 minutes (one request on S3
 * however many blocks), every sync_interval while queries come and every idle_sync_interval
 * when none has come for a minute (the first query after that waits for a full listing); every
 * full_sync_interval a full listing drops blocks whose meta.json is gone and finds any older
 * block a recent listing could not; and every tenth sync the tenants are listed again and each
 * tenant's bucket-index.json is read if it changed (one attributes request when it did not), for
 * the blocks it names and the marks described below.
 *
 * Compacted blocks: visibility by lineage. A block holds the data of the level-1 blocks in its
 * compaction.sources (a level-1 block without sources holds itself). A block is skipped by
 * queries (block_index_acquire) while another indexed block of its tenant covers it: one whose
 * sources are a superset of its sources (equal sets: the higher level, then the greater ULID,
 * answers), or one that lists it in compaction.parents. So a block that any visible block
 * descends from is hidden, at any depth and whatever marks exist or are still missing: a level-2
 * block is hidden by the level-4 block built over it although the level-3 block in between (the
 * one its mark names) is itself hidden, dropped or deleted. Counting both would double the data;
 * hiding needs no mark, so it holds from the moment the covering block is indexed. Each lineage
 * is answered by its outermost indexed block, and until that block is indexed the blocks it
 * covers still answer: no gap either. Each block's hidden flag is kept exact as blocks come and
 * go, at a cost proportional to the changed block's sources (an index from source ULIDs to the
 * blocks containing them, block_index.c), so a query tests one flag per block.
 *
 * Marks. A block is marked only after the block replacing it is committed, and deleted
 * delete_delay later. A mark whose details name the replacement ("compacted into <ULID>") makes
 * the index load that block and keeps the marked one until an indexed block covers it, so no data
 * goes missing even when a listing missed the replacement; other marks (retention) drop the block
 * at once. Dropped marked blocks are remembered, so later listings do not fetch them again while
 * they await deletion. A block whose data vanishes under a query anyway is forgotten and the
 * query runs again (block_index_forget_if_gone). block_index_announce adds a block at once when a
 * writer in the same process (or an announcement from another process) says it exists, so fresh
 * data is queryable within about a second without waiting for the next listing.
 *
 * Readers. A block's reader is opened on first use (footer, page index and series tables, fetched
 * by byte ranges from the bucket) and kept open after the query, in a cache; a reader is not
 * thread-safe, so each block entry has a mutex that a query holds while it uses the reader.
 * Entries are reference counted: a query keeps using a block that a sync removed meanwhile, and
 * the entry is freed after the last release.
 *
 * The reader cache. An open reader grows as queries decode more of its block: symbol tables
 * (tens of MiB for a compacted hourly block), decoded pages (up to reader_cache_bytes each) and
 * buffers. The cache is bounded by count (max_open_readers) and by bytes (max_open_reader_bytes,
 * the sum of block_reader_memory_bytes over open readers). A reader's bytes are accounted when it
 * opens, after each use (block_index_reader_used, called with the block's mutex held) and when a
 * query releases the block; whenever a bound is exceeded the least recently acquired readers that
 * no query holds (only the index's own reference left) are closed, and reopen on their next use.
 * A reader a query holds is never closed under it, so readers in use can take the cache past its
 * bounds until their queries release them.
 */
#ifndef STRATA_QUERIER_BLOCK_INDEX_H
#define STRATA_QUERIER_BLOCK_INDEX_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "block/block_meta.h"
#include "block/block_reader.h"
#include "bucket/bucket.h"
#include "common/error.h"

typedef struct block_index block_index;

typedef struct block_index_options {
    int64_t sync_interval_ns;       /* default 1 s */
    int64_t idle_sync_interval_ns;  /* listing interval with no query for a minute; 0 (default):
                                       10 x sync_interval */
    int64_t full_sync_interval_ns;  /* a full listing at least this often; default 1 min; 0:
                                       every listing is full */
    size_t max_open_readers;        /* 0: no count bound; default 1024 */
    uint64_t max_open_reader_bytes; /* all open readers together; 0: no byte bound; default 1 GiB */
    size_t reader_cache_bytes;      /* per reader page cache; default 16 MiB */
    size_t readahead_bytes;         /* block_reader_options.readahead and tail_guess: a cold
                                       read fetches this much at a time (default 1 MiB), kept
                                       while a query pass uses the reader */
} block_index_options;

void block_index_options_default(block_index_options *opts);

/* One block, as handed to a query. meta is immutable; reader use requires holding mu. */
typedef struct indexed_block {
    char *tenant;
    char ulid_text[32];
    block_meta meta;
    pthread_mutex_t mu;
    block_reader *reader; /* NULL until opened; guarded by mu */
    uint64_t data_size;
    void *fetch_ctx;     /* owned; the reader's fetch callback context */
    int refs;            /* guarded by the index lock */
    uint64_t last_used;  /* LRU clock; guarded by the index lock */
    size_t reader_bytes; /* what the reader held when last accounted; guarded by the index lock */
    bool removed;        /* no longer in the index; freed at the last release */
    /* The level-1 blocks whose data this block holds: meta.sources sorted and unique, or the
     * block itself when it lists none (immutable; points into meta, the entry or lineage_owned). */
    const ulid *lineage;
    size_t n_lineage;
    ulid *lineage_owned; /* a sorted copy, when meta.sources was not sorted */
    size_t slot;         /* position in the index; guarded by the index lock */
    bool hidden;         /* another indexed block covers it; guarded by the index lock */
} indexed_block;

typedef struct block_index_stats {
    uint64_t syncs;
    uint64_t full_listings; /* syncs that listed each tenant whole */
    uint64_t sync_failures;
    uint64_t blocks;
    uint64_t readers_open;
    uint64_t reader_bytes;           /* held by open readers, as last accounted */
    uint64_t reader_evictions_count; /* readers closed for max_open_readers */
    uint64_t reader_evictions_bytes; /* readers closed for max_open_reader_bytes */
    uint64_t page_cache_sheds;       /* idle readers' page caches dropped for it, first */
    uint64_t meta_reads;             /* meta.json fetches */
    uint64_t from_bucket_index;      /* blocks added from bucket-index.json */
    uint64_t hidden;                 /* indexed blocks that another indexed block covers */
} block_index_stats;

int block_index_new(const block_index_options *opts, bucket *store, block_index **out,
                    strata_error *err);
/* Runs one synchronous sync, then starts the sync thread. */
int block_index_start(block_index *ix, strata_error *err);
void block_index_free(block_index *ix);
/* Adds the blocks of every tenant's bucket-index.json (block_index_start does this before its
 * first sync). Fails only when the tenants cannot be listed. */
int block_index_load_bucket_indexes(block_index *ix, strata_error *err);
/* One sync now, listing every tenant whole: new blocks are loaded, deleted ones dropped, and on
 * every tenth sync the tenants are listed again and the marks rechecked. */
int block_index_sync(block_index *ix, strata_error *err);
/* The same with a recent listing (what the sync thread does between full ones): only the names
 * after the ULID of 15 minutes ago, so deletions are not seen. */
int block_index_sync_recent(block_index *ix, strata_error *err);
/* Adds tenant/ulid if its meta.json is readable. */
int block_index_announce(block_index *ix, const char *tenant, const char *ulid, strata_error *err);

/* The blocks of tenant overlapping [start_ns, end_ns], each with a reference the caller must give
 * back with block_index_release_all (which accounts their readers and evicts idle readers while
 * the cache is over a bound). A held reference keeps the block's reader open. *out is malloc'd. */
int block_index_acquire(block_index *ix, const char *tenant, int64_t start_ns, int64_t end_ns,
                        indexed_block ***out, size_t *n, strata_error *err);
void block_index_release_all(block_index *ix, indexed_block **blocks, size_t n);

/* Opens the block's reader if needed, first closing idle readers while the cache is at a bound;
 * the caller holds b->mu. */
int block_index_open_reader(block_index *ix, indexed_block *b, strata_error *err);
/* Accounts what b's reader holds after a use (decoding grows it) and closes idle readers while the
 * cache is over its byte bound; the caller holds b->mu. Callers that skip it are accounted when
 * they release the block. */
void block_index_reader_used(block_index *ix, indexed_block *b);

/* After a read of b failed with NOT_FOUND: true when its meta.json is gone, i.e. the block was
 * deleted while a query used it; b then leaves the index and the tenant is listed again at once
 * (so the block that replaced it is indexed before the query retries). False for other damage.
 * b stays valid (the caller holds a reference). */
bool block_index_forget_if_gone(block_index *ix, indexed_block *b);

/* Tenants with at least one block, sorted; *out and each string malloc'd. */
int block_index_tenants(block_index *ix, char ***out, size_t *n, strata_error *err);
void block_index_get_stats(block_index *ix, block_index_stats *out);
/* True after the first successful sync. */
bool block_index_synced(block_index *ix);

#endif
