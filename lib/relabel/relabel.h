/*
 * relabel.h - Prometheus relabeling (`relabel_configs`) with Prometheus's semantics.
 *
 * A rule list rewrites a label set in order; a keep/drop rule may end processing by dropping the
 * whole set (a target in the scraper, a process in the agent). Users copy rules from their
 * Prometheus configs, so every action behaves as Prometheus documents it:
 *
 *   value   = the values of source_labels (a missing label is "") joined by separator
 *   replace     if regex matches value: target = expand(target_label), res = expand(replacement);
 *               target not a valid label name -> rule skipped; res "" -> the label named
 *               target_label as written (not expanded) deleted, else target set to res.
 *               No match -> nothing happens.
 *   keep / drop         drop the set unless / if regex matches value
 *   keepequal / dropequal  drop the set unless / if value equals the target_label's value
 *   hashmod     target_label = (md5(value) bytes 8..15 as big-endian uint64) % modulus, so a
 *               Strata scraper and a Prometheus server shard targets identically
 *   labelmap    for every label whose name matches regex, copy its value to expand(replacement)
 *               (names taken from the set as it was before the rule)
 *   labeldrop / labelkeep  remove the labels whose name matches / does not match regex
 *   lowercase / uppercase  target_label = value in lower / upper case (Unicode simple case
 *               mapping, as Go's strings.ToLower; invalid UTF-8 bytes become U+FFFD)
 * Setting a label to "" deletes it, as in Prometheus.
 *
 * Regexes are lib/regex's: RE2 syntax and leftmost-first captures, as Go's regexp, matched against
 * the whole value (Prometheus's ^(?s:re)$, so `.` matches newlines) and compiled once at load time.
 * RE2 matches in linear time, so no rule can make relabeling slow. Expansion of replacement and
 * target_label is Go's regexp.Expand: $1 or ${1} is a capture group, $name / ${name} a named one
 * (name = letters, digits and '_', so "$1x" is the group "1x", which does not exist, and expands
 * to ""); an unknown or unmatched group is ""; "$$" is "$"; a "$" not followed by a name stays
 * literal.
 *
 * Configuration (YAML, decoded with lib/config), one mapping per rule:
 *   source_labels: [a, b]   separator: ";"   target_label: t   regex: "(.*)"   modulus: 8
 *   replacement: "$1"       action: replace (case-insensitive)
 * Validation rejects at load time what Prometheus rejects: an unknown action or key, an invalid
 * regex or source label name, replace / hashmod / lowercase / uppercase / keepequal / dropequal
 * without target_label (or with an invalid one: for replace, one with $ groups must still be able
 * to form a label name, as Prometheus's relabelTarget pattern requires), hashmod without
 * a positive modulus, labelmap with a replacement that cannot form a label name, keepequal /
 * dropequal with anything but source_labels and target_label, labeldrop / labelkeep with anything
 * but regex. Errors are INVALID_ARGUMENT with file, line and column, naming the rule index:
 *   "scrape.yaml:12:9: scrape_configs[0].relabel_configs[2]: hashmod needs a modulus > 0".
 *
 * Rules are immutable after loading and may be shared by any number of threads.
 */
#ifndef STRATA_RELABEL_H
#define STRATA_RELABEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "config/config.h"
#include "labels/labels.h"

/* More rules than this in one list are rejected (a config, not a program). */
#define RELABEL_MAX_RULES 1024

typedef enum relabel_action {
    RELABEL_REPLACE,
    RELABEL_KEEP,
    RELABEL_DROP,
    RELABEL_KEEPEQUAL,
    RELABEL_DROPEQUAL,
    RELABEL_HASHMOD,
    RELABEL_LABELMAP,
    RELABEL_LABELDROP,
    RELABEL_LABELKEEP,
    RELABEL_LOWERCASE,
    RELABEL_UPPERCASE,
} relabel_action;

/* A compiled rule list (opaque). NULL is a valid, empty list everywhere. */
typedef struct relabel_rules relabel_rules;

/* Decodes a sequence of rule mappings (NULL or a null node: no rules, *out = NULL). */
int relabel_rules_decode(const config_node *node, relabel_rules **out, strata_error *err);

/* Loads a YAML file whose top level holds `relabel_configs:` (the agent's -relabel-config). */
int relabel_rules_load_file(const char *path, relabel_rules **out, strata_error *err);

/* Number of rules (0 for NULL). */
size_t relabel_rules_count(const relabel_rules *rules);

void relabel_rules_free(relabel_rules *rules);

/* For embedding in other config tables: a CONFIG_CUSTOM field whose storage is a
 * `relabel_rules *` member, e.g.
 *     RELABEL_CONFIG_FIELD("relabel_configs", scrape_config, relabel),
 * config_free on the enclosing table frees the rules. */
int relabel_config_decode(const config_node *node, void *dst, strata_error *err);
void relabel_config_release(void *dst);
#define RELABEL_CONFIG_FIELD(field_key, type, member)                                              \
    {                                                                                              \
        .key = (field_key), .kind = CONFIG_CUSTOM, .offset = offsetof(type, member),               \
        .elem_size = sizeof(relabel_rules *), .decode = relabel_config_decode,                     \
        .release = relabel_config_release                                                          \
    }

/* Applies the rules in order to *labels (any order on entry; sorted on return). *keep is false
 * when a rule dropped the set; processing stops there and *labels is then unspecified. Fails only
 * for out of memory. */
int relabel_apply(const relabel_rules *rules, label_set *labels, bool *keep, strata_error *err);

/* The hashmod shard of value: md5(value) bytes 8..15, big-endian, modulo modulus (> 0). */
uint64_t relabel_hashmod(const char *value, size_t len, uint64_t modulus);

/* Action name as written in configs ("replace", "labelmap", ...). */
const char *relabel_action_name(relabel_action action);

#endif
