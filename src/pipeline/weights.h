// SPDX-License-Identifier: Apache-2.0
// What each call and each Python sample stands for while the overhead
// budget (--overhead-budget, app/overhead.cpp) changes how much is seen: a
// throttled probe's call seen in a burst stands for the calls its probe was
// detached for (its weight), and a stack sample for the sampler's period at
// the time. Both change at the budget's decisions, every few seconds at
// most, so each is a short list of changes searched from the newest; what
// no span can still need (older than kKeepNs before the newest change) is
// dropped, so that an agent left running for weeks keeps a bounded list.
#pragma once
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace eacgm {

class BudgetHistory {
public:
	// Spans are decoded seconds after they end: a change is kept this long
	// after the next one.
	static constexpr uint64_t kKeepNs = 600'000'000'000ull;

	// From from_ns on, a call of spec i stands for weights[i] calls (1 past
	// the list's end, and before any change). A second call with the same
	// from_ns replaces the first's weights.
	void set_weights(uint64_t from_ns, std::vector<double> weights);
	double weight(uint32_t spec_id, uint64_t start_ns) const;

	// From from_ns on, a periodic sample stands for period_ns of its
	// thread's time; one taken before the first change stands for the first
	// period (0: none was set).
	void set_sample_period(uint64_t from_ns, uint64_t period_ns);
	uint64_t period_at(uint64_t ts_ns) const;

	size_t changes() const { return weights_.size() + periods_.size(); }

private:
	std::vector<std::pair<uint64_t, std::vector<double>>> weights_; // by from_ns, ascending
	std::vector<std::pair<uint64_t, uint64_t>> periods_;            // (from_ns, period), ascending
};

} // namespace eacgm
