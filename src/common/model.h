// SPDX-License-Identifier: Apache-2.0
// The decoded event model shared by every folder: the pipeline, the store, the sinks and the readers.
// Times are CLOCK_MONOTONIC nanoseconds; Recording::wall_offset_ns converts
// them to Unix time at the edges (trace metadata, summaries).
#pragma once
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace eacgm {

// A Python stack, innermost first: "Model.forward (model.py:42)". Immutable
// and shared: the record loop names each distinct stack once, and every call
// made under it holds the same frames and their JSON text (the store's
// column), so neither is copied nor rebuilt per call. On GPT's optimizer
// steps that copying and dumping was a fifth of eacgm's own CPU.
class PyStack {
public:
	PyStack() = default;
	PyStack(std::vector<std::string> frames);
	PyStack(std::initializer_list<std::string> frames) : PyStack(std::vector<std::string>(frames)) {}

	bool empty() const { return !body_; }
	size_t size() const { return body_ ? body_->frames.size() : 0; }
	const std::string &operator[](size_t i) const { return body_->frames[i]; }
	const std::string &front() const { return body_->frames.front(); }
	const std::string &back() const { return body_->frames.back(); }
	const std::vector<std::string> &frames() const;
	auto begin() const { return frames().begin(); }
	auto end() const { return frames().end(); }
	// The frames as a JSON array (invalid UTF-8 replaced), made once.
	const std::string &json() const;
	bool operator==(const PyStack &o) const { return frames() == o.frames(); }
	// The same for copies of one stack, not for equal stacks made apart:
	// what a cache of stacks keys them by.
	const void *identity() const { return body_.get(); }

private:
	struct Body {
		std::vector<std::string> frames;
		std::string json;
	};
	std::shared_ptr<const Body> body_; // null: no stack
};

void to_json(nlohmann::json &j, const PyStack &s);

// A span's argument that is no argument of the function: how long its
// thread waited on a run queue during the call (ns), kept where it waited at
// all, on kernels that measure it (meta "runq_measured" = "1": a span of such
// a recording without it waited 0). It tells a call slowed because its
// thread waited for a CPU from one that was itself slow.
inline constexpr const char *kRunqArg = "runq_ns";

// A span's argument that is no argument of the function: the calls it
// stands for, where that is not 1 (a call seen in a burst of a probe the
// overhead budget throttles: those its probe was detached for). A spec
// argument of that name gives way to it.
inline constexpr const char *kWeightArg = "weight";
// A Python span measured at both ends (the eval loop's entry probe), not
// inferred from the stacks behind other calls and the sampler's.
inline constexpr const char *kExactArg = "exact";

struct Span {
	uint64_t start_ns = 0;
	uint64_t dur_ns = 0;
	uint32_t pid = 0;
	uint32_t tid = 0;
	uint32_t depth = 0;                             // open spans below it on its thread when it began
	std::string layer;                              // "cuda", "nccl", "torch", ...
	std::string name;                               // function name as users know it: "cudaMalloc"
	int64_t ret = 0;                                // raw return value
	std::string ret_name;                           // decoded return ("cudaErrorInsufficientDriver"), may be empty
	uint64_t bytes = 0;                             // bytes moved or allocated, 0 when not applicable
	nlohmann::json args = nlohmann::json::object(); // captured arguments, by name
	// The Python stack when the call began. Empty outside Python.
	PyStack py_stack;
};

// How long a span's thread waited to run during the call: its kRunqArg, 0
// where it has none.
uint64_t runq_of(const Span &s);
// The calls a span stands for: its kWeightArg (the overhead budget sampled
// its probe), 1 where it has none.
double weight_of(const Span &s);
// A span failed when its decoded return names something other than success:
// ret_name is non-empty and does not end in "success", case-insensitively
// (cudaSuccess, ncclSuccess, CUDA_SUCCESS). Spans without a decoded return
// (ret_name empty) count as successes whatever their raw ret.
bool is_error_span(const Span &s);
bool is_error_name(const std::string &ret_name); // the same, of a decoded return

// The order a trace nests spans in (SpanOrder::by_thread): by thread, then
// start; a parent before a child that starts at the same time, hence longer
// first, then shallower first for spans identical in time. A stable sort by
// it keeps ties in their order (by id, read in id order).
bool nests_before(const Span &a, const Span &b);

struct Process {
	uint32_t pid = 0;
	uint32_t ppid = 0;
	std::string comm;
	std::string cmdline;
	uint64_t start_ns = 0;
	uint64_t end_ns = 0; // 0 while running or unknown
	int exit_code = -1;  // -1 unknown
	// Where it runs (pipeline/cgroup.h); labels of the agent's metrics, not
	// (yet) columns of the store.
	std::string cgroup, container_id, pod_uid;
	// Its job and rank as its launcher's environment gave them
	// (pipeline/identity.h): "" and -1 where it gave none.
	std::string job;
	int rank = -1;
};

struct Thread {
	uint32_t pid = 0;
	uint32_t tid = 0;
	std::string name;
};

// Records lost or not recorded, by layer and reason ("ringbuf_full", ...).
struct Drop {
	std::string layer;
	std::string reason;
	uint64_t count = 0;
};

// One measured value at a time, from a layer polled or aggregated over an
// interval (gpu, host). Names are snake_case and end in their unit:
// "util_gpu_pct", "power_w", "sched_delay_ns", "mem_used_bytes".
struct Metric {
	uint64_t ts_ns = 0;
	std::string layer; // "gpu", "host"
	std::string name;
	// What the value is about besides a process: "gpu0", "eth0",
	// "10.0.0.1:5201->10.0.0.2:40312"; empty when pid says it all.
	std::string key;
	uint32_t pid = 0; // 0: not about one process
	double value = 0;
};

// Something that happened at an instant: an XID error, a device lost.
struct Event {
	uint64_t ts_ns = 0;
	std::string layer;
	std::string name; // "xid", "ecc_double_bit", "device_lost", ...
	std::string key;  // as Metric::key
	uint32_t pid = 0;
	uint32_t tid = 0;
	nlohmann::json args = nlohmann::json::object();
};

// An event the detector (src/detect) found unusual for its key (layer and
// name): its score under the key's mixture model, the threshold it fell
// below, per-feature values and attributions, and ranked causes.
struct Anomaly {
	uint64_t ts_ns = 0; // the span's start
	uint64_t dur_ns = 0;
	uint32_t pid = 0;
	uint32_t tid = 0;
	std::string layer;
	std::string name;
	double score = 0;                                   // log density (natural log); lower is rarer
	double threshold = 0;                               // flagged because score < threshold
	nlohmann::json features = nlohmann::json::object(); // name -> {value, typical, z, contribution}
	nlohmann::json causes = nlohmann::json::array();    // ranked, each with its evidence
	// When the live detector flagged it (CLOCK_MONOTONIC, the clock of
	// ts_ns): its detection latency is this less the fault's onset. 0: found
	// after the fact (eacgm detect).
	uint64_t detected_ns = 0;
};

// Meta of a recording merged from several (eacgm merge): per process of
// the merge, where it came from, as a JSON object keyed by its pid in the
// merge: {"10001234": {"host": "node1", "pid": 1234, "input": 1}}.
inline constexpr const char *kProcessOriginsMeta = "process_origins";

struct Recording {
	std::map<std::string, std::string> meta; // command, version, start time ...
	int64_t wall_offset_ns = 0;              // unix_ns = mono_ns + wall_offset_ns
	std::vector<Process> processes;
	std::vector<Thread> threads;
	std::vector<Span> spans;
	std::vector<Drop> drops;
	std::vector<Metric> metrics;    // by ts_ns
	std::vector<Event> events;      // by ts_ns
	std::vector<Anomaly> anomalies; // by ts_ns; written by `eacgm detect`
};

// Spans handed over one at a time (read from a file as they are needed
// rather than held), in an order their maker promises:
enum class SpanOrder {
	as_recorded, // the order they were stored in: the cheapest to read
	by_start,    // start_ns; ties in the order they were recorded
	by_thread,   // pid, tid, start_ns, longer first, shallower first, then
		     // as recorded: how a trace viewer nests them
};
using SpanVisit = std::function<void(const Span &)>;

} // namespace eacgm
