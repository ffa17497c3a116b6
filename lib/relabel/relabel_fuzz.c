/*
 * relabel_fuzz.c - libFuzzer target over (rule YAML, label set): the input is YAML with
 * `relabel_configs:`, then a line "---labels", then a label set in text form. Rules that load are
 * applied; the result must be a valid label set (sorted, valid unique names) or a drop. Every
 * rule's regex is also matched against each label name and value twice, without groups (RE2's
 * DFA) and with all of them (OnePass, BitState or NFA), and the two must agree.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "relabel/relabel.h"
#include "relabel/relabel_internal.h"

#define SPLIT "\n---labels\n"

#define MAX_SPANS 64

/* Aborts unless both ways of matching agree (out of memory in either is not checked). */
static void check_match(const strata_regex *re, const char *text) {
    strata_regex_span spans[MAX_SPANS];
    size_t n = strata_regex_group_count(re) + 1, len = strlen(text);
    strata_error err;
    int plain = strata_regex_match(re, text, len, &err);
    int groups =
        strata_regex_match_groups(re, text, len, spans, n < MAX_SPANS ? n : MAX_SPANS, &err);
    if (plain < 0 || groups < 0)
        return;
    if (plain != groups || (groups == 1 && (spans[0].start != 0 || spans[0].end != (ptrdiff_t)len)))
        abort();
}

static void cross_check(const relabel_rules *rules, const label_set *set) {
    for (size_t i = 0; rules != NULL && i < rules->count; i++) {
        for (size_t j = 0; j < set->count; j++) {
            check_match(rules->rules[i].regex, set->labels[j].name);
            check_match(rules->rules[i].regex, set->labels[j].value);
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (text == NULL)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    char *split = strstr(text, SPLIT);
    const char *labels_text = "{a=\"1\", __address__=\"10.0.0.1:80\", job=\"j\"}";
    if (split != NULL) {
        *split = '\0';
        labels_text = split + strlen(SPLIT);
    }
    config_document *doc = NULL;
    relabel_rules *rules = NULL;
    label_set set = LABEL_SET_INIT;
    strata_error err;
    if (config_load_string("fuzz.yaml", text, strlen(text), &doc, &err) != 0)
        goto out;
    const config_node *root = config_document_root(doc);
    if (root == NULL || config_node_get_kind(root) != CONFIG_NODE_MAPPING ||
        relabel_rules_decode(config_node_get(root, "relabel_configs"), &rules, &err) != 0)
        goto out;
    if (label_set_from_text(labels_text, &set, &err) != 0)
        goto out;
    cross_check(rules, &set);
    bool keep = false;
    if (relabel_apply(rules, &set, &keep, &err) == 0 && keep && label_set_validate(&set, &err) != 0)
        abort(); /* relabeling must never produce an invalid set */
out:
    label_set_free(&set);
    relabel_rules_free(rules);
    config_document_free(doc);
    free(text);
    return 0;
}
