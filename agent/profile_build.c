/*
 * profile_build.c - pprof assembly and symbolization for one process. See profile_build.h.
 */
#include "profile_build.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/array.h"
#include "common/utf8.h"
#include "demangle.h"
#include "pprof/pprof.h"

#define KERNEL_MAPPING_KEY 1

typedef struct builder {
    const agent_profile_context *ctx;
    const agent_process *p;
    agent_profile_stats stats;
    strata_error *err;
    strata_intern strings;
    pprof_profile prof;
    size_t cap_mappings, cap_locations, cap_lines, cap_functions;
    strata_u64_map location_ids; /* address -> location id */
    strata_u64_map function_ids; /* name string id + 1 -> function id */
    strata_u64_map mapping_ids;  /* 1 = kernel, proc mapping index + 2 -> mapping id */
} builder;

/* Interns a string of the profile. Symbol names and paths come from arbitrary binaries and file
 * systems, and the ingester refuses a pprof with a string that is not valid UTF-8, so such a
 * string is repaired (each bad byte becomes U+FFFD) rather than costing the whole push. */
static int intern(builder *b, const char *s, int64_t *id) {
    uint32_t v;
    size_t len = strlen(s);
    if (strata_utf8_is_valid(s, len)) {
        if (strata_intern_add(&b->strings, s, len, &v) != 0)
            return strata_error_oom(b->err);
        *id = v;
        return 0;
    }
    strata_buffer fixed = STRATA_BUFFER_INIT;
    int rc = strata_utf8_append_sanitized(&fixed, s, len) == 0 &&
                     strata_intern_add(&b->strings, (const char *)fixed.data, fixed.len, &v) == 0
                 ? 0
                 : strata_error_oom(b->err);
    strata_buffer_free(&fixed);
    if (rc == 0)
        *id = v;
    return rc;
}

static int kernel_mapping(builder *b, uint64_t *id) {
    uint64_t *known = strata_u64_map_get(&b->mapping_ids, KERNEL_MAPPING_KEY);
    if (known != NULL)
        return (*id = *known), 0;
    pprof_profile *pr = &b->prof;
    if (STRATA_ARRAY_RESERVE_OR_OOM(pr->mappings, b->cap_mappings, pr->n_mappings + 1, b->err) != 0)
        return -1;
    pprof_mapping *m = &pr->mappings[pr->n_mappings];
    memset(m, 0, sizeof *m);
    m->id = pr->n_mappings + 1;
    m->memory_limit = UINT64_MAX;
    m->has_functions = b->ctx->ksyms != NULL && b->ctx->ksyms->count > 0;
    if (intern(b, "[kernel.kallsyms]", &m->filename) != 0)
        return -1;
    pr->n_mappings++;
    if (strata_u64_map_upsert(&b->mapping_ids, KERNEL_MAPPING_KEY, m->id, NULL) == NULL)
        return strata_error_oom(b->err);
    *id = m->id;
    return 0;
}

static int user_mapping(builder *b, const agent_mapping *am, const agent_elf *elf, uint64_t *id) {
    uint64_t key = (uint64_t)(am - b->p->proc.mappings) + 2;
    uint64_t *known = strata_u64_map_get(&b->mapping_ids, key);
    if (known != NULL)
        return (*id = *known), 0;
    pprof_profile *pr = &b->prof;
    if (STRATA_ARRAY_RESERVE_OR_OOM(pr->mappings, b->cap_mappings, pr->n_mappings + 1, b->err) != 0)
        return -1;
    pprof_mapping *m = &pr->mappings[pr->n_mappings];
    memset(m, 0, sizeof *m);
    m->id = pr->n_mappings + 1;
    m->memory_start = am->start;
    m->memory_limit = am->end;
    m->file_offset = am->offset;
    m->has_functions = elf != NULL && elf->n_symbols > 0;
    if (intern(b, am->path != NULL ? am->path : "", &m->filename) != 0 ||
        intern(b, elf != NULL ? elf->build_id : "", &m->build_id) != 0)
        return -1;
    pr->n_mappings++;
    if (strata_u64_map_upsert(&b->mapping_ids, key, m->id, NULL) == NULL)
        return strata_error_oom(b->err);
    *id = m->id;
    return 0;
}

/* The function of a symbol name (system_name: as in the symbol table; name: demangled). */
static int function_for(builder *b, const char *name, uint64_t *id) {
    int64_t system_id = 0, name_id = 0;
    if (intern(b, name, &system_id) != 0)
        return -1;
    uint64_t *known = strata_u64_map_get(&b->function_ids, (uint64_t)system_id + 1);
    if (known != NULL)
        return (*id = *known), 0;
    char *demangled = agent_demangle(name);
    int rc = intern(b, demangled != NULL ? demangled : name, &name_id);
    free(demangled);
    if (rc != 0)
        return -1;
    pprof_profile *pr = &b->prof;
    if (STRATA_ARRAY_RESERVE_OR_OOM(pr->functions, b->cap_functions, pr->n_functions + 1, b->err) !=
        0)
        return -1;
    pprof_function *f = &pr->functions[pr->n_functions];
    memset(f, 0, sizeof *f);
    f->id = pr->n_functions + 1;
    f->name = name_id;
    f->system_name = system_id;
    pr->n_functions++;
    if (strata_u64_map_upsert(&b->function_ids, (uint64_t)system_id + 1, f->id, NULL) == NULL)
        return strata_error_oom(b->err);
    *id = f->id;
    return 0;
}

/* Symbolizes a user address: its mapping (if any) and function name (if known). */
static int symbolize_user(builder *b, uint64_t addr, bool leaf, uint64_t *mapping_id,
                          const char **name) {
    *mapping_id = 0;
    *name = NULL;
    if (!b->p->have_proc)
        return 0;
    const agent_mapping *am = agent_proc_find_mapping(&b->p->proc, addr);
    if (am == NULL)
        return 0;
    agent_elf *elf = NULL;
    if (b->ctx->symcache != NULL)
        elf = agent_symcache_get(b->ctx->symcache, &b->p->proc, am);
    if (user_mapping(b, am, elf, mapping_id) != 0)
        return -1;
    uint64_t lookup = leaf ? addr : addr - 1, vaddr;
    if (elf != NULL && agent_elf_offset_to_vaddr(elf, lookup - am->start + am->offset, &vaddr))
        *name = agent_elf_lookup(elf, vaddr, NULL);
    return 0;
}

static int symbolize(builder *b, uint64_t addr, bool kernel, bool leaf, uint64_t *mapping_id,
                     const char **name) {
    if (!kernel)
        return symbolize_user(b, addr, leaf, mapping_id, name);
    *name =
        b->ctx->ksyms != NULL ? agent_ksyms_lookup(b->ctx->ksyms, leaf ? addr : addr - 1) : NULL;
    return kernel_mapping(b, mapping_id);
}

/* The function of a Python frame, keyed by (name, file, first line): lambdas share names. */
static int python_function(builder *b, const agent_py_frame_info *info, uint64_t *id) {
    int64_t name_id = 0, file_id = 0;
    if (intern(b, info->qualname, &name_id) != 0 || intern(b, info->filename, &file_id) != 0)
        return -1;
    uint64_t key = strata_hash_combine(strata_hash_combine((uint64_t)name_id, (uint64_t)file_id),
                                       (uint64_t)info->first_line) |
                   AGENT_PY_WORD_TAG; /* native keys are small string ids */
    uint64_t *known = strata_u64_map_get(&b->function_ids, key);
    if (known != NULL)
        return (*id = *known), 0;
    pprof_profile *pr = &b->prof;
    if (STRATA_ARRAY_RESERVE_OR_OOM(pr->functions, b->cap_functions, pr->n_functions + 1, b->err) !=
        0)
        return -1;
    pprof_function *f = &pr->functions[pr->n_functions];
    *f = (pprof_function){pr->n_functions + 1, name_id, name_id, file_id, info->first_line};
    pr->n_functions++;
    if (strata_u64_map_upsert(&b->function_ids, key, f->id, NULL) == NULL)
        return strata_error_oom(b->err);
    *id = f->id;
    return 0;
}

/* Appends a location (and room for its one line) for the frame word key: id, mapping and
 * address set, no line yet. NULL when out of memory. */
static pprof_location *new_location(builder *b, uint64_t key, uint64_t mapping_id,
                                    uint64_t address) {
    pprof_profile *pr = &b->prof;
    if (STRATA_ARRAY_RESERVE_OR_OOM(pr->locations, b->cap_locations, pr->n_locations + 1, b->err) !=
            0 ||
        STRATA_ARRAY_RESERVE_OR_OOM(pr->lines, b->cap_lines, pr->n_lines + 1, b->err) != 0)
        return NULL;
    pprof_location *loc = &pr->locations[pr->n_locations];
    memset(loc, 0, sizeof *loc);
    loc->id = pr->n_locations + 1;
    loc->mapping_id = mapping_id;
    loc->address = address;
    loc->line_offset = (uint32_t)pr->n_lines;
    if (strata_u64_map_upsert(&b->location_ids, key, loc->id, NULL) == NULL)
        return strata_error_oom(b->err), NULL;
    pr->n_locations++;
    b->stats.locations++;
    return loc;
}

/* A Python frame word's location: no mapping, no address, one line. */
static int add_python_location(builder *b, uint64_t word, uint64_t *id) {
    agent_py_frame_info info;
    uint64_t function_id = 0;
    if (!agent_python_frame_info(b->ctx->python, b->p->pid, word, &info))
        info = (agent_py_frame_info){"<unknown>", "", 0, 0};
    if (python_function(b, &info, &function_id) != 0)
        return -1;
    pprof_location *loc = new_location(b, word, 0, 0);
    if (loc == NULL)
        return -1;
    b->prof.lines[b->prof.n_lines++] = (pprof_line){function_id, info.line, 0};
    loc->line_count = 1;
    *id = loc->id;
    return 0;
}

static int add_location(builder *b, uint64_t addr, bool kernel, bool leaf, uint64_t *id) {
    uint64_t key = addr != 0 ? addr : 1;
    uint64_t *known = strata_u64_map_get(&b->location_ids, key);
    if (known != NULL)
        return (*id = *known), 0;
    if (!kernel && agent_python_is_frame(addr))
        return add_python_location(b, addr, id);
    uint64_t mapping_id = 0, function_id = 0;
    const char *name = NULL;
    if (symbolize(b, addr, kernel, leaf, &mapping_id, &name) != 0 ||
        (name != NULL && function_for(b, name, &function_id) != 0))
        return -1;
    pprof_location *loc = new_location(b, key, mapping_id, addr);
    if (loc == NULL)
        return -1;
    if (function_id != 0) {
        b->prof.lines[b->prof.n_lines++] = (pprof_line){function_id, 0, 0};
        loc->line_count = 1;
    } else if (kernel) {
        b->stats.kernel_misses++;
    } else {
        b->stats.user_misses++;
    }
    *id = loc->id;
    return 0;
}

/* A string sample label. */
static int add_label(builder *b, const char *key, const char *value) {
    pprof_profile *pr = &b->prof;
    pprof_label *l = &pr->sample_labels[pr->n_sample_labels];
    memset(l, 0, sizeof *l);
    if (intern(b, key, &l->key) != 0 || intern(b, value, &l->str) != 0)
        return -1;
    pr->n_sample_labels++;
    return 0;
}

/* The per-sample labels that are on (aggregate.h) of stack i. */
static int add_sample_labels(builder *b, const agent_aggregator *a, size_t i, pprof_sample *ps) {
    const agent_process *p = b->p;
    const agent_stack *s = &p->stacks[i];
    ps->label_offset = (uint32_t)b->prof.n_sample_labels;
    char num[16];
    if (a->sample_labels & AGENT_LABEL_THREAD_ID) {
        snprintf(num, sizeof num, "%u", (unsigned)s->tid);
        if (add_label(b, "thread_id", num) != 0)
            return -1;
    }
    if ((a->sample_labels & AGENT_LABEL_THREAD_NAME) && p->thread_names != NULL &&
        add_label(b, "thread_name", p->thread_names[i]) != 0)
        return -1;
    if (a->sample_labels & AGENT_LABEL_CPU) {
        snprintf(num, sizeof num, "%u", (unsigned)s->cpu);
        if (add_label(b, "cpu", num) != 0)
            return -1;
    }
    ps->label_count = (uint32_t)b->prof.n_sample_labels - ps->label_offset;
    return 0;
}

/* Whether a kernel frame at the top of an off-CPU stack is the tracer's own (the BPF program,
 * which may have no symbol, and the tracepoint's BPF glue), not the kernel's path to schedule. */
static bool tracer_frame(const builder *b, uint64_t addr) {
    const char *name = b->ctx->ksyms != NULL ? agent_ksyms_lookup(b->ctx->ksyms, addr) : NULL;
    return name == NULL || strncmp(name, "bpf_", 4) == 0 || strncmp(name, "__bpf_trace", 11) == 0 ||
           strncmp(name, "__traceiter", 11) == 0;
}

static int add_samples(builder *b, const agent_aggregator *a) {
    const agent_process *p = b->p;
    pprof_profile *pr = &b->prof;
    size_t total = 0;
    for (size_t i = 0; i < p->n_stacks; i++)
        total += (size_t)p->stacks[i].n_kernel + p->stacks[i].n_user;
    pr->samples = calloc(p->n_stacks ? p->n_stacks : 1, sizeof *pr->samples);
    pr->sample_values = calloc(p->n_stacks ? p->n_stacks : 1, sizeof *pr->sample_values);
    pr->sample_location_ids = calloc(total ? total : 1, sizeof *pr->sample_location_ids);
    pr->sample_labels =
        calloc(a->sample_labels != 0 ? p->n_stacks * 3 + 1 : 1, sizeof *pr->sample_labels);
    if (pr->samples == NULL || pr->sample_values == NULL || pr->sample_location_ids == NULL ||
        pr->sample_labels == NULL)
        return strata_error_oom(b->err);
    for (size_t i = 0; i < p->n_stacks; i++) {
        const agent_stack *s = &p->stacks[i];
        if (s->off_cpu != b->ctx->off_cpu)
            continue; /* the other profile's */
        const uint64_t *frames = agent_stack_frames(a, s);
        size_t n = (size_t)s->n_kernel + s->n_user, n_kernel = s->n_kernel;
        while (s->off_cpu && n_kernel > 0 && tracer_frame(b, frames[0])) {
            frames++; /* the stack starts where the thread blocked */
            n_kernel--;
            n--;
        }
        size_t k = pr->n_samples++;
        pprof_sample *ps = &pr->samples[k];
        ps->location_offset = (uint32_t)pr->n_sample_location_ids;
        ps->location_count = (uint32_t)n;
        ps->value_offset = (uint32_t)k;
        for (size_t f = 0; f < n; f++) {
            bool kernel = f < n_kernel;
            bool leaf = f == 0 || (!kernel && f == n_kernel); /* the user pc is a leaf too */
            uint64_t id = 0;
            if (add_location(b, frames[f], kernel, leaf, &id) != 0)
                return -1;
            pr->sample_location_ids[pr->n_sample_location_ids++] = id;
        }
        pr->sample_values[k] = (int64_t)s->count;
        if (a->sample_labels != 0 && add_sample_labels(b, a, i, ps) != 0)
            return -1;
    }
    return 0;
}

static int set_header(builder *b) {
    pprof_profile *pr = &b->prof;
    int64_t empty;
    pr->sample_types = calloc(1, sizeof *pr->sample_types);
    if (pr->sample_types == NULL)
        return strata_error_oom(b->err);
    pr->n_sample_types = 1;
    bool off = b->ctx->off_cpu;
    if (intern(b, "", &empty) != 0 ||
        intern(b, off ? "wallclock" : "samples", &pr->sample_types[0].type) != 0 ||
        intern(b, off ? "nanoseconds" : "count", &pr->sample_types[0].unit) != 0 ||
        intern(b, off ? "samples" : "cpu", &pr->period_type.type) != 0 ||
        intern(b, off ? "count" : "nanoseconds", &pr->period_type.unit) != 0)
        return -1;
    pr->time_nanos = b->ctx->time_ns;
    pr->duration_nanos = b->ctx->duration_ns;
    pr->period = off ? 1 : b->ctx->period_ns;
    return 0;
}

static int encode(builder *b, strata_buffer *out) {
    pprof_profile *pr = &b->prof;
    pr->strings = calloc(b->strings.count, sizeof *pr->strings);
    if (pr->strings == NULL)
        return strata_error_oom(b->err);
    for (size_t i = 0; i < b->strings.count; i++)
        pr->strings[i] = (pprof_string){b->strings.strings[i], b->strings.lengths[i]};
    pr->n_strings = b->strings.count;
    /* gzip at level 1 (AGENT_GZIP_LEVEL): a third of the CPU of the default level for output
     * about a tenth larger; the agent runs on every node and its pushes are small */
    strata_buffer plain = STRATA_BUFFER_INIT;
    int rc = pprof_encode(pr, false, &plain, b->err);
    if (rc == 0 && b->ctx->gzip != NULL)
        rc = pprof_gzipper_compress(b->ctx->gzip, plain.data, plain.len, out, b->err);
    else if (rc == 0)
        rc = pprof_gzip(plain.data, plain.len, AGENT_GZIP_LEVEL, out, b->err);
    strata_buffer_free(&plain);
    return rc;
}

static void builder_free(builder *b) {
    pprof_profile *pr = &b->prof;
    free(pr->sample_types);
    free(pr->samples);
    free(pr->sample_values);
    free(pr->sample_location_ids);
    free(pr->sample_labels);
    free(pr->mappings);
    free(pr->locations);
    free(pr->lines);
    free(pr->functions);
    free(pr->strings);
    strata_intern_free(&b->strings);
    strata_u64_map_free(&b->location_ids);
    strata_u64_map_free(&b->function_ids);
    strata_u64_map_free(&b->mapping_ids);
}

int agent_profile_build(const agent_aggregator *a, const agent_process *p,
                        const agent_profile_context *ctx, strata_buffer *out,
                        agent_profile_stats *stats, strata_error *err) {
    builder b;
    memset(&b, 0, sizeof b);
    b.ctx = ctx;
    b.p = p;
    b.err = err;
    int rc = -1;
    if (strata_intern_init(&b.strings) != 0 || strata_u64_map_init(&b.location_ids, 256) != 0 ||
        strata_u64_map_init(&b.function_ids, 256) != 0 ||
        strata_u64_map_init(&b.mapping_ids, 16) != 0) {
        strata_error_oom(err);
        goto out;
    }
    if (set_header(&b) != 0 || add_samples(&b, a) != 0 || encode(&b, out) != 0)
        goto out;
    if (stats != NULL)
        *stats = b.stats;
    rc = 0;
out:
    builder_free(&b);
    return rc;
}
