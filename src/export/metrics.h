// SPDX-License-Identifier: Apache-2.0
// Metrics for Prometheus: a registry of counter, gauge and histogram
// families written in the text exposition format (version 0.0.4); the
// pipeline's sink that fills it is sinks/metrics.h.
//
// Debian has no Prometheus client library for C++ (prometheus-cpp is not
// packaged), and the format is a few lines of text: it is written here.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace eacgm {

using Labels = std::vector<std::pair<std::string, std::string>>; // in the order written

class MetricsRegistry {
public:
	enum Type { counter, gauge, histogram };
	// Declares a family once; samples of an undeclared family are a bug
	// (they are dropped). Histograms take their upper bounds, ascending.
	void declare(const std::string &name, Type type, const std::string &help, std::vector<double> buckets = {});
	void add(const std::string &name, const Labels &labels, double v); // counter
	// A gauge's value, or a counter's running total kept elsewhere (the
	// BPF side's loss counters).
	void set(const std::string &name, const Labels &labels, double v);
	void observe(const std::string &name, const Labels &labels, double v); // histogram
	// A histogram's samples given at once: per-bucket counts (not
	// cumulative, one more than the bounds: the last is above them all),
	// their sum. Counts may be fractional: a call of a throttled probe
	// stands for several (--overhead-budget).
	void observe_many(const std::string &name, const Labels &labels, const std::vector<double> &counts, double sum);
	// Drops the series whose label `key` is `value`, of every family or of
	// the one named (a process that exited: its gauges would otherwise
	// stay forever).
	void remove(const std::string &key, const std::string &value, const std::string &family = "");
	size_t series() const;
	// The text format, families in name order, series in label order.
	std::string render() const;

private:
	struct Series {
		double value = 0;
		std::vector<double> counts; // histogram: per bucket, the last above all bounds
		double sum = 0;
	};
	struct Family {
		Type type;
		std::string help;
		std::vector<double> buckets;
		std::map<Labels, Series> series;
	};
	Series *find(const std::string &name, const Labels &labels, Type type);
	mutable std::mutex mu_;
	std::map<std::string, Family> families_;
};

// Duration buckets from 1 us to 10 s (1, 2.5, 5 per decade), in seconds.
const std::vector<double> &duration_buckets();

// A layer's measure as a Prometheus gauge: its name in base units and what
// its values are divided by (eacgm_host_sched_delay_ns ->
// eacgm_host_sched_delay_seconds, 1e9).
std::pair<std::string, double> gauge_of(const std::string &layer, const std::string &measure);

} // namespace eacgm
