/*
 * relabel_config.c - decoding and load-time validation of relabel_configs. See relabel.h.
 *
 * Each rule is decoded with lib/config into its YAML shape, then checked the way Prometheus's
 * relabel.Config.Validate does (the checks compare with the defaults, so writing a default
 * explicitly, e.g. `separator: ";"` on a labeldrop rule, is allowed there as it is here), then
 * compiled into a relabel_rule: the regex with lib/regex (Prometheus's ^(?s:regex)$ on RE2), and
 * target_label and replacement as templates against its groups.
 */
#include "relabel/relabel.h"
#include "relabel/relabel_internal.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define DEFAULT_SEPARATOR ";"
#define DEFAULT_REGEX "(.*)"
#define DEFAULT_REPLACEMENT "$1"

typedef struct rule_yaml {
    config_string_list source_labels;
    char *separator;
    char *target_label;
    char *regex;
    uint64_t modulus;
    char *replacement;
    char *action;
} rule_yaml;

static const config_field rule_fields[] = {
    {.key = "source_labels",
     .kind = CONFIG_STRING_LIST,
     .offset = offsetof(rule_yaml, source_labels)},
    {.key = "separator",
     .kind = CONFIG_STRING,
     .offset = offsetof(rule_yaml, separator),
     .default_text = "\"" DEFAULT_SEPARATOR "\""},
    {.key = "target_label", .kind = CONFIG_STRING, .offset = offsetof(rule_yaml, target_label)},
    {.key = "regex",
     .kind = CONFIG_STRING,
     .offset = offsetof(rule_yaml, regex),
     .default_text = "\"" DEFAULT_REGEX "\""},
    {.key = "modulus",
     .kind = CONFIG_UINT64,
     .offset = offsetof(rule_yaml, modulus),
     .default_text = "0"},
    {.key = "replacement",
     .kind = CONFIG_STRING,
     .offset = offsetof(rule_yaml, replacement),
     .default_text = "\"" DEFAULT_REPLACEMENT "\""},
    {.key = "action",
     .kind = CONFIG_STRING,
     .offset = offsetof(rule_yaml, action),
     .default_text = "replace"},
    {.key = NULL},
};

static const char *const action_names[] = {
    [RELABEL_REPLACE] = "replace",     [RELABEL_KEEP] = "keep",
    [RELABEL_DROP] = "drop",           [RELABEL_KEEPEQUAL] = "keepequal",
    [RELABEL_DROPEQUAL] = "dropequal", [RELABEL_HASHMOD] = "hashmod",
    [RELABEL_LABELMAP] = "labelmap",   [RELABEL_LABELDROP] = "labeldrop",
    [RELABEL_LABELKEEP] = "labelkeep", [RELABEL_LOWERCASE] = "lowercase",
    [RELABEL_UPPERCASE] = "uppercase",
};
#define N_ACTIONS (sizeof action_names / sizeof action_names[0])

const char *relabel_action_name(relabel_action action) {
    return (size_t)action < N_ACTIONS ? action_names[action] : "unknown";
}

static bool parse_action(const char *text, relabel_action *out) {
    for (size_t i = 0; i < N_ACTIONS; i++) {
        if (strcasecmp(text, action_names[i]) == 0) {
            *out = (relabel_action)i;
            return true;
        }
    }
    return false;
}

static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/* Prometheus's check for a labelmap replacement, ^(?:(?:[a-zA-Z_]|\$(?:\{\w+\}|\w+))+\w*)+$:
 * a sequence of letters, '_', digits, $name and ${name}, not starting with a digit. */
static bool is_label_template(const char *s) {
    if (*s == '\0' || (*s >= '0' && *s <= '9'))
        return false;
    while (*s != '\0') {
        if (is_name_char(*s)) {
            s++;
        } else if (s[0] == '$' && s[1] == '{') {
            const char *p = s + 2;
            while (is_name_char(*p))
                p++;
            if (p == s + 2 || *p != '}')
                return false;
            s = p + 1;
        } else if (s[0] == '$' && is_name_char(s[1])) {
            s++;
            while (is_name_char(*s))
                s++;
        } else {
            return false;
        }
    }
    return true;
}

static bool is_label_name(const char *s) {
    return s != NULL && label_name_is_valid(s, strlen(s));
}

static bool needs_target(relabel_action a) {
    return a == RELABEL_REPLACE || a == RELABEL_HASHMOD || a == RELABEL_LOWERCASE ||
           a == RELABEL_UPPERCASE || a == RELABEL_KEEPEQUAL || a == RELABEL_DROPEQUAL;
}

/* The target-only actions whose target_label cannot hold $ groups. */
static bool needs_plain_target(relabel_action a) {
    return a == RELABEL_HASHMOD || a == RELABEL_LOWERCASE || a == RELABEL_UPPERCASE ||
           a == RELABEL_KEEPEQUAL || a == RELABEL_DROPEQUAL;
}

static int check_target(const rule_yaml *y, relabel_action a, const config_node *node,
                        strata_error *err) {
    const char *name = action_names[a];
    const char *t = y->target_label;
    if (needs_target(a) && (t == NULL || t[0] == '\0'))
        return config_node_error(err, node, "%s needs a target_label", name);
    /* as a name, or with $ groups as a template that can only form one */
    if (a == RELABEL_REPLACE &&
        (strchr(t, '$') == NULL ? !is_label_name(t) : !is_label_template(t)))
        return config_node_error(err, node, "\"%.64s\" is not a valid target_label for replace", t);
    if (needs_plain_target(a) && !is_label_name(t))
        return config_node_error(err, node, "\"%.64s\" is not a valid target_label for %s", t,
                                 name);
    return 0;
}

/* Load-time validation, in Prometheus's order so users see the same first complaint. */
static int validate(const rule_yaml *y, relabel_action a, const config_node *node,
                    strata_error *err) {
    const char *name = action_names[a];
    bool default_replacement = strcmp(y->replacement, DEFAULT_REPLACEMENT) == 0;
    if (a == RELABEL_HASHMOD && y->modulus == 0)
        return config_node_error(err, node, "hashmod needs a modulus > 0");
    if (check_target(y, a, node, err) != 0)
        return -1;
    if ((a == RELABEL_LOWERCASE || a == RELABEL_UPPERCASE || a == RELABEL_KEEPEQUAL ||
         a == RELABEL_DROPEQUAL) &&
        !default_replacement)
        return config_node_error(err, node, "%s takes no replacement", name);
    if (a == RELABEL_LABELMAP && !is_label_template(y->replacement))
        return config_node_error(err, node,
                                 "\"%.64s\" is not a valid replacement for labelmap (it must "
                                 "form a label name, e.g. \"$1\" or \"k8s_$1\")",
                                 y->replacement);
    if ((a == RELABEL_KEEPEQUAL || a == RELABEL_DROPEQUAL) &&
        (strcmp(y->regex, DEFAULT_REGEX) != 0 || y->modulus != 0 ||
         strcmp(y->separator, DEFAULT_SEPARATOR) != 0))
        return config_node_error(
            err, node, "%s takes only source_labels and target_label, no other keys", name);
    if ((a == RELABEL_LABELDROP || a == RELABEL_LABELKEEP) &&
        (y->source_labels.count > 0 || (y->target_label != NULL && y->target_label[0] != '\0') ||
         y->modulus != 0 || strcmp(y->separator, DEFAULT_SEPARATOR) != 0 || !default_replacement))
        return config_node_error(err, node, "%s takes only a regex, no other keys", name);
    return 0;
}

static char *dup_or_empty(const char *s) {
    return strdup(s != NULL ? s : "");
}

static int compile_rule(const rule_yaml *y, relabel_action a, const config_node *node,
                        relabel_rule *r, strata_error *err) {
    r->action = a;
    r->modulus = y->modulus;
    for (size_t i = 0; i < y->source_labels.count; i++) {
        if (!is_label_name(y->source_labels.items[i]))
            return config_node_error(err, config_node_get(node, "source_labels"),
                                     "\"%.64s\" is not a valid label name",
                                     y->source_labels.items[i]);
    }
    r->source_labels = calloc(y->source_labels.count + 1, sizeof *r->source_labels);
    if (r->source_labels == NULL)
        return strata_error_oom(err);
    for (size_t i = 0; i < y->source_labels.count; i++) {
        if ((r->source_labels[i] = strdup(y->source_labels.items[i])) == NULL)
            return strata_error_oom(err);
        r->n_source_labels++;
    }
    r->separator = dup_or_empty(y->separator);
    r->target_label = dup_or_empty(y->target_label);
    r->replacement = dup_or_empty(y->replacement);
    if (r->separator == NULL || r->target_label == NULL || r->replacement == NULL)
        return strata_error_oom(err);
    strata_error inner;
    strata_error_clear(&inner);
    const config_node *at = config_node_get(node, "regex");
    if (strata_regex_compile(y->regex, NULL, &r->regex, &inner) != 0) {
        if (inner.code == STRATA_RESOURCE_EXHAUSTED)
            return strata_error_set(err, inner.code, "%s", inner.message);
        return config_node_error(err, at != NULL ? at : node, "%s", inner.message);
    }
    if (a == RELABEL_REPLACE &&
        (strata_regex_template_compile(r->regex, r->target_label, &r->target, err) != 0 ||
         strata_regex_template_compile(r->regex, r->replacement, &r->result, err) != 0))
        return -1;
    if (a == RELABEL_LABELMAP &&
        strata_regex_template_compile(r->regex, r->replacement, &r->result, err) != 0)
        return -1;
    if (r->target != NULL)
        r->n_spans = strata_regex_template_spans(r->target);
    if (r->result != NULL && strata_regex_template_spans(r->result) > r->n_spans)
        r->n_spans = strata_regex_template_spans(r->result);
    if (r->n_spans > RELABEL_MAX_SPANS)
        return config_node_error(err, node,
                                 "target_label or replacement refers to group %zu, more than the "
                                 "limit of %d",
                                 r->n_spans - 1, RELABEL_MAX_SPANS - 1);
    return 0;
}

void relabel_rule_free(relabel_rule *r) {
    for (size_t i = 0; i < r->n_source_labels; i++)
        free(r->source_labels[i]);
    free(r->source_labels);
    free(r->separator);
    free(r->target_label);
    free(r->replacement);
    strata_regex_template_free(r->target);
    strata_regex_template_free(r->result);
    strata_regex_free(r->regex);
    memset(r, 0, sizeof *r);
}

static int decode_rule(const config_node *node, relabel_rule *r, strata_error *err) {
    rule_yaml y;
    if (config_node_get_kind(node) != CONFIG_NODE_MAPPING)
        return config_node_error(err, node, "expected a mapping (a relabel rule)");
    if (config_decode(node, rule_fields, &y, err) != 0)
        return -1;
    relabel_action a = RELABEL_REPLACE;
    int rc = -1;
    if (!parse_action(y.action, &a)) {
        const config_node *at = config_node_get(node, "action");
        config_node_error(err, at != NULL ? at : node,
                          "unknown relabel action \"%.64s\" (replace, keep, drop, keepequal, "
                          "dropequal, hashmod, labelmap, labeldrop, labelkeep, lowercase, "
                          "uppercase)",
                          y.action);
    } else if (validate(&y, a, node, err) == 0 && compile_rule(&y, a, node, r, err) == 0) {
        rc = 0;
    }
    config_free(rule_fields, &y);
    return rc;
}

void relabel_rules_free(relabel_rules *rules) {
    if (rules == NULL)
        return;
    for (size_t i = 0; i < rules->count; i++)
        relabel_rule_free(&rules->rules[i]);
    free(rules->rules);
    free(rules);
}

size_t relabel_rules_count(const relabel_rules *rules) {
    return rules != NULL ? rules->count : 0;
}

int relabel_rules_decode(const config_node *node, relabel_rules **out, strata_error *err) {
    *out = NULL;
    if (node == NULL || config_node_is_null(node))
        return 0;
    if (config_node_get_kind(node) != CONFIG_NODE_SEQUENCE)
        return config_node_error(err, node, "expected a list of relabel rules");
    size_t n = config_node_size(node);
    if (n > RELABEL_MAX_RULES)
        return config_node_error(err, node, "%zu relabel rules, more than the limit of %d", n,
                                 RELABEL_MAX_RULES);
    relabel_rules *rules = calloc(1, sizeof *rules);
    if (rules == NULL || (rules->rules = calloc(n ? n : 1, sizeof *rules->rules)) == NULL) {
        free(rules);
        return strata_error_oom(err);
    }
    for (size_t i = 0; i < n; i++) {
        /* count covers the rule being decoded, so a half-built rule is freed too. */
        rules->count = i + 1;
        if (decode_rule(config_node_at(node, i), &rules->rules[i], err) != 0) {
            relabel_rules_free(rules);
            return -1;
        }
    }
    *out = rules;
    return 0;
}

int relabel_config_decode(const config_node *node, void *dst, strata_error *err) {
    return relabel_rules_decode(node, (relabel_rules **)dst, err);
}

void relabel_config_release(void *dst) {
    relabel_rules **rules = dst;
    relabel_rules_free(*rules);
    *rules = NULL;
}

typedef struct relabel_file {
    relabel_rules *rules;
} relabel_file;

static const config_field file_fields[] = {
    RELABEL_CONFIG_FIELD("relabel_configs", relabel_file, rules),
    {.key = NULL},
};

int relabel_rules_load_file(const char *path, relabel_rules **out, strata_error *err) {
    *out = NULL;
    config_document *doc = NULL;
    if (config_load_file(path, &doc, err) != 0)
        return -1;
    relabel_file f;
    int rc = config_decode_document(doc, file_fields, &f, err);
    config_document_free(doc);
    if (rc == 0)
        *out = f.rules;
    return rc;
}
