// SPDX-License-Identifier: Apache-2.0
// The pipeline's sink that fills a Prometheus registry (export/metrics.h)
// from spans, anomalies and measures.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "export/metrics.h"
#include "pipeline/collectives.h"
#include "pipeline/sink.h"

namespace eacgm {

// Fills a registry from the pipeline. Per call: eacgm_calls_total,
// eacgm_call_errors_total, eacgm_call_duration_seconds and
// eacgm_bytes_total, by layer and function; calls that know their
// communicator rank (NCCL) also as eacgm_collective_{calls,bytes}_total by
// rank; per round of a collective across ranks (pipeline/collectives.h:
// the ranks traced here, all of a group's), its arrival skew as
// eacgm_collective_arrival_skew_seconds by layer and function, the rank
// that arrived last as eacgm_collective_last_arrivals_total by layer and
// rank, and rounds given up on before every rank came (kStragglerBounds)
// as eacgm_collective_incomplete_rounds_total by layer; eacgm_anomalies_total by
// layer, function and cause; the GPU and host layers' measures as gauges
// (eacgm_gpu_*, eacgm_host_*) by key and pid; eacgm_process_info per live
// process (its name, cgroup, container and pod), gone with the process,
// like every series of its pid. A layer's functions past its
// first `top_n` get function="other": Python functions and kernel names are
// unbounded, a Prometheus series is not free, and a counter cannot move
// from one series to another once scraped.
class MetricsSink : public Sink {
public:
	MetricsSink(MetricsRegistry &reg, size_t top_n = 100);
	Result<void> write(SpanBatch &b) override;
	Result<void> measures(const std::vector<Metric> &metrics, const std::vector<Event> &events) override;
	Result<void> process(const Process &p) override;
	Result<void> drops(const std::vector<Drop> &d) override;
	// A thread adds no series; the registry is read when scraped, so
	// neither time nor the end adds work.
	Result<void> thread(const Thread &) override { return {}; }
	Result<void> tick(uint64_t) override { return {}; }
	Result<void> finish() override { return {}; }

private:
	const std::string &function_label(const std::string &layer, const std::string &name);
	// A call into this batch's sums per function.
	void count(const std::string &layer, const std::string &name, double weight, bool error, uint64_t dur_ns,
		   uint64_t bytes);
	void publish_calls();
	// Whether a typed span's return names an error (is_error_name, common/model.h, of its
	// text, worked out once per probe and return).
	bool failed(const TypedSpans &ts, const TypedSpan &t);
	void collectives(const SpanBatch &b);
	void stragglers(const SpanBatch &b);
	// eacgm_hangs_in_flight from the hang watch's "hang" and "hang_over".
	void hang(const Event &e);
	std::map<std::pair<std::string, std::string>, double> hangs_; // (layer, call) -> in flight
	struct Acc {
		double calls = 0, errors = 0, bytes = 0, sum = 0;
		std::vector<double> counts;
	};
	// Rounds wait for their last rank at most 5 minutes, and at most 4096
	// at once (a group whose other ranks run on other nodes never
	// completes here): 4096 keys and the arrivals of the ranks traced
	// here, about a MiB at most.
	static constexpr CollectiveMatcher::Bounds kStragglerBounds{.window_ns = 300'000'000'000, .max_open = 4096};
	CollectiveMatcher rounds_{kStragglerBounds};
	std::vector<Round> done_; // reused
	MetricsRegistry &reg_;
	size_t top_n_;
	std::map<std::string, std::unordered_map<std::string, std::string>> named_; // layer -> name -> label
	std::map<std::pair<std::string, std::string>, Acc> batch_;                  // (layer, function label), reused
	// Typed spans read without their Spans: their collectives, and their
	// returns' verdicts by probe (cleared when the probe set changes).
	TypedCollectives typed_;
	struct Verdicts {
		bool enum_ret = false; // returns_enum: else no return is an error
		std::unordered_map<int64_t, bool> by_ret;
	};
	const SpecSet *error_specs_ = nullptr;
	std::vector<Verdicts> errors_; // by spec_id
};

} // namespace eacgm
