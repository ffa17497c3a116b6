/*
 * pprof_decode.c - gzip sniffing, the single-pass protobuf reader and validation. See pprof.h.
 *
 * Reading. The profile is first made contiguous and owned (inflated from gzip, or copied), then
 * read once, front to back, with a cursor (`reader`) over [p, end). A length-delimited field
 * becomes a sub-reader over its bytes, so nesting never copies. Each kind of element (sample,
 * location, line, ...) is appended to its flat array in pprof_profile; the arrays grow
 * geometrically, so a profile costs a few dozen allocations however many samples it has.
 *
 * Repeated varints (sample location ids and values, comments) are read as a "run": a packed field
 * is a run of its payload bytes, an unpacked one a run of exactly one varint. Since every varint
 * takes at least one byte, reserving one slot per byte of the run lets the hot loop decode without
 * capacity checks.
 *
 * Protobuf rules we follow: fields may come in any order and repeat; for a scalar the last value
 * wins and an embedded message that repeats (period_type) is merged; repeated scalars may be packed
 * or not; unknown fields of wire types varint, fixed64, length-delimited and fixed32 are skipped.
 * Groups (wire types 3 and 4, deprecated since proto2 and never used by profile.proto) and the
 * undefined wire types 6 and 7 are rejected, as is a known field sent with the wrong wire type.
 * Every string table entry must be valid UTF-8 without NUL bytes (common/utf8.h), as protobuf
 * demands of proto3 strings; an error names the entry and its first user ("string 17 (function 2
 * name): invalid UTF-8 at offset 3").
 *
 * Errors name where they happened: each element decoder sets a plain message and its caller
 * prefixes the element ("sample 12: label 0: ..."), on the failure path only.
 *
 * Validation runs after reading, because protobuf lets the string table and the definitions come
 * after the samples that reference them.
 */
#include "pprof/pprof.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/array.h"
#include "common/utf8.h"
#include "common/varint.h"

enum {
    WIRE_VARINT = 0,
    WIRE_FIXED64 = 1,
    WIRE_LEN = 2,
    WIRE_GROUP_START = 3,
    WIRE_GROUP_END = 4,
    WIRE_FIXED32 = 5,
};

/* Field numbers of perftools.profiles.Profile. */
enum {
    PROFILE_SAMPLE_TYPE = 1,
    PROFILE_SAMPLE = 2,
    PROFILE_MAPPING = 3,
    PROFILE_LOCATION = 4,
    PROFILE_FUNCTION = 5,
    PROFILE_STRING_TABLE = 6,
    PROFILE_DROP_FRAMES = 7,
    PROFILE_KEEP_FRAMES = 8,
    PROFILE_TIME_NANOS = 9,
    PROFILE_DURATION_NANOS = 10,
    PROFILE_PERIOD_TYPE = 11,
    PROFILE_PERIOD = 12,
    PROFILE_COMMENT = 13,
    PROFILE_DEFAULT_SAMPLE_TYPE = 14,
};

#define MAX_FIELD_NUMBER ((1u << 29) - 1)

typedef struct reader {
    const uint8_t *p;
    const uint8_t *end;
    const uint8_t *base; /* start of the whole profile, to report byte offsets */
} reader;

typedef struct decoder {
    pprof_profile *p;
    const pprof_limits *limits;
    strata_error *err;
    size_t n_sample_values;               /* pprof_profile keeps no count of sample_values */
    uint64_t sample_location_id_range[2]; /* smallest and largest sample location id */
    size_t cap_sample_types, cap_samples, cap_sample_location_ids, cap_sample_values;
    size_t cap_sample_labels, cap_mappings, cap_locations, cap_lines, cap_functions;
    size_t cap_strings, cap_comments;
} decoder;

void pprof_limits_default(pprof_limits *limits) {
    limits->max_decompressed_bytes = (size_t)64 << 20;
    limits->max_samples = 1000000;
    limits->max_stack_depth = 1024;
    limits->max_sample_types = 32;
    limits->max_string_length = (size_t)64 << 10;
}

/* ---- growing the flat arrays ---------------------------------------------------------------- */

/* Defines `static int NAME(decoder *d, size_t need)`, which makes room for `need` items in
 * d->p->ARRAY (capacity d->CAP). */
#define DEFINE_RESERVE(name, array, cap)                                                           \
    static inline int name(decoder *d, size_t need) {                                              \
        /* never leave the array NULL: NULL + 0 is undefined */                                    \
        return STRATA_ARRAY_RESERVE_OR_OOM(d->p->array, d->cap, need > 0 ? need : 1, d->err);      \
    }

DEFINE_RESERVE(reserve_sample_types, sample_types, cap_sample_types)
DEFINE_RESERVE(reserve_samples, samples, cap_samples)
DEFINE_RESERVE(reserve_sample_location_ids, sample_location_ids, cap_sample_location_ids)
DEFINE_RESERVE(reserve_sample_values, sample_values, cap_sample_values)
DEFINE_RESERVE(reserve_sample_labels, sample_labels, cap_sample_labels)
DEFINE_RESERVE(reserve_mappings, mappings, cap_mappings)
DEFINE_RESERVE(reserve_locations, locations, cap_locations)
DEFINE_RESERVE(reserve_lines, lines, cap_lines)
DEFINE_RESERVE(reserve_functions, functions, cap_functions)
DEFINE_RESERVE(reserve_strings, strings, cap_strings)
DEFINE_RESERVE(reserve_comments, comments, cap_comments)

/* ---- wire format ---------------------------------------------------------------------------- */

static size_t offset_of(const reader *r, const uint8_t *at) {
    return (size_t)(at - r->base);
}

static int malformed(const reader *r, const uint8_t *at, const char *what, strata_error *err) {
    return strata_error_set(err, STRATA_INVALID_ARGUMENT, "malformed protobuf: %s at byte %zu",
                            what, offset_of(r, at));
}

static inline bool read_varint(reader *r, uint64_t *v) {
    return strata_uvarint_next(&r->p, r->end, v);
}

/* Wire types a field may use; groups (3, 4) and the undefined 6 and 7 are refused. */
#define VALID_WIRE_TYPES                                                                           \
    (1u << WIRE_VARINT | 1u << WIRE_FIXED64 | 1u << WIRE_LEN | 1u << WIRE_FIXED32)

static int read_tag_slow(reader *r, uint32_t *field, uint32_t *wire, strata_error *err) {
    const uint8_t *start = r->p;
    uint64_t key;
    if (!read_varint(r, &key))
        return malformed(r, start, "truncated or overlong field key", err);
    uint64_t number = key >> 3;
    *wire = (uint32_t)(key & 7);
    if (number == 0 || number > MAX_FIELD_NUMBER)
        return malformed(r, start, "invalid field number", err);
    if (*wire == WIRE_GROUP_START || *wire == WIRE_GROUP_END)
        return malformed(r, start, "group wire type (not used by profile.proto)", err);
    if (*wire > WIRE_FIXED32)
        return malformed(r, start, "invalid wire type", err);
    *field = (uint32_t)number;
    return 0;
}

/* Reads a field key. Every field profile.proto defines has a one-byte key, checked inline. */
static inline int read_tag(reader *r, uint32_t *field, uint32_t *wire, strata_error *err) {
    if (r->p < r->end) {
        uint32_t key = r->p[0];
        if (key < 0x80 && key >= 8 && (VALID_WIRE_TYPES >> (key & 7) & 1)) {
            *field = key >> 3;
            *wire = key & 7;
            r->p++;
            return 0;
        }
    }
    return read_tag_slow(r, field, wire, err);
}

static int read_len_slow(reader *r, reader *sub, strata_error *err) {
    const uint8_t *start = r->p;
    uint64_t len;
    if (!read_varint(r, &len))
        return malformed(r, start, "truncated length", err);
    if (len > (uint64_t)(r->end - r->p))
        return malformed(r, start, "length runs past the end of the message", err);
    sub->p = r->p;
    sub->end = r->p + len;
    sub->base = r->base;
    r->p = sub->end;
    return 0;
}

/* Opens the length-delimited payload at r as *sub and moves r past it. Lengths under 128 that fit
 * are handled inline. */
static inline int read_len(reader *r, reader *sub, strata_error *err) {
    const uint8_t *q = r->p;
    if (q < r->end && q[0] < 0x80 && q[0] < r->end - q) {
        sub->p = q + 1;
        sub->end = q + 1 + q[0];
        sub->base = r->base;
        r->p = sub->end;
        return 0;
    }
    return read_len_slow(r, sub, err);
}

static int skip_field(reader *r, uint32_t wire, strata_error *err) {
    const uint8_t *start = r->p;
    uint64_t ignored;
    reader sub = {0};
    switch (wire) {
        case WIRE_VARINT:
            if (!read_varint(r, &ignored))
                return malformed(r, start, "truncated varint", err);
            return 0;
        case WIRE_FIXED64:
        case WIRE_FIXED32: {
            size_t width = wire == WIRE_FIXED64 ? 8 : 4;
            if ((size_t)(r->end - r->p) < width)
                return malformed(r, start, "truncated fixed-width field", err);
            r->p += width;
            return 0;
        }
        default:
            return read_len(r, &sub, err);
    }
}

static const char *wire_name(uint32_t wire) {
    switch (wire) {
        case WIRE_VARINT:
            return "varint";
        case WIRE_FIXED64:
            return "fixed64";
        case WIRE_LEN:
            return "length-delimited";
        default:
            return "fixed32";
    }
}

static int wrong_wire_type(const reader *r, const char *field, uint32_t wire, strata_error *err) {
    return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                            "malformed protobuf: field %s has wire type %s near byte %zu", field,
                            wire_name(wire), offset_of(r, r->p));
}

/* Reads a singular varint field (int64, uint64 or bool). */
static inline int read_varint_field(reader *r, uint32_t wire, const char *field, uint64_t *v,
                                    strata_error *err) {
    if (wire != WIRE_VARINT)
        return wrong_wire_type(r, field, wire, err);
    const uint8_t *start = r->p;
    if (!read_varint(r, v))
        return malformed(r, start, "truncated varint", err);
    return 0;
}

static int read_int64_field(reader *r, uint32_t wire, const char *field, int64_t *v,
                            strata_error *err) {
    uint64_t u;
    if (read_varint_field(r, wire, field, &u, err) != 0)
        return -1;
    *v = strata_u64_as_i64(u);
    return 0;
}

static int read_bool_field(reader *r, uint32_t wire, const char *field, bool *v,
                           strata_error *err) {
    uint64_t u;
    if (read_varint_field(r, wire, field, &u, err) != 0)
        return -1;
    *v = u != 0;
    return 0;
}

static inline int read_message_field(reader *r, uint32_t wire, const char *field, reader *sub,
                                     strata_error *err) {
    if (wire != WIRE_LEN)
        return wrong_wire_type(r, field, wire, err);
    return read_len(r, sub, err);
}

/* Opens the values of a repeated varint field as a run: the payload of a packed field, or the one
 * varint of an unpacked one. The run holds at most (run->end - run->p) values. */
static inline int open_varint_run(reader *r, uint32_t wire, const char *field, reader *run,
                                  strata_error *err) {
    if (wire == WIRE_LEN)
        return read_len(r, run, err);
    if (wire != WIRE_VARINT)
        return wrong_wire_type(r, field, wire, err);
    const uint8_t *start = r->p;
    uint64_t ignored;
    if (!read_varint(r, &ignored))
        return malformed(r, start, "truncated varint", err);
    run->p = start;
    run->end = r->p;
    run->base = r->base;
    return 0;
}

static size_t run_max_count(const reader *run) {
    return (size_t)(run->end - run->p);
}

/* Decodes every varint of run into dst (room for run_max_count values); *count gets their number.
 * When range is non-NULL, range[0] and range[1] are lowered / raised to the smallest / largest
 * value. This is the decoder's innermost loop: one- and two-byte varints (most ids and counts) take
 * a short path, and all but the last 10 bytes go without bounds checks. It is inlined into each
 * caller so that the range tracking disappears where it is not wanted. */
static inline __attribute__((always_inline)) int
read_varint_run(reader run, uint64_t *dst, size_t *count, uint64_t *range, strata_error *err) {
    const uint8_t *q = run.p, *end = run.end;
    uint64_t *out = dst;
    uint64_t min = range != NULL ? range[0] : 0, max = range != NULL ? range[1] : 0;
    while (end - q >= 10) {
        uint64_t v = q[0];
        if (v < 0x80) {
            q += 1;
        } else if (q[1] < 0x80) {
            v = (v & 0x7f) | (uint64_t)q[1] << 7;
            q += 2;
        } else {
            const uint8_t *next = strata_uvarint_get_unchecked(q, &v);
            if (next == NULL) {
                run.p = q;
                return malformed(&run, q, "overlong varint in packed field", err);
            }
            q = next;
        }
        *out++ = v;
        if (range != NULL) {
            min = v < min ? v : min;
            max = v > max ? v : max;
        }
    }
    run.p = q;
    while (run.p < end) {
        const uint8_t *start = run.p;
        uint64_t v;
        if (!read_varint(&run, &v))
            return malformed(&run, start, "truncated varint in packed field", err);
        *out++ = v;
        if (range != NULL) {
            min = v < min ? v : min;
            max = v > max ? v : max;
        }
    }
    if (range != NULL) {
        range[0] = min;
        range[1] = max;
    }
    *count = (size_t)(out - dst);
    return 0;
}

/* ---- messages ------------------------------------------------------------------------------- */

static int decode_value_type(reader *r, pprof_value_type *vt, strata_error *err) {
    while (r->p < r->end) {
        uint32_t field = 0, wire = 0;
        if (read_tag(r, &field, &wire, err) != 0)
            return -1;
        int rc;
        switch (field) {
            case 1:
                rc = read_int64_field(r, wire, "type", &vt->type, err);
                break;
            case 2:
                rc = read_int64_field(r, wire, "unit", &vt->unit, err);
                break;
            default:
                rc = skip_field(r, wire, err);
        }
        if (rc != 0)
            return -1;
    }
    return 0;
}

static int decode_label(reader *r, pprof_label *label, strata_error *err) {
    memset(label, 0, sizeof *label);
    while (r->p < r->end) {
        uint32_t field = 0, wire = 0;
        if (read_tag(r, &field, &wire, err) != 0)
            return -1;
        int rc;
        switch (field) {
            case 1:
                rc = read_int64_field(r, wire, "key", &label->key, err);
                break;
            case 2:
                rc = read_int64_field(r, wire, "str", &label->str, err);
                break;
            case 3:
                rc = read_int64_field(r, wire, "num", &label->num, err);
                break;
            case 4:
                rc = read_int64_field(r, wire, "num_unit", &label->num_unit, err);
                break;
            default:
                rc = skip_field(r, wire, err);
        }
        if (rc != 0)
            return -1;
    }
    return 0;
}

static int append_sample_location_ids(decoder *d, reader *r, uint32_t wire) {
    pprof_profile *p = d->p;
    reader run = {0};
    size_t count = 0;
    if (open_varint_run(r, wire, "location_id", &run, d->err) != 0 ||
        reserve_sample_location_ids(d, p->n_sample_location_ids + run_max_count(&run)) != 0)
        return -1;
    /* The id range lets validation skip per-id lookups (see sample_locations_in_dense_range). */
    if (read_varint_run(run, p->sample_location_ids + p->n_sample_location_ids, &count,
                        d->sample_location_id_range, d->err) != 0)
        return -1;
    p->n_sample_location_ids += count;
    return 0;
}

static int append_sample_values(decoder *d, reader *r, uint32_t wire) {
    pprof_profile *p = d->p;
    reader run = {0};
    size_t count = 0;
    /* int64 values are stored through their unsigned variant: the bits are protobuf's. */
    if (open_varint_run(r, wire, "value", &run, d->err) != 0 ||
        reserve_sample_values(d, d->n_sample_values + run_max_count(&run)) != 0 ||
        read_varint_run(run, (uint64_t *)(p->sample_values + d->n_sample_values), &count, NULL,
                        d->err) != 0)
        return -1;
    d->n_sample_values += count;
    return 0;
}

static int append_sample_label(decoder *d, reader *r, uint32_t wire, size_t index) {
    pprof_profile *p = d->p;
    reader sub = {0};
    if (read_message_field(r, wire, "label", &sub, d->err) != 0 ||
        reserve_sample_labels(d, p->n_sample_labels + 1) != 0)
        return -1;
    if (decode_label(&sub, &p->sample_labels[p->n_sample_labels], d->err) != 0)
        return strata_error_wrap(d->err, "label %zu", index);
    p->n_sample_labels++;
    return 0;
}

/* Offsets into the shared arrays are 32-bit; only a limit far above the defaults can reach that. */
static int check_offset_fits(decoder *d, size_t n, const char *what) {
    if (n <= UINT32_MAX)
        return 0;
    return strata_error_set(d->err, STRATA_RESOURCE_EXHAUSTED,
                            "profile has more than %u %s; lower max_decompressed_bytes", UINT32_MAX,
                            what);
}

static int decode_sample(decoder *d, reader *r) {
    pprof_profile *p = d->p;
    if (check_offset_fits(d, p->n_sample_location_ids, "sample location ids") != 0 ||
        check_offset_fits(d, d->n_sample_values, "sample values") != 0 ||
        check_offset_fits(d, p->n_sample_labels, "sample labels") != 0)
        return -1;
    pprof_sample s = {
        .location_offset = (uint32_t)p->n_sample_location_ids,
        .value_offset = (uint32_t)d->n_sample_values,
        .label_offset = (uint32_t)p->n_sample_labels,
    };
    while (r->p < r->end) {
        uint32_t field = 0, wire = 0;
        if (read_tag(r, &field, &wire, d->err) != 0)
            return -1;
        int rc;
        switch (field) {
            case 1:
                rc = append_sample_location_ids(d, r, wire);
                break;
            case 2:
                rc = append_sample_values(d, r, wire);
                break;
            case 3:
                rc = append_sample_label(d, r, wire, p->n_sample_labels - s.label_offset);
                break;
            default:
                rc = skip_field(r, wire, d->err);
        }
        if (rc != 0)
            return -1;
    }
    size_t depth = p->n_sample_location_ids - s.location_offset;
    if (depth > d->limits->max_stack_depth)
        return strata_error_set(d->err, STRATA_RESOURCE_EXHAUSTED,
                                "stack has %zu locations; the limit is %zu", depth,
                                d->limits->max_stack_depth);
    s.location_count = (uint32_t)depth;
    s.label_count = (uint32_t)(p->n_sample_labels - s.label_offset);
    if (reserve_samples(d, p->n_samples + 1) != 0)
        return -1;
    p->samples[p->n_samples++] = s;
    return 0;
}

static int decode_mapping(reader *r, pprof_mapping *m, strata_error *err) {
    memset(m, 0, sizeof *m);
    while (r->p < r->end) {
        uint32_t field = 0, wire = 0;
        if (read_tag(r, &field, &wire, err) != 0)
            return -1;
        int rc;
        switch (field) {
            case 1:
                rc = read_varint_field(r, wire, "id", &m->id, err);
                break;
            case 2:
                rc = read_varint_field(r, wire, "memory_start", &m->memory_start, err);
                break;
            case 3:
                rc = read_varint_field(r, wire, "memory_limit", &m->memory_limit, err);
                break;
            case 4:
                rc = read_varint_field(r, wire, "file_offset", &m->file_offset, err);
                break;
            case 5:
                rc = read_int64_field(r, wire, "filename", &m->filename, err);
                break;
            case 6:
                rc = read_int64_field(r, wire, "build_id", &m->build_id, err);
                break;
            case 7:
                rc = read_bool_field(r, wire, "has_functions", &m->has_functions, err);
                break;
            case 8:
                rc = read_bool_field(r, wire, "has_filenames", &m->has_filenames, err);
                break;
            case 9:
                rc = read_bool_field(r, wire, "has_line_numbers", &m->has_line_numbers, err);
                break;
            case 10:
                rc = read_bool_field(r, wire, "has_inline_frames", &m->has_inline_frames, err);
                break;
            default:
                rc = skip_field(r, wire, err);
        }
        if (rc != 0)
            return -1;
    }
    return 0;
}

static int decode_line(reader *r, pprof_line *line, strata_error *err) {
    memset(line, 0, sizeof *line);
    while (r->p < r->end) {
        uint32_t field = 0, wire = 0;
        if (read_tag(r, &field, &wire, err) != 0)
            return -1;
        int rc;
        switch (field) {
            case 1:
                rc = read_varint_field(r, wire, "function_id", &line->function_id, err);
                break;
            case 2:
                rc = read_int64_field(r, wire, "line", &line->line, err);
                break;
            case 3:
                rc = read_int64_field(r, wire, "column", &line->column, err);
                break;
            default:
                rc = skip_field(r, wire, err);
        }
        if (rc != 0)
            return -1;
    }
    return 0;
}

static int append_location_line(decoder *d, reader *r, uint32_t wire, size_t index) {
    pprof_profile *p = d->p;
    reader sub = {0};
    if (read_message_field(r, wire, "line", &sub, d->err) != 0 ||
        reserve_lines(d, p->n_lines + 1) != 0)
        return -1;
    if (decode_line(&sub, &p->lines[p->n_lines], d->err) != 0)
        return strata_error_wrap(d->err, "line %zu", index);
    p->n_lines++;
    return 0;
}

/* Reads one varint in [q, end); NULL when truncated or overlong. */
static inline const uint8_t *read_varint_at(const uint8_t *q, const uint8_t *end, uint64_t *v) {
    reader t = {q, end, q};
    return read_varint(&t, v) ? t.p : NULL;
}

/* Reads the fields of one Line payload [q, end) into *line in the common shape: varint fields
 * function_id, line, column only. False on anything else. */
static inline bool decode_line_fast(const uint8_t *q, const uint8_t *end, pprof_line *line) {
    memset(line, 0, sizeof *line);
    while (q < end) {
        uint8_t key = *q++;
        uint64_t v;
        if ((q = read_varint_at(q, end, &v)) == NULL)
            return false;
        switch (key) {
            case 1 << 3 | WIRE_VARINT:
                line->function_id = v;
                break;
            case 2 << 3 | WIRE_VARINT:
                line->line = strata_u64_as_i64(v);
                break;
            case 3 << 3 | WIRE_VARINT:
                line->column = strata_u64_as_i64(v);
                break;
            default:
                return false;
        }
    }
    return true;
}

/* Locations are most of a profile's symbol bytes (an agent's 2,000-sample profile holds ~7,000),
 * and nearly all have one shape: varint fields id, mapping_id, address and is_folded, and lines of
 * varints under 128 bytes each. This reads that shape straight through, without the general
 * path's per-field calls and error paths. Anything else (another field or wire type, a long or
 * truncated line, no memory for a line) returns false before p->n_lines moves, and the location is
 * decoded the general way, which reports what is wrong. */
static bool decode_location_fast(decoder *d, const reader *r, pprof_location *loc) {
    pprof_profile *p = d->p;
    const uint8_t *q = r->p, *end = r->end;
    size_t n_lines = p->n_lines;
    while (q < end) {
        uint8_t key = *q++;
        uint64_t v;
        if (key == (4 << 3 | WIRE_LEN)) {
            if (q >= end || q[0] >= 0x80 || q[0] >= end - q || reserve_lines(d, n_lines + 1) != 0)
                return false;
            const uint8_t *line_end = q + 1 + q[0];
            if (!decode_line_fast(q + 1, line_end, &p->lines[n_lines]))
                return false;
            n_lines++;
            q = line_end;
            continue;
        }
        if ((q = read_varint_at(q, end, &v)) == NULL)
            return false;
        switch (key) {
            case 1 << 3 | WIRE_VARINT:
                loc->id = v;
                break;
            case 2 << 3 | WIRE_VARINT:
                loc->mapping_id = v;
                break;
            case 3 << 3 | WIRE_VARINT:
                loc->address = v;
                break;
            case 5 << 3 | WIRE_VARINT:
                loc->is_folded = v != 0;
                break;
            default:
                return false;
        }
    }
    p->n_lines = n_lines;
    return true;
}

/* The general path: any field order, unknown fields skipped, errors reported. */
static int decode_location_general(decoder *d, reader *r, pprof_location *loc) {
    pprof_profile *p = d->p;
    while (r->p < r->end) {
        uint32_t field = 0, wire = 0;
        if (read_tag(r, &field, &wire, d->err) != 0)
            return -1;
        int rc;
        switch (field) {
            case 1:
                rc = read_varint_field(r, wire, "id", &loc->id, d->err);
                break;
            case 2:
                rc = read_varint_field(r, wire, "mapping_id", &loc->mapping_id, d->err);
                break;
            case 3:
                rc = read_varint_field(r, wire, "address", &loc->address, d->err);
                break;
            case 4:
                rc = append_location_line(d, r, wire, p->n_lines - loc->line_offset);
                break;
            case 5:
                rc = read_bool_field(r, wire, "is_folded", &loc->is_folded, d->err);
                break;
            default:
                rc = skip_field(r, wire, d->err);
        }
        if (rc != 0)
            return -1;
    }
    return 0;
}

static int decode_location(decoder *d, reader *r) {
    pprof_profile *p = d->p;
    if (check_offset_fits(d, p->n_lines, "lines") != 0)
        return -1;
    pprof_location loc;
    memset(&loc, 0, sizeof loc);
    loc.line_offset = (uint32_t)p->n_lines;
    if (!decode_location_fast(d, r, &loc)) {
        memset(&loc, 0, sizeof loc);
        loc.line_offset = (uint32_t)p->n_lines;
        if (decode_location_general(d, r, &loc) != 0)
            return -1;
    }
    loc.line_count = (uint32_t)(p->n_lines - loc.line_offset);
    if (reserve_locations(d, p->n_locations + 1) != 0)
        return -1;
    p->locations[p->n_locations++] = loc;
    return 0;
}

static int decode_function(reader *r, pprof_function *f, strata_error *err) {
    memset(f, 0, sizeof *f);
    while (r->p < r->end) {
        uint32_t field = 0, wire = 0;
        if (read_tag(r, &field, &wire, err) != 0)
            return -1;
        int rc;
        switch (field) {
            case 1:
                rc = read_varint_field(r, wire, "id", &f->id, err);
                break;
            case 2:
                rc = read_int64_field(r, wire, "name", &f->name, err);
                break;
            case 3:
                rc = read_int64_field(r, wire, "system_name", &f->system_name, err);
                break;
            case 4:
                rc = read_int64_field(r, wire, "filename", &f->filename, err);
                break;
            case 5:
                rc = read_int64_field(r, wire, "start_line", &f->start_line, err);
                break;
            default:
                rc = skip_field(r, wire, err);
        }
        if (rc != 0)
            return -1;
    }
    return 0;
}

/* ---- the Profile message -------------------------------------------------------------------- */

static int add_sample_type(decoder *d, reader *r, uint32_t wire) {
    pprof_profile *p = d->p;
    if (p->n_sample_types == d->limits->max_sample_types)
        return strata_error_set(d->err, STRATA_RESOURCE_EXHAUSTED,
                                "profile has more than %zu sample types",
                                d->limits->max_sample_types);
    reader sub = {0};
    if (read_message_field(r, wire, "sample_type", &sub, d->err) != 0 ||
        reserve_sample_types(d, p->n_sample_types + 1) != 0)
        return -1;
    pprof_value_type *vt = &p->sample_types[p->n_sample_types];
    memset(vt, 0, sizeof *vt);
    if (decode_value_type(&sub, vt, d->err) != 0)
        return strata_error_wrap(d->err, "sample type %zu", p->n_sample_types);
    p->n_sample_types++;
    return 0;
}

static int add_sample(decoder *d, reader *r, uint32_t wire) {
    pprof_profile *p = d->p;
    if (p->n_samples == d->limits->max_samples)
        return strata_error_set(d->err, STRATA_RESOURCE_EXHAUSTED,
                                "profile has more than %zu samples", d->limits->max_samples);
    reader sub = {0};
    if (read_message_field(r, wire, "sample", &sub, d->err) != 0)
        return -1;
    if (decode_sample(d, &sub) != 0)
        return strata_error_wrap(d->err, "sample %zu", p->n_samples);
    return 0;
}

static int add_mapping(decoder *d, reader *r, uint32_t wire) {
    pprof_profile *p = d->p;
    reader sub = {0};
    if (read_message_field(r, wire, "mapping", &sub, d->err) != 0 ||
        reserve_mappings(d, p->n_mappings + 1) != 0)
        return -1;
    if (decode_mapping(&sub, &p->mappings[p->n_mappings], d->err) != 0)
        return strata_error_wrap(d->err, "mapping %zu", p->n_mappings);
    p->n_mappings++;
    return 0;
}

static int add_location(decoder *d, reader *r, uint32_t wire) {
    reader sub = {0};
    if (read_message_field(r, wire, "location", &sub, d->err) != 0)
        return -1;
    if (decode_location(d, &sub) != 0)
        return strata_error_wrap(d->err, "location %zu", d->p->n_locations);
    return 0;
}

static int add_function(decoder *d, reader *r, uint32_t wire) {
    pprof_profile *p = d->p;
    reader sub = {0};
    if (read_message_field(r, wire, "function", &sub, d->err) != 0 ||
        reserve_functions(d, p->n_functions + 1) != 0)
        return -1;
    if (decode_function(&sub, &p->functions[p->n_functions], d->err) != 0)
        return strata_error_wrap(d->err, "function %zu", p->n_functions);
    p->n_functions++;
    return 0;
}

static int add_string(decoder *d, reader *r, uint32_t wire) {
    pprof_profile *p = d->p;
    reader sub = {0};
    if (read_message_field(r, wire, "string_table", &sub, d->err) != 0)
        return -1;
    size_t len = (size_t)(sub.end - sub.p);
    if (len > d->limits->max_string_length)
        return strata_error_set(d->err, STRATA_RESOURCE_EXHAUSTED,
                                "string %zu is %zu bytes long; the limit is %zu", p->n_strings, len,
                                d->limits->max_string_length);
    if (len > UINT32_MAX)
        return strata_error_set(d->err, STRATA_RESOURCE_EXHAUSTED,
                                "string %zu is longer than 4 GiB", p->n_strings);
    if (reserve_strings(d, p->n_strings + 1) != 0)
        return -1;
    p->strings[p->n_strings].ptr = (const char *)sub.p;
    p->strings[p->n_strings].len = (uint32_t)len;
    p->n_strings++;
    return 0;
}

static int add_comments(decoder *d, reader *r, uint32_t wire) {
    pprof_profile *p = d->p;
    reader run = {0};
    size_t count = 0;
    if (open_varint_run(r, wire, "comment", &run, d->err) != 0 ||
        reserve_comments(d, p->n_comments + run_max_count(&run)) != 0 ||
        read_varint_run(run, (uint64_t *)(p->comments + p->n_comments), &count, NULL, d->err) != 0)
        return -1;
    p->n_comments += count;
    return 0;
}

static int set_period_type(decoder *d, reader *r, uint32_t wire) {
    reader sub = {0};
    if (read_message_field(r, wire, "period_type", &sub, d->err) != 0)
        return -1;
    if (decode_value_type(&sub, &d->p->period_type, d->err) != 0)
        return strata_error_wrap(d->err, "period type");
    return 0;
}

static int decode_profile_field(decoder *d, reader *r, uint32_t field, uint32_t wire) {
    pprof_profile *p = d->p;
    switch (field) {
        case PROFILE_SAMPLE_TYPE:
            return add_sample_type(d, r, wire);
        case PROFILE_SAMPLE:
            return add_sample(d, r, wire);
        case PROFILE_MAPPING:
            return add_mapping(d, r, wire);
        case PROFILE_LOCATION:
            return add_location(d, r, wire);
        case PROFILE_FUNCTION:
            return add_function(d, r, wire);
        case PROFILE_STRING_TABLE:
            return add_string(d, r, wire);
        case PROFILE_DROP_FRAMES:
            return read_int64_field(r, wire, "drop_frames", &p->drop_frames, d->err);
        case PROFILE_KEEP_FRAMES:
            return read_int64_field(r, wire, "keep_frames", &p->keep_frames, d->err);
        case PROFILE_TIME_NANOS:
            return read_int64_field(r, wire, "time_nanos", &p->time_nanos, d->err);
        case PROFILE_DURATION_NANOS:
            return read_int64_field(r, wire, "duration_nanos", &p->duration_nanos, d->err);
        case PROFILE_PERIOD_TYPE:
            return set_period_type(d, r, wire);
        case PROFILE_PERIOD:
            return read_int64_field(r, wire, "period", &p->period, d->err);
        case PROFILE_COMMENT:
            return add_comments(d, r, wire);
        case PROFILE_DEFAULT_SAMPLE_TYPE:
            return read_int64_field(r, wire, "default_sample_type", &p->default_sample_type,
                                    d->err);
        default:
            return skip_field(r, wire, d->err);
    }
}

/* Sizes the arrays before the real pass, so that they are allocated once instead of grown (and
 * copied) a dozen times: counts the top-level elements, which costs a key and a length per element.
 * Sample location ids are estimated at one per two bytes of sample, values at one per sample type,
 * and lines at one per location. Every estimate is also capped by the bytes that could hold it, so
 * a hostile profile cannot reserve more than the main pass could fill. A malformed profile just
 * stops the count; the main pass reports the error. */
static int presize_arrays(decoder *d, reader r) {
    size_t counts[PROFILE_DEFAULT_SAMPLE_TYPE + 1] = {0};
    size_t sample_bytes = 0, location_bytes = 0;
    while (r.p < r.end) {
        uint32_t field = 0, wire = 0;
        reader sub = {NULL, NULL, NULL};
        if (read_tag(&r, &field, &wire, NULL) != 0)
            break;
        if (wire != WIRE_LEN) {
            if (skip_field(&r, wire, NULL) != 0)
                break;
            continue;
        }
        if (read_len(&r, &sub, NULL) != 0)
            break;
        if (field < sizeof counts / sizeof counts[0])
            counts[field]++;
        if (field == PROFILE_SAMPLE)
            sample_bytes += (size_t)(sub.end - sub.p);
        else if (field == PROFILE_LOCATION)
            location_bytes += (size_t)(sub.end - sub.p);
    }
    size_t n_samples = counts[PROFILE_SAMPLE] < d->limits->max_samples ? counts[PROFILE_SAMPLE]
                                                                       : d->limits->max_samples;
    size_t n_types = counts[PROFILE_SAMPLE_TYPE] < d->limits->max_sample_types
                         ? counts[PROFILE_SAMPLE_TYPE]
                         : d->limits->max_sample_types;
    size_t n_values =
        n_types > 0 && n_samples > sample_bytes / n_types ? sample_bytes : n_samples * n_types;
    size_t n_lines = counts[PROFILE_LOCATION] < location_bytes / 2 ? counts[PROFILE_LOCATION]
                                                                   : location_bytes / 2;
    if (reserve_sample_types(d, n_types) != 0 || reserve_samples(d, n_samples) != 0 ||
        reserve_sample_location_ids(d, sample_bytes / 2) != 0 ||
        reserve_sample_values(d, n_values) != 0 ||
        reserve_mappings(d, counts[PROFILE_MAPPING]) != 0 ||
        reserve_locations(d, counts[PROFILE_LOCATION]) != 0 || reserve_lines(d, n_lines) != 0 ||
        reserve_functions(d, counts[PROFILE_FUNCTION]) != 0 ||
        reserve_strings(d, counts[PROFILE_STRING_TABLE]) != 0)
        return -1;
    return 0;
}

static int decode_profile(decoder *d, reader *r) {
    while (r->p < r->end) {
        uint32_t field = 0, wire = 0;
        if (read_tag(r, &field, &wire, d->err) != 0 || decode_profile_field(d, r, field, wire) != 0)
            return -1;
    }
    return 0;
}

/* ---- validation ----------------------------------------------------------------------------- */

static int check_string(const pprof_profile *p, int64_t index, const char *what,
                        strata_error *err) {
    if (index >= 0 && (uint64_t)index < p->n_strings)
        return 0;
    return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                            "%s string index %lld is out of range (the string table has %zu "
                            "entries)",
                            what, (long long)index, p->n_strings);
}

/* Writes what uses string `index` (its first user, searched in field order) into out, for the
 * message of a string that is not valid text. Only runs on that failure path. */
static void describe_string_use(const pprof_profile *p, int64_t index, char *out, size_t size) {
    for (size_t i = 0; i < p->n_sample_types; i++) {
        if (p->sample_types[i].type == index || p->sample_types[i].unit == index) {
            snprintf(out, size, "sample type %zu %s", i,
                     p->sample_types[i].type == index ? "type" : "unit");
            return;
        }
    }
    if (p->period_type.type == index || p->period_type.unit == index) {
        snprintf(out, size, "period type %s", p->period_type.type == index ? "type" : "unit");
        return;
    }
    for (size_t i = 0; i < p->n_mappings; i++) {
        const pprof_mapping *m = &p->mappings[i];
        if (m->filename == index || m->build_id == index) {
            snprintf(out, size, "mapping %zu %s", i,
                     m->filename == index ? "filename" : "build_id");
            return;
        }
    }
    for (size_t i = 0; i < p->n_functions; i++) {
        const pprof_function *f = &p->functions[i];
        if (f->name == index || f->system_name == index || f->filename == index) {
            snprintf(out, size, "function %zu %s", i,
                     f->name == index          ? "name"
                     : f->system_name == index ? "system_name"
                                               : "filename");
            return;
        }
    }
    for (size_t i = 0; i < p->n_samples; i++) {
        const pprof_sample *s = &p->samples[i];
        for (uint32_t j = 0; j < s->label_count; j++) {
            const pprof_label *l = &p->sample_labels[s->label_offset + j];
            if (l->key == index || l->str == index || l->num_unit == index) {
                snprintf(out, size, "sample %zu label %u %s", i, j,
                         l->key == index   ? "key"
                         : l->str == index ? "str"
                                           : "num_unit");
                return;
            }
        }
    }
    const char *field = p->drop_frames == index           ? "drop_frames"
                        : p->keep_frames == index         ? "keep_frames"
                        : p->default_sample_type == index ? "default_sample_type"
                                                          : NULL;
    for (size_t i = 0; field == NULL && i < p->n_comments; i++) {
        if (p->comments[i] == index) {
            snprintf(out, size, "comment %zu", i);
            return;
        }
    }
    snprintf(out, size, "%s", field != NULL ? field : "unused");
}

/* Entry 0 is "", and every entry, used or not, is valid UTF-8 without NUL (common/utf8.h): Go's
 * and Python's protobuf cannot decode answers that carry anything else, and stored strings are
 * read NUL-terminated. */
static int validate_string_table(const pprof_profile *p, strata_error *err) {
    if (p->n_strings == 0)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "string table is empty; its first entry must be \"\"");
    if (p->strings[0].len != 0)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "string table entry 0 must be \"\" but is %u bytes long",
                                p->strings[0].len);
    for (size_t i = 1; i < p->n_strings; i++) {
        if (strata_utf8_check_text(p->strings[i].ptr, p->strings[i].len, err) != 0) {
            char use[96];
            describe_string_use(p, (int64_t)i, use, sizeof use);
            return strata_error_wrap(err, "string %zu (%s)", i, use);
        }
    }
    return 0;
}

static int validate_value_type(const pprof_profile *p, const pprof_value_type *vt,
                               strata_error *err) {
    if (check_string(p, vt->type, "type", err) != 0 || check_string(p, vt->unit, "unit", err) != 0)
        return -1;
    return 0;
}

static int validate_value_types(const pprof_profile *p, strata_error *err) {
    for (size_t i = 0; i < p->n_sample_types; i++)
        if (validate_value_type(p, &p->sample_types[i], err) != 0)
            return strata_error_wrap(err, "sample type %zu", i);
    if (validate_value_type(p, &p->period_type, err) != 0)
        return strata_error_wrap(err, "period type");
    return 0;
}

static int validate_profile_strings(const pprof_profile *p, strata_error *err) {
    if (check_string(p, p->drop_frames, "drop_frames", err) != 0 ||
        check_string(p, p->keep_frames, "keep_frames", err) != 0 ||
        check_string(p, p->default_sample_type, "default_sample_type", err) != 0)
        return -1;
    for (size_t i = 0; i < p->n_comments; i++)
        if (check_string(p, p->comments[i], "comment", err) != 0)
            return strata_error_wrap(err, "comment %zu", i);
    return 0;
}

static int validate_mappings(const pprof_profile *p, strata_error *err) {
    for (size_t i = 0; i < p->n_mappings; i++) {
        const pprof_mapping *m = &p->mappings[i];
        if (check_string(p, m->filename, "filename", err) != 0 ||
            check_string(p, m->build_id, "build_id", err) != 0)
            return strata_error_wrap(err, "mapping %zu (id %llu)", i, (unsigned long long)m->id);
    }
    return 0;
}

static int validate_functions(const pprof_profile *p, strata_error *err) {
    for (size_t i = 0; i < p->n_functions; i++) {
        const pprof_function *f = &p->functions[i];
        if (check_string(p, f->name, "name", err) != 0 ||
            check_string(p, f->system_name, "system_name", err) != 0 ||
            check_string(p, f->filename, "filename", err) != 0)
            return strata_error_wrap(err, "function %zu (id %llu)", i, (unsigned long long)f->id);
    }
    return 0;
}

static int validate_location(const pprof_profile *p, const pprof_location *loc, strata_error *err) {
    if (loc->mapping_id != 0 && pprof_find_mapping(p, loc->mapping_id) == NULL)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "mapping id %llu is not defined",
                                (unsigned long long)loc->mapping_id);
    for (uint32_t j = 0; j < loc->line_count; j++) {
        uint64_t function_id = p->lines[loc->line_offset + j].function_id;
        if (pprof_find_function(p, function_id) == NULL)
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "line %u: function id %llu is not defined", j,
                                    (unsigned long long)function_id);
    }
    return 0;
}

static int validate_locations(const pprof_profile *p, strata_error *err) {
    for (size_t i = 0; i < p->n_locations; i++)
        if (validate_location(p, &p->locations[i], err) != 0)
            return strata_error_wrap(err, "location %zu (id %llu)", i,
                                     (unsigned long long)p->locations[i].id);
    return 0;
}

/* The validation hot loop: pprof_find_location inlined for the dense index producers use. */
static inline bool location_is_defined(const pprof_profile *p, uint64_t id) {
    const pprof_id_index *ix = &p->location_index;
    if (ix->dense != NULL)
        return id < ix->dense_len && ix->dense[id] != 0;
    return pprof_find_location(p, id) != NULL;
}

static int validate_sample_labels(const pprof_profile *p, const pprof_sample *s,
                                  strata_error *err) {
    for (uint32_t j = 0; j < s->label_count; j++) {
        const pprof_label *label = &p->sample_labels[s->label_offset + j];
        if (check_string(p, label->key, "key", err) != 0 ||
            check_string(p, label->str, "str", err) != 0 ||
            check_string(p, label->num_unit, "num_unit", err) != 0)
            return strata_error_wrap(err, "label %u", j);
    }
    return 0;
}

static int validate_sample(const pprof_profile *p, size_t i, size_t n_values, bool check_locations,
                           strata_error *err) {
    const pprof_sample *s = &p->samples[i];
    if (n_values != p->n_sample_types)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "%zu values given for %zu sample types", n_values,
                                p->n_sample_types);
    for (uint32_t j = 0; check_locations && j < s->location_count; j++) {
        uint64_t id = p->sample_location_ids[s->location_offset + j];
        if (!location_is_defined(p, id))
            return strata_error_set(err, STRATA_INVALID_ARGUMENT, "location id %llu is not defined",
                                    (unsigned long long)id);
    }
    return validate_sample_labels(p, s, err);
}

/* True when the location ids are exactly 1..n (n unique non-zero ids, the largest n: what Go and
 * most producers write) and every sample location id lies in [1, n]: then all are defined and the
 * per-id lookups can be skipped. */
static bool sample_locations_in_dense_range(const pprof_profile *p, const decoder *d) {
    return p->location_index.dense != NULL && p->location_index.dense_len == p->n_locations + 1 &&
           d->sample_location_id_range[0] >= 1 && d->sample_location_id_range[1] <= p->n_locations;
}

static int validate_samples(const pprof_profile *p, const decoder *d, strata_error *err) {
    bool check_locations = !sample_locations_in_dense_range(p, d);
    for (size_t i = 0; i < p->n_samples; i++) {
        size_t next = i + 1 < p->n_samples ? p->samples[i + 1].value_offset : d->n_sample_values;
        if (validate_sample(p, i, next - p->samples[i].value_offset, check_locations, err) != 0)
            return strata_error_wrap(err, "sample %zu", i);
    }
    return 0;
}

static int validate_profile(pprof_profile *p, const decoder *d, strata_error *err) {
    if (validate_string_table(p, err) != 0 || validate_value_types(p, err) != 0 ||
        validate_profile_strings(p, err) != 0 || pprof_profile_build_indexes(p, err) != 0 ||
        validate_mappings(p, err) != 0 || validate_functions(p, err) != 0 ||
        validate_locations(p, err) != 0 || validate_samples(p, d, err) != 0)
        return -1;
    return 0;
}

/* ---- entry point ---------------------------------------------------------------------------- */

/* Makes p own the protobuf bytes: inflated if gzipped, else copied. */
static int take_profile_bytes(const uint8_t *data, size_t len, const pprof_limits *limits,
                              pprof_profile *p, size_t *n_bytes, strata_error *err) {
    if (pprof_is_gzip(data, len)) {
        strata_buffer inflated = STRATA_BUFFER_INIT;
        if (pprof_gunzip(data, len, limits->max_decompressed_bytes, &inflated, err) != 0) {
            strata_buffer_free(&inflated);
            return -1;
        }
        p->owned_bytes = (uint8_t *)strata_buffer_detach(&inflated, n_bytes);
        if (p->owned_bytes == NULL) {
            strata_buffer_free(&inflated);
            return strata_error_oom(err);
        }
        return 0;
    }
    if (len > limits->max_decompressed_bytes)
        return strata_error_set(err, STRATA_RESOURCE_EXHAUSTED,
                                "profile is %zu bytes; the limit is %zu", len,
                                limits->max_decompressed_bytes);
    p->owned_bytes = malloc(len > 0 ? len : 1);
    if (p->owned_bytes == NULL)
        return strata_error_oom(err);
    if (len > 0)
        memcpy(p->owned_bytes, data, len);
    *n_bytes = len;
    return 0;
}

int pprof_decode(const uint8_t *data, size_t len, const pprof_limits *limits, pprof_profile *out,
                 strata_error *err) {
    memset(out, 0, sizeof *out);
    pprof_limits defaults;
    if (limits == NULL) {
        pprof_limits_default(&defaults);
        limits = &defaults;
    }
    size_t n_bytes = 0;
    if (take_profile_bytes(data, len, limits, out, &n_bytes, err) != 0) {
        pprof_profile_free(out);
        return -1;
    }
    decoder d;
    memset(&d, 0, sizeof d);
    d.p = out;
    d.limits = limits;
    d.err = err;
    d.sample_location_id_range[0] = UINT64_MAX;
    reader r = {out->owned_bytes, out->owned_bytes + n_bytes, out->owned_bytes};
    if (presize_arrays(&d, r) != 0 || decode_profile(&d, &r) != 0 ||
        validate_profile(out, &d, err) != 0) {
        pprof_profile_free(out);
        return -1;
    }
    return 0;
}
