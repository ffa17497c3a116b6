/*
 * kubernetes_discovery.c - the list-then-watch loop (client-go's reflector) on one thread per
 * namespace, turning pods into target groups for the discovery consumer.
 *
 * Each watcher keeps the sorted list of sources it has reported, so a relist can report the pods
 * that vanished while it was not watching. Transfers run on a private curl multi handle so that
 * kubernetes_discovery_free can interrupt a watch at once with curl_multi_wakeup.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/thread.h"
#include "common/array.h"
#include "common/clock.h"
#include "common/curl_global.h"
#include "kubernetes/kubernetes_internal.h"

size_t kubernetes_max_list_bytes = 64u << 20;
size_t kubernetes_max_event_bytes = 8u << 20;
int kubernetes_backoff_initial_ms = 250;
int kubernetes_watch_timeout_s = 0;
int kubernetes_list_page_size = 500;

#define BACKOFF_MAX_MS 30000
#define CONNECT_TIMEOUT_S 10L
#define LIST_TIMEOUT_S 120L

typedef enum outcome {
    OUTCOME_OK,      /* done; for a watch: the server ended the stream normally */
    OUTCOME_GONE,    /* 410: the resourceVersion expired, list again */
    OUTCOME_ERROR,   /* err says what */
    OUTCOME_STOPPED, /* kubernetes_discovery_free was called */
} outcome;

typedef struct watcher {
    kubernetes_discovery *d;
    char *namespace_; /* NULL: every namespace */
    pthread_t thread;
    bool started;
    CURLM *multi;
    CURL *easy; /* the transfer in progress */
    char *resource_version;
    char **known; /* sorted sources reported and not yet gone */
    size_t n_known;
    size_t cap_known;
    bool listed; /* counted in stats.synced */
    /* Per transfer. */
    bool watching;
    strata_buffer body;    /* list body, watch error body, or the partial watch line */
    outcome abort_outcome; /* why the write callback stopped the transfer */
    strata_error abort_err;
    uint64_t watch_events;
    int watch_timeout_s; /* asked of the server; the client gives up a minute later */
    unsigned seed;
} watcher;

struct kubernetes_discovery {
    kubernetes_connection conn;
    char *label_selector;
    char *field_selector;
    discovery_update_fn update;
    void *ctx;
    pthread_mutex_t update_mu; /* one update at a time */
    pthread_mutex_t mu;        /* stats, stop */
    pthread_cond_t cond;
    atomic_bool stop;
    watcher *watchers;
    size_t n_watchers;
    size_t cap_watchers;
    size_t n_listed;
    kubernetes_discovery_stats stats;
};

/* ---- Stats ------------------------------------------------------------------------------------
 */

static void count(kubernetes_discovery *d, uint64_t *counter) {
    pthread_mutex_lock(&d->mu);
    (*counter)++;
    pthread_mutex_unlock(&d->mu);
}

static void record_error(kubernetes_discovery *d, const watcher *w, const strata_error *err) {
    pthread_mutex_lock(&d->mu);
    d->stats.errors++;
    snprintf(d->stats.last_error, sizeof d->stats.last_error, "%s%s%s",
             w->namespace_ != NULL ? "namespace " : "", w->namespace_ != NULL ? w->namespace_ : "",
             w->namespace_ != NULL ? ": " : "");
    size_t used = strlen(d->stats.last_error);
    snprintf(d->stats.last_error + used, sizeof d->stats.last_error - used, "%s",
             err->message[0] != '\0' ? err->message : "request failed");
    pthread_mutex_unlock(&d->mu);
}

void kubernetes_discovery_get_stats(kubernetes_discovery *d, kubernetes_discovery_stats *out) {
    pthread_mutex_lock(&d->mu);
    *out = d->stats;
    out->synced = d->n_listed == d->n_watchers;
    pthread_mutex_unlock(&d->mu);
}

/* ---- Known sources ----------------------------------------------------------------------------
 */

static int compare_strings(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Index of source in w->known, or where it would go (*found false). */
static size_t known_find(const watcher *w, const char *source, bool *found) {
    size_t lo = 0, hi = w->n_known;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(w->known[mid], source);
        if (c == 0) {
            *found = true;
            return mid;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = false;
    return lo;
}

static int known_add(watcher *w, const char *source, strata_error *err) {
    bool found;
    size_t at = known_find(w, source, &found);
    if (found)
        return 0;
    if (STRATA_ARRAY_RESERVE_OR_OOM(w->known, w->cap_known, w->n_known + 1, err) != 0)
        return -1;
    char *copy = strdup(source);
    if (copy == NULL)
        return strata_error_oom(err);
    memmove(&w->known[at + 1], &w->known[at], (w->n_known - at) * sizeof *w->known);
    w->known[at] = copy;
    w->n_known++;
    return 0;
}

static void known_remove(watcher *w, const char *source) {
    bool found;
    size_t at = known_find(w, source, &found);
    if (!found)
        return;
    free(w->known[at]);
    memmove(&w->known[at], &w->known[at + 1], (w->n_known - at - 1) * sizeof *w->known);
    w->n_known--;
}

static void known_free(watcher *w) {
    for (size_t i = 0; i < w->n_known; i++)
        free(w->known[i]);
    free(w->known);
    w->known = NULL;
    w->n_known = 0;
    w->cap_known = 0;
}

static void deliver(kubernetes_discovery *d, const target_group *groups, size_t n) {
    pthread_mutex_lock(&d->update_mu);
    d->update(d->ctx, groups, n);
    pthread_mutex_unlock(&d->update_mu);
}

/* ---- Requests ---------------------------------------------------------------------------------
 */

static int append_query(strata_buffer *url, CURL *h, const char *key, const char *value,
                        bool *first) {
    char *escaped = curl_easy_escape(h, value, 0);
    if (escaped == NULL)
        return -1;
    int rc = strata_buffer_appendf(url, "%c%s=%s", *first ? '?' : '&', key, escaped);
    curl_free(escaped);
    *first = false;
    return rc;
}

static int pick_watch_timeout_s(watcher *w) {
    if (kubernetes_watch_timeout_s > 0)
        return kubernetes_watch_timeout_s;
    /* client-go spreads watch ends over 5-10 minutes so clients do not reconnect in step. */
    return 300 + rand_r(&w->seed) % 300;
}

/* /api/v1/[namespaces/NS/]pods with the selectors and either list (continue token) or watch
 * parameters. NULL on allocation failure. */
static char *build_url(watcher *w, CURL *h, bool watch, const char *continue_token) {
    kubernetes_discovery *d = w->d;
    strata_buffer url = STRATA_BUFFER_INIT;
    bool first = true, ok = strata_buffer_appendf(&url, "%s/api/v1/", d->conn.server) == 0;
    if (ok && w->namespace_ != NULL) {
        char *ns = curl_easy_escape(h, w->namespace_, 0);
        ok = ns != NULL && strata_buffer_appendf(&url, "namespaces/%s/", ns) == 0;
        curl_free(ns);
    }
    ok = ok && strata_buffer_append_str(&url, "pods") == 0;
    if (ok && d->label_selector != NULL)
        ok = append_query(&url, h, "labelSelector", d->label_selector, &first) == 0;
    if (ok && d->field_selector != NULL)
        ok = append_query(&url, h, "fieldSelector", d->field_selector, &first) == 0;
    if (ok && watch) {
        char timeout[16];
        snprintf(timeout, sizeof timeout, "%d", w->watch_timeout_s);
        ok = append_query(&url, h, "watch", "1", &first) == 0 &&
             append_query(&url, h, "resourceVersion",
                          w->resource_version != NULL ? w->resource_version : "", &first) == 0 &&
             append_query(&url, h, "allowWatchBookmarks", "true", &first) == 0 &&
             append_query(&url, h, "timeoutSeconds", timeout, &first) == 0;
    } else if (ok) {
        char limit[16];
        snprintf(limit, sizeof limit, "%d", kubernetes_list_page_size);
        ok = append_query(&url, h, "limit", limit, &first) == 0;
        if (ok && continue_token != NULL && continue_token[0] != '\0')
            ok = append_query(&url, h, "continue", continue_token, &first) == 0;
    }
    char *text = ok ? strata_buffer_detach(&url, NULL) : NULL;
    strata_buffer_free(&url);
    return text;
}

/* A Status object's message, else the start of the body, for errors. */
static void describe_failure(const strata_buffer *body, long status, const char *what,
                             strata_error *err) {
    json_document *doc = NULL;
    const char *message = NULL;
    if (body->len > 0 && json_parse((const char *)body->data, body->len, &doc, NULL) == 0)
        json_get_string(json_object_get(json_document_root(doc), "message"), &message, NULL);
    int shown = body->len > 200 ? 200 : (int)body->len;
    strata_status code = status == 401   ? STRATA_UNAUTHENTICATED
                         : status == 403 ? STRATA_PERMISSION_DENIED
                         : status == 404 ? STRATA_NOT_FOUND
                                         : STRATA_UNAVAILABLE;
    if (message != NULL)
        strata_error_set(err, code, "%s: HTTP %ld: %s", what, status, message);
    else
        strata_error_set(err, code, "%s: HTTP %ld: %.*s", what, status, shown,
                         (const char *)body->data);
    json_document_free(doc);
}

static outcome handle_event(watcher *w, const char *line, size_t len, strata_error *err);

/* Runs the watch's complete lines through handle_event, keeping a partial last line. */
static size_t consume_lines(watcher *w) {
    size_t start = 0;
    for (size_t i = 0; i < w->body.len; i++) {
        if (w->body.data[i] != '\n')
            continue;
        outcome o = handle_event(w, (const char *)w->body.data + start, i - start, &w->abort_err);
        start = i + 1;
        if (o != OUTCOME_OK) {
            w->abort_outcome = o;
            return 0;
        }
    }
    memmove(w->body.data, w->body.data + start, w->body.len - start);
    w->body.len -= start;
    return 1;
}

static size_t on_body(char *data, size_t size, size_t nmemb, void *userdata) {
    watcher *w = userdata;
    size_t n = size * nmemb;
    long status = 0;
    if (w->watching)
        curl_easy_getinfo(w->easy, CURLINFO_RESPONSE_CODE, &status);
    bool events = w->watching && status == 200; /* else an error body, kept for the message */
    size_t limit = w->watching ? kubernetes_max_event_bytes : kubernetes_max_list_bytes;
    if (w->body.len + n > limit) {
        w->abort_outcome = OUTCOME_ERROR;
        strata_error_set(&w->abort_err, STRATA_RESOURCE_EXHAUSTED, "%s larger than %zu bytes",
                         w->watching ? "watch event" : "pod list", limit);
        return 0;
    }
    if (strata_buffer_append(&w->body, data, n) != 0) {
        w->abort_outcome = OUTCOME_ERROR;
        strata_error_oom(&w->abort_err);
        return 0;
    }
    return events && consume_lines(w) == 0 ? 0 : n;
}

/* Sets up h for url and runs it on the watcher's multi handle until it ends or the discovery
 * stops. The body goes to w->body (a watch's lines to handle_event once its status is 200). */
static outcome run_transfer(watcher *w, CURL *h, const char *url, long *status, strata_error *err) {
    kubernetes_discovery *d = w->d;
    struct curl_slist *headers = NULL, *connect_to = NULL;
    outcome result = OUTCOME_ERROR;
    strata_buffer_reset(&w->body);
    w->abort_outcome = OUTCOME_OK;
    strata_error_clear(&w->abort_err);
    *status = 0;
    w->easy = h;
    curl_easy_reset(h);
    if (kubernetes_connection_apply(&d->conn, h, &headers, &connect_to, err) != 0)
        goto done;
    struct curl_slist *grown = curl_slist_append(headers, "Accept: application/json");
    if (grown == NULL) {
        strata_error_oom(err);
        goto done;
    }
    headers = grown;
    if (curl_easy_setopt(h, CURLOPT_URL, url) != CURLE_OK ||
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers) != CURLE_OK ||
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body) != CURLE_OK ||
        curl_easy_setopt(h, CURLOPT_WRITEDATA, w) != CURLE_OK ||
        curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L) != CURLE_OK ||
        curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, CONNECT_TIMEOUT_S) != CURLE_OK ||
        curl_easy_setopt(h, CURLOPT_ACCEPT_ENCODING, "") != CURLE_OK ||
        curl_easy_setopt(h, CURLOPT_TIMEOUT,
                         w->watching ? (long)w->watch_timeout_s + 60L : LIST_TIMEOUT_S) !=
            CURLE_OK) {
        strata_error_set(err, STRATA_INTERNAL, "cannot set up a libcurl request");
        goto done;
    }
    if (curl_multi_add_handle(w->multi, h) != CURLM_OK) {
        strata_error_set(err, STRATA_INTERNAL, "curl_multi_add_handle failed");
        goto done;
    }
    int running = 1;
    while (running > 0 && !atomic_load(&d->stop)) {
        if (curl_multi_perform(w->multi, &running) != CURLM_OK)
            break;
        if (running > 0)
            curl_multi_poll(w->multi, NULL, 0, 1000, NULL);
    }
    CURLcode rc = CURLE_OK;
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(w->multi, &left)) != NULL)
        if (msg->msg == CURLMSG_DONE)
            rc = msg->data.result;
    curl_multi_remove_handle(w->multi, h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
    if (atomic_load(&d->stop)) {
        result = OUTCOME_STOPPED;
    } else if (w->abort_outcome != OUTCOME_OK) {
        result = w->abort_outcome;
        *err = w->abort_err;
    } else if (running > 0) {
        strata_error_set(err, STRATA_INTERNAL, "curl_multi_perform failed");
    } else if (rc != CURLE_OK) {
        strata_error_set(err, STRATA_UNAVAILABLE, "%s: %s", d->conn.server, curl_easy_strerror(rc));
    } else {
        result = OUTCOME_OK;
    }
done:
    curl_slist_free_all(headers);
    curl_slist_free_all(connect_to);
    return result;
}

/* ---- List -------------------------------------------------------------------------------------
 */

typedef struct group_list {
    target_group *items;
    size_t count;
    size_t cap;
} group_list;

static target_group *group_list_add(group_list *l, strata_error *err) {
    if (STRATA_ARRAY_RESERVE_OR_OOM(l->items, l->cap, l->count + 1, err) != 0)
        return NULL;
    target_group *g = &l->items[l->count];
    memset(g, 0, sizeof *g);
    return g;
}

/* Appends the groups of one list page; returns the page's continue token in *next (owned). */
static int add_page(watcher *w, group_list *groups, char **next, strata_error *err) {
    json_document *doc = NULL;
    if (json_parse((const char *)w->body.data, w->body.len, &doc, err) != 0)
        return strata_error_wrap(err, "pod list");
    const json_value *root = json_document_root(doc);
    const json_value *meta = json_object_get(root, "metadata");
    const json_value *items = json_object_get(root, "items");
    const char *rv = NULL, *cont = NULL;
    int rc = -1;
    if (json_value_type(items) != JSON_ARRAY && json_value_type(items) != JSON_NULL) {
        strata_error_set(err, STRATA_INVALID_ARGUMENT, "pod list: items is not an array");
        goto done;
    }
    if (!json_get_string(json_object_get(meta, "resourceVersion"), &rv, NULL) || rv[0] == '\0') {
        strata_error_set(err, STRATA_INVALID_ARGUMENT, "pod list without resourceVersion");
        goto done;
    }
    free(w->resource_version);
    if ((w->resource_version = strdup(rv)) == NULL) {
        strata_error_oom(err);
        goto done;
    }
    for (size_t i = 0; i < json_array_length(items); i++) {
        target_group *g = group_list_add(groups, err);
        if (g == NULL)
            goto done;
        strata_error pod_err;
        if (kubernetes_pod_target_group(json_array_at(items, i), g, &pod_err) != 0) {
            /* One bad pod must not hide the others: counted, skipped. */
            record_error(w->d, w, &pod_err);
            continue;
        }
        groups->count++;
    }
    *next = NULL;
    if (json_get_string(json_object_get(meta, "continue"), &cont, NULL) && cont[0] != '\0' &&
        (*next = strdup(cont)) == NULL) {
        strata_error_oom(err);
        goto done;
    }
    rc = 0;
done:
    json_document_free(doc);
    return rc;
}

/* Adds an empty group for every known source the list did not mention and makes the list's
 * sources the known set. */
static int reconcile(watcher *w, group_list *groups, strata_error *err) {
    size_t listed = groups->count;
    char **sources = malloc((listed + 1) * sizeof *sources);
    if (sources == NULL)
        return strata_error_oom(err);
    for (size_t i = 0; i < listed; i++)
        sources[i] = groups->items[i].source;
    qsort(sources, listed, sizeof *sources, compare_strings);
    for (size_t i = 0; i < w->n_known; i++) {
        if (bsearch(&w->known[i], sources, listed, sizeof *sources, compare_strings) != NULL)
            continue;
        target_group *g = group_list_add(groups, err);
        if (g == NULL || target_group_init(g, w->known[i], err) != 0) {
            free(sources);
            return -1;
        }
        groups->count++;
    }
    known_free(w);
    for (size_t i = 0; i < listed; i++) {
        /* A pod without an IP is reported empty: it is not a known source. */
        if (groups->items[i].n_targets > 0 && known_add(w, groups->items[i].source, err) != 0) {
            free(sources);
            return -1;
        }
    }
    free(sources);
    return 0;
}

static outcome list_pods(watcher *w, CURL *h, strata_error *err) {
    group_list groups = {0};
    char *token = NULL;
    outcome result = OUTCOME_ERROR;
    w->watching = false;
    do {
        char *url = build_url(w, h, false, token);
        long status = 0;
        if (url == NULL) {
            strata_error_oom(err);
            goto done;
        }
        outcome o = run_transfer(w, h, url, &status, err);
        free(url);
        if (o != OUTCOME_OK) {
            result = o;
            goto done;
        }
        if (status == 410) { /* an expired continue token: list again from the start */
            result = OUTCOME_GONE;
            goto done;
        }
        if (status != 200) {
            describe_failure(&w->body, status, "list pods", err);
            goto done;
        }
        free(token);
        token = NULL;
        if (add_page(w, &groups, &token, err) != 0)
            goto done;
    } while (token != NULL);
    if (reconcile(w, &groups, err) != 0)
        goto done;
    deliver(w->d, groups.items, groups.count);
    pthread_mutex_lock(&w->d->mu);
    w->d->stats.lists++;
    if (!w->listed) {
        w->listed = true;
        w->d->n_listed++;
    }
    pthread_mutex_unlock(&w->d->mu);
    result = OUTCOME_OK;
done:
    free(token);
    for (size_t i = 0; i < groups.count; i++)
        target_group_free(&groups.items[i]);
    free(groups.items);
    return result;
}

/* ---- Watch ------------------------------------------------------------------------------------
 */

static outcome apply_pod_event(watcher *w, const json_value *pod, bool deleted, strata_error *err) {
    target_group g;
    strata_error pod_err;
    if (kubernetes_pod_target_group(pod, &g, &pod_err) != 0) {
        record_error(w->d, w, &pod_err);
        return OUTCOME_OK;
    }
    if (deleted) { /* keep the source, drop the rest: "this source is gone" */
        char *source = g.source;
        g.source = NULL;
        target_group_free(&g);
        g.source = source;
    }
    int rc = g.n_targets > 0 ? known_add(w, g.source, err) : 0;
    if (g.n_targets == 0)
        known_remove(w, g.source);
    if (rc == 0)
        deliver(w->d, &g, 1);
    target_group_free(&g);
    return rc == 0 ? OUTCOME_OK : OUTCOME_ERROR;
}

static outcome handle_event(watcher *w, const char *line, size_t len, strata_error *err) {
    while (len > 0 && (line[len - 1] == '\r' || line[len - 1] == ' '))
        len--;
    if (len == 0)
        return OUTCOME_OK;
    json_document *doc = NULL;
    if (json_parse(line, len, &doc, err) != 0) {
        strata_error_wrap(err, "malformed watch event");
        return OUTCOME_ERROR;
    }
    const json_value *root = json_document_root(doc);
    const json_value *object = json_object_get(root, "object");
    const char *type = NULL, *rv = NULL;
    outcome result = OUTCOME_ERROR;
    if (!json_get_string(json_object_get(root, "type"), &type, NULL) ||
        json_value_type(object) != JSON_OBJECT) {
        strata_error_set(err, STRATA_INVALID_ARGUMENT, "malformed watch event: no type or object");
        goto done;
    }
    if (strcmp(type, "ERROR") == 0) {
        int64_t code = 0;
        const char *message = "";
        json_get_int64(json_object_get(object, "code"), &code);
        json_get_string(json_object_get(object, "message"), &message, NULL);
        if (code == 410) {
            result = OUTCOME_GONE;
            goto done;
        }
        strata_error_set(err, STRATA_UNAVAILABLE, "watch error %d: %s", (int)code, message);
        goto done;
    }
    bool deleted = strcmp(type, "DELETED") == 0;
    bool bookmark = strcmp(type, "BOOKMARK") == 0;
    if (!deleted && !bookmark && strcmp(type, "ADDED") != 0 && strcmp(type, "MODIFIED") != 0) {
        strata_error_set(err, STRATA_INVALID_ARGUMENT, "unknown watch event type \"%.32s\"", type);
        goto done;
    }
    result = bookmark ? OUTCOME_OK : apply_pod_event(w, object, deleted, err);
    if (result == OUTCOME_OK &&
        json_get_string(json_object_get(json_object_get(object, "metadata"), "resourceVersion"),
                        &rv, NULL) &&
        rv[0] != '\0') {
        char *copy = strdup(rv);
        if (copy == NULL) {
            strata_error_oom(err);
            result = OUTCOME_ERROR;
            goto done;
        }
        free(w->resource_version);
        w->resource_version = copy;
    }
    w->watch_events++;
    count(w->d, &w->d->stats.events);
done:
    json_document_free(doc);
    return result;
}

static outcome watch_pods(watcher *w, CURL *h, strata_error *err) {
    w->watch_timeout_s = pick_watch_timeout_s(w);
    char *url = build_url(w, h, true, NULL);
    if (url == NULL) {
        strata_error_oom(err);
        return OUTCOME_ERROR;
    }
    count(w->d, &w->d->stats.watches);
    w->watching = true;
    w->watch_events = 0;
    long status = 0;
    outcome o = run_transfer(w, h, url, &status, err);
    free(url);
    if (o != OUTCOME_OK)
        return o;
    if (status == 410)
        return OUTCOME_GONE;
    if (status != 200) {
        describe_failure(&w->body, status, "watch pods", err);
        return OUTCOME_ERROR;
    }
    if (w->body.len > 0 && handle_event(w, (const char *)w->body.data, w->body.len, err) != 0)
        return OUTCOME_ERROR; /* a last event without its newline */
    return OUTCOME_OK;
}

/* ---- The watcher thread -----------------------------------------------------------------------
 */

/* Sleeps ms unless the discovery stops first; false when it stopped. */
static bool sleep_unless_stopped(kubernetes_discovery *d, int ms) {
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += ms / 1000;
    deadline.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&d->mu);
    while (!atomic_load(&d->stop) && pthread_cond_timedwait(&d->cond, &d->mu, &deadline) == 0) {
    }
    pthread_mutex_unlock(&d->mu);
    return !atomic_load(&d->stop);
}

static void *watcher_main(void *arg) {
    watcher *w = arg;
    kubernetes_discovery *d = w->d;
    CURL *h = curl_easy_init();
    int backoff = kubernetes_backoff_initial_ms;
    bool need_list = true;
    strata_error err;
    if (h == NULL) {
        strata_error_set(&err, STRATA_INTERNAL, "curl_easy_init failed");
        record_error(d, w, &err);
        return NULL;
    }
    while (!atomic_load(&d->stop)) {
        strata_error_clear(&err);
        outcome o = need_list ? list_pods(w, h, &err) : OUTCOME_OK;
        if (o == OUTCOME_OK) {
            need_list = false;
            int64_t started = strata_monotonic_ns();
            o = watch_pods(w, h, &err);
            /* A server that ends watches at once must not make us spin. */
            if (o == OUTCOME_OK && w->watch_events == 0 &&
                strata_monotonic_ns() - started < 1000000000LL) {
                if (!sleep_unless_stopped(d, backoff))
                    break;
                backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
                continue;
            }
        }
        if (o == OUTCOME_STOPPED)
            break;
        if (o == OUTCOME_OK) {
            backoff = kubernetes_backoff_initial_ms;
            continue;
        }
        need_list = true;
        if (o == OUTCOME_GONE) {
            count(d, &d->stats.expired);
            continue;
        }
        record_error(d, w, &err);
        if (!sleep_unless_stopped(d, backoff))
            break;
        backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
    }
    curl_easy_cleanup(h);
    return NULL;
}

/* ---- Lifecycle --------------------------------------------------------------------------------
 */

static int add_watcher(kubernetes_discovery *d, const char *ns, strata_error *err) {
    for (size_t i = 0; ns != NULL && i < d->n_watchers; i++)
        if (d->watchers[i].namespace_ != NULL && strcmp(d->watchers[i].namespace_, ns) == 0)
            return 0; /* listed twice (own_namespace and names) */
    if (STRATA_ARRAY_RESERVE_OR_OOM(d->watchers, d->cap_watchers, d->n_watchers + 1, err) != 0)
        return -1;
    watcher *w = &d->watchers[d->n_watchers];
    memset(w, 0, sizeof *w);
    w->d = d;
    w->seed = (unsigned)time(NULL) ^ (unsigned)(d->n_watchers * 2654435761u);
    d->n_watchers++;
    if (ns != NULL && (w->namespace_ = strdup(ns)) == NULL)
        return strata_error_oom(err);
    if ((w->multi = curl_multi_init()) == NULL)
        return strata_error_set(err, STRATA_INTERNAL, "curl_multi_init failed");
    return 0;
}

static int add_watchers(kubernetes_discovery *d, const kubernetes_sd_config *config,
                        strata_error *err) {
    if (config->namespaces.own_namespace) {
        if (d->conn.own_namespace == NULL)
            return strata_error_set(err, STRATA_FAILED_PRECONDITION,
                                    "namespaces.own_namespace: the namespace Strata runs in is "
                                    "unknown (no service account namespace file)");
        if (add_watcher(d, d->conn.own_namespace, err) != 0)
            return -1;
    }
    for (size_t i = 0; i < config->namespaces.names.count; i++)
        if (add_watcher(d, config->namespaces.names.items[i], err) != 0)
            return -1;
    return d->n_watchers == 0 ? add_watcher(d, NULL, err) : 0;
}

static int copy_selectors(kubernetes_discovery *d, const kubernetes_sd_config *config,
                          strata_error *err) {
    const kubernetes_selector *sel = config->selectors.items;
    for (size_t i = 0; i < config->selectors.count; i++) {
        if (strcmp(sel[i].role, "pod") != 0)
            continue;
        if ((sel[i].label != NULL && (d->label_selector = strdup(sel[i].label)) == NULL) ||
            (sel[i].field != NULL && (d->field_selector = strdup(sel[i].field)) == NULL))
            return strata_error_oom(err);
    }
    return 0;
}

kubernetes_discovery *kubernetes_discovery_new(const kubernetes_sd_config *config,
                                               discovery_update_fn update, void *ctx,
                                               strata_error *err) {
    if (strata_curl_global_init(err) != 0)
        return NULL;
    if (config->role != NULL && strcmp(config->role, "pod") != 0) {
        strata_error_set(err, STRATA_UNIMPLEMENTED, "role \"%s\" is not supported (only pod)",
                         config->role);
        return NULL;
    }
    kubernetes_discovery *d = calloc(1, sizeof *d);
    if (d == NULL) {
        strata_error_oom(err);
        return NULL;
    }
    d->update = update;
    d->ctx = ctx;
    atomic_init(&d->stop, false);
    if (strata_mutex_init(&d->update_mu, err) != 0) {
        free(d);
        return NULL;
    }
    if (strata_mutex_init(&d->mu, err) != 0) {
        pthread_mutex_destroy(&d->update_mu);
        free(d);
        return NULL;
    }
    if (strata_cond_init(&d->cond, false, err) != 0) {
        pthread_mutex_destroy(&d->mu);
        pthread_mutex_destroy(&d->update_mu);
        free(d);
        return NULL;
    }
    if (kubernetes_connection_resolve(config, &d->conn, err) != 0 ||
        copy_selectors(d, config, err) != 0 || add_watchers(d, config, err) != 0) {
        kubernetes_discovery_free(d);
        return NULL;
    }
    for (size_t i = 0; i < d->n_watchers; i++) {
        if (pthread_create(&d->watchers[i].thread, NULL, watcher_main, &d->watchers[i]) != 0) {
            strata_error_set(err, STRATA_INTERNAL, "cannot start a discovery thread");
            kubernetes_discovery_free(d);
            return NULL;
        }
        d->watchers[i].started = true;
    }
    return d;
}

void kubernetes_discovery_free(kubernetes_discovery *d) {
    if (d == NULL)
        return;
    pthread_mutex_lock(&d->mu);
    atomic_store(&d->stop, true);
    pthread_cond_broadcast(&d->cond);
    pthread_mutex_unlock(&d->mu);
    for (size_t i = 0; i < d->n_watchers; i++)
        if (d->watchers[i].multi != NULL)
            curl_multi_wakeup(d->watchers[i].multi);
    for (size_t i = 0; i < d->n_watchers; i++) {
        watcher *w = &d->watchers[i];
        if (w->started)
            pthread_join(w->thread, NULL);
        if (w->multi != NULL)
            curl_multi_cleanup(w->multi);
        free(w->namespace_);
        free(w->resource_version);
        known_free(w);
        strata_buffer_free(&w->body);
    }
    free(d->watchers);
    free(d->label_selector);
    free(d->field_selector);
    kubernetes_connection_free(&d->conn);
    pthread_mutex_destroy(&d->update_mu);
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->cond);
    free(d);
}
