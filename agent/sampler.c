/*
 * sampler.c - loader and ring-buffer consumer for bpf/oncpu.bpf.c. See sampler.h.
 */
#include "sampler.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <linux/capability.h>
#include <linux/perf_event.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/log.h"
#include "unwinder.h"
#include "offcpu.skel.h"
#include "oncpu.skel.h"

#define MAX_CPUS 1024
#define MIN_RING_BYTES (256u * 1024u)

struct agent_sampler {
    struct oncpu_bpf *skel;
    struct ring_buffer *ring;
    int *event_fds;
    struct bpf_link **links;
    struct offcpu_bpf *off; /* off-CPU, when on */
    struct bpf_link *off_link;
    struct bpf_link *exec_link, *exit_link; /* drop a process's unwind list (unwind.bpf.h) */
    unsigned n_events;
    size_t ring_bytes;
    agent_sample_fn on_sample;
    void *ctx;
};

static int libbpf_log(enum libbpf_print_level level, const char *fmt, va_list args) {
    if (level == LIBBPF_DEBUG)
        return 0;
    char line[512];
    int n = vsnprintf(line, sizeof line, fmt, args);
    if (n > 0 && line[strlen(line) - 1] == '\n')
        line[strlen(line) - 1] = '\0';
    char quoted[600];
    strata_log_debug("agent", "libbpf", "detail=%s", strata_log_quote(line, quoted, sizeof quoted));
    return n;
}

static long perf_event_open(struct perf_event_attr *attr, int cpu) {
    return syscall(SYS_perf_event_open, attr, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC);
}

static void cpu_clock_attr(struct perf_event_attr *attr, unsigned hz) {
    memset(attr, 0, sizeof *attr);
    attr->size = sizeof *attr;
    attr->type = PERF_TYPE_SOFTWARE;
    attr->config = PERF_COUNT_SW_CPU_CLOCK;
    attr->freq = 1;
    attr->sample_freq = hz;
}

static bool has_capability(const struct __user_cap_data_struct *data, int cap) {
    return (data[cap / 32].effective & (1u << (cap % 32))) != 0;
}

static int check_capabilities(strata_error *err) {
    struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];
    memset(data, 0, sizeof data);
    if (syscall(SYS_capget, &header, data) != 0)
        return strata_error_set(err, STRATA_INTERNAL, "capget: %s", strerror(errno));
    if (has_capability(data, CAP_SYS_ADMIN))
        return 0;
    bool bpf = has_capability(data, CAP_BPF), perfmon = has_capability(data, CAP_PERFMON);
    if (bpf && perfmon)
        return 0;
    return strata_error_set(err, STRATA_PERMISSION_DENIED,
                            "missing %s%s%s: the agent needs CAP_BPF and CAP_PERFMON (or "
                            "CAP_SYS_ADMIN); run it as root",
                            bpf ? "" : "CAP_BPF", !bpf && !perfmon ? " and " : "",
                            perfmon ? "" : "CAP_PERFMON");
}

static int check_perf_events(strata_error *err) {
    struct perf_event_attr attr;
    cpu_clock_attr(&attr, AGENT_DEFAULT_FREQUENCY_HZ);
    attr.disabled = 1;
    long fd = perf_event_open(&attr, 0);
    if (fd >= 0) {
        close((int)fd);
        return 0;
    }
    int e = errno;
    if (e == EACCES || e == EPERM)
        return strata_error_set(err, STRATA_PERMISSION_DENIED,
                                "perf events denied (%s): run as root or lower "
                                "/proc/sys/kernel/perf_event_paranoid",
                                strerror(e));
    return strata_error_set(err, STRATA_FAILED_PRECONDITION,
                            "perf events unavailable (software CPU clock: %s): the kernel needs "
                            "CONFIG_PERF_EVENTS",
                            strerror(e));
}

int agent_sampler_check_requirements(strata_error *err) {
    if (access("/sys/kernel/btf/vmlinux", R_OK) != 0)
        return strata_error_set(err, STRATA_FAILED_PRECONDITION,
                                "kernel BTF missing (/sys/kernel/btf/vmlinux: %s): the kernel "
                                "needs CONFIG_DEBUG_INFO_BTF=y",
                                strerror(errno));
    if (check_capabilities(err) != 0)
        return -1;
    return check_perf_events(err);
}

static int parse_cpu_range(const char *tok, unsigned *lo, unsigned *hi) {
    char *end;
    errno = 0;
    unsigned long a = strtoul(tok, &end, 10), b = a;
    if (end == tok || errno != 0)
        return -1;
    if (*end == '-') {
        const char *second = end + 1;
        b = strtoul(second, &end, 10);
        if (end == second || errno != 0 || b < a)
            return -1;
    }
    if (*end != '\0' || b >= MAX_CPUS * 64ul)
        return -1;
    *lo = (unsigned)a;
    *hi = (unsigned)b;
    return 0;
}

int agent_parse_cpu_list(const char *text, uint8_t *bitmap, unsigned max_cpus, strata_error *err) {
    char copy[4096];
    size_t len = strcspn(text, "\n");
    if (len == 0 || len >= sizeof copy)
        return strata_error_set(err, STRATA_INVALID_ARGUMENT, "bad CPU list \"%.*s\"", (int)len,
                                text);
    memcpy(copy, text, len);
    copy[len] = '\0';
    memset(bitmap, 0, (max_cpus + 7) / 8);
    int count = 0;
    char *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        unsigned lo, hi;
        if (parse_cpu_range(tok, &lo, &hi) != 0)
            return strata_error_set(err, STRATA_INVALID_ARGUMENT, "bad CPU list entry \"%s\"", tok);
        for (unsigned c = lo; c <= hi && c < max_cpus; c++)
            if (!(bitmap[c / 8] & (1u << (c % 8)))) {
                bitmap[c / 8] |= (uint8_t)(1u << (c % 8));
                count++;
            }
    }
    return count;
}

static int read_online_cpus(uint8_t *bitmap, strata_error *err) {
    FILE *f = fopen("/sys/devices/system/cpu/online", "r");
    if (f == NULL)
        return strata_error_set(err, STRATA_FAILED_PRECONDITION,
                                "cannot read /sys/devices/system/cpu/online: %s", strerror(errno));
    char line[4096];
    bool ok = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    if (!ok)
        return strata_error_set(err, STRATA_FAILED_PRECONDITION,
                                "empty /sys/devices/system/cpu/online");
    return agent_parse_cpu_list(line, bitmap, MAX_CPUS, err);
}

/* Off-CPU records have a ring of their own, so a burst of them never crowds out CPU ticks. */
#define OFF_CPU_RECORDS_PER_CPU_SECOND 256

/* Room for this many stack copies (new processes' first ticks) beside two seconds of samples. */
#define RING_STACK_COPIES 32

static size_t ring_size_for(uint64_t per_cpu_second, unsigned n_cpus, bool copies) {
    uint64_t need = per_cpu_second * n_cpus * sizeof(struct agent_sample) * 2;
    if (copies)
        need += RING_STACK_COPIES * (sizeof(struct agent_sample) + sizeof(struct agent_stack_copy));
    size_t size = MIN_RING_BYTES;
    while (size < need && size < ((size_t)1 << 30))
        size <<= 1;
    return size;
}

static int handle_record(void *ctx, void *data, size_t size) {
    agent_sampler *s = ctx;
    if (size < sizeof(struct agent_sample))
        return 0;
    const struct agent_sample *sample = data;
    const struct agent_stack_copy *copy = NULL;
    if ((sample->flags & AGENT_SAMPLE_STACK_COPY) &&
        size >= sizeof(struct agent_sample) + sizeof(struct agent_stack_copy))
        copy = (const struct agent_stack_copy *)((const char *)data + sizeof(struct agent_sample));
    s->on_sample(s->ctx, sample, copy);
    return 0;
}

/* With DWARF unwinding on, an exec or an exit drops the process's list in BPF. */
static int attach_unwind_hooks(agent_sampler *s, const agent_sampler_options *o,
                               strata_error *err) {
#if defined(__x86_64__)
    if (o->unwind_rows == 0)
        return 0;
    s->exec_link = bpf_program__attach(s->skel->progs.unwind_exec);
    s->exit_link = bpf_program__attach(s->skel->progs.unwind_exit);
    if (s->exec_link == NULL || s->exit_link == NULL)
        return strata_error_set(err, STRATA_FAILED_PRECONDITION,
                                "cannot attach to sched_process_exec/exit: %s", strerror(errno));
#else
    (void)s;
    (void)o;
    (void)err;
#endif
    return 0;
}

static int load_program(agent_sampler *s, const agent_sampler_options *o, unsigned n_cpus,
                        strata_error *err) {
    s->skel = oncpu_bpf__open();
    if (s->skel == NULL)
        return strata_error_set(err, STRATA_INTERNAL, "cannot open the BPF object: %s",
                                strerror(errno));
    s->skel->rodata->agent_pid = (__u32)(o->self_pid != 0 ? o->self_pid : getpid());
    s->ring_bytes = ring_size_for(o->frequency_hz, n_cpus, o->unwind_rows > 0);
    s->skel->rodata->unwind_tables_on = o->unwind_rows > 0;
    int rc = bpf_map__set_max_entries(s->skel->maps.samples, (__u32)s->ring_bytes);
    if (rc == 0)
        rc = bpf_map__set_max_entries(s->skel->maps.unwind_rows,
                                      o->unwind_rows > 0 ? o->unwind_rows : 1);
    if (rc != 0)
        return strata_error_set(err, STRATA_INTERNAL, "cannot size the ring buffer: %s",
                                strerror(-rc));
    rc = oncpu_bpf__load(s->skel);
    if (rc != 0)
        return strata_error_set(err, STRATA_FAILED_PRECONDITION,
                                "cannot load the BPF program: %s (the kernel needs BPF ring "
                                "buffers and bpf_get_stack, 5.15 or later)",
                                strerror(-rc));
    s->ring = ring_buffer__new(bpf_map__fd(s->skel->maps.samples), handle_record, s, NULL);
    if (s->ring == NULL)
        return strata_error_set(err, STRATA_INTERNAL, "cannot map the ring buffer: %s",
                                strerror(errno));
    return attach_unwind_hooks(s, o, err);
}

static int attach_cpu(agent_sampler *s, unsigned hz, unsigned cpu, strata_error *err) {
    struct perf_event_attr attr;
    cpu_clock_attr(&attr, hz);
    long fd = perf_event_open(&attr, (int)cpu);
    if (fd < 0) {
        if (errno == ENODEV)
            return 0; /* went offline meanwhile */
        return strata_error_set(err, STRATA_FAILED_PRECONDITION, "perf_event_open on CPU %u: %s",
                                cpu, strerror(errno));
    }
    struct bpf_link *link = bpf_program__attach_perf_event(s->skel->progs.oncpu_sample, (int)fd);
    if (link == NULL) {
        int e = errno;
        close((int)fd);
        return strata_error_set(err, STRATA_FAILED_PRECONDITION,
                                "cannot attach the BPF program to CPU %u: %s", cpu, strerror(e));
    }
    s->event_fds[s->n_events] = (int)fd;
    s->links[s->n_events] = link;
    s->n_events++;
    return 0;
}

/* Loads bpf/offcpu.bpf.c, adds its ring to the poll and attaches it. */
static int load_off_cpu(agent_sampler *s, const agent_sampler_options *o, unsigned n_cpus,
                        strata_error *err) {
    s->off = offcpu_bpf__open();
    if (s->off == NULL)
        return strata_error_set(err, STRATA_INTERNAL, "cannot open the off-CPU BPF object: %s",
                                strerror(errno));
    s->off->rodata->agent_pid = (__u32)(o->self_pid != 0 ? o->self_pid : getpid());
    double threshold = o->off_cpu_rate * AGENT_OFF_CPU_SCALE;
    s->off->rodata->offcpu_threshold =
        threshold >= (double)UINT32_MAX ? UINT32_MAX : (__u32)(threshold < 1 ? 1 : threshold);
    size_t ring = ring_size_for(OFF_CPU_RECORDS_PER_CPU_SECOND, n_cpus, false);
    int rc = bpf_map__set_max_entries(s->off->maps.samples, (__u32)ring);
    if (rc == 0 && o->off_cpu_pending > 0)
        rc = bpf_map__set_max_entries(s->off->maps.pending, o->off_cpu_pending);
    if (rc == 0) /* one row array and one set of process lists for both objects */
        rc = bpf_map__reuse_fd(s->off->maps.unwind_rows, bpf_map__fd(s->skel->maps.unwind_rows));
    if (rc == 0)
        rc = bpf_map__reuse_fd(s->off->maps.unwind_procs, bpf_map__fd(s->skel->maps.unwind_procs));
    if (rc == 0)
        rc = bpf_map__reuse_fd(s->off->maps.unwind_seen, bpf_map__fd(s->skel->maps.unwind_seen));
    if (rc != 0)
        return strata_error_set(err, STRATA_INTERNAL, "cannot set up the off-CPU maps: %s",
                                strerror(-rc));
    rc = offcpu_bpf__load(s->off);
    if (rc != 0)
        return strata_error_set(err, STRATA_FAILED_PRECONDITION,
                                "cannot load the off-CPU BPF program: %s", strerror(-rc));
    rc = ring_buffer__add(s->ring, bpf_map__fd(s->off->maps.samples), handle_record, s);
    if (rc != 0)
        return strata_error_set(err, STRATA_INTERNAL, "cannot map the off-CPU ring buffer: %s",
                                strerror(-rc));
    s->ring_bytes += ring;
    s->off_link = bpf_program__attach_raw_tracepoint(s->off->progs.offcpu_switch, "sched_switch");
    if (s->off_link == NULL)
        return strata_error_set(err, STRATA_FAILED_PRECONDITION,
                                "off-CPU: cannot attach to the sched_switch tracepoint: %s (Linux "
                                "5.18 or later is needed)",
                                strerror(errno));
    return 0;
}

static int attach_all(agent_sampler *s, unsigned hz, const uint8_t *online, strata_error *err) {
    for (unsigned cpu = 0; cpu < MAX_CPUS; cpu++)
        if ((online[cpu / 8] & (1u << (cpu % 8))) && attach_cpu(s, hz, cpu, err) != 0)
            return -1;
    if (s->n_events == 0)
        return strata_error_set(err, STRATA_FAILED_PRECONDITION, "no online CPU accepted an event");
    return 0;
}

agent_sampler *agent_sampler_open(const agent_sampler_options *options, strata_error *err) {
    agent_sampler_options o = *options;
    if (o.frequency_hz == 0)
        o.frequency_hz = AGENT_DEFAULT_FREQUENCY_HZ;
    if (o.on_sample == NULL) {
        strata_error_set(err, STRATA_INVALID_ARGUMENT, "no sample callback");
        return NULL;
    }
    libbpf_set_print(libbpf_log);
    uint8_t online[MAX_CPUS / 8];
    int n_cpus = read_online_cpus(online, err);
    if (n_cpus < 0)
        return NULL;
    agent_sampler *s = calloc(1, sizeof *s);
    if (s == NULL) {
        strata_error_oom(err);
        return NULL;
    }
    s->on_sample = o.on_sample;
    s->ctx = o.ctx;
    s->event_fds = calloc((size_t)n_cpus, sizeof *s->event_fds);
    s->links = calloc((size_t)n_cpus, sizeof *s->links);
    if (s->event_fds == NULL || s->links == NULL) {
        strata_error_oom(err);
        agent_sampler_close(s);
        return NULL;
    }
    if (o.off_cpu_rate < 0 || o.off_cpu_rate > 1) {
        strata_error_set(err, STRATA_INVALID_ARGUMENT, "off-CPU rate %g is not within 0..1",
                         o.off_cpu_rate);
        agent_sampler_close(s);
        return NULL;
    }
    if (load_program(s, &o, (unsigned)n_cpus, err) != 0 ||
        attach_all(s, o.frequency_hz, online, err) != 0 ||
        (o.off_cpu_rate > 0 && load_off_cpu(s, &o, (unsigned)n_cpus, err) != 0)) {
        agent_sampler_close(s);
        return NULL;
    }
    return s;
}

int agent_sampler_wait(agent_sampler *s, int timeout_ms, strata_error *err) {
    int n = ring_buffer__poll(s->ring, timeout_ms);
    if (n < 0 && n != -EINTR)
        return strata_error_set(err, STRATA_INTERNAL, "ring buffer: %s", strerror(-n));
    return n < 0 ? 0 : n;
}

int agent_sampler_poll(agent_sampler *s, strata_error *err) {
    int n = ring_buffer__consume(s->ring);
    if (n < 0)
        return strata_error_set(err, STRATA_INTERNAL, "ring buffer: %s", strerror(-n));
    return n;
}

static int add_counters(int map_fd, struct agent_counters *out, strata_error *err);

int agent_sampler_counters(const agent_sampler *s, struct agent_counters *out, strata_error *err) {
    memset(out, 0, sizeof *out);
    if (add_counters(bpf_map__fd(s->skel->maps.counters), out, err) != 0)
        return -1;
    if (s->off != NULL)
        return add_counters(bpf_map__fd(s->off->maps.counters), out, err);
    return 0;
}

/* Adds the per-CPU counters of one object's `counters` map into out. */
static int add_counters(int map_fd, struct agent_counters *out, strata_error *err) {
    int n = libbpf_num_possible_cpus();
    if (n <= 0)
        return strata_error_set(err, STRATA_INTERNAL, "cannot count possible CPUs");
    struct agent_counters *per_cpu = calloc((size_t)n, sizeof *per_cpu);
    if (per_cpu == NULL)
        return strata_error_oom(err);
    __u32 zero = 0;
    int rc = bpf_map_lookup_elem(map_fd, &zero, per_cpu);
    if (rc != 0) {
        free(per_cpu);
        return strata_error_set(err, STRATA_INTERNAL, "reading counters: %s", strerror(errno));
    }
    for (int i = 0; i < n; i++) {
        out->samples += per_cpu[i].samples;
        out->ring_full += per_cpu[i].ring_full;
        out->skipped_self += per_cpu[i].skipped_self;
        out->kstack_errors += per_cpu[i].kstack_errors;
        out->ustack_errors += per_cpu[i].ustack_errors;
        out->off_cpu_timed += per_cpu[i].off_cpu_timed;
        out->off_cpu_events += per_cpu[i].off_cpu_events;
        out->unwind_dwarf += per_cpu[i].unwind_dwarf;
        out->unwind_complete += per_cpu[i].unwind_complete;
    }
    free(per_cpu);
    return 0;
}

/* --- the unwinder's sink: the BPF maps ------------------------------------------------------ */

#define ROW_BATCH 4096

static int write_rows(void *ctx, uint32_t first, const struct agent_unwind_row *rows, uint32_t n,
                      strata_error *err) {
    agent_sampler *s = ctx;
    int fd = bpf_map__fd(s->skel->maps.unwind_rows);
    __u32 keys[ROW_BATCH];
    for (uint32_t done = 0; done < n;) {
        __u32 count = n - done < ROW_BATCH ? n - done : ROW_BATCH;
        for (__u32 i = 0; i < count; i++)
            keys[i] = first + done + i;
        LIBBPF_OPTS(bpf_map_batch_opts, opts);
        int rc = bpf_map_update_batch(fd, keys, rows + done, &count, &opts);
        if (rc != 0)
            return strata_error_set(err, STRATA_INTERNAL, "writing unwind rows: %s",
                                    strerror(errno));
        done += count;
    }
    return 0;
}

static int write_process(void *ctx, uint32_t pid, const struct agent_unwind_proc *list,
                         strata_error *err) {
    agent_sampler *s = ctx;
    if (bpf_map_update_elem(bpf_map__fd(s->skel->maps.unwind_procs), &pid, list, BPF_ANY) != 0)
        return strata_error_set(err, STRATA_RESOURCE_EXHAUSTED, "listing process %u: %s", pid,
                                strerror(errno));
    return 0;
}

static void delete_process(void *ctx, uint32_t pid) {
    agent_sampler *s = ctx;
    (void)bpf_map_delete_elem(bpf_map__fd(s->skel->maps.unwind_procs), &pid);
}

static void decided(void *ctx, uint32_t pid) {
    agent_sampler *s = ctx;
    __u8 value = AGENT_SEEN_DECIDED;
    (void)bpf_map_update_elem(bpf_map__fd(s->skel->maps.unwind_seen), &pid, &value, BPF_ANY);
}

/* One BPF_MAP_LOOKUP_BATCH: an array's batch key is the index to start at. */
static int read_rows(void *ctx, uint32_t first, uint32_t n, struct agent_unwind_row *rows) {
    agent_sampler *s = ctx;
    __u32 keys[ROW_BATCH], next = 0, count = n;
    if (n > ROW_BATCH)
        return -1;
    LIBBPF_OPTS(bpf_map_batch_opts, opts);
    int rc = bpf_map_lookup_batch(bpf_map__fd(s->skel->maps.unwind_rows), &first, &next, keys, rows,
                                  &count, &opts);
    /* ENOENT: the batch reached the array's end (count says how many came) */
    if ((rc != 0 && errno != ENOENT) || count != n)
        return -1;
    return 0;
}

void agent_sampler_unwind_sink(agent_sampler *s, struct agent_unwinder_sink *out) {
    *out = (agent_unwinder_sink){write_rows, write_process, delete_process, decided, read_rows, s};
}

static int python_update(int fd, uint32_t pid, const struct agent_py_proc *info) {
    __u32 key = pid;
    if (info != NULL)
        return bpf_map_update_elem(fd, &key, info, BPF_ANY);
    return bpf_map_delete_elem(fd, &key) == 0 || errno == ENOENT ? 0 : -1;
}

int agent_sampler_set_python(agent_sampler *s, uint32_t pid, const struct agent_py_proc *info) {
    int rc = python_update(bpf_map__fd(s->skel->maps.python_procs), pid, info);
    if (s->off != NULL && python_update(bpf_map__fd(s->off->maps.python_procs), pid, info) != 0)
        rc = -1;
    return rc;
}

unsigned agent_sampler_cpu_count(const agent_sampler *s) {
    return s->n_events;
}

size_t agent_sampler_ring_bytes(const agent_sampler *s) {
    return s->ring_bytes;
}

void agent_sampler_close(agent_sampler *s) {
    if (s == NULL)
        return;
    bpf_link__destroy(s->off_link);
    bpf_link__destroy(s->exec_link);
    bpf_link__destroy(s->exit_link);
    offcpu_bpf__destroy(s->off);
    for (unsigned i = 0; i < s->n_events; i++) {
        bpf_link__destroy(s->links[i]);
        close(s->event_fds[i]);
    }
    ring_buffer__free(s->ring);
    oncpu_bpf__destroy(s->skel);
    free(s->event_fds);
    free(s->links);
    free(s);
}
