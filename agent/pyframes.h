/*
 * pyframes.h - Python frames in the agent's stacks: finding CPython processes, naming the frames
 * the BPF side recorded (bpf/python.h, bpf/python.bpf.h), and interleaving them with the native
 * frames.
 *
 * Design (as the OpenTelemetry eBPF profiler and Parca's agent do it, reduced to CPython 3.11).
 *
 *  - Detection. On a process's first sample (and again when its mappings change) its executable
 *    mappings are searched for a file named like python3.X or libpython3.X*.so that exports
 *    _PyRuntime and Py_Version (read from the file: Debian's stripped /usr/bin/python3.11 keeps
 *    them in .dynsym). Py_Version gives the minor version, which picks the offsets: a table per
 *    minor version, checked against the CPython headers and the interpreter's own DWARF
 *    (python3.11-dbg); only 3.11 is in it for now, other versions are left native-only. The load
 *    bias of the mapping turns _PyRuntime, PyCode_Type and _PyEval_EvalFrameDefault into process
 *    addresses, and the process is handed to BPF through the publish callback (the python_procs
 *    map).
 *  - Names and lines. A frame comes as (code object address, instruction offset). The code object
 *    is read once per window with process_vm_readv and must be one (its type is PyCode_Type):
 *    co_qualname, co_filename, co_firstlineno and co_linetable, whose 3.11 location table gives
 *    the line of the offset (agent_python_line). A code object that cannot be read names the
 *    frame "<unknown>"; nothing read from the process is trusted beyond its own bounds.
 *  - Stack identity. A Python frame becomes one user frame word, AGENT_PY_WORD_TAG | index, the
 *    index into the process's table of (code object, line) for the window. The tag is a
 *    non-canonical address (no user or kernel address looks like it), so words and addresses
 *    share the aggregator's stacks and its hashing; two samples in the same function and line are
 *    the same frame. profile_build.c asks agent_python_frame_info for the name, file and lines.
 *  - Interleaving (agent_python_interleave). Each native frame inside _PyEval_EvalFrameDefault is
 *    one C-level evaluation: the Python frames it runs - from the next unused one down to and
 *    including the next entry frame (is_entry) - are put just before it (leaf side), so the
 *    stack reads leaf first: hot_leaf, middle, outer, <module>, _PyEval_EvalFrameDefault,
 *    PyEval_EvalCode, ..., main. Python frames left over (the native walk stopped early: Debian
 *    builds CPython without frame pointers, so without DWARF unwinding the native stack is often
 *    only its leaf) go after the native frames.
 *  - Memory. Per Python process: its code objects and frames of the current window, cleared by
 *    agent_python_end_window (which also bounds staleness: a code object freed and its address
 *    reused is read again next window); processes silent for a window are forgotten and removed
 *    from the BPF map.
 *
 * The agent's main loop is the only user; nothing here is thread-safe.
 */
#ifndef STRATA_AGENT_PYFRAMES_H
#define STRATA_AGENT_PYFRAMES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "bpf/oncpu.h"
#include "common/error.h"
#include "procinfo.h"

#define AGENT_PY_WORD_TAG 0x8000000000000000ull

/* Whether a user frame word is a Python frame (AGENT_PY_WORD_TAG | index). */
static inline bool agent_python_is_frame(uint64_t word) {
    return (word >> 48) == (AGENT_PY_WORD_TAG >> 48);
}

/* Writes (pid's python_procs entry := *info), or deletes it when info is NULL; 0 on success. */
typedef int (*agent_python_publish_fn)(void *ctx, uint32_t pid, const struct agent_py_proc *info);

typedef struct agent_python_options {
    const char *proc_root; /* NULL = "/proc" */
    agent_python_publish_fn publish;
    void *publish_ctx;
} agent_python_options;

typedef struct agent_python_stats {
    uint64_t processes;      /* Python processes published to BPF (ever) */
    uint64_t unsupported;    /* interpreters found of a version without offsets */
    uint64_t samples;        /* samples that had Python frames */
    uint64_t no_gil;         /* samples of a Python process whose thread did not hold the GIL */
    uint64_t read_errors;    /* samples whose BPF walk ended on a failed read */
    uint64_t code_failures;  /* code objects that could not be read */
    uint64_t publish_errors; /* python_procs updates that failed (map full) */
} agent_python_stats;

typedef struct agent_python agent_python;

typedef struct agent_py_frame_info {
    const char *qualname; /* "<unknown>" when the code object could not be read */
    const char *filename; /* "" then */
    int64_t line;         /* 0 when unknown */
    int64_t first_line;   /* co_firstlineno; 0 when unknown */
} agent_py_frame_info;

agent_python *agent_python_new(const agent_python_options *options, strata_error *err);
void agent_python_free(agent_python *py);

/* The aggregator's Python hook (aggregate.h, agent_stack_fixup_fn, ctx: the agent_python): on a
 * process's first sample, detects and publishes it; for a sample with Python frames, puts them
 * into the user frames u[0..*n) (capacity cap). Returns true if it changed them. */
bool agent_python_merge(void *ctx, const agent_proc *proc, const struct agent_sample *s,
                        uint64_t *u, size_t *n, size_t cap);

/* What a frame word of process pid stands for; false if it is not one of this window's. The
 * strings live until agent_python_end_window. */
bool agent_python_frame_info(const agent_python *py, pid_t pid, uint64_t word,
                             agent_py_frame_info *out);

/* Ends a window: forgets this window's frames and code objects, and the processes that had no
 * sample in it (their python_procs entries are deleted). */
void agent_python_end_window(agent_python *py);

void agent_python_stats_get(const agent_python *py, agent_python_stats *out);

/* --- the pure parts, for the unit tests -------------------------------------------------------
 */

/* The line of the instruction at byte offset `offset` (prev_instr - co_code_adaptive) in a 3.11
 * location table (co_linetable), as PyCode_Addr2Line computes it: first_line for a negative
 * offset, -1 for an instruction without a line or an offset past the table. */
int agent_python_line(const uint8_t *table, size_t len, int first_line, int32_t offset);

/* Interleaves n_py Python frame words py[] (innermost first; entry[i]: frame i is the first of
 * its C-level evaluation) with the native frames native[] (leaf first; native[0] is a pc, the
 * others return addresses): before each native frame in [eval_start, eval_end) go the Python
 * frames of that evaluation; frames left over go last. Writes at most cap words to out; returns
 * how many. */
size_t agent_python_interleave(const uint64_t *native, size_t n_native, const uint64_t *py,
                               const bool *entry, size_t n_py, uint64_t eval_start,
                               uint64_t eval_end, uint64_t *out, size_t cap);

#endif
