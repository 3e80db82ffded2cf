// SPDX-License-Identifier: GPL-2.0
/* The Python sampling profiler: a CPU-clock perf event per CPU (default
 * 1 kHz) samples the running thread; for a traced Python process it records
 * the thread's Python stack. The agent turns consecutive samples into
 * function spans. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "eacgm/abi/events.h"
#include "traced.bpf.h"
#include "pystack.bpf.h"

char LICENSE[] SEC("license") = "GPL";

SEC("perf_event")
int py_sample(struct bpf_perf_event_data *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	if (!eacgm_is_traced(tgid))
		return 0;
	__u64 t0 = bpf_ktime_get_ns();
	if (py_emit_stack(tgid, (__u32)id, EACGM_PY_SAMPLE, 0, EACGM_PY_MAX_FRAMES)) {
		py_count(EACGM_PY_CNT_SAMPLES);
		py_add(EACGM_PY_CNT_SAMPLE_NS, bpf_ktime_get_ns() - t0);
	}
	return 0;
}

/* A forked child runs the same interpreter at the same addresses: register
 * it at once, so a short-lived worker (multiprocessing) is sampled from its
 * first instruction, before the agent even hears of it. */
SEC("tp_btf/sched_process_fork")
int BPF_PROG(py_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = BPF_CORE_READ(parent, tgid);
	__u32 ctgid = BPF_CORE_READ(child, tgid);
	if (ptgid == ctgid)
		return 0;
	struct eacgm_py_process *p = bpf_map_lookup_elem(&py_procs, &ptgid);
	if (p)
		bpf_map_update_elem(&py_procs, &ctgid, p, BPF_ANY);
	return 0;
}

/* An exec replaces the program: whatever interpreter the process ran (its
 * own or its parent's, copied at the fork above) is gone, and the new image
 * has other addresses, perhaps another Python or none. Dropped here, at
 * once, so that no walk reads the new image by the old layout; the agent
 * registers the new program's interpreter, if it has one, once it has read
 * its maps. The thread that execs is the process's only thread now. */
SEC("tp_btf/sched_process_exec")
int BPF_PROG(py_exec, struct task_struct *p)
{
	__u32 tgid = BPF_CORE_READ(p, tgid);
	__u32 tid = BPF_CORE_READ(p, pid);
	bpf_map_delete_elem(&py_procs, &tgid);
	bpf_map_delete_elem(&py_tstates, &tid);
	return 0;
}
