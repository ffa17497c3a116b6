/*
 * config_test.c - tests for the YAML node tree, the value parsers and declarative decoding.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "config/config.h"

#define SEC STRATA_NS_PER_SEC
#define MS STRATA_NS_PER_MS

/* ---- Helpers ----------------------------------------------------------------------------------
 */

static config_document *load_ok(const char *text) {
    config_document *doc = NULL;
    strata_error err;
    strata_error_clear(&err);
    int rc = config_load_string("strata.yaml", text, strlen(text), &doc, &err);
    if (rc != 0)
        fail_msg("unexpected load error: %s", err.message);
    return doc;
}

/* Loads text and expects a load error with exactly `message`. */
static void load_fails(const char *text, const char *message) {
    config_document *doc = NULL;
    strata_error err;
    strata_error_clear(&err);
    assert_int_equal(config_load_string("strata.yaml", text, strlen(text), &doc, &err), -1);
    assert_null(doc);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_string_equal(err.message, message);
}

/* ---- The decoded structs used below -----------------------------------------------------------
 */

typedef struct tls_config {
    char *ca_file;
    bool insecure_skip_verify;
} tls_config;

typedef struct target_config {
    char *job_name;
    int64_t scrape_interval;
    config_string_list targets;
    config_string_map labels;
} target_config;

typedef struct test_config {
    char *name;
    bool enabled;
    int64_t offset;
    uint64_t count;
    double ratio;
    int64_t timeout;
    uint64_t max_size;
    config_string_list peers;
    config_string_map external_labels;
    tls_config tls;
    config_struct_list scrape_configs;
    config_raw bucket;
    int32_t port;  /* custom kind */
    int untouched; /* not described: never written */
} test_config;

static const config_field tls_fields[] = {
    {.key = "ca_file", .kind = CONFIG_STRING, .offset = offsetof(tls_config, ca_file)},
    {.key = "insecure_skip_verify",
     .kind = CONFIG_BOOL,
     .offset = offsetof(tls_config, insecure_skip_verify),
     .default_text = "false"},
    {0},
};

static const config_field target_fields[] = {
    {.key = "job_name",
     .kind = CONFIG_STRING,
     .offset = offsetof(target_config, job_name),
     .required = true},
    {.key = "scrape_interval",
     .kind = CONFIG_DURATION,
     .offset = offsetof(target_config, scrape_interval),
     .default_text = "15s"},
    {.key = "targets", .kind = CONFIG_STRING_LIST, .offset = offsetof(target_config, targets)},
    {.key = "labels", .kind = CONFIG_STRING_MAP, .offset = offsetof(target_config, labels)},
    {0},
};

static int decode_port(const config_node *node, void *dst, strata_error *err) {
    const char *text = config_node_scalar(node, NULL);
    int64_t v;
    if (text == NULL || !config_parse_int64(text, &v) || v < 1 || v > 65535)
        return config_node_error(err, node, "expected a port between 1 and 65535");
    *(int32_t *)dst = (int32_t)v;
    return 0;
}

static const config_field test_fields[] = {
    {.key = "name", .kind = CONFIG_STRING, .offset = offsetof(test_config, name), .required = true},
    {.key = "enabled",
     .kind = CONFIG_BOOL,
     .offset = offsetof(test_config, enabled),
     .default_text = "true"},
    {.key = "offset",
     .kind = CONFIG_INT64,
     .offset = offsetof(test_config, offset),
     .default_text = "-7"},
    {.key = "count", .kind = CONFIG_UINT64, .offset = offsetof(test_config, count)},
    {.key = "ratio",
     .kind = CONFIG_DOUBLE,
     .offset = offsetof(test_config, ratio),
     .default_text = "0.25"},
    {.key = "timeout",
     .kind = CONFIG_DURATION,
     .offset = offsetof(test_config, timeout),
     .default_text = "10s"},
    {.key = "max_size",
     .kind = CONFIG_BYTES,
     .offset = offsetof(test_config, max_size),
     .default_text = "64MiB"},
    {.key = "peers",
     .kind = CONFIG_STRING_LIST,
     .offset = offsetof(test_config, peers),
     .default_text = "[a:1, b:2]"},
    {.key = "external_labels",
     .kind = CONFIG_STRING_MAP,
     .offset = offsetof(test_config, external_labels)},
    {.key = "tls",
     .kind = CONFIG_STRUCT,
     .offset = offsetof(test_config, tls),
     .fields = tls_fields},
    {.key = "scrape_configs",
     .kind = CONFIG_STRUCT_LIST,
     .offset = offsetof(test_config, scrape_configs),
     .fields = target_fields,
     .elem_size = sizeof(target_config)},
    {.key = "bucket", .kind = CONFIG_RAW, .offset = offsetof(test_config, bucket)},
    {.key = "port",
     .kind = CONFIG_CUSTOM,
     .offset = offsetof(test_config, port),
     .decode = decode_port,
     .elem_size = sizeof(int32_t),
     .default_text = "7070"},
    {0},
};

/* Decodes text with test_fields, expecting failure with exactly `message`. */
static void decode_fails(const char *text, const char *message) {
    config_document *doc = load_ok(text);
    test_config cfg;
    cfg.untouched = 42;
    strata_error err;
    strata_error_clear(&err);
    assert_int_equal(config_decode_document(doc, test_fields, &cfg, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_string_equal(err.message, message);
    /* Everything described was released and zeroed; config_free stays safe. */
    assert_null(cfg.name);
    assert_null(cfg.peers.items);
    assert_null(cfg.scrape_configs.items);
    assert_null(cfg.bucket.doc);
    assert_int_equal(cfg.untouched, 42);
    config_free(test_fields, &cfg);
    config_document_free(doc);
}

/* ---- Node tree --------------------------------------------------------------------------------
 */

static void test_tree_positions_and_accessors(void **state) {
    (void)state;
    config_document *doc = load_ok("# comment\n"
                                   "server:\n"
                                   "  port: 7070\n"
                                   "  names: [a, \"b\"]\n"
                                   "empty:\n"
                                   "quoted: ''\n");
    const config_node *root = config_document_root(doc);
    assert_non_null(root);
    assert_int_equal(config_node_get_kind(root), CONFIG_NODE_MAPPING);
    assert_int_equal(config_node_size(root), 3);
    assert_string_equal(config_document_name(doc), "strata.yaml");

    const config_node *server = config_node_get(root, "server");
    assert_int_equal(config_node_line(server), 3);
    assert_int_equal(config_node_column(server), 3);
    const config_node *port = config_node_get(server, "port");
    size_t len;
    assert_string_equal(config_node_scalar(port, &len), "7070");
    assert_int_equal(len, 4);
    assert_int_equal(config_node_line(port), 3);
    assert_int_equal(config_node_column(port), 9);

    const config_node *key = config_node_key_at(server, 1);
    assert_string_equal(config_node_scalar(key, NULL), "names");
    assert_int_equal(config_node_line(key), 4);
    const config_node *names = config_node_at(server, 1);
    assert_int_equal(config_node_get_kind(names), CONFIG_NODE_SEQUENCE);
    assert_int_equal(config_node_size(names), 2);
    assert_string_equal(config_node_scalar(config_node_at(names, 1), NULL), "b");
    assert_null(config_node_at(names, 2));
    assert_null(config_node_key_at(names, 0));
    assert_null(config_node_scalar(names, NULL));

    char path[64];
    config_node_path(config_node_at(names, 1), path, sizeof path);
    assert_string_equal(path, "server.names[1]");
    config_node_path(key, path, sizeof path);
    assert_string_equal(path, "server");
    config_node_path(root, path, sizeof path);
    assert_string_equal(path, "");
    config_node_path(config_node_at(names, 1), path, 8);
    assert_string_equal(path, "server.");

    assert_true(config_node_is_null(config_node_get(root, "empty")));
    assert_false(config_node_is_null(config_node_get(root, "quoted")));
    assert_null(config_node_get(root, "missing"));
    assert_ptr_equal(config_node_document(port), doc);

    strata_error err;
    config_node_error(&err, config_node_at(names, 0), "bad value %d", 3);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
    assert_string_equal(err.message, "strata.yaml:4:11: server.names[0]: bad value 3");
    config_document_free(doc);
}

static void test_tree_empty_documents(void **state) {
    (void)state;
    const char *empties[] = {"", "# only a comment\n", "---\n", "~\n", "\n\n"};
    for (size_t i = 0; i < sizeof empties / sizeof empties[0]; i++) {
        config_document *doc = load_ok(empties[i]);
        assert_null(config_document_root(doc));
        config_document_free(doc);
    }
}

static void test_tree_rejects_duplicates_anchors_tags(void **state) {
    (void)state;
    load_fails("a: 1\nb:\n  c: 2\n  c: 3\n",
               "strata.yaml:4:3: b: duplicate key \"c\" (first defined at line 3)");
    load_fails("a: &x 1\nb: *x\n",
               "strata.yaml:1:4: anchors (&x) are not supported; repeat the value instead");
    load_fails("a: !!str 1\n",
               "strata.yaml:1:4: explicit tags (tag:yaml.org,2002:str) are not supported; remove "
               "the tag");
    load_fails("? [a, b]\n: 1\n",
               "strata.yaml:1:3: mapping keys must be plain strings, not lists or mappings");
    load_fails("a: 1\n---\nb: 2\n",
               "strata.yaml:2:1: a second YAML document (---) is not supported; use one per file");
    load_fails("a: \"x\\0y\"\n", "strata.yaml:1:4: values must not contain NUL characters");
}

static void test_tree_syntax_errors_have_lines(void **state) {
    (void)state;
    load_fails("a: 1\nb:\n\tc: 2\n",
               "strata.yaml:3:1: found character that cannot start any token (while scanning for "
               "the next token at line 3)");
    load_fails("a: [1, 2\nb: 3\n", "strata.yaml:2:2: did not find expected ',' or ']' (while "
                                   "parsing a flow sequence at line 1)");
    load_fails("a: 1\n b: 2\n", "strata.yaml:2:3: mapping values are not allowed in this context");
    /* A reader error (invalid UTF-8) is mapped from its byte offset to a line. */
    load_fails("a: 1\nb: \xff\n", "strata.yaml:2:4: invalid leading UTF-8 octet");
}

static void test_tree_depth_limit(void **state) {
    (void)state;
    char text[200];
    size_t n = 0;
    /* CONFIG_MAX_DEPTH levels load; one more is rejected. */
    for (int i = 0; i < CONFIG_MAX_DEPTH + 1; i++)
        text[n++] = '[';
    for (int i = 0; i < CONFIG_MAX_DEPTH + 1; i++)
        text[n++] = ']';
    text[n] = '\0';
    config_document *doc = NULL;
    strata_error err;
    assert_int_equal(config_load_string("deep.yaml", text + 1, n - 2, &doc, &err), 0);
    config_document_free(doc);
    assert_int_equal(config_load_string("deep.yaml", text, n, &doc, &err), -1);
    assert_string_equal(err.message, "deep.yaml:1:65: nesting deeper than 64 levels");
}

static void test_load_file(void **state) {
    (void)state;
    char path[] = "/tmp/strata-config-test-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *text = "name: from-file\nbogus: 1\n";
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    config_document *doc;
    strata_error err;
    assert_int_equal(config_load_file(path, &doc, &err), 0);
    test_config cfg;
    assert_int_equal(config_decode_document(doc, test_fields, &cfg, &err), -1);
    char expected[256];
    snprintf(expected, sizeof expected,
             "%s:2:1: unknown key \"bogus\" (expected one of: name, enabled, offset, count, "
             "ratio, timeout, max_size, peers, external_labels, tls, scrape_configs, bucket, port)",
             path);
    assert_string_equal(err.message, expected);
    config_document_free(doc);
    unlink(path);

    assert_int_equal(config_load_file(path, &doc, &err), -1);
    assert_int_equal(err.code, STRATA_NOT_FOUND);
    assert_null(doc);
    assert_int_equal(config_load_file("/tmp", &doc, &err), -1);
    assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
}

/* ---- Value parsers ----------------------------------------------------------------------------
 */

static void test_parse_durations(void **state) {
    (void)state;
    struct {
        const char *text;
        int64_t ns;
    } good[] = {
        {"0", 0},
        {"10s", 10 * SEC},
        {"1m30s", 90 * SEC},
        {"500ms", 500 * MS},
        {"2h", 7200 * SEC},
        {"1d", 86400 * SEC},
        {"1w", 7 * 86400 * SEC},
        {"1y", 365 * 86400 * SEC},
        {"1h30m15s250ms", (5415 * SEC) + 250 * MS},
        {"1.5h", 5400 * SEC},
        {"0.5s", 500 * MS},
        {"100us", 100000},
        {"100\xc2\xb5s", 100000},
        {"42ns", 42},
        {"0s", 0},
        {"292y", INT64_C(292) * 365 * 86400 * SEC},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        int64_t ns = -1;
        if (!config_parse_duration(good[i].text, &ns))
            fail_msg("rejected %s", good[i].text);
        assert_int_equal(ns, good[i].ns);
    }
    const char *bad[] = {
        "",    "10", "s",    "-1s",   "1s1m", "1m1m", "1.5ns", "10 s",
        "1.s", "1x", "293y", "1h-1m", " 1s",  "1.",   ".s",    "9999999999999999999999s"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int64_t ns;
        if (config_parse_duration(bad[i], &ns))
            fail_msg("accepted %s", bad[i]);
    }
}

static void test_parse_bytes_and_numbers(void **state) {
    (void)state;
    uint64_t b;
    assert_true(config_parse_bytes("64MiB", &b));
    assert_int_equal(b, UINT64_C(64) << 20);
    assert_true(config_parse_bytes("1GB", &b));
    assert_int_equal(b, UINT64_C(1) << 30);
    assert_true(config_parse_bytes("512KiB", &b));
    assert_int_equal(b, 512 * 1024);
    assert_true(config_parse_bytes("1048576", &b));
    assert_int_equal(b, 1048576);
    assert_true(config_parse_bytes("1.5KiB", &b));
    assert_int_equal(b, 1536);
    assert_true(config_parse_bytes("0.1KiB", &b));
    assert_int_equal(b, 102);
    assert_true(config_parse_bytes("15EiB", &b));
    assert_int_equal(b, UINT64_C(15) << 60);
    assert_true(config_parse_bytes("100B", &b));
    assert_int_equal(b, 100);
    const char *bad_bytes[] = {"", "MiB", "16EiB", "1.5", "64 MiB", "64mib", "-1", "1Mi"};
    for (size_t i = 0; i < sizeof bad_bytes / sizeof bad_bytes[0]; i++)
        if (config_parse_bytes(bad_bytes[i], &b))
            fail_msg("accepted %s", bad_bytes[i]);

    int64_t i64;
    assert_true(config_parse_int64("-9223372036854775808", &i64));
    assert_true(i64 == INT64_MIN);
    assert_true(config_parse_int64("9223372036854775807", &i64));
    assert_true(i64 == INT64_MAX);
    assert_true(config_parse_int64("0x1F", &i64));
    assert_int_equal(i64, 31);
    assert_false(config_parse_int64("9223372036854775808", &i64));
    assert_false(config_parse_int64("1.0", &i64));
    assert_false(config_parse_int64("", &i64));
    assert_false(config_parse_int64("-", &i64));
    assert_false(config_parse_int64("0x", &i64));

    uint64_t u64;
    assert_true(config_parse_uint64("18446744073709551615", &u64));
    assert_true(u64 == UINT64_MAX);
    assert_false(config_parse_uint64("18446744073709551616", &u64));
    assert_false(config_parse_uint64("-1", &u64));

    double d;
    assert_true(config_parse_double("1.5e3", &d));
    assert_true(d == 1500.0);
    assert_true(config_parse_double("-0.25", &d));
    assert_true(d == -0.25);
    assert_false(config_parse_double("inf", &d));
    assert_false(config_parse_double("nan", &d));
    assert_false(config_parse_double("1e999", &d));
    assert_false(config_parse_double("1.0x", &d));
    assert_false(config_parse_double("", &d));

    bool flag;
    assert_true(config_parse_bool("TRUE", &flag) && flag);
    assert_true(config_parse_bool("false", &flag) && !flag);
    assert_false(config_parse_bool("yes", &flag));
}

/* ---- Decoding ---------------------------------------------------------------------------------
 */

static void test_decode_every_kind(void **state) {
    (void)state;
    config_document *doc = load_ok("name: strata\n"
                                   "enabled: false\n"
                                   "offset: -12\n"
                                   "count: 18446744073709551615\n"
                                   "ratio: 1.5\n"
                                   "timeout: 1m30s\n"
                                   "max_size: 1GB\n"
                                   "peers: [x, '', y]\n"
                                   "external_labels:\n"
                                   "  region: eu\n"
                                   "  env: prod\n"
                                   "tls:\n"
                                   "  ca_file: /etc/ca.pem\n"
                                   "  insecure_skip_verify: true\n"
                                   "scrape_configs:\n"
                                   "  - job_name: app\n"
                                   "    targets: [a:6060, b:6060]\n"
                                   "    labels: {team: x}\n"
                                   "  - job_name: db\n"
                                   "    scrape_interval: 1m\n"
                                   "bucket:\n"
                                   "  type: FILESYSTEM\n"
                                   "  config: {directory: /data}\n"
                                   "port: 8080\n");
    test_config cfg;
    cfg.untouched = 42;
    strata_error err;
    assert_int_equal(config_decode_document(doc, test_fields, &cfg, &err), 0);
    config_document_free(doc); /* the raw field keeps the tree alive */

    assert_string_equal(cfg.name, "strata");
    assert_false(cfg.enabled);
    assert_int_equal(cfg.offset, -12);
    assert_true(cfg.count == UINT64_MAX);
    assert_true(cfg.ratio == 1.5);
    assert_int_equal(cfg.timeout, 90 * SEC);
    assert_int_equal(cfg.max_size, UINT64_C(1) << 30);
    assert_int_equal(cfg.peers.count, 3);
    assert_string_equal(cfg.peers.items[0], "x");
    assert_string_equal(cfg.peers.items[1], "");
    assert_string_equal(cfg.peers.items[2], "y");
    assert_int_equal(cfg.external_labels.count, 2);
    assert_string_equal(cfg.external_labels.keys[0], "region");
    assert_string_equal(cfg.external_labels.values[0], "eu");
    assert_string_equal(cfg.external_labels.keys[1], "env");
    assert_string_equal(cfg.external_labels.values[1], "prod");
    assert_string_equal(cfg.tls.ca_file, "/etc/ca.pem");
    assert_true(cfg.tls.insecure_skip_verify);
    assert_int_equal(cfg.scrape_configs.count, 2);
    target_config *t = cfg.scrape_configs.items;
    assert_string_equal(t[0].job_name, "app");
    assert_int_equal(t[0].scrape_interval, 15 * SEC);
    assert_int_equal(t[0].targets.count, 2);
    assert_string_equal(t[0].targets.items[1], "b:6060");
    assert_int_equal(t[0].labels.count, 1);
    assert_string_equal(t[0].labels.values[0], "x");
    assert_string_equal(t[1].job_name, "db");
    assert_int_equal(t[1].scrape_interval, 60 * SEC);
    assert_int_equal(t[1].targets.count, 0);
    assert_int_equal(cfg.port, 8080);
    assert_int_equal(cfg.untouched, 42);

    assert_non_null(cfg.bucket.node);
    const config_node *type = config_node_get(cfg.bucket.node, "type");
    assert_string_equal(config_node_scalar(type, NULL), "FILESYSTEM");
    assert_int_equal(config_node_line(type), 22);
    char path[64];
    config_node_path(config_node_get(config_node_get(cfg.bucket.node, "config"), "directory"), path,
                     sizeof path);
    assert_string_equal(path, "bucket.config.directory");

    config_free(test_fields, &cfg);
    assert_null(cfg.name);
    assert_null(cfg.bucket.node);
    assert_int_equal(cfg.scrape_configs.count, 0);
}

static void test_decode_defaults(void **state) {
    (void)state;
    config_document *doc = load_ok("name: only\ntls:\ntimeout:\n");
    test_config cfg;
    strata_error err;
    assert_int_equal(config_decode_document(doc, test_fields, &cfg, &err), 0);
    assert_string_equal(cfg.name, "only");
    assert_true(cfg.enabled);
    assert_int_equal(cfg.offset, -7);
    assert_int_equal(cfg.count, 0);
    assert_true(cfg.ratio == 0.25);
    assert_int_equal(cfg.timeout, 10 * SEC); /* null means "not given" */
    assert_int_equal(cfg.max_size, UINT64_C(64) << 20);
    assert_int_equal(cfg.peers.count, 2);
    assert_string_equal(cfg.peers.items[0], "a:1");
    assert_int_equal(cfg.external_labels.count, 0);
    assert_null(cfg.tls.ca_file);
    assert_false(cfg.tls.insecure_skip_verify);
    assert_int_equal(cfg.scrape_configs.count, 0);
    assert_null(cfg.bucket.node);
    assert_int_equal(cfg.port, 7070);
    config_free(test_fields, &cfg);
    config_document_free(doc);
}

static void test_decode_unknown_and_missing_keys(void **state) {
    (void)state;
    decode_fails("name: x\ntls:\n  ca_fle: /x\n",
                 "strata.yaml:3:3: tls: unknown key \"ca_fle\" (expected one of: ca_file, "
                 "insecure_skip_verify)");
    decode_fails("enabled: true\n", "strata.yaml:1:1: missing required key \"name\"");
    decode_fails("", "strata.yaml: missing required key \"name\"");
    decode_fails("name:\n", "strata.yaml:1:6: name: a value is required");
    decode_fails("name: x\n"
                 "scrape_configs:\n"
                 "  - job_name: a\n"
                 "  - scrape_interval: 5s\n",
                 "strata.yaml:4:5: scrape_configs[1]: missing required key \"job_name\"");
    decode_fails("name: x\n"
                 "scrape_configs:\n"
                 "  - job_name: a\n"
                 "    labels:\n"
                 "      a: b\n"
                 "    extra: 1\n",
                 "strata.yaml:6:5: scrape_configs[0]: unknown key \"extra\" (expected one of: "
                 "job_name, scrape_interval, targets, labels)");
}

static void test_decode_type_errors(void **state) {
    (void)state;
    decode_fails("name: [a]\n", "strata.yaml:1:7: name: expected a string, got a list");
    decode_fails("name: x\nenabled: yes\n",
                 "strata.yaml:2:10: enabled: expected true or false, got \"yes\"");
    decode_fails("name: x\noffset: 1.5\n",
                 "strata.yaml:2:9: offset: expected a 64-bit integer, got \"1.5\"");
    decode_fails("name: x\ncount: -1\n",
                 "strata.yaml:2:8: count: expected a non-negative 64-bit integer, got \"-1\"");
    decode_fails("name: x\nratio: lots\n",
                 "strata.yaml:2:8: ratio: expected a number like 0.5 or 1e3, got \"lots\"");
    decode_fails("name: x\ntimeout: ten\n",
                 "strata.yaml:2:10: timeout: expected a duration like 10s, 1m30s or 500ms, got "
                 "\"ten\"");
    decode_fails("name: x\nmax_size: {a: 1}\n",
                 "strata.yaml:2:11: max_size: expected a byte size like 64MiB, 1GB or 1048576, "
                 "got a mapping");
    decode_fails("name: x\npeers: a\n",
                 "strata.yaml:2:8: peers: expected a list of strings, got \"a\"");
    decode_fails("name: x\npeers:\n  - [nested]\n",
                 "strata.yaml:3:5: peers[0]: expected a string, got a list");
    decode_fails("name: x\nexternal_labels: [a]\n",
                 "strata.yaml:2:18: external_labels: expected a mapping of strings to strings, "
                 "got a list");
    decode_fails("name: x\ntls: plain\n",
                 "strata.yaml:2:6: tls: expected a mapping, got \"plain\"");
    decode_fails("name: x\nscrape_configs: {a: 1}\n",
                 "strata.yaml:2:17: scrape_configs: expected a list of mappings, got a mapping");
    decode_fails("name: x\nscrape_configs:\n  - job_name: a\n  - 7\n",
                 "strata.yaml:4:5: scrape_configs[1]: expected a mapping, got \"7\"");
    decode_fails("name: x\nscrape_configs:\n  - job_name: a\n    scrape_interval: 5x\n",
                 "strata.yaml:4:22: scrape_configs[0].scrape_interval: expected a duration like "
                 "10s, 1m30s or 500ms, got \"5x\"");
    decode_fails("name: x\nport: 70000\n",
                 "strata.yaml:2:7: port: expected a port between 1 and 65535");
    decode_fails("- a\n- b\n", "strata.yaml:1:1: expected a mapping, got a list");
}

static void test_decode_bad_descriptors(void **state) {
    (void)state;
    typedef struct {
        int64_t t;
    } small;
    static const config_field bad_default[] = {
        {.key = "t", .kind = CONFIG_DURATION, .offset = 0, .default_text = "soon"},
        {0},
    };
    static const config_field no_fields[] = {
        {.key = "s", .kind = CONFIG_STRUCT, .offset = 0},
        {0},
    };
    config_document *doc = load_ok("{}");
    small s;
    strata_error err;
    assert_int_equal(config_decode_document(doc, bad_default, &s, &err), -1);
    assert_int_equal(err.code, STRATA_INTERNAL);
    assert_string_equal(err.message, "invalid default for key \"t\": <default>:1:1: expected a "
                                     "duration like 10s, 1m30s or 500ms, got \"soon\"");
    assert_int_equal(config_decode_document(doc, no_fields, &s, &err), -1);
    assert_int_equal(err.code, STRATA_INTERNAL);
    assert_string_equal(err.message,
                        "config descriptor for key \"s\": CONFIG_STRUCT needs a fields table");
    config_document_free(doc);
}

CONFIG_DEFINE_BOUNDS(threads_bounds, CONFIG_INT64, "1", "1024")
CONFIG_DEFINE_BOUNDS(delay_bounds, CONFIG_DURATION, "10s", NULL)
CONFIG_DEFINE_BOUNDS(size_bounds, CONFIG_BYTES, NULL, "1GiB")
CONFIG_DEFINE_BOUNDS(ratio_bounds, CONFIG_DOUBLE, "0", "1")
CONFIG_DEFINE_BOUNDS(bad_bounds, CONFIG_DURATION, NULL, "soon")

typedef struct bounded {
    int64_t threads;
    int64_t delay_ns;
    uint64_t size;
    double ratio;
} bounded;

static const config_field bounded_fields[] = {
    {.key = "threads",
     .kind = CONFIG_INT64,
     .offset = offsetof(bounded, threads),
     .default_text = "4",
     .decode = threads_bounds},
    {.key = "delay",
     .kind = CONFIG_DURATION,
     .offset = offsetof(bounded, delay_ns),
     .default_text = "30m",
     .decode = delay_bounds},
    {.key = "size",
     .kind = CONFIG_BYTES,
     .offset = offsetof(bounded, size),
     .default_text = "1MiB",
     .decode = size_bounds},
    {.key = "ratio",
     .kind = CONFIG_DOUBLE,
     .offset = offsetof(bounded, ratio),
     .default_text = "0.5",
     .decode = ratio_bounds},
    {0},
};

/* Bounds on numeric fields: values outside them name file, line, column, key and the bound;
 * values on the bounds pass; defaults outside them and malformed bounds are INTERNAL. */
static void test_decode_bounds(void **state) {
    (void)state;
    const struct {
        const char *yaml;
        const char *message; /* NULL: decodes */
    } cases[] = {
        {"threads: 1000000\n", "strata.yaml:1:10: threads: 1000000 is above the maximum 1024"},
        {"threads: 0\n", "strata.yaml:1:10: threads: 0 is below the minimum 1"},
        {"threads: -3\n", "strata.yaml:1:10: threads: -3 is below the minimum 1"},
        {"threads: 1024\n", NULL},
        {"threads: 1\n", NULL},
        {"delay: 1s\n", "strata.yaml:1:8: delay: 1s is below the minimum 10s"},
        {"delay: 9999ms\n", "strata.yaml:1:8: delay: 9999ms is below the minimum 10s"},
        {"delay: 10s\n", NULL},
        {"size: 2GiB\n", "strata.yaml:1:7: size: 2GiB is above the maximum 1GiB"},
        {"size: 1GiB\n", NULL},
        {"ratio: 1.5\n", "strata.yaml:1:8: ratio: 1.5 is above the maximum 1"},
        {"ratio: -0.1\n", "strata.yaml:1:8: ratio: -0.1 is below the minimum 0"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        config_document *doc = load_ok(cases[i].yaml);
        bounded b;
        strata_error err;
        int rc = config_decode_document(doc, bounded_fields, &b, &err);
        if (cases[i].message == NULL) {
            if (rc != 0)
                fail_msg("%s: %s", cases[i].yaml, err.message);
        } else {
            assert_int_equal(rc, -1);
            assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
            assert_string_equal(err.message, cases[i].message);
        }
        config_free(bounded_fields, &b);
        config_document_free(doc);
    }
    config_document *doc = load_ok("{}");
    bounded b;
    strata_error err;
    assert_int_equal(config_decode_document(doc, bounded_fields, &b, &err), 0);
    assert_int_equal(b.threads, 4);
    assert_true(b.delay_ns == 1800 * STRATA_NS_PER_SEC);

    const config_field bad_default[] = {
        {.key = "threads", .kind = CONFIG_INT64, .default_text = "0", .decode = threads_bounds},
        {0},
    };
    assert_int_equal(config_decode_document(doc, bad_default, &b, &err), -1);
    assert_int_equal(err.code, STRATA_INTERNAL);
    assert_string_equal(err.message, "invalid default for key \"threads\": <default>:1:1: 0 is "
                                     "below the minimum 1");
    const config_field bad_bound[] = {
        {.key = "delay", .kind = CONFIG_DURATION, .default_text = "1s", .decode = bad_bounds},
        {0},
    };
    assert_int_equal(config_decode_document(doc, bad_bound, &b, &err), -1);
    assert_int_equal(err.code, STRATA_INTERNAL);
    assert_string_equal(err.message, "invalid default for key \"delay\": config bound \"soon\" "
                                     "is not a value of its field's kind");
    config_document_free(doc);
}

/* config_parse_time: every form, and the refusals with their messages. */
static void test_parse_time(void **state) {
    (void)state;
    const int64_t now = INT64_C(1764676800) * 1000000000; /* 2025-12-02T12:00:00Z */
    static const struct {
        const char *text;
        int64_t ns;
    } good[] = {
        {"now", INT64_C(1764676800000000000)},
        {"now-1h", INT64_C(1764673200000000000)},
        {"now-90s", INT64_C(1764676710000000000)},
        {"1764676800000", INT64_C(1764676800000000000)},
        {"-1000", INT64_C(-1000000000)},
        {"2025-12-02T12:00:00Z", INT64_C(1764676800000000000)},
        {"2025-12-02T12:00:00.25Z", INT64_C(1764676800250000000)},
        {"2025-12-02T13:30:00+01:30", INT64_C(1764676800000000000)},
        {"2025-12-02T10:00:00-02:00", INT64_C(1764676800000000000)},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        int64_t ns = 0;
        strata_error err;
        if (config_parse_time("start", good[i].text, now, &ns, &err) != 0)
            fail_msg("%s: %s", good[i].text, err.message);
        if (ns != good[i].ns)
            fail_msg("%s: %lld, want %lld", good[i].text, (long long)ns, (long long)good[i].ns);
    }
    static const struct {
        const char *text, *message;
    } bad[] = {
        {"yesterday", "end: \"yesterday\" is not a time (Unix milliseconds, RFC 3339, now or "
                      "now-1h)"},
        {"now-1x", "end: \"now-1x\" is not now-<duration> like now-1h"},
        {"now+1h", "end: \"now+1h\" is not a time (Unix milliseconds, RFC 3339, now or now-1h)"},
        {"99999999999999999", "end: 99999999999999999 ms is out of range (years 1678 to 2262)"},
        {"2025-12-02T12:00:00", "end: \"2025-12-02T12:00:00\" is not a time"},
        {"2025-12-02T12:00:00+1:00", "end: \"2025-12-02T12:00:00+1:00\" is not a time"},
        {"2025-12-02T12:00:00+24:00", "end: \"2025-12-02T12:00:00+24:00\" is not a time"},
        {"2025-12-02T12:00:00Zjunk", "end: \"2025-12-02T12:00:00Zjunk\" is not a time"},
        {"3000-01-01T00:00:00Z", "end: \"3000-01-01T00:00:00Z\" is not a time"},
        {"", "end: \"\" is not a time"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int64_t ns = 0;
        strata_error err;
        if (config_parse_time("end", bad[i].text, now, &ns, &err) == 0)
            fail_msg("%s parsed as %lld", bad[i].text, (long long)ns);
        assert_int_equal(err.code, STRATA_INVALID_ARGUMENT);
        if (strncmp(err.message, bad[i].message, strlen(bad[i].message)) != 0)
            fail_msg("%s: \"%s\", want \"%s\"", bad[i].text, err.message, bad[i].message);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tree_positions_and_accessors),
        cmocka_unit_test(test_tree_empty_documents),
        cmocka_unit_test(test_tree_rejects_duplicates_anchors_tags),
        cmocka_unit_test(test_tree_syntax_errors_have_lines),
        cmocka_unit_test(test_tree_depth_limit),
        cmocka_unit_test(test_load_file),
        cmocka_unit_test(test_parse_durations),
        cmocka_unit_test(test_parse_bytes_and_numbers),
        cmocka_unit_test(test_decode_every_kind),
        cmocka_unit_test(test_decode_defaults),
        cmocka_unit_test(test_decode_unknown_and_missing_keys),
        cmocka_unit_test(test_decode_type_errors),
        cmocka_unit_test(test_decode_bad_descriptors),
        cmocka_unit_test(test_decode_bounds),
        cmocka_unit_test(test_parse_time),
    };
    return cmocka_run_group_tests_name("config", tests, NULL, NULL);
}
