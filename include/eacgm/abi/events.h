/* SPDX-License-Identifier: (GPL-2.0 OR Apache-2.0) */
/* The span engine's records, shared by the BPF programs and the C++ agent
 * (host.h and python.h are the host layer's and the Python sampler's).
 * Plain C, fixed-size fields, no padding surprises: both sides compile it. */
#ifndef EACGM_ABI_EVENTS_H
#define EACGM_ABI_EVENTS_H

#ifdef __bpf__
/* vmlinux.h provides __u64 and friends. */
#else
#include <linux/types.h>
#endif

/* Arguments kept per span. A spec may name fewer. */
#define EACGM_MAX_ARGS 8
/* Nested calls remembered per thread (torch ops nest about 10 deep). */
#define EACGM_MAX_DEPTH 32
/* Probe specs loadable at once (cookies index this table). */
#define EACGM_MAX_SPECS 4096

/* Where an argument comes from. A slot is an argument word: the slot-th
 * integer or pointer word of the call, from 0; a struct of up to 16 bytes
 * passed by value (dim3) spans two. bpf/arch/ reads it from the processor's
 * argument registers or, past them, the stack. EACGM_SLOT_RESULT is the
 * hidden pointer to the result of a C++ function that returns a class by
 * value, wherever the processor passes it (x86-64: word 0, so the declared
 * arguments start at word 1; arm64: x8, so they start at word 0); user space
 * places the declared ones (arch::IsaRules::result_pointer_words). */
#define EACGM_SLOT_RESULT 255
enum eacgm_arg_source {
	EACGM_ARG_NONE = 0,
	EACGM_ARG_ENTRY = 1,       /* the slot's value at entry */
	EACGM_ARG_DEREF_ENTRY = 2, /* 8 bytes at (slot value + offset), read at entry */
	EACGM_ARG_DEREF_EXIT = 3,  /* 8 bytes at (slot value + offset), read at exit:
				      out-pointers such as cudaMalloc's devPtr */
	/* A PyTorch tensor passed as `const at::Tensor&`: the slot points at the
	 * Tensor, whose first word is its TensorImpl*. `offset` is where the
	 * TensorImpl keeps its dimension count (the sizes follow it), `offset2`
	 * where its dtype is; both depend on the torch version. A tensor takes
	 * two argument entries: */
	EACGM_ARG_TENSOR_A = 4, /* ndim | dtype << 8 | size[0] << 16 */
	EACGM_ARG_TENSOR_B = 5, /* size[1] | size[2] << 32 */
	/* 8 bytes at (*(slot value + offset) + offset2), read at entry: a field
	 * of an object the argument points to (a frame's code's co_name). */
	EACGM_ARG_DEREF2_ENTRY = 6,
	/* The first tensor of a `std::vector<at::Tensor>&` (a collective's
	 * tensors): the slot points at the vector, whose first word points at
	 * its first Tensor; then as EACGM_ARG_TENSOR_A/B. */
	EACGM_ARG_TENSORS_A = 7,
	EACGM_ARG_TENSORS_B = 8,
};

struct eacgm_arg_spec {
	__u8 source; /* enum eacgm_arg_source */
	__u8 slot;
	__u16 offset;
	__u16 offset2;
	__u16 pad;
};

/* What the BPF side needs to know of a probe spec; the rest (names, types,
 * how to print) stays in user space. Indexed by the attach cookie. */
struct eacgm_probe_spec {
	__u32 flags; /* EACGM_PROBE_* */
	__u32 nargs;
	struct eacgm_arg_spec args[EACGM_MAX_ARGS];
};

/* eacgm_probe_spec.flags. What the BPF side must know of a probe's layer,
 * and no more (the layers are user space's: src/common/layers.h). */
/* Its calls take no Python stack at entry: the Python tracer's probe on the
 * eval loop, whose entry is itself a Python function call. */
#define EACGM_PROBE_NO_PY_STACK 1

/* One finished call, emitted at its return. */
struct eacgm_span_event {
	__u64 start_ns; /* CLOCK_MONOTONIC (bpf_ktime_get_ns) */
	__u64 dur_ns;
	__u32 tgid;
	__u32 tid;
	__u32 spec_id;
	__u16 depth; /* open spans below this one on the thread at entry */
	__u16 flags;
	__u64 ret; /* the return register at return */
	__u64 args[EACGM_MAX_ARGS];
	__u64 py_stack; /* id of the Python stack record taken at entry, 0 if none */
	/* How long the thread waited on a run queue during the call (runnable,
	 * not running: the kernel's sched_info.run_delay, read at entry and
	 * exit); meaningful only with EACGM_SPAN_RUNQ in flags. */
	__u64 runq_ns;
};

/* eacgm_span_event.flags */
#define EACGM_SPAN_RUNQ 1 /* runq_ns was measured (a kernel with CONFIG_SCHED_INFO) */
/* py_stack is the record of the call this one nests in, made from the same
 * Python frame (the same stack, not walked again): that call owns it, and
 * its own span comes later. */
#define EACGM_SPAN_PY_SHARED 2
/* How a call left when it did not return (the exception guard, span.bpf.c):
 * its span ends where the leaving was seen to pass its frame, and ret is no
 * return value. At most one of the three is set. */
#define EACGM_SPAN_LEFT_EXCEPTION 4 /* a C++ exception unwound it; ret: the exception's std::type_info, 0: unknown */
#define EACGM_SPAN_LEFT_FORCED 8    /* forced unwinding (pthread_exit, pthread_cancel); ret 0 */
#define EACGM_SPAN_LEFT_LONGJMP 16  /* a longjmp to a frame above it; ret 0 */
#define EACGM_SPAN_LEFT (EACGM_SPAN_LEFT_EXCEPTION | EACGM_SPAN_LEFT_FORCED | EACGM_SPAN_LEFT_LONGJMP)

/* A record of the span ring that is no span: it names the C++ exception
 * type whose std::type_info is at `ret` in process `tgid` (the guard's
 * program, at a throw from a traced thread), with the type's mangled name
 * (type_info::name(), "N3c105ErrorE") in `args`, NUL-padded, cut at 63
 * bytes. Read before the spans the exception leaves, and named from it
 * even when the process is gone by the time its spans are decoded. */
#define EACGM_SPEC_EXCEPTION_TYPE 0xffffffffu

/* What a probe of the exception guard marks (its attach cookie): a point
 * where something is about to walk the stack or leave frames without their
 * return (span.bpf.c, probe/unwind_guard.cpp). */
enum eacgm_unwind_role {
	EACGM_UNWIND_RAISE = 1,     /* _Unwind_RaiseException: a throw starts its search */
	EACGM_UNWIND_RETHROW = 2,   /* _Unwind_Resume_or_Rethrow: `throw;` in a handler */
	EACGM_UNWIND_FORCED = 3,    /* _Unwind_ForcedUnwind: pthread_exit, pthread_cancel */
	EACGM_UNWIND_RESUME = 4,    /* _Unwind_Resume: a cleanup ran, the unwinding goes on */
	EACGM_UNWIND_BACKTRACE = 5, /* _Unwind_Backtrace: backtrace(), a walk of the stack */
	EACGM_UNWIND_CATCH = 6,     /* __cxa_begin_catch: a handler took the exception */
	EACGM_UNWIND_LONGJMP = 7,   /* longjmp, siglongjmp, __longjmp_chk */
	EACGM_UNWIND_FIND_FDE = 8,  /* _Unwind_Find_FDE: an unwinder is about to read the next frame's return */
	EACGM_UNWIND_ROLES = 9,
};

/* A call entered and not yet returned, as the span program keeps it per
 * thread (task storage): the agent reads these to see calls in flight, which
 * is how a hang is seen while it lasts. start_ns is written last and depth
 * after it, so a slot below depth is whole. */
struct eacgm_open_call {
	__u64 start_ns;
	__u64 sp; /* stack pointer at entry: identifies the frame at return */
	__u64 py_stack;
	__u32 spec_id;
	__u32 py_shared; /* py_stack is the outer call's: EACGM_SPAN_PY_SHARED */
	__u64 args[EACGM_MAX_ARGS];
	__u64 run_delay; /* the thread's sched_info.run_delay at entry */
	__u64 py_frame;  /* the innermost Python frame at entry (its stack's), 0: none */
};

struct eacgm_thread_calls {
	__u32 depth;
	/* Return addresses of this thread's frames that the exception guard
	 * gave back to the program for an unwinder's walk and has not yet put
	 * back under the return probe (span.bpf.c): 0 almost always. */
	__u32 restored;
	struct eacgm_open_call calls[EACGM_MAX_DEPTH];
};

/* The exception guard's requests to the agent (span.bpf.c's guard_requests
 * ring). The kernel forbids a BPF program to write a process's memory when
 * it is locked down (bpf_probe_write_user; lockdown=integrity, the default
 * with Secure Boot), so the guard's program asks the agent, stopping its
 * thread (SIGSTOP) until the agent has written value[i] into the 8-byte
 * stack slot slot[i] wherever it still holds expect[i] (process_vm_writev),
 * and resumed the process (SIGCONT). */
#define EACGM_GUARD_SLOTS 64
enum eacgm_guard_kind {
	EACGM_GUARD_RESTORE = 1, /* return addresses back, before an unwinder walks the stack */
	EACGM_GUARD_REARM = 2,   /* the trampoline back, for frames that live on */
};
struct eacgm_guard_request {
	__u32 tgid;
	__u32 tid;
	__u64 seq;   /* the thread's request number, from 1 */
	__u64 sp;    /* the thread's stack pointer when it asked */
	__u64 ip;    /* where it asked: the probed function's address */
	__u64 ts_ns; /* when it asked (CLOCK_MONOTONIC) */
	__u32 kind;
	__u32 n;
	__u64 slot[EACGM_GUARD_SLOTS];
	__u64 expect[EACGM_GUARD_SLOTS];
	__u64 value[EACGM_GUARD_SLOTS];
};

/* A thread's side of the guard (task storage, span.bpf.c's guards): its
 * program writes it; the agent reads seq and abandoned_seq to know whether
 * a request still stands. */
struct eacgm_guard_thread {
	__u64 seq;           /* requests made */
	__u64 restore_seq;   /* the last restore asked: no stack walk may read past it until done */
	__u64 abandoned_seq; /* a restore the unwinding no longer needs (caught below every slot) */
	__u64 tinfo;         /* the exception's std::type_info, 0: unknown, or none */
	__u64 lo, hi;        /* the slots restored and not rearmed */
	__u32 kind;          /* EACGM_SPAN_LEFT_* of the unwinding under way, 0: none */
	__u32 restored;      /* how many */
};

/* A power of two: the programs time one call in this many per CPU. */
#define EACGM_TIMED_EVERY 16

/* Counters kept per CPU in the span program; user space sums them. */
enum eacgm_counter {
	EACGM_CNT_SPANS = 0,          /* records written to the ring buffer */
	EACGM_CNT_RINGBUF_FULL = 1,   /* records lost: ring buffer full */
	EACGM_CNT_DEPTH_OVERFLOW = 2, /* entries deeper than EACGM_MAX_DEPTH, not recorded */
	EACGM_CNT_UNPAIRED = 3,       /* entries that never returned (longjmp, exceptions) */
	EACGM_CNT_NO_STATE = 4,       /* per-thread state map full */
	EACGM_CNT_EXITED_IN_CALL = 5, /* calls open when their thread exited (killed, or ended mid-call) */
	/* The programs' own time, on one call in EACGM_TIMED_EVERY of each CPU:
	 * what a traced call costs its thread beyond the trap (the overhead
	 * budget's measure; the kernel's run-time statistics would need
	 * CAP_SYS_ADMIN and slow every BPF program on the machine). */
	EACGM_CNT_ENTRY_NS = 6,
	EACGM_CNT_ENTRIES_TIMED = 7,
	EACGM_CNT_EXIT_NS = 8,
	EACGM_CNT_EXITS_TIMED = 9,
	/* The exception guard (span.bpf.c): requests made to the agent; the
	 * times a thread stopped itself for one (a request, or a walk that
	 * reached a frame before the agent had answered); requests it could
	 * not make (the request ring full, a shadow stack), after which the
	 * thread went on as under any return probe. */
	EACGM_CNT_GUARD_REQUESTS = 10,
	EACGM_CNT_GUARD_STOPS = 11,
	EACGM_CNT_GUARD_UNASKED = 12,
	/* Spans of calls left without a return (EACGM_SPAN_LEFT): recorded,
	 * not lost. */
	EACGM_CNT_LEFT = 13,
	EACGM_CNT_COUNT = 14,
};

/* Process-tree events from proc.bpf.c. */
enum eacgm_proc_kind {
	EACGM_PROC_FORK = 1,   /* a traced process made a child (tgid = child, ppid = parent) */
	EACGM_PROC_EXIT = 2,   /* a traced process's last thread left */
	EACGM_PROC_EXEC = 3,   /* a traced process exec'd a new program */
	EACGM_PROC_DLOPEN = 4, /* the dynamic linker changed a traced process's link map */
};

struct eacgm_proc_event {
	__u64 ts_ns;
	__u32 kind;
	__u32 tgid;
	__u32 ppid;
	__s32 exit_code;
	char comm[16];
};

#ifdef __cplusplus
#include <cstddef>
static_assert(sizeof(struct eacgm_arg_spec) == 8, "eacgm_arg_spec: shared with BPF");
static_assert(sizeof(struct eacgm_probe_spec) == 8 + 8 * EACGM_MAX_ARGS, "eacgm_probe_spec: shared with BPF");
static_assert(sizeof(struct eacgm_span_event) == 56 + 8 * EACGM_MAX_ARGS, "eacgm_span_event: shared with BPF");
static_assert(offsetof(struct eacgm_span_event, ret) == 32 && offsetof(struct eacgm_span_event, args) == 40,
	      "eacgm_span_event: shared with BPF");
static_assert(offsetof(struct eacgm_span_event, runq_ns) == 48 + 8 * EACGM_MAX_ARGS,
	      "eacgm_span_event: shared with BPF");
static_assert(sizeof(struct eacgm_open_call) == 48 + 8 * EACGM_MAX_ARGS, "eacgm_open_call: shared with BPF");
static_assert(offsetof(struct eacgm_open_call, args) == 32, "eacgm_open_call: shared with BPF");
static_assert(offsetof(struct eacgm_open_call, run_delay) == 32 + 8 * EACGM_MAX_ARGS &&
		      offsetof(struct eacgm_open_call, py_frame) == 40 + 8 * EACGM_MAX_ARGS,
	      "eacgm_open_call: shared with BPF");
static_assert(sizeof(struct eacgm_thread_calls) == 8 + EACGM_MAX_DEPTH * sizeof(struct eacgm_open_call),
	      "eacgm_thread_calls: shared with BPF");
static_assert(sizeof(struct eacgm_proc_event) == 40, "eacgm_proc_event: shared with BPF");
static_assert(sizeof(struct eacgm_guard_request) == 48 + 24 * EACGM_GUARD_SLOTS &&
		      offsetof(struct eacgm_guard_request, slot) == 48,
	      "eacgm_guard_request: shared with BPF");
static_assert(sizeof(struct eacgm_guard_thread) == 56, "eacgm_guard_thread: shared with BPF");
#endif

#endif
