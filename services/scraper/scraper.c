/*
 * scraper.c - jobs, targets and the scrape thread; see scraper.h.
 */
#include "scraper.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/thread.h"
#include "common/array.h"
#include "common/clock.h"
#include "common/curl_global.h"
#include "common/hash.h"
#include "common/log.h"
#include "pprof/pprof.h"
#include "scraper_internal.h"

/* Every target is looked at in one scan (a list walk, cheap per target but not per event), so
 * scans run at most every SCAN_SLACK_NS and start whatever is due before the next one. */
#define SCAN_SLACK_NS (INT64_C(50) * 1000000)
#define MAX_POLL_MS 1000
#define CONNECT_TIMEOUT_MS_MAX 5000
#define SCRAPE_MAX_IDLE_CONNECTIONS 4096

typedef struct scrape_transfer {
    struct scrape_transfer *prev, *next; /* the scrape thread's in-flight list */
    scrape_target *target;
    CURL *handle;
    struct curl_slist *headers;
    struct curl_slist *connect_to; /* tls_config.server_name */
    char *url_override;
    strata_buffer body;
    size_t limit;
    bool too_large;
    int64_t started_mono_ns;
    int64_t started_wall_ns;
    char curl_error[CURL_ERROR_SIZE];
} scrape_transfer;

/* ---- jobs and targets ------------------------------------------------------------------------ */

static void job_unref(scrape_job *job);

static void target_free(scrape_target *t) {
    label_set_free(&t->discovered);
    label_set_free(&t->labels);
    free(t->url);
    scrape_job *job = t->job; /* NULL while being built */
    free(t);
    if (job != NULL)
        job_unref(job);
}

/* Frees a target no longer listed, or retires it while its request is in flight. */
static void target_drop(scrape_target *t) {
    if (t->in_flight)
        t->retired = true;
    else
        target_free(t);
}

static void job_clear_targets(scrape_job *job) {
    for (size_t i = 0; i < job->n_targets; i++)
        target_drop(job->targets[i]);
    free(job->targets);
    job->targets = NULL;
    job->n_targets = 0;
    for (size_t i = 0; i < job->n_dropped; i++)
        label_set_free(&job->dropped[i]);
    free(job->dropped);
    job->dropped = NULL;
    job->n_dropped = 0;
    job->cap_dropped = 0;
}

static void job_unref(scrape_job *job) {
    if (--job->refs > 0)
        return;
    target_groups_free(job->groups, job->n_groups);
    scrape_job_config_free(&job->config);
    free(job);
}

static bool is_hidden_label(const char *name) {
    return name[0] == '_' && name[1] == '_' && strcmp(name, STRATA_LABEL_NAME) != 0;
}

/* The labels every target of the job gets before relabeling (when not set by discovery). */
static int add_job_labels(const scrape_job_config *cfg, const scrape_endpoint *ep, label_set *ls,
                          strata_error *err) {
    if (label_set_get(ls, "job") == NULL && label_set_set(ls, "job", cfg->job_name, err) != 0)
        return -1;
    if (label_set_get(ls, "__scheme__") == NULL &&
        label_set_set(ls, "__scheme__", cfg->scheme, err) != 0)
        return -1;
    for (size_t i = 0; i < cfg->params.count; i++) {
        const scrape_param *p = &cfg->params.items[i];
        char name[256];
        snprintf(name, sizeof name, "__param_%s", p->name);
        if (p->values.count > 0 && label_set_get(ls, name) == NULL &&
            label_set_set(ls, name, p->values.items[0], err) != 0)
            return -1;
    }
    return label_set_set(ls, STRATA_LABEL_NAME, ep->name, err);
}

static int append_query(strata_buffer *url, bool *first, const char *name, const char *value) {
    char *n = curl_easy_escape(NULL, name, 0), *v = curl_easy_escape(NULL, value, 0);
    int rc = -1;
    if (n != NULL && v != NULL)
        rc = strata_buffer_appendf(url, "%c%s=%s", *first ? '?' : '&', n, v);
    *first = false;
    curl_free(n);
    curl_free(v);
    return rc;
}

/* scheme://address/prefix/path?params, with __param_* labels overriding the first value. */
static char *build_url(const scrape_job_config *cfg, const scrape_endpoint *ep, const label_set *ls,
                       int64_t seconds) {
    strata_buffer url = STRATA_BUFFER_INIT;
    bool first = true;
    int rc = strata_buffer_appendf(&url, "%s://%s%s%s", label_set_get(ls, "__scheme__"),
                                   label_set_get(ls, DISCOVERY_ADDRESS_LABEL),
                                   cfg->profiling_config.path_prefix, ep->path);
    for (size_t i = 0; rc == 0 && i < cfg->params.count; i++) {
        const scrape_param *p = &cfg->params.items[i];
        char name[256];
        snprintf(name, sizeof name, "__param_%s", p->name);
        const char *override = label_set_get(ls, name);
        for (size_t j = 0; rc == 0 && j < p->values.count; j++)
            rc = append_query(&url, &first, p->name,
                              j == 0 && override != NULL ? override : p->values.items[j]);
    }
    for (size_t i = 0; rc == 0 && i < ls->count; i++) {
        const char *name = ls->labels[i].name;
        if (strncmp(name, "__param_", 8) != 0)
            continue;
        bool configured = false;
        for (size_t j = 0; j < cfg->params.count; j++)
            configured |= strcmp(cfg->params.items[j].name, name + 8) == 0;
        if (!configured)
            rc = append_query(&url, &first, name + 8, ls->labels[i].value);
    }
    if (rc == 0 && seconds > 0) {
        char text[32];
        snprintf(text, sizeof text, "%lld", (long long)seconds);
        rc = append_query(&url, &first, "seconds", text);
    }
    if (rc == 0)
        rc = strata_buffer_append_byte(&url, 0);
    if (rc != 0) {
        strata_buffer_free(&url);
        return NULL;
    }
    return (char *)strata_buffer_detach(&url, NULL);
}

static uint64_t target_identity(const label_set *labels, const char *url) {
    return label_set_hash(labels) * 31 + strata_hash_bytes(url, strlen(url), 0);
}

/* Builds one (target, endpoint). Returns 1 and *out when active, 0 when relabeling dropped it
 * (its discovered labels appended to the job's dropped list), -1 on error. */
static int build_target(scrape_job *job, const target_group *g, size_t index,
                        const scrape_endpoint *ep, scrape_target **out, strata_error *err) {
    const scrape_job_config *cfg = &job->config;
    scrape_target *t = calloc(1, sizeof *t);
    if (t == NULL)
        return strata_error_oom(err);
    t->endpoint = ep;
    if (target_group_merge_labels(g, index, &t->discovered, err) != 0 ||
        add_job_labels(cfg, ep, &t->discovered, err) != 0 ||
        label_set_copy(&t->labels, &t->discovered, err) != 0)
        goto fail;
    bool keep = true;
    if (relabel_apply(cfg->relabel, &t->labels, &keep, err) != 0)
        goto fail;
    const char *address = keep ? label_set_get(&t->labels, DISCOVERY_ADDRESS_LABEL) : NULL;
    if (address == NULL || address[0] == '\0') {
        if (STRATA_ARRAY_RESERVE_OR_OOM(job->dropped, job->cap_dropped, job->n_dropped + 1, err) !=
            0)
            goto fail;
        job->dropped[job->n_dropped++] = t->discovered;
        t->discovered = (label_set)LABEL_SET_INIT;
        label_set_free(&t->labels);
        free(t);
        return 0;
    }
    if (label_set_get(&t->labels, "__scheme__") == NULL &&
        label_set_set(&t->labels, "__scheme__", cfg->scheme, err) != 0)
        goto fail;
    if (label_set_get(&t->labels, "instance") == NULL &&
        label_set_set(&t->labels, "instance", address, err) != 0)
        goto fail;
    t->interval_ns = cfg->scrape_interval_ns;
    t->request_timeout_ns = cfg->scrape_timeout_ns;
    int64_t seconds = 0;
    if (ep->delta) {
        int64_t window = ep->seconds_ns > 0 ? ep->seconds_ns : cfg->scrape_interval_ns;
        seconds = window / STRATA_NS_PER_SEC > 0 ? window / STRATA_NS_PER_SEC : 1;
        t->request_timeout_ns += seconds * STRATA_NS_PER_SEC;
    }
    if ((t->url = build_url(cfg, ep, &t->labels, seconds)) == NULL) {
        strata_error_oom(err);
        goto fail;
    }
    for (size_t i = 0; i < t->labels.count;) {
        if (is_hidden_label(t->labels.labels[i].name))
            label_set_remove(&t->labels, t->labels.labels[i].name);
        else
            i++;
    }
    label_set_sort(&t->labels);
    t->identity = target_identity(&t->labels, t->url);
    *out = t;
    return 1;
fail:
    label_set_free(&t->discovered);
    label_set_free(&t->labels);
    free(t->url);
    free(t);
    return -1;
}

/* Targets by identity (a u64 map wants non-zero keys). */
static uint64_t identity_key(uint64_t identity) {
    return identity != 0 ? identity : 1;
}

/* Maps the identity of each listed target to its index. */
static int index_targets(strata_u64_map *m, scrape_target *const *list, size_t n,
                         strata_error *err) {
    if (strata_u64_map_init(m, n) != 0)
        return strata_error_oom(err);
    for (size_t i = 0; i < n; i++)
        if (list[i] != NULL &&
            strata_u64_map_upsert(m, identity_key(list[i]->identity), i, NULL) == NULL) {
            strata_u64_map_free(m);
            return strata_error_oom(err);
        }
    return 0;
}

static scrape_target *find_target(const strata_u64_map *m, scrape_target *const *list,
                                  uint64_t identity) {
    const uint64_t *at = strata_u64_map_get(m, identity_key(identity));
    return at != NULL ? list[*at] : NULL;
}

/* Rebuilds the job's targets from its groups; targets that stay keep their state. Under mu. */
static int job_rebuild(scrape_job *job, strata_error *err) {
    scrape_target **old = job->targets;
    size_t n_old = job->n_targets;
    job->targets = NULL;
    job->n_targets = 0;
    for (size_t i = 0; i < job->n_dropped; i++)
        label_set_free(&job->dropped[i]);
    free(job->dropped);
    job->dropped = NULL;
    job->n_dropped = 0;
    job->cap_dropped = 0;
    size_t cap = 0;
    strata_u64_map old_index, seen;
    if (index_targets(&old_index, old, n_old, err) != 0) {
        job->targets = old; /* nothing changed */
        job->n_targets = n_old;
        return -1;
    }
    if (strata_u64_map_init(&seen, n_old) != 0) {
        strata_u64_map_free(&old_index);
        job->targets = old;
        job->n_targets = n_old;
        return strata_error_oom(err);
    }
    int rc = 0;
    for (size_t g = 0; g < job->n_groups && rc == 0; g++) {
        for (size_t i = 0; i < job->groups[g].n_targets && rc == 0; i++) {
            for (size_t e = 0; e < job->config.n_endpoints && rc == 0; e++) {
                const scrape_endpoint *ep = &job->config.endpoints[e];
                if (!ep->enabled)
                    continue;
                scrape_target *t = NULL;
                int built = build_target(job, &job->groups[g], i, ep, &t, err);
                if (built <= 0) {
                    rc = built;
                    continue;
                }
                bool first = false;
                if (strata_u64_map_upsert(&seen, identity_key(t->identity), 1, &first) == NULL) {
                    rc = strata_error_oom(err);
                    target_free(t);
                    continue;
                }
                if (!first) {
                    target_free(t); /* the same target twice in the discovered groups */
                    continue;
                }
                const uint64_t *old_at = strata_u64_map_get(&old_index, identity_key(t->identity));
                scrape_target *kept = old_at != NULL ? old[*old_at] : NULL;
                if (kept != NULL) {
                    old[*old_at] = NULL;
                    /* the newest discovered labels, the old schedule and health (its labels,
                     * URL and endpoint are the same: they make its identity) */
                    label_set tmp = kept->discovered;
                    kept->discovered = t->discovered;
                    t->discovered = tmp;
                    target_free(t);
                    t = kept;
                } else {
                    t->job = job;
                    job->refs++;
                    uint64_t offset = t->identity % (uint64_t)t->interval_ns;
                    int64_t now = strata_monotonic_ns();
                    t->next_mono_ns = now - (now % t->interval_ns) + (int64_t)offset;
                    if (t->next_mono_ns < now)
                        t->next_mono_ns += t->interval_ns;
                }
                if (STRATA_ARRAY_RESERVE(job->targets, cap, job->n_targets + 1) != 0) {
                    rc = strata_error_oom(err);
                    target_drop(t);
                    continue;
                }
                job->targets[job->n_targets++] = t;
            }
        }
    }
    strata_u64_map_free(&old_index);
    strata_u64_map_free(&seen);
    for (size_t i = 0; i < n_old; i++)
        if (old[i] != NULL)
            target_drop(old[i]);
    free(old);
    metrics_gauge_set(job->active_gauge, (int64_t)job->n_targets);
    metrics_gauge_set(job->dropped_gauge, (int64_t)job->n_dropped);
    job->owner->rescan = true;
    return rc;
}

/* Replaces, adds or removes (no targets) the group of each source. Under mu. */
static int job_update_groups(scrape_job *job, const target_group *groups, size_t n,
                             strata_error *err) {
    for (size_t i = 0; i < n; i++) {
        const target_group *g = &groups[i];
        size_t at = job->n_groups;
        for (size_t k = 0; k < job->n_groups; k++)
            if (strcmp(job->groups[k].source, g->source) == 0)
                at = k;
        if (at < job->n_groups) {
            target_group_free(&job->groups[at]);
            job->groups[at] = job->groups[--job->n_groups];
        }
        if (g->n_targets == 0)
            continue;
        if (STRATA_ARRAY_RESERVE_OR_OOM(job->groups, job->cap_groups, job->n_groups + 1, err) != 0)
            return -1;
        if (target_group_copy(&job->groups[job->n_groups], g, err) != 0)
            return -1;
        job->n_groups++;
    }
    return 0;
}

static void on_discovery_update(void *ctx, const target_group *groups, size_t n) {
    scrape_job *job = ctx;
    scraper *s = job->owner;
    strata_error err;
    pthread_mutex_lock(&s->mu);
    int rc = job_update_groups(job, groups, n, &err);
    if (rc == 0)
        rc = job_rebuild(job, &err);
    size_t active = job->n_targets, dropped = job->n_dropped;
    pthread_mutex_unlock(&s->mu);
    if (s->multi != NULL)
        curl_multi_wakeup(s->multi);
    if (rc != 0) {
        char quoted[600];
        strata_log_error("scraper", "targets not updated", "job=%s error=%s", job->config.job_name,
                         strata_log_quote(err.message, quoted, sizeof quoted));
        return;
    }
    strata_log_debug("scraper", "targets updated", "job=%s active=%zu dropped=%zu",
                     job->config.job_name, active, dropped);
}

/* A reload keeps what the running job knew about the same targets (same final labels and URL):
 * health, last error and scrape, and the place in the schedule. Under mu. */
static void job_inherit_state(scrape_job *job, const scrape_job *old) {
    strata_u64_map index;
    strata_error err;
    if (index_targets(&index, old->targets, old->n_targets, &err) != 0)
        return; /* out of memory: the targets start afresh */
    for (size_t i = 0; i < job->n_targets; i++) {
        scrape_target *t = job->targets[i];
        const scrape_target *o = find_target(&index, old->targets, t->identity);
        if (o == NULL)
            continue;
        t->health = o->health;
        memcpy(t->last_error, o->last_error, sizeof t->last_error);
        t->last_scrape_ns = o->last_scrape_ns;
        t->last_duration_ns = o->last_duration_ns;
        if (o->interval_ns == t->interval_ns)
            /* a request of the old target still in flight holds this slot */
            t->next_mono_ns = o->next_mono_ns + (o->in_flight ? o->interval_ns : 0);
    }
    strata_u64_map_free(&index);
}

static scrape_job *job_new(scraper *s, scrape_job_config *cfg, strata_error *err) {
    scrape_job *job = calloc(1, sizeof *job);
    if (job == NULL) {
        strata_error_oom(err);
        return NULL;
    }
    job->owner = s;
    job->refs = 1;
    job->config = *cfg;
    memset(cfg, 0, sizeof *cfg);
    const char *name = job->config.job_name;
    job->scrapes = metrics_counter_vec_with(s->scrapes_vec, &name);
    job->failures = metrics_counter_vec_with(s->failures_vec, &name);
    job->bytes = metrics_counter_vec_with(s->bytes_vec, &name);
    job->duration = metrics_histogram_vec_with(s->duration_vec, &name);
    const char *active[] = {name, "active"}, *dropped[] = {name, "dropped"};
    job->active_gauge = metrics_gauge_vec_with(s->targets_vec, active);
    job->dropped_gauge = metrics_gauge_vec_with(s->targets_vec, dropped);
    return job;
}

/* ---- service lifecycle ----------------------------------------------------------------------- */

static int register_metrics(scraper *s, strata_error *err) {
    static const char *const job_label[] = {"job"};
    static const char *const job_state[] = {"job", "state"};
    static const char *const reason_label[] = {"reason"};
    metrics_opts o = {.name = "strata_scraper_scrapes_total",
                      .help = "Scrapes attempted, by job.",
                      .label_names = job_label,
                      .n_labels = 1};
    if ((s->scrapes_vec = metrics_counter_vec_new(s->registry, &o, err)) == NULL)
        return -1;
    o.name = "strata_scraper_scrape_failures_total";
    o.help = "Scrapes that failed (connection, timeout, status, size or invalid pprof), by job.";
    if ((s->failures_vec = metrics_counter_vec_new(s->registry, &o, err)) == NULL)
        return -1;
    o.name = "strata_scraper_scraped_bytes_total";
    o.help = "Bytes of pprof received from targets, by job.";
    if ((s->bytes_vec = metrics_counter_vec_new(s->registry, &o, err)) == NULL)
        return -1;
    o.name = "strata_scraper_scrape_duration_seconds";
    o.help = "Duration of scrapes, by job.";
    if ((s->duration_vec = metrics_histogram_vec_new(s->registry, &o, err)) == NULL)
        return -1;
    metrics_opts g = {.name = "strata_scraper_targets",
                      .help = "Targets, by job and state (active or dropped by relabeling).",
                      .label_names = job_state,
                      .n_labels = 2};
    if ((s->targets_vec = metrics_gauge_vec_new(s->registry, &g, err)) == NULL)
        return -1;
    metrics_opts p = {.name = "strata_scraper_push_enqueued_series_total",
                      .help = "Scraped profiles handed to the pusher."};
    if ((s->push_enqueued = metrics_counter_new(s->registry, &p, err)) == NULL)
        return -1;
    p.name = "strata_scraper_push_acknowledged_series_total";
    p.help = "Scraped profiles acknowledged by an ingester.";
    if ((s->push_acked = metrics_counter_new(s->registry, &p, err)) == NULL)
        return -1;
    p.name = "strata_scraper_push_errors_total";
    p.help = "Failed WriteRaw attempts (retried).";
    if ((s->push_errors = metrics_counter_new(s->registry, &p, err)) == NULL)
        return -1;
    p.name = "strata_scraper_push_batches_total";
    p.help = "WriteRaw calls acknowledged; each carries every scraped profile ready when it left.";
    if ((s->push_batches = metrics_counter_new(s->registry, &p, err)) == NULL)
        return -1;
    metrics_opts q = {.name = "strata_scraper_push_in_flight_batches",
                      .help = "WriteRaw calls waiting for an ingester's acknowledgement."};
    if ((s->push_in_flight = metrics_gauge_new(s->registry, &q, err)) == NULL)
        return -1;
    q.name = "strata_scraper_push_queue_bytes";
    q.help = "Scraped profiles not yet acknowledged, encoded (in flight included).";
    if ((s->push_queue_bytes = metrics_gauge_new(s->registry, &q, err)) == NULL)
        return -1;
    q.name = "strata_scraper_push_lag_seconds";
    q.help = "Age of the oldest scraped profile neither acknowledged nor dropped (0: none).";
    q.kind = METRICS_DOUBLE;
    if ((s->push_lag = metrics_gauge_new(s->registry, &q, err)) == NULL)
        return -1;
    p.name = "strata_scraper_push_dropped_requests_total";
    p.help = "Pushes (scraped profiles handed over together) dropped, by reason (queue_full, "
             "too_large, rejected).";
    p.label_names = reason_label;
    p.n_labels = 1;
    if ((s->push_dropped = metrics_counter_vec_new(s->registry, &p, err)) == NULL)
        return -1;
    return 0;
}

static void collect_push_stats(void *ctx) {
    scraper *s = ctx;
    if (s->push == NULL)
        return;
    push_stats st;
    push_stats_get(s->push, &st);
    metrics_counter_set(s->push_enqueued, (int64_t)st.enqueued_series);
    metrics_counter_set(s->push_acked, (int64_t)st.series);
    metrics_counter_set(s->push_errors, (int64_t)st.errors);
    metrics_counter_set(s->push_batches, (int64_t)st.batches);
    metrics_gauge_set(s->push_in_flight, (int64_t)st.in_flight_batches);
    metrics_gauge_set(s->push_queue_bytes, (int64_t)st.queue_bytes);
    metrics_gauge_set_double(s->push_lag, (double)st.lag_ns / 1e9);
    for (int r = 0; r < PUSH_DROP_REASONS; r++) {
        const char *name = push_drop_reason_name((push_drop_reason)r);
        metrics_counter_set(metrics_counter_vec_with(s->push_dropped, &name),
                            (int64_t)st.dropped[r]);
    }
}

static int push_sink(void *ctx, const push_series *series, size_t n, strata_error *err) {
    return push_enqueue(ctx, series, n, err);
}

static int start_pusher(scraper *s, const scraper_options *o, strata_error *err) {
    const scraper_config *c = o->config;
    const char *const *addresses = (const char *const *)c->ingester_addresses.items;
    size_t n = c->ingester_addresses.count;
    if (n == 0 && o->default_ingester != NULL) {
        addresses = &o->default_ingester;
        n = 1;
    }
    if (n == 0)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "scraper.ingester_addresses: at least one address is required");
    push_options po = {.addresses = addresses,
                       .n_addresses = n,
                       .max_queue_bytes = (size_t)c->max_queue_bytes,
                       .max_request_bytes = (size_t)c->max_request_bytes,
                       .max_in_flight = (unsigned)c->max_in_flight,
                       .timeout_ns = c->push_timeout_ns,
                       .channel = &(rpc_channel_options){
                           .tls = c->push_tls.enabled,
                           .tls_ca_file = c->push_tls.ca_file,
                           .tls_cert_file = c->push_tls.cert_file,
                           .tls_key_file = c->push_tls.key_file,
                           .tls_server_name = c->push_tls.server_name,
                           .bearer_token_file = c->bearer_token_file,
                       }};
    if ((s->push = pusher_new(&po, err)) == NULL)
        return strata_error_wrap(err, "scraper");
    s->sink = push_sink;
    s->sink_ctx = s->push;
    return metrics_registry_add_collector(s->registry, collect_push_stats, s, err);
}

scraper *scraper_new(const scraper_options *o, strata_error *err) {
    if (strata_curl_global_init(err) != 0)
        return NULL;
    scraper *s = calloc(1, sizeof *s);
    if (s == NULL) {
        strata_error_oom(err);
        return NULL;
    }
    if (strata_mutex_init(&s->mu, err) != 0) {
        free(s);
        return NULL;
    }
    s->registry = o->registry;
    s->max_response_bytes = o->config->max_response_bytes;
    s->sink = o->sink;
    s->sink_ctx = o->sink_ctx;
    if (register_metrics(s, err) != 0 || (s->sink == NULL && start_pusher(s, o, err) != 0) ||
        (s->multi = curl_multi_init()) == NULL) {
        if (s->multi == NULL && err->code == STRATA_OK)
            strata_error_set(err, STRATA_INTERNAL, "curl_multi_init failed");
        scraper_free(s);
        return NULL;
    }
    /* Keep a connection per target between scrapes, as Prometheus does, instead of connecting
     * again every interval (libcurl's default cache is sized by the transfers in flight). */
    curl_multi_setopt(s->multi, CURLMOPT_MAXCONNECTS, (long)SCRAPE_MAX_IDLE_CONNECTIONS);
    return s;
}

/* Stops the providers of jobs (outside mu: their callbacks take it). */
static void stop_discovery(scrape_job **jobs, size_t n) {
    for (size_t i = 0; i < n; i++) {
        scrape_discovery_stop(jobs[i]->discovery);
        jobs[i]->discovery = NULL;
    }
}

static void release_jobs(scraper *s, scrape_job **jobs, size_t n) {
    pthread_mutex_lock(&s->mu);
    for (size_t i = 0; i < n; i++) {
        job_clear_targets(jobs[i]);
        job_unref(jobs[i]);
    }
    pthread_mutex_unlock(&s->mu);
    free(jobs);
}

int scraper_apply(scraper *s, scrape_configs *configs, strata_error *err) {
    scrape_job **jobs = configs->n_jobs ? calloc(configs->n_jobs, sizeof *jobs) : NULL;
    size_t n = 0;
    if (configs->n_jobs > 0 && jobs == NULL) {
        scrape_configs_free(configs);
        return strata_error_oom(err);
    }
    for (; n < configs->n_jobs; n++)
        if ((jobs[n] = job_new(s, &configs->jobs[n], err)) == NULL)
            break;
    int rc = n == configs->n_jobs ? 0 : -1;
    scrape_configs_free(configs);
    if (rc != 0) {
        release_jobs(s, jobs, n);
        return -1;
    }
    /* Start the new providers before the swap: their targets are built now (the scrape thread
     * does not see them yet), so a provider that fails leaves the running jobs untouched. */
    for (size_t i = 0; i < n; i++)
        if ((jobs[i]->discovery = scrape_discovery_start(&jobs[i]->config, on_discovery_update,
                                                         jobs[i], err)) == NULL) {
            strata_error_wrap(err, "job %s", jobs[i]->config.job_name);
            stop_discovery(jobs, n);
            release_jobs(s, jobs, n);
            return -1;
        }
    pthread_mutex_lock(&s->mu);
    scrape_job **old = s->jobs;
    size_t n_old = s->n_jobs;
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < n_old; k++)
            if (strcmp(jobs[i]->config.job_name, old[k]->config.job_name) == 0)
                job_inherit_state(jobs[i], old[k]);
    for (size_t k = 0; k < n_old; k++) {
        bool kept = false;
        for (size_t i = 0; i < n; i++)
            kept |= strcmp(jobs[i]->config.job_name, old[k]->config.job_name) == 0;
        if (!kept) { /* a removed job's gauges say so */
            metrics_gauge_set(old[k]->active_gauge, 0);
            metrics_gauge_set(old[k]->dropped_gauge, 0);
        }
    }
    s->jobs = jobs;
    s->n_jobs = n;
    s->rescan = true;
    pthread_mutex_unlock(&s->mu);
    if (s->multi != NULL)
        curl_multi_wakeup(s->multi);
    stop_discovery(old, n_old);
    release_jobs(s, old, n_old);
    return 0;
}

/* ---- the scrape thread ----------------------------------------------------------------------- */

static size_t on_body(char *data, size_t size, size_t nmemb, void *arg) {
    scrape_transfer *x = arg;
    size_t len = size * nmemb;
    if (x->body.len + len > x->limit) {
        x->too_large = true;
        return 0; /* aborts the transfer */
    }
    return strata_buffer_append(&x->body, data, len) == 0 ? len : 0;
}

static char *read_secret_file(const char *path) {
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return NULL;
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
        buf[--n] = '\0';
    return strdup(buf);
}

static int set_auth(scrape_transfer *x, const scrape_job_config *cfg) {
    CURL *h = x->handle;
    if (cfg->basic_auth.username != NULL) {
        char *password =
            cfg->basic_auth.password_file != NULL
                ? read_secret_file(cfg->basic_auth.password_file)
                : strdup(cfg->basic_auth.password != NULL ? cfg->basic_auth.password : "");
        if (password == NULL)
            return -1;
        curl_easy_setopt(h, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
        curl_easy_setopt(h, CURLOPT_USERNAME, cfg->basic_auth.username);
        curl_easy_setopt(h, CURLOPT_PASSWORD, password);
        free(password);
    }
    const char *token = cfg->bearer_token;
    char *from_file = NULL;
    if (cfg->bearer_token_file != NULL &&
        (token = from_file = read_secret_file(cfg->bearer_token_file)) == NULL)
        return -1;
    if (token != NULL) {
        size_t len = strlen(token) + 32;
        char *header = malloc(len);
        if (header != NULL) {
            snprintf(header, len, "Authorization: Bearer %s", token);
            struct curl_slist *l = curl_slist_append(x->headers, header);
            if (l != NULL)
                x->headers = l;
            free(header);
        }
        free(from_file);
        if (x->headers == NULL)
            return -1;
    }
    return 0;
}

static void set_tls(CURL *h, const scrape_tls_config *tls) {
    if (tls->ca_file != NULL)
        curl_easy_setopt(h, CURLOPT_CAINFO, tls->ca_file);
    if (tls->cert_file != NULL) {
        curl_easy_setopt(h, CURLOPT_SSLCERT, tls->cert_file);
        curl_easy_setopt(h, CURLOPT_SSLKEY, tls->key_file);
    }
    if (tls->insecure_skip_verify) {
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
    }
}

/* tls_config.server_name: the request goes to server_name (SNI and certificate check) while
 * libcurl connects to the target's address and the Host header stays the address, as
 * Prometheus does. Returns the URL to request (x->url_override or the target's). */
static const char *apply_server_name(scrape_transfer *x, const scrape_target *t,
                                     const char *server_name) {
    if (server_name == NULL || strncmp(t->url, "https://", 8) != 0)
        return t->url;
    const char *authority = t->url + 8;
    size_t alen = strcspn(authority, "/?");
    const char *path = authority + alen;
    const char *bracket = memchr(authority, ']', alen); /* [v6]:port */
    const char *from = bracket != NULL ? bracket : authority;
    const char *colon = memchr(from, ':', alen - (size_t)(from - authority));
    size_t host_len = colon != NULL ? (size_t)(colon - authority) : alen;
    const char *port = colon != NULL ? colon + 1 : "443";
    size_t port_len = colon != NULL ? alen - host_len - 1 : 3;
    strata_buffer b = STRATA_BUFFER_INIT;
    int rc = strata_buffer_appendf(&b, "%s:%.*s:%.*s:%.*s", server_name, (int)port_len, port,
                                   (int)host_len, authority, (int)port_len, port);
    rc |= strata_buffer_append_byte(&b, 0);
    struct curl_slist *connect_to = rc == 0 ? curl_slist_append(NULL, (char *)b.data) : NULL;
    strata_buffer_reset(&b);
    rc |= strata_buffer_appendf(&b, "Host: %.*s", (int)alen, authority);
    rc |= strata_buffer_append_byte(&b, 0);
    struct curl_slist *headers = rc == 0 ? curl_slist_append(x->headers, (char *)b.data) : NULL;
    strata_buffer_reset(&b);
    rc |= strata_buffer_appendf(&b, "https://%s:%.*s%s%s", server_name, (int)port_len, port,
                                path[0] == '/' ? "" : "/", path);
    rc |= strata_buffer_append_byte(&b, 0);
    if (rc != 0 || connect_to == NULL || headers == NULL) {
        curl_slist_free_all(connect_to);
        strata_buffer_free(&b);
        return NULL;
    }
    x->headers = headers;
    x->connect_to = connect_to;
    x->url_override = (char *)strata_buffer_detach(&b, NULL);
    curl_easy_setopt(x->handle, CURLOPT_CONNECT_TO, connect_to);
    return x->url_override;
}

static void transfer_free(scrape_transfer *x) {
    curl_slist_free_all(x->connect_to);
    free(x->url_override);
    if (x->handle != NULL)
        curl_easy_cleanup(x->handle);
    curl_slist_free_all(x->headers);
    strata_buffer_free(&x->body);
    free(x);
}

/* Creates and adds the request of t. Under mu. On failure the target is marked failed. */
static void start_transfer(scraper *s, scrape_target *t, int64_t now) {
    const scrape_job_config *cfg = &t->job->config;
    scrape_transfer *x = calloc(1, sizeof *x);
    if (x == NULL || (x->handle = curl_easy_init()) == NULL) {
        free(x);
        return;
    }
    x->target = t;
    x->limit = cfg->body_size_limit > 0 ? cfg->body_size_limit : s->max_response_bytes;
    x->started_mono_ns = now;
    x->started_wall_ns = strata_now_ns();
    CURL *h = x->handle;
    long timeout_ms = (long)(t->request_timeout_ns / STRATA_NS_PER_MS);
    const char *url = apply_server_name(x, t, cfg->tls_config.server_name);
    curl_easy_setopt(h, CURLOPT_URL, url != NULL ? url : t->url);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
                     timeout_ms < CONNECT_TIMEOUT_MS_MAX ? timeout_ms : CONNECT_TIMEOUT_MS_MAX);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, x->curl_error);
    curl_easy_setopt(h, CURLOPT_PRIVATE, x);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "strata-scraper");
    /* No DNS cache: libcurl prunes its whole cache on every lookup, which with a thousand targets
     * cost a quarter of the scraper's CPU. A reused connection needs no lookup anyway. */
    curl_easy_setopt(h, CURLOPT_DNS_CACHE_TIMEOUT, 0L);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)x->limit);
    set_tls(h, &cfg->tls_config);
    if (set_auth(x, cfg) != 0 ||
        (x->headers != NULL && curl_easy_setopt(h, CURLOPT_HTTPHEADER, x->headers) != CURLE_OK) ||
        curl_multi_add_handle(s->multi, h) != CURLM_OK) {
        snprintf(t->last_error, sizeof t->last_error, "cannot start the request (credentials?)");
        t->health = SCRAPE_HEALTH_BAD;
        t->next_mono_ns += t->interval_ns;
        transfer_free(x);
        return;
    }
    t->in_flight = true;
    x->next = s->transfers;
    if (x->next != NULL)
        x->next->prev = x;
    s->transfers = x;
}

/* Keeps only the sample types listed in keep (by type, and unit when given); re-encodes. */
static int filter_sample_types(const scrape_endpoint *ep, strata_buffer *body, strata_error *err) {
    pprof_limits limits;
    pprof_limits_default(&limits);
    pprof_profile p;
    if (pprof_decode(body->data, body->len, &limits, &p, err) != 0)
        return -1;
    size_t n = p.n_sample_types, kept = 0;
    bool keep[64] = {false};
    for (size_t i = 0; i < n && i < 64; i++) {
        const pprof_string *type = &p.strings[p.sample_types[i].type];
        const pprof_string *unit = &p.strings[p.sample_types[i].unit];
        for (size_t k = 0; k < ep->n_keep_sample_types; k++) {
            const scrape_sample_type *want = &ep->keep_sample_types[k];
            bool type_ok =
                strlen(want->type) == type->len && memcmp(want->type, type->ptr, type->len) == 0;
            bool unit_ok = want->unit == NULL || (strlen(want->unit) == unit->len &&
                                                  memcmp(want->unit, unit->ptr, unit->len) == 0);
            keep[i] |= type_ok && unit_ok;
        }
    }
    for (size_t i = 0; i < n && i < 64; i++)
        if (keep[i])
            p.sample_types[kept++] = p.sample_types[i];
    for (size_t sI = 0; sI < p.n_samples; sI++) {
        int64_t *from = &p.sample_values[p.samples[sI].value_offset];
        int64_t *to = &p.sample_values[sI * kept];
        size_t w = 0;
        for (size_t i = 0; i < n && i < 64; i++)
            if (keep[i])
                to[w++] = from[i];
        p.samples[sI].value_offset = (uint32_t)(sI * kept);
    }
    p.n_sample_types = kept;
    strata_buffer_reset(body);
    int rc = pprof_encode(&p, true, body, err);
    pprof_profile_free(&p);
    return rc;
}

/* ---- push batches: good scrapes are handed to the sink a few dozen at a time (one WriteRaw
 * request each), which costs far less than a request per profile. Scrape thread only. -------- */

static void batch_flush(scraper *s) {
    scrape_batch *b = &s->batch;
    if (b->n == 0)
        return;
    push_series series[SCRAPE_BATCH_MAX];
    for (size_t i = 0; i < b->n; i++)
        series[i] = (push_series){
            .labels = &b->labels[i], .pprof = b->bodies[i].data, .pprof_len = b->bodies[i].len};
    strata_error err;
    if (s->sink(s->sink_ctx, series, b->n, &err) != 0) {
        char quoted[600];
        strata_log_error("scraper", "scraped profiles not pushed", "series=%zu error=%s", b->n,
                         strata_log_quote(err.message, quoted, sizeof quoted));
    }
    for (size_t i = 0; i < b->n; i++) {
        label_set_free(&b->labels[i]);
        strata_buffer_free(&b->bodies[i]);
    }
    b->n = 0;
}

/* Takes the body's bytes and a copy of the labels. */
static int batch_add(scraper *s, const label_set *labels, strata_buffer *body, strata_error *err) {
    scrape_batch *b = &s->batch;
    if (b->n == 0)
        b->first_mono_ns = strata_monotonic_ns();
    b->labels[b->n] = (label_set)LABEL_SET_INIT;
    if (label_set_copy(&b->labels[b->n], labels, err) != 0)
        return -1;
    b->bodies[b->n] = *body;
    *body = (strata_buffer)STRATA_BUFFER_INIT;
    if (++b->n == SCRAPE_BATCH_MAX)
        batch_flush(s);
    return 0;
}

/* Checks the response and hands it to the sink; the error message on failure. Outside mu. */
static int finish_scrape(scraper *s, scrape_transfer *x, CURLcode code, char *error,
                         size_t error_size) {
    scrape_target *t = x->target;
    long status = 0;
    curl_easy_getinfo(x->handle, CURLINFO_RESPONSE_CODE, &status);
    if (x->too_large || code == CURLE_FILESIZE_EXCEEDED) {
        snprintf(error, error_size, "response larger than the limit of %zu bytes", x->limit);
        return -1;
    }
    if (code == CURLE_OPERATION_TIMEDOUT) {
        snprintf(error, error_size, "Get \"%.300s\": timed out after %lld ms", t->url,
                 (long long)(t->request_timeout_ns / STRATA_NS_PER_MS));
        return -1;
    }
    if (code != CURLE_OK) {
        snprintf(error, error_size, "Get \"%.200s\": %.250s", t->url,
                 x->curl_error[0] ? x->curl_error : curl_easy_strerror(code));
        return -1;
    }
    if (status != 200) {
        snprintf(error, error_size, "server returned HTTP status %ld", status);
        return -1;
    }
    metrics_counter_add(t->job->bytes, (int64_t)x->body.len);
    strata_error err;
    pprof_limits limits;
    pprof_limits_default(&limits);
    pprof_profile p;
    if (pprof_decode(x->body.data, x->body.len, &limits, &p, &err) != 0) {
        snprintf(error, error_size, "invalid pprof profile: %.400s", err.message);
        return -1;
    }
    pprof_profile_free(&p);
    if (t->endpoint->n_keep_sample_types > 0 &&
        filter_sample_types(t->endpoint, &x->body, &err) != 0) {
        snprintf(error, error_size, "keep_sample_type: %.400s", err.message);
        return -1;
    }
    if (batch_add(s, &t->labels, &x->body, &err) != 0) {
        snprintf(error, error_size, "push: %.400s", err.message);
        return -1;
    }
    return 0;
}

static void unlink_transfer(scraper *s, scrape_transfer *x) {
    if (x->prev != NULL)
        x->prev->next = x->next;
    else
        s->transfers = x->next;
    if (x->next != NULL)
        x->next->prev = x->prev;
    curl_multi_remove_handle(s->multi, x->handle);
}

static void complete_transfer(scraper *s, scrape_transfer *x, CURLcode code) {
    scrape_target *t = x->target;
    unlink_transfer(s, x);
    bool retired;
    pthread_mutex_lock(&s->mu);
    retired = t->retired;
    pthread_mutex_unlock(&s->mu);
    char error[SCRAPE_LAST_ERROR_MAX] = "";
    int rc = retired ? 0 : finish_scrape(s, x, code, error, sizeof error);
    int64_t now = strata_monotonic_ns();
    int64_t took = now - x->started_mono_ns;
    pthread_mutex_lock(&s->mu);
    t->in_flight = false;
    if (t->retired) {
        target_free(t);
    } else {
        metrics_counter_inc(t->job->scrapes);
        metrics_histogram_observe_ns(t->job->duration, took);
        if (rc != 0)
            metrics_counter_inc(t->job->failures);
        t->health = rc == 0 ? SCRAPE_HEALTH_GOOD : SCRAPE_HEALTH_BAD;
        snprintf(t->last_error, sizeof t->last_error, "%s", error);
        t->last_scrape_ns = x->started_wall_ns;
        t->last_duration_ns = took;
        /* Next slot on the grid; a request longer than the interval (a delta profile) is
         * followed at once by the next. */
        t->next_mono_ns += t->interval_ns;
        if (t->next_mono_ns < now)
            t->next_mono_ns = now;
        int64_t earliest = s->last_scan_ns + SCAN_SLACK_NS;
        if (t->next_mono_ns < s->next_scan_ns)
            s->next_scan_ns = t->next_mono_ns > earliest ? t->next_mono_ns : earliest;
    }
    pthread_mutex_unlock(&s->mu);
    transfer_free(x);
}

/* Starts every due target; returns the earliest future due time. Under mu. */
static int64_t start_due(scraper *s, int64_t now) {
    int64_t next = now + (int64_t)MAX_POLL_MS * STRATA_NS_PER_MS;
    for (size_t j = 0; j < s->n_jobs; j++) {
        scrape_job *job = s->jobs[j];
        for (size_t i = 0; i < job->n_targets; i++) {
            scrape_target *t = job->targets[i];
            if (t->in_flight)
                continue;
            if (t->next_mono_ns <= now + SCAN_SLACK_NS)
                start_transfer(s, t, now);
            else if (t->next_mono_ns < next)
                next = t->next_mono_ns;
        }
    }
    return next;
}

static void *scrape_thread_main(void *arg) {
    scraper *s = arg;
    for (;;) {
        int64_t now = strata_monotonic_ns();
        pthread_mutex_lock(&s->mu);
        if (s->stopping) {
            pthread_mutex_unlock(&s->mu);
            break;
        }
        if (s->rescan || now >= s->next_scan_ns) {
            s->rescan = false;
            s->last_scan_ns = now;
            s->next_scan_ns = start_due(s, now);
        }
        int64_t wait_ns = s->next_scan_ns - now;
        pthread_mutex_unlock(&s->mu);
        int running = 0;
        curl_multi_perform(s->multi, &running);
        CURLMsg *msg;
        int left = 0;
        while ((msg = curl_multi_info_read(s->multi, &left)) != NULL) {
            if (msg->msg != CURLMSG_DONE)
                continue;
            scrape_transfer *x = NULL;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&x);
            CURLcode code = msg->data.result;
            complete_transfer(s, x, code);
        }
        if (s->batch.n > 0 && strata_monotonic_ns() - s->batch.first_mono_ns >= SCRAPE_BATCH_NS)
            batch_flush(s);
        if (s->batch.n > 0 && wait_ns > SCRAPE_BATCH_NS)
            wait_ns = SCRAPE_BATCH_NS;
        int timeout_ms = (int)(wait_ns / STRATA_NS_PER_MS);
        if (timeout_ms < 0)
            timeout_ms = 0;
        if (timeout_ms > MAX_POLL_MS)
            timeout_ms = MAX_POLL_MS;
        curl_multi_poll(s->multi, NULL, 0, timeout_ms, NULL);
    }
    batch_flush(s);
    /* Abandon whatever is in flight. */
    while (s->transfers != NULL) {
        scrape_transfer *x = s->transfers;
        unlink_transfer(s, x);
        pthread_mutex_lock(&s->mu);
        x->target->in_flight = false;
        if (x->target->retired)
            target_free(x->target);
        pthread_mutex_unlock(&s->mu);
        transfer_free(x);
    }
    return NULL;
}

int scraper_start(scraper *s, strata_error *err) {
    if (pthread_create(&s->thread, NULL, scrape_thread_main, s) != 0)
        return strata_error_set(err, STRATA_RESOURCE_EXHAUSTED, "cannot start the scrape thread");
    s->started = true;
    return 0;
}

void scraper_stop(scraper *s) {
    if (s == NULL)
        return;
    pthread_mutex_lock(&s->mu);
    scrape_job **jobs = s->jobs;
    size_t n = s->n_jobs;
    pthread_mutex_unlock(&s->mu);
    stop_discovery(jobs, n);
    if (s->started) {
        pthread_mutex_lock(&s->mu);
        s->stopping = true;
        pthread_mutex_unlock(&s->mu);
        curl_multi_wakeup(s->multi);
        pthread_join(s->thread, NULL);
        s->started = false;
    }
    if (s->push != NULL)
        push_flush(s->push, strata_monotonic_ns() + STRATA_NS_PER_SEC);
}

void scraper_free(scraper *s) {
    if (s == NULL)
        return;
    scraper_stop(s);
    release_jobs(s, s->jobs, s->n_jobs);
    s->jobs = NULL;
    s->n_jobs = 0;
    if (s->push != NULL)
        metrics_registry_remove_collector(s->registry, collect_push_stats, s);
    pusher_free(s->push);
    if (s->multi != NULL)
        curl_multi_cleanup(s->multi);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
