// Small helpers over libbpf objects shared by the skeleton owners.
#pragma once
#include <cstdint>
#include <vector>

#include "common/fd.h"

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

// Counters kept in a per-CPU array (keys 0..n-1), summed over the CPUs;
// a counter that cannot be read stays 0.
std::vector<uint64_t> sum_percpu_counters(const struct bpf_map *map, uint32_t n);

} // namespace eacgm
