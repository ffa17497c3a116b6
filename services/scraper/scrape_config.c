/*
 * scrape_config.c - see scrape_config.h.
 */
#include "scrape_config.h"

#include <stdlib.h>
#include <string.h>

#include "common/array.h"
#include "labels/labels.h"

#define DEFAULT_FILE_SD_REFRESH "5m"

/* lib/push's bounds: calls in flight per address, and one WriteRaw under gRPC's 64 MiB. */
CONFIG_DEFINE_BOUNDS(scraper_max_in_flight_bounds, CONFIG_UINT64, "1", "64")
CONFIG_DEFINE_BOUNDS(scraper_max_request_bytes_bounds, CONFIG_BYTES, "1KiB", "64MiB")

static const config_field scraper_push_tls_fields[] = {
    {.key = "enabled",
     .kind = CONFIG_BOOL,
     .offset = offsetof(scraper_push_tls_config, enabled),
     .default_text = "false"},
    {.key = "ca_file", .kind = CONFIG_STRING, .offset = offsetof(scraper_push_tls_config, ca_file)},
    {.key = "cert_file",
     .kind = CONFIG_STRING,
     .offset = offsetof(scraper_push_tls_config, cert_file)},
    {.key = "key_file",
     .kind = CONFIG_STRING,
     .offset = offsetof(scraper_push_tls_config, key_file)},
    {.key = "server_name",
     .kind = CONFIG_STRING,
     .offset = offsetof(scraper_push_tls_config, server_name)},
    {.key = NULL},
};

const config_field scraper_config_fields[] = {
    {.key = "push_tls",
     .kind = CONFIG_STRUCT,
     .offset = offsetof(scraper_config, push_tls),
     .fields = scraper_push_tls_fields},
    {.key = "bearer_token_file",
     .kind = CONFIG_STRING,
     .offset = offsetof(scraper_config, bearer_token_file)},
    {.key = "ingester_addresses",
     .kind = CONFIG_STRING_LIST,
     .offset = offsetof(scraper_config, ingester_addresses),
     .default_text = "[]"},
    {.key = "max_response_bytes",
     .kind = CONFIG_BYTES,
     .offset = offsetof(scraper_config, max_response_bytes),
     .default_text = "64MiB"},
    {.key = "push_timeout",
     .kind = CONFIG_DURATION,
     .offset = offsetof(scraper_config, push_timeout_ns),
     .default_text = "10s"},
    {.key = "max_queue_bytes",
     .kind = CONFIG_BYTES,
     .offset = offsetof(scraper_config, max_queue_bytes),
     .default_text = "64MiB"},
    {.key = "max_in_flight",
     .kind = CONFIG_UINT64,
     .offset = offsetof(scraper_config, max_in_flight),
     .default_text = "16",
     .decode = scraper_max_in_flight_bounds},
    {.key = "max_request_bytes",
     .kind = CONFIG_BYTES,
     .offset = offsetof(scraper_config, max_request_bytes),
     .default_text = "3MiB",
     .decode = scraper_max_request_bytes_bounds},
    {.key = NULL},
};

/* ---- params: map of name to a list of values, as Prometheus's url.Values --------------------- */

static void release_params(void *dst) {
    scrape_params *p = dst;
    for (size_t i = 0; i < p->count; i++) {
        free(p->items[i].name);
        for (size_t j = 0; j < p->items[i].values.count; j++)
            free(p->items[i].values.items[j]);
        free(p->items[i].values.items);
    }
    free(p->items);
    memset(p, 0, sizeof *p);
}

static int decode_param_values(const config_node *seq, config_string_list *out, strata_error *err) {
    if (config_node_get_kind(seq) != CONFIG_NODE_SEQUENCE)
        return config_node_error(err, seq, "expected a list of values");
    size_t n = config_node_size(seq);
    if (n == 0)
        return 0;
    if ((out->items = calloc(n, sizeof *out->items)) == NULL)
        return strata_error_oom(err);
    for (size_t i = 0; i < n; i++) {
        const config_node *v = config_node_at(seq, i);
        if (config_node_get_kind(v) != CONFIG_NODE_SCALAR)
            return config_node_error(err, v, "expected a string");
        if ((out->items[i] = strdup(config_node_scalar(v, NULL))) == NULL)
            return strata_error_oom(err);
        out->count++;
    }
    return 0;
}

static int decode_params(const config_node *node, void *dst, strata_error *err) {
    scrape_params *p = dst;
    if (config_node_get_kind(node) != CONFIG_NODE_MAPPING)
        return config_node_error(err, node, "expected a mapping of name to a list of values");
    size_t n = config_node_size(node);
    if (n > 0 && (p->items = calloc(n, sizeof *p->items)) == NULL)
        return strata_error_oom(err);
    for (size_t i = 0; i < n; i++) {
        scrape_param *param = &p->items[p->count++];
        if ((param->name = strdup(config_node_scalar(config_node_key_at(node, i), NULL))) == NULL) {
            release_params(p);
            return strata_error_oom(err);
        }
        if (decode_param_values(config_node_at(node, i), &param->values, err) != 0) {
            release_params(p);
            return -1;
        }
    }
    return 0;
}

/* ---- field tables ---------------------------------------------------------------------------- */

const config_field scrape_static_config_fields[] = {
    {.key = "targets",
     .kind = CONFIG_STRING_LIST,
     .offset = offsetof(scrape_static_config, targets),
     .default_text = "[]"},
    {.key = "labels", .kind = CONFIG_STRING_MAP, .offset = offsetof(scrape_static_config, labels)},
    {.key = NULL},
};

static const config_field file_sd_fields[] = {
    {.key = "files",
     .kind = CONFIG_STRING_LIST,
     .offset = offsetof(scrape_file_sd_config, files),
     .required = true},
    {.key = "refresh_interval",
     .kind = CONFIG_DURATION,
     .offset = offsetof(scrape_file_sd_config, refresh_interval_ns),
     .default_text = DEFAULT_FILE_SD_REFRESH},
    {.key = NULL},
};

static const config_field basic_auth_fields[] = {
    {.key = "username", .kind = CONFIG_STRING, .offset = offsetof(scrape_basic_auth, username)},
    {.key = "password", .kind = CONFIG_STRING, .offset = offsetof(scrape_basic_auth, password)},
    {.key = "password_file",
     .kind = CONFIG_STRING,
     .offset = offsetof(scrape_basic_auth, password_file)},
    {.key = NULL},
};

static const config_field tls_fields[] = {
    {.key = "ca_file", .kind = CONFIG_STRING, .offset = offsetof(scrape_tls_config, ca_file)},
    {.key = "cert_file", .kind = CONFIG_STRING, .offset = offsetof(scrape_tls_config, cert_file)},
    {.key = "key_file", .kind = CONFIG_STRING, .offset = offsetof(scrape_tls_config, key_file)},
    {.key = "server_name",
     .kind = CONFIG_STRING,
     .offset = offsetof(scrape_tls_config, server_name)},
    {.key = "insecure_skip_verify",
     .kind = CONFIG_BOOL,
     .offset = offsetof(scrape_tls_config, insecure_skip_verify),
     .default_text = "false"},
    {.key = NULL},
};

static const config_field profiling_fields[] = {
    {.key = "path_prefix",
     .kind = CONFIG_STRING,
     .offset = offsetof(scrape_profiling_config, path_prefix),
     .default_text = "\"\""},
    {.key = "pprof_config",
     .kind = CONFIG_RAW,
     .offset = offsetof(scrape_profiling_config, pprof_config)},
    {.key = NULL},
};

/* Every key of a scrape config. Service discovery: add the new *_sd_configs key here and its
 * provider in scrape_discovery.c. */
static const config_field job_fields[] = {
    {.key = "job_name",
     .kind = CONFIG_STRING,
     .offset = offsetof(scrape_job_config, job_name),
     .required = true},
    {.key = "scrape_interval",
     .kind = CONFIG_DURATION,
     .offset = offsetof(scrape_job_config, scrape_interval_ns),
     .default_text = "10s"},
    {.key = "scrape_timeout",
     .kind = CONFIG_DURATION,
     .offset = offsetof(scrape_job_config, scrape_timeout_ns)},
    {.key = "scheme",
     .kind = CONFIG_STRING,
     .offset = offsetof(scrape_job_config, scheme),
     .default_text = "http"},
    {.key = "params",
     .kind = CONFIG_CUSTOM,
     .offset = offsetof(scrape_job_config, params),
     .elem_size = sizeof(scrape_params),
     .decode = decode_params,
     .release = release_params},
    {.key = "basic_auth",
     .kind = CONFIG_STRUCT,
     .offset = offsetof(scrape_job_config, basic_auth),
     .fields = basic_auth_fields},
    {.key = "bearer_token",
     .kind = CONFIG_STRING,
     .offset = offsetof(scrape_job_config, bearer_token)},
    {.key = "bearer_token_file",
     .kind = CONFIG_STRING,
     .offset = offsetof(scrape_job_config, bearer_token_file)},
    {.key = "tls_config",
     .kind = CONFIG_STRUCT,
     .offset = offsetof(scrape_job_config, tls_config),
     .fields = tls_fields},
    {.key = "body_size_limit",
     .kind = CONFIG_BYTES,
     .offset = offsetof(scrape_job_config, body_size_limit),
     .default_text = "0"},
    {.key = "static_configs",
     .kind = CONFIG_STRUCT_LIST,
     .offset = offsetof(scrape_job_config, static_configs),
     .fields = scrape_static_config_fields,
     .elem_size = sizeof(scrape_static_config)},
    {.key = "file_sd_configs",
     .kind = CONFIG_STRUCT_LIST,
     .offset = offsetof(scrape_job_config, file_sd_configs),
     .fields = file_sd_fields,
     .elem_size = sizeof(scrape_file_sd_config)},
    {.key = "kubernetes_sd_configs",
     .kind = CONFIG_CUSTOM,
     .offset = offsetof(scrape_job_config, kubernetes_sd_configs),
     .elem_size = sizeof(kubernetes_sd_config_list),
     .decode = kubernetes_sd_configs_decode,
     .release = kubernetes_sd_configs_release},
    RELABEL_CONFIG_FIELD("relabel_configs", scrape_job_config, relabel),
    {.key = "profiling_config",
     .kind = CONFIG_STRUCT,
     .offset = offsetof(scrape_job_config, profiling_config),
     .fields = profiling_fields},
    {.key = NULL},
};

/* One pprof_config entry as written; presence of enabled/path/delta is read from the node. */
typedef struct endpoint_entry {
    bool enabled;
    char *path;
    bool delta;
    int64_t seconds_ns;
    config_struct_list keep_sample_type;
} endpoint_entry;

static const config_field sample_type_fields[] = {
    {.key = "type",
     .kind = CONFIG_STRING,
     .offset = offsetof(scrape_sample_type, type),
     .required = true},
    {.key = "unit", .kind = CONFIG_STRING, .offset = offsetof(scrape_sample_type, unit)},
    {.key = NULL},
};

static const config_field endpoint_fields[] = {
    {.key = "enabled", .kind = CONFIG_BOOL, .offset = offsetof(endpoint_entry, enabled)},
    {.key = "path", .kind = CONFIG_STRING, .offset = offsetof(endpoint_entry, path)},
    {.key = "delta", .kind = CONFIG_BOOL, .offset = offsetof(endpoint_entry, delta)},
    {.key = "seconds", .kind = CONFIG_DURATION, .offset = offsetof(endpoint_entry, seconds_ns)},
    {.key = "keep_sample_type",
     .kind = CONFIG_STRUCT_LIST,
     .offset = offsetof(endpoint_entry, keep_sample_type),
     .fields = sample_type_fields,
     .elem_size = sizeof(scrape_sample_type)},
    {.key = NULL},
};

/* Parca's defaults, merged into every job. */
static const struct {
    const char *name;
    const char *path;
    bool delta;
} default_endpoints[] = {
    {"memory", "/debug/pprof/allocs", false},       {"block", "/debug/pprof/block", false},
    {"goroutine", "/debug/pprof/goroutine", false}, {"mutex", "/debug/pprof/mutex", false},
    {"process_cpu", "/debug/pprof/profile", true},
};
#define N_DEFAULT_ENDPOINTS (sizeof default_endpoints / sizeof default_endpoints[0])

/* ---- endpoints ------------------------------------------------------------------------------- */

static void endpoint_free(scrape_endpoint *e) {
    free(e->name);
    free(e->path);
    for (size_t i = 0; i < e->n_keep_sample_types; i++) {
        free(e->keep_sample_types[i].type);
        free(e->keep_sample_types[i].unit);
    }
    free(e->keep_sample_types);
    memset(e, 0, sizeof *e);
}

static scrape_endpoint *add_endpoint(scrape_job_config *job, const char *name, const char *path,
                                     bool delta, strata_error *err) {
    if (STRATA_ARRAY_RESERVE_OR_OOM(job->endpoints, job->cap_endpoints, job->n_endpoints + 1,
                                    err) != 0)
        return NULL;
    scrape_endpoint *e = &job->endpoints[job->n_endpoints];
    memset(e, 0, sizeof *e);
    if ((e->name = strdup(name)) == NULL || (e->path = strdup(path)) == NULL) {
        endpoint_free(e);
        strata_error_oom(err);
        return NULL;
    }
    e->enabled = true;
    e->delta = delta;
    job->n_endpoints++;
    return e;
}

static bool node_given(const config_node *map, const char *key) {
    const config_node *v = config_node_get(map, key);
    return v != NULL && !config_node_is_null(v);
}

/* Applies one pprof_config entry to e (keys the entry sets win). Takes the entry's strings. */
static int apply_endpoint_entry(scrape_endpoint *e, const config_node *node, endpoint_entry *entry,
                                strata_error *err) {
    if (node_given(node, "enabled"))
        e->enabled = entry->enabled;
    if (node_given(node, "delta"))
        e->delta = entry->delta;
    if (entry->path != NULL) {
        if (entry->path[0] != '/')
            return config_node_error(err, config_node_get(node, "path"),
                                     "path must start with \"/\", got \"%s\"", entry->path);
        free(e->path);
        e->path = entry->path;
        entry->path = NULL;
    }
    if (entry->seconds_ns < 0)
        return config_node_error(err, config_node_get(node, "seconds"), "must not be negative");
    e->seconds_ns = entry->seconds_ns;
    if (entry->keep_sample_type.count > 0) {
        e->keep_sample_types = entry->keep_sample_type.items;
        e->n_keep_sample_types = entry->keep_sample_type.count;
        entry->keep_sample_type.items = NULL;
        entry->keep_sample_type.count = 0;
    }
    return 0;
}

static int decode_endpoints(scrape_job_config *job, strata_error *err) {
    for (size_t i = 0; i < N_DEFAULT_ENDPOINTS; i++)
        if (add_endpoint(job, default_endpoints[i].name, default_endpoints[i].path,
                         default_endpoints[i].delta, err) == NULL)
            return -1;
    const config_node *map = job->profiling_config.pprof_config.node;
    if (map == NULL)
        return 0;
    if (config_node_get_kind(map) != CONFIG_NODE_MAPPING)
        return config_node_error(err, map, "expected a mapping of profile name to settings");
    for (size_t i = 0; i < config_node_size(map); i++) {
        const config_node *key = config_node_key_at(map, i);
        const config_node *node = config_node_at(map, i);
        const char *name = config_node_scalar(key, NULL);
        if (!label_name_is_valid(name, strlen(name)))
            return config_node_error(err, key, "\"%s\" is not a valid profile name", name);
        endpoint_entry entry;
        if (config_decode(node, endpoint_fields, &entry, err) != 0)
            return -1;
        scrape_endpoint *e = (scrape_endpoint *)scrape_job_endpoint(job, name);
        int rc = 0;
        if (e == NULL) {
            if (entry.path == NULL)
                rc = config_node_error(err, node, "a new profile needs a path");
            else if ((e = add_endpoint(job, name, entry.path, false, err)) == NULL)
                rc = -1;
        }
        if (rc == 0)
            rc = apply_endpoint_entry(e, node, &entry, err);
        config_free(endpoint_fields, &entry);
        if (rc != 0)
            return -1;
    }
    return 0;
}

const scrape_endpoint *scrape_job_endpoint(const scrape_job_config *job, const char *name) {
    for (size_t i = 0; i < job->n_endpoints; i++)
        if (strcmp(job->endpoints[i].name, name) == 0)
            return &job->endpoints[i];
    return NULL;
}

/* ---- validation ------------------------------------------------------------------------------ */

static int validate_targets(const config_node *job_node, const scrape_job_config *job,
                            strata_error *err) {
    const config_node *statics = config_node_get(job_node, "static_configs");
    const scrape_static_config *sc = job->static_configs.items;
    for (size_t i = 0; i < job->static_configs.count; i++) {
        const config_node *item = config_node_at(statics, i);
        for (size_t t = 0; t < sc[i].targets.count; t++) {
            const char *addr = sc[i].targets.items[t];
            if (addr[0] == '\0' || strchr(addr, '/') != NULL)
                return config_node_error(err, config_node_at(config_node_get(item, "targets"), t),
                                         "\"%s\" is not a host:port address", addr);
        }
        for (size_t l = 0; l < sc[i].labels.count; l++) {
            const char *name = sc[i].labels.keys[l];
            if (!label_name_is_valid(name, strlen(name)))
                return config_node_error(err, config_node_get(item, "labels"),
                                         "\"%s\" is not a valid label name", name);
        }
    }
    const scrape_file_sd_config *fc = job->file_sd_configs.items;
    const config_node *files = config_node_get(job_node, "file_sd_configs");
    for (size_t i = 0; i < job->file_sd_configs.count; i++) {
        if (fc[i].files.count == 0)
            return config_node_error(err, config_node_at(files, i), "files must not be empty");
        if (fc[i].refresh_interval_ns <= 0)
            return config_node_error(err, config_node_at(files, i),
                                     "refresh_interval must be positive");
    }
    return 0;
}

static int validate_auth(const config_node *node, const scrape_job_config *job, strata_error *err) {
    if (job->bearer_token != NULL && job->bearer_token_file != NULL)
        return config_node_error(err, node,
                                 "at most one of bearer_token and bearer_token_file may be set");
    if (job->basic_auth.username == NULL &&
        (job->basic_auth.password != NULL || job->basic_auth.password_file != NULL))
        return config_node_error(err, config_node_get(node, "basic_auth"), "username is required");
    if (job->basic_auth.password != NULL && job->basic_auth.password_file != NULL)
        return config_node_error(err, config_node_get(node, "basic_auth"),
                                 "at most one of password and password_file may be set");
    if (job->basic_auth.username != NULL &&
        (job->bearer_token != NULL || job->bearer_token_file != NULL))
        return config_node_error(err, node,
                                 "at most one of basic_auth and bearer_token may be set");
    const scrape_tls_config *tls = &job->tls_config;
    if ((tls->cert_file == NULL) != (tls->key_file == NULL))
        return config_node_error(err, config_node_get(node, "tls_config"),
                                 "cert_file and key_file must be set together");
    return 0;
}

static int validate_job(const config_node *node, scrape_job_config *job, strata_error *err) {
    if (job->job_name[0] == '\0')
        return config_node_error(err, config_node_get(node, "job_name"), "must not be empty");
    if (job->scrape_interval_ns <= 0)
        return config_node_error(err, config_node_get(node, "scrape_interval"), "must be positive");
    if (!node_given(node, "scrape_timeout"))
        job->scrape_timeout_ns = job->scrape_interval_ns < SCRAPE_DEFAULT_INTERVAL_NS
                                     ? job->scrape_interval_ns
                                     : SCRAPE_DEFAULT_INTERVAL_NS;
    else if (job->scrape_timeout_ns <= 0)
        return config_node_error(err, config_node_get(node, "scrape_timeout"), "must be positive");
    else if (job->scrape_timeout_ns > job->scrape_interval_ns)
        return config_node_error(err, config_node_get(node, "scrape_timeout"),
                                 "must not be longer than scrape_interval");
    if (strcmp(job->scheme, "http") != 0 && strcmp(job->scheme, "https") != 0)
        return config_node_error(err, config_node_get(node, "scheme"),
                                 "want http or https, got \"%s\"", job->scheme);
    const char *prefix = job->profiling_config.path_prefix;
    if (prefix[0] != '\0' && prefix[0] != '/')
        return config_node_error(
            err, config_node_get(config_node_get(node, "profiling_config"), "path_prefix"),
            "must start with \"/\"");
    if (validate_auth(node, job, err) != 0 || validate_targets(node, job, err) != 0)
        return -1;
    return decode_endpoints(job, err);
}

/* ---- decode / free --------------------------------------------------------------------------- */

void scrape_job_config_free(scrape_job_config *job) {
    for (size_t i = 0; i < job->n_endpoints; i++)
        endpoint_free(&job->endpoints[i]);
    free(job->endpoints);
    job->endpoints = NULL;
    job->n_endpoints = 0;
    job->cap_endpoints = 0;
    config_free(job_fields, job);
}

int scrape_configs_decode(const config_node *node, scrape_configs *out, strata_error *err) {
    memset(out, 0, sizeof *out);
    if (node == NULL || config_node_is_null(node))
        return 0;
    if (config_node_get_kind(node) != CONFIG_NODE_SEQUENCE)
        return config_node_error(err, node, "expected a list of scrape configs");
    size_t n = config_node_size(node);
    if (n == 0)
        return 0;
    if ((out->jobs = calloc(n, sizeof *out->jobs)) == NULL)
        return strata_error_oom(err);
    for (size_t i = 0; i < n; i++) {
        const config_node *item = config_node_at(node, i);
        scrape_job_config *job = &out->jobs[i];
        if (config_node_get_kind(item) != CONFIG_NODE_MAPPING) {
            config_node_error(err, item, "expected a mapping");
            goto fail;
        }
        out->n_jobs++;
        if (config_decode(item, job_fields, job, err) != 0 || validate_job(item, job, err) != 0)
            goto fail;
        for (size_t j = 0; j < i; j++)
            if (strcmp(out->jobs[j].job_name, job->job_name) == 0) {
                config_node_error(err, config_node_get(item, "job_name"),
                                  "job \"%s\" is defined twice", job->job_name);
                goto fail;
            }
    }
    return 0;
fail:
    scrape_configs_free(out);
    return -1;
}

void scrape_configs_free(scrape_configs *configs) {
    for (size_t i = 0; i < configs->n_jobs; i++)
        scrape_job_config_free(&configs->jobs[i]);
    free(configs->jobs);
    memset(configs, 0, sizeof *configs);
}
