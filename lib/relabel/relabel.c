/*
 * relabel.c - applying relabel rules to a label set. See relabel.h.
 *
 * Each action is Prometheus's relabel() case for case (model/relabel/relabel.go): the regex is
 * lib/regex's (RE2, matched against the whole value), and replace and labelmap expand their
 * templates with Go's regexp.Expand rules from the spans of that match. Only the groups the
 * templates refer to are tracked, so keep, drop, labeldrop and labelkeep, and templates without
 * references, cost RE2's DFA alone.
 */
#include "relabel/relabel.h"
#include "relabel/relabel_internal.h"

#include <locale.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wctype.h>

#include "common/buffer.h"

uint64_t relabel_hashmod(const char *value, size_t len, uint64_t modulus) {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int md_len = 0;
    if (modulus == 0 || EVP_Digest(value, len, md, &md_len, EVP_md5(), NULL) != 1 || md_len != 16)
        return 0;
    uint64_t v = 0;
    for (int i = 8; i < 16; i++)
        v = v << 8 | md[i];
    return v % modulus;
}

/* Working state of one relabel_apply call. */
typedef struct apply_state {
    label_set *labels;
    strata_buffer value;  /* the joined source values */
    strata_buffer target; /* an expanded target_label */
    strata_buffer result; /* an expanded replacement */
    strata_error *err;
} apply_state;

/* NUL-terminates b for use as a C string. */
static const char *cstr(strata_buffer *b) {
    if (strata_buffer_append_byte(b, '\0') != 0)
        return NULL;
    b->len--;
    return (const char *)b->data;
}

static const char *join_sources(apply_state *s, const relabel_rule *r) {
    strata_buffer_reset(&s->value);
    for (size_t i = 0; i < r->n_source_labels; i++) {
        const char *v = label_set_get(s->labels, r->source_labels[i]);
        if ((i > 0 && strata_buffer_append_str(&s->value, r->separator) != 0) ||
            strata_buffer_append_str(&s->value, v != NULL ? v : "") != 0)
            return NULL;
    }
    return cstr(&s->value);
}

/* Sets name to value, or deletes it when value is "" (Prometheus's labels.Builder.Set). */
static int set_label(apply_state *s, const char *name, const char *value) {
    if (value[0] == '\0') {
        label_set_remove(s->labels, name);
        return 0;
    }
    return label_set_set(s->labels, name, value, s->err);
}

/* Matches the whole of value with r's regex and fills the spans its templates read (none when
 * spans is NULL): 1, 0, or -1 when RE2 ran out of memory. */
static int full_match(apply_state *s, const relabel_rule *r, const char *value,
                      strata_regex_span *spans) {
    return strata_regex_match_groups(r->regex, value, strlen(value), spans,
                                     spans != NULL ? r->n_spans : 0, s->err);
}

/* Prometheus: a match expands target_label and replacement; an invalid target skips the rule, an
 * empty result deletes the label named target_label as written (not as expanded). */
static int apply_replace(apply_state *s, const relabel_rule *r, const char *value) {
    strata_regex_span spans[RELABEL_MAX_SPANS];
    int matched = full_match(s, r, value, spans);
    if (matched != 1)
        return matched;
    strata_buffer_reset(&s->target);
    strata_buffer_reset(&s->result);
    if (strata_regex_template_expand(r->target, value, spans, r->n_spans, &s->target) != 0 ||
        strata_regex_template_expand(r->result, value, spans, r->n_spans, &s->result) != 0 ||
        cstr(&s->target) == NULL || cstr(&s->result) == NULL)
        return strata_error_oom(s->err);
    if (!label_name_is_valid((const char *)s->target.data, s->target.len))
        return 0;
    if (s->result.len == 0) {
        label_set_remove(s->labels, r->target_label);
        return 0;
    }
    return set_label(s, (const char *)s->target.data, (const char *)s->result.data);
}

/* Prometheus: every label whose name matches (names from the set as it was before the rule) is
 * copied to the expanded replacement. */
static int apply_labelmap(apply_state *s, const relabel_rule *r) {
    label_set before = LABEL_SET_INIT;
    if (label_set_copy(&before, s->labels, s->err) != 0)
        return -1;
    int rc = 0;
    strata_regex_span spans[RELABEL_MAX_SPANS];
    for (size_t i = 0; i < before.count && rc == 0; i++) {
        const char *name = before.labels[i].name;
        int matched = full_match(s, r, name, spans);
        if (matched != 1) {
            rc = matched;
            continue;
        }
        strata_buffer_reset(&s->target);
        if (strata_regex_template_expand(r->result, name, spans, r->n_spans, &s->target) != 0 ||
            cstr(&s->target) == NULL) {
            rc = strata_error_oom(s->err);
        } else if (label_name_is_valid((const char *)s->target.data, s->target.len)) {
            /* An invalid mapped name is skipped rather than failing the whole set later. */
            rc = set_label(s, (const char *)s->target.data, before.labels[i].value);
        }
    }
    label_set_free(&before);
    return rc;
}

/* labeldrop (drop_matching) or labelkeep (!drop_matching). */
static int apply_label_filter(apply_state *s, const relabel_rule *r, bool drop_matching) {
    size_t i = 0;
    while (i < s->labels->count) {
        const char *name = s->labels->labels[i].name;
        int matched = full_match(s, r, name, NULL);
        if (matched < 0)
            return -1;
        if ((matched == 1) == drop_matching)
            label_set_remove(s->labels, name);
        else
            i++;
    }
    return 0;
}

/* ---- lowercase / uppercase: Go's strings.ToLower / ToUpper ------------------------------- */

static locale_t utf8_locale;
static pthread_once_t utf8_locale_once = PTHREAD_ONCE_INIT;

static void open_utf8_locale(void) {
    utf8_locale = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
}

/* Decodes the UTF-8 sequence at s (len > 0 bytes); returns its length, or 0 if invalid. */
static size_t utf8_decode(const unsigned char *s, size_t len, uint32_t *cp) {
    size_t n = s[0] < 0x80                   ? 1
               : s[0] >= 0xc2 && s[0] < 0xe0 ? 2
               : s[0] >= 0xe0 && s[0] < 0xf0 ? 3
               : s[0] >= 0xf0 && s[0] < 0xf5 ? 4
                                             : 0;
    if (n == 0 || n > len)
        return 0;
    uint32_t c = n == 1 ? s[0] : (uint32_t)(s[0] & (0x7f >> n));
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        c = c << 6 | (s[i] & 0x3f);
    }
    static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (c < min[n] || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
        return 0;
    *cp = c;
    return n;
}

static int utf8_append(strata_buffer *b, uint32_t c) {
    uint8_t out[4];
    size_t n;
    if (c < 0x80) {
        out[0] = (uint8_t)c, n = 1;
    } else if (c < 0x800) {
        out[0] = (uint8_t)(0xc0 | c >> 6), out[1] = (uint8_t)(0x80 | (c & 0x3f)), n = 2;
    } else if (c < 0x10000) {
        out[0] = (uint8_t)(0xe0 | c >> 12), out[1] = (uint8_t)(0x80 | ((c >> 6) & 0x3f));
        out[2] = (uint8_t)(0x80 | (c & 0x3f)), n = 3;
    } else {
        out[0] = (uint8_t)(0xf0 | c >> 18), out[1] = (uint8_t)(0x80 | ((c >> 12) & 0x3f));
        out[2] = (uint8_t)(0x80 | ((c >> 6) & 0x3f)), out[3] = (uint8_t)(0x80 | (c & 0x3f)), n = 4;
    }
    return strata_buffer_append(b, out, n);
}

static uint32_t map_case(uint32_t c, bool upper) {
    if (c < 0x80) /* ASCII needs no locale */
        return upper ? (c >= 'a' && c <= 'z' ? c - 32 : c) : (c >= 'A' && c <= 'Z' ? c + 32 : c);
    if (utf8_locale == (locale_t)0)
        return c;
    return (uint32_t)(upper ? towupper_l((wint_t)c, utf8_locale)
                            : towlower_l((wint_t)c, utf8_locale));
}

/* Maps every code point's case with Unicode's simple mappings (glibc's C.UTF-8 tables); an
 * invalid byte becomes U+FFFD, as Go's strings.Map does. */
static int case_map(const char *value, bool upper, strata_buffer *out) {
    pthread_once(&utf8_locale_once, open_utf8_locale);
    const unsigned char *s = (const unsigned char *)value;
    size_t len = strlen(value);
    for (size_t i = 0; i < len;) {
        uint32_t c = 0xfffd;
        size_t n = utf8_decode(s + i, len - i, &c);
        if (utf8_append(out, n == 0 ? 0xfffd : map_case(c, upper)) != 0)
            return -1;
        i += n == 0 ? 1 : n;
    }
    return 0;
}

static int apply_case(apply_state *s, const relabel_rule *r, const char *value, bool upper) {
    strata_buffer_reset(&s->result);
    if (case_map(value, upper, &s->result) != 0 || cstr(&s->result) == NULL)
        return strata_error_oom(s->err);
    return set_label(s, r->target_label, (const char *)s->result.data);
}

static int apply_hashmod(apply_state *s, const relabel_rule *r, const char *value) {
    char text[24];
    snprintf(text, sizeof text, "%llu",
             (unsigned long long)relabel_hashmod(value, strlen(value), r->modulus));
    return set_label(s, r->target_label, text);
}

/* Applies one rule; *keep becomes false when it drops the set. */
static int apply_rule(apply_state *s, const relabel_rule *r, bool *keep) {
    const char *value = join_sources(s, r);
    if (value == NULL)
        return strata_error_oom(s->err);
    const char *target_value;
    int matched;
    switch (r->action) {
        case RELABEL_REPLACE:
            return apply_replace(s, r, value);
        case RELABEL_KEEP:
        case RELABEL_DROP:
            if ((matched = full_match(s, r, value, NULL)) < 0)
                return -1;
            *keep = (matched == 1) == (r->action == RELABEL_KEEP);
            return 0;
        case RELABEL_KEEPEQUAL:
        case RELABEL_DROPEQUAL:
            target_value = label_set_get(s->labels, r->target_label);
            *keep = (strcmp(value, target_value != NULL ? target_value : "") == 0) ==
                    (r->action == RELABEL_KEEPEQUAL);
            return 0;
        case RELABEL_HASHMOD:
            return apply_hashmod(s, r, value);
        case RELABEL_LABELMAP:
            return apply_labelmap(s, r);
        case RELABEL_LABELDROP:
            return apply_label_filter(s, r, true);
        case RELABEL_LABELKEEP:
            return apply_label_filter(s, r, false);
        case RELABEL_LOWERCASE:
        case RELABEL_UPPERCASE:
            return apply_case(s, r, value, r->action == RELABEL_UPPERCASE);
    }
    return strata_error_set(s->err, STRATA_INTERNAL, "unknown relabel action %d", (int)r->action);
}

int relabel_apply(const relabel_rules *rules, label_set *labels, bool *keep, strata_error *err) {
    *keep = true;
    label_set_sort(labels);
    apply_state s = {labels, STRATA_BUFFER_INIT, STRATA_BUFFER_INIT, STRATA_BUFFER_INIT, err};
    int rc = 0;
    for (size_t i = 0; rules != NULL && i < rules->count && *keep && rc == 0; i++)
        rc = apply_rule(&s, &rules->rules[i], keep);
    strata_buffer_free(&s.value);
    strata_buffer_free(&s.target);
    strata_buffer_free(&s.result);
    return rc;
}
