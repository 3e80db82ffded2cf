// SPDX-License-Identifier: Apache-2.0
// What online detection can judge yet, as measures of a layer "detect" that
// the store, the metrics and the summary show like any other: a function's
// first cold_start calls train its first model and are not scored, and an
// operator should see which functions are still unjudged, not read an empty
// anomaly list as "all is well".
//
//   detect/functions_scored       functions with a model (every new call scored)
//   detect/functions_cold_start   functions still training their first one
//   detect/cold_start_calls       per such function (key "layer/name"): its
//                                 calls so far; 0 once it has a model
//
// Prometheus: eacgm_detect_functions_scored, ... (export/metrics.h).
#pragma once
#include <set>
#include <string>

#include "detect/online.h"
#include "layers/collector.h"

namespace eacgm::detect {

class StatusCollector : public Collector {
public:
	explicit StatusCollector(const OnlineDetector &d, uint64_t interval_ns = 10'000'000'000ull)
		: d_(d), interval_ns_(interval_ns)
	{}
	const char *layer() const override { return "detect"; }
	void collect(uint64_t now_ns, const std::set<uint32_t> &traced, std::vector<Metric> &metrics,
		     std::vector<Event> &events) override;
	uint64_t next_due_ns() const override { return due_ns_; }
	void stop() override { due_ns_ = 0; }

private:
	const OnlineDetector &d_;
	uint64_t interval_ns_;
	uint64_t due_ns_ = 0;
	std::set<std::string> cold_; // keys reported in cold start last time
};

} // namespace eacgm::detect
