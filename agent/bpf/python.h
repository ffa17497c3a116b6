/*
 * python.h - the contract between the BPF side of Python stack reading (python.bpf.h) and user
 * space (pyframes.c): the per-process description user space writes into the `python_procs` map
 * and the per-frame record the BPF program appends to each sample (oncpu.h's agent_sample).
 *
 * Design. User space finds CPython processes (an executable mapping of a file that exports
 * _PyRuntime and Py_Version), and writes one agent_py_proc per process: the address of
 * _PyRuntime in that process and the offsets of the handful of fields the walk follows, taken
 * from pyframes.c's table for the interpreter's minor version. The BPF side is version-agnostic:
 * it only adds offsets. Per Python frame it records the code object's address and where the
 * frame's instruction pointer is (bytes from the code's first instruction); user space reads the
 * code object once, turns the offset into a line and names the frame (as the OpenTelemetry eBPF
 * profiler does: BPF stays cheap and bounded, strings never cross the ring).
 *
 * Included from both sides, so it uses only fixed-width kernel types.
 */
#ifndef STRATA_AGENT_PYTHON_H
#define STRATA_AGENT_PYTHON_H

#ifndef __VMLINUX_H__ /* user space; the BPF side gets these types from vmlinux.h */
#include <linux/types.h>
#endif

/* Python frames read per sample, innermost first; deeper ones are cut (AGENT_PY_TRUNCATED). */
#define AGENT_PY_MAX_FRAMES 64
/* Python processes described to BPF at once. */
#define AGENT_PY_MAX_PROCS 4096

/* agent_py_frame.flags */
#define AGENT_PY_FRAME_ENTRY 1u /* the first frame of a C-level _PyEval_EvalFrameDefault call */

/* agent_sample.py_flags */
#define AGENT_PY_TRUNCATED 1u  /* more than AGENT_PY_MAX_FRAMES frames */
#define AGENT_PY_READ_ERROR 2u /* a frame could not be read: the walk ended there */
#define AGENT_PY_NO_GIL 4u     /* a Python process, but the thread does not hold the GIL */

struct agent_py_frame {
    __u64 code;         /* PyCodeObject * in the process */
    __s32 instr_offset; /* prev_instr - co_code_adaptive, in bytes (-2 before the first one) */
    __u32 flags;        /* AGENT_PY_FRAME_* */
};

/* The value of the python_procs map (key: the process id). Offsets are in bytes. */
struct agent_py_proc {
    __u64 runtime;          /* &_PyRuntime in the process */
    __u16 tstate_current;   /* _PyRuntimeState.gilstate.tstate_current: the GIL holder */
    __u16 native_thread_id; /* PyThreadState.native_thread_id */
    __u16 cframe;           /* PyThreadState.cframe */
    __u16 current_frame;    /* _PyCFrame.current_frame */
    __u16 f_code;           /* _PyInterpreterFrame.f_code */
    __u16 previous;         /* _PyInterpreterFrame.previous */
    __u16 prev_instr;       /* _PyInterpreterFrame.prev_instr */
    __u16 is_entry;         /* _PyInterpreterFrame.is_entry (one byte) */
    __u16 code_adaptive;    /* PyCodeObject.co_code_adaptive: the first instruction */
    __u16 pad[3];
};

#endif
