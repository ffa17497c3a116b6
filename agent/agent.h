/*
 * agent.h - the agent service: sampler, aggregation, symbolization, labels and push wired into
 * one loop, plus /metrics and /ready.
 *
 * Design. One main thread does all the work except sending: every poll interval (250 ms) it
 * drains the ring buffer into the aggregator; every window (10 s) it labels each process seen,
 * builds one pprof per process, and hands one WriteRawRequest to the pusher's thread. The ring
 * holds two seconds of worst-case samples, so a slow window (symbolizing a new large binary)
 * loses nothing. The HTTP server (libmicrohttpd threads) only reads atomics, the pusher's stats
 * and the BPF counters.
 *
 * Start-up cost (loading kallsyms, the BPF program, the perf events) is logged apart from steady
 * state (`startup_cpu_ms` in the "agent started" line) so benchmarks can tell them apart.
 *
 * On stop (the flag turns non-zero, or run_for elapses) the current partial window is pushed and
 * the queue is flushed for up to 10 s, so a short run still delivers what it saw.
 *
 * Metrics (Prometheus, on the HTTP address): strata_agent_samples_total,
 * strata_agent_samples_dropped_total (ring buffer full), strata_agent_symbolization_misses_total
 * {space="kernel|user"}, strata_agent_push_errors_total, strata_agent_pushes_total,
 * strata_agent_push_dropped_total{reason},
 * strata_agent_push_address_requests_total{address},
 * strata_agent_push_address_errors_total{address}, strata_agent_push_queue_requests,
 * strata_agent_push_queue_bytes, strata_agent_push_in_flight_batches, strata_agent_processes,
 * strata_agent_symbol_cache_bytes, plus process_cpu_seconds_total and process_resident_memory_bytes
 * for the agent's own CPU and memory.
 */
#ifndef STRATA_AGENT_AGENT_H
#define STRATA_AGENT_AGENT_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "common/error.h"
#include "proclabels.h"
#include "rpc/rpc.h"

typedef struct agent_options {
    const char *remote_store;  /* ingester host:port[,host:port...]; required */
    const char *tenant;        /* NULL = none (the ingester's default tenant) */
    const char *node;          /* NULL = hostname */
    unsigned frequency_hz;     /* 0 = 19 */
    int64_t window_ns;         /* 0 = 10 s */
    int64_t poll_ns;           /* 0 = 250 ms */
    const char *http_address;  /* NULL = no HTTP server */
    const char *debug_dir;     /* NULL = /usr/lib/debug */
    size_t max_queue_bytes;    /* 0 = 16 MiB */
    size_t max_request_bytes;  /* one WriteRaw's size (lib/push); 0 = 3 MiB */
    unsigned max_in_flight;    /* WriteRaw calls in flight per ingester; 0 = 4 */
    size_t symbol_cache_bytes; /* 0 = 6 MiB */
    /* Unwind-table rows (unwinder.h, 16 bytes of kernel memory each); 0 = 2 Mi rows. */
    uint32_t unwind_table_rows;
    bool no_dwarf_unwind;     /* walk every user stack through frame pointers only */
    int64_t run_for_ns;       /* 0 = until stopped */
    agent_relabel_fn relabel; /* NULL = no relabeling */
    void *relabel_ctx;
    const char *kubeconfig; /* Kubernetes labels from this kubeconfig; NULL = in-cluster when
                               KUBERNETES_SERVICE_HOST is set, else none (see kubepods.h) */
    rpc_channel_options push_channel; /* TLS and bearer token of the pushes (lib/rpc) */
    unsigned sample_labels;           /* AGENT_LABEL_* (aggregate.h); 0 = none */
    double off_cpu_threshold; /* off-CPU profiles: probability a blocking is timed; 0 = off */
} agent_options;

/* Runs until *stop becomes non-zero or run_for_ns passes. Returns 0 after a clean stop, -1 with
 * err set when the agent cannot start (missing privileges, BTF, perf events, bad options). */
int agent_run(const agent_options *options, volatile sig_atomic_t *stop, strata_error *err);

#endif
