/*
 * gopclntab.c - Go function table reader. See gopclntab.h.
 */
#include "gopclntab.h"

#include <stdbool.h>
#include <string.h>

#include "common/buffer.h"

#define GO_MAX_FUNCS 10000000u

typedef struct pcln {
    const uint8_t *data;
    size_t len;
    unsigned ptr_size;
} pcln;

static bool read_word(const pcln *t, uint64_t off, unsigned size, uint64_t *out) {
    if (off > t->len || size > t->len - off)
        return false;
    *out = size == 8 ? strata_load_u64le(t->data + off) : strata_load_u32le(t->data + off);
    return true;
}

static bool read_ptr(const pcln *t, uint64_t off, uint64_t *out) {
    return read_word(t, off, t->ptr_size, out);
}

/* The NUL-terminated name at off. */
static bool read_name(const pcln *t, uint64_t off, const char **name, size_t *len) {
    if (off >= t->len)
        return false;
    const uint8_t *nul = memchr(t->data + off, 0, t->len - off);
    if (nul == NULL)
        return false;
    *name = (const char *)t->data + off;
    *len = (size_t)(nul - (t->data + off));
    return true;
}

static int corrupt(strata_error *err, const char *what, uint64_t i) {
    return strata_error_set(err, STRATA_INVALID_ARGUMENT, "gopclntab: %s at function %llu", what,
                            (unsigned long long)i);
}

/* Go 1.18+: functab of {entryoff u32, funcoff u32} relative to textStart. */
static int parse_118(const pcln *t, uint64_t text_fallback, agent_gofunc_fn fn, void *ctx,
                     strata_error *err) {
    unsigned ps = t->ptr_size;
    uint64_t nfunc, text, nameoff, pclnoff;
    if (!read_ptr(t, 8, &nfunc) || !read_ptr(t, 8 + 2 * ps, &text) ||
        !read_ptr(t, 8 + 3 * ps, &nameoff) || !read_ptr(t, 8 + 7 * ps, &pclnoff))
        return corrupt(err, "short header", 0);
    if (text == 0)
        text = text_fallback;
    if (nfunc > GO_MAX_FUNCS)
        return corrupt(err, "too many functions", nfunc);
    for (uint64_t i = 0; i < nfunc; i++) {
        uint64_t entry, funcoff, name_rel;
        const char *name;
        size_t name_len;
        if (!read_word(t, pclnoff + i * 8, 4, &entry) ||
            !read_word(t, pclnoff + i * 8 + 4, 4, &funcoff) ||
            !read_word(t, pclnoff + funcoff + 4, 4, &name_rel) ||
            !read_name(t, nameoff + (uint32_t)name_rel, &name, &name_len))
            return corrupt(err, "entry out of range", i);
        if (fn(ctx, text + entry, name, name_len) != 0)
            return -1;
    }
    return 0;
}

/* Go 1.16-1.17: functab of {entry uintptr, funcoff uintptr}. */
static int parse_116(const pcln *t, agent_gofunc_fn fn, void *ctx, strata_error *err) {
    unsigned ps = t->ptr_size;
    uint64_t nfunc, nameoff, pclnoff;
    if (!read_ptr(t, 8, &nfunc) || !read_ptr(t, 8 + 2 * ps, &nameoff) ||
        !read_ptr(t, 8 + 6 * ps, &pclnoff))
        return corrupt(err, "short header", 0);
    if (nfunc > GO_MAX_FUNCS)
        return corrupt(err, "too many functions", nfunc);
    for (uint64_t i = 0; i < nfunc; i++) {
        uint64_t entry, funcoff, name_rel;
        const char *name;
        size_t name_len;
        if (!read_ptr(t, pclnoff + i * 2 * ps, &entry) ||
            !read_ptr(t, pclnoff + i * 2 * ps + ps, &funcoff) ||
            !read_word(t, pclnoff + funcoff + ps, 4, &name_rel) ||
            !read_name(t, nameoff + (uint32_t)name_rel, &name, &name_len))
            return corrupt(err, "entry out of range", i);
        if (fn(ctx, entry, name, name_len) != 0)
            return -1;
    }
    return 0;
}

/* Go 1.2-1.15: functab right after the 8-byte header and nfunc. */
static int parse_12(const pcln *t, agent_gofunc_fn fn, void *ctx, strata_error *err) {
    unsigned ps = t->ptr_size;
    uint64_t nfunc;
    if (!read_ptr(t, 8, &nfunc))
        return corrupt(err, "short header", 0);
    if (nfunc > GO_MAX_FUNCS)
        return corrupt(err, "too many functions", nfunc);
    uint64_t tab = 8 + ps;
    for (uint64_t i = 0; i < nfunc; i++) {
        uint64_t entry, funcoff, name_rel;
        const char *name;
        size_t name_len;
        if (!read_ptr(t, tab + i * 2 * ps, &entry) ||
            !read_ptr(t, tab + i * 2 * ps + ps, &funcoff) ||
            !read_word(t, funcoff + ps, 4, &name_rel) ||
            !read_name(t, (uint32_t)name_rel, &name, &name_len))
            return corrupt(err, "entry out of range", i);
        if (fn(ctx, entry, name, name_len) != 0)
            return -1;
    }
    return 0;
}

int agent_gopclntab_parse(const uint8_t *data, size_t len, uint64_t text_start_fallback,
                          agent_gofunc_fn fn, void *ctx, strata_error *err) {
    if (len < 16)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "gopclntab: too short");
    pcln t = {data, len, data[7]};
    if (data[4] != 0 || data[5] != 0 || (t.ptr_size != 4 && t.ptr_size != 8))
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "gopclntab: bad header");
    uint32_t magic = strata_load_u32le(data);
    switch (magic) {
        case 0xfffffff0u:
        case 0xfffffff1u:
            return parse_118(&t, text_start_fallback, fn, ctx, err);
        case 0xfffffffau:
            return parse_116(&t, fn, ctx, err);
        case 0xfffffffbu:
            return parse_12(&t, fn, ctx, err);
        default:
            return strata_error_set(err, STRATA_INVALID_ARGUMENT, "gopclntab: unknown magic 0x%08x",
                                    magic);
    }
}
