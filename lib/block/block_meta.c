/*
 * block_meta.c - meta.json and mark files, see block_meta.h.
 */
#include "block/block_meta.h"

#include <stdlib.h>
#include <string.h>

#include "block/block_format.h"
#include "json/json.h"

void block_meta_init(block_meta *meta) {
    memset(meta, 0, sizeof *meta);
    meta->version = BLOCK_META_VERSION;
    meta->format_version = BLOCK_FORMAT_VERSION;
}

static void free_strings(char **items, size_t n) {
    for (size_t i = 0; i < n; i++)
        free(items[i]);
    free(items);
}

void block_meta_free(block_meta *meta) {
    free(meta->sources);
    free(meta->parents);
    free(meta->tenant);
    for (size_t i = 0; i < meta->n_files; i++)
        free(meta->files[i].rel_path);
    free(meta->files);
    free_strings(meta->profile_types, meta->n_profile_types);
    free_strings(meta->label_names, meta->n_label_names);
    memset(meta, 0, sizeof *meta);
}

int block_meta_set_sources(block_meta *meta, const ulid *sources, size_t n, strata_error *err) {
    ulid *copy = malloc((n + 1) * sizeof *copy);
    if (copy == NULL)
        return strata_error_oom(err);
    if (n > 0)
        memcpy(copy, sources, n * sizeof *copy);
    free(meta->sources);
    meta->sources = copy;
    meta->n_sources = n;
    return 0;
}

int block_meta_set_parents(block_meta *meta, const block_meta_parent *parents, size_t n,
                           strata_error *err) {
    block_meta_parent *copy = malloc((n + 1) * sizeof *copy);
    if (copy == NULL)
        return strata_error_oom(err);
    if (n > 0)
        memcpy(copy, parents, n * sizeof *copy);
    free(meta->parents);
    meta->parents = copy;
    meta->n_parents = n;
    return 0;
}

static char *dup_or_null(const char *s, bool *failed) {
    if (s == NULL)
        return NULL;
    char *d = strdup(s);
    if (d == NULL)
        *failed = true;
    return d;
}

static char **dup_string_list(char *const *items, size_t n, bool *failed) {
    char **copy = calloc(n + 1, sizeof *copy);
    if (copy == NULL) {
        *failed = true;
        return NULL;
    }
    for (size_t i = 0; i < n; i++)
        copy[i] = dup_or_null(items[i], failed);
    return copy;
}

int block_meta_copy(block_meta *dst, const block_meta *src, strata_error *err) {
    bool failed = false;
    *dst = *src;
    dst->sources = NULL;
    dst->parents = NULL;
    dst->files = NULL;
    dst->n_files = 0;
    dst->tenant = dup_or_null(src->tenant, &failed);
    dst->profile_types = dup_string_list(src->profile_types, src->n_profile_types, &failed);
    dst->label_names = dup_string_list(src->label_names, src->n_label_names, &failed);
    if (failed || block_meta_set_sources(dst, src->sources, src->n_sources, err) != 0 ||
        block_meta_set_parents(dst, src->parents, src->n_parents, err) != 0)
        goto fail;
    dst->files = calloc(src->n_files + 1, sizeof *dst->files);
    if (dst->files == NULL)
        goto fail;
    for (size_t i = 0; i < src->n_files; i++) {
        dst->files[i].rel_path = dup_or_null(src->files[i].rel_path, &failed);
        dst->files[i].size_bytes = src->files[i].size_bytes;
        dst->n_files++;
    }
    if (failed)
        goto fail;
    return 0;
fail:
    block_meta_free(dst);
    return strata_error_oom(err);
}

/* ---- encoding --------------------------------------------------------------------------- */

static void write_ulid(json_writer *jw, const ulid *id) {
    char text[ULID_STRING_LEN + 1];
    ulid_format(id, text);
    json_string(jw, text);
}

static void write_string_array(json_writer *jw, const char *key, char *const *items, size_t n) {
    json_key(jw, key);
    json_begin_array(jw);
    for (size_t i = 0; i < n; i++)
        json_string(jw, items[i] == NULL ? "" : items[i]);
    json_end_array(jw);
}

static void write_compaction(json_writer *jw, const block_meta *m) {
    json_key(jw, "compaction");
    json_begin_object(jw);
    json_key(jw, "level");
    json_int(jw, m->compaction_level);
    json_key(jw, "sources");
    json_begin_array(jw);
    for (size_t i = 0; i < m->n_sources; i++)
        write_ulid(jw, &m->sources[i]);
    json_end_array(jw);
    if (m->n_parents > 0) {
        json_key(jw, "parents");
        json_begin_array(jw);
        for (size_t i = 0; i < m->n_parents; i++) {
            json_begin_object(jw);
            json_key(jw, "ulid");
            write_ulid(jw, &m->parents[i].id);
            json_key(jw, "minTime");
            json_int(jw, m->parents[i].min_time_ms);
            json_key(jw, "maxTime");
            json_int(jw, m->parents[i].max_time_ms);
            json_end_object(jw);
        }
        json_end_array(jw);
    }
    json_end_object(jw);
}

static void write_strata(json_writer *jw, const block_meta *m) {
    json_key(jw, "strata");
    json_begin_object(jw);
    json_key(jw, "version");
    json_int(jw, m->format_version);
    json_key(jw, "tenant");
    json_string(jw, m->tenant == NULL ? "" : m->tenant);
    json_key(jw, "files");
    json_begin_array(jw);
    for (size_t i = 0; i < m->n_files; i++) {
        json_begin_object(jw);
        json_key(jw, "rel_path");
        json_string(jw, m->files[i].rel_path == NULL ? "" : m->files[i].rel_path);
        json_key(jw, "size_bytes");
        json_uint(jw, m->files[i].size_bytes);
        json_end_object(jw);
    }
    json_end_array(jw);
    write_string_array(jw, "profile_types", m->profile_types, m->n_profile_types);
    write_string_array(jw, "label_names", m->label_names, m->n_label_names);
    json_end_object(jw);
}

int block_meta_encode(const block_meta *m, strata_buffer *out, strata_error *err) {
    json_writer jw;
    json_writer_init(&jw, out);
    json_begin_object(&jw);
    json_key(&jw, "ulid");
    write_ulid(&jw, &m->id);
    json_key(&jw, "minTime");
    json_int(&jw, m->min_time_ms);
    json_key(&jw, "maxTime");
    json_int(&jw, m->max_time_ms);
    json_key(&jw, "stats");
    json_begin_object(&jw);
    json_key(&jw, "numSamples");
    json_uint(&jw, m->num_samples);
    json_key(&jw, "numSeries");
    json_uint(&jw, m->num_series);
    json_key(&jw, "numProfiles");
    json_uint(&jw, m->num_profiles);
    json_end_object(&jw);
    write_compaction(&jw, m);
    json_key(&jw, "version");
    json_int(&jw, m->version);
    write_strata(&jw, m);
    json_end_object(&jw);
    if (json_writer_finish(&jw) != 0)
        return strata_error_oom(err);
    return 0;
}

/* ---- decoding --------------------------------------------------------------------------- */

/* Field readers: each fails with INVALID_ARGUMENT naming the field. */
static const json_value *field(const json_value *obj, const char *key, json_type type,
                               bool required, const char *where, strata_error *err) {
    const json_value *v = json_object_get(obj, key);
    if (v == NULL) {
        if (required)
            strata_error_set(err, STRATA_INVALID_ARGUMENT, "%s: missing field \"%s\"", where, key);
        return NULL;
    }
    if (json_value_type(v) != type) {
        strata_error_set(err, STRATA_INVALID_ARGUMENT, "%s: field \"%s\" has the wrong type", where,
                         key);
        return NULL;
    }
    return v;
}

static int get_int(const json_value *obj, const char *key, int64_t *out, const char *where,
                   strata_error *err) {
    const json_value *v = field(obj, key, JSON_NUMBER, true, where, err);
    if (v == NULL)
        return -1;
    if (!json_get_int64(v, out))
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "%s: field \"%s\" is not a 64-bit integer", where, key);
    return 0;
}

static int get_uint(const json_value *obj, const char *key, uint64_t *out, const char *where,
                    strata_error *err) {
    int64_t v;
    if (get_int(obj, key, &v, where, err) != 0)
        return -1;
    if (v < 0)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "%s: field \"%s\" is negative", where,
                                key);
    *out = (uint64_t)v;
    return 0;
}

static int parse_ulid_value(const json_value *v, ulid *out, const char *where, strata_error *err) {
    const char *s;
    size_t len;
    if (!json_get_string(v, &s, &len))
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "%s: expected a ULID string", where);
    if (ulid_parse(s, len, out, err) != 0)
        return strata_error_wrap(err, "%s", where);
    return 0;
}

static int get_ulid(const json_value *obj, const char *key, ulid *out, const char *where,
                    strata_error *err) {
    const json_value *v = field(obj, key, JSON_STRING, true, where, err);
    if (v == NULL)
        return -1;
    return parse_ulid_value(v, out, where, err);
}

/* Optional string; *out NULL when absent. */
static int get_opt_string(const json_value *obj, const char *key, char **out, const char *where,
                          strata_error *err) {
    const char *s;
    *out = NULL;
    const json_value *v = json_object_get(obj, key);
    if (v == NULL)
        return 0;
    if (!json_get_string(v, &s, NULL))
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "%s: field \"%s\" is not a string",
                                where, key);
    *out = strdup(s);
    return *out == NULL ? strata_error_oom(err) : 0;
}

static int get_string_list(const json_value *obj, const char *key, char ***out, size_t *n,
                           strata_error *err) {
    const json_value *arr = json_object_get(obj, key);
    if (arr == NULL)
        return 0;
    if (json_value_type(arr) != JSON_ARRAY)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "meta.json: strata.%s is not an array", key);
    size_t len = json_array_length(arr);
    *out = calloc(len + 1, sizeof **out);
    if (*out == NULL)
        return strata_error_oom(err);
    for (size_t i = 0; i < len; i++) {
        const char *s;
        if (!json_get_string(json_array_at(arr, i), &s, NULL))
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "meta.json: strata.%s[%zu] is not a string", key, i);
        if (((*out)[i] = strdup(s)) == NULL)
            return strata_error_oom(err);
        (*n)++;
    }
    return 0;
}

static int decode_stats(const json_value *root, block_meta *m, strata_error *err) {
    const json_value *stats = field(root, "stats", JSON_OBJECT, true, "meta.json", err);
    if (stats == NULL)
        return -1;
    if (get_uint(stats, "numSamples", &m->num_samples, "meta.json stats", err) != 0 ||
        get_uint(stats, "numSeries", &m->num_series, "meta.json stats", err) != 0 ||
        get_uint(stats, "numProfiles", &m->num_profiles, "meta.json stats", err) != 0)
        return -1;
    return 0;
}

static int decode_parents(const json_value *arr, block_meta *m, strata_error *err) {
    size_t n = json_array_length(arr);
    m->parents = calloc(n + 1, sizeof *m->parents);
    if (m->parents == NULL)
        return strata_error_oom(err);
    for (size_t i = 0; i < n; i++) {
        const json_value *p = json_array_at(arr, i);
        if (json_value_type(p) != JSON_OBJECT)
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "meta.json compaction.parents[%zu] is not an object", i);
        block_meta_parent *out = &m->parents[i];
        if (get_ulid(p, "ulid", &out->id, "meta.json compaction.parents", err) != 0 ||
            get_int(p, "minTime", &out->min_time_ms, "meta.json compaction.parents", err) != 0 ||
            get_int(p, "maxTime", &out->max_time_ms, "meta.json compaction.parents", err) != 0)
            return -1;
        m->n_parents++;
    }
    return 0;
}

static int decode_compaction(const json_value *root, block_meta *m, strata_error *err) {
    const char *where = "meta.json compaction";
    const json_value *c = field(root, "compaction", JSON_OBJECT, true, "meta.json", err);
    int64_t level;
    if (c == NULL || get_int(c, "level", &level, where, err) != 0)
        return -1;
    if (level < 0 || level > 1000)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "%s: level %lld is out of range",
                                where, (long long)level);
    m->compaction_level = (int)level;
    const json_value *sources = field(c, "sources", JSON_ARRAY, false, where, err);
    if (sources == NULL && json_object_get(c, "sources") != NULL)
        return -1;
    size_t n = sources == NULL ? 0 : json_array_length(sources);
    m->sources = calloc(n + 1, sizeof *m->sources);
    if (m->sources == NULL)
        return strata_error_oom(err);
    for (size_t i = 0; i < n; i++) {
        if (parse_ulid_value(json_array_at(sources, i), &m->sources[i], "meta.json sources", err) !=
            0)
            return -1;
        m->n_sources++;
    }
    const json_value *parents = field(c, "parents", JSON_ARRAY, false, where, err);
    if (parents == NULL)
        return json_object_get(c, "parents") != NULL ? -1 : 0;
    return decode_parents(parents, m, err);
}

static int decode_files(const json_value *s, block_meta *m, strata_error *err) {
    const json_value *files = field(s, "files", JSON_ARRAY, false, "meta.json strata", err);
    if (files == NULL)
        return json_object_get(s, "files") != NULL ? -1 : 0;
    size_t n = json_array_length(files);
    m->files = calloc(n + 1, sizeof *m->files);
    if (m->files == NULL)
        return strata_error_oom(err);
    for (size_t i = 0; i < n; i++) {
        const json_value *f = json_array_at(files, i);
        const json_value *path =
            field(f, "rel_path", JSON_STRING, true, "meta.json strata.files", err);
        const char *text;
        if (path == NULL || !json_get_string(path, &text, NULL))
            return -1;
        if ((m->files[i].rel_path = strdup(text)) == NULL)
            return strata_error_oom(err);
        m->n_files++;
        if (get_uint(f, "size_bytes", &m->files[i].size_bytes, "meta.json strata.files", err) != 0)
            return -1;
    }
    return 0;
}

static int decode_strata(const json_value *root, block_meta *m, strata_error *err) {
    const json_value *s = field(root, "strata", JSON_OBJECT, true, "meta.json", err);
    int64_t version;
    if (s == NULL || get_int(s, "version", &version, "meta.json strata", err) != 0)
        return -1;
    if (version < BLOCK_FORMAT_VERSION_MIN || version > BLOCK_FORMAT_VERSION)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "meta.json: block format version %lld is not supported (this "
                                "build reads versions %d to %d); upgrade Strata",
                                (long long)version, BLOCK_FORMAT_VERSION_MIN, BLOCK_FORMAT_VERSION);
    m->format_version = (int)version;
    if (get_opt_string(s, "tenant", &m->tenant, "meta.json strata", err) != 0 ||
        decode_files(s, m, err) != 0 ||
        get_string_list(s, "profile_types", &m->profile_types, &m->n_profile_types, err) != 0)
        return -1;
    return get_string_list(s, "label_names", &m->label_names, &m->n_label_names, err);
}

static int decode_meta_root(const json_value *root, block_meta *m, strata_error *err) {
    if (json_value_type(root) != JSON_OBJECT)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "meta.json: not a JSON object");
    int64_t version;
    if (get_int(root, "version", &version, "meta.json", err) != 0)
        return -1;
    if (version != BLOCK_META_VERSION)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "meta.json: version %lld is not supported (expected %d)",
                                (long long)version, BLOCK_META_VERSION);
    m->version = (int)version;
    if (get_ulid(root, "ulid", &m->id, "meta.json", err) != 0 ||
        get_int(root, "minTime", &m->min_time_ms, "meta.json", err) != 0 ||
        get_int(root, "maxTime", &m->max_time_ms, "meta.json", err) != 0 ||
        decode_stats(root, m, err) != 0 || decode_compaction(root, m, err) != 0)
        return -1;
    return decode_strata(root, m, err);
}

static int parse_json(const char *json, size_t len, const char *what, json_document **doc,
                      strata_error *err) {
    if (json_parse(json, len, doc, err) != 0)
        return strata_error_wrap(err, "%s", what);
    return 0;
}

int block_meta_decode(const char *json, size_t len, block_meta *meta, strata_error *err) {
    block_meta_init(meta);
    json_document *doc = NULL;
    if (parse_json(json, len, "meta.json", &doc, err) != 0)
        return -1;
    int rc = decode_meta_root(json_document_root(doc), meta, err);
    json_document_free(doc);
    if (rc != 0)
        block_meta_free(meta);
    return rc;
}

int block_meta_decode_value(const json_value *value, block_meta *meta, strata_error *err) {
    block_meta_init(meta);
    int rc = decode_meta_root(value, meta, err);
    if (rc != 0)
        block_meta_free(meta);
    return rc;
}

/* ---- mark files ------------------------------------------------------------------------- */

int block_deletion_mark_encode(const block_deletion_mark *mark, strata_buffer *out,
                               strata_error *err) {
    json_writer jw;
    json_writer_init(&jw, out);
    json_begin_object(&jw);
    json_key(&jw, "id");
    write_ulid(&jw, &mark->id);
    json_key(&jw, "version");
    json_int(&jw, BLOCK_MARK_VERSION);
    json_key(&jw, "details");
    json_string(&jw, mark->details == NULL ? "" : mark->details);
    json_key(&jw, "deletion_time");
    json_int(&jw, mark->deletion_time);
    json_end_object(&jw);
    return json_writer_finish(&jw) != 0 ? strata_error_oom(err) : 0;
}

static int decode_mark_common(const json_value *root, const char *what, ulid *id,
                              const char *time_key, int64_t *time, char **details,
                              strata_error *err) {
    if (json_value_type(root) != JSON_OBJECT)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "%s: not a JSON object", what);
    int64_t version;
    if (get_int(root, "version", &version, what, err) != 0)
        return -1;
    if (version != BLOCK_MARK_VERSION)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "%s: version %lld is not supported (expected %d)", what,
                                (long long)version, BLOCK_MARK_VERSION);
    if (get_ulid(root, "id", id, what, err) != 0 || get_int(root, time_key, time, what, err) != 0)
        return -1;
    return get_opt_string(root, "details", details, what, err);
}

int block_deletion_mark_decode(const char *json, size_t len, block_deletion_mark *mark,
                               strata_error *err) {
    memset(mark, 0, sizeof *mark);
    json_document *doc = NULL;
    if (parse_json(json, len, "deletion-mark.json", &doc, err) != 0)
        return -1;
    int rc = decode_mark_common(json_document_root(doc), "deletion-mark.json", &mark->id,
                                "deletion_time", &mark->deletion_time, &mark->details, err);
    json_document_free(doc);
    if (rc != 0)
        block_deletion_mark_free(mark);
    return rc;
}

void block_deletion_mark_free(block_deletion_mark *mark) {
    free(mark->details);
    memset(mark, 0, sizeof *mark);
}

int block_no_compact_mark_encode(const block_no_compact_mark *mark, strata_buffer *out,
                                 strata_error *err) {
    json_writer jw;
    json_writer_init(&jw, out);
    json_begin_object(&jw);
    json_key(&jw, "id");
    write_ulid(&jw, &mark->id);
    json_key(&jw, "version");
    json_int(&jw, BLOCK_MARK_VERSION);
    json_key(&jw, "details");
    json_string(&jw, mark->details == NULL ? "" : mark->details);
    json_key(&jw, "no_compact_time");
    json_int(&jw, mark->no_compact_time);
    json_key(&jw, "reason");
    json_string(&jw, mark->reason == NULL ? "manual" : mark->reason);
    json_end_object(&jw);
    return json_writer_finish(&jw) != 0 ? strata_error_oom(err) : 0;
}

int block_no_compact_mark_decode(const char *json, size_t len, block_no_compact_mark *mark,
                                 strata_error *err) {
    memset(mark, 0, sizeof *mark);
    json_document *doc = NULL;
    if (parse_json(json, len, "no-compact-mark.json", &doc, err) != 0)
        return -1;
    const json_value *root = json_document_root(doc);
    int rc = decode_mark_common(root, "no-compact-mark.json", &mark->id, "no_compact_time",
                                &mark->no_compact_time, &mark->details, err);
    if (rc == 0)
        rc = get_opt_string(root, "reason", &mark->reason, "no-compact-mark.json", err);
    json_document_free(doc);
    if (rc != 0)
        block_no_compact_mark_free(mark);
    return rc;
}

void block_no_compact_mark_free(block_no_compact_mark *mark) {
    free(mark->reason);
    free(mark->details);
    memset(mark, 0, sizeof *mark);
}
