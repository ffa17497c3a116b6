/*
 * agentgen.c - see agentgen.h.
 *
 * A profile is built in two steps: draw the window's stack ranks (Zipf, through a guide table over
 * the CDF so a draw costs a couple of probes instead of a 15-step binary search; the ranks are the
 * same), then turn each drawn rank into frames (make_stack) and the frames into pprof functions,
 * locations and mappings through the model calls of agentgen.h, de-duplicated per profile.
 */
#include "agentgen.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/hash.h"

#define FANOUT 6
#define MAX_STACK AGENTGEN_MAX_STACK
#define KERNEL_BINARY_KEY AGENTGEN_KERNEL
#define GUIDE_BITS 16 /* the Zipf guide table has 2^16 + 1 entries */

typedef struct ag_binary {
    char *comm;
    char *path;
    char *build_id;
    uint64_t base;
    size_t n_functions;
    char **names;
    char **files;
    uint32_t *callees; /* n_functions * FANOUT */
} ag_binary;

struct agentgen {
    agentgen_options o;
    ag_binary *binaries;
    double *zipf_cdf;     /* stacks_per_process entries */
    uint32_t *zipf_guide; /* bucket j of u: the smallest rank with cdf >= j / 2^GUIDE_BITS */
    /* per-profile scratch */
    strata_u64_map draws;     /* rank + 1 -> count */
    agentgen_draw *draw_list; /* the draws in the map's slot order: the samples' order */
    size_t n_draws;
    strata_u64_map string_ids; /* pointer -> index + 1 */
    strata_u64_map function_ids;
    strata_u64_map location_ids;
};

static const char *kernel_names[] = {"entry_SYSCALL_64_after_hwframe",
                                     "do_syscall_64",
                                     "__x64_sys_read",
                                     "ksys_read",
                                     "vfs_read",
                                     "new_sync_read",
                                     "sock_read_iter",
                                     "tcp_recvmsg",
                                     "__x64_sys_write",
                                     "ksys_write",
                                     "vfs_write",
                                     "tcp_sendmsg",
                                     "tcp_sendmsg_locked",
                                     "copy_user_generic_unrolled",
                                     "__x64_sys_epoll_wait",
                                     "do_epoll_wait",
                                     "ep_poll",
                                     "schedule_hrtimeout_range",
                                     "__x64_sys_futex",
                                     "do_futex",
                                     "futex_wait",
                                     "asm_exc_page_fault",
                                     "exc_page_fault",
                                     "handle_mm_fault",
                                     "__handle_mm_fault",
                                     "clear_page_erms"};
#define N_KERNEL (sizeof kernel_names / sizeof kernel_names[0])

static const char *go_pkgs[] = {"handler", "storage", "cache", "auth",    "rpc",     "codec",
                                "metrics", "queue",   "index", "session", "billing", "search"};
static const char *go_types[] = {"Server", "Client", "Store",  "Pool",  "Encoder",
                                 "Batch",  "Router", "Worker", "Shard", "Txn"};
static const char *go_methods[] = {"ServeHTTP", "Get",     "Put",    "Flush",   "Encode",
                                   "Decode",    "Run",     "Handle", "process", "lookup",
                                   "marshal",   "compact", "Scan",   "Commit"};
static const char *cc_ns[] = {"db", "net", "io", "sched", "codec", "mem"};
static const char *cc_types[] = {"Table",   "Record", "Buffer", "Connection",
                                 "Reactor", "Arena",  "Page",   "Cursor"};
static const char *cc_methods[] = {"Scan", "Insert", "Flush",   "Read",      "Write",
                                   "Poll", "Alloc",  "Compare", "Serialize", "Merge"};
static const char *c_prefixes[] = {"ev", "buf", "hash", "conn", "log", "cfg", "http", "tls"};
static const char *c_verbs[] = {"run",   "append", "lookup", "read",  "write",
                                "parse", "free",   "init",   "flush", "resize"};
#define PICK(arr, h) arr[(h) % (sizeof arr / sizeof arr[0])]

static uint64_t mix(uint64_t seed, uint64_t a, uint64_t b) {
    return strata_hash_combine(strata_hash_combine(seed, a), b);
}

void agentgen_options_default(agentgen_options *o) {
    o->seed = 42;
    o->n_processes = 100;
    o->n_binaries = 10;
    o->samples_per_profile = 2000;
    o->stacks_per_process = 20000;
    o->functions_per_binary = 3000;
    o->min_depth = 10;
    o->max_depth = 60;
    o->zipf_exponent = 1.0;
    o->period_ns = 1000000000 / 19;
}

static char *format_name(int kind, size_t b, size_t i, uint64_t h) {
    char buf[512];
    if (i == 0) {
        snprintf(buf, sizeof buf, "%s", kind == 0 ? "runtime.main" : "main");
    } else if (kind == 0) {
        const char *pkg = PICK(go_pkgs, h), *type = PICK(go_types, h >> 8);
        const char *method = PICK(go_methods, h >> 16);
        if ((h >> 24) % 7 == 0)
            snprintf(buf, sizeof buf, "github.com/acme/svc%zu/internal/%s.%s.func%zu", b, pkg,
                     method, i % 9 + 1);
        else
            snprintf(buf, sizeof buf, "github.com/acme/svc%zu/internal/%s.(*%s).%s%s", b, pkg, type,
                     method, i % 3 == 0 ? "" : (i % 3 == 1 ? "Locked" : "Batch"));
    } else if (kind == 1) {
        const char *ns = PICK(cc_ns, h), *type = PICK(cc_types, h >> 8);
        const char *method = PICK(cc_methods, h >> 16);
        if ((h >> 24) % 5 == 0)
            snprintf(buf, sizeof buf,
                     "std::vector<acme::%s::%s, std::allocator<acme::%s::%s> >::push_back("
                     "acme::%s::%s const&)",
                     ns, type, ns, type, ns, type);
        else
            snprintf(buf, sizeof buf, "acme::%s::%s::%s%zu(unsigned long, acme::%s::%s&)", ns, type,
                     method, i % 17, ns, PICK(cc_types, h >> 32));
    } else {
        snprintf(buf, sizeof buf, "%s_%s%s", PICK(c_prefixes, h), PICK(c_verbs, h >> 8),
                 i % 4 == 0 ? "_slow" : "");
    }
    return strdup(buf);
}

static char *format_file(int kind, size_t b, uint64_t h) {
    char buf[256];
    if (kind == 0)
        snprintf(buf, sizeof buf, "github.com/acme/svc%zu/internal/%s/%s.go", b, PICK(go_pkgs, h),
                 PICK(go_methods, h >> 16));
    else if (kind == 1)
        snprintf(buf, sizeof buf, "src/%s/%s.cc", PICK(cc_ns, h), PICK(cc_types, h >> 8));
    else
        snprintf(buf, sizeof buf, "src/%s.c", PICK(c_prefixes, h));
    return strdup(buf);
}

static int init_binary(agentgen *g, size_t b, strata_error *err) {
    ag_binary *bin = &g->binaries[b];
    int kind = (int)(b % 3);
    uint64_t h = mix(g->o.seed, 0xb1, b);
    char buf[128];
    snprintf(buf, sizeof buf, "%s%zu", kind == 0 ? "svc" : kind == 1 ? "dbd" : "evd", b);
    bin->comm = strdup(buf);
    snprintf(buf, sizeof buf, "/usr/local/bin/%s", bin->comm ? bin->comm : "");
    bin->path = strdup(buf);
    snprintf(buf, sizeof buf, "%016llx%016llx", (unsigned long long)h,
             (unsigned long long)strata_hash_u64(h));
    bin->build_id = strdup(buf);
    bin->base = 0x400000 + (b << 28);
    bin->n_functions = g->o.functions_per_binary;
    bin->names = calloc(bin->n_functions, sizeof *bin->names);
    bin->files = calloc(bin->n_functions, sizeof *bin->files);
    bin->callees = malloc(bin->n_functions * FANOUT * sizeof *bin->callees);
    if (bin->comm == NULL || bin->path == NULL || bin->build_id == NULL || bin->names == NULL ||
        bin->files == NULL || bin->callees == NULL)
        return strata_error_oom(err);
    for (size_t i = 0; i < bin->n_functions; i++) {
        uint64_t fh = mix(h, 0xf0, i);
        bin->names[i] = format_name(kind, b, i, fh);
        bin->files[i] = format_file(kind, b, fh >> 4);
        if (bin->names[i] == NULL || bin->files[i] == NULL)
            return strata_error_oom(err);
        for (size_t j = 0; j < FANOUT; j++) /* callees skew towards lower ids: hot core code */
            bin->callees[i * FANOUT + j] =
                (uint32_t)(1 + mix(fh, 0xca, j) %
                                   (j < 2 ? bin->n_functions / 8 + 1 : bin->n_functions - 1));
    }
    return 0;
}

/* The smallest rank with cdf >= u, or the last rank if none (cdf's last entry may round below 1),
 * searched in [lo, hi]. */
static size_t zipf_search(const double *cdf, size_t lo, size_t hi, double u) {
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cdf[mid] < u)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static void init_zipf(agentgen *g) {
    size_t n = g->o.stacks_per_process;
    double sum = 0;
    for (size_t k = 0; k < n; k++)
        sum += 1.0 / pow((double)(k + 1), g->o.zipf_exponent);
    double acc = 0;
    for (size_t k = 0; k < n; k++) {
        acc += 1.0 / pow((double)(k + 1), g->o.zipf_exponent) / sum;
        g->zipf_cdf[k] = acc;
    }
    /* Guide entry j bounds every u in [j / 2^B, (j + 1) / 2^B): its rank lies in
     * [guide[j], guide[j + 1]], so a search there finds what a search over all ranks finds. */
    for (size_t j = 0; j <= (size_t)1 << GUIDE_BITS; j++)
        g->zipf_guide[j] = (uint32_t)zipf_search(g->zipf_cdf, j == 0 ? 0 : g->zipf_guide[j - 1],
                                                 n - 1, ldexp((double)j, -GUIDE_BITS));
}

agentgen *agentgen_new(const agentgen_options *options, strata_error *err) {
    agentgen *g = calloc(1, sizeof *g);
    if (g == NULL) {
        strata_error_oom(err);
        return NULL;
    }
    agentgen_options_default(&g->o);
    if (options != NULL)
        g->o = *options;
    /* Bounds that keep a frame's address unique (agentgen.h): a binary's functions stay in its
     * 256 MiB slot, and binary ids below AGENTGEN_KERNEL. */
    if (g->o.n_binaries == 0 || g->o.n_binaries >= AGENTGEN_KERNEL ||
        g->o.functions_per_binary < 16 || g->o.functions_per_binary > ((size_t)1 << 19) ||
        g->o.min_depth < 2 || g->o.max_depth < g->o.min_depth || g->o.max_depth > MAX_STACK - 10 ||
        g->o.samples_per_profile > g->o.stacks_per_process / 2 ||
        g->o.stacks_per_process > UINT32_MAX) {
        strata_error_set(err, STRATA_INVALID_ARGUMENT, "agentgen: inconsistent options");
        free(g);
        return NULL;
    }
    g->binaries = calloc(g->o.n_binaries, sizeof *g->binaries);
    g->zipf_cdf = malloc(g->o.stacks_per_process * sizeof *g->zipf_cdf);
    g->zipf_guide = malloc((((size_t)1 << GUIDE_BITS) + 1) * sizeof *g->zipf_guide);
    g->draw_list = malloc((g->o.samples_per_profile + 1) * sizeof *g->draw_list);
    if (g->binaries == NULL || g->zipf_cdf == NULL || g->zipf_guide == NULL ||
        g->draw_list == NULL) {
        agentgen_free(g);
        strata_error_oom(err);
        return NULL;
    }
    init_zipf(g);
    for (size_t b = 0; b < g->o.n_binaries; b++) {
        if (init_binary(g, b, err) != 0) {
            agentgen_free(g);
            return NULL;
        }
    }
    return g;
}

void agentgen_free(agentgen *g) {
    if (g == NULL)
        return;
    for (size_t b = 0; g->binaries != NULL && b < g->o.n_binaries; b++) {
        ag_binary *bin = &g->binaries[b];
        for (size_t i = 0; i < bin->n_functions && bin->names != NULL; i++) {
            free(bin->names[i]);
            free(bin->files[i]);
        }
        free(bin->names);
        free(bin->files);
        free(bin->callees);
        free(bin->comm);
        free(bin->path);
        free(bin->build_id);
    }
    free(g->binaries);
    free(g->zipf_cdf);
    free(g->zipf_guide);
    free(g->draw_list);
    strata_u64_map_free(&g->draws);
    strata_u64_map_free(&g->string_ids);
    strata_u64_map_free(&g->function_ids);
    strata_u64_map_free(&g->location_ids);
    free(g);
}

profile_type agentgen_profile_type(void) {
    profile_type t = {"parca_agent", "samples", "count", "cpu", "nanoseconds", true};
    return t;
}

int agentgen_labels(const agentgen *g, size_t process, label_set *out, strata_error *err) {
    const ag_binary *bin = &g->binaries[process % g->o.n_binaries];
    char node[32], pid[32], pod[64], ns[32], container[64];
    snprintf(node, sizeof node, "node-%zu", process / 10);
    snprintf(pid, sizeof pid, "%zu", 1000 + mix(g->o.seed, 0x1d, process) % 60000);
    snprintf(pod, sizeof pod, "%s-%06llx", bin->comm,
             (unsigned long long)(mix(g->o.seed, 0x90d, process) & 0xffffff));
    snprintf(ns, sizeof ns, "team-%zu", process % 4);
    snprintf(container, sizeof container, "%s", bin->comm);
    const char *pairs[][2] = {
        {"comm", bin->comm}, {"container", container}, {"executable", bin->path},
        {"namespace", ns},   {"node", node},           {"pid", pid},
        {"pod", pod}};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        if (label_set_add(out, pairs[i][0], strlen(pairs[i][0]), pairs[i][1], strlen(pairs[i][1]),
                          err) != 0)
            return -1;
    }
    return 0;
}

/* ---- one profile ------------------------------------------------------------------------- */

typedef agentgen_frame frame;

/* The user-space part of stack `rank` of a binary, root first; returns its length. Stacks form a
 * tree as real ones do: stack k > 0 continues a prefix (50-95%) of stack (k - 1) / 4, then walks
 * its own way down the call graph. */
static size_t user_frames(const agentgen *g, size_t b, uint64_t rank, frame *out) {
    const ag_binary *bin = &g->binaries[b];
    uint64_t h = mix(g->o.seed, 0x57ac + b, rank);
    size_t shared = 0;
    if (rank > 0) {
        size_t parent = user_frames(g, b, (rank - 1) / 4, out);
        shared = parent * (50 + (h >> 40) % 46) / 100;
    }
    size_t lo = shared + 1 > g->o.min_depth ? shared + 1 : g->o.min_depth;
    size_t depth = lo + h % (g->o.max_depth - lo + 1);
    uint32_t f =
        shared == 0 ? 0 : bin->callees[out[shared - 1].function * FANOUT + (h >> 8) % FANOUT];
    for (size_t l = shared; l < depth; l++) {
        uint64_t lh = mix(h, 0x1e7e1, l);
        size_t slot = (lh & 7) < 5 ? 0 : (lh >> 3) % FANOUT;
        out[l].binary = (uint32_t)b;
        out[l].function = f;
        out[l].address = bin->base + (uint64_t)f * 256 + 16 * slot + 5;
        f = bin->callees[f * FANOUT + slot];
    }
    return depth;
}

/* Stack `rank` of a binary, leaf first; returns the depth. */
static size_t make_stack(const agentgen *g, size_t b, uint64_t rank, frame *out) {
    uint64_t h = mix(g->o.seed, 0x6e7 + b, rank);
    frame root_first[MAX_STACK];
    size_t user = user_frames(g, b, rank, root_first);
    size_t kernel = (h >> 20) % 10 < 3 ? 2 + (h >> 24) % 6 : 0;
    if (user + kernel > g->o.max_depth)
        user = g->o.max_depth - kernel;
    root_first[user - 1].address = (root_first[user - 1].address & ~(uint64_t)0xff) + 4 * (h % 16);
    size_t start = (h >> 32) % (N_KERNEL - 8);
    for (size_t k = 0; k < kernel; k++) {
        root_first[user + k].binary = KERNEL_BINARY_KEY;
        root_first[user + k].function = (uint32_t)(start + k);
        root_first[user + k].address = 0xffffffff81000000ull + (start + k) * 512 + 7;
    }
    size_t n = user + kernel;
    for (size_t i = 0; i < n; i++)
        out[i] = root_first[n - 1 - i];
    return n;
}

size_t agentgen_stack(const agentgen *g, size_t binary, uint64_t rank, agentgen_frame *out) {
    return make_stack(g, binary, rank, out);
}

static uint64_t zipf_draw(const agentgen *g, uint64_t h) {
    double u = (double)(h >> 11) / 9007199254740992.0;
    size_t j = (size_t)(h >> (64 - GUIDE_BITS)); /* floor(u * 2^GUIDE_BITS), exactly */
    return zipf_search(g->zipf_cdf, g->zipf_guide[j], g->zipf_guide[j + 1], u);
}

/* Growable pprof arrays while building. */
typedef struct builder {
    pprof_profile *p;
    size_t cap_strings, cap_functions, cap_locations, cap_ids;
} builder;

static int grow(void **ptr, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap * 2 : 256;
    while (n < need)
        n *= 2;
    void *q = realloc(*ptr, n * elem);
    if (q == NULL)
        return -1;
    *ptr = q;
    *cap = n;
    return 0;
}

/* The pprof string index of s, keyed by pointer (the generator's strings are unique); "" is
 * always index 0. */
static int64_t string_index(agentgen *g, builder *bl, const char *s) {
    if (s[0] == '\0' && bl->p->n_strings > 0)
        return 0;
    bool inserted;
    uint64_t *v = strata_u64_map_upsert(&g->string_ids, (uint64_t)(uintptr_t)s, 0, &inserted);
    if (v == NULL)
        return -1;
    if (!inserted)
        return (int64_t)*v;
    pprof_profile *p = bl->p;
    void *arr = p->strings;
    if (grow(&arr, &bl->cap_strings, p->n_strings + 1, sizeof *p->strings) != 0)
        return -1;
    p->strings = arr;
    p->strings[p->n_strings].ptr = s;
    p->strings[p->n_strings].len = (uint32_t)strlen(s);
    *v = p->n_strings++;
    return (int64_t)*v;
}

void agentgen_frame_function(const agentgen *g, const agentgen_frame *f, agentgen_function *out) {
    bool kernel = f->binary == KERNEL_BINARY_KEY;
    out->name = kernel ? kernel_names[f->function] : g->binaries[f->binary].names[f->function];
    out->file = kernel ? "" : g->binaries[f->binary].files[f->function];
    out->start_line = 10 + f->function % 500;
}

int64_t agentgen_frame_line(const agentgen_frame *f) {
    return (int64_t)(20 + (f->address & 0xff));
}

void agentgen_mapping_of(const agentgen *g, uint32_t binary, agentgen_mapping *out) {
    memset(out, 0, sizeof *out);
    out->has_functions = true;
    if (binary == KERNEL_BINARY_KEY) {
        out->memory_start = 0xffffffff81000000ull;
        out->memory_limit = 0xffffffff83000000ull;
        out->file = "[kernel.kallsyms]";
        out->build_id = "";
        return;
    }
    const ag_binary *bin = &g->binaries[binary];
    out->memory_start = bin->base;
    out->memory_limit = bin->base + (1u << 27);
    out->file = bin->path;
    out->build_id = bin->build_id;
}

const agentgen_options *agentgen_get_options(const agentgen *g) {
    return &g->o;
}

size_t agentgen_binary(const agentgen *g, size_t process) {
    return process % g->o.n_binaries;
}

int64_t agentgen_period(const agentgen *g) {
    return g->o.period_ns;
}

static int function_id(agentgen *g, builder *bl, const frame *f, uint64_t *id) {
    uint64_t key = ((uint64_t)f->binary << 32 | f->function) + 1;
    bool inserted;
    uint64_t *v = strata_u64_map_upsert(&g->function_ids, key, 0, &inserted);
    if (v == NULL)
        return -1;
    if (inserted) {
        pprof_profile *p = bl->p;
        void *arr = p->functions;
        if (grow(&arr, &bl->cap_functions, p->n_functions + 1, sizeof *p->functions) != 0)
            return -1;
        p->functions = arr;
        agentgen_function info;
        agentgen_frame_function(g, f, &info);
        int64_t name = string_index(g, bl, info.name);
        int64_t file_ix = string_index(g, bl, info.file);
        if (name < 0 || file_ix < 0)
            return -1;
        pprof_function *fn = &p->functions[p->n_functions];
        fn->id = p->n_functions + 1;
        fn->name = fn->system_name = name;
        fn->filename = file_ix;
        fn->start_line = info.start_line;
        *v = fn->id;
        p->n_functions++;
    }
    *id = *v;
    return 0;
}

/* Locations are keyed by address, which identifies a frame (agentgen.h). */
static int location_id(agentgen *g, builder *bl, const frame *f, uint64_t *id) {
    uint64_t key = f->address;
    bool inserted;
    uint64_t *v = strata_u64_map_upsert(&g->location_ids, key, 0, &inserted);
    if (v == NULL)
        return -1;
    if (inserted) {
        uint64_t fid;
        if (function_id(g, bl, f, &fid) != 0)
            return -1;
        pprof_profile *p = bl->p;
        void *locs = p->locations, *lines = p->lines;
        size_t cap_lines = bl->cap_locations;
        if (grow(&locs, &bl->cap_locations, p->n_locations + 1, sizeof *p->locations) != 0)
            return -1;
        p->locations = locs;
        if (grow(&lines, &cap_lines, bl->cap_locations, sizeof *p->lines) != 0)
            return -1;
        p->lines = lines;
        pprof_location *loc = &p->locations[p->n_locations];
        memset(loc, 0, sizeof *loc);
        loc->id = p->n_locations + 1;
        loc->mapping_id = f->binary == KERNEL_BINARY_KEY ? 2 : 1;
        loc->address = f->address;
        loc->line_offset = (uint32_t)p->n_lines;
        loc->line_count = 1;
        p->lines[p->n_lines].function_id = fid;
        p->lines[p->n_lines].line = agentgen_frame_line(f);
        p->lines[p->n_lines].column = 0;
        p->n_lines++;
        *v = loc->id;
        p->n_locations++;
    }
    *id = *v;
    return 0;
}

/* pprof mapping `id` from the model's mapping of `binary`. */
static int add_mapping(agentgen *g, builder *bl, uint32_t binary, uint64_t id) {
    agentgen_mapping m;
    agentgen_mapping_of(g, binary, &m);
    int64_t file = string_index(g, bl, m.file), build_id = string_index(g, bl, m.build_id);
    if (file < 0 || build_id < 0)
        return -1;
    bl->p->mappings[id - 1] = (pprof_mapping){.id = id,
                                              .memory_start = m.memory_start,
                                              .memory_limit = m.memory_limit,
                                              .file_offset = m.file_offset,
                                              .filename = file,
                                              .build_id = build_id,
                                              .has_functions = m.has_functions,
                                              .has_filenames = m.has_filenames,
                                              .has_line_numbers = m.has_line_numbers,
                                              .has_inline_frames = m.has_inline_frames};
    return 0;
}

/* Mapping 1: the process's binary; mapping 2: the kernel. */
static int add_mappings(agentgen *g, builder *bl, size_t binary) {
    pprof_profile *p = bl->p;
    p->mappings = calloc(2, sizeof *p->mappings);
    if (p->mappings == NULL)
        return -1;
    p->n_mappings = 2;
    return add_mapping(g, bl, (uint32_t)binary, 1) != 0 ||
                   add_mapping(g, bl, KERNEL_BINARY_KEY, 2) != 0
               ? -1
               : 0;
}

static int add_sample(agentgen *g, builder *bl, size_t b, uint64_t rank, int64_t count) {
    frame frames[MAX_STACK];
    size_t n = make_stack(g, b, rank, frames);
    pprof_profile *p = bl->p;
    void *ids = p->sample_location_ids;
    if (grow(&ids, &bl->cap_ids, p->n_sample_location_ids + n, sizeof(uint64_t)) != 0)
        return -1;
    p->sample_location_ids = ids;
    pprof_sample *s = &p->samples[p->n_samples];
    s->location_offset = (uint32_t)p->n_sample_location_ids;
    s->location_count = (uint32_t)n;
    s->value_offset = (uint32_t)(2 * p->n_samples);
    s->label_offset = 0;
    s->label_count = 0;
    for (size_t i = 0; i < n; i++) {
        if (location_id(g, bl, &frames[i], &p->sample_location_ids[p->n_sample_location_ids++]) !=
            0)
            return -1;
    }
    p->sample_values[2 * p->n_samples] = count;
    p->sample_values[2 * p->n_samples + 1] = count * g->o.period_ns;
    p->n_samples++;
    return 0;
}

/* Draws ranks until samples_per_profile distinct ones (or a bound on draws) and lists them with
 * their counts in the map's slot order. */
static int draw_ranks(agentgen *g, size_t process, uint64_t window) {
    strata_u64_map_clear(&g->draws);
    g->n_draws = 0;
    uint64_t h = mix(g->o.seed, 0xd4a3 + process, window);
    size_t limit = 200 * g->o.samples_per_profile;
    for (size_t i = 0; g->draws.count < g->o.samples_per_profile && i < limit; i++) {
        uint64_t rank = zipf_draw(g, strata_hash_u64(h + i));
        uint64_t *v = strata_u64_map_upsert(&g->draws, rank + 1, 0, NULL);
        if (v == NULL)
            return -1;
        (*v)++;
    }
    for (size_t i = 0; i <= g->draws.mask && g->draws.slots != NULL; i++) {
        if (g->draws.slots[i].key != 0)
            g->draw_list[g->n_draws++] =
                (agentgen_draw){g->draws.slots[i].key - 1, (int64_t)g->draws.slots[i].value};
    }
    return 0;
}

int agentgen_draws(agentgen *g, size_t process, uint64_t window, const agentgen_draw **draws,
                   size_t *n, strata_error *err) {
    if (draw_ranks(g, process, window) != 0)
        return strata_error_oom(err);
    *draws = g->draw_list;
    *n = g->n_draws;
    return 0;
}

static int build_profile(agentgen *g, size_t process, uint64_t window, builder *bl) {
    pprof_profile *p = bl->p;
    size_t b = agentgen_binary(g, process);
    if (draw_ranks(g, process, window) != 0)
        return -1;
    strata_u64_map_clear(&g->string_ids);
    strata_u64_map_clear(&g->function_ids);
    strata_u64_map_clear(&g->location_ids);
    p->strings = NULL;
    if (string_index(g, bl, "") != 0)
        return -1;
    p->sample_types = calloc(2, sizeof *p->sample_types);
    p->samples = calloc(g->n_draws + 1, sizeof *p->samples);
    p->sample_values = calloc(2 * g->n_draws + 1, sizeof *p->sample_values);
    if (p->sample_types == NULL || p->samples == NULL || p->sample_values == NULL)
        return -1;
    p->n_sample_types = 2;
    p->sample_types[0] =
        (pprof_value_type){string_index(g, bl, "samples"), string_index(g, bl, "count")};
    p->sample_types[1] =
        (pprof_value_type){string_index(g, bl, "cpu"), string_index(g, bl, "nanoseconds")};
    p->period_type = p->sample_types[1];
    p->period = g->o.period_ns;
    p->duration_nanos = 10 * INT64_C(1000000000);
    if (add_mappings(g, bl, b) != 0)
        return -1;
    for (size_t i = 0; i < g->n_draws; i++) {
        if (add_sample(g, bl, b, g->draw_list[i].rank, g->draw_list[i].count) != 0)
            return -1;
    }
    return 0;
}

int agentgen_profile(agentgen *g, size_t process, uint64_t window, pprof_profile *p,
                     strata_error *err) {
    memset(p, 0, sizeof *p);
    builder bl = {p, 0, 0, 0, 0};
    if (build_profile(g, process, window, &bl) != 0) {
        pprof_profile_free(p);
        return strata_error_oom(err);
    }
    p->time_nanos = (int64_t)window * 10 * INT64_C(1000000000);
    if (pprof_profile_build_indexes(p, err) != 0) {
        pprof_profile_free(p);
        return -1;
    }
    return 0;
}
