/*
 * requests.h - WriteRaw requests for benchmarks: serialized exactly as agents send them (one
 * series per process, gzipped pprof inside), or from pprof files as a scraper batches them, built
 * before any clock starts. Shared by ingest_bench, bucket_bench and push_load.
 */
#ifndef STRATA_BENCH_REQUESTS_H
#define STRATA_BENCH_REQUESTS_H

#include <stddef.h>
#include <stdint.h>

#include "common/buffer.h"
#include "common/error.h"
#include "labels/labels.h"
#include "pprof/pprof.h"

typedef struct request_set {
    strata_buffer *requests;
    size_t n;
    uint64_t samples;       /* stored samples: non-zero (sample, sample type) values */
    uint64_t pprof_samples; /* pprof samples (stacks) with a non-zero value: DESIGN.md's unit */
    uint64_t pprof_bytes;   /* gzipped pprof payload bytes */
} request_set;

/* Prints "PROGRAM: what: message" and exits 1 (benchmarks stop at the first failure). */
_Noreturn void die(const char *what, const strata_error *err);

/* Serializes one WriteRawRequest with one series per (labels, pprof) under profile name `name`. */
void encode_request(label_set *labels, const char *name, strata_buffer *pprofs, size_t n,
                    strata_buffer *out);
/* Samples with a non-zero value, counted per sample type (what the ingester stores: one profile
 * per sample type). */
uint64_t count_samples(const pprof_profile *p);
/* pprof samples with a non-zero value in some sample type (DESIGN.md's "samples": an agent's
 * 2,000-sample profile holds 2,000 of them, whatever its number of sample types). */
uint64_t count_pprof_samples(const pprof_profile *p);
/* One request per 10 s window holding every process's agent-like profile (bench/agentgen). */
void build_agent_requests(size_t windows, size_t processes, request_set *set);
/* The same profiles in requests of at most per_request processes (window by window, so the
 * requests are in time order), window w at start_ns + 10 w seconds (build_agent_requests: at
 * 10 w seconds from the epoch, the first at 0, which an ingester reads as "no time" and stamps
 * with its clock), each profile also written to dump_dir (when not NULL) as
 * w<window>-p<process>.pb.gz. */
void build_agent_requests_split(size_t windows, size_t processes, size_t per_request,
                                int64_t start_ns, const char *dump_dir, request_set *set);
/* A pprof file pushed as profile type `name` (e.g. "process_cpu", "memory"). */
typedef struct pprof_file {
    const char *path;
    const char *name;
} pprof_file;
/* n_requests requests of series_per_request series each, as a scraper batches them: series g
 * (counted across requests) is file g % n_files of target (g / n_files) % targets, labelled
 * job="fleet", instance="target-N". Exits on a file that cannot be read or decoded. */
void build_file_requests(const pprof_file *files, size_t n_files, size_t targets,
                         size_t series_per_request, size_t n_requests, request_set *set);
/* The files as a fleet of `targets` processes over `windows` 10 s windows, for data that queries
 * read back: window w holds one profile per target, file (t + w) % n_files re-stamped at
 * start_ns + 10 w s + (t % 10) s with a 10 s duration, in series job="go-fleet",
 * instance="target-N" (one per target and file type), in requests of at most per_request
 * profiles in time order; each profile also written to dump_dir (when not NULL) as
 * w<window>-p<target>.pb.gz. */
void build_file_requests_split(const pprof_file *files, size_t n_files, size_t windows,
                               size_t targets, size_t per_request, int64_t start_ns,
                               const char *dump_dir, request_set *set);
void free_set(request_set *set);

#endif
