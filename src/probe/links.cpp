// SPDX-License-Identifier: Apache-2.0
#include "probe/links.h"

#include <algorithm>
#include <atomic>
#include <bpf/libbpf.h>
#include <cerrno>
#include <cstddef>
#include <sys/syscall.h>
#include <thread>
#include <unistd.h>
#include <utility>

namespace eacgm {

LinkSet::LinkSet(LinkSet &&o) noexcept : links_(std::move(o.links_)), fds_(std::move(o.fds_))
{
	o.links_.clear();
	o.fds_.clear();
}

LinkSet &LinkSet::operator=(LinkSet &&o) noexcept
{
	if (this != &o) {
		reset();
		links_ = std::exchange(o.links_, {});
		fds_ = std::exchange(o.fds_, {});
	}
	return *this;
}

void LinkSet::absorb(LinkSet &&o)
{
	for (auto *l : std::exchange(o.links_, {}))
		links_.push_back(l);
	for (auto &fd : std::exchange(o.fds_, {}))
		fds_.push_back(std::move(fd));
}

void LinkSet::reset()
{
	// A raw link fd's last close detaches it: closed beside the libbpf
	// links, on the same threads, so every grace period overlaps.
	std::vector<struct bpf_link *> links = std::exchange(links_, {});
	std::vector<UniqueFd> fds = std::exchange(fds_, {});
	size_t n = links.size() + fds.size();
	if (n <= 1) {
		for (auto *l : links)
			bpf_link__destroy(l);
		return; // a lone fd closes with `fds`
	}
	size_t nthreads = std::min<size_t>(n, 64);
	std::atomic<size_t> next{0};
	std::vector<std::thread> workers;
	for (size_t t = 0; t < nthreads; t++)
		workers.emplace_back([&] {
			for (size_t i; (i = next.fetch_add(1)) < n;) {
				if (i < links.size())
					bpf_link__destroy(links[i]);
				else
					fds[i - links.size()].reset();
			}
		});
	for (auto &w : workers)
		w.join();
}

std::vector<uint64_t> sum_percpu_counters(const struct bpf_map *map, uint32_t n)
{
	std::vector<uint64_t> total(n);
	int ncpu = libbpf_num_possible_cpus();
	if (ncpu <= 0)
		return total;
	std::vector<uint64_t> per_cpu(ncpu);
	for (uint32_t k = 0; k < n; k++)
		if (!bpf_map__lookup_elem(map, &k, sizeof(k), per_cpu.data(), per_cpu.size() * sizeof(uint64_t), 0))
			for (auto v : per_cpu)
				total[k] += v;
	return total;
}

// libbpf 1.1 predates uprobe_multi links, so the link is made with the bpf()
// syscall directly; this is the link_create layout of the kernel's UAPI.
struct UprobeMultiLinkAttr {
	uint32_t prog_fd;
	uint32_t target_fd;
	uint32_t attach_type;
	uint32_t flags;
	uint64_t path;
	uint64_t offsets;
	uint64_t ref_ctr_offsets;
	uint64_t cookies;
	uint32_t cnt;
	uint32_t multi_flags; // BPF_F_UPROBE_MULTI_RETURN for a return probe
	uint32_t pid;
	uint32_t pad;
};
static_assert(sizeof(UprobeMultiLinkAttr) == 64, "the kernel's link_create.uprobe_multi layout");
static_assert(offsetof(UprobeMultiLinkAttr, path) == 16 && offsetof(UprobeMultiLinkAttr, cnt) == 48,
	      "the kernel's link_create.uprobe_multi layout");

Result<UniqueFd> attach_uprobe_multi(int prog_fd, const std::string &path, const std::vector<uint64_t> &offsets,
				     const std::vector<uint64_t> &cookies, bool ret)
{
	UprobeMultiLinkAttr attr{};
	attr.prog_fd = uint32_t(prog_fd);
	attr.attach_type = kTraceUprobeMulti;
	attr.path = (uint64_t)(uintptr_t)path.c_str();
	attr.offsets = (uint64_t)(uintptr_t)offsets.data();
	attr.cookies = cookies.empty() ? 0 : (uint64_t)(uintptr_t)cookies.data();
	attr.cnt = uint32_t(offsets.size());
	attr.multi_flags = ret ? 1u : 0u;
	int fd = int(syscall(__NR_bpf, BPF_LINK_CREATE, &attr, sizeof(attr)));
	if (fd < 0)
		return errno_error(errno, "cannot attach " + std::to_string(offsets.size()) + " uprobes to " + path);
	return UniqueFd(fd);
}

} // namespace eacgm
