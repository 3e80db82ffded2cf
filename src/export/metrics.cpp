// SPDX-License-Identifier: Apache-2.0
#include "export/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <string_view>

namespace eacgm {

const std::vector<double> &duration_buckets()
{
	// Written out: 2.5 * 1e-6 is not the double nearest 2.5e-6, and a
	// bucket's bound is its label ("le") in every query a user writes.
	static const std::vector<double> b = {1e-6, 2.5e-6, 5e-6,   1e-5, 2.5e-5, 5e-5,   1e-4, 2.5e-4,
					      5e-4, 1e-3,   2.5e-3, 5e-3, 1e-2,   2.5e-2, 5e-2, 0.1,
					      0.25, 0.5,    1,      2.5,  5,      10};
	return b;
}

void MetricsRegistry::declare(const std::string &name, Type type, const std::string &help, std::vector<double> buckets)
{
	std::lock_guard<std::mutex> lock(mu_);
	auto [it, fresh] = families_.try_emplace(name);
	if (fresh)
		it->second = Family{type, help, std::move(buckets), {}};
}

MetricsRegistry::Series *MetricsRegistry::find(const std::string &name, const Labels &labels, Type type)
{
	auto f = families_.find(name);
	if (f == families_.end() || f->second.type != type)
		return nullptr;
	Series &s = f->second.series[labels];
	if (type == histogram && s.counts.empty())
		s.counts.assign(f->second.buckets.size() + 1, 0);
	return &s;
}

void MetricsRegistry::add(const std::string &name, const Labels &labels, double v)
{
	std::lock_guard<std::mutex> lock(mu_);
	if (Series *s = find(name, labels, counter))
		s->value += v;
}

void MetricsRegistry::set(const std::string &name, const Labels &labels, double v)
{
	std::lock_guard<std::mutex> lock(mu_);
	auto f = families_.find(name);
	if (Series *s = find(name, labels, f != families_.end() && f->second.type == counter ? counter : gauge))
		s->value = v;
}

void MetricsRegistry::observe(const std::string &name, const Labels &labels, double v)
{
	std::lock_guard<std::mutex> lock(mu_);
	Series *s = find(name, labels, histogram);
	if (!s)
		return;
	const auto &b = families_[name].buckets;
	s->counts[std::lower_bound(b.begin(), b.end(), v) - b.begin()] += 1;
	s->sum += v;
}

void MetricsRegistry::observe_many(const std::string &name, const Labels &labels, const std::vector<double> &counts,
				   double sum)
{
	std::lock_guard<std::mutex> lock(mu_);
	Series *s = find(name, labels, histogram);
	if (!s || counts.size() != s->counts.size())
		return;
	for (size_t i = 0; i < counts.size(); i++)
		s->counts[i] += counts[i];
	s->sum += sum;
}

void MetricsRegistry::remove(const std::string &key, const std::string &value, const std::string &family)
{
	std::lock_guard<std::mutex> lock(mu_);
	for (auto &[name, f] : families_)
		for (auto it = f.series.begin(); it != f.series.end();)
			if (std::find(it->first.begin(), it->first.end(), std::make_pair(key, value)) !=
			    it->first.end())
				it = family.empty() || family == name ? f.series.erase(it) : std::next(it);
			else
				++it;
}

size_t MetricsRegistry::series() const
{
	std::lock_guard<std::mutex> lock(mu_);
	size_t n = 0;
	for (auto &[name, f] : families_)
		n += f.series.size();
	return n;
}

namespace {

// Label values escape backslash, double quote and newline; help text
// backslash and newline.
std::string escaped(const std::string &s, bool quote)
{
	std::string out;
	out.reserve(s.size());
	for (char c : s) {
		if (c == '\\')
			out += "\\\\";
		else if (c == '\n')
			out += "\\n";
		else if (c == '"' && quote)
			out += "\\\"";
		else
			out += c;
	}
	return out;
}

std::string number(double v)
{
	if (std::isinf(v))
		return v > 0 ? "+Inf" : "-Inf";
	if (std::isnan(v))
		return "NaN";
	// The shortest text that reads back as the same double.
	char buf[32];
	auto r = std::to_chars(buf, buf + sizeof buf, v);
	return std::string(buf, r.ptr);
}

void write_labels(std::string &out, const Labels &labels, const char *le = nullptr)
{
	if (labels.empty() && !le)
		return;
	out += '{';
	bool first = true;
	for (auto &[k, v] : labels) {
		out += (first ? "" : ",") + k + "=\"" + escaped(v, true) + "\"";
		first = false;
	}
	if (le)
		out += std::string(first ? "" : ",") + "le=\"" + le + "\"";
	out += '}';
}

} // namespace

std::string MetricsRegistry::render() const
{
	static const char *types[] = {"counter", "gauge", "histogram"};
	std::lock_guard<std::mutex> lock(mu_);
	std::string out;
	for (auto &[name, f] : families_) {
		if (f.series.empty())
			continue;
		out += "# HELP " + name + " " + escaped(f.help, false) + "\n# TYPE " + name + " " + types[f.type] +
			"\n";
		for (auto &[labels, s] : f.series) {
			if (f.type != histogram) {
				out += name;
				write_labels(out, labels);
				out += " " + number(s.value) + "\n";
				continue;
			}
			double cumulative = 0;
			for (size_t i = 0; i <= f.buckets.size(); i++) {
				cumulative += s.counts[i];
				std::string le = i < f.buckets.size() ? number(f.buckets[i]) : "+Inf";
				out += name + "_bucket";
				write_labels(out, labels, le.c_str());
				out += " " + number(cumulative) + "\n";
			}
			out += name + "_sum";
			write_labels(out, labels);
			out += " " + number(s.sum) + "\n" + name + "_count";
			write_labels(out, labels);
			out += " " + number(cumulative) + "\n";
		}
	}
	return out;
}

// A layer's measure as a Prometheus gauge: its name in base units, spelled
// out (sched_delay_ns -> sched_delay_seconds, pcie_rx_bytes_per_s ->
// pcie_rx_bytes_per_second), as Prometheus' conventions and `promtool check
// metrics` want; the store keeps the layers' own names and units.
std::pair<std::string, double> gauge_of(const std::string &layer, const std::string &measure)
{
	static const std::pair<std::string_view, std::pair<std::string_view, double>> units[] = {
		{"_ns", {"_seconds", 1e9}},
		{"_us", {"_seconds", 1e6}},
		{"_ms", {"_seconds", 1e3}},
		{"_per_s", {"_per_second", 1}},
	};
	std::string name = "eacgm_" + layer + "_" + measure;
	for (auto &[abbr, unit] : units)
		if (name.size() > abbr.size() && name.compare(name.size() - abbr.size(), abbr.size(), abbr) == 0)
			return {name.substr(0, name.size() - abbr.size()).append(unit.first), unit.second};
	return {name, 1};
}

} // namespace eacgm
