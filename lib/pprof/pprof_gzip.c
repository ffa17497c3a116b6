/*
 * pprof_gzip.c - gzip for pprof bytes: the inflater every reader of profiles uses (the decoder,
 * the scraper, Pyroscope's ingest), the deflater of the encoder and the agent. See pprof.h.
 *
 * pprof_gzip deflates with a gzip wrapper; pprof_gunzip inflates gzip (several concatenated
 * members allowed, as Go's reader does), refuses trailing bytes that are not another member, and
 * stops with RESOURCE_EXHAUSTED as soon as the output would pass max_bytes, so a small bomb cannot
 * allocate more than the limit.
 *
 * Inflating is the costliest step of ingest after symbol interning, so pprof_gunzip first tries
 * libdeflate (about twice as fast as zlib), which inflates a whole member into room sized up front:
 * the member's ISIZE trailer (the last member's, read from the end of the input) is a hint only,
 * as it is mod 2^32 and attacker-controlled: it is capped by the limit and by deflate's maximum
 * ratio, and the room grows on LIBDEFLATE_INSUFFICIENT_SPACE up to the limit. Anything else
 * (corrupt or truncated data, trailing bytes, output past the limit) is handed to the zlib
 * streaming path from the start, so errors, and the memory a bomb can take, are zlib's.
 */
#define ZLIB_CONST
#include "pprof/pprof.h"

#include <libdeflate.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

bool pprof_is_gzip(const uint8_t *data, size_t len) {
    return len >= 2 && data[0] == 0x1f && data[1] == 0x8b;
}

/* zlib counts in uInt; feeds the next piece of [data, data+len) when the stream has taken the
 * previous one. Returns true once everything has been handed over. */
static bool feed_input(z_stream *zs, const uint8_t *data, size_t len) {
    size_t consumed = (size_t)(zs->next_in - data);
    if (zs->avail_in == 0 && consumed < len) {
        size_t piece = len - consumed;
        zs->avail_in = piece > UINT_MAX ? UINT_MAX : (uInt)piece;
    }
    return consumed + zs->avail_in == len;
}

static uInt output_room(const strata_buffer *b, size_t limit) {
    size_t room = b->cap - b->len;
    if (room > limit)
        room = limit;
    return room > UINT_MAX ? UINT_MAX : (uInt)room;
}

/* libdeflate, as the decoder: one call per profile, about twice zlib's speed at a level. */
struct pprof_gzipper {
    struct libdeflate_compressor *c;
};

int pprof_gzipper_new(int level, pprof_gzipper **out, strata_error *err) {
    *out = NULL;
    if (level < Z_DEFAULT_COMPRESSION || level > Z_BEST_COMPRESSION)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "gzip level %d is out of range (-1 to 9)", level);
    pprof_gzipper *g = calloc(1, sizeof *g);
    if (g == NULL)
        return strata_error_oom(err);
    g->c = libdeflate_alloc_compressor(level == Z_DEFAULT_COMPRESSION ? 6 : level);
    if (g->c == NULL) {
        free(g);
        return strata_error_oom(err);
    }
    *out = g;
    return 0;
}

void pprof_gzipper_free(pprof_gzipper *g) {
    if (g == NULL)
        return;
    libdeflate_free_compressor(g->c);
    free(g);
}

int pprof_gzipper_compress(pprof_gzipper *g, const uint8_t *data, size_t len, strata_buffer *out,
                           strata_error *err) {
    size_t bound = libdeflate_gzip_compress_bound(g->c, len);
    if (bound < len || strata_buffer_reserve(out, bound) != 0)
        return strata_error_oom(err);
    size_t n = libdeflate_gzip_compress(g->c, data, len, out->data + out->len, bound);
    if (n == 0)
        return strata_error_set(err, STRATA_INTERNAL, "gzip compression failed");
    out->len += n;
    return 0;
}

int pprof_gzip(const uint8_t *data, size_t len, int level, strata_buffer *out, strata_error *err) {
    pprof_gzipper *g;
    if (pprof_gzipper_new(level, &g, err) != 0)
        return -1;
    int rc = pprof_gzipper_compress(g, data, len, out, err);
    pprof_gzipper_free(g);
    return rc;
}

typedef struct inflate_state {
    z_stream zs;
    const uint8_t *data;
    size_t len;
    size_t max_bytes;
    size_t produced;
} inflate_state;

/* After a gzip member ends: true if another member follows (and the stream is reset for it). */
static bool next_gzip_member(inflate_state *st) {
    size_t consumed = (size_t)(st->zs.next_in - st->data);
    if (!pprof_is_gzip(st->data + consumed, st->len - consumed))
        return false;
    return inflateReset(&st->zs) == Z_OK;
}

/* Runs inflate once into the free room of out. Returns 1 when the stream is complete, 0 to go on,
 * -1 with err set on failure. */
static int inflate_step(inflate_state *st, strata_buffer *out, strata_error *err) {
    bool all_fed = feed_input(&st->zs, st->data, st->len);
    if (out->len == out->cap && strata_buffer_reserve(out, 1) != 0)
        return strata_error_oom(err);
    size_t allowed = st->max_bytes - st->produced;
    st->zs.next_out = out->data + out->len;
    st->zs.avail_out = output_room(out, allowed < SIZE_MAX ? allowed + 1 : allowed);
    int rc = inflate(&st->zs, Z_NO_FLUSH);
    size_t written = (size_t)(st->zs.next_out - (out->data + out->len));
    out->len += written;
    st->produced += written;
    if (st->produced > st->max_bytes)
        return strata_error_set(err, STRATA_RESOURCE_EXHAUSTED,
                                "gzip data inflates to more than %zu bytes", st->max_bytes);
    switch (rc) {
        case Z_STREAM_END: {
            size_t consumed = (size_t)(st->zs.next_in - st->data);
            if (consumed == st->len)
                return 1;
            if (next_gzip_member(st))
                return 0;
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "%zu unexpected bytes after the end of the gzip stream",
                                    st->len - consumed);
        }
        case Z_OK:
            return 0;
        case Z_BUF_ERROR:
            if (all_fed && st->zs.avail_in == 0)
                return strata_error_set(err, STRATA_INVALID_ARGUMENT, "gzip data is truncated");
            return 0; /* the output was full: the next step grows it */
        case Z_MEM_ERROR:
            return strata_error_oom(err);
        default:
            return strata_error_set(err, STRATA_INVALID_ARGUMENT, "corrupt gzip data: %s",
                                    st->zs.msg != NULL ? st->zs.msg : "unknown zlib error");
    }
}

/* Deflate never expands more than 1032:1. */
#define DEFLATE_MAX_RATIO 1032u

/* The libdeflate path: 1 when every member was inflated into out, 0 to use zlib instead (out is
 * then as it was, though possibly with more capacity). */
static int gunzip_libdeflate(const uint8_t *data, size_t len, size_t max_bytes,
                             strata_buffer *out) {
    if (len < 18)
        return 0; /* shorter than an empty member: let zlib say why */
    struct libdeflate_decompressor *d = libdeflate_alloc_decompressor();
    if (d == NULL)
        return 0;
    size_t start = out->len, produced = 0, at = 0;
    uint32_t isize = (uint32_t)data[len - 4] | (uint32_t)data[len - 3] << 8 |
                     (uint32_t)data[len - 2] << 16 | (uint32_t)data[len - 1] << 24;
    bool ok = true;
    while (ok && at < len) {
        const uint8_t *member = data + at;
        size_t left = len - at, allowed = max_bytes - produced;
        if (!pprof_is_gzip(member, left)) {
            ok = false;
            break;
        }
        size_t bound = left <= SIZE_MAX / DEFLATE_MAX_RATIO ? left * DEFLATE_MAX_RATIO : SIZE_MAX;
        size_t room = isize < bound ? isize : bound;
        if (room > allowed)
            room = allowed;
        for (;;) {
            if (strata_buffer_reserve(out, room + 1) != 0) {
                ok = false;
                break;
            }
            size_t in_used = 0, out_used = 0;
            enum libdeflate_result r = libdeflate_gzip_decompress_ex(
                d, member, left, out->data + out->len, room, &in_used, &out_used);
            if (r == LIBDEFLATE_SUCCESS) {
                out->len += out_used;
                produced += out_used;
                at += in_used;
                break;
            }
            if (r != LIBDEFLATE_INSUFFICIENT_SPACE || room >= allowed || room >= bound) {
                ok = false;
                break;
            }
            size_t grown = room < allowed / 2 ? 2 * room : allowed;
            size_t guess = left < allowed / 4 ? 4 * left : allowed;
            room = grown > guess ? grown : guess;
            if (room > bound)
                room = bound;
        }
    }
    libdeflate_free_decompressor(d);
    if (!ok)
        out->len = start;
    return ok ? 1 : 0;
}

int pprof_gunzip(const uint8_t *data, size_t len, size_t max_bytes, strata_buffer *out,
                 strata_error *err) {
    if (gunzip_libdeflate(data, len, max_bytes, out) == 1)
        return 0;
    inflate_state st;
    memset(&st, 0, sizeof st);
    st.data = data;
    st.len = len;
    st.max_bytes = max_bytes;
    st.zs.next_in = data;
    if (inflateInit2(&st.zs, 15 + 16) != Z_OK)
        return strata_error_oom(err);
    size_t start = out->len;
    size_t guess = len < (SIZE_MAX - 4096) / 4 ? 4 * len + 4096 : len;
    int rc =
        strata_buffer_reserve(out, guess < max_bytes ? guess : max_bytes + (max_bytes < SIZE_MAX));
    if (rc != 0)
        rc = strata_error_oom(err);
    while (rc == 0)
        rc = inflate_step(&st, out, err);
    inflateEnd(&st.zs);
    if (rc < 0) {
        out->len = start;
        return -1;
    }
    return 0;
}
