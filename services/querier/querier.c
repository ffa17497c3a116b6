/*
 * querier.c - see querier.h. Lifecycle, configuration and the tree building shared by both front
 * ends (query_grpc.c and query_http.c).
 */
#include "querier.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block/block_format.h"
#include "block_index.h"
#include "bucket/bucket_cache.h"
#include "common/clock.h"
#include "common/log.h"
#include "labels/labels.h"
#include "querier_internal.h"
#include "common/tenant.h"

/* Bounds of thread counts, intervals and delays (lib/config: CONFIG_DEFINE_BOUNDS). */
CONFIG_DEFINE_BOUNDS(querier_sync_interval_bounds, CONFIG_DURATION, "10ms", "24h")
CONFIG_DEFINE_BOUNDS(querier_idle_sync_interval_bounds, CONFIG_DURATION, "0s", "24h")
CONFIG_DEFINE_BOUNDS(querier_full_sync_interval_bounds, CONFIG_DURATION, "0s", "24h")
CONFIG_DEFINE_BOUNDS(querier_parallelism_bounds, CONFIG_INT64, "0", "1024")
CONFIG_DEFINE_BOUNDS(querier_fetch_parallelism_bounds, CONFIG_INT64, "1", "64")
CONFIG_DEFINE_BOUNDS(querier_query_threads_bounds, CONFIG_INT64, "1", "1024")
CONFIG_DEFINE_BOUNDS(querier_share_threads_bounds, CONFIG_INT64, "0", "1024")
CONFIG_DEFINE_BOUNDS(querier_peer_refresh_bounds, CONFIG_DURATION, "100ms", "1h")
CONFIG_DEFINE_BOUNDS(querier_peer_timeout_bounds, CONFIG_DURATION, "100ms", "1h")

static const config_field querier_peer_tls_fields[] = {
    {.key = "enabled",
     .kind = CONFIG_BOOL,
     .offset = offsetof(querier_peer_tls_config, enabled),
     .default_text = "false"},
    {.key = "ca_file", .kind = CONFIG_STRING, .offset = offsetof(querier_peer_tls_config, ca_file)},
    {.key = "cert_file",
     .kind = CONFIG_STRING,
     .offset = offsetof(querier_peer_tls_config, cert_file)},
    {.key = "key_file",
     .kind = CONFIG_STRING,
     .offset = offsetof(querier_peer_tls_config, key_file)},
    {.key = "server_name",
     .kind = CONFIG_STRING,
     .offset = offsetof(querier_peer_tls_config, server_name)},
    {.key = NULL},
};

const config_field querier_config_fields[] = {
    {.key = "sync_interval",
     .kind = CONFIG_DURATION,
     .offset = offsetof(querier_config, sync_interval_ns),
     .default_text = "1s",
     .decode = querier_sync_interval_bounds},
    {.key = "idle_sync_interval",
     .kind = CONFIG_DURATION,
     .offset = offsetof(querier_config, idle_sync_interval_ns),
     .default_text = "0s",
     .decode = querier_idle_sync_interval_bounds},
    {.key = "full_sync_interval",
     .kind = CONFIG_DURATION,
     .offset = offsetof(querier_config, full_sync_interval_ns),
     .default_text = "1m",
     .decode = querier_full_sync_interval_bounds},
    {.key = "max_query_bytes",
     .kind = CONFIG_BYTES,
     .offset = offsetof(querier_config, max_query_bytes),
     .default_text = "1GiB"},
    {.key = "parallelism",
     .kind = CONFIG_INT64,
     .offset = offsetof(querier_config, parallelism),
     .default_text = "0",
     .decode = querier_parallelism_bounds},
    {.key = "fetch_parallelism",
     .kind = CONFIG_INT64,
     .offset = offsetof(querier_config, fetch_parallelism),
     .default_text = "16",
     .decode = querier_fetch_parallelism_bounds},
    {.key = "query_threads",
     .kind = CONFIG_INT64,
     .offset = offsetof(querier_config, query_threads),
     .default_text = "4",
     .decode = querier_query_threads_bounds},
    {.key = "announce_addresses",
     .kind = CONFIG_STRING_LIST,
     .offset = offsetof(querier_config, announce_addresses),
     .default_text = "[]"},
    {.key = "peers",
     .kind = CONFIG_STRING_LIST,
     .offset = offsetof(querier_config, peers),
     .default_text = "[]"},
    {.key = "peer_refresh_interval",
     .kind = CONFIG_DURATION,
     .offset = offsetof(querier_config, peer_refresh_interval_ns),
     .default_text = "5s",
     .decode = querier_peer_refresh_bounds},
    {.key = "peer_timeout",
     .kind = CONFIG_DURATION,
     .offset = offsetof(querier_config, peer_timeout_ns),
     .default_text = "2m",
     .decode = querier_peer_timeout_bounds},
    {.key = "fanout_min_rows",
     .kind = CONFIG_UINT64,
     .offset = offsetof(querier_config, fanout_min_rows),
     .default_text = "1000000"},
    {.key = "share_threads",
     .kind = CONFIG_INT64,
     .offset = offsetof(querier_config, share_threads),
     .default_text = "0",
     .decode = querier_share_threads_bounds},
    {.key = "peer_tls",
     .kind = CONFIG_STRUCT,
     .offset = offsetof(querier_config, peer_tls),
     .fields = querier_peer_tls_fields},
    {.key = "peer_bearer_token_file",
     .kind = CONFIG_STRING,
     .offset = offsetof(querier_config, peer_bearer_token_file)},
    {.key = "max_open_blocks",
     .kind = CONFIG_UINT64,
     .offset = offsetof(querier_config, max_open_blocks),
     .default_text = "1024"},
    {.key = "max_open_block_bytes",
     .kind = CONFIG_BYTES,
     .offset = offsetof(querier_config, max_open_block_bytes),
     .default_text = "1GiB"},
    {.key = "max_report_nodes",
     .kind = CONFIG_UINT64,
     .offset = offsetof(querier_config, max_report_nodes),
     .default_text = "20000"},
    {.key = "disk_cache_directory",
     .kind = CONFIG_STRING,
     .offset = offsetof(querier_config, disk_cache_directory),
     .default_text = "\"\""},
    {.key = "disk_cache_max_bytes",
     .kind = CONFIG_BYTES,
     .offset = offsetof(querier_config, disk_cache_max_bytes),
     .default_text = "10GiB"},
    {.key = "external_url",
     .kind = CONFIG_STRING,
     .offset = offsetof(querier_config, external_url),
     .default_text = "\"\""},
    {.key = "limits",
     .kind = CONFIG_STRUCT,
     .offset = offsetof(querier_config, limits),
     .fields = limits_values_fields},
    LIMITS_OVERRIDES_FIELD("overrides", querier_config, overrides),
    {.key = NULL},
};

/* The disk cache's counters (querier.disk_cache_directory); none without one. */
static int create_disk_cache_metrics(querier *q, strata_error *err) {
    if (q->disk_cache == NULL)
        return 0;
    static const struct {
        const char *name, *help;
        size_t offset;
    } counters[] = {
        {"strata_querier_disk_cache_hits_total", "Block data pages read from the disk cache.",
         offsetof(querier, disk_cache_hits)},
        {"strata_querier_disk_cache_misses_total",
         "Block data pages fetched from the bucket and stored in the disk cache.",
         offsetof(querier, disk_cache_misses)},
        {"strata_querier_disk_cache_fetches_total",
         "Ranged GETs the disk cache sent for its misses (one per run of missing pages).",
         offsetof(querier, disk_cache_fetches)},
        {"strata_querier_disk_cache_evictions_total",
         "Pages deleted from the disk cache to stay within disk_cache_max_bytes.",
         offsetof(querier, disk_cache_evictions)},
        {"strata_querier_disk_cache_invalid_total",
         "Disk cache files that did not match their header or hash (deleted, fetched again).",
         offsetof(querier, disk_cache_invalid)},
        {"strata_querier_disk_cache_write_errors_total",
         "Pages the disk cache could not store (served from the bucket all the same).",
         offsetof(querier, disk_cache_write_errors)},
    };
    for (size_t i = 0; i < sizeof counters / sizeof counters[0]; i++) {
        metrics_opts o = {.name = counters[i].name, .help = counters[i].help};
        metrics_counter **slot = (metrics_counter **)((char *)q + counters[i].offset);
        if ((*slot = metrics_counter_new(q->registry, &o, err)) == NULL)
            return -1;
    }
    metrics_opts o = {.name = "strata_querier_disk_cache_bytes",
                      .help = "Bytes of the disk cache's files (bounded by "
                              "querier.disk_cache_max_bytes)."};
    return (q->disk_cache_bytes = metrics_gauge_new(q->registry, &o, err)) == NULL ? -1 : 0;
}

/* The reader cache's bytes and its evictions by the bound that caused them (both label values
 * created at once, so each series exists from the first scrape). */
static int create_reader_cache_metrics(querier *q, strata_error *err) {
    metrics_opts o = {.name = "strata_querier_open_block_bytes",
                      .help = "Bytes held by open block readers (decoded symbol tables, pages, "
                              "buffers), as accounted after each use; bounded by "
                              "querier.max_open_block_bytes while no query holds them."};
    if ((q->open_bytes_gauge = metrics_gauge_new(q->registry, &o, err)) == NULL)
        return -1;
    static const char *const reason_label[] = {"reason"};
    o = (metrics_opts){.name = "strata_querier_block_reader_evictions_total",
                       .help = "Cached block readers closed, by the bound exceeded "
                               "(count: max_open_blocks, bytes: max_open_block_bytes).",
                       .label_names = reason_label,
                       .n_labels = 1};
    metrics_counter_vec *evictions = metrics_counter_vec_new(q->registry, &o, err);
    if (evictions == NULL)
        return -1;
    static const char *const count_reason[] = {"count"}, *const bytes_reason[] = {"bytes"};
    q->evictions_for_count = metrics_counter_vec_with(evictions, count_reason);
    q->evictions_for_bytes = metrics_counter_vec_with(evictions, bytes_reason);
    if (q->evictions_for_count == NULL || q->evictions_for_bytes == NULL)
        return strata_error_oom(err);
    o = (metrics_opts){.name = "strata_querier_block_page_cache_sheds_total",
                       .help = "Idle block readers whose cached sample and profile pages were "
                               "dropped to stay within max_open_block_bytes (before any reader "
                               "is closed for it)."};
    return (q->page_cache_sheds = metrics_counter_new(q->registry, &o, err)) == NULL ? -1 : 0;
}

static int create_metrics(querier *q, strata_error *err) {
    static const char *const labels[] = {"operation", "code"};
    metrics_opts o = {.name = "strata_querier_queries_total",
                      .help = "Queries answered, by operation and status code.",
                      .label_names = labels,
                      .n_labels = 2};
    if ((q->queries = metrics_counter_vec_new(q->registry, &o, err)) == NULL)
        return -1;
    static const char *const op_label[] = {"operation"};
    o = (metrics_opts){.name = "strata_querier_query_duration_seconds",
                       .help = "Query latency by operation.",
                       .label_names = op_label,
                       .n_labels = 1};
    if ((q->durations = metrics_histogram_vec_new(q->registry, &o, err)) == NULL)
        return -1;
    o = (metrics_opts){.name = "strata_querier_blocks", .help = "Blocks known to the querier."};
    if ((q->blocks_gauge = metrics_gauge_new(q->registry, &o, err)) == NULL)
        return -1;
    o = (metrics_opts){.name = "strata_querier_open_blocks",
                       .help = "Blocks with an open (cached) reader."};
    if ((q->open_gauge = metrics_gauge_new(q->registry, &o, err)) == NULL)
        return -1;
    if (create_reader_cache_metrics(q, err) != 0 || create_disk_cache_metrics(q, err) != 0)
        return -1;
    o = (metrics_opts){.name = "strata_querier_bucket_syncs_total",
                       .help = "Bucket listings done to discover blocks."};
    if ((q->syncs = metrics_counter_new(q->registry, &o, err)) == NULL)
        return -1;
    o = (metrics_opts){.name = "strata_querier_meta_reads_total",
                       .help = "meta.json files fetched to discover blocks."};
    if ((q->meta_reads = metrics_counter_new(q->registry, &o, err)) == NULL)
        return -1;
    o = (metrics_opts){.name = "strata_querier_blocks_from_bucket_index_total",
                       .help =
                           "Blocks learnt from bucket-index.json at start (no meta.json read)."};
    if ((q->from_bucket_index = metrics_counter_new(q->registry, &o, err)) == NULL)
        return -1;
    o = (metrics_opts){.name = "strata_querier_corrupt_blocks_skipped_total",
                       .help = "Blocks left out of query answers because their data failed its "
                               "checksums (each answer says so in its warnings)."};
    if ((q->skipped_blocks = metrics_counter_new(q->registry, &o, err)) == NULL)
        return -1;
    o = (metrics_opts){.name = "strata_querier_limited_queries_total",
                       .help = "Merges refused with RESOURCE_EXHAUSTED for needing more memory "
                               "than their tenant's max_query_bytes (querier.limits, "
                               "querier.overrides)."};
    if ((q->limited = metrics_counter_new(q->registry, &o, err)) == NULL)
        return -1;
    o = (metrics_opts){.name = "strata_querier_shares_in_flight",
                       .help = "Shares of other queriers' merges (PeerService/MergeShard) being "
                               "merged here now."};
    if ((q->shares_in_flight = metrics_gauge_new(q->registry, &o, err)) == NULL)
        return -1;
    o = (metrics_opts){.name = "strata_querier_bucket_full_listings_total",
                       .help = "Syncs that listed every tenant whole (full_sync_interval); the "
                               "others list only the blocks of the last 15 minutes."};
    if ((q->full_listings = metrics_counter_new(q->registry, &o, err)) == NULL)
        return -1;
    o = (metrics_opts){.name = "strata_querier_bucket_sync_failures_total",
                       .help = "Bucket listings that failed."};
    return (q->sync_failures = metrics_counter_new(q->registry, &o, err)) == NULL ? -1 : 0;
}

static void collect_index_stats(void *ctx) {
    querier *q = ctx;
    block_index_stats s;
    block_index_get_stats(q->index, &s);
    metrics_gauge_set(q->blocks_gauge, (int64_t)s.blocks);
    metrics_gauge_set(q->open_gauge, (int64_t)s.readers_open);
    metrics_gauge_set(q->open_bytes_gauge, (int64_t)s.reader_bytes);
    metrics_counter_set(q->evictions_for_count, (int64_t)s.reader_evictions_count);
    metrics_counter_set(q->evictions_for_bytes, (int64_t)s.reader_evictions_bytes);
    metrics_counter_set(q->page_cache_sheds, (int64_t)s.page_cache_sheds);
    metrics_counter_set(q->syncs, (int64_t)s.syncs);
    metrics_counter_set(q->full_listings, (int64_t)s.full_listings);
    metrics_counter_set(q->sync_failures, (int64_t)s.sync_failures);
    metrics_counter_set(q->meta_reads, (int64_t)s.meta_reads);
    metrics_counter_set(q->from_bucket_index, (int64_t)s.from_bucket_index);
    bucket_cache_stats c;
    if (bucket_cache_get_stats(q->disk_cache, &c)) {
        metrics_counter_set(q->disk_cache_hits, (int64_t)c.hits);
        metrics_counter_set(q->disk_cache_misses, (int64_t)c.misses);
        metrics_counter_set(q->disk_cache_fetches, (int64_t)c.fetches);
        metrics_counter_set(q->disk_cache_evictions, (int64_t)c.evictions);
        metrics_counter_set(q->disk_cache_invalid, (int64_t)c.invalid);
        metrics_counter_set(q->disk_cache_write_errors, (int64_t)c.write_errors);
        metrics_gauge_set(q->disk_cache_bytes, (int64_t)c.bytes);
    }
}

/* The querier keeps its own copy: the configuration may be released or reloaded under it. */
static int copy_overrides(const limits_overrides *src, limits_overrides *dst) {
    if (src->count == 0)
        return 0;
    dst->items = calloc(src->count, sizeof *dst->items);
    if (dst->items == NULL)
        return -1;
    for (size_t i = 0; i < src->count; i++) {
        dst->items[i] = src->items[i];
        if ((dst->items[i].tenant = strdup(src->items[i].tenant)) == NULL) {
            limits_overrides_release(dst);
            return -1;
        }
        dst->count++;
    }
    return 0;
}

/* The fan-out's peers (peers.h), installed in the engine when any is configured. */
static int create_peers(querier *q, metrics_registry *registry, strata_error *err) {
    const querier_config *c = &q->config;
    const querier_peer_tls_config *tls = &c->peer_tls;
    querier_peers_options po = {
        .entries = (const char *const *)c->peers.items,
        .n_entries = c->peers.count,
        .refresh_interval_ns =
            c->peer_refresh_interval_ns > 0 ? c->peer_refresh_interval_ns : 5 * STRATA_NS_PER_SEC,
        .timeout_ns = c->peer_timeout_ns > 0 ? c->peer_timeout_ns : 120 * STRATA_NS_PER_SEC,
        .min_rows = c->fanout_min_rows,
        .channel = {.tls = tls->enabled,
                    .tls_ca_file = tls->ca_file,
                    .tls_cert_file = tls->cert_file,
                    .tls_key_file = tls->key_file,
                    .tls_server_name = tls->server_name,
                    .bearer_token_file = c->peer_bearer_token_file}};
    if (querier_peers_new(&po, registry, &q->peers, err) != 0)
        return strata_error_wrap(err, "querier.peers");
    if (c->peers.count > 0) {
        query_fanout f = querier_peers_fanout(q->peers);
        query_engine_set_fanout(q->engine, &f);
    }
    const char *delay = getenv("STRATA_TEST_SHARE_DELAY_MS");
    if (delay != NULL)
        q->share_delay_ns = strtoll(delay, NULL, 10) * STRATA_NS_PER_MS;
    return 0;
}

int querier_new(const querier_config *config, bucket *store, metrics_registry *registry,
                querier **out, strata_error *err) {
    querier *q = calloc(1, sizeof *q);
    if (q == NULL)
        return strata_error_oom(err);
    q->config = *config;
    q->config.overrides = (limits_overrides){0};
    if (copy_overrides(&config->overrides, &q->config.overrides) != 0) {
        free(q);
        return strata_error_oom(err);
    }
    q->registry = registry;
    q->store = store;
    q->config.external_url = NULL; /* the caller's string; ours is below */
    if ((q->external_url = strdup(config->external_url != NULL ? config->external_url : "")) ==
        NULL) {
        limits_overrides_release(&q->config.overrides);
        free(q);
        return strata_error_oom(err);
    }
    q->block_store = store;
    if (config->disk_cache_directory != NULL && config->disk_cache_directory[0] != '\0') {
        bucket_cache_options co = {.directory = config->disk_cache_directory,
                                   .max_bytes = config->disk_cache_max_bytes,
                                   .cacheable_suffix = "/" BLOCK_DATA_FILE};
        if (bucket_cache_open(store, &co, &q->disk_cache, err) != 0) {
            strata_error_wrap(err, "querier.disk_cache_directory");
            limits_overrides_release(&q->config.overrides);
            free(q->external_url);
            free(q);
            return -1;
        }
        q->block_store = q->disk_cache;
    }
    block_index_options iopts;
    block_index_options_default(&iopts);
    iopts.sync_interval_ns =
        config->sync_interval_ns > 0 ? config->sync_interval_ns : iopts.sync_interval_ns;
    iopts.idle_sync_interval_ns = config->idle_sync_interval_ns;
    iopts.full_sync_interval_ns = config->full_sync_interval_ns;
    if (config->max_open_blocks > 0)
        iopts.max_open_readers = config->max_open_blocks;
    iopts.max_open_reader_bytes = config->max_open_block_bytes;
    query_engine_options eopts;
    query_engine_options_default(&eopts);
    eopts.max_query_bytes = config->max_query_bytes;
    if (config->parallelism > 0)
        eopts.parallelism = (int)config->parallelism;
    if (config->fetch_parallelism > 0)
        eopts.fetch_parallelism = (int)config->fetch_parallelism;
    size_t query_threads = config->query_threads > 0 ? (size_t)config->query_threads : 4;
    size_t share_threads =
        config->share_threads > 0 ? (size_t)config->share_threads : query_threads;
    if (block_index_new(&iopts, q->block_store, &q->index, err) != 0 ||
        query_engine_new(&eopts, q->index, &q->engine, err) != 0 ||
        query_pool_new(query_threads, 1024, &q->pool, err) != 0 ||
        query_pool_new(share_threads, 1024, &q->share_pool, err) != 0 ||
        create_peers(q, registry, err) != 0 || create_metrics(q, err) != 0 ||
        metrics_registry_add_collector(registry, collect_index_stats, q, err) != 0) {
        querier_free(q);
        return -1;
    }
    *out = q;
    return 0;
}

int querier_start(querier *q, strata_error *err) {
    if (block_index_start(q->index, err) != 0 || querier_peers_start(q->peers, err) != 0)
        return -1;
    q->started = true;
    strata_log_info("querier", "started", "sync_interval_ms=%lld peers=%zu instance=%s",
                    (long long)(q->config.sync_interval_ns / STRATA_NS_PER_MS),
                    querier_peers_count(q->peers), querier_peers_instance_id(q->peers));
    return 0;
}

bool querier_ready(querier *q, const char **reason) {
    if (!q->started || !block_index_synced(q->index)) {
        *reason = "querier has not listed the bucket yet";
        return false;
    }
    return true;
}

void querier_free(querier *q) {
    if (q == NULL)
        return;
    if (q->index != NULL)
        metrics_registry_remove_collector(q->registry, collect_index_stats, q);
    query_pool_free(q->pool); /* finishes queued queries before the engine goes */
    query_pool_free(q->share_pool);
    querier_peers_free(q->peers); /* after the queries: their plans hold peers */
    query_engine_free(q->engine);
    block_index_free(q->index);
    bucket_close(q->disk_cache); /* after the index: its readers read through it */
    limits_overrides_release(&q->config.overrides);
    free(q->external_url);
    free(q);
}

void querier_announce_block(querier *q, const char *tenant, const char *block_id) {
    strata_error err;
    if (block_index_announce(q->index, tenant, block_id, &err) != 0) {
        char quoted[600];
        strata_log_warn("querier", "announced block not loaded", "tenant=%s ulid=%s error=%s",
                        tenant, block_id, strata_log_quote(err.message, quoted, sizeof quoted));
    }
}

query_engine *querier_engine(querier *q) {
    return q->engine;
}

uint64_t querier_tenant_max_query_bytes(const querier *q, const char *tenant) {
    limits_values v;
    limits_resolve(&q->config.limits, &q->config.overrides, tenant, &v);
    return v.max_query_bytes != 0 ? v.max_query_bytes : q->config.max_query_bytes;
}

void querier_observe(querier *q, const char *operation, strata_status code, int64_t start_ns) {
    const char *values[] = {operation, strata_status_name(code)};
    metrics_counter_inc(metrics_counter_vec_with(q->queries, values));
    metrics_histogram_observe_ns(metrics_histogram_vec_with(q->durations, &operation),
                                 strata_monotonic_ns() - start_ns);
}

/* ---- trees -------------------------------------------------------------------------------- */

static int add_selection(querier *q, const char *tenant, const profile_selection *s, calltree *tree,
                         bool base, merge_result *res, profile_type *type_out, strata_error *err) {
    selector sel;
    if (selector_parse(s->query, &sel, err) != 0)
        return strata_error_wrap(err, "invalid query");
    query_options opts = {.max_query_bytes = querier_tenant_max_query_bytes(q, tenant),
                          .query_text = s->query};
    int rc;
    if (s->mode == SELECTION_SINGLE)
        rc = query_single_opts(q->engine, tenant, &opts, &sel, s->time_ns, tree, base, res, err);
    else
        rc = query_merge_opts(q->engine, tenant, &opts, &sel, s->start_ns, s->end_ns, tree, base,
                              res, err);
    if (rc != 0 && err->code == STRATA_RESOURCE_EXHAUSTED) {
        /* The engine's only refusals of this kind are max_query_bytes' (and the call tree's 2^32
         * frames or nodes, far beyond any memory bound). */
        metrics_counter_inc(q->limited);
        strata_error_wrap(err, "tenant %s", tenant);
        char quoted[600];
        strata_log_info("querier", "query limited", "tenant=%s error=%s", tenant,
                        strata_log_quote(err->message, quoted, sizeof quoted));
    }
    if (rc == 0 && type_out != NULL)
        rc = profile_type_copy(type_out, &sel.profile_type, err);
    selector_free(&sel);
    return rc;
}

int querier_build_tree(querier *q, const char *tenant, const profile_selection *a,
                       const profile_selection *b, bool absolute, const calltree_grouping *group_by,
                       query_tree_result *out, strata_error *err) {
    memset(out, 0, sizeof *out);
    if (calltree_create(&out->tree, 4096, err) != 0)
        return -1;
    if (calltree_set_grouping(out->tree, group_by, err) != 0) {
        query_tree_result_free(out);
        return -1;
    }
    int rc = add_selection(q, tenant, b, out->tree, false, &out->main, &out->type, err);
    if (rc == 0 && a != NULL) {
        calltree_set_diff(out->tree, true);
        rc = add_selection(q, tenant, a, out->tree, true, &out->base, NULL, err);
    }
    if (rc == 0)
        rc = calltree_order_depth_first(out->tree, err);
    if (rc == 0)
        rc = calltree_finalize(out->tree, err);
    if (rc == 0 && a != NULL)
        rc = calltree_apply_diff_mode(out->tree, absolute, err);
    if (rc != 0)
        query_tree_result_free(out);
    return rc;
}

void query_tree_result_free(query_tree_result *r) {
    calltree_free(r->tree);
    profile_type_free(&r->type);
    memset(r, 0, sizeof *r);
}

int querier_pack(const ProtobufCMessage *msg, strata_buffer *out, strata_error *err) {
    size_t size = protobuf_c_message_get_packed_size(msg);
    if (strata_buffer_reserve(out, size) != 0)
        return strata_error_oom(err);
    out->len += protobuf_c_message_pack(msg, out->data + out->len);
    return 0;
}

int querier_bad_request(strata_error *err, const char *what) {
    return strata_error_set(err, STRATA_INVALID_ARGUMENT, "request is not a valid %s protobuf",
                            what);
}

int querier_call_tenant(rpc_call *call, strata_tenant *out, strata_error *err) {
    const char *v = NULL;
    size_t len = 0;
    if (!rpc_call_metadata(call, STRATA_TENANT_HEADER, &v, &len))
        v = NULL;
    return strata_tenant_from_header(v, len, out, err);
}

void querier_report_options(const querier *q, const query_tree_result *r,
                            double node_trim_threshold, uint64_t max_nodes,
                            calltree_report_options *opts) {
    memset(opts, 0, sizeof *opts);
    uint64_t cap = q->config.max_report_nodes;
    opts->max_nodes = (size_t)(max_nodes > 0 && (cap == 0 || max_nodes < cap) ? max_nodes : cap);
    const profile_type *t = &r->type;
    bool samples_count = t->sample_type != NULL && strcmp(t->sample_type, "samples") == 0 &&
                         strcmp(t->sample_unit, "count") == 0;
    opts->node_trim_threshold = node_trim_threshold;
    opts->unit = samples_count ? t->period_unit : t->sample_unit;
    opts->name = t->name;
    calltree_node_values root = calltree_node_get(r->tree, CALLTREE_ROOT);
    opts->total = root.total;
    opts->filtered = 0;
    opts->pprof.sample_type = samples_count ? t->period_type : t->sample_type;
    opts->pprof.sample_unit = opts->unit;
    opts->pprof.period_type = t->period_type;
    opts->pprof.period_unit = t->period_unit;
    opts->pprof.period = r->main.period;
    opts->pprof.time_nanos = r->main.min_time_ns;
    opts->pprof.duration_nanos = r->main.duration_ns;
}

/* floor(t / step), for the epoch-aligned buckets query_range uses. */
static int64_t bucket_index(int64_t t, int64_t step) {
    int64_t b = t / step;
    return (t % step != 0 && t < 0) ? b - 1 : b;
}

int64_t querier_range_step(int64_t start_ns, int64_t end_ns, int64_t step_ns, uint64_t limit) {
    int64_t span = end_ns > start_ns ? end_ns - start_ns : 0;
    if (limit > (uint64_t)INT64_MAX)
        limit = 0;
    int64_t step = step_ns;
    if (step <= 0)
        step = limit > 0 ? span / (int64_t)limit : span / 300;
    if (step < STRATA_NS_PER_SEC)
        step = STRATA_NS_PER_SEC;
    if (limit == 0 || bucket_index(end_ns, step) - bucket_index(start_ns, step) < (int64_t)limit)
        return step;
    /* Buckets are aligned to the epoch, not to start, so [start, end] touches up to
     * span / step + 2 of them: with span < step * (limit - 1) it touches at most limit. */
    if (limit > 1 && span / (int64_t)(limit - 1) + 1 > step)
        step = span / (int64_t)(limit - 1) + 1;
    for (int i = 0;
         i < 64 && bucket_index(end_ns, step) - bucket_index(start_ns, step) >= (int64_t)limit;
         i++) /* limit 1: one bucket must hold both ends */
        step = step > INT64_MAX / 2 ? INT64_MAX : step * 2;
    return step;
}

void querier_warnings(querier *q, const query_stats *a, const query_stats *b, char *out,
                      size_t cap) {
    size_t len = 0;
    out[0] = '\0';
    const query_stats *sides[2] = {a, b};
    uint64_t duplicates = 0;
    for (int i = 0; i < 2; i++) {
        const query_stats *s = sides[i];
        if (s == NULL)
            continue;
        duplicates += s->duplicates;
        if (s->skipped_blocks == 0)
            continue;
        metrics_counter_add(q->skipped_blocks, s->skipped_blocks);
        char quoted[600];
        strata_log_warn("querier", "corrupt block left out of a query",
                        "block=%s blocks=%llu error=%s", s->skipped_block,
                        (unsigned long long)s->skipped_blocks,
                        strata_log_quote(s->skipped_error, quoted, sizeof quoted));
        int n = snprintf(out + len, cap - len,
                         "%spartial answer: %llu block(s) left out because their data is corrupt "
                         "(%s: %s)",
                         len > 0 ? "; " : "", (unsigned long long)s->skipped_blocks,
                         s->skipped_block, s->skipped_error);
        len = n > 0 && (size_t)n < cap - len ? len + (size_t)n : cap - 1;
    }
    if (duplicates > 0 && len + 1 < cap) {
        int n = snprintf(out + len, cap - len,
                         "%s%llu identical profile(s) stored more than once counted once",
                         len > 0 ? "; " : "", (unsigned long long)duplicates);
        len = n > 0 && (size_t)n < cap - len ? len + (size_t)n : cap - 1;
    }
    for (size_t i = 0; i < len; i++) /* printable ASCII for a gRPC trailer */
        if ((unsigned char)out[i] < 0x20 || (unsigned char)out[i] > 0x7e)
            out[i] = '?';
}
