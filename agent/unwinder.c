/*
 * unwinder.c - the tables behind the BPF stack walker. See unwinder.h for the design.
 *
 * Data structures. `tables` is an array of files (one per build id, or per identity for files
 * without one); `by_identity` maps a (device, inode) hash and `by_build_id` a build-id hash to an
 * index + 1 (a hash collision is checked against the entry and treated as a miss). `free_ranges`
 * is the row array's free space, sorted by start and coalesced. `procs` is the processes listed
 * now with the tables each uses, searched linearly: it changes once per process, not per sample.
 */
#include "unwinder.h"

#include <elf.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

#include "cfi.h"
#include "common/array.h"
#include "common/hash.h"
#include "elfsym.h"
#include "symcache.h"

#define MAX_SEGMENTS 8 /* executable PT_LOAD segments kept per file */
#define ROW_BLOCK 64   /* rows per block of the index kept for walking stack copies */
#define BLOCK_CACHE_SIZE 64

typedef struct unwind_table {
    uint64_t dev, ino;      /* the identity it was first read through */
    uint64_t build_id;      /* hash of the hex build id; 0 if the file has none */
    uint32_t first_row;     /* its slice of the row array, while loaded */
    uint32_t n_rows;        /* rows of the file's CFI (0: none) */
    uint32_t users;         /* processes listing it */
    uint64_t last_used;     /* u->clock when last listed */
    uint64_t last_window;   /* u->window when last listed */
    uint64_t failed_window; /* when it could not be read */
    bool loaded;            /* rows are in the array */
    bool failed;            /* could not be read or parsed (retried later) */
    bool parsed;            /* n_rows and the segments are known */
    uint8_t n_segments;
    agent_elf_segment segments[MAX_SEGMENTS];
    /* While loaded: the pc of every ROW_BLOCK-th row, so a stack copy's walk finds a pc's block
     * here and reads that block back in one call instead of binary-searching row by row. */
    uint64_t *block_pcs;
    size_t n_blocks, cap_blocks;
} unwind_table;

typedef struct row_range {
    uint32_t start, len;
} row_range;

typedef struct listed_process {
    uint32_t pid;
    uint32_t n_tables;                     /* entries of the list (with or without a table) */
    uint32_t *tables;                      /* each entry's index into u->tables, or NO_TABLE */
    struct agent_unwind_mapping *mappings; /* the list as BPF has it, for walking stack copies */
} listed_process;

struct agent_unwinder {
    agent_unwinder_options o;
    unwind_table *tables;
    size_t n_tables, cap_tables;
    strata_u64_map by_identity;
    strata_u64_map by_build_id;
    row_range *free_ranges;
    size_t n_free, cap_free;
    listed_process *procs;
    size_t n_procs, cap_procs;
    uint32_t vdso_index; /* index + 1 of the vDSO's table; 0 = not made yet */
    uint64_t clock;
    uint64_t window;
    agent_unwinder_stats stats;
    struct agent_unwind_proc list; /* scratch: the list being built */
    /* Blocks read back for walking stack copies, any block in any slot, the least recently used
     * replaced: the frames of one program fall in few blocks, and a walk over them all must not
     * read any twice (mapped by their first row, two of a walk's blocks could share a slot and
     * push each other out on every walk). Cleared whenever rows are written. */
    struct cached_block {
        uint32_t first_plus1;
        uint64_t used; /* block_clock at its last use */
        struct agent_unwind_row rows[ROW_BLOCK];
    } block_cache[BLOCK_CACHE_SIZE];
    uint64_t block_clock;
};

/* --- the row array's free space ------------------------------------------------------------ */

/* Takes len rows from the front of free range i. */
static void carve(agent_unwinder *u, size_t i, uint32_t len) {
    row_range *r = &u->free_ranges[i];
    r->start += len;
    r->len -= len;
    if (r->len == 0) {
        memmove(r, r + 1, (u->n_free - i - 1) * sizeof *r);
        u->n_free--;
    }
    u->stats.rows_used += len;
}

/* Carves len rows first-fit; false if no free range is long enough. */
static bool rows_alloc(agent_unwinder *u, uint32_t len, uint32_t *start) {
    for (size_t i = 0; i < u->n_free; i++)
        if (u->free_ranges[i].len >= len) {
            *start = u->free_ranges[i].start;
            carve(u, i, len);
            return true;
        }
    return false;
}

/* Carves [start, start + len) out of the free range that begins at start. */
static void rows_take(agent_unwinder *u, uint32_t start, uint32_t len) {
    for (size_t i = 0; i < u->n_free; i++)
        if (u->free_ranges[i].start == start && u->free_ranges[i].len >= len) {
            carve(u, i, len);
            return;
        }
}

/* Returns [start, start + len) to the free list, merging with its neighbours. The list has room
 * for one more range than ranges can exist (reserved at creation), so this cannot fail. */
static void rows_free(agent_unwinder *u, uint32_t start, uint32_t len) {
    size_t i = 0;
    while (i < u->n_free && u->free_ranges[i].start < start)
        i++;
    row_range *f = u->free_ranges;
    bool joins_prev = i > 0 && f[i - 1].start + f[i - 1].len == start;
    bool joins_next = i < u->n_free && start + len == f[i].start;
    if (joins_prev && joins_next) {
        f[i - 1].len += len + f[i].len;
        memmove(&f[i], &f[i + 1], (u->n_free - i - 1) * sizeof *f);
        u->n_free--;
    } else if (joins_prev) {
        f[i - 1].len += len;
    } else if (joins_next) {
        f[i].start = start;
        f[i].len += len;
    } else {
        memmove(&f[i + 1], &f[i], (u->n_free - i) * sizeof *f);
        f[i] = (row_range){start, len};
        u->n_free++;
    }
    u->stats.rows_used -= len;
}

static void drop_block_index(unwind_table *t) {
    free(t->block_pcs);
    t->block_pcs = NULL;
    t->n_blocks = t->cap_blocks = 0;
}

/* Frees the least recently listed table that no process lists and none listed in this window;
 * false if there is none. A table listed this window serves processes that come and go (a
 * compiler started every second): evicting it for a newcomer would have it read again within
 * the second, and the two would take turns. The newcomer is refused instead until tables age. */
static bool evict_one(agent_unwinder *u) {
    unwind_table *victim = NULL;
    for (size_t i = 0; i < u->n_tables; i++) {
        unwind_table *t = &u->tables[i];
        if (t->loaded && t->users == 0 && t->last_window < u->window &&
            (victim == NULL || t->last_used < victim->last_used))
            victim = t;
    }
    if (victim == NULL)
        return false;
    rows_free(u, victim->first_row, victim->n_rows);
    drop_block_index(victim);
    victim->loaded = false;
    u->stats.tables--;
    u->stats.tables_evicted++;
    return true;
}

/* The longest free range (len 0 when the array is full). */
static row_range largest_free(const agent_unwinder *u) {
    row_range best = {0, 0};
    for (size_t i = 0; i < u->n_free; i++)
        if (u->free_ranges[i].len > best.len)
            best = u->free_ranges[i];
    return best;
}

/* --- reading a file -----------------------------------------------------------------------
 * A table is never held here whole: the parser hands its rows on in chunks, which go straight
 * into the BPF array at the start of the longest free range. A table longer than that range is
 * counted to its end, room is made for it (evicting), and it is read a second time. */

typedef struct row_stream {
    agent_unwinder *u;
    unwind_table *t;      /* its block index is built as rows pass */
    uint32_t start, room; /* the range being written */
    size_t written;       /* rows written into it */
    size_t total;         /* rows the table has so far */
} row_stream;

static int stream_chunk(void *ctx, const struct agent_unwind_row *rows, size_t n,
                        strata_error *err) {
    row_stream *st = ctx;
    if (st->written == st->total && st->written + n <= st->room) {
        if (st->u->o.sink.write_rows(st->u->o.sink.ctx, st->start + (uint32_t)st->written, rows,
                                     (uint32_t)n, err) != 0)
            return -1;
        st->written += n;
    }
    unwind_table *t = st->t;
    for (size_t i = (ROW_BLOCK - st->total % ROW_BLOCK) % ROW_BLOCK; i < n; i += ROW_BLOCK) {
        if (STRATA_ARRAY_RESERVE_OR_OOM(t->block_pcs, t->cap_blocks, t->n_blocks + 1, err) != 0)
            return -1;
        t->block_pcs[t->n_blocks++] = rows[i].pc;
    }
    st->total += n;
    return 0;
}

/* Where a table's CFI comes from: a file open at fd, or bytes in memory (the vDSO). */
typedef struct cfi_input {
    int fd;
    const agent_cfi_source *source;
} cfi_input;

static int read_cfi(agent_unwinder *u, const cfi_input *in, row_stream *st, strata_error *err) {
    agent_cfi_counts counts;
    if (in->source != NULL)
        return agent_cfi_stream(in->source, u->o.max_rows, stream_chunk, st, &counts, err);
    return agent_cfi_stream_fd(in->fd, u->o.max_rows, true, stream_chunk, st, &counts, err);
}

/* Reads a table of known size (t->n_rows) into room made for it: evicting, or refusing it when
 * nothing can be evicted (without reading it: a refused table costs nothing until room appears). */
static int store_known_size(agent_unwinder *u, unwind_table *t, const cfi_input *in,
                            strata_error *err) {
    uint32_t start;
    while (!rows_alloc(u, t->n_rows, &start))
        if (!evict_one(u)) {
            u->stats.tables_refused++;
            drop_block_index(t);
            return 0;
        }
    memset(u->block_cache, 0, sizeof u->block_cache);
    row_stream st = {.u = u, .t = t, .start = start, .room = t->n_rows};
    t->n_blocks = 0;
    u->stats.files_read++;
    int rc = read_cfi(u, in, &st, err);
    if (rc == 0 && st.total != t->n_rows)
        rc = strata_error_set(err, STRATA_INVALID_ARGUMENT, "the CFI changed between two reads");
    if (rc != 0) {
        rows_free(u, start, t->n_rows);
        drop_block_index(t);
        t->parsed = false; /* counted afresh next time */
        return -1;
    }
    t->first_row = start;
    t->loaded = true;
    u->stats.tables++;
    return 0;
}

/* Reads a table's rows into the array. The first read of a file goes into the longest free
 * range; a table longer than that is counted to its end and read again into room made for it
 * (store_known_size), as is a table read before and since evicted or refused. */
static int store_table(agent_unwinder *u, unwind_table *t, const cfi_input *in, strata_error *err) {
    if (t->n_segments == 0) { /* nothing executable: no frame can fall in it */
        t->parsed = true;
        t->n_rows = 0;
        return 0;
    }
    memset(u->block_cache, 0, sizeof u->block_cache); /* free rows are about to change */
    if (t->parsed && t->n_rows > 0)
        return store_known_size(u, t, in, err);
    row_range room = largest_free(u);
    row_stream st = {.u = u, .t = t, .start = room.start, .room = room.len};
    t->n_blocks = 0;
    u->stats.files_read++;
    if (read_cfi(u, in, &st, err) != 0) {
        drop_block_index(t);
        return -1;
    }
    t->parsed = true;
    t->n_rows = (uint32_t)st.total;
    if (st.total == 0) {
        drop_block_index(t);
        return 0;
    }
    if (st.total > room.len)
        return store_known_size(u, t, in, err);
    rows_take(u, room.start, t->n_rows);
    t->first_row = room.start;
    t->loaded = true;
    u->stats.tables++;
    return 0;
}

static void read_segments(int fd, unwind_table *t) {
    t->n_segments = 0;
    Elf *elf = elf_begin(fd, ELF_C_READ_MMAP, NULL);
    if (elf == NULL)
        return;
    size_t n = 0;
    if (elf_getphdrnum(elf, &n) == 0)
        for (size_t i = 0; i < n && t->n_segments < MAX_SEGMENTS; i++) {
            GElf_Phdr ph;
            if (gelf_getphdr(elf, (int)i, &ph) != NULL && ph.p_type == PT_LOAD &&
                (ph.p_flags & PF_X))
                t->segments[t->n_segments++] =
                    (agent_elf_segment){ph.p_offset, ph.p_vaddr, ph.p_filesz};
        }
    elf_end(elf);
}

/* Reads the file at path into t and its rows into the array. */
static int load_table(agent_unwinder *u, unwind_table *t, const char *path, strata_error *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return strata_error_set(err, STRATA_NOT_FOUND, "cannot open %s", path);
    if (!t->parsed)
        read_segments(fd, t);
    cfi_input in = {.fd = fd};
    int rc = store_table(u, t, &in, err);
    close(fd);
    return rc;
}

/* Whether a load error is the sink's (not the file's): it fails the whole listing. */
static bool sink_error(const strata_error *e) {
    return e->code != STRATA_NOT_FOUND && e->code != STRATA_INVALID_ARGUMENT &&
           e->code != STRATA_UNIMPLEMENTED && e->code != STRATA_RESOURCE_EXHAUSTED;
}

/* --- the vDSO -------------------------------------------------------------------------------- */

/* The kernel maps one vDSO image into every 64-bit process; the agent reads its CFI from its own
 * copy (AT_SYSINFO_EHDR), so `[vdso]` frames (clock_gettime, gettimeofday) unwind like any file.
 * The image is trusted (it is the kernel's) but still bounds-checked. */
static bool vdso_image(const uint8_t **image, size_t *size) {
    const uint8_t *base = (const uint8_t *)(uintptr_t)getauxval(AT_SYSINFO_EHDR);
    if (base == NULL)
        return false;
    Elf64_Ehdr eh;
    memcpy(&eh, base, sizeof eh);
    if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
        eh.e_machine != EM_X86_64 || eh.e_shentsize != sizeof(Elf64_Shdr) ||
        eh.e_phentsize != sizeof(Elf64_Phdr))
        return false;
    *image = base;
    *size = eh.e_shoff + (size_t)eh.e_shnum * sizeof(Elf64_Shdr);
    return *size <= (1u << 20); /* a vDSO is a few pages */
}

static int load_vdso(agent_unwinder *u, unwind_table *t, strata_error *err) {
    const uint8_t *image;
    size_t size;
    if (!vdso_image(&image, &size))
        return strata_error_set(err, STRATA_NOT_FOUND, "no x86-64 vDSO in this process");
    Elf64_Ehdr eh;
    memcpy(&eh, image, sizeof eh);
    t->n_segments = 0;
    for (unsigned i = 0; i < eh.e_phnum && t->n_segments < MAX_SEGMENTS; i++) {
        Elf64_Phdr ph;
        if (eh.e_phoff + (i + 1) * sizeof ph > size)
            break;
        memcpy(&ph, image + eh.e_phoff + i * sizeof ph, sizeof ph);
        if (ph.p_type == PT_LOAD && (ph.p_flags & PF_X))
            t->segments[t->n_segments++] =
                (agent_elf_segment){ph.p_offset, ph.p_vaddr, ph.p_filesz};
    }
    Elf64_Shdr strtab;
    if (eh.e_shstrndx >= eh.e_shnum)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "vDSO without section names");
    memcpy(&strtab, image + eh.e_shoff + eh.e_shstrndx * sizeof strtab, sizeof strtab);
    for (unsigned i = 0; i < eh.e_shnum; i++) {
        Elf64_Shdr sh;
        memcpy(&sh, image + eh.e_shoff + i * sizeof sh, sizeof sh);
        if (strtab.sh_offset + sh.sh_name + sizeof ".eh_frame" > size ||
            memcmp(image + strtab.sh_offset + sh.sh_name, ".eh_frame", sizeof ".eh_frame") != 0 ||
            sh.sh_offset + sh.sh_size > size)
            continue;
        agent_cfi_source source = {
            .frame = image + sh.sh_offset, .frame_size = sh.sh_size, .frame_vaddr = sh.sh_addr};
        cfi_input in = {.fd = -1, .source = &source};
        return store_table(u, t, &in, err);
    }
    return strata_error_set(err, STRATA_NOT_FOUND, "vDSO without .eh_frame");
}

static uint64_t identity_key(const agent_mapping *m) {
    uint64_t dev = ((uint64_t)m->dev_major << 32) | m->dev_minor;
    return strata_hash_combine(strata_hash_u64(dev), m->inode) | 1;
}

static uint64_t build_id_key(const char *hex) {
    return strata_hash_bytes(hex, strlen(hex), 0x6275696c64) | 1;
}

static unwind_table *new_table(agent_unwinder *u, const agent_mapping *m, uint64_t build_id) {
    if (u->n_tables >= u->o.max_files ||
        STRATA_ARRAY_RESERVE(u->tables, u->cap_tables, u->n_tables + 1) != 0)
        return NULL;
    unwind_table *t = &u->tables[u->n_tables];
    memset(t, 0, sizeof *t);
    t->dev = ((uint64_t)m->dev_major << 32) | m->dev_minor;
    t->ino = m->inode;
    t->build_id = build_id;
    if (strata_u64_map_upsert(&u->by_identity, identity_key(m), u->n_tables + 1, NULL) == NULL ||
        (build_id != 0 &&
         strata_u64_map_upsert(&u->by_build_id, build_id, u->n_tables + 1, NULL) == NULL))
        return NULL;
    u->n_tables++;
    return t;
}

/* The table of mapping m of p, read if new or due for a retry; NULL if it has none. */
static unwind_table *table_for(agent_unwinder *u, const agent_proc *p, const agent_mapping *m,
                               strata_error *err, int *fatal) {
    unwind_table *t = NULL;
    uint64_t *index = strata_u64_map_get(&u->by_identity, identity_key(m));
    if (index != NULL) {
        t = &u->tables[*index - 1];
        if (t->ino != m->inode)
            t = NULL; /* a hash collision: treat as a miss */
    }
    char path[4352], build_id[AGENT_BUILD_ID_HEX_MAX + 1] = "";
    if (t == NULL) {
        if (agent_mapped_file_path(u->o.proc_root, p, m, path, sizeof path, build_id) != 0)
            return NULL;
        uint64_t key = build_id[0] != '\0' ? build_id_key(build_id) : 0;
        uint64_t *by_build = key != 0 ? strata_u64_map_get(&u->by_build_id, key) : NULL;
        if (by_build != NULL) { /* the same build through another path: share it */
            t = &u->tables[*by_build - 1];
            (void)strata_u64_map_upsert(&u->by_identity, identity_key(m), *by_build, NULL);
        } else if ((t = new_table(u, m, key)) == NULL) {
            return NULL;
        }
    }
    if (t->loaded)
        return t;
    if ((t->parsed && t->n_rows == 0) ||
        (t->failed && u->window - t->failed_window < u->o.retry_windows))
        return NULL;
    if (build_id[0] == '\0' &&
        agent_mapped_file_path(u->o.proc_root, p, m, path, sizeof path, build_id) != 0)
        return NULL;
    strata_error lerr;
    if (load_table(u, t, path, &lerr) != 0) {
        if (sink_error(&lerr)) {
            *err = lerr; /* the sink failed: not the file's fault */
            *fatal = 1;
        }
        t->failed = true;
        t->failed_window = u->window;
        u->stats.files_failed++;
        return NULL;
    }
    t->failed = false;
    return t->loaded ? t : NULL;
}

/* The vDSO's table, read once from the agent's own image; NULL if it has none. */
static unwind_table *vdso_table(agent_unwinder *u, strata_error *err, int *fatal) {
    if (u->vdso_index == 0) {
        if (STRATA_ARRAY_RESERVE(u->tables, u->cap_tables, u->n_tables + 1) != 0)
            return NULL;
        memset(&u->tables[u->n_tables], 0, sizeof u->tables[u->n_tables]);
        u->vdso_index = (uint32_t)++u->n_tables;
    }
    unwind_table *t = &u->tables[u->vdso_index - 1];
    if (t->loaded)
        return t;
    if (t->failed || (t->parsed && t->n_rows == 0))
        return NULL;
    strata_error lerr;
    if (load_vdso(u, t, &lerr) != 0) {
        if (sink_error(&lerr)) {
            *err = lerr;
            *fatal = 1;
        }
        t->failed = true; /* the image does not change: not retried */
        u->stats.files_failed++;
        return NULL;
    }
    return t->loaded ? t : NULL;
}

/* Runtime address - link-time address for mapping m of a file with segments t. */
static bool mapping_bias(const unwind_table *t, const agent_mapping *m, uint64_t *bias) {
    for (unsigned i = 0; i < t->n_segments; i++) {
        const agent_elf_segment *s = &t->segments[i];
        uint64_t page_start = s->offset & ~(uint64_t)4095;
        if (m->offset >= page_start && m->offset < s->offset + s->filesz) {
            *bias = m->start - (s->vaddr + (m->offset - s->offset)); /* wraps as intended */
            return true;
        }
    }
    return false;
}

/* --- processes ---------------------------------------------------------------------------- */

static listed_process *find_process(agent_unwinder *u, uint32_t pid) {
    for (size_t i = 0; i < u->n_procs; i++)
        if (u->procs[i].pid == pid)
            return &u->procs[i];
    return NULL;
}

static void release_tables(agent_unwinder *u, const uint32_t *used, size_t n);

static void unlist(agent_unwinder *u, listed_process *lp) {
    release_tables(u, lp->tables, lp->n_tables);
    free(lp->tables);
    free(lp->mappings);
    *lp = u->procs[--u->n_procs];
    u->stats.processes = u->n_procs;
}

void agent_unwinder_remove_process(agent_unwinder *u, pid_t pid) {
    listed_process *lp = find_process(u, (uint32_t)pid);
    if (lp == NULL)
        return;
    u->o.sink.delete_process(u->o.sink.ctx, (uint32_t)pid);
    unlist(u, lp);
}

static bool has_file(const agent_mapping *m) {
    return m->path != NULL && m->path[0] != '\0' && m->path[0] != '[' && m->inode != 0;
}

#define NO_TABLE UINT32_MAX

static void release_tables(agent_unwinder *u, const uint32_t *used, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (used[i] != NO_TABLE)
            u->tables[used[i]].users--;
}

/* Every executable mapping of p, with its table where it has one (sorted, as p's). Entries
 * without a table tell BPF the address is known (JIT code, a file without CFI): a frame-pointer
 * step, not a sign that the process mapped something new. */
static int build_list(agent_unwinder *u, const agent_proc *p, struct agent_unwind_mapping *all,
                      uint32_t *used, size_t *n, size_t *with_tables, strata_error *err) {
    *n = *with_tables = 0;
    for (size_t i = 0; i < p->n_mappings; i++) {
        const agent_mapping *m = &p->mappings[i];
        bool vdso = m->path != NULL && strcmp(m->path, "[vdso]") == 0;
        unwind_table *t = NULL;
        if (vdso || has_file(m)) {
            int fatal = 0;
            t = vdso ? vdso_table(u, err, &fatal) : table_for(u, p, m, err, &fatal);
            if (fatal)
                return -1;
        }
        uint64_t bias = 0;
        if (t != NULL && !mapping_bias(t, m, &bias))
            t = NULL;
        all[*n] = (struct agent_unwind_mapping){.start = m->start, .end = m->end, .bias = bias};
        used[*n] = NO_TABLE;
        if (t != NULL) {
            all[*n].first_row = t->first_row;
            all[*n].n_rows = t->n_rows;
            used[*n] = (uint32_t)(t - u->tables);
            t->users++; /* listed here: no later file of this process may evict it */
            t->last_used = u->clock;
            t->last_window = u->window;
            /* the vDSO alone does not make a process worth walking (a static Go binary) */
            *with_tables += !vdso;
        }
        (*n)++;
    }
    return 0;
}

/* Fits the list in AGENT_UNWIND_MAX_MAPPINGS: entries without a table go first (last first),
 * then tables past the limit (released: their frames take frame-pointer steps). */
static void fit_list(agent_unwinder *u, struct agent_unwind_mapping *all, uint32_t *used,
                     size_t *n) {
    for (size_t i = *n; i-- > 0 && *n > AGENT_UNWIND_MAX_MAPPINGS;)
        if (used[i] == NO_TABLE) {
            memmove(&all[i], &all[i + 1], (*n - i - 1) * sizeof *all);
            memmove(&used[i], &used[i + 1], (*n - i - 1) * sizeof *used);
            (*n)--;
        }
    if (*n > AGENT_UNWIND_MAX_MAPPINGS) {
        release_tables(u, used + AGENT_UNWIND_MAX_MAPPINGS, *n - AGENT_UNWIND_MAX_MAPPINGS);
        *n = AGENT_UNWIND_MAX_MAPPINGS;
    }
}

/* Whether lp lists the same mappings as all[0..n) (where and how biased; not which rows). */
static bool same_mappings(const listed_process *lp, const struct agent_unwind_mapping *all,
                          size_t n) {
    if (lp == NULL || lp->n_tables != n)
        return false;
    for (size_t i = 0; i < n; i++)
        if (lp->mappings[i].start != all[i].start || lp->mappings[i].end != all[i].end ||
            lp->mappings[i].bias != all[i].bias)
            return false;
    return true;
}

/* Keeps the list (taking used) and gives it to BPF; wake_off_list: AGENT_UNWIND_WAKE_OFF_LIST. */
static int list_process(agent_unwinder *u, uint32_t pid, const struct agent_unwind_mapping *all,
                        uint32_t *used, size_t n, bool wake_off_list, strata_error *err) {
    if (STRATA_ARRAY_RESERVE(u->procs, u->cap_procs, u->n_procs + 1) != 0)
        return strata_error_oom(err);
    listed_process *lp = &u->procs[u->n_procs];
    lp->pid = pid;
    lp->n_tables = (uint32_t)n;
    lp->tables = used;
    if ((lp->mappings = malloc(n * sizeof *lp->mappings)) == NULL)
        return strata_error_oom(err);
    memcpy(lp->mappings, all, n * sizeof *all);
    struct agent_unwind_proc *list = &u->list;
    memset(list, 0, sizeof *list);
    list->n_mappings = (uint32_t)n;
    list->flags = wake_off_list ? AGENT_UNWIND_WAKE_OFF_LIST : 0;
    memcpy(list->mappings, all, n * sizeof *all);
    if (u->o.sink.write_process(u->o.sink.ctx, pid, list, err) != 0) {
        free(lp->mappings);
        return -1;
    }
    u->n_procs++;
    u->stats.processes = u->n_procs;
    return 0;
}

int agent_unwinder_add_process(agent_unwinder *u, const agent_proc *p, strata_error *err) {
    uint32_t pid = (uint32_t)p->pid;
    u->clock++;
    size_t cap = p->n_mappings > 0 ? p->n_mappings : 1, n = 0;
    struct agent_unwind_mapping *all = malloc(cap * sizeof *all);
    uint32_t *used = malloc(cap * sizeof *used);
    if (all == NULL || used == NULL) {
        free(all);
        free(used);
        return strata_error_oom(err);
    }
    size_t with_tables = 0;
    if (build_list(u, p, all, used, &n, &with_tables, err) != 0)
        goto failed;
    fit_list(u, all, used, &n);
    listed_process *old = find_process(u, pid);
    bool changing = !same_mappings(old, all, n);
    if (old != NULL)
        unlist(u, old);
    u->o.sink.decided(u->o.sink.ctx, pid);
    if (with_tables == 0) {
        u->o.sink.delete_process(u->o.sink.ctx, pid);
        release_tables(u, used, n);
        free(all);
        free(used);
        return 0;
    }
    if (list_process(u, pid, all, used, n, changing, err) != 0)
        goto failed;
    free(all);
    u->stats.processes_added++;
    return (int)with_tables;
failed:
    release_tables(u, used, n);
    free(all);
    free(used);
    return -1;
}

/* --- walking a stack copy: the steps of bpf/unwind.bpf.h ------------------------------------ */

typedef struct copy_walk {
    const struct agent_stack_copy *c;
    uint64_t pc, sp, bp;
} copy_walk;

static bool copy_word(const copy_walk *w, uint64_t addr, uint64_t *out) {
    if (addr < w->c->base || addr - w->c->base > (uint64_t)w->c->len ||
        w->c->len - (addr - w->c->base) < sizeof *out)
        return false;
    memcpy(out, w->c->data + (addr - w->c->base), sizeof *out);
    return true;
}

static const struct agent_unwind_mapping *copy_mapping(const listed_process *lp, uint64_t pc) {
    uint32_t lo = 0, hi = lp->n_tables;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        const struct agent_unwind_mapping *m = &lp->mappings[mid];
        if (pc < m->start)
            hi = mid;
        else if (pc >= m->end)
            lo = mid + 1;
        else
            return m;
    }
    return NULL;
}

/* Block b of table t, from the cache or read back in one call; NULL if unreadable. */
static const struct agent_unwind_row *read_block(agent_unwinder *u, const unwind_table *t, size_t b,
                                                 uint32_t *n) {
    uint32_t first = t->first_row + (uint32_t)(b * ROW_BLOCK);
    *n = t->n_rows - (uint32_t)(b * ROW_BLOCK) < ROW_BLOCK ? t->n_rows - (uint32_t)(b * ROW_BLOCK)
                                                           : ROW_BLOCK;
    struct cached_block *c = &u->block_cache[0];
    for (size_t i = 0; i < BLOCK_CACHE_SIZE; i++) { /* 64 compares: far less than a read */
        struct cached_block *e = &u->block_cache[i];
        if (e->first_plus1 == first + 1) {
            e->used = ++u->block_clock;
            return e->rows;
        }
        if (e->used < c->used) /* an empty slot's is 0 */
            c = e;
    }
    c->first_plus1 = 0;
    c->used = ++u->block_clock;
    if (u->o.sink.read_rows(u->o.sink.ctx, first, *n, c->rows) != 0)
        return NULL;
    c->first_plus1 = first + 1;
    return c->rows;
}

/* The last row of table t at or below addr; false if none (or unreadable). */
static bool copy_row(agent_unwinder *u, const unwind_table *t, uint64_t addr,
                     struct agent_unwind_row *row) {
    size_t lo = 0, hi = t->n_blocks;
    while (lo < hi) { /* the first block starting above addr */
        size_t mid = lo + (hi - lo) / 2;
        if (t->block_pcs[mid] <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return false;
    uint32_t n;
    const struct agent_unwind_row *rows = read_block(u, t, lo - 1, &n);
    if (rows == NULL)
        return false;
    uint32_t i = 1;
    while (i < n && rows[i].pc <= addr)
        i++;
    *row = rows[i - 1];
    return true;
}

/* One step; 1: the walk ends (complete set when it reached the outermost frame). */
static int copy_step(agent_unwinder *u, const listed_process *lp, copy_walk *w, bool first,
                     bool *complete) {
    const struct agent_unwind_mapping *m = copy_mapping(lp, w->pc);
    struct agent_unwind_row row = {.cfa_type = AGENT_CFA_FP};
    uint32_t table = m != NULL ? lp->tables[m - lp->mappings] : NO_TABLE;
    if (table != NO_TABLE &&
        !copy_row(u, &u->tables[table], (first ? w->pc : w->pc - 1) - m->bias, &row))
        row.cfa_type = AGENT_CFA_FP;
    uint64_t cfa, ra, bp = w->bp;
    switch (row.cfa_type) {
        case AGENT_CFA_RSP:
            cfa = w->sp + (uint64_t)(int64_t)row.cfa_offset;
            break;
        case AGENT_CFA_RBP:
            if (w->bp == 0)
                return 1;
            cfa = w->bp + (uint64_t)(int64_t)row.cfa_offset;
            break;
        case AGENT_CFA_PLT:
            cfa = w->sp + 8 + ((w->pc & 15) >= 11 ? 8 : 0);
            break;
        case AGENT_CFA_END:
            *complete = true;
            return 1;
        default: /* a frame-pointer step */
            if (w->bp == 0 || w->bp < w->sp || !copy_word(w, w->bp + 8, &ra) ||
                !copy_word(w, w->bp, &bp))
                return 1;
            w->sp = w->bp + 16;
            w->bp = bp;
            w->pc = ra;
            *complete = ra == 0;
            return ra == 0;
    }
    if (cfa <= w->sp || !copy_word(w, cfa - 8, &ra))
        return 1;
    if (row.rbp_type == AGENT_RBP_AT_CFA &&
        !copy_word(w, cfa + (uint64_t)(int64_t)row.rbp_offset, &bp))
        return 1;
    if (row.rbp_type == AGENT_RBP_LOST)
        bp = 0;
    w->pc = ra;
    w->sp = cfa;
    w->bp = bp;
    *complete = ra == 0;
    return ra == 0;
}

size_t agent_unwinder_walk_copy(agent_unwinder *u, uint32_t pid, const struct agent_stack_copy *c,
                                uint64_t *frames, size_t cap, bool *complete) {
    *complete = false;
    const listed_process *lp = find_process(u, pid);
    if (lp == NULL || c->pc == 0 || c->len > sizeof c->data)
        return 0;
    copy_walk w = {c, c->pc, c->sp, c->bp};
    size_t n = 0;
    while (n < cap) {
        frames[n++] = w.pc;
        if (copy_step(u, lp, &w, n == 1, complete) != 0)
            break;
    }
    return n;
}

bool agent_unwinder_has_table(agent_unwinder *u, uint32_t pid, uint64_t pc) {
    const listed_process *lp = find_process(u, pid);
    const struct agent_unwind_mapping *m = lp != NULL ? copy_mapping(lp, pc) : NULL;
    return m != NULL && m->n_rows > 0;
}

void agent_unwinder_end_window(agent_unwinder *u) {
    u->window++;
}

agent_unwinder *agent_unwinder_new(const agent_unwinder_options *options, strata_error *err) {
    agent_unwinder *u = calloc(1, sizeof *u);
    if (u == NULL)
        return strata_error_oom(err), NULL;
    u->o = *options;
    if (u->o.proc_root == NULL)
        u->o.proc_root = "/proc";
    if (u->o.max_rows == 0)
        u->o.max_rows = AGENT_UNWIND_DEFAULT_ROWS;
    if (u->o.max_files == 0)
        u->o.max_files = 20000;
    if (u->o.retry_windows == 0)
        u->o.retry_windows = 6;
    u->stats.max_rows = u->o.max_rows;
    (void)elf_version(EV_CURRENT);
    /* At most one free range more than there are tables (each loaded table splits one). */
    u->cap_free = u->o.max_files + 2;
    if (strata_u64_map_init(&u->by_identity, 256) != 0 ||
        strata_u64_map_init(&u->by_build_id, 256) != 0 ||
        (u->free_ranges = calloc(u->cap_free, sizeof *u->free_ranges)) == NULL) {
        agent_unwinder_free(u);
        return strata_error_oom(err), NULL;
    }
    u->free_ranges[0] = (row_range){0, u->o.max_rows};
    u->n_free = 1;
    return u;
}

void agent_unwinder_stats_get(const agent_unwinder *u, agent_unwinder_stats *out) {
    *out = u->stats;
}

void agent_unwinder_free(agent_unwinder *u) {
    if (u == NULL)
        return;
    for (size_t i = 0; i < u->n_procs; i++) {
        free(u->procs[i].tables);
        free(u->procs[i].mappings);
    }
    free(u->procs);
    for (size_t i = 0; i < u->n_tables; i++)
        drop_block_index(&u->tables[i]);
    free(u->tables);
    free(u->free_ranges);
    strata_u64_map_free(&u->by_identity);
    strata_u64_map_free(&u->by_build_id);
    free(u);
}
