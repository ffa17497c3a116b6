/*
 * pprof_encode.c - canonical protobuf for a pprof_profile. See pprof.h.
 *
 * Encoding. Fields are written in field-number order, repeated scalars packed, and scalar fields
 * equal to zero omitted, as proto3 encoders do; the string table is written entry by entry as given
 * (including the leading ""). Every message is sized before it is written, so lengths are exact
 * minimal varints and the output buffer is grown once per message rather than once per field: the
 * writers below put bytes through a raw cursor into room reserved by the caller.
 *
 * All field numbers in profile.proto are below 16, so every field key is a single byte.
 */
#include "pprof/pprof.h"

#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "common/protobuf_writer.h"

/* Every field number here is below 16: keys are one byte (strata_pb_key_size). */

static size_t varint_field_size(uint64_t v) {
    return strata_pb_varint_field_size(1, v);
}

static size_t len_field_size(size_t len) {
    return strata_pb_len_field_size(1, len);
}

/* Reserves room for one field of payload size `len` (key and length included) and returns the
 * cursor, or NULL when out of memory. */
static uint8_t *begin_field(strata_buffer *b, size_t len) {
    if (strata_buffer_reserve(b, len_field_size(len)) != 0)
        return NULL;
    return b->data + b->len;
}

static void end_field(strata_buffer *b, const uint8_t *cursor) {
    b->len = (size_t)(cursor - b->data);
}

static size_t packed_u64_size(const uint64_t *values, size_t n) {
    size_t size = 0;
    for (size_t i = 0; i < n; i++)
        size += strata_pb_varint_size(values[i]);
    return size;
}

static size_t packed_i64_size(const int64_t *values, size_t n) {
    size_t size = 0;
    for (size_t i = 0; i < n; i++)
        size += strata_pb_varint_size((uint64_t)values[i]);
    return size;
}

/* A packed field; nothing when n is 0. `size` is packed_*_size of the values. */
static uint8_t *put_packed_u64(uint8_t *o, unsigned field, const uint64_t *values, size_t n,
                               size_t size) {
    if (n == 0)
        return o;
    o = strata_pb_put_len_key(o, field, size);
    for (size_t i = 0; i < n; i++)
        o += strata_uvarint_put(o, values[i]);
    return o;
}

static uint8_t *put_packed_i64(uint8_t *o, unsigned field, const int64_t *values, size_t n,
                               size_t size) {
    if (n == 0)
        return o;
    o = strata_pb_put_len_key(o, field, size);
    for (size_t i = 0; i < n; i++)
        o += strata_uvarint_put(o, (uint64_t)values[i]);
    return o;
}

static size_t packed_field_size(size_t n, size_t size) {
    return n == 0 ? 0 : len_field_size(size);
}

static int encode_oom(strata_error *err) {
    return strata_error_oom(err);
}

/* ---- messages ------------------------------------------------------------------------------- */

static size_t value_type_size(const pprof_value_type *vt) {
    return varint_field_size((uint64_t)vt->type) + varint_field_size((uint64_t)vt->unit);
}

static int put_value_type(strata_buffer *b, unsigned field, const pprof_value_type *vt) {
    size_t size = value_type_size(vt);
    uint8_t *o = begin_field(b, size);
    if (o == NULL)
        return -1;
    o = strata_pb_put_len_key(o, field, size);
    o = strata_pb_put_varint_field(o, 1, (uint64_t)vt->type);
    o = strata_pb_put_varint_field(o, 2, (uint64_t)vt->unit);
    end_field(b, o);
    return 0;
}

static size_t label_size(const pprof_label *l) {
    return varint_field_size((uint64_t)l->key) + varint_field_size((uint64_t)l->str) +
           varint_field_size((uint64_t)l->num) + varint_field_size((uint64_t)l->num_unit);
}

static uint8_t *put_label(uint8_t *o, const pprof_label *l) {
    o = strata_pb_put_len_key(o, 3, label_size(l));
    o = strata_pb_put_varint_field(o, 1, (uint64_t)l->key);
    o = strata_pb_put_varint_field(o, 2, (uint64_t)l->str);
    o = strata_pb_put_varint_field(o, 3, (uint64_t)l->num);
    return strata_pb_put_varint_field(o, 4, (uint64_t)l->num_unit);
}

static int put_sample(strata_buffer *b, const pprof_profile *p, const pprof_sample *s) {
    /* Arrays may be NULL when empty, and NULL + offset is undefined even for offset 0. */
    const uint64_t *ids =
        s->location_count > 0 ? p->sample_location_ids + s->location_offset : NULL;
    const int64_t *values = p->n_sample_types > 0 ? p->sample_values + s->value_offset : NULL;
    const pprof_label *labels = s->label_count > 0 ? p->sample_labels + s->label_offset : NULL;
    size_t ids_size = packed_u64_size(ids, s->location_count);
    size_t values_size = packed_i64_size(values, p->n_sample_types);
    size_t size = packed_field_size(s->location_count, ids_size) +
                  packed_field_size(p->n_sample_types, values_size);
    for (uint32_t i = 0; i < s->label_count; i++)
        size += len_field_size(label_size(&labels[i]));
    uint8_t *o = begin_field(b, size);
    if (o == NULL)
        return -1;
    o = strata_pb_put_len_key(o, 2, size);
    o = put_packed_u64(o, 1, ids, s->location_count, ids_size);
    o = put_packed_i64(o, 2, values, p->n_sample_types, values_size);
    for (uint32_t i = 0; i < s->label_count; i++)
        o = put_label(o, &labels[i]);
    end_field(b, o);
    return 0;
}

static size_t mapping_size(const pprof_mapping *m) {
    return varint_field_size(m->id) + varint_field_size(m->memory_start) +
           varint_field_size(m->memory_limit) + varint_field_size(m->file_offset) +
           varint_field_size((uint64_t)m->filename) + varint_field_size((uint64_t)m->build_id) +
           varint_field_size(m->has_functions) + varint_field_size(m->has_filenames) +
           varint_field_size(m->has_line_numbers) + varint_field_size(m->has_inline_frames);
}

static int put_mapping(strata_buffer *b, const pprof_mapping *m) {
    size_t size = mapping_size(m);
    uint8_t *o = begin_field(b, size);
    if (o == NULL)
        return -1;
    o = strata_pb_put_len_key(o, 3, size);
    o = strata_pb_put_varint_field(o, 1, m->id);
    o = strata_pb_put_varint_field(o, 2, m->memory_start);
    o = strata_pb_put_varint_field(o, 3, m->memory_limit);
    o = strata_pb_put_varint_field(o, 4, m->file_offset);
    o = strata_pb_put_varint_field(o, 5, (uint64_t)m->filename);
    o = strata_pb_put_varint_field(o, 6, (uint64_t)m->build_id);
    o = strata_pb_put_varint_field(o, 7, m->has_functions);
    o = strata_pb_put_varint_field(o, 8, m->has_filenames);
    o = strata_pb_put_varint_field(o, 9, m->has_line_numbers);
    o = strata_pb_put_varint_field(o, 10, m->has_inline_frames);
    end_field(b, o);
    return 0;
}

static size_t line_size(const pprof_line *l) {
    return varint_field_size(l->function_id) + varint_field_size((uint64_t)l->line) +
           varint_field_size((uint64_t)l->column);
}

static int put_location(strata_buffer *b, const pprof_profile *p, const pprof_location *loc) {
    const pprof_line *lines = loc->line_count > 0 ? p->lines + loc->line_offset : NULL;
    size_t size = varint_field_size(loc->id) + varint_field_size(loc->mapping_id) +
                  varint_field_size(loc->address) + varint_field_size(loc->is_folded);
    for (uint32_t i = 0; i < loc->line_count; i++)
        size += len_field_size(line_size(&lines[i]));
    uint8_t *o = begin_field(b, size);
    if (o == NULL)
        return -1;
    o = strata_pb_put_len_key(o, 4, size);
    o = strata_pb_put_varint_field(o, 1, loc->id);
    o = strata_pb_put_varint_field(o, 2, loc->mapping_id);
    o = strata_pb_put_varint_field(o, 3, loc->address);
    for (uint32_t i = 0; i < loc->line_count; i++) {
        o = strata_pb_put_len_key(o, 4, line_size(&lines[i]));
        o = strata_pb_put_varint_field(o, 1, lines[i].function_id);
        o = strata_pb_put_varint_field(o, 2, (uint64_t)lines[i].line);
        o = strata_pb_put_varint_field(o, 3, (uint64_t)lines[i].column);
    }
    o = strata_pb_put_varint_field(o, 5, loc->is_folded);
    end_field(b, o);
    return 0;
}

static int put_function(strata_buffer *b, const pprof_function *f) {
    size_t size = varint_field_size(f->id) + varint_field_size((uint64_t)f->name) +
                  varint_field_size((uint64_t)f->system_name) +
                  varint_field_size((uint64_t)f->filename) +
                  varint_field_size((uint64_t)f->start_line);
    uint8_t *o = begin_field(b, size);
    if (o == NULL)
        return -1;
    o = strata_pb_put_len_key(o, 5, size);
    o = strata_pb_put_varint_field(o, 1, f->id);
    o = strata_pb_put_varint_field(o, 2, (uint64_t)f->name);
    o = strata_pb_put_varint_field(o, 3, (uint64_t)f->system_name);
    o = strata_pb_put_varint_field(o, 4, (uint64_t)f->filename);
    o = strata_pb_put_varint_field(o, 5, (uint64_t)f->start_line);
    end_field(b, o);
    return 0;
}

static int put_string(strata_buffer *b, const pprof_string *s) {
    uint8_t *o = begin_field(b, s->len);
    if (o == NULL)
        return -1;
    o = strata_pb_put_len_key(o, 6, s->len);
    if (s->len > 0)
        memcpy(o, s->ptr, s->len);
    end_field(b, o + s->len);
    return 0;
}

static int put_scalar(strata_buffer *b, unsigned field, uint64_t v) {
    if (strata_buffer_reserve(b, 11) != 0)
        return -1;
    end_field(b, strata_pb_put_varint_field(b->data + b->len, field, v));
    return 0;
}

static int put_comments(strata_buffer *b, const pprof_profile *p) {
    size_t size = packed_i64_size(p->comments, p->n_comments);
    if (p->n_comments == 0)
        return 0;
    uint8_t *o = begin_field(b, size);
    if (o == NULL)
        return -1;
    end_field(b, put_packed_i64(o, 13, p->comments, p->n_comments, size));
    return 0;
}

/* ---- the Profile message -------------------------------------------------------------------- */

static int check_range(size_t offset, size_t count, size_t n, const char *what, size_t index,
                       const char *array, strata_error *err) {
    if (offset <= n && count <= n - offset)
        return 0;
    return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                            "%s %zu: entries [%zu, %zu) are outside %s (%zu entries)", what, index,
                            offset, offset + count, array, n);
}

/* The encoder trusts ids and string indexes but not offsets, which would make it read out of
 * bounds. (sample_values has no count to check against.) */
static int check_offsets(const pprof_profile *p, strata_error *err) {
    for (size_t i = 0; i < p->n_samples; i++) {
        const pprof_sample *s = &p->samples[i];
        if (check_range(s->location_offset, s->location_count, p->n_sample_location_ids, "sample",
                        i, "sample_location_ids", err) != 0 ||
            check_range(s->label_offset, s->label_count, p->n_sample_labels, "sample", i,
                        "sample_labels", err) != 0)
            return -1;
    }
    for (size_t i = 0; i < p->n_locations; i++) {
        const pprof_location *loc = &p->locations[i];
        if (check_range(loc->line_offset, loc->line_count, p->n_lines, "location", i, "lines",
                        err) != 0)
            return -1;
    }
    if (p->n_samples > 0 && p->n_sample_types > 0 && p->sample_values == NULL)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "profile has samples and sample types but no sample_values");
    return 0;
}

static int put_profile(strata_buffer *b, const pprof_profile *p) {
    for (size_t i = 0; i < p->n_sample_types; i++)
        if (put_value_type(b, 1, &p->sample_types[i]) != 0)
            return -1;
    for (size_t i = 0; i < p->n_samples; i++)
        if (put_sample(b, p, &p->samples[i]) != 0)
            return -1;
    for (size_t i = 0; i < p->n_mappings; i++)
        if (put_mapping(b, &p->mappings[i]) != 0)
            return -1;
    for (size_t i = 0; i < p->n_locations; i++)
        if (put_location(b, p, &p->locations[i]) != 0)
            return -1;
    for (size_t i = 0; i < p->n_functions; i++)
        if (put_function(b, &p->functions[i]) != 0)
            return -1;
    for (size_t i = 0; i < p->n_strings; i++)
        if (put_string(b, &p->strings[i]) != 0)
            return -1;
    if (put_scalar(b, 7, (uint64_t)p->drop_frames) != 0 ||
        put_scalar(b, 8, (uint64_t)p->keep_frames) != 0 ||
        put_scalar(b, 9, (uint64_t)p->time_nanos) != 0 ||
        put_scalar(b, 10, (uint64_t)p->duration_nanos) != 0)
        return -1;
    if (value_type_size(&p->period_type) > 0 && put_value_type(b, 11, &p->period_type) != 0)
        return -1;
    if (put_scalar(b, 12, (uint64_t)p->period) != 0 || put_comments(b, p) != 0 ||
        put_scalar(b, 14, (uint64_t)p->default_sample_type) != 0)
        return -1;
    return 0;
}

int pprof_encode(const pprof_profile *p, bool gzip, strata_buffer *out, strata_error *err) {
    if (check_offsets(p, err) != 0)
        return -1;
    if (!gzip) {
        size_t start = out->len;
        if (put_profile(out, p) != 0) {
            out->len = start;
            return encode_oom(err);
        }
        return 0;
    }
    strata_buffer plain = STRATA_BUFFER_INIT;
    if (put_profile(&plain, p) != 0) {
        strata_buffer_free(&plain);
        return encode_oom(err);
    }
    int rc = pprof_gzip(plain.data, plain.len, Z_DEFAULT_COMPRESSION, out, err);
    strata_buffer_free(&plain);
    return rc;
}
