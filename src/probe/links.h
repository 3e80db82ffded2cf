// Small helpers over libbpf objects shared by the skeleton owners.
#pragma once
#include <cstdint>
#include <vector>

struct bpf_link;
struct bpf_map;

namespace eacgm {

// Detaching uprobes is slow on recent kernels: each removal waits for an RCU
// grace period (about 0.1 s here), one after another when done in a loop.
// Destroys the links from several threads at once, so that their grace
// periods overlap: a recording with hundreds of probes still exits promptly.
void destroy_links(std::vector<struct bpf_link *> &links);

// Counters kept in a per-CPU array (keys 0..n-1), summed over the CPUs;
// a counter that cannot be read stays 0.
std::vector<uint64_t> sum_percpu_counters(const struct bpf_map *map, uint32_t n);

} // namespace eacgm
