// SPDX-License-Identifier: GPL-2.0
/* The floor for benchmarks: an empty uprobe and uretprobe. Whatever the span
 * engine costs above this is eacgm's own work; the trap itself is the kernel's.
 * The same empty pair twice, as bpf/span.bpf.c has its programs twice: one
 * perf-event link per function (floor_entry, floor_exit), or one uprobe_multi
 * link (the _multi pair, whose attach type the benchmark sets before loading).
 * The kernel runs the two kinds differently around the program, so each kind
 * of link has a floor of its own.
 *
 * Beside them, the least any tracer must do to hand each call's span to user
 * space (least_*): keep the entry time per thread (task storage, the cheapest
 * per-thread state there is), read the clock again at return and put a
 * 24-byte record in a ring buffer without waking the reader. And the least
 * work of a tracer that hands over nothing per call and only counts and sums
 * in the kernel (tally_*); between them, spans handed over 32 at a time
 * (batch_*). They bound from below what eacgm's span engine can
 * cost: no design that gives every call a span of its own costs less than
 * least_*, which is why the per-call target is measured against it too. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";

SEC("uprobe")
int BPF_KPROBE(floor_entry) { return 0; }

SEC("uretprobe")
int BPF_KRETPROBE(floor_exit) { return 0; }

SEC("uprobe")
int BPF_KPROBE(floor_entry_multi) { return 0; }

SEC("uretprobe")
int BPF_KRETPROBE(floor_exit_multi) { return 0; }

struct least_span {
	__u64 start_ns, dur_ns;
	__u32 tid, pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 22);
} least_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, __u64); /* the open call's entry time */
} least_open SEC(".maps");

/* A thread's spans gathered to be handed over 32 at a time. */
#define LEAST_BATCH 32
struct least_batch {
	__u32 n, pad;
	struct least_span spans[LEAST_BATCH];
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct least_batch);
} least_batches SEC(".maps");

/* Calls and their summed durations, per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} tally SEC(".maps");

static __always_inline int keep_entry_time(void)
{
	__u64 *t = bpf_task_storage_get(&least_open, bpf_get_current_task_btf(), 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (t)
		*t = bpf_ktime_get_ns();
	return 0;
}

/* The open call's duration; 0 when its entry was not seen. */
static __always_inline __u64 take_duration(__u64 *start)
{
	__u64 *t = bpf_task_storage_get(&least_open, bpf_get_current_task_btf(), 0, 0);
	if (!t || !*t)
		return 0;
	*start = *t;
	*t = 0;
	return bpf_ktime_get_ns() - *start;
}

static __always_inline int hand_over_span(void)
{
	__u64 start = 0, dur = take_duration(&start);
	if (!dur)
		return 0;
	struct least_span *e = bpf_ringbuf_reserve(&least_events, sizeof(*e), 0);
	if (!e)
		return 0;
	e->start_ns = start;
	e->dur_ns = dur;
	e->tid = (__u32)bpf_get_current_pid_tgid();
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
	return 0;
}

/* A span kept in the thread's batch, the batch handed over once full. The
 * spans of a thread that stops calling stay in its batch: the price of the
 * saving, which is why it is only measured. */
static __always_inline int batch_span(void)
{
	__u64 start = 0, dur = take_duration(&start);
	struct least_batch *b =
		bpf_task_storage_get(&least_batches, bpf_get_current_task_btf(), 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!dur || !b)
		return 0;
	struct least_span *e = &b->spans[b->n & (LEAST_BATCH - 1)];
	e->start_ns = start;
	e->dur_ns = dur;
	e->tid = (__u32)bpf_get_current_pid_tgid();
	if (++b->n >= LEAST_BATCH) {
		bpf_ringbuf_output(&least_events, b->spans, sizeof(b->spans), BPF_RB_NO_WAKEUP);
		b->n = 0;
	}
	return 0;
}

static __always_inline int count_in_kernel(void)
{
	__u64 start = 0, dur = take_duration(&start);
	__u32 k0 = 0, k1 = 1;
	__u64 *calls = bpf_map_lookup_elem(&tally, &k0), *sum = bpf_map_lookup_elem(&tally, &k1);
	if (!dur || !calls || !sum)
		return 0;
	*calls += 1;
	*sum += dur;
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(least_entry_multi) { return keep_entry_time(); }

SEC("uretprobe")
int BPF_KRETPROBE(least_exit_multi) { return hand_over_span(); }

SEC("uretprobe")
int BPF_KRETPROBE(batch_exit_multi) { return batch_span(); }

SEC("uretprobe")
int BPF_KRETPROBE(tally_exit_multi) { return count_in_kernel(); }
