/*
 * fanout_loopback.c - see fanout_loopback.h.
 */
#include "fanout_loopback.h"

#include <stdlib.h>

#include "calltree/calltree.h"

static size_t loopback_members(void *arg, size_t *self, void **plan) {
    loopback_fanout *lb = arg;
    *plan = NULL;
    *self = lb->offset % (lb->n_peers + 1);
    return lb->n_peers;
}

/* Packs a peer's tree and adds it to tree as the coordinator would after gRPC. */
static int through_wire(const calltree *from, calltree *tree, strata_error *err) {
    Strata__Querier__V1__PartialTree p;
    if (calltree_to_partial(from, &p, err) != 0)
        return -1;
    size_t size = strata__querier__v1__partial_tree__get_packed_size(&p);
    uint8_t *bytes = malloc(size + 1);
    if (bytes == NULL) {
        calltree_partial_free(&p);
        return strata_error_oom(err);
    }
    strata__querier__v1__partial_tree__pack(&p, bytes);
    calltree_partial_free(&p);
    Strata__Querier__V1__PartialTree *got =
        strata__querier__v1__partial_tree__unpack(NULL, size, bytes);
    free(bytes);
    if (got == NULL)
        return strata_error_set(err, STRATA_INTERNAL, "loopback: partial tree does not unpack");
    int rc = calltree_merge_partial(tree, got, err);
    strata__querier__v1__partial_tree__free_unpacked(got, NULL);
    return rc;
}

static int loopback_run(void *arg, void *plan, size_t peer, const merge_share *share,
                        calltree *tree, merge_share_result *res, strata_error *err) {
    loopback_fanout *lb = arg;
    (void)plan;
    lb->last_start_ns[peer] = share->start_ns;
    lb->last_end_ns[peer] = share->end_ns;
    if (lb->failing[peer]) {
        atomic_fetch_add(&lb->shares_failed, 1);
        return strata_error_set(err, STRATA_UNAVAILABLE, "loopback peer %zu is down", peer);
    }
    selector sel;
    if (selector_parse(share->query, &sel, err) != 0)
        return -1;
    calltree *partial = NULL;
    int rc = calltree_create(&partial, 0, err);
    if (rc == 0)
        rc = calltree_set_grouping(partial, share->grouping, err);
    if (rc == 0)
        rc = query_merge_share(lb->peers[peer], share, &sel, partial, res, err);
    if (rc == 0)
        rc = through_wire(partial, tree, err);
    for (size_t k = 0; rc == 0 && k < share->n_blocks; k++)
        if (res->missing[k])
            atomic_fetch_add(&lb->blocks_missing, 1);
    if (rc == 0)
        atomic_fetch_add(&lb->shares, 1);
    calltree_free(partial);
    selector_free(&sel);
    return rc;
}

void loopback_fanout_install(query_engine *coordinator, loopback_fanout *lb) {
    query_fanout f = {.members = loopback_members, .run = loopback_run, .arg = lb, .min_rows = 0};
    query_engine_set_fanout(coordinator, &f);
}
