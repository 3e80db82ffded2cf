// SPDX-License-Identifier: Apache-2.0
// The sources of a live node (pipeline/sources.h): the BPF ring buffers the
// span, process and Python programs write to, and the probes the attacher
// places and the span engine runs.
#pragma once
#include "pipeline/sources.h"
#include "probe/attacher.h"
#include "probe/proc_tracker.h"
#include "probe/span_engine.h"

struct ring_buffer;
struct bpf_map;

namespace eacgm {

// One libbpf ring_buffer over the three maps: a consume reads each ring to
// its end, in the order they were added (spans, processes, Python). A
// child's calls can thus be read before the fork that made it; the RecordLoop
// decodes a round's calls only after handling its process records.
//
// fd() is readable when a ring's program woke its reader (the span ring at a
// quarter full, the Python ring at most every 50 ms, the process ring on
// each event the reader has not caught up with), not whenever a ring holds
// a record: the rings are watched edge-triggered, by an epoll instance of
// our own. libbpf's own (level-triggered) was readable at every look while
// a burst kept the span ring from ever being empty, so the loop came round
// for every few records, and its per-round costs (the CPU clock read six
// times, a poll, the exit checks) took three quarters of eacgm's CPU.
class BpfRings : public RecordSource {
public:
	// python may be null (no Python layer).
	static Result<BpfRings> open(bpf_map *spans, bpf_map *procs, bpf_map *python);
	BpfRings(BpfRings &&o) noexcept;
	BpfRings &operator=(BpfRings &&) = delete;
	~BpfRings() override;

	int fd() const override;
	Result<int> consume(Records &to) override;

private:
	BpfRings() = default;
	static int on_span(void *ctx, void *data, size_t size);
	static int on_proc(void *ctx, void *data, size_t size);
	static int on_py(void *ctx, void *data, size_t size);
	// Heap-held: the rings' callbacks keep its address.
	struct State {
		ring_buffer *rb = nullptr;
		int ep = -1;           // the rings, edge-triggered
		Records *to = nullptr; // during consume
	};
	std::unique_ptr<State> s_;
};

class BpfProbes : public Probes {
public:
	BpfProbes(Attacher &attacher, SpanEngine &engine, ProcTracker &tracker)
		: attacher_(attacher), engine_(engine), tracker_(tracker)
	{}
	const SpecSet &specs() const override { return attacher_.specs(); }
	void inherit(uint32_t child, uint32_t parent) override { attacher_.inherit(child, parent); }
	void forget(uint32_t pid) override { attacher_.forget(pid); }
	Scan scan(uint32_t pid, const std::vector<Mapping> &maps) override;
	bool wanted(const std::string &path) const override { return attacher_.wanted(path); }
	Result<void> track(uint32_t pid) override { return tracker_.track(pid); }
	std::array<uint64_t, EACGM_CNT_COUNT> counters() const override { return engine_.counters(); }
	Result<std::vector<eacgm_open_call>> open_calls(uint32_t tid) const override { return engine_.open_calls(tid); }
	std::vector<std::string> take_warnings() override;

private:
	std::vector<std::string> errors_; // scans that failed
	Attacher &attacher_;
	SpanEngine &engine_;
	ProcTracker &tracker_;
};

} // namespace eacgm
