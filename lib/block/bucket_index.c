/*
 * bucket_index.c - see bucket_index.h.
 */
#include "block/bucket_index.h"

#include <stdlib.h>
#include <string.h>

#include "common/array.h"
#include "json/json.h"

void bucket_index_init(bucket_index *ix) {
    memset(ix, 0, sizeof *ix);
}

void bucket_index_free(bucket_index *ix) {
    for (size_t i = 0; i < ix->n_blocks; i++)
        block_meta_free(&ix->blocks[i]);
    free(ix->blocks);
    free(ix->marks);
    memset(ix, 0, sizeof *ix);
}

int bucket_index_add_block(bucket_index *ix, const block_meta *meta, strata_error *err) {
    if (STRATA_ARRAY_RESERVE_OR_OOM(ix->blocks, ix->cap_blocks, ix->n_blocks + 1, err) != 0)
        return -1;
    if (block_meta_copy(&ix->blocks[ix->n_blocks], meta, err) != 0)
        return -1;
    ix->n_blocks++;
    return 0;
}

int bucket_index_add_mark(bucket_index *ix, const ulid *id, int64_t deletion_time,
                          strata_error *err) {
    if (STRATA_ARRAY_RESERVE_OR_OOM(ix->marks, ix->cap_marks, ix->n_marks + 1, err) != 0)
        return -1;
    ix->marks[ix->n_marks++] = (bucket_index_mark){.id = *id, .deletion_time = deletion_time};
    return 0;
}

int64_t bucket_index_mark_time(const bucket_index *ix, const ulid *id) {
    for (size_t i = 0; i < ix->n_marks; i++)
        if (ulid_compare(&ix->marks[i].id, id) == 0)
            return ix->marks[i].deletion_time;
    return -1;
}

static int compare_metas(const void *a, const void *b) {
    return ulid_compare(&((const block_meta *)a)->id, &((const block_meta *)b)->id);
}

static int compare_marks(const void *a, const void *b) {
    return ulid_compare(&((const bucket_index_mark *)a)->id, &((const bucket_index_mark *)b)->id);
}

int bucket_index_encode(bucket_index *ix, strata_buffer *out, strata_error *err) {
    if (ix->n_blocks > 1)
        qsort(ix->blocks, ix->n_blocks, sizeof *ix->blocks, compare_metas);
    if (ix->n_marks > 1)
        qsort(ix->marks, ix->n_marks, sizeof *ix->marks, compare_marks);
    strata_buffer meta = STRATA_BUFFER_INIT;
    json_writer jw;
    json_writer_init(&jw, out);
    json_begin_object(&jw);
    json_key(&jw, "version");
    json_int(&jw, BUCKET_INDEX_VERSION);
    json_key(&jw, "updated_at");
    json_int(&jw, ix->updated_at);
    json_key(&jw, "blocks");
    json_begin_array(&jw);
    int rc = 0;
    for (size_t i = 0; i < ix->n_blocks && rc == 0; i++) {
        strata_buffer_reset(&meta);
        rc = block_meta_encode(&ix->blocks[i], &meta, err);
        if (rc == 0)
            json_raw(&jw, (const char *)meta.data, meta.len);
    }
    json_end_array(&jw);
    json_key(&jw, "block_deletion_marks");
    json_begin_array(&jw);
    for (size_t i = 0; i < ix->n_marks; i++) {
        char text[ULID_STRING_LEN + 1];
        ulid_format(&ix->marks[i].id, text);
        json_begin_object(&jw);
        json_key(&jw, "id");
        json_string(&jw, text);
        json_key(&jw, "deletion_time");
        json_int(&jw, ix->marks[i].deletion_time);
        json_end_object(&jw);
    }
    json_end_array(&jw);
    json_end_object(&jw);
    strata_buffer_free(&meta);
    if (rc != 0)
        return -1;
    return json_writer_finish(&jw) != 0 ? strata_error_oom(err) : 0;
}

static int decode_marks(const json_value *arr, bucket_index *ix, strata_error *err) {
    for (size_t i = 0; i < json_array_length(arr); i++) {
        const json_value *m = json_array_at(arr, i);
        const char *text;
        size_t len;
        int64_t when;
        ulid id;
        if (!json_get_string(json_object_get(m, "id"), &text, &len) ||
            ulid_parse(text, len, &id, err) != 0 ||
            !json_get_int64(json_object_get(m, "deletion_time"), &when))
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "bucket-index.json: block_deletion_marks[%zu]: want "
                                    "{\"id\": ULID, \"deletion_time\": integer}",
                                    i);
        if (bucket_index_add_mark(ix, &id, when, err) != 0)
            return -1;
    }
    return 0;
}

static int decode_root(const json_value *root, bucket_index *ix, strata_error *err) {
    int64_t version;
    const json_value *blocks = json_object_get(root, "blocks");
    const json_value *marks = json_object_get(root, "block_deletion_marks");
    if (json_value_type(root) != JSON_OBJECT ||
        !json_get_int64(json_object_get(root, "version"), &version))
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "bucket-index.json: not an object with a version");
    if (version != BUCKET_INDEX_VERSION)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "bucket-index.json: version %lld is not supported (expected %d)",
                                (long long)version, BUCKET_INDEX_VERSION);
    if (!json_get_int64(json_object_get(root, "updated_at"), &ix->updated_at) ||
        json_value_type(blocks) != JSON_ARRAY ||
        (marks != NULL && json_value_type(marks) != JSON_ARRAY))
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "bucket-index.json: want integer updated_at, arrays blocks and "
                                "block_deletion_marks");
    for (size_t i = 0; i < json_array_length(blocks); i++) {
        block_meta meta;
        if (block_meta_decode_value(json_array_at(blocks, i), &meta, err) != 0)
            return strata_error_wrap(err, "bucket-index.json: blocks[%zu]", i);
        int rc = bucket_index_add_block(ix, &meta, err);
        block_meta_free(&meta);
        if (rc != 0)
            return -1;
    }
    return marks == NULL ? 0 : decode_marks(marks, ix, err);
}

int bucket_index_decode(const char *json, size_t len, bucket_index *ix, strata_error *err) {
    bucket_index_init(ix);
    json_document *doc = NULL;
    if (json_parse(json, len, &doc, err) != 0)
        return strata_error_wrap(err, "bucket-index.json");
    int rc = decode_root(json_document_root(doc), ix, err);
    json_document_free(doc);
    if (rc != 0)
        bucket_index_free(ix);
    return rc;
}
