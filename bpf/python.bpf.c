// SPDX-License-Identifier: GPL-2.0
/* The Python sampling profiler: a CPU-clock perf event per CPU (default
 * 1 kHz) samples the running thread; for a traced Python process it records
 * the thread's Python stack. The agent turns consecutive samples into
 * function spans. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
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
	if (py_emit_stack(tgid, (__u32)id, EACGM_PY_SAMPLE, 0, EACGM_PY_MAX_FRAMES))
		py_count(EACGM_PY_CNT_SAMPLES);
	return 0;
}
