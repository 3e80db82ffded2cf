#include "probe/links.h"

#include <algorithm>
#include <atomic>
#include <bpf/libbpf.h>
#include <thread>

namespace eacgm {

void destroy_links(std::vector<struct bpf_link *> &links)
{
	size_t nthreads = std::min<size_t>(links.size(), 64);
	std::atomic<size_t> next{0};
	std::vector<std::thread> workers;
	for (size_t t = 0; t < nthreads; t++)
		workers.emplace_back([&] {
			for (size_t i; (i = next.fetch_add(1)) < links.size();)
				bpf_link__destroy(links[i]);
		});
	for (auto &w : workers)
		w.join();
	links.clear();
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

} // namespace eacgm
