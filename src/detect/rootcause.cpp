#include "detect/rootcause.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "export/summary.h"

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

} // namespace

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

void explain(Anomaly &a, const Span &span, const Observation &o, const KeyModel &m, const Scored &s, const Context &ctx,
	     uint64_t margin_ns)
{
	auto attr = attribute(m, s);
	a.features = json::object();
	for (const Attribution &x : attr)
		a.features[kFeatures[x.feature].name] = {
			{"value", x.value}, {"typical", x.typical}, {"z", x.z}, {"contribution", x.share}};
	std::vector<json> causes;
	for (const Attribution &x : attr) {
		if (x.share < 0.05)
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
			 {"what", span.name + ": " + what},
			 {"strength", x.share},
			 {"evidence",
			  {{"value", x.value}, {"typical", x.typical}, {"z", x.z}, {"contribution", x.share}}}});
	}

	uint64_t t0 = span.start_ns > margin_ns ? span.start_ns - margin_ns : 0;
	uint64_t t1 = span.start_ns + span.dur_ns + margin_ns;

	// Network: retransmits of this process's connections.
	{
		double total = 0;
		json conns = json::object();
		for (const auto &x : ctx.covering("host", "tcp_retransmits", span.pid, t0, t1))
			if (x.value > 0) {
				total += x.value;
				conns[x.key] = conns.value(x.key, 0.0) + x.value;
			}
		if (total > 0)
			causes.push_back({{"kind", "network"},
					  {"what",
					   fmt(total, "%.0f") + " TCP retransmits of process " +
						   std::to_string(span.pid) + " around the call"},
					  {"strength", 0.5 + 0.5 * share_of(attr, kHostRetransmits)},
					  {"evidence", {{"retransmits", total}, {"connections", conns}}}});
	}
	// CPU interference: who ran on our CPUs while we waited.
	{
		std::map<std::string, double> by;
		double total = 0;
		for (const auto &x : ctx.covering("host", "interference_ns", span.pid, t0, t1))
			if (x.value > 0) {
				by[x.key] += x.value;
				total += x.value;
			}
		if (total > 0) {
			std::vector<std::pair<std::string, double>> top(by.begin(), by.end());
			std::sort(top.begin(), top.end(), [](auto &x, auto &y) { return x.second > y.second; });
			json ev = json::object();
			for (size_t i = 0; i < top.size() && i < 5; i++)
				ev[top[i].first] = top[i].second;
			causes.push_back(
				{{"kind", "cpu_interference"},
				 {"what",
				  "CPU interference: " + top[0].first + " ran " + format_duration(top[0].second) +
					  " on the CPUs process " + std::to_string(span.pid) + " waited for"},
				 {"strength", 0.5 + 0.5 * share_of(attr, kHostSchedDelay)},
				 {"evidence",
				  {{"interference_ns", ev},
				   {"sched_delay_ns", feature_display_value(kHostSchedDelay, o.x[kHostSchedDelay])}}}});
		}
	}
	// GPU clock throttling.
	{
		json reasons = json::array();
		for (const Event *e : ctx.events_between(t0, t1))
			if (e->layer == "gpu" && e->name == "clock_throttle")
				reasons.push_back({{"key", e->key}, {"args", e->args}, {"ts_ns", e->ts_ns}});
		double mask = 0;
		for (const auto &x : ctx.covering("gpu", "throttle_reasons_mask", 0, t0, t1))
			if (x.value != 0)
				mask = x.value;
		if (!reasons.empty() || mask != 0)
			causes.push_back({{"kind", "gpu_throttle"},
					  {"what", "GPU clocks throttled around the call"},
					  {"strength", 0.5 + 0.5 * share_of(attr, kGpuClockSm)},
					  {"evidence", {{"events", reasons}, {"throttle_reasons_mask", mask}}}});
	}
	// Python: a call site the key rarely had.
	if (!o.site.empty() && m.has_sites()) {
		size_t seen = m.site_count(o.site);
		if (o.site != m.common_site() && static_cast<double>(seen) < 0.01 * static_cast<double>(m.trained_on()))
			causes.push_back({{"kind", "call_site"},
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
	std::stable_sort(causes.begin(), causes.end(), [](const json &x, const json &y) {
		return x["strength"].get<double>() > y["strength"].get<double>();
	});
	a.causes = json(causes);
}

} // namespace eacgm::detect
