// SPDX-License-Identifier: GPL-2.0
/* The span engine: one uprobe/uretprobe pair serves every traced C/C++
 * function. The attach cookie is an index into probe_specs, which says which
 * layer the function belongs to and which arguments to keep. Entry pushes the
 * start time and arguments on a bounded per-thread stack; the matching exit
 * pops it and emits one record with the duration and return value. */
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
	if (capture_py_stacks && spec->layer != EACGM_LAYER_PYTHON)
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

static __always_inline int on_exit(struct pt_regs *ctx)
{
	/* An untraced thread has no state: it leaves before reading the clock. */
	struct task_struct *task = bpf_get_current_task_btf();
	struct eacgm_thread_calls *tc = bpf_task_storage_get(&open_calls, task, 0, 0);
	if (!tc)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	/* The open call whose entry had this stack pointer (bpf/arch).
	 * Frames above the match were left by longjmp or an exception and
	 * will never return: drop them. A miss means this call's entry was
	 * not recorded (depth overflow, or tracing began inside it). */
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
	struct eacgm_open_call *c = &tc->calls[found];
	__u32 spec_id = c->spec_id;
	struct eacgm_probe_spec *spec = bpf_map_lookup_elem(&probe_specs, &spec_id);
	if (!spec)
		return 0;

	struct eacgm_span_event *e = bpf_ringbuf_reserve(&span_events, sizeof(*e), 0);
	if (!e) {
		count(EACGM_CNT_RINGBUF_FULL, 1);
		return 0;
	}
	e->start_ns = c->start_ns;
	e->dur_ns = now - c->start_ns;
	/* The ids bpf_get_current_pid_tgid would give (the initial pid
	 * namespace's), read straight from the task: a load each rather than
	 * a helper call. */
	e->tgid = task->tgid;
	e->tid = task->pid;
	e->spec_id = spec_id;
	e->depth = found;
	e->flags = 0;
	e->runq_ns = 0;
	if (bpf_core_field_exists(task->sched_info)) {
		__u64 delay = run_delay(task);
		e->runq_ns = delay > c->run_delay ? delay - c->run_delay : 0;
		e->flags |= EACGM_SPAN_RUNQ;
	}
	e->ret = PT_REGS_RC(ctx);
	e->py_stack = c->py_stack;
	if (c->py_shared)
		e->flags |= EACGM_SPAN_PY_SHARED;
	for (int i = 0; i < EACGM_MAX_ARGS; i++) {
		__u64 v = c->args[i];
		if (i < spec->nargs && spec->args[i].source == EACGM_ARG_DEREF_EXIT)
			v = deref(v, spec->args[i].offset);
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
	__u64 flags = BPF_RB_NO_WAKEUP;
	if (spans && (++*spans & wakeup_check_mask) == 0 &&
	    bpf_ringbuf_query(&span_events, BPF_RB_AVAIL_DATA) >= wakeup_bytes)
		flags = BPF_RB_FORCE_WAKEUP;
	bpf_ringbuf_submit(e, flags);
	if (timed) {
		count(EACGM_CNT_EXIT_NS, bpf_ktime_get_ns() - now);
		count(EACGM_CNT_EXITS_TIMED, 1);
	}
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

/* A thread's open calls die with it (the storage goes with the task):
 * counted, so that a process killed mid-call loses its calls in flight
 * visibly, and the count of threads holding state stays exact. */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(span_thread_exit, struct task_struct *p)
{
	struct eacgm_thread_calls *tc = bpf_task_storage_get(&open_calls, p, 0, 0);
	if (!tc)
		return 0;
	if (tc->depth)
		count(EACGM_CNT_EXITED_IN_CALL, tc->depth);
	if (!bpf_task_storage_delete(&open_calls, p))
		__sync_fetch_and_add(&threads_with_state, -1);
	return 0;
}
