/*
 * labels.c - label sets, profile types and label matchers (see labels.h). The selector parser
 * lives in selector.c.
 */
#include "labels/labels.h"
#include "labels/labels_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/array.h"
#include "common/hash.h"
#include "common/utf8.h"

/* ---- label names and escaping ------------------------------------------------------------- */

static bool is_name_start(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static bool is_name_char(char c) {
    return is_name_start(c) || (c >= '0' && c <= '9');
}

bool label_name_is_valid(const char *name, size_t len) {
    if (name == NULL || len == 0 || !is_name_start(name[0]))
        return false;
    for (size_t i = 1; i < len; i++) {
        if (!is_name_char(name[i]))
            return false;
    }
    return true;
}

int labels_append_quoted(strata_buffer *out, const char *s) {
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)s;
    size_t len = strlen(s);
    if (strata_buffer_append_byte(out, '"') != 0)
        return -1;
    for (size_t i = 0; i < len;) {
        unsigned char c = p[i];
        const char *esc = NULL;
        switch (c) {
            case '"':
                esc = "\\\"";
                break;
            case '\\':
                esc = "\\\\";
                break;
            case '\n':
                esc = "\\n";
                break;
            case '\t':
                esc = "\\t";
                break;
            case '\r':
                esc = "\\r";
                break;
            default:
                break;
        }
        if (esc != NULL) {
            if (strata_buffer_append_str(out, esc) != 0)
                return -1;
            i++;
            continue;
        }
        size_t n = c < 0x20 || c == 0x7f ? 0 : strata_utf8_sequence_length(p + i, len - i);
        if (n == 0) {
            char x[4] = {'\\', 'x', hex[c >> 4], hex[c & 15]};
            if (strata_buffer_append(out, x, sizeof x) != 0)
                return -1;
            i++;
            continue;
        }
        if (strata_buffer_append(out, p + i, n) != 0)
            return -1;
        i += n;
    }
    return strata_buffer_append_byte(out, '"');
}

const char *labels_quote_for_message(const char *s, char *out, size_t out_len) {
    strata_buffer b = STRATA_BUFFER_INIT;
    if (labels_append_quoted(&b, s) != 0) {
        strata_buffer_free(&b);
        snprintf(out, out_len, "\"...\"");
        return out;
    }
    if (b.len < out_len) {
        memcpy(out, b.data, b.len);
        out[b.len] = '\0';
    } else {
        snprintf(out, out_len, "%.*s...\"", (int)(out_len > 5 ? out_len - 5 : 0), (char *)b.data);
    }
    strata_buffer_free(&b);
    return out;
}

/* ---- label sets --------------------------------------------------------------------------- */

static char *copy_bytes(const char *s, size_t len) {
    char *copy = malloc(len + 1);
    if (copy == NULL)
        return NULL;
    memcpy(copy, s, len);
    copy[len] = '\0';
    return copy;
}

static int label_set_grow(label_set *set, strata_error *err) {
    return STRATA_ARRAY_RESERVE_OR_OOM(set->labels, set->cap, set->count + 1, err);
}

int label_set_add(label_set *set, const char *name, size_t name_len, const char *value,
                  size_t value_len, strata_error *err) {
    if ((name_len > 0 && memchr(name, '\0', name_len) != NULL) ||
        (value_len > 0 && memchr(value, '\0', value_len) != NULL))
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "label name or value contains a NUL byte");
    if (label_set_grow(set, err) != 0)
        return -1;
    char *n = copy_bytes(name, name_len);
    char *v = copy_bytes(value, value_len);
    if (n == NULL || v == NULL) {
        free(n);
        free(v);
        return strata_error_oom(err);
    }
    set->labels[set->count].name = n;
    set->labels[set->count].value = v;
    set->count++;
    return 0;
}

static strata_label *label_set_find(const label_set *set, const char *name) {
    for (size_t i = 0; i < set->count; i++) {
        if (strcmp(set->labels[i].name, name) == 0)
            return &set->labels[i];
    }
    return NULL;
}

int label_set_set(label_set *set, const char *name, const char *value, strata_error *err) {
    strata_label *existing = label_set_find(set, name);
    if (existing != NULL) {
        char *v = copy_bytes(value, strlen(value));
        if (v == NULL)
            return strata_error_oom(err);
        free(existing->value);
        existing->value = v;
        return 0;
    }
    size_t pos = 0;
    while (pos < set->count && strcmp(set->labels[pos].name, name) < 0)
        pos++;
    if (label_set_add(set, name, strlen(name), value, strlen(value), err) != 0)
        return -1;
    strata_label added = set->labels[set->count - 1];
    memmove(&set->labels[pos + 1], &set->labels[pos], (set->count - 1 - pos) * sizeof *set->labels);
    set->labels[pos] = added;
    return 0;
}

void label_set_remove(label_set *set, const char *name) {
    strata_label *found = label_set_find(set, name);
    if (found == NULL)
        return;
    size_t pos = (size_t)(found - set->labels);
    free(found->name);
    free(found->value);
    memmove(&set->labels[pos], &set->labels[pos + 1], (set->count - pos - 1) * sizeof *found);
    set->count--;
}

static void insertion_sort(strata_label *a, size_t n) {
    for (size_t i = 1; i < n; i++) {
        strata_label item = a[i];
        size_t j = i;
        while (j > 0 && strcmp(a[j - 1].name, item.name) > 0) {
            a[j] = a[j - 1];
            j--;
        }
        a[j] = item;
    }
}

/* Stable merge sort of a[0..n) using tmp[0..n). */
static void merge_sort(strata_label *a, strata_label *tmp, size_t n) {
    if (n <= 16) {
        insertion_sort(a, n);
        return;
    }
    size_t half = n / 2;
    merge_sort(a, tmp, half);
    merge_sort(a + half, tmp, n - half);
    size_t i = 0, j = half, k = 0;
    while (i < half && j < n)
        tmp[k++] = strcmp(a[j].name, a[i].name) < 0 ? a[j++] : a[i++];
    while (i < half)
        tmp[k++] = a[i++];
    while (j < n)
        tmp[k++] = a[j++];
    memcpy(a, tmp, n * sizeof *a);
}

void label_set_sort(label_set *set) {
    if (set->count < 2)
        return;
    strata_label *tmp = set->count > 16 ? malloc(set->count * sizeof *tmp) : NULL;
    if (tmp == NULL) {
        insertion_sort(set->labels, set->count); /* small, or no memory for the fast path */
        return;
    }
    merge_sort(set->labels, tmp, set->count);
    free(tmp);
}

int label_set_validate(const label_set *set, strata_error *err) {
    char quoted[160];
    for (size_t i = 0; i < set->count; i++) {
        const char *name = set->labels[i].name;
        if (name[0] == '\0')
            return strata_error_set(
                err, STRATA_INVALID_ARGUMENT, "empty label name (label %zu, value %s)", i + 1,
                labels_quote_for_message(set->labels[i].value, quoted, sizeof quoted));
        if (!label_name_is_valid(name, strlen(name)))
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "invalid label name %s: names must match "
                                    "[a-zA-Z_][a-zA-Z0-9_]*",
                                    labels_quote_for_message(name, quoted, sizeof quoted));
        if (i == 0)
            continue;
        int order = strcmp(set->labels[i - 1].name, name);
        if (order == 0)
            return strata_error_set(err, STRATA_INVALID_ARGUMENT, "duplicate label name %s",
                                    labels_quote_for_message(name, quoted, sizeof quoted));
        if (order > 0)
            return strata_error_set(err, STRATA_FAILED_PRECONDITION,
                                    "label set is not sorted at %s (call label_set_sort first)",
                                    labels_quote_for_message(name, quoted, sizeof quoted));
    }
    return 0;
}

const char *label_set_get(const label_set *set, const char *name) {
    const strata_label *found = label_set_find(set, name);
    return found != NULL ? found->value : NULL;
}

uint64_t label_set_hash(const label_set *set) {
    uint64_t h = strata_hash_u64(set->count + 1);
    for (size_t i = 0; i < set->count; i++) {
        const strata_label *l = &set->labels[i];
        h = strata_hash_combine(h, strata_hash_bytes(l->name, strlen(l->name), 0));
        h = strata_hash_combine(h, strata_hash_bytes(l->value, strlen(l->value), 1));
    }
    return h;
}

int label_set_compare(const label_set *a, const label_set *b) {
    size_t n = a->count < b->count ? a->count : b->count;
    for (size_t i = 0; i < n; i++) {
        int c = strcmp(a->labels[i].name, b->labels[i].name);
        if (c == 0)
            c = strcmp(a->labels[i].value, b->labels[i].value);
        if (c != 0)
            return c < 0 ? -1 : 1;
    }
    if (a->count == b->count)
        return 0;
    return a->count < b->count ? -1 : 1;
}

int label_set_copy(label_set *dst, const label_set *src, strata_error *err) {
    label_set copy = LABEL_SET_INIT;
    for (size_t i = 0; i < src->count; i++) {
        const strata_label *l = &src->labels[i];
        if (label_set_add(&copy, l->name, strlen(l->name), l->value, strlen(l->value), err) != 0) {
            label_set_free(&copy);
            *dst = copy;
            return -1;
        }
    }
    *dst = copy;
    return 0;
}

int label_set_format(const label_set *set, strata_buffer *out) {
    if (strata_buffer_append_byte(out, '{') != 0)
        return -1;
    for (size_t i = 0; i < set->count; i++) {
        if (i > 0 && strata_buffer_append_str(out, ", ") != 0)
            return -1;
        if (strata_buffer_append_str(out, set->labels[i].name) != 0 ||
            strata_buffer_append_byte(out, '=') != 0 ||
            labels_append_quoted(out, set->labels[i].value) != 0)
            return -1;
    }
    return strata_buffer_append_byte(out, '}');
}

void label_set_clear(label_set *set) {
    for (size_t i = 0; i < set->count; i++) {
        free(set->labels[i].name);
        free(set->labels[i].value);
    }
    set->count = 0;
}

void label_set_free(label_set *set) {
    label_set_clear(set);
    free(set->labels);
    set->labels = NULL;
    set->cap = 0;
}
