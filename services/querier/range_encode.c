/*
 * range_encode.c - see range_encode.h. Field numbers from proto/parca/query/v1alpha1/query.proto
 * and proto/parca/profilestore/v1alpha1/profilestore.proto:
 *   QueryRangeResponse { repeated MetricsSeries series = 1; }
 *   MetricsSeries { LabelSet labelset = 1; repeated MetricsSample samples = 2;
 *                   ValueType period_type = 3; ValueType sample_type = 4; }
 *   LabelSet { repeated Label labels = 1; }   Label { string name = 1; string value = 2; }
 *   MetricsSample { Timestamp timestamp = 1; int64 value = 2; double value_per_second = 3;
 *                   int64 duration = 4; int32 count = 5; }
 *   Timestamp { int64 seconds = 1; int32 nanos = 2; }   ValueType { string type = 1; string unit =
 * 2; }
 */
#include "range_encode.h"

#include <stdlib.h>
#include <string.h>

#include "common/protobuf_writer.h"

static size_t str_len(const char *s) {
    return s != NULL ? strlen(s) : 0;
}

/* A Timestamp: seconds and nanos with nanos in [0, 1e9), as ns_to_ts makes them. */
static void split_time(int64_t ns, int64_t *seconds, int32_t *nanos) {
    *seconds = ns / 1000000000;
    int64_t rest = ns % 1000000000;
    if (rest < 0) {
        rest += 1000000000;
        (*seconds)--;
    }
    *nanos = (int32_t)rest;
}

static size_t timestamp_size(int64_t seconds, int32_t nanos) {
    return strata_pb_varint_field_size(1, (uint64_t)seconds) +
           strata_pb_varint_field_size(2, (uint64_t)(int64_t)nanos);
}

static size_t sample_size(const range_point *p) {
    int64_t seconds;
    int32_t nanos;
    split_time(p->time_ns, &seconds, &nanos);
    return strata_pb_len_field_size(1, timestamp_size(seconds, nanos)) +
           strata_pb_varint_field_size(2, (uint64_t)p->value) +
           strata_pb_double_field_size(3, p->value_per_second) +
           strata_pb_varint_field_size(4, (uint64_t)p->duration_ns) +
           strata_pb_varint_field_size(5, (uint64_t)(int64_t)p->count);
}

static uint8_t *put_sample(uint8_t *o, const range_point *p, size_t size) {
    int64_t seconds;
    int32_t nanos;
    split_time(p->time_ns, &seconds, &nanos);
    o = strata_pb_put_len_key(o, 2, size);
    o = strata_pb_put_len_key(o, 1, timestamp_size(seconds, nanos));
    o = strata_pb_put_varint_field(o, 1, (uint64_t)seconds);
    o = strata_pb_put_varint_field(o, 2, (uint64_t)(int64_t)nanos);
    o = strata_pb_put_varint_field(o, 2, (uint64_t)p->value);
    o = strata_pb_put_double_field(o, 3, p->value_per_second);
    o = strata_pb_put_varint_field(o, 4, (uint64_t)p->duration_ns);
    return strata_pb_put_varint_field(o, 5, (uint64_t)(int64_t)p->count);
}

static size_t value_type_size(const char *type, const char *unit) {
    return strata_pb_string_field_size(1, str_len(type)) +
           strata_pb_string_field_size(2, str_len(unit));
}

static uint8_t *put_value_type(uint8_t *o, unsigned field, const char *type, const char *unit) {
    o = strata_pb_put_len_key(o, field, value_type_size(type, unit));
    o = strata_pb_put_string_field(o, 1, type, str_len(type));
    return strata_pb_put_string_field(o, 2, unit, str_len(unit));
}

static size_t label_size(const strata_label *l) {
    return strata_pb_string_field_size(1, strlen(l->name)) +
           strata_pb_string_field_size(2, strlen(l->value));
}

static size_t label_set_size(const label_set *ls) {
    size_t size = 0;
    for (size_t i = 0; i < ls->count; i++)
        size += strata_pb_len_field_size(1, label_size(&ls->labels[i]));
    return size;
}

/* The payload size of one MetricsSeries; each point's MetricsSample size goes to sizes[k] (at most
 * 66 bytes: a Timestamp of 24, four scalars of 9-11). */
static size_t series_size(const range_series *s, uint8_t *sizes) {
    size_t size = strata_pb_len_field_size(1, label_set_size(&s->labels));
    for (size_t k = 0; k < s->n_points; k++) {
        size_t point = sample_size(&s->points[k]);
        sizes[k] = (uint8_t)point;
        size += strata_pb_len_field_size(2, point);
    }
    size += strata_pb_len_field_size(3, value_type_size(s->period_type, s->period_unit));
    size += strata_pb_len_field_size(4, value_type_size(s->sample_type, s->sample_unit));
    return size;
}

static uint8_t *put_series(uint8_t *o, const range_series *s, size_t size, const uint8_t *sizes) {
    o = strata_pb_put_len_key(o, 1, size);
    o = strata_pb_put_len_key(o, 1, label_set_size(&s->labels));
    for (size_t i = 0; i < s->labels.count; i++) {
        const strata_label *l = &s->labels.labels[i];
        o = strata_pb_put_len_key(o, 1, label_size(l));
        o = strata_pb_put_string_field(o, 1, l->name, strlen(l->name));
        o = strata_pb_put_string_field(o, 2, l->value, strlen(l->value));
    }
    for (size_t k = 0; k < s->n_points; k++)
        o = put_sample(o, &s->points[k], sizes[k]);
    o = put_value_type(o, 3, s->period_type, s->period_unit);
    return put_value_type(o, 4, s->sample_type, s->sample_unit);
}

/* Sizes first (each series' and each point's, kept), then one pass writing into a buffer of
 * exactly that size. */
int range_encode_response(const range_series *series, size_t n, strata_buffer *out,
                          strata_error *err) {
    size_t points = 0;
    for (size_t i = 0; i < n; i++)
        points += series[i].n_points;
    size_t *series_sizes = malloc((n + 1) * sizeof *series_sizes);
    uint8_t *sizes = malloc(points + 1);
    if (series_sizes == NULL || sizes == NULL) {
        free(series_sizes);
        free(sizes);
        return strata_error_oom(err);
    }
    size_t total = 0;
    for (size_t i = 0, at = 0; i < n; at += series[i].n_points, i++) {
        series_sizes[i] = series_size(&series[i], sizes + at);
        total += strata_pb_len_field_size(1, series_sizes[i]);
    }
    int rc = 0;
    if (strata_buffer_reserve(out, total) != 0) {
        rc = strata_error_oom(err);
    } else {
        uint8_t *o = out->data + out->len;
        for (size_t i = 0, at = 0; i < n; at += series[i].n_points, i++)
            o = put_series(o, &series[i], series_sizes[i], sizes + at);
        size_t written = (size_t)(o - (out->data + out->len));
        if (written != total)
            rc = strata_error_set(err, STRATA_INTERNAL,
                                  "range answer: wrote %zu bytes of the %zu sized", written, total);
        else
            out->len += written;
    }
    free(series_sizes);
    free(sizes);
    return rc;
}
