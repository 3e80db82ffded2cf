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

} // namespace eacgm
