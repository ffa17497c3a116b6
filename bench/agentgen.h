/*
 * agentgen.h - a deterministic generator of agent-like CPU profiles, for benchmarks and tests.
 *
 * It models what Strata's eBPF agent pushes: many processes, each pushing one pprof every 10 s
 * with (by default) 2,000 samples, i.e. 2,000 distinct stacks with their sample counts. Processes
 * run one of a few binaries (Go services, C++ services, a C daemon); processes of one binary share
 * symbols and build ids, as replicas do. Each binary has a call graph of a few thousand functions
 * with realistic names (`github.com/acme/svc3/internal/handler.(*Server).ServeHTTP`,
 * `std::vector<acme::Record>::push_back`, kernel `__x64_sys_read`); a stack is a walk down that
 * graph from the binary's entry point, 10 to 60 frames deep, often ending in kernel frames. A
 * process's stacks are ranked and drawn with a Zipf distribution, so a few hot stacks dominate and
 * a long tail changes from profile to profile, as in real CPU profiles.
 *
 * Everything derives from the seed through a counter-based hash, so a profile depends only on
 * (seed, process, window) and can be regenerated in any order.
 *
 * Two ways out. agentgen_profile builds the pprof an agent would push. The model calls below it
 * (draws, stacks, function, line and mapping fields) expose the same content piece by piece, for
 * writers that do not need a pprof: bench/agentgen_block.h writes it straight into a block
 * writer. agentgen_profile is built from these calls, so both ways carry the same content.
 */
#ifndef STRATA_BENCH_AGENTGEN_H
#define STRATA_BENCH_AGENTGEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "labels/labels.h"
#include "pprof/pprof.h"

typedef struct agentgen_options {
    uint64_t seed;
    size_t n_processes;          /* default 100 */
    size_t n_binaries;           /* distinct executables; default 10, below AGENTGEN_KERNEL */
    size_t samples_per_profile;  /* distinct stacks per pprof; default 2000 */
    size_t stacks_per_process;   /* stack population ranked by Zipf; default 20000 */
    size_t functions_per_binary; /* default 3000, at most 2^19 */
    size_t min_depth, max_depth; /* default 10, 60 */
    double zipf_exponent;        /* default 1.0 */
    int64_t period_ns;           /* sampling period; default 1e9/19 */
} agentgen_options;

void agentgen_options_default(agentgen_options *options);

typedef struct agentgen agentgen;

agentgen *agentgen_new(const agentgen_options *options, strata_error *err);
void agentgen_free(agentgen *g);

/* The labels of a process (node, pid, comm, executable, namespace, pod, container). */
int agentgen_labels(const agentgen *g, size_t process, label_set *out, strata_error *err);
/* The profile type agents use: parca_agent:samples:count:cpu:nanoseconds:delta (borrowed
 * strings; do not free). */
profile_type agentgen_profile_type(void);

/* Fills *p (zeroed by the caller, freed with pprof_profile_free) with the profile of `process` for
 * the 10 s window number `window`. Sample types: samples/count, cpu/nanoseconds. Strings point into
 * the generator, which must outlive p. */
int agentgen_profile(agentgen *g, size_t process, uint64_t window, pprof_profile *p,
                     strata_error *err);

/* ---- the model, piece by piece (what agentgen_profile is built from) ---- */

#define AGENTGEN_MAX_STACK 96   /* frames a stack can have (max_depth is at most 86) */
#define AGENTGEN_KERNEL 0xffffu /* the "binary" of kernel frames and of the kernel mapping */

/* One frame: a function of a binary (or of the kernel) at an address. The address identifies the
 * frame: frames with the same address have the same binary and function (each binary's functions
 * lie in their own 256-byte slots of the binary's mapping, kernel functions above them all). */
typedef struct agentgen_frame {
    uint32_t binary; /* AGENTGEN_KERNEL for kernel frames */
    uint32_t function;
    uint64_t address;
} agentgen_frame;

/* One sample of a profile: stack `rank` of the process's binary, drawn `count` times. */
typedef struct agentgen_draw {
    uint64_t rank;
    int64_t count;
} agentgen_draw;

/* The options in effect (defaults filled in). */
const agentgen_options *agentgen_get_options(const agentgen *g);
/* The binary a process runs. */
size_t agentgen_binary(const agentgen *g, size_t process);
/* The sampling period in nanoseconds (the pprof's period; sample type 1 is count x period). */
int64_t agentgen_period(const agentgen *g);
/* The samples of `process`'s profile for `window`, in the order agentgen_profile lists them.
 * *draws points into g and stays valid until g's next draws or profile call. */
int agentgen_draws(agentgen *g, size_t process, uint64_t window, const agentgen_draw **draws,
                   size_t *n, strata_error *err);
/* Stack `rank` of a binary into out[0..AGENTGEN_MAX_STACK), leaf first; returns its depth. */
size_t agentgen_stack(const agentgen *g, size_t binary, uint64_t rank, agentgen_frame *out);

/* A frame's function (strings point into g). pprof's name and system_name are both `name`. */
typedef struct agentgen_function {
    const char *name;
    const char *file;
    int64_t start_line;
} agentgen_function;
void agentgen_frame_function(const agentgen *g, const agentgen_frame *f, agentgen_function *out);
/* A frame's line number. */
int64_t agentgen_frame_line(const agentgen_frame *f);

/* The mapping of a binary, or of the kernel (binary AGENTGEN_KERNEL). Frames of a binary lie in its
 * mapping. Strings point into g (build_id is "" for the kernel). */
typedef struct agentgen_mapping {
    uint64_t memory_start, memory_limit, file_offset;
    const char *file;
    const char *build_id;
    bool has_functions, has_filenames, has_line_numbers, has_inline_frames;
} agentgen_mapping;
void agentgen_mapping_of(const agentgen *g, uint32_t binary, agentgen_mapping *out);

#endif
