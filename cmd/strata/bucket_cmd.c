/*
 * bucket_cmd.c - `strata bucket ls|verify|rm-block`: operators' tools for the blocks in a bucket.
 *
 *   strata bucket ls       (-config strata.yaml | -objstore.config-file bucket.yaml) [--tenant T]
 *   strata bucket verify   (...) [--tenant T] [TENANT/ULID]
 *   strata bucket rm-block (...) TENANT/ULID
 *
 * The bucket comes from the service config's `bucket:` section or from a Thanos objstore file, so
 * the tools work on every backend. Blocks live at <tenant>/<ULID>/{meta.json,profiles.strata};
 * a directory without meta.json is a partial upload (the ingester writes meta.json last) and is
 * listed as such, never read as a block.
 *
 * verify reads each block's meta.json, checks that the data object has the size meta.json records,
 * opens it with the block reader (trailer, footer CRC, page index) through ranged reads and then
 * reads every page: all profiles and samples, every symbol table and every string, each page's
 * CRC and sizes being checked by the reader. Counts in meta.json must match the data. It prints
 * one line per block and exits 1 if any block is damaged.
 *
 * rm-block deletes meta.json first, so the block leaves queries at once even if deleting the rest
 * fails half way (what remains is then a partial upload), and then every other object below it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "block/block_format.h"
#include "block/block_meta.h"
#include "block/block_reader.h"
#include "bucket/bucket.h"
#include "cli.h"
#include "common/array.h"
#include "strata_config.h"

typedef struct bucket_args {
    const char *command;
    const char *config_path;
    const char *objstore_path;
    const char *tenant;
    const char *block; /* TENANT/ULID */
} bucket_args;

static void usage(void) {
    fprintf(stderr,
            "usage: strata bucket ls|verify|rm-block (-config FILE | -objstore.config-file FILE)\n"
            "                     [--tenant T] [TENANT/ULID]\n"
            "  ls        list blocks (time range, profiles, size) and partial uploads\n"
            "  verify    read every block completely and check checksums and meta.json\n"
            "  rm-block  delete one block (meta.json first)\n");
}

static int parse_args(int argc, char **argv, bucket_args *a) {
    memset(a, 0, sizeof *a);
    if (argc < 1)
        return -1;
    a->command = argv[0];
    for (int i = 1; i < argc; i++) {
        bool has_value = i + 1 < argc;
        if (cli_flag_is(argv[i], "config") && has_value)
            a->config_path = argv[++i];
        else if (cli_flag_is(argv[i], "objstore.config-file") && has_value)
            a->objstore_path = argv[++i];
        else if (cli_flag_is(argv[i], "tenant") && has_value)
            a->tenant = argv[++i];
        else if (argv[i][0] != '-' && a->block == NULL)
            a->block = argv[i];
        else
            return -1;
    }
    if ((a->config_path == NULL) == (a->objstore_path == NULL))
        return -1;
    return 0;
}

static int open_bucket(const bucket_args *a, bucket **out, strata_error *err) {
    if (a->objstore_path != NULL)
        return bucket_open_yaml_file(a->objstore_path, out, err);
    strata_config config;
    if (strata_config_load(a->config_path, &config, err) != 0)
        return -1;
    int rc = bucket_open_config(config.bucket.node, out, err);
    strata_config_free(&config);
    return rc;
}

/* ---- Listing blocks ---------------------------------------------------------------------------
 */

typedef struct name_list {
    char **names;
    size_t count, cap;
} name_list;

static void name_list_free(name_list *l) {
    for (size_t i = 0; i < l->count; i++)
        free(l->names[i]);
    free(l->names);
}

static int collect(const char *key, void *ctx, strata_error *err) {
    name_list *l = ctx;
    if (STRATA_ARRAY_RESERVE_OR_OOM(l->names, l->cap, l->count + 1, err) != 0)
        return -1;
    if ((l->names[l->count] = strdup(key)) == NULL)
        return strata_error_oom(err);
    l->count++;
    return 0;
}

/* Block directories ("tenant/ULID", no trailing slash) of one tenant or of all. */
static int list_blocks(bucket *b, const char *tenant, name_list *out, strata_error *err) {
    name_list tenants = {0};
    int rc = 0;
    if (tenant != NULL)
        rc = collect(tenant, &tenants, err);
    else
        rc = bucket_iterate(b, "", false, collect, &tenants, err);
    for (size_t i = 0; rc == 0 && i < tenants.count; i++) {
        size_t n = strlen(tenants.names[i]);
        if (n > 0 && tenants.names[i][n - 1] != '/' && tenant == NULL)
            continue; /* an object at the top level is not a tenant */
        size_t before = out->count;
        rc = bucket_iterate(b, tenants.names[i], false, collect, out, err);
        /* Keep directories only: objects beside the blocks (bucket-index.json) are not blocks. */
        size_t kept = before;
        for (size_t j = before; j < out->count; j++) {
            size_t len = strlen(out->names[j]);
            if (len > 0 && out->names[j][len - 1] == '/') {
                out->names[j][len - 1] = '\0';
                out->names[kept++] = out->names[j];
            } else {
                free(out->names[j]);
            }
        }
        out->count = kept;
    }
    name_list_free(&tenants);
    return rc;
}

static int read_meta(bucket *b, const char *dir, block_meta *meta, bool *partial,
                     strata_error *err) {
    char key[BUCKET_KEY_MAX + 1];
    snprintf(key, sizeof key, "%s/%s", dir, BLOCK_META_FILE);
    strata_buffer json = STRATA_BUFFER_INIT;
    *partial = false;
    int rc = bucket_get(b, key, &json, err);
    if (rc != 0 && err->code == STRATA_NOT_FOUND) {
        *partial = true;
        rc = 0;
    } else if (rc == 0) {
        rc = block_meta_decode((const char *)json.data, json.len, meta, err);
        if (rc != 0)
            strata_error_wrap(err, "%s", key);
    }
    strata_buffer_free(&json);
    return rc;
}

static uint64_t meta_data_size(const block_meta *meta) {
    for (size_t i = 0; i < meta->n_files; i++)
        if (strcmp(meta->files[i].rel_path, BLOCK_DATA_FILE) == 0)
            return meta->files[i].size_bytes;
    return 0;
}

static int cmd_ls(bucket *b, const bucket_args *a, strata_error *err) {
    name_list blocks = {0};
    int rc = list_blocks(b, a->tenant, &blocks, err);
    if (rc == 0)
        printf("%-40s %-13s %-13s %10s %12s\n", "BLOCK", "MIN_TIME_MS", "MAX_TIME_MS", "PROFILES",
               "BYTES");
    for (size_t i = 0; rc == 0 && i < blocks.count; i++) {
        block_meta meta;
        block_meta_init(&meta);
        bool partial;
        strata_error local;
        if (read_meta(b, blocks.names[i], &meta, &partial, &local) != 0)
            printf("%-40s unreadable meta.json: %s\n", blocks.names[i], local.message);
        else if (partial)
            printf("%-40s partial upload (no meta.json)\n", blocks.names[i]);
        else
            printf("%-40s %-13lld %-13lld %10llu %12llu\n", blocks.names[i],
                   (long long)meta.min_time_ms, (long long)meta.max_time_ms,
                   (unsigned long long)meta.num_profiles,
                   (unsigned long long)meta_data_size(&meta));
        block_meta_free(&meta);
    }
    name_list_free(&blocks);
    return rc;
}

/* ---- Verify -----------------------------------------------------------------------------------
 */

typedef struct fetch_ctx {
    bucket *b;
    const char *key;
} fetch_ctx;

static int fetch_range(void *ctx, uint64_t offset, uint64_t length, strata_buffer *out,
                       strata_error *err) {
    fetch_ctx *f = ctx;
    size_t before = out->len;
    if (bucket_get_range(f->b, f->key, offset, length, out, err) != 0)
        return -1;
    if (out->len - before != length)
        return strata_error_set(err, STRATA_DATA_LOSS, "%s: short read at %llu (%zu of %llu)",
                                f->key, (unsigned long long)offset, out->len - before,
                                (unsigned long long)length);
    return 0;
}

/* Touches every page of the symbol tables and strings. */
static int read_symbols(block_reader *r, strata_error *err) {
    uint32_t loc[1];
    size_t depth;
    block_location l;
    block_function f;
    block_mapping m;
    if ((block_reader_row_count(r, BLOCK_TABLE_STACKS) > 0 &&
         block_reader_stack(r, 0, loc, 1, &depth, err) != 0) ||
        (block_reader_row_count(r, BLOCK_TABLE_LOCATIONS) > 0 &&
         block_reader_location(r, 0, &l, err) != 0) ||
        (block_reader_row_count(r, BLOCK_TABLE_FUNCTIONS) > 0 &&
         block_reader_function(r, 0, &f, err) != 0) ||
        (block_reader_row_count(r, BLOCK_TABLE_MAPPINGS) > 0 &&
         block_reader_mapping(r, 0, &m, err) != 0))
        return -1;
    uint64_t strings = block_reader_row_count(r, BLOCK_TABLE_STRINGS);
    for (uint64_t i = 0; i < strings; i++) {
        const char *s;
        size_t len;
        if (block_reader_string(r, (uint32_t)i, &s, &len, err) != 0)
            return -1;
    }
    return 0;
}

static int read_everything(block_reader *r, const block_meta *meta, strata_error *err) {
    block_profile *profiles = NULL;
    size_t n = 0;
    block_samples samples = {0};
    int rc = block_reader_profiles(r, NULL, 0, INT64_MIN, INT64_MAX, &profiles, &n, err);
    if (rc == 0)
        rc = block_reader_read_samples(r, profiles, n, &samples, err);
    if (rc == 0)
        rc = read_symbols(r, err);
    if (rc == 0 && n != meta->num_profiles)
        rc = strata_error_set(err, STRATA_DATA_LOSS, "meta.json says %llu profiles, data has %zu",
                              (unsigned long long)meta->num_profiles, n);
    if (rc == 0 && block_reader_series_count(r) != meta->num_series)
        rc = strata_error_set(err, STRATA_DATA_LOSS, "meta.json says %llu series, data has %zu",
                              (unsigned long long)meta->num_series, block_reader_series_count(r));
    free(profiles);
    block_samples_free(&samples);
    return rc;
}

static int verify_block(bucket *b, const char *dir, const block_meta *meta, uint64_t *bytes,
                        strata_error *err) {
    char key[BUCKET_KEY_MAX + 1];
    snprintf(key, sizeof key, "%s/%s", dir, BLOCK_DATA_FILE);
    bucket_object_attributes attrs;
    if (bucket_attributes(b, key, &attrs, err) != 0)
        return -1;
    *bytes = attrs.size;
    uint64_t want = meta_data_size(meta);
    if (want != 0 && want != attrs.size)
        return strata_error_set(err, STRATA_DATA_LOSS, "%s is %llu bytes, meta.json says %llu", key,
                                (unsigned long long)attrs.size, (unsigned long long)want);
    fetch_ctx f = {.b = b, .key = key};
    block_reader *r = NULL;
    if (block_reader_open(fetch_range, &f, attrs.size, NULL, &r, err) != 0)
        return -1;
    int rc = read_everything(r, meta, err);
    block_reader_close(r);
    return rc;
}

/* Prints one line for dir; returns 1 when the block is damaged. */
static int verify_one(bucket *b, const char *dir) {
    block_meta meta;
    block_meta_init(&meta);
    bool partial = false;
    strata_error err;
    strata_error_clear(&err);
    uint64_t bytes = 0;
    int rc = read_meta(b, dir, &meta, &partial, &err);
    if (rc == 0 && !partial)
        rc = verify_block(b, dir, &meta, &bytes, &err);
    if (rc != 0)
        printf("FAIL     %s: %s: %s\n", dir, strata_status_name(err.code), err.message);
    else if (partial)
        printf("PARTIAL  %s: no meta.json (an unfinished upload; not visible to queries)\n", dir);
    else
        printf("OK       %s profiles=%llu series=%llu bytes=%llu\n", dir,
               (unsigned long long)meta.num_profiles, (unsigned long long)meta.num_series,
               (unsigned long long)bytes);
    block_meta_free(&meta);
    return rc != 0 ? 1 : 0;
}

static int cmd_verify(bucket *b, const bucket_args *a, int *damaged, strata_error *err) {
    name_list blocks = {0};
    int rc = 0;
    if (a->block != NULL)
        rc = collect(a->block, &blocks, err);
    else
        rc = list_blocks(b, a->tenant, &blocks, err);
    for (size_t i = 0; rc == 0 && i < blocks.count; i++)
        *damaged += verify_one(b, blocks.names[i]);
    if (rc == 0)
        printf("%zu block(s) checked, %d damaged\n", blocks.count, *damaged);
    name_list_free(&blocks);
    return rc;
}

/* ---- rm-block ---------------------------------------------------------------------------------
 */

static int cmd_rm_block(bucket *b, const bucket_args *a, strata_error *err) {
    if (a->block == NULL || strchr(a->block, '/') == NULL)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "rm-block needs a block as TENANT/ULID");
    char key[BUCKET_KEY_MAX + 1];
    snprintf(key, sizeof key, "%s/%s", a->block, BLOCK_META_FILE);
    bool exists = false;
    if (bucket_exists(b, key, &exists, err) != 0)
        return -1;
    if (exists && bucket_delete(b, key, err) != 0)
        return -1;
    name_list rest = {0};
    int rc = bucket_iterate(b, a->block, true, collect, &rest, err);
    for (size_t i = 0; rc == 0 && i < rest.count; i++)
        rc = bucket_delete(b, rest.names[i], err);
    if (rc == 0 && !exists && rest.count == 0)
        rc = strata_error_set(err, STRATA_NOT_FOUND, "no block %s", a->block);
    if (rc == 0)
        printf("deleted %s (%zu object%s)\n", a->block, rest.count + (exists ? 1 : 0),
               rest.count + (exists ? 1 : 0) == 1 ? "" : "s");
    name_list_free(&rest);
    return rc;
}

int cli_bucket(int argc, char **argv) {
    bucket_args a;
    if (parse_args(argc, argv, &a) != 0) {
        usage();
        return 2;
    }
    bool ls = strcmp(a.command, "ls") == 0, verify = strcmp(a.command, "verify") == 0;
    bool rm = strcmp(a.command, "rm-block") == 0;
    if (!ls && !verify && !rm) {
        usage();
        return 2;
    }
    strata_error err;
    strata_error_clear(&err);
    bucket *b = NULL;
    int damaged = 0;
    int rc = open_bucket(&a, &b, &err);
    if (rc == 0)
        rc = ls       ? cmd_ls(b, &a, &err)
             : verify ? cmd_verify(b, &a, &damaged, &err)
                      : cmd_rm_block(b, &a, &err);
    bucket_close(b);
    if (rc != 0) {
        fprintf(stderr, "strata bucket %s: %s: %s\n", a.command, strata_status_name(err.code),
                err.message);
        return 1;
    }
    return damaged > 0 ? 1 : 0;
}
