// SPDX-License-Identifier: GPL-2.0
/* The span engine: one uprobe/uretprobe pair serves every traced C/C++
 * function. The attach cookie is an index into probe_specs, which says which
 * layer the function belongs to and which arguments to keep. Entry pushes the
 * start time and arguments on a bounded per-thread stack; the matching exit
 * pops it and emits one record with the duration and return value.
 *
 * And the exception guard (below on_exit): a return probe replaces the
 * function's return address with the kernel's trampoline, which has no
 * unwind information, so an unwinder walking through such a frame (a C++
 * throw, pthread_exit, backtrace()) stops there, and a throw ends in
 * std::terminate. Entry probes on the unwinder's entry points have the
 * agent hand the thread's real return addresses back before it walks, and
 * put the trampoline back for the frames that live on once a handler takes
 * the exception; the calls the unwinding left end as spans of their own. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "arch.bpf.h"
#include "eacgm/abi/events.h"
#include "traced.bpf.h"
#define EACGM_PY_WALK_FRAMES EACGM_PY_SPAN_FRAMES
#include "pystack.bpf.h"

char LICENSE[] SEC("license") = "GPL";

_Static_assert((EACGM_MAX_DEPTH & (EACGM_MAX_DEPTH - 1)) == 0, "on_exit masks stack indices with EACGM_MAX_DEPTH - 1");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, EACGM_MAX_SPECS);
	__type(key, __u32);
	__type(value, struct eacgm_probe_spec);
} probe_specs SEC(".maps");

/* Sized by the agent before load (--ring-buffer-kb). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 * 1024 * 1024);
} span_events SEC(".maps");

/* Set by the agent: a quarter of the ring buffer, and how often a CPU
 * checks it (a power of two less one: 31, less on rings under 32 KiB). */
const volatile __u64 wakeup_bytes = 1024 * 1024;
const volatile __u32 wakeup_check_mask = 31;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, EACGM_CNT_COUNT);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

/* Set by the agent with the python layer: record the Python stack behind
 * every span of a Python process. */
const volatile bool capture_py_stacks = false;

/* Set by the agent: the exception guard (below on_exit) runs. Off where it
 * cannot (a processor whose return address is not on the stack): user
 * space then keeps return probes off libraries that throw. */
const volatile bool guard_on = false;

/* Ids of Python stack records; 0 means none. */
__u64 py_stack_seq = 0;

/* About 2.8 KiB a thread, in the thread's own storage: found through the
 * task pointer instead of hashing the tid on every entry and return (a hash
 * lookup each way was a third of what the engine adds to the trap), and
 * freed with the thread. */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct eacgm_thread_calls);
} open_calls SEC(".maps");

/* Threads holding state now: created at a thread's first traced call,
 * given back when it exits (read by the agent, mmapped .bss). */
__s64 threads_with_state = 0;

static __always_inline void count(__u32 which, __u64 n)
{
	__u64 *c = bpf_map_lookup_elem(&counters, &which);
	if (c)
		*c += n;
}

static __always_inline __u64 deref(__u64 ptr, __u32 offset)
{
	__u64 v = 0;
	if (ptr)
		bpf_probe_read_user(&v, sizeof(v), (void *)(ptr + offset));
	return v;
}

/* A tensor's fields, read once for both of its words: TENSOR_A and
 * TENSOR_B (and the TENSORS_ pair) describe one tensor at the same slot,
 * and reading each field on its own took 11 reads a tensor (22 a torch
 * call of two tensors, about 85 ns each here: half of the entry program).
 * Now three: the TensorImpl pointer, its rank and first three sizes in one
 * 32-byte read (they lie together: c10::SizesAndStrides keeps the rank,
 * then the sizes inline), and the dtype. */
struct tensor_read {
	__u64 ref;     /* the at::Tensor read; 0: none yet */
	__u64 dims[4]; /* ndim, size[0..2] */
	__u16 dtype;
	bool ok;
};

static __always_inline void read_tensor(__u64 ref, const struct eacgm_arg_spec *a, struct tensor_read *t)
{
	t->ref = ref;
	__u64 impl = deref(ref, 0);
	t->ok = impl != 0;
	if (!t->ok)
		return; /* the words are 0: dims and dtype are not read */
	/* A failed read zeroes its buffer: a field that does not read is 0. */
	bpf_probe_read_user(t->dims, sizeof(t->dims), (void *)(impl + a->offset));
	bpf_probe_read_user(&t->dtype, sizeof(t->dtype), (void *)(impl + a->offset2));
}

/* Two words describing a tensor (see EACGM_ARG_TENSOR_*); sizes beyond 2^48
 * (first) and 2^32 (second, third) are cut, sizes past the rank are 0. 0
 * when the pointers do not read. t holds the last tensor read: the same
 * ref is not read again. */
static __always_inline __u64 tensor_word(__u64 ref, const struct eacgm_arg_spec *a, struct tensor_read *t)
{
	if (!ref || t->ref != ref)
		read_tensor(ref, a, t);
	if (!t->ok)
		return 0;
	__u64 ndim = t->dims[0];
	__u64 size0 = ndim > 0 ? t->dims[1] : 0;
	__u64 size1 = ndim > 1 ? t->dims[2] : 0;
	__u64 size2 = ndim > 2 ? t->dims[3] : 0;
	if (a->source == EACGM_ARG_TENSOR_B || a->source == EACGM_ARG_TENSORS_B)
		return (size1 & 0xffffffff) | size2 << 32;
	return (ndim & 0xff) | (__u64)(t->dtype & 0xff) << 8 | (size0 & 0xffffffffffff) << 16;
}

/* Frames whose function returned unseen, found at the next entry: a callee
 * enters below every live frame of its thread (the stack grows down), so a
 * frame at or below the entering sp is dead. Its return was missed because
 * its probe was detached while it ran (--overhead-budget attaches the
 * hottest functions in bursts) or longjmp left it. At the same sp only the
 * same function counts as dead: a tail call enters another function at its
 * caller's sp while the caller is live. The same function entered twice at
 * one sp is also what two links on it for a moment look like (the budget
 * replaces a library's link with one attached before the old one goes): the
 * second entry replaces the first, and one span results. */
static __always_inline __u32 drop_dead_frames(struct eacgm_thread_calls *tc, __u64 sp, __u32 spec_id)
{
	__u32 d = tc->depth;
	__u32 dead = 0;
	for (__u32 k = 0; k < EACGM_MAX_DEPTH; k++) {
		if (d == 0 || d > EACGM_MAX_DEPTH)
			break;
		struct eacgm_open_call *top = &tc->calls[(d - 1) & (EACGM_MAX_DEPTH - 1)];
		if (top->sp > sp || (top->sp == sp && top->spec_id != spec_id))
			break;
		d--;
		dead++;
	}
	if (dead) {
		tc->depth = d;
		count(EACGM_CNT_UNPAIRED, dead);
	}
	return d;
}

/* How long the task has waited on run queues in all (ns): the kernel adds
 * to it each time the task gets a CPU, so for the running task, as at a
 * probe, it is up to date. 0 on kernels without CONFIG_SCHED_INFO. A call's
 * share of it says whether the call was slow or waited for a CPU while
 * something else ran (eacgm detect tells a contended call from a slow one
 * by it). */
static __always_inline __u64 run_delay(struct task_struct *task)
{
	if (!bpf_core_field_exists(task->sched_info))
		return 0;
	/* A plain load: task is the trusted pointer bpf_get_current_task_btf
	 * gives, which the verifier lets a program read directly (a load
	 * that cannot fault the kernel), without a bpf_probe_read_kernel
	 * call per read as BPF_CORE_READ makes: two helper calls a span
	 * fewer. The field's offset is still relocated for the running
	 * kernel (vmlinux.h's types keep their access index). */
	return task->sched_info.run_delay;
}

/* Whether a program run is one the programs time (EACGM_CNT_ENTRY_NS), by
 * this CPU's count of spans (the counters' EACGM_CNT_SPANS, before the run
 * adds to it): one in EACGM_TIMED_EVERY, at a residue that never meets the
 * ring's wake-up check (at 0 of wakeup_check_mask + 1), so that the rare
 * helper call it makes is not timed 16 times as often as it happens. */
static __always_inline bool timed_run(const __u64 *spans)
{
	return spans && (*spans & (EACGM_TIMED_EVERY - 1)) == EACGM_TIMED_EVERY / 2 - 1;
}

/* The Python stack behind the call at depth d: walked into a record, unless
 * the call nests in one whose stack is known and no Python code ran between
 * them (a torch operator calling another: conv2d calls convolution,
 * _to_copy calls copy_; 27% of ResNet-18's calls). The thread's innermost
 * frame says so: the frame that made the outer call lives while that call
 * is open, so no other frame has its address, and a callback into Python
 * in between puts its own frame on top. The call then shares the outer
 * call's record (EACGM_SPAN_PY_SHARED): three reads instead of a walk of
 * the whole stack. */
static __always_inline void py_stack_of_call(struct task_struct *task, struct eacgm_thread_calls *tc, __u32 d,
					     struct eacgm_open_call *c)
{
	const struct eacgm_py_process *p;
	__u64 tstate = py_thread(task->tgid, task->pid, &p);
	if (!tstate)
		return;
	bool ok = true;
	__u64 frame = py_top_frame(p, tstate, &ok);
	if (ok && frame && d > 0) {
		struct eacgm_open_call *outer = &tc->calls[(d - 1) & (EACGM_MAX_DEPTH - 1)];
		if (outer->py_stack && outer->py_frame == frame) {
			c->py_stack = outer->py_stack;
			c->py_frame = frame;
			c->py_shared = 1;
			return;
		}
	}
	__u64 sid = __sync_fetch_and_add(&py_stack_seq, 1) + 1;
	if (py_emit_walk(p, frame, ok, task->tgid, task->pid, EACGM_PY_SPAN, sid, EACGM_PY_SPAN_FRAMES)) {
		c->py_stack = sid;
		c->py_frame = ok ? frame : 0;
	}
}

int guard_rearm(__u64 sp, __u64 ip);

static __always_inline int on_entry(struct pt_regs *ctx)
{
	/* A thread holds state only once its process was found traced, and a
	 * process leaves the traced set only when it exits: state means traced,
	 * and the hash lookup on the tgid is paid once per thread, not per call. */
	struct task_struct *task = bpf_get_current_task_btf();
	struct eacgm_thread_calls *tc = bpf_task_storage_get(&open_calls, task, 0, 0);
	if (!tc) {
		if (!eacgm_traced_on_call(task->tgid))
			return 0;
		tc = bpf_task_storage_get(&open_calls, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (!tc) {
			count(EACGM_CNT_NO_STATE, 1);
			return 0;
		}
		__sync_fetch_and_add(&threads_with_state, 1);
	}
	/* The per-CPU array's lookup is inlined: a load. */
	__u32 spans_at = EACGM_CNT_SPANS;
	__u64 t0 = timed_run(bpf_map_lookup_elem(&counters, &spans_at)) ? bpf_ktime_get_ns() : 0;
	__u32 spec_id = (__u32)bpf_get_attach_cookie(ctx);
	struct eacgm_probe_spec *spec = bpf_map_lookup_elem(&probe_specs, &spec_id);
	if (!spec)
		return 0;
	__u64 sp = PT_REGS_SP(ctx);
	/* After a backtrace, or a catch the guard did not see: the frames that
	 * live on get their return probes back (the guard, below). */
	if (guard_on && tc->restored)
		guard_rearm(sp, PT_REGS_IP(ctx));
	__u32 d = drop_dead_frames(tc, sp, spec_id);
	if (d >= EACGM_MAX_DEPTH) {
		/* Still counted as open so the exit of this call finds no frame
		 * with its sp and leaves the stack alone. */
		count(EACGM_CNT_DEPTH_OVERFLOW, 1);
		return 0;
	}
	struct eacgm_open_call *c = &tc->calls[d];
	c->sp = sp;
	c->spec_id = spec_id;
	c->py_stack = 0;
	c->py_frame = 0;
	c->py_shared = 0;
	/* An entry into the eval loop is itself a Python function call: it
	 * nests among the others by time, with no stack of its own to walk.
	 * Before the arguments: after their loop, the verifier went through
	 * the walk's paths once per path of the loop, past its million
	 * instructions. */
	if (capture_py_stacks && !(spec->flags & EACGM_PROBE_NO_PY_STACK))
		py_stack_of_call(task, tc, d, c);
	struct tensor_read tensor = {};
	for (int i = 0; i < EACGM_MAX_ARGS; i++) {
		struct eacgm_arg_spec *a = &spec->args[i];
		__u64 v = 0;
		if (i >= spec->nargs)
			break;
		if (a->source != EACGM_ARG_NONE)
			v = eacgm_arg_word(ctx, a->slot);
		if (a->source == EACGM_ARG_DEREF_ENTRY)
			v = deref(v, a->offset);
		else if (a->source == EACGM_ARG_DEREF2_ENTRY)
			v = deref(deref(v, a->offset), a->offset2);
		else if (a->source == EACGM_ARG_TENSOR_A || a->source == EACGM_ARG_TENSOR_B)
			v = tensor_word(v, a, &tensor);
		else if (a->source == EACGM_ARG_TENSORS_A || a->source == EACGM_ARG_TENSORS_B)
			v = tensor_word(deref(v, 0), a, &tensor); /* the vector's first element */
		c->args[i] = v;                                   /* DEREF_EXIT keeps the pointer until return */
	}
	c->run_delay = run_delay(task);
	/* Last, so argument reads are not part of the measured time. */
	c->start_ns = bpf_ktime_get_ns();
	if (t0) {
		count(EACGM_CNT_ENTRY_NS, c->start_ns - t0);
		count(EACGM_CNT_ENTRIES_TIMED, 1);
	}
	/* Then the depth that shows the call to the agent reading open calls
	 * (hangs): the compiler keeps the order, and on x86-64 other CPUs see
	 * stores in program order, so a slot it sees is whole, never a stale
	 * start. arm64 may let the agent see the depth before the slot: only a
	 * call begun in the last moments can read stale, never the long-open
	 * one a hang is. */
	asm volatile("" ::: "memory");
	tc->depth = d + 1;
	return 0;
}

/* The span of open call c, which began at depth d, ending at now: ret and
 * flags as the call left (its return; or EACGM_SPAN_LEFT_* and what left it).
 * Returns whether this run is one the programs time (timed_run), as this
 * CPU's count of spans stood before it. */
static __always_inline bool emit_span(struct task_struct *task, const struct eacgm_open_call *c, __u32 d, __u64 now,
				      __u64 ret, __u16 flags)
{
	__u32 spec_id = c->spec_id;
	struct eacgm_probe_spec *spec = bpf_map_lookup_elem(&probe_specs, &spec_id);
	if (!spec)
		return false;
	struct eacgm_span_event *e = bpf_ringbuf_reserve(&span_events, sizeof(*e), 0);
	if (!e) {
		count(EACGM_CNT_RINGBUF_FULL, 1);
		return false;
	}
	e->start_ns = c->start_ns;
	e->dur_ns = now - c->start_ns;
	/* The ids bpf_get_current_pid_tgid would give (the initial pid
	 * namespace's), read straight from the task: a load each rather than
	 * a helper call. */
	e->tgid = task->tgid;
	e->tid = task->pid;
	e->spec_id = spec_id;
	e->depth = d;
	e->flags = flags;
	e->runq_ns = 0;
	if (bpf_core_field_exists(task->sched_info)) {
		__u64 delay = run_delay(task);
		e->runq_ns = delay > c->run_delay ? delay - c->run_delay : 0;
		e->flags |= EACGM_SPAN_RUNQ;
	}
	e->ret = ret;
	e->py_stack = c->py_stack;
	if (c->py_shared)
		e->flags |= EACGM_SPAN_PY_SHARED;
	for (int i = 0; i < EACGM_MAX_ARGS; i++) {
		__u64 v = c->args[i];
		/* An out-pointer is read when the call returns; a call that left
		 * without returning wrote nothing there. */
		if (i < spec->nargs && spec->args[i].source == EACGM_ARG_DEREF_EXIT)
			v = flags & EACGM_SPAN_LEFT ? 0 : deref(v, spec->args[i].offset);
		e->args[i] = v;
	}
	/* Waking the reader for every record costs more than the probe itself;
	 * wake it only once the buffer is filling up (it also polls on a
	 * timer). Asking the ring how full it is is a helper call of its own,
	 * so it is asked only when this CPU's count of spans is a multiple of
	 * wakeup_check_mask + 1 (32 records, under 4 KiB, on rings of 32 KiB
	 * and more): the reader is woken that many records a CPU late, against
	 * a threshold of a quarter of the ring. */
	__u32 which = EACGM_CNT_SPANS;
	__u64 *spans = bpf_map_lookup_elem(&counters, &which);
	bool timed = timed_run(spans);
	__u64 wake = BPF_RB_NO_WAKEUP;
	if (spans && (++*spans & wakeup_check_mask) == 0 &&
	    bpf_ringbuf_query(&span_events, BPF_RB_AVAIL_DATA) >= wakeup_bytes)
		wake = BPF_RB_FORCE_WAKEUP;
	bpf_ringbuf_submit(e, wake);
	return timed;
}

static __always_inline int on_exit(struct pt_regs *ctx)
{
	/* An untraced thread has no state: it leaves before reading the clock. */
	struct task_struct *task = bpf_get_current_task_btf();
	struct eacgm_thread_calls *tc = bpf_task_storage_get(&open_calls, task, 0, 0);
	if (!tc)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	/* The open call whose entry had this stack pointer (bpf/arch).
	 * Frames above the match were left without a return the guard saw
	 * (a longjmp it could not follow) and will never return: drop them.
	 * A miss means this call's entry was not recorded (depth overflow, or
	 * tracing began inside it). */
	__u64 want_sp = eacgm_entry_sp_at_return(ctx);
	__u32 depth = tc->depth;
	__u32 found = EACGM_MAX_DEPTH;
	/* From the top of the stack down: the call returning is almost always
	 * the innermost, found at once. The index is computed from depth, not
	 * counted down from a constant, so that `found` leaves the loop as one
	 * range rather than 32 constants: the verifier then checks the rest of
	 * the program once, not once per value (loading took 100 ms a copy). */
	for (__u32 k = 0; k < EACGM_MAX_DEPTH; k++) {
		if (k >= depth)
			break;
		__u32 i = (depth - 1 - k) & (EACGM_MAX_DEPTH - 1);
		__u64 sp = tc->calls[i].sp;
		if (sp == want_sp) {
			found = i;
			break;
		}
		if (sp > want_sp)
			break; /* older frames sit higher on the stack */
	}
	if (found >= EACGM_MAX_DEPTH)
		return 0;
	if (depth > found + 1)
		count(EACGM_CNT_UNPAIRED, depth - found - 1);
	tc->depth = found;
	if (emit_span(task, &tc->calls[found], found, now, PT_REGS_RC(ctx), 0)) {
		count(EACGM_CNT_EXIT_NS, bpf_ktime_get_ns() - now);
		count(EACGM_CNT_EXITS_TIMED, 1);
	}
	return 0;
}

/* ---- The exception guard ------------------------------------------------
 *
 * The kernel keeps, per thread, the frames whose return it took over: a
 * list of return_instance (innermost first), each with the stack pointer at
 * the function's entry (`stack`) and the return address it replaced
 * (`orig_ret_vaddr`); the trampoline is the first slot of the process's
 * uprobe area (mm->uprobes_state.xol_area->vaddr). Where the return address
 * lies on the stack (bpf/arch: EACGM_RETURN_ON_STACK), the guard:
 *
 * - restores: before an unwinder walks the stack (a throw, a rethrow,
 *   forced unwinding, a cleanup's resumption, a backtrace), every slot that
 *   holds the trampoline is to get its frame's real return address back
 *   (where the walk will stop is not known before it has run). A frame the
 *   unwinder unwinds never returns, and the kernel drops its record at the
 *   thread's next return or entry probe.
 * - rearms: once a handler takes the exception (__cxa_begin_catch), and at
 *   the thread's next traced entry after a backtrace (which leaves every
 *   frame alive), the frames above the stack pointer whose slots hold the
 *   real address again are to get the trampoline back, so that their
 *   returns are timed as before. Only a slot the kernel still has a record
 *   for, at that very address, is asked for.
 *
 * A locked-down kernel forbids a program to write user memory, so the
 * guard asks the agent (struct eacgm_guard_request) and stops its thread
 * with SIGSTOP meanwhile; the agent writes, marks the request done in
 * guard_done and resumes the process (probe/guard_server.cpp). A SIGCONT
 * the agent sends for another thread of the process may free this one
 * early: so every frame step of a walk (_Unwind_Find_FDE, called before the
 * unwinder reads the next return address) stops the thread again while its
 * restore is not done. A rearm freed early is dropped by the agent (the
 * thread is no longer where it asked). */

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct eacgm_guard_thread);
} guards SEC(".maps");

/* Written by the agent: the last restore request of the thread it carried out. */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, __u64);
} guard_done SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024); /* about 160 requests */
} guard_requests SEC(".maps");

/* Processes a guard program has stopped, for the agent's watchdog: if the
 * agent dies before resuming one, the watchdog does (tgid -> 1). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u32);
} guard_stopped SEC(".maps");

/* The kernel keeps at most 64 return instances a thread (MAX_URETPROBE_DEPTH). */
#define EACGM_MAX_RETURN_INSTANCES 64

/* Stops the calling thread (and so its process: SIGSTOP is a group stop)
 * until the agent has answered. */
static __always_inline void guard_stop(struct task_struct *task)
{
	if (task->tgid == self_tgid)
		return;
	__u32 tgid = task->tgid, one = 1;
	bpf_map_update_elem(&guard_stopped, &tgid, &one, BPF_ANY);
	bpf_send_signal_thread(19 /* SIGSTOP */);
	count(EACGM_CNT_GUARD_STOPS, 1);
}

static __always_inline bool restore_pending(struct task_struct *task, const struct eacgm_guard_thread *g)
{
	if (!g->restore_seq || g->abandoned_seq >= g->restore_seq)
		return false;
	__u64 *done = bpf_task_storage_get(&guard_done, task, 0, 0);
	return !done || *done < g->restore_seq;
}

/* A request is made here, then copied to the ring whole. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct eacgm_guard_request);
} guard_scratch SEC(".maps");

/* The walk of a thread's return instances for one request, step by step
 * (bpf_loop: the verifier checks one step, not 64 of them with every path
 * through each). */
struct ask_walk {
	__u64 ri;     /* the next return_instance, 0: the end */
	__u64 last;   /* the slot of the one before */
	__u64 sp;     /* slots at or below it are of frames gone */
	__u64 lo, hi; /* a rearm's range */
	__u64 tramp;
	__u64 min, max; /* of the slots asked for */
	__u32 kind;
	__u32 n;
};

static long ask_step(__u64 i, struct ask_walk *w)
{
	__u32 zero = 0;
	struct eacgm_guard_request *r = bpf_map_lookup_elem(&guard_scratch, &zero);
	if (!r || !w->ri)
		return 1;
	struct return_instance *ri = (void *)w->ri;
	__u64 slot = BPF_CORE_READ(ri, stack), orig = BPF_CORE_READ(ri, orig_ret_vaddr), cur = 0;
	w->ri = (__u64)BPF_CORE_READ(ri, next);
	/* A chained instance (a tail call into a probed function) shares its
	 * slot and return address with the one after it. */
	if (slot == w->last)
		return 0;
	w->last = slot;
	if (slot <= w->sp || bpf_probe_read_user(&cur, sizeof(cur), (void *)slot))
		return 0;
	__u64 expect = w->kind == EACGM_GUARD_RESTORE ? w->tramp : orig;
	if (cur != expect || (w->kind == EACGM_GUARD_REARM && (slot < w->lo || slot > w->hi)))
		return 0; /* restored already, a frame long gone, or not ours to rearm */
	__u32 k = w->n & (EACGM_GUARD_SLOTS - 1);
	r->slot[k] = slot;
	r->expect[k] = expect;
	r->value[k] = w->kind == EACGM_GUARD_RESTORE ? orig : w->tramp;
	if (!w->n || slot < w->min)
		w->min = slot;
	if (!w->n || slot > w->max)
		w->max = slot;
	return ++w->n >= EACGM_GUARD_SLOTS;
}

/* A request for the slots of the thread's return instances that `kind`
 * wants (above sp; in [lo, hi] for a rearm), made at ip, and the thread
 * stopped until the agent answers. Returns the slots asked for. */
static __always_inline __u32 guard_ask(struct task_struct *task, struct eacgm_guard_thread *g, __u32 kind, __u64 sp,
				       __u64 ip)
{
	struct ask_walk w = {.ri = (__u64)BPF_CORE_READ(task, utask, return_instances),
			     .sp = sp,
			     .lo = g->lo,
			     .hi = g->hi,
			     .kind = kind};
	/* Never the agent itself: its answering thread would stop with it. */
	if (!w.ri || task->tgid == self_tgid)
		return 0; /* no live return probe on this thread */
	if (eacgm_shadow_stack(task)) {
		count(EACGM_CNT_GUARD_UNASKED, 1);
		return 0;
	}
	w.tramp = BPF_CORE_READ(task, mm, uprobes_state.xol_area, vaddr);
	bpf_loop(EACGM_MAX_RETURN_INSTANCES, ask_step, &w, 0);
	__u32 zero = 0;
	struct eacgm_guard_request *r = bpf_map_lookup_elem(&guard_scratch, &zero);
	if (!w.n || !r)
		return 0;
	r->tgid = task->tgid;
	r->tid = task->pid;
	r->seq = g->seq + 1;
	r->sp = sp;
	r->ip = ip;
	r->ts_ns = bpf_ktime_get_ns();
	r->kind = kind;
	r->n = w.n;
	/* In this order: what the agent reads of the thread (its guard state)
	 * and the stop before the request can be read. An answer, and the
	 * SIGCONT that ends it, then always come after the SIGSTOP: one sent
	 * before it would leave the process stopped for good. */
	struct eacgm_guard_request *out = bpf_ringbuf_reserve(&guard_requests, sizeof(*out), 0);
	if (!out) {
		count(EACGM_CNT_GUARD_UNASKED, 1);
		return 0;
	}
	g->seq = r->seq;
	if (kind == EACGM_GUARD_RESTORE) {
		g->restore_seq = r->seq;
		if (!g->restored || w.min < g->lo)
			g->lo = w.min;
		if (!g->restored || w.max > g->hi)
			g->hi = w.max;
		g->restored += w.n;
	}
	guard_stop(task);
	bpf_probe_read_kernel(out, sizeof(*out), r);
	bpf_ringbuf_submit(out, BPF_RB_FORCE_WAKEUP);
	count(EACGM_CNT_GUARD_REQUESTS, 1);
	return w.n;
}

/* Before an unwinding of `kind` (EACGM_SPAN_LEFT_*; 0: a walk that leaves
 * no frame) of the exception tinfo walks the stack from sp: its restore,
 * asked at ip. Global: the verifier checks it once, not at each call site. */
__noinline int guard_restore(__u32 kind, __u64 tinfo, __u64 sp, __u64 ip)
{
	if (!EACGM_RETURN_ON_STACK)
		return 0;
	struct task_struct *task = bpf_get_current_task_btf();
	if (!BPF_CORE_READ(task, utask, return_instances))
		return 0;
	struct eacgm_guard_thread *g = bpf_task_storage_get(&guards, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!g)
		return 0;
	if (kind) { /* a backtrace leaves an unwinding's own as it is */
		g->kind = kind;
		g->tinfo = tinfo;
	}
	__u32 asked = guard_ask(task, g, EACGM_GUARD_RESTORE, sp, ip);
	struct eacgm_thread_calls *tc = bpf_task_storage_get(&open_calls, task, 0, 0);
	if (tc && asked)
		tc->restored += asked;
	return 0;
}

/* A step of a walk, at sp and ip: while the thread's restore is not done (a
 * SIGCONT for another thread of the process freed it early, or the agent
 * gave the request up), it asks again for the slots that still hold the
 * trampoline. None left (written, the answer's word not yet given; or
 * another agent's guard wrote them), the walk is safe: it goes on. A stop
 * is never made without a request, which nobody might answer. */
__noinline int guard_step(__u64 sp, __u64 ip)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct eacgm_guard_thread *g = bpf_task_storage_get(&guards, task, 0, 0);
	if (g && restore_pending(task, g))
		guard_ask(task, g, EACGM_GUARD_RESTORE, sp, ip);
	return 0;
}

/* Asks for the trampoline back in the restored slots of frames that live
 * on: those above sp, the stack pointer now, asked at ip (see above). */
__noinline int guard_rearm(__u64 sp, __u64 ip)
{
	if (!EACGM_RETURN_ON_STACK)
		return 0;
	struct task_struct *task = bpf_get_current_task_btf();
	struct eacgm_thread_calls *tc = bpf_task_storage_get(&open_calls, task, 0, 0);
	if (tc)
		tc->restored = 0;
	struct eacgm_guard_thread *g = bpf_task_storage_get(&guards, task, 0, 0);
	if (!g || !g->restored)
		return 0;
	/* A restore the agent has not carried out is moot now: the unwinding
	 * found its handler without reading those slots. */
	if (restore_pending(task, g))
		g->abandoned_seq = g->restore_seq;
	guard_ask(task, g, EACGM_GUARD_REARM, sp, ip);
	g->restored = 0;
	return 0;
}

/* Ends the thread's open calls whose frames lie at or below `limit` (their
 * entry sp: the frames an unwinding or a longjmp has passed) as spans left
 * by `kind` (EACGM_SPAN_LEFT_*), ret tinfo: the unwinding saw them go at
 * this moment. */
__noinline int leave_frames(__u64 limit, __u32 kind, __u64 tinfo)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct eacgm_thread_calls *tc = bpf_task_storage_get(&open_calls, task, 0, 0);
	if (!tc)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	__u32 left = 0;
	for (int k = 0; k < EACGM_MAX_DEPTH; k++) {
		__u32 d = tc->depth;
		if (d == 0 || d > EACGM_MAX_DEPTH)
			break;
		struct eacgm_open_call *top = &tc->calls[(d - 1) & (EACGM_MAX_DEPTH - 1)];
		if (top->sp > limit)
			break;
		tc->depth = d - 1;
		emit_span(task, top, d - 1, now, tinfo, kind);
		left++;
	}
	count(EACGM_CNT_LEFT, left);
	return 0;
}

/* The same bodies under two attachments: one perf-event link per function
 * (any kernel with uprobe cookies, 5.15+), or one uprobe_multi link per
 * library for all its functions (6.6+), which the agent prefers because
 * detaching a link waits for an RCU grace period, link by link. */
SEC("uprobe")
int BPF_KPROBE(span_entry) { return on_entry(ctx); }

SEC("uretprobe")
int BPF_KRETPROBE(span_exit) { return on_exit(ctx); }

SEC("uprobe")
int BPF_KPROBE(span_entry_multi) { return on_entry(ctx); }

SEC("uretprobe")
int BPF_KRETPROBE(span_exit_multi) { return on_exit(ctx); }

/* The std::type_info of the C++ exception an unwinder was handed (its
 * struct _Unwind_Exception): libstdc++ and libc++abi keep the exception's
 * type 80 bytes before that header in a primary exception (class
 * "GNUCC++\0", "CLNGC++\0"), and in a dependent one (std::rethrow_exception:
 * the class ends in 1) a pointer to the primary's thrown object, which the
 * primary's 112-byte header ends at. 0 for another language's exception. */
static __always_inline __u64 exception_type(__u64 exc)
{
	__u64 cls = 0, v = 0;
	if (!exc || bpf_probe_read_user(&cls, sizeof(cls), (void *)exc))
		return 0;
	__u64 vendor = cls & ~0xffull, dependent = cls & 0xff;
	if ((vendor != 0x474e5543432b2b00ull && vendor != 0x434c4e47432b2b00ull) || dependent > 1)
		return 0;
	if (bpf_probe_read_user(&v, sizeof(v), (void *)(exc - 80)))
		return 0;
	if (dependent) {
		__u64 thrown = v;
		v = 0;
		if (!thrown || bpf_probe_read_user(&v, sizeof(v), (void *)(thrown - 112)))
			return 0;
	}
	return v;
}

/* Names the type of a C++ exception thrown from a traced thread for the
 * agent (EACGM_SPEC_EXCEPTION_TYPE), from its std::type_info: its second
 * word is the mangled name's address. */
static __always_inline void name_exception_type(struct task_struct *task, __u64 tinfo)
{
	if (!tinfo || !bpf_task_storage_get(&open_calls, task, 0, 0))
		return;
	__u64 name = 0;
	if (bpf_probe_read_user(&name, sizeof(name), (void *)(tinfo + 8)) || !name)
		return;
	struct eacgm_span_event *e = bpf_ringbuf_reserve(&span_events, sizeof(*e), 0);
	if (!e)
		return;
	__builtin_memset(e, 0, sizeof(*e));
	e->start_ns = bpf_ktime_get_ns();
	e->tgid = task->tgid;
	e->tid = task->pid;
	e->spec_id = EACGM_SPEC_EXCEPTION_TYPE;
	e->ret = tinfo;
	bpf_probe_read_user_str(e->args, sizeof(e->args) - 1, (void *)name);
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
}

/* The guard's probes, entry only (a return probe there would hand the
 * unwinder a trampoline of its own): the cookie is the function's role. */
static __always_inline int on_unwind(struct pt_regs *ctx)
{
	__u32 role = (__u32)bpf_get_attach_cookie(ctx);
	__u64 sp = PT_REGS_SP(ctx), ip = PT_REGS_IP(ctx), exc = PT_REGS_PARM1(ctx);
	struct task_struct *task = bpf_get_current_task_btf();
	struct eacgm_guard_thread *g;
	switch (role) {
	case EACGM_UNWIND_RAISE:
	case EACGM_UNWIND_RETHROW:
	case EACGM_UNWIND_RESUME: {
		/* private_1 is the stop function of a forced unwinding, 0 for a
		 * throw's (the unwinder sets it before the first cleanup runs). */
		__u64 stop = 0;
		if (role != EACGM_UNWIND_RAISE && exc)
			bpf_probe_read_user(&stop, sizeof(stop), (void *)(exc + 16));
		__u32 kind = stop ? EACGM_SPAN_LEFT_FORCED : EACGM_SPAN_LEFT_EXCEPTION;
		__u64 tinfo = stop ? 0 : exception_type(exc);
		if (role != EACGM_UNWIND_RESUME)
			name_exception_type(task, tinfo);
		/* A cleanup ran in the frame calling _Unwind_Resume: those below
		 * it are behind the unwinding now. */
		if (role == EACGM_UNWIND_RESUME)
			leave_frames(sp, kind, tinfo);
		guard_restore(kind, tinfo, sp, ip);
		break;
	}
	case EACGM_UNWIND_FORCED: guard_restore(EACGM_SPAN_LEFT_FORCED, 0, sp, ip); break;
	case EACGM_UNWIND_BACKTRACE: guard_restore(0, 0, sp, ip); break;
	case EACGM_UNWIND_FIND_FDE: guard_step(sp, ip); break;
	case EACGM_UNWIND_CATCH:
		/* The handler runs in the frame calling __cxa_begin_catch: the
		 * frames below it were unwound, those above live on. */
		g = bpf_task_storage_get(&guards, task, 0, 0);
		if (g && g->kind) {
			leave_frames(sp, g->kind, g->tinfo);
			g->kind = 0;
		}
		guard_rearm(sp, ip);
		break;
	case EACGM_UNWIND_LONGJMP: {
		/* glibc's forced unwinding ends in a longjmp to the thread's
		 * start: the frames it passes are the unwinding's. */
		__u64 to = eacgm_longjmp_target_sp(ctx, task);
		g = bpf_task_storage_get(&guards, task, 0, 0);
		if (to > 0)
			leave_frames(to - 1,
				     g && g->kind == EACGM_SPAN_LEFT_FORCED ? EACGM_SPAN_LEFT_FORCED
									    : EACGM_SPAN_LEFT_LONGJMP,
				     0);
		break;
	}
	}
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(span_unwind) { return on_unwind(ctx); }

SEC("uprobe")
int BPF_KPROBE(span_unwind_multi) { return on_unwind(ctx); }

/* A thread's open calls die with it (the storage goes with the task):
 * counted, so that a process killed mid-call loses its calls in flight
 * visibly, and the count of threads holding state stays exact. A thread
 * ending in forced unwinding (pthread_exit, pthread_cancel) left them
 * through it: their spans end here. */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(span_thread_exit, struct task_struct *p)
{
	struct eacgm_thread_calls *tc = bpf_task_storage_get(&open_calls, p, 0, 0);
	if (!tc)
		return 0;
	struct eacgm_guard_thread *g = bpf_task_storage_get(&guards, p, 0, 0);
	if (g && g->kind == EACGM_SPAN_LEFT_FORCED && tc->depth)
		leave_frames(~0ull, EACGM_SPAN_LEFT_FORCED, 0);
	if (tc->depth)
		count(EACGM_CNT_EXITED_IN_CALL, tc->depth);
	if (!bpf_task_storage_delete(&open_calls, p))
		__sync_fetch_and_add(&threads_with_state, -1);
	return 0;
}
