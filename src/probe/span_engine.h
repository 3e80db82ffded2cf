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
		// Use uprobe_multi links where the kernel has them; false forces
		// the per-function links of older kernels (tests, comparisons).
		bool multi_link = true;
		// The Python layer's maps (bpf/pystack.bpf.h), to record the Python
		// stack behind every span of a Python process; null: no stacks.
		struct bpf_map *py_procs = nullptr, *py_tstates = nullptr, *py_events = nullptr,
			       *py_counters = nullptr;
	};
	// traced_map_fd: ProcTracker's set of traced processes, shared.
	static Result<std::unique_ptr<SpanEngine>> open(const Options &opts, int traced_map_fd);
	~SpanEngine();
	SpanEngine(const SpanEngine &) = delete;
	SpanEngine &operator=(const SpanEngine &) = delete;

	Result<void> set_spec(uint32_t spec_id, const eacgm_probe_spec &spec);

	struct Target {
		uint64_t file_offset; // of the function in the library file
		uint32_t spec_id;     // the attach cookie
	};
	// Attaches the entry and exit programs to functions of one library, for
	// every process that maps it.
	Result<void> attach(const std::string &path, const std::vector<Target> &targets);
	// Whether one uprobe_multi link serves a whole library (kernel 6.6+).
	bool multi_link() const { return multi_; }
	// Threads whose call stack the kernel keeps now (diagnostics, tests).
	size_t threads_with_state() const;

	struct bpf_map *events_map() const;
	std::array<uint64_t, EACGM_CNT_COUNT> counters() const;

private:
	SpanEngine() = default;
	Result<void> attach_multi(const std::string &path, const std::vector<Target> &targets, bool ret);

	struct span_bpf *skel_ = nullptr;
	bool multi_ = false;
	std::vector<struct bpf_link *> links_;
	std::vector<int> multi_fds_; // uprobe_multi link fds
};

} // namespace eacgm
