/*
 * config_fuzz.c - libFuzzer target: load arbitrary bytes as YAML and decode them with a table that
 * uses every kind, checking that errors are reported cleanly and nothing leaks.
 */
#include <stddef.h>
#include <stdint.h>

#include "config/config.h"

typedef struct fuzz_inner {
    char *name;
    int64_t timeout;
} fuzz_inner;

typedef struct fuzz_config {
    char *text;
    bool flag;
    int64_t i;
    uint64_t u;
    double d;
    int64_t duration;
    uint64_t size;
    config_string_list list;
    config_string_map map;
    fuzz_inner inner;
    config_struct_list items;
    config_raw raw;
} fuzz_config;

static const config_field inner_fields[] = {
    {.key = "name", .kind = CONFIG_STRING, .offset = offsetof(fuzz_inner, name)},
    {.key = "timeout",
     .kind = CONFIG_DURATION,
     .offset = offsetof(fuzz_inner, timeout),
     .default_text = "10s"},
    {0},
};

static const config_field fuzz_fields[] = {
    {.key = "text", .kind = CONFIG_STRING, .offset = offsetof(fuzz_config, text)},
    {.key = "flag", .kind = CONFIG_BOOL, .offset = offsetof(fuzz_config, flag)},
    {.key = "i", .kind = CONFIG_INT64, .offset = offsetof(fuzz_config, i)},
    {.key = "u", .kind = CONFIG_UINT64, .offset = offsetof(fuzz_config, u)},
    {.key = "d", .kind = CONFIG_DOUBLE, .offset = offsetof(fuzz_config, d)},
    {.key = "duration", .kind = CONFIG_DURATION, .offset = offsetof(fuzz_config, duration)},
    {.key = "size", .kind = CONFIG_BYTES, .offset = offsetof(fuzz_config, size)},
    {.key = "list", .kind = CONFIG_STRING_LIST, .offset = offsetof(fuzz_config, list)},
    {.key = "map", .kind = CONFIG_STRING_MAP, .offset = offsetof(fuzz_config, map)},
    {.key = "inner",
     .kind = CONFIG_STRUCT,
     .offset = offsetof(fuzz_config, inner),
     .fields = inner_fields},
    {.key = "items",
     .kind = CONFIG_STRUCT_LIST,
     .offset = offsetof(fuzz_config, items),
     .fields = inner_fields,
     .elem_size = sizeof(fuzz_inner)},
    {.key = "raw", .kind = CONFIG_RAW, .offset = offsetof(fuzz_config, raw)},
    {0},
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    config_document *doc = NULL;
    strata_error err;
    if (config_load_string("fuzz.yaml", (const char *)data, size, &doc, &err) != 0)
        return 0;
    fuzz_config cfg;
    if (config_decode_document(doc, fuzz_fields, &cfg, &err) == 0)
        config_free(fuzz_fields, &cfg);
    config_document_free(doc);
    return 0;
}
