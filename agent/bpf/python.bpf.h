/*
 * python.bpf.h - reads the Python frames of a sampled thread of a CPython process (BPF side; the
 * contract is python.h, user space is pyframes.c). Included once per object, by sample.bpf.h.
 *
 * Design. Only processes user space put in `python_procs` are read. The thread state is the GIL
 * holder, _PyRuntime.gilstate.tstate_current (3.11); it is taken only if its native_thread_id is
 * the sampled thread, since a thread that released the GIL (in a blocking call, or native code
 * that dropped it) is not running Python: such a sample is flagged AGENT_PY_NO_GIL and keeps its
 * native frames only. From the thread state the walk follows cframe->current_frame and then each
 * _PyInterpreterFrame's `previous`, recording f_code, prev_instr (as an offset from the code's
 * first instruction) and is_entry, at most AGENT_PY_MAX_FRAMES frames (a bounded loop). Every
 * read is bpf_probe_read_user: a bad pointer ends the walk (AGENT_PY_READ_ERROR), never the
 * program. Cost: 3 reads to find the frame, 4 per frame.
 */
#ifndef STRATA_AGENT_PYTHON_BPF_H
#define STRATA_AGENT_PYTHON_BPF_H

#include "vmlinux.h"

#include <bpf/bpf_helpers.h>

#include "oncpu.h"
#include "python.h"

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, AGENT_PY_MAX_PROCS);
    __type(key, __u32);
    __type(value, struct agent_py_proc);
} python_procs SEC(".maps");

static __always_inline int py_read_u64(__u64 *out, __u64 addr) {
    *out = 0;
    return bpf_probe_read_user(out, sizeof *out, (const void *)addr);
}

static __always_inline void read_python_frames(struct agent_sample *s) {
    s->py_n = 0;
    s->py_flags = 0;
    __u32 pid = s->pid;
    struct agent_py_proc *py = bpf_map_lookup_elem(&python_procs, &pid);
    if (py == NULL)
        return;
    __u64 tstate, tid, cframe, frame;
    if (py_read_u64(&tstate, py->runtime + py->tstate_current) != 0 || tstate == 0 ||
        py_read_u64(&tid, tstate + py->native_thread_id) != 0 || tid != s->tid) {
        s->py_flags = AGENT_PY_NO_GIL;
        return;
    }
    if (py_read_u64(&cframe, tstate + py->cframe) != 0 || cframe == 0 ||
        py_read_u64(&frame, cframe + py->current_frame) != 0) {
        s->py_flags = AGENT_PY_READ_ERROR;
        return;
    }
    for (__u32 i = 0; i < AGENT_PY_MAX_FRAMES; i++) {
        if (frame == 0)
            return;
        __u64 code, instr, previous;
        __u8 entry = 0;
        if (py_read_u64(&code, frame + py->f_code) != 0 ||
            py_read_u64(&instr, frame + py->prev_instr) != 0 ||
            py_read_u64(&previous, frame + py->previous) != 0 ||
            bpf_probe_read_user(&entry, sizeof entry, (const void *)(frame + py->is_entry)) != 0) {
            s->py_flags |= AGENT_PY_READ_ERROR;
            return;
        }
        s->py[i].code = code;
        s->py[i].instr_offset = (__s32)(instr - code - py->code_adaptive);
        s->py[i].flags = entry ? AGENT_PY_FRAME_ENTRY : 0;
        s->py_n = i + 1;
        frame = previous;
    }
    if (frame != 0)
        s->py_flags |= AGENT_PY_TRUNCATED;
}

#endif
