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

#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cfi.h"
#include "common/array.h"
#include "common/hash.h"
#include "elfsym.h"
#include "symcache.h"

#define MAX_SEGMENTS 8 /* executable PT_LOAD segments kept per file */

typedef struct unwind_table {
    uint64_t dev, ino;      /* the identity it was first read through */
    uint64_t build_id;      /* hash of the hex build id; 0 if the file has none */
    uint32_t first_row;     /* its slice of the row array, while loaded */
    uint32_t n_rows;        /* rows of the file's CFI (0: none) */
    uint32_t users;         /* processes listing it */
    uint64_t last_used;     /* u->clock when last listed */
    uint64_t failed_window; /* when it could not be read */
    bool loaded;            /* rows are in the array */
    bool failed;            /* could not be read or parsed (retried later) */
    bool parsed;            /* n_rows and the segments are known */
    uint8_t n_segments;
    agent_elf_segment segments[MAX_SEGMENTS];
} unwind_table;

typedef struct row_range {
    uint32_t start, len;
} row_range;

typedef struct listed_process {
    uint32_t pid;
    uint32_t n_tables;
    uint32_t *tables; /* indexes into u->tables, one per listed mapping */
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
    uint64_t clock;
    uint64_t window;
    agent_unwinder_stats stats;
    struct agent_unwind_proc list; /* scratch: the list being built */
};

/* --- the row array's free space ------------------------------------------------------------ */

/* Carves len rows first-fit; false if no free range is long enough. */
static bool rows_alloc(agent_unwinder *u, uint32_t len, uint32_t *start) {
    for (size_t i = 0; i < u->n_free; i++) {
        row_range *r = &u->free_ranges[i];
        if (r->len < len)
            continue;
        *start = r->start;
        r->start += len;
        r->len -= len;
        if (r->len == 0) {
            memmove(r, r + 1, (u->n_free - i - 1) * sizeof *r);
            u->n_free--;
        }
        u->stats.rows_used += len;
        return true;
    }
    return false;
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

/* Frees the least recently listed table no process lists; false if there is none. */
static bool evict_one(agent_unwinder *u) {
    unwind_table *victim = NULL;
    for (size_t i = 0; i < u->n_tables; i++) {
        unwind_table *t = &u->tables[i];
        if (t->loaded && t->users == 0 && (victim == NULL || t->last_used < victim->last_used))
            victim = t;
    }
    if (victim == NULL)
        return false;
    rows_free(u, victim->first_row, victim->n_rows);
    victim->loaded = false;
    u->stats.tables--;
    u->stats.tables_evicted++;
    return true;
}

/* --- reading a file ----------------------------------------------------------------------- */

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

/* Parses the file at path into t and writes its rows into the array (evicting if needed). */
static int load_table(agent_unwinder *u, unwind_table *t, const char *path, strata_error *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return strata_error_set(err, STRATA_NOT_FOUND, "cannot open %s", path);
    agent_cfi_table cfi = {0};
    int rc = agent_cfi_read_fd(fd, u->o.max_rows, &cfi, err);
    if (rc == 0 && !t->parsed)
        read_segments(fd, t);
    close(fd);
    if (rc != 0)
        return -1;
    u->stats.files_read++;
    t->parsed = true;
    t->n_rows = (uint32_t)cfi.n_rows;
    if (cfi.n_rows == 0 || t->n_segments == 0) {
        t->n_rows = 0;
        agent_cfi_table_free(&cfi);
        return 0;
    }
    uint32_t start;
    while (!rows_alloc(u, t->n_rows, &start))
        if (!evict_one(u)) {
            u->stats.tables_refused++;
            agent_cfi_table_free(&cfi);
            return 0; /* stays unloaded: its frames take frame-pointer steps */
        }
    rc = u->o.sink.write_rows(u->o.sink.ctx, start, cfi.rows, t->n_rows, err);
    agent_cfi_table_free(&cfi);
    if (rc != 0) {
        rows_free(u, start, t->n_rows);
        return -1;
    }
    t->first_row = start;
    t->loaded = true;
    u->stats.tables++;
    return 0;
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
        if (lerr.code != STRATA_NOT_FOUND && lerr.code != STRATA_INVALID_ARGUMENT &&
            lerr.code != STRATA_UNIMPLEMENTED && lerr.code != STRATA_RESOURCE_EXHAUSTED) {
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

static void unlist(agent_unwinder *u, listed_process *lp) {
    for (uint32_t i = 0; i < lp->n_tables; i++)
        u->tables[lp->tables[i]].users--;
    free(lp->tables);
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

int agent_unwinder_add_process(agent_unwinder *u, const agent_proc *p, strata_error *err) {
    uint32_t pid = (uint32_t)p->pid;
    uint32_t used[AGENT_UNWIND_MAX_MAPPINGS];
    struct agent_unwind_proc *list = &u->list;
    memset(list, 0, sizeof *list);
    u->clock++;
    /* A table listed here must not be evicted by a later file of the same process. */
    listed_process *old = find_process(u, pid);
    for (size_t i = 0; i < p->n_mappings && list->n_mappings < AGENT_UNWIND_MAX_MAPPINGS; i++) {
        const agent_mapping *m = &p->mappings[i];
        if (!has_file(m))
            continue;
        int fatal = 0;
        unwind_table *t = table_for(u, p, m, err, &fatal);
        if (fatal)
            goto failed;
        uint64_t bias;
        if (t == NULL || !mapping_bias(t, m, &bias))
            continue;
        t->users++;
        t->last_used = u->clock;
        used[list->n_mappings] = (uint32_t)(t - u->tables);
        list->mappings[list->n_mappings++] =
            (struct agent_unwind_mapping){.start = m->start,
                                          .end = m->end,
                                          .bias = bias,
                                          .first_row = t->first_row,
                                          .n_rows = t->n_rows};
    }
    if (old != NULL)
        unlist(u, old);
    if (list->n_mappings == 0) {
        u->o.sink.delete_process(u->o.sink.ctx, pid);
        return 0;
    }
    if (STRATA_ARRAY_RESERVE(u->procs, u->cap_procs, u->n_procs + 1) != 0) {
        strata_error_oom(err);
        goto failed;
    }
    listed_process *lp = &u->procs[u->n_procs];
    lp->pid = pid;
    lp->n_tables = list->n_mappings;
    if ((lp->tables = malloc(list->n_mappings * sizeof *lp->tables)) == NULL) {
        strata_error_oom(err);
        goto failed;
    }
    memcpy(lp->tables, used, list->n_mappings * sizeof *used);
    u->n_procs++;
    u->stats.processes = u->n_procs;
    if (u->o.sink.write_process(u->o.sink.ctx, pid, list, err) != 0) {
        unlist(u, &u->procs[u->n_procs - 1]);
        return -1;
    }
    u->stats.processes_added++;
    return (int)list->n_mappings;
failed:
    for (uint32_t i = 0; i < list->n_mappings; i++)
        u->tables[used[i]].users--;
    return -1;
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
    for (size_t i = 0; i < u->n_procs; i++)
        free(u->procs[i].tables);
    free(u->procs);
    free(u->tables);
    free(u->free_ranges);
    strata_u64_map_free(&u->by_identity);
    strata_u64_map_free(&u->by_build_id);
    free(u);
}
