// SPDX-License-Identifier: Apache-2.0
#include "sinks/metrics.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "pipeline/decode.h"

namespace eacgm {

MetricsSink::MetricsSink(MetricsRegistry &reg, size_t top_n) : reg_(reg), top_n_(top_n)
{
	reg_.declare("eacgm_calls_total", MetricsRegistry::counter, "Traced calls, by layer and function.");
	reg_.declare("eacgm_call_errors_total", MetricsRegistry::counter,
		     "Traced calls that returned an error, by layer and function.");
	reg_.declare("eacgm_call_duration_seconds", MetricsRegistry::histogram,
		     "Duration of traced calls, by layer and function.", duration_buckets());
	reg_.declare("eacgm_bytes_total", MetricsRegistry::counter,
		     "Bytes moved or allocated by traced calls, by layer and function.");
	reg_.declare("eacgm_anomalies_total", MetricsRegistry::counter,
		     "Calls the online detector flagged, by layer, function and most likely cause.");
	reg_.declare("eacgm_records_lost_total", MetricsRegistry::counter,
		     "Records lost or not recorded, by layer and reason.");
	reg_.declare(
		"eacgm_collective_calls_total", MetricsRegistry::counter,
		"Collective and point-to-point calls by layer, function and the caller's rank in its communicator.");
	reg_.declare("eacgm_collective_bytes_total", MetricsRegistry::counter,
		     "Bytes of those calls, by layer, function and rank.");
	reg_.declare("eacgm_process_info", MetricsRegistry::gauge,
		     "1 per traced process, labelled with its name, cgroup, container id and pod uid: join on pid "
		     "(group_left) to label its other series.");
}

const std::string &MetricsSink::function_label(const std::string &layer, const std::string &name)
{
	static const std::string other = "other";
	auto &names = named_[layer];
	if (auto it = names.find(name); it != names.end())
		return it->second;
	if (names.size() >= top_n_)
		return other;
	return names.emplace(name, name).first->second;
}

Result<void> MetricsSink::write(SpanBatch &b)
{
	for (const Span &s : b.spans)
		count(s.layer, s.name, weight_of(s), is_error_span(s), s.dur_ns, s.bytes);
	for (const TypedSpan &t : b.typed.spans) {
		const ProbeSpec &p = b.typed.specs->probes[t.spec_id];
		count(p.layer, p.function, t.weight, failed(b.typed, t), t.dur_ns, t.bytes);
	}
	publish_calls();
	collectives(b);
	stragglers(b);
	for (const Anomaly &a : b.anomalies) {
		std::string cause = "unknown";
		if (a.causes.is_array() && !a.causes.empty() && a.causes[0].contains("kind"))
			cause = a.causes[0]["kind"].get<std::string>();
		reg_.add("eacgm_anomalies_total",
			 {{"layer", a.layer}, {"function", function_label(a.layer, a.name)}, {"cause", cause}}, 1);
	}
	return {};
}

void MetricsSink::count(const std::string &layer, const std::string &name, double w, bool error, uint64_t dur_ns,
			uint64_t bytes)
{
	const auto &bounds = duration_buckets();
	Acc &a = batch_[{layer, function_label(layer, name)}];
	if (a.counts.empty())
		a.counts.assign(bounds.size() + 1, 0);
	double secs = dur_ns / 1e9;
	a.calls += w;
	a.errors += error ? w : 0;
	a.bytes += w * double(bytes);
	a.sum += w * secs;
	a.counts[std::lower_bound(bounds.begin(), bounds.end(), secs) - bounds.begin()] += w;
}

void MetricsSink::publish_calls()
{
	for (auto &[key, a] : batch_) {
		if (!a.calls)
			continue;
		Labels l = {{"layer", key.first}, {"function", key.second}};
		reg_.add("eacgm_calls_total", l, a.calls);
		reg_.add("eacgm_call_errors_total", l, a.errors);
		reg_.add("eacgm_bytes_total", l, a.bytes);
		reg_.observe_many("eacgm_call_duration_seconds", l, a.counts, a.sum);
		a.calls = a.errors = a.bytes = a.sum = 0;
		std::fill(a.counts.begin(), a.counts.end(), 0);
	}
}

bool MetricsSink::failed(const TypedSpans &ts, const TypedSpan &t)
{
	if (error_specs_ != ts.specs || errors_.size() != ts.specs->probes.size()) {
		error_specs_ = ts.specs;
		errors_.clear();
		for (const ProbeSpec &p : ts.specs->probes)
			errors_.push_back({returns_enum(p.returns), {}});
	}
	if (t.left)
		return true; // left by an exception, pthread_exit or longjmp
	Verdicts &v = errors_[t.spec_id];
	if (!v.enum_ret)
		return false; // no decoded return: a success, whatever it returned
	if (v.by_ret.size() >= 4096)
		v.by_ret.clear(); // returns no enum names, read from a broken call
	auto [it, fresh] = v.by_ret.try_emplace(t.ret);
	if (fresh)
		it->second = is_error_name(ret_text(ts.specs->probes[t.spec_id], *ts.specs, t.ret));
	return it->second;
}

// Calls that know their communicator's rank (NCCL's, once its init was
// seen): per rank, so a slow or silent rank shows beside the others.
void MetricsSink::collectives(const SpanBatch &b)
{
	std::map<std::tuple<std::string, std::string, std::string>, std::pair<double, double>> by_rank;
	auto add = [&](const std::string &layer, const std::string &name, int64_t rank, uint64_t bytes) {
		auto &[calls, bytes_sum] = by_rank[{layer, function_label(layer, name), std::to_string(rank)}];
		calls += 1;
		bytes_sum += double(bytes);
	};
	for (const Span &s : b.spans)
		if (auto rank = int_arg(s, "rank"))
			add(s.layer, s.name, *rank, s.bytes);
	for (size_t i = 0; i < b.typed.size(); i++)
		if (auto rank = typed_.rank(b.typed, i)) {
			const TypedSpan &t = b.typed.spans[i];
			const ProbeSpec &p = b.typed.specs->probes[t.spec_id];
			add(p.layer, p.function, *rank, t.bytes);
		}
	for (auto &[k, v] : by_rank) {
		Labels l = {{"layer", std::get<0>(k)}, {"function", std::get<1>(k)}, {"rank", std::get<2>(k)}};
		reg_.add("eacgm_collective_calls_total", l, v.first);
		reg_.add("eacgm_collective_bytes_total", l, v.second);
	}
}

// Per round of a collective, once every rank of it was traced: how long
// its first rank waited for its last, and which rank that was.
void MetricsSink::stragglers(const SpanBatch &b)
{
	reg_.declare("eacgm_collective_arrival_skew_seconds", MetricsRegistry::histogram,
		     "Per collective across ranks (one sequence number of a process group, every rank seen): the "
		     "latest rank's start less the earliest's, by layer and function.",
		     duration_buckets());
	reg_.declare("eacgm_collective_last_arrivals_total", MetricsRegistry::counter,
		     "Collectives across ranks in which this rank arrived last, by layer and rank.");
	reg_.declare("eacgm_collective_incomplete_rounds_total", MetricsRegistry::counter,
		     "Collectives across ranks given up on before every rank was seen (ranks not traced here, or "
		     "later than 5 minutes), by layer.");
	for (const Span &s : b.spans)
		rounds_.add(s, done_);
	for (size_t i = 0; i < b.typed.size(); i++)
		if (auto c = typed_.of(b.typed, i))
			rounds_.add(*c, done_);
	for (const Round &r : done_) {
		if (!r.complete()) {
			reg_.add("eacgm_collective_incomplete_rounds_total", {{"layer", r.key.layer}}, 1);
			continue;
		}
		reg_.observe("eacgm_collective_arrival_skew_seconds",
			     {{"layer", r.key.layer}, {"function", function_label(r.key.layer, r.key.name)}},
			     static_cast<double>(r.skew_ns()) / 1e9);
		reg_.add("eacgm_collective_last_arrivals_total",
			 {{"layer", r.key.layer}, {"rank", std::to_string(r.last().rank)}}, 1);
	}
	done_.clear();
}

Result<void> MetricsSink::measures(const std::vector<Metric> &metrics, const std::vector<Event> &events)
{
	for (const Metric &m : metrics) {
		auto [name, per] = gauge_of(m.layer, m.name);
		reg_.declare(name, MetricsRegistry::gauge,
			     "The " + m.layer + " layer's " + m.name + (per != 1 ? " in seconds" : "") +
				     ", last value.");
		Labels l;
		if (!m.key.empty())
			l.push_back({"key", m.key});
		if (m.pid)
			l.push_back({"pid", std::to_string(m.pid)});
		reg_.set(name, l, m.value / per);
	}
	for (const Event &e : events) {
		reg_.declare("eacgm_events_total", MetricsRegistry::counter,
			     "Instants the layers reported (XID errors, throttling changes, ...), by layer and name.");
		reg_.add("eacgm_events_total", {{"layer", e.layer}, {"name", e.name}}, 1);
		hang(e);
	}
	return {};
}

void MetricsSink::hang(const Event &e)
{
	if (e.name != "hang" && e.name != "hang_over")
		return;
	reg_.declare("eacgm_hangs_in_flight", MetricsRegistry::gauge,
		     "Calls that wait on other processes (collectives, waits on them) in flight past --hang-after "
		     "now, by layer and call (the events table and eacgm's stderr name them).");
	double &n = hangs_[{e.layer, e.key}];
	n = std::max(0.0, n + (e.name == "hang" ? 1 : -1));
	reg_.set("eacgm_hangs_in_flight", {{"layer", e.layer}, {"call", e.key}}, n);
}

// A process that ended takes its per-process gauges with it: on a node
// thousands come and go, and their last values would be scraped forever.
Result<void> MetricsSink::process(const Process &p)
{
	std::string pid = std::to_string(p.pid);
	reg_.remove("pid", pid, p.end_ns ? "" : "eacgm_process_info"); // renamed: its info anew
	if (!p.end_ns)
		reg_.set("eacgm_process_info",
			 {{"pid", pid},
			  {"comm", p.comm},
			  {"cgroup", p.cgroup},
			  {"container_id", p.container_id},
			  {"pod_uid", p.pod_uid}},
			 1);
	return {};
}

Result<void> MetricsSink::drops(const std::vector<Drop> &d)
{
	for (const Drop &x : d)
		reg_.set("eacgm_records_lost_total", {{"layer", x.layer}, {"reason", x.reason}}, double(x.count));
	return {};
}

} // namespace eacgm
