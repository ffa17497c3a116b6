/*
 * pbjson.c - see pbjson.h.
 *
 * Both directions walk a protobuf-c message structure through its descriptor: each field
 * descriptor gives the member's offset, its quantifier (repeated count, oneof case) and its type.
 * Encoding unpacks the binary message and writes it with lib/json's writer; decoding builds the
 * structure from lib/json's document, allocating every string, array and sub-message with
 * malloc, so protobuf_c_message_free_unpacked (which frees with the default allocator) releases
 * it, and packs it.
 */
#include "pbjson/pbjson.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/base64.h"
#include "json/json.h"

#define MAX_NESTING 32
/* Timestamps are read and written within the nanoseconds an int64 holds (years 1678-2262). */
#define MAX_TIMESTAMP_SECONDS (INT64_MAX / 1000000000 - 1)
/* Durations within protojson's +-10,000 years. */
#define MAX_DURATION_SECONDS INT64_C(315576000000)

static bool is_type(const ProtobufCMessageDescriptor *d, const char *name) {
    return strcmp(d->name, name) == 0;
}

/* lowerCamelCase of a field name, protoc's json_name rule: '_' dropped, the next letter upper. */
static void json_name(const char *name, char *out, size_t cap) {
    size_t n = 0;
    bool upper = false;
    for (const char *p = name; *p != '\0' && n + 1 < cap; p++) {
        if (*p == '_') {
            upper = true;
            continue;
        }
        out[n++] = upper ? (char)toupper((unsigned char)*p) : *p;
        upper = false;
    }
    out[n] = '\0';
}

static size_t element_size(const ProtobufCFieldDescriptor *f) {
    switch (f->type) {
        case PROTOBUF_C_TYPE_INT32:
        case PROTOBUF_C_TYPE_SINT32:
        case PROTOBUF_C_TYPE_SFIXED32:
        case PROTOBUF_C_TYPE_UINT32:
        case PROTOBUF_C_TYPE_FIXED32:
        case PROTOBUF_C_TYPE_FLOAT:
        case PROTOBUF_C_TYPE_ENUM:
            return 4;
        case PROTOBUF_C_TYPE_INT64:
        case PROTOBUF_C_TYPE_SINT64:
        case PROTOBUF_C_TYPE_SFIXED64:
        case PROTOBUF_C_TYPE_UINT64:
        case PROTOBUF_C_TYPE_FIXED64:
        case PROTOBUF_C_TYPE_DOUBLE:
            return 8;
        case PROTOBUF_C_TYPE_BOOL:
            return sizeof(protobuf_c_boolean);
        case PROTOBUF_C_TYPE_STRING:
            return sizeof(char *);
        case PROTOBUF_C_TYPE_BYTES:
            return sizeof(ProtobufCBinaryData);
        case PROTOBUF_C_TYPE_MESSAGE:
            return sizeof(ProtobufCMessage *);
    }
    return 0;
}

/* ---- encoding ------------------------------------------------------------------------------- */

static void write_message(json_writer *w, const ProtobufCMessage *m, int depth);

static void write_value(json_writer *w, const ProtobufCFieldDescriptor *f, const void *p,
                        int depth) {
    switch (f->type) {
        case PROTOBUF_C_TYPE_INT32:
        case PROTOBUF_C_TYPE_SINT32:
        case PROTOBUF_C_TYPE_SFIXED32:
            json_int(w, *(const int32_t *)p);
            break;
        case PROTOBUF_C_TYPE_UINT32:
        case PROTOBUF_C_TYPE_FIXED32:
            json_uint(w, *(const uint32_t *)p);
            break;
        case PROTOBUF_C_TYPE_INT64:
        case PROTOBUF_C_TYPE_SINT64:
        case PROTOBUF_C_TYPE_SFIXED64: {
            char text[24];
            snprintf(text, sizeof text, "%" PRId64, *(const int64_t *)p);
            json_string(w, text);
            break;
        }
        case PROTOBUF_C_TYPE_UINT64:
        case PROTOBUF_C_TYPE_FIXED64: {
            char text[24];
            snprintf(text, sizeof text, "%" PRIu64, *(const uint64_t *)p);
            json_string(w, text);
            break;
        }
        case PROTOBUF_C_TYPE_FLOAT:
        case PROTOBUF_C_TYPE_DOUBLE: {
            double v = f->type == PROTOBUF_C_TYPE_FLOAT ? *(const float *)p : *(const double *)p;
            if (isnan(v))
                json_string(w, "NaN");
            else if (isinf(v))
                json_string(w, v > 0 ? "Infinity" : "-Infinity");
            else
                json_double(w, v);
            break;
        }
        case PROTOBUF_C_TYPE_BOOL:
            json_bool(w, *(const protobuf_c_boolean *)p != 0);
            break;
        case PROTOBUF_C_TYPE_ENUM: {
            const ProtobufCEnumValue *v =
                protobuf_c_enum_descriptor_get_value(f->descriptor, *(const int *)p);
            if (v != NULL)
                json_string(w, v->name);
            else
                json_int(w, *(const int *)p);
            break;
        }
        case PROTOBUF_C_TYPE_STRING:
            json_string(w, *(char *const *)p != NULL ? *(char *const *)p : "");
            break;
        case PROTOBUF_C_TYPE_BYTES: {
            const ProtobufCBinaryData *b = p;
            strata_buffer text = STRATA_BUFFER_INIT;
            if (strata_base64_encode(&text, b->data, b->len) != 0) {
                w->failed = true;
            } else {
                json_string_len(w, (const char *)text.data, text.len);
            }
            strata_buffer_free(&text);
            break;
        }
        case PROTOBUF_C_TYPE_MESSAGE:
            write_message(w, *(ProtobufCMessage *const *)p, depth + 1);
            break;
    }
}

/* Whether an implicit-presence scalar is at its default (and so not written). */
static bool is_default(const ProtobufCFieldDescriptor *f, const void *p) {
    static const uint8_t zeros[16];
    switch (f->type) {
        case PROTOBUF_C_TYPE_STRING: {
            const char *s = *(char *const *)p;
            return s == NULL || s[0] == '\0';
        }
        case PROTOBUF_C_TYPE_BYTES:
            return ((const ProtobufCBinaryData *)p)->len == 0;
        case PROTOBUF_C_TYPE_MESSAGE:
            return *(ProtobufCMessage *const *)p == NULL;
        default:
            return memcmp(p, zeros, element_size(f)) == 0;
    }
}

static void write_message(json_writer *w, const ProtobufCMessage *m, int depth) {
    const ProtobufCMessageDescriptor *d = m->descriptor;
    const uint8_t *base = (const uint8_t *)m;
    if (depth > MAX_NESTING) {
        w->failed = true;
        return;
    }
    if (is_type(d, "google.protobuf.Timestamp") || is_type(d, "google.protobuf.Duration")) {
        int64_t seconds = 0;
        int32_t nanos = 0;
        for (unsigned i = 0; i < d->n_fields; i++) {
            if (strcmp(d->fields[i].name, "seconds") == 0)
                seconds = *(const int64_t *)(base + d->fields[i].offset);
            else if (strcmp(d->fields[i].name, "nanos") == 0)
                nanos = *(const int32_t *)(base + d->fields[i].offset);
        }
        if (is_type(d, "google.protobuf.Timestamp")) {
            if (seconds > MAX_TIMESTAMP_SECONDS || seconds < -MAX_TIMESTAMP_SECONDS)
                w->failed = true; /* outside what lib/json writes (nanoseconds in an int64) */
            else
                json_timestamp_ns(w, seconds * 1000000000 + nanos);
            return;
        }
        char text[48];
        bool negative = seconds < 0 || nanos < 0;
        uint64_t s_abs = seconds < 0 ? (uint64_t)0 - (uint64_t)seconds : (uint64_t)seconds;
        int32_t n_abs = nanos < 0 ? -nanos : nanos;
        snprintf(text, sizeof text, "%s%" PRIu64 ".%09" PRId32 "s", negative ? "-" : "", s_abs,
                 n_abs);
        json_string(w, text);
        return;
    }
    json_begin_object(w);
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        const uint8_t *member = base + f->offset;
        char name[128];
        json_name(f->name, name, sizeof name);
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = *(const size_t *)(base + f->quantifier_offset);
            if (n == 0)
                continue;
            const uint8_t *array;
            memcpy(&array, member, sizeof array); /* the field is a `T *` */
            json_key(w, name);
            json_begin_array(w);
            for (size_t k = 0; k < n; k++)
                write_value(w, f, array + k * element_size(f), depth);
            json_end_array(w);
            continue;
        }
        if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
            if (*(const uint32_t *)(base + f->quantifier_offset) != f->id)
                continue;
        } else if (f->label == PROTOBUF_C_LABEL_OPTIONAL && f->quantifier_offset != 0 &&
                   f->type != PROTOBUF_C_TYPE_MESSAGE && f->type != PROTOBUF_C_TYPE_STRING) {
            if (!*(const protobuf_c_boolean *)(base + f->quantifier_offset))
                continue;
        } else if (is_default(f, member)) {
            continue;
        }
        json_key(w, name);
        write_value(w, f, member, depth);
    }
    json_end_object(w);
}

int pbjson_encode(const ProtobufCMessageDescriptor *d, const uint8_t *binary, size_t len,
                  strata_buffer *out, strata_error *err) {
    ProtobufCMessage *m = protobuf_c_message_unpack(d, NULL, len, binary);
    if (m == NULL)
        return strata_error_set(err, STRATA_INTERNAL, "cannot decode a %s to write it as JSON",
                                d->name);
    json_writer w;
    json_writer_init(&w, out);
    write_message(&w, m, 0);
    protobuf_c_message_free_unpacked(m, NULL);
    if (json_writer_finish(&w) != 0)
        return strata_error_set(err, STRATA_INTERNAL, "cannot write a %s as JSON", d->name);
    return 0;
}

/* ---- decoding ------------------------------------------------------------------------------- */

typedef struct decoder {
    strata_error *err;
    char path[256]; /* the field being read, for messages */
} decoder;

static int fail(decoder *dc, const char *what) {
    return strata_error_set(dc->err, STRATA_INVALID_ARGUMENT, "JSON field %s: %s",
                            dc->path[0] ? dc->path : "(message)", what);
}

/* An integer from a JSON number or string, within [min, max] (as int64) or unsigned. */
static int read_integer(decoder *dc, const json_value *v, bool is_unsigned, int64_t min,
                        int64_t max, uint64_t umax, uint64_t *out) {
    const char *s;
    if (json_value_type(v) == JSON_STRING && json_get_string(v, &s, NULL)) {
        char *end;
        errno = 0;
        if (is_unsigned) {
            if (s[0] == '-')
                return fail(dc, "a negative number for an unsigned field");
            unsigned long long u = strtoull(s, &end, 10);
            if (errno != 0 || end == s || *end != '\0' || u > umax)
                return fail(dc, "not an integer in range");
            *out = u;
            return 0;
        }
        long long i = strtoll(s, &end, 10);
        if (errno != 0 || end == s || *end != '\0' || i < min || i > max)
            return fail(dc, "not an integer in range");
        *out = (uint64_t)i;
        return 0;
    }
    int64_t i;
    double dv;
    if (json_get_int64(v, &i)) {
        if (is_unsigned ? (i < 0 || (uint64_t)i > umax) : (i < min || i > max))
            return fail(dc, "integer out of range");
        *out = (uint64_t)i;
        return 0;
    }
    if (json_get_double(v, &dv) && is_unsigned && dv >= 0 && dv == floor(dv) && dv < 1.8e19 &&
        (uint64_t)dv <= umax) {
        *out = (uint64_t)dv;
        return 0;
    }
    return fail(dc, "not an integer");
}

/* Exactly n decimal digits at s (stops at the first byte that is not one, so it never reads past
 * a terminating NUL). */
static bool fixed_digits(const char *s, int n, int *out) {
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (!isdigit((unsigned char)s[i]))
            return false;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return true;
}

/* RFC 3339 as protobuf's JSON mapping writes Timestamps: YYYY-MM-DDTHH:MM:SS[.fraction](Z|+HH:MM|
 * -HH:MM), every field exactly its digits (no signs, spaces or short fields). */
static int parse_timestamp(const char *s, int64_t *seconds, int32_t *nanos) {
    struct tm tm = {0};
    if (!(fixed_digits(s, 4, &tm.tm_year) && s[4] == '-' && fixed_digits(s + 5, 2, &tm.tm_mon) &&
          s[7] == '-' && fixed_digits(s + 8, 2, &tm.tm_mday) && s[10] == 'T' &&
          fixed_digits(s + 11, 2, &tm.tm_hour) && s[13] == ':' &&
          fixed_digits(s + 14, 2, &tm.tm_min) && s[16] == ':' &&
          fixed_digits(s + 17, 2, &tm.tm_sec)))
        return -1;
    int consumed = 19;
    const char *p = s + consumed;
    int64_t frac = 0;
    int digits = 0;
    if (*p == '.') {
        for (p++; isdigit((unsigned char)*p); p++, digits++)
            if (digits < 9)
                frac = frac * 10 + (*p - '0');
        if (digits == 0)
            return -1;
        for (int k = digits; k < 9; k++)
            frac *= 10;
    }
    int offset = 0;
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        int hh, mm;
        if (!fixed_digits(p + 1, 2, &hh) || p[3] != ':' || !fixed_digits(p + 4, 2, &mm) ||
            hh > 23 || mm > 59)
            return -1;
        offset = (*p == '-' ? -1 : 1) * (hh * 3600 + mm * 60);
        p += 6;
    } else {
        return -1;
    }
    if (*p != '\0')
        return -1;
    if (tm.tm_mon < 1 || tm.tm_mon > 12 || tm.tm_mday < 1 || tm.tm_mday > 31 || tm.tm_hour < 0 ||
        tm.tm_hour > 23 || tm.tm_min < 0 || tm.tm_min > 59 || tm.tm_sec < 0 || tm.tm_sec > 60 ||
        tm.tm_year < 1 || tm.tm_year > 9999)
        return -1;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    time_t t = timegm(&tm);
    *seconds = (int64_t)t - offset;
    if (*seconds > MAX_TIMESTAMP_SECONDS || *seconds < -MAX_TIMESTAMP_SECONDS)
        return -1;
    *nanos = (int32_t)frac;
    return 0;
}

static int parse_duration(const char *s, int64_t *seconds, int32_t *nanos) {
    size_t len = strlen(s);
    if (len < 2 || s[len - 1] != 's')
        return -1;
    bool negative = s[0] == '-';
    const char *p = s + (negative || s[0] == '+');
    int64_t secs = 0, frac = 0;
    int digits = 0;
    if (!isdigit((unsigned char)*p))
        return -1;
    for (; isdigit((unsigned char)*p); p++) {
        secs = secs * 10 + (*p - '0');
        if (secs > MAX_DURATION_SECONDS)
            return -1;
    }
    if (*p == '.')
        for (p++; isdigit((unsigned char)*p); p++, digits++)
            if (digits < 9)
                frac = frac * 10 + (*p - '0');
    for (int k = digits; k < 9; k++)
        frac *= 10;
    if (p != s + len - 1)
        return -1;
    *seconds = negative ? -secs : secs;
    *nanos = (int32_t)(negative ? -frac : frac);
    return 0;
}

static int read_message(decoder *dc, const ProtobufCMessageDescriptor *d, const json_value *v,
                        ProtobufCMessage **out, int depth);

/* Reads one value of field f into p (an element of its type). */
static int read_value(decoder *dc, const ProtobufCFieldDescriptor *f, const json_value *v, void *p,
                      int depth) {
    uint64_t u;
    switch (f->type) {
        case PROTOBUF_C_TYPE_INT32:
        case PROTOBUF_C_TYPE_SINT32:
        case PROTOBUF_C_TYPE_SFIXED32:
            if (read_integer(dc, v, false, INT32_MIN, INT32_MAX, 0, &u) != 0)
                return -1;
            *(int32_t *)p = (int32_t)(int64_t)u;
            return 0;
        case PROTOBUF_C_TYPE_UINT32:
        case PROTOBUF_C_TYPE_FIXED32:
            if (read_integer(dc, v, true, 0, 0, UINT32_MAX, &u) != 0)
                return -1;
            *(uint32_t *)p = (uint32_t)u;
            return 0;
        case PROTOBUF_C_TYPE_INT64:
        case PROTOBUF_C_TYPE_SINT64:
        case PROTOBUF_C_TYPE_SFIXED64:
            if (read_integer(dc, v, false, INT64_MIN, INT64_MAX, 0, &u) != 0)
                return -1;
            *(int64_t *)p = (int64_t)u;
            return 0;
        case PROTOBUF_C_TYPE_UINT64:
        case PROTOBUF_C_TYPE_FIXED64:
            if (read_integer(dc, v, true, 0, 0, UINT64_MAX, &u) != 0)
                return -1;
            *(uint64_t *)p = u;
            return 0;
        case PROTOBUF_C_TYPE_FLOAT:
        case PROTOBUF_C_TYPE_DOUBLE: {
            double dv;
            const char *s;
            if (json_get_string(v, &s, NULL)) {
                if (strcmp(s, "NaN") == 0)
                    dv = NAN;
                else if (strcmp(s, "Infinity") == 0)
                    dv = INFINITY;
                else if (strcmp(s, "-Infinity") == 0)
                    dv = -INFINITY;
                else
                    return fail(dc, "not a number");
            } else if (!json_get_double(v, &dv)) {
                return fail(dc, "not a number");
            }
            if (f->type == PROTOBUF_C_TYPE_FLOAT)
                *(float *)p = (float)dv;
            else
                *(double *)p = dv;
            return 0;
        }
        case PROTOBUF_C_TYPE_BOOL: {
            bool b;
            if (!json_get_bool(v, &b))
                return fail(dc, "not a boolean");
            *(protobuf_c_boolean *)p = b;
            return 0;
        }
        case PROTOBUF_C_TYPE_ENUM: {
            const char *s;
            int64_t i;
            const ProtobufCEnumValue *ev = NULL;
            if (json_get_string(v, &s, NULL))
                ev = protobuf_c_enum_descriptor_get_value_by_name(f->descriptor, s);
            else if (json_get_int64(v, &i) && i >= INT32_MIN && i <= INT32_MAX)
                ev = protobuf_c_enum_descriptor_get_value(f->descriptor, (int)i);
            if (ev == NULL)
                return fail(dc, "not a value of its enum");
            *(int *)p = ev->value;
            return 0;
        }
        case PROTOBUF_C_TYPE_STRING: {
            const char *s;
            size_t len;
            if (!json_get_string(v, &s, &len))
                return fail(dc, "not a string");
            char *copy = malloc(len + 1);
            if (copy == NULL)
                return strata_error_oom(dc->err);
            memcpy(copy, s, len + 1);
            *(char **)p = copy;
            return 0;
        }
        case PROTOBUF_C_TYPE_BYTES: {
            const char *s;
            size_t len;
            if (!json_get_string(v, &s, &len))
                return fail(dc, "not a base64 string");
            strata_buffer bytes = STRATA_BUFFER_INIT;
            char *std = malloc(len + 1); /* URL-safe base64 too */
            if (std == NULL)
                return strata_error_oom(dc->err);
            for (size_t k = 0; k <= len; k++)
                std[k] = s[k] == '-' ? '+' : s[k] == '_' ? '/' : s[k];
            strata_error ignored;
            int rc = strata_base64_decode(std, len, &bytes, &ignored);
            free(std);
            if (rc != 0) {
                strata_buffer_free(&bytes);
                return fail(dc, "not base64");
            }
            ProtobufCBinaryData *b = p;
            b->len = bytes.len;
            b->data = bytes.len > 0 ? bytes.data : NULL;
            if (bytes.len == 0)
                strata_buffer_free(&bytes);
            return 0;
        }
        case PROTOBUF_C_TYPE_MESSAGE:
            return read_message(dc, f->descriptor, v, (ProtobufCMessage **)p, depth + 1);
    }
    return fail(dc, "unsupported type");
}

static const ProtobufCFieldDescriptor *find_field(const ProtobufCMessageDescriptor *d,
                                                  const char *key) {
    for (unsigned i = 0; i < d->n_fields; i++) {
        char name[128];
        json_name(d->fields[i].name, name, sizeof name);
        if (strcmp(key, name) == 0 || strcmp(key, d->fields[i].name) == 0)
            return &d->fields[i];
    }
    return NULL;
}

static int read_well_known(decoder *dc, ProtobufCMessage *m, const json_value *v) {
    const ProtobufCMessageDescriptor *d = m->descriptor;
    const char *s;
    int64_t seconds;
    int32_t nanos;
    if (!json_get_string(v, &s, NULL))
        return fail(dc, "not a string");
    if ((is_type(d, "google.protobuf.Timestamp") ? parse_timestamp(s, &seconds, &nanos)
                                                 : parse_duration(s, &seconds, &nanos)) != 0)
        return fail(dc, is_type(d, "google.protobuf.Timestamp") ? "not an RFC 3339 time"
                                                                : "not a duration like \"1.5s\"");
    uint8_t *base = (uint8_t *)m;
    for (unsigned i = 0; i < d->n_fields; i++) {
        if (strcmp(d->fields[i].name, "seconds") == 0)
            *(int64_t *)(base + d->fields[i].offset) = seconds;
        else if (strcmp(d->fields[i].name, "nanos") == 0)
            *(int32_t *)(base + d->fields[i].offset) = nanos;
    }
    return 0;
}

static int read_field(decoder *dc, ProtobufCMessage *m, const ProtobufCFieldDescriptor *f,
                      const json_value *v, int depth) {
    uint8_t *base = (uint8_t *)m;
    void *member = base + f->offset;
    if (json_value_type(v) == JSON_NULL)
        return 0;
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
        if (json_value_type(v) != JSON_ARRAY)
            return fail(dc, "not an array");
        size_t n = json_array_length(v);
        if (n == 0)
            return 0;
        uint8_t *array = calloc(n, element_size(f));
        if (array == NULL)
            return strata_error_oom(dc->err);
        memcpy(member, &array, sizeof array); /* the field is a `T *`: no `void **` store */
        for (size_t k = 0; k < n; k++) {
            /* counted first: a failure leaves what was read (zeros after it) to be freed */
            *(size_t *)(base + f->quantifier_offset) = k + 1;
            if (read_value(dc, f, json_array_at(v, k), array + k * element_size(f), depth) != 0)
                return -1;
        }
        return 0;
    }
    if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) && *(uint32_t *)(base + f->quantifier_offset) != 0)
        return fail(dc, "a second member of its oneof");
    if (read_value(dc, f, v, member, depth) != 0) {
        if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) /* so that what was allocated is freed */
            *(uint32_t *)(base + f->quantifier_offset) = f->id;
        return -1;
    }
    if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)
        *(uint32_t *)(base + f->quantifier_offset) = f->id;
    else if (f->label == PROTOBUF_C_LABEL_OPTIONAL && f->quantifier_offset != 0 &&
             f->type != PROTOBUF_C_TYPE_MESSAGE && f->type != PROTOBUF_C_TYPE_STRING)
        *(protobuf_c_boolean *)(base + f->quantifier_offset) = 1;
    return 0;
}

static int read_message(decoder *dc, const ProtobufCMessageDescriptor *d, const json_value *v,
                        ProtobufCMessage **out, int depth) {
    if (depth > MAX_NESTING)
        return fail(dc, "nested too deeply");
    ProtobufCMessage *m = calloc(1, d->sizeof_message);
    if (m == NULL)
        return strata_error_oom(dc->err);
    d->message_init(m);
    *out = m; /* owned by the parent from here: freed with it on failure */
    if (is_type(d, "google.protobuf.Timestamp") || is_type(d, "google.protobuf.Duration"))
        return read_well_known(dc, m, v);
    if (json_value_type(v) != JSON_OBJECT)
        return fail(dc, "not an object");
    size_t saved = strlen(dc->path);
    bool *seen = calloc(d->n_fields + 1, sizeof *seen); /* a field given twice (by both names) */
    if (seen == NULL)
        return strata_error_oom(dc->err);
    int rc = 0;
    for (size_t i = 0; i < json_object_size(v) && rc == 0; i++) {
        const char *key = json_object_key_at(v, i);
        snprintf(dc->path + saved, sizeof dc->path - saved, "%s%s", saved ? "." : "", key);
        const ProtobufCFieldDescriptor *f = find_field(d, key);
        if (f == NULL)
            rc = fail(dc, "unknown field");
        else if (seen[f - d->fields])
            rc = fail(dc, "given twice");
        else if ((seen[f - d->fields] = true,
                  read_field(dc, m, f, json_object_value_at(v, i), depth)) != 0)
            rc = -1;
        else
            dc->path[saved] = '\0';
    }
    free(seen);
    return rc;
}

int pbjson_decode(const ProtobufCMessageDescriptor *d, const char *text, size_t len,
                  strata_buffer *out, strata_error *err) {
    json_document *doc;
    if (json_parse(text, len, &doc, err) != 0)
        return -1;
    decoder dc = {.err = err};
    ProtobufCMessage *m = NULL;
    int rc = read_message(&dc, d, json_document_root(doc), &m, 0);
    json_document_free(doc);
    if (rc == 0) {
        size_t size = protobuf_c_message_get_packed_size(m);
        if (strata_buffer_reserve(out, size) != 0) {
            rc = strata_error_oom(err);
        } else {
            protobuf_c_message_pack(m, out->data + out->len);
            out->len += size;
        }
    }
    if (m != NULL)
        protobuf_c_message_free_unpacked(m, NULL);
    return rc;
}
