// SPDX-License-Identifier: Apache-2.0
// Owner of the span engine's BPF object (bpf/span.bpf.c): the spec table,
// the uprobe/uretprobe links and the span ring buffer.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/result.h"
#include "eacgm/abi/events.h"
#include "probe/guard_server.h"
#include "probe/links.h"
#include "probe/skeleton.h"

struct span_bpf;
struct bpf_link;
struct bpf_map;
struct bpf_program;

namespace eacgm {

// What one span record takes in the span ring: the event and the ring's
// 8-byte header (BPF_RINGBUF_HDR_SZ, which libbpf 1.1's headers do not name).
constexpr size_t kSpanRingRecordBytes = sizeof(eacgm_span_event) + 8;

// How often a CPU's span program asks how full a ring of ring_bytes is, as
// a mask: it asks when its count of spans & mask is 0 (bpf/span.bpf.c).
uint32_t wakeup_check_mask(uint32_t ring_bytes);

class SpanEngine {
public:
	struct Options {
		uint32_t ring_buffer_bytes = 8u << 20;
		bool trace_all = false;
		// Use uprobe_multi links where the kernel has them; false forces
		// the per-function links of older kernels (tests, comparisons).
		bool multi_link = true;
		// The Python layer's maps (bpf/pystack.bpf.h), as fds, to record the
		// Python stack behind every span of a Python process; -1: no stacks.
		int py_procs = -1, py_tstates = -1, py_events = -1, py_counters = -1;
		// Load the exception guard where this machine lets it
		// (probe/unwind_guard.h); false: never (tests of what it changes).
		bool guard = true;
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
	// every process that maps it. Functions of throttled specs wait for the
	// next burst (attach_throttled).
	Result<void> attach(const std::string &path, const std::vector<Target> &targets);
	// Links made apart from the library groups and owned by the caller: a
	// probe on one of eacgm's own functions to time the trap.
	Result<LinkSet> attach_apart(const std::string &path, const std::vector<Target> &targets);
	// Whether one uprobe_multi link serves a whole library (kernel 6.6+).
	bool multi_link() const { return multi_; }

	// Whether the exception guard is loaded (probe/unwind_guard.h); where
	// it is not, why (for the user: return probes on libraries that throw
	// would put the traced program at risk).
	bool guarded() const { return !unguarded_; }
	const std::string &unguarded_reason() const { return *unguarded_; }
	// Puts the guard's probes on a library (entry only, cookie: the role).
	// They stay until the engine goes, after every span probe has gone.
	Result<void> attach_guard(const std::string &path, const std::vector<Target> &sites);
	// What the guard's server has done so far.
	GuardCounts guard_counts() const;

	// Duty-cycling (--overhead-budget). The functions of `specs` leave the
	// libraries' links: each library's link is replaced by one without them,
	// attached before the old one goes (the entry program drops the twin
	// entry of a call seen by both). Returns the old links: the caller
	// detaches them, which waits for grace periods, off the record path.
	// An empty set puts every function back.
	Result<LinkSet> set_throttled(const std::set<uint32_t> &specs);
	// One burst: the throttled functions of every library, until the links
	// returned go.
	Result<LinkSet> attach_throttled();
	std::set<uint32_t> throttled() const;

	// Threads whose call stack the kernel keeps now (diagnostics, tests).
	size_t threads_with_state() const;

	// The calls thread `tid` is inside now, outermost first, read from the
	// entry program's per-thread state (a pidfd of the thread keys the task
	// storage: PIDFD_THREAD, kernel 6.9+). Empty when the thread holds no
	// state or has exited; an error when the kernel cannot read it.
	Result<std::vector<eacgm_open_call>> open_calls(uint32_t tid) const;

	struct bpf_map *events_map() const;
	std::array<uint64_t, EACGM_CNT_COUNT> counters() const;

private:
	SpanEngine() = default;
	Result<void> link(const std::string &path, const std::vector<Target> &targets, LinkSet &into);
	// One program on targets of a library: one uprobe_multi link, or a link each.
	Result<void> attach_multi(struct bpf_program *prog, const std::string &path, const std::vector<Target> &targets,
				  bool ret, LinkSet &into);
	Result<void> attach_each(struct bpf_program *prog, const std::string &path, const std::vector<Target> &targets,
				 bool ret, LinkSet &into);

	// One library's probes and the links that serve those not throttled.
	struct Group {
		std::string path;
		std::vector<Target> targets;
		LinkSet links;
	};
	std::vector<Target> wanted(const Group &g, bool throttled) const;

	Result<int> load(const Options &opts, int traced_map_fd, bool multi, bool guard);

	Skeleton<struct span_bpf> skel_ = no_skeleton<struct span_bpf>();
	bool multi_ = false;
	std::optional<std::string> unguarded_; // why the guard is not loaded
	LinkSet thread_exit_;
	LinkSet guard_links_;
	std::unique_ptr<GuardServer> guard_server_; // answers the guard's requests
	// attach() runs on the record loop, the budget's bursts on their own thread.
	mutable std::mutex mu_;
	std::vector<Group> groups_;
	std::set<uint32_t> throttled_;
};

} // namespace eacgm
