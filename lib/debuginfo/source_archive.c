/*
 * source_archive.c - finding a file in an uploaded source archive (debuginfo.h).
 *
 * Two layers. archive_stream inflates the compressed bytes (gzip through zlib, zstd through
 * libzstd's streaming API; concatenated members or frames are read on) into a 64 KiB window and
 * hands out exact byte counts from it. walk_tar reads 512-byte tar headers from that stream and
 * skips or keeps each entry's data: nothing but the window, the entry names and the one file
 * asked for is ever held.
 *
 * The tar format (POSIX ustar with the GNU and pax extensions every current tar writes): a header
 * block per entry (name at 0, size in octal at 124, checksum at 148, type at 156, "ustar" at 257,
 * name prefix at 345), the data padded to 512 bytes, and two zero blocks at the end (a stream
 * that simply ends at a header boundary is accepted too, as Go's archive/tar does). Sizes past
 * the octal field use GNU's base-256 form.
 */
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <zstd.h>

#include "debuginfo/debuginfo.h"

#define WINDOW_BYTES (64 * 1024)
#define BLOCK 512
#define MAX_NAME_BYTES (64 * 1024)  /* a GNU long name or pax path */
#define MAX_PAX_BYTES (1024 * 1024) /* one pax extended header */

typedef struct archive_stream {
    bool zstd;
    z_stream z;
    ZSTD_DStream *zs;
    ZSTD_inBuffer in;
    bool started; /* z initialised */
    uint8_t *window;
    size_t win_len, win_pos;
    bool ended; /* no more output */
    uint64_t expanded;
} archive_stream;

static int bad(strata_error *err, const char *why) {
    return strata_error_set(err, STRATA_INVALID_ARGUMENT, "source archive: %s", why);
}

static int stream_open(archive_stream *s, const uint8_t *data, size_t len, strata_error *err) {
    memset(s, 0, sizeof *s);
    bool gzip = len >= 3 && data[0] == 0x1f && data[1] == 0x8b && data[2] == 0x08;
    s->zstd = len >= 4 && data[0] == 0x28 && data[1] == 0xb5 && data[2] == 0x2f && data[3] == 0xfd;
    if (!gzip && !s->zstd)
        return bad(err, "neither gzip nor zstd compressed (a .tar.gz or .tar.zst is expected)");
    if ((s->window = malloc(WINDOW_BYTES)) == NULL)
        return strata_error_oom(err);
    if (s->zstd) {
        if ((s->zs = ZSTD_createDStream()) == NULL || ZSTD_isError(ZSTD_initDStream(s->zs)))
            return strata_error_oom(err);
        s->in = (ZSTD_inBuffer){data, len, 0};
        return 0;
    }
    s->z.next_in = (Bytef *)(uintptr_t)data;
    s->z.avail_in = (uInt)(len > UINT32_MAX ? UINT32_MAX : len);
    if (len > UINT32_MAX)
        return bad(err, "over 4 GiB compressed");
    if (inflateInit2(&s->z, 15 + 16) != Z_OK)
        return strata_error_oom(err);
    s->started = true;
    return 0;
}

static void stream_close(archive_stream *s) {
    if (s->started)
        inflateEnd(&s->z);
    ZSTD_freeDStream(s->zs);
    free(s->window);
}

/* Refills the window; at the end of the input leaves it empty with s->ended set. */
static int stream_fill(archive_stream *s, strata_error *err) {
    s->win_len = s->win_pos = 0;
    while (s->win_len == 0 && !s->ended) {
        if (s->zstd) {
            ZSTD_outBuffer out = {s->window, WINDOW_BYTES, 0};
            size_t rc = ZSTD_decompressStream(s->zs, &out, &s->in);
            if (ZSTD_isError(rc))
                return bad(err, ZSTD_getErrorName(rc));
            s->win_len = out.pos;
            if (out.pos == 0 && s->in.pos == s->in.size)
                s->ended = true; /* (a frame cut short also ends here: the tar walk notices) */
        } else {
            s->z.next_out = s->window;
            s->z.avail_out = WINDOW_BYTES;
            int rc = inflate(&s->z, Z_NO_FLUSH);
            s->win_len = WINDOW_BYTES - s->z.avail_out;
            if (rc == Z_STREAM_END) {
                if (s->z.avail_in == 0)
                    s->ended = true;
                else if (inflateReset(&s->z) != Z_OK) /* another gzip member follows */
                    return bad(err, "cannot read the next gzip member");
            } else if (rc == Z_BUF_ERROR && s->win_len == 0) {
                s->ended = true; /* input exhausted mid-stream: truncated */
            } else if (rc != Z_OK) {
                return bad(err, s->z.msg != NULL ? s->z.msg : "damaged gzip data");
            }
        }
    }
    s->expanded += s->win_len;
    if (s->expanded > SOURCE_ARCHIVE_MAX_EXPANDED_BYTES)
        return bad(err, "expands to more than 8 GiB");
    return 0;
}

/* Copies the next n bytes to dst (NULL: skips them); *got says how many there were. */
static int stream_read(archive_stream *s, uint8_t *dst, uint64_t n, uint64_t *got,
                       strata_error *err) {
    *got = 0;
    while (*got < n) {
        if (s->win_pos == s->win_len) {
            if (s->ended || stream_fill(s, err) != 0)
                return s->ended ? 0 : -1;
            if (s->win_len == 0)
                return 0;
        }
        size_t take = s->win_len - s->win_pos;
        if (take > n - *got)
            take = (size_t)(n - *got);
        if (dst != NULL)
            memcpy(dst + *got, s->window + s->win_pos, take);
        s->win_pos += take;
        *got += take;
    }
    return 0;
}

static int stream_read_exact(archive_stream *s, uint8_t *dst, uint64_t n, strata_error *err) {
    uint64_t got;
    if (stream_read(s, dst, n, &got, err) != 0)
        return -1;
    return got == n ? 0 : bad(err, "truncated");
}

/* ---- tar ---- */

static bool parse_number(const uint8_t *field, size_t len, uint64_t *out) {
    *out = 0;
    if (field[0] & 0x80) { /* GNU base-256: big-endian, first byte's top bit set */
        for (size_t i = 1; i < len; i++) {
            if (*out >> 56)
                return false;
            *out = (*out << 8) | field[i];
        }
        return (field[0] & 0x7f) == 0;
    }
    size_t i = 0;
    while (i < len && (field[i] == ' ' || field[i] == '\0'))
        i++;
    for (; i < len && field[i] >= '0' && field[i] <= '7'; i++) {
        if (*out >> 60)
            return false;
        *out = (*out << 3) | (uint64_t)(field[i] - '0');
    }
    for (; i < len; i++)
        if (field[i] != ' ' && field[i] != '\0')
            return false;
    return true;
}

static bool checksum_ok(const uint8_t *h) {
    uint64_t want;
    if (!parse_number(h + 148, 8, &want))
        return false;
    uint64_t sum = 0;
    for (size_t i = 0; i < BLOCK; i++)
        sum += (i >= 148 && i < 156) ? ' ' : h[i];
    return sum == want;
}

static bool all_zero(const uint8_t *h) {
    for (size_t i = 0; i < BLOCK; i++)
        if (h[i] != 0)
            return false;
    return true;
}

static const char *trim_leading(const char *s) {
    if (s[0] == '/')
        return s + 1;
    if (s[0] == '.' && s[1] == '/')
        return s + 2;
    return s;
}

/* The "path" record of a pax extended header ("<len> path=<value>\n" records), into name. */
static int pax_path(const char *pax, size_t len, char *name, strata_error *err) {
    for (size_t pos = 0; pos < len;) {
        char *end;
        unsigned long rec = strtoul(pax + pos, &end, 10);
        /* the record must hold its own length field and the space after it */
        if (end == pax + pos || *end != ' ' || rec > len - pos ||
            rec < (size_t)(end + 1 - (pax + pos)))
            return bad(err, "damaged pax header");
        const char *kv = end + 1;
        size_t kv_len = (size_t)(pax + pos + rec - kv);
        if (kv_len >= 6 && memcmp(kv, "path=", 5) == 0) {
            size_t n = kv_len - 6; /* without the trailing newline */
            if (n >= MAX_NAME_BYTES)
                return bad(err, "pax path too long");
            memcpy(name, kv + 5, n);
            name[n] = '\0';
        }
        pos += rec;
    }
    return 0;
}

typedef struct tar_walk {
    const char *want; /* NULL: check only */
    size_t max_file_bytes;
    strata_buffer *out;
    size_t files;
} tar_walk;

/* Reads an entry's whole data (a long name or pax header) as a NUL-terminated string. */
static int read_meta(archive_stream *s, uint64_t size, size_t limit, char **text,
                     strata_error *err) {
    if (size >= limit)
        return bad(err, "oversized long name or pax header");
    char *buf = malloc((size_t)size + 1);
    if (buf == NULL)
        return strata_error_oom(err);
    if (stream_read_exact(s, (uint8_t *)buf, size, err) != 0) {
        free(buf);
        return -1;
    }
    buf[size] = '\0';
    *text = buf;
    return 0;
}

/* 1: the wanted file was read into w->out; 0: the archive ended without it; -1: error. */
static int walk_entries(archive_stream *s, tar_walk *w, char *name, strata_error *err) {
    uint8_t h[BLOCK];
    bool have_name = false; /* name holds a long name or pax path for the next entry */
    for (;;) {
        uint64_t got;
        if (stream_read(s, h, BLOCK, &got, err) != 0)
            return -1;
        if (got == 0 || all_zero(h))
            return 0;
        if (got != BLOCK)
            return bad(err, "truncated header");
        if (!checksum_ok(h))
            return bad(err, "a header's checksum does not match (not a tar archive?)");
        uint64_t size;
        if (!parse_number(h + 124, 12, &size))
            return bad(err, "a header's size is not a number");
        char type = (char)h[156];
        uint64_t pad = (BLOCK - size % BLOCK) % BLOCK;
        if (type == 'L' || type == 'x') {
            char *text = NULL;
            if (read_meta(s, size, type == 'L' ? MAX_NAME_BYTES : MAX_PAX_BYTES, &text, err) != 0)
                return -1;
            int rc = 0;
            if (type == 'L') {
                strcpy(name, text);
            } else {
                name[0] = '\0';
                rc = pax_path(text, (size_t)size, name, err);
            }
            free(text);
            if (rc != 0 || stream_read_exact(s, NULL, pad, err) != 0)
                return -1;
            have_name = name[0] != '\0';
            continue;
        }
        if (!have_name) {
            size_t n = 0;
            if (memcmp(h + 257, "ustar", 5) == 0 && h[345] != '\0') {
                n = strnlen((const char *)h + 345, 155);
                memcpy(name, h + 345, n);
                name[n++] = '/';
            }
            size_t m = strnlen((const char *)h, 100);
            memcpy(name + n, h, m);
            name[n + m] = '\0';
        }
        have_name = false;
        bool regular = type == '0' || type == '\0' || type == '7';
        if (regular) {
            w->files++;
            if (w->want != NULL && strcmp(trim_leading(name), w->want) == 0) {
                if (size > w->max_file_bytes)
                    return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                            "source archive: %s has %llu bytes: at most %zu",
                                            w->want, (unsigned long long)size, w->max_file_bytes);
                if (strata_buffer_reserve(w->out, (size_t)size) != 0)
                    return strata_error_oom(err);
                if (stream_read_exact(s, w->out->data + w->out->len, size, err) != 0)
                    return -1;
                w->out->len += (size_t)size;
                return 1;
            }
        }
        if (stream_read_exact(s, NULL, size + pad, err) != 0)
            return -1;
    }
}

static int walk(const uint8_t *data, size_t len, tar_walk *w, strata_error *err) {
    archive_stream s;
    char *name = malloc(MAX_NAME_BYTES + 256 + 1);
    int rc = name == NULL ? strata_error_oom(err) : stream_open(&s, data, len, err);
    if (rc == 0)
        rc = walk_entries(&s, w, name, err);
    if (name != NULL)
        stream_close(&s);
    free(name);
    return rc;
}

int source_archive_check(const uint8_t *data, size_t len, size_t *n_files, strata_error *err) {
    tar_walk w = {.want = NULL};
    if (walk(data, len, &w, err) < 0)
        return -1;
    if (n_files != NULL)
        *n_files = w.files;
    return 0;
}

int source_archive_find(const uint8_t *data, size_t len, const char *filename,
                        size_t max_file_bytes, strata_buffer *out, strata_error *err) {
    const char *want = trim_leading(filename);
    tar_walk w = {.want = want, .max_file_bytes = max_file_bytes, .out = out};
    int rc = walk(data, len, &w, err);
    if (rc < 0)
        return -1;
    if (rc == 0)
        return strata_error_set(err, STRATA_NOT_FOUND, "%.200s is not in the uploaded sources",
                                filename);
    return 0;
}
