/*
 * sampler.h - loads the on-CPU BPF program (bpf/oncpu.bpf.c), opens one CPU-clock perf event per
 * online CPU, attaches the program to each, and drains the ring buffer of samples.
 *
 * Design. The sampler owns the BPF skeleton, the perf events and the libbpf ring buffer. It never
 * blocks: the caller polls it (every 250 ms in the agent), and each poll hands every pending
 * record to the callback, in the order the CPUs wrote them. The program writes records with
 * BPF_RB_NO_WAKEUP, so there is no epoll wake-up per sample; the ring is sized for two seconds of
 * the worst case (every CPU busy at the configured rate), rounded up to a power of two, and a tick
 * that finds it full is counted per CPU (agent_sampler_counters), not lost silently.
 *
 * Requirements are checked before anything is loaded, so the agent can say exactly what is
 * missing: kernel BTF (/sys/kernel/btf/vmlinux, which the verifier needs for the BTF task helpers;
 * the program has no CO-RE relocation, so libbpf itself never loads it), the capabilities to load
 * BPF and open system-wide perf events (CAP_BPF and CAP_PERFMON, or CAP_SYS_ADMIN), and a working
 * software CPU-clock event. CPUs that are offline (ENODEV) are skipped; hot-plugged CPUs are not
 * picked up until restart.
 *
 * Off-CPU (off_cpu_rate > 0) loads a second object, bpf/offcpu.bpf.c (a raw tracepoint on
 * sched_switch), with a ring of its own (room for 256 records per CPU per second, two seconds), so
 * a burst of blockings never crowds out CPU ticks; both rings are drained by the same poll. That
 * object reads a task_struct field through CO-RE, so libbpf reads the kernel's BTF, but only when
 * off-CPU is on; the on-CPU object has no relocation (oncpu.bpf.c says why).
 *
 * User stacks of processes the unwinder has listed are walked in BPF with their CFI tables
 * (bpf/unwind.bpf.h): the on-CPU object owns the row array and the process lists, sized before
 * load; the off-CPU object reuses the same maps. The first sample of a process BPF has no list
 * for is submitted with a wake-up (agent_sampler_wait returns at once), so the agent lists it
 * within milliseconds rather than at the next poll; an exec drops the process's list in BPF
 * (its mappings changed) and makes the next sample such a first one again.
 *
 * Perf events and BPF links are file descriptors: if the agent dies, the kernel tears everything
 * down by itself.
 */
#ifndef STRATA_AGENT_SAMPLER_H
#define STRATA_AGENT_SAMPLER_H

#include <linux/types.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "bpf/oncpu.h"
#include "common/error.h"

#define AGENT_DEFAULT_FREQUENCY_HZ 19

typedef struct agent_sampler agent_sampler;

struct agent_stack_copy;
/* Called for each record; the record is valid only during the call. copy is the top of the user
 * stack of a process the unwinder has not decided about yet (bpf/unwind.h), else NULL. */
typedef void (*agent_sample_fn)(void *ctx, const struct agent_sample *sample,
                                const struct agent_stack_copy *copy);

typedef struct agent_sampler_options {
    unsigned frequency_hz; /* 0 = AGENT_DEFAULT_FREQUENCY_HZ */
    /* Off-CPU: the fraction of voluntary context switches timed (0 = off-CPU is off, the
     * programs are not even loaded; at most 1). Needs Linux 5.18 (sched_switch's prev_state). */
    double off_cpu_rate;
    unsigned off_cpu_pending; /* threads timed at once (kernel memory: 2.3 KB each); 0 = 1024 */
    pid_t self_pid;           /* ticks on this process are skipped; 0 = getpid() */
    /* Rows of the unwind-table array (bpf/unwind.h; 16 bytes of kernel memory each); 0 = no
     * DWARF unwinding (every user stack is walked through frame pointers). */
    uint32_t unwind_rows;
    agent_sample_fn on_sample;
    void *ctx;
} agent_sampler_options;

/* Checks BTF, capabilities and perf events; FAILED_PRECONDITION or PERMISSION_DENIED with a
 * message naming what is missing. */
int agent_sampler_check_requirements(strata_error *err);

/* Loads and attaches everything. Returns NULL with err set. */
agent_sampler *agent_sampler_open(const agent_sampler_options *options, strata_error *err);

/* Sleeps until timeout_ms has passed or a sample asked for a wake-up (a new process), then hands
 * every pending sample to the callback; returns how many, or -1 with err set. */
int agent_sampler_wait(agent_sampler *s, int timeout_ms, strata_error *err);

/* Hands every pending sample to the callback; returns how many, or -1 with err set. */
int agent_sampler_poll(agent_sampler *s, strata_error *err);

/* Sums the per-CPU counters. */
int agent_sampler_counters(const agent_sampler *s, struct agent_counters *out, strata_error *err);

/* Number of CPUs with an attached event. */
unsigned agent_sampler_cpu_count(const agent_sampler *s);
/* Ring buffer size in bytes. */
size_t agent_sampler_ring_bytes(const agent_sampler *s);

/* Where agent_unwinder writes: the row array and the per-process lists the BPF programs read.
 * The callbacks take the sampler as ctx. */
struct agent_unwinder_sink;
void agent_sampler_unwind_sink(agent_sampler *s, struct agent_unwinder_sink *out);

/* Python frames (pyframes.h): tells both programs that pid is a CPython process described by
 * *info, or forgets it (info NULL); 0 on success (forgetting an unknown pid included). */
int agent_sampler_set_python(agent_sampler *s, uint32_t pid, const struct agent_py_proc *info);

/* Detaches and frees; NULL is a no-op. */
void agent_sampler_close(agent_sampler *s);

/* Parses a CPU list such as "0-3,8,10-11" (sysfs format) into a bitmap of up to max_cpus bits;
 * returns the number of CPUs, or -1 (INVALID_ARGUMENT) on malformed text. */
int agent_parse_cpu_list(const char *text, uint8_t *bitmap, unsigned max_cpus, strata_error *err);

#endif
