// Owner of the span engine's BPF object (bpf/span.bpf.c): the spec table,
// the uprobe/uretprobe links and the span ring buffer.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"
#include "eacgm/abi/events.h"

struct span_bpf;
struct bpf_link;
struct bpf_map;

namespace eacgm {

class SpanEngine {
public:
	struct Options {
		uint32_t ring_buffer_bytes = 8u << 20;
		bool trace_all = false;
	};
	// traced_map_fd: ProcTracker's set of traced processes, shared.
	static Result<std::unique_ptr<SpanEngine>> open(const Options &opts, int traced_map_fd);
	~SpanEngine();
	SpanEngine(const SpanEngine &) = delete;
	SpanEngine &operator=(const SpanEngine &) = delete;

	Result<void> set_spec(uint32_t spec_id, const eacgm_probe_spec &spec);
	// Attaches the entry and exit programs at a file offset of a library,
	// for every process that maps it; the cookie selects the spec.
	Result<void> attach(const std::string &path, uint64_t file_offset, uint32_t spec_id);
	// Threads whose call stack the kernel keeps now (diagnostics, tests).
	size_t threads_with_state() const;

	struct bpf_map *events_map() const;
	std::array<uint64_t, EACGM_CNT_COUNT> counters() const;

private:
	SpanEngine() = default;
	struct span_bpf *skel_ = nullptr;
	std::vector<struct bpf_link *> links_;
};

} // namespace eacgm
