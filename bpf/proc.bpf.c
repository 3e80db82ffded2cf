// SPDX-License-Identifier: GPL-2.0
/* Process-tree tracking: keeps traced_tgids equal to the traced process
 * trees (fork adds children, exit removes them) and tells the agent about
 * forks, execs, exits and link-map changes so it can name processes and
 * attach to libraries loaded with dlopen. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "eacgm/abi/events.h"
#include "traced.bpf.h"

char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} proc_events SEC(".maps");

static __always_inline void emit(__u32 kind, __u32 tgid, __u32 ppid, __s32 exit_code)
{
	struct eacgm_proc_event *e = bpf_ringbuf_reserve(&proc_events, sizeof(*e), 0);
	if (!e)
		return;
	e->ts_ns = bpf_ktime_get_ns();
	e->kind = kind;
	e->tgid = tgid;
	e->ppid = ppid;
	e->exit_code = exit_code;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	bpf_ringbuf_submit(e, 0);
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = BPF_CORE_READ(parent, tgid);
	__u32 ctgid = BPF_CORE_READ(child, tgid);
	if (ptgid == ctgid) /* a new thread, not a new process */
		return 0;
	__u32 *root = bpf_map_lookup_elem(&traced_tgids, &ptgid);
	if (!root)
		return 0;
	__u32 r = *root;
	bpf_map_update_elem(&traced_tgids, &ctgid, &r, BPF_ANY);
	emit(EACGM_PROC_FORK, ctgid, ptgid, 0);
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(on_exec, struct task_struct *p)
{
	__u32 tgid = BPF_CORE_READ(p, tgid);
	/* trace_all (serve): every exec, so the agent finds new programs. */
	if (!eacgm_is_traced(tgid))
		return 0;
	emit(EACGM_PROC_EXEC, tgid, 0, 0);
	return 0;
}

/* Only the first argument: kernels before 6.x have no group_dead argument,
 * so whether the whole process is gone is read from signal->live. */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(on_exit, struct task_struct *p)
{
	__u32 tgid = BPF_CORE_READ(p, tgid);
	if (!bpf_map_lookup_elem(&traced_tgids, &tgid))
		return 0;
	if (BPF_CORE_READ(p, signal, live.counter) != 0)
		return 0; /* other threads remain */
	__s32 code = BPF_CORE_READ(p, exit_code);
	emit(EACGM_PROC_EXIT, tgid, 0, code);
	bpf_map_delete_elem(&traced_tgids, &tgid);
	return 0;
}

/* Attached to the dynamic linker's _dl_debug_state, which it calls after
 * every change of the link map (the debugger rendezvous): the agent then
 * rescans the process's mappings for libraries to probe. */
SEC("uprobe")
int BPF_KPROBE(on_link_map_change)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (!eacgm_is_traced(tgid))
		return 0;
	emit(EACGM_PROC_DLOPEN, tgid, 0, 0);
	return 0;
}
