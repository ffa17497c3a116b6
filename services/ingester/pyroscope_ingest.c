/*
 * pyroscope_ingest.c - POST /ingest as a WriteRawRequest (pyroscope_ingest.h).
 *
 * Three steps: the series labels from the query (`name`, `spyName`), one pprof from the body (the
 * client's own, or one built from collapsed stacks), and the WriteRawRequest packed around them.
 * A client's pprof is passed on as its bytes, inflated, so WriteRaw decodes it once more: this
 * module decodes it only to learn its sample types and time (the profile type's name). A missing
 * time_nanos is set by appending field 9 to the bytes (protobuf keeps the last value of a scalar
 * field), not by encoding the profile again.
 */
#include "pyroscope_ingest.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/array.h"
#include "common/hash.h"
#include "http/multipart.h"
#include "json/json.h"
#include "labels/labels.h"
#include "parca/profilestore/v1alpha1/profilestore.pb-c.h"

#define NS_PER_S 1000000000LL
#define DEFAULT_SAMPLE_RATE 100
#define MAX_PARTS 8
#define PPROF_TIME_NANOS_TAG 0x48 /* field 9, varint */

/* ---- profile types -------------------------------------------------------------------------- */

/* What a type suffix (folded, lines) or sample type name (pprof) means. */
typedef struct known_type {
    const char *name;   /* suffix / sample type name */
    const char *metric; /* __name__ */
    const char *type;   /* the sample type stored (folded, lines) */
    const char *unit;
    bool sampled; /* values count samples at sampleRate: stored as nanoseconds */
    bool gauge;   /* a state, not a delta over from..until */
} known_type;

static const known_type known_types[] = {
    {"cpu", "process_cpu", "cpu", "nanoseconds", true, false},
    {"itimer", "process_cpu", "cpu", "nanoseconds", true, false},
    {"wall", "wall", "wall", "nanoseconds", true, false},
    {"alloc_objects", "memory", "alloc_objects", "count", false, false},
    {"alloc_space", "memory", "alloc_space", "bytes", false, false},
    {"inuse_objects", "memory", "inuse_objects", "count", false, true},
    {"inuse_space", "memory", "inuse_space", "bytes", false, true},
    {"goroutines", "goroutines", "goroutine", "count", false, true},
    {"mutex_count", "mutex", "contentions", "count", false, false},
    {"mutex_duration", "mutex", "delay", "nanoseconds", false, false},
    {"block_count", "block", "contentions", "count", false, false},
    {"block_duration", "block", "delay", "nanoseconds", false, false},
    {"lock_count", "mutex", "contentions", "count", false, false},
    {"lock_duration", "mutex", "delay", "nanoseconds", false, false},
    {"alloc_in_new_tlab_objects", "memory", "alloc_in_new_tlab_objects", "count", false, false},
    {"alloc_in_new_tlab_bytes", "memory", "alloc_in_new_tlab_bytes", "bytes", false, false},
    {"alloc_outside_tlab_objects", "memory", "alloc_outside_tlab_objects", "count", false, false},
    {"alloc_outside_tlab_bytes", "memory", "alloc_outside_tlab_bytes", "bytes", false, false},
    {"exceptions", "exceptions", "exceptions", "count", false, false},
};
#define N_KNOWN_TYPES (sizeof known_types / sizeof known_types[0])

static const known_type *find_known_type(const char *name, size_t len) {
    for (size_t i = 0; i < N_KNOWN_TYPES; i++)
        if (strlen(known_types[i].name) == len && memcmp(known_types[i].name, name, len) == 0)
            return &known_types[i];
    return NULL;
}

static bool has_prefix(const char *s, size_t len, const char *prefix) {
    size_t n = strlen(prefix);
    return len >= n && memcmp(s, prefix, n) == 0;
}

static bool is_word(const char *s, size_t len, const char *word) {
    return len == strlen(word) && memcmp(s, word, len) == 0;
}

/* The __name__ a pprof sample type (or its display name) implies; NULL for counts of samples. */
static const char *metric_for_sample_type(const char *s, size_t len) {
    const known_type *k = find_known_type(s, len);
    if (k != NULL)
        return k->metric;
    if (is_word(s, len, "goroutine"))
        return "goroutines";
    if (is_word(s, len, "contentions") || is_word(s, len, "delay") ||
        has_prefix(s, len, "mutex_") || has_prefix(s, len, "lock_"))
        return "mutex";
    if (has_prefix(s, len, "block_"))
        return "block";
    if (has_prefix(s, len, "alloc_") || has_prefix(s, len, "inuse_"))
        return "memory";
    if (is_word(s, len, "exception"))
        return "exceptions";
    return NULL;
}

/* ---- query parameters ----------------------------------------------------------------------- */

/* A time parameter: unix seconds, or milli-/micro-/nanoseconds told apart by size. */
static int parse_time(const char *what, const char *s, int64_t now_ns, int64_t *out,
                      strata_error *err) {
    if (s == NULL || s[0] == '\0') {
        *out = now_ns;
        return 0;
    }
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < 0)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "%s must be a unix time in seconds, not \"%.64s\"", what, s);
    if (v < 100000000000LL) /* up to year 5138 in seconds */
        *out = (int64_t)v * NS_PER_S;
    else if (v < 100000000000000LL)
        *out = (int64_t)v * 1000000;
    else if (v < 100000000000000000LL)
        *out = (int64_t)v * 1000;
    else
        *out = (int64_t)v;
    return 0;
}

static int parse_sample_rate(const char *s, int64_t *out, strata_error *err) {
    if (s == NULL || s[0] == '\0') {
        *out = DEFAULT_SAMPLE_RATE;
        return 0;
    }
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || *end != '\0' || v <= 0 || v > NS_PER_S)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "sampleRate must be a positive number of samples per second, not "
                                "\"%.64s\"",
                                s);
    *out = v;
    return 0;
}

void pyroscope_sanitize_label_name(char *name) {
    for (char *p = name; *p != '\0'; p++)
        if (*p == '.')
            *p = '_';
}

/* The series: application name and labels, names and values owned. */
typedef struct ingest_series {
    char *app;
    char **names;
    char **values;
    size_t n;
    size_t cap;
} ingest_series;

static void series_free(ingest_series *s) {
    free(s->app);
    for (size_t i = 0; i < s->n; i++) {
        free(s->names[i]);
        free(s->values[i]);
    }
    free(s->names);
    free(s->values);
}

static const char *trim(const char *s, size_t *len) {
    while (*len > 0 && (s[0] == ' ' || s[0] == '\t'))
        s++, (*len)--;
    while (*len > 0 && (s[*len - 1] == ' ' || s[*len - 1] == '\t'))
        (*len)--;
    return s;
}

/* Sets label name to value (replacing an earlier one), both copied. */
static int series_set(ingest_series *s, const char *name, size_t name_len, const char *value,
                      size_t value_len, strata_error *err) {
    char *n = strndup(name, name_len), *v = strndup(value, value_len);
    if (n == NULL || v == NULL) {
        free(n);
        free(v);
        return strata_error_oom(err);
    }
    pyroscope_sanitize_label_name(n);
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->names[i], n) == 0) {
            free(n);
            free(s->values[i]);
            s->values[i] = v;
            return 0;
        }
    if (s->n == s->cap) {
        size_t cap = strata_array_capacity(s->cap, s->n + 1);
        char **names = strata_array_resize(s->names, cap, sizeof *names);
        if (names != NULL)
            s->names = names;
        char **values = names != NULL ? strata_array_resize(s->values, cap, sizeof *values) : NULL;
        if (values == NULL) {
            free(n);
            free(v);
            return strata_error_oom(err);
        }
        s->values = values;
        s->cap = cap;
    }
    s->names[s->n] = n;
    s->values[s->n++] = v;
    return 0;
}

/* One "k=v" of the name's braces. */
static int parse_name_label(const char *item, size_t len, size_t max_labels, ingest_series *s,
                            strata_error *err) {
    item = trim(item, &len);
    if (len == 0)
        return 0;
    const char *eq = memchr(item, '=', len);
    size_t key_len = eq != NULL ? (size_t)(eq - item) : 0;
    const char *key = trim(item, &key_len);
    if (eq == NULL || key_len == 0)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "name: label \"%.*s\" is not key=value", (int)(len > 64 ? 64 : len),
                                item);
    if (key_len >= 2 && key[0] == '_' && key[1] == '_')
        return 0; /* reserved names, dropped as Pyroscope drops them */
    size_t value_len = len - (size_t)(eq - item) - 1;
    const char *value = trim(eq + 1, &value_len);
    if (s->n >= max_labels)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "name: more than %zu labels",
                                max_labels);
    return series_set(s, key, key_len, value, value_len, err);
}

/* name = app [ "{" k=v ("," k=v)* "}" ]. The labels are added after the caller's own. */
static int parse_name(const char *name, size_t max_labels, ingest_series *s, strata_error *err) {
    if (name == NULL)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "the name parameter (application name and labels) is required");
    const char *brace = strchr(name, '{');
    size_t app_len = brace != NULL ? (size_t)(brace - name) : strlen(name);
    const char *app = trim(name, &app_len);
    if (app_len == 0)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "name \"%.64s\" has no application name", name);
    if ((s->app = strndup(app, app_len)) == NULL)
        return strata_error_oom(err);
    if (brace == NULL)
        return 0;
    const char *close = strrchr(brace, '}');
    size_t tail = close != NULL ? strlen(close + 1) : 0;
    if (close != NULL)
        (void)trim(close + 1, &tail);
    if (close == NULL || tail != 0)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "name \"%.64s\": labels must end with '}'", name);
    for (const char *p = brace + 1; p < close;) {
        const char *comma = memchr(p, ',', (size_t)(close - p));
        const char *stop = comma != NULL ? comma : close;
        if (parse_name_label(p, (size_t)(stop - p), max_labels, s, err) != 0)
            return -1;
        p = stop + 1;
    }
    return 0;
}

/* For folded and lines: the type suffix of the application name, stripped when known. */
static const known_type *take_type_suffix(ingest_series *s) {
    char *dot = strrchr(s->app, '.');
    const known_type *k = dot != NULL ? find_known_type(dot + 1, strlen(dot + 1)) : NULL;
    if (k != NULL && dot != s->app) {
        *dot = '\0';
        return k;
    }
    return find_known_type("cpu", 3);
}

/* The labels in order: __name__, service_name, pyroscope_spy, then the name's (one of those may
 * replace service_name). */
static int series_labels(const char *metric, const ingest_series *name, const char *spy,
                         ingest_series *s, strata_error *err) {
    if (series_set(s, STRATA_LABEL_NAME, strlen(STRATA_LABEL_NAME), metric, strlen(metric), err) !=
            0 ||
        series_set(s, "service_name", 12, name->app, strlen(name->app), err) != 0)
        return -1;
    if (spy != NULL && spy[0] != '\0' &&
        series_set(s, "pyroscope_spy", 13, spy, strlen(spy), err) != 0)
        return -1;
    for (size_t i = 0; i < name->n; i++)
        if (series_set(s, name->names[i], strlen(name->names[i]), name->values[i],
                       strlen(name->values[i]), err) != 0)
            return -1;
    return 0;
}

/* ---- the WriteRawRequest -------------------------------------------------------------------- */

static int pack_write_raw(const ingest_series *s, const strata_buffer *pprof, strata_buffer *out,
                          strata_error *err) {
    Parca__Profilestore__V1alpha1__Label *labels = calloc(s->n + 1, sizeof *labels);
    Parca__Profilestore__V1alpha1__Label **label_ptrs = calloc(s->n + 1, sizeof *label_ptrs);
    if (labels == NULL || label_ptrs == NULL) {
        free(labels);
        free(label_ptrs);
        return strata_error_oom(err);
    }
    for (size_t i = 0; i < s->n; i++) {
        labels[i] =
            (Parca__Profilestore__V1alpha1__Label)PARCA__PROFILESTORE__V1ALPHA1__LABEL__INIT;
        labels[i].name = s->names[i];
        labels[i].value = s->values[i];
        label_ptrs[i] = &labels[i];
    }
    Parca__Profilestore__V1alpha1__LabelSet set = PARCA__PROFILESTORE__V1ALPHA1__LABEL_SET__INIT;
    set.labels = label_ptrs;
    set.n_labels = s->n;
    Parca__Profilestore__V1alpha1__RawSample sample =
        PARCA__PROFILESTORE__V1ALPHA1__RAW_SAMPLE__INIT;
    sample.raw_profile.data = pprof->data;
    sample.raw_profile.len = pprof->len;
    Parca__Profilestore__V1alpha1__RawSample *sample_ptr = &sample;
    Parca__Profilestore__V1alpha1__RawProfileSeries series =
        PARCA__PROFILESTORE__V1ALPHA1__RAW_PROFILE_SERIES__INIT;
    series.labels = &set;
    series.samples = &sample_ptr;
    series.n_samples = 1;
    Parca__Profilestore__V1alpha1__RawProfileSeries *series_ptr = &series;
    Parca__Profilestore__V1alpha1__WriteRawRequest req =
        PARCA__PROFILESTORE__V1ALPHA1__WRITE_RAW_REQUEST__INIT;
    req.series = &series_ptr;
    req.n_series = 1;
    int rc = strata_buffer_reserve(out, protobuf_c_message_get_packed_size(&req.base));
    if (rc == 0)
        out->len += protobuf_c_message_pack(&req.base, out->data + out->len);
    free(labels);
    free(label_ptrs);
    return rc != 0 ? strata_error_oom(err) : 0;
}

/* ---- folded and lines ----------------------------------------------------------------------- */

/* A pprof under construction from collapsed stacks: one function and location per frame name. */
typedef struct stack_profile {
    strata_intern names;
    pprof_function *functions;
    pprof_location *locations;
    pprof_line *lines;
    size_t n_functions, cap_functions;
    pprof_sample *samples;
    int64_t *values;
    size_t n_samples, cap_samples;
    uint64_t *location_ids;
    size_t n_location_ids, cap_location_ids;
} stack_profile;

static void stack_profile_free(stack_profile *b) {
    strata_intern_free(&b->names);
    free(b->functions);
    free(b->locations);
    free(b->lines);
    free(b->samples);
    free(b->values);
    free(b->location_ids);
}

/* The capacity to grow to from cap so that need fits. */
/* Room for need functions (with their locations and lines). */
static int reserve_functions(stack_profile *b, size_t need) {
    if (need <= b->cap_functions)
        return 0;
    size_t n = strata_array_capacity(b->cap_functions, need);
    void *p;
    if ((p = strata_array_resize(b->functions, n, sizeof *b->functions)) == NULL)
        return -1;
    b->functions = p;
    if ((p = strata_array_resize(b->locations, n, sizeof *b->locations)) == NULL)
        return -1;
    b->locations = p;
    if ((p = strata_array_resize(b->lines, n, sizeof *b->lines)) == NULL)
        return -1;
    b->lines = p;
    b->cap_functions = n;
    return 0;
}

/* Room for need samples (with their values) and need_ids location ids. */
static int reserve_samples(stack_profile *b, size_t need, size_t need_ids) {
    if (need > b->cap_samples) {
        size_t n = strata_array_capacity(b->cap_samples, need);
        void *p;
        if ((p = strata_array_resize(b->samples, n, sizeof *b->samples)) == NULL)
            return -1;
        b->samples = p;
        if ((p = strata_array_resize(b->values, n, sizeof *b->values)) == NULL)
            return -1;
        b->values = p;
        b->cap_samples = n;
    }
    if (STRATA_ARRAY_RESERVE(b->location_ids, b->cap_location_ids, need_ids) != 0)
        return -1;
    return 0;
}

/* The function (and location) id of a frame name; strings 0-2 are "", type and unit. */
static int frame_id(stack_profile *b, const char *name, size_t len, uint64_t *id,
                    strata_error *err) {
    uint32_t index;
    if (strata_intern_add(&b->names, name, len, &index) != 0)
        return strata_error_oom(err);
    if (index == b->n_functions) {
        if (reserve_functions(b, index + 1) != 0)
            return strata_error_oom(err);
        uint64_t fid = index + 1;
        b->functions[index] = (pprof_function){.id = fid, .name = (int64_t)index + 3};
        b->lines[index] = (pprof_line){.function_id = fid};
        b->locations[index] = (pprof_location){.id = fid, .line_offset = index, .line_count = 1};
        b->n_functions++;
    }
    *id = index + 1;
    return 0;
}

/* Adds the stack "root;...;leaf" (frames leaf first in pprof) with value. */
static int add_stack(stack_profile *b, const char *stack, size_t len, int64_t value,
                     const ingest_limits *limits, strata_error *err) {
    size_t depth = 1;
    for (size_t i = 0; i < len; i++)
        depth += stack[i] == ';';
    if (depth > limits->pprof.max_stack_depth)
        return strata_error_set(err, STRATA_RESOURCE_EXHAUSTED,
                                "a stack has %zu frames, more than the limit of %zu", depth,
                                limits->pprof.max_stack_depth);
    if (b->n_samples == limits->pprof.max_samples)
        return strata_error_set(err, STRATA_RESOURCE_EXHAUSTED,
                                "more than %zu stacks, the limit of samples per profile",
                                limits->pprof.max_samples);
    if (reserve_samples(b, b->n_samples + 1, b->n_location_ids + depth) != 0)
        return strata_error_oom(err);
    pprof_sample *s = &b->samples[b->n_samples];
    *s = (pprof_sample){.location_offset = (uint32_t)b->n_location_ids,
                        .location_count = (uint32_t)depth,
                        .value_offset = (uint32_t)b->n_samples};
    uint64_t *ids = &b->location_ids[b->n_location_ids];
    const char *end = stack + len;
    for (size_t k = depth; k-- > 0;) { /* the first frame is the root: the last location */
        const char *semi = memchr(stack, ';', (size_t)(end - stack));
        const char *stop = semi != NULL ? semi : end;
        if (stop - stack > (ptrdiff_t)limits->pprof.max_string_length)
            return strata_error_set(err, STRATA_RESOURCE_EXHAUSTED,
                                    "a frame name is longer than %zu bytes",
                                    limits->pprof.max_string_length);
        if (frame_id(b, stack, (size_t)(stop - stack), &ids[k], err) != 0)
            return -1;
        stack = stop + 1;
    }
    b->values[b->n_samples++] = value;
    b->n_location_ids += depth;
    return 0;
}

/* One line of folded ("stack value") or lines ("stack") text. */
static int add_line(stack_profile *b, const char *line, size_t len, bool folded, int64_t scale,
                    size_t line_no, const ingest_limits *limits, strata_error *err) {
    while (len > 0 && (line[len - 1] == '\r' || line[len - 1] == ' '))
        len--;
    if (len == 0)
        return 0;
    int64_t value = 1;
    if (folded) {
        const char *space = memrchr(line, ' ', len);
        char digits[24];
        size_t n = space != NULL ? len - (size_t)(space - line) - 1 : 0;
        char *end = NULL;
        if (n > 0 && n < sizeof digits) {
            memcpy(digits, space + 1, n);
            digits[n] = '\0';
            errno = 0;
            value = strtoll(digits, &end, 10);
        }
        if (end == NULL || *end != '\0' || errno != 0 || value < 0 || n == 0)
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "folded line %zu does not end in a space and a count", line_no);
        len = (size_t)(space - line);
    }
    if (value == 0)
        return 0;
    if (__builtin_mul_overflow(value, scale, &value))
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "line %zu: the value overflows",
                                line_no);
    return add_stack(b, line, len, value, limits, err);
}

/* The pprof of collapsed stacks, encoded into out. */
static int encode_stacks(const stack_profile *b, const known_type *k, int64_t period,
                         int64_t from_ns, int64_t until_ns, strata_buffer *out, strata_error *err) {
    pprof_string *strings = calloc(b->n_functions + 3, sizeof *strings);
    if (strings == NULL)
        return strata_error_oom(err);
    strings[0] = (pprof_string){"", 0};
    strings[1] = (pprof_string){k->type, (uint32_t)strlen(k->type)};
    strings[2] = (pprof_string){k->unit, (uint32_t)strlen(k->unit)};
    for (size_t i = 0; i < b->n_functions; i++)
        strings[i + 3] = (pprof_string){b->names.strings[i], b->names.lengths[i]};
    pprof_value_type type = {1, 2};
    pprof_profile p = {
        .sample_types = &type,
        .n_sample_types = 1,
        .samples = b->samples,
        .n_samples = b->n_samples,
        .sample_location_ids = b->location_ids,
        .n_sample_location_ids = b->n_location_ids,
        .sample_values = b->values,
        .locations = b->locations,
        .n_locations = b->n_functions,
        .lines = b->lines,
        .n_lines = b->n_functions,
        .functions = b->functions,
        .n_functions = b->n_functions,
        .strings = strings,
        .n_strings = b->n_functions + 3,
        .time_nanos = from_ns,
        .duration_nanos = k->gauge || until_ns <= from_ns ? 0 : until_ns - from_ns,
        .period_type = type,
        .period = period,
    };
    int rc = pprof_encode(&p, false, out, err);
    free(strings);
    return rc;
}

static int stacks_to_pprof(const pyroscope_ingest_params *params, bool folded, const known_type *k,
                           int64_t sample_rate, int64_t from_ns, int64_t until_ns,
                           const ingest_limits *limits, strata_buffer *out, strata_error *err) {
    int64_t period = k->sampled ? NS_PER_S / sample_rate : 1;
    stack_profile b = {0};
    if (strata_intern_init(&b.names) != 0)
        return strata_error_oom(err);
    const char *text = (const char *)params->body, *end = text + params->body_len;
    int rc = 0;
    for (size_t line_no = 1; rc == 0 && text < end; line_no++) {
        const char *nl = memchr(text, '\n', (size_t)(end - text));
        const char *stop = nl != NULL ? nl : end;
        rc = add_line(&b, text, (size_t)(stop - text), folded, period, line_no, limits, err);
        text = stop + 1;
    }
    if (rc == 0)
        rc = encode_stacks(&b, k, period, from_ns, until_ns, out, err);
    stack_profile_free(&b);
    return rc;
}

/* ---- pprof ---------------------------------------------------------------------------------- */

/* sample_type_config's display-name for sample type s, if it gives one. */
static bool display_name(const json_value *config, pprof_string s, const char **name, size_t *len) {
    for (size_t i = 0; config != NULL && i < json_object_size(config); i++) {
        const char *key = json_object_key_at(config, i);
        if (strlen(key) != s.len || memcmp(key, s.ptr, s.len) != 0)
            continue;
        const json_value *d = json_object_get(json_object_value_at(config, i), "display-name");
        return d != NULL && json_get_string(d, name, len);
    }
    return false;
}

/* __name__ for a client's pprof (see the header). */
static const char *pprof_metric(const pprof_profile *p, const json_value *config, char *fallback,
                                size_t fallback_size) {
    const char *first = NULL;
    for (size_t t = 0; t < p->n_sample_types; t++) {
        pprof_string s = pprof_string_at(p, p->sample_types[t].type);
        if (is_word(s.ptr, s.len, "wall"))
            return "wall";
    }
    for (size_t t = 0; t < p->n_sample_types; t++) {
        pprof_string s = pprof_string_at(p, p->sample_types[t].type);
        const char *name = s.ptr;
        size_t len = s.len;
        (void)display_name(config, s, &name, &len);
        const char *metric = metric_for_sample_type(name, len);
        if (metric == NULL)
            metric = metric_for_sample_type(s.ptr, s.len);
        if (metric != NULL)
            return metric;
        if (first == NULL && s.len > 0 && s.len < fallback_size) {
            memcpy(fallback, s.ptr, s.len);
            fallback[s.len] = '\0';
            first = fallback;
        }
    }
    return first != NULL ? first : "unknown";
}

/* The profile part (and sample_type_config) of a multipart body, or the whole body. */
static int pprof_body(const pyroscope_ingest_params *params, const uint8_t **data, size_t *len,
                      json_document **config, strata_error *err) {
    *data = params->body;
    *len = params->body_len;
    if (!http_multipart_is_form_data(params->content_type))
        return 0;
    http_multipart_part parts[MAX_PARTS];
    size_t n;
    if (http_multipart_parse(params->content_type, params->body, params->body_len, parts, MAX_PARTS,
                             &n, err) != 0)
        return -1;
    const http_multipart_part *profile = http_multipart_find(parts, n, "profile");
    const http_multipart_part *prev = http_multipart_find(parts, n, "prev_profile");
    const http_multipart_part *types = http_multipart_find(parts, n, "sample_type_config");
    if (profile == NULL)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "the multipart body has no \"profile\" part");
    if (prev != NULL && prev->len > 0)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "prev_profile (the previous state of a cumulative profile) is not "
                                "supported: send delta profiles");
    *data = profile->data;
    *len = profile->len;
    if (types != NULL && types->len > 0 &&
        json_parse((const char *)types->data, types->len, config, err) != 0)
        return strata_error_wrap(err, "sample_type_config");
    if (*config != NULL && json_value_type(json_document_root(*config)) != JSON_OBJECT)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "sample_type_config must be a JSON object");
    return 0;
}

/* The client's pprof, inflated, into raw; its __name__ into *metric (static or in fallback). */
static int client_pprof(const pyroscope_ingest_params *params, const ingest_limits *limits,
                        int64_t from_ns, strata_buffer *raw, const char **metric, char *fallback,
                        size_t fallback_size, strata_error *err) {
    const uint8_t *data;
    size_t len;
    json_document *config = NULL;
    int rc = pprof_body(params, &data, &len, &config, err);
    if (rc == 0 && pprof_is_gzip(data, len)) {
        if (pprof_gunzip(data, len, limits->pprof.max_decompressed_bytes, raw, err) != 0)
            rc = strata_error_wrap(err, "invalid pprof");
    } else if (rc == 0 && strata_buffer_append(raw, data, len) != 0) {
        rc = strata_error_oom(err);
    }
    pprof_profile p;
    if (rc == 0 && pprof_decode(raw->data, raw->len, &limits->pprof, &p, err) != 0)
        rc = strata_error_wrap(err, "invalid pprof");
    if (rc == 0) {
        *metric = pprof_metric(&p, config != NULL ? json_document_root(config) : NULL, fallback,
                               fallback_size);
        if (p.time_nanos == 0 && (strata_buffer_append_byte(raw, PPROF_TIME_NANOS_TAG) != 0 ||
                                  strata_buffer_append_uvarint(raw, (uint64_t)from_ns) != 0))
            rc = strata_error_oom(err);
        pprof_profile_free(&p);
    }
    json_document_free(config);
    return rc;
}

/* ---- the request ---------------------------------------------------------------------------- */

typedef enum ingest_format { FORMAT_PPROF, FORMAT_FOLDED, FORMAT_LINES } ingest_format;

static int parse_format(const pyroscope_ingest_params *params, ingest_format *out,
                        strata_error *err) {
    const char *f = params->format;
    if (f == NULL || f[0] == '\0')
        *out = http_multipart_is_form_data(params->content_type) ? FORMAT_PPROF : FORMAT_FOLDED;
    else if (strcmp(f, "pprof") == 0)
        *out = FORMAT_PPROF;
    else if (strcmp(f, "folded") == 0)
        *out = FORMAT_FOLDED;
    else if (strcmp(f, "lines") == 0)
        *out = FORMAT_LINES;
    else
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "format \"%.32s\" is not supported: use pprof, folded or lines", f);
    return 0;
}

int pyroscope_ingest_to_write_raw(const pyroscope_ingest_params *params,
                                  const ingest_limits *limits, int64_t now_ns, strata_buffer *out,
                                  strata_error *err) {
    ingest_format format = FORMAT_FOLDED;
    int64_t from_ns = 0, until_ns = 0, rate = DEFAULT_SAMPLE_RATE;
    ingest_series s = {0};
    if (parse_format(params, &format, err) != 0 ||
        parse_time("from", params->from, now_ns, &from_ns, err) != 0 ||
        parse_time("until", params->until, now_ns, &until_ns, err) != 0 ||
        parse_sample_rate(params->sample_rate, &rate, err) != 0 ||
        parse_name(params->name, limits->max_labels_per_series, &s, err) != 0) {
        series_free(&s);
        return -1;
    }
    strata_buffer pprof = STRATA_BUFFER_INIT;
    const char *metric = NULL;
    char fallback[64];
    int rc;
    if (format == FORMAT_PPROF) {
        rc = client_pprof(params, limits, from_ns, &pprof, &metric, fallback, sizeof fallback, err);
    } else {
        const known_type *k = take_type_suffix(&s);
        metric = k->metric;
        rc = stacks_to_pprof(params, format == FORMAT_FOLDED, k, rate, from_ns, until_ns, limits,
                             &pprof, err);
    }
    ingest_series labels = {0};
    if (rc == 0)
        rc = series_labels(metric, &s, params->spy_name, &labels, err);
    if (rc == 0)
        rc = pack_write_raw(&labels, &pprof, out, err);
    series_free(&labels);
    series_free(&s);
    strata_buffer_free(&pprof);
    return rc;
}
