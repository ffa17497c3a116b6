/*
 * block_format.h - constants of Strata's block format, versions 1 and 2 (docs/block-format.md is
 * the normative description; this header mirrors it for the writer, the reader and tools).
 *
 * A block is a bucket directory `<tenant>/<ULID>/` holding one data object, profiles.strata, and
 * meta.json (uploaded last: its presence commits the block). The data object is
 *
 *     header (16 bytes) | pages ... | footer | trailer (24 bytes)
 *
 * Every table is stored column by column in row groups: all columns of a table break pages at the
 * same rows, so row r of a table lives in the same page number of every column. A page holds one
 * column's values for the rows of one row group, encoded (varints, zig-zag deltas or
 * length-prefixed bytes) and then zstd-compressed; its CRC-32 covers the stored bytes. The footer
 * lists, per table and page, where each column page lives, its lengths, rows and (for some
 * columns) the minimum and maximum value, so a reader can fetch trailer and footer with one ranged
 * read and afterwards only the pages a query needs.
 *
 * Version 2 adds pprof sample labels: a table of distinct label sets, a label-set column on the
 * samples and rollup_stacks tables, and the label sets each series uses. A writer writes version
 * 2 only when some sample of the block has labels; a block without any is written exactly as
 * version 1, so readers of version 1 keep reading it and it costs nothing more.
 */
#ifndef STRATA_BLOCK_FORMAT_H
#define STRATA_BLOCK_FORMAT_H

#include <stdbool.h>

#define BLOCK_MAGIC                                                                                \
    "STRATABK" /* 8 bytes, at the start of the header and the end of the trailer                   \
                */
#define BLOCK_MAGIC_LEN 8
/* The newest version this build writes and reads; it reads every version from
 * BLOCK_FORMAT_VERSION_MIN on. Blocks without sample labels are written as version 1. */
#define BLOCK_FORMAT_VERSION 2
#define BLOCK_FORMAT_VERSION_MIN 1
#define BLOCK_FORMAT_VERSION_LABELS 2 /* the first version with sample labels */
#define BLOCK_HEADER_SIZE 16          /* magic, u32le version, u32le reserved (0) */
#define BLOCK_TRAILER_SIZE 24 /* u64le footer length, u32le footer crc32, u32le version, magic */

/* File names inside a block directory. */
#define BLOCK_DATA_FILE "profiles.strata"
#define BLOCK_META_FILE "meta.json"
#define BLOCK_DELETION_MARK_FILE "deletion-mark.json"
#define BLOCK_NO_COMPACT_MARK_FILE "no-compact-mark.json"

/* Largest uncompressed page a reader accepts; writers stay far below. */
#define BLOCK_MAX_PAGE_BYTES (64u << 20)

typedef enum block_table_id {
    BLOCK_TABLE_STRINGS = 1,
    BLOCK_TABLE_MAPPINGS = 2,
    BLOCK_TABLE_FUNCTIONS = 3,
    BLOCK_TABLE_LOCATIONS = 4,
    BLOCK_TABLE_LINES = 5,
    BLOCK_TABLE_STACKS = 6,
    BLOCK_TABLE_SERIES = 7,
    BLOCK_TABLE_SERIES_LABELS = 8,
    BLOCK_TABLE_POSTINGS = 9,
    BLOCK_TABLE_POSTING_SERIES = 10,
    BLOCK_TABLE_PROFILES = 11,
    BLOCK_TABLE_SAMPLES = 12,
    /* Optional (docs/block-format.md 6.10): per-series stack rollups. A block has both or neither;
     * blocks written before them lack both, and readers that do not know them skip them. */
    BLOCK_TABLE_ROLLUP_SERIES = 13,
    BLOCK_TABLE_ROLLUP_STACKS = 14,
    /* Version 2 (docs/block-format.md 6.11): pprof sample labels. Present in every version 2
     * block; a version 1 block has none of them (a reader skips them as unknown tables). */
    BLOCK_TABLE_LABEL_SETS = 15,
    BLOCK_TABLE_LABEL_SET_LABELS = 16,
    BLOCK_TABLE_SERIES_LABEL_SETS = 17,
    /* Optional (docs/block-format.md 6.12): where the block's stacks come from in the writer's
     * dictionary, so a reader translates a stack the blocks cut from one dictionary share once.
     * A block has all three or none; readers that do not know them skip them. function_origins
     * came later: a block with the three may have it too (and then the dictionary's
     * function_count), older ones do not. */
    BLOCK_TABLE_STACK_ORIGINS = 18,
    BLOCK_TABLE_DICTIONARY = 19,
    BLOCK_TABLE_LOCATION_ORIGINS = 20,
    BLOCK_TABLE_FUNCTION_ORIGINS = 21,
    BLOCK_TABLE_REQUIRED_MAX = 12, /* tables 1..12 must be present */
    BLOCK_TABLE_MAX = 21,
} block_table_id;

/* Series with fewer profiles than this in a block have no rollup rows (docs 6.10). */
#define BLOCK_ROLLUP_MIN_PROFILES 2

/* Column encodings. All numeric encodings decode to 64-bit integers. */
typedef enum block_encoding {
    BLOCK_ENC_UVARINT = 1, /* each value an unsigned LEB128 varint */
    BLOCK_ENC_SVARINT = 2, /* each value zig-zag encoded, then a varint */
    BLOCK_ENC_DELTA =
        3, /* zig-zag varint of (value - previous value); previous starts at 0 per page */
    BLOCK_ENC_BYTES = 4, /* varint length, then that many bytes */
} block_encoding;

typedef enum block_codec {
    BLOCK_CODEC_NONE = 0,
    BLOCK_CODEC_ZSTD = 1,
} block_codec;

/* Column flags in the footer. */
#define BLOCK_COLUMN_HAS_MINMAX 1u

/* Mapping flags (mappings.flags). */
#define BLOCK_MAPPING_HAS_FUNCTIONS 1u
#define BLOCK_MAPPING_HAS_FILENAMES 2u
#define BLOCK_MAPPING_HAS_LINE_NUMBERS 4u
#define BLOCK_MAPPING_HAS_INLINE_FRAMES 8u

/* Location flags (locations.flags). */
#define BLOCK_LOCATION_IS_FOLDED 1u

/* Column numbers per table (the column id stored in the footer). */
enum { BLOCK_COL_STRINGS_VALUE = 0 };
enum {
    BLOCK_COL_MAPPINGS_START = 0,
    BLOCK_COL_MAPPINGS_LIMIT,
    BLOCK_COL_MAPPINGS_OFFSET,
    BLOCK_COL_MAPPINGS_FILE,
    BLOCK_COL_MAPPINGS_BUILD_ID,
    BLOCK_COL_MAPPINGS_FLAGS,
    BLOCK_COL_MAPPINGS_COUNT
};
enum {
    BLOCK_COL_FUNCTIONS_NAME = 0,
    BLOCK_COL_FUNCTIONS_SYSTEM_NAME,
    BLOCK_COL_FUNCTIONS_FILE,
    BLOCK_COL_FUNCTIONS_START_LINE,
    BLOCK_COL_FUNCTIONS_COUNT
};
enum {
    BLOCK_COL_LOCATIONS_MAPPING = 0,
    BLOCK_COL_LOCATIONS_ADDRESS,
    BLOCK_COL_LOCATIONS_FIRST_LINE,
    BLOCK_COL_LOCATIONS_LINE_COUNT,
    BLOCK_COL_LOCATIONS_FLAGS,
    BLOCK_COL_LOCATIONS_COUNT
};
enum { BLOCK_COL_LINES_FUNCTION = 0, BLOCK_COL_LINES_LINE, BLOCK_COL_LINES_COUNT };
enum { BLOCK_COL_STACKS_PARENT_DELTA = 0, BLOCK_COL_STACKS_LOCATION, BLOCK_COL_STACKS_COUNT };
enum {
    BLOCK_COL_SERIES_NAME = 0,
    BLOCK_COL_SERIES_SAMPLE_TYPE,
    BLOCK_COL_SERIES_SAMPLE_UNIT,
    BLOCK_COL_SERIES_PERIOD_TYPE,
    BLOCK_COL_SERIES_PERIOD_UNIT,
    BLOCK_COL_SERIES_DELTA,
    BLOCK_COL_SERIES_FIRST_LABEL,
    BLOCK_COL_SERIES_LABEL_COUNT,
    BLOCK_COL_SERIES_COUNT
};
enum {
    BLOCK_COL_SERIES_LABELS_NAME = 0,
    BLOCK_COL_SERIES_LABELS_VALUE,
    BLOCK_COL_SERIES_LABELS_COUNT
};
enum {
    BLOCK_COL_POSTINGS_NAME = 0,
    BLOCK_COL_POSTINGS_VALUE,
    BLOCK_COL_POSTINGS_FIRST,
    BLOCK_COL_POSTINGS_SERIES_COUNT,
    BLOCK_COL_POSTINGS_COUNT
};
enum { BLOCK_COL_POSTING_SERIES_SERIES = 0, BLOCK_COL_POSTING_SERIES_COUNT };
enum {
    BLOCK_COL_PROFILES_SERIES = 0,
    BLOCK_COL_PROFILES_TIME,
    BLOCK_COL_PROFILES_DURATION,
    BLOCK_COL_PROFILES_PERIOD,
    BLOCK_COL_PROFILES_TOTAL,
    BLOCK_COL_PROFILES_FIRST_SAMPLE,
    BLOCK_COL_PROFILES_SAMPLE_COUNT,
    BLOCK_COL_PROFILES_COUNT
};
/* label_set (version 2) is an optional column: a version 1 block has none. */
enum {
    BLOCK_COL_SAMPLES_STACK = 0,
    BLOCK_COL_SAMPLES_VALUE,
    BLOCK_COL_SAMPLES_LABEL_SET,
    BLOCK_COL_SAMPLES_COUNT
};
enum {
    BLOCK_COL_ROLLUP_SERIES_PROFILE_COUNT = 0,
    BLOCK_COL_ROLLUP_SERIES_FIRST_STACK,
    BLOCK_COL_ROLLUP_SERIES_STACK_COUNT,
    BLOCK_COL_ROLLUP_SERIES_COUNT
};
enum {
    BLOCK_COL_ROLLUP_STACKS_STACK = 0,
    BLOCK_COL_ROLLUP_STACKS_VALUE,
    BLOCK_COL_ROLLUP_STACKS_LABEL_SET, /* version 2, optional as on samples */
    BLOCK_COL_ROLLUP_STACKS_COUNT
};
enum {
    BLOCK_COL_LABEL_SETS_FIRST_LABEL = 0,
    BLOCK_COL_LABEL_SETS_LABEL_COUNT,
    BLOCK_COL_LABEL_SETS_COUNT
};
enum {
    BLOCK_COL_LABEL_SET_LABELS_NAME = 0,
    BLOCK_COL_LABEL_SET_LABELS_VALUE,
    BLOCK_COL_LABEL_SET_LABELS_COUNT
};
enum {
    BLOCK_COL_SERIES_LABEL_SETS_SERIES = 0,
    BLOCK_COL_SERIES_LABEL_SETS_LABEL_SET,
    BLOCK_COL_SERIES_LABEL_SETS_COUNT
};
enum { BLOCK_COL_STACK_ORIGINS_ORIGIN = 0, BLOCK_COL_STACK_ORIGINS_COUNT };
enum {
    BLOCK_COL_DICTIONARY_ID = 0,
    BLOCK_COL_DICTIONARY_STACK_COUNT,
    BLOCK_COL_DICTIONARY_LOCATION_COUNT,
    BLOCK_COL_DICTIONARY_FUNCTION_COUNT, /* optional: with table function_origins only */
    BLOCK_COL_DICTIONARY_COUNT
};
enum { BLOCK_COL_LOCATION_ORIGINS_ORIGIN = 0, BLOCK_COL_LOCATION_ORIGINS_COUNT };
enum { BLOCK_COL_FUNCTION_ORIGINS_ORIGIN = 0, BLOCK_COL_FUNCTION_ORIGINS_COUNT };

/* Bytes of a dictionary id (table dictionary, column id). */
#define BLOCK_DICTIONARY_ID_BYTES 16

/* The schema: each table's name and its columns (name, encoding the writer uses, flags). A
 * reader accepts any numeric encoding for a numeric column, but BYTES only where the schema says
 * so. Columns [0, n_required) are in every block that has the table; the others (the version 2
 * label_set columns) only in version 2 blocks, or, in a table whose tail is optional (the
 * dictionary's function_count), in any block whose writer had them. */
typedef struct block_column_schema {
    const char *name;
    block_encoding encoding;
    unsigned flags;
} block_column_schema;

typedef struct block_table_schema {
    const char *name;
    int n_columns;
    const block_column_schema *columns;
    int n_required;     /* columns every version has */
    bool optional_tail; /* columns from n_required on: optional in every version */
} block_table_schema;

/* The schema of a table, or NULL for an unknown table id. */
const block_table_schema *block_table_schema_get(int table_id);
/* Name of a table ("samples"), or "unknown". */
const char *block_table_name(int table_id);
/* Name of a column ("time_ns"), or "unknown". */
const char *block_column_name(int table_id, int column);

#endif
