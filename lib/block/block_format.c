/*
 * block_format.c - the schema table (versions 1 and 2) shared by the writer, the reader and block
 * dump.
 */
#include "block/block_format.h"

#include <stddef.h>

#define U BLOCK_ENC_UVARINT
#define S BLOCK_ENC_SVARINT
#define D BLOCK_ENC_DELTA
#define B BLOCK_ENC_BYTES
#define MM BLOCK_COLUMN_HAS_MINMAX

static const block_column_schema strings_cols[] = {{"value", B, 0}};
static const block_column_schema mappings_cols[] = {{"memory_start", U, 0}, {"memory_limit", U, 0},
                                                    {"file_offset", U, 0},  {"filename", U, 0},
                                                    {"build_id", U, 0},     {"flags", U, 0}};
static const block_column_schema functions_cols[] = {
    {"name", U, 0}, {"system_name", U, 0}, {"filename", U, 0}, {"start_line", S, 0}};
static const block_column_schema locations_cols[] = {{"mapping", U, 0},
                                                     {"address", D, 0},
                                                     {"first_line", D, 0},
                                                     {"line_count", U, 0},
                                                     {"flags", U, 0}};
static const block_column_schema lines_cols[] = {{"function", D, 0}, {"line", S, 0}};
static const block_column_schema stacks_cols[] = {{"parent_delta", U, 0}, {"location", D, 0}};
static const block_column_schema series_cols[] = {
    {"name", U, 0},        {"sample_type", U, 0}, {"sample_unit", U, 0}, {"period_type", U, 0},
    {"period_unit", U, 0}, {"delta", U, 0},       {"first_label", D, 0}, {"label_count", U, 0}};
static const block_column_schema series_labels_cols[] = {{"name", U, 0}, {"value", U, 0}};
static const block_column_schema postings_cols[] = {
    {"name", U, 0}, {"value", U, 0}, {"first", D, 0}, {"series_count", U, 0}};
static const block_column_schema posting_series_cols[] = {{"series", D, 0}};
static const block_column_schema profiles_cols[] = {
    {"series", D, MM}, {"time_ns", D, MM},     {"duration_ns", S, 0}, {"period", S, 0},
    {"total", S, 0},   {"first_sample", D, 0}, {"sample_count", U, 0}};
static const block_column_schema samples_cols[] = {
    {"stack", D, 0}, {"value", S, 0}, {"label_set", U, 0}};
static const block_column_schema rollup_series_cols[] = {
    {"profile_count", U, 0}, {"first_stack", D, 0}, {"stack_count", U, 0}};
static const block_column_schema rollup_stacks_cols[] = {
    {"stack", D, 0}, {"value", S, 0}, {"label_set", U, 0}};
static const block_column_schema label_sets_cols[] = {{"first_label", D, 0}, {"label_count", U, 0}};
static const block_column_schema label_set_labels_cols[] = {{"name", U, 0}, {"value", U, 0}};
static const block_column_schema series_label_sets_cols[] = {{"series", D, 0}, {"label_set", D, 0}};
static const block_column_schema stack_origins_cols[] = {{"origin", D, 0}};
static const block_column_schema dictionary_cols[] = {
    {"id", B, 0}, {"stack_count", U, 0}, {"location_count", U, 0}, {"function_count", U, 0}};
static const block_column_schema location_origins_cols[] = {{"origin", D, 0}};
static const block_column_schema function_origins_cols[] = {{"origin", D, 0}};

#define TABLE(name, cols)                                                                          \
    {                                                                                              \
        (name), (int)(sizeof(cols) / sizeof((cols)[0])), cols,                                     \
            (int)(sizeof(cols) / sizeof((cols)[0])), false                                         \
    }
/* A table whose last column is the optional version 2 label_set column. */
#define TABLE_LABELLED(name, cols)                                                                 \
    {                                                                                              \
        (name), (int)(sizeof(cols) / sizeof((cols)[0])), cols,                                     \
            (int)(sizeof(cols) / sizeof((cols)[0])) - 1, false                                     \
    }
/* A table whose last column is optional in every version. */
#define TABLE_OPTIONAL_LAST(name, cols)                                                            \
    {                                                                                              \
        (name), (int)(sizeof(cols) / sizeof((cols)[0])), cols,                                     \
            (int)(sizeof(cols) / sizeof((cols)[0])) - 1, true                                      \
    }

static const block_table_schema tables[BLOCK_TABLE_MAX + 1] = {
    [BLOCK_TABLE_STRINGS] = TABLE("strings", strings_cols),
    [BLOCK_TABLE_MAPPINGS] = TABLE("mappings", mappings_cols),
    [BLOCK_TABLE_FUNCTIONS] = TABLE("functions", functions_cols),
    [BLOCK_TABLE_LOCATIONS] = TABLE("locations", locations_cols),
    [BLOCK_TABLE_LINES] = TABLE("lines", lines_cols),
    [BLOCK_TABLE_STACKS] = TABLE("stacks", stacks_cols),
    [BLOCK_TABLE_SERIES] = TABLE("series", series_cols),
    [BLOCK_TABLE_SERIES_LABELS] = TABLE("series_labels", series_labels_cols),
    [BLOCK_TABLE_POSTINGS] = TABLE("postings", postings_cols),
    [BLOCK_TABLE_POSTING_SERIES] = TABLE("posting_series", posting_series_cols),
    [BLOCK_TABLE_PROFILES] = TABLE("profiles", profiles_cols),
    [BLOCK_TABLE_SAMPLES] = TABLE_LABELLED("samples", samples_cols),
    [BLOCK_TABLE_ROLLUP_SERIES] = TABLE("rollup_series", rollup_series_cols),
    [BLOCK_TABLE_ROLLUP_STACKS] = TABLE_LABELLED("rollup_stacks", rollup_stacks_cols),
    [BLOCK_TABLE_LABEL_SETS] = TABLE("label_sets", label_sets_cols),
    [BLOCK_TABLE_LABEL_SET_LABELS] = TABLE("label_set_labels", label_set_labels_cols),
    [BLOCK_TABLE_SERIES_LABEL_SETS] = TABLE("series_label_sets", series_label_sets_cols),
    [BLOCK_TABLE_STACK_ORIGINS] = TABLE("stack_origins", stack_origins_cols),
    [BLOCK_TABLE_DICTIONARY] = TABLE_OPTIONAL_LAST("dictionary", dictionary_cols),
    [BLOCK_TABLE_LOCATION_ORIGINS] = TABLE("location_origins", location_origins_cols),
    [BLOCK_TABLE_FUNCTION_ORIGINS] = TABLE("function_origins", function_origins_cols),
};

const block_table_schema *block_table_schema_get(int table_id) {
    if (table_id < 1 || table_id > BLOCK_TABLE_MAX)
        return NULL;
    return &tables[table_id];
}

const char *block_table_name(int table_id) {
    const block_table_schema *t = block_table_schema_get(table_id);
    return t == NULL ? "unknown" : t->name;
}

const char *block_column_name(int table_id, int column) {
    const block_table_schema *t = block_table_schema_get(table_id);
    if (t == NULL || column < 0 || column >= t->n_columns)
        return "unknown";
    return t->columns[column].name;
}
