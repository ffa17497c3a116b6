/*
 * scrape_config_fuzz.c - libFuzzer target: arbitrary bytes as a strata config's scrape_configs
 * (every key, defaults merge, validation, relabel rules) and as a file_sd file, checking that
 * errors are reported cleanly and nothing leaks.
 */
#include <stddef.h>
#include <stdint.h>

#include "scrape_config.h"
#include "scrape_discovery.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    config_document *doc = NULL;
    strata_error err;
    if (config_load_string("fuzz.yaml", (const char *)data, size, &doc, &err) != 0)
        return 0;
    scrape_configs configs;
    if (scrape_configs_decode(config_node_get(config_document_root(doc), "scrape_configs"),
                              &configs, &err) == 0)
        scrape_configs_free(&configs);
    target_group *groups = NULL;
    size_t n = 0;
    if (scrape_file_sd_parse(doc, "fuzz.yaml", &groups, &n, &err) == 0)
        target_groups_free(groups, n);
    config_document_free(doc);
    return 0;
}
