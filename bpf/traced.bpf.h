/* SPDX-License-Identifier: GPL-2.0 */
/* The set of processes being traced, shared by every eacgm BPF object.
 * proc.bpf.c owns and maintains it (follows forks, forgets exits); the other
 * objects declare the same map and the agent hands them proc's fd before load
 * (bpf_map__reuse_fd), so there is one set for all layers. */
#ifndef EACGM_TRACED_BPF_H
#define EACGM_TRACED_BPF_H

#define EACGM_MAX_TRACED 65536

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, EACGM_MAX_TRACED);
	__type(key, __u32);   /* tgid */
	__type(value, __u32); /* tgid of the traced ancestor it came from */
} traced_tgids SEC(".maps");

/* Set through the skeleton's rodata: trace every process on the host. */
const volatile bool trace_all = false;
/* With trace_all: the agent's own process, never traced. Its calibration
 * calls (the overhead budget times a probed function of its own) would
 * otherwise count as the node's calls. */
const volatile __u32 self_tgid = 0;

static __always_inline bool eacgm_is_traced(__u32 tgid)
{
	if (trace_all)
		return true;
	return bpf_map_lookup_elem(&traced_tgids, &tgid) != NULL;
}

/* On a traced call. trace_all (serve): the caller is traced from this call
 * on, added to the set here in the kernel, so that its forks and its exit
 * are followed from that instant rather than from whenever the agent hears
 * of it (a child forked meanwhile would be missed). Paid once per thread:
 * the span programs keep per-thread state once a thread is traced. */
static __always_inline bool eacgm_traced_on_call(__u32 tgid)
{
	if (!trace_all)
		return bpf_map_lookup_elem(&traced_tgids, &tgid) != NULL;
	if (tgid == self_tgid)
		return false;
	if (!bpf_map_lookup_elem(&traced_tgids, &tgid))
		bpf_map_update_elem(&traced_tgids, &tgid, &tgid, BPF_NOEXIST);
	return true;
}

#endif
