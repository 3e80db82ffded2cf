// SPDX-License-Identifier: Apache-2.0
// What the detector measures about each span, and the context it joins in
// (GPU and host metrics, events) from the recording's other layers.
//
// Features, one per row; each numeric one is standardised per key (layer
// and function name) over the key's training window, and takes part in a
// key's model only if the span carries it in at least half of the training events
// and it varies there by more than its floor (a constant feature has no
// density to speak of; a change of it is reported by the root cause).
//
// | feature          | value                                                  | floor  |
// |------------------|--------------------------------------------------------|--------|
// | log_duration     | ln(duration ns)                                        | 0.05   |
// | log_bytes        | ln(1 + bytes moved or allocated)                       | 0.05   |
// | log_bandwidth    | ln(bytes / second), spans that move bytes              | 0.05   |
// | log_gap          | ln(1 + ns since the previous span of the key on the     | 0.05   |
// |                  | thread ended): inter-arrival, without the span's own    |        |
// |                  | duration, so one slow call does not make the next odd;  |        |
// |                  | absent on calls of a throttled probe (args.weight)      |        |
// | call_site        | the Python call site (py_stack[0]): categorical, so not | -      |
// |                  | a mixture dimension; the score adds ln p(site), its     |        |
// |                  | share among the key's training events (a site never     |        |
// |                  | seen: 1 / (n + 1)); shown as surprisal -ln p, in nats   |        |
// | gpu_util_pct     | GPU utilisation, mean of samples in the span (or the    | 2      |
// |                  | last one before it), over the GPUs                      |        |
// | gpu_log_mem_used | ln(1 + GPU memory used bytes), same join                | 0.01   |
// | gpu_power_w      | GPU power, same join                                    | 2      |
// | gpu_temp_c       | GPU temperature, same join                              | 1      |
// | gpu_clock_sm_mhz | SM clock, same join                                     | 15     |
// | host_log_sched   | ln(1 + run-queue delay ns per interval) of the span's   | 0.5    |
// |                  | process, the host intervals that cover the span         |        |
// | host_log_retrans | ln(1 + TCP retransmits) of the span's process, same     | 0.25   |
//
// Floors are in the feature's unit; they bound the standardising scale
// from below, so a feature that barely varies cannot dominate a distance.
#pragma once
#include <array>
#include <cmath>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "common/model.h"

namespace eacgm::detect {

enum Feature : unsigned {
	kLogDuration,
	kLogBytes,
	kLogBandwidth,
	kLogGap,
	kCallSite,
	kGpuUtil,
	kGpuMemUsed,
	kGpuPower,
	kGpuTemp,
	kGpuClockSm,
	kHostSchedDelay,
	kHostRetransmits,
	kFeatureCount
};

struct FeatureInfo {
	const char *name;
	const char *unit; // of the value shown to users, after undoing the log
	bool log;         // the feature is ln(value) (or ln(1 + value): log1p)
	bool log1p;
	double floor;
};
extern const std::array<FeatureInfo, kFeatureCount> kFeatures;

// The value users read: undoes the log of a log feature.
double feature_display_value(unsigned f, double x);

// One span as the detector sees it, before standardisation. NaN: the span
// does not carry that feature (no bytes, no GPU samples, first call).
struct Observation {
	uint64_t start_ns = 0;
	uint64_t dur_ns = 0;
	uint32_t pid = 0;
	uint32_t tid = 0;
	std::string site; // py_stack[0], empty outside Python
	std::array<double, kFeatureCount> x;
	Observation() { x.fill(NAN); }
};

// A traced call as the detector reads it, from a Span or from a typed span
// (pipeline/span.h, which it reads without making a Span): what its
// features, its key and the holding count need.
struct TracedCall {
	std::string_view layer, name;
	uint32_t pid = 0, tid = 0;
	uint64_t start_ns = 0, dur_ns = 0, bytes = 0;
	const PyStack *stack = nullptr; // null or empty: outside Python
	// The gap before it is not the program's: seen in a throttled probe's burst
	// (args.weight), or, offline, revealed by throttled calls (offline.cpp's
	// gap_unknown()).
	bool gap_unknown = false;
};
TracedCall call_of(const Span &s);

// "layer/name": the key a model is kept for.
std::string key_of(const Span &s);
// The same, written into out (its buffer reused: no string made per call).
void key_of(const TracedCall &c, std::string &out);
void key_of(const Span &s, std::string &out);

// The metric series the detector joins with calls: its features' and its
// root causes'. Only these are kept in a Context: the host layer alone
// sends about 70 metrics a tenth of a second, most of them the network
// interfaces' (for dashboards); indexing each was a tenth of eacgm's CPU on
// a GPT step. A join names its series by this id, so a new one is added
// here or does not compile.
enum class SeriesId : uint8_t {
	GpuUtil,
	GpuMemUsed,
	GpuPower,
	GpuTemp,
	GpuClockSm,
	GpuThrottleMask,
	HostSchedDelay,
	HostRetransmits,
	HostInterference,
	HostPsiMemoryStall,
	kCount
};
constexpr size_t kSeriesCount = static_cast<size_t>(SeriesId::kCount);
struct SeriesName {
	std::string_view layer, name;
};
extern const std::array<SeriesName, kSeriesCount> kSeriesNames;
// The id of a metric's series; none for one the detector does not join.
std::optional<SeriesId> series_of(std::string_view layer, std::string_view name);

// Metrics and events seen so far, indexed for the joins "around a span".
class Context {
public:
	void add(const Metric &m);
	void add(const Event &e);
	// Forgets what is older than ts (the sliding window).
	void trim(uint64_t before_ns);
	// Fills the gpu_* and host_* features of o.
	void fill(Observation &o) const;

	// Samples of one series (of one process; 0 = any process, or the
	// machine's) with ts in [t0, t1 + the series' sampling period], the
	// interval aggregates that cover the window.
	struct Sample {
		uint64_t ts_ns;
		std::string key;
		double value;
	};
	std::vector<Sample> covering(SeriesId id, uint32_t pid, uint64_t t0, uint64_t t1) const;
	std::vector<const Event *> events_between(uint64_t t0, uint64_t t1) const;
	// The sampling period of a series (0: unknown, fewer than 2 samples).
	uint64_t period_ns(SeriesId id, uint32_t pid) const;
	bool empty() const { return events_.empty() && series_count_ == 0; }

private:
	struct Series {
		std::deque<Sample> samples; // by ts
		// The longest of the last kGaps gaps between distinct timestamps:
		// the sampling period, not fooled by a collector's last, partial
		// interval (flushed 55 ms after the one before it, where the others
		// came 100 to 124 ms apart: the host features of half of a
		// recording's calls, joined with that period, were missing).
		uint64_t period_ns = 0;
		static constexpr size_t kGaps = 4;
		std::array<uint64_t, kGaps> gaps{};
		size_t n_gaps = 0;
	};
	const Series *find(SeriesId id, uint32_t pid) const;
	double gauge(SeriesId id, uint64_t t0, uint64_t t1) const;
	double interval_mean(SeriesId id, uint32_t pid, uint64_t t0, uint64_t t1, bool sum) const;
	// Per series id: by process (0: the machine's).
	std::array<std::map<uint32_t, Series>, kSeriesCount> series_;
	size_t series_count_ = 0;
	std::deque<Event> events_;
};

// Per key: what features need from the previous spans (the gap).
class Extractor {
public:
	Observation observe(const Span &s, const Context &ctx) { return observe(call_of(s), ctx, key_of(s)); }
	// key: key_of(c), when the caller has it already (one string less a call).
	Observation observe(const TracedCall &c, const Context &ctx, const std::string &key);
	Observation observe(const Span &s, const Context &ctx, const std::string &key)
	{
		return observe(call_of(s), ctx, key);
	}

private:
	// key -> tid -> end ns: found without making a key per call.
	std::unordered_map<std::string, std::unordered_map<uint32_t, uint64_t>> last_end_;
};

} // namespace eacgm::detect
