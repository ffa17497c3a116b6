/*
 * agent_cli.h - `strata agent`: command-line entry of the eBPF profiler.
 *
 *   strata agent -remote-store HOST:PORT[,HOST:PORT...] [-relabel-config FILE] [-node NAME]
 *                [-tenant T] [-sampling-frequency HZ] [-window DURATION] [-http-address HOST:PORT]
 * [-debug-dir DIR]
 *                [-push-queue-bytes N] [-symbol-cache-bytes N] [-duration DURATION]
 *                [-log-level LEVEL]
 *
 * Several -remote-store addresses are balanced round-robin with failover (lib/push).
 * -relabel-config reads `relabel_configs:` (Prometheus relabeling, lib/relabel) applied to each
 * process's discovery labels (see proclabels.h); a bad file is a flag error (exit 2).
 *
 * Flags take one or two dashes. Durations are Go-style ("10s", "250ms", "1m"). The agent runs
 * until SIGINT or SIGTERM (or -duration), then pushes its last partial window and exits 0; it
 * exits 1 with a one-line message when it cannot start (not root, no BTF, no perf events), and 2
 * on bad flags.
 */
#ifndef STRATA_AGENT_CLI_H
#define STRATA_AGENT_CLI_H

#include <stdbool.h>
#include <stdint.h>

#include "common/error.h"
#include "labels/labels.h"

/* argv[0] is "agent" (ignored). Returns the process exit code. */
int agent_cli_main(int argc, char **argv);

/* An agent_relabel_fn running lib/relabel rules (a relabel_rules *, as loaded from
 * -relabel-config): the rules see the __meta_process_* labels, and keep/drop rules exclude
 * processes. */
int agent_relabel_with_rules(void *rules, label_set *labels, bool *drop, strata_error *err);

/* Parses a Go-style duration ("1h2m3.5s", "250ms", "10s"); -1 (INVALID_ARGUMENT) on bad text. */
int agent_parse_duration(const char *text, int64_t *out_ns, strata_error *err);

/* Parses -sample-labels: a comma-separated subset of thread_id, thread_name and cpu (or "" for
 * none) into AGENT_LABEL_* bits (aggregate.h); INVALID_ARGUMENT names an unknown one. */
int agent_parse_sample_labels(const char *list, unsigned *out, strata_error *err);

#endif
