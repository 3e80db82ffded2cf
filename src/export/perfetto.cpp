// SPDX-License-Identifier: Apache-2.0
#include "export/perfetto.h"

#include <algorithm>
#include <functional>
#include <map>
#include <numeric>
#include <sstream>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "common/fs.h"

namespace eacgm {

using nlohmann::json;

namespace {

// nlohmann's text of a value: keys sorted, invalid UTF-8 replaced (captured
// strings and process names may not be valid UTF-8).
std::string dump(const json &j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

} // namespace

// A span's complete event as text: the same bytes as dumping the object
// {"args": its args with ret, bytes and python set, "cat", "dur", "name",
// "ph", "pid", "tid", "ts"}, written without building it. A long
// recording's trace is mostly these, and building and dumping an object
// per span, its stack as an array of strings, was most of the time writing
// it; the stack's text is made once per distinct stack (PyStack::json).
std::string span_event_text(const Span &s) { return span_event_text(s, nullptr); }

// The args a collective's round adds to its span (key, value's text).
static void add_mark_args(std::vector<std::pair<std::string_view, std::string>> &args, const CollectiveMarks::Mark &m)
{
	args.emplace_back("arrival_skew_ms", dump(static_cast<double>(m.skew_ns) / 1e6));
	args.emplace_back("last_rank", std::to_string(m.last_rank));
	if (m.seen < m.nranks)
		args.emplace_back("ranks_seen", std::to_string(m.seen));
}

std::string span_event_text(const Span &s, const CollectiveMarks::Mark *mark)
{
	std::vector<std::pair<std::string_view, std::string>> args; // key, value's text
	bool marked = mark != nullptr;
	if (s.args.is_object())
		for (auto it = s.args.begin(); it != s.args.end(); ++it) {
			const std::string &k = it.key();
			if (k != "ret" && !(k == "bytes" && s.bytes) && !(k == "python" && !s.py_stack.empty()) &&
			    !(marked && (k == "arrival_skew_ms" || k == "last_rank" || k == "ranks_seen")))
				args.emplace_back(k, dump(*it));
		}
	args.emplace_back("ret", s.ret_name.empty() ? std::to_string(s.ret) : dump(s.ret_name));
	if (s.bytes != 0)
		args.emplace_back("bytes", std::to_string(s.bytes));
	if (!s.py_stack.empty())
		args.emplace_back("python", s.py_stack.json());
	if (marked)
		add_mark_args(args, *mark);
	std::sort(args.begin(), args.end(), [](auto &a, auto &b) { return a.first < b.first; });
	std::string out = "{\"args\":{";
	for (size_t i = 0; i < args.size(); i++) {
		if (i)
			out += ',';
		out += dump(std::string(args[i].first));
		out += ':';
		out += args[i].second;
	}
	out += '}';
	// Keys in the order dumping the object would give them.
	if (marked)
		out += ",\"bind_id\":" + std::to_string(mark->flow);
	out += ",\"cat\":" + dump(s.layer) + ",\"dur\":" + dump(static_cast<double>(s.dur_ns) / 1000.0);
	if (marked && mark->in)
		out += ",\"flow_in\":true";
	if (marked && mark->out)
		out += ",\"flow_out\":true";
	out += ",\"name\":" + dump(s.name) + ",\"ph\":\"X\",\"pid\":" + std::to_string(s.pid) +
		",\"tid\":" + std::to_string(s.tid) + ",\"ts\":" + dump(static_cast<double>(s.start_ns) / 1000.0) + "}";
	return out;
}

CollectiveMarks::CollectiveMarks(std::vector<Round> rounds)
{
	sort_rounds(rounds);
	uint64_t flow = 0;
	for (const Round &r : rounds) {
		flow++;
		for (size_t i = 0; i < r.arrivals.size(); i++) {
			const Arrival &a = r.arrivals[i];
			auto &[nranks, rank] = ranks_.try_emplace(a.pid, r.key.nranks, a.rank).first->second;
			if (r.key.nranks > nranks || (r.key.nranks == nranks && a.rank < rank)) {
				nranks = r.key.nranks;
				rank = a.rank;
			}
			if (r.arrivals.size() < 2) // nothing to link or compare
				continue;
			marks_[{a.pid, a.tid, a.start_ns}] = Mark{.flow = flow,
								  .in = i > 0,
								  .out = i + 1 < r.arrivals.size(),
								  .skew_ns = r.skew_ns(),
								  .last_rank = r.last().rank,
								  .seen = static_cast<uint32_t>(r.arrivals.size()),
								  .nranks = r.key.nranks};
		}
	}
}

const CollectiveMarks::Mark *CollectiveMarks::find(const Span &s) const
{
	if (marks_.empty())
		return nullptr;
	auto it = marks_.find({s.pid, s.tid, s.start_ns});
	// Another span of the thread may start at the same nanosecond (one
	// nested in it): only a collective span has the mark.
	return it == marks_.end() || !collective_of(s) ? nullptr : &it->second;
}

int64_t CollectiveMarks::rank_of(uint32_t pid) const
{
	auto it = ranks_.find(pid);
	return it == ranks_.end() ? -1 : static_cast<int64_t>(it->second.second);
}

namespace {

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
struct Emit {
	std::function<void(const std::string &)> text; // an event's text
	void operator()(const json &e) const { text(dump(e)); }
};

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

// Viewers nest complete events on a thread by order of appearance
// (nests_before, common/model.h).
static Result<void> in_memory_by_thread(const Recording &rec, const SpanVisit &visit)
{
	std::vector<size_t> order(rec.spans.size());
	std::iota(order.begin(), order.end(), 0);
	std::stable_sort(order.begin(), order.end(),
			 [&](size_t a, size_t b) { return nests_before(rec.spans[a], rec.spans[b]); });
	for (size_t i : order)
		visit(rec.spans[i]);
	return {};
}

std::string process_title(const Process &p, const json &origins, const CollectiveMarks &marks)
{
	uint32_t pid = p.pid;
	std::string host;
	if (auto o = origins.find(std::to_string(p.pid)); o != origins.end() && o->is_object()) {
		pid = o->value("pid", p.pid);
		host = o->value("host", "");
	}
	std::string title = p.comm + " (" + std::to_string(pid) + ")";
	if (!host.empty())
		title += " " + host;
	if (int64_t rank = marks.rank_of(p.pid); rank >= 0)
		title += " rank " + std::to_string(rank);
	return title;
}

// A call that ran work another call issued (pipeline/issues.h: gloo's
// collective, enqueued by torch's ProcessGroupGloo call on the caller's
// thread) is linked to it by a flow (v1: "s" on the issuing thread at the
// issue, bound to the call there; "f" at the start of the running call).
// Ids count from 2^32, apart from the collectives' bind ids.
static void emit_issue_flow(const Span &s, uint64_t &next_id, const Emit &emit)
{
	auto ns = s.args.find("issued_ns"), tid = s.args.find("issued_tid");
	if (ns == s.args.end() || tid == s.args.end() || !ns->is_number_integer() || !tid->is_number_integer())
		return;
	uint64_t id = (1ull << 32) + next_id++;
	auto us = [](uint64_t t) { return static_cast<double>(t) / 1000.0; };
	emit({{"ph", "s"},
	      {"id", id},
	      {"cat", "issue"},
	      {"name", "issued"},
	      {"pid", s.pid},
	      {"tid", tid->get<uint64_t>()},
	      {"ts", us(ns->get<uint64_t>())},
	      {"args", json::object()}});
	emit({{"ph", "f"},
	      {"bp", "e"},
	      {"id", id},
	      {"cat", "issue"},
	      {"name", "issued"},
	      {"pid", s.pid},
	      {"tid", s.tid},
	      {"ts", us(s.start_ns)},
	      {"args", json::object()}});
}

// Every trace event in the order viewers want them.
static Result<void> emit_events(const Recording &rec, const SpanFeed &spans, const CollectiveMarks &marks,
				const Emit &emit)
{
	auto it = rec.meta.find(kProcessOriginsMeta);
	json origins = it == rec.meta.end() ? json::object() : json::parse(it->second, nullptr, false);
	for (const Process &p : rec.processes)
		emit(name_event("process_name", p.pid, p.pid, process_title(p, origins, marks)));
	for (const Thread &t : rec.threads)
		emit(name_event("thread_name", t.pid, t.tid, t.name));
	uint64_t issue_flows = 0;
	if (auto r = spans([&](const Span &s) {
		    emit.text(span_event_text(s, marks.find(s)));
		    emit_issue_flow(s, issue_flows, emit);
	    });
	    !r)
		return r;
	add_metrics(rec, emit);
	for (const Event &e : rec.events)
		emit(instant_event(e));
	for (const Anomaly &a : rec.anomalies)
		emit(anomaly_event(a));
	return {};
}

// Writes the document event by event: {"traceEvents":[...], then the rest.
static Result<void> write_trace(const Recording &rec, const SpanFeed &spans, const CollectiveMarks &marks,
				std::ostream &out)
{
	out << "{\"traceEvents\":[";
	bool first = true;
	auto r = emit_events(rec, spans, marks, Emit{[&](const std::string &e) {
				     out << (first ? "\n" : ",\n") << e;
				     first = false;
			     }});
	if (!r)
		return r;
	json other = json::object();
	for (const auto &[k, v] : rec.meta)
		other[k] = v;
	other["clock"] = "CLOCK_MONOTONIC";
	other["wall_offset_ns"] = std::to_string(rec.wall_offset_ns);
	out << "],\n\"displayTimeUnit\":\"ns\",\n\"otherData\":" << dump(other) << "}";
	return {};
}

std::string perfetto_json(const Recording &rec)
{
	std::ostringstream out;
	(void)write_trace(
		rec, [&](const SpanVisit &v) { return in_memory_by_thread(rec, v); },
		CollectiveMarks(match_collectives(rec.spans)), out);
	return out.str();
}

Result<void> write_perfetto(const Recording &rec, const std::string &path)
{
	auto all = [&](const SpanVisit &v) { return in_memory_by_thread(rec, v); };
	return write_perfetto(rec, path, all, all);
}

Result<CollectiveMarks> collective_marks(const SpanFeed &collectives)
{
	CollectiveMatcher matcher;
	std::vector<Round> rounds;
	if (collectives)
		if (auto r = collectives([&](const Span &s) { matcher.add(s, rounds); }); !r)
			return r.error();
	matcher.finish(rounds);
	return CollectiveMarks(std::move(rounds));
}

Result<void> write_perfetto(const Recording &rec, const std::string &path, const SpanFeed &spans,
			    const SpanFeed &collectives)
{
	auto marks = collective_marks(collectives);
	if (!marks)
		return marks.error();
	return write_file_atomic(path, [&](std::ostream &out) { return write_trace(rec, spans, *marks, out); });
}

} // namespace eacgm
