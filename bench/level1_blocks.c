/*
 * level1_blocks.c - see level1_blocks.h.
 */
#include "level1_blocks.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agentgen.h"
#include "block/block_format.h"
#include "block/block_writer.h"
#include "common/clock.h"

static _Noreturn void fail(const char *what, const strata_error *err) {
    fprintf(stderr, "level-1 blocks: %s: %s\n", what, err != NULL ? err->message : "failed");
    exit(1);
}

static void upload_block(bucket *store, const char *tenant, block_writer *w) {
    strata_error err;
    strata_buffer data = STRATA_BUFFER_INIT, json = STRATA_BUFFER_INIT;
    block_meta meta;
    if (block_writer_finish(w, &data, &meta, &err) != 0 ||
        block_meta_encode(&meta, &json, &err) != 0)
        fail("finish", &err);
    char id[ULID_STRING_LEN + 1], key[256];
    ulid_format(&meta.id, id);
    snprintf(key, sizeof key, "%s/%s/%s", tenant, id, BLOCK_DATA_FILE);
    if (bucket_upload(store, key, data.data, data.len, &err) != 0)
        fail("upload", &err);
    snprintf(key, sizeof key, "%s/%s/%s", tenant, id, BLOCK_META_FILE);
    if (bucket_upload(store, key, json.data, json.len, &err) != 0)
        fail("upload", &err);
    strata_buffer_free(&data);
    strata_buffer_free(&json);
    block_meta_free(&meta);
}

/* The ingester's default max_symbol_bytes: a dictionary larger than this is dropped after a cut. */
#define MAX_SYMBOL_BYTES ((size_t)256 << 20)

static block_writer *new_dictionary(const char *tenant) {
    strata_error err;
    block_writer_options wo;
    block_writer_options_default(&wo);
    wo.tenant = tenant;
    block_writer *w = block_writer_new(&wo, &err);
    if (w == NULL)
        fail("writer", &err);
    return w;
}

/* One second of data: the processes sub, sub + 10, ... of window w, added to the tenant's
 * long-lived dictionary writer; cut off as one block when `cut` (as the ingester does at each
 * flush). */
static void write_second(bucket *store, const char *tenant, agentgen *g, const label_set *labels,
                         size_t processes, uint64_t w, size_t sub, int64_t time_ns, bool cut_now,
                         block_writer **dictionary) {
    strata_error err;
    block_writer *bw = *dictionary;
    profile_type type = agentgen_profile_type();
    for (size_t i = sub; i < processes; i += 10) {
        pprof_profile p;
        memset(&p, 0, sizeof p);
        if (agentgen_profile(g, i, w, &p, &err) != 0)
            fail("generate", &err);
        if (block_writer_add_profile(bw, &labels[i], &type, time_ns + (int64_t)i * 1000,
                                     10 * STRATA_NS_PER_SEC, p.period, &p, 0, &err) != 0)
            fail("add_profile", &err);
        pprof_profile_free(&p);
    }
    if (!cut_now || block_writer_profile_count(bw) == 0)
        return;
    block_writer *cut = NULL;
    if (block_writer_detach(bw, &cut, &err) != 0)
        fail("detach", &err);
    upload_block(store, tenant, cut);
    block_writer_free(cut);
    if (block_writer_memory_bytes(bw) > MAX_SYMBOL_BYTES) {
        block_writer_free(bw);
        *dictionary = new_dictionary(tenant);
    }
}

void write_level1_blocks(bucket *store, const char *tenant, size_t processes, uint64_t seed,
                         double minutes, int64_t base_ns, int block_seconds) {
    strata_error err;
    agentgen_options go;
    agentgen_options_default(&go);
    go.n_processes = processes;
    go.seed = seed;
    agentgen *g = agentgen_new(&go, &err);
    if (g == NULL)
        fail("agentgen", &err);
    label_set *labels = calloc(processes, sizeof *labels);
    if (labels == NULL)
        fail("calloc", NULL);
    for (size_t i = 0; i < processes; i++)
        if (agentgen_labels(g, i, &labels[i], &err) != 0)
            fail("labels", &err);
    uint64_t windows = (uint64_t)(minutes * 6.0 + 0.5);
    block_writer *dictionary = new_dictionary(tenant);
    uint64_t every = block_seconds > 0 ? (uint64_t)block_seconds : 1;
    for (uint64_t w = 0; w < windows; w++)
        for (size_t sub = 0; sub < 10; sub++) {
            uint64_t second = w * 10 + sub;
            bool cut_now = (second + 1) % every == 0 || second + 1 == windows * 10;
            write_second(store, tenant, g, labels, processes, w, sub,
                         base_ns + (int64_t)second * STRATA_NS_PER_SEC, cut_now, &dictionary);
        }
    block_writer_free(dictionary);
    for (size_t i = 0; i < processes; i++)
        label_set_free(&labels[i]);
    free(labels);
    agentgen_free(g);
}
