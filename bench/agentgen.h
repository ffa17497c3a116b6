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
 */
#ifndef STRATA_BENCH_AGENTGEN_H
#define STRATA_BENCH_AGENTGEN_H

#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "labels/labels.h"
#include "pprof/pprof.h"

typedef struct agentgen_options {
    uint64_t seed;
    size_t n_processes;          /* default 100 */
    size_t n_binaries;           /* distinct executables; default 10 */
    size_t samples_per_profile;  /* distinct stacks per pprof; default 2000 */
    size_t stacks_per_process;   /* stack population ranked by Zipf; default 20000 */
    size_t functions_per_binary; /* default 3000 */
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

#endif
