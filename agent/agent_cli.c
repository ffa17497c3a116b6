/*
 * agent_cli.c - flag parsing and signal handling for `strata agent`. See agent_cli.h.
 */
#include "agent_cli.h"
#include "config/config.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent.h"
#include "aggregate.h"
#include "common/clock.h"
#include "common/log.h"
#include "push/push.h"
#include "relabel/relabel.h"

#define DEFAULT_HTTP_ADDRESS ":7072"

static volatile sig_atomic_t stop_requested;

static void on_signal(int sig) {
    (void)sig;
    stop_requested = 1;
}

int agent_parse_duration(const char *text, int64_t *out_ns, strata_error *err) {
    /* One duration syntax across Strata: the config module's (Prometheus / Go style). */
    if (!config_parse_duration(text, out_ns))
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "bad duration \"%s\": use e.g. 10s, 250ms or 1m30s", text);
    return 0;
}

static bool flag_is(const char *arg, const char *name) {
    if (arg[0] != '-')
        return false;
    arg += arg[1] == '-' ? 2 : 1;
    return strcmp(arg, name) == 0;
}

static int parse_size(const char *text, size_t *out, strata_error *err) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (end == text || *end != '\0' || errno != 0 || text[0] == '-')
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "bad number \"%s\"", text);
    *out = (size_t)v;
    return 0;
}

int agent_parse_sample_labels(const char *list, unsigned *out, strata_error *err) {
    static const struct {
        const char *name;
        unsigned bit;
    } known[] = {{"thread_id", AGENT_LABEL_THREAD_ID},
                 {"thread_name", AGENT_LABEL_THREAD_NAME},
                 {"cpu", AGENT_LABEL_CPU}};
    unsigned bits = 0;
    for (const char *p = list; *p != '\0';) {
        size_t len = strcspn(p, ",");
        bool found = false;
        for (size_t i = 0; i < sizeof known / sizeof known[0] && !found; i++)
            if (strlen(known[i].name) == len && strncmp(known[i].name, p, len) == 0) {
                bits |= known[i].bit;
                found = true;
            }
        if (!found && len > 0)
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "-sample-labels: unknown label \"%.*s\" (thread_id, "
                                    "thread_name, cpu)",
                                    (int)(len > 32 ? 32 : len), p);
        p += len;
        if (*p == ',')
            p++;
    }
    *out = bits;
    return 0;
}

static void usage(FILE *out) {
    fprintf(out,
            "usage: strata agent -remote-store HOST:PORT [flags]\n"
            "\n"
            "Profiles every process on this node with eBPF (on-CPU, user and kernel stacks) and\n"
            "pushes one pprof per process per window through WriteRaw. Needs root (CAP_BPF and\n"
            "CAP_PERFMON) and kernel BTF.\n"
            "\n"
            "  -remote-store HOST:PORT     ingester to push to (required); several, comma-\n"
            "                              separated, are balanced with failover\n"
            "  -remote-store-tls BOOL      push over TLS (with the system CAs unless\n"
            "                              -remote-store-ca-file says otherwise)\n"
            "  -remote-store-ca-file FILE  PEM CAs to verify the ingesters with (TLS)\n"
            "  -remote-store-cert-file FILE, -remote-store-key-file FILE\n"
            "                              client certificate and key (mutual TLS)\n"
            "  -remote-store-server-name NAME\n"
            "                              name to verify the ingesters' certificate against\n"
            "  -bearer-token-file FILE     send this file's token as \"authorization: Bearer\"\n"
            "  -relabel-config FILE        YAML with relabel_configs: (Prometheus relabeling of\n"
            "                              __meta_process_* labels; drop/keep select processes)\n"
            "  -node NAME                  node label (default: hostname)\n"
            "  -tenant T                   tenant (x-scope-orgid)\n"
            "  -sampling-frequency HZ      samples per second per CPU (default 19)\n"
            "  -window DURATION            profile length (default 10s)\n"
            "  -http-address HOST:PORT     /metrics and /ready (default :7072; \"\" = off)\n"
            "  -debug-dir DIR              debug files root (default /usr/lib/debug)\n"
            "  -kubeconfig FILE            pod labels from this cluster (default: in-cluster\n"
            "                              when KUBERNETES_SERVICE_HOST is set)\n"
            "  -push-queue-bytes N         memory for unpushed profiles (default 16 MiB)\n"
            "  -push-max-in-flight N       WriteRaw calls in flight per ingester (default 4,\n"
            "                              at most 64)\n"
            "  -push-max-request-bytes N   windows ready at once ride in one WriteRaw up to\n"
            "                              this size (default 3 MiB)\n"
            "  -symbol-cache-bytes N       memory for symbol tables (default 6 MiB)\n"
            "  -unwind-table-rows N        rows of CFI unwind tables in the kernel, 16 bytes\n"
            "                              each (default 2097152; 0: frame pointers only)\n"
            "  -sample-labels LIST         per-sample pprof labels, any of thread_id,\n"
            "                              thread_name, cpu (default none: each multiplies\n"
            "                              the stacks a profile holds)\n"
            "  -off-cpu-threshold P        off-CPU profiles: the probability (0..1) that a\n"
            "                              thread's blocking is timed (as Parca's and the\n"
            "                              OpenTelemetry agents' flag; default 0 = off;\n"
            "                              Linux 5.18 or later)\n"
            "  -duration DURATION          stop after this long (default: run until signalled)\n"
            "  -log-level LEVEL            debug, info, warn or error\n");
}

int agent_relabel_with_rules(void *rules, label_set *labels, bool *drop, strata_error *err) {
    bool keep = true;
    if (relabel_apply(rules, labels, &keep, err) != 0)
        return -1;
    *drop = !keep;
    return 0;
}

static int load_relabel_config(agent_options *o, const char *path, strata_error *err) {
    relabel_rules *rules = NULL;
    if (relabel_rules_load_file(path, &rules, err) != 0)
        return -1;
    relabel_rules_free(o->relabel_ctx); /* the flag given twice: the last one wins */
    o->relabel = agent_relabel_with_rules;
    o->relabel_ctx = rules;
    return 0;
}

/* -unwind-table-rows: 0 turns DWARF unwinding off; at most 2^26 rows (1 GiB of kernel memory). */
static int parse_unwind_rows(const char *value, agent_options *o, strata_error *err) {
    size_t v = 0;
    if (parse_size(value, &v, err) != 0 || v > ((size_t)1 << 26))
        return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                "-unwind-table-rows wants 0..67108864, got \"%s\"", value);
    o->no_dwarf_unwind = v == 0;
    o->unwind_table_rows = (uint32_t)v;
    return 0;
}

static int set_flag(agent_options *o, const char *name, const char *value, strata_error *err) {
    int64_t hz;
    if (strcmp(name, "remote-store") == 0)
        o->remote_store = value;
    else if (strcmp(name, "remote-store-tls") == 0) {
        if (strcmp(value, "true") != 0 && strcmp(value, "false") != 0)
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "-remote-store-tls wants true or false, got \"%s\"", value);
        o->push_channel.tls = strcmp(value, "true") == 0;
    } else if (strcmp(name, "remote-store-ca-file") == 0)
        o->push_channel.tls_ca_file = value;
    else if (strcmp(name, "remote-store-cert-file") == 0)
        o->push_channel.tls_cert_file = value;
    else if (strcmp(name, "remote-store-key-file") == 0)
        o->push_channel.tls_key_file = value;
    else if (strcmp(name, "remote-store-server-name") == 0)
        o->push_channel.tls_server_name = value;
    else if (strcmp(name, "bearer-token-file") == 0)
        o->push_channel.bearer_token_file = value;
    else if (strcmp(name, "node") == 0)
        o->node = value;
    else if (strcmp(name, "tenant") == 0)
        o->tenant = value;
    else if (strcmp(name, "http-address") == 0)
        o->http_address = value[0] != '\0' ? value : NULL;
    else if (strcmp(name, "relabel-config") == 0)
        return load_relabel_config(o, value, err);
    else if (strcmp(name, "debug-dir") == 0)
        o->debug_dir = value;
    else if (strcmp(name, "kubeconfig") == 0)
        o->kubeconfig = value;
    else if (strcmp(name, "window") == 0)
        return agent_parse_duration(value, &o->window_ns, err);
    else if (strcmp(name, "duration") == 0)
        return agent_parse_duration(value, &o->run_for_ns, err);
    else if (strcmp(name, "push-queue-bytes") == 0)
        return parse_size(value, &o->max_queue_bytes, err);
    else if (strcmp(name, "push-max-request-bytes") == 0)
        return parse_size(value, &o->max_request_bytes, err);
    else if (strcmp(name, "push-max-in-flight") == 0) {
        size_t v = 0;
        if (parse_size(value, &v, err) != 0 || v == 0 || v > PUSH_MAX_IN_FLIGHT)
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "-push-max-in-flight wants 1..%d, got \"%s\"",
                                    PUSH_MAX_IN_FLIGHT, value);
        o->max_in_flight = (unsigned)v;
    } else if (strcmp(name, "unwind-table-rows") == 0) {
        return parse_unwind_rows(value, o, err);
    } else if (strcmp(name, "symbol-cache-bytes") == 0)
        return parse_size(value, &o->symbol_cache_bytes, err);
    else if (strcmp(name, "sample-labels") == 0)
        return agent_parse_sample_labels(value, &o->sample_labels, err);
    else if (strcmp(name, "off-cpu-threshold") == 0) {
        char *end = NULL;
        errno = 0;
        double p = strtod(value, &end);
        if (end == value || *end != '\0' || errno != 0 || !(p >= 0 && p <= 1))
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "-off-cpu-threshold wants a probability 0..1, got \"%s\"",
                                    value);
        o->off_cpu_threshold = p;
    } else if (strcmp(name, "sampling-frequency") == 0) {
        size_t v = 0;
        if (parse_size(value, &v, err) != 0 || v == 0 || v > 1000)
            return strata_error_set(err, STRATA_INVALID_ARGUMENT,
                                    "-sampling-frequency wants 1..1000, got \"%s\"", value);
        hz = (int64_t)v;
        o->frequency_hz = (unsigned)hz;
    } else if (strcmp(name, "log-level") == 0) {
        strata_log_level level;
        if (strata_log_parse_level(value, &level) != 0)
            return strata_error_set(err, STRATA_INVALID_ARGUMENT, "bad -log-level \"%s\"", value);
        strata_log_set_level(level);
    } else
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "unknown flag -%s", name);
    return 0;
}

static int parse_args(int argc, char **argv, agent_options *o, bool *help, strata_error *err) {
    memset(o, 0, sizeof *o);
    o->http_address = DEFAULT_HTTP_ADDRESS;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (flag_is(arg, "h") || flag_is(arg, "help")) {
            *help = true;
            return 0;
        }
        if (arg[0] != '-' || arg[1] == '\0')
            return strata_error_set(err, STRATA_INVALID_ARGUMENT, "unexpected argument \"%s\"",
                                    arg);
        const char *name = arg + (arg[1] == '-' ? 2 : 1);
        const char *eq = strchr(name, '=');
        char flag[64];
        const char *value;
        if (eq != NULL) {
            snprintf(flag, sizeof flag, "%.*s", (int)(eq - name), name);
            value = eq + 1;
        } else {
            if (i + 1 >= argc)
                return strata_error_set(err, STRATA_INVALID_ARGUMENT, "%s needs a value", arg);
            snprintf(flag, sizeof flag, "%s", name);
            value = argv[++i];
        }
        if (set_flag(o, flag, value, err) != 0)
            return -1;
    }
    if (o->remote_store == NULL)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "-remote-store is required");
    return 0;
}

static void install_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

int agent_cli_main(int argc, char **argv) {
    agent_options o;
    bool help = false;
    strata_error err;
    strata_error_clear(&err);
    int rc = 0;
    if (parse_args(argc, argv, &o, &help, &err) != 0) {
        fprintf(stderr, "strata agent: %s\n\n", err.message);
        usage(stderr);
        rc = 2;
    } else if (help) {
        usage(stdout);
    } else {
        install_signals();
        if (agent_run(&o, &stop_requested, &err) != 0) {
            fprintf(stderr, "strata agent: %s: %s\n", strata_status_name(err.code), err.message);
            rc = 1;
        }
    }
    relabel_rules_free(o.relabel_ctx);
    return rc;
}
