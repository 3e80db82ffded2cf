// SPDX-License-Identifier: Apache-2.0
#include "detect/noise.h"

#include <algorithm>
#include <cmath>

namespace eacgm::detect {

Noise::Calls Noise::calls_of(std::vector<double> v)
{
	Calls c;
	std::erase_if(v, [](double x) { return !std::isfinite(x) || x < 0; });
	if (v.empty())
		return c;
	std::sort(v.begin(), v.end());
	c.median = v[v.size() / 2];
	for (double &x : v)
		x -= c.median;
	c.excess = std::move(v);
	return c;
}

void Noise::set(const std::string &key, const std::vector<double> &durations_ns, const std::vector<double> &gaps_ns,
		bool caller)
{
	auto &both = keys_[key];
	both = {calls_of(durations_ns), calls_of(gaps_ns)};
	both[0].caller = both[1].caller = caller;
}

void Noise::set(const std::string &key, const std::vector<const Observation *> &rows, bool caller)
{
	std::vector<double> d, g;
	for (const Observation *o : rows) {
		d.push_back(feature_display_value(kLogDuration, o->x[kLogDuration]));
		g.push_back(feature_display_value(kLogGap, o->x[kLogGap]));
	}
	set(key, d, g, caller);
}

double Noise::median(const std::string &key, bool gap) const
{
	auto it = keys_.find(key);
	if (it == keys_.end() || it->second[gap ? 1 : 0].excess.empty())
		return NAN;
	return it->second[gap ? 1 : 0].median;
}

// How many of ascending v are >= x.
static size_t at_least(const std::vector<double> &v, double x)
{
	return static_cast<size_t>(v.end() - std::lower_bound(v.begin(), v.end(), x));
}

double Noise::stall_rate(const std::string &key, bool gap, double excess_ns) const
{
	const int m = gap ? 1 : 0;
	size_t n = 0, stalled = 0;
	double exposure = 0;     // the reference's calls' time, ns (each at its median)
	std::vector<double> top; // the reference's largest excesses, for the tail
	for (const auto &[k, both] : keys_) {
		const Calls &c = both[m];
		if (k == key || c.caller || c.excess.empty() || c.median > excess_ns)
			continue;
		n += c.excess.size();
		exposure += static_cast<double>(c.excess.size()) * c.median;
		stalled += at_least(c.excess, excess_ns);
		size_t from = c.excess.size() - std::min(c.excess.size(), kStallTail + 1);
		top.insert(top.end(), c.excess.begin() + static_cast<long>(from), c.excess.end());
	}
	if (n == 0)
		return NAN;
	// Stalls come with each call (its probes' traps, its entry) and with
	// each moment it runs (an interrupt, the hypervisor): a call 5 times
	// longer than the reference's is hit more often, 3 times on this VM
	// (addmm of 28 us against copy_ of 3.5 us: 3% and 1% stalled by 30 us).
	// So the reference counts as the fewer of its calls and of calls of
	// this function's length in its time: as measured per call for a
	// function no longer than the reference's, per ns for a longer one.
	double calls = static_cast<double>(n);
	auto it = keys_.find(key);
	if (it != keys_.end() && it->second[m].median > 0)
		calls = std::min(calls, exposure / it->second[m].median);
	if (stalled >= kStallTail || top.size() <= kStallTail)
		return std::min(1.0, static_cast<double>(stalled) / calls);
	// Peaks over threshold: u the (kStallTail+1)-th largest excess, the
	// kStallTail above it exponential beyond u with their mean excess.
	std::nth_element(top.begin(), top.end() - static_cast<long>(kStallTail + 1), top.end());
	const auto u_at = top.end() - static_cast<long>(kStallTail + 1);
	const double u = *u_at;
	double beta = 0;
	for (auto i = u_at + 1; i != top.end(); ++i)
		beta += *i - u;
	beta /= static_cast<double>(kStallTail);
	const double p_u = std::min(1.0, static_cast<double>(kStallTail) / calls);
	if (beta <= 0)
		return excess_ns > u ? 0 : p_u;
	return p_u * std::exp(-(excess_ns - u) / beta);
}

double poisson_tail(size_t k, double lambda)
{
	if (k == 0)
		return 1;
	if (!(lambda > 0))
		return 0;
	auto term = [&](size_t i) {
		return std::exp(-lambda + static_cast<double>(i) * std::log(lambda) - std::lgamma(double(i) + 1));
	};
	if (static_cast<double>(k) > lambda) { // the terms fall from k on: sum them
		double sum = 0;
		for (size_t i = k;; i++) {
			double t = term(i);
			sum += t;
			if (t <= 1e-17 * sum || i > k + 10000)
				break;
		}
		return std::min(1.0, sum);
	}
	double below = 0;
	for (size_t i = 0; i < k; i++)
		below += term(i);
	return std::clamp(1 - below, 0.0, 1.0);
}

double Noise::chance(const std::string &key, bool gap, double excess_ns, size_t extra) const
{
	auto it = keys_.find(key);
	if (it == keys_.end())
		return 0;
	if (!(excess_ns > 0))
		return 1;
	const Calls &own = it->second[gap ? 1 : 0];
	// The function's calls slowed about as much (within kBand of it either
	// way), against the machine's stalls of the band's low end or more.
	const double lo = excess_ns / kBand, hi = excess_ns * kBand;
	const double p = stall_rate(key, gap, lo);
	if (!std::isfinite(p))
		return 0;
	const size_t k = std::max<size_t>(
		1, at_least(own.excess, lo) - at_least(own.excess, std::nextafter(hi, INFINITY)) + extra);
	return poisson_tail(k, static_cast<double>(own.excess.size() + extra) * p);
}

} // namespace eacgm::detect
