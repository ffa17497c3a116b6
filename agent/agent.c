/*
 * agent.c - the agent's main loop. See agent.h.
 */
#include "agent.h"

#include <errno.h>
#include <malloc.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "aggregate.h"
#include "common/clock.h"
#include "common/log.h"
#include "http/http.h"
#include "ksyms.h"
#include "leaf.h"
#include "metrics/metrics.h"
#include "profile_build.h"
#include "pyframes.h"
#include "push/push.h"
#include "sampler.h"
#include "symcache.h"
#include "unwinder.h"

#define COMPONENT "agent"
#define FLUSH_TIMEOUT_NS (10 * STRATA_NS_PER_SEC)

typedef struct agent_metrics {
    metrics_counter *samples;
    metrics_counter *dropped;
    metrics_counter *off_cpu_timed;
    metrics_counter *off_cpu_events;
    metrics_counter *kernel_misses;
    metrics_counter *user_misses;
    metrics_counter *push_errors;
    metrics_counter *pushes;
    metrics_counter *push_dropped[PUSH_DROP_REASONS];
    metrics_counter *address_errors[PUSH_MAX_ADDRESSES];
    metrics_counter *address_pushes[PUSH_MAX_ADDRESSES];
    metrics_gauge *queue_requests;
    metrics_gauge *queue_bytes;
    metrics_gauge *in_flight;
    metrics_gauge *processes;
    metrics_gauge *symcache_bytes;
    metrics_gauge *symcache_peak_bytes;
    metrics_counter *symcache_loads;
    metrics_counter *symcache_evictions;
    metrics_counter *unwind_dwarf;
    metrics_counter *unwind_complete;
    metrics_gauge *unwind_tables;
    metrics_gauge *unwind_rows;
    metrics_gauge *unwind_processes;
    metrics_counter *unwind_files_read;
    metrics_counter *unwind_evictions;
    metrics_counter *unwind_refused;
    metrics_counter *unwind_copies;
    metrics_counter *unwind_copies_complete;
} agent_metrics;

typedef struct agent {
    agent_options o;
    char node[256];
    agent_ksyms ksyms;
    agent_symcache *symcache;
    pprof_gzipper *gzip; /* one compressor for every profile the agent pushes */
    agent_aggregator agg;
    agent_python *python; /* Python frames (pyframes.h) */
    pusher *pusher;
    char *remote_stores; /* -remote-store, split in place at commas */
    agent_sampler *sampler;
    agent_unwinder *unwinder;                  /* NULL with -unwind-table-rows 0 */
    const struct agent_stack_copy *stack_copy; /* of the sample being added, or NULL */
    uint64_t copies_walked, copies_complete;   /* stack copies walked in user space */
    agent_kubepods *pods;                      /* NULL when not on Kubernetes */
    http_server *http;
    metrics_registry *registry;
    agent_metrics m;
    bool collector_added;
    int64_t window_start_wall;
    int64_t window_start_mono;
    int add_errors;
    char last_push_error[STRATA_ERROR_MESSAGE_MAX + 32];
} agent;

/* --- metrics ------------------------------------------------------------------------------ */

static void update_unwind_metrics(agent *a);

static metrics_counter *counter(agent *a, const char *name, const char *help, strata_error *err) {
    return metrics_counter_new(a->registry, &(metrics_opts){.name = name, .help = help}, err);
}

static metrics_gauge *gauge(agent *a, const char *name, const char *help, strata_error *err) {
    return metrics_gauge_new(a->registry, &(metrics_opts){.name = name, .help = help}, err);
}

static int register_misses(agent *a, strata_error *err) {
    static const char *const names[] = {"space"};
    metrics_counter_vec *v = metrics_counter_vec_new(
        a->registry,
        &(metrics_opts){.name = "strata_agent_symbolization_misses_total",
                        .help = "Locations pushed without a symbol, by address space.",
                        .label_names = names,
                        .n_labels = 1},
        err);
    if (v == NULL)
        return -1;
    a->m.kernel_misses = metrics_counter_vec_with(v, (const char *const[]){"kernel"});
    a->m.user_misses = metrics_counter_vec_with(v, (const char *const[]){"user"});
    return 0;
}

static int register_push_drops(agent *a, strata_error *err) {
    static const char *const names[] = {"reason"};
    metrics_counter_vec *v = metrics_counter_vec_new(
        a->registry,
        &(metrics_opts){.name = "strata_agent_push_dropped_total",
                        .help = "WriteRaw requests given up, by reason (queue_full, too_large, "
                                "rejected).",
                        .label_names = names,
                        .n_labels = 1},
        err);
    if (v == NULL)
        return -1;
    for (int r = 0; r < PUSH_DROP_REASONS; r++)
        a->m.push_dropped[r] = metrics_counter_vec_with(
            v, (const char *const[]){push_drop_reason_name((push_drop_reason)r)});
    return 0;
}

/* Per ingester address: acknowledged requests and failed attempts. */
static int register_push_addresses(agent *a, strata_error *err) {
    static const char *const names[] = {"address"};
    metrics_counter_vec *errors = metrics_counter_vec_new(
        a->registry,
        &(metrics_opts){.name = "strata_agent_push_address_errors_total",
                        .help = "Failed WriteRaw attempts, by ingester address.",
                        .label_names = names,
                        .n_labels = 1},
        err);
    if (errors == NULL)
        return -1;
    metrics_counter_vec *pushes = metrics_counter_vec_new(
        a->registry,
        &(metrics_opts){.name = "strata_agent_push_address_requests_total",
                        .help = "Acknowledged WriteRaw requests, by ingester address.",
                        .label_names = names,
                        .n_labels = 1},
        err);
    if (pushes == NULL)
        return -1;
    push_stats ps;
    push_stats_get(a->pusher, &ps);
    for (size_t i = 0; i < ps.n_addresses; i++) {
        const char *const value[] = {ps.addresses[i].address};
        a->m.address_errors[i] = metrics_counter_vec_with(errors, value);
        a->m.address_pushes[i] = metrics_counter_vec_with(pushes, value);
    }
    return 0;
}

static int register_unwind_metrics(agent *a, strata_error *err) {
    agent_metrics *m = &a->m;
    if ((m->unwind_dwarf = counter(a, "strata_agent_unwind_dwarf_samples_total",
                                   "User stacks walked in BPF with CFI unwind tables.", err)) ==
            NULL ||
        (m->unwind_complete = counter(a, "strata_agent_unwind_complete_samples_total",
                                      "Of them, walks that reached the outermost frame.", err)) ==
            NULL ||
        (m->unwind_tables = gauge(a, "strata_agent_unwind_tables",
                                  "Files whose unwind tables are loaded in the kernel.", err)) ==
            NULL ||
        (m->unwind_rows = gauge(a, "strata_agent_unwind_table_rows",
                                "Unwind-table rows in use (of -unwind-table-rows).", err)) ==
            NULL ||
        (m->unwind_processes =
             gauge(a, "strata_agent_unwind_processes",
                   "Processes whose stacks are walked with unwind tables.", err)) == NULL ||
        (m->unwind_files_read = counter(a, "strata_agent_unwind_files_read_total",
                                        "Files whose CFI was turned into unwind tables.", err)) ==
            NULL ||
        (m->unwind_evictions =
             counter(a, "strata_agent_unwind_table_evictions_total",
                     "Unwind tables no process used, freed to make room.", err)) == NULL ||
        (m->unwind_refused =
             counter(a, "strata_agent_unwind_tables_refused_total",
                     "Unwind tables that did not fit in -unwind-table-rows.", err)) == NULL ||
        (m->unwind_copies = counter(a, "strata_agent_unwind_stack_copies_total",
                                    "Ticks walked from a copy of their stack in user space (a "
                                    "process not listed yet, a library mapped since).",
                                    err)) == NULL ||
        (m->unwind_copies_complete =
             counter(a, "strata_agent_unwind_stack_copies_complete_total",
                     "Of them, walks that reached the outermost frame.", err)) == NULL)
        return -1;
    return 0;
}

static int register_metrics(agent *a, strata_error *err) {
    agent_metrics *m = &a->m;
    if ((m->samples = counter(a, "strata_agent_samples_total", "Samples aggregated.", err)) ==
            NULL ||
        (m->dropped = counter(a, "strata_agent_samples_dropped_total",
                              "Samples lost because the ring buffer was full.", err)) == NULL ||
        (m->off_cpu_timed =
             counter(a, "strata_agent_off_cpu_timed_total",
                     "Voluntary context switches timed for off-CPU profiles.", err)) == NULL ||
        (m->off_cpu_events = counter(a, "strata_agent_off_cpu_events_total",
                                     "Off-CPU records: timed threads that ran again.", err)) ==
            NULL ||
        (m->push_errors = counter(a, "strata_agent_push_errors_total", "Failed WriteRaw attempts.",
                                  err)) == NULL ||
        (m->pushes = counter(a, "strata_agent_pushes_total", "Acknowledged WriteRaw requests.",
                             err)) == NULL ||
        (m->queue_bytes = gauge(a, "strata_agent_push_queue_bytes",
                                "Encoded requests waiting to be pushed.", err)) == NULL ||
        (m->queue_requests = gauge(a, "strata_agent_push_queue_requests",
                                   "Requests waiting to be pushed (in flight included).", err)) ==
            NULL ||
        (m->in_flight = gauge(a, "strata_agent_push_in_flight_batches",
                              "WriteRaw calls waiting for an ingester's acknowledgement.", err)) ==
            NULL ||
        (m->processes = gauge(a, "strata_agent_processes", "Processes tracked.", err)) == NULL ||
        (m->symcache_bytes = gauge(a, "strata_agent_symbol_cache_bytes",
                                   "Memory held by cached symbol tables.", err)) == NULL ||
        (m->symcache_peak_bytes =
             gauge(a, "strata_agent_symbol_cache_peak_bytes",
                   "The most memory cached symbol tables held at once (bounded by the symbol "
                   "cache budget, or by the largest single table when that is larger).",
                   err)) == NULL ||
        (m->symcache_loads = counter(a, "strata_agent_symbol_cache_loads_total",
                                     "Symbol tables read from files (first use, or again "
                                     "after eviction).",
                                     err)) == NULL ||
        (m->symcache_evictions =
             counter(a, "strata_agent_symbol_cache_evictions_total",
                     "Symbol tables freed to stay within the symbol cache budget.", err)) == NULL)
        return -1;
    if (register_unwind_metrics(a, err) != 0 || register_misses(a, err) != 0 ||
        register_push_drops(a, err) != 0 || register_push_addresses(a, err) != 0)
        return -1;
    return metrics_register_process_metrics(a->registry, err);
}

/* Runs at scrape time on an HTTP thread: only thread-safe sources. */
static void collect(void *ctx) {
    agent *a = ctx;
    struct agent_counters c;
    if (a->sampler != NULL && agent_sampler_counters(a->sampler, &c, NULL) == 0) {
        metrics_counter_set(a->m.dropped, (int64_t)c.ring_full);
        metrics_counter_set(a->m.off_cpu_timed, (int64_t)c.off_cpu_timed);
        metrics_counter_set(a->m.off_cpu_events, (int64_t)c.off_cpu_events);
        metrics_counter_set(a->m.unwind_dwarf, (int64_t)c.unwind_dwarf);
        metrics_counter_set(a->m.unwind_complete, (int64_t)c.unwind_complete);
    }
    push_stats ps;
    push_stats_get(a->pusher, &ps);
    metrics_counter_set(a->m.push_errors, (int64_t)ps.errors);
    metrics_counter_set(a->m.pushes, (int64_t)ps.requests);
    for (int r = 0; r < PUSH_DROP_REASONS; r++)
        metrics_counter_set(a->m.push_dropped[r], (int64_t)ps.dropped[r]);
    for (size_t i = 0; i < ps.n_addresses; i++) {
        metrics_counter_set(a->m.address_errors[i], (int64_t)ps.addresses[i].errors);
        metrics_counter_set(a->m.address_pushes[i], (int64_t)ps.addresses[i].batches);
    }
    metrics_gauge_set(a->m.queue_requests, (int64_t)ps.queue_requests);
    metrics_gauge_set(a->m.queue_bytes, (int64_t)ps.queue_bytes);
    metrics_gauge_set(a->m.in_flight, (int64_t)ps.in_flight_batches);
}

static bool ready(void *ctx, char *reason, size_t reason_size) {
    agent *a = ctx;
    if (a->sampler != NULL)
        return true;
    snprintf(reason, reason_size, "sampler not attached yet");
    return false;
}

static int start_http(agent *a, strata_error *err) {
    if (a->o.http_address == NULL)
        return 0;
    http_server_options ho = {.bind = a->o.http_address, .metrics = a->registry};
    a->http = http_server_new(&ho, err);
    if (a->http == NULL || http_server_add_metrics(a->http, a->registry, err) != 0 ||
        http_server_add_ready(a->http, ready, a, err) != 0 || http_server_start(a->http, err) != 0)
        return -1;
    strata_log_info(COMPONENT, "http listening", "port=%u", (unsigned)http_server_port(a->http));
    return 0;
}

/* --- windows ------------------------------------------------------------------------------ */

static void on_sample(void *ctx, const struct agent_sample *s,
                      const struct agent_stack_copy *copy) {
    agent *a = ctx;
    a->stack_copy = copy; /* for fix_stack, called from within the add */
    if (agent_aggregator_add(&a->agg, s, NULL) != 0)
        a->add_errors++;
    a->stack_copy = NULL;
}

static void label_process(agent *a, agent_process *p) {
    if (p->labeled)
        return;
    agent_label_options lo = {a->node, a->o.relabel, a->o.relabel_ctx, a->pods};
    strata_error err;
    if (agent_process_labels(p->have_proc ? &p->proc : NULL, p->pid, p->comm, &lo, &p->labels,
                             &p->dropped, &err) != 0) {
        char q[600];
        strata_log_warn(COMPONENT, "cannot label process", "pid=%d err=%s", (int)p->pid,
                        strata_log_quote(err.message, q, sizeof q));
        p->dropped = true;
    }
    p->labeled = true;
}

typedef struct window_out {
    push_series *series;
    strata_buffer *pprofs;
    size_t n;
} window_out;

/* p's on-CPU or off-CPU profile (pc->off_cpu). */
static int build_one(agent *a, agent_process *p, const agent_profile_context *pc, window_out *w,
                     strata_error *err) {
    agent_profile_stats st;
    strata_buffer *buf = &w->pprofs[w->n];
    strata_buffer_init(buf);
    if (agent_profile_build(&a->agg, p, pc, buf, &st, err) != 0)
        return -1;
    metrics_counter_add(a->m.kernel_misses, (int64_t)st.kernel_misses);
    metrics_counter_add(a->m.user_misses, (int64_t)st.user_misses);
    w->series[w->n] = (push_series){&p->labels, buf->data, buf->len};
    w->n++;
    return 0;
}

static int build_window(agent *a, int64_t now_wall, int64_t now_mono, window_out *w,
                        strata_error *err) {
    agent_profile_context on = {&a->ksyms,
                                a->symcache,
                                a->window_start_wall,
                                now_mono - a->window_start_mono,
                                STRATA_NS_PER_SEC / (int64_t)a->o.frequency_hz,
                                false,
                                a->gzip,
                                a->python};
    agent_profile_context off = on;
    off.off_cpu = true;
    (void)now_wall;
    size_t cap = 2 * a->agg.n_procs + 1; /* an on-CPU and an off-CPU profile per process */
    w->series = calloc(cap, sizeof *w->series);
    w->pprofs = calloc(cap, sizeof *w->pprofs);
    if (w->series == NULL || w->pprofs == NULL)
        return strata_error_oom(err);
    for (size_t i = 0; i < a->agg.n_procs; i++) {
        agent_process *p = a->agg.procs[i];
        if (p->samples == 0)
            continue;
        label_process(a, p);
        if (p->dropped)
            continue;
        if (p->n_stacks > p->n_off_cpu && build_one(a, p, &on, w, err) != 0)
            return -1;
        if (p->n_off_cpu > 0 && build_one(a, p, &off, w, err) != 0)
            return -1;
    }
    return 0;
}

static void window_out_free(window_out *w) {
    for (size_t i = 0; w->pprofs != NULL && i < w->n; i++)
        strata_buffer_free(&w->pprofs[i]);
    free(w->pprofs);
    free(w->series);
}

static void log_push_errors(agent *a) {
    push_stats ps;
    push_stats_get(a->pusher, &ps);
    if (ps.last_error[0] != '\0' && strcmp(ps.last_error, a->last_push_error) != 0) {
        char q[600];
        strata_log_warn(COMPONENT, "push failed", "errors=%llu err=%s",
                        (unsigned long long)ps.errors,
                        strata_log_quote(ps.last_error, q, sizeof q));
        snprintf(a->last_push_error, sizeof a->last_push_error, "%s", ps.last_error);
    }
}

static void log_python(agent *a) {
    agent_python_stats ps;
    agent_python_stats_get(a->python, &ps);
    strata_log_debug(COMPONENT, "python",
                     "processes=%llu unsupported=%llu samples=%llu no_gil=%llu read_errors=%llu "
                     "code_failures=%llu publish_errors=%llu",
                     (unsigned long long)ps.processes, (unsigned long long)ps.unsupported,
                     (unsigned long long)ps.samples, (unsigned long long)ps.no_gil,
                     (unsigned long long)ps.read_errors, (unsigned long long)ps.code_failures,
                     (unsigned long long)ps.publish_errors);
}

static void finish_window(agent *a) {
    int64_t now_wall = strata_now_ns(), now_mono = strata_monotonic_ns();
    window_out w = {0};
    strata_error err;
    strata_error_clear(&err);
    if (build_window(a, now_wall, now_mono, &w, &err) != 0 ||
        (w.n > 0 && push_enqueue(a->pusher, w.series, w.n, &err) != 0)) {
        char q[600];
        strata_log_error(COMPONENT, "window lost", "err=%s",
                         strata_log_quote(err.message, q, sizeof q));
    }
    strata_log_debug(COMPONENT, "window", "processes=%zu series=%zu samples=%llu fixups=%llu",
                     a->agg.n_procs, w.n, (unsigned long long)a->agg.stats.samples,
                     (unsigned long long)a->agg.stats.fixups);
    window_out_free(&w);
    agent_aggregator_next_window(&a->agg);
    log_python(a);
    agent_python_end_window(a->python);
    agent_symcache_end_window(a->symcache);
    agent_symcache_stats cs;
    agent_symcache_stats_get(a->symcache, &cs);
    metrics_gauge_set(a->m.symcache_bytes, (int64_t)cs.bytes);
    metrics_gauge_set(a->m.symcache_peak_bytes, (int64_t)cs.peak_bytes);
    metrics_counter_set(a->m.symcache_loads, (int64_t)cs.loads);
    metrics_counter_set(a->m.symcache_evictions, (int64_t)cs.evictions);
    strata_log_debug(COMPONENT, "symbol cache", "entries=%zu bytes=%zu loads=%llu evictions=%llu",
                     cs.entries, cs.bytes, (unsigned long long)cs.loads,
                     (unsigned long long)cs.evictions);
    metrics_gauge_set(a->m.processes, (int64_t)a->agg.n_procs);
    update_unwind_metrics(a);
    log_push_errors(a);
    (void)malloc_trim(0); /* give the window's temporary memory back to the kernel */
    a->window_start_wall = now_wall;
    a->window_start_mono = now_mono;
}

/* --- set-up and the loop ------------------------------------------------------------------- */

static int apply_defaults(agent *a, const agent_options *o, strata_error *err) {
    a->o = *o;
    if (a->o.remote_store == NULL || a->o.remote_store[0] == '\0')
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "-remote-store is required");
    if (a->o.frequency_hz == 0)
        a->o.frequency_hz = AGENT_DEFAULT_FREQUENCY_HZ;
    if (a->o.frequency_hz > 1000)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "sampling frequency over 1000 Hz");
    if (a->o.window_ns == 0)
        a->o.window_ns = 10 * STRATA_NS_PER_SEC;
    if (a->o.poll_ns == 0)
        a->o.poll_ns = 250 * STRATA_NS_PER_MS;
    if (a->o.unwind_table_rows == 0)
        a->o.unwind_table_rows = AGENT_UNWIND_DEFAULT_ROWS;
    if (a->o.node != NULL)
        snprintf(a->node, sizeof a->node, "%s", a->o.node);
    else if (gethostname(a->node, sizeof a->node - 1) != 0)
        snprintf(a->node, sizeof a->node, "unknown");
    return 0;
}

static int load_kernel_symbols(agent *a) {
    strata_error err;
    if (agent_ksyms_load("/proc/kallsyms", &a->ksyms, &err) != 0) {
        char q[600];
        strata_log_warn(COMPONENT, "no kernel symbols", "err=%s",
                        strata_log_quote(err.message, q, sizeof q));
        return -1;
    }
    if (a->ksyms.count == 0)
        strata_log_warn(COMPONENT, "kernel symbols hidden", "hint=%s",
                        "\"kptr_restrict hides /proc/kallsyms addresses\"");
    return 0;
}

/* Python processes found by pyframes.c go to the sampler's python_procs maps. */
static int publish_python(void *ctx, uint32_t pid, const struct agent_py_proc *info) {
    agent *a = ctx;
    return a->sampler != NULL ? agent_sampler_set_python(a->sampler, pid, info) : -1;
}

/* Repairs a sample's user frames: a stack copy (a process's ticks before it was listed, or a
 * CFI walk that left a fresh list: unwind.h) is walked now with the tables listed since, by this
 * very add; a frame-pointer walk gets its frameless leaf's caller back. */
static bool fix_stack(void *ctx, const agent_proc *proc, const struct agent_sample *s, uint64_t *u,
                      size_t *n, size_t cap) {
    agent *a = ctx;
    if (a->stack_copy != NULL && a->unwinder != NULL) {
        uint64_t walked_frames[AGENT_MAX_FRAMES];
        bool complete;
        size_t walked =
            agent_unwinder_walk_copy(a->unwinder, s->pid, a->stack_copy, walked_frames,
                                     cap < AGENT_MAX_FRAMES ? cap : AGENT_MAX_FRAMES, &complete);
        a->copies_walked += walked > 0;
        a->copies_complete += walked > 0 && complete;
        /* the copy holds the top 16 KiB of the stack: a deeper walk BPF made stands unless the
         * copy's reached the outermost frame or went further */
        bool better = walked > 0 && (complete || !(s->flags & AGENT_SAMPLE_DWARF) || walked > *n);
        if (better) {
            memcpy(u, walked_frames, walked * sizeof *u);
            *n = walked;
            return true;
        }
    }
    /* A leaf walked with CFI has its caller; one in code without a table (Go beside a C library)
     * took a frame-pointer step, as the kernel's walk does. */
    if ((s->flags & AGENT_SAMPLE_DWARF) && *n > 0 &&
        (a->unwinder == NULL || agent_unwinder_has_table(a->unwinder, s->pid, u[0])))
        return false;
    return agent_leaf_fixup(a->symcache, proc, s, u, n, cap);
}

/* The aggregator read a process from /proc: list its unwind tables for BPF. */
static void process_seen(void *ctx, const agent_process *p) {
    agent *a = ctx;
    strata_error err;
    if (a->unwinder != NULL && agent_unwinder_add_process(a->unwinder, &p->proc, &err) < 0) {
        char q[600];
        strata_log_warn(COMPONENT, "no unwind tables for process", "pid=%d err=%s", (int)p->pid,
                        strata_log_quote(err.message, q, sizeof q));
    }
}

static void process_gone(void *ctx, pid_t pid) {
    agent *a = ctx;
    if (a->unwinder != NULL)
        agent_unwinder_remove_process(a->unwinder, pid);
}

/* Tables for DWARF unwinding, written into the sampler's maps (unwinder.h). */
static int start_unwinder(agent *a, strata_error *err) {
    if (a->o.no_dwarf_unwind)
        return 0;
    agent_unwinder_options uo = {.max_rows = a->o.unwind_table_rows};
    agent_sampler_unwind_sink(a->sampler, &uo.sink);
    if ((a->unwinder = agent_unwinder_new(&uo, err)) == NULL)
        return -1;
    a->agg.process_seen = process_seen;
    a->agg.process_gone = process_gone;
    a->agg.process_ctx = a;
    return 0;
}

static void update_unwind_metrics(agent *a) {
    if (a->unwinder == NULL)
        return;
    agent_unwinder_end_window(a->unwinder);
    agent_unwinder_stats us;
    agent_unwinder_stats_get(a->unwinder, &us);
    metrics_gauge_set(a->m.unwind_tables, (int64_t)us.tables);
    metrics_gauge_set(a->m.unwind_rows, (int64_t)us.rows_used);
    metrics_gauge_set(a->m.unwind_processes, (int64_t)us.processes);
    metrics_counter_set(a->m.unwind_files_read, (int64_t)us.files_read);
    metrics_counter_set(a->m.unwind_evictions, (int64_t)us.tables_evicted);
    metrics_counter_set(a->m.unwind_refused, (int64_t)us.tables_refused);
    metrics_counter_set(a->m.unwind_copies, (int64_t)a->copies_walked);
    metrics_counter_set(a->m.unwind_copies_complete, (int64_t)a->copies_complete);
}

/* Kubernetes labels: with -kubeconfig, or in a cluster (KUBERNETES_SERVICE_HOST set). A kubeconfig
 * that does not work is an error; in-cluster trouble only costs the labels. */
static int start_kubepods(agent *a, strata_error *err) {
    const char *host = getenv("KUBERNETES_SERVICE_HOST");
    if (a->o.kubeconfig == NULL && (host == NULL || host[0] == '\0'))
        return 0;
    agent_kubepods_options ko = {.node = a->node, .kubeconfig = a->o.kubeconfig};
    strata_error kerr;
    char q[600];
    if ((a->pods = agent_kubepods_new(&ko, &kerr)) == NULL) {
        if (a->o.kubeconfig != NULL) {
            *err = kerr;
            return strata_error_wrap(err, "-kubeconfig");
        }
        strata_log_warn(COMPONENT, "no Kubernetes labels", "err=%s",
                        strata_log_quote(kerr.message, q, sizeof q));
        return 0;
    }
    /* Processes are labelled once: give the node's pods a moment to arrive first. */
    if (agent_kubepods_wait_synced(a->pods, 5000)) {
        strata_log_info(COMPONENT, "watching the node's pods", "node=%s", a->node);
    } else {
        agent_kubepods_last_error(a->pods, kerr.message, sizeof kerr.message);
        strata_log_warn(COMPONENT, "the node's pods are not listed yet", "node=%s err=%s", a->node,
                        strata_log_quote(kerr.message, q, sizeof q));
    }
    return 0;
}

/* -remote-store takes one address or several, comma-separated; requests are balanced over them. */
static int start_pusher(agent *a, strata_error *err) {
    const char *addresses[PUSH_MAX_ADDRESSES];
    size_t n = 0;
    if ((a->remote_stores = strdup(a->o.remote_store)) == NULL)
        return strata_error_oom(err);
    for (char *save = NULL, *t = strtok_r(a->remote_stores, ",", &save); t != NULL;
         t = strtok_r(NULL, ",", &save)) {
        if (n == PUSH_MAX_ADDRESSES)
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "-remote-store takes at most %d addresses", PUSH_MAX_ADDRESSES);
        addresses[n++] = t;
    }
    push_options po = {.addresses = addresses,
                       .n_addresses = n,
                       .tenant = a->o.tenant,
                       .max_queue_bytes = a->o.max_queue_bytes,
                       .max_request_bytes = a->o.max_request_bytes,
                       .max_in_flight = a->o.max_in_flight,
                       .channel = &a->o.push_channel};
    a->pusher = pusher_new(&po, err);
    return a->pusher != NULL ? 0 : -1;
}

static int set_up(agent *a, strata_error *err) {
    if (agent_sampler_check_requirements(err) != 0)
        return -1;
    (void)load_kernel_symbols(a);
    agent_symcache_options so = {.debug_dir = a->o.debug_dir, .max_bytes = a->o.symbol_cache_bytes};
    a->symcache = agent_symcache_new(&so, err);
    if (a->symcache == NULL || pprof_gzipper_new(AGENT_GZIP_LEVEL, &a->gzip, err) != 0 ||
        agent_aggregator_init(&a->agg, NULL, 0, err) != 0)
        return -1;
    a->agg.fixup = fix_stack;
    a->agg.sample_labels = a->o.sample_labels;
    a->agg.off_cpu_rate = a->o.off_cpu_threshold;
    a->agg.fixup_ctx = a;
    agent_python_options po = {.publish = publish_python, .publish_ctx = a};
    if ((a->python = agent_python_new(&po, err)) == NULL)
        return -1;
    a->agg.python = agent_python_merge;
    a->agg.python_ctx = a->python;
    if (start_pusher(a, err) != 0 || start_kubepods(a, err) != 0)
        return -1;
    a->registry = metrics_default_registry();
    if (a->registry == NULL)
        return strata_error_oom(err);
    if (register_metrics(a, err) != 0 ||
        metrics_registry_add_collector(a->registry, collect, a, err) != 0)
        return -1;
    a->collector_added = true;
    if (start_http(a, err) != 0)
        return -1;
    agent_sampler_options sopt = {.frequency_hz = a->o.frequency_hz,
                                  .off_cpu_rate = a->o.off_cpu_threshold,
                                  .unwind_rows = a->o.no_dwarf_unwind ? 0 : a->o.unwind_table_rows,
                                  .on_sample = on_sample,
                                  .ctx = a};
    a->sampler = agent_sampler_open(&sopt, err);
    return a->sampler != NULL ? start_unwinder(a, err) : -1;
}

static void tear_down(agent *a) {
    if (a->http != NULL)
        http_server_free(a->http);
    if (a->collector_added)
        metrics_registry_remove_collector(a->registry, collect, a);
    agent_sampler_close(a->sampler);
    a->sampler = NULL;
    agent_unwinder_free(a->unwinder);
    a->unwinder = NULL;
    pusher_free(a->pusher);
    free(a->remote_stores);
    agent_kubepods_free(a->pods);
    agent_aggregator_free(&a->agg);
    agent_python_free(a->python);
    agent_symcache_free(a->symcache);
    pprof_gzipper_free(a->gzip);
    agent_ksyms_free(&a->ksyms);
}

static void sleep_ns(int64_t ns) {
    struct timespec ts = {(time_t)(ns / STRATA_NS_PER_SEC), (long)(ns % STRATA_NS_PER_SEC)};
    (void)nanosleep(&ts, NULL); /* a signal cuts it short, which is what we want */
}

static void poll_once(agent *a) {
    strata_error err;
    if (agent_sampler_poll(a->sampler, &err) < 0) {
        char q[600];
        strata_log_error(COMPONENT, "poll failed", "err=%s",
                         strata_log_quote(err.message, q, sizeof q));
    }
    metrics_counter_set(a->m.samples, (int64_t)a->agg.stats.samples);
}

/* Sleeps until the next poll, handling at once the samples that asked for a wake-up (a new
 * process: listing its unwind tables now saves its next samples from frame pointers). */
static void wait_for_poll(agent *a, int64_t due, volatile sig_atomic_t *stop) {
    for (int64_t now = strata_monotonic_ns(); now < due && !*stop; now = strata_monotonic_ns()) {
        strata_error err;
        int ms = (int)((due - now + STRATA_NS_PER_MS - 1) / STRATA_NS_PER_MS);
        if (agent_sampler_wait(a->sampler, ms, &err) < 0) {
            sleep_ns(due - now);
            return;
        }
    }
}

static void run_loop(agent *a, volatile sig_atomic_t *stop) {
    int64_t started = strata_monotonic_ns();
    while (!*stop && (a->o.run_for_ns == 0 || strata_monotonic_ns() - started < a->o.run_for_ns)) {
        wait_for_poll(a, strata_monotonic_ns() + a->o.poll_ns, stop);
        poll_once(a);
        if (strata_monotonic_ns() - a->window_start_mono >= a->o.window_ns)
            finish_window(a);
    }
    poll_once(a);
    finish_window(a);
}

static void log_started(agent *a, int64_t startup_cpu_ns) {
    strata_log_info(COMPONENT, "agent started",
                    "node=%s cpus=%u frequency_hz=%u window_ms=%lld ring_bytes=%zu "
                    "kernel_symbols=%zu startup_cpu_ms=%.1f remote_store=%s",
                    a->node, agent_sampler_cpu_count(a->sampler), a->o.frequency_hz,
                    (long long)(a->o.window_ns / STRATA_NS_PER_MS),
                    agent_sampler_ring_bytes(a->sampler), a->ksyms.count,
                    (double)startup_cpu_ns / 1e6, a->o.remote_store);
}

static void log_stopped(agent *a) {
    struct agent_counters c;
    memset(&c, 0, sizeof c);
    (void)agent_sampler_counters(a->sampler, &c, NULL);
    push_stats ps;
    push_stats_get(a->pusher, &ps);
    uint64_t dropped = 0;
    for (int r = 0; r < PUSH_DROP_REASONS; r++)
        dropped += ps.dropped[r];
    strata_log_info(COMPONENT, "agent stopped",
                    "samples=%llu ring_full=%llu self=%llu pushes=%llu push_errors=%llu "
                    "dropped=%llu cpu_ms=%.1f",
                    (unsigned long long)c.samples, (unsigned long long)c.ring_full,
                    (unsigned long long)c.skipped_self, (unsigned long long)ps.requests,
                    (unsigned long long)ps.errors, (unsigned long long)dropped,
                    (double)strata_process_cpu_ns() / 1e6);
}

int agent_run(const agent_options *options, volatile sig_atomic_t *stop, strata_error *err) {
    agent *a = calloc(1, sizeof *a);
    if (a == NULL)
        return strata_error_oom(err);
    int rc = -1;
    /* A fixed mmap threshold: large temporary buffers (kallsyms text, symbol tables being built)
     * are unmapped when freed instead of raising glibc's threshold and staying in the heap. */
    (void)mallopt(M_MMAP_THRESHOLD, 128 * 1024);
    if (apply_defaults(a, options, err) != 0 || set_up(a, err) != 0)
        goto out;
    (void)malloc_trim(0); /* loading parsed the kernel's BTF and kallsyms: return the slack */
    a->window_start_wall = strata_now_ns();
    a->window_start_mono = strata_monotonic_ns();
    log_started(a, strata_process_cpu_ns());
    run_loop(a, stop);
    if (push_flush(a->pusher, strata_monotonic_ns() + FLUSH_TIMEOUT_NS) != 0)
        strata_log_warn(COMPONENT, "exiting with unpushed profiles", "%s", "");
    log_push_errors(a);
    log_stopped(a);
    rc = 0;
out:
    tear_down(a);
    free(a);
    return rc;
}
