/*
 * profile_build.h - turns one process's window of stack counts into a gzipped pprof.
 *
 * Design. The on-CPU profile has one sample type, samples/count, with period type cpu/nanoseconds
 * and period 1e9/Hz, so a sample count times the period is CPU time (Parca's
 * parca_agent:samples:count:cpu:nanoseconds:delta, "On-CPU"). The off-CPU profile (ctx->off_cpu:
 * the process's off-CPU stacks only) has one sample type, wallclock/nanoseconds, the time its
 * threads were blocked there, with period type samples/count and period 1 (Parca's
 * parca_agent:wallclock:nanoseconds:samples:count:delta, "Off-CPU"). time_nanos is the window's
 * start and duration_nanos its length (non-zero: the profile is a delta). Each distinct stack is
 * one sample, its frames leaf first: kernel frames, then user frames.
 *
 *  - Kernel frames are symbolized from /proc/kallsyms and belong to a mapping named
 *    "[kernel.kallsyms]".
 *  - User frames belong to the pprof mapping built from their /proc/PID/maps entry (start, limit,
 *    file offset, path, build id). They are symbolized with the symcache: runtime address to file
 *    offset to link-time address (PIE/ASLR), then the symbol table. Return addresses (every frame
 *    but the leaf) are looked up at address - 1, inside the call instruction, so a call that ends
 *    a function is attributed to the caller.
 *  - A frame that cannot be symbolized keeps its address and mapping and has no line; it is
 *    counted as a miss. No sample is ever dropped for lack of a symbol.
 * Locations are de-duplicated by address, functions by name, strings by content (common/hash.h).
 */
#ifndef STRATA_AGENT_PROFILE_BUILD_H
#define STRATA_AGENT_PROFILE_BUILD_H

#include <stdbool.h>
#include <stdint.h>

#include "aggregate.h"
#include "common/buffer.h"
#include "common/error.h"
#include "ksyms.h"
#include "pyframes.h"
#include "pprof/pprof.h"
#include "symcache.h"

/* The gzip level of the agent's profiles (zlib's fastest). */
#define AGENT_GZIP_LEVEL 1

typedef struct agent_profile_context {
    const agent_ksyms *ksyms; /* may be NULL or empty: kernel frames keep addresses */
    agent_symcache *symcache; /* may be NULL: user frames keep addresses */
    int64_t time_ns;          /* window start, wall clock */
    int64_t duration_ns;
    int64_t period_ns;   /* 1e9 / Hz */
    bool off_cpu;        /* build the off-CPU profile instead of the on-CPU one */
    pprof_gzipper *gzip; /* may be NULL: a compressor made for the one profile */
    /* may be NULL: Python frame words (pyframes.h) become locations without a mapping whose one
     * line is the Python function (name and system name: co_qualname; filename: co_filename;
     * start line: co_firstlineno) at its line */
    const agent_python *python;
} agent_profile_context;

typedef struct agent_profile_stats {
    uint64_t locations;
    uint64_t kernel_misses; /* kernel locations without a symbol */
    uint64_t user_misses;   /* user locations without a symbol */
} agent_profile_stats;

/* Appends the gzipped pprof of process p's current window to out; stats may be NULL. */
int agent_profile_build(const agent_aggregator *a, const agent_process *p,
                        const agent_profile_context *ctx, strata_buffer *out,
                        agent_profile_stats *stats, strata_error *err);

#endif
