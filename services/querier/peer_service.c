/*
 * peer_service.c - strata.querier.v1.PeerService on the querier's gRPC port: Info (who this
 * querier is) and MergeShard (merge a share of another querier's merge: engine.h, "fan-out").
 *
 * MergeShard runs on the share pool (peers.h says why it is not the query pool). The request is
 * checked as any client's: the tenant by the one rule (x-scope-orgid), the selector parsed, the
 * group-by rebuilt from its fields, every index of the answer's partial tree produced here. The
 * answer is the partial tree and the merge's counts; blocks this querier could not find are listed
 * for the coordinator to merge itself.
 *
 * STRATA_TEST_SHARE_DELAY_MS (tests only: the fan-out integration test kills a peer while it
 * holds a share) delays each share by that much before it is merged.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "block/ulid.h"
#include "common/clock.h"
#include "common/tenant.h"
#include "peers.h"
#include "querier_internal.h"
#include "strata/querier/v1/peer.pb-c.h"

/* The most blocks one share may name: a coordinator sends one share per peer, so this bounds the
 * bucket lookups a request can cause, not a real merge (a day of one-second fresh blocks is 86,400
 * before compaction). */
#define MAX_SHARE_BLOCKS 200000

typedef Strata__Querier__V1__MergeShardRequest share_request_pb;
typedef Strata__Querier__V1__MergeShardResponse share_response_pb;

static int handle_info(rpc_call *call, const uint8_t *req, size_t len, strata_buffer *resp,
                       strata_error *err, void *arg) {
    querier *q = arg;
    (void)call;
    (void)req;
    (void)len;
    Strata__Querier__V1__InfoResponse out = STRATA__QUERIER__V1__INFO_RESPONSE__INIT;
    out.instance_id = (char *)(uintptr_t)querier_peers_instance_id(q->peers);
    out.protocol = PEER_PROTOCOL;
    size_t size = strata__querier__v1__info_response__get_packed_size(&out);
    if (strata_buffer_reserve(resp, size) != 0)
        return strata_error_oom(err);
    resp->len += strata__querier__v1__info_response__pack(&out, resp->data + resp->len);
    return 0;
}

/* The share a request describes; blocks and grouping point into r and the caller's arrays. */
static int share_from_request(const share_request_pb *r, const char *tenant, const char **blocks,
                              calltree_grouping *grouping, merge_share *share, strata_error *err) {
    if (r->group_mask == 0 || r->group_mask > CALLTREE_GROUP_EXACT)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "group_mask %u is not valid",
                                r->group_mask);
    *grouping = (calltree_grouping){.mask = r->group_mask,
                                    .all_labels = r->group_all_labels,
                                    .by_timestamp = r->group_by_timestamp};
    for (size_t i = 0; i < r->n_group_labels; i++)
        if (calltree_grouping_add_label(grouping, r->group_labels[i], err) != 0)
            return -1;
    if (r->n_blocks > MAX_SHARE_BLOCKS)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "%zu blocks in one share (at most %d)", r->n_blocks,
                                MAX_SHARE_BLOCKS);
    for (size_t i = 0; i < r->n_blocks; i++) {
        const Strata__Querier__V1__ShareBlock *b = r->blocks[i];
        ulid id; /* a block id names a bucket key: nothing else may pass */
        if (ulid_parse(b->ulid, strlen(b->ulid), &id, err) != 0)
            return strata_error_wrap(err, "blocks[%zu]", i);
        blocks[i] = b->ulid;
    }
    *share = (merge_share){.tenant = tenant,
                           .query = r->query,
                           .start_ns = r->start_ns,
                           .end_ns = r->end_ns,
                           .base = r->base_side,
                           .use_rollups = r->use_rollups,
                           .max_query_bytes = r->max_query_bytes,
                           .grouping = grouping,
                           .blocks = blocks,
                           .n_blocks = r->n_blocks};
    if (share->end_ns < share->start_ns)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "end is before start");
    return 0;
}

static int pack_answer(const calltree *tree, const merge_share *share,
                       const merge_share_result *res, strata_buffer *resp, strata_error *err) {
    share_response_pb out = STRATA__QUERIER__V1__MERGE_SHARD_RESPONSE__INIT;
    Strata__Querier__V1__PartialTree partial;
    if (calltree_to_partial(tree, &partial, err) != 0)
        return -1;
    char **missing = calloc(share->n_blocks + 1, sizeof *missing);
    int rc = missing != NULL ? 0 : strata_error_oom(err);
    const merge_result *m = &res->result;
    out.tree = &partial;
    out.profiles = m->profiles;
    out.samples = m->samples;
    out.total = m->total;
    out.min_time_ns = m->min_time_ns;
    out.max_time_ns = m->max_time_ns;
    out.period = m->period;
    out.duration_ns = m->duration_ns;
    out.dictionary_blocks = m->dictionary_blocks;
    out.skipped_blocks = m->stats.skipped_blocks;
    out.duplicates = m->stats.duplicates;
    out.skipped_block = (char *)(uintptr_t)m->stats.skipped_block;
    out.skipped_error = (char *)(uintptr_t)m->stats.skipped_error;
    out.passed = res->passed;
    out.filtered = res->filtered;
    for (size_t k = 0; rc == 0 && k < share->n_blocks; k++)
        if (res->missing[k])
            missing[out.n_missing++] = (char *)(uintptr_t)share->blocks[k];
    out.missing = missing;
    size_t size = rc == 0 ? strata__querier__v1__merge_shard_response__get_packed_size(&out) : 0;
    if (rc == 0 && strata_buffer_reserve(resp, size) != 0)
        rc = strata_error_oom(err);
    if (rc == 0)
        resp->len += strata__querier__v1__merge_shard_response__pack(&out, resp->data + resp->len);
    free(missing);
    calltree_partial_free(&partial);
    return rc;
}

/* Sleeps ns, or less if the call is cancelled meanwhile (the test hook). */
static void test_delay(rpc_call *call, int64_t ns) {
    int64_t until = strata_monotonic_ns() + ns;
    while (strata_monotonic_ns() < until && !rpc_call_is_cancelled(call)) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

static int merge_share_answer(querier *q, const char *tenant, const share_request_pb *r,
                              strata_buffer *resp, strata_error *err) {
    const char **blocks = calloc(r->n_blocks + 1, sizeof *blocks);
    bool *missing = calloc(r->n_blocks + 1, sizeof *missing);
    calltree_grouping grouping = {0};
    merge_share share;
    selector sel;
    bool parsed = false;
    calltree *tree = NULL;
    int rc = blocks && missing ? 0 : strata_error_oom(err);
    if (rc == 0)
        rc = share_from_request(r, tenant, blocks, &grouping, &share, err);
    if (rc == 0 && (rc = selector_parse(r->query, &sel, err)) == 0)
        parsed = true;
    if (rc == 0 && !sel.has_profile_type)
        rc = strata_error_set(err, STRATA_INVALID_ARGUMENT, "the query names no profile type");
    if (rc == 0 && (rc = calltree_create(&tree, 1024, err)) == 0)
        rc = calltree_set_grouping(tree, &grouping, err);
    merge_share_result res = {.missing = missing};
    if (rc == 0)
        rc = query_merge_share(q->engine, &share, &sel, tree, &res, err);
    if (rc == 0)
        rc = pack_answer(tree, &share, &res, resp, err);
    calltree_free(tree);
    if (parsed)
        selector_free(&sel);
    calltree_grouping_free(&grouping);
    free(blocks);
    free(missing);
    return rc;
}

static int handle_merge_shard(rpc_call *call, const uint8_t *req, size_t len, strata_buffer *resp,
                              strata_error *err, void *arg) {
    querier *q = arg;
    int64_t start = strata_monotonic_ns();
    strata_tenant tenant;
    const char *v = NULL;
    size_t vlen = 0;
    if (!rpc_call_metadata(call, STRATA_TENANT_HEADER, &v, &vlen))
        v = NULL;
    if (strata_tenant_from_header(v, vlen, &tenant, err) != 0)
        return -1;
    share_request_pb *r = strata__querier__v1__merge_shard_request__unpack(NULL, len, req);
    if (r == NULL)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "request is not a valid MergeShardRequest protobuf");
    metrics_gauge_inc(q->shares_in_flight);
    if (q->share_delay_ns > 0)
        test_delay(call, q->share_delay_ns);
    int rc = merge_share_answer(q, tenant.name, r, resp, err);
    metrics_gauge_dec(q->shares_in_flight);
    strata__querier__v1__merge_shard_request__free_unpacked(r, NULL);
    querier_observe(q, "merge_shard", rc == 0 ? STRATA_OK : err->code, start);
    return rc;
}

static void async_merge_shard(rpc_call *call, const uint8_t *req, size_t len, void *arg) {
    querier *q = arg;
    querier_offload(q, q->share_pool, call, req, len, handle_merge_shard);
}

int querier_register_peer_service(querier *q, rpc_server *server, strata_error *err) {
    if (rpc_server_add_sync_method(server, PEER_SERVICE "Info", handle_info, q, err) != 0)
        return -1;
    return rpc_server_add_method(server, PEER_SERVICE "MergeShard", async_merge_shard, q, err);
}
