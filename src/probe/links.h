// SPDX-License-Identifier: Apache-2.0
// Small helpers over libbpf objects shared by the skeleton owners.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <bpf/bpf.h>

#include "common/fd.h"
#include "common/result.h"

struct bpf_link;
struct bpf_map;

namespace eacgm {

// One owner for a group of BPF links: libbpf's and raw link fds (the
// uprobe_multi links libbpf 1.1 cannot make). Detaching uprobes is slow on
// recent kernels: each removal waits for an RCU grace period (about 0.1 s
// here), one after another when done in a loop. A LinkSet detaches its links
// from several threads at once, so that their grace periods overlap: a
// recording with hundreds of probes still exits promptly.
class LinkSet {
public:
	LinkSet() = default;
	LinkSet(LinkSet &&o) noexcept;
	LinkSet &operator=(LinkSet &&o) noexcept;
	LinkSet(const LinkSet &) = delete;
	LinkSet &operator=(const LinkSet &) = delete;
	~LinkSet() { reset(); }

	void add(struct bpf_link *l) { links_.push_back(l); }
	void add(UniqueFd fd) { fds_.push_back(std::move(fd)); }
	void absorb(LinkSet &&o);
	bool empty() const { return links_.empty() && fds_.empty(); }
	// Detaches everything now (waits for the kernel's grace periods).
	void reset();

private:
	std::vector<struct bpf_link *> links_;
	std::vector<UniqueFd> fds_;
};

// BPF_TRACE_UPROBE_MULTI, which libbpf 1.1's headers predate: the expected
// attach type of a program loaded for uprobe_multi links.
inline constexpr enum bpf_attach_type kTraceUprobeMulti = (enum bpf_attach_type)48;

// A uprobe_multi link (kernel 6.6+): the program on every offset of the
// file at once, each call seeing its cookie. Unlike a perf-event uprobe it
// needs no CAP_SYS_ADMIN here (CAP_BPF and CAP_PERFMON), and it is detached
// in one grace period rather than one per offset. ret: on returns.
Result<UniqueFd> attach_uprobe_multi(int prog_fd, const std::string &path, const std::vector<uint64_t> &offsets,
				     const std::vector<uint64_t> &cookies, bool ret);

// Counters kept in a per-CPU array (keys 0..n-1), summed over the CPUs;
// a counter that cannot be read stays 0.
std::vector<uint64_t> sum_percpu_counters(const struct bpf_map *map, uint32_t n);

} // namespace eacgm
