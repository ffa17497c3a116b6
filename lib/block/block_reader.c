/*
 * block_reader.c - see block_reader.h for the design and block_format.h for the layout.
 */
#include "block/block_reader.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <zlib.h>
#include <zstd.h>

#include "common/array.h"
#include "common/prefault.h"
#include "common/varint.h"

#define MAX_FOOTER_COLUMNS 64
#define MAX_FOOTER_BYTES (256u << 20)

typedef struct r_page {
    uint64_t offset, stored_len, raw_len;
    uint32_t crc;
    uint32_t codec;
    int64_t min, max;
} r_page;

typedef struct r_group {
    uint64_t first_row, rows;
} r_group;

/* A decoded column page: values for numeric columns, or NUL-terminated strings. */
typedef struct r_decoded {
    uint64_t *values; /* numeric columns but the two below */
    /* Instead of values, the stack column of samples and rollup_stacks: stack ids fit 32 bits,
     * and these pages are most of what a reader caches (a fresh block's 80,000 sample rows) */
    uint32_t *narrow;
    uint64_t max_value; /* largest value (as unsigned), for cheap range checks */
    uint32_t *offsets;  /* strings: rows + 1 offsets into text */
    char *text;
    size_t bytes;
} r_decoded;

typedef struct r_table {
    bool present;
    bool evictable;
    uint64_t rows;
    int n_columns;                     /* columns in the footer */
    int column_of[MAX_FOOTER_COLUMNS]; /* schema column -> footer column */
    uint32_t encodings[MAX_FOOTER_COLUMNS];
    uint32_t flags[MAX_FOOTER_COLUMNS];
    uint64_t n_groups;
    r_group *groups;
    r_page *pages;       /* n_groups * n_columns, group-major */
    r_decoded **decoded; /* same shape; NULL until loaded */
    uint64_t bytes_fetched;
} r_table;

typedef struct r_series {
    label_set labels;
    profile_type type;
    bool type_as_previous; /* the series before has the same type (series sort by type first) */
} r_series;

typedef struct r_posting {
    const char *name;
    const char *value;
    uint64_t first, count;
} r_posting;

/* A location as held in memory: 24 bytes instead of block_location's 40 (a fresh block holds
 * about 100,000, and the querier keeps many readers open); block_reader_location expands it. */
typedef struct r_location {
    uint64_t address;
    uint32_t first_line;
    uint32_t mapping; /* mapping id + 1; 0 = none */
    uint32_t n_lines;
    bool is_folded;
} r_location;

/* Bytes of the object read ahead (options.readahead), or the tail read at open. */
typedef struct r_window {
    uint64_t offset;
    strata_buffer bytes;
    uint64_t last_used; /* r->window_clock when last read from */
} r_window;

/* Read-ahead windows kept per reader: the pages of a merge come from a few tables at once (the
 * profiles, the samples, the stack tree, the symbols), each read in ascending order. */
#define READAHEAD_WINDOWS 4

struct block_reader {
    block_fetch_fn fetch;
    void *ctx;
    uint64_t size;
    uint64_t footer_start;
    uint32_t version; /* the data object's format version */
    block_reader_options options;
    r_table tables[BLOCK_TABLE_MAX + 1];
    uint64_t bytes_fetched;
    size_t cache_used;  /* decoded bytes of evictable pages */
    size_t pinned_used; /* decoded bytes of pages kept until close (series, symbols, strings) */
    strata_buffer io;
    strata_buffer raw;
    ZSTD_DCtx *dctx;
    r_window windows[READAHEAD_WINDOWS + 1]; /* the last one: the tail read at open */
    uint64_t window_clock;

    r_series *series;
    size_t n_series;
    r_posting *postings;
    size_t n_postings;
    uint32_t *posting_series;
    size_t n_posting_series;
    block_rollup_series *rollups; /* per series; NULL until first use */

    /* sample label sets (version 2), loaded on first use: set id - 1 -> labels, sorted by name */
    bool label_sets_loaded;
    label_set *label_sets;
    size_t n_label_sets;
    uint32_t *series_sets;      /* series_label_sets' label set column */
    uint64_t *series_set_first; /* per series + 1: offsets into series_sets */
    const char **sample_names;  /* the distinct label names of every set, sorted */
    size_t n_sample_names;

    bool symbols_loaded;
    block_mapping *mappings;
    size_t n_mappings;
    block_function *functions;
    size_t n_functions;
    r_location *locations;
    size_t n_locations;
    block_line *lines;
    size_t n_lines;
    uint32_t *stack_parent; /* index = stack id; [0] unused */
    uint32_t *stack_location;
    size_t n_stacks;
    uint8_t *stack_group_loaded; /* per row group of stacks: decoded into the arrays */
    size_t stack_rows_loaded;
    /* functions, lines and locations are decoded a row group at a time too (ensure_*) */
    uint8_t *function_group_loaded, *line_group_loaded, *location_group_loaded;
    size_t function_rows_loaded, line_rows_loaded, location_rows_loaded;
    /* bytes allocated for functions, lines, locations, stack_parent and stack_location
     * (lazy_array_alloc): what lazy_array_free gives back */
    size_t functions_bytes, lines_bytes, locations_bytes, stacks_bytes;

    bool origins_loaded; /* tables dictionary, stack_origins and location_origins, on first use */
    block_origin_table stack_origins; /* block_stack_origins */
    uint32_t *location_origin;
    uint32_t *function_origin; /* NULL: the block has no function_origins (or symbols dropped) */
    block_stack_origins origins;
};

static int data_loss(strata_error *err, int table, int column, uint64_t page, const char *what) {
    if (column < 0)
        return strata_error_set(err, STRATA_DATA_LOSS, "block: table %s, page %llu: %s",
                                block_table_name(table), (unsigned long long)page, what);
    return strata_error_set(err, STRATA_DATA_LOSS, "block: table %s, column %s, page %llu: %s",
                            block_table_name(table), block_column_name(table, column),
                            (unsigned long long)page, what);
}

void block_reader_options_default(block_reader_options *options) {
    options->tail_guess = 64u * 1024u;
    options->readahead = 0;
    options->cache_bytes = 256u << 20;
    options->verify_checksums = true;
}

int block_memory_fetch(void *ctx, uint64_t offset, uint64_t length, strata_buffer *out,
                       strata_error *err) {
    const block_memory_source *src = ctx;
    if (offset > src->len || length > src->len - offset)
        return strata_error_set(err, STRATA_OUT_OF_RANGE,
                                "block: range %llu+%llu is beyond the object's %zu bytes",
                                (unsigned long long)offset, (unsigned long long)length, src->len);
    if (strata_buffer_append(out, src->data + offset, (size_t)length) != 0)
        return strata_error_oom(err);
    return 0;
}

/* Reads [offset, offset + length) of the object from the bucket into out. */
static int fetch_into(block_reader *r, uint64_t offset, uint64_t length, strata_buffer *out,
                      strata_error *err) {
    strata_buffer_reset(out);
    /* A range inside the object is filled whole by the fetch: its pages are mapped at once (a
     * fresh reader's first reads, the tail and read-ahead windows, are its largest and go into
     * buffers never touched before). A range beyond the object (a damaged footer) fails in the
     * fetch, with nothing reserved for it here. */
    if (offset <= r->size && length <= r->size - offset) {
        if (strata_buffer_reserve(out, (size_t)length) != 0)
            return strata_error_oom(err);
        strata_prefault_write(out->data, (size_t)length);
    }
    if (r->fetch(r->ctx, offset, length, out, err) != 0)
        return strata_error_wrap(err, "block: reading %llu bytes at offset %llu",
                                 (unsigned long long)length, (unsigned long long)offset);
    if (out->len != length)
        return strata_error_set(err, STRATA_DATA_LOSS,
                                "block: fetch at offset %llu returned %zu bytes, expected %llu "
                                "(object truncated?)",
                                (unsigned long long)offset, out->len, (unsigned long long)length);
    r->bytes_fetched += length;
    return 0;
}

/* The window holding [offset, offset + length), or NULL. */
static r_window *window_holding(block_reader *r, uint64_t offset, uint64_t length) {
    for (int i = 0; i <= READAHEAD_WINDOWS; i++) {
        r_window *w = &r->windows[i];
        if (w->bytes.len > 0 && offset >= w->offset && length <= w->bytes.len &&
            offset - w->offset <= w->bytes.len - length)
            return w;
    }
    return NULL;
}

/* Reads [offset, offset + length) of the data area with read-ahead: from a window when one holds
 * it, else by reading options.readahead bytes from offset into the least recently used window. */
static int fetch_ahead(block_reader *r, uint64_t offset, uint64_t length, strata_error *err) {
    r_window *w = window_holding(r, offset, length);
    if (w == NULL) {
        w = &r->windows[0];
        for (int i = 1; i < READAHEAD_WINDOWS; i++)
            if (r->windows[i].last_used < w->last_used)
                w = &r->windows[i];
        uint64_t want = r->options.readahead;
        if (want > r->footer_start - offset)
            want = r->footer_start - offset;
        w->offset = offset;
        if (fetch_into(r, offset, want, &w->bytes, err) != 0) {
            strata_buffer_reset(&w->bytes);
            return -1;
        }
    }
    w->last_used = ++r->window_clock;
    strata_buffer_reset(&r->io);
    if (strata_buffer_append(&r->io, w->bytes.data + (offset - w->offset), (size_t)length) != 0)
        return strata_error_oom(err);
    return 0;
}

/* Reads [offset, offset + length) of the object into r->io; table > 0 names the table whose page
 * it is (for the per-table counters), 0 the footer. */
static int fetch(block_reader *r, uint64_t offset, uint64_t length, int table, strata_error *err) {
    /* A page a window already holds comes from it whatever its size (the tail read of a small
     * block holds every page, large ones too); other pages are read ahead unless larger than
     * a window. */
    bool ahead = table > 0 && ((r->options.readahead > length && offset < r->footer_start &&
                                length <= r->footer_start - offset) ||
                               window_holding(r, offset, length) != NULL);
    if (ahead ? fetch_ahead(r, offset, length, err) != 0
              : fetch_into(r, offset, length, &r->io, err) != 0)
        return -1;
    if (table > 0)
        r->tables[table].bytes_fetched += length;
    return 0;
}

size_t block_reader_readahead_bytes(const block_reader *r) {
    size_t n = r->io.cap + r->raw.cap;
    for (int i = 0; i <= READAHEAD_WINDOWS; i++)
        n += r->windows[i].bytes.cap;
    return n;
}

void block_reader_drop_readahead(block_reader *r) {
    for (int i = 0; i <= READAHEAD_WINDOWS; i++) {
        strata_buffer_free(&r->windows[i].bytes);
        r->windows[i].offset = r->windows[i].last_used = 0;
    }
    /* The fetch buffer held the tail read at open (as big as a window); a page's bytes pass
     * through it and the inflate buffer only while that page is decoded, so an idle reader needs
     * neither. */
    strata_buffer_free(&r->io);
    strata_buffer_free(&r->raw);
}

/* ---- varints ---------------------------------------------------------------------------- */

/* The next value of a numeric column's page; *prev is the running sum of a delta column. */
static inline bool next_number(const uint8_t **p, const uint8_t *end, uint32_t encoding,
                               uint64_t *prev, uint64_t *out) {
    uint64_t v;
    if (!strata_uvarint_next(p, end, &v))
        return false;
    if (encoding == BLOCK_ENC_SVARINT)
        v = strata_zigzag_decode(v);
    else if (encoding == BLOCK_ENC_DELTA)
        v = *prev += strata_zigzag_decode(v);
    *out = v;
    return true;
}

/* The tight loop: n values of a numeric encoding, exactly consuming [p, end). */
static bool decode_numbers(const uint8_t *p, const uint8_t *end, uint32_t encoding, uint64_t n,
                           uint64_t *out, uint64_t *max_out) {
    uint64_t prev = 0, max = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t v;
        if (!next_number(&p, end, encoding, &prev, &v))
            return false;
        out[i] = v;
        max = v > max ? v : max;
    }
    *max_out = max;
    return p == end;
}

static bool decode_strings(const uint8_t *p, const uint8_t *end, uint64_t n, r_decoded *d) {
    size_t text_len = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t len;
        if (!strata_uvarint_next(&p, end, &len) || len > (uint64_t)(end - p))
            return false;
        d->offsets[i] = (uint32_t)text_len;
        memcpy(d->text + text_len, p, (size_t)len);
        text_len += (size_t)len;
        d->text[text_len++] = '\0';
        p += len;
    }
    d->offsets[n] = (uint32_t)text_len;
    return p == end;
}

/* ---- footer ----------------------------------------------------------------------------- */

typedef struct cursor {
    const uint8_t *p, *end;
    bool bad;
} cursor;

static uint64_t cur_uvarint(cursor *c) {
    uint64_t v = 0;
    if (!c->bad && !strata_uvarint_get(&c->p, c->end, &v))
        c->bad = true;
    return c->bad ? 0 : v;
}

static int64_t cur_svarint(cursor *c) {
    int64_t v = 0;
    if (!c->bad && !strata_svarint_get(&c->p, c->end, &v))
        c->bad = true;
    return c->bad ? 0 : v;
}

static uint32_t cur_u32le(cursor *c) {
    if (c->bad || c->end - c->p < 4) {
        c->bad = true;
        return 0;
    }
    uint32_t v = strata_load_u32le(c->p);
    c->p += 4;
    return v;
}

static int footer_error(strata_error *err, const char *what, int table) {
    return strata_error_set(err, STRATA_DATA_LOSS, "block: footer, table %s: %s",
                            table > 0 ? block_table_name(table) : "?", what);
}

/* A version 1 block's label_set columns, and its tables 15-17, are not part of its format: they
 * are skipped as unknown, as a version 1 reader skips them. */
static bool is_label_table(int table_id) {
    return table_id >= BLOCK_TABLE_LABEL_SETS && table_id <= BLOCK_TABLE_SERIES_LABEL_SETS;
}

static int parse_columns(cursor *c, r_table *t, int table_id, uint32_t version, strata_error *err) {
    const block_table_schema *schema = block_table_schema_get(table_id);
    uint64_t n = cur_uvarint(c);
    if (c->bad || n == 0 || n > MAX_FOOTER_COLUMNS)
        return footer_error(err, "bad column count", table_id);
    t->n_columns = (int)n;
    for (int i = 0; i < MAX_FOOTER_COLUMNS; i++)
        t->column_of[i] = -1;
    for (int i = 0; i < t->n_columns; i++) {
        uint64_t id = cur_uvarint(c), enc = cur_uvarint(c), flags = cur_uvarint(c);
        if (c->bad || enc < BLOCK_ENC_UVARINT || enc > BLOCK_ENC_BYTES || flags > 1 ||
            id >= MAX_FOOTER_COLUMNS || t->column_of[id] >= 0)
            return footer_error(err, "bad column description", table_id);
        t->column_of[id] = i;
        t->encodings[i] = (uint32_t)enc;
        t->flags[i] = (uint32_t)flags;
    }
    if (schema == NULL)
        return 0;
    int required = version >= BLOCK_FORMAT_VERSION_LABELS && !schema->optional_tail
                       ? schema->n_columns
                       : schema->n_required;
    for (int s = required; s < schema->n_columns && !schema->optional_tail; s++)
        t->column_of[s] = -1; /* a label_set column in a version 1 block: not part of it */
    for (int s = 0; s < schema->n_columns; s++) {
        int f = t->column_of[s];
        if (f < 0 && s >= required)
            continue; /* an optional column the block does not have */
        if (f < 0)
            return strata_error_set(err, STRATA_DATA_LOSS,
                                    "block: footer, table %s: column %s "
                                    "is missing",
                                    schema->name, schema->columns[s].name);
        bool want_bytes = schema->columns[s].encoding == BLOCK_ENC_BYTES;
        if ((t->encodings[f] == BLOCK_ENC_BYTES) != want_bytes)
            return strata_error_set(err, STRATA_DATA_LOSS,
                                    "block: footer, table %s: column %s has encoding %u",
                                    schema->name, schema->columns[s].name, t->encodings[f]);
    }
    return 0;
}

static int parse_page(cursor *c, const block_reader *r, r_table *t, int table_id, uint64_t g,
                      int col, strata_error *err) {
    r_page *pg = &t->pages[g * (uint64_t)t->n_columns + (uint64_t)col];
    pg->offset = cur_uvarint(c);
    pg->stored_len = cur_uvarint(c);
    pg->raw_len = cur_uvarint(c);
    pg->codec = (uint32_t)cur_uvarint(c);
    pg->crc = cur_u32le(c);
    if (t->flags[col] & BLOCK_COLUMN_HAS_MINMAX) {
        pg->min = cur_svarint(c);
        pg->max = cur_svarint(c);
    }
    if (c->bad)
        return footer_error(err, "truncated page entry", table_id);
    if (pg->offset < BLOCK_HEADER_SIZE || pg->offset > r->footer_start ||
        pg->stored_len > r->footer_start - pg->offset)
        return data_loss(err, table_id, col, g, "page lies outside the data area");
    if (pg->raw_len > BLOCK_MAX_PAGE_BYTES || pg->raw_len < t->groups[g].rows ||
        pg->codec > BLOCK_CODEC_ZSTD ||
        (pg->codec == BLOCK_CODEC_NONE && pg->raw_len != pg->stored_len))
        return data_loss(err, table_id, col, g, "bad page lengths or codec");
    return 0;
}

static int parse_groups(cursor *c, const block_reader *r, r_table *t, int table_id,
                        strata_error *err) {
    t->n_groups = cur_uvarint(c);
    if (c->bad || t->n_groups > (uint64_t)(c->end - c->p))
        return footer_error(err, "bad page count", table_id);
    size_t cells = (size_t)t->n_groups * (size_t)t->n_columns;
    t->groups = calloc((size_t)t->n_groups + 1, sizeof *t->groups);
    t->pages = calloc(cells + 1, sizeof *t->pages);
    t->decoded = calloc(cells + 1, sizeof *t->decoded);
    if (t->groups == NULL || t->pages == NULL || t->decoded == NULL)
        return strata_error_oom(err);
    uint64_t next = 0;
    for (uint64_t g = 0; g < t->n_groups; g++) {
        t->groups[g].first_row = cur_uvarint(c);
        t->groups[g].rows = cur_uvarint(c);
        if (c->bad || t->groups[g].first_row != next || t->groups[g].rows == 0 ||
            t->groups[g].rows > t->rows - next)
            return data_loss(err, table_id, -1, g, "bad row range in the page index");
        next += t->groups[g].rows;
        for (int col = 0; col < t->n_columns; col++) {
            if (parse_page(c, r, t, table_id, g, col, err) != 0)
                return -1;
        }
    }
    if (next != t->rows)
        return footer_error(err, "pages do not cover every row", table_id);
    return 0;
}

static void decoded_free(r_decoded *d) {
    free(d->values);
    free(d->narrow);
    free(d->offsets);
    free(d->text);
    free(d);
}

static void table_free(r_table *t) {
    size_t cells = (size_t)t->n_groups * (size_t)t->n_columns;
    for (size_t i = 0; t->decoded != NULL && i < cells; i++) {
        if (t->decoded[i] != NULL) {
            decoded_free(t->decoded[i]);
        }
    }
    free(t->groups);
    free(t->pages);
    free(t->decoded);
    memset(t, 0, sizeof *t);
}

static int parse_footer(block_reader *r, const uint8_t *p, size_t len, strata_error *err) {
    cursor c = {p, p + len, false};
    uint64_t n_tables = cur_uvarint(&c);
    if (c.bad || n_tables > 1024)
        return footer_error(err, "bad table count", 0);
    r_table scratch;
    for (uint64_t i = 0; i < n_tables; i++) {
        uint64_t id = cur_uvarint(&c);
        if (c.bad)
            return footer_error(err, "truncated", 0);
        bool known = id >= 1 && id <= BLOCK_TABLE_MAX &&
                     (r->version >= BLOCK_FORMAT_VERSION_LABELS || !is_label_table((int)id));
        r_table *t = known ? &r->tables[id] : &scratch;
        if (known && t->present)
            return footer_error(err, "table listed twice", (int)id);
        memset(t, 0, sizeof *t);
        t->present = true;
        t->rows = cur_uvarint(&c);
        if (c.bad || t->rows > UINT32_MAX - 2)
            return footer_error(err, "bad row count", (int)id);
        int rc = parse_columns(&c, t, known ? (int)id : 0, r->version, err);
        if (rc == 0)
            rc = parse_groups(&c, r, t, known ? (int)id : 0, err);
        if (!known)
            table_free(&scratch);
        if (rc != 0)
            return -1;
    }
    if (c.p != c.end)
        return footer_error(err, "trailing bytes after the last table", 0);
    for (int id = 1; id <= BLOCK_TABLE_REQUIRED_MAX; id++) {
        if (!r->tables[id].present)
            return strata_error_set(err, STRATA_DATA_LOSS, "block: footer lacks table %s",
                                    block_table_name(id));
    }
    if (r->tables[BLOCK_TABLE_ROLLUP_SERIES].present !=
        r->tables[BLOCK_TABLE_ROLLUP_STACKS].present)
        return strata_error_set(err, STRATA_DATA_LOSS,
                                "block: footer has only one of the two rollup tables");
    for (int id = BLOCK_TABLE_LABEL_SETS;
         r->version >= BLOCK_FORMAT_VERSION_LABELS && id <= BLOCK_TABLE_SERIES_LABEL_SETS; id++) {
        if (!r->tables[id].present)
            return strata_error_set(err, STRATA_DATA_LOSS,
                                    "block: footer of a version %u block lacks table %s",
                                    r->version, block_table_name(id));
    }
    bool origins = r->tables[BLOCK_TABLE_DICTIONARY].present;
    if (r->tables[BLOCK_TABLE_STACK_ORIGINS].present != origins ||
        r->tables[BLOCK_TABLE_LOCATION_ORIGINS].present != origins)
        return strata_error_set(err, STRATA_DATA_LOSS,
                                "block: footer has some but not all of tables dictionary, "
                                "stack_origins and location_origins");
    if (origins &&
        (r->tables[BLOCK_TABLE_STACK_ORIGINS].rows != r->tables[BLOCK_TABLE_STACKS].rows ||
         r->tables[BLOCK_TABLE_LOCATION_ORIGINS].rows != r->tables[BLOCK_TABLE_LOCATIONS].rows ||
         r->tables[BLOCK_TABLE_DICTIONARY].rows != 1))
        return strata_error_set(err, STRATA_DATA_LOSS,
                                "block: footer: tables stack_origins and location_origins must "
                                "have a row per stack and per location, table dictionary one row");
    const r_table *fo = &r->tables[BLOCK_TABLE_FUNCTION_ORIGINS];
    bool function_count =
        origins &&
        r->tables[BLOCK_TABLE_DICTIONARY].column_of[BLOCK_COL_DICTIONARY_FUNCTION_COUNT] >= 0;
    if (fo->present != function_count)
        return strata_error_set(err, STRATA_DATA_LOSS, "block: footer: table function_origins %s",
                                origins ? "and the dictionary's function_count come together"
                                        : "without tables dictionary, stack_origins and "
                                          "location_origins");
    if (fo->present && fo->rows != r->tables[BLOCK_TABLE_FUNCTIONS].rows)
        return strata_error_set(err, STRATA_DATA_LOSS,
                                "block: footer: table function_origins must have a row per "
                                "function");
    r->tables[BLOCK_TABLE_PROFILES].evictable = true;
    r->tables[BLOCK_TABLE_SAMPLES].evictable = true;
    r->tables[BLOCK_TABLE_ROLLUP_STACKS].evictable = true;
    return 0;
}

/* Checks the trailer at the end of tail (the object's last tail_len bytes). */
static int check_trailer(block_reader *r, const uint8_t *tail, size_t tail_len,
                         uint64_t *footer_len, uint32_t *footer_crc, strata_error *err) {
    const uint8_t *t = tail + tail_len - BLOCK_TRAILER_SIZE;
    if (memcmp(t + 16, BLOCK_MAGIC, BLOCK_MAGIC_LEN) != 0)
        return strata_error_set(err, STRATA_DATA_LOSS,
                                "block: no trailer magic at the end of the %llu-byte object: not a "
                                "Strata block, or truncated",
                                (unsigned long long)r->size);
    uint32_t version = strata_load_u32le(t + 12);
    if (version < BLOCK_FORMAT_VERSION_MIN || version > BLOCK_FORMAT_VERSION)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "block: format version %u is not supported (this build reads "
                                "versions %d to %d); upgrade Strata to read this block",
                                version, BLOCK_FORMAT_VERSION_MIN, BLOCK_FORMAT_VERSION);
    r->version = version;
    *footer_len = strata_load_u64le(t);
    *footer_crc = strata_load_u32le(t + 8);
    if (*footer_len > r->size - BLOCK_HEADER_SIZE - BLOCK_TRAILER_SIZE ||
        *footer_len > MAX_FOOTER_BYTES)
        return strata_error_set(err, STRATA_DATA_LOSS,
                                "block: footer length %llu does not fit in the %llu-byte object "
                                "(truncated?)",
                                (unsigned long long)*footer_len, (unsigned long long)r->size);
    r->footer_start = r->size - BLOCK_TRAILER_SIZE - *footer_len;
    return 0;
}

static int read_footer(block_reader *r, strata_error *err) {
    uint64_t min = BLOCK_HEADER_SIZE + BLOCK_TRAILER_SIZE;
    if (r->size < min)
        return strata_error_set(err, STRATA_DATA_LOSS,
                                "block: object is %llu bytes, smaller than the %llu-byte minimum "
                                "(truncated?)",
                                (unsigned long long)r->size, (unsigned long long)min);
    uint64_t tail = r->options.tail_guess < min ? min : r->options.tail_guess;
    if (tail > r->size)
        tail = r->size;
    if (fetch(r, r->size - tail, tail, 0, err) != 0)
        return -1;
    const strata_buffer *read = &r->io;
    if (r->options.readahead > 0) {
        /* Its pages at the end of the data area (every page of a block read whole) are read
         * ahead: the bytes move to the tail window, not copied (a query keeps them for its next
         * pass, engine.c's readahead_keep, and two copies of each block would halve what fits). */
        r_window *w = &r->windows[READAHEAD_WINDOWS];
        strata_buffer swap = w->bytes;
        w->bytes = r->io;
        r->io = swap;
        strata_buffer_reset(&r->io);
        w->offset = r->size - tail;
        read = &w->bytes;
    }
    uint64_t footer_len = 0;
    uint32_t crc = 0;
    if (check_trailer(r, read->data, read->len, &footer_len, &crc, err) != 0)
        return -1;
    const uint8_t *footer;
    if (footer_len + BLOCK_TRAILER_SIZE <= tail) {
        footer = read->data + (tail - BLOCK_TRAILER_SIZE - footer_len);
    } else {
        if (fetch(r, r->footer_start, footer_len, 0, err) != 0)
            return -1;
        footer = r->io.data;
    }
    if (r->options.verify_checksums && (uint32_t)crc32_z(0, footer, (size_t)footer_len) != crc)
        return strata_error_set(err, STRATA_DATA_LOSS,
                                "block: footer checksum mismatch (the object is corrupt)");
    return parse_footer(r, footer, (size_t)footer_len, err);
}

/* ---- pages ------------------------------------------------------------------------------ */

static void evict_pages(block_reader *r) {
    for (int id = 1; id <= BLOCK_TABLE_MAX; id++) {
        r_table *t = &r->tables[id];
        size_t cells = (size_t)t->n_groups * (size_t)t->n_columns;
        for (size_t i = 0; t->evictable && i < cells; i++) {
            r_decoded *d = t->decoded[i];
            if (d == NULL)
                continue;
            decoded_free(d);
            t->decoded[i] = NULL;
        }
    }
    r->cache_used = 0;
}

size_t block_reader_page_cache_bytes(const block_reader *r) {
    return r->cache_used;
}

void block_reader_drop_page_cache(block_reader *r) {
    evict_pages(r);
}

/* Call only while holding no decoded page pointers. */
static void maybe_evict(block_reader *r) {
    if (r->cache_used > r->options.cache_bytes)
        evict_pages(r);
}

static int inflate_page(block_reader *r, const r_page *pg, int table, int col, uint64_t g,
                        const uint8_t **raw, strata_error *err) {
    if (pg->codec == BLOCK_CODEC_NONE) {
        *raw = r->io.data;
        return 0;
    }
    unsigned long long size = ZSTD_getFrameContentSize(r->io.data, r->io.len);
    if (size != pg->raw_len)
        return data_loss(err, table, col, g, "zstd frame size does not match the page index");
    strata_buffer_reset(&r->raw);
    if (strata_buffer_reserve(&r->raw, (size_t)pg->raw_len + 1) != 0)
        return strata_error_oom(err);
    size_t n =
        ZSTD_decompressDCtx(r->dctx, r->raw.data, (size_t)pg->raw_len, r->io.data, r->io.len);
    if (ZSTD_isError(n) || n != pg->raw_len)
        return data_loss(err, table, col, g, "zstd data is corrupt");
    *raw = r->raw.data;
    return 0;
}

static int decode_page(const r_table *t, int table, int col, uint64_t g, const uint8_t *raw,
                       uint64_t raw_len, r_decoded *d, strata_error *err) {
    uint64_t rows = t->groups[g].rows;
    if (t->encodings[col] == BLOCK_ENC_BYTES) {
        d->offsets = malloc(((size_t)rows + 1) * sizeof *d->offsets);
        d->text = malloc((size_t)raw_len + (size_t)rows + 1);
        if (d->offsets == NULL || d->text == NULL)
            return strata_error_oom(err);
        d->bytes = (size_t)(rows * 4 + raw_len + rows);
        if (!decode_strings(raw, raw + raw_len, rows, d))
            return data_loss(err, table, col, g, "malformed string values");
        return 0;
    }
    d->values = malloc((size_t)rows * sizeof *d->values);
    if (d->values == NULL)
        return strata_error_oom(err);
    d->bytes = (size_t)rows * sizeof *d->values;
    if (!decode_numbers(raw, raw + raw_len, t->encodings[col], rows, d->values, &d->max_value))
        return data_loss(err, table, col, g, "malformed varints or wrong value count");
    if (col != BLOCK_COL_SAMPLES_STACK ||
        (table != BLOCK_TABLE_SAMPLES && table != BLOCK_TABLE_ROLLUP_STACKS))
        return 0;
    if (d->max_value > UINT32_MAX) /* load_row_pages checks them against the stack count */
        return data_loss(err, table, col, g, "stack id out of range");
    d->narrow = malloc((size_t)rows * sizeof *d->narrow + 1);
    if (d->narrow == NULL)
        return strata_error_oom(err);
    for (uint64_t i = 0; i < rows; i++)
        d->narrow[i] = (uint32_t)d->values[i];
    free(d->values);
    d->values = NULL;
    d->bytes = (size_t)rows * sizeof *d->narrow;
    return 0;
}

/* Fetches page g of schema column scol of a table, checks it and inflates it: its raw (encoded)
 * bytes in *raw, valid until the reader's next fetch. */
static int load_raw_page(block_reader *r, int table, int scol, uint64_t g, const uint8_t **raw,
                         strata_error *err) {
    r_table *t = &r->tables[table];
    const r_page *pg = &t->pages[(size_t)g * (size_t)t->n_columns + (size_t)t->column_of[scol]];
    if (fetch(r, pg->offset, pg->stored_len, table, err) != 0)
        return -1;
    if (r->options.verify_checksums && (uint32_t)crc32_z(0, r->io.data, r->io.len) != pg->crc)
        return data_loss(err, table, scol, g, "checksum mismatch (the stored page is corrupt)");
    return inflate_page(r, pg, table, scol, g, raw, err);
}

/* Loads (or finds cached) page g of schema column scol of a table. */
static int load_page(block_reader *r, int table, int scol, uint64_t g, const r_decoded **out,
                     strata_error *err) {
    r_table *t = &r->tables[table];
    int col = t->column_of[scol];
    size_t cell = (size_t)g * (size_t)t->n_columns + (size_t)col;
    if (t->decoded[cell] != NULL) {
        *out = t->decoded[cell];
        return 0;
    }
    const uint8_t *raw = NULL;
    if (load_raw_page(r, table, scol, g, &raw, err) != 0)
        return -1;
    r_decoded *d = calloc(1, sizeof *d);
    if (d == NULL)
        return strata_error_oom(err);
    if (decode_page(t, table, scol, g, raw, t->pages[cell].raw_len, d, err) != 0) {
        decoded_free(d);
        return -1;
    }
    t->decoded[cell] = d;
    if (t->evictable)
        r->cache_used += d->bytes;
    else
        r->pinned_used += d->bytes;
    *out = d;
    return 0;
}

/* The page (row group) holding row; row must be < rows. */
static uint64_t group_of(const r_table *t, uint64_t row) {
    uint64_t lo = 0, hi = t->n_groups;
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (t->groups[mid].first_row <= row)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* Decodes a whole numeric column into a malloc'd array of rows values (for small tables). */
static int read_column(block_reader *r, int table, int scol, uint64_t **out, strata_error *err) {
    const r_table *t = &r->tables[table];
    uint64_t *values = malloc(((size_t)t->rows + 1) * sizeof *values);
    if (values == NULL)
        return strata_error_oom(err);
    for (uint64_t g = 0; g < t->n_groups; g++) {
        const r_decoded *d;
        if (load_page(r, table, scol, g, &d, err) != 0) {
            free(values);
            return -1;
        }
        memcpy(values + t->groups[g].first_row, d->values,
               (size_t)t->groups[g].rows * sizeof *values);
    }
    *out = values;
    return 0;
}

/* Frees one decoded page of a table whose contents were copied out, if it is loaded. */
static void drop_page(block_reader *r, r_table *t, size_t cell) {
    r_decoded *d = t->decoded[cell];
    if (d == NULL)
        return;
    if (!t->evictable)
        r->pinned_used -= d->bytes;
    decoded_free(d);
    t->decoded[cell] = NULL;
}

/* Frees the decoded pages of a table whose contents were copied out. */
static void drop_pages(block_reader *r, int table) {
    r_table *t = &r->tables[table];
    size_t cells = (size_t)t->n_groups * (size_t)t->n_columns;
    for (size_t i = 0; i < cells; i++)
        drop_page(r, t, i);
}

int block_reader_string(block_reader *r, uint32_t id, const char **out, size_t *len,
                        strata_error *err) {
    const r_table *t = &r->tables[BLOCK_TABLE_STRINGS];
    if (id >= t->rows)
        return strata_error_set(err, STRATA_DATA_LOSS,
                                "block: string id %u is out of range (%llu strings)", id,
                                (unsigned long long)t->rows);
    uint64_t g = group_of(t, id);
    const r_decoded *d;
    if (load_page(r, BLOCK_TABLE_STRINGS, BLOCK_COL_STRINGS_VALUE, g, &d, err) != 0)
        return -1;
    uint64_t i = id - t->groups[g].first_row;
    *out = d->text + d->offsets[i];
    if (len != NULL)
        *len = d->offsets[i + 1] - d->offsets[i] - 1;
    return 0;
}

/* ---- series ----------------------------------------------------------------------------- */

static int series_string(block_reader *r, uint64_t id, const char *what, const char **out,
                         strata_error *err) {
    if (id >= r->tables[BLOCK_TABLE_STRINGS].rows)
        return strata_error_set(err, STRATA_DATA_LOSS,
                                "block: table %s: string id %llu is out "
                                "of range",
                                what, (unsigned long long)id);
    return block_reader_string(r, (uint32_t)id, out, NULL, err);
}

static int build_series(block_reader *r, size_t i, uint64_t *const cols[BLOCK_COL_SERIES_COUNT],
                        const uint64_t *label_names, const uint64_t *label_values,
                        strata_error *err) {
    r_series *s = &r->series[i];
    const char *parts[5];
    for (int p = 0; p < 5; p++) {
        if (series_string(r, cols[p][i], "series", &parts[p], err) != 0)
            return -1;
    }
    s->type.name = strdup(parts[0]);
    s->type.sample_type = strdup(parts[1]);
    s->type.sample_unit = strdup(parts[2]);
    s->type.period_type = strdup(parts[3]);
    s->type.period_unit = strdup(parts[4]);
    s->type.delta = cols[BLOCK_COL_SERIES_DELTA][i] != 0;
    if (s->type.name == NULL || s->type.sample_type == NULL || s->type.sample_unit == NULL ||
        s->type.period_type == NULL || s->type.period_unit == NULL)
        return strata_error_oom(err);
    s->type_as_previous = i > 0 && profile_type_equal(&s->type, &r->series[i - 1].type);
    uint64_t first = cols[BLOCK_COL_SERIES_FIRST_LABEL][i];
    uint64_t count = cols[BLOCK_COL_SERIES_LABEL_COUNT][i];
    uint64_t n_labels = r->tables[BLOCK_TABLE_SERIES_LABELS].rows;
    if (first > n_labels || count > n_labels - first)
        return strata_error_set(err, STRATA_DATA_LOSS,
                                "block: table series, row %zu: labels out of range", i);
    for (uint64_t l = first; l < first + count; l++) {
        const char *name, *value;
        if (series_string(r, label_names[l], "series_labels", &name, err) != 0 ||
            series_string(r, label_values[l], "series_labels", &value, err) != 0 ||
            label_set_add(&s->labels, name, strlen(name), value, strlen(value), err) != 0)
            return -1;
    }
    return 0;
}

static void free_columns(uint64_t **cols, int n) {
    for (int i = 0; i < n; i++)
        free(cols[i]);
}

static int load_series(block_reader *r, strata_error *err) {
    uint64_t *cols[BLOCK_COL_SERIES_COUNT] = {0};
    uint64_t *lcols[2] = {0};
    uint64_t n = r->tables[BLOCK_TABLE_SERIES].rows;
    r->series = calloc((size_t)n + 1, sizeof *r->series);
    if (r->series == NULL)
        return strata_error_oom(err);
    r->n_series = (size_t)n;
    int rc = 0;
    for (int c = 0; c < BLOCK_COL_SERIES_COUNT && rc == 0; c++)
        rc = read_column(r, BLOCK_TABLE_SERIES, c, &cols[c], err);
    for (int c = 0; c < 2 && rc == 0; c++)
        rc = read_column(r, BLOCK_TABLE_SERIES_LABELS, c, &lcols[c], err);
    for (size_t i = 0; i < r->n_series && rc == 0; i++)
        rc = build_series(r, i, cols, lcols[0], lcols[1], err);
    free_columns(cols, BLOCK_COL_SERIES_COUNT);
    free_columns(lcols, 2);
    drop_pages(r, BLOCK_TABLE_SERIES);
    drop_pages(r, BLOCK_TABLE_SERIES_LABELS);
    return rc;
}

static int load_postings(block_reader *r, strata_error *err) {
    uint64_t *cols[BLOCK_COL_POSTINGS_COUNT] = {0};
    uint64_t *series = NULL;
    uint64_t n = r->tables[BLOCK_TABLE_POSTINGS].rows;
    uint64_t n_ps = r->tables[BLOCK_TABLE_POSTING_SERIES].rows;
    r->postings = calloc((size_t)n + 1, sizeof *r->postings);
    r->posting_series = malloc(((size_t)n_ps + 1) * sizeof *r->posting_series);
    if (r->postings == NULL || r->posting_series == NULL)
        return strata_error_oom(err);
    int rc = 0;
    for (int c = 0; c < BLOCK_COL_POSTINGS_COUNT && rc == 0; c++)
        rc = read_column(r, BLOCK_TABLE_POSTINGS, c, &cols[c], err);
    if (rc == 0)
        rc = read_column(r, BLOCK_TABLE_POSTING_SERIES, 0, &series, err);
    for (uint64_t i = 0; i < n && rc == 0; i++) {
        r_posting *p = &r->postings[i];
        p->first = cols[BLOCK_COL_POSTINGS_FIRST][i];
        p->count = cols[BLOCK_COL_POSTINGS_SERIES_COUNT][i];
        if (p->first > n_ps || p->count > n_ps - p->first)
            rc = strata_error_set(err, STRATA_DATA_LOSS,
                                  "block: table postings, row %llu: series range out of bounds",
                                  (unsigned long long)i);
        else if (series_string(r, cols[BLOCK_COL_POSTINGS_NAME][i], "postings", &p->name, err) !=
                     0 ||
                 series_string(r, cols[BLOCK_COL_POSTINGS_VALUE][i], "postings", &p->value, err) !=
                     0)
            rc = -1;
        r->n_postings = (size_t)i + 1;
    }
    for (uint64_t i = 0; i < n_ps && rc == 0; i++) {
        if (series[i] >= r->n_series)
            rc = strata_error_set(err, STRATA_DATA_LOSS,
                                  "block: table posting_series, row %llu: series id out of range",
                                  (unsigned long long)i);
        r->posting_series[i] = (uint32_t)series[i];
    }
    r->n_posting_series = (size_t)n_ps;
    free_columns(cols, BLOCK_COL_POSTINGS_COUNT);
    free(series);
    drop_pages(r, BLOCK_TABLE_POSTINGS);
    drop_pages(r, BLOCK_TABLE_POSTING_SERIES);
    return rc;
}

size_t block_reader_series_count(const block_reader *r) {
    return r->n_series;
}

const label_set *block_reader_series_labels(const block_reader *r, uint32_t id) {
    return id < r->n_series ? &r->series[id].labels : NULL;
}

const profile_type *block_reader_series_type(const block_reader *r, uint32_t id) {
    return id < r->n_series ? &r->series[id].type : NULL;
}

/* Narrows keep[] to series matching one matcher, using the postings of its label name. */
static int apply_matcher(block_reader *r, const label_matcher *m, uint8_t *keep,
                         strata_error *err) {
    uint8_t *hit = calloc(r->n_series + 1, 1), *has = calloc(r->n_series + 1, 1);
    if (hit == NULL || has == NULL) {
        free(hit);
        free(has);
        return strata_error_oom(err);
    }
    for (size_t i = 0; i < r->n_postings; i++) {
        const r_posting *p = &r->postings[i];
        if (strcmp(p->name, m->name) != 0)
            continue;
        bool match = label_matcher_matches(m, p->value);
        for (uint64_t k = p->first; k < p->first + p->count; k++) {
            has[r->posting_series[k]] = 1;
            if (match)
                hit[r->posting_series[k]] = 1;
        }
    }
    bool absent_matches = label_matcher_matches(m, NULL);
    for (size_t s = 0; s < r->n_series; s++) {
        bool ok = hit[s] || (!has[s] && absent_matches);
        keep[s] = keep[s] && ok;
    }
    free(hit);
    free(has);
    return 0;
}

int block_reader_select(block_reader *r, const selector *sel, uint32_t **ids, size_t *n,
                        strata_error *err) {
    *ids = NULL;
    *n = 0;
    uint8_t *keep = malloc(r->n_series + 1);
    if (keep == NULL)
        return strata_error_oom(err);
    /* the type compared once per run of series of one type (five string compares a series were
     * 7 % of a merge over 180 fresh blocks of 100 series) */
    bool type_matches = !sel->has_profile_type;
    for (size_t s = 0; s < r->n_series; s++) {
        if (sel->has_profile_type && (s == 0 || !r->series[s].type_as_previous))
            type_matches = profile_type_equal(&sel->profile_type, &r->series[s].type);
        keep[s] = type_matches;
    }
    for (size_t i = 0; i < sel->n_matchers; i++) {
        if (apply_matcher(r, &sel->matchers[i], keep, err) != 0) {
            free(keep);
            return -1;
        }
    }
    size_t count = 0;
    for (size_t s = 0; s < r->n_series; s++)
        count += keep[s];
    if (count > 0) {
        *ids = malloc(count * sizeof **ids);
        if (*ids == NULL) {
            free(keep);
            return strata_error_oom(err);
        }
        for (size_t s = 0; s < r->n_series; s++) {
            if (keep[s])
                (*ids)[(*n)++] = (uint32_t)s;
        }
    }
    free(keep);
    return 0;
}

/* ---- profiles and samples --------------------------------------------------------------- */

/* True if some id in the sorted list lies in [lo, hi]. */
static bool any_in_range(const uint32_t *ids, size_t n, int64_t lo, int64_t hi) {
    size_t a = 0, b = n;
    while (a < b) {
        size_t mid = a + (b - a) / 2;
        if ((int64_t)ids[mid] < lo)
            a = mid + 1;
        else
            b = mid;
    }
    return a < n && (int64_t)ids[a] <= hi;
}

static bool contains(const uint32_t *ids, size_t n, uint64_t id) {
    return any_in_range(ids, n, (int64_t)id, (int64_t)id);
}

static bool group_may_match(const r_table *t, uint64_t g, const uint32_t *ids, size_t n_ids,
                            int64_t start, int64_t end) {
    const r_page *row = &t->pages[g * (uint64_t)t->n_columns];
    int sc = t->column_of[BLOCK_COL_PROFILES_SERIES], tc = t->column_of[BLOCK_COL_PROFILES_TIME];
    if ((t->flags[tc] & BLOCK_COLUMN_HAS_MINMAX) && (row[tc].max < start || row[tc].min > end))
        return false;
    if (ids != NULL && (t->flags[sc] & BLOCK_COLUMN_HAS_MINMAX) &&
        !any_in_range(ids, n_ids, row[sc].min, row[sc].max))
        return false;
    return true;
}

/* Arrays of profiles handed out are allocated in powers of two, at least 16 entries, so the
 * capacity of an array of n entries from an earlier call is at least this. */
static size_t profile_capacity(size_t n) {
    size_t cap = 16;
    while (cap < n)
        cap *= 2;
    return cap;
}

/* The profiles a visit hands out, grown into an array for block_reader_profiles. */
typedef struct profile_array {
    block_profile **out;
    size_t *n;
    size_t cap; /* a power of two, at least 16, or 0 */
} profile_array;

static int append_profile(void *arg, const block_profile *p, strata_error *err) {
    profile_array *a = arg;
    if (STRATA_ARRAY_RESERVE_OR_OOM(*a->out, a->cap, *a->n + 1, err) != 0)
        return -1;
    (*a->out)[(*a->n)++] = *p;
    return 0;
}

/* The profile columns of page g, loaded, with every row's series id and sample range checked. */
static int load_profile_group(block_reader *r, uint64_t g, const r_decoded **cols,
                              strata_error *err) {
    const r_table *t = &r->tables[BLOCK_TABLE_PROFILES];
    for (int c = 0; c < BLOCK_COL_PROFILES_COUNT; c++) {
        if (load_page(r, BLOCK_TABLE_PROFILES, c, g, &cols[c], err) != 0)
            return -1;
    }
    uint64_t n_samples = r->tables[BLOCK_TABLE_SAMPLES].rows;
    if (cols[BLOCK_COL_PROFILES_SERIES]->max_value >= r->n_series ||
        cols[BLOCK_COL_PROFILES_SAMPLE_COUNT]->max_value > UINT32_MAX)
        return data_loss(err, BLOCK_TABLE_PROFILES, -1, g,
                         "series id or sample range out of bounds");
    const uint64_t *first = cols[BLOCK_COL_PROFILES_FIRST_SAMPLE]->values;
    const uint64_t *count = cols[BLOCK_COL_PROFILES_SAMPLE_COUNT]->values;
    for (uint64_t i = 0; i < t->groups[g].rows; i++)
        if (first[i] > n_samples || count[i] > n_samples - first[i])
            return data_loss(err, BLOCK_TABLE_PROFILES, -1, g,
                             "series id or sample range out of bounds");
    return 0;
}

/* Calls fn for each selected profile of page g, whose columns load_profile_group checked. */
static int visit_profile_group(block_reader *r, uint64_t g, const r_decoded **cols,
                               const uint32_t *ids, size_t n_ids, int64_t start, int64_t end,
                               block_profile_fn fn, void *arg, strata_error *err) {
    const r_table *t = &r->tables[BLOCK_TABLE_PROFILES];
    uint64_t last_series = UINT64_MAX; /* profiles come in series order: decide once per run */
    bool last_selected = false;
    for (uint64_t i = 0; i < t->groups[g].rows; i++) {
        block_profile p;
        uint64_t series = cols[BLOCK_COL_PROFILES_SERIES]->values[i];
        p.series_id = (uint32_t)series;
        p.time_ns = strata_u64_as_i64(cols[BLOCK_COL_PROFILES_TIME]->values[i]);
        if (ids != NULL && series != last_series) {
            last_selected = contains(ids, n_ids, series);
            last_series = series;
        }
        if ((ids != NULL && !last_selected) || p.time_ns < start || p.time_ns > end)
            continue;
        p.duration_ns = strata_u64_as_i64(cols[BLOCK_COL_PROFILES_DURATION]->values[i]);
        p.period = strata_u64_as_i64(cols[BLOCK_COL_PROFILES_PERIOD]->values[i]);
        p.total = strata_u64_as_i64(cols[BLOCK_COL_PROFILES_TOTAL]->values[i]);
        p.first_sample = cols[BLOCK_COL_PROFILES_FIRST_SAMPLE]->values[i];
        p.sample_count = (uint32_t)cols[BLOCK_COL_PROFILES_SAMPLE_COUNT]->values[i];
        if (fn(arg, &p, err) != 0)
            return -1;
    }
    return 0;
}

static int compare_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* The selected series ids sorted (NULL when every series is selected). */
static int sorted_ids(const uint32_t *series_ids, size_t n_series, uint32_t **out,
                      strata_error *err) {
    *out = NULL;
    if (series_ids == NULL)
        return 0;
    if ((*out = malloc((n_series + 1) * sizeof **out)) == NULL)
        return strata_error_oom(err);
    memcpy(*out, series_ids, n_series * sizeof **out);
    qsort(*out, n_series, sizeof **out, compare_u32);
    return 0;
}

/* Rows of the profile pages that may hold selected profiles. */
static uint64_t rows_that_may_match(const r_table *t, const uint32_t *ids, size_t n_ids,
                                    int64_t start, int64_t end) {
    uint64_t rows = 0;
    for (uint64_t g = 0; g < t->n_groups; g++)
        if (group_may_match(t, g, ids, n_ids, start, end))
            rows += t->groups[g].rows;
    return rows;
}

/* Calls fn for the selected profiles of every page that may hold some, in page order. */
static int visit_groups(block_reader *r, const uint32_t *ids, size_t n_ids, int64_t start,
                        int64_t end, block_profile_fn fn, void *arg, strata_error *err) {
    const r_table *t = &r->tables[BLOCK_TABLE_PROFILES];
    int rc = 0;
    for (uint64_t g = 0; g < t->n_groups && rc == 0; g++) {
        const r_decoded *cols[BLOCK_COL_PROFILES_COUNT];
        maybe_evict(r);
        if (group_may_match(t, g, ids, n_ids, start, end) &&
            (rc = load_profile_group(r, g, cols, err)) == 0)
            rc = visit_profile_group(r, g, cols, ids, n_ids, start, end, fn, arg, err);
    }
    return rc;
}

int block_reader_visit_profiles(block_reader *r, const uint32_t *series_ids, size_t n_series,
                                int64_t start_ns, int64_t end_ns, block_profile_fn fn, void *arg,
                                strata_error *err) {
    if (series_ids != NULL && n_series == 0)
        return 0;
    uint32_t *ids;
    if (sorted_ids(series_ids, n_series, &ids, err) != 0)
        return -1;
    const r_table *t = &r->tables[BLOCK_TABLE_PROFILES];
    /* Every page is loaded and checked before the first call, so a damaged block hands out
     * nothing (a query leaves it out whole instead of counting part of it). */
    int rc = 0;
    for (uint64_t g = 0; g < t->n_groups && rc == 0; g++) {
        const r_decoded *cols[BLOCK_COL_PROFILES_COUNT];
        if (group_may_match(t, g, ids, n_series, start_ns, end_ns))
            rc = load_profile_group(r, g, cols, err);
    }
    if (rc == 0)
        rc = visit_groups(r, ids, n_series, start_ns, end_ns, fn, arg, err);
    free(ids);
    return rc;
}

int block_reader_profiles(block_reader *r, const uint32_t *series_ids, size_t n_series,
                          int64_t start_ns, int64_t end_ns, block_profile **out, size_t *n,
                          strata_error *err) {
    if (series_ids != NULL && n_series == 0)
        return 0;
    uint32_t *ids;
    if (sorted_ids(series_ids, n_series, &ids, err) != 0)
        return -1;
    const r_table *t = &r->tables[BLOCK_TABLE_PROFILES];
    /* Room for every row of the pages that may match, at once: a range query selects hundreds
     * of thousands of profiles, and growing the array by doubling copied and faulted them in
     * again and again. */
    profile_array a = {out, n, *out == NULL ? 0 : profile_capacity(*n)};
    uint64_t bound = *n + rows_that_may_match(t, ids, n_series, start_ns, end_ns);
    int rc = 0;
    if (bound > a.cap && bound <= SIZE_MAX / 2 / sizeof **out) {
        size_t want = profile_capacity((size_t)bound);
        block_profile *grown = strata_array_resize(*out, want, sizeof *grown);
        if (grown == NULL)
            rc = strata_error_oom(err);
        else {
            *out = grown;
            a.cap = want;
        }
    }
    bool was_empty = *n == 0;
    if (rc == 0)
        rc = visit_groups(r, ids, n_series, start_ns, end_ns, append_profile, &a, err);
    if (was_empty && *n == 0) { /* as before the reservation: nothing selected, nothing held */
        free(*out);
        *out = NULL;
    }
    free(ids);
    return rc;
}

void block_samples_free(block_samples *s) {
    free(s->stacks);
    free(s->values);
    free(s->label_sets);
    memset(s, 0, sizeof *s);
}

static int samples_reserve(block_samples *s, size_t extra, strata_error *err) {
    if (s->len + extra <= s->cap)
        return 0;
    if (s->len + extra < s->len)
        return strata_error_oom(err);
    size_t cap = strata_array_capacity(s->cap, s->len + extra);
    uint32_t *stacks = strata_array_resize(s->stacks, cap, sizeof *stacks);
    if (stacks == NULL)
        return strata_error_oom(err);
    s->stacks = stacks;
    int64_t *values = strata_array_resize(s->values, cap, sizeof *values);
    if (values == NULL)
        return strata_error_oom(err);
    s->values = values;
    if (s->label_sets != NULL) {
        uint32_t *sets = strata_array_resize(s->label_sets, cap, sizeof *sets);
        if (sets == NULL)
            return strata_error_oom(err);
        s->label_sets = sets;
    }
    s->cap = cap;
    return 0;
}

/* Gives out its label_sets array, rows before len holding 0 (no labels). */
static int samples_label_sets(block_samples *s, strata_error *err) {
    if (s->label_sets != NULL)
        return 0;
    s->label_sets = calloc(s->cap ? s->cap : 1, sizeof *s->label_sets);
    return s->label_sets == NULL ? strata_error_oom(err) : 0;
}

/* Loads page g of a (stack, value) table - samples or rollup_stacks, whose columns 0, 1 and 2 are
 * the stack id, the value and (version 2) the label set - and checks its ids; *sets is NULL when
 * the table has no label sets. */
static int load_row_pages(block_reader *r, int table, uint64_t g, const r_decoded **stacks,
                          const r_decoded **values, const r_decoded **sets, strata_error *err) {
    *sets = NULL;
    if (load_page(r, table, BLOCK_COL_SAMPLES_STACK, g, stacks, err) != 0 ||
        load_page(r, table, BLOCK_COL_SAMPLES_VALUE, g, values, err) != 0)
        return -1;
    if (r->tables[table].column_of[BLOCK_COL_SAMPLES_LABEL_SET] >= 0 &&
        load_page(r, table, BLOCK_COL_SAMPLES_LABEL_SET, g, sets, err) != 0)
        return -1;
    if ((*stacks)->max_value > r->tables[BLOCK_TABLE_STACKS].rows)
        return data_loss(err, table, BLOCK_COL_SAMPLES_STACK, g, "stack id out of range");
    if (*sets != NULL && (*sets)->max_value > r->tables[BLOCK_TABLE_LABEL_SETS].rows)
        return data_loss(err, table, BLOCK_COL_SAMPLES_LABEL_SET, g, "label set id out of range");
    return 0;
}

/* Copies rows [from, from + count) of page g of a (stack, value) table into out. */
static int copy_stack_rows(block_reader *r, int table, uint64_t g, uint64_t from, uint64_t count,
                           block_samples *out, strata_error *err) {
    const r_decoded *stacks, *values, *sets;
    if (load_row_pages(r, table, g, &stacks, &values, &sets, err) != 0)
        return -1;
    uint64_t base = from - r->tables[table].groups[g].first_row;
    for (uint64_t i = 0; i < count; i++) {
        out->stacks[out->len + i] = stacks->narrow[base + i];
        out->values[out->len + i] = strata_u64_as_i64(values->values[base + i]);
    }
    if ((sets != NULL && sets->max_value > 0) || out->label_sets != NULL) {
        if (samples_label_sets(out, err) != 0)
            return -1;
        for (uint64_t i = 0; i < count; i++)
            out->label_sets[out->len + i] = sets != NULL ? (uint32_t)sets->values[base + i] : 0;
    }
    out->len += (size_t)count;
    return 0;
}

/* Appends rows [first, first + count) of a (stack, value) table to out, page by page. */
static int read_stack_rows(block_reader *r, int table, uint64_t first, uint64_t count,
                           block_samples *out, strata_error *err) {
    const r_table *t = &r->tables[table];
    if (first > t->rows || count > t->rows - first)
        return strata_error_set(
            err, STRATA_INVALID_ARGUMENT, "block: rows %llu+%llu are outside the %s table",
            (unsigned long long)first, (unsigned long long)count, block_table_name(table));
    if (samples_reserve(out, (size_t)count, err) != 0)
        return -1;
    uint64_t row = first, left = count;
    while (left > 0) {
        maybe_evict(r);
        uint64_t g = group_of(t, row);
        uint64_t in_page = t->groups[g].first_row + t->groups[g].rows - row;
        uint64_t take = left < in_page ? left : in_page;
        if (copy_stack_rows(r, table, g, row, take, out, err) != 0)
            return -1;
        row += take;
        left -= take;
    }
    return 0;
}

/* The pages of rows [first, first + count) of a (stack, value) table, each run to fn. */
static int visit_stack_rows(block_reader *r, int table, uint64_t first, uint64_t count,
                            size_t profile, block_row_fn fn, void *arg, strata_error *err) {
    const r_table *t = &r->tables[table];
    if (first > t->rows || count > t->rows - first)
        return strata_error_set(
            err, STRATA_INVALID_ARGUMENT, "block: rows %llu+%llu are outside the %s table",
            (unsigned long long)first, (unsigned long long)count, block_table_name(table));
    uint64_t row = first, left = count;
    while (left > 0) {
        maybe_evict(r);
        uint64_t g = group_of(t, row);
        uint64_t in_page = t->groups[g].first_row + t->groups[g].rows - row;
        uint64_t take = left < in_page ? left : in_page;
        const r_decoded *stacks, *values, *sets;
        if (load_row_pages(r, table, g, &stacks, &values, &sets, err) != 0)
            return -1;
        uint64_t base = row - t->groups[g].first_row;
        block_row_run run = {stacks->narrow + base, values->values + base,
                             sets != NULL && sets->max_value > 0 ? sets->values + base : NULL,
                             (size_t)take};
        if (fn(arg, profile, &run, err) != 0)
            return -1;
        row += take;
        left -= take;
    }
    return 0;
}

int block_reader_visit_samples(block_reader *r, const block_profile *profiles, size_t n,
                               block_row_fn fn, void *arg, strata_error *err) {
    for (size_t i = 0; i < n; i++) {
        if (visit_stack_rows(r, BLOCK_TABLE_SAMPLES, profiles[i].first_sample,
                             profiles[i].sample_count, i, fn, arg, err) != 0)
            return -1;
    }
    return 0;
}

static int read_profile_samples(block_reader *r, const block_profile *p, block_samples *out,
                                strata_error *err) {
    return read_stack_rows(r, BLOCK_TABLE_SAMPLES, p->first_sample, p->sample_count, out, err);
}

int block_reader_read_samples(block_reader *r, const block_profile *profiles, size_t n,
                              block_samples *out, strata_error *err) {
    for (size_t i = 0; i < n; i++) {
        if (read_profile_samples(r, &profiles[i], out, err) != 0)
            return -1;
    }
    return 0;
}

/* ---- rollups ---------------------------------------------------------------------------- */

bool block_reader_has_rollups(const block_reader *r) {
    return r->tables[BLOCK_TABLE_ROLLUP_SERIES].present;
}

/* Reads the whole rollup_series table (a few bytes per series) and checks every entry. */
static int load_rollups(block_reader *r, strata_error *err) {
    const r_table *t = &r->tables[BLOCK_TABLE_ROLLUP_SERIES];
    uint64_t stack_rows = r->tables[BLOCK_TABLE_ROLLUP_STACKS].rows;
    if (t->rows != r->n_series)
        return data_loss(err, BLOCK_TABLE_ROLLUP_SERIES, -1, 0,
                         "row count differs from the series table's");
    uint64_t *cols[BLOCK_COL_ROLLUP_SERIES_COUNT] = {0};
    int rc = 0;
    for (int c = 0; c < BLOCK_COL_ROLLUP_SERIES_COUNT && rc == 0; c++)
        rc = read_column(r, BLOCK_TABLE_ROLLUP_SERIES, c, &cols[c], err);
    block_rollup_series *rollups = NULL;
    if (rc == 0 && (rollups = malloc((r->n_series + 1) * sizeof *rollups)) == NULL)
        rc = strata_error_oom(err);
    for (size_t i = 0; rc == 0 && i < r->n_series; i++) {
        uint64_t profiles = cols[BLOCK_COL_ROLLUP_SERIES_PROFILE_COUNT][i];
        uint64_t first = cols[BLOCK_COL_ROLLUP_SERIES_FIRST_STACK][i];
        uint64_t count = cols[BLOCK_COL_ROLLUP_SERIES_STACK_COUNT][i];
        if (profiles > UINT32_MAX || first > stack_rows || count > stack_rows - first ||
            (profiles < BLOCK_ROLLUP_MIN_PROFILES && count != 0))
            rc = data_loss(err, BLOCK_TABLE_ROLLUP_SERIES, -1, 0,
                           "a series' rollup rows or profile count are out of range");
        else
            rollups[i] = (block_rollup_series){(uint32_t)profiles, first, (uint32_t)count};
    }
    free_columns(cols, BLOCK_COL_ROLLUP_SERIES_COUNT);
    drop_pages(r, BLOCK_TABLE_ROLLUP_SERIES);
    if (rc != 0) {
        free(rollups);
        return -1;
    }
    r->rollups = rollups;
    return 0;
}

int block_reader_series_rollup_info(block_reader *r, uint32_t series_id, block_rollup_series *out,
                                    strata_error *err) {
    if (!block_reader_has_rollups(r))
        return strata_error_set(err, STRATA_FAILED_PRECONDITION,
                                "block: this block has no rollup tables");
    if (series_id >= r->n_series)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "block: series %u out of range",
                                series_id);
    if (r->rollups == NULL && load_rollups(r, err) != 0)
        return -1;
    *out = r->rollups[series_id];
    return 0;
}

int block_reader_series_rollup(block_reader *r, uint32_t series_id, block_samples *out,
                               strata_error *err) {
    block_rollup_series info = {0};
    if (block_reader_series_rollup_info(r, series_id, &info, err) != 0)
        return -1;
    if (info.profile_count < BLOCK_ROLLUP_MIN_PROFILES)
        return strata_error_set(err, STRATA_FAILED_PRECONDITION,
                                "block: series %u has %u profiles, too few for a rollup; read its "
                                "samples",
                                series_id, info.profile_count);
    return read_stack_rows(r, BLOCK_TABLE_ROLLUP_STACKS, info.first_stack, info.stack_count, out,
                           err);
}

int block_reader_visit_series_rollup(block_reader *r, uint32_t series_id, block_row_fn fn,
                                     void *arg, strata_error *err) {
    block_rollup_series info = {0};
    if (block_reader_series_rollup_info(r, series_id, &info, err) != 0)
        return -1;
    if (info.profile_count < BLOCK_ROLLUP_MIN_PROFILES)
        return strata_error_set(err, STRATA_FAILED_PRECONDITION,
                                "block: series %u has %u profiles, too few for a rollup; read its "
                                "samples",
                                series_id, info.profile_count);
    return visit_stack_rows(r, BLOCK_TABLE_ROLLUP_STACKS, info.first_stack, info.stack_count, 0, fn,
                            arg, err);
}

/* ---- sample label sets ------------------------------------------------------------------ */

bool block_reader_has_sample_labels(const block_reader *r) {
    return r->version >= BLOCK_FORMAT_VERSION_LABELS;
}

uint32_t block_reader_format_version(const block_reader *r) {
    return r->version;
}

static void free_label_sets(block_reader *r) {
    for (size_t i = 0; r->label_sets != NULL && i < r->n_label_sets; i++)
        label_set_free(&r->label_sets[i]);
    free(r->label_sets);
    free(r->series_sets);
    free(r->series_set_first);
    free(r->sample_names);
    r->sample_names = NULL;
    r->n_sample_names = 0;
    r->label_sets = NULL;
    r->series_sets = NULL;
    r->series_set_first = NULL;
    r->n_label_sets = 0;
}

/* Builds set i from its rows in label_set_labels: at least one label, names non-empty and
 * strictly ascending (bytewise), values non-empty. */
static int build_label_set(block_reader *r, size_t i, uint64_t first, uint64_t count,
                           const uint64_t *names, const uint64_t *values, strata_error *err) {
    uint64_t rows = r->tables[BLOCK_TABLE_LABEL_SET_LABELS].rows;
    if (count == 0 || first > rows || count > rows - first)
        return strata_error_set(err, STRATA_DATA_LOSS,
                                "block: table label_sets, row %zu: labels out of range", i);
    const char *prev = NULL;
    for (uint64_t l = first; l < first + count; l++) {
        const char *name, *value;
        if (series_string(r, names[l], "label_set_labels", &name, err) != 0 ||
            series_string(r, values[l], "label_set_labels", &value, err) != 0)
            return -1;
        if (name[0] == '\0' || value[0] == '\0' || (prev != NULL && strcmp(prev, name) >= 0))
            return strata_error_set(err, STRATA_DATA_LOSS,
                                    "block: table label_set_labels, row %llu: empty, unsorted or "
                                    "repeated label",
                                    (unsigned long long)l);
        if (label_set_add(&r->label_sets[i], name, strlen(name), value, strlen(value), err) != 0)
            return -1;
        prev = r->label_sets[i].labels[r->label_sets[i].count - 1].name;
    }
    return 0;
}

/* Per series, where its rows of series_label_sets start: rows sorted by (series, label set),
 * strictly, every id in range. */
static int index_series_sets(block_reader *r, const uint64_t *series, const uint64_t *sets,
                             uint64_t n, strata_error *err) {
    for (uint64_t i = 0; i < n; i++) {
        if (series[i] >= r->n_series || sets[i] == 0 || sets[i] > r->n_label_sets ||
            (i > 0 &&
             (series[i] < series[i - 1] || (series[i] == series[i - 1] && sets[i] <= sets[i - 1]))))
            return strata_error_set(err, STRATA_DATA_LOSS,
                                    "block: table series_label_sets, row %llu: ids out of range "
                                    "or out of order",
                                    (unsigned long long)i);
        r->series_sets[i] = (uint32_t)sets[i];
        r->series_set_first[series[i] + 1]++;
    }
    for (size_t s = 0; s < r->n_series; s++)
        r->series_set_first[s + 1] += r->series_set_first[s];
    return 0;
}

static int compare_name_ptrs(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The distinct names of every label set, sorted. */
static int collect_sample_names(block_reader *r, strata_error *err) {
    size_t total = 0;
    for (size_t i = 0; i < r->n_label_sets; i++)
        total += r->label_sets[i].count;
    r->sample_names = malloc((total + 1) * sizeof *r->sample_names);
    if (r->sample_names == NULL)
        return strata_error_oom(err);
    size_t n = 0;
    for (size_t i = 0; i < r->n_label_sets; i++)
        for (size_t l = 0; l < r->label_sets[i].count; l++)
            r->sample_names[n++] = r->label_sets[i].labels[l].name;
    qsort(r->sample_names, n, sizeof *r->sample_names, compare_name_ptrs);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (k == 0 || strcmp(r->sample_names[k - 1], r->sample_names[i]) != 0)
            r->sample_names[k++] = r->sample_names[i];
    r->n_sample_names = k;
    return 0;
}

/* Reads tables 15-17 whole (one row per distinct label set and per series' set) and checks them. */
static int load_label_sets(block_reader *r, strata_error *err) {
    if (r->label_sets_loaded)
        return 0;
    uint64_t n = block_reader_has_sample_labels(r) ? r->tables[BLOCK_TABLE_LABEL_SETS].rows : 0;
    uint64_t n_pairs =
        block_reader_has_sample_labels(r) ? r->tables[BLOCK_TABLE_SERIES_LABEL_SETS].rows : 0;
    r->label_sets = calloc((size_t)n + 1, sizeof *r->label_sets);
    r->series_sets = malloc(((size_t)n_pairs + 1) * sizeof *r->series_sets);
    r->series_set_first = calloc(r->n_series + 1, sizeof *r->series_set_first);
    if (r->label_sets == NULL || r->series_sets == NULL || r->series_set_first == NULL) {
        free_label_sets(r);
        return strata_error_oom(err);
    }
    r->n_label_sets = (size_t)n;
    uint64_t *sets[BLOCK_COL_LABEL_SETS_COUNT] = {0},
             *labels[BLOCK_COL_LABEL_SET_LABELS_COUNT] = {0};
    uint64_t *pairs[BLOCK_COL_SERIES_LABEL_SETS_COUNT] = {0};
    int rc = 0;
    if (block_reader_has_sample_labels(r)) {
        for (int c = 0; c < BLOCK_COL_LABEL_SETS_COUNT && rc == 0; c++)
            rc = read_column(r, BLOCK_TABLE_LABEL_SETS, c, &sets[c], err);
        for (int c = 0; c < BLOCK_COL_LABEL_SET_LABELS_COUNT && rc == 0; c++)
            rc = read_column(r, BLOCK_TABLE_LABEL_SET_LABELS, c, &labels[c], err);
        for (int c = 0; c < BLOCK_COL_SERIES_LABEL_SETS_COUNT && rc == 0; c++)
            rc = read_column(r, BLOCK_TABLE_SERIES_LABEL_SETS, c, &pairs[c], err);
    }
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = build_label_set(r, i, sets[BLOCK_COL_LABEL_SETS_FIRST_LABEL][i],
                             sets[BLOCK_COL_LABEL_SETS_LABEL_COUNT][i],
                             labels[BLOCK_COL_LABEL_SET_LABELS_NAME],
                             labels[BLOCK_COL_LABEL_SET_LABELS_VALUE], err);
    if (rc == 0)
        rc = index_series_sets(r, pairs[BLOCK_COL_SERIES_LABEL_SETS_SERIES],
                               pairs[BLOCK_COL_SERIES_LABEL_SETS_LABEL_SET], n_pairs, err);
    if (rc == 0)
        rc = collect_sample_names(r, err);
    free_columns(sets, BLOCK_COL_LABEL_SETS_COUNT);
    free_columns(labels, BLOCK_COL_LABEL_SET_LABELS_COUNT);
    free_columns(pairs, BLOCK_COL_SERIES_LABEL_SETS_COUNT);
    drop_pages(r, BLOCK_TABLE_LABEL_SETS);
    drop_pages(r, BLOCK_TABLE_LABEL_SET_LABELS);
    drop_pages(r, BLOCK_TABLE_SERIES_LABEL_SETS);
    if (rc != 0) {
        free_label_sets(r); /* a later call retries from scratch */
        return -1;
    }
    r->label_sets_loaded = true;
    return 0;
}

size_t block_reader_label_set_count(const block_reader *r) {
    return block_reader_has_sample_labels(r) ? (size_t)r->tables[BLOCK_TABLE_LABEL_SETS].rows : 0;
}

int block_reader_label_set(block_reader *r, uint32_t id, const label_set **out, strata_error *err) {
    static const label_set empty = LABEL_SET_INIT;
    if (load_label_sets(r, err) != 0)
        return -1;
    if (id > r->n_label_sets)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "block: label set %u is out of range (%zu sets)", id,
                                r->n_label_sets);
    *out = id == 0 ? &empty : &r->label_sets[id - 1];
    return 0;
}

int block_reader_has_sample_label_name(block_reader *r, const char *name, bool *out,
                                       strata_error *err) {
    *out = false;
    if (!block_reader_has_sample_labels(r))
        return 0;
    if (load_label_sets(r, err) != 0)
        return -1;
    *out = bsearch(&name, r->sample_names, r->n_sample_names, sizeof *r->sample_names,
                   compare_name_ptrs) != NULL;
    return 0;
}

int block_reader_series_label_sets(block_reader *r, uint32_t series_id, const uint32_t **ids,
                                   size_t *n, strata_error *err) {
    if (load_label_sets(r, err) != 0)
        return -1;
    if (series_id >= r->n_series)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "block: series %u out of range",
                                series_id);
    *ids = r->series_sets + r->series_set_first[series_id];
    *n = (size_t)(r->series_set_first[series_id + 1] - r->series_set_first[series_id]);
    return 0;
}

/* ---- symbols ---------------------------------------------------------------------------- */

static int symbol_string(block_reader *r, uint64_t id, int table, uint64_t row, const char **out,
                         strata_error *err) {
    if (id >= r->tables[BLOCK_TABLE_STRINGS].rows)
        return strata_error_set(
            err, STRATA_DATA_LOSS, "block: table %s, row %llu: string id %llu out of range",
            block_table_name(table), (unsigned long long)row, (unsigned long long)id);
    return block_reader_string(r, (uint32_t)id, out, NULL, err);
}

static int load_mappings(block_reader *r, strata_error *err) {
    uint64_t *c[BLOCK_COL_MAPPINGS_COUNT] = {0};
    size_t n = (size_t)r->tables[BLOCK_TABLE_MAPPINGS].rows;
    int rc = (r->mappings = calloc(n + 1, sizeof *r->mappings)) == NULL ? strata_error_oom(err) : 0;
    for (int i = 0; i < BLOCK_COL_MAPPINGS_COUNT && rc == 0; i++)
        rc = read_column(r, BLOCK_TABLE_MAPPINGS, i, &c[i], err);
    for (size_t i = 0; i < n && rc == 0; i++) {
        block_mapping *m = &r->mappings[i];
        m->memory_start = c[BLOCK_COL_MAPPINGS_START][i];
        m->memory_limit = c[BLOCK_COL_MAPPINGS_LIMIT][i];
        m->file_offset = c[BLOCK_COL_MAPPINGS_OFFSET][i];
        m->flags = (uint32_t)c[BLOCK_COL_MAPPINGS_FLAGS][i];
        if (symbol_string(r, c[BLOCK_COL_MAPPINGS_FILE][i], BLOCK_TABLE_MAPPINGS, i, &m->file,
                          err) != 0 ||
            symbol_string(r, c[BLOCK_COL_MAPPINGS_BUILD_ID][i], BLOCK_TABLE_MAPPINGS, i,
                          &m->build_id, err) != 0)
            rc = -1;
    }
    r->n_mappings = n;
    free_columns(c, BLOCK_COL_MAPPINGS_COUNT);
    drop_pages(r, BLOCK_TABLE_MAPPINGS);
    return rc;
}

static void drop_group_pages(block_reader *r, int table, uint64_t g);

/* Maps the rows a group is about to fill in one call instead of a fault per page (the arrays are
 * mapped from the kernel and untouched where no group was decoded yet; see common/prefault.h). */
static void prefault_rows(void *array, size_t elem, uint64_t first, uint64_t rows) {
    strata_prefault_write((char *)array + (size_t)first * elem, (size_t)rows * elem);
}

/* Functions, lines and locations, like the stack tree below, are decoded a row group at a time
 * on first use: a merge over blocks cut from one dictionary (block_merge.h) asks a block only for
 * the symbols no earlier block translated, and a querier reader only for those its matching
 * samples use, so most groups of most blocks are never decoded (nor their strings pinned). The
 * arrays are allocated whole and filled where a group is decoded; each group's rows are checked
 * when it is. */
static int decode_function_group(block_reader *r, uint64_t g, strata_error *err) {
    const r_table *t = &r->tables[BLOCK_TABLE_FUNCTIONS];
    const r_decoded *c[BLOCK_COL_FUNCTIONS_COUNT];
    int rc = 0;
    for (int i = 0; i < BLOCK_COL_FUNCTIONS_COUNT && rc == 0; i++)
        rc = load_page(r, BLOCK_TABLE_FUNCTIONS, i, g, &c[i], err);
    uint64_t first = t->groups[g].first_row, rows = t->groups[g].rows;
    if (rc == 0)
        prefault_rows(r->functions, sizeof *r->functions, first, rows);
    for (uint64_t i = 0; rc == 0 && i < rows; i++) {
        block_function *f = &r->functions[first + i];
        f->start_line = strata_u64_as_i64(c[BLOCK_COL_FUNCTIONS_START_LINE]->values[i]);
        if (symbol_string(r, c[BLOCK_COL_FUNCTIONS_NAME]->values[i], BLOCK_TABLE_FUNCTIONS,
                          first + i, &f->name, err) != 0 ||
            symbol_string(r, c[BLOCK_COL_FUNCTIONS_SYSTEM_NAME]->values[i], BLOCK_TABLE_FUNCTIONS,
                          first + i, &f->system_name, err) != 0 ||
            symbol_string(r, c[BLOCK_COL_FUNCTIONS_FILE]->values[i], BLOCK_TABLE_FUNCTIONS,
                          first + i, &f->file, err) != 0)
            rc = -1;
    }
    drop_group_pages(r, BLOCK_TABLE_FUNCTIONS, g);
    if (rc != 0)
        return -1;
    r->function_group_loaded[g] = 1;
    r->function_rows_loaded += rows;
    return 0;
}

static int decode_line_group(block_reader *r, uint64_t g, strata_error *err) {
    const r_table *t = &r->tables[BLOCK_TABLE_LINES];
    const r_decoded *function, *line;
    int rc = load_page(r, BLOCK_TABLE_LINES, BLOCK_COL_LINES_FUNCTION, g, &function, err);
    if (rc == 0)
        rc = load_page(r, BLOCK_TABLE_LINES, BLOCK_COL_LINES_LINE, g, &line, err);
    uint64_t first = t->groups[g].first_row, rows = t->groups[g].rows;
    if (rc == 0)
        prefault_rows(r->lines, sizeof *r->lines, first, rows);
    for (uint64_t i = 0; rc == 0 && i < rows; i++) {
        if (function->values[i] >= r->n_functions) {
            rc = strata_error_set(err, STRATA_DATA_LOSS,
                                  "block: table lines, row %llu: function id out of range",
                                  (unsigned long long)(first + i));
            break;
        }
        r->lines[first + i].function_id = (uint32_t)function->values[i];
        r->lines[first + i].line = strata_u64_as_i64(line->values[i]);
    }
    drop_group_pages(r, BLOCK_TABLE_LINES, g);
    if (rc != 0)
        return -1;
    r->line_group_loaded[g] = 1;
    r->line_rows_loaded += rows;
    return 0;
}

static int decode_location_group(block_reader *r, uint64_t g, strata_error *err) {
    const r_table *t = &r->tables[BLOCK_TABLE_LOCATIONS];
    const r_decoded *c[BLOCK_COL_LOCATIONS_COUNT];
    int rc = 0;
    for (int i = 0; i < BLOCK_COL_LOCATIONS_COUNT && rc == 0; i++)
        rc = load_page(r, BLOCK_TABLE_LOCATIONS, i, g, &c[i], err);
    uint64_t first = t->groups[g].first_row, rows = t->groups[g].rows;
    if (rc == 0)
        prefault_rows(r->locations, sizeof *r->locations, first, rows);
    for (uint64_t i = 0; rc == 0 && i < rows; i++) {
        r_location *l = &r->locations[first + i];
        uint64_t mapping = c[BLOCK_COL_LOCATIONS_MAPPING]->values[i];
        uint64_t line = c[BLOCK_COL_LOCATIONS_FIRST_LINE]->values[i];
        uint64_t count = c[BLOCK_COL_LOCATIONS_LINE_COUNT]->values[i];
        if (mapping > r->n_mappings || line > r->n_lines || count > r->n_lines - line) {
            rc = strata_error_set(err, STRATA_DATA_LOSS,
                                  "block: table locations, row %llu: mapping or lines out of range",
                                  (unsigned long long)(first + i));
            break;
        }
        l->address = c[BLOCK_COL_LOCATIONS_ADDRESS]->values[i];
        l->mapping = (uint32_t)mapping;
        l->is_folded = (c[BLOCK_COL_LOCATIONS_FLAGS]->values[i] & BLOCK_LOCATION_IS_FOLDED) != 0;
        l->first_line = (uint32_t)line;
        l->n_lines = (uint32_t)count;
    }
    drop_group_pages(r, BLOCK_TABLE_LOCATIONS, g);
    if (rc != 0)
        return -1;
    r->location_group_loaded[g] = 1;
    r->location_rows_loaded += rows;
    return 0;
}

/* Makes function id (< n_functions) readable. */
static int ensure_function(block_reader *r, uint32_t id, strata_error *err) {
    uint64_t g = group_of(&r->tables[BLOCK_TABLE_FUNCTIONS], id);
    return r->function_group_loaded[g] ? 0 : decode_function_group(r, g, err);
}

/* Makes lines [first, first + count) readable (they may span groups). */
static int ensure_lines(block_reader *r, uint64_t first, uint64_t count, strata_error *err) {
    if (count == 0)
        return 0;
    const r_table *t = &r->tables[BLOCK_TABLE_LINES];
    for (uint64_t g = group_of(t, first); g < t->n_groups && t->groups[g].first_row < first + count;
         g++)
        if (!r->line_group_loaded[g] && decode_line_group(r, g, err) != 0)
            return -1;
    return 0;
}

static int ensure_location(block_reader *r, uint32_t id, strata_error *err) {
    uint64_t g = group_of(&r->tables[BLOCK_TABLE_LOCATIONS], id);
    return r->location_group_loaded[g] ? 0 : decode_location_group(r, g, err);
}

/* The arrays filled a row group at a time (functions, lines, locations, the stack tree) are
 * allocated whole; when large they are mapped straight from the kernel, so the pages of groups
 * never decoded cost no memory. From malloc they would: glibc raises its mmap threshold (to 32
 * MiB) as large blocks are freed, after which a new array comes from heap pages some earlier one
 * already touched. A merge over a window of fresh blocks decodes only the few groups holding the
 * stacks no earlier block showed it, so most of each reader's arrays stay untouched (measured:
 * the readers of 91 fresh blocks of agent data held 1.5 GiB of RSS after a merge, now 0.95). */
#define LAZY_MAP_BYTES ((size_t)256 << 10)

static void *lazy_array_alloc(size_t bytes) {
    if (bytes < LAZY_MAP_BYTES)
        return malloc(bytes);
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static void lazy_array_free(void *p, size_t bytes) {
    if (p == NULL)
        return;
    if (bytes < LAZY_MAP_BYTES)
        free(p);
    else
        munmap(p, bytes);
}

/* Allocates a lazily decoded table's array (elem bytes per row; *bytes its size) and group
 * flags. rows_ptr is the address of the table's typed array pointer, written through memcpy (not
 * a `void **`, which would access a `T *` as a `void *`: strict aliasing). */
static int lazy_table(block_reader *r, int table, size_t elem, void *rows_ptr, size_t *bytes,
                      uint8_t **loaded, size_t *n, strata_error *err) {
    const r_table *t = &r->tables[table];
    *n = (size_t)t->rows;
    *bytes = (*n + 1) * elem;
    void *rows = lazy_array_alloc(*bytes);
    memcpy(rows_ptr, &rows, sizeof rows);
    *loaded = calloc((size_t)t->n_groups + 1, 1);
    return (rows == NULL || *loaded == NULL) ? strata_error_oom(err) : 0;
}

/* The stack tree is decoded a row group at a time, on first use (ensure_stacks): a merge over
 * blocks cut from one dictionary translates only the stacks no earlier block showed it, which sit
 * at the end of each block's table (stacks are in dictionary order), so most of a fresh block's
 * stack pages are never decoded. The arrays are allocated whole but filled (and so, for large
 * ones, paged in) only where a group is decoded. */
static int load_stacks(block_reader *r, strata_error *err) {
    const r_table *t = &r->tables[BLOCK_TABLE_STACKS];
    size_t n = (size_t)t->rows;
    r->stacks_bytes = (n + 1) * sizeof *r->stack_parent;
    r->stack_parent = lazy_array_alloc(r->stacks_bytes);
    r->stack_location = lazy_array_alloc(r->stacks_bytes);
    r->stack_group_loaded = calloc((size_t)t->n_groups + 1, sizeof *r->stack_group_loaded);
    if (r->stack_parent == NULL || r->stack_location == NULL || r->stack_group_loaded == NULL)
        return strata_error_oom(err);
    r->stack_parent[0] = r->stack_location[0] = 0;
    r->n_stacks = n;
    r->stack_rows_loaded = 0;
    return 0;
}

/* Frees the decoded pages of one row group of a table whose contents were copied out. */
static void drop_group_pages(block_reader *r, int table, uint64_t g) {
    r_table *t = &r->tables[table];
    for (int col = 0; col < t->n_columns; col++)
        drop_page(r, t, (size_t)g * (size_t)t->n_columns + (size_t)col);
}

static int decode_stack_group(block_reader *r, uint64_t g, strata_error *err) {
    const r_table *t = &r->tables[BLOCK_TABLE_STACKS];
    const r_decoded *parents, *locations;
    int rc = load_page(r, BLOCK_TABLE_STACKS, BLOCK_COL_STACKS_PARENT_DELTA, g, &parents, err);
    if (rc == 0)
        rc = load_page(r, BLOCK_TABLE_STACKS, BLOCK_COL_STACKS_LOCATION, g, &locations, err);
    uint64_t first = t->groups[g].first_row, rows = t->groups[g].rows;
    if (rc == 0) {
        prefault_rows(r->stack_parent, sizeof *r->stack_parent, first + 1, rows);
        prefault_rows(r->stack_location, sizeof *r->stack_location, first + 1, rows);
    }
    for (uint64_t i = 0; rc == 0 && i < rows; i++) {
        uint64_t id = first + i + 1, delta = parents->values[i];
        uint64_t location = locations->values[i];
        if (delta == 0 || delta > id || location >= r->n_locations) {
            rc = strata_error_set(err, STRATA_DATA_LOSS,
                                  "block: table stacks, row %llu: parent or location out of range",
                                  (unsigned long long)(first + i));
            break;
        }
        r->stack_parent[id] = (uint32_t)(id - delta);
        r->stack_location[id] = (uint32_t)location;
    }
    drop_group_pages(r, BLOCK_TABLE_STACKS, g);
    if (rc != 0)
        return -1;
    r->stack_group_loaded[g] = 1;
    r->stack_rows_loaded += rows;
    return 0;
}

/* Makes stack id (1..n_stacks) readable from the arrays. */
static inline int ensure_stack(block_reader *r, uint32_t id, strata_error *err) {
    const r_table *t = &r->tables[BLOCK_TABLE_STACKS];
    uint64_t g = group_of(t, (uint64_t)id - 1);
    return r->stack_group_loaded[g] ? 0 : decode_stack_group(r, g, err);
}

static void free_symbols(block_reader *r) {
    free(r->mappings);
    lazy_array_free(r->functions, r->functions_bytes);
    lazy_array_free(r->locations, r->locations_bytes);
    lazy_array_free(r->lines, r->lines_bytes);
    lazy_array_free(r->stack_parent, r->stacks_bytes);
    lazy_array_free(r->stack_location, r->stacks_bytes);
    r->functions_bytes = r->locations_bytes = r->lines_bytes = r->stacks_bytes = 0;
    free(r->stack_group_loaded);
    free(r->function_group_loaded);
    free(r->line_group_loaded);
    free(r->location_group_loaded);
    r->stack_group_loaded = r->function_group_loaded = NULL;
    r->line_group_loaded = r->location_group_loaded = NULL;
    r->stack_rows_loaded = r->function_rows_loaded = 0;
    r->line_rows_loaded = r->location_rows_loaded = 0;
    r->mappings = NULL;
    r->functions = NULL;
    r->locations = NULL;
    r->lines = NULL;
    r->stack_parent = r->stack_location = NULL;
    r->n_mappings = r->n_functions = r->n_locations = r->n_lines = r->n_stacks = 0;
}

static int load_symbols(block_reader *r, strata_error *err) {
    if (r->symbols_loaded)
        return 0;
    if (load_mappings(r, err) != 0 ||
        lazy_table(r, BLOCK_TABLE_FUNCTIONS, sizeof *r->functions, &r->functions,
                   &r->functions_bytes, &r->function_group_loaded, &r->n_functions, err) != 0 ||
        lazy_table(r, BLOCK_TABLE_LINES, sizeof *r->lines, &r->lines, &r->lines_bytes,
                   &r->line_group_loaded, &r->n_lines, err) != 0 ||
        lazy_table(r, BLOCK_TABLE_LOCATIONS, sizeof *r->locations, &r->locations,
                   &r->locations_bytes, &r->location_group_loaded, &r->n_locations, err) != 0 ||
        load_stacks(r, err) != 0) {
        free_symbols(r); /* a later call retries from scratch */
        return -1;
    }
    r->symbols_loaded = true;
    return 0;
}

int block_reader_stack(block_reader *r, uint32_t stack_id, uint32_t *locations, size_t cap,
                       size_t *depth, strata_error *err) {
    if (load_symbols(r, err) != 0)
        return -1;
    if (stack_id > r->n_stacks)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "block: stack id %u is out of range (%zu stacks)", stack_id,
                                r->n_stacks);
    size_t d = 0;
    for (uint32_t id = stack_id; id != 0; id = r->stack_parent[id]) {
        if (ensure_stack(r, id, err) != 0)
            return -1;
        if (d < cap)
            locations[d] = r->stack_location[id];
        d++;
    }
    *depth = d;
    return 0;
}

int block_reader_stack_node(block_reader *r, uint32_t stack_id, uint32_t *parent,
                            uint32_t *location, strata_error *err) {
    if (load_symbols(r, err) != 0)
        return -1;
    if (stack_id == 0 || stack_id > r->n_stacks)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "block: stack id %u has no node (%zu stacks)", stack_id,
                                r->n_stacks);
    if (ensure_stack(r, stack_id, err) != 0)
        return -1;
    *parent = r->stack_parent[stack_id];
    *location = r->stack_location[stack_id];
    return 0;
}

/* The dictionary table's one row: id, stack count, location count and, with function_origins,
 * function count. */
static int load_dictionary_row(block_reader *r, strata_error *err) {
    const r_decoded *d;
    if (load_page(r, BLOCK_TABLE_DICTIONARY, BLOCK_COL_DICTIONARY_ID, 0, &d, err) != 0)
        return -1;
    if (d->offsets[1] - d->offsets[0] - 1 != BLOCK_DICTIONARY_ID_BYTES)
        return data_loss(err, BLOCK_TABLE_DICTIONARY, BLOCK_COL_DICTIONARY_ID, 0,
                         "the id is not 16 bytes");
    memcpy(r->origins.dictionary, d->text, BLOCK_DICTIONARY_ID_BYTES);
    const int cols[3] = {BLOCK_COL_DICTIONARY_STACK_COUNT, BLOCK_COL_DICTIONARY_LOCATION_COUNT,
                         BLOCK_COL_DICTIONARY_FUNCTION_COUNT};
    uint32_t *counts[3] = {&r->origins.dictionary_stacks, &r->origins.dictionary_locations,
                           &r->origins.dictionary_functions};
    int n = r->tables[BLOCK_TABLE_FUNCTION_ORIGINS].present ? 3 : 2;
    for (int c = 0; c < n; c++) {
        if (load_page(r, BLOCK_TABLE_DICTIONARY, cols[c], 0, &d, err) != 0)
            return -1;
        if (d->values[0] > UINT32_MAX - 1)
            return data_loss(err, BLOCK_TABLE_DICTIONARY, cols[c], 0, "count out of range");
        *counts[c] = (uint32_t)d->values[0];
    }
    return 0;
}

/* Reads an origin column into out[first + row] (locations), or appends it to the compact stack
 * origins (out NULL; first = the table's count), checking each against limit and, if increasing,
 * the one before. Straight from each page's varints: a fresh block holds some 800,000 stack
 * origins, and decoding them into 64-bit values first, then copying, was a third of a cold merge's
 * CPU (mostly page faults of the arrays in between). */
static int load_origin_column(block_reader *r, int table, int column, uint32_t limit,
                              bool increasing, uint32_t *out, size_t first, strata_error *err) {
    const r_table *t = &r->tables[table];
    int col = t->column_of[column];
    uint32_t encoding = t->encodings[col];
    uint64_t previous = 0;
    for (uint64_t g = 0; g < t->n_groups; g++) {
        const uint8_t *raw;
        if (load_raw_page(r, table, column, g, &raw, err) != 0)
            return -1;
        const uint8_t *p = raw,
                      *end = raw + t->pages[(size_t)g * (size_t)t->n_columns + (size_t)col].raw_len;
        size_t row = (size_t)t->groups[g].first_row;
        uint64_t running = 0; /* a delta column's sum, per page */
        for (size_t i = 0; i < (size_t)t->groups[g].rows; i++) {
            uint64_t v;
            if (!next_number(&p, end, encoding, &running, &v))
                return data_loss(err, table, column, g, "malformed varints or wrong value count");
            if (v == 0 || v > limit || (increasing && v <= previous))
                return strata_error_set(
                    err, STRATA_DATA_LOSS, "block: table %s, row %zu: origin %llu is %s",
                    block_table_name(table), row + i, (unsigned long long)v,
                    v == 0 || v > limit ? "outside the dictionary" : "not above the previous one");
            if (out != NULL)
                out[first + row + i] = (uint32_t)v;
            else if (block_origin_table_append(&r->stack_origins, (uint32_t)v) != 0)
                return strata_error_oom(err);
            previous = v;
        }
        if (p != end)
            return data_loss(err, table, column, g, "malformed varints or wrong value count");
    }
    return 0;
}

static void free_stack_origins(block_reader *r) {
    block_origin_table_free(&r->stack_origins);
    free(r->location_origin);
    r->location_origin = NULL;
    free(r->function_origin);
    r->function_origin = NULL;
}

static int load_stack_origins(block_reader *r, strata_error *err) {
    size_t n = (size_t)r->tables[BLOCK_TABLE_STACK_ORIGINS].rows;
    size_t nl = (size_t)r->tables[BLOCK_TABLE_LOCATION_ORIGINS].rows;
    bool functions = r->tables[BLOCK_TABLE_FUNCTION_ORIGINS].present;
    size_t nf = functions ? (size_t)r->tables[BLOCK_TABLE_FUNCTION_ORIGINS].rows : 0;
    r->location_origin = malloc((nl + 1) * sizeof *r->location_origin);
    if (functions)
        r->function_origin = malloc((nf + 1) * sizeof *r->function_origin);
    int rc = r->location_origin == NULL || (functions && r->function_origin == NULL)
                 ? strata_error_oom(err)
                 : 0;
    if (rc == 0) /* every row is written below */
        strata_prefault_write(r->location_origin, (nl + 1) * sizeof *r->location_origin);
    if (rc == 0)
        rc = load_dictionary_row(r, err);
    drop_pages(r, BLOCK_TABLE_DICTIONARY);
    if (rc == 0 && block_origin_table_append(&r->stack_origins, 0) != 0) /* the empty stack */
        rc = strata_error_oom(err);
    if (rc == 0)
        rc = load_origin_column(r, BLOCK_TABLE_STACK_ORIGINS, BLOCK_COL_STACK_ORIGINS_ORIGIN,
                                r->origins.dictionary_stacks, true, NULL, 1, err);
    if (rc == 0)
        rc = load_origin_column(r, BLOCK_TABLE_LOCATION_ORIGINS, BLOCK_COL_LOCATION_ORIGINS_ORIGIN,
                                r->origins.dictionary_locations, false, r->location_origin, 0, err);
    if (rc == 0 && functions)
        rc = load_origin_column(r, BLOCK_TABLE_FUNCTION_ORIGINS, BLOCK_COL_FUNCTION_ORIGINS_ORIGIN,
                                r->origins.dictionary_functions, false, r->function_origin, 0, err);
    if (rc != 0) {
        free_stack_origins(r);
        return -1;
    }
    block_origin_table_shrink(&r->stack_origins);
    r->origins.stacks = &r->stack_origins;
    r->origins.n_stacks = n;
    r->origins.location_origin = r->location_origin;
    r->origins.n_locations = nl;
    r->origins.function_origin = r->function_origin;
    r->origins.n_functions = nf;
    return 0;
}

void block_reader_drop_symbols(block_reader *r) {
    free_symbols(r);
    r->symbols_loaded = false;
    if (r->location_origin != NULL) {
        free(r->location_origin);
        r->location_origin = NULL;
        r->origins.location_origin = NULL;
        r->origins.n_locations = 0;
    }
    free(r->function_origin);
    r->function_origin = NULL;
    r->origins.function_origin = NULL;
    r->origins.n_functions = 0;
}

int block_reader_stack_origins(block_reader *r, block_stack_origins *out, strata_error *err) {
    if (!r->origins_loaded && r->tables[BLOCK_TABLE_STACK_ORIGINS].present) {
        if (load_stack_origins(r, err) != 0)
            return -1;
    }
    r->origins_loaded = true;
    *out = r->origins;
    return 0;
}

int block_reader_location(block_reader *r, uint32_t id, block_location *out, strata_error *err) {
    if (load_symbols(r, err) != 0)
        return -1;
    if (id >= r->n_locations)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "block: location id %u is out of range (%zu locations)", id,
                                r->n_locations);
    if (ensure_location(r, id, err) != 0)
        return -1;
    const r_location *l = &r->locations[id];
    if (ensure_lines(r, l->first_line, l->n_lines, err) != 0)
        return -1;
    *out = (block_location){.address = l->address,
                            .has_mapping = l->mapping != 0,
                            .mapping_id = l->mapping != 0 ? l->mapping - 1 : 0,
                            .is_folded = l->is_folded,
                            .lines = r->lines + l->first_line,
                            .n_lines = l->n_lines};
    return 0;
}

int block_reader_function(block_reader *r, uint32_t id, block_function *out, strata_error *err) {
    if (load_symbols(r, err) != 0)
        return -1;
    if (id >= r->n_functions)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "block: function id %u is out of range (%zu functions)", id,
                                r->n_functions);
    if (ensure_function(r, id, err) != 0)
        return -1;
    *out = r->functions[id];
    return 0;
}

int block_reader_mapping(block_reader *r, uint32_t id, block_mapping *out, strata_error *err) {
    if (load_symbols(r, err) != 0)
        return -1;
    if (id >= r->n_mappings)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "block: mapping id %u is out of range (%zu mappings)", id,
                                r->n_mappings);
    *out = r->mappings[id];
    return 0;
}

/* ---- open / close ----------------------------------------------------------------------- */

size_t block_reader_memory_bytes(const block_reader *r) {
    size_t bytes = sizeof *r + r->cache_used + r->pinned_used + r->io.cap + r->raw.cap;
    for (int i = 0; i <= READAHEAD_WINDOWS; i++)
        bytes += r->windows[i].bytes.cap;
    bytes += r->n_mappings * sizeof *r->mappings;
    bytes += r->function_rows_loaded * sizeof *r->functions;
    bytes += r->location_rows_loaded * sizeof *r->locations;
    bytes += r->line_rows_loaded * sizeof *r->lines;
    bytes += (r->n_functions + r->n_locations + r->n_lines) / 512; /* group flags, about */
    bytes += (r->stack_rows_loaded + 1) * 2 * sizeof(uint32_t) + r->n_stacks / 512;
    bytes += block_origin_table_bytes(&r->stack_origins);
    if (r->location_origin != NULL)
        bytes += (r->origins.n_locations + 1) * sizeof *r->location_origin;
    if (r->function_origin != NULL)
        bytes += (r->origins.n_functions + 1) * sizeof *r->function_origin;
    if (r->label_sets_loaded) {
        bytes += r->n_label_sets * sizeof *r->label_sets + (r->n_series + 1) * sizeof(uint64_t);
        bytes += (size_t)r->tables[BLOCK_TABLE_SERIES_LABEL_SETS].rows * sizeof(uint32_t);
        bytes += r->n_sample_names * sizeof *r->sample_names;
        for (size_t i = 0; i < r->n_label_sets; i++)
            for (size_t l = 0; l < r->label_sets[i].count; l++)
                bytes += sizeof(strata_label) + strlen(r->label_sets[i].labels[l].name) +
                         strlen(r->label_sets[i].labels[l].value) + 2;
    }
    return bytes;
}

uint64_t block_reader_bytes_fetched(const block_reader *r) {
    return r->bytes_fetched;
}

uint64_t block_reader_table_bytes_fetched(const block_reader *r, int table_id) {
    if (table_id < 1 || table_id > BLOCK_TABLE_MAX)
        return 0;
    return r->tables[table_id].bytes_fetched;
}

uint64_t block_reader_table_stored_bytes(const block_reader *r, int table_id) {
    if (table_id < 1 || table_id > BLOCK_TABLE_MAX || !r->tables[table_id].present)
        return 0;
    const r_table *t = &r->tables[table_id];
    uint64_t sum = 0;
    for (uint64_t i = 0; i < t->n_groups * (uint64_t)t->n_columns; i++)
        sum += t->pages[i].stored_len;
    return sum;
}

bool block_reader_group_starts_at(const block_reader *r, int table_id, uint64_t row) {
    if (table_id < 1 || table_id > BLOCK_TABLE_MAX)
        return false;
    const r_table *t = &r->tables[table_id];
    for (uint64_t g = 0; t->present && g < t->n_groups; g++)
        if (t->groups[g].first_row == row)
            return true;
    return false;
}

bool block_reader_has_table(const block_reader *r, int table_id) {
    return table_id >= 1 && table_id <= BLOCK_TABLE_MAX && r->tables[table_id].present;
}

uint64_t block_reader_row_count(const block_reader *r, int table_id) {
    if (table_id < 1 || table_id > BLOCK_TABLE_MAX)
        return 0;
    return r->tables[table_id].rows;
}

int block_reader_open(block_fetch_fn fetch_fn, void *ctx, uint64_t object_size,
                      const block_reader_options *options, block_reader **out, strata_error *err) {
    *out = NULL;
    block_reader *r = calloc(1, sizeof *r);
    if (r == NULL)
        return strata_error_oom(err);
    r->fetch = fetch_fn;
    r->ctx = ctx;
    r->size = object_size;
    block_reader_options_default(&r->options);
    if (options != NULL)
        r->options = *options;
    r->dctx = ZSTD_createDCtx();
    if (r->dctx == NULL) {
        block_reader_close(r);
        return strata_error_oom(err);
    }
    if (read_footer(r, err) != 0 || load_series(r, err) != 0 || load_postings(r, err) != 0) {
        block_reader_close(r);
        return -1;
    }
    *out = r;
    return 0;
}

void block_reader_close(block_reader *r) {
    if (r == NULL)
        return;
    for (int id = 0; id <= BLOCK_TABLE_MAX; id++)
        table_free(&r->tables[id]);
    strata_buffer_free(&r->io);
    strata_buffer_free(&r->raw);
    block_reader_drop_readahead(r);
    ZSTD_freeDCtx(r->dctx);
    for (size_t i = 0; r->series != NULL && i < r->n_series; i++) {
        label_set_free(&r->series[i].labels);
        profile_type_free(&r->series[i].type);
    }
    free(r->series);
    free(r->postings);
    free(r->posting_series);
    free(r->rollups);
    free_label_sets(r);
    free_symbols(r);
    free_stack_origins(r);
    free(r);
}
