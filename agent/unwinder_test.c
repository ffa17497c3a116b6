/*
 * unwinder_test.c - the unwind-table cache without BPF: this test's own process is listed into
 * an in-memory sink (arrays standing in for the BPF maps), and the rows a frame would be looked
 * up in are checked against the functions' real addresses; sharing one table between processes,
 * the row budget (refusal, then eviction once no process uses a table), a failing sink, and a
 * walk of a copy of this test's own stack, address for address against glibc's backtrace().
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <execinfo.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bpf/oncpu.h"
#include "cfi.h"
#include "procinfo.h"
#include "unwinder.h"

#define SINK_ROWS (1u << 21)
#define SINK_PROCS 8

typedef struct fake_maps {
    struct agent_unwind_row *rows;
    uint32_t n_rows;
    uint32_t pids[SINK_PROCS];
    struct agent_unwind_proc procs[SINK_PROCS];
    int fail_rows;    /* write_rows fails when set */
    uint32_t decided; /* the last pid user space decided about */
    uint64_t rows_written;
    uint64_t rows_read_calls;
} fake_maps;

static int fake_write_rows(void *ctx, uint32_t first, const struct agent_unwind_row *rows,
                           uint32_t n, strata_error *err) {
    fake_maps *f = ctx;
    if (f->fail_rows)
        return strata_error_set(err, STRATA_INTERNAL, "the sink is broken");
    assert_true((uint64_t)first + n <= f->n_rows);
    memcpy(&f->rows[first], rows, n * sizeof *rows);
    f->rows_written += n;
    return 0;
}

static struct agent_unwind_proc *fake_find(fake_maps *f, uint32_t pid, bool create) {
    for (int i = 0; i < SINK_PROCS; i++)
        if (f->pids[i] == pid)
            return &f->procs[i];
    if (!create)
        return NULL;
    for (int i = 0; i < SINK_PROCS; i++)
        if (f->pids[i] == 0) {
            f->pids[i] = pid;
            return &f->procs[i];
        }
    return NULL;
}

static int fake_write_process(void *ctx, uint32_t pid, const struct agent_unwind_proc *list,
                              strata_error *err) {
    struct agent_unwind_proc *p = fake_find(ctx, pid, true);
    if (p == NULL)
        return strata_error_set(err, STRATA_RESOURCE_EXHAUSTED, "full");
    *p = *list;
    return 0;
}

static void fake_delete_process(void *ctx, uint32_t pid) {
    fake_maps *f = ctx;
    for (int i = 0; i < SINK_PROCS; i++)
        if (f->pids[i] == pid)
            f->pids[i] = 0;
}

static void fake_decided(void *ctx, uint32_t pid) {
    fake_maps *f = ctx;
    f->decided = pid;
}

static int fake_read_rows(void *ctx, uint32_t first, uint32_t n, struct agent_unwind_row *rows) {
    fake_maps *f = ctx;
    if ((uint64_t)first + n > f->n_rows)
        return -1;
    memcpy(rows, &f->rows[first], n * sizeof *rows);
    f->rows_read_calls++;
    return 0;
}

static agent_unwinder *new_unwinder(fake_maps *f, uint32_t max_rows) {
    memset(f, 0, sizeof *f);
    f->n_rows = max_rows;
    f->rows = calloc(max_rows, sizeof *f->rows);
    assert_non_null(f->rows);
    agent_unwinder_options o = {
        .max_rows = max_rows,
        .sink = {fake_write_rows, fake_write_process, fake_delete_process, fake_decided,
                 fake_read_rows, f},
    };
    strata_error err;
    agent_unwinder *u = agent_unwinder_new(&o, &err);
    assert_non_null(u);
    return u;
}

static void read_self(agent_proc *p) {
    strata_error err;
    assert_int_equal(agent_proc_read("/proc", getpid(), p, &err), 0);
}

/* p with only the mappings of the file whose path contains needle. */
static void keep_only(agent_proc *p, const char *needle) {
    size_t kept = 0;
    for (size_t i = 0; i < p->n_mappings; i++) {
        if (p->mappings[i].path != NULL && strstr(p->mappings[i].path, needle) != NULL)
            p->mappings[kept++] = p->mappings[i];
        else
            free(p->mappings[i].path);
    }
    p->n_mappings = kept;
}

/* What the BPF walker does for one address: mapping, then the last row at or below it. */
static const struct agent_unwind_row *lookup(const fake_maps *f, const struct agent_unwind_proc *p,
                                             uint64_t addr, uint64_t *rel_out) {
    for (uint32_t i = 0; i < p->n_mappings; i++) {
        const struct agent_unwind_mapping *m = &p->mappings[i];
        if (addr < m->start || addr >= m->end)
            continue;
        uint64_t rel = addr - m->bias;
        *rel_out = rel;
        const struct agent_unwind_row *found = NULL;
        for (uint32_t r = m->first_row; r < m->first_row + m->n_rows; r++)
            if (f->rows[r].pc <= rel)
                found = &f->rows[r];
        return found;
    }
    return NULL;
}

__attribute__((noinline)) int unwinder_test_function(int x);
__attribute__((noinline)) int unwinder_test_function(int x) {
    return x * 7 + 3;
}

static size_t file_rows(const agent_proc *p, const char *needle) {
    for (size_t i = 0; i < p->n_mappings; i++)
        if (p->mappings[i].path != NULL && strstr(p->mappings[i].path, needle) != NULL) {
            agent_cfi_table t = {0};
            strata_error err;
            assert_int_equal(agent_cfi_read_file(p->mappings[i].path, 0, &t, &err), 0);
            size_t n = t.n_rows;
            agent_cfi_table_free(&t);
            return n;
        }
    fail_msg("no mapping of %s", needle);
    return 0;
}

/* Our own process: libc and this binary listed, with biases that put each function's entry on
 * the row its FDE starts (CFA = rsp + 8: only the return address is on the stack). */
static void test_lists_this_process(void **state) {
    (void)state;
    fake_maps f;
    agent_unwinder *u = new_unwinder(&f, SINK_ROWS);
    agent_proc p;
    read_self(&p);
    strata_error err;
    int listed = agent_unwinder_add_process(u, &p, &err);
    assert_true(listed >= 2);
    assert_int_equal(f.decided, (uint32_t)getpid());
    const struct agent_unwind_proc *list = fake_find(&f, (uint32_t)getpid(), false);
    assert_non_null(list);
    /* Every executable mapping is listed, those with a table (counted) and those without. */
    assert_int_equal(list->n_mappings, (uint32_t)p.n_mappings);
    uint32_t with_rows = 0, vdsos = 0;
    for (uint32_t i = 0; i < list->n_mappings; i++) {
        with_rows += list->mappings[i].n_rows > 0;
        bool vdso = p.mappings[i].path != NULL && strcmp(p.mappings[i].path, "[vdso]") == 0;
        assert_int_equal(list->mappings[i].start, p.mappings[i].start);
        if (vdso) /* the vDSO's CFI, read from the agent's own image (none under valgrind) */
            assert_true(list->mappings[i].n_rows > 0);
        vdsos += vdso;
        assert_int_equal(agent_unwinder_has_table(
                             u, (uint32_t)getpid(),
                             p.mappings[i].start + (p.mappings[i].end - p.mappings[i].start) / 2),
                         list->mappings[i].n_rows > 0);
    }
    assert_int_equal(with_rows, (uint32_t)listed + vdsos); /* the vDSO is not counted */
    assert_false(agent_unwinder_has_table(u, (uint32_t)getpid(), 1));
    for (uint32_t i = 1; i < list->n_mappings; i++)
        assert_true(list->mappings[i - 1].end <= list->mappings[i].start);

    uintptr_t fns[] = {(uintptr_t)&unwinder_test_function, (uintptr_t)&qsort, (uintptr_t)&memcmp};
    for (size_t i = 0; i < sizeof fns / sizeof *fns; i++) {
        uint64_t rel = 0;
        const struct agent_unwind_row *r = lookup(&f, list, fns[i], &rel);
        assert_non_null(r);
        assert_int_equal(r->pc, rel); /* a row starts exactly at the function's entry */
        assert_int_equal(r->cfa_type, AGENT_CFA_RSP);
        assert_int_equal(r->cfa_offset, 8);
    }
    agent_unwinder_stats st;
    agent_unwinder_stats_get(u, &st);
    assert_int_equal(st.processes, 1);
    assert_int_equal(st.rows_used, f.rows_written);
    assert_true(st.rows_used >= file_rows(&p, "libc.so"));

    /* A second process mapping the same files shares every table: nothing read or written. */
    uint64_t files = st.files_read, written = f.rows_written;
    p.pid += 1000000;
    assert_int_equal(agent_unwinder_add_process(u, &p, &err), listed);
    agent_unwinder_stats_get(u, &st);
    assert_int_equal(st.files_read, files);
    assert_int_equal(f.rows_written, written);
    assert_int_equal(st.processes, 2);
    const struct agent_unwind_proc *other = fake_find(&f, (uint32_t)p.pid, false);
    assert_non_null(other);
    assert_memory_equal(other, list, sizeof *list);

    /* Listing again replaces; removing drops the list. */
    assert_int_equal(agent_unwinder_add_process(u, &p, &err), listed);
    agent_unwinder_stats_get(u, &st);
    assert_int_equal(st.processes, 2);
    agent_unwinder_remove_process(u, p.pid);
    assert_null(fake_find(&f, (uint32_t)p.pid, false));
    agent_unwinder_stats_get(u, &st);
    assert_int_equal(st.processes, 1);
    assert_int_equal(st.tables_evicted, 0);

    agent_proc_free(&p);
    agent_unwinder_free(u);
    free(f.rows);
}

/* A first list, and every list that differs from the one before, asks BPF to wake user space when
 * a walk leaves it (the loader may still be mapping libraries); a list found the same does not. */
static void test_wakes_while_mappings_change(void **state) {
    (void)state;
    fake_maps f;
    agent_unwinder *u = new_unwinder(&f, SINK_ROWS);
    agent_proc p;
    read_self(&p);
    keep_only(&p, "libc.so"); /* the loader has mapped only libc so far */
    strata_error err;
    uint32_t pid = (uint32_t)getpid();
    assert_int_equal(agent_unwinder_add_process(u, &p, &err), 1);
    assert_int_equal(fake_find(&f, pid, false)->flags, AGENT_UNWIND_WAKE_OFF_LIST);
    assert_int_equal(agent_unwinder_add_process(u, &p, &err), 1); /* re-read: the same */
    assert_int_equal(fake_find(&f, pid, false)->flags, 0);
    agent_proc all;
    read_self(&all); /* now every library: changed */
    all.pid = p.pid;
    assert_true(agent_unwinder_add_process(u, &all, &err) >= 2);
    const struct agent_unwind_proc *list = fake_find(&f, pid, false);
    assert_int_equal(list->n_mappings, (uint32_t)all.n_mappings);
    assert_int_equal(list->flags, AGENT_UNWIND_WAKE_OFF_LIST);
    assert_true(agent_unwinder_add_process(u, &all, &err) >= 2);
    assert_int_equal(fake_find(&f, pid, false)->flags, 0);
    /* one library moved (unmapped and mapped elsewhere): changed again */
    for (size_t i = 0; i < all.n_mappings; i++)
        if (all.mappings[i].path != NULL && strstr(all.mappings[i].path, "libc.so") != NULL) {
            all.mappings[i].start += 0x1000;
            break;
        }
    assert_true(agent_unwinder_add_process(u, &all, &err) >= 1);
    assert_int_equal(fake_find(&f, pid, false)->flags, AGENT_UNWIND_WAKE_OFF_LIST);
    /* a process listed anew after it was removed is a first list */
    agent_unwinder_remove_process(u, p.pid);
    assert_true(agent_unwinder_add_process(u, &all, &err) >= 2);
    assert_int_equal(fake_find(&f, pid, false)->flags, AGENT_UNWIND_WAKE_OFF_LIST);
    agent_proc_free(&p);
    agent_proc_free(&all);
    agent_unwinder_free(u);
    free(f.rows);
}

/* Two views of this process: one with only libc's mappings, one (under another pid) with only
 * this test binary's, and the rows of each file's table. */
typedef struct two_processes {
    agent_proc libc, self;
    size_t libc_rows, self_rows;
    char exe[4096], libc_path[4096];
} two_processes;

static void two_processes_read(two_processes *t) {
    memset(t, 0, sizeof *t);
    read_self(&t->libc);
    read_self(&t->self);
    t->libc_rows = file_rows(&t->libc, "libc.so");
    ssize_t n = readlink("/proc/self/exe", t->exe, sizeof t->exe - 1);
    assert_true(n > 0);
    t->exe[n] = '\0';
    t->self_rows = file_rows(&t->self, t->exe);
    for (size_t i = 0; i < t->libc.n_mappings; i++)
        if (t->libc.mappings[i].path != NULL && strstr(t->libc.mappings[i].path, "libc.so") != NULL)
            snprintf(t->libc_path, sizeof t->libc_path, "%s", t->libc.mappings[i].path);
    keep_only(&t->libc, "libc.so");
    keep_only(&t->self, t->exe);
    t->self.pid = t->libc.pid + 1000000;
}

/* The budget: a table that does not fit beside one in use is refused; once nothing uses the
 * first, it is evicted for the second, and the freed rows are whole again. */
static void test_row_budget(void **state) {
    (void)state;
    two_processes t;
    two_processes_read(&t);
    agent_proc libc = t.libc, self = t.self;
    size_t libc_rows = t.libc_rows, self_rows = t.self_rows;
    const char *exe = t.exe;
    assert_true(libc_rows > 1000 && self_rows > 10);

    fake_maps f;
    uint32_t budget = (uint32_t)(libc_rows > self_rows ? libc_rows : self_rows) + 1;
    if (budget >= libc_rows + self_rows)
        budget = (uint32_t)(libc_rows + self_rows - 1);
    agent_unwinder *u = new_unwinder(&f, budget);
    strata_error err;
    assert_int_equal(agent_unwinder_add_process(u, &libc, &err), 1);
    assert_int_equal(agent_unwinder_add_process(u, &self, &err), 0); /* no room */
    agent_unwinder_stats st;
    agent_unwinder_stats_get(u, &st);
    assert_int_equal(st.tables_refused, 1);
    assert_int_equal(st.rows_used, libc_rows);
    assert_null(fake_find(&f, (uint32_t)self.pid, false));

    /* libc's table is no longer listed, but was this window: it is kept, the newcomer refused
     * again (without reading it: its size is known), so tables of processes that come and go do
     * not take turns being read */
    agent_unwinder_remove_process(u, libc.pid);
    uint64_t reads = st.files_read;
    assert_int_equal(agent_unwinder_add_process(u, &self, &err), 0);
    agent_unwinder_stats_get(u, &st);
    assert_int_equal(st.tables_refused, 2);
    assert_int_equal(st.tables_evicted, 0);
    assert_int_equal(st.files_read, reads);
    /* a window later libc's table has aged: it is evicted and the newcomer read once */
    agent_unwinder_end_window(u);
    assert_int_equal(agent_unwinder_add_process(u, &self, &err), 1);
    agent_unwinder_stats_get(u, &st);
    assert_int_equal(st.files_read, reads + 1);
    assert_int_equal(st.tables_evicted, 1);
    assert_int_equal(st.rows_used, self_rows);
    assert_int_equal(st.tables, 1);
    const struct agent_unwind_proc *list = fake_find(&f, (uint32_t)self.pid, false);
    assert_non_null(list);
    assert_int_equal(list->mappings[0].first_row, 0); /* the freed space was coalesced */
    /* read into the room the eviction made, whole and in order */
    agent_cfi_table want;
    assert_int_equal(agent_cfi_read_file(exe, 0, &want, &err), 0);
    assert_int_equal(want.n_rows, self_rows);
    assert_memory_equal(f.rows, want.rows, self_rows * sizeof *want.rows);
    agent_cfi_table_free(&want);
    uint64_t rel = 0;
    const struct agent_unwind_row *r = lookup(&f, list, (uintptr_t)&unwinder_test_function, &rel);
    assert_non_null(r);
    assert_int_equal(r->pc, rel);
    assert_int_equal(r->cfa_type, AGENT_CFA_RSP);
    assert_int_equal(r->cfa_offset, 8);

    agent_proc_free(&libc);
    agent_proc_free(&self);
    agent_unwinder_free(u);
    free(f.rows);
}

/* A new table longer than the longest free range: its first read counts it, an aged table is
 * evicted, and a second read puts it whole where the room is. */
static void test_table_longer_than_free_range(void **state) {
    (void)state;
    two_processes t;
    two_processes_read(&t);
    agent_proc libc = t.libc, self = t.self;
    size_t libc_rows = t.libc_rows, self_rows = t.self_rows;
    const char *libc_path = t.libc_path;
    assert_true(libc_rows > self_rows + 1);

    fake_maps f;
    agent_unwinder *u = new_unwinder(&f, (uint32_t)libc_rows + 1);
    strata_error err;
    assert_int_equal(agent_unwinder_add_process(u, &self, &err), 1); /* at the array's start */
    agent_unwinder_remove_process(u, self.pid);
    agent_unwinder_end_window(u);
    assert_int_equal(agent_unwinder_add_process(u, &libc, &err), 1);
    agent_unwinder_stats st;
    agent_unwinder_stats_get(u, &st);
    assert_int_equal(st.files_read, 3); /* self once, libc counted then read */
    assert_int_equal(st.tables_evicted, 1);
    assert_int_equal(st.rows_used, libc_rows);
    const struct agent_unwind_proc *list = fake_find(&f, (uint32_t)libc.pid, false);
    assert_non_null(list);
    assert_int_equal(list->mappings[0].first_row, 0);
    agent_cfi_table want;
    assert_int_equal(agent_cfi_read_file(libc_path, 0, &want, &err), 0);
    assert_int_equal(want.n_rows, libc_rows);
    assert_memory_equal(f.rows, want.rows, libc_rows * sizeof *want.rows);
    agent_cfi_table_free(&want);

    agent_proc_free(&libc);
    agent_proc_free(&self);
    agent_unwinder_free(u);
    free(f.rows);
}

/* A sink that cannot take rows fails the call with its message and leaves nothing listed. */
static void test_sink_failure(void **state) {
    (void)state;
    fake_maps f;
    agent_unwinder *u = new_unwinder(&f, SINK_ROWS);
    f.fail_rows = 1;
    agent_proc p;
    read_self(&p);
    strata_error err;
    assert_int_equal(agent_unwinder_add_process(u, &p, &err), -1);
    assert_non_null(strstr(err.message, "the sink is broken"));
    agent_unwinder_stats st;
    agent_unwinder_stats_get(u, &st);
    assert_int_equal(st.processes, 0);
    assert_int_equal(st.rows_used, 0);
    f.fail_rows = 0; /* the file is retried only after retry_windows windows */
    for (int i = 0; i < 6; i++)
        agent_unwinder_end_window(u);
    assert_true(agent_unwinder_add_process(u, &p, &err) >= 2);
    agent_proc_free(&p);
    agent_unwinder_free(u);
    free(f.rows);
}

/* --- walking a copy of this very stack, against glibc's backtrace() (libgcc's unwinder) ----- */

typedef struct captured {
    struct agent_stack_copy copy;
    void *trace[64];
    int n_trace;
} captured;

/* The initial stack pointer of the main thread (glibc's, exported by the loader): the frames of
 * _start and above lie below it, and under valgrind it is the client stack's, unlike [stack]. */
extern void *__libc_stack_end;

static uint64_t stack_top(void) {
    return (uint64_t)(uintptr_t)__libc_stack_end;
}

/* Copies live stack as the kernel does, word by word: not through memcpy, which AddressSanitizer
 * would check against the redzones it keeps between other frames' locals. */
#if defined(__clang__) || defined(__GNUC__)
__attribute__((no_sanitize_address))
#endif
static void
copy_stack_words(uint8_t *out, uint64_t from, size_t len) {
    const volatile uint64_t *src = (const volatile uint64_t *)(uintptr_t)from;
    for (size_t i = 0; i < len / 8; i++) {
        uint64_t w = src[i];
        __builtin_memcpy(out + i * 8, &w, 8);
    }
}

/* Takes this thread's registers and the stack above sp, as the BPF program does, then the
 * return addresses backtrace() finds from the same place. */
__attribute__((noinline)) static void capture(captured *out) {
    uint64_t pc, sp, bp;
    __asm__ volatile("lea 0(%%rip), %0\n\tmov %%rsp, %1\n\tmov %%rbp, %2"
                     : "=r"(pc), "=r"(sp), "=r"(bp));
    uint64_t top = stack_top();
    size_t len = top - sp < sizeof out->copy.data ? (size_t)(top - sp) : sizeof out->copy.data;
    out->copy.pc = pc;
    out->copy.sp = sp;
    out->copy.bp = bp;
    out->copy.base = sp;
    out->copy.len = (uint32_t)len;
    copy_stack_words(out->copy.data, sp, len);
    out->n_trace = backtrace(out->trace, 64);
}

__attribute__((noinline)) static void capture_inner(captured *out, int depth) {
    if (depth > 0)
        capture_inner(out, depth - 1);
    else
        capture(out);
    __asm__ volatile("" ::: "memory"); /* not a tail call */
}

static void test_walks_a_stack_copy_as_backtrace_does(void **state) {
    (void)state;
    /* The maps live on the heap: the walk reads only the 16 KiB copy, and this frame must not
     * take it all (fake_maps is 33 KiB). */
    fake_maps *fm = malloc(sizeof *fm);
    assert_non_null(fm);
    agent_unwinder *u = new_unwinder(fm, SINK_ROWS);
    agent_proc p;
    read_self(&p);
    strata_error err;
    assert_true(agent_unwinder_add_process(u, &p, &err) >= 2);
    captured *c = calloc(1, sizeof *c);
    assert_non_null(c);
    capture_inner(c, 3);
    uint64_t frames[AGENT_MAX_FRAMES];
    bool complete = false;
    size_t n = agent_unwinder_walk_copy(u, (uint32_t)getpid(), &c->copy, frames, AGENT_MAX_FRAMES,
                                        &complete);
    /* frames[0] is the pc in capture; frames[1] the return address into capture_inner, which
     * backtrace() also finds, after its own return into capture (and, under AddressSanitizer, one
     * into its interceptor). From there on both must agree address for address. */
    assert_true(c->n_trace >= 8);
    int k = 0;
    while (k < 3 && k < c->n_trace && (uint64_t)(uintptr_t)c->trace[k] != frames[1])
        k++;
    if (k == 3 || n < (size_t)(c->n_trace - k + 1)) {
        for (int i = 0; i < c->n_trace; i++)
            print_message("%d walked 0x%llx backtrace %p\n", i,
                          i < (int)n ? (unsigned long long)frames[i] : 0ULL, c->trace[i]);
        fail_msg("the walk (%zu frames) does not follow backtrace (%d)", n, c->n_trace);
    }
    for (int i = k; i < c->n_trace; i++)
        if (frames[1 + i - k] != (uint64_t)(uintptr_t)c->trace[i])
            fail_msg("frame %d: walked 0x%llx, backtrace 0x%llx", 1 + i - k,
                     (unsigned long long)frames[1 + i - k],
                     (unsigned long long)(uintptr_t)c->trace[i]);
    assert_true(complete); /* _start's undefined return address ends it */
    /* rows come back a block per frame at most, and a second walk finds them all cached */
    assert_true(fm->rows_read_calls >= 1 && fm->rows_read_calls <= n);
    uint64_t calls = fm->rows_read_calls;
    assert_int_equal(agent_unwinder_walk_copy(u, (uint32_t)getpid(), &c->copy, frames,
                                              AGENT_MAX_FRAMES, &complete),
                     n);
    assert_int_equal(fm->rows_read_calls, calls);
    /* A copy cut short ends the walk inside it, incomplete, without reading past it. */
    c->copy.len = 64;
    n = agent_unwinder_walk_copy(u, (uint32_t)getpid(), &c->copy, frames, AGENT_MAX_FRAMES,
                                 &complete);
    assert_true(n >= 1 && n < (size_t)(c->n_trace - k + 1));
    assert_false(complete);
    /* An unlisted process walks nothing. */
    assert_int_equal(agent_unwinder_walk_copy(u, 1, &c->copy, frames, AGENT_MAX_FRAMES, &complete),
                     0);
    free(c);
    agent_proc_free(&p);
    agent_unwinder_free(u);
    free(fm->rows);
    free(fm);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lists_this_process),
        cmocka_unit_test(test_wakes_while_mappings_change),
        cmocka_unit_test(test_row_budget),
        cmocka_unit_test(test_table_longer_than_free_range),
        cmocka_unit_test(test_sink_failure),
        cmocka_unit_test(test_walks_a_stack_copy_as_backtrace_does),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
