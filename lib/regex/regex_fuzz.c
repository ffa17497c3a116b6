/*
 * regex_fuzz.c - libFuzzer target for lib/regex: the input is a pattern, a value and a template,
 * separated by NUL bytes (missing parts are ""). A pattern that compiles is matched against the
 * value, and the checks are that RE2's match without groups (its DFA) and with every group
 * (OnePass, BitState or NFA) agree, that a match spans the whole value and every group lies inside
 * it, and that expanding the template stays within what the value and template can produce.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "regex/regex.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_SPANS 64

/* The next NUL-terminated part of [*p, end), or "" past the end. */
static const char *next_part(const char **p, const char *end) {
    const char *part = *p;
    if (part >= end)
        return "";
    const char *nul = memchr(part, '\0', (size_t)(end - part));
    *p = nul != NULL ? nul + 1 : end;
    return part;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (text == NULL)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    const char *p = text, *end = text + size;
    const char *pattern = next_part(&p, end);
    const char *value = next_part(&p, end);
    const char *template_text = next_part(&p, end);
    size_t len = strlen(value);
    strata_regex *re = NULL;
    strata_regex_template *t = NULL;
    strata_error err;
    if (strata_regex_compile(pattern, NULL, &re, &err) != 0) {
        if (err.code != STRATA_INVALID_ARGUMENT && err.code != STRATA_RESOURCE_EXHAUSTED)
            abort();
        goto out;
    }
    if (strata_regex_template_compile(re, template_text, &t, &err) != 0)
        goto out;
    strata_regex_span spans[MAX_SPANS];
    size_t n = strata_regex_group_count(re) + 1;
    n = n < MAX_SPANS ? n : MAX_SPANS;
    int matched = strata_regex_match(re, value, len, &err);
    int with_groups = strata_regex_match_groups(re, value, len, spans, n, &err);
    if (matched < 0 || with_groups < 0)
        goto out; /* out of memory */
    if (matched != with_groups)
        abort();
    if (!matched)
        goto out;
    if (spans[0].start != 0 || spans[0].end != (ptrdiff_t)len)
        abort();
    for (size_t i = 1; i < n; i++) {
        if (spans[i].start == -1 && spans[i].end == -1)
            continue;
        if (spans[i].start < 0 || spans[i].start > spans[i].end || spans[i].end > (ptrdiff_t)len)
            abort();
    }
    strata_buffer b = STRATA_BUFFER_INIT;
    if (strata_regex_template_expand(t, value, spans, n, &b) == 0) {
        /* a reference of two or more template bytes yields at most the value */
        if (b.len > strlen(template_text) * (len > 1 ? len : 1))
            abort();
    }
    strata_buffer_free(&b);
out:
    strata_regex_template_free(t);
    strata_regex_free(re);
    free(text);
    return 0;
}
