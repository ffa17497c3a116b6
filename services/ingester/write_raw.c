/*
 * write_raw.c - see write_raw.h.
 */
#include "write_raw.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/array.h"
#include "common/utf8.h"
#include "common/varint.h"
#include "parca/profilestore/v1alpha1/profilestore.pb-c.h"

typedef Parca__Profilestore__V1alpha1__WriteRawRequest write_raw_request_pb;
typedef Parca__Profilestore__V1alpha1__RawProfileSeries raw_series_pb;

/* ---- strings on the wire -------------------------------------------------------------------
 *
 * protobuf-c hands string fields over as NUL-terminated copies and checks nothing, so a NUL inside
 * a label is invisible after unpacking: strlen would cut `job="victim\0evil"` to `job="victim"`,
 * merging it into another series. So before unpacking, the request's wire bytes are walked once
 * and every string field is checked with strata_utf8_check_text (valid UTF-8, no NUL): tenant (1)
 * of WriteRawRequest, and name (1) and value (2) of every Label in series (2) -> labels (1) ->
 * labels (1). Every occurrence is checked, so repeated or merged fields hide nothing; other
 * fields are skipped without being read (the raw pprof bytes are checked by pprof_decode). Bytes
 * this walk cannot read (a truncated field, a group, wire type 6 or 7, a string field with
 * another wire type, a varint over 64 bits) make the request malformed, as protobuf-c would find
 * it (protobuf-c drops a varint's bits past 64; every Strata decoder refuses them). */

enum { WIRE_VARINT = 0, WIRE_FIXED64 = 1, WIRE_LEN = 2, WIRE_FIXED32 = 5 };

typedef struct wire {
    const uint8_t *p;
    const uint8_t *end;
} wire;

static bool wire_varint(wire *w, uint64_t *v) {
    return strata_uvarint_get(&w->p, w->end, v);
}

/* Reads the next field's number and wire type; a length-delimited payload becomes *payload and
 * other values are skipped. False when the bytes are not a field. */
static bool wire_next(wire *w, uint32_t *field, uint32_t *type, wire *payload) {
    uint64_t tag, v;
    if (!wire_varint(w, &tag) || tag >> 3 == 0 || tag >> 3 > UINT32_MAX)
        return false;
    *field = (uint32_t)(tag >> 3);
    *type = (uint32_t)(tag & 7);
    size_t left = (size_t)(w->end - w->p);
    switch (*type) {
        case WIRE_VARINT:
            return wire_varint(w, &v);
        case WIRE_FIXED64:
            if (left < 8)
                return false;
            w->p += 8;
            return true;
        case WIRE_FIXED32:
            if (left < 4)
                return false;
            w->p += 4;
            return true;
        case WIRE_LEN:
            if (!wire_varint(w, &v) || v > (uint64_t)(w->end - w->p))
                return false;
            payload->p = w->p;
            payload->end = w->p + v;
            w->p += v;
            return true;
        default:
            return false; /* groups and the undefined wire types 6 and 7 */
    }
}

static int malformed_request(strata_error *err) {
    return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                            "request is not a valid WriteRawRequest protobuf");
}

/* Checks the name and value of one Label message. The label is named by its name when that is a
 * valid label name, else by its index in the series. */
static int check_label_strings(wire label, size_t series, size_t index, bool *malformed,
                               strata_error *err) {
    wire name = {NULL, NULL}, payload, w = label;
    uint32_t field, type;
    while (w.p < w.end) { /* the name, last one wins, for messages */
        if (!wire_next(&w, &field, &type, &payload) ||
            ((field == 1 || field == 2) && type != WIRE_LEN)) {
            *malformed = true;
            return malformed_request(err);
        }
        if (field == 1)
            name = payload;
    }
    size_t name_len = (size_t)(name.end - name.p);
    char label_desc[96];
    if (name_len > 0 && name_len <= 64 && label_name_is_valid((const char *)name.p, name_len))
        snprintf(label_desc, sizeof label_desc, "\"%.*s\"", (int)name_len, (const char *)name.p);
    else
        snprintf(label_desc, sizeof label_desc, "%zu", index);
    w = label;
    while (w.p < w.end) {
        if (!wire_next(&w, &field, &type, &payload))
            return malformed_request(err); /* not reached: the first pass read the same bytes */
        if ((field == 1 || field == 2) &&
            strata_utf8_check_text((const char *)payload.p, (size_t)(payload.end - payload.p),
                                   err) != 0)
            return strata_error_wrap(err, "series %zu label %s %s", series, label_desc,
                                     field == 1 ? "name" : "value");
    }
    return 0;
}

/* Walks RawProfileSeries -> LabelSet (1) -> Label (1), counting labels across repeated sets. */
static int check_series_strings(wire series, size_t index, bool *malformed, strata_error *err) {
    wire set, label;
    uint32_t field, type;
    size_t n_labels = 0;
    while (series.p < series.end) {
        if (!wire_next(&series, &field, &type, &set) || (field == 1 && type != WIRE_LEN)) {
            *malformed = true;
            return malformed_request(err);
        }
        if (field != 1)
            continue;
        while (set.p < set.end) {
            if (!wire_next(&set, &field, &type, &label) || (field == 1 && type != WIRE_LEN)) {
                *malformed = true;
                return malformed_request(err);
            }
            if (field == 1 && check_label_strings(label, index, n_labels++, malformed, err) != 0)
                return -1;
        }
    }
    return 0;
}

/* Checks every string field of a serialized WriteRawRequest (see above). *malformed tells a
 * request that is not protobuf from one with a bad string. */
static int check_request_strings(const uint8_t *data, size_t len, bool *malformed,
                                 strata_error *err) {
    wire w = {data, data + len}, payload;
    uint32_t field, type;
    size_t n_series = 0;
    *malformed = false;
    while (w.p < w.end) {
        if (!wire_next(&w, &field, &type, &payload) ||
            ((field == 1 || field == 2) && type != WIRE_LEN)) {
            *malformed = true;
            return malformed_request(err);
        }
        if (field == 1 && strata_utf8_check_text((const char *)payload.p,
                                                 (size_t)(payload.end - payload.p), err) != 0)
            return strata_error_wrap(err, "tenant field");
        if (field == 2 && check_series_strings(payload, n_series++, malformed, err) != 0)
            return -1;
    }
    return 0;
}

const char *ingest_reject_reason_name(ingest_reject_reason reason) {
    switch (reason) {
        case INGEST_REJECT_NONE:
            return "none";
        case INGEST_REJECT_MALFORMED_REQUEST:
            return "malformed_request";
        case INGEST_REJECT_INVALID_LABELS:
            return "invalid_labels";
        case INGEST_REJECT_INVALID_PPROF:
            return "invalid_pprof";
        case INGEST_REJECT_LIMIT:
            return "limit";
        case INGEST_REJECT_INTERNAL:
            return "internal";
        case INGEST_REJECT_INVALID_TENANT:
            return "invalid_tenant";
    }
    return "unknown";
}

void ingest_limits_default(ingest_limits *limits) {
    limits->max_series_per_request = 10000;
    limits->max_labels_per_series = 64;
    limits->max_label_name_bytes = 1024;
    limits->max_label_value_bytes = 4096;
    pprof_limits_default(&limits->pprof);
}

void ingest_request_free(ingest_request *req) {
    for (size_t i = 0; i < req->n_series; i++)
        label_set_free(&req->series_labels[i]);
    free(req->series_labels);
    for (size_t i = 0; i < req->n_pprofs; i++)
        pprof_profile_free(&req->pprofs[i]);
    free(req->pprofs);
    for (size_t i = 0; i < req->n_profiles; i++)
        profile_type_free(&req->profiles[i].type);
    free(req->profiles);
    free(req->node);
    memset(req, 0, sizeof *req);
}

/* Copies the series' labels into out (sorted, without __name__) and returns __name__'s value. */
static int parse_series_labels(const raw_series_pb *series, size_t index,
                               const ingest_limits *limits, label_set *out, const char **name_out,
                               strata_error *err) {
    const char *name = NULL;
    size_t n = series->labels != NULL ? series->labels->n_labels : 0;
    if (n > limits->max_labels_per_series)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "series %zu: %zu labels, more than the limit of %zu", index, n,
                                limits->max_labels_per_series);
    for (size_t i = 0; i < n; i++) {
        const Parca__Profilestore__V1alpha1__Label *l = series->labels->labels[i];
        /* check_request_strings refused every NUL, so strlen gives the whole string. */
        size_t name_len = strlen(l->name), value_len = strlen(l->value);
        if (name_len > limits->max_label_name_bytes || value_len > limits->max_label_value_bytes)
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "series %zu: label %.64s is longer than the limit", index,
                                    l->name);
        if (strcmp(l->name, STRATA_LABEL_NAME) == 0) {
            if (name != NULL)
                return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                        "series %zu: duplicate label name \"__name__\"", index);
            name = l->value;
            continue;
        }
        if (label_set_add(out, l->name, name_len, l->value, value_len, err) != 0)
            return -1;
    }
    if (name == NULL || name[0] == '\0')
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "series %zu: the __name__ label (the profile name) is required",
                                index);
    if (!label_name_is_valid(name, strlen(name)))
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "series %zu: __name__ \"%.128s\" is not a valid profile name",
                                index, name);
    label_set_sort(out);
    if (label_set_validate(out, err) != 0)
        return strata_error_wrap(err, "series %zu", index);
    *name_out = name;
    return 0;
}

static int copy_pprof_string(const pprof_profile *p, int64_t index, char **out, strata_error *err) {
    pprof_string s = pprof_string_at(p, index);
    *out = strndup(s.ptr, s.len);
    return *out == NULL ? strata_error_oom(err) : 0;
}

/* Appends one ingest_profile per sample type of pprof `pprof_index`. */
static int expand_sample_types(ingest_request *req, size_t series_index, size_t pprof_index,
                               const char *name, int64_t now_ns, size_t *profiles_cap,
                               strata_error *err) {
    const pprof_profile *p = &req->pprofs[pprof_index];
    for (size_t t = 0; t < p->n_sample_types; t++) {
        if (STRATA_ARRAY_RESERVE_OR_OOM(req->profiles, *profiles_cap, req->n_profiles + 1, err) !=
            0)
            return -1;
        ingest_profile *ip = &req->profiles[req->n_profiles];
        memset(ip, 0, sizeof *ip);
        req->n_profiles++;
        ip->series_index = series_index;
        ip->pprof_index = pprof_index;
        ip->sample_type_index = t;
        ip->time_ns = p->time_nanos != 0 ? p->time_nanos : now_ns;
        ip->duration_ns = p->duration_nanos;
        ip->period = p->period;
        ip->type.delta = p->duration_nanos != 0;
        ip->type.name = strdup(name);
        if (ip->type.name == NULL ||
            copy_pprof_string(p, p->sample_types[t].type, &ip->type.sample_type, err) != 0 ||
            copy_pprof_string(p, p->sample_types[t].unit, &ip->type.sample_unit, err) != 0 ||
            copy_pprof_string(p, p->period_type.type, &ip->type.period_type, err) != 0 ||
            copy_pprof_string(p, p->period_type.unit, &ip->type.period_unit, err) != 0)
            return strata_error_oom(err);
        for (size_t s = 0; s < p->n_samples; s++)
            if (pprof_sample_value(p, s, t) != 0)
                ip->n_samples++;
        req->n_samples += ip->n_samples;
    }
    return 0;
}

/* Samples with at least one non-zero value (the others are dropped). */
static size_t count_pprof_samples(const pprof_profile *p) {
    size_t n = 0;
    for (size_t s = 0; s < p->n_samples; s++)
        for (size_t t = 0; t < p->n_sample_types; t++)
            if (pprof_sample_value(p, s, t) != 0) {
                n++;
                break;
            }
    return n;
}

static size_t count_raw_samples(const write_raw_request_pb *pb) {
    size_t n = 0;
    for (size_t i = 0; i < pb->n_series; i++)
        n += pb->series[i]->n_samples;
    return n;
}

static ingest_reject_reason reason_for(const strata_error *err, ingest_reject_reason otherwise) {
    if (err == NULL)
        return otherwise;
    if (err->code == STRATA_RESOURCE_EXHAUSTED && strcmp(err->message, "out of memory") != 0)
        return INGEST_REJECT_LIMIT;
    if (err->code != STRATA_INVALID_ARGUMENT)
        return INGEST_REJECT_INTERNAL;
    return otherwise;
}

static int parse_series(ingest_request *req, const write_raw_request_pb *pb, size_t i,
                        const ingest_limits *limits, int64_t now_ns, size_t *profiles_cap,
                        ingest_reject_reason *reason, strata_error *err) {
    const raw_series_pb *series = pb->series[i];
    const char *name = NULL;
    req->n_series++;
    if (parse_series_labels(series, i, limits, &req->series_labels[i], &name, err) != 0) {
        *reason = reason_for(err, INGEST_REJECT_INVALID_LABELS);
        return -1;
    }
    if (req->node == NULL) {
        const char *node = label_set_get(&req->series_labels[i], "node");
        if (node != NULL && (req->node = strdup(node)) == NULL)
            return strata_error_oom(err);
    }
    for (size_t s = 0; s < series->n_samples; s++) {
        const ProtobufCBinaryData *raw = &series->samples[s]->raw_profile;
        size_t pprof_index = req->n_pprofs++;
        req->raw_bytes += raw->len;
        if (pprof_decode(raw->data, raw->len, &limits->pprof, &req->pprofs[pprof_index], err) !=
            0) {
            *reason = reason_for(err, INGEST_REJECT_INVALID_PPROF);
            return strata_error_wrap(err, "series %zu sample %zu: invalid pprof", i, s);
        }
        if (expand_sample_types(req, i, pprof_index, name, now_ns, profiles_cap, err) != 0) {
            *reason = INGEST_REJECT_INTERNAL;
            return -1;
        }
        req->n_pprof_samples += count_pprof_samples(&req->pprofs[pprof_index]);
    }
    return 0;
}

int ingest_request_parse(const uint8_t *data, size_t len, const ingest_limits *limits,
                         int64_t now_ns, ingest_request *out, ingest_reject_reason *reason,
                         strata_error *err) {
    memset(out, 0, sizeof *out);
    *reason = INGEST_REJECT_MALFORMED_REQUEST;
    bool malformed;
    if (check_request_strings(data, len, &malformed, err) != 0) {
        *reason = malformed ? INGEST_REJECT_MALFORMED_REQUEST : INGEST_REJECT_INVALID_LABELS;
        return -1;
    }
    write_raw_request_pb *pb =
        parca__profilestore__v1alpha1__write_raw_request__unpack(NULL, len, data);
    if (pb == NULL)
        return malformed_request(err);
    int rc = -1;
    size_t profiles_cap = 0;
    *reason = INGEST_REJECT_LIMIT;
    if (pb->n_series > limits->max_series_per_request) {
        strata_error_set(err, STRATA_INVALID_ARGUMENT, "%zu series, more than the limit of %zu",
                         pb->n_series, limits->max_series_per_request);
        goto done;
    }
    size_t n_raw = count_raw_samples(pb);
    out->series_labels = calloc(pb->n_series ? pb->n_series : 1, sizeof *out->series_labels);
    out->pprofs = calloc(n_raw ? n_raw : 1, sizeof *out->pprofs);
    if (out->series_labels == NULL || out->pprofs == NULL) {
        *reason = INGEST_REJECT_INTERNAL;
        strata_error_oom(err);
        goto done;
    }
    for (size_t i = 0; i < pb->n_series; i++)
        if (parse_series(out, pb, i, limits, now_ns, &profiles_cap, reason, err) != 0)
            goto done;
    *reason = INGEST_REJECT_NONE;
    rc = 0;
done:
    parca__profilestore__v1alpha1__write_raw_request__free_unpacked(pb, NULL);
    if (rc != 0)
        ingest_request_free(out);
    return rc;
}
