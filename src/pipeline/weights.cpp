// SPDX-License-Identifier: Apache-2.0
#include "pipeline/weights.h"

#include <algorithm>

namespace eacgm {

namespace {

// Drops the changes that a newer one replaced more than keep_ns before the
// newest: no span decoded now starts that early.
template <class T>
void forget_old(std::vector<std::pair<uint64_t, T>> &list, uint64_t keep_ns)
{
	if (list.size() < 2 || list.back().first < keep_ns)
		return;
	const uint64_t horizon = list.back().first - keep_ns;
	// The first change still needed: the last one that began by the horizon.
	auto first = std::upper_bound(list.begin(), list.end(), horizon,
				      [](uint64_t t, const std::pair<uint64_t, T> &c) { return t < c.first; });
	if (first != list.begin())
		list.erase(list.begin(), first - 1);
}

} // namespace

void BudgetHistory::set_weights(uint64_t from_ns, std::vector<double> weights)
{
	if (!weights_.empty() && weights_.back().first == from_ns)
		weights_.back().second = std::move(weights);
	else
		weights_.push_back({from_ns, std::move(weights)});
	forget_old(weights_, kKeepNs);
}

double BudgetHistory::weight(uint32_t spec_id, uint64_t start_ns) const
{
	for (auto it = weights_.rbegin(); it != weights_.rend(); ++it)
		if (it->first <= start_ns)
			return spec_id < it->second.size() ? it->second[spec_id] : 1.0;
	return 1.0;
}

void BudgetHistory::set_sample_period(uint64_t from_ns, uint64_t period_ns)
{
	periods_.push_back({from_ns, period_ns});
	forget_old(periods_, kKeepNs);
}

uint64_t BudgetHistory::period_at(uint64_t ts_ns) const
{
	for (auto it = periods_.rbegin(); it != periods_.rend(); ++it)
		if (it->first <= ts_ns || it + 1 == periods_.rend())
			return it->second;
	return 0;
}

} // namespace eacgm
