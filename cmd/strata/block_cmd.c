/*
 * block_cmd.c - `strata block dump PATH [--json] [--top N]`: prints a block stored in a local
 * directory (a filesystem bucket's <tenant>/<ULID>/). The text form is lib/block's dump; --json
 * prints every series and profile with its total, sample count and the functions its stacks
 * touch, for scripts and tests.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "block/block_dump.h"
#include "block/block_format.h"
#include "block/block_meta.h"
#include "block/block_reader.h"
#include "cli.h"
#include "common/hash.h"
#include "json/json.h"

/* Deeper than any stack the ingester accepts (max_stack_depth defaults to 1,024). */
#define DUMP_MAX_STACK_DEPTH 8192

typedef struct local_file {
    int fd;
    uint64_t size;
} local_file;

static int local_file_fetch(void *ctx, uint64_t offset, uint64_t length, strata_buffer *out,
                            strata_error *err) {
    local_file *f = ctx;
    strata_buffer_reset(out);
    if (strata_buffer_reserve(out, length) != 0)
        return strata_error_oom(err);
    while (out->len < length) {
        ssize_t n =
            pread(f->fd, out->data + out->len, length - out->len, (off_t)(offset + out->len));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return strata_error_set(err, STRATA_UNAVAILABLE, "read failed: %s", strerror(errno));
        if (n == 0)
            return strata_error_set(err, STRATA_OUT_OF_RANGE, "read past the end of the block");
        out->len += (size_t)n;
    }
    return 0;
}

static int read_whole_file(const char *path, strata_buffer *out, strata_error *err) {
    FILE *fp = fopen(path, "rb");
    if (fp == NULL)
        return strata_error_set(err, STRATA_NOT_FOUND, "cannot open %s: %s", path, strerror(errno));
    char chunk[65536];
    size_t n;
    int rc = 0;
    while ((n = fread(chunk, 1, sizeof chunk, fp)) > 0)
        if (strata_buffer_append(out, chunk, n) != 0) {
            rc = strata_error_oom(err);
            break;
        }
    fclose(fp);
    return rc;
}

/* Adds the names of every function on stack_id to names (interned, so each once). */
static int collect_stack_functions(block_reader *r, uint32_t stack_id, strata_intern *names,
                                   strata_error *err) {
    static _Thread_local uint32_t locations[DUMP_MAX_STACK_DEPTH];
    size_t depth;
    if (block_reader_stack(r, stack_id, locations, DUMP_MAX_STACK_DEPTH, &depth, err) != 0)
        return -1;
    for (size_t i = 0; i < depth; i++) {
        block_location loc;
        if (block_reader_location(r, locations[i], &loc, err) != 0)
            return -1;
        for (uint32_t l = 0; l < loc.n_lines; l++) {
            block_function fn;
            uint32_t id;
            if (block_reader_function(r, loc.lines[l].function_id, &fn, err) != 0 ||
                strata_intern_add(names, fn.name, strlen(fn.name), &id) != 0)
                return -1;
        }
    }
    return 0;
}

static int compare_strings(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int write_profile_json(block_reader *r, const block_profile *p, json_writer *w,
                              strata_error *err) {
    block_samples samples = {0};
    strata_intern names;
    if (strata_intern_init(&names) != 0)
        return strata_error_oom(err);
    int rc = -1;
    if (block_reader_read_samples(r, p, 1, &samples, err) != 0)
        goto out;
    for (size_t i = 0; i < samples.len; i++)
        if (collect_stack_functions(r, samples.stacks[i], &names, err) != 0)
            goto out;
    if (names.count > 1) /* an address-only profile names nothing: no qsort of NULL */
        qsort(names.strings, names.count, sizeof *names.strings, compare_strings);
    json_begin_object(w);
    json_key(w, "series");
    json_uint(w, p->series_id);
    json_key(w, "time_ns");
    json_int(w, p->time_ns);
    json_key(w, "duration_ns");
    json_int(w, p->duration_ns);
    json_key(w, "period");
    json_int(w, p->period);
    json_key(w, "total");
    json_int(w, p->total);
    json_key(w, "samples");
    json_uint(w, p->sample_count);
    json_key(w, "functions");
    json_begin_array(w);
    for (size_t i = 0; i < names.count; i++)
        json_string(w, names.strings[i]);
    json_end_array(w);
    json_end_object(w);
    rc = 0;
out:
    block_samples_free(&samples);
    strata_intern_free(&names); /* qsort only reordered the id->string table */
    return rc;
}

static void write_series_json(block_reader *r, json_writer *w) {
    json_begin_array(w);
    for (uint32_t id = 0; id < block_reader_series_count(r); id++) {
        const label_set *labels = block_reader_series_labels(r, id);
        const profile_type *type = block_reader_series_type(r, id);
        strata_buffer t = STRATA_BUFFER_INIT;
        profile_type_format(type, &t);
        json_begin_object(w);
        json_key(w, "id");
        json_uint(w, id);
        json_key(w, "type");
        json_string_len(w, (const char *)t.data, t.len);
        json_key(w, "labels");
        json_begin_object(w);
        for (size_t i = 0; i < labels->count; i++) {
            json_key(w, labels->labels[i].name);
            json_string(w, labels->labels[i].value);
        }
        json_end_object(w);
        json_end_object(w);
        strata_buffer_free(&t);
    }
    json_end_array(w);
}

static int dump_json(block_reader *r, const strata_buffer *meta_json, strata_error *err) {
    strata_buffer out = STRATA_BUFFER_INIT;
    json_writer w;
    json_writer_init(&w, &out);
    size_t n_series = block_reader_series_count(r);
    uint32_t *ids = calloc(n_series + 1, sizeof *ids);
    block_profile *profiles = NULL;
    size_t n_profiles = 0;
    int rc = -1;
    if (ids == NULL) {
        strata_error_oom(err);
        goto out;
    }
    for (uint32_t i = 0; i < n_series; i++)
        ids[i] = i;
    if (block_reader_profiles(r, ids, n_series, INT64_MIN, INT64_MAX, &profiles, &n_profiles,
                              err) != 0)
        goto out;
    json_begin_object(&w);
    json_key(&w, "meta");
    json_raw(&w, (const char *)meta_json->data, meta_json->len);
    json_key(&w, "series");
    write_series_json(r, &w);
    json_key(&w, "profiles");
    json_begin_array(&w);
    for (size_t i = 0; i < n_profiles; i++)
        if (write_profile_json(r, &profiles[i], &w, err) != 0)
            goto out;
    json_end_array(&w);
    json_end_object(&w);
    if (json_writer_finish(&w) != 0) {
        strata_error_oom(err);
        goto out;
    }
    fwrite(out.data, 1, out.len, stdout);
    fputc('\n', stdout);
    rc = 0;
out:
    free(ids);
    free(profiles);
    strata_buffer_free(&out);
    return rc;
}

typedef struct dump_args {
    const char *path;
    bool json;
    int top;
} dump_args;

static int parse_dump_args(int argc, char **argv, dump_args *a, strata_error *err) {
    a->top = 10;
    for (int i = 1; i < argc; i++) {
        if (cli_flag_is(argv[i], "json"))
            a->json = true;
        else if (cli_flag_is(argv[i], "top") && i + 1 < argc) {
            if (cli_count_flag(argv[i], argv[i + 1], &a->top, err) != 0)
                return -1;
            i++;
        } else if (argv[i][0] != '-' && a->path == NULL)
            a->path = argv[i];
        else
            return strata_error_set(err, STRATA_INVALID_ARGUMENT, "unexpected argument \"%s\"",
                                    argv[i]);
    }
    if (a->path == NULL)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "PATH is required");
    return 0;
}

static int dump_block(const dump_args *a, strata_error *err) {
    char path[4096];
    strata_buffer meta_json = STRATA_BUFFER_INIT;
    block_meta meta;
    block_meta_init(&meta);
    local_file f = {-1, 0};
    block_reader *r = NULL;
    int rc = -1;
    snprintf(path, sizeof path, "%s/%s", a->path, BLOCK_META_FILE);
    if (read_whole_file(path, &meta_json, err) != 0 ||
        block_meta_decode((const char *)meta_json.data, meta_json.len, &meta, err) != 0)
        goto out;
    snprintf(path, sizeof path, "%s/%s", a->path, BLOCK_DATA_FILE);
    struct stat st;
    if ((f.fd = open(path, O_RDONLY | O_CLOEXEC)) < 0 || fstat(f.fd, &st) != 0) {
        strata_error_set(err, STRATA_NOT_FOUND, "cannot open %s: %s", path, strerror(errno));
        goto out;
    }
    f.size = (uint64_t)st.st_size;
    block_reader_options opts;
    block_reader_options_default(&opts);
    if (block_reader_open(local_file_fetch, &f, f.size, &opts, &r, err) != 0)
        goto out;
    if (a->json) {
        rc = dump_json(r, &meta_json, err);
    } else {
        block_dump_options dopts;
        block_dump_options_default(&dopts);
        dopts.top_stacks = (size_t)(a->top > 0 ? a->top : 0);
        rc = block_dump(r, &meta, stdout, &dopts, err);
    }
out:
    block_reader_close(r);
    if (f.fd >= 0)
        close(f.fd);
    block_meta_free(&meta);
    strata_buffer_free(&meta_json);
    return rc;
}

int cli_block(int argc, char **argv) {
    if (argc < 1 || strcmp(argv[0], "dump") != 0) {
        fprintf(stderr, "usage: strata block dump PATH [--json] [--top N]\n");
        return 2;
    }
    dump_args a = {0};
    strata_error err;
    strata_error_clear(&err);
    if (parse_dump_args(argc, argv, &a, &err) != 0) {
        fprintf(stderr, "strata block dump: %s\n", err.message);
        return 2;
    }
    if (dump_block(&a, &err) != 0) {
        fprintf(stderr, "strata block dump: %s: %s\n", strata_status_name(err.code), err.message);
        return 1;
    }
    return 0;
}
