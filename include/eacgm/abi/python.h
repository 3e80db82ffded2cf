/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/* What the BPF Python frame walker reads and emits; shared with the agent.
 * Plain C, fixed-size fields. */
#ifndef EACGM_ABI_PYTHON_H
#define EACGM_ABI_PYTHON_H

#ifndef __bpf__
#include <linux/types.h>
#include <stddef.h>
#endif

/* Frames kept per sample, innermost first. */
#define EACGM_PY_MAX_FRAMES 64
/* Frames kept for the Python stack behind a CUDA/NCCL/torch span. */
#define EACGM_PY_SPAN_FRAMES 16
/* Threads of one interpreter searched for the current one. */
#define EACGM_PY_MAX_THREADS 64

/* Per traced Python process: where its runtime is and the offsets of its
 * CPython version (src/layers/python_offsets.h explains each). */
struct eacgm_py_process {
	__u64 runtime;   /* address of _PyRuntime in the process */
	__u64 code_type; /* address of PyCode_Type: a frame whose code is not one ends the walk */
	__u16 minor;     /* 3.minor */
	__u16 runtime_interpreters_head;
	__u16 interp_threads_head;
	__u16 tstate_next;
	/* Which field names the thread: native_thread_id (3.11+), compared with
	 * the tid, or thread_id (pthread_self(), 3.8-3.10), compared with
	 * glibc's pthread_self() of the thread: its thread pointer less
	 * pthread_below_tp (bpf/arch: where the kernel keeps the thread
	 * pointer; src/arch: the distance). */
	__u16 tstate_thread_key;
	__u16 thread_key_is_pthread;
	__u16 pthread_below_tp;
	__u16 tstate_frame;
	__u16 tstate_cframe;
	__u16 cframe_current_frame;
	__u16 frame_previous;
	__u16 frame_code;
	__u16 frame_instr;
	__u16 frame_owner;
	__u16 code_name;
	__u16 code_filename;
	/* One read per frame and one per code object instead of one per field
	 * (a walk of 16 frames made about 100 reads): the frame's fields lie
	 * in [frame_lo, frame_lo + frame_len), the code object's (type, name,
	 * file) in [8, 8 + code_len). Set by the agent from the offsets above. */
	__u16 frame_lo;
	__u16 frame_len; /* <= EACGM_PY_FRAME_READ */
	__u16 code_len;  /* <= EACGM_PY_CODE_READ */
	/* f_globals, read with the frame's fields: the walker's code cache is
	 * keyed by code object and globals (0xffff: no cache). */
	__u16 frame_globals;
};

#define EACGM_PY_FRAME_READ 96
#define EACGM_PY_CODE_READ 128

struct eacgm_py_frame {
	__u64 code;  /* PyCodeObject* */
	__u64 instr; /* f_lasti (3.8-3.10) or the instruction pointer (3.11+) */
	__u64 name;  /* its co_name pointer, read now: names are resolved later, and
			by then the code object may be gone and its address reused */
	__u64 file;  /* its co_filename pointer: with name, what a cached name must
			match to stand for an object freed before it was read */
};

enum eacgm_py_flags {
	EACGM_PY_TRUNCATED = 1,   /* more frames than kept */
	EACGM_PY_NO_THREAD = 2,   /* no thread state for this thread (not running Python) */
	EACGM_PY_READ_FAILED = 4, /* a pointer did not read: stack cut there */
};

enum eacgm_py_kind {
	EACGM_PY_SAMPLE = 1, /* from the sampling profiler */
	EACGM_PY_SPAN = 2,   /* the stack behind a span; id = the span's py_stack */
};

struct eacgm_py_stack_event {
	__u64 ts_ns;
	__u64 id; /* EACGM_PY_SPAN: matches eacgm_span_event.py_stack */
	__u32 tgid;
	__u32 tid;
	__u16 kind;
	__u16 flags;
	__u32 nframes;
	struct eacgm_py_frame frames[EACGM_PY_MAX_FRAMES];
};

/* Counters of the walker, per CPU. */
enum eacgm_py_counter {
	EACGM_PY_CNT_SAMPLES = 0,
	EACGM_PY_CNT_NO_THREAD = 1,
	EACGM_PY_CNT_READ_FAILED = 2,
	EACGM_PY_CNT_RINGBUF_FULL = 3,
	/* The sampler program's own time over the samples it recorded (each
	 * timed: two clock reads beside a walk of microseconds): what a sample
	 * costs the thread it interrupts, beside the interrupt itself. */
	EACGM_PY_CNT_SAMPLE_NS = 4,
	EACGM_PY_CNT_COUNT = 5,
};

#ifdef __cplusplus
static_assert(sizeof(struct eacgm_py_process) == 56, "eacgm_py_process: shared with BPF");
static_assert(offsetof(struct eacgm_py_process, frame_lo) == 48, "eacgm_py_process: shared with BPF");
static_assert(offsetof(struct eacgm_py_process, frame_globals) == 54, "eacgm_py_process: shared with BPF");
static_assert(sizeof(struct eacgm_py_frame) == 32, "eacgm_py_frame: shared with BPF");
static_assert(offsetof(struct eacgm_py_stack_event, frames) == 32, "eacgm_py_stack_event: shared with BPF");
#endif

#endif
