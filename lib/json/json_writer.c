/*
 * json_writer.c - the JSON writer (see json.h).
 *
 * Output is compact. Strings are escaped as RFC 8259 requires (quote, backslash and control
 * characters; \b \f \n \r \t where they exist, \u00XX otherwise); valid UTF-8 passes through
 * unchanged and bytes that are not valid UTF-8 are replaced by U+FFFD, so the output is always
 * valid JSON whatever the input bytes. Any failure (allocation, nesting past JSON_MAX_DEPTH,
 * closing what is not open) is sticky: later calls do nothing and json_writer_finish returns -1.
 */
#include "json/json.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/utf8.h"

void json_writer_init(json_writer *w, strata_buffer *out) {
    memset(w, 0, sizeof *w);
    w->out = out;
    w->first[0] = true;
}

static void writer_append(json_writer *w, const void *data, size_t len) {
    if (!w->failed && strata_buffer_append(w->out, data, len) != 0)
        w->failed = true;
}

static void writer_append_str(json_writer *w, const char *s) {
    writer_append(w, s, strlen(s));
}

/* Writes the comma before a value or key where one is needed; false if nothing may be written. */
static bool writer_begin_item(json_writer *w) {
    if (w->failed)
        return false;
    if (w->after_key) {
        w->after_key = false;
        return true;
    }
    if (w->depth == 0 && !w->first[0]) {
        w->failed = true; /* a second top-level value would not be one JSON document */
        return false;
    }
    if (!w->first[w->depth])
        writer_append(w, ",", 1);
    w->first[w->depth] = false;
    return !w->failed;
}

static void writer_open(json_writer *w, char open) {
    if (!writer_begin_item(w))
        return;
    if (w->depth == JSON_MAX_DEPTH) {
        w->failed = true;
        return;
    }
    writer_append(w, &open, 1);
    w->depth++;
    w->first[w->depth] = true;
}

static void writer_close(json_writer *w, char close) {
    if (w->failed)
        return;
    if (w->depth == 0 || w->after_key) {
        w->failed = true;
        return;
    }
    writer_append(w, &close, 1);
    w->depth--;
}

void json_begin_object(json_writer *w) {
    writer_open(w, '{');
}

void json_end_object(json_writer *w) {
    writer_close(w, '}');
}

void json_begin_array(json_writer *w) {
    writer_open(w, '[');
}

void json_end_array(json_writer *w) {
    writer_close(w, ']');
}

/* Appends the escape for an ASCII byte that needs one, returning false if it needs none. */
static bool write_ascii_escape(json_writer *w, unsigned char c) {
    static const char hex[] = "0123456789abcdef";
    const char *short_form = c == '"'    ? "\\\""
                             : c == '\\' ? "\\\\"
                             : c == '\b' ? "\\b"
                             : c == '\f' ? "\\f"
                             : c == '\n' ? "\\n"
                             : c == '\r' ? "\\r"
                             : c == '\t' ? "\\t"
                                         : NULL;
    if (short_form != NULL) {
        writer_append_str(w, short_form);
        return true;
    }
    if (c >= 0x20)
        return false;
    char u[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
    writer_append(w, u, sizeof u);
    return true;
}

static void write_escaped(json_writer *w, const char *s, size_t len) {
    const unsigned char *p = (const unsigned char *)s;
    writer_append(w, "\"", 1);
    size_t run = 0; /* start of the pending run of bytes copied verbatim */
    for (size_t i = 0; i < len && !w->failed;) {
        unsigned char c = p[i];
        size_t n = c < 0x80 ? 1 : strata_utf8_sequence_length(p + i, len - i);
        bool plain = c >= 0x80 ? n > 0 : (c >= 0x20 && c != '"' && c != '\\');
        if (plain) {
            i += n;
            continue;
        }
        writer_append(w, s + run, i - run);
        if (c >= 0x80)
            writer_append(w, "\xef\xbf\xbd", 3); /* U+FFFD for a byte that is not UTF-8 */
        else
            write_ascii_escape(w, c);
        i++;
        run = i;
    }
    writer_append(w, s + run, len - run);
    writer_append(w, "\"", 1);
}

void json_key(json_writer *w, const char *key) {
    if (w->failed)
        return;
    if (w->after_key || w->depth == 0) {
        w->failed = true; /* a key needs an open object and no pending key */
        return;
    }
    if (!w->first[w->depth])
        writer_append(w, ",", 1);
    w->first[w->depth] = false;
    write_escaped(w, key != NULL ? key : "", key != NULL ? strlen(key) : 0);
    writer_append(w, ":", 1);
    w->after_key = true;
}

void json_string(json_writer *w, const char *s) {
    if (s == NULL) {
        json_null(w);
        return;
    }
    json_string_len(w, s, strlen(s));
}

void json_string_len(json_writer *w, const char *s, size_t len) {
    if (writer_begin_item(w))
        write_escaped(w, s, len);
}

void json_int(json_writer *w, int64_t v) {
    char text[32];
    if (writer_begin_item(w))
        writer_append(w, text, (size_t)snprintf(text, sizeof text, "%" PRId64, v));
}

void json_uint(json_writer *w, uint64_t v) {
    char text[32];
    if (writer_begin_item(w))
        writer_append(w, text, (size_t)snprintf(text, sizeof text, "%" PRIu64, v));
}

void json_double(json_writer *w, double v) {
    if (!isfinite(v)) {
        json_null(w);
        return;
    }
    char text[40];
    /* The shortest of %.15g and %.17g that reads back as the same double; negative zero keeps
     * its fraction so that it is not read back as the integer 0. */
    int n = snprintf(text, sizeof text, "%.15g", v);
    if (strtod(text, NULL) != v)
        n = snprintf(text, sizeof text, "%.17g", v);
    if (v == 0 && signbit(v))
        n = snprintf(text, sizeof text, "-0.0");
    if (writer_begin_item(w))
        writer_append(w, text, (size_t)n);
}

void json_bool(json_writer *w, bool v) {
    if (writer_begin_item(w))
        writer_append_str(w, v ? "true" : "false");
}

void json_null(json_writer *w) {
    if (writer_begin_item(w))
        writer_append_str(w, "null");
}

void json_raw(json_writer *w, const char *json, size_t len) {
    if (writer_begin_item(w))
        writer_append(w, json, len);
}

int json_writer_finish(json_writer *w) {
    return w->failed || w->depth != 0 || w->after_key ? -1 : 0;
}

void json_timestamp_ns(json_writer *w, int64_t unix_ns) {
    int64_t secs = unix_ns / 1000000000, nanos = unix_ns % 1000000000;
    if (nanos < 0) { /* floor division: the fraction of a pre-1970 instant counts forward */
        secs--;
        nanos += 1000000000;
    }
    time_t t = (time_t)secs;
    struct tm tm;
    if (gmtime_r(&t, &tm) == NULL) {
        json_null(w);
        return;
    }
    char text[80];
    snprintf(text, sizeof text, "%04d-%02d-%02dT%02d:%02d:%02d.%09" PRId64 "Z", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, nanos);
    json_string(w, text);
}

void json_duration_ns(json_writer *w, int64_t ns) {
    char text[48];
    uint64_t magnitude = ns < 0 ? (uint64_t)0 - (uint64_t)ns : (uint64_t)ns;
    snprintf(text, sizeof text, "%s%" PRIu64 ".%09" PRIu64 "s", ns < 0 ? "-" : "",
             magnitude / 1000000000u, magnitude % 1000000000u);
    json_string(w, text);
}
