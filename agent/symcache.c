/*
 * symcache.c - build-id keyed cache of ELF symbol tables. See symcache.h.
 */
#include "symcache.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/array.h"
#include "common/hash.h"

#define DEFAULT_MAX_BYTES ((size_t)6 << 20)
#define DEFAULT_MAX_ENTRIES 20000
#define DEFAULT_RETRY_WINDOWS 6

typedef struct cache_entry {
    uint64_t build_key; /* hash of the build id, 0 if none */
    agent_elf elf;
    bool loaded;
    bool failed;
    uint64_t failed_window;
    uint64_t last_used; /* the cache's clock at its last lookup */
    size_t bytes;
    pid_t names_pid;        /* the process whose view of the file the table reads names through */
    uint64_t names_checked; /* window + 1 of the last check that names_pid is still there */
} cache_entry;

struct agent_symcache {
    agent_symcache_options o;
    strata_u64_map by_identity; /* identity hash -> entry index + 1 */
    strata_u64_map by_build_id; /* build id hash -> entry index + 1 */
    cache_entry *entries;
    size_t n_entries;
    size_t cap;
    uint64_t window;
    uint64_t clock; /* lookups so far: recency for eviction */
    size_t bytes;
    agent_symcache_stats stats;
};

agent_symcache *agent_symcache_new(const agent_symcache_options *options, strata_error *err) {
    agent_symcache *c = calloc(1, sizeof *c);
    if (c == NULL) {
        strata_error_oom(err);
        return NULL;
    }
    if (options != NULL)
        c->o = *options;
    if (c->o.proc_root == NULL)
        c->o.proc_root = "/proc";
    if (c->o.max_bytes == 0)
        c->o.max_bytes = DEFAULT_MAX_BYTES;
    if (c->o.max_entries == 0)
        c->o.max_entries = DEFAULT_MAX_ENTRIES;
    if (c->o.retry_windows == 0)
        c->o.retry_windows = DEFAULT_RETRY_WINDOWS;
    if (strata_u64_map_init(&c->by_identity, 256) != 0 ||
        strata_u64_map_init(&c->by_build_id, 256) != 0) {
        agent_symcache_free(c);
        strata_error_oom(err);
        return NULL;
    }
    return c;
}

static uint64_t nonzero(uint64_t h) {
    return h != 0 ? h : 1;
}

static uint64_t identity_key(const agent_mapping *m) {
    uint64_t h = strata_hash_bytes(m->path, strlen(m->path), m->inode);
    return nonzero(strata_hash_combine(h, (uint64_t)m->dev_major << 32 | m->dev_minor));
}

static bool is_deleted(const char *path) {
    size_t n = strlen(path);
    return n > 10 && strcmp(path + n - 10, " (deleted)") == 0;
}

/* Picks the path to open: the process's view of the file first. */
static void file_path(const char *proc_root, const agent_proc *p, const agent_mapping *m,
                      int attempt, char *out, size_t cap) {
    if (attempt == 0 && !is_deleted(m->path))
        snprintf(out, cap, "%s/%d/root%s", proc_root, (int)p->pid, m->path);
    else if (attempt <= 1)
        snprintf(out, cap, "%s/%d/map_files/%llx-%llx", proc_root, (int)p->pid,
                 (unsigned long long)m->start, (unsigned long long)m->end);
    else
        snprintf(out, cap, "%s", m->path);
}

int agent_mapped_file_path(const char *proc_root, const agent_proc *p, const agent_mapping *m,
                           char *path, size_t cap, char *build_id) {
    for (int attempt = 0; attempt < 3; attempt++) {
        file_path(proc_root, p, m, attempt, path, cap);
        if (access(path, R_OK) == 0 && agent_elf_read_build_id(path, build_id, NULL) == 0)
            return 0;
    }
    return -1;
}

static cache_entry *new_entry(agent_symcache *c) {
    if (STRATA_ARRAY_RESERVE(c->entries, c->cap, c->n_entries + 1) != 0)
        return NULL;
    cache_entry *e = &c->entries[c->n_entries++];
    memset(e, 0, sizeof *e);
    return e;
}

static void reset(agent_symcache *c) {
    for (size_t i = 0; i < c->n_entries; i++)
        agent_elf_free(&c->entries[i].elf);
    c->n_entries = 0;
    c->bytes = 0;
    strata_u64_map_clear(&c->by_identity);
    strata_u64_map_clear(&c->by_build_id);
}

static void load_entry(agent_symcache *c, cache_entry *e, const agent_proc *p,
                       const agent_mapping *m, const char *path) {
    char root[128];
    snprintf(root, sizeof root, "%s/%d/root", c->o.proc_root, (int)p->pid);
    agent_elf_options eo = {c->o.debug_dir, root, m->path};
    if (agent_elf_load(path, &eo, &e->elf, NULL) != 0) {
        e->failed = true;
        e->failed_window = c->window;
        c->stats.failures++;
        return;
    }
    e->loaded = true;
    e->failed = false;
    e->names_pid = p->pid;
    e->bytes = agent_elf_bytes(&e->elf);
    c->bytes += e->bytes;
    c->stats.loads++;
    if (c->bytes > c->stats.peak_bytes)
        c->stats.peak_bytes = c->bytes;
}

/* Counts what the table of e holds now (names read since it was last counted). */
static void recount(agent_symcache *c, cache_entry *e) {
    size_t now = e->loaded ? agent_elf_bytes(&e->elf) : 0;
    c->bytes = c->bytes - e->bytes + now;
    e->bytes = now;
    if (c->bytes > c->stats.peak_bytes)
        c->stats.peak_bytes = c->bytes;
}

/* Before names are read for process p: if the process the table reads its names through has
 * gone (with its /proc/PID/root), read them through p's view of the same build. */
static void follow_names_file(agent_symcache *c, cache_entry *e, const agent_proc *p,
                              const agent_mapping *m) {
    if (!e->loaded || e->names_pid == p->pid || agent_elf_names_file_open(&e->elf) ||
        !agent_elf_names_in_mapped_file(&e->elf) || e->names_checked == c->window + 1)
        return;
    e->names_checked = c->window + 1; /* once a window: a lookup is per frame */
    char dir[64];
    snprintf(dir, sizeof dir, "%s/%d", c->o.proc_root, (int)e->names_pid);
    if (access(dir, F_OK) == 0)
        return; /* still there */
    char path[4352], build_id[AGENT_BUILD_ID_HEX_MAX + 1];
    if (agent_mapped_file_path(c->o.proc_root, p, m, path, sizeof path, build_id) == 0 &&
        strcmp(build_id, e->elf.build_id) == 0 && agent_elf_set_names_path(&e->elf, path))
        e->names_pid = p->pid;
}

/* Finds or creates the entry for a new identity. */
static cache_entry *entry_for_new_identity(agent_symcache *c, uint64_t ikey, const agent_proc *p,
                                           const agent_mapping *m) {
    char path[4352], build_id[AGENT_BUILD_ID_HEX_MAX + 1] = "";
    bool readable = agent_mapped_file_path(c->o.proc_root, p, m, path, sizeof path, build_id) == 0;
    uint64_t bkey = build_id[0] ? nonzero(strata_hash_bytes(build_id, strlen(build_id), 7)) : 0;
    uint64_t *existing = bkey ? strata_u64_map_get(&c->by_build_id, bkey) : NULL;
    if (existing != NULL) {
        if (strata_u64_map_upsert(&c->by_identity, ikey, *existing, NULL) == NULL)
            return NULL;
        return &c->entries[*existing - 1];
    }
    if (c->n_entries >= c->o.max_entries)
        reset(c);
    cache_entry *e = new_entry(c);
    if (e == NULL)
        return NULL;
    uint64_t index = (uint64_t)(e - c->entries) + 1;
    e->build_key = bkey;
    if (strata_u64_map_upsert(&c->by_identity, ikey, index, NULL) == NULL ||
        (bkey && strata_u64_map_upsert(&c->by_build_id, bkey, index, NULL) == NULL)) {
        c->n_entries--;
        return NULL;
    }
    if (readable)
        load_entry(c, e, p, m, path);
    else {
        e->failed = true;
        e->failed_window = c->window;
        c->stats.failures++;
    }
    return e;
}

/* Frees the least recently used table other than keep; false if there is none. */
static bool evict_one(agent_symcache *c, const cache_entry *keep) {
    cache_entry *victim = NULL;
    for (size_t i = 0; i < c->n_entries; i++) {
        cache_entry *e = &c->entries[i];
        if (e->loaded && e != keep && (victim == NULL || e->last_used < victim->last_used))
            victim = e;
    }
    if (victim == NULL)
        return false;
    agent_elf_free(&victim->elf);
    victim->loaded = false;
    c->bytes -= victim->bytes;
    victim->bytes = 0;
    c->stats.evictions++;
    return true;
}

agent_elf *agent_symcache_get(agent_symcache *c, const agent_proc *p, const agent_mapping *m) {
    if (m->path == NULL || m->path[0] != '/' || m->inode == 0)
        return NULL;
    uint64_t loads = c->stats.loads;
    uint64_t ikey = identity_key(m);
    uint64_t *index = strata_u64_map_get(&c->by_identity, ikey);
    cache_entry *e =
        index != NULL ? &c->entries[*index - 1] : entry_for_new_identity(c, ikey, p, m);
    if (e == NULL)
        return NULL;
    bool retry = e->failed && c->window - e->failed_window >= c->o.retry_windows;
    if ((!e->loaded && !e->failed) || retry) {
        char path[4352], build_id[AGENT_BUILD_ID_HEX_MAX + 1];
        if (agent_mapped_file_path(c->o.proc_root, p, m, path, sizeof path, build_id) == 0)
            load_entry(c, e, p, m, path);
        else
            e->failed_window = c->window;
    }
    e->last_used = ++c->clock;
    recount(c, e);
    if (c->stats.loads != loads) { /* only a load evicts: a hit never reloads another */
        while (c->bytes > c->o.max_bytes && evict_one(c, e)) {
        }
    }
    follow_names_file(c, e, p, m);
    return e->loaded ? &e->elf : NULL;
}

void agent_symcache_end_window(agent_symcache *c) {
    for (size_t i = 0; i < c->n_entries; i++) {
        agent_elf_close_names_file(&c->entries[i].elf);
        recount(c, &c->entries[i]);
    }
    while (c->bytes > c->o.max_bytes && evict_one(c, NULL)) {
    }
    c->window++;
}

void agent_symcache_stats_get(const agent_symcache *c, agent_symcache_stats *out) {
    *out = c->stats;
    out->entries = c->n_entries;
    out->bytes = c->bytes;
}

void agent_symcache_free(agent_symcache *c) {
    if (c == NULL)
        return;
    reset(c);
    free(c->entries);
    strata_u64_map_free(&c->by_identity);
    strata_u64_map_free(&c->by_build_id);
    free(c);
}
