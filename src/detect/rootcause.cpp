// SPDX-License-Identifier: Apache-2.0
#include "detect/rootcause.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "common/layers.h"
#include "common/units.h"

namespace eacgm::detect {

using nlohmann::json;

namespace {

std::string fmt(double v, const char *f = "%.3g")
{
	char buf[64];
	std::snprintf(buf, sizeof buf, f, v);
	return buf;
}

std::string show(unsigned f, double v)
{
	std::string unit = kFeatures[f].unit;
	if (unit == "ns")
		return format_duration(v);
	if (unit == "bytes")
		return format_bytes(static_cast<uint64_t>(std::max(0.0, v)));
	if (unit == "bytes/s")
		return format_bytes(static_cast<uint64_t>(std::max(0.0, v))) + "/s";
	return fmt(v) + " " + unit;
}

double share_of(const std::vector<Attribution> &attr, unsigned f)
{
	for (const Attribution &a : attr)
		if (a.feature == f)
			return std::max(0.0, a.share);
	return 0;
}

// What a call took beyond its usual (rootcause.h's Attribution::usual):
// its duration's excess, or its gap's when that is the larger (it came
// late), and when the time in question began.
struct Excess {
	double ns = 0;
	uint64_t from_ns = 0;
};

Excess excess_of(const std::vector<Attribution> &attr, const Span &span)
{
	double own = 0, late = 0, gap = 0;
	for (const Attribution &x : attr) {
		if (x.feature == kLogDuration)
			own = std::max(0.0, x.value - x.usual);
		if (x.feature == kLogGap) {
			late = std::max(0.0, x.value - x.usual);
			gap = x.value;
		}
	}
	if (late > own)
		return {late, span.start_ns - std::min<uint64_t>(span.start_ns, static_cast<uint64_t>(gap))};
	return {own, span.start_ns};
}

// Context that accounts for half the excess or more goes first: it is
// what the call waited for (a cause's strength is otherwise under 1.5,
// a feature's share under about 1).
double explaining(double explained_ns, const Excess &e)
{
	return e.ns > 0 && explained_ns >= 0.5 * e.ns ? 2 + std::min(1.0, explained_ns / e.ns) : 0;
}

} // namespace

// A call unusual mostly for being quicker than its kind, or for coming
// sooner after the last one, is not reported: an operator asks what is slow
// or broken. And quicker is what a whole run becomes when eacgm's overhead
// budget first throttles it (the job gets the CPU eacgm gave back): a GPT
// run's first models, trained at full rate, flagged a thousand and more of
// its calls after that. Not flagged, such calls train the next refit, which
// learns the new normal.
static bool only_faster(const std::vector<Attribution> &why)
{
	return !why.empty() && (why[0].feature == kLogDuration || why[0].feature == kLogGap) && why[0].z < 0;
}

// Whether the first cause is the call's duration or gap, longer than typical.
static bool slower(const std::vector<Attribution> &why)
{
	return !why.empty() && (why[0].feature == kLogDuration || why[0].feature == kLogGap) && why[0].z > 0 &&
		why[0].typical > 0;
}

// A call unusual only in the context it ran in (the GPU's power, clocks,
// utilisation and memory, the host's scheduling delay) while its own
// measures (duration, bytes, bandwidth, gap, call site) are each typical is
// not reported either: the context is the same for every call at that
// moment, so flagging one flags them all. Seen on an H100: the GPU went
// from 123 to 179 W once the first models were fitted, and a 30-step
// ResNet-18 run had 9,231 calls flagged for gpu_power_w alone. A call
// whose own measure is off by kOwnSd of its component's spread (slower,
// for the duration), or whose call site is its first cause, is reported.
// Not flagged, the others train the next refit, which learns the context.
static bool only_context(const KeyModel &m, const Scored &sc, const std::vector<Attribution> &why)
{
	constexpr double kOwnSd = 3;
	const auto &used = m.used();
	if (std::none_of(used.begin(), used.end(), [](unsigned f) { return f > kCallSite; }))
		return false; // no context in this model
	if (!why.empty() && why[0].feature == kCallSite)
		return false;
	const Gmm &g = m.gmm();
	const unsigned k = sc.winner.component;
	for (size_t j = 0; j < used.size(); j++) {
		if (used[j] >= kCallSite)
			continue;
		double z = (sc.z(j) - g.means()(j, k)) / std::sqrt(g.covs().slice(k)(j, j));
		if (used[j] == kLogDuration ? z >= kOwnSd : std::abs(z) >= kOwnSd)
			return false;
	}
	return true;
}

// Attribution::usual of feature j: the component mean nearest the value
// (model units in, display units out).
static double usual_mode(const KeyModel &m, size_t j, double value)
{
	const Gmm &g = m.gmm();
	double nearest = value, best = INFINITY;
	for (size_t k = 0; k < g.means().n_cols; k++) {
		double mean = g.means()(j, k) * m.scale()(j) + m.mean()(j);
		if (std::abs(mean - value) < best) {
			best = std::abs(mean - value);
			nearest = mean;
		}
	}
	return feature_display_value(m.used()[j], nearest);
}

std::vector<Attribution> attribute(const KeyModel &m, const Scored &s)
{
	const Gmm &g = m.gmm();
	unsigned k = s.winner.component;
	arma::vec delta = s.z - g.means().col(k);
	arma::mat P = g.precision(k);
	arma::vec h = P * delta;
	double d2 = arma::dot(delta, h);
	// What lowers the score below the mode: half the squared Mahalanobis
	// distance (the numeric features) plus the call site's surprisal beyond
	// its expectation (the entropy); shares are of their sum.
	double total = 0.5 * d2 + s.site_excess;
	std::vector<Attribution> out;
	for (size_t j = 0; j < m.used().size(); j++) {
		unsigned f = m.used()[j];
		double zval = s.z(j) * m.scale()(j) + m.mean()(j);
		double typ = g.means()(j, k) * m.scale()(j) + m.mean()(j);
		out.push_back(Attribution{
			.feature = f,
			.value = feature_display_value(f, zval),
			.typical = feature_display_value(f, typ),
			.usual = usual_mode(m, j, zval),
			.z = h(j) / std::sqrt(P(j, j)),
			.share = total > 0 ? 0.5 * delta(j) * h(j) / total : 0,
		});
	}
	if (m.has_sites() && (s.site_log_p != 0 || s.site_excess > 0))
		out.push_back(Attribution{
			.feature = kCallSite,
			.value = -s.site_log_p,
			.typical = m.site_entropy(),
			.z = 0, // categorical: no standard deviation
			.share = total > 0 ? s.site_excess / total : 0,
		});
	std::stable_sort(out.begin(), out.end(),
			 [](const Attribution &a, const Attribution &b) { return a.share > b.share; });
	return out;
}

// Whether the call's duration or gap is longer than its usual one by a
// slowdown worth telling.
static bool slower_worth_telling(const std::vector<Attribution> &why, const Worth &worth, const std::string &key,
				 size_t extra)
{
	return std::any_of(why.begin(), why.end(), [&](const Attribution &x) {
		return (x.feature == kLogDuration || x.feature == kLogGap) && x.value > x.usual &&
			worth.told(key, x.feature == kLogGap, x.value, x.usual, extra);
	});
}

bool reportable(const KeyModel &m, const Scored &s, const Worth &worth, const std::string &key, size_t extra)
{
	auto why = attribute(m, s);
	if (only_faster(why) || only_context(m, s, why))
		return false;
	// Context first (the GPU's power, the host's scheduling delay) tells
	// why a call was slow, not that it was: it is reported when the call
	// also took, or waited, longer by a slowdown worth telling. On an H100
	// warming up, calls whose durations drifted past 3 sd with the power
	// were flagged by the thousand for gpu_power_w (1,678 in a 40-step
	// ResNet-18 run).
	if (!why.empty() && why[0].feature > kCallSite && !slower_worth_telling(why, worth, key, extra))
		return false;
	// Statistically clear is not always worth telling: a 2 us call that
	// took 5 us, on a function that never varies, is 10 standard deviations
	// out, and what a cache miss or an interrupt costs any call; a 6 us
	// call that took 60 us once, where the machine stalls calls by that
	// much now and then, is the machine's (noise.h).
	if (!slower(why))
		return true;
	// A gap is a stall only when it is longer than the nearest of the
	// function's usual gaps (Attribution::usual) by a slowdown worth
	// telling: a function called at two points of a step waits long before
	// one and briefly before the other, and a call whose duration fits the
	// second point while its gap is the first point's usual one is
	// unusual in how the two go together, not late (CI, test_detect:
	// "aten::addmm: log_gap 622 us, typically 136 us", a step's usual
	// 650 us). A duration keeps the mode it was scored under: how long a
	// call should take depends on the other features (its bytes).
	const bool gap = why[0].feature == kLogGap;
	if (worth.told(key, gap, why[0].value, gap ? std::max(why[0].usual, why[0].typical) : why[0].typical, extra))
		return true;
	// A gap usual for another of the function's modes, in a call also slower
	// than its mode by a slowdown worth telling: the call is told for its
	// duration (fold_echoes names the duration first). The first call of a
	// step, 2 ms instead of 9 us, is scored under the spread short-gap mode
	// (the tight first-call mode makes 2 ms far less likely) with its
	// step-long gap the larger share; weighing only that share, make eval's
	// 12 Python faults (a 4 us function spinning 2 ms) went untold.
	if (!gap)
		return false;
	auto duration =
		std::find_if(why.begin(), why.end(), [](const Attribution &x) { return x.feature == kLogDuration; });
	return duration != why.end() && duration->value > duration->typical &&
		worth.told(key, false, duration->value, duration->typical, extra);
}

// The fault a feature's excess points to (rootcause.h's fault classes).
// No default: a feature added without its fault does not compile (-Wswitch).
static const char *fault_of(Feature feature, const std::string &layer)
{
	switch (feature) {
	case kLogDuration: return layer == layer::python ? "python_slow" : "operator_slow";
	case kLogGap: return "stall";
	case kLogBytes:
	case kLogBandwidth: return "data_size";
	case kCallSite: return "code_path";
	case kHostSchedDelay: return "cpu_contention";
	case kHostRetransmits: return "network";
	case kGpuUtil:
	case kGpuMemUsed:
	case kGpuPower:
	case kGpuTemp:
	case kGpuClockSm: return "gpu";
	case kFeatureCount: break;
	}
	return "unknown"; // not a feature: a caller's bug, shown as such rather than as a GPU fault
}

// Which side of its usual value a feature slows a call from: +1 when more
// slows it (a longer wait to run, more bytes, more retransmits, a hotter
// GPU), -1 when less does (bandwidth, the SM clock), 0 when either may (a
// GPU's utilisation or power: idle while it waits, or busy with others).
static int slowing_side(Feature feature)
{
	switch (feature) {
	case kLogDuration:
	case kLogBytes:
	case kLogGap:
	case kCallSite: // its value is the site's surprisal
	case kGpuMemUsed:
	case kGpuTemp:
	case kHostSchedDelay:
	case kHostRetransmits: return 1;
	case kLogBandwidth:
	case kGpuClockSm: return -1;
	case kGpuUtil:
	case kGpuPower: return 0;
	case kFeatureCount: break;
	}
	return 0;
}

// Whether a feature's value lies on the side of its typical one that does
// not slow a call: no cause of a slow call, however unusual. A gloo
// all-reduce 19x its typical duration under a network fault was named CPU
// contention for its host_log_sched of 20.6 ms, typically 75.2 ms: its
// process had waited less to run than usual (make eval, seed 2, a
// reported seed, where this was found; two more of its six network faults
// were named data_size for fewer bytes and cpu_contention so).
static bool harmless_side(const Attribution &x)
{
	const int side = slowing_side(static_cast<Feature>(x.feature));
	return side != 0 && (side > 0 ? x.value < x.typical : x.value > x.typical);
}

// Memory pressure: the machine's tasks stalled on memory (PSI) around the
// call, in the host intervals that cover it.
static void memory_pressure(std::vector<json> &causes, const Context &ctx, uint64_t t0, uint64_t t1)
{
	double stall_us = 0;
	for (const auto &x : ctx.covering(SeriesId::HostPsiMemoryStall, 0, t0, t1))
		stall_us += x.value;
	if (stall_us <= 0)
		return;
	double covered_us = static_cast<double>(t1 - t0) / 1e3;
	causes.push_back({{"kind", "memory_pressure"},
			  {"fault", "memory_pressure"},
			  {"what",
			   "memory pressure: tasks stalled on memory for " + format_duration(stall_us * 1e3) +
				   " in the host intervals around the call"},
			  {"strength", std::min(1.0, 0.5 + 0.5 * std::min(1.0, stall_us / covered_us))},
			  {"evidence", {{"psi_memory_some_stall_us", stall_us}}}});
}

constexpr double kListedSlowdown = 2;

void explain(Anomaly &a, const Span &span, const Observation &o, const KeyModel &m, const Scored &s, const Context &ctx,
	     uint64_t margin_ns)
{
	auto attr = attribute(m, s);
	a.features = json::object();
	for (const Attribution &x : attr)
		a.features[kFeatures[x.feature].name] = {{"value", x.value},
							 {"typical", x.typical},
							 {"usual", x.usual},
							 {"z", x.z},
							 {"contribution", x.share}};
	// A call slower than typical is explained by what slows a call.
	const bool slow_call = std::any_of(attr.begin(), attr.end(), [](const Attribution &x) {
		return (x.feature == kLogDuration || x.feature == kLogGap) && x.value > x.typical;
	});
	std::vector<json> causes;
	for (const Attribution &x : attr) {
		if (slow_call && harmless_side(x))
			continue;
		// A duration twice its usual one is listed whatever its share:
		// fold_echoes names it first when the call is slow for reasons of
		// its own. A 4 us encode spinning 2 ms as the first call of its
		// step was scored for its gap (96%: usual for the step's first
		// call, 16 sd off for the mode it fell in); without its duration
		// among the causes it was named a stall (10 of 12, make eval).
		const bool slowed = x.feature == kLogDuration && x.value >= kListedSlowdown * x.usual;
		if (x.share < 0.05 && !slowed)
			continue;
		std::string what = x.feature == kCallSite
			? "call site " + o.site + " has p = " + fmt(std::exp(-x.value)) +
				" among the key's training calls (" + fmt(x.value) + " nats of surprise, typically " +
				fmt(x.typical) + ")"
			: std::string(kFeatures[x.feature].name) + " " + show(x.feature, x.value) + ", typically " +
				show(x.feature, x.typical) + " (" + fmt(x.z, "%+.1f") + " sd given the other features)";
		causes.push_back(
			{{"kind", "feature"},
			 {"feature", kFeatures[x.feature].name},
			 {"fault", fault_of(static_cast<Feature>(x.feature), span.layer)},
			 {"what", span.name + ": " + what},
			 {"strength", x.share},
			 {"evidence",
			  {{"value", x.value}, {"typical", x.typical}, {"z", x.z}, {"contribution", x.share}}}});
	}

	uint64_t t0 = span.start_ns > margin_ns ? span.start_ns - margin_ns : 0;
	uint64_t t1 = span.start_ns + span.dur_ns + margin_ns;
	const Excess excess = excess_of(attr, span);

	// Network: retransmits of this process's connections.
	{
		double total = 0;
		json conns = json::object();
		for (const auto &x : ctx.covering(SeriesId::HostRetransmits, span.pid, t0, t1))
			if (x.value > 0) {
				total += x.value;
				conns[x.key] = conns.value(x.key, 0.0) + x.value;
			}
		// A collective whose connections retransmitted waited for its link:
		// that is the most specific thing known about it.
		double strength = 0.5 + 0.5 * share_of(attr, kHostRetransmits);
		if (total > 0 && is_collective(span.layer) && excess.ns > 0)
			strength = 3;
		if (total > 0)
			causes.push_back({{"kind", "network"},
					  {"fault", "network"},
					  {"what",
					   fmt(total, "%.0f") + " TCP retransmits of process " +
						   std::to_string(span.pid) + " around the call"},
					  {"strength", strength},
					  {"evidence", {{"retransmits", total}, {"connections", conns}}}});
	}
	// CPU interference: who ran on our CPUs while we waited, over the time
	// the call took beyond usual (its gap too, when it came late). The host
	// intervals that cover it may be longer: their share of it counts. It
	// is named first only when what others took accounts for half the
	// excess at least (explaining()); otherwise it is context, ranked by the
	// share of the scheduling delay feature, below the call's own measures:
	// at 0.5 and more whatever it explained, it was named before a softmax
	// slowed 60x by the fault injected into it (the agent had run 3.5 ms of
	// that 100 ms), 4 of 32 Torch and Python faults on the tuning seed. The
	// recording agent (an eacgm by name) is named when it ran, but explains
	// nothing: its cost is the overhead budget's business (offline.cpp).
	{
		std::map<std::string, double> by;
		std::set<uint64_t> stamps;
		double total = 0, agent = 0;
		uint64_t from = std::min(t0, excess.from_ns);
		for (const auto &x : ctx.covering(SeriesId::HostInterference, span.pid, from, t1))
			if (x.value > 0) {
				by[x.key] += x.value;
				total += x.value;
				if (eacgm_by_name(x.key))
					agent += x.value;
				stamps.insert(x.ts_ns);
			}
		double covered = static_cast<double>(stamps.size()) *
			static_cast<double>(ctx.period_ns(SeriesId::HostInterference, span.pid));
		// The intervals' share that fell in the call (and its gap), the
		// margin around it left out.
		double took = static_cast<double>(span.start_ns + span.dur_ns - excess.from_ns);
		double explained = covered > 0 ? (total - agent) * std::min(1.0, took / covered) : 0;
		if (total > 0) {
			std::vector<std::pair<std::string, double>> top(by.begin(), by.end());
			std::sort(top.begin(), top.end(), [](auto &x, auto &y) { return x.second > y.second; });
			json ev = json::object();
			for (size_t i = 0; i < top.size() && i < 5; i++)
				ev[top[i].first] = top[i].second;
			causes.push_back(
				{{"kind", "cpu_interference"},
				 {"fault", "cpu_contention"},
				 {"what",
				  "CPU interference: " + top[0].first + " ran " + format_duration(top[0].second) +
					  " on the CPUs process " + std::to_string(span.pid) + " waited for"},
				 {"strength",
				  std::max(0.5 * share_of(attr, kHostSchedDelay), explaining(explained, excess))},
				 {"evidence",
				  {{"interference_ns", ev},
				   {"explained_ns", explained},
				   {"excess_ns", excess.ns},
				   {"sched_delay_ns", feature_display_value(kHostSchedDelay, o.x[kHostSchedDelay])}}}});
		}
	}
	// GPU clock throttling.
	{
		json reasons = json::array();
		for (const Event *e : ctx.events_between(t0, t1))
			if (e->layer == layer::gpu && e->name == "clock_throttle")
				reasons.push_back({{"key", e->key}, {"args", e->args}, {"ts_ns", e->ts_ns}});
		double mask = 0;
		for (const auto &x : ctx.covering(SeriesId::GpuThrottleMask, 0, t0, t1))
			if (x.value != 0)
				mask = x.value;
		if (!reasons.empty() || mask != 0)
			causes.push_back({{"kind", "gpu_throttle"},
					  {"fault", "gpu"},
					  {"what", "GPU clocks throttled around the call"},
					  {"strength", 0.5 + 0.5 * share_of(attr, kGpuClockSm)},
					  {"evidence", {{"events", reasons}, {"throttle_reasons_mask", mask}}}});
	}
	// Python: a call site the key rarely had.
	if (!o.site.empty() && m.has_sites()) {
		size_t seen = m.site_count(o.site);
		if (o.site != m.common_site() && static_cast<double>(seen) < 0.01 * static_cast<double>(m.trained_on()))
			causes.push_back({{"kind", "call_site"},
					  {"fault", "code_path"},
					  {"what",
					   span.name + " called from " + o.site +
						   (seen ? ", rare in training (" + std::to_string(seen) + " of " +
								    std::to_string(m.trained_on()) + ")"
							 : ", never seen in training") +
						   "; usually from " + m.common_site()},
					  {"strength", 0.4 + 0.5 * share_of(attr, kCallSite)},
					  {"evidence",
					   {{"site", o.site},
					    {"seen", seen},
					    {"usual", m.common_site()},
					    {"usual_count", m.site_count(m.common_site())}}}});
	}
	memory_pressure(causes, ctx, t0, t1);
	std::stable_sort(causes.begin(), causes.end(), [](const json &x, const json &y) {
		return x["strength"].get<double>() > y["strength"].get<double>();
	});
	a.causes = json(causes);
}

std::string fault_class(const Anomaly &a)
{
	if (!a.causes.is_array() || a.causes.empty() || !a.causes[0].contains("fault"))
		return "";
	return a.causes[0]["fault"].get<std::string>();
}

std::string fault_name(const std::string &fault)
{
	static const std::map<std::string, std::string> names = {
		{"operator_slow", "operator slow"},
		{"python_slow", "Python slow"},
		{"stall", "stall (time outside the traced calls: Python, I/O or waiting for a CPU)"},
		{"cpu_contention", "CPU contention"},
		{"memory_pressure", "memory pressure"},
		{"network", "network delay or loss"},
		{"straggling_rank", "straggling rank"},
		{"gpu", "GPU"},
		{"data_size", "data size"},
		{"code_path", "unusual code path"},
	};
	auto it = names.find(fault);
	return it == names.end() ? fault : it->second;
}

Anomaly anomaly_of(const Span &span, const Observation &o, const KeyModel &m, const Scored &s, const Context &ctx,
		   uint64_t margin_ns)
{
	Anomaly a{.ts_ns = span.start_ns,
		  .dur_ns = span.dur_ns,
		  .pid = span.pid,
		  .tid = span.tid,
		  .layer = span.layer,
		  .name = span.name,
		  .score = s.score,
		  .threshold = m.threshold().value};
	explain(a, span, o, m, s, ctx, margin_ns);
	return a;
}

} // namespace eacgm::detect
