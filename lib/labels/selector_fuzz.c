/*
 * selector_fuzz.c - libFuzzer target: parses arbitrary text as a selector and, when it parses,
 * checks that the canonical form parses back and formats identically. Also exercises matching
 * (each regex matcher against its own pattern and the whole input, where =~ and !~ must be each
 * other's opposite, as lib/regex's match says) and label_set_from_text on the same input.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "labels/labels.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A regex matcher agrees with lib/regex on texts (out of memory aside, where neither matches). */
static void check_regex_matchers(const selector *sel, const char *input) {
    for (size_t i = 0; i < sel->n_matchers; i++) {
        const label_matcher *m = &sel->matchers[i];
        if (m->type != LABEL_MATCH_REGEX && m->type != LABEL_MATCH_NOT_REGEX)
            continue;
        if (m->regex == NULL)
            abort();
        const char *texts[3] = {"", m->value, input};
        for (size_t t = 0; t < 3; t++) {
            int matched = strata_regex_match(m->regex, texts[t], strlen(texts[t]), NULL);
            if (matched < 0)
                continue;
            if (label_matcher_matches(m, texts[t]) !=
                ((matched == 1) == (m->type == LABEL_MATCH_REGEX)))
                abort();
        }
    }
}

static char *format_or_die(const selector *sel) {
    strata_buffer b = STRATA_BUFFER_INIT;
    if (selector_format(sel, &b) != 0)
        abort();
    char *text = strata_buffer_detach(&b, NULL);
    if (text == NULL)
        abort();
    return text;
}

static void check_round_trip(const selector *sel) {
    char *first = format_or_die(sel);
    selector again;
    strata_error err;
    if (selector_parse(first, &again, &err) != 0)
        abort(); /* the canonical form must parse */
    char *second = format_or_die(&again);
    if (strcmp(first, second) != 0)
        abort();
    label_set empty = LABEL_SET_INIT;
    if (selector_matches(sel, &empty) != selector_matches(&again, &empty))
        abort();
    free(first);
    free(second);
    selector_free(&again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (text == NULL)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    selector sel;
    strata_error err;
    if (selector_parse(text, &sel, &err) == 0) {
        check_round_trip(&sel);
        check_regex_matchers(&sel, text);
    } else if (err.code != STRATA_INVALID_ARGUMENT && err.code != STRATA_RESOURCE_EXHAUSTED)
        abort();
    selector_free(&sel);

    label_set set;
    if (label_set_from_text(text, &set, &err) == 0) {
        strata_buffer b = STRATA_BUFFER_INIT;
        label_set back;
        if (label_set_format(&set, &b) != 0 || strata_buffer_append_byte(&b, 0) != 0)
            abort();
        if (label_set_from_text((const char *)b.data, &back, &err) != 0 ||
            label_set_compare(&set, &back) != 0 || label_set_hash(&set) != label_set_hash(&back))
            abort();
        label_set_free(&back);
        strata_buffer_free(&b);
    }
    label_set_free(&set);
    free(text);
    return 0;
}
