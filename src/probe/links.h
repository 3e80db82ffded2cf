// Detaching uprobes is slow on recent kernels: each removal waits for an RCU
// grace period (about 0.1 s here), one after another when done in a loop.
#pragma once
#include <vector>

struct bpf_link;

namespace eacgm {

// Destroys the links from several threads at once, so that their grace
// periods overlap: a recording with hundreds of probes still exits promptly.
void destroy_links(std::vector<struct bpf_link *> &links);

} // namespace eacgm
