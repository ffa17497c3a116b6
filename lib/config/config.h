/*
 * config.h - strict YAML configuration: a parsed node tree and declarative decoding into C structs.
 *
 * Every Strata service reads one YAML file. Two layers serve it:
 *
 * 1. The node tree. config_load_file / config_load_string parse YAML (libyaml's event parser) into
 *    an immutable tree of mappings, sequences and scalars. Each node knows its source name, line
 * and column (1-based) and its parent, so any node can report an error as strata.yaml:12:3:
 * bucket.config: unknown key "directry" without the caller threading paths around. The tree is
 * stricter than YAML: one document per file; mapping keys must be scalars and unique; anchors,
 * aliases and explicit tags are rejected (they make configs hard to read and to diff). Scalars keep
 * their text and whether they were quoted: an unquoted empty value, "~" or "null" is null, which
 * decoding treats as "not given". The tree lives in one arena owned by a reference-counted
 * config_document; it is never modified after loading, so it may be read from any number of
 * threads.
 *
 * 2. Decoding. A service describes its config struct with a table of config_field descriptors
 *    (key, kind, offset, required, default text, nested table or callbacks) ended by an entry whose
 *    key is NULL, and config_decode fills the struct from a mapping node. Decoding is strict: an
 *    unknown key, a value of the wrong type ("expected a duration like 10s, 1m30s or 500ms") or a
 *    missing required key is an INVALID_ARGUMENT error naming file, line, column and key path.
 *    Defaults are YAML text ("10s", "64MiB", "[a, b]") decoded exactly like a value from the file,
 *    so one parser handles both. A CONFIG_RAW field keeps a subtree (and a reference to its
 *    document) for a later decoder, such as the bucket module or scrape configs.
 *
 * Storage per kind (the C type at `offset`):
 *   CONFIG_STRING       char *              owned; NULL when absent without default
 *   CONFIG_BOOL         bool                true / false (also True, TRUE, False, FALSE)
 *   CONFIG_INT64        int64_t             decimal or 0x hex, optional sign
 *   CONFIG_UINT64       uint64_t            decimal or 0x hex
 *   CONFIG_DOUBLE       double              decimal, optional fraction and exponent; finite
 *   CONFIG_DURATION     int64_t             nanoseconds; Prometheus / Go style "1h30m", "500ms",
 *                                           "1.5h", "2d", "1w", "1y" (365d); units y w d h m s ms
 *                                           us (or µs) ns, largest first, each once; "0" alone ok
 *   CONFIG_BYTES        uint64_t            "64MiB", "1GB", "512KiB", "1.5GiB" or a plain integer.
 *                                           Like Prometheus and Thanos, KB/MB/GB... are powers of
 *                                           1024 (same as KiB/MiB/GiB); B, KB..EB, KiB..EiB
 *   CONFIG_STRING_LIST  config_string_list  sequence of scalars
 *   CONFIG_STRING_MAP   config_string_map   mapping of scalar to scalar, in document order
 *   CONFIG_STRUCT       (nested struct)     decoded with `fields`; when absent or null only the
 *                                           nested defaults apply (its required keys are checked
 *                                           only if the section is present)
 *   CONFIG_STRUCT_LIST  config_struct_list  sequence of mappings, each decoded with `fields` into
 *                                           an owned array of `elem_size`-byte elements
 *   CONFIG_RAW          config_raw          the node itself (NULL when absent or null)
 *   CONFIG_CUSTOM       (elem_size bytes)   `decode` is called with the node; `release` frees
 *
 * Bounds. A numeric field (INT64, UINT64, DOUBLE, DURATION, BYTES) may name a check in .decode,
 * which numeric kinds otherwise leave unused: it is called with the parsed value after decoding.
 * CONFIG_DEFINE_BOUNDS(name, kind, min, max) defines one that allows min..max, written like the
 * field's values ("1", "1024", "10s", "1MiB"; NULL = no bound on that side). A value outside them
 * is an INVALID_ARGUMENT error naming file, line, column and key path and the bound:
 * "strata.yaml:7:18: querier.query_threads: 1000000 is above the maximum 1024". Thread counts,
 * intervals and delays are bounded this way, so a config check refuses what would fail (or exhaust
 * the machine) at start. Defaults are checked too (INTERNAL when outside), and so is a bound that
 * does not parse.
 *
 * Ownership: config_decode zeroes every described field first and, on failure, frees what it had
 * decoded, so the struct is always safe to pass to config_free. Fields not described are never
 * touched. config_free releases every owned string, list, map, nested struct and raw reference and
 * zeroes the fields.
 */
#ifndef STRATA_CONFIG_H
#define STRATA_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"

/* Nesting deeper than this is rejected while loading (protects the recursive decoder). */
#define CONFIG_MAX_DEPTH 64
/* Files larger than this are rejected by config_load_file. */
#define CONFIG_MAX_FILE_SIZE (16u << 20)

typedef struct config_document config_document;
typedef struct config_node config_node;

typedef enum config_node_kind {
    CONFIG_NODE_SCALAR,
    CONFIG_NODE_SEQUENCE,
    CONFIG_NODE_MAPPING,
} config_node_kind;

/* ---- Loading ----------------------------------------------------------------------------------
 */

/* Parses the file at path; the path is the source name in messages. NOT_FOUND when it does not
 * exist, INVALID_ARGUMENT ("strata.yaml:3:1: found a tab character ...") when it is not valid. */
int config_load_file(const char *path, config_document **out, strata_error *err);
/* Parses len bytes of text; `name` (e.g. "<flags>") is the source name in messages. */
int config_load_string(const char *name, const char *text, size_t len, config_document **out,
                       strata_error *err);
/* Drops the caller's reference. The tree is freed when no CONFIG_RAW field refers to it either. */
void config_document_free(config_document *doc);
/* Adds a reference (for code that keeps nodes beyond the caller's document lifetime). */
config_document *config_document_ref(config_document *doc);
/* The top node, or NULL for an empty document (empty file, only comments, or a lone null). */
const config_node *config_document_root(const config_document *doc);
const char *config_document_name(const config_document *doc);

/* ---- Reading nodes ----------------------------------------------------------------------------
 */

config_node_kind config_node_get_kind(const config_node *n);
unsigned config_node_line(const config_node *n);
unsigned config_node_column(const config_node *n);
/* The document holding n (to keep it alive with config_document_ref). */
config_document *config_node_document(const config_node *n);
/* Scalar text, NUL-terminated (NULL for non-scalars); *len, if given, gets the byte length. */
const char *config_node_scalar(const config_node *n, size_t *len);
/* True for an unquoted scalar "", "~", "null", "Null" or "NULL". */
bool config_node_is_null(const config_node *n);
/* Number of items of a sequence or entries of a mapping (0 for scalars). */
size_t config_node_size(const config_node *n);
/* i-th item of a sequence or i-th value of a mapping (NULL if out of range). */
const config_node *config_node_at(const config_node *n, size_t i);
/* i-th key node of a mapping (NULL for other kinds or out of range). */
const config_node *config_node_key_at(const config_node *n, size_t i);
/* Value of a mapping by key, or NULL. */
const config_node *config_node_get(const config_node *n, const char *key);
/* Writes n's key path ("bucket.config", "scrape_configs[2].job_name"; "" for the root) into out,
 * always NUL-terminated, truncated to fit. A mapping key node has its mapping's path. */
void config_node_path(const config_node *n, char *out, size_t out_len);
/* Sets err to INVALID_ARGUMENT "name:line:col: path: message" for node n (path omitted at the
 * root). For use by custom decoders and modules decoding raw nodes. Returns -1. */
int config_node_error(strata_error *err, const config_node *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- Decoding ---------------------------------------------------------------------------------
 */

typedef enum config_kind {
    CONFIG_STRING,
    CONFIG_BOOL,
    CONFIG_INT64,
    CONFIG_UINT64,
    CONFIG_DOUBLE,
    CONFIG_DURATION,
    CONFIG_BYTES,
    CONFIG_STRING_LIST,
    CONFIG_STRING_MAP,
    CONFIG_STRUCT,
    CONFIG_STRUCT_LIST,
    CONFIG_RAW,
    CONFIG_CUSTOM,
} config_kind;

typedef struct config_string_list {
    char **items;
    size_t count;
} config_string_list;

typedef struct config_string_map {
    char **keys;
    char **values;
    size_t count;
} config_string_map;

typedef struct config_struct_list {
    void *items; /* count elements of the descriptor's elem_size bytes */
    size_t count;
} config_struct_list;

typedef struct config_raw {
    const config_node *node;
    config_document *doc; /* reference held while node is set */
} config_raw;

/* Decodes a present, non-null node into dst (the field's storage). On failure sets err (use
 * config_node_error for positions) and returns -1; dst must then need no release. */
typedef int (*config_decode_fn)(const config_node *node, void *dst, strata_error *err);
/* Frees what config_decode_fn stored in dst and resets it. Called also for never-decoded storage,
 * which is all zero bytes. */
typedef void (*config_release_fn)(void *dst);

typedef struct config_field config_field;
struct config_field {
    const char *key; /* NULL ends a table */
    config_kind kind;
    size_t offset;              /* offsetof(struct, member) */
    bool required;              /* a missing or null value is an error */
    const char *default_text;   /* YAML text used when the key is absent or null */
    const config_field *fields; /* CONFIG_STRUCT, CONFIG_STRUCT_LIST */
    size_t elem_size;           /* CONFIG_STRUCT_LIST: sizeof(element); CONFIG_CUSTOM: storage */
    config_decode_fn decode;    /* CONFIG_CUSTOM; numeric kinds: optional check (see Bounds) */
    config_release_fn release;  /* CONFIG_CUSTOM, optional */
};

/* Decodes mapping node (NULL or null = empty mapping) into out with fields. An invalid descriptor
 * or default is an INTERNAL error naming the key. */
int config_decode(const config_node *node, const config_field *fields, void *out,
                  strata_error *err);
/* config_decode on the document's root; an empty document is an empty mapping, and a missing
 * required key is then reported with the document's name. */
int config_decode_document(const config_document *doc, const config_field *fields, void *out,
                           strata_error *err);
/* Releases everything config_decode stored in out for fields and zeroes those fields. */
void config_free(const config_field *fields, void *out);

/* Checks the parsed value (of kind, at value) decoded from node against min and max, texts in the
 * kind's syntax (NULL = no bound): INVALID_ARGUMENT "file:line:col: path: V is below the minimum
 * MIN" (or above the maximum), INTERNAL if a bound does not parse. */
int config_check_bounds(const config_node *node, config_kind kind, const void *value,
                        const char *min, const char *max, strata_error *err);
/* Defines `static int name(node, dst, err)`, a numeric field's .decode check for min..max. */
#define CONFIG_DEFINE_BOUNDS(name, kind, min, max)                                                 \
    static int name(const config_node *node, void *dst, strata_error *err) {                       \
        return config_check_bounds(node, kind, dst, min, max, err);                                \
    }

/* The value parsers behind the scalar kinds, for custom decoders and flags. They return false on
 * malformed or out-of-range text. */
bool config_parse_bool(const char *text, bool *out);
bool config_parse_int64(const char *text, int64_t *out);
bool config_parse_uint64(const char *text, uint64_t *out);
bool config_parse_double(const char *text, double *out);
bool config_parse_duration(const char *text, int64_t *out_ns);
bool config_parse_bytes(const char *text, uint64_t *out);

/* A time as users give one (the query API's parameters, `strata query`): Unix milliseconds,
 * RFC 3339 ("2026-12-02T12:00:00Z", fractions and [+-]HH:MM offsets allowed), "now" or
 * "now-<duration>" ("now-1h", durations as config_parse_duration reads them), into ns since the
 * epoch. Unlike the parsers above it fails with INVALID_ARGUMENT and a message that starts with
 * `name` and quotes the text. */
int config_parse_time(const char *name, const char *text, int64_t now_ns, int64_t *out,
                      strata_error *err);

#endif
