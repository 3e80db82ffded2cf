// SPDX-License-Identifier: Apache-2.0
#include "detect/features.h"

#include <algorithm>

#include "common/layers.h"

namespace eacgm::detect {

const std::array<FeatureInfo, kFeatureCount> kFeatures = {{
	{"log_duration", "ns", true, false, 0.05},
	{"log_bytes", "bytes", true, true, 0.05},
	{"log_bandwidth", "bytes/s", true, false, 0.05},
	{"log_gap", "ns", true, true, 0.05},
	{"call_site", "nats", false, false, 0.25},
	{"gpu_util_pct", "%", false, false, 2},
	{"gpu_log_mem_used", "bytes", true, true, 0.01},
	{"gpu_power_w", "W", false, false, 2},
	{"gpu_temp_c", "°C", false, false, 1},
	{"gpu_clock_sm_mhz", "MHz", false, false, 15},
	{"host_log_sched", "ns", true, true, 0.5},
	{"host_log_retrans", "retransmits", true, true, 0.25},
}};

double feature_display_value(unsigned f, double x)
{
	if (!kFeatures[f].log)
		return x;
	return kFeatures[f].log1p ? std::expm1(x) : std::exp(x);
}

TracedCall call_of(const Span &s)
{
	return {.layer = s.layer,
		.name = s.name,
		.pid = s.pid,
		.tid = s.tid,
		.start_ns = s.start_ns,
		.dur_ns = s.dur_ns,
		.bytes = s.bytes,
		.stack = &s.py_stack,
		.gap_unknown = s.args.contains(kWeightArg)};
}

void key_of(const TracedCall &c, std::string &out) { out.assign(c.layer).append("/").append(c.name); }
void key_of(const Span &s, std::string &out) { out.assign(s.layer).append("/").append(s.name); }

std::string key_of(const Span &s)
{
	std::string k;
	key_of(s, k);
	return k;
}

const std::array<SeriesName, kSeriesCount> kSeriesNames = {{
	{layer::gpu, "util_gpu_pct"},
	{layer::gpu, "mem_used_bytes"},
	{layer::gpu, "power_w"},
	{layer::gpu, "temp_c"},
	{layer::gpu, "clock_sm_mhz"},
	{layer::gpu, "throttle_reasons_mask"},
	{layer::host, "sched_delay_ns"},
	{layer::host, "tcp_retransmits"},
	{layer::host, "interference_ns"},
	{layer::host, "psi_memory_some_stall_us"},
}};

std::optional<SeriesId> series_of(std::string_view layer, std::string_view name)
{
	for (size_t i = 0; i < kSeriesCount; i++)
		if (kSeriesNames[i].name == name && kSeriesNames[i].layer == layer)
			return static_cast<SeriesId>(i);
	return std::nullopt;
}

void Context::add(const Metric &m)
{
	auto id = series_of(m.layer, m.name);
	if (!id)
		return;
	auto [it, fresh] = series_[static_cast<size_t>(*id)].try_emplace(m.pid);
	series_count_ += fresh;
	Series &s = it->second;
	if (!s.samples.empty() && m.ts_ns > s.samples.back().ts_ns) {
		s.gaps[s.n_gaps++ % Series::kGaps] = m.ts_ns - s.samples.back().ts_ns;
		s.period_ns = *std::max_element(s.gaps.begin(), s.gaps.end());
	}
	Sample x{m.ts_ns, m.key, m.value};
	// Collectors deliver in time order; keep the deque sorted if one does not.
	if (s.samples.empty() || s.samples.back().ts_ns <= m.ts_ns)
		s.samples.push_back(std::move(x));
	else
		s.samples.insert(std::upper_bound(s.samples.begin(), s.samples.end(), m.ts_ns,
						  [](uint64_t t, const Sample &a) { return t < a.ts_ns; }),
				 std::move(x));
}

void Context::add(const Event &e)
{
	if (events_.empty() || events_.back().ts_ns <= e.ts_ns)
		events_.push_back(e);
	else
		events_.insert(std::upper_bound(events_.begin(), events_.end(), e.ts_ns,
						[](uint64_t t, const Event &a) { return t < a.ts_ns; }),
			       e);
}

void Context::trim(uint64_t before_ns)
{
	for (auto &by_pid : series_)
		for (auto it = by_pid.begin(); it != by_pid.end();) {
			Series &s = it->second;
			// A process's series with nothing since: the process is gone (a
			// node agent sees thousands come and go). The machine's own series
			// keep their last sample: a gauge holds until the next one.
			if (it->first && !s.samples.empty() && s.samples.back().ts_ns < before_ns) {
				it = by_pid.erase(it);
				series_count_--;
				continue;
			}
			while (s.samples.size() > 1 && s.samples.front().ts_ns < before_ns)
				s.samples.pop_front();
			++it;
		}
	while (!events_.empty() && events_.front().ts_ns < before_ns)
		events_.pop_front();
}

const Context::Series *Context::find(SeriesId id, uint32_t pid) const
{
	const auto &by_pid = series_[static_cast<size_t>(id)];
	auto it = by_pid.find(pid);
	return it == by_pid.end() ? nullptr : &it->second;
}

std::vector<Context::Sample> Context::covering(SeriesId id, uint32_t pid, uint64_t t0, uint64_t t1) const
{
	std::vector<Sample> out;
	auto add_series = [&](const Series &s) {
		uint64_t end = t1 + s.period_ns;
		auto it = std::lower_bound(s.samples.begin(), s.samples.end(), t0,
					   [](const Sample &a, uint64_t t) { return a.ts_ns < t; });
		for (; it != s.samples.end() && it->ts_ns <= end; ++it)
			out.push_back(*it);
	};
	if (pid) {
		if (const Series *s = find(id, pid))
			add_series(*s);
	} else {
		for (const auto &[p, s] : series_[static_cast<size_t>(id)])
			add_series(s);
	}
	return out;
}

uint64_t Context::period_ns(SeriesId id, uint32_t pid) const
{
	const Series *s = find(id, pid);
	return s ? s->period_ns : 0;
}

std::vector<const Event *> Context::events_between(uint64_t t0, uint64_t t1) const
{
	std::vector<const Event *> out;
	auto it = std::lower_bound(events_.begin(), events_.end(), t0,
				   [](const Event &a, uint64_t t) { return a.ts_ns < t; });
	for (; it != events_.end() && it->ts_ns <= t1; ++it)
		out.push_back(&*it);
	return out;
}

// A polled gauge (the GPU's): the mean of the samples taken during the span,
// or the last one before it when the span is shorter than the poll period.
double Context::gauge(SeriesId id, uint64_t t0, uint64_t t1) const
{
	const Series *s = find(id, 0);
	if (!s || s->samples.empty())
		return NAN;
	const auto &v = s->samples;
	auto lo = std::lower_bound(v.begin(), v.end(), t0, [](const Sample &a, uint64_t t) { return a.ts_ns < t; });
	double sum = 0;
	size_t n = 0;
	for (auto p = lo; p != v.end() && p->ts_ns <= t1; ++p, n++)
		sum += p->value;
	if (n)
		return sum / static_cast<double>(n);
	if (lo == v.begin())
		return NAN;
	// The last sampling round before the span: every device's sample at that time.
	uint64_t ts = std::prev(lo)->ts_ns;
	for (auto p = std::prev(lo);; --p) {
		if (p->ts_ns != ts)
			break;
		sum += p->value;
		n++;
		if (p == v.begin())
			break;
	}
	return sum / static_cast<double>(n);
}

// An interval aggregate of one process (the host layer's): over the
// intervals that cover the span, their mean (or sum).
double Context::interval_mean(SeriesId id, uint32_t pid, uint64_t t0, uint64_t t1, bool sum) const
{
	auto s = covering(id, pid, t0, t1);
	if (s.empty())
		return NAN;
	double total = 0;
	for (const Sample &x : s)
		total += x.value;
	return sum ? total : total / static_cast<double>(s.size());
}

void Context::fill(Observation &o) const
{
	uint64_t t0 = o.start_ns, t1 = o.start_ns + o.dur_ns;
	o.x[kGpuUtil] = gauge(SeriesId::GpuUtil, t0, t1);
	o.x[kGpuMemUsed] = std::log1p(gauge(SeriesId::GpuMemUsed, t0, t1));
	o.x[kGpuPower] = gauge(SeriesId::GpuPower, t0, t1);
	o.x[kGpuTemp] = gauge(SeriesId::GpuTemp, t0, t1);
	o.x[kGpuClockSm] = gauge(SeriesId::GpuClockSm, t0, t1);
	o.x[kHostSchedDelay] = std::log1p(interval_mean(SeriesId::HostSchedDelay, o.pid, t0, t1, false));
	o.x[kHostRetransmits] = std::log1p(interval_mean(SeriesId::HostRetransmits, o.pid, t0, t1, true));
}

Observation Extractor::observe(const TracedCall &s, const Context &ctx, const std::string &key)
{
	Observation o;
	o.start_ns = s.start_ns;
	o.dur_ns = s.dur_ns;
	o.pid = s.pid;
	o.tid = s.tid;
	if (s.stack && !s.stack->empty())
		o.site = (*s.stack)[0];
	// A zero-length span (clock granularity) is 1 ns: the log stays finite.
	double dur = static_cast<double>(std::max<uint64_t>(s.dur_ns, 1));
	o.x[kLogDuration] = std::log(dur);
	o.x[kLogBytes] = std::log1p(static_cast<double>(s.bytes));
	if (s.bytes)
		o.x[kLogBandwidth] = std::log(static_cast<double>(s.bytes) * 1e9 / dur);
	uint64_t &last = last_end_[key][s.tid]; // the key is copied only the first time
	// A call seen in a burst of a throttled probe (args.weight): the gap
	// before it spans the time the probe was detached, not the program's.
	if (last && !s.gap_unknown)
		o.x[kLogGap] = std::log1p(static_cast<double>(s.start_ns > last ? s.start_ns - last : 0));
	last = std::max(last, s.start_ns + s.dur_ns);
	// kCallSite is encoded by the key's model (its counts), not here.
	if (!ctx.empty())
		ctx.fill(o);
	return o;
}

} // namespace eacgm::detect
