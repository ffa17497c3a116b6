/*
 * peers.c - see peers.h. The peer list, its refresh thread, the members of a merge and the client
 * side of MergeShard.
 *
 * Lifetime. A peer (address, channel, instance id) is reference counted under the set's lock: the
 * current list holds one reference, and every merge plan (the peers a merge chose when it started)
 * holds one per peer until the merge releases it, so a refresh that drops a peer never
 * frees a channel a merge is calling through.
 */
#include "peers.h"

#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>

#include "calltree/calltree.h"
#include "common/array.h"
#include "common/clock.h"
#include "common/hash.h"
#include "common/log.h"
#include "common/tenant.h"
#include "strata/querier/v1/peer.pb-c.h"

#define INFO_TIMEOUT_NS (2 * STRATA_NS_PER_SEC)

typedef struct peer {
    char address[300]; /* as dialled: "10.0.0.7:7071", "[fd00::7]:7071" */
    char instance_id[64];
    uint64_t id_hash;
    rpc_channel *channel;
    int refs; /* guarded by querier_peers.mu */
} peer;

struct querier_peers {
    querier_peers_options opts;
    char instance_id[33];
    uint64_t self_hash;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    bool stop;
    bool thread_started;
    pthread_t thread;
    peer **list; /* live peers; guarded by mu */
    size_t n_list;
    metrics_gauge *live_gauge;
    metrics_counter *shares_ok;
    metrics_counter *shares_failed;
    metrics_counter *blocks_shared;
};

/* A merge's peers, in the members' order (peers_members), as chosen when it started. */
typedef struct peer_plan {
    peer **peers;
    size_t n;
} peer_plan;

static void peer_unref_locked(peer *pe) {
    if (--pe->refs > 0)
        return;
    rpc_channel_free(pe->channel);
    free(pe);
}

/* ---- metrics ----------------------------------------------------------------------------------
 */

static int create_metrics(querier_peers *p, metrics_registry *r, strata_error *err) {
    metrics_opts o = {.name = "strata_querier_peers",
                      .help = "Other queriers that answered Info at the last refresh (merges are "
                              "shared out over them)."};
    if ((p->live_gauge = metrics_gauge_new(r, &o, err)) == NULL)
        return -1;
    static const char *const result_label[] = {"result"};
    o = (metrics_opts){.name = "strata_querier_fanout_shares_total",
                       .help = "Shares of merges sent to peers, by result (failed: merged here "
                               "instead).",
                       .label_names = result_label,
                       .n_labels = 1};
    metrics_counter_vec *shares = metrics_counter_vec_new(r, &o, err);
    if (shares == NULL)
        return -1;
    static const char *const ok[] = {"ok"}, *const failed[] = {"failed"};
    p->shares_ok = metrics_counter_vec_with(shares, ok);
    p->shares_failed = metrics_counter_vec_with(shares, failed);
    if (p->shares_ok == NULL || p->shares_failed == NULL)
        return strata_error_oom(err);
    o = (metrics_opts){.name = "strata_querier_fanout_blocks_total",
                       .help = "Blocks of merges sent to peers."};
    return (p->blocks_shared = metrics_counter_new(r, &o, err)) == NULL ? -1 : 0;
}

/* ---- lifecycle --------------------------------------------------------------------------------
 */

int querier_peers_new(const querier_peers_options *opts, metrics_registry *registry,
                      querier_peers **out, strata_error *err) {
    querier_peers *p = calloc(1, sizeof *p);
    if (p == NULL)
        return strata_error_oom(err);
    p->opts = *opts;
    uint8_t id[16];
    if (getrandom(id, sizeof id, 0) != (ssize_t)sizeof id) {
        uint64_t t = (uint64_t)strata_monotonic_ns() ^ (uint64_t)time(NULL);
        memcpy(id, &t, sizeof t);
        memcpy(id + 8, &p, sizeof p < 8 ? sizeof p : 8);
    }
    for (size_t i = 0; i < sizeof id; i++)
        snprintf(&p->instance_id[2 * i], 3, "%02x", id[i]);
    p->self_hash = strata_hash_bytes(p->instance_id, strlen(p->instance_id), 0);
    if (pthread_mutex_init(&p->mu, NULL) != 0) {
        free(p);
        return strata_error_set(err, STRATA_INTERNAL, "peers: cannot create a mutex");
    }
    if (pthread_cond_init(&p->cond, NULL) != 0) {
        pthread_mutex_destroy(&p->mu);
        free(p);
        return strata_error_set(err, STRATA_INTERNAL, "peers: cannot create a condition");
    }
    if (create_metrics(p, registry, err) != 0) {
        querier_peers_free(p);
        return -1;
    }
    *out = p;
    return 0;
}

const char *querier_peers_instance_id(const querier_peers *p) {
    return p->instance_id;
}

size_t querier_peers_count(querier_peers *p) {
    pthread_mutex_lock(&p->mu);
    size_t n = p->n_list;
    pthread_mutex_unlock(&p->mu);
    return n;
}

static void *refresh_thread(void *arg) {
    querier_peers *p = arg;
    pthread_mutex_lock(&p->mu);
    while (!p->stop) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        int64_t ns = until.tv_nsec + p->opts.refresh_interval_ns % STRATA_NS_PER_SEC;
        until.tv_sec +=
            (time_t)(p->opts.refresh_interval_ns / STRATA_NS_PER_SEC + ns / STRATA_NS_PER_SEC);
        until.tv_nsec = (long)(ns % STRATA_NS_PER_SEC);
        while (!p->stop && pthread_cond_timedwait(&p->cond, &p->mu, &until) == 0)
            ;
        if (p->stop)
            break;
        pthread_mutex_unlock(&p->mu);
        querier_peers_refresh(p);
        pthread_mutex_lock(&p->mu);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int querier_peers_start(querier_peers *p, strata_error *err) {
    querier_peers_refresh(p);
    if (p->opts.n_entries == 0)
        return 0;
    if (pthread_create(&p->thread, NULL, refresh_thread, p) != 0)
        return strata_error_set(err, STRATA_INTERNAL, "peers: cannot start the refresh thread");
    p->thread_started = true;
    return 0;
}

void querier_peers_free(querier_peers *p) {
    if (p == NULL)
        return;
    if (p->thread_started) {
        pthread_mutex_lock(&p->mu);
        p->stop = true;
        pthread_cond_broadcast(&p->cond);
        pthread_mutex_unlock(&p->mu);
        pthread_join(p->thread, NULL);
    }
    pthread_mutex_lock(&p->mu);
    for (size_t i = 0; i < p->n_list; i++)
        peer_unref_locked(p->list[i]);
    free(p->list);
    pthread_mutex_unlock(&p->mu);
    pthread_cond_destroy(&p->cond);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

/* ---- refresh ----------------------------------------------------------------------------------
 */

/* Splits "host:port" or "[v6]:port". */
static int split_entry(const char *entry, char *host, size_t host_cap, char *port,
                       size_t port_cap) {
    const char *colon = strrchr(entry, ':');
    if (colon == NULL || colon[1] == '\0')
        return -1;
    const char *h = entry;
    size_t len = (size_t)(colon - entry);
    if (len >= 2 && h[0] == '[' && h[len - 1] == ']') {
        h++;
        len -= 2;
    }
    if (len == 0 || len >= host_cap || strlen(colon + 1) >= port_cap)
        return -1;
    memcpy(host, h, len);
    host[len] = '\0';
    snprintf(port, port_cap, "%s", colon + 1);
    return 0;
}

/* Appends every address entry resolves to ("ip:port") to *addrs. */
static void resolve_entry(const char *entry, char (**addrs)[300], size_t *n, size_t *cap) {
    char host[256], port[32];
    if (split_entry(entry, host, sizeof host, port, sizeof port) != 0) {
        strata_log_warn("querier", "peer entry is not host:port", "entry=%s", entry);
        return;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0) {
        strata_log_warn("querier", "peer entry does not resolve", "entry=%s error=\"%s\"", entry,
                        gai_strerror(rc));
        return;
    }
    for (struct addrinfo *a = res; a != NULL; a = a->ai_next) {
        char ip[128];
        if (getnameinfo(a->ai_addr, a->ai_addrlen, ip, sizeof ip, NULL, 0, NI_NUMERICHOST) != 0)
            continue;
        if (STRATA_ARRAY_RESERVE(*addrs, *cap, *n + 1) != 0)
            break;
        snprintf((*addrs)[*n], sizeof(*addrs)[*n], a->ai_family == AF_INET6 ? "[%s]:%s" : "%s:%s",
                 ip, port);
        bool seen = false;
        for (size_t i = 0; i < *n && !seen; i++)
            seen = strcmp((*addrs)[i], (*addrs)[*n]) == 0;
        if (!seen)
            (*n)++;
    }
    freeaddrinfo(res);
}

/* Asks the querier at pe who it is; 0 when it answered with a protocol we speak. */
static int peer_info(peer *pe) {
    strata_error err;
    strata_error_clear(&err);
    strata_buffer resp = STRATA_BUFFER_INIT;
    int rc = rpc_call_unary(pe->channel, PEER_SERVICE "Info", NULL, 0, NULL, 0, INFO_TIMEOUT_NS,
                            &resp, &err);
    Strata__Querier__V1__InfoResponse *info =
        rc == 0 ? strata__querier__v1__info_response__unpack(NULL, resp.len, resp.data) : NULL;
    strata_buffer_free(&resp);
    if (info == NULL)
        return -1;
    rc = info->protocol == PEER_PROTOCOL && info->instance_id[0] != '\0' &&
                 strlen(info->instance_id) < sizeof pe->instance_id
             ? 0
             : -1;
    if (rc == 0) {
        snprintf(pe->instance_id, sizeof pe->instance_id, "%s", info->instance_id);
        pe->id_hash = strata_hash_bytes(pe->instance_id, strlen(pe->instance_id), 0);
    }
    strata__querier__v1__info_response__free_unpacked(info, NULL);
    return rc;
}

/* The peer already listed at address, with a reference for the caller; NULL when none. */
static peer *find_listed(querier_peers *p, const char *address) {
    peer *found = NULL;
    pthread_mutex_lock(&p->mu);
    for (size_t i = 0; i < p->n_list && found == NULL; i++)
        if (strcmp(p->list[i]->address, address) == 0) {
            found = p->list[i];
            found->refs++;
        }
    pthread_mutex_unlock(&p->mu);
    return found;
}

static peer *peer_new(querier_peers *p, const char *address) {
    peer *pe = calloc(1, sizeof *pe);
    if (pe == NULL)
        return NULL;
    snprintf(pe->address, sizeof pe->address, "%s", address);
    strata_error err;
    rpc_channel_options co = p->opts.channel;
    co.max_receive_message_bytes = (size_t)1 << 30; /* a partial tree can be large */
    if ((pe->channel = rpc_channel_new(address, &co, &err)) == NULL) {
        free(pe);
        return NULL;
    }
    pe->refs = 1;
    return pe;
}

/* Adds pe to next (taking the caller's reference) unless it is this querier or a querier
 * already there; otherwise drops the reference. */
static void keep_peer(querier_peers *p, peer *pe, peer **next, size_t *n_next) {
    bool keep = strcmp(pe->instance_id, p->instance_id) != 0;
    for (size_t i = 0; keep && i < *n_next; i++)
        keep = strcmp(next[i]->instance_id, pe->instance_id) != 0;
    if (keep) {
        next[(*n_next)++] = pe;
        return;
    }
    pthread_mutex_lock(&p->mu);
    peer_unref_locked(pe);
    pthread_mutex_unlock(&p->mu);
}

void querier_peers_refresh(querier_peers *p) {
    char(*addrs)[300] = NULL;
    size_t n = 0, cap = 0;
    for (size_t i = 0; i < p->opts.n_entries; i++)
        resolve_entry(p->opts.entries[i], &addrs, &n, &cap);
    peer **next = calloc(n + 1, sizeof *next);
    size_t n_next = 0;
    for (size_t i = 0; next != NULL && i < n; i++) {
        peer *pe = find_listed(p, addrs[i]);
        if (pe == NULL && (pe = peer_new(p, addrs[i])) == NULL)
            continue;
        if (peer_info(pe) != 0) {
            pthread_mutex_lock(&p->mu);
            peer_unref_locked(pe);
            pthread_mutex_unlock(&p->mu);
            continue;
        }
        keep_peer(p, pe, next, &n_next);
    }
    free(addrs);
    if (next == NULL)
        return;
    pthread_mutex_lock(&p->mu);
    size_t before = p->n_list;
    for (size_t i = 0; i < p->n_list; i++)
        peer_unref_locked(p->list[i]);
    free(p->list);
    p->list = next;
    p->n_list = n_next;
    pthread_mutex_unlock(&p->mu);
    metrics_gauge_set(p->live_gauge, (int64_t)n_next);
    if (before != n_next)
        strata_log_info("querier", "peers changed", "peers=%zu before=%zu", n_next, before);
}

/* ---- members ----------------------------------------------------------------------------- */

static int lower_id_first(const void *a, const void *b) {
    const peer *x = *(peer *const *)a, *y = *(peer *const *)b;
    if (x->id_hash != y->id_hash)
        return x->id_hash < y->id_hash ? -1 : 1;
    return strcmp(x->instance_id, y->instance_id);
}

/* The members are this querier and the live peers, ordered by instance id hash: every querier
 * that sees the same peers agrees on the order, whichever of them coordinates. */
static size_t peers_members(void *arg, size_t *self, void **plan_out) {
    querier_peers *p = arg;
    *plan_out = NULL;
    *self = 0;
    peer_plan *plan = calloc(1, sizeof *plan);
    if (plan == NULL)
        return 0;
    pthread_mutex_lock(&p->mu);
    if (p->n_list > 0 && (plan->peers = calloc(p->n_list, sizeof *plan->peers)) != NULL) {
        for (size_t i = 0; i < p->n_list; i++) {
            plan->peers[i] = p->list[i];
            p->list[i]->refs++;
        }
        plan->n = p->n_list;
    }
    pthread_mutex_unlock(&p->mu);
    if (plan->n > 1)
        qsort(plan->peers, plan->n, sizeof *plan->peers, lower_id_first);
    for (size_t i = 0; i < plan->n; i++)
        if (plan->peers[i]->id_hash < p->self_hash ||
            (plan->peers[i]->id_hash == p->self_hash &&
             strcmp(plan->peers[i]->instance_id, p->instance_id) < 0))
            (*self)++;
    *plan_out = plan;
    return plan->n;
}

static void peers_release(void *arg, void *plan_arg) {
    querier_peers *p = arg;
    peer_plan *plan = plan_arg;
    if (plan == NULL)
        return;
    pthread_mutex_lock(&p->mu);
    for (size_t i = 0; i < plan->n; i++)
        peer_unref_locked(plan->peers[i]);
    pthread_mutex_unlock(&p->mu);
    free(plan->peers);
    free(plan);
}

/* ---- MergeShard, the client side --------------------------------------------------------------
 */

static int pack_share(const merge_share *share, strata_buffer *out, strata_error *err) {
    Strata__Querier__V1__MergeShardRequest req = STRATA__QUERIER__V1__MERGE_SHARD_REQUEST__INIT;
    Strata__Querier__V1__ShareBlock *blocks = calloc(share->n_blocks + 1, sizeof *blocks);
    Strata__Querier__V1__ShareBlock **ptrs = calloc(share->n_blocks + 1, sizeof *ptrs);
    if (blocks == NULL || ptrs == NULL) {
        free(blocks);
        free(ptrs);
        return strata_error_oom(err);
    }
    req.query = (char *)(uintptr_t)share->query;
    req.start_ns = share->start_ns;
    req.end_ns = share->end_ns;
    req.base_side = share->base;
    req.use_rollups = share->use_rollups;
    req.max_query_bytes = share->max_query_bytes;
    req.group_mask = share->grouping->mask;
    req.group_all_labels = share->grouping->all_labels;
    req.group_by_timestamp = share->grouping->by_timestamp;
    req.group_labels = share->grouping->labels;
    req.n_group_labels = share->grouping->n_labels;
    for (size_t i = 0; i < share->n_blocks; i++) {
        strata__querier__v1__share_block__init(&blocks[i]);
        blocks[i].ulid = (char *)(uintptr_t)share->blocks[i];
        ptrs[i] = &blocks[i];
    }
    req.blocks = ptrs;
    req.n_blocks = share->n_blocks;
    size_t size = strata__querier__v1__merge_shard_request__get_packed_size(&req);
    int rc = strata_buffer_reserve(out, size) == 0 ? 0 : strata_error_oom(err);
    if (rc == 0)
        out->len = strata__querier__v1__merge_shard_request__pack(&req, out->data);
    free(blocks);
    free(ptrs);
    return rc;
}

static void copy_result(const Strata__Querier__V1__MergeShardResponse *r, const merge_share *share,
                        merge_share_result *res) {
    merge_result *m = &res->result;
    memset(m, 0, sizeof *m);
    m->profiles = r->profiles;
    m->samples = r->samples;
    m->total = r->total;
    m->min_time_ns = r->min_time_ns;
    m->max_time_ns = r->max_time_ns;
    m->period = r->period;
    m->duration_ns = r->duration_ns;
    m->dictionary_blocks = r->dictionary_blocks;
    m->stats.skipped_blocks = r->skipped_blocks;
    m->stats.duplicates = r->duplicates;
    snprintf(m->stats.skipped_block, sizeof m->stats.skipped_block, "%s", r->skipped_block);
    snprintf(m->stats.skipped_error, sizeof m->stats.skipped_error, "%s", r->skipped_error);
    res->passed = r->passed;
    res->filtered = r->filtered;
    for (size_t k = 0; k < share->n_blocks; k++)
        res->missing[k] = false;
    for (size_t i = 0; i < r->n_missing; i++)
        for (size_t k = 0; k < share->n_blocks; k++)
            if (strcmp(r->missing[i], share->blocks[k]) == 0)
                res->missing[k] = true;
}

static int call_share(querier_peers *p, peer *pe, const merge_share *share, calltree *tree,
                      merge_share_result *res, strata_error *err) {
    strata_buffer req = STRATA_BUFFER_INIT, resp = STRATA_BUFFER_INIT;
    rpc_metadata md = {STRATA_TENANT_HEADER, share->tenant, strlen(share->tenant)};
    int rc = pack_share(share, &req, err);
    if (rc == 0)
        rc = rpc_call_unary(pe->channel, PEER_SERVICE "MergeShard", req.data, req.len, &md, 1,
                            p->opts.timeout_ns, &resp, err);
    strata_buffer_free(&req);
    Strata__Querier__V1__MergeShardResponse *r = NULL;
    if (rc == 0 &&
        (r = strata__querier__v1__merge_shard_response__unpack(NULL, resp.len, resp.data)) == NULL)
        rc = strata_error_set(err, STRATA_INTERNAL, "MergeShardResponse does not unpack");
    strata_buffer_free(&resp);
    if (rc == 0 && r->tree != NULL)
        rc = calltree_merge_partial(tree, r->tree, err);
    if (rc == 0)
        copy_result(r, share, res);
    if (r != NULL)
        strata__querier__v1__merge_shard_response__free_unpacked(r, NULL);
    return rc;
}

static int peers_run(void *arg, void *plan_arg, size_t index, const merge_share *share,
                     calltree *tree, merge_share_result *res, strata_error *err) {
    querier_peers *p = arg;
    peer_plan *plan = plan_arg;
    if (plan == NULL || index >= plan->n)
        return strata_error_set(err, STRATA_INTERNAL, "no such peer");
    peer *pe = plan->peers[index];
    metrics_counter_add(p->blocks_shared, (int64_t)share->n_blocks);
    int64_t start = strata_monotonic_ns();
    if (call_share(p, pe, share, tree, res, err) == 0) {
        metrics_counter_inc(p->shares_ok);
        return 0;
    }
    metrics_counter_inc(p->shares_failed);
    char quoted[600];
    strata_log_warn("querier", "peer share failed, merging it here",
                    "peer=%s blocks=%zu ms=%lld "
                    "code=%s error=%s",
                    pe->address, share->n_blocks,
                    (long long)((strata_monotonic_ns() - start) / STRATA_NS_PER_MS),
                    strata_status_name(err->code),
                    strata_log_quote(err->message, quoted, sizeof quoted));
    return -1;
}

query_fanout querier_peers_fanout(querier_peers *p) {
    return (query_fanout){.members = peers_members,
                          .run = peers_run,
                          .release = peers_release,
                          .arg = p,
                          .min_rows = p->opts.min_rows};
}
