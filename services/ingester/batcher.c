/*
 * batcher.c - see batcher.h.
 */
#include "batcher.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "block/block_format.h"
#include "block/block_meta.h"
#include "block/block_writer.h"
#include "common/array.h"
#include "common/clock.h"
#include "common/log.h"

typedef struct pending_ack {
    batcher_ack_fn fn;
    void *ctx;
} pending_ack;

/* A tenant's long-lived block writer and the requests waiting for the block it is building. At
 * each flush the block is cut off with block_writer_detach: the writer keeps its dictionary of
 * symbols and stacks, so an agent's next push finds almost all of them already interned. A cut
 * block travels to the flush thread in a batch of its own (writer = the detached block). */
typedef struct tenant_batch {
    char *tenant;
    block_writer *writer;  /* NULL until the tenant's next request after a dictionary reset */
    size_t retained_bytes; /* writer memory right after the last cut: the dictionary */
    int idle_flushes;      /* consecutive flushes without a request */
    pending_ack *acks;
    size_t n_acks;
    size_t cap_acks;
    struct tenant_batch *next;
} tenant_batch;

/* A tenant without requests for this many flushes gives its writer (and dictionary) back. */
#define IDLE_FLUSHES_BEFORE_DROP 60

struct batcher {
    batcher_options opts;
    bucket *store;
    batcher_stats stats;
    pthread_mutex_t mu;
    pthread_cond_t wake;
    tenant_batch *tenants; /* every tenant's writer and pending requests, guarded by mu */
    bool flush_now;
    bool stopping;
    bool started;
    bool stopped;
    pthread_t thread;
};

void batcher_options_default(batcher_options *opts) {
    opts->flush_interval_ns = STRATA_NS_PER_SEC;
    opts->max_block_bytes = 256u << 20;
    opts->max_symbol_bytes = 256u << 20;
    opts->upload_attempts = 5;
    opts->upload_backoff_ns = 100 * STRATA_NS_PER_MS;
    opts->on_block = NULL;
    opts->on_block_ctx = NULL;
}

int batcher_new(const batcher_options *opts, bucket *store, batcher **out, strata_error *err) {
    batcher *b = calloc(1, sizeof *b);
    if (b == NULL)
        return strata_error_oom(err);
    b->opts = *opts;
    b->store = store;
    pthread_condattr_t attr;
    if (pthread_condattr_init(&attr) != 0 ||
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC) != 0 ||
        pthread_mutex_init(&b->mu, NULL) != 0 || pthread_cond_init(&b->wake, &attr) != 0) {
        free(b);
        return strata_error_set(err, STRATA_INTERNAL, "cannot initialise batcher locks");
    }
    pthread_condattr_destroy(&attr);
    *out = b;
    return 0;
}

static void tenant_batch_free(tenant_batch *tb) {
    if (tb == NULL)
        return;
    block_writer_free(tb->writer);
    free(tb->acks);
    free(tb->tenant);
    free(tb);
}

static int ensure_writer(tenant_batch *tb, strata_error *err) {
    if (tb->writer != NULL)
        return 0;
    block_writer_options wopts;
    block_writer_options_default(&wopts);
    wopts.tenant = tb->tenant;
    /* Fresh blocks live until the compactor merges them (at the default level 3): zstd level 1
     * costs 8% less ingest CPU for 3% larger blocks. */
    wopts.zstd_level = 1;
    /* Rollups pay off for series with many profiles in a block; a 1 s block holds one push per
     * process. The compactor writes them into the blocks queries spend their time in. */
    wopts.write_rollups = false;
    tb->writer = block_writer_new(&wopts, err);
    tb->retained_bytes = 0;
    return tb->writer != NULL ? 0 : -1;
}

static tenant_batch *tenant_batch_new(const char *tenant, strata_error *err) {
    tenant_batch *tb = calloc(1, sizeof *tb);
    if (tb == NULL || (tb->tenant = strdup(tenant)) == NULL) {
        free(tb);
        strata_error_oom(err);
        return NULL;
    }
    return tb;
}

/* Finds or creates the batch of tenant, with a writer; called with mu held. */
static tenant_batch *open_batch_for(batcher *b, const char *tenant, strata_error *err) {
    tenant_batch *tb = b->tenants;
    while (tb != NULL && strcmp(tb->tenant, tenant) != 0)
        tb = tb->next;
    if (tb == NULL) {
        if ((tb = tenant_batch_new(tenant, err)) == NULL)
            return NULL;
        tb->next = b->tenants;
        b->tenants = tb;
    }
    return ensure_writer(tb, err) == 0 ? tb : NULL;
}

static int queue_ack(tenant_batch *tb, batcher_ack_fn fn, void *ctx, strata_error *err) {
    if (STRATA_ARRAY_RESERVE_OR_OOM(tb->acks, tb->cap_acks, tb->n_acks + 1, err) != 0)
        return -1;
    tb->acks[tb->n_acks].fn = fn;
    tb->acks[tb->n_acks].ctx = ctx;
    tb->n_acks++;
    return 0;
}

/* The most sample types one pprof adds in one block_writer_add_profile_types call. */
#define MAX_TYPES_PER_CALL 32

/* Adds the request's profiles, every sample type of one (series, pprof) in one call so the pprof's
 * symbols and stacks are resolved once. Types without non-zero samples are skipped. */
static int add_request_profiles(tenant_batch *tb, const ingest_request *req, strata_error *err) {
    profile_type types[MAX_TYPES_PER_CALL];
    size_t columns[MAX_TYPES_PER_CALL];
    for (size_t i = 0; i < req->n_profiles;) {
        const ingest_profile *first = &req->profiles[i];
        size_t n = 0;
        for (; i < req->n_profiles && n < MAX_TYPES_PER_CALL; i++) {
            const ingest_profile *ip = &req->profiles[i];
            if (ip->series_index != first->series_index || ip->pprof_index != first->pprof_index)
                break;
            if (ip->n_samples == 0)
                continue;
            types[n] = ip->type;
            columns[n++] = ip->sample_type_index;
        }
        if (n > 0 && block_writer_add_profile_types(
                         tb->writer, &req->series_labels[first->series_index], types, columns, n,
                         first->time_ns, first->duration_ns, first->period,
                         &req->pprofs[first->pprof_index], err) != 0)
            return -1;
    }
    return 0;
}

int batcher_submit(batcher *b, const char *tenant, const ingest_request *req, batcher_ack_fn ack,
                   void *ack_ctx, strata_error *err) {
    pthread_mutex_lock(&b->mu);
    int rc = -1;
    if (b->stopping) {
        strata_error_set(err, STRATA_UNAVAILABLE, "ingester is shutting down");
        goto out;
    }
    tenant_batch *tb = open_batch_for(b, tenant, err);
    if (tb == NULL || queue_ack(tb, ack, ack_ctx, err) != 0)
        goto out;
    if (add_request_profiles(tb, req, err) != 0) {
        /* Profiles added before the failure may still be written; the client is told to retry,
         * and the compactor de-duplicates identical profiles. */
        tb->n_acks--;
        goto out;
    }
    atomic_fetch_add(&b->stats.profiles_accepted, req->n_profiles);
    atomic_fetch_add(&b->stats.samples_accepted, req->n_samples);
    if (block_writer_memory_bytes(tb->writer) - tb->retained_bytes >= b->opts.max_block_bytes) {
        b->flush_now = true;
        pthread_cond_signal(&b->wake);
    }
    rc = 0;
out:
    pthread_mutex_unlock(&b->mu);
    return rc;
}

static void sleep_ns(int64_t ns) {
    struct timespec ts = {(time_t)(ns / STRATA_NS_PER_SEC), (long)(ns % STRATA_NS_PER_SEC)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* Uploads with retries and exponential backoff. */
static int upload_with_retries(batcher *b, const char *key, const strata_buffer *data,
                               strata_error *err) {
    int64_t backoff = b->opts.upload_backoff_ns;
    for (int attempt = 1;; attempt++) {
        if (bucket_upload(b->store, key, data->data, data->len, err) == 0)
            return 0;
        atomic_fetch_add(&b->stats.upload_failures, 1);
        char quoted[600];
        strata_log_warn("ingester", "upload failed", "key=%s attempt=%d error=%s", key, attempt,
                        strata_log_quote(err->message, quoted, sizeof quoted));
        if (attempt >= b->opts.upload_attempts)
            return -1;
        sleep_ns(backoff);
        backoff *= 2;
    }
}

static int write_block(batcher *b, tenant_batch *tb, strata_error *err) {
    strata_buffer data = STRATA_BUFFER_INIT, meta_json = STRATA_BUFFER_INIT;
    block_meta meta;
    block_meta_init(&meta);
    int rc = -1;
    if (tb->writer == NULL || block_writer_profile_count(tb->writer) == 0) {
        block_meta_free(&meta);
        return 0; /* only empty profiles: nothing to store, the writes are complete */
    }
    if (block_writer_finish(tb->writer, &data, &meta, err) != 0 ||
        block_meta_encode(&meta, &meta_json, err) != 0)
        goto out;
    char id[ULID_STRING_LEN + 1];
    ulid_format(&meta.id, id);
    char key[512];
    snprintf(key, sizeof key, "%s/%s/%s", tb->tenant, id, BLOCK_DATA_FILE);
    if (upload_with_retries(b, key, &data, err) != 0)
        goto out;
    snprintf(key, sizeof key, "%s/%s/%s", tb->tenant, id, BLOCK_META_FILE);
    if (upload_with_retries(b, key, &meta_json, err) != 0)
        goto out;
    if (b->opts.on_block != NULL)
        b->opts.on_block(b->opts.on_block_ctx, tb->tenant, id);
    atomic_fetch_add(&b->stats.blocks_written, 1);
    atomic_fetch_add(&b->stats.bytes_written, data.len + meta_json.len);
    strata_log_info("ingester", "block written",
                    "tenant=%s ulid=%s profiles=%llu samples=%llu series=%llu bytes=%zu acks=%zu",
                    tb->tenant, id, (unsigned long long)meta.num_profiles,
                    (unsigned long long)meta.num_samples, (unsigned long long)meta.num_series,
                    data.len, tb->n_acks);
    rc = 0;
out:
    block_meta_free(&meta);
    strata_buffer_free(&data);
    strata_buffer_free(&meta_json);
    return rc;
}

static void flush_batch(batcher *b, tenant_batch *tb) {
    strata_error err;
    strata_error_clear(&err);
    int rc = write_block(b, tb, &err);
    if (rc != 0) {
        atomic_fetch_add(&b->stats.flush_failures, 1);
        char quoted[600];
        strata_log_error("ingester", "block not written; writes not acknowledged",
                         "tenant=%s requests=%zu error=%s", tb->tenant, tb->n_acks,
                         strata_log_quote(err.message, quoted, sizeof quoted));
        strata_error_wrap(&err, "block upload failed, retry the write");
        err.code = STRATA_UNAVAILABLE;
    }
    for (size_t i = 0; i < tb->n_acks; i++)
        tb->acks[i].fn(tb->acks[i].ctx, rc == 0 ? NULL : &err);
}

/* Cuts the block of the tenant at *link into a batch of its own, moving the requests waiting for
 * it; called with mu held. The tenant keeps its writer and dictionary, unless the dictionary has
 * outgrown max_symbol_bytes. If the cut cannot be made (out of memory), the tenant's whole batch
 * is handed over instead, dictionary and all, and the tenant starts afresh with its next request.
 */
static tenant_batch *cut_block(batcher *b, tenant_batch **link) {
    tenant_batch *tb = *link;
    strata_error err;
    strata_error_clear(&err);
    tenant_batch *cut = tenant_batch_new(tb->tenant, &err);
    if (cut != NULL && (block_writer_profile_count(tb->writer) == 0 ||
                        block_writer_detach(tb->writer, &cut->writer, &err) == 0)) {
        cut->acks = tb->acks;
        cut->n_acks = tb->n_acks;
        cut->cap_acks = tb->cap_acks;
        tb->acks = NULL;
        tb->n_acks = tb->cap_acks = 0;
        tb->retained_bytes = block_writer_memory_bytes(tb->writer);
        if (tb->retained_bytes > b->opts.max_symbol_bytes) {
            block_writer_free(tb->writer);
            tb->writer = NULL;
            tb->retained_bytes = 0;
            atomic_fetch_add(&b->stats.symbol_resets, 1);
        }
        return cut;
    }
    char quoted[600];
    strata_log_warn("ingester", "cannot cut a block; writing the whole writer",
                    "tenant=%s error=%s", tb->tenant,
                    strata_log_quote(err.message, quoted, sizeof quoted));
    tenant_batch_free(cut);
    *link = tb->next;
    tb->next = NULL;
    return tb;
}

/* Under mu: cuts the block of every tenant with waiting requests into a list of batches to write,
 * and drops the writers of tenants idle for IDLE_FLUSHES_BEFORE_DROP flushes. */
static tenant_batch *cut_blocks(batcher *b) {
    tenant_batch *cuts = NULL;
    tenant_batch **link = &b->tenants;
    while (*link != NULL) {
        tenant_batch *tb = *link;
        if (tb->n_acks == 0) {
            if (++tb->idle_flushes >= IDLE_FLUSHES_BEFORE_DROP || tb->writer == NULL) {
                *link = tb->next;
                tenant_batch_free(tb);
            } else {
                link = &tb->next;
            }
            continue;
        }
        tb->idle_flushes = 0;
        tenant_batch *cut = cut_block(b, link);
        if (*link == tb)
            link = &tb->next;
        cut->next = cuts;
        cuts = cut;
    }
    return cuts;
}

/* Cuts every tenant's block under the lock, then writes them outside it. */
static void flush_open_batches(batcher *b) {
    pthread_mutex_lock(&b->mu);
    int64_t start = strata_monotonic_ns();
    tenant_batch *list = cut_blocks(b);
    b->flush_now = false;
    int64_t cut = strata_monotonic_ns() - start;
    pthread_mutex_unlock(&b->mu);
    if (list == NULL)
        return;
    atomic_fetch_add(&b->stats.cut_duration_ns, (uint64_t)cut);
    while (list != NULL) {
        tenant_batch *next = list->next;
        flush_batch(b, list);
        tenant_batch_free(list);
        list = next;
    }
    int64_t took = strata_monotonic_ns() - start;
    atomic_fetch_add(&b->stats.flushes, 1);
    atomic_fetch_add(&b->stats.flush_duration_ns, (uint64_t)took);
    atomic_store(&b->stats.last_flush_duration_ns, (uint64_t)took);
}

static void wait_for_flush_time(batcher *b, int64_t deadline) {
    pthread_mutex_lock(&b->mu);
    while (!b->flush_now && !b->stopping) {
        int64_t now = strata_monotonic_ns();
        if (now >= deadline)
            break;
        struct timespec ts = {(time_t)(deadline / STRATA_NS_PER_SEC),
                              (long)(deadline % STRATA_NS_PER_SEC)};
        pthread_cond_timedwait(&b->wake, &b->mu, &ts);
    }
    pthread_mutex_unlock(&b->mu);
}

/* Flushes start on a fixed beat, flush_interval apart, not flush_interval after the last one
 * ended: a write that arrives just after a cut waits at most one interval for the next cut (plus
 * that block's upload), however long the previous upload took. An upload longer than the
 * interval makes the next flush start at once; the beat is not caught up with a burst. Everything
 * that arrives while a block is uploading goes into the next one (group commit). */
static void *flush_thread_main(void *arg) {
    batcher *b = arg;
    int64_t next = strata_monotonic_ns() + b->opts.flush_interval_ns;
    for (;;) {
        wait_for_flush_time(b, next);
        int64_t started = strata_monotonic_ns();
        if (started >= next) { /* on the beat, not an early flush for size */
            next += b->opts.flush_interval_ns;
            if (next <= started)
                next = started + b->opts.flush_interval_ns;
        }
        pthread_mutex_lock(&b->mu);
        bool stopping = b->stopping;
        pthread_mutex_unlock(&b->mu);
        flush_open_batches(b);
        if (stopping)
            return NULL;
    }
}

int batcher_start(batcher *b, strata_error *err) {
    if (pthread_create(&b->thread, NULL, flush_thread_main, b) != 0)
        return strata_error_set(err, STRATA_INTERNAL, "cannot start the flush thread");
    b->started = true;
    return 0;
}

void batcher_stop(batcher *b) {
    if (b->stopped)
        return;
    pthread_mutex_lock(&b->mu);
    b->stopping = true;
    pthread_cond_signal(&b->wake);
    pthread_mutex_unlock(&b->mu);
    if (b->started)
        pthread_join(b->thread, NULL);
    flush_open_batches(b); /* anything submitted after the thread's last flush */
    b->stopped = true;
}

void batcher_free(batcher *b) {
    if (b == NULL)
        return;
    batcher_stop(b);
    while (b->tenants != NULL) {
        tenant_batch *next = b->tenants->next;
        tenant_batch_free(b->tenants);
        b->tenants = next;
    }
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->wake);
    free(b);
}

const batcher_stats *batcher_get_stats(const batcher *b) {
    return &b->stats;
}
