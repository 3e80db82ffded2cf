/* SPDX-License-Identifier: GPL-2.0 */
/* The Python frame walker, shared by python.bpf.c (sampling) and
 * span.bpf.c (the Python stack behind a CUDA/NCCL/torch call).
 *
 * From the process's _PyRuntime it finds the current thread's PyThreadState
 * by walking the interpreter's thread list for its native_thread_id (works
 * whether or not the thread holds the GIL: torch releases it around ops),
 * then follows the frame chain and records, per frame, the code object
 * pointer and the instruction value. Names, files and lines are resolved in
 * user space; no string is read here. Every read may fail (a frame freed
 * under us): the walk stops there and says so.
 *
 * python.bpf.c owns the maps; span.bpf.c declares the same ones and the
 * agent hands it their fds before load. */
#ifndef EACGM_PYSTACK_BPF_H
#define EACGM_PYSTACK_BPF_H

#include <bpf/bpf_core_read.h>
#include "arch.bpf.h"
#include "eacgm/abi/python.h"

/* The most frames a record of this object holds, a power of two: its
 * includer may set it lower (span.bpf.c: EACGM_PY_SPAN_FRAMES). Records are
 * reserved at that size, not at the largest: the stack behind a span is a
 * quarter of a sample's 2 KiB, and the ring carries four times as many. */
#ifndef EACGM_PY_WALK_FRAMES
#define EACGM_PY_WALK_FRAMES EACGM_PY_MAX_FRAMES
#endif
#define EACGM_PY_RECORD_SIZE                                                                                           \
	(__builtin_offsetof(struct eacgm_py_stack_event, frames) + EACGM_PY_WALK_FRAMES * sizeof(struct eacgm_py_frame))

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32); /* tgid */
	__type(value, struct eacgm_py_process);
} py_procs SEC(".maps");

/* tid -> its PyThreadState, checked on every use. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u64);
} py_tstates SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 * 1024 * 1024);
} py_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, EACGM_PY_CNT_COUNT);
	__type(key, __u32);
	__type(value, __u64);
} py_counters SEC(".maps");

/* Code objects read lately, per CPU, direct-mapped by address: a frame whose
 * code object was read less than EACGM_PY_CODE_FRESH_NS ago on this CPU,
 * under the same globals, takes the type check, name and file from here
 * instead of a read of its own (a read is about 85 ns here, and one per
 * frame was half of a walk). Keyed by globals too: the agent's resolver
 * trusts name and file pointers the walker gives as read now, and while a
 * program imports, a module body's code object is freed once it has run
 * and the next module's functions take its address within the second
 * (keyed by address alone, a thread's frames came out named as another
 * module's body). A code object replaced under the same globals within the
 * second (exec into a module's own namespace) is the case left. Each
 * program object has its own cache (the sampler's and the span engine's
 * are apart); the agent sizes it to one entry where there is no Python
 * layer. A walk preempted on its CPU by another may find an entry it read
 * rewritten: the key is checked again after the names are taken. */
#define EACGM_PY_CODE_CACHE 1024
#define EACGM_PY_CODE_FRESH_NS 1000000000ULL
struct py_code_seen {
	__u64 code, globals, name, file, read_ns;
};
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, EACGM_PY_CODE_CACHE);
	__type(key, __u32);
	__type(value, struct py_code_seen);
} py_code_cache SEC(".maps");

/* From 3.11 a thread's frames lie one after another in its data stack,
 * older ones lower: the walk reads the EACGM_PY_BULK bytes that end just
 * past the innermost frame's fields in one read, and takes every frame that
 * lies wholly inside them from there (16 frames of a torch model's forward
 * fit in 4 KiB), reading on its own only a frame outside (a generator's, a
 * 3.12 shim on the C stack, one deeper than the window). One read of 4 KiB
 * costs about what two small ones do. A window that does not read (its low
 * end unmapped, under the first frames of a data stack) is not used. The
 * buffer is per CPU, and a uprobe's program can be preempted by another
 * thread's on the same CPU: it carries the walk it holds (owner, set after
 * its data), and a walk takes frames from it only while it still holds its
 * own, checked before and after. */
#define EACGM_PY_BULK 4096
struct py_bulk {
	__u64 owner;
	__u8 data[EACGM_PY_BULK];
};
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct py_bulk);
} py_bulk_buf SEC(".maps");

/* Last forced wakeup of the reader (races between CPUs are harmless). */
__u64 py_last_wakeup = 0;
#define EACGM_PY_WAKEUP_NS 50000000ULL

/* CPython's FRAME_OWNED_BY_CSTACK (3.12, 3.13): a shim frame, not Python code. */
#define EACGM_PY_OWNED_BY_CSTACK 3

static __always_inline void py_add(__u32 which, __u64 n)
{
	__u64 *c = bpf_map_lookup_elem(&py_counters, &which);
	if (c)
		*c += n;
}

static __always_inline void py_count(__u32 which) { py_add(which, 1); }

static __always_inline __u64 py_read64(__u64 addr, bool *ok)
{
	__u64 v = 0;
	if (!addr || bpf_probe_read_user(&v, sizeof(v), (void *)addr)) {
		*ok = false;
		return 0;
	}
	return v;
}

static __always_inline __u64 py_find_tstate(const struct eacgm_py_process *p, __u32 tid)
{
	bool ok = true;
	__u64 key = tid;
	if (p->thread_key_is_pthread) {
		struct task_struct *task = (struct task_struct *)bpf_get_current_task();
		key = eacgm_thread_pointer(task) - p->pthread_below_tp;
	}
	__u64 *cached = bpf_map_lookup_elem(&py_tstates, &tid);
	if (cached) {
		__u64 ts = *cached;
		if (py_read64(ts + p->tstate_thread_key, &ok) == key && ok)
			return ts;
	}
	__u64 interp = py_read64(p->runtime + p->runtime_interpreters_head, &ok);
	__u64 ts = py_read64(interp + p->interp_threads_head, &ok);
	for (int i = 0; i < EACGM_PY_MAX_THREADS; i++) {
		if (!ok || !ts)
			return 0;
		if (py_read64(ts + p->tstate_thread_key, &ok) == key && ok) {
			bpf_map_update_elem(&py_tstates, &tid, &ts, BPF_ANY);
			return ts;
		}
		ts = py_read64(ts + p->tstate_next, &ok);
	}
	return 0;
}

struct py_walk {
	struct eacgm_py_stack_event *e;
	__u64 frame;
	__u64 code_type;
	__u64 now;     /* when the walk began: the code cache's clock */
	__u64 bulk_lo; /* the data stack window's first address; 0: none */
	__u64 token;   /* this walk, as the window's owner */
	__u32 n, max;
	__u16 minor, frame_previous, frame_code, frame_instr, frame_owner, code_name, code_filename;
	__u16 frame_lo, frame_len, code_len, frame_globals;
	bool ok;
};

/* A field from a span read whole: off is relative to the span's start. */
static __always_inline __u64 py_field64(const __u8 *buf, __u32 size, __u32 off)
{
	__u64 v = 0;
	if (off <= size - 8)
		__builtin_memcpy(&v, buf + off, 8);
	return v;
}

/* What the walk takes of a frame. */
struct py_frame_fields {
	__u64 previous, code, instr, owner, globals;
};

static __always_inline void py_take_fields(const struct py_walk *w, const __u8 *buf, struct py_frame_fields *f)
{
	f->previous = py_field64(buf, EACGM_PY_FRAME_READ, w->frame_previous - w->frame_lo);
	f->code = py_field64(buf, EACGM_PY_FRAME_READ, w->frame_code - w->frame_lo);
	f->instr = py_field64(buf, EACGM_PY_FRAME_READ, w->frame_instr - w->frame_lo);
	f->owner = w->minor >= 12 ? (__u8)py_field64(buf, EACGM_PY_FRAME_READ, w->frame_owner - w->frame_lo) : 0;
	f->globals =
		w->frame_globals != 0xffff ? py_field64(buf, EACGM_PY_FRAME_READ, w->frame_globals - w->frame_lo) : 0;
}

/* A frame's fields: from the data stack window where the frame lies wholly
 * inside it, else by a read of their own. */
static __always_inline bool py_frame_fields(const struct py_walk *w, struct py_frame_fields *f)
{
	__u64 at = w->frame + w->frame_lo;
	__u64 idx = at - w->bulk_lo; /* below the window it wraps, past its end */
	if (w->bulk_lo && idx <= EACGM_PY_BULK - EACGM_PY_FRAME_READ) {
		__u32 zero = 0;
		struct py_bulk *b = bpf_map_lookup_elem(&py_bulk_buf, &zero);
		if (b && b->owner == w->token) {
			py_take_fields(w, b->data + idx, f);
			asm volatile("" ::: "memory");
			if (b->owner == w->token)
				return true;
		}
	}
	/* Filled by the read (a failed one zeroes it): not cleared first. */
	__u8 fb[EACGM_PY_FRAME_READ];
	__u32 flen = w->frame_len;
	if (flen > EACGM_PY_FRAME_READ || bpf_probe_read_user(fb, flen, (void *)at))
		return false;
	py_take_fields(w, fb, f);
	return true;
}

/* One frame per call, from bpf_loop: the verifier checks the body once
 * instead of once per unrolled frame. Returns 1 to stop. A frame's fields
 * come from the data stack window (or a read of their own), its code
 * object's type, name and file from the code cache (or a read). */
static long py_walk_step(__u32 i, void *data)
{
	struct py_walk *w = data;
	if (!w->ok || !w->frame || w->n >= w->max || w->n >= EACGM_PY_WALK_FRAMES)
		return 1;
	struct py_frame_fields f;
	if (!py_frame_fields(w, &f)) {
		w->ok = false;
		return 1;
	}
	w->frame = f.previous;
	if (f.owner == EACGM_PY_OWNED_BY_CSTACK)
		return 0;
	__u64 code = f.code;
	if (!code) {
		w->ok = false;
		return 1;
	}
	/* Code objects are malloc'd (16-byte aligned) and larger than 128
	 * bytes: the bits above those index the cache. */
	__u32 slot = (__u32)((code >> 4) ^ (code >> 14)) & (EACGM_PY_CODE_CACHE - 1);
	struct py_code_seen *seen = bpf_map_lookup_elem(&py_code_cache, &slot);
	__u64 name = 0, file = 0;
	bool hit = false;
	if (seen && f.globals && seen->code == code && seen->globals == f.globals &&
	    w->now - seen->read_ns < EACGM_PY_CODE_FRESH_NS) {
		name = seen->name;
		file = seen->file;
		asm volatile("" ::: "memory"); /* the key again, after: see above */
		hit = seen->code == code && seen->globals == f.globals;
	}
	if (!hit) {
		/* Filled by the read (a failed one zeroes it): not cleared first. */
		__u8 cb[EACGM_PY_CODE_READ];
		__u32 clen = w->code_len;
		if (clen > sizeof(cb) || bpf_probe_read_user(cb, clen, (void *)(code + 8))) {
			w->ok = false;
			return 1;
		}
		/* Not a code object (the chain's end can hold a stale link): stop. */
		if (py_field64(cb, sizeof(cb), 0) != w->code_type)
			return 1;
		name = py_field64(cb, sizeof(cb), w->code_name - 8);
		file = py_field64(cb, sizeof(cb), w->code_filename - 8);
		if (seen && f.globals) {
			/* The key last: a walk that preempts this one here finds
			 * no entry half written under a key it could match. */
			seen->code = 0;
			asm volatile("" ::: "memory");
			seen->globals = f.globals;
			seen->name = name;
			seen->file = file;
			seen->read_ns = w->now;
			asm volatile("" ::: "memory");
			seen->code = code;
		}
	}
	__u64 instr = f.instr;
	if (w->minor <= 10) /* f_lasti, an int */
		instr = (__u64)(__s64)(__s32)instr;
	struct eacgm_py_stack_event *e = w->e;
	__u32 n = w->n & (EACGM_PY_WALK_FRAMES - 1);
	e->frames[n].code = code;
	e->frames[n].instr = instr;
	e->frames[n].name = name;
	e->frames[n].file = file;
	w->n++;
	return 0;
}

/* The thread's innermost Python frame (0: it runs none); *ok false when a
 * read failed. */
static __always_inline __u64 py_top_frame(const struct eacgm_py_process *p, __u64 tstate, bool *ok)
{
	if (p->minor >= 11 && p->minor <= 12) {
		__u64 cframe = py_read64(tstate + p->tstate_cframe, ok);
		return py_read64(cframe + p->cframe_current_frame, ok);
	}
	return py_read64(tstate + p->tstate_frame, ok);
}

/* Fills e->frames (innermost first, at most max) from the thread's frame
 * `frame` (py_top_frame: `ok` says whether it read); sets e->nframes and
 * e->flags. */
static __always_inline void py_walk(const struct eacgm_py_process *p, __u64 frame, bool ok,
				    struct eacgm_py_stack_event *e, __u32 max)
{
	struct py_walk w = {.e = e,
			    .code_type = p->code_type,
			    .now = e->ts_ns,
			    .max = max,
			    .minor = p->minor,
			    .frame_previous = p->frame_previous,
			    .frame_code = p->frame_code,
			    .frame_instr = p->frame_instr,
			    .frame_owner = p->frame_owner,
			    .code_name = p->code_name,
			    .code_filename = p->code_filename,
			    .frame_lo = p->frame_lo,
			    .frame_len = p->frame_len,
			    .code_len = p->code_len,
			    .frame_globals = p->frame_globals,
			    .frame = frame,
			    .ok = ok};
	if (p->minor >= 11 && w.ok && w.frame) {
		__u32 zero = 0;
		struct py_bulk *b = bpf_map_lookup_elem(&py_bulk_buf, &zero);
		__u64 lo = w.frame + w.frame_lo + EACGM_PY_FRAME_READ - EACGM_PY_BULK;
		w.token = (e->ts_ns << 1) | 1; /* one walk a CPU at a time: its start is its own */
		if (b) {
			b->owner = 0;
			asm volatile("" ::: "memory");
			if (!bpf_probe_read_user(b->data, EACGM_PY_BULK, (void *)lo)) {
				w.bulk_lo = lo;
				asm volatile("" ::: "memory");
				b->owner = w.token;
			}
		}
	}
	/* Shim frames are skipped without counting: allow some extra steps. */
	bpf_loop(EACGM_PY_MAX_FRAMES + 16, py_walk_step, &w, 0);
	e->nframes = w.n;
	if (!w.ok) {
		e->flags |= EACGM_PY_READ_FAILED;
		py_count(EACGM_PY_CNT_READ_FAILED);
	} else if (w.frame && w.n >= max) {
		e->flags |= EACGM_PY_TRUNCATED;
	}
}

/* The current thread's Python state: its process's layout, and its thread
 * state (0 when the process is not Python or the thread has none). */
static __always_inline __u64 py_thread(__u32 tgid, __u32 tid, const struct eacgm_py_process **pp)
{
	const struct eacgm_py_process *p = bpf_map_lookup_elem(&py_procs, &tgid);
	*pp = p;
	if (!p)
		return 0;
	__u64 tstate = py_find_tstate(p, tid);
	if (!tstate)
		py_count(EACGM_PY_CNT_NO_THREAD);
	return tstate;
}

/* Walks the stack from the thread's frame `frame` (py_top_frame, `ok` its
 * read) into a new py_events record. False when the record could not be
 * had. */
static __always_inline bool py_emit_walk(const struct eacgm_py_process *p, __u64 frame, bool ok, __u32 tgid, __u32 tid,
					 __u16 kind, __u64 id, __u32 max)
{
	struct eacgm_py_stack_event *e = bpf_ringbuf_reserve(&py_events, EACGM_PY_RECORD_SIZE, 0);
	if (!e) {
		py_count(EACGM_PY_CNT_RINGBUF_FULL);
		return false;
	}
	e->ts_ns = bpf_ktime_get_ns();
	e->id = id;
	e->tgid = tgid;
	e->tid = tid;
	e->kind = kind;
	e->flags = 0;
	py_walk(p, frame, ok, e, max);
	/* Names are read from the process later, while it still lives: the
	 * reader must come soon. But stacks come at the rate of the traced
	 * calls and the samples, and a wakeup each would cost more than the
	 * walk: wake it at most every EACGM_PY_WAKEUP_NS, 50 ms (or when the
	 * buffer fills). 10 ms was a hundred wake-ups a second of a 1 kHz
	 * sampler, each taking a CPU from the job. */
	__u64 now = e->ts_ns;
	__u64 flags = BPF_RB_NO_WAKEUP;
	if (now - py_last_wakeup >= EACGM_PY_WAKEUP_NS ||
	    bpf_ringbuf_query(&py_events, BPF_RB_AVAIL_DATA) >= 1024 * 1024) {
		py_last_wakeup = now;
		flags = BPF_RB_FORCE_WAKEUP;
	}
	bpf_ringbuf_submit(e, flags);
	return true;
}

/* Walks the current thread's Python stack into a new py_events record.
 * Returns false when the process is not Python or the thread runs none. */
static __always_inline bool py_emit_stack(__u32 tgid, __u32 tid, __u16 kind, __u64 id, __u32 max)
{
	const struct eacgm_py_process *p;
	__u64 tstate = py_thread(tgid, tid, &p);
	if (!tstate)
		return false;
	bool ok = true;
	__u64 frame = py_top_frame(p, tstate, &ok);
	return py_emit_walk(p, frame, ok, tgid, tid, kind, id, max);
}

#endif
