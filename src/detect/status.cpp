// SPDX-License-Identifier: Apache-2.0
#include "detect/status.h"

namespace eacgm::detect {

void StatusCollector::collect(uint64_t now_ns, const std::set<uint32_t> &, std::vector<Metric> &metrics,
			      std::vector<Event> &)
{
	if (now_ns < due_ns_)
		return;
	due_ns_ = now_ns + interval_ns_;
	size_t scored = 0;
	std::set<std::string> cold;
	for (const KeyStatus &k : d_.status()) {
		if (k.trained) {
			scored++;
			if (cold_.count(k.key)) // out of cold start: its gauge goes to 0
				metrics.push_back({now_ns, "detect", "cold_start_calls", k.key, 0, 0});
			continue;
		}
		cold.insert(k.key);
		metrics.push_back({now_ns, "detect", "cold_start_calls", k.key, 0, static_cast<double>(k.seen)});
	}
	metrics.push_back({now_ns, "detect", "functions_scored", "", 0, static_cast<double>(scored)});
	metrics.push_back({now_ns, "detect", "functions_cold_start", "", 0, static_cast<double>(cold.size())});
	cold_ = std::move(cold);
}

} // namespace eacgm::detect
