/*
 * ksyms.c - /proc/kallsyms table. See ksyms.h.
 */
#include "ksyms.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/array.h"

/* A symbol further than this above the last one is not attributed to it. */
#define MAX_LAST_SYMBOL_SPAN (1u << 20)
#define KALLSYMS_BUFFER_BYTES (64 * 1024)

static int add_name(agent_ksyms *k, const char *name, size_t len, uint32_t *off,
                    strata_error *err) {
    if (STRATA_ARRAY_RESERVE_OR_OOM(k->names, k->names_cap, k->names_len + len + 1, err) != 0)
        return -1;
    if (k->names_len > UINT32_MAX)
        return strata_error_set(err, STRATA_RESOURCE_EXHAUSTED, "kallsyms names too large");
    *off = (uint32_t)k->names_len;
    memcpy(k->names + k->names_len, name, len);
    k->names[k->names_len + len] = '\0';
    k->names_len += len + 1;
    return 0;
}

static int add_sym(agent_ksyms *k, size_t *cap, uint64_t addr, const char *name, size_t len,
                   strata_error *err) {
    if (STRATA_ARRAY_RESERVE_OR_OOM(k->syms, *cap, k->count + 1, err) != 0)
        return -1;
    agent_ksym *s = &k->syms[k->count];
    s->addr = addr;
    if (add_name(k, name, len, &s->name, err) != 0)
        return -1;
    k->count++;
    return 0;
}

/* Parses "ADDR TYPE NAME[\t[module]]"; returns false for lines that are not text symbols. */
static bool parse_line(const char *line, size_t len, uint64_t *addr, const char **name,
                       size_t *name_len) {
    char *end;
    errno = 0;
    *addr = strtoull(line, &end, 16);
    if (end == line || errno != 0 || (size_t)(end - line) + 3 > len || end[0] != ' ' ||
        end[2] != ' ')
        return false;
    char type = end[1];
    if (type != 't' && type != 'T' && type != 'w' && type != 'W')
        return false;
    *name = end + 3;
    *name_len = strcspn(*name, "\t\n ");
    if ((size_t)(*name - line) + *name_len > len)
        *name_len = len - (size_t)(*name - line);
    return *name_len > 0 && *addr != 0;
}

/* Kernels built with function padding (6.2+, x86) list a "__pfx_NAME" symbol for the 16 bytes
 * of padding before each function: half the text symbols. The padding belongs to the function
 * (call-depth thunks run there), so a "__pfx_NAME" directly followed by NAME is not stored: NAME
 * starts at the padding instead, which halves the table. */
#define PFX "__pfx_"
#define PFX_LEN (sizeof PFX - 1)

typedef struct ksyms_builder {
    agent_ksyms *k;
    size_t cap;
    uint64_t pfx_addr; /* a pending "__pfx_NAME" (0 = none) */
    char pfx_name[128];
} ksyms_builder;

static int builder_add_line(ksyms_builder *b, const char *line, size_t len, strata_error *err) {
    uint64_t addr;
    const char *name;
    size_t name_len;
    if (!parse_line(line, len, &addr, &name, &name_len))
        return 0;
    if (name_len > PFX_LEN && name_len - PFX_LEN < sizeof b->pfx_name &&
        memcmp(name, PFX, PFX_LEN) == 0) {
        b->pfx_addr = addr;
        memcpy(b->pfx_name, name + PFX_LEN, name_len - PFX_LEN);
        b->pfx_name[name_len - PFX_LEN] = '\0';
        return 0;
    }
    if (b->pfx_addr != 0 && b->pfx_addr < addr && strlen(b->pfx_name) == name_len &&
        memcmp(b->pfx_name, name, name_len) == 0)
        addr = b->pfx_addr;
    b->pfx_addr = 0;
    return add_sym(b->k, &b->cap, addr, name, name_len, err);
}

static int cmp_ksym(const void *a, const void *b) {
    const agent_ksym *x = a, *y = b;
    return x->addr < y->addr ? -1 : x->addr > y->addr;
}

int agent_ksyms_parse(const char *text, size_t len, agent_ksyms *out, strata_error *err) {
    memset(out, 0, sizeof *out);
    ksyms_builder b = {.k = out};
    const char *p = text, *end = text + len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t line_len = (size_t)((nl != NULL ? nl : end) - p);
        if (builder_add_line(&b, p, line_len, err) != 0) {
            agent_ksyms_free(out);
            return -1;
        }
        p += line_len + 1;
    }
    if (out->count > 1) /* qsort needs a valid array, even of zero elements */
        qsort(out->syms, out->count, sizeof *out->syms, cmp_ksym);
    return 0;
}

/* Drops the growth slack of both arrays: the table lives as long as the agent. */
static void shrink(agent_ksyms *k) {
    if (k->names_len == 0)
        return;
    char *names = realloc(k->names, k->names_len);
    if (names != NULL) {
        k->names = names;
        k->names_cap = k->names_len;
    }
    agent_ksym *syms = realloc(k->syms, k->count * sizeof *syms);
    if (syms != NULL)
        k->syms = syms;
}

/* Streams the file line by line: kallsyms is about 13 MB, which need not be resident at once.
 * procfs reports 1 KB blocks, so stdio's default buffer would cost 13,000 read calls. */
int agent_ksyms_load(const char *path, agent_ksyms *out, strata_error *err) {
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return strata_error_set(err, STRATA_FAILED_PRECONDITION, "%s: %s", path, strerror(errno));
    char *buffer = malloc(KALLSYMS_BUFFER_BYTES);
    if (buffer != NULL)
        (void)setvbuf(f, buffer, _IOFBF, KALLSYMS_BUFFER_BYTES);
    ksyms_builder b = {.k = out};
    char line[512];
    int rc = 0;
    while (rc == 0 && fgets(line, sizeof line, f) != NULL)
        rc = builder_add_line(&b, line, strlen(line), err);
    fclose(f);
    free(buffer);
    if (rc != 0) {
        agent_ksyms_free(out);
        return -1;
    }
    if (out->count > 1) /* qsort needs a valid array, even of zero elements */
        qsort(out->syms, out->count, sizeof *out->syms, cmp_ksym);
    shrink(out);
    return 0;
}

const char *agent_ksyms_lookup(const agent_ksyms *k, uint64_t addr) {
    if (k->count == 0 || addr < k->syms[0].addr)
        return NULL;
    size_t lo = 0, hi = k->count;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (k->syms[mid].addr <= addr)
            lo = mid;
        else
            hi = mid;
    }
    if (lo == k->count - 1 && addr - k->syms[lo].addr > MAX_LAST_SYMBOL_SPAN)
        return NULL;
    const char *name = k->names + k->syms[lo].name;
    /* Past the end of a text section (BPF programs and trampolines loaded after the table was
     * read lie there) is not inside the end marker. */
    if (strcmp(name, "_etext") == 0 || strcmp(name, "_einittext") == 0)
        return NULL;
    return name;
}

size_t agent_ksyms_bytes(const agent_ksyms *k) {
    return k->count * sizeof *k->syms + k->names_cap;
}

void agent_ksyms_free(agent_ksyms *k) {
    free(k->syms);
    free(k->names);
    memset(k, 0, sizeof *k);
}
