/*
 * block_merge_testdata.c - see block_merge_testdata.h.
 */
#include "block/block_merge_testdata.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "block/block_format.h"
#include "block/block_meta.h"
#include "labels/labels.h"

/* ---- bucket fixture ---------------------------------------------------------------------- */

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

void fixture_open(fixture *fx) {
    snprintf(fx->dir, sizeof fx->dir, "/tmp/strata-merge-test-XXXXXX");
    assert_non_null(mkdtemp(fx->dir));
    strata_error err;
    assert_int_equal(bucket_open_filesystem(fx->dir, NULL, &fx->store, &err), 0);
}

void remove_tree(const char *dir) {
    nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

void fixture_close(fixture *fx) {
    bucket_close(fx->store);
    remove_tree(fx->dir);
}

void block_key(const ulid *id, const char *file, char *key, size_t cap) {
    char text[ULID_STRING_LEN + 1];
    ulid_format(id, text);
    snprintf(key, cap, "%s/%s/%s", TENANT, text, file);
}

void upload_writer(bucket *store, block_writer *w, ulid *id) {
    upload_writer_as(store, w, TENANT, id);
}

void upload_writer_as(bucket *store, block_writer *w, const char *tenant, ulid *id) {
    strata_error err;
    strata_buffer data = STRATA_BUFFER_INIT, json = STRATA_BUFFER_INIT;
    block_meta meta;
    block_meta_init(&meta);
    assert_int_equal(block_writer_finish(w, &data, &meta, &err), 0);
    assert_int_equal(block_meta_encode(&meta, &json, &err), 0);
    char text[ULID_STRING_LEN + 1], key[256];
    ulid_format(&meta.id, text);
    snprintf(key, sizeof key, "%s/%s/%s", tenant, text, BLOCK_DATA_FILE);
    assert_int_equal(bucket_upload(store, key, data.data, data.len, &err), 0);
    snprintf(key, sizeof key, "%s/%s/%s", tenant, text, BLOCK_META_FILE);
    assert_int_equal(bucket_upload(store, key, json.data, json.len, &err), 0);
    *id = meta.id;
    block_meta_free(&meta);
    strata_buffer_free(&data);
    strata_buffer_free(&json);
    block_writer_free(w);
}

void add_tprofile(block_writer *w, const tprofile *p) {
    strata_error err;
    label_set labels = LABEL_SET_INIT;
    profile_type type;
    assert_int_equal(label_set_from_text(p->labels, &labels, &err), 0);
    assert_int_equal(profile_type_parse(p->type, strlen(p->type), &type, &err), 0);
    assert_int_equal(block_writer_begin_profile(w, &labels, &type, BASE_NS + p->time_ms * 1000000,
                                                10 * SEC, 10000000, &err),
                     0);
    for (size_t i = 0; i < MAX_SAMPLES && p->samples[i].value != 0; i++) {
        block_frame frames[MAX_FRAMES];
        size_t n = 0;
        for (; n < MAX_FRAMES && p->samples[i].frames[n] != NULL; n++) {
            memset(&frames[n], 0, sizeof frames[n]);
            frames[n].function_name = p->samples[i].frames[n];
            frames[n].file_name = "app.go";
            frames[n].line = (int64_t)(10 + n);
            frames[n].mapping_file = "/usr/bin/app";
            frames[n].build_id = "b1d";
            frames[n].address = 0x401000 + 16 * strlen(p->samples[i].frames[n]);
        }
        assert_int_equal(block_writer_add_sample(w, frames, n, p->samples[i].value, &err), 0);
    }
    assert_int_equal(block_writer_end_profile(w, &err), 0);
    label_set_free(&labels);
    profile_type_free(&type);
}

ulid write_source(bucket *store, const tprofile *profiles, size_t n) {
    strata_error err;
    block_writer *w = block_writer_new(NULL, &err);
    assert_non_null(w);
    for (size_t i = 0; i < n; i++)
        add_tprofile(w, &profiles[i]);
    ulid id;
    upload_writer(store, w, &id);
    return id;
}

/* ---- data ------------------------------------------------------------------------------- */

const tprofile block_a[4] = {
    {CPU,
     "{job=\"api\", pod=\"a-1\"}",
     1000,
     {{{"leaf", "work", "main", NULL}, 5}, {{"gc", "main", NULL}, 2}, {{"main", NULL}, 1}}},
    {CPU, "{job=\"api\", pod=\"a-1\"}", 11000, {{{"leaf", "work", "main", NULL}, 7}}},
    {CPU,
     "{job=\"db\", pod=\"d-1\"}",
     1000,
     {{{"query", "serve", "main", NULL}, 11}, {{"fsync", "query", "serve", "main", NULL}, 3}}},
    {MEM, "{job=\"api\", pod=\"a-1\"}", 1000, {{{"alloc", "work", "main", NULL}, 4096}}},
};
const tprofile block_b[4] = {
    {CPU, "{job=\"db\", pod=\"d-1\"}", 6000, {{{"fsync", "query", "serve", "main", NULL}, 9}}},
    {MEM,
     "{job=\"api\", pod=\"a-1\"}",
     6000,
     {{{"alloc", "work", "main", NULL}, 1024}, {{"alloc", "gc", "main", NULL}, 512}}},
    {CPU,
     "{job=\"api\", pod=\"a-1\"}",
     6000,
     {{{"gc", "main", NULL}, 4}, {{"leaf", "work", "main", NULL}, 6}}},
    {CPU, "{job=\"web\", pod=\"w-1\"}", 500, {{{"render", "handler", "main", NULL}, 8}}},
};
const tprofile block_c[2] = {
    {CPU, "{job=\"api\", pod=\"a-1\"}", 21000, {{{"leaf", "work", "main", NULL}, 1}}},
    {CPU, "{job=\"api\", pod=\"a-1\"}", 16000, {{{"other", "main", NULL}, 2}}},
};

void merge_ok(bucket *store, const ulid *ids, size_t n, const block_merge_options *opts,
              block_merge_result *result) {
    strata_error err;
    strata_error_clear(&err);
    int rc = block_merge(store, TENANT, ids, n, opts, result, &err);
    if (rc != 0)
        fail_msg("block_merge: %s: %s", strata_status_name(err.code), err.message);
}
