/*
 * pyroscope_ingest.h - Grafana Pyroscope's HTTP push, POST /ingest, as the WriteRaw request it
 * means: what pyroscope-go, pyroscope-rs (Python, Ruby), pyroscope-dotnet and npm's
 * @pyroscope/nodejs send.
 *
 * The request: `name=<app>{k=v,...}` (application name and labels), `from` and `until` (unix
 * seconds; milli-, micro- and nanoseconds are told apart by size), `sampleRate` (Hz, default 100),
 * `spyName`, `units` and `aggregationType` (accepted, not needed: the type comes from the name or
 * the profile), `format` and the body:
 *   - pprof: the whole body is a (gzipped or plain) pprof, or a multipart/form-data body whose
 *     `profile` part is, with an optional `sample_type_config` part (JSON: per sample type
 *     `display-name`, `units`, `aggregation`, `cumulative`, `sampled`). A `prev_profile` (the
 *     previous state of a cumulative profile, sent by pyroscope-go before it computed deltas
 *     itself) is refused: send deltas. Without `format`, a multipart body is pprof.
 *   - folded (the default for other bodies): collapsed stacks, `root;caller;leaf value` per line.
 *   - lines: one stack per line, each one sample.
 *   Other formats (jfr, trie, tree, speedscope) are refused by name; no current SDK pushes trie
 *   or tree.
 *
 * Labels, as Pyroscope stores them: `service_name` is the application name (for folded and lines
 * without the type suffix below), `pyroscope_spy` the spyName, then the name's labels (names
 * starting with "__" dropped; a `service_name` label replaces the application name). Label names
 * have '.' turned into '_' (OpenTelemetry's `service.name` becomes `service_name`, as Pyroscope
 * does); any other character outside [a-zA-Z0-9_] is refused by WriteRaw's validation.
 *
 * Profile types. folded and lines name the type by the application name's last '.' segment
 * (`app.cpu`, `app.inuse_space`, ...; see pyroscope_ingest.c's table; an unknown or missing
 * suffix means cpu and the name is kept whole). Sampled types (cpu, itimer, wall) count samples,
 * stored as nanoseconds: value x 1e9/sampleRate, with that period. A pprof keeps its own sample
 * types; __name__ comes from them: wall if one is `wall`, else the first whose name (or
 * display-name) the table knows (cpu -> process_cpu, alloc_/inuse_ -> memory, goroutine ->
 * goroutines, mutex_/contentions/delay -> mutex, block_ -> block, exception(s) -> exceptions),
 * else the first sample type's own name. A profile without time_nanos gets `from`; folded and lines
 * profiles start at `from` and last until `until` (a delta), except inuse_ types (gauges).
 *
 * The output is a WriteRawRequest with one series; WriteRaw's path then applies the validation,
 * limits, tenant rule (X-Scope-OrgID) and acknowledgement after durability of any write.
 */
#ifndef STRATA_PYROSCOPE_INGEST_H
#define STRATA_PYROSCOPE_INGEST_H

#include <stddef.h>
#include <stdint.h>

#include "common/buffer.h"
#include "common/error.h"
#include "write_raw.h"

/* One /ingest request: the decoded query parameters (NULL when absent), content type and body. */
typedef struct pyroscope_ingest_params {
    const char *name;
    const char *from;
    const char *until;
    const char *sample_rate;
    const char *spy_name;
    const char *format;
    const char *content_type;
    const uint8_t *body;
    size_t body_len;
} pyroscope_ingest_params;

/* Appends to out the WriteRawRequest the request means; INVALID_ARGUMENT (RESOURCE_EXHAUSTED for
 * a limit) with a message naming the problem otherwise. now_ns stands for a missing from/until. */
int pyroscope_ingest_to_write_raw(const pyroscope_ingest_params *params,
                                  const ingest_limits *limits, int64_t now_ns, strata_buffer *out,
                                  strata_error *err);

/* Pyroscope's label-name rule for names from its clients: each '.' becomes '_', in place. */
void pyroscope_sanitize_label_name(char *name);

#endif
