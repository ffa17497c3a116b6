/*
 * scrape_discovery.c - see scrape_discovery.h.
 */
#include "scrape_discovery.h"

#include <errno.h>
#include <glob.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "common/thread.h"
#include "common/array.h"
#include "common/clock.h"
#include "common/log.h"

/* ---- shared: one static_configs-shaped entry into a group ------------------------------------ */

static int group_from_static(const char *source, const scrape_static_config *sc,
                             const char *filepath, target_group *g, strata_error *err) {
    if (target_group_init(g, source, err) != 0)
        return -1;
    for (size_t i = 0; i < sc->labels.count; i++)
        if (label_set_set(&g->labels, sc->labels.keys[i], sc->labels.values[i], err) != 0)
            goto fail;
    for (size_t i = 0; i < sc->targets.count; i++) {
        label_set *t = target_group_add_target(g, err);
        if (t == NULL || label_set_set(t, DISCOVERY_ADDRESS_LABEL, sc->targets.items[i], err) != 0)
            goto fail;
        if (filepath != NULL && label_set_set(t, "__meta_filepath", filepath, err) != 0)
            goto fail;
    }
    return 0;
fail:
    target_group_free(g);
    return -1;
}

/* ---- file_sd ----------------------------------------------------------------------------------
 */

typedef struct file_state {
    char *path;
    struct stat st;
    size_t n_groups; /* groups sent last time, to send the gone ones empty */
    bool seen;       /* matched in the current round */
} file_state;

typedef struct file_provider {
    scrape_discovery *owner; /* its stop flag */
    const scrape_file_sd_config *config;
    const char *job_name;
    discovery_update_fn update;
    void *ctx;
    file_state *files;
    size_t n_files, cap_files;
    pthread_t thread;
    bool started;
} file_provider;

/* One kubernetes_sd_configs entry. Its sources ("pod/NS/NAME") are prefixed with
 * "kubernetes/<i>/" so two entries watching the same pod stay two sources of the job. */
typedef struct kubernetes_provider {
    char prefix[48];
    discovery_update_fn update;
    void *ctx;
    kubernetes_discovery *discovery;
    uint64_t errors_logged; /* stats.errors already logged */
} kubernetes_provider;

struct scrape_discovery {
    pthread_mutex_t mu;
    pthread_cond_t cond;
    bool stopping;
    file_provider *files;
    size_t n_files;
    const char *job_name;
    kubernetes_provider *kubes;
    size_t n_kubes;
    pthread_t kube_monitor; /* logs the providers' errors (lib/kubernetes does not log) */
    bool kube_monitor_started;
};

int scrape_file_sd_read(const char *path, target_group **groups, size_t *n_groups,
                        strata_error *err) {
    *groups = NULL;
    *n_groups = 0;
    config_document *doc = NULL;
    if (config_load_file(path, &doc, err) != 0)
        return -1;
    int rc = scrape_file_sd_parse(doc, path, groups, n_groups, err);
    config_document_free(doc);
    return rc;
}

int scrape_file_sd_parse(const config_document *doc, const char *path, target_group **groups,
                         size_t *n_groups, strata_error *err) {
    *groups = NULL;
    *n_groups = 0;
    const config_node *root = config_document_root(doc);
    int rc = 0;
    if (root == NULL || config_node_is_null(root))
        goto out;
    if (config_node_get_kind(root) != CONFIG_NODE_SEQUENCE) {
        rc = config_node_error(err, root, "expected a list of {targets, labels}");
        goto out;
    }
    size_t n = config_node_size(root);
    if (n > 0 && (*groups = calloc(n, sizeof **groups)) == NULL) {
        rc = strata_error_oom(err);
        goto out;
    }
    for (size_t i = 0; i < n && rc == 0; i++) {
        scrape_static_config sc;
        if (config_decode(config_node_at(root, i), scrape_static_config_fields, &sc, err) != 0) {
            rc = -1;
            break;
        }
        for (size_t l = 0; l < sc.labels.count && rc == 0; l++)
            if (!label_name_is_valid(sc.labels.keys[l], strlen(sc.labels.keys[l])))
                rc = config_node_error(err, config_node_at(root, i),
                                       "\"%s\" is not a valid label name", sc.labels.keys[l]);
        char source[4200];
        snprintf(source, sizeof source, "%s:%zu", path, i);
        if (rc == 0 && (rc = group_from_static(source, &sc, path, &(*groups)[i], err)) == 0)
            (*n_groups)++;
        config_free(scrape_static_config_fields, &sc);
    }
    if (rc != 0) {
        target_groups_free(*groups, *n_groups);
        *groups = NULL;
        *n_groups = 0;
    }
out:
    return rc;
}

static file_state *file_state_get(file_provider *fp, const char *path) {
    for (size_t i = 0; i < fp->n_files; i++)
        if (strcmp(fp->files[i].path, path) == 0)
            return &fp->files[i];
    if (STRATA_ARRAY_RESERVE(fp->files, fp->cap_files, fp->n_files + 1) != 0)
        return NULL;
    file_state *f = &fp->files[fp->n_files];
    memset(f, 0, sizeof *f);
    if ((f->path = strdup(path)) == NULL)
        return NULL;
    fp->n_files++;
    return f;
}

static bool stat_changed(const struct stat *a, const struct stat *b) {
    return a->st_ino != b->st_ino || a->st_size != b->st_size ||
           a->st_mtim.tv_sec != b->st_mtim.tv_sec || a->st_mtim.tv_nsec != b->st_mtim.tv_nsec;
}

/* Sends empty groups for the sources of f beyond n_now (entries removed, or the file gone). */
static void send_gone(file_provider *fp, file_state *f, size_t n_now) {
    for (size_t i = n_now; i < f->n_groups; i++) {
        char source[4200];
        snprintf(source, sizeof source, "%s:%zu", f->path, i);
        target_group g = {.source = source};
        fp->update(fp->ctx, &g, 1);
    }
    f->n_groups = n_now;
}

static void reload_file(file_provider *fp, file_state *f) {
    target_group *groups = NULL;
    size_t n = 0;
    strata_error err;
    if (scrape_file_sd_read(f->path, &groups, &n, &err) != 0) {
        char quoted[600];
        strata_log_warn("scraper", "file_sd file not read, keeping its targets", "job=%s error=%s",
                        fp->job_name, strata_log_quote(err.message, quoted, sizeof quoted));
        return;
    }
    if (n > 0)
        fp->update(fp->ctx, groups, n);
    send_gone(fp, f, n);
    f->n_groups = n;
    target_groups_free(groups, n);
}

/* One round: glob the patterns, reload new or changed files (all when full), forget gone ones. */
static void file_provider_round(file_provider *fp, bool full) {
    for (size_t i = 0; i < fp->n_files; i++)
        fp->files[i].seen = false;
    for (size_t p = 0; p < fp->config->files.count; p++) {
        glob_t gl;
        if (glob(fp->config->files.items[p], 0, NULL, &gl) != 0)
            continue;
        for (size_t i = 0; i < gl.gl_pathc; i++) {
            struct stat st;
            if (stat(gl.gl_pathv[i], &st) != 0 || !S_ISREG(st.st_mode))
                continue;
            bool is_new = true;
            for (size_t k = 0; k < fp->n_files; k++)
                if (strcmp(fp->files[k].path, gl.gl_pathv[i]) == 0)
                    is_new = false;
            file_state *f = file_state_get(fp, gl.gl_pathv[i]);
            if (f == NULL)
                continue;
            f->seen = true;
            if (full || is_new || stat_changed(&f->st, &st)) {
                f->st = st;
                reload_file(fp, f);
            }
        }
        globfree(&gl);
    }
    for (size_t i = 0; i < fp->n_files;) {
        file_state *f = &fp->files[i];
        if (f->seen) {
            i++;
            continue;
        }
        send_gone(fp, f, 0);
        free(f->path);
        fp->files[i] = fp->files[--fp->n_files];
    }
}

static void *file_provider_main(void *arg) {
    file_provider *fp = arg;
    scrape_discovery *d = fp->owner;
    int64_t last_full = strata_monotonic_ns();
    pthread_mutex_lock(&d->mu);
    while (!d->stopping) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 1;
        pthread_cond_timedwait(&d->cond, &d->mu, &until);
        if (d->stopping)
            break;
        pthread_mutex_unlock(&d->mu);
        bool full = strata_monotonic_ns() - last_full >= fp->config->refresh_interval_ns;
        if (full)
            last_full = strata_monotonic_ns();
        file_provider_round(fp, full);
        pthread_mutex_lock(&d->mu);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

/* ---- kubernetes_sd ----------------------------------------------------------------------------
 */

static void kubernetes_update(void *ctx, const target_group *groups, size_t n) {
    kubernetes_provider *kp = ctx;
    /* Shallow copies with prefixed sources: labels and targets stay the provider's. */
    target_group *renamed = calloc(n > 0 ? n : 1, sizeof *renamed);
    char **sources = calloc(n > 0 ? n : 1, sizeof *sources);
    size_t done = 0;
    if (renamed != NULL && sources != NULL) {
        for (; done < n; done++) {
            size_t len = strlen(kp->prefix) + strlen(groups[done].source) + 1;
            if ((sources[done] = malloc(len)) == NULL)
                break;
            snprintf(sources[done], len, "%s%s", kp->prefix, groups[done].source);
            renamed[done] = groups[done];
            renamed[done].source = sources[done];
        }
    }
    if (renamed != NULL && sources != NULL && done == n)
        kp->update(kp->ctx, renamed, n);
    else
        strata_log_error("scraper", "kubernetes_sd update lost: out of memory", "groups=%zu", n);
    for (size_t i = 0; sources != NULL && i < done; i++)
        free(sources[i]);
    free(sources);
    free(renamed);
}

static void log_kubernetes_errors(scrape_discovery *d) {
    for (size_t i = 0; i < d->n_kubes; i++) {
        kubernetes_provider *kp = &d->kubes[i];
        kubernetes_discovery_stats st;
        kubernetes_discovery_get_stats(kp->discovery, &st);
        if (st.errors == kp->errors_logged)
            continue;
        char q[STRATA_ERROR_MESSAGE_MAX + 64];
        strata_log_warn("scraper", "kubernetes_sd error", "job=%s config=%zu errors=%llu error=%s",
                        d->job_name, i, (unsigned long long)st.errors,
                        strata_log_quote(st.last_error, q, sizeof q));
        kp->errors_logged = st.errors;
    }
}

static void *kubernetes_monitor_main(void *arg) {
    scrape_discovery *d = arg;
    pthread_mutex_lock(&d->mu);
    while (!d->stopping) {
        struct timespec deadline;
        clock_gettime(CLOCK_REALTIME, &deadline);
        deadline.tv_sec += 5;
        pthread_cond_timedwait(&d->cond, &d->mu, &deadline);
        if (d->stopping)
            break;
        pthread_mutex_unlock(&d->mu);
        log_kubernetes_errors(d);
        pthread_mutex_lock(&d->mu);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

static int start_kubernetes(scrape_discovery *d, const scrape_job_config *job,
                            discovery_update_fn update, void *ctx, strata_error *err) {
    size_t n = job->kubernetes_sd_configs.count;
    if (n == 0)
        return 0;
    if ((d->kubes = calloc(n, sizeof *d->kubes)) == NULL)
        return strata_error_oom(err);
    for (size_t i = 0; i < n; i++) {
        kubernetes_provider *kp = &d->kubes[i];
        snprintf(kp->prefix, sizeof kp->prefix, "kubernetes/%zu/", i);
        kp->update = update;
        kp->ctx = ctx;
        kp->discovery = kubernetes_discovery_new(&job->kubernetes_sd_configs.items[i],
                                                 kubernetes_update, kp, err);
        if (kp->discovery == NULL)
            return strata_error_wrap(err, "kubernetes_sd_configs[%zu]", i);
        d->n_kubes++;
    }
    if (pthread_create(&d->kube_monitor, NULL, kubernetes_monitor_main, d) != 0)
        return strata_error_set(err, STRATA_RESOURCE_EXHAUSTED, "cannot start a thread");
    d->kube_monitor_started = true;
    return 0;
}

/* ---- start / stop -----------------------------------------------------------------------------
 */

static int send_static(const scrape_job_config *job, discovery_update_fn update, void *ctx,
                       strata_error *err) {
    size_t n = job->static_configs.count;
    if (n == 0)
        return 0;
    target_group *groups = calloc(n, sizeof *groups);
    if (groups == NULL)
        return strata_error_oom(err);
    const scrape_static_config *sc = job->static_configs.items;
    size_t built = 0;
    for (; built < n; built++) {
        char source[32];
        snprintf(source, sizeof source, "static/%zu", built);
        if (group_from_static(source, &sc[built], NULL, &groups[built], err) != 0)
            break;
    }
    if (built == n)
        update(ctx, groups, n);
    target_groups_free(groups, built);
    return built == n ? 0 : -1;
}

scrape_discovery *scrape_discovery_start(const scrape_job_config *job, discovery_update_fn update,
                                         void *ctx, strata_error *err) {
    scrape_discovery *d = calloc(1, sizeof *d);
    if (d == NULL) {
        strata_error_oom(err);
        return NULL;
    }
    if (strata_mutex_init(&d->mu, err) != 0) {
        free(d);
        return NULL;
    }
    if (strata_cond_init(&d->cond, false, err) != 0) {
        pthread_mutex_destroy(&d->mu);
        free(d);
        return NULL;
    }
    if (send_static(job, update, ctx, err) != 0)
        goto fail;
    size_t n = job->file_sd_configs.count;
    if (n > 0 && (d->files = calloc(n, sizeof *d->files)) == NULL) {
        strata_error_oom(err);
        goto fail;
    }
    const scrape_file_sd_config *fc = job->file_sd_configs.items;
    for (size_t i = 0; i < n; i++) {
        file_provider *fp = &d->files[i];
        fp->owner = d;
        fp->config = &fc[i];
        fp->job_name = job->job_name;
        fp->update = update;
        fp->ctx = ctx;
        file_provider_round(fp, true); /* the first listing, before start returns */
        d->n_files++;
        if (pthread_create(&fp->thread, NULL, file_provider_main, fp) != 0) {
            strata_error_set(err, STRATA_RESOURCE_EXHAUSTED, "cannot start a file_sd thread");
            goto fail;
        }
        fp->started = true;
    }
    d->job_name = job->job_name;
    if (start_kubernetes(d, job, update, ctx, err) != 0)
        goto fail;
    return d;
fail:
    scrape_discovery_stop(d);
    return NULL;
}

void scrape_discovery_stop(scrape_discovery *d) {
    if (d == NULL)
        return;
    pthread_mutex_lock(&d->mu);
    d->stopping = true;
    pthread_cond_broadcast(&d->cond);
    pthread_mutex_unlock(&d->mu);
    if (d->kube_monitor_started)
        pthread_join(d->kube_monitor, NULL);
    for (size_t i = 0; i < d->n_kubes; i++)
        kubernetes_discovery_free(d->kubes[i].discovery);
    free(d->kubes);
    for (size_t i = 0; i < d->n_files; i++) {
        file_provider *fp = &d->files[i];
        if (fp->started)
            pthread_join(fp->thread, NULL);
        for (size_t k = 0; k < fp->n_files; k++)
            free(fp->files[k].path);
        free(fp->files);
    }
    free(d->files);
    pthread_cond_destroy(&d->cond);
    pthread_mutex_destroy(&d->mu);
    free(d);
}
