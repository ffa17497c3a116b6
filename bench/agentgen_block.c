/*
 * agentgen_block.c - see agentgen_block.h.
 *
 * Per profile: draw the ranks; look each (binary, rank) up in the block's stack array; for the
 * misses, build the stack, translate its frames to block location ids (interning mappings,
 * functions and locations on first sight) into one scratch array, sort the misses root-first and
 * intern them as stack paths; then hand (stack id, value) pairs to add_profile_stacks.
 */
#include "agentgen_block.h"

#include <stdlib.h>
#include <string.h>

#include "block/block_format.h"
#include "common/hash.h"

/* A drawn stack new to the block: its frames (block location ids, leaf first) in `frames`. */
typedef struct stack_miss {
    size_t draw;   /* index into the profile's draws */
    size_t offset; /* into frames */
    size_t depth;
} stack_miss;

struct agentgen_writer {
    agentgen *g;
    block_writer *w;
    size_t n_binaries, n_ranks, max_samples;
    /* per block: ids + 1 (0: not interned in this block yet) */
    uint32_t *stack_ids;         /* binary * n_ranks + rank -> stack id (ids start at 1: no + 1) */
    uint32_t *mapping_ids;       /* binary -> mapping id + 1; the last entry is the kernel's */
    strata_u64_map function_ids; /* ((binary << 32) | function) + 1 -> function id + 1 */
    strata_u64_map location_ids; /* address -> location id + 1 */
    /* per profile scratch */
    uint32_t *stacks;
    int64_t *values;
    stack_miss *misses;
    uint32_t *frames; /* max_samples * AGENTGEN_MAX_STACK */
};

agentgen_writer *agentgen_writer_new(agentgen *g, strata_error *err) {
    const agentgen_options *o = agentgen_get_options(g);
    agentgen_writer *aw = calloc(1, sizeof *aw);
    if (aw == NULL) {
        strata_error_oom(err);
        return NULL;
    }
    aw->g = g;
    aw->n_binaries = o->n_binaries;
    aw->n_ranks = o->stacks_per_process;
    aw->max_samples = o->samples_per_profile;
    aw->stack_ids = calloc(aw->n_binaries * aw->n_ranks, sizeof *aw->stack_ids);
    aw->mapping_ids = calloc(aw->n_binaries + 1, sizeof *aw->mapping_ids);
    aw->stacks = malloc((aw->max_samples + 1) * sizeof *aw->stacks);
    aw->values = malloc((aw->max_samples + 1) * sizeof *aw->values);
    aw->misses = malloc((aw->max_samples + 1) * sizeof *aw->misses);
    aw->frames = malloc((aw->max_samples + 1) * AGENTGEN_MAX_STACK * sizeof *aw->frames);
    if (aw->stack_ids == NULL || aw->mapping_ids == NULL || aw->stacks == NULL ||
        aw->values == NULL || aw->misses == NULL || aw->frames == NULL ||
        strata_u64_map_init(&aw->function_ids, 1024) != 0 ||
        strata_u64_map_init(&aw->location_ids, 1024) != 0) {
        agentgen_writer_free(aw);
        strata_error_oom(err);
        return NULL;
    }
    return aw;
}

void agentgen_writer_free(agentgen_writer *aw) {
    if (aw == NULL)
        return;
    free(aw->stack_ids);
    free(aw->mapping_ids);
    strata_u64_map_free(&aw->function_ids);
    strata_u64_map_free(&aw->location_ids);
    free(aw->stacks);
    free(aw->values);
    free(aw->misses);
    free(aw->frames);
    free(aw);
}

void agentgen_writer_start(agentgen_writer *aw, block_writer *w) {
    aw->w = w;
    memset(aw->stack_ids, 0, aw->n_binaries * aw->n_ranks * sizeof *aw->stack_ids);
    memset(aw->mapping_ids, 0, (aw->n_binaries + 1) * sizeof *aw->mapping_ids);
    strata_u64_map_clear(&aw->function_ids);
    strata_u64_map_clear(&aw->location_ids);
}

/* ---- symbols ------------------------------------------------------------------------------ */

static int intern_cstr(agentgen_writer *aw, const char *s, uint32_t *id, strata_error *err) {
    return block_writer_intern_string(aw->w, s, strlen(s), id, err);
}

/* The block mapping id + 1 of a binary (or the kernel), interned on first use. */
static int mapping_id(agentgen_writer *aw, uint32_t binary, uint32_t *id, strata_error *err) {
    size_t slot = binary == AGENTGEN_KERNEL ? aw->n_binaries : binary;
    if (aw->mapping_ids[slot] == 0) {
        agentgen_mapping m;
        agentgen_mapping_of(aw->g, binary, &m);
        block_writer_mapping bm = {m.memory_start, m.memory_limit, m.file_offset, 0, 0, 0};
        bm.flags = (m.has_functions ? BLOCK_MAPPING_HAS_FUNCTIONS : 0) |
                   (m.has_filenames ? BLOCK_MAPPING_HAS_FILENAMES : 0) |
                   (m.has_line_numbers ? BLOCK_MAPPING_HAS_LINE_NUMBERS : 0) |
                   (m.has_inline_frames ? BLOCK_MAPPING_HAS_INLINE_FRAMES : 0);
        uint32_t mid;
        if (intern_cstr(aw, m.file, &bm.file, err) != 0 ||
            intern_cstr(aw, m.build_id, &bm.build_id, err) != 0 ||
            block_writer_intern_mapping(aw->w, &bm, &mid, err) != 0)
            return -1;
        aw->mapping_ids[slot] = mid + 1;
    }
    *id = aw->mapping_ids[slot];
    return 0;
}

/* The block function id of a frame's function, interned on first use. */
static int function_id(agentgen_writer *aw, const agentgen_frame *f, uint32_t *id,
                       strata_error *err) {
    uint64_t key = ((uint64_t)f->binary << 32 | f->function) + 1;
    const uint64_t *v = strata_u64_map_get(&aw->function_ids, key);
    if (v != NULL) {
        *id = (uint32_t)(*v - 1);
        return 0;
    }
    agentgen_function fn;
    agentgen_frame_function(aw->g, f, &fn);
    uint32_t name, system_name, file;
    if (intern_cstr(aw, fn.name, &name, err) != 0 ||
        intern_cstr(aw, fn.name, &system_name, err) != 0 ||
        intern_cstr(aw, fn.file, &file, err) != 0 ||
        block_writer_intern_function(aw->w, name, system_name, file, fn.start_line, id, err) != 0)
        return -1;
    return strata_u64_map_upsert(&aw->function_ids, key, (uint64_t)*id + 1, NULL) == NULL
               ? strata_error_oom(err)
               : 0;
}

/* The block location id of a frame, interned on first use; keyed by address, which identifies a
 * frame (agentgen.h). */
static int location_id(agentgen_writer *aw, const agentgen_frame *f, uint32_t *id,
                       strata_error *err) {
    uint64_t key = f->address;
    const uint64_t *v = strata_u64_map_get(&aw->location_ids, key);
    if (v != NULL) {
        *id = (uint32_t)(*v - 1);
        return 0;
    }
    uint32_t mapping;
    block_writer_line line = {0, agentgen_frame_line(f)};
    if (mapping_id(aw, f->binary, &mapping, err) != 0 ||
        function_id(aw, f, &line.function, err) != 0 ||
        block_writer_intern_location(aw->w, f->address, mapping, 0, &line, 1, id, err) != 0)
        return -1;
    return strata_u64_map_upsert(&aw->location_ids, key, (uint64_t)*id + 1, NULL) == NULL
               ? strata_error_oom(err)
               : 0;
}

/* ---- stacks ------------------------------------------------------------------------------- */

/* Builds stack `rank` of binary b and translates its frames into aw->frames + offset. */
static int stack_frames(agentgen_writer *aw, size_t b, uint64_t rank, size_t offset, size_t *depth,
                        strata_error *err) {
    agentgen_frame frames[AGENTGEN_MAX_STACK];
    size_t n = agentgen_stack(aw->g, b, rank, frames);
    for (size_t i = 0; i < n; i++) {
        if (location_id(aw, &frames[i], &aw->frames[offset + i], err) != 0)
            return -1;
    }
    *depth = n;
    return 0;
}

/* Root-first lexicographic order of the misses' location ids: the order in which the writer
 * interns the stacks a pprof profile misses in its stack cache. */
static int compare_misses(const void *a, const void *b, void *ctx) {
    const uint32_t *frames = ctx;
    const stack_miss *x = a, *y = b;
    const uint32_t *fx = frames + x->offset, *fy = frames + y->offset;
    size_t n = x->depth < y->depth ? x->depth : y->depth;
    for (size_t i = 0; i < n; i++) {
        uint32_t u = fx[x->depth - 1 - i], v = fy[y->depth - 1 - i];
        if (u != v)
            return u < v ? -1 : 1;
    }
    return x->depth < y->depth ? -1 : x->depth > y->depth;
}

/* Fills aw->stacks for the draws: cached ids, and for stacks new to the block their frames,
 * interned after the profile's other draws in root-first order. */
static int draw_stacks(agentgen_writer *aw, size_t b, const agentgen_draw *draws, size_t n,
                       strata_error *err) {
    uint32_t *ids = aw->stack_ids + b * aw->n_ranks;
    size_t n_misses = 0, used = 0;
    for (size_t i = 0; i < n; i++) {
        aw->stacks[i] = ids[draws[i].rank];
        if (aw->stacks[i] != 0)
            continue;
        stack_miss *m = &aw->misses[n_misses++];
        m->draw = i;
        m->offset = used;
        if (stack_frames(aw, b, draws[i].rank, used, &m->depth, err) != 0)
            return -1;
        used += m->depth;
    }
    if (n_misses > 1)
        qsort_r(aw->misses, n_misses, sizeof *aw->misses, compare_misses, aw->frames);
    for (size_t k = 0; k < n_misses; k++) {
        const stack_miss *m = &aw->misses[k];
        uint32_t stack;
        if (block_writer_intern_stack_path(aw->w, aw->frames + m->offset, m->depth, &stack, err) !=
            0)
            return -1;
        ids[draws[m->draw].rank] = stack;
        aw->stacks[m->draw] = stack;
    }
    return 0;
}

int agentgen_writer_add(agentgen_writer *aw, size_t process, uint64_t window,
                        const label_set *labels, const profile_type *type, int64_t time_ns,
                        int64_t duration_ns, size_t sample_type_index, strata_error *err) {
    if (aw->w == NULL)
        return strata_error_set(err, STRATA_FAILED_PRECONDITION,
                                "agentgen writer: no block writer (call agentgen_writer_start)");
    if (sample_type_index > 1)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "agentgen writer: sample type index %zu out of range (2 types)",
                                sample_type_index);
    size_t b = agentgen_binary(aw->g, process);
    int64_t period = agentgen_period(aw->g);
    uint32_t binary_mapping, kernel_mapping; /* interned first, as the pprof path does */
    const agentgen_draw *draws;
    size_t n;
    if (mapping_id(aw, (uint32_t)b, &binary_mapping, err) != 0 ||
        mapping_id(aw, AGENTGEN_KERNEL, &kernel_mapping, err) != 0 ||
        agentgen_draws(aw->g, process, window, &draws, &n, err) != 0)
        return -1;
    if (n > aw->max_samples)
        return strata_error_set(err, STRATA_INTERNAL, "agentgen writer: %zu draws, room for %zu", n,
                                aw->max_samples);
    if (draw_stacks(aw, b, draws, n, err) != 0)
        return -1;
    for (size_t i = 0; i < n; i++)
        aw->values[i] = sample_type_index == 0 ? draws[i].count : draws[i].count * period;
    return block_writer_add_profile_stacks(aw->w, labels, type, time_ns, duration_ns, period,
                                           aw->stacks, aw->values, n, err);
}
