/*
 * pyframes_test.c - the pure parts of Python frames (pyframes.h): CPython 3.11's location table
 * against the lines CPython itself gives (code.co_lines() of a known function), the interleaving
 * of Python and native frames on hand-built stacks, Python frame words as part of a stack's
 * identity in the aggregator and as mapping-less locations in the pprof, and detection leaving a
 * process that is not Python alone. Real interpreters are tests/integration/test_agent.py's.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "aggregate.h"
#include "pprof/pprof.h"
#include "procinfo.h"
#include "profile_build.h"
#include "pyframes.h"

/* co_linetable of this function, compiled by Debian's python3.11 (3.11.2), first line 1:
 *
 *   def f(n):
 *       total = 0
 *       for i in range(n):
 *           total += i * i
 *
 *       return (total +
 *               1)
 */
static const uint8_t f_linetable[] =
    "\x80\x00\xd8\x0c\x0d\x80\x45\xdd\x0d\x12\x90\x31\x89\x58\x8c\x58\xf0\x00\x01\x05\x17\xf0\x00"
    "\x01\x05\x17\x88\x01\xd8\x08\x0d\x90\x11\x90\x51\x91\x15\x89\x0e\x88\x05\x88\x05\xe0\x0c\x11"
    "\xd8\x0c\x0d\xf1\x03\x01\x0d\x0e\xf0\x00\x01\x05\x0f";

/* f.__code__.co_lines(): (start, end, line) in bytes; its code is 68 bytes. */
static const struct {
    int start, end, line;
} f_lines[] = {{0, 2, 1},   {2, 6, 2},   {6, 40, 3}, {40, 58, 4},
               {58, 60, 6}, {60, 62, 7}, {62, 68, 6}};

static void test_line_table(void **state) {
    (void)state;
    size_t len = sizeof f_linetable - 1;
    for (size_t i = 0; i < sizeof f_lines / sizeof *f_lines; i++)
        for (int off = f_lines[i].start; off < f_lines[i].end; off += 2)
            assert_int_equal(agent_python_line(f_linetable, len, 1, off), f_lines[i].line);
    /* before the first instruction (a frame just pushed): the first line, as CPython says */
    assert_int_equal(agent_python_line(f_linetable, len, 1, -2), 1);
    assert_int_equal(agent_python_line(f_linetable, len, 40, -2), 40);
    /* relative to the first line */
    assert_int_equal(agent_python_line(f_linetable, len, 101, 40), 104);
    /* past the table, an empty table, a cut one (never read past len) */
    assert_int_equal(agent_python_line(f_linetable, len, 1, 68), -1);
    assert_int_equal(agent_python_line(f_linetable, 0, 1, 0), -1);
    for (size_t cut = 0; cut < len; cut++)
        (void)agent_python_line(f_linetable, cut, 1, 66);
    /* an entry without a line (code 15): -1; the line goes on after it */
    static const uint8_t none[] = {0xd8, 0x00, 0x00, 0xf8, 0x80, 0x00};
    assert_int_equal(agent_python_line(none, sizeof none, 10, 0), 11);
    assert_int_equal(agent_python_line(none, sizeof none, 10, 2), -1);
    assert_int_equal(agent_python_line(none, sizeof none, 10, 4), 11);
    /* no-column form (code 13) with a negative delta: svarint 3 -> -1 */
    static const uint8_t back[] = {0xe8, 0x0a, 0xe8, 0x03};
    assert_int_equal(agent_python_line(back, sizeof back, 10, 0), 15);
    assert_int_equal(agent_python_line(back, sizeof back, 10, 2), 14);
    /* garbage: a continuation byte where an entry should start */
    static const uint8_t bad[] = {0x12, 0x34};
    assert_int_equal(agent_python_line(bad, sizeof bad, 10, 0), -1);
}

#define EVAL_START 0x5000u
#define EVAL_END 0x6000u
#define W(i) (AGENT_PY_WORD_TAG | (i))

static void test_interleave(void **state) {
    (void)state;
    uint64_t out[32];
    /* leaf in a helper called from an evaluation running W0 (called by W1, its entry), itself
     * called from C (0x2000) under a second evaluation running W2, W3 */
    const uint64_t native[] = {0x1000, 0x5010, 0x2000, 0x5020, 0x3000};
    const uint64_t py[] = {W(0), W(1), W(2), W(3)};
    const bool entry[] = {false, true, false, true};
    const uint64_t want[] = {0x1000, W(0), W(1), 0x5010, 0x2000, W(2), W(3), 0x5020, 0x3000};
    size_t n = agent_python_interleave(native, 5, py, entry, 4, EVAL_START, EVAL_END, out, 32);
    assert_int_equal(n, 9);
    assert_memory_equal(out, want, sizeof want);

    /* the leaf itself is in the evaluation (a pc: no -1) */
    const uint64_t leaf_eval[] = {0x5000, 0x3000};
    const uint64_t want_leaf[] = {W(0), W(1), 0x5000, 0x3000, W(2), W(3)};
    n = agent_python_interleave(leaf_eval, 2, py, entry, 4, EVAL_START, EVAL_END, out, 32);
    assert_int_equal(n, 6);
    assert_memory_equal(out, want_leaf, sizeof want_leaf);

    /* return addresses at the bounds: 0x5000 returns into the function before it, 0x6000 into
     * the evaluation's last call */
    const uint64_t bounds[] = {0x1000, 0x5000, 0x6000};
    const uint64_t want_bounds[] = {0x1000, 0x5000, W(0), W(1), 0x6000, W(2), W(3)};
    n = agent_python_interleave(bounds, 3, py, entry, 4, EVAL_START, EVAL_END, out, 32);
    assert_int_equal(n, 7);
    assert_memory_equal(out, want_bounds, sizeof want_bounds);

    /* no evaluation on the native stack (a walk that stopped early): Python frames go last */
    const uint64_t short_walk[] = {0x1000};
    const uint64_t want_short[] = {0x1000, W(0), W(1), W(2), W(3)};
    n = agent_python_interleave(short_walk, 1, py, entry, 4, EVAL_START, EVAL_END, out, 32);
    assert_int_equal(n, 5);
    assert_memory_equal(out, want_short, sizeof want_short);

    /* no entry flag at all: the first evaluation takes every frame */
    const bool no_entry[] = {false, false, false, false};
    const uint64_t want_all[] = {0x1000, W(0), W(1), W(2), W(3), 0x5010, 0x2000, 0x5020, 0x3000};
    n = agent_python_interleave(native, 5, py, no_entry, 4, EVAL_START, EVAL_END, out, 32);
    assert_int_equal(n, 9);
    assert_memory_equal(out, want_all, sizeof want_all);

    /* capacity: cut at the root end, never past cap */
    out[3] = 0xdead;
    n = agent_python_interleave(native, 5, py, entry, 4, EVAL_START, EVAL_END, out, 3);
    assert_int_equal(n, 3);
    assert_memory_equal(out, want, 3 * sizeof *out);
    assert_int_equal(out[3], 0xdead);

    /* no Python frames: the native ones unchanged */
    n = agent_python_interleave(native, 5, py, entry, 0, EVAL_START, EVAL_END, out, 32);
    assert_int_equal(n, 5);
    assert_memory_equal(out, native, sizeof native);
    assert_true(agent_python_is_frame(W(7)));
    assert_false(agent_python_is_frame(0xffffffff81000000ull));
    assert_false(agent_python_is_frame(0x7fffffffe000ull));
}

/* A stand-in for agent_python_merge: puts py[0].code as a Python frame word after the leaf. */
static bool fake_merge(void *ctx, const agent_proc *proc, const struct agent_sample *s, uint64_t *u,
                       size_t *n, size_t cap) {
    (void)proc;
    (*(int *)ctx)++;
    if (s->py_n == 0 || *n + 1 > cap)
        return false;
    memmove(u + 2, u + 1, (*n - 1) * sizeof *u);
    u[1] = AGENT_PY_WORD_TAG | s->py[0].code;
    (*n)++;
    return true;
}

static void sample_with(struct agent_sample *s, uint32_t pid, uint32_t py_n, uint64_t code) {
    memset(s, 0, sizeof *s);
    s->pid = pid;
    s->tid = pid;
    s->ustack_bytes = 2 * sizeof(__u64);
    s->ustack[0] = 0x1000;
    s->ustack[1] = 0x2000;
    s->py_n = py_n;
    s->py[0].code = code;
}

static void test_python_words_in_stacks_and_profile(void **state) {
    (void)state;
    agent_aggregator a;
    assert_int_equal(agent_aggregator_init(&a, "/nonexistent-proc", 0, NULL), 0);
    int calls = 0;
    a.python = fake_merge;
    a.python_ctx = &calls;
    struct agent_sample *s = malloc(sizeof *s);
    assert_non_null(s);
    uint32_t pid = (uint32_t)getpid();
    /* have_proc is false under a missing proc root: the hook is not called */
    sample_with(s, pid, 1, 7);
    assert_int_equal(agent_aggregator_add(&a, s, NULL), 0);
    assert_int_equal(calls, 0);
    agent_aggregator_free(&a);

    assert_int_equal(agent_aggregator_init(&a, NULL, 0, NULL), 0);
    a.python = fake_merge;
    a.python_ctx = &calls;
    sample_with(s, pid, 1, 7); /* the same native frames, three Python variants */
    assert_int_equal(agent_aggregator_add(&a, s, NULL), 0);
    assert_int_equal(agent_aggregator_add(&a, s, NULL), 0);
    sample_with(s, pid, 1, 8);
    assert_int_equal(agent_aggregator_add(&a, s, NULL), 0);
    sample_with(s, pid, 0, 0);
    assert_int_equal(agent_aggregator_add(&a, s, NULL), 0);
    assert_int_equal(calls, 4);
    assert_int_equal(a.n_procs, 1);
    agent_process *p = a.procs[0];
    assert_int_equal(p->n_stacks, 3);
    assert_int_equal(p->stacks[0].count, 2);
    assert_int_equal(p->stacks[0].n_user, 3);
    assert_int_equal(agent_stack_frames(&a, &p->stacks[0])[1], AGENT_PY_WORD_TAG | 7);
    assert_int_equal(p->stacks[2].n_user, 2);

    /* without an agent_python the word is a location of "<unknown>", with no mapping */
    agent_profile_context ctx = {NULL, NULL, 1, 1000000000, 52631578, false, NULL, NULL};
    strata_buffer out = STRATA_BUFFER_INIT;
    assert_int_equal(agent_profile_build(&a, p, &ctx, &out, NULL, NULL), 0);
    pprof_profile prof;
    assert_int_equal(pprof_decode(out.data, out.len, NULL, &prof, NULL), 0);
    size_t unknown = 0;
    for (size_t i = 0; i < prof.n_locations; i++) {
        const pprof_location *loc = &prof.locations[i];
        if (loc->line_count != 1 || loc->mapping_id != 0 || loc->address != 0)
            continue;
        const pprof_function *f =
            pprof_find_function(&prof, prof.lines[loc->line_offset].function_id);
        pprof_string name = pprof_string_at(&prof, f->name);
        if (name.len == 9 && memcmp(name.ptr, "<unknown>", 9) == 0)
            unknown++;
    }
    assert_int_equal(unknown, 2); /* words 7 and 8 */
    pprof_profile_free(&prof);
    strata_buffer_free(&out);
    agent_aggregator_free(&a);
    free(s);
}

static int publishes;
static int count_publish(void *ctx, uint32_t pid, const struct agent_py_proc *info) {
    (void)ctx, (void)pid, (void)info;
    publishes++;
    return 0;
}

/* This test binary is no interpreter: detection publishes nothing and the stack is left alone. */
static void test_not_python_left_alone(void **state) {
    (void)state;
    agent_python_options o = {.publish = count_publish};
    agent_python *py = agent_python_new(&o, NULL);
    assert_non_null(py);
    agent_proc proc;
    assert_int_equal(agent_proc_read("/proc", getpid(), &proc, NULL), 0);
    struct agent_sample *s = calloc(1, sizeof *s);
    assert_non_null(s);
    s->py_n = 1;
    uint64_t u[4] = {0x1000, 0x2000};
    size_t n = 2;
    assert_false(agent_python_merge(py, &proc, s, u, &n, 4));
    assert_int_equal(n, 2);
    assert_int_equal(publishes, 0);
    agent_py_frame_info info;
    assert_false(agent_python_frame_info(py, getpid(), AGENT_PY_WORD_TAG, &info));
    agent_python_end_window(py);
    agent_python_end_window(py); /* forgotten after a silent window */
    agent_python_stats st;
    agent_python_stats_get(py, &st);
    assert_int_equal(st.processes, 0);
    free(s);
    agent_proc_free(&proc);
    agent_python_free(py);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_line_table),
        cmocka_unit_test(test_interleave),
        cmocka_unit_test(test_python_words_in_stacks_and_profile),
        cmocka_unit_test(test_not_python_left_alone),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
