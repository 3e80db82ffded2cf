#include "export/perfetto.h"

#include <algorithm>
#include <functional>
#include <map>
#include <numeric>
#include <sstream>
#include <tuple>

#include "common/fs.h"

namespace eacgm {

using nlohmann::json;

namespace {

json span_event(const Span &s)
{
	json args = s.args.is_object() ? s.args : json::object();
	if (s.ret_name.empty())
		args["ret"] = s.ret;
	else
		args["ret"] = s.ret_name;
	if (s.bytes != 0)
		args["bytes"] = s.bytes;
	if (!s.py_stack.empty())
		args["python"] = s.py_stack;
	return {
		{"ph", "X"},
		{"name", s.name},
		{"cat", s.layer},
		{"ts", static_cast<double>(s.start_ns) / 1000.0},
		{"dur", static_cast<double>(s.dur_ns) / 1000.0},
		{"pid", s.pid},
		{"tid", s.tid},
		{"args", std::move(args)},
	};
}

json name_event(const char *kind, uint32_t pid, uint32_t tid, const std::string &name)
{
	return {{"ph", "M"}, {"name", kind}, {"pid", pid}, {"tid", tid}, {"args", {{"name", name}}}};
}

// Metrics about no process (a GPU, a NIC, the machine) go on a track group
// of their own per layer and key, under a made-up pid above any real one.
constexpr uint32_t kFirstTrackPid = 1u << 30;

// Hands each trace event to the writer as it is made: the document is
// never held whole (a 20 s GPT recording's trace is 110 MB of JSON, and
// as one JSON value it took eacgm to 940 MB at the end of the recording).
using Emit = std::function<void(const json &)>;

void add_metrics(const Recording &rec, const Emit &emit)
{
	std::map<std::pair<std::string, std::string>, uint32_t> groups; // (layer, key) -> pid
	for (const Metric &m : rec.metrics) {
		uint32_t pid = m.pid;
		std::string name = m.name;
		if (pid == 0) {
			auto [it, added] = groups.emplace(std::pair(m.layer, m.key), kFirstTrackPid + groups.size());
			if (added)
				emit(name_event("process_name", it->second, 0,
						m.key.empty() ? m.layer : m.layer + " " + m.key));
			pid = it->second;
		} else if (!m.key.empty()) {
			name += " " + m.key;
		}
		emit({{"ph", "C"},
		      {"name", name},
		      {"cat", m.layer},
		      {"ts", static_cast<double>(m.ts_ns) / 1000.0},
		      {"pid", pid},
		      {"args", {{"value", m.value}}}});
	}
}

json instant_event(const Event &e)
{
	json args = e.args.is_object() ? e.args : json::object();
	if (!e.key.empty())
		args["key"] = e.key;
	json ev = {{"ph", "i"},
		   {"name", e.name},
		   {"cat", e.layer},
		   {"ts", static_cast<double>(e.ts_ns) / 1000.0},
		   {"args", std::move(args)}};
	if (e.pid) { // on its thread (or process); else across the whole trace
		ev["pid"] = e.pid;
		ev["tid"] = e.tid ? e.tid : e.pid;
		ev["s"] = e.tid ? "t" : "p";
	} else {
		ev["pid"] = 0;
		ev["tid"] = 0;
		ev["s"] = "g";
	}
	return ev;
}

// An anomaly on the thread of the span it flags, at the span's start, with
// what made it anomalous; Perfetto lists instant events in its own track.
json anomaly_event(const Anomaly &a)
{
	json args = {{"score", a.score}, {"threshold", a.threshold}, {"dur_ns", a.dur_ns}, {"layer", a.layer}};
	if (!a.causes.empty() && a.causes[0].contains("what"))
		args["cause"] = a.causes[0]["what"];
	args["causes"] = a.causes;
	args["features"] = a.features;
	return {{"ph", "i"},        {"name", "anomaly: " + a.name},
		{"cat", "anomaly"}, {"ts", static_cast<double>(a.ts_ns) / 1000.0},
		{"pid", a.pid},     {"tid", a.tid ? a.tid : a.pid},
		{"s", "t"},         {"args", std::move(args)}};
}

} // namespace

// Viewers nest complete events on a thread by order of appearance: a
// parent must come before a child that starts at the same time, hence
// longer first, then shallower first for spans identical in time
// (SpanOrder::by_thread).
static Result<void> in_memory_by_thread(const Recording &rec, const SpanVisit &visit)
{
	std::vector<size_t> order(rec.spans.size());
	std::iota(order.begin(), order.end(), 0);
	std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
		const Span &x = rec.spans[a], &y = rec.spans[b];
		return std::tie(x.pid, x.tid, x.start_ns, y.dur_ns, x.depth) <
			std::tie(y.pid, y.tid, y.start_ns, x.dur_ns, y.depth);
	});
	for (size_t i : order)
		visit(rec.spans[i]);
	return {};
}

// Every trace event in the order viewers want them.
static Result<void> emit_events(const Recording &rec, const SpanFeed &spans, const Emit &emit)
{
	for (const Process &p : rec.processes)
		emit(name_event("process_name", p.pid, p.pid, p.comm + " (" + std::to_string(p.pid) + ")"));
	for (const Thread &t : rec.threads)
		emit(name_event("thread_name", t.pid, t.tid, t.name));
	if (auto r = spans([&](const Span &s) { emit(span_event(s)); }); !r)
		return r;
	add_metrics(rec, emit);
	for (const Event &e : rec.events)
		emit(instant_event(e));
	for (const Anomaly &a : rec.anomalies)
		emit(anomaly_event(a));
	return {};
}

// Writes the document event by event: {"traceEvents":[...], then the rest.
static Result<void> write_trace(const Recording &rec, const SpanFeed &spans, std::ostream &out)
{
	// replace: captured strings and process names may not be valid UTF-8.
	auto text = [](const json &j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); };
	out << "{\"traceEvents\":[";
	bool first = true;
	auto r = emit_events(rec, spans, [&](const json &e) {
		out << (first ? "\n" : ",\n") << text(e);
		first = false;
	});
	if (!r)
		return r;
	json other = json::object();
	for (const auto &[k, v] : rec.meta)
		other[k] = v;
	other["clock"] = "CLOCK_MONOTONIC";
	other["wall_offset_ns"] = std::to_string(rec.wall_offset_ns);
	out << "],\n\"displayTimeUnit\":\"ns\",\n\"otherData\":" << text(other) << "}";
	return {};
}

std::string perfetto_json(const Recording &rec)
{
	std::ostringstream out;
	(void)write_trace(
		rec, [&](const SpanVisit &v) { return in_memory_by_thread(rec, v); }, out);
	return out.str();
}

Result<void> write_perfetto(const Recording &rec, const std::string &path)
{
	return write_perfetto(rec, path, [&](const SpanVisit &v) { return in_memory_by_thread(rec, v); });
}

Result<void> write_perfetto(const Recording &rec, const std::string &path, const SpanFeed &spans)
{
	return write_file_atomic(path, [&](std::ostream &out) { return write_trace(rec, spans, out); });
}

} // namespace eacgm
