/*
 * ingester.c - see ingester.h.
 */
#include "ingester.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agents.h"
#include "batcher.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/tenant.h"
#include "debuginfo_service.h"
#include "push_api.h"
#include "pyroscope_ingest.h"
#include "write_limits.h"
#include "write_raw.h"

/* Bounds of thread counts, intervals and delays (lib/config: CONFIG_DEFINE_BOUNDS). */
CONFIG_DEFINE_BOUNDS(ingester_flush_interval_bounds, CONFIG_DURATION, "10ms", "10m")
CONFIG_DEFINE_BOUNDS(ingester_upload_attempts_bounds, CONFIG_INT64, "1", NULL)

const config_field ingester_config_fields[] = {
    {.key = "flush_interval",
     .kind = CONFIG_DURATION,
     .offset = offsetof(ingester_config, flush_interval_ns),
     .default_text = "1s",
     .decode = ingester_flush_interval_bounds},
    {.key = "max_block_bytes",
     .kind = CONFIG_BYTES,
     .offset = offsetof(ingester_config, max_block_bytes),
     .default_text = "256MiB"},
    {.key = "max_symbol_bytes",
     .kind = CONFIG_BYTES,
     .offset = offsetof(ingester_config, max_symbol_bytes),
     .default_text = "256MiB"},
    {.key = "upload_attempts",
     .kind = CONFIG_INT64,
     .offset = offsetof(ingester_config, upload_attempts),
     .default_text = "5",
     .decode = ingester_upload_attempts_bounds},
    {.key = "max_series_per_request",
     .kind = CONFIG_UINT64,
     .offset = offsetof(ingester_config, max_series_per_request),
     .default_text = "10000"},
    {.key = "max_labels_per_series",
     .kind = CONFIG_UINT64,
     .offset = offsetof(ingester_config, max_labels_per_series),
     .default_text = "64"},
    {.key = "max_samples_per_profile",
     .kind = CONFIG_UINT64,
     .offset = offsetof(ingester_config, max_samples_per_profile),
     .default_text = "1000000"},
    {.key = "max_stack_depth",
     .kind = CONFIG_UINT64,
     .offset = offsetof(ingester_config, max_stack_depth),
     .default_text = "1024"},
    {.key = "max_profile_bytes",
     .kind = CONFIG_BYTES,
     .offset = offsetof(ingester_config, max_profile_bytes),
     .default_text = "64MiB"},
    {.key = "max_source_upload_bytes",
     .kind = CONFIG_BYTES,
     .offset = offsetof(ingester_config, max_source_upload_bytes),
     .default_text = "128MiB"},
    {.key = "announce_listen_address",
     .kind = CONFIG_STRING,
     .offset = offsetof(ingester_config, announce_listen_address),
     .default_text = "\"\""},
    {.key = "limits",
     .kind = CONFIG_STRUCT,
     .offset = offsetof(ingester_config, limits),
     .fields = limits_values_fields},
    LIMITS_OVERRIDES_FIELD("overrides", ingester_config, overrides),
    {.key = NULL},
};

/* Copies the batcher's counters into the registry at scrape time. */
typedef struct stat_metric {
    const char *name;
    const char *help;
    size_t offset; /* into batcher_stats */
    bool seconds;  /* ns counter rendered in seconds */
} stat_metric;

static const stat_metric stat_metrics[] = {
    {"strata_ingester_profiles_total", "Profiles accepted (one per pprof sample type).",
     offsetof(batcher_stats, profiles_accepted), false},
    {"strata_ingester_samples_total", "Non-zero samples accepted.",
     offsetof(batcher_stats, samples_accepted), false},
    {"strata_ingester_blocks_written_total", "Blocks written to the bucket.",
     offsetof(batcher_stats, blocks_written), false},
    {"strata_ingester_bytes_written_total", "Bytes written to the bucket (data and meta).",
     offsetof(batcher_stats, bytes_written), false},
    {"strata_ingester_upload_failures_total", "Failed upload attempts (each retried).",
     offsetof(batcher_stats, upload_failures), false},
    {"strata_ingester_flush_failures_total", "Blocks given up on; their writes were refused.",
     offsetof(batcher_stats, flush_failures), false},
    {"strata_ingester_flushes_total", "Flushes that wrote at least one block.",
     offsetof(batcher_stats, flushes), false},
    {"strata_ingester_flush_duration_seconds_total", "Time spent writing blocks.",
     offsetof(batcher_stats, flush_duration_ns), true},
    {"strata_ingester_cut_duration_seconds_total",
     "Time spent cutting blocks off the tenants' writers (writes wait meanwhile).",
     offsetof(batcher_stats, cut_duration_ns), true},
    {"strata_ingester_symbol_resets_total",
     "Symbol and stack dictionaries dropped for reaching max_symbol_bytes.",
     offsetof(batcher_stats, symbol_resets), false},
};

#define N_STAT_METRICS (sizeof stat_metrics / sizeof stat_metrics[0])

typedef struct ingester_metrics {
    metrics_counter *batcher_counters[N_STAT_METRICS];
    metrics_counter *requests;
    metrics_counter_vec *rejected;
    metrics_counter *raw_bytes;
    metrics_histogram *request_duration;
    metrics_counter *limited_requests[3]; /* by limits_reason (LIMITS_RATE, LIMITS_SERIES) */
    metrics_counter *limited_samples[3];
    metrics_gauge *limits_tenants;
    metrics_gauge *limits_series;
    metrics_gauge *limits_bytes;
} ingester_metrics;

struct ingester {
    ingester_config config;
    batcher_options batch_options;
    ingest_limits limits;
    limits_enforcer *tenant_limits; /* per-tenant rate and series limits_enforcer */
    size_t n_overrides;             /* for the log */
    bucket *store;
    metrics_registry *registry;
    batcher *batch;
    agent_registry *agents;
    debuginfo_service *debuginfo;
    ingester_metrics metrics;
    bool started;
    bool stopping;
};

/* State of one WriteRaw call between submit and acknowledgement. */
typedef struct pending_write {
    ingester *ing;
    rpc_call *call;
    int64_t start_ns;
    char *node;
    char *peer;
} pending_write;

static void record_agent(ingester *ing, const char *node, const char *peer, int64_t start_ns,
                         const char *error_message) {
    int64_t now = strata_now_ns();
    int64_t took = strata_monotonic_ns() - start_ns;
    agent_registry_record(ing->agents, node, peer, now, took, error_message, NULL);
}

static void reject(ingester *ing, rpc_call *call, ingest_reject_reason reason, const char *node,
                   int64_t start_ns, const strata_error *err) {
    const char *reason_name = ingest_reject_reason_name(reason);
    metrics_counter_inc(metrics_counter_vec_with(ing->metrics.rejected, &reason_name));
    record_agent(ing, node, rpc_call_peer(call), start_ns, err->message);
    char quoted[600];
    strata_log_warn("ingester", "write rejected", "reason=%s code=%s peer=%s error=%s", reason_name,
                    strata_status_name(err->code), rpc_call_peer(call),
                    strata_log_quote(err->message, quoted, sizeof quoted));
    rpc_call_finish(call, err->code, err->message, NULL, 0);
}

/* A request over its tenant's limit: refused whole, counted by reason, logged with the tenant. */
static void limited(ingester *ing, rpc_call *call, limits_reason reason, const char *tenant,
                    const ingest_request *req, int64_t start_ns, const strata_error *err) {
    metrics_counter_inc(ing->metrics.limited_requests[reason]);
    metrics_counter_add(ing->metrics.limited_samples[reason], (int64_t)req->n_pprof_samples);
    record_agent(ing, req->node, rpc_call_peer(call), start_ns, err->message);
    char quoted[600];
    strata_log_warn(
        "ingester", "write limited", "reason=%s tenant=%s samples=%zu code=%s peer=%s error=%s",
        limits_reason_name(reason), tenant, req->n_pprof_samples, strata_status_name(err->code),
        rpc_call_peer(call), strata_log_quote(err->message, quoted, sizeof quoted));
    rpc_call_finish(call, err->code, err->message, NULL, 0);
}

static void write_acknowledged(void *ctx, const strata_error *err) {
    pending_write *pw = ctx;
    ingester *ing = pw->ing;
    record_agent(ing, pw->node, pw->peer, pw->start_ns, err != NULL ? err->message : NULL);
    metrics_histogram_observe_ns(ing->metrics.request_duration,
                                 strata_monotonic_ns() - pw->start_ns);
    if (err == NULL)
        rpc_call_finish(pw->call, STRATA_OK, NULL, NULL, 0); /* empty WriteRawResponse */
    else
        rpc_call_finish(pw->call, err->code, err->message, NULL, 0);
    free(pw->node);
    free(pw->peer);
    free(pw);
}

/* The call's tenant by the one rule for every API (common/tenant.h). */
static int tenant_of(rpc_call *call, strata_tenant *out, strata_error *err) {
    const char *value = NULL;
    size_t len = 0;
    if (!rpc_call_metadata(call, STRATA_TENANT_HEADER, &value, &len))
        value = NULL;
    return strata_tenant_from_header(value, len, out, err);
}

static pending_write *pending_write_new(ingester *ing, rpc_call *call, const char *node,
                                        int64_t start_ns) {
    pending_write *pw = calloc(1, sizeof *pw);
    if (pw == NULL)
        return NULL;
    pw->ing = ing;
    pw->call = call;
    pw->start_ns = start_ns;
    pw->peer = strdup(rpc_call_peer(call));
    pw->node = node != NULL ? strdup(node) : NULL;
    if (pw->peer == NULL || (node != NULL && pw->node == NULL)) {
        free(pw->peer);
        free(pw->node);
        free(pw);
        return NULL;
    }
    return pw;
}

static void handle_write_raw(rpc_call *call, const uint8_t *request, size_t request_len,
                             void *arg) {
    ingester *ing = arg;
    int64_t start = strata_monotonic_ns();
    metrics_counter_inc(ing->metrics.requests);
    metrics_counter_add(ing->metrics.raw_bytes, (int64_t)request_len);
    strata_error err;
    strata_error_clear(&err);
    strata_tenant tenant;
    if (tenant_of(call, &tenant, &err) != 0) {
        reject(ing, call, INGEST_REJECT_INVALID_TENANT, NULL, start, &err);
        return;
    }
    ingest_request req;
    ingest_reject_reason reason;
    if (ingest_request_parse(request, request_len, &ing->limits, strata_now_ns(), &req, &reason,
                             &err) != 0) {
        reject(ing, call, reason, NULL, start, &err);
        return;
    }
    limits_reason over;
    if (ingest_request_admit(ing->tenant_limits, tenant.name, &req, strata_monotonic_ns(), &over,
                             &err) != 0) {
        if (over != LIMITS_NONE)
            limited(ing, call, over, tenant.name, &req, start, &err);
        else
            reject(ing, call, INGEST_REJECT_INTERNAL, req.node, start, &err);
        ingest_request_free(&req);
        return;
    }
    pending_write *pw = pending_write_new(ing, call, req.node, start);
    if (pw == NULL) {
        strata_error_oom(&err);
        reject(ing, call, INGEST_REJECT_INTERNAL, req.node, start, &err);
    } else if (ing->batch == NULL) {
        strata_error_set(&err, STRATA_UNAVAILABLE, "ingester is not started");
        reject(ing, call, INGEST_REJECT_INTERNAL, req.node, start, &err);
        free(pw->node);
        free(pw->peer);
        free(pw);
    } else if (batcher_submit(ing->batch, tenant.name, &req, write_acknowledged, pw, &err) != 0) {
        reject(ing, call, INGEST_REJECT_INTERNAL, req.node, start, &err);
        free(pw->node);
        free(pw->peer);
        free(pw);
    }
    ingest_request_free(&req);
}

/* The agent list is not per tenant, but a call naming a tenant the rule refuses is refused on
 * every API alike. */
static int handle_agents(rpc_call *call, const uint8_t *request, size_t request_len,
                         strata_buffer *response, strata_error *err, void *arg) {
    ingester *ing = arg;
    (void)request;
    (void)request_len;
    strata_tenant tenant;
    if (tenant_of(call, &tenant, err) != 0)
        return -1;
    return agent_registry_encode_response(ing->agents, strata_now_ns(), response, err);
}

static void http_agents(void *ctx, const http_request *req, http_response *resp) {
    ingester *ing = ctx;
    strata_error err;
    strata_buffer body = STRATA_BUFFER_INIT;
    strata_tenant tenant;
    const char *value = http_request_header(req, STRATA_TENANT_HTTP_HEADER);
    if (strata_tenant_from_header(value, value != NULL ? strlen(value) : 0, &tenant, &err) != 0 ||
        agent_registry_encode_json(ing->agents, strata_now_ns(), &body, &err) != 0) {
        http_response_strata_error(resp, req, &err);
    } else {
        http_response_set_status(resp, 200);
        http_response_set_content_type(resp, "application/json");
        if (strata_buffer_append(http_response_body(resp), body.data, body.len) != 0)
            http_response_error(resp, req, 500, "out of memory");
    }
    strata_buffer_free(&body);
}

int ingester_register_http(ingester *ing, http_server *server, strata_error *err) {
    return http_server_route(server, "GET", "/api/v1/agents", HTTP_MATCH_EXACT, http_agents, ing,
                             err);
}

/* Pyroscope's /ingest: the query and body as the WriteRawRequest they mean. */
static int translate_ingest(void *ctx, const http_request *req, strata_buffer *message,
                            strata_error *err) {
    const ingester *ing = ctx;
    size_t len = 0;
    pyroscope_ingest_params p = {.name = http_request_query(req, "name"),
                                 .from = http_request_query(req, "from"),
                                 .until = http_request_query(req, "until"),
                                 .sample_rate = http_request_query(req, "sampleRate"),
                                 .spy_name = http_request_query(req, "spyName"),
                                 .format = http_request_query(req, "format"),
                                 .content_type = http_request_header(req, "content-type")};
    p.body = http_request_body(req, &len);
    p.body_len = len;
    return pyroscope_ingest_to_write_raw(&p, &ing->limits, strata_now_ns(), message, err);
}

int ingester_register_web(ingester *ing, rpcweb *web, strata_error *err) {
    return rpcweb_add_translated_route(web, "POST", "/ingest", INGESTER_WRITE_RAW_METHOD,
                                       translate_ingest, ing, err);
}

static int create_metrics(ingester *ing, strata_error *err) {
    metrics_registry *r = ing->registry;
    metrics_opts o = {.name = "strata_ingester_write_requests_total",
                      .help = "WriteRaw requests received."};
    if ((ing->metrics.requests = metrics_counter_new(r, &o, err)) == NULL)
        return -1;
    o = (metrics_opts){.name = "strata_ingester_received_bytes_total",
                       .help = "Bytes of WriteRaw request messages received."};
    if ((ing->metrics.raw_bytes = metrics_counter_new(r, &o, err)) == NULL)
        return -1;
    static const char *const reason_label[] = {"reason"};
    o = (metrics_opts){.name = "strata_ingester_rejected_requests_total",
                       .help = "WriteRaw requests rejected, by reason.",
                       .label_names = reason_label,
                       .n_labels = 1};
    if ((ing->metrics.rejected = metrics_counter_vec_new(r, &o, err)) == NULL)
        return -1;
    o = (metrics_opts){.name = "strata_ingester_write_duration_seconds",
                       .help = "Time from receiving a WriteRaw request to acknowledging it "
                               "(the block holding it is durable)."};
    if ((ing->metrics.request_duration = metrics_histogram_new(r, &o, err)) == NULL)
        return -1;
    o = (metrics_opts){.name = "strata_ingester_limited_requests_total",
                       .help = "WriteRaw requests refused whole for their tenant's limits, by "
                               "limit (rate: ingestion_rate_samples, series: max_active_series).",
                       .label_names = reason_label,
                       .n_labels = 1};
    metrics_counter_vec *requests = metrics_counter_vec_new(r, &o, err);
    o.name = "strata_ingester_limited_samples_total";
    o.help = "pprof samples in WriteRaw requests refused for their tenant's limits, by limit.";
    metrics_counter_vec *samples = metrics_counter_vec_new(r, &o, err);
    if (requests == NULL || samples == NULL)
        return -1;
    for (limits_reason why = LIMITS_RATE; why <= LIMITS_SERIES; why++) {
        const char *name = limits_reason_name(why);
        ing->metrics.limited_requests[why] = metrics_counter_vec_with(requests, &name);
        ing->metrics.limited_samples[why] = metrics_counter_vec_with(samples, &name);
        if (ing->metrics.limited_requests[why] == NULL || ing->metrics.limited_samples[why] == NULL)
            return strata_error_oom(err);
    }
    o = (metrics_opts){.name = "strata_ingester_limits_tenants",
                       .help = "Tenants whose limit state (bucket, active series) is held."};
    if ((ing->metrics.limits_tenants = metrics_gauge_new(r, &o, err)) == NULL)
        return -1;
    o = (metrics_opts){.name = "strata_ingester_limits_active_series",
                       .help = "Series counted against max_active_series, over every tenant with "
                               "a series limit (expired ones until they are dropped)."};
    if ((ing->metrics.limits_series = metrics_gauge_new(r, &o, err)) == NULL)
        return -1;
    o = (metrics_opts){.name = "strata_ingester_limits_memory_bytes",
                       .help = "Memory of the per-tenant limit states and series tables."};
    if ((ing->metrics.limits_bytes = metrics_gauge_new(r, &o, err)) == NULL)
        return -1;
    for (size_t i = 0; i < N_STAT_METRICS; i++) {
        o = (metrics_opts){.name = stat_metrics[i].name,
                           .help = stat_metrics[i].help,
                           .kind = stat_metrics[i].seconds ? METRICS_DOUBLE : METRICS_INT64};
        if ((ing->metrics.batcher_counters[i] = metrics_counter_new(r, &o, err)) == NULL)
            return -1;
    }
    return 0;
}

static void collect_batcher_stats(void *ctx) {
    ingester *ing = ctx;
    limits_stats ls;
    /* Idle tenants' limit state goes at each scrape too, even while no limited tenant writes. */
    limits_sweep(ing->tenant_limits, strata_monotonic_ns());
    limits_get_stats(ing->tenant_limits, &ls);
    metrics_gauge_set(ing->metrics.limits_tenants, (int64_t)ls.tenants);
    metrics_gauge_set(ing->metrics.limits_series, (int64_t)ls.series);
    metrics_gauge_set(ing->metrics.limits_bytes, (int64_t)ls.bytes);
    const batcher_stats *s = batcher_get_stats(ing->batch);
    for (size_t i = 0; i < N_STAT_METRICS; i++) {
        const atomic_uint_fast64_t *field =
            (const atomic_uint_fast64_t *)((const char *)s + stat_metrics[i].offset);
        uint64_t v = atomic_load(field);
        if (stat_metrics[i].seconds)
            metrics_counter_set_double(ing->metrics.batcher_counters[i], (double)v / 1e9);
        else
            metrics_counter_set(ing->metrics.batcher_counters[i], (int64_t)v);
    }
}

static void limits_from_config(const ingester_config *c, ingest_limits *limits) {
    ingest_limits_default(limits);
    limits->max_series_per_request = c->max_series_per_request;
    limits->max_labels_per_series = c->max_labels_per_series;
    limits->pprof.max_samples = c->max_samples_per_profile;
    limits->pprof.max_stack_depth = c->max_stack_depth;
    limits->pprof.max_decompressed_bytes = c->max_profile_bytes;
}

int ingester_new(const ingester_config *config, bucket *store, metrics_registry *registry,
                 ingester **out, strata_error *err) {
    if (config->flush_interval_ns <= 0 || config->upload_attempts < 1)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "ingester: flush_interval must be positive and upload_attempts at "
                                "least 1");
    ingester *ing = calloc(1, sizeof *ing);
    if (ing == NULL)
        return strata_error_oom(err);
    ing->config = *config;
    ing->config.overrides = (limits_overrides){0}; /* the caller's; tenant_limits has a copy */
    ing->n_overrides = config->overrides.count;
    ing->store = store;
    ing->registry = registry;
    limits_from_config(config, &ing->limits);
    batcher_options *bopts = &ing->batch_options;
    batcher_options_default(bopts);
    bopts->flush_interval_ns = config->flush_interval_ns;
    bopts->max_block_bytes = config->max_block_bytes;
    bopts->max_symbol_bytes = config->max_symbol_bytes;
    bopts->upload_attempts = (int)config->upload_attempts;
    if (agent_registry_new(&ing->agents, err) != 0 ||
        limits_new(&config->limits, &config->overrides, &ing->tenant_limits, err) != 0 ||
        debuginfo_service_new(store, config->max_source_upload_bytes, registry, &ing->debuginfo,
                              err) != 0 ||
        create_metrics(ing, err) != 0) {
        ingester_free(ing);
        return -1;
    }
    *out = ing;
    return 0;
}

/* Pyroscope's Push: the WriteRaw it means, through WriteRaw's own path (push_api.h). */
static void handle_push(rpc_call *call, const uint8_t *request, size_t request_len, void *arg) {
    ingester *ing = arg;
    strata_buffer raw = STRATA_BUFFER_INIT;
    strata_error err;
    strata_error_clear(&err);
    if (push_to_write_raw(request, request_len, &raw, &err) != 0) {
        metrics_counter_inc(ing->metrics.requests);
        reject(ing, call, INGEST_REJECT_MALFORMED_REQUEST, NULL, strata_monotonic_ns(), &err);
    } else {
        handle_write_raw(call, raw.data, raw.len, arg); /* parses (and copies) before returning */
    }
    strata_buffer_free(&raw);
}

int ingester_register(ingester *ing, rpc_server *server, strata_error *err) {
    if (rpc_server_add_method(server, PUSH_METHOD, handle_push, ing, err) != 0)
        return -1;
    if (rpc_server_add_method(server, INGESTER_WRITE_RAW_METHOD, handle_write_raw, ing, err) != 0 ||
        debuginfo_service_register(ing->debuginfo, server, err) != 0)
        return -1;
    return rpc_server_add_sync_method(server, INGESTER_AGENTS_METHOD, handle_agents, ing, err);
}

void ingester_set_block_listener(ingester *ing,
                                 void (*fn)(void *ctx, const char *tenant, const char *ulid),
                                 void *ctx) {
    ing->batch_options.on_block = fn;
    ing->batch_options.on_block_ctx = ctx;
}

int ingester_start(ingester *ing, strata_error *err) {
    if (batcher_new(&ing->batch_options, ing->store, &ing->batch, err) != 0 ||
        metrics_registry_add_collector(ing->registry, collect_batcher_stats, ing, err) != 0 ||
        batcher_start(ing->batch, err) != 0)
        return -1;
    ing->started = true;
    const limits_values *lv = &ing->config.limits;
    strata_log_info("ingester", "started",
                    "flush_interval_ms=%lld max_block_bytes=%llu ingestion_rate_samples=%llu "
                    "ingestion_burst_samples=%llu max_active_series=%llu limit_overrides=%zu",
                    (long long)(ing->config.flush_interval_ns / STRATA_NS_PER_MS),
                    (unsigned long long)ing->config.max_block_bytes,
                    (unsigned long long)lv->ingestion_rate_samples,
                    (unsigned long long)lv->ingestion_burst_samples,
                    (unsigned long long)lv->max_active_series, ing->n_overrides);
    return 0;
}

int ingester_apply_limits(ingester *ing, const ingester_config *config, strata_error *err) {
    if (limits_apply(ing->tenant_limits, &config->limits, &config->overrides, err) != 0)
        return -1;
    ing->config.limits = config->limits;
    ing->n_overrides = config->overrides.count;
    strata_log_info("ingester", "limits applied",
                    "ingestion_rate_samples=%llu ingestion_burst_samples=%llu "
                    "max_active_series=%llu limit_overrides=%zu",
                    (unsigned long long)config->limits.ingestion_rate_samples,
                    (unsigned long long)config->limits.ingestion_burst_samples,
                    (unsigned long long)config->limits.max_active_series, config->overrides.count);
    return 0;
}

bool ingester_ready(const ingester *ing, const char **reason) {
    if (!ing->started) {
        *reason = "ingester not started";
        return false;
    }
    if (ing->stopping) {
        *reason = "ingester shutting down";
        return false;
    }
    return true;
}

void ingester_stop(ingester *ing) {
    if (ing == NULL || ing->stopping)
        return;
    ing->stopping = true;
    if (ing->batch != NULL)
        batcher_stop(ing->batch);
}

void ingester_free(ingester *ing) {
    if (ing == NULL)
        return;
    if (ing->batch != NULL) {
        batcher_stop(ing->batch);
        metrics_registry_remove_collector(ing->registry, collect_batcher_stats, ing);
    }
    batcher_free(ing->batch);
    debuginfo_service_free(ing->debuginfo);
    agent_registry_free(ing->agents);
    limits_free(ing->tenant_limits);
    free(ing);
}
