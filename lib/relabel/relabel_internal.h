/*
 * relabel_internal.h - the compiled rule shared by the files of the relabel module; not part of
 * its contract.
 */
#ifndef STRATA_RELABEL_INTERNAL_H
#define STRATA_RELABEL_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "labels/labels.h"
#include "relabel/relabel.h"

/* Capture groups per regex, whole match included (a bound for the stack array in apply). */
#define RELABEL_MAX_GROUPS 64

typedef struct relabel_rule {
    relabel_action action;
    char **source_labels;
    size_t n_source_labels;
    char *separator;
    char *target_label;
    char *replacement;
    uint64_t modulus;
    label_matcher regex; /* compiled with capture groups, matched fully anchored */
    /* Shortcuts around glibc's regexec, which dominates relabeling cost (labelmap and labeldrop
     * test every label name): a pattern of plain literals and '|' (e.g. "true", "a|b") is
     * matched by string comparison (n_literals > 0); otherwise a value must start with the
     * pattern's literal prefix (when it has no '|') before regexec runs. */
    char **literals;
    size_t n_literals;
    char *prefix; /* NULL: no usable prefix */
    size_t prefix_len;
} relabel_rule;

struct relabel_rules {
    relabel_rule *rules;
    size_t count;
};

void relabel_rule_free(relabel_rule *r);

/* Whether r's regex matches all of value (shortcuts included; for the fuzzer's cross-check). */
bool relabel_rule_matches(const relabel_rule *r, const char *value);

#endif
