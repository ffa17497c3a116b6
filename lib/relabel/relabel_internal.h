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
#include "regex/regex.h"
#include "relabel/relabel.h"

/* Capture groups a rule's templates may refer to, whole match included (the span array in apply
 * lives on the stack). A regex may have more groups; only those its templates read are tracked. */
#define RELABEL_MAX_SPANS 64

typedef struct relabel_rule {
    relabel_action action;
    char **source_labels;
    size_t n_source_labels;
    char *separator;
    char *target_label;
    char *replacement;
    uint64_t modulus;
    strata_regex *regex;           /* matched against the whole value (lib/regex) */
    strata_regex_template *target; /* replace: target_label as a template */
    strata_regex_template *result; /* replace, labelmap: replacement as a template */
    size_t n_spans;                /* spans the templates read (0: a plain match) */
} relabel_rule;

struct relabel_rules {
    relabel_rule *rules;
    size_t count;
};

void relabel_rule_free(relabel_rule *r);

#endif
