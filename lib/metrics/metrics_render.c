/*
 * metrics_render.c - the Prometheus text exposition format 0.0.4; see metrics.h.
 *
 *   # HELP http_requests_total Requests served.
 *   # TYPE http_requests_total counter
 *   http_requests_total{code="2xx",handler="/metrics"} 3
 *
 * Help text escapes backslash and newline; label values also escape the double quote.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics/metrics_internal.h"

int metrics_format_double(strata_buffer *out, double v) {
    if (isnan(v))
        return strata_buffer_append_str(out, "NaN");
    if (isinf(v))
        return strata_buffer_append_str(out, v > 0 ? "+Inf" : "-Inf");
    /* Shortest round-trip digits, laid out like Go's strconv 'g' with precision -1 (what the
     * official clients write): exponent form when the exponent is < -4 or >= 6. */
    char text[48];
    int digits = 1;
    for (; digits < 17; digits++) {
        snprintf(text, sizeof text, "%.*e", digits - 1, v);
        if (strtod(text, NULL) == v)
            break;
    }
    snprintf(text, sizeof text, "%.*e", digits - 1, v);
    int exp = (int)strtol(strchr(text, 'e') + 1, NULL, 10);
    if (exp >= -4 && exp < 6) {
        int decimals = digits - 1 - exp;
        snprintf(text, sizeof text, "%.*f", decimals > 0 ? decimals : 0, v);
    }
    return strata_buffer_append_str(out, text);
}

static int append_escaped(strata_buffer *out, const char *s, bool quote) {
    for (; *s != '\0'; s++) {
        int rc;
        if (*s == '\\')
            rc = strata_buffer_append_str(out, "\\\\");
        else if (*s == '\n')
            rc = strata_buffer_append_str(out, "\\n");
        else if (quote && *s == '"')
            rc = strata_buffer_append_str(out, "\\\"");
        else
            rc = strata_buffer_append_byte(out, (uint8_t)*s);
        if (rc != 0)
            return -1;
    }
    return 0;
}

static const char *type_name(metrics_family_type t) {
    switch (t) {
        case METRICS_FAMILY_COUNTER:
            return "counter";
        case METRICS_FAMILY_GAUGE:
            return "gauge";
        case METRICS_FAMILY_HISTOGRAM:
            return "histogram";
    }
    return "untyped";
}

static int render_header(const metrics_family *f, strata_buffer *out) {
    if (strata_buffer_appendf(out, "# HELP %s ", f->name) != 0 ||
        append_escaped(out, f->help, false) != 0)
        return -1;
    return strata_buffer_appendf(out, "\n# TYPE %s %s\n", f->name, type_name(f->type));
}

/* Writes `name{labels[,le="x"]}` (no braces when there is nothing inside). */
static int render_name(const metrics_series *s, const char *suffix, const char *le,
                       strata_buffer *out) {
    const metrics_family *f = s->family;
    if (strata_buffer_appendf(out, "%s%s", f->name, suffix) != 0)
        return -1;
    if (f->n_labels == 0 && le == NULL)
        return 0;
    if (strata_buffer_append_byte(out, '{') != 0)
        return -1;
    for (size_t i = 0; i < f->n_labels; i++) {
        if (strata_buffer_appendf(out, "%s%s=\"", i ? "," : "", f->label_names[i]) != 0 ||
            append_escaped(out, s->label_values[i], true) != 0 ||
            strata_buffer_append_byte(out, '"') != 0)
            return -1;
    }
    if (le != NULL && strata_buffer_appendf(out, "%sle=\"%s\"", f->n_labels ? "," : "", le) != 0)
        return -1;
    return strata_buffer_append_byte(out, '}');
}

static int render_value_line(const metrics_series *s, strata_buffer *out) {
    if (render_name(s, "", NULL, out) != 0 || strata_buffer_append_byte(out, ' ') != 0)
        return -1;
    uint64_t bits = atomic_load_explicit(&s->value, memory_order_relaxed);
    int rc;
    if (s->family->kind == METRICS_DOUBLE) {
        rc = metrics_format_double(out, metrics_bits_to_double(bits));
    } else {
        int64_t v;
        memcpy(&v, &bits, sizeof v);
        rc = strata_buffer_appendf(out, "%" PRId64, v);
    }
    return rc != 0 ? -1 : strata_buffer_append_byte(out, '\n');
}

static int render_bucket(const metrics_series *s, const char *le, uint64_t cumulative,
                         strata_buffer *out) {
    if (render_name(s, "_bucket", le, out) != 0)
        return -1;
    return strata_buffer_appendf(out, " %" PRIu64 "\n", cumulative);
}

static int render_histogram(const metrics_series *s, strata_buffer *out) {
    const metrics_family *f = s->family;
    uint64_t cumulative = 0;
    strata_buffer le = STRATA_BUFFER_INIT; /* the le label value, reused across buckets */
    int rc = 0;
    for (size_t i = 0; i <= f->n_bounds && rc == 0; i++) {
        cumulative += atomic_load_explicit(&s->buckets[i], memory_order_relaxed);
        strata_buffer_reset(&le);
        rc = i < f->n_bounds ? metrics_format_double(&le, f->bounds[i])
                             : strata_buffer_append_str(&le, "+Inf");
        if (rc == 0)
            rc = strata_buffer_append_byte(&le, '\0');
        if (rc == 0)
            rc = render_bucket(s, (const char *)le.data, cumulative, out);
    }
    strata_buffer_free(&le);
    if (rc != 0)
        return -1;
    double sum = metrics_bits_to_double(atomic_load_explicit(&s->sum_bits, memory_order_relaxed));
    if (render_name(s, "_sum", NULL, out) != 0 || strata_buffer_append_byte(out, ' ') != 0 ||
        metrics_format_double(out, sum) != 0 || strata_buffer_append_byte(out, '\n') != 0)
        return -1;
    if (render_name(s, "_count", NULL, out) != 0)
        return -1;
    return strata_buffer_appendf(out, " %" PRIu64 "\n", cumulative);
}

static int compare_series(const void *a, const void *b) {
    const metrics_series *sa = *(metrics_series *const *)a;
    const metrics_series *sb = *(metrics_series *const *)b;
    for (size_t i = 0; i < sa->family->n_labels; i++) {
        int c = strcmp(sa->label_values[i], sb->label_values[i]);
        if (c != 0)
            return c;
    }
    return 0;
}

/* Copies and sorts the children; they are never freed before the registry, so rendering can
 * proceed without the family lock. */
static metrics_series **sorted_children(metrics_family *f, size_t *n) {
    pthread_rwlock_rdlock(&f->lock);
    *n = f->n_children;
    metrics_series **v = malloc((*n ? *n : 1) * sizeof *v);
    if (v != NULL && *n > 0)
        memcpy(v, f->children, *n * sizeof *v);
    pthread_rwlock_unlock(&f->lock);
    if (v == NULL || *n < 2 || f->n_labels == 0)
        return v;
    qsort(v, *n, sizeof *v, compare_series);
    return v;
}

int metrics_render_family(metrics_family *f, strata_buffer *out) {
    size_t n = 0;
    metrics_series **children = sorted_children(f, &n);
    if (children == NULL)
        return -1;
    int rc = 0;
    if (n > 0)
        rc = render_header(f, out);
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = f->type == METRICS_FAMILY_HISTOGRAM ? render_histogram(children[i], out)
                                                 : render_value_line(children[i], out);
    free(children);
    return rc;
}
