/*
 * relabel_internal.h - the compiled rule shared by the files of the relabel module; not part of
 * its contract.
 */
#ifndef STRATA_RELABEL_INTERNAL_H
#define STRATA_RELABEL_INTERNAL_H

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
} relabel_rule;

struct relabel_rules {
    relabel_rule *rules;
    size_t count;
};

void relabel_rule_free(relabel_rule *r);

#endif
