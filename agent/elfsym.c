/*
 * elfsym.c - ELF symbol tables for the agent. See elfsym.h.
 */
#include "elfsym.h"

#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/array.h"
#include "common/hash.h"
#include "gopclntab.h"

#define MAX_SYMBOLS 5000000u
#define RELEASE_EVERY_SYMBOLS 4096
#define NAME_READ_FIRST 256      /* bytes read for a name at first; most names are shorter */
#define NAME_READ_MAX (64 << 10) /* longer than this (a C++ template monster): unknown */

/* An open ELF file. */
typedef struct elf_file {
    int fd;
    Elf *elf;
    size_t shstrndx;
} elf_file;

static pthread_once_t libelf_once = PTHREAD_ONCE_INIT;
static void libelf_init(void) {
    (void)elf_version(EV_CURRENT);
}

static int elf_file_open(const char *path, elf_file *f, strata_error *err) {
    pthread_once(&libelf_once, libelf_init);
    f->elf = NULL;
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0)
        return strata_error_set(err, STRATA_NOT_FOUND, "%s: %s", path, strerror(errno));
    f->elf = elf_begin(f->fd, ELF_C_READ_MMAP, NULL);
    if (f->elf == NULL || elf_kind(f->elf) != ELF_K_ELF ||
        elf_getshdrstrndx(f->elf, &f->shstrndx) != 0) {
        if (f->elf != NULL)
            elf_end(f->elf);
        close(f->fd);
        f->fd = -1;
        f->elf = NULL;
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "%s: not an ELF file", path);
    }
    return 0;
}

static void elf_file_close(elf_file *f) {
    if (f->elf != NULL)
        elf_end(f->elf);
    if (f->fd >= 0)
        close(f->fd);
    f->elf = NULL;
    f->fd = -1;
}

/* The section named name (and its header), or NULL. */
static Elf_Scn *find_section(const elf_file *f, const char *name, GElf_Shdr *shdr) {
    Elf_Scn *scn = NULL;
    while ((scn = elf_nextscn(f->elf, scn)) != NULL) {
        if (gelf_getshdr(scn, shdr) == NULL)
            continue;
        const char *n = elf_strptr(f->elf, f->shstrndx, shdr->sh_name);
        if (n != NULL && strcmp(n, name) == 0)
            return scn;
    }
    return NULL;
}

static Elf_Scn *find_section_type(const elf_file *f, Elf64_Word type, GElf_Shdr *shdr) {
    Elf_Scn *scn = NULL;
    while ((scn = elf_nextscn(f->elf, scn)) != NULL)
        if (gelf_getshdr(scn, shdr) != NULL && shdr->sh_type == type)
            return scn;
    return NULL;
}

static void hex_encode(const uint8_t *bytes, size_t n, char *out, size_t out_cap) {
    static const char digits[] = "0123456789abcdef";
    size_t i = 0;
    for (; i < n && 2 * i + 2 < out_cap; i++) {
        out[2 * i] = digits[bytes[i] >> 4];
        out[2 * i + 1] = digits[bytes[i] & 15];
    }
    out[2 * i] = '\0';
}

/* Scans the note sections for a GNU build id (type 3, name "GNU") or a Go build id (type 4,
 * name "Go"); the GNU one wins. */
static void read_build_id(const elf_file *f, char *out) {
    out[0] = '\0';
    bool have_gnu = false;
    Elf_Scn *scn = NULL;
    GElf_Shdr shdr;
    while (!have_gnu && (scn = elf_nextscn(f->elf, scn)) != NULL) {
        if (gelf_getshdr(scn, &shdr) == NULL || shdr.sh_type != SHT_NOTE)
            continue;
        Elf_Data *data = elf_getdata(scn, NULL);
        if (data == NULL)
            continue;
        size_t off = 0, name_off, desc_off;
        GElf_Nhdr nhdr;
        while ((off = gelf_getnote(data, off, &nhdr, &name_off, &desc_off)) > 0) {
            const char *name = (const char *)data->d_buf + name_off;
            const uint8_t *desc = (const uint8_t *)data->d_buf + desc_off;
            if (nhdr.n_type == NT_GNU_BUILD_ID && nhdr.n_namesz == 4 &&
                memcmp(name, "GNU", 4) == 0) {
                hex_encode(desc, nhdr.n_descsz, out, AGENT_BUILD_ID_HEX_MAX + 1);
                have_gnu = true;
                break;
            }
            if (nhdr.n_type == 4 && nhdr.n_namesz == 3 && memcmp(name, "Go", 3) == 0 &&
                out[0] == '\0')
                hex_encode(desc, nhdr.n_descsz, out, AGENT_BUILD_ID_HEX_MAX + 1);
        }
    }
}

int agent_elf_read_build_id(const char *path, char out[AGENT_BUILD_ID_HEX_MAX + 1],
                            strata_error *err) {
    elf_file f;
    if (elf_file_open(path, &f, err) != 0)
        return -1;
    read_build_id(&f, out);
    elf_file_close(&f);
    return 0;
}

static int read_segments(const elf_file *f, agent_elf *e, strata_error *err) {
    size_t n;
    if (elf_getphdrnum(f->elf, &n) != 0)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "bad program headers");
    e->segments = calloc(n ? n : 1, sizeof *e->segments);
    if (e->segments == NULL)
        return strata_error_oom(err);
    for (size_t i = 0; i < n; i++) {
        GElf_Phdr ph;
        if (gelf_getphdr(f->elf, (int)i, &ph) == NULL || ph.p_type != PT_LOAD)
            continue;
        agent_elf_segment *s = &e->segments[e->n_segments++];
        s->offset = ph.p_offset;
        s->vaddr = ph.p_vaddr;
        s->filesz = ph.p_filesz;
    }
    return 0;
}

/* --- symbol table building ------------------------------------------------------------------ */

typedef struct sym_builder {
    agent_elf *e;
    size_t cap;
    strata_error *err;
} sym_builder;

static int builder_grow(sym_builder *b) {
    return STRATA_ARRAY_RESERVE_OR_OOM(b->e->symbols, b->cap, b->e->n_symbols + 1, b->err);
}

/* A symbol whose name stays in the names file, name_offset bytes past names_base. */
static int builder_add(sym_builder *b, uint64_t addr, uint64_t size, uint64_t name_offset) {
    agent_elf *e = b->e;
    if (e->n_symbols >= MAX_SYMBOLS || name_offset >= AGENT_ELF_NAME_COPIED)
        return 0;
    if (builder_grow(b) != 0)
        return -1;
    agent_elf_symbol *s = &e->symbols[e->n_symbols++];
    s->addr = addr;
    s->size = size <= UINT32_MAX ? (uint32_t)size : 0;
    s->name = (uint32_t)name_offset;
    return 0;
}

/* Appends name (len bytes) and a NUL to the names arena; its offset in *at. */
static int append_name(agent_elf *e, const char *name, size_t len, size_t *at, strata_error *err) {
    if (e->names_len + len + 1 >= AGENT_ELF_NAME_COPIED)
        return strata_error_set(err, STRATA_RESOURCE_EXHAUSTED, "symbol names over 2 GB");
    if (STRATA_ARRAY_RESERVE_OR_OOM(e->names, e->names_cap, e->names_len + len + 1, err) != 0)
        return -1;
    memcpy(e->names + e->names_len, name, len);
    e->names[e->names_len + len] = '\0';
    *at = e->names_len;
    e->names_len += len + 1;
    return 0;
}

/* A symbol whose name is copied now (it is not NUL-terminated in the file). */
static int builder_add_copied(sym_builder *b, uint64_t addr, uint64_t size, const char *name,
                              size_t len) {
    agent_elf *e = b->e;
    size_t at = 0;
    if (e->n_symbols >= MAX_SYMBOLS)
        return 0;
    if (builder_grow(b) != 0 || append_name(e, name, len, &at, b->err) != 0)
        return -1;
    agent_elf_symbol *s = &e->symbols[e->n_symbols++];
    s->addr = addr;
    s->size = size <= UINT32_MAX ? (uint32_t)size : 0;
    s->name = (uint32_t)at | AGENT_ELF_NAME_COPIED;
    return 0;
}

/* Makes path, at base, where the names of the symbols added next are read from. */
static int builder_names_file(sym_builder *b, const elf_file *f, const char *path, uint64_t base) {
    agent_elf *e = b->e;
    char *copy = strdup(path);
    if (copy == NULL)
        return strata_error_oom(b->err);
    free(e->names_path);
    e->names_path = copy;
    e->names_base = base;
    struct stat st;
    if (fstat(f->fd, &st) == 0) {
        e->names_dev = (uint64_t)st.st_dev;
        e->names_ino = (uint64_t)st.st_ino;
    }
    return 0;
}

/* The file is mapped read-only (ELF_C_READ_MMAP), so its pages can leave the resident set at any
 * time and fault back in from the page cache. A large C++ binary's .symtab and .strtab are 10 MB
 * (node's): dropping the pages every few thousand symbols keeps them from adding to the peak on
 * top of the table being built. */
static void release_file_pages(const elf_file *f) {
    size_t size = 0;
    char *raw = elf_rawfile(f->elf, &size);
    long page = sysconf(_SC_PAGESIZE);
    if (raw != NULL && page > 0 && (uintptr_t)raw % (uintptr_t)page == 0 && size > 0)
        (void)madvise(raw, size, MADV_DONTNEED);
}

static int add_symbol_table(const elf_file *f, const char *path, Elf_Scn *scn,
                            const GElf_Shdr *shdr, sym_builder *b) {
    Elf_Data *data = elf_getdata(scn, NULL);
    GElf_Shdr strtab;
    Elf_Scn *names = elf_getscn(f->elf, shdr->sh_link);
    if (data == NULL || shdr->sh_entsize == 0 || names == NULL ||
        gelf_getshdr(names, &strtab) == NULL || strtab.sh_type != SHT_STRTAB ||
        (strtab.sh_flags & SHF_COMPRESSED))
        return 0;
    if (builder_names_file(b, f, path, strtab.sh_offset) != 0)
        return -1;
    size_t n = shdr->sh_size / shdr->sh_entsize;
    for (size_t i = 0; i < n; i++) {
        if (i % RELEASE_EVERY_SYMBOLS == RELEASE_EVERY_SYMBOLS - 1)
            release_file_pages(f);
        GElf_Sym sym;
        if (gelf_getsym(data, (int)i, &sym) == NULL)
            continue;
        int type = GELF_ST_TYPE(sym.st_info);
        if ((type != STT_FUNC && type != STT_GNU_IFUNC) || sym.st_value == 0 ||
            sym.st_shndx == SHN_UNDEF)
            continue;
        const char *name = elf_strptr(f->elf, shdr->sh_link, sym.st_name);
        if (name == NULL || name[0] == '\0')
            continue; /* checks the offset too: inside the table, NUL-terminated */
        if (builder_add(b, sym.st_value, sym.st_size, sym.st_name) != 0)
            return -1;
    }
    return 0;
}

/* Go's function names lie in .gopclntab: read from the file later when NUL-terminated there. */
typedef struct go_builder {
    sym_builder *b;
    const char *table;
    size_t table_size;
} go_builder;

static int add_go_func(void *ctx, uint64_t entry, const char *name, size_t name_len) {
    go_builder *g = ctx;
    size_t offset = (size_t)(name - g->table);
    if (name >= g->table && offset < g->table_size && name_len < g->table_size - offset &&
        name[name_len] == '\0' && memchr(name, '\0', name_len) == NULL)
        return builder_add(g->b, entry, 0, offset);
    return builder_add_copied(g->b, entry, 0, name, name_len);
}

static int add_gopclntab(const elf_file *f, const char *path, sym_builder *b) {
    GElf_Shdr shdr, text;
    Elf_Scn *scn = find_section(f, ".gopclntab", &shdr);
    if (scn == NULL || shdr.sh_type == SHT_NOBITS || (shdr.sh_flags & SHF_COMPRESSED))
        return 0;
    Elf_Data *data = elf_getdata(scn, NULL);
    if (data == NULL || data->d_buf == NULL || data->d_size != shdr.sh_size)
        return 0;
    if (builder_names_file(b, f, path, shdr.sh_offset) != 0)
        return -1;
    go_builder g = {b, data->d_buf, data->d_size};
    uint64_t text_start = find_section(f, ".text", &text) != NULL ? text.sh_addr : 0;
    /* A corrupt table leaves what was read so far; it is not fatal for the file. */
    strata_error ignored;
    size_t before = b->e->n_symbols;
    strata_error *saved = b->err;
    b->err = &ignored;
    int rc =
        agent_gopclntab_parse(data->d_buf, data->d_size, text_start, add_go_func, &g, &ignored);
    b->err = saved;
    if (rc != 0 && ignored.code == STRATA_RESOURCE_EXHAUSTED)
        return strata_error_oom(b->err);
    return b->e->n_symbols > before ? 1 : 0;
}

/* Address order; at one address the sized symbol first (it is the one kept). */
#define ADDRESS_BEFORE(x, y) ((x).addr != (y).addr ? (x).addr < (y).addr : (x).size > (y).size)
#define NAME_BEFORE(x, y) ((x).name < (y).name)

/* In-place sorts of the symbol table (glibc's qsort is a merge sort with a temporary copy of the
 * whole array, which for a large library would raise the peak by the table's size again):
 * quicksort on the middle element, insertion sort for short runs, heapsort past a depth bound so
 * the worst case stays O(n log n). A macro gives each order its own inlined comparison: the sort
 * is most of the CPU a new binary costs. */
#define SWAP_SYMBOLS(s, i, j)                                                                      \
    do {                                                                                           \
        agent_elf_symbol t_ = (s)[i];                                                              \
        (s)[i] = (s)[j];                                                                           \
        (s)[j] = t_;                                                                               \
    } while (0)

#define DEFINE_SYMBOL_SORT(NAME, BEFORE)                                                           \
    static void NAME##_sift(agent_elf_symbol *s, size_t root, size_t n) {                          \
        for (size_t child; (child = 2 * root + 1) < n; root = child) {                             \
            if (child + 1 < n && BEFORE(s[child], s[child + 1]))                                   \
                child++;                                                                           \
            if (!BEFORE(s[root], s[child]))                                                        \
                return;                                                                            \
            SWAP_SYMBOLS(s, root, child);                                                          \
        }                                                                                          \
    }                                                                                              \
    static void NAME##_heapsort(agent_elf_symbol *s, size_t n) {                                   \
        for (size_t i = n / 2; i-- > 0;)                                                           \
            NAME##_sift(s, i, n);                                                                  \
        for (size_t end = n; end-- > 1;) {                                                         \
            SWAP_SYMBOLS(s, 0, end);                                                               \
            NAME##_sift(s, 0, end);                                                                \
        }                                                                                          \
    }                                                                                              \
    static void NAME(agent_elf_symbol *s, size_t n, unsigned depth) {                              \
        while (n > 16) {                                                                           \
            if (depth-- == 0) {                                                                    \
                NAME##_heapsort(s, n);                                                             \
                return;                                                                            \
            }                                                                                      \
            agent_elf_symbol pivot = s[n / 2];                                                     \
            size_t i = 0, j = n - 1;                                                               \
            for (;;) {                                                                             \
                while (BEFORE(s[i], pivot))                                                        \
                    i++;                                                                           \
                while (BEFORE(pivot, s[j]))                                                        \
                    j--;                                                                           \
                if (i >= j)                                                                        \
                    break;                                                                         \
                SWAP_SYMBOLS(s, i, j);                                                             \
                i++;                                                                               \
                j--;                                                                               \
            }                                                                                      \
            NAME(s, j + 1, depth); /* [0, j] then (j, n) */                                        \
            s += j + 1;                                                                            \
            n -= j + 1;                                                                            \
        }                                                                                          \
        for (size_t i = 1; i < n; i++)                                                             \
            for (size_t k = i; k > 0 && BEFORE(s[k], s[k - 1]); k--)                               \
                SWAP_SYMBOLS(s, k, k - 1);                                                         \
    }

DEFINE_SYMBOL_SORT(sort_by_address, ADDRESS_BEFORE)
DEFINE_SYMBOL_SORT(sort_by_name, NAME_BEFORE)

static unsigned depth_bound(size_t n) {
    unsigned d = 0;
    while (n >>= 1)
        d++;
    return 2 * d + 2;
}

/* Dedup leaves the copied names of the aliases it dropped in the arena. The kept ones move down
 * in arena order, in place, so no second arena is needed. Names still in the file cost nothing. */
static void compact_names(agent_elf *e) {
    if (e->names_len == 0)
        return;
    sort_by_name(e->symbols, e->n_symbols, depth_bound(e->n_symbols));
    size_t len = 0;
    for (size_t i = 0; i < e->n_symbols; i++) {
        agent_elf_symbol *s = &e->symbols[i];
        if (!(s->name & AGENT_ELF_NAME_COPIED))
            continue;
        const char *name = e->names + (s->name & ~AGENT_ELF_NAME_COPIED);
        size_t n = strlen(name) + 1;
        memmove(e->names + len, name, n);
        s->name = (uint32_t)len | AGENT_ELF_NAME_COPIED;
        len += n;
    }
    e->names_len = len;
    sort_by_address(e->symbols, e->n_symbols, depth_bound(e->n_symbols));
}

static void sort_and_dedup(agent_elf *e) {
    if (e->n_symbols == 0)
        return;
    sort_by_address(e->symbols, e->n_symbols, depth_bound(e->n_symbols));
    size_t out = 1;
    for (size_t i = 1; i < e->n_symbols; i++)
        if (e->symbols[i].addr != e->symbols[out - 1].addr)
            e->symbols[out++] = e->symbols[i];
    bool dropped = out < e->n_symbols;
    e->n_symbols = out;
    if (dropped)
        compact_names(e);
}

/* --- debug files ---------------------------------------------------------------------------- */

static bool file_build_id_matches(const char *path, const char *build_id) {
    char other[AGENT_BUILD_ID_HEX_MAX + 1];
    if (agent_elf_read_build_id(path, other, NULL) != 0)
        return false;
    return build_id[0] == '\0' || other[0] == '\0' || strcmp(other, build_id) == 0;
}

/* Loads .symtab of a debug file into b; 1 if it had symbols, 0 if not, -1 on OOM. */
static int add_debug_file_symbols(const char *path, const char *build_id, sym_builder *b) {
    if (access(path, R_OK) != 0 || !file_build_id_matches(path, build_id))
        return 0;
    elf_file f;
    if (elf_file_open(path, &f, NULL) != 0)
        return 0;
    GElf_Shdr shdr;
    Elf_Scn *scn = find_section_type(&f, SHT_SYMTAB, &shdr);
    int rc = 0;
    if (scn != NULL && shdr.sh_type != SHT_NOBITS) {
        rc = add_symbol_table(&f, path, scn, &shdr, b);
        if (rc == 0)
            rc = b->e->n_symbols > 0 ? 1 : 0;
    }
    elf_file_close(&f);
    return rc;
}

static const char *debuglink_name(const elf_file *f) {
    GElf_Shdr shdr;
    Elf_Scn *scn = find_section(f, ".gnu_debuglink", &shdr);
    if (scn == NULL)
        return NULL;
    Elf_Data *data = elf_getdata(scn, NULL);
    if (data == NULL || data->d_size < 2 || memchr(data->d_buf, 0, data->d_size) == NULL)
        return NULL;
    return data->d_buf;
}

static int try_debuglink(const elf_file *f, const agent_elf_options *o, const char *path,
                         sym_builder *b) {
    const char *link = debuglink_name(f);
    if (link == NULL || strchr(link, '/') != NULL)
        return 0;
    const char *logical = o->logical_path != NULL ? o->logical_path : path;
    const char *slash = strrchr(logical, '/');
    int dir_len = slash != NULL ? (int)(slash - logical) : 0;
    const char *root = o->root != NULL ? o->root : "";
    const char *debug_dir = o->debug_dir != NULL ? o->debug_dir : "/usr/lib/debug";
    char candidate[4096];
    for (int i = 0; i < 3; i++) {
        if (i == 0)
            snprintf(candidate, sizeof candidate, "%s%.*s/%s", root, dir_len, logical, link);
        else if (i == 1)
            snprintf(candidate, sizeof candidate, "%s%.*s/.debug/%s", root, dir_len, logical, link);
        else
            snprintf(candidate, sizeof candidate, "%s%.*s/%s", debug_dir, dir_len, logical, link);
        if (strcmp(candidate, path) == 0)
            continue;
        int rc = add_debug_file_symbols(candidate, b->e->build_id, b);
        if (rc != 0)
            return rc;
    }
    return 0;
}

static int try_debug_files(const elf_file *f, const agent_elf_options *o, const char *path,
                           sym_builder *b) {
    const char *id = b->e->build_id;
    const char *debug_dir = o->debug_dir != NULL ? o->debug_dir : "/usr/lib/debug";
    if (strlen(id) > 2) {
        char candidate[4096];
        snprintf(candidate, sizeof candidate, "%s/.build-id/%.2s/%s.debug", debug_dir, id, id + 2);
        int rc = add_debug_file_symbols(candidate, id, b);
        if (rc != 0)
            return rc;
    }
    return try_debuglink(f, o, path, b);
}

/* --- loading -------------------------------------------------------------------------------- */

/* Fills the symbol table from the first source that has functions (see the header). */
static int load_symbols(const elf_file *f, const agent_elf_options *o, const char *path,
                        agent_elf *e, strata_error *err) {
    sym_builder b = {e, 0, err};
    GElf_Shdr shdr;
    Elf_Scn *scn = find_section_type(f, SHT_SYMTAB, &shdr);
    if (scn != NULL && add_symbol_table(f, path, scn, &shdr, &b) != 0)
        return -1;
    if (e->n_symbols > 0) {
        e->source = AGENT_SYMBOLS_SYMTAB;
        return 0;
    }
    int rc = try_debug_files(f, o, path, &b);
    if (rc != 0) {
        e->source = AGENT_SYMBOLS_DEBUG_FILE;
        return rc < 0 ? -1 : 0;
    }
    if ((rc = add_gopclntab(f, path, &b)) != 0) {
        e->source = AGENT_SYMBOLS_GOPCLNTAB;
        return rc < 0 ? -1 : 0;
    }
    scn = find_section_type(f, SHT_DYNSYM, &shdr);
    if (scn != NULL && add_symbol_table(f, path, scn, &shdr, &b) != 0)
        return -1;
    if (e->n_symbols > 0)
        e->source = AGENT_SYMBOLS_DYNSYM;
    return 0;
}

/* Gives back the growth slack of the symbol arrays. */
static void shrink(agent_elf *e) {
    if (e->n_symbols > 0) {
        agent_elf_symbol *s = realloc(e->symbols, e->n_symbols * sizeof *s);
        if (s != NULL)
            e->symbols = s;
    }
    if (e->names_len > 0) {
        char *n = realloc(e->names, e->names_len);
        if (n != NULL) {
            e->names = n;
            e->names_cap = e->names_len;
        }
    }
}

int agent_elf_load(const char *path, const agent_elf_options *options, agent_elf *out,
                   strata_error *err) {
    memset(out, 0, sizeof *out);
    agent_elf_options o = {0};
    if (options != NULL)
        o = *options;
    elf_file f;
    if (elf_file_open(path, &f, err) != 0)
        return -1;
    read_build_id(&f, out->build_id);
    int rc = read_segments(&f, out, err);
    if (rc == 0)
        rc = load_symbols(&f, &o, path, out, err);
    elf_file_close(&f);
    if (rc != 0) {
        agent_elf_free(out);
        return -1;
    }
    sort_and_dedup(out);
    shrink(out);
    return 0;
}

bool agent_elf_offset_to_vaddr(const agent_elf *e, uint64_t file_offset, uint64_t *vaddr) {
    for (size_t i = 0; i < e->n_segments; i++) {
        const agent_elf_segment *s = &e->segments[i];
        if (file_offset >= s->offset && file_offset < s->offset + s->filesz) {
            *vaddr = file_offset - s->offset + s->vaddr;
            return true;
        }
    }
    return false;
}

/* Opens the names file, checking it is still the file the names were indexed from. */
static bool open_names_file(agent_elf *e) {
    if (e->names_open)
        return true;
    if (e->names_path == NULL)
        return false;
    int fd = open(e->names_path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    struct stat st;
    if (fstat(fd, &st) != 0 ||
        ((e->names_dev != 0 || e->names_ino != 0) &&
         ((uint64_t)st.st_dev != e->names_dev || (uint64_t)st.st_ino != e->names_ino))) {
        close(fd); /* replaced on disk since: its string table is not ours */
        return false;
    }
    e->names_dev = (uint64_t)st.st_dev;
    e->names_ino = (uint64_t)st.st_ino;
    e->names_fd = fd;
    e->names_open = true;
    return true;
}

/* Reads the NUL-terminated name at offset into the arena; its arena offset in *at. */
static bool read_name(agent_elf *e, uint32_t offset, size_t *at) {
    if (!open_names_file(e))
        return false;
    for (size_t want = NAME_READ_FIRST; want <= NAME_READ_MAX; want *= 4) {
        if (e->names_len + want + 1 >= AGENT_ELF_NAME_COPIED ||
            STRATA_ARRAY_RESERVE(e->names, e->names_cap, e->names_len + want + 1) != 0)
            return false;
        char *dst = e->names + e->names_len;
        ssize_t got = pread(e->names_fd, dst, want, (off_t)(e->names_base + offset));
        if (got <= 0)
            return false;
        const char *nul = memchr(dst, '\0', (size_t)got);
        if (nul != NULL) {
            if (nul == dst)
                return false; /* an empty name: the file is not what was indexed */
            *at = e->names_len;
            e->names_len += (size_t)(nul - dst) + 1;
            return true;
        }
        if ((size_t)got < want)
            return false; /* the end of the file, no NUL */
    }
    return false;
}

/* The name of symbol i: copied, read before, or read from the file now. */
static const char *symbol_name(agent_elf *e, size_t i) {
    uint32_t name = e->symbols[i].name;
    if (name & AGENT_ELF_NAME_COPIED)
        return e->names + (name & ~AGENT_ELF_NAME_COPIED);
    if (e->read_names == NULL) {
        e->read_names = calloc(1, sizeof *e->read_names);
        if (e->read_names == NULL || strata_u64_map_init(e->read_names, 64) != 0) {
            free(e->read_names);
            e->read_names = NULL;
            return NULL;
        }
    }
    const uint64_t *known = strata_u64_map_get(e->read_names, (uint64_t)i + 1);
    if (known != NULL)
        return e->names + (*known - 1);
    size_t at;
    if (!read_name(e, name, &at) ||
        strata_u64_map_upsert(e->read_names, (uint64_t)i + 1, (uint64_t)at + 1, NULL) == NULL)
        return NULL;
    return e->names + at;
}

bool agent_elf_names_file_open(const agent_elf *e) {
    return e->names_open;
}

void agent_elf_close_names_file(agent_elf *e) {
    if (e->names_open)
        close(e->names_fd);
    e->names_open = false;
}

bool agent_elf_set_names_path(agent_elf *e, const char *path) {
    char *copy = strdup(path);
    if (copy == NULL)
        return false;
    agent_elf_close_names_file(e);
    free(e->names_path);
    e->names_path = copy;
    e->names_dev = e->names_ino = 0; /* another copy of the same build: its own identity */
    return true;
}

bool agent_elf_names_in_mapped_file(const agent_elf *e) {
    return e->source != AGENT_SYMBOLS_DEBUG_FILE;
}

/* The index of the symbol containing vaddr; false if none. */
static bool symbol_at(const agent_elf *e, uint64_t vaddr, size_t *index) {
    if (e->n_symbols == 0 || vaddr < e->symbols[0].addr)
        return false;
    size_t lo = 0, hi = e->n_symbols;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (e->symbols[mid].addr <= vaddr)
            lo = mid;
        else
            hi = mid;
    }
    const agent_elf_symbol *s = &e->symbols[lo];
    if (s->size != 0 && vaddr >= s->addr + s->size)
        return false;
    if (s->size == 0 && lo + 1 == e->n_symbols && e->source != AGENT_SYMBOLS_GOPCLNTAB)
        return false; /* an unsized last symbol: do not claim the rest of the file */
    *index = lo;
    return true;
}

bool agent_elf_function_start(const agent_elf *e, uint64_t vaddr, uint64_t *start) {
    size_t i;
    if (!symbol_at(e, vaddr, &i))
        return false;
    *start = e->symbols[i].addr;
    return true;
}

const char *agent_elf_lookup(agent_elf *e, uint64_t vaddr, uint64_t *start) {
    size_t i;
    if (!symbol_at(e, vaddr, &i))
        return NULL;
    if (start != NULL)
        *start = e->symbols[i].addr;
    return symbol_name(e, i);
}

size_t agent_elf_bytes(const agent_elf *e) {
    size_t bytes = sizeof *e + e->n_segments * sizeof *e->segments +
                   e->n_symbols * sizeof *e->symbols + e->names_cap;
    if (e->names_path != NULL)
        bytes += strlen(e->names_path) + 1;
    if (e->read_names != NULL)
        bytes += sizeof *e->read_names + (e->read_names->mask + 1) * sizeof(strata_u64_slot);
    return bytes;
}

void agent_elf_free(agent_elf *e) {
    agent_elf_close_names_file(e);
    free(e->segments);
    free(e->symbols);
    free(e->names);
    free(e->names_path);
    if (e->read_names != NULL)
        strata_u64_map_free(e->read_names);
    free(e->read_names);
    memset(e, 0, sizeof *e);
}
