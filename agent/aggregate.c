/*
 * aggregate.c - per-process, per-window stack counts. See aggregate.h.
 */
#include "aggregate.h"

#include <math.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/array.h"
#include "common/clock.h"

#define DEFAULT_MAX_FRAMES ((size_t)2 << 20)

int agent_aggregator_init(agent_aggregator *a, const char *proc_root, size_t max_frames,
                          strata_error *err) {
    memset(a, 0, sizeof *a);
    a->proc_root = proc_root != NULL ? proc_root : "/proc";
    a->max_frames = max_frames != 0 ? max_frames : DEFAULT_MAX_FRAMES;
    if (strata_u64_map_init(&a->by_pid, 256) != 0)
        return strata_error_oom(err);
    return 0;
}

static void notify_seen(agent_aggregator *a, const agent_process *p) {
    if (a->process_seen != NULL && p->have_proc)
        a->process_seen(a->process_ctx, p);
}

static void process_free(agent_process *p) {
    agent_proc_free(&p->proc);
    label_set_free(&p->labels);
    free(p->stacks);
    free(p->thread_names);
    strata_u64_map_free(&p->stack_index);
    free(p);
}

/* Makes fresh (taken; empty when have is false) p's view of /proc. */
static void set_proc(agent_aggregator *a, agent_process *p, agent_proc *fresh, bool have,
                     uint64_t read_ns) {
    agent_proc_free(&p->proc);
    p->maps_read_ns = read_ns;
    p->proc = *fresh;
    p->have_proc = have;
    if (!have)
        a->stats.proc_errors++;
    p->labeled = false;
    p->dropped = false;
    label_set_free(&p->labels);
    notify_seen(a, p);
}

/* Reads /proc for p; a process already gone keeps only its pid and comm. */
static void snapshot(agent_aggregator *a, agent_process *p) {
    agent_proc fresh;
    uint64_t read_ns = (uint64_t)strata_monotonic_ns();
    bool have = agent_proc_read(a->proc_root, p->pid, &fresh, NULL) == 0;
    if (!have) {
        agent_proc_free(&fresh);
        fresh.pid = p->pid;
    }
    set_proc(a, p, &fresh, have, read_ns);
}

/* BPF saw the process anew (an exec, or its last ticks after the exit hook): read it again, but
 * keep what is known if it has gone meanwhile - or is going: an exiting process whose memory is
 * already released still reads, with no executable and no mappings. */
static void resnapshot(agent_aggregator *a, agent_process *p) {
    agent_proc fresh;
    uint64_t read_ns = (uint64_t)strata_monotonic_ns();
    if (agent_proc_read(a->proc_root, p->pid, &fresh, NULL) != 0 ||
        (p->have_proc && fresh.n_mappings == 0 &&
         (fresh.executable == NULL || fresh.executable[0] == '\0'))) {
        agent_proc_free(&fresh);
        return;
    }
    set_proc(a, p, &fresh, true, read_ns);
}

static agent_process *new_process(agent_aggregator *a, pid_t pid, strata_error *err) {
    if (STRATA_ARRAY_RESERVE_OR_OOM(a->procs, a->cap_procs, a->n_procs + 1, err) != 0)
        return NULL;
    agent_process *p = calloc(1, sizeof *p);
    if (p == NULL || strata_u64_map_init(&p->stack_index, 16) != 0) {
        free(p);
        return strata_error_oom(err), NULL;
    }
    p->pid = pid;
    p->last_window = a->window;
    if (strata_u64_map_upsert(&a->by_pid, (uint64_t)pid + 1, a->n_procs + 1, NULL) == NULL) {
        process_free(p);
        return strata_error_oom(err), NULL;
    }
    a->procs[a->n_procs++] = p;
    snapshot(a, p);
    return p;
}

#define AGENT_PID_RECHECK_WINDOWS 6

/* The process for pid, created or refreshed (pid reuse) as needed. */
static agent_process *process_for(agent_aggregator *a, pid_t pid, strata_error *err) {
    uint64_t *index = strata_u64_map_get(&a->by_pid, (uint64_t)pid + 1);
    if (index == NULL)
        return new_process(a, pid, err);
    agent_process *p = a->procs[*index - 1];
    /* pid reuse: a pid sampled in the window before cannot have exited and come back by now (the
     * pid counter would have to wrap), so a process sampled window after window is re-checked
     * once a minute, one that went quiet at once */
    bool quiet = p->last_window + 1 < a->window;
    if (p->last_window != a->window && p->have_proc &&
        (quiet || a->window % AGENT_PID_RECHECK_WINDOWS == 0)) {
        uint64_t start;
        if (agent_proc_start_time(a->proc_root, pid, &start, NULL) == 0 &&
            start != p->proc.start_time)
            snapshot(a, p);
    }
    p->last_window = a->window;
    return p;
}

/* A sample's identity: its frames and the label values that are on (0 / "" otherwise). */
typedef struct sample_key {
    const uint64_t *k, *u;
    size_t nk, nu;
    uint32_t tid, cpu;
    const char *thread; /* NUL-terminated, at most AGENT_COMM_LEN - 1 bytes */
    bool off_cpu;
    uint64_t weight; /* 1 for a CPU tick; the (scaled) blocked nanoseconds off-CPU */
} sample_key;

static uint64_t stack_hash(const sample_key *key) {
    uint64_t h = strata_hash_bytes(key->k, key->nk * sizeof *key->k, key->nk);
    h = strata_hash_combine(h, strata_hash_bytes(key->u, key->nu * sizeof *key->u, key->nu));
    h = strata_hash_combine(h, (uint64_t)key->tid << 32 | key->cpu);
    h = strata_hash_combine(h, key->off_cpu);
    if (key->thread[0] != '\0')
        h = strata_hash_combine(h, strata_hash_bytes(key->thread, strlen(key->thread), 0));
    return h != 0 ? h : 1;
}

static bool stack_equal(const agent_aggregator *a, const agent_process *p, size_t i,
                        const sample_key *key) {
    const agent_stack *s = &p->stacks[i];
    const uint64_t *f = agent_stack_frames(a, s);
    return s->n_kernel == key->nk && s->n_user == key->nu && s->tid == key->tid &&
           s->cpu == key->cpu && s->off_cpu == key->off_cpu &&
           memcmp(f, key->k, key->nk * sizeof *key->k) == 0 &&
           memcmp(f + key->nk, key->u, key->nu * sizeof *key->u) == 0 &&
           (p->thread_names == NULL || strcmp(p->thread_names[i], key->thread) == 0);
}

static int append_frames(agent_aggregator *a, const sample_key *key, uint32_t *offset,
                         strata_error *err) {
    size_t need = a->n_frames + key->nk + key->nu;
    if (STRATA_ARRAY_RESERVE_OR_OOM(a->frames, a->cap_frames, need, err) != 0)
        return -1;
    *offset = (uint32_t)a->n_frames;
    memcpy(a->frames + a->n_frames, key->k, key->nk * sizeof *key->k);
    memcpy(a->frames + a->n_frames + key->nk, key->u, key->nu * sizeof *key->u);
    a->n_frames = need;
    return 0;
}

/* Room for one more stack (and its thread name when that label is on). */
static int reserve_stack(const agent_aggregator *a, agent_process *p, strata_error *err) {
    bool names = (a->sample_labels & AGENT_LABEL_THREAD_NAME) != 0;
    if (p->n_stacks < p->cap_stacks && (!names || p->thread_names != NULL))
        return 0;
    /* stacks and thread_names share cap_stacks; thread_names may come later, at that cap */
    size_t cap = strata_array_capacity(p->cap_stacks, p->n_stacks + 1);
    agent_stack *grown = strata_array_resize(p->stacks, cap, sizeof *grown);
    if (grown == NULL)
        return strata_error_oom(err);
    p->stacks = grown;
    if (names) {
        char(*grown_names)[AGENT_COMM_LEN] =
            strata_array_resize(p->thread_names, cap, sizeof *grown_names);
        if (grown_names == NULL)
            return strata_error_oom(err);
        p->thread_names = grown_names;
    }
    p->cap_stacks = cap;
    return 0;
}

static int new_stack(agent_aggregator *a, agent_process *p, uint64_t map_key, uint64_t hash,
                     const sample_key *key, strata_error *err) {
    if (a->n_frames + key->nk + key->nu > a->max_frames) {
        a->stats.over_limit++;
        return 0;
    }
    if (reserve_stack(a, p, err) != 0)
        return -1;
    agent_stack *s = &p->stacks[p->n_stacks];
    if (append_frames(a, key, &s->frames, err) != 0)
        return -1;
    if (strata_u64_map_upsert(&p->stack_index, map_key, p->n_stacks + 1, NULL) == NULL)
        return strata_error_oom(err);
    s->hash = hash;
    s->count = key->weight;
    s->off_cpu = key->off_cpu;
    p->n_off_cpu += key->off_cpu;
    s->n_kernel = (uint16_t)key->nk;
    s->n_user = (uint16_t)key->nu;
    s->tid = key->tid;
    s->cpu = key->cpu;
    if (p->thread_names != NULL)
        snprintf(p->thread_names[p->n_stacks], AGENT_COMM_LEN, "%s", key->thread);
    p->n_stacks++;
    p->samples++;
    a->stats.samples++;
    return 0;
}

static int add_stack(agent_aggregator *a, agent_process *p, const sample_key *key,
                     strata_error *err) {
    uint64_t hash = stack_hash(key), map_key = hash;
    for (;;) {
        uint64_t *index = strata_u64_map_get(&p->stack_index, map_key);
        if (index == NULL)
            return new_stack(a, p, map_key, hash, key, err);
        if (stack_equal(a, p, *index - 1, key)) {
            p->stacks[*index - 1].count += key->weight;
            p->samples++;
            a->stats.samples++;
            return 0;
        }
        map_key = strata_hash_combine(map_key, 1) | 1; /* a true collision: probe on */
    }
}

static size_t frame_count(__s32 bytes) {
    if (bytes <= 0)
        return 0;
    size_t n = (size_t)bytes / sizeof(__u64);
    return n > AGENT_MAX_FRAMES ? AGENT_MAX_FRAMES : n;
}

static uint64_t mappings_hash(const agent_proc *proc) {
    uint64_t h = proc->n_mappings;
    for (size_t i = 0; i < proc->n_mappings; i++)
        h = strata_hash_combine(
            h, strata_hash_combine(proc->mappings[i].start, proc->mappings[i].inode));
    return h;
}

static void reload_maps(agent_aggregator *a, agent_process *p) {
    a->stats.maps_reloads++;
    p->maps_read_ns = (uint64_t)strata_monotonic_ns();
    if (agent_proc_reload_maps(a->proc_root, &p->proc, NULL) == 0)
        notify_seen(a, p);
}

#define OFF_LIST_BACKOFF_NS (100 * 1000 * 1000ull)
#define OFF_LIST_BACKOFF_MAX_NS (10 * 1000 * 1000 * 1000ull)

/* Re-reads maps once per window when a user address falls outside every known mapping. A CFI walk
 * that met a pc outside the listed mappings (AGENT_SAMPLE_OFF_LIST: a library mapped since, often
 * just after an exec while the loader is still at work) re-reads at once. While each re-read finds
 * the maps changed (the loader mapping one library after another) the next such walk re-reads at
 * once too; one that finds them unchanged (a garbage return address, JIT code) makes the next wait
 * 100 ms, the wait doubling while they stay unchanged, up to 10 s. */
static void check_mappings(agent_aggregator *a, agent_process *p, const struct agent_sample *s,
                           const uint64_t *u, size_t nu) {
    /* maps read after the sample was taken already show every mapping it could have met: what
     * they lack was unmapped since, or belonged to the image an exec replaced (a forked shell's
     * ticks before it became the compiler), and reading them again finds nothing new */
    if (!p->have_proc || s->time_ns <= p->maps_read_ns)
        return;
    if (s->flags & AGENT_SAMPLE_OFF_LIST) {
        if (s->time_ns < p->next_off_list_reload_ns)
            return;
        uint64_t before = mappings_hash(&p->proc);
        reload_maps(a, p);
        if (mappings_hash(&p->proc) != before) {
            p->off_list_backoff_ns = 0;
            p->next_off_list_reload_ns = 0; /* samples taken before this read are skipped above */
            return;
        }
        p->off_list_backoff_ns =
            p->off_list_backoff_ns == 0 ? OFF_LIST_BACKOFF_NS : p->off_list_backoff_ns * 2;
        if (p->off_list_backoff_ns > OFF_LIST_BACKOFF_MAX_NS)
            p->off_list_backoff_ns = OFF_LIST_BACKOFF_MAX_NS;
        p->next_off_list_reload_ns = s->time_ns + p->off_list_backoff_ns;
        return;
    }
    if (p->maps_reloaded)
        return;
    for (size_t i = 0; i < nu; i++)
        if (agent_proc_find_mapping(&p->proc, u[i]) == NULL) {
            p->maps_reloaded = true;
            reload_maps(a, p);
            return;
        }
}

/* A timed switch-out stands for 1/rate of them: its blocked time, scaled back (at least 1 ns, so
 * the stack is never a zero sample). */
static uint64_t off_cpu_weight(const agent_aggregator *a, uint64_t value_ns) {
    double scaled = a->off_cpu_rate > 0 ? (double)value_ns / a->off_cpu_rate : (double)value_ns;
    if (scaled >= 9.2e18)
        return (uint64_t)9.2e18;
    return scaled < 1 ? 1 : (uint64_t)llround(scaled);
}

int agent_aggregator_add(agent_aggregator *a, const struct agent_sample *s, strata_error *err) {
    bool known = strata_u64_map_get(&a->by_pid, (uint64_t)s->pid + 1) != NULL;
    agent_process *p = process_for(a, (pid_t)s->pid, err);
    if (p == NULL)
        return -1;
    if (known && (s->flags & AGENT_SAMPLE_NEW_PROCESS))
        resnapshot(a, p);
    memcpy(p->comm, s->comm, sizeof p->comm);
    p->comm[sizeof p->comm - 1] = '\0';
    if (p->samples == 0)
        p->first_sample_ns = (int64_t)s->time_ns;
    size_t nk = frame_count(s->kstack_bytes), nu = frame_count(s->ustack_bytes);
    /* __u64 is unsigned long long, uint64_t unsigned long: same representation. */
    const uint64_t *k = (const uint64_t *)s->kstack;
    uint64_t u[AGENT_MAX_FRAMES + 1 + AGENT_PY_MAX_FRAMES]; /* room for Python frames */
    memcpy(u, s->ustack, nu * sizeof *u);
    check_mappings(a, p, s, u, nu);
    if (a->fixup != NULL && p->have_proc &&
        a->fixup(a->fixup_ctx, &p->proc, s, u, &nu, sizeof u / sizeof *u))
        a->stats.fixups++;
    if (a->python != NULL && p->have_proc)
        (void)a->python(a->python_ctx, &p->proc, s, u, &nu, sizeof u / sizeof *u);
    sample_key key = {.k = k,
                      .nk = nk,
                      .u = u,
                      .nu = nu,
                      .tid = (a->sample_labels & AGENT_LABEL_THREAD_ID) ? s->tid : 0,
                      .cpu = (a->sample_labels & AGENT_LABEL_CPU) ? s->cpu : 0,
                      .thread = (a->sample_labels & AGENT_LABEL_THREAD_NAME) ? p->comm : "",
                      .off_cpu = (s->flags & AGENT_SAMPLE_OFF_CPU) != 0,
                      .weight = 1};
    if (key.off_cpu)
        key.weight = off_cpu_weight(a, s->value_ns);
    return add_stack(a, p, &key, err);
}

void agent_aggregator_next_window(agent_aggregator *a) {
    size_t kept = 0;
    strata_u64_map_clear(&a->by_pid);
    for (size_t i = 0; i < a->n_procs; i++) {
        agent_process *p = a->procs[i];
        if (p->last_window != a->window) {
            if (a->process_gone != NULL)
                a->process_gone(a->process_ctx, p->pid);
            process_free(p);
            continue;
        }
        p->n_stacks = 0;
        p->n_off_cpu = 0;
        p->samples = 0;
        p->maps_reloaded = false;
        strata_u64_map_clear(&p->stack_index);
        a->procs[kept++] = p;
        /* Re-inserting into a just-cleared map of the same capacity cannot fail. */
        (void)strata_u64_map_upsert(&a->by_pid, (uint64_t)p->pid + 1, kept, NULL);
    }
    a->n_procs = kept;
    a->n_frames = 0;
    a->window++;
}

void agent_aggregator_free(agent_aggregator *a) {
    for (size_t i = 0; i < a->n_procs; i++)
        process_free(a->procs[i]);
    free(a->procs);
    free(a->frames);
    strata_u64_map_free(&a->by_pid);
    memset(a, 0, sizeof *a);
}
