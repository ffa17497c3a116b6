/*
 * relabel_test.c - relabel_configs semantics, table-driven from Prometheus's documentation.
 *
 * Each case is a YAML rule list, an input label set and the expected output (NULL: dropped).
 * hashmod shards were computed independently with Python:
 *   python3 -c 'import hashlib; h = hashlib.md5(b"10.0.0.1:8080").digest();
 *               print(int.from_bytes(h[8:], "big") % 8)'            -> 4
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "relabel/relabel.h"

/* ---- helpers ------------------------------------------------------------------------------ */

/* Decodes `relabel_configs:` from yaml; returns 0 or -1 with err set. */
static int load_rules(const char *yaml, relabel_rules **out, strata_error *err) {
    config_document *doc = NULL;
    *out = NULL;
    if (config_load_string("relabel.yaml", yaml, strlen(yaml), &doc, err) != 0)
        return -1;
    const config_node *root = config_document_root(doc);
    int rc = relabel_rules_decode(root != NULL ? config_node_get(root, "relabel_configs") : NULL,
                                  out, err);
    config_document_free(doc);
    return rc;
}

/* Applies yaml's rules to `input` and returns the formatted result, or NULL if dropped. */
static char *relabel_text(const char *yaml, const char *input) {
    strata_error err;
    relabel_rules *rules = NULL;
    if (load_rules(yaml, &rules, &err) != 0)
        fail_msg("rules do not load: %s\n%s", err.message, yaml);
    label_set set = LABEL_SET_INIT;
    if (label_set_from_text(input, &set, &err) != 0)
        fail_msg("bad input %s: %s", input, err.message);
    bool keep = false;
    assert_int_equal(relabel_apply(rules, &set, &keep, &err), 0);
    char *out = NULL;
    if (keep) {
        strata_buffer b = STRATA_BUFFER_INIT;
        assert_int_equal(label_set_format(&set, &b), 0);
        out = strata_buffer_detach(&b, NULL);
        assert_non_null(out);
    }
    label_set_free(&set);
    relabel_rules_free(rules);
    return out;
}

typedef struct relabel_case {
    const char *name;
    const char *rules; /* the items of relabel_configs, YAML flow or block */
    const char *input;
    const char *want; /* NULL: the set is dropped */
} relabel_case;

static void run_cases(const relabel_case *cases, size_t n) {
    for (size_t i = 0; i < n; i++) {
        char yaml[2048];
        snprintf(yaml, sizeof yaml, "relabel_configs:\n%s", cases[i].rules);
        char *got = relabel_text(yaml, cases[i].input);
        if (cases[i].want == NULL && got != NULL)
            fail_msg("%s: want dropped, got %s", cases[i].name, got);
        if (cases[i].want != NULL && (got == NULL || strcmp(got, cases[i].want) != 0))
            fail_msg("%s: want %s, got %s", cases[i].name, cases[i].want,
                     got != NULL ? got : "dropped");
        free(got);
    }
}

/* ---- actions ------------------------------------------------------------------------------ */

static const relabel_case replace_cases[] = {
    {"defaults copy source to target", "- {source_labels: [a], target_label: b}\n", "{a=\"foo\"}",
     "{a=\"foo\", b=\"foo\"}"},
    {"groups in replacement",
     "- {source_labels: [a], regex: \"f(.*)\", target_label: d, replacement: \"ch${1}-ch${1}\"}\n",
     "{a=\"foo\"}", "{a=\"foo\", d=\"choo-choo\"}"},
    {"several sources joined by the separator",
     "- {source_labels: [a, b], regex: \"f(.*);(.*)r\", target_label: c, replacement: \"$1-$2\"}\n",
     "{a=\"foo\", b=\"bar\"}", "{a=\"foo\", b=\"bar\", c=\"oo-ba\"}"},
    {"custom separator", "- {source_labels: [a, b], separator: \"/\", target_label: c}\n",
     "{a=\"x\", b=\"y\"}", "{a=\"x\", b=\"y\", c=\"x/y\"}"},
    {"no match leaves the set alone",
     "- {source_labels: [a], regex: \"x(.*)\", target_label: b, replacement: \"$1\"}\n",
     "{a=\"foo\", b=\"keep\"}", "{a=\"foo\", b=\"keep\"}"},
    {"regex is anchored: a substring does not match",
     "- {source_labels: [a], regex: \"oo\", target_label: b, replacement: \"hit\"}\n",
     "{a=\"foo\"}", "{a=\"foo\"}"},
    {"an empty regex matches only the empty value",
     "- {source_labels: [a], regex: \"\", target_label: b, replacement: hit}\n"
     "- {source_labels: [c], regex: \"\", target_label: d, replacement: hit}\n",
     "{a=\"x\"}", "{a=\"x\", d=\"hit\"}"},
    {"alternation is anchored as a whole",
     "- {source_labels: [a], regex: \"foo|bar\", target_label: b, replacement: \"hit\"}\n",
     "{a=\"foobar\"}", "{a=\"foobar\"}"},
    {"empty result deletes the target",
     "- {source_labels: [a], target_label: b, replacement: \"\"}\n", "{a=\"foo\", b=\"bar\"}",
     "{a=\"foo\"}"},
    {"missing source is the empty string",
     "- {source_labels: [nope], target_label: b, replacement: \"x$1\"}\n", "{a=\"foo\"}",
     "{a=\"foo\", b=\"x\"}"},
    {"no source labels: a constant", "- {target_label: env, replacement: prod}\n", "{a=\"foo\"}",
     "{a=\"foo\", env=\"prod\"}"},
    {"target_label from a group",
     "- {source_labels: [a], regex: \"(.*)\", target_label: \"label_$1\", replacement: \"v\"}\n",
     "{a=\"foo\"}", "{a=\"foo\", label_foo=\"v\"}"},
    {"target expanding to an invalid name is skipped",
     "- {source_labels: [a], regex: \"(.*)\", target_label: \"$1\", replacement: \"v\"}\n",
     "{a=\"1foo\"}", "{a=\"1foo\"}"},
    {"$1x names group \"1x\", which is empty",
     "- {source_labels: [a], target_label: b, replacement: \"$1x\"}\n", "{a=\"foo\", b=\"old\"}",
     "{a=\"foo\"}"},
    {"${1}x is group 1 then x", "- {source_labels: [a], target_label: b, replacement: \"${1}x\"}\n",
     "{a=\"foo\"}", "{a=\"foo\", b=\"foox\"}"},
    {"$$ is a literal dollar, a lone $ stays",
     "- {source_labels: [a], target_label: b, replacement: \"$$1 $ ${\"}\n", "{a=\"foo\"}",
     "{a=\"foo\", b=\"$1 $ ${\"}"},
    {"an unknown group number is empty",
     "- {source_labels: [a], target_label: b, replacement: \"<$2>\"}\n", "{a=\"foo\"}",
     "{a=\"foo\", b=\"<>\"}"},
    {"host:port to host, as in the Prometheus docs",
     "- source_labels: [__address__]\n  regex: \"(.+):([0-9]+)\"\n  target_label: host\n"
     "  replacement: \"$1\"\n",
     "{__address__=\"10.1.2.3:8080\"}", "{__address__=\"10.1.2.3:8080\", host=\"10.1.2.3\"}"},
    {"action is case-insensitive", "- {action: Replace, source_labels: [a], target_label: b}\n",
     "{a=\"foo\"}", "{a=\"foo\", b=\"foo\"}"},
    {"rules run in order",
     "- {source_labels: [a], target_label: b}\n- {source_labels: [b], target_label: c, "
     "replacement: \"${1}2\"}\n",
     "{a=\"x\"}", "{a=\"x\", b=\"x\", c=\"x2\"}"},
    /* From Prometheus's relabel tests (model/relabel/relabel_test.go). */
    {"a rule that does not match, then groups from several sources",
     "- {source_labels: [a, b], regex: \"f(.*);(.*)r\", target_label: a, replacement: "
     "\"b${1}${2}m\"}\n"
     "- {source_labels: [c, a], regex: \"(b).*b(.*)ba(.*)\", target_label: d, replacement: "
     "\"$1$2$2$3\"}\n",
     "{a=\"foo\", b=\"bar\", c=\"baz\"}", "{a=\"boobam\", b=\"bar\", c=\"baz\", d=\"boooom\"}"},
    {"target_label from a group, value from another",
     "- {source_labels: [a], regex: \"some-([^-]+)-([^,]+)\", target_label: \"${1}\", "
     "replacement: \"${2}\"}\n",
     "{a=\"some-name-value\"}", "{a=\"some-name-value\", name=\"value\"}"},
    {"an empty result deletes target_label as written, not as expanded",
     "- {source_labels: [a], regex: \"some-([^-]+)-([^,]+)\", target_label: \"${1}\", "
     "replacement: \"${3}\"}\n",
     "{a=\"some-name-value\", name=\"kept\"}", "{a=\"some-name-value\", name=\"kept\"}"},
    {"a target expanding to nothing is skipped",
     "- {source_labels: [a], regex: \"some-([^-]+)-([^,]+)\", target_label: \"${3}\", "
     "replacement: \"${1}\"}\n",
     "{a=\"some-name-value\"}", "{a=\"some-name-value\"}"},
    /* What users copy from Prometheus's example configs: RE2 syntax that POSIX regcomp read
     * differently (\d as "d") or refused ((?:...), (?i), non-greedy, named groups). */
    {"host:port with \\d, the issue's example",
     "- {source_labels: [__address__], regex: \"(.+):(\\\\d+)\", target_label: host, "
     "replacement: \"$1\"}\n",
     "{__address__=\"10.0.0.1:8080\"}", "{__address__=\"10.0.0.1:8080\", host=\"10.0.0.1\"}"},
    {"\\d does not match letters",
     "- {source_labels: [__address__], regex: \"(.+):(\\\\d+)\", target_label: host, "
     "replacement: \"$1\"}\n",
     "{__address__=\"10.0.0.1:ddd\"}", "{__address__=\"10.0.0.1:ddd\"}"},
    {"the Kubernetes example: the port from an annotation",
     "- source_labels: [__address__, __meta_kubernetes_pod_annotation_prometheus_io_port]\n"
     "  action: replace\n  regex: ([^:]+)(?::\\d+)?;(\\d+)\n  replacement: $1:$2\n"
     "  target_label: __address__\n",
     "{__address__=\"10.0.0.1:8080\", "
     "__meta_kubernetes_pod_annotation_prometheus_io_port=\"9090\"}",
     "{__address__=\"10.0.0.1:9090\", "
     "__meta_kubernetes_pod_annotation_prometheus_io_port=\"9090\"}"},
    {"non-greedy: a deployment from a pod name",
     "- {source_labels: [pod], regex: \"(.*?)(-[a-z0-9]+)?-[a-z0-9]{5}\", target_label: app}\n",
     "{pod=\"api-gw-7d9f8b6c5-x2x4z\"}", "{app=\"api-gw\", pod=\"api-gw-7d9f8b6c5-x2x4z\"}"},
    {"named groups, by name and by number",
     "- {source_labels: [a], regex: \"(?P<host>[^:]+):(?P<port>\\\\d+)\", target_label: b, "
     "replacement: \"${port}@$host/$1\"}\n",
     "{a=\"db:5432\"}", "{a=\"db:5432\", b=\"5432@db/db\"}"},
    {"case-insensitive",
     "- {source_labels: [a], regex: \"(?i)(true|yes)\", target_label: b, replacement: on}\n",
     "{a=\"TRUE\"}", "{a=\"TRUE\", b=\"on\"}"},
    {"captures are leftmost-first, as in Go",
     "- {source_labels: [a], regex: \"(a|ab)(c|bcd)(d*)\", target_label: b, replacement: "
     "\"$1-$2-$3\"}\n",
     "{a=\"abcd\"}", "{a=\"abcd\", b=\"a-bcd-\"}"},
    {"dot matches a newline",
     "- {source_labels: [a], regex: \"x(.*)\", target_label: b, replacement: \"$1\"}\n",
     "{a=\"x1\\n2\"}", "{a=\"x1\\n2\", b=\"1\\n2\"}"},
};

static void test_replace(void **state) {
    (void)state;
    run_cases(replace_cases, sizeof replace_cases / sizeof replace_cases[0]);
}

static const relabel_case keep_drop_cases[] = {
    {"keep on match", "- {action: keep, source_labels: [job], regex: \"api|web\"}\n",
     "{job=\"api\"}", "{job=\"api\"}"},
    {"keep drops on no match", "- {action: keep, source_labels: [job], regex: \"api|web\"}\n",
     "{job=\"db\"}", NULL},
    {"keep is anchored", "- {action: keep, source_labels: [job], regex: \"ap\"}\n", "{job=\"api\"}",
     NULL},
    {"keep with the default regex keeps a missing label", "- {action: keep, source_labels: [x]}\n",
     "{job=\"api\"}", "{job=\"api\"}"},
    {"keep on an empty value", "- {action: keep, source_labels: [x], regex: \".+\"}\n",
     "{job=\"api\"}", NULL},
    {"a quantifier makes the character before it optional",
     "- {action: keep, source_labels: "
     "[a], regex: \"xab*c\"}\n- {action: keep, source_labels: [b], regex: \"yz?w\"}\n",
     "{a=\"xac\", b=\"yw\"}", "{a=\"xac\", b=\"yw\"}"},
    {"literal alternatives compare whole values",
     "- {action: keep, source_labels: [a], regex: \"0|1|22\"}\n", "{a=\"2\"}", NULL},
    {"an empty alternative matches the empty value",
     "- {action: keep, source_labels: [none], regex: \"x|\"}\n", "{a=\"2\"}", "{a=\"2\"}"},
    {"drop on match", "- {action: drop, source_labels: [job], regex: \"db\"}\n", "{job=\"db\"}",
     NULL},
    {"drop keeps on no match", "- {action: drop, source_labels: [job], regex: \"db\"}\n",
     "{job=\"api\"}", "{job=\"api\"}"},
    {"a drop that does not match lets later rules run",
     "- {action: drop, source_labels: [job], regex: \"db\"}\n"
     "- {target_label: never, replacement: x}\n",
     "{job=\"api\"}", "{job=\"api\", never=\"x\"}"},
    {"a drop that matches stops processing: later rules do not bring the target back",
     "- {action: drop, source_labels: [job], regex: \"db\"}\n"
     "- {target_label: job, replacement: api}\n"
     "- {action: keep, source_labels: [job], regex: api}\n",
     "{job=\"db\"}", NULL},
    {"drop on joined sources", "- {action: drop, source_labels: [a, b], regex: \"1;2\"}\n",
     "{a=\"1\", b=\"2\"}", NULL},
    {"keepequal keeps equal values",
     "- {action: keepequal, source_labels: [port], target_label: want}\n",
     "{port=\"80\", want=\"80\"}", "{port=\"80\", want=\"80\"}"},
    {"keepequal drops different values",
     "- {action: keepequal, source_labels: [port], target_label: want}\n",
     "{port=\"80\", want=\"81\"}", NULL},
    {"keepequal: a missing target equals an empty source",
     "- {action: keepequal, source_labels: [x], target_label: y}\n", "{a=\"1\"}", "{a=\"1\"}"},
    {"dropequal drops equal values",
     "- {action: dropequal, source_labels: [port], target_label: want}\n",
     "{port=\"80\", want=\"80\"}", NULL},
    {"dropequal keeps different values",
     "- {action: dropequal, source_labels: [port], target_label: want}\n",
     "{port=\"80\", want=\"81\"}", "{port=\"80\", want=\"81\"}"},
};

static void test_keep_drop(void **state) {
    (void)state;
    run_cases(keep_drop_cases, sizeof keep_drop_cases / sizeof keep_drop_cases[0]);
}

static const relabel_case hashmod_cases[] = {
    /* md5("10.0.0.1:8080") = 05ef642f508b1e5b 76612ddbd5f89a4c; 0x76612ddbd5f89a4c % 8 = 4 */
    {"hashmod of an address",
     "- {action: hashmod, source_labels: [__address__], modulus: 8, target_label: shard}\n",
     "{__address__=\"10.0.0.1:8080\"}", "{__address__=\"10.0.0.1:8080\", shard=\"4\"}"},
    /* md5("a;b") low half 0x4321960bf46f2ebd0a... % 3 = 2 */
    {"hashmod of joined sources",
     "- {action: hashmod, source_labels: [a, b], modulus: 3, target_label: shard}\n",
     "{a=\"a\", b=\"b\"}", "{a=\"a\", b=\"b\", shard=\"2\"}"},
    /* md5("") = d41d8cd98f00b204 e9800998ecf8427e; % 5 = 3 */
    {"hashmod of nothing", "- {action: hashmod, modulus: 5, target_label: shard}\n", "{a=\"1\"}",
     "{a=\"1\", shard=\"3\"}"},
    {"hashmod of foo mod 1000",
     "- {action: hashmod, source_labels: [a], modulus: 1000, "
     "target_label: s}\n",
     "{a=\"foo\"}", "{a=\"foo\", s=\"696\"}"},
    /* The sharding recipe: api-0 and api-1 hash to 0 mod 2, api-2 and api-3 to 1. */
    {"shard 1 keeps api-2",
     "- {action: hashmod, source_labels: [t], modulus: 2, target_label: __tmp_hash}\n"
     "- {action: keep, source_labels: [__tmp_hash], regex: \"1\"}\n",
     "{t=\"api-2\"}", "{__tmp_hash=\"1\", t=\"api-2\"}"},
    {"shard 1 drops api-0",
     "- {action: hashmod, source_labels: [t], modulus: 2, target_label: __tmp_hash}\n"
     "- {action: keep, source_labels: [__tmp_hash], regex: \"1\"}\n",
     "{t=\"api-0\"}", NULL},
};

static void test_hashmod(void **state) {
    (void)state;
    run_cases(hashmod_cases, sizeof hashmod_cases / sizeof hashmod_cases[0]);
    assert_int_equal(relabel_hashmod("api-1", 5, 2), 0);
    assert_int_equal(relabel_hashmod("api-3", 5, 2), 1);
    assert_int_equal(relabel_hashmod("anything", 8, 1), 0);
}

static const relabel_case label_cases[] = {
    {"labelmap with the default replacement",
     "- {action: labelmap, regex: \"__meta_kubernetes_pod_label_(.+)\"}\n",
     "{__meta_kubernetes_pod_label_app=\"api\", __meta_kubernetes_pod_label_tier=\"web\", "
     "job=\"k\"}",
     "{__meta_kubernetes_pod_label_app=\"api\", __meta_kubernetes_pod_label_tier=\"web\", "
     "app=\"api\", job=\"k\", tier=\"web\"}"},
    {"labelmap with a prefix",
     "- {action: labelmap, regex: \"__meta_(.+)_(.+)\", replacement: \"k8s_${2}_$1\"}\n",
     "{__meta_pod_app=\"x\"}", "{__meta_pod_app=\"x\", k8s_app_pod=\"x\"}"},
    {"labelmap overwrites an existing label", "- {action: labelmap, regex: \"src_(.*)\"}\n",
     "{job=\"old\", src_job=\"new\"}", "{job=\"new\", src_job=\"new\"}"},
    {"labelmap skips names that map to invalid names", "- {action: labelmap, regex: \"x(.*)\"}\n",
     "{x1=\"a\", xa=\"b\"}", "{a=\"b\", x1=\"a\", xa=\"b\"}"},
    {"labeldrop", "- {action: labeldrop, regex: \"tmp_.*\"}\n",
     "{a=\"1\", tmp_a=\"2\", tmp_b=\"3\", xtmp_c=\"4\"}", "{a=\"1\", xtmp_c=\"4\"}"},
    {"labelkeep", "- {action: labelkeep, regex: \"job|instance\"}\n",
     "{a=\"1\", instance=\"i\", job=\"j\", jobs=\"x\"}", "{instance=\"i\", job=\"j\"}"},
    /* From Prometheus's relabel tests. */
    {"labelmap with a prefixed replacement",
     "- {action: labelmap, regex: \"(b.*)\", replacement: \"bar_${1}\"}\n",
     "{a=\"foo\", b1=\"bar\", b2=\"baz\"}",
     "{a=\"foo\", b1=\"bar\", b2=\"baz\", bar_b1=\"bar\", bar_b2=\"baz\"}"},
    {"labelmap of meta labels",
     "- {action: labelmap, regex: \"__meta_(my.*)\", replacement: \"${1}\"}\n",
     "{__meta_my_bar=\"aaa\", __meta_my_baz=\"bbb\", __meta_other=\"ccc\"}",
     "{__meta_my_bar=\"aaa\", __meta_my_baz=\"bbb\", __meta_other=\"ccc\", my_bar=\"aaa\", "
     "my_baz=\"bbb\"}"},
    {"labelkeep of a group", "- {action: labelkeep, regex: \"(b.*)\"}\n",
     "{a=\"foo\", b=\"bar\", c=\"baz\"}", "{b=\"bar\"}"},
    {"labeldrop of a group", "- {action: labeldrop, regex: \"(b.*)\"}\n",
     "{a=\"foo\", b=\"bar\", c=\"baz\"}", "{a=\"foo\", c=\"baz\"}"},
    {"labeldrop with RE2 syntax", "- {action: labeldrop, regex: \"(?i)TMP_\\\\w+\"}\n",
     "{a=\"1\", tmp_x=\"2\", Tmp_y_2=\"3\"}", "{a=\"1\"}"},
    {"labelmap with a named group",
     "- {action: labelmap, regex: \"__meta_kubernetes_pod_label_(?P<name>.+)\", replacement: "
     "\"k8s_${name}\"}\n",
     "{__meta_kubernetes_pod_label_app=\"api\"}",
     "{__meta_kubernetes_pod_label_app=\"api\", k8s_app=\"api\"}"},
    {"lowercase", "- {action: lowercase, source_labels: [a], target_label: low}\n",
     "{a=\"MiXeD-1\"}", "{a=\"MiXeD-1\", low=\"mixed-1\"}"},
    {"uppercase of joined sources",
     "- {action: uppercase, source_labels: [a, b], target_label: a}\n", "{a=\"x\", b=\"y\"}",
     "{a=\"X;Y\", b=\"y\"}"},
    {"lowercase is Unicode-aware, as Go's strings.ToLower",
     "- {action: lowercase, source_labels: [a], target_label: b}\n", "{a=\"\u00c9T\u00c9-\u0394\"}",
     "{a=\"\u00c9T\u00c9-\u0394\", b=\"\u00e9t\u00e9-\u03b4\"}"},
    {"uppercase maps invalid UTF-8 to U+FFFD, as Go's strings.Map",
     "- {action: uppercase, source_labels: [a], target_label: b}\n", "{a=\"a\\xffb\"}",
     "{a=\"a\\xffb\", b=\"A\ufffdB\"}"},
    {"lowercase of nothing deletes the target",
     "- {action: lowercase, source_labels: [none], target_label: a}\n", "{a=\"x\", b=\"y\"}",
     "{b=\"y\"}"},
};

static void test_label_actions(void **state) {
    (void)state;
    run_cases(label_cases, sizeof label_cases / sizeof label_cases[0]);
}

/* ---- configuration ------------------------------------------------------------------------ */

typedef struct error_case {
    const char *rules;
    const char *want; /* a substring of the error message */
} error_case;

static const error_case error_cases[] = {
    {"- {source_labels: [a]}\n", "relabel_configs[0]: replace needs a target_label"},
    {"- {target_label: a}\n- {action: hashmod, target_label: s}\n",
     "relabel.yaml:3:3: relabel_configs[1]: hashmod needs a modulus > 0"},
    {"- {action: hashmod, modulus: 4}\n", "hashmod needs a target_label"},
    {"- {action: hashmod, modulus: 4, target_label: \"a-b\"}\n",
     "\"a-b\" is not a valid target_label for hashmod"},
    {"- {action: replace, target_label: \"a-b\"}\n", "\"a-b\" is not a valid target_label"},
    {"- {action: keepequal, source_labels: [a]}\n", "keepequal needs a target_label"},
    {"- {action: dropequal, source_labels: [a], target_label: b, regex: x}\n",
     "dropequal takes only source_labels and target_label"},
    {"- {action: keepequal, source_labels: [a], target_label: b, replacement: x}\n",
     "keepequal takes no replacement"},
    {"- {action: lowercase, source_labels: [a]}\n", "lowercase needs a target_label"},
    {"- {action: uppercase, source_labels: [a], target_label: b, replacement: x}\n",
     "uppercase takes no replacement"},
    {"- {action: labelmap, regex: \"(.*)\", replacement: \"1$1\"}\n",
     "not a valid replacement for labelmap"},
    {"- {action: labelmap, regex: \"(.*)\", replacement: \"a-$1\"}\n",
     "not a valid replacement for labelmap"},
    {"- {action: labeldrop, source_labels: [a], regex: x}\n", "labeldrop takes only a regex"},
    {"- {action: labelkeep, regex: x, target_label: y}\n", "labelkeep takes only a regex"},
    {"- {action: labelkeep, regex: x, replacement: y}\n", "labelkeep takes only a regex"},
    {"- {action: keep, source_labels: [a], regex: \"(\"}\n",
     "relabel.yaml:2:45: relabel_configs[0].regex: invalid regular expression"},
    {"- {action: keep, source_labels: [a], regex: \"(a)\\\\1\"}\n",
     "relabel_configs[0].regex: invalid regular expression \"(a)\\\\1\": invalid escape sequence: "
     "\\\\1"},
    {"- {action: keep, source_labels: [a], regex: \"a{2,1}\"}\n",
     "invalid regular expression \"a{2,1}\": invalid repetition size: {2,1}"},
    {"- {action: keep, source_labels: [a], regex: \"\\\\8\"}\n",
     "invalid regular expression \"\\\\8\": invalid escape sequence: \\\\8"},
    /* Go would splice this into ^(?s:a)|(b)$ and accept it, unanchored; parsed alone it is not a
     * regular expression */
    {"- {action: keep, source_labels: [a], regex: \"a)|(b\"}\n", "unexpected ): a)|(b"},
    {"- {action: replace, source_labels: [a], target_label: \"a-$1\"}\n",
     "\"a-$1\" is not a valid target_label for replace"},
    {"- {action: replace, source_labels: [a], target_label: \"1$1\"}\n",
     "\"1$1\" is not a valid target_label for replace"},
    {"- {action: replace, source_labels: [a], regex: "
     "\"(a)(a)(a)(a)(a)(a)(a)(a)(a)(a)(a)(a)(a)(a)(a)(a)(a)(a)(a)(a)(a)(a)(a)(a)(a)(a)(a)(a)(a)(a)"
     "(a)(a)(a)(a)(a)(a)(a)(a)(a)(a)(a)(a)(a)(a)(a)(a)(a)(a)(a)(a)(a)(a)(a)(a)(a)(a)(a)(a)(a)(a)(a)"
     "(a)"
     "(a)(a)\", target_label: b, replacement: \"$64\"}\n",
     "replacement refers to group 64, more than the limit of 63"},
    {"- {action: bogus}\n", "unknown relabel action \"bogus\""},
    {"- {sourcelabels: [a], target_label: b}\n", "unknown key"},
    {"- {source_labels: [\"a-b\"], target_label: c}\n", "\"a-b\" is not a valid label name"},
    {"- {action: hashmod, source_labels: [a], modulus: -1, target_label: b}\n", "modulus"},
    {"- just a string\n", "expected a mapping"},
};

static void test_config_errors(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof error_cases / sizeof error_cases[0]; i++) {
        char yaml[1024];
        snprintf(yaml, sizeof yaml, "relabel_configs:\n%s", error_cases[i].rules);
        relabel_rules *rules = NULL;
        strata_error err;
        strata_error_clear(&err);
        if (load_rules(yaml, &rules, &err) == 0)
            fail_msg("case %zu loaded but should fail with %s", i, error_cases[i].want);
        assert_null(rules);
        assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
        if (strstr(err.message, error_cases[i].want) == NULL)
            fail_msg("case %zu: want \"%s\" in \"%s\"", i, error_cases[i].want, err.message);
    }
}

/* Writing a default explicitly is allowed where Prometheus allows it. */
static void test_config_explicit_defaults(void **state) {
    (void)state;
    relabel_rules *rules = NULL;
    strata_error err;
    const char *yaml = "relabel_configs:\n"
                       "- {action: labeldrop, regex: x, separator: \";\", replacement: \"$1\"}\n"
                       "- {action: keepequal, source_labels: [a], target_label: b, regex: "
                       "\"(.*)\"}\n"
                       "- {action: labelmap, regex: \"(.*)\", replacement: \"k_${1}_x\"}\n"
                       "- action: LabelKeep\n  regex: \".*\"\n";
    if (load_rules(yaml, &rules, &err) != 0)
        fail_msg("%s", err.message);
    assert_int_equal(relabel_rules_count(rules), 4);
    relabel_rules_free(rules);
    /* No rules, or a null list, is an empty rule list that keeps everything. */
    assert_int_equal(load_rules("relabel_configs:\n", &rules, &err), 0);
    assert_null(rules);
    assert_int_equal(relabel_rules_count(rules), 0);
    label_set set = LABEL_SET_INIT;
    assert_int_equal(label_set_from_text("{a=\"1\"}", &set, &err), 0);
    bool keep = false;
    assert_int_equal(relabel_apply(NULL, &set, &keep, &err), 0);
    assert_true(keep);
    assert_string_equal(label_set_get(&set, "a"), "1");
    label_set_free(&set);
}

typedef struct scrape_config {
    char *job_name;
    relabel_rules *relabel;
} scrape_config;

static const config_field scrape_fields[] = {
    {.key = "job_name",
     .kind = CONFIG_STRING,
     .offset = offsetof(scrape_config, job_name),
     .required = true},
    RELABEL_CONFIG_FIELD("relabel_configs", scrape_config, relabel),
    {.key = NULL},
};

typedef struct top_config {
    config_struct_list scrape_configs;
} top_config;

static const config_field top_fields[] = {
    {.key = "scrape_configs",
     .kind = CONFIG_STRUCT_LIST,
     .offset = offsetof(top_config, scrape_configs),
     .fields = scrape_fields,
     .elem_size = sizeof(scrape_config)},
    {.key = NULL},
};

/* The scraper embeds relabel_configs in each scrape config; errors carry the full path. */
static void test_config_embedded(void **state) {
    (void)state;
    const char *yaml = "scrape_configs:\n"
                       "- job_name: a\n"
                       "  relabel_configs:\n"
                       "  - {source_labels: [x], target_label: y}\n"
                       "- job_name: b\n";
    config_document *doc = NULL;
    strata_error err;
    assert_int_equal(config_load_string("scrape.yaml", yaml, strlen(yaml), &doc, &err), 0);
    top_config top;
    if (config_decode_document(doc, top_fields, &top, &err) != 0)
        fail_msg("%s", err.message);
    config_document_free(doc);
    assert_int_equal(top.scrape_configs.count, 2);
    scrape_config *sc = top.scrape_configs.items;
    assert_int_equal(relabel_rules_count(sc[0].relabel), 1);
    assert_null(sc[1].relabel);
    config_free(top_fields, &top);

    const char *bad = "scrape_configs:\n"
                      "- job_name: a\n"
                      "  relabel_configs:\n"
                      "  - {source_labels: [x], target_label: y}\n"
                      "  - {action: hashmod, target_label: y}\n";
    assert_int_equal(config_load_string("scrape.yaml", bad, strlen(bad), &doc, &err), 0);
    assert_int_equal(config_decode_document(doc, top_fields, &top, &err), -1);
    config_document_free(doc);
    assert_string_equal(err.message, "scrape.yaml:5:5: scrape_configs[0].relabel_configs[1]: "
                                     "hashmod needs a modulus > 0");
}

static void test_load_file(void **state) {
    (void)state;
    char path[] = "/tmp/relabel_test_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *yaml = "relabel_configs:\n"
                       "- {action: drop, source_labels: [comm], regex: \"sshd|cron\"}\n"
                       "- {source_labels: [comm], target_label: service}\n";
    assert_int_equal(write(fd, yaml, strlen(yaml)), (ssize_t)strlen(yaml));
    close(fd);
    relabel_rules *rules = NULL;
    strata_error err;
    if (relabel_rules_load_file(path, &rules, &err) != 0)
        fail_msg("%s", err.message);
    assert_int_equal(relabel_rules_count(rules), 2);
    relabel_rules_free(rules);
    /* An unknown top-level key is reported with the file name. */
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("relabel_config:\n- {action: keep}\n", f);
    fclose(f);
    assert_int_equal(relabel_rules_load_file(path, &rules, &err), -1);
    assert_non_null(strstr(err.message, "unknown key \"relabel_config\""));
    assert_non_null(strstr(err.message, path));
    unlink(path);
    assert_int_equal(relabel_rules_load_file("/nonexistent/relabel.yaml", &rules, &err), -1);
    assert_int_equal(err.code, STRATA_NOT_FOUND);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replace),         cmocka_unit_test(test_keep_drop),
        cmocka_unit_test(test_hashmod),         cmocka_unit_test(test_label_actions),
        cmocka_unit_test(test_config_errors),   cmocka_unit_test(test_config_explicit_defaults),
        cmocka_unit_test(test_config_embedded), cmocka_unit_test(test_load_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
