// SPDX-License-Identifier: Apache-2.0
// Perfetto's protobuf trace (pftrace.h), written field by field: the
// format is the protobuf wire format of perfetto's trace.proto, whose field
// numbers (read from google/perfetto's protos, docs/span-path-plan.md §7)
// are the constants below.
#include "export/pftrace.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <unordered_map>
#include <vector>

#include "common/fs.h"

namespace eacgm {

using nlohmann::json;

namespace {

// Field numbers.
enum : uint32_t {
	kTracePacket = 1,
	// TracePacket
	kClockSnapshot = 6,
	kTimestamp = 8,
	kSequenceId = 10,
	kTrackEvent = 11,
	kInternedData = 12,
	kSequenceFlags = 13,
	kTimestampClockId = 58,
	kPacketDefaults = 59,
	kTrackDescriptor = 60,
	// TracePacketDefaults
	kDefaultsClockId = 58,
	// ClockSnapshot / Clock
	kClocks = 1,
	kClockId = 1,
	kClockTimestamp = 2,
	kClockIncremental = 3,
	// TrackEvent
	kEvCategoryIids = 3,
	kEvAnnotations = 4,
	kEvType = 9,
	kEvNameIid = 10,
	kEvTrackUuid = 11,
	kEvCounterValue = 30,
	kEvDoubleCounter = 44,
	kEvFlowIds = 47,
	kEvTerminatingFlowIds = 48,
	// TrackDescriptor
	kTdUuid = 1,
	kTdName = 2,
	kTdProcess = 3,
	kTdThread = 4,
	kTdParent = 5,
	kTdCounter = 8,
	// ProcessDescriptor / ThreadDescriptor
	kPdPid = 1,
	kPdName = 6,
	kThPid = 1,
	kThTid = 2,
	kThName = 5,
	// DebugAnnotation
	kDaNameIid = 1,
	kDaBool = 2,
	kDaUint = 3,
	kDaInt = 4,
	kDaDouble = 5,
	kDaJson = 9,
	kDaStringIid = 17,
	// InternedData and its entries (iid 1, name or str 2)
	kIdCategories = 1,
	kIdNames = 2,
	kIdAnnotationNames = 3,
	kIdStrings = 29,
};
enum : uint64_t { kSliceBegin = 1, kSliceEnd = 2, kInstant = 3, kCounter = 4 };
enum : uint64_t { kStateCleared = 1, kNeedsState = 2 };
constexpr uint32_t kMonotonic = 3;           // BUILTIN_CLOCK_MONOTONIC: the spans' clock
constexpr uint32_t kSequenceClock = 64;      // the first clock id scoped to one sequence
constexpr uint64_t kIssueFlows = 1ull << 32; // issue flows' ids, apart from the rounds' (as in the JSON)

// A protobuf message, built field by field.
class Pb {
public:
	Pb &u(uint32_t field, uint64_t v) { return key(field, 0).varint(v); }
	Pb &fixed(uint32_t field, uint64_t v)
	{
		key(field, 1);
		for (int i = 0; i < 8; i++)
			buf_.push_back(static_cast<char>(v >> (8 * i)));
		return *this;
	}
	Pb &d(uint32_t field, double v)
	{
		uint64_t bits;
		std::memcpy(&bits, &v, sizeof bits);
		return fixed(field, bits);
	}
	Pb &s(uint32_t field, std::string_view v)
	{
		key(field, 2).varint(v.size());
		buf_.append(v);
		return *this;
	}
	Pb &m(uint32_t field, const Pb &msg) { return s(field, msg.buf_); }
	bool empty() const { return buf_.empty(); }
	const std::string &bytes() const { return buf_; }

private:
	Pb &key(uint32_t field, int wire) { return varint(uint64_t(field) << 3 | uint64_t(wire)); }
	Pb &varint(uint64_t v)
	{
		while (v >= 0x80) {
			buf_.push_back(static_cast<char>(v | 0x80));
			v >>= 7;
		}
		buf_.push_back(static_cast<char>(v));
		return *this;
	}
	std::string buf_;
};

std::string dump(const json &j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// One trusted packet sequence: its interned strings, and its clock, whose
// timestamps are deltas (the first from the snapshot in its first packet).
class Sequence {
public:
	Sequence(uint32_t id, std::ostream &out) : id_(id), out_(out) {}

	// Interned ids of this sequence, defined in the next packet when new.
	uint64_t name(std::string_view s) { return intern(names_, kIdNames, s); }
	uint64_t category(std::string_view s) { return intern(categories_, kIdCategories, s); }
	uint64_t annotation(std::string_view s) { return intern(annotation_names_, kIdAnnotationNames, s); }
	uint64_t string(std::string_view s) { return intern(strings_, kIdStrings, s); }

	// A track event at time ts (>= the last one's: the clock only moves on).
	void event(uint64_t ts, const Pb &track_event)
	{
		if (!started_)
			start(ts);
		Pb p;
		p.u(kTimestamp, ts - last_ts_).u(kSequenceId, id_).u(kSequenceFlags, kNeedsState);
		if (!interned_.empty())
			p.m(kInternedData, interned_);
		p.m(kTrackEvent, track_event);
		write(p);
		interned_ = Pb();
		last_ts_ = ts;
	}

	// A packet of this sequence that needs no state (a track descriptor).
	void plain(uint32_t field, const Pb &body)
	{
		Pb p;
		p.u(kSequenceId, id_).m(field, body);
		write(p);
	}

private:
	// The first packet: state cleared, the sequence's clock made equal to
	// CLOCK_MONOTONIC at ts, and made the default of the later packets.
	void start(uint64_t ts)
	{
		Pb clocks;
		clocks.m(kClocks, Pb().u(kClockId, kMonotonic).u(kClockTimestamp, ts))
			.m(kClocks, Pb().u(kClockId, kSequenceClock).u(kClockTimestamp, ts).u(kClockIncremental, 1));
		Pb p;
		p.u(kTimestamp, ts)
			.u(kTimestampClockId, kMonotonic)
			.u(kSequenceId, id_)
			.u(kSequenceFlags, kStateCleared | kNeedsState)
			.m(kClockSnapshot, clocks)
			.m(kPacketDefaults, Pb().u(kDefaultsClockId, kSequenceClock));
		write(p);
		started_ = true;
		last_ts_ = ts;
	}
	uint64_t intern(std::unordered_map<std::string, uint64_t> &ids, uint32_t field, std::string_view s)
	{
		auto [it, fresh] = ids.try_emplace(std::string(s), ids.size() + 1);
		if (fresh)
			interned_.m(field, Pb().u(1, it->second).s(2, s));
		return it->second;
	}
	void write(const Pb &packet)
	{
		Pb framed;
		framed.m(kTracePacket, packet);
		out_ << framed.bytes();
	}

	uint32_t id_;
	std::ostream &out_;
	bool started_ = false;
	uint64_t last_ts_ = 0;
	Pb interned_; // what the next packet defines
	std::unordered_map<std::string, uint64_t> names_, categories_, annotation_names_, strings_;
};

// A debug annotation of a JSON value: numbers and booleans as themselves,
// strings interned, anything else as its JSON text.
Pb annotation(Sequence &seq, std::string_view key, const json &v)
{
	Pb a;
	a.u(kDaNameIid, seq.annotation(key));
	if (v.is_number_unsigned())
		a.u(kDaUint, v.get<uint64_t>());
	else if (v.is_number_integer())
		a.u(kDaInt, static_cast<uint64_t>(v.get<int64_t>()));
	else if (v.is_number_float())
		a.d(kDaDouble, v.get<double>());
	else if (v.is_boolean())
		a.u(kDaBool, v.get<bool>());
	else if (v.is_string())
		a.u(kDaStringIid, seq.string(v.get_ref<const std::string &>()));
	else
		a.s(kDaJson, dump(v));
	return a;
}

// Track uuids, and the descriptors that define them (on sequence 1, each
// before any event on its track).
class Tracks {
public:
	Tracks(Sequence &descriptors, const Recording &rec, const CollectiveMarks &marks) : seq_(descriptors)
	{
		auto it = rec.meta.find(kProcessOriginsMeta);
		json origins = it == rec.meta.end() ? json::object() : json::parse(it->second, nullptr, false);
		for (const Process &p : rec.processes)
			titles_[p.pid] = process_title(p, origins, marks);
		for (const Thread &t : rec.threads)
			thread_names_[{t.pid, t.tid}] = t.name;
	}
	uint64_t process(uint32_t pid)
	{
		auto [it, fresh] = processes_.try_emplace(pid, next_);
		if (fresh) {
			next_++;
			auto title = titles_.find(pid);
			Pb pd;
			pd.u(kPdPid, pid).s(kPdName, title == titles_.end() ? std::to_string(pid) : title->second);
			seq_.plain(kTrackDescriptor, Pb().u(kTdUuid, it->second).m(kTdProcess, pd));
		}
		return it->second;
	}
	uint64_t thread(uint32_t pid, uint32_t tid)
	{
		auto [it, fresh] = threads_.try_emplace({pid, tid}, 0);
		if (fresh) {
			const uint64_t parent = process(pid);
			it->second = next_++;
			Pb th;
			th.u(kThPid, pid).u(kThTid, tid);
			if (auto n = thread_names_.find({pid, tid}); n != thread_names_.end())
				th.s(kThName, n->second);
			seq_.plain(kTrackDescriptor, Pb().u(kTdUuid, it->second).u(kTdParent, parent).m(kTdThread, th));
		}
		return it->second;
	}
	// A named track under another (0: at the top), e.g. a thread's layer.
	uint64_t child(uint64_t parent, const std::string &name, bool counter = false)
	{
		auto [it, fresh] = children_.try_emplace({parent, name, counter}, 0);
		if (fresh) {
			it->second = next_++;
			Pb td;
			td.u(kTdUuid, it->second).s(kTdName, name);
			if (parent)
				td.u(kTdParent, parent);
			if (counter)
				td.m(kTdCounter, Pb());
			seq_.plain(kTrackDescriptor, td);
		}
		return it->second;
	}

private:
	Sequence &seq_;
	uint64_t next_ = 1;
	std::map<uint32_t, std::string> titles_;
	std::map<std::pair<uint32_t, uint32_t>, std::string> thread_names_;
	std::map<uint32_t, uint64_t> processes_;
	std::map<std::pair<uint32_t, uint32_t>, uint64_t> threads_;
	std::map<std::tuple<uint64_t, std::string, bool>, uint64_t> children_;
};

// A call that ran work another issued: the instant at the issue, written
// with the others once the spans are done.
struct Issue {
	uint64_t ts, flow;
	uint32_t pid, tid;
};

// One thread's spans as slices on a track per layer, in time order: a
// slice ends (in its track's order) before anything that starts after it.
class ThreadWriter {
public:
	ThreadWriter(Sequence &seq, Tracks &tracks, uint32_t pid, uint32_t tid)
		: seq_(seq), tracks_(tracks), thread_(tracks.thread(pid, tid))
	{}
	~ThreadWriter() { end_until(UINT64_MAX); }

	void span(const Span &s, const CollectiveMarks::Mark *mark, std::vector<Issue> &issues)
	{
		end_until(s.start_ns);
		auto &open = open_[s.layer];
		const uint64_t track = tracks_.child(thread_, s.layer);
		uint64_t end = s.start_ns + s.dur_ns;
		if (!open.empty() && end > open.back().first)
			end = open.back().first; // overlaps its parent's end: a layer's calls nest, so never here
		Pb ev;
		ev.u(kEvType, kSliceBegin)
			.u(kEvTrackUuid, track)
			.u(kEvNameIid, seq_.name(s.name))
			.u(kEvCategoryIids, seq_.category(s.layer));
		add_args(ev, s, mark);
		if (mark && mark->out)
			ev.fixed(kEvFlowIds, mark->flow);
		else if (mark && mark->in)
			ev.fixed(kEvTerminatingFlowIds, mark->flow);
		if (auto ns = s.args.find("issued_ns"), tid = s.args.find("issued_tid");
		    ns != s.args.end() && tid != s.args.end() && ns->is_number_integer() && tid->is_number_integer()) {
			issues.push_back(
				{ns->get<uint64_t>(), kIssueFlows + issues.size(), s.pid, tid->get<uint32_t>()});
			ev.fixed(kEvTerminatingFlowIds, issues.back().flow);
		}
		seq_.event(s.start_ns, ev);
		open.emplace_back(end, track);
	}

private:
	// Ends every open slice that ends by t, earliest first (a child before
	// its parent when they end together).
	void end_until(uint64_t t)
	{
		for (;;) {
			std::vector<std::pair<uint64_t, uint64_t>> *first = nullptr;
			for (auto &[layer, open] : open_)
				if (!open.empty() && open.back().first <= t &&
				    (!first || open.back().first < first->back().first))
					first = &open;
			if (!first)
				return;
			auto [end, track] = first->back();
			first->pop_back();
			seq_.event(end, Pb().u(kEvType, kSliceEnd).u(kEvTrackUuid, track));
		}
	}
	// The span's args as the JSON trace has them: its own, "ret", "bytes",
	// "python" (its stack) and its collective round's.
	void add_args(Pb &ev, const Span &s, const CollectiveMarks::Mark *mark)
	{
		std::map<std::string_view, json> extra;
		// A return of 0 without a name (a void function's, a sampled Python
		// function's, or a plain 0) is left out: it was a tenth of a span.
		if (s.ret || !s.ret_name.empty())
			extra["ret"] = s.ret_name.empty() ? json(s.ret) : json(s.ret_name);
		if (s.bytes)
			extra["bytes"] = s.bytes;
		if (mark) {
			extra["arrival_skew_ms"] = static_cast<double>(mark->skew_ns) / 1e6;
			extra["last_rank"] = mark->last_rank;
			if (mark->seen < mark->nranks)
				extra["ranks_seen"] = mark->seen;
		}
		if (s.args.is_object())
			for (auto it = s.args.begin(); it != s.args.end(); ++it)
				if (!extra.count(it.key()) && !(it.key() == "python" && !s.py_stack.empty()))
					ev.m(kEvAnnotations, annotation(seq_, it.key(), *it));
		for (const auto &[k, v] : extra)
			ev.m(kEvAnnotations, annotation(seq_, k, v));
		if (!s.py_stack.empty())
			ev.m(kEvAnnotations,
			     Pb().u(kDaNameIid, seq_.annotation("python"))
				     .u(kDaStringIid, seq_.string(s.py_stack.json())));
	}

	Sequence &seq_;
	Tracks &tracks_;
	uint64_t thread_;
	std::map<std::string, std::vector<std::pair<uint64_t, uint64_t>>>
		open_; // layer -> (end, track), innermost last
};

void write_counters(const Recording &rec, Sequence &seq, Tracks &tracks)
{
	std::vector<size_t> order(rec.metrics.size());
	std::iota(order.begin(), order.end(), 0);
	std::stable_sort(order.begin(), order.end(),
			 [&](size_t a, size_t b) { return rec.metrics[a].ts_ns < rec.metrics[b].ts_ns; });
	for (size_t i : order) {
		const Metric &m = rec.metrics[i];
		// As the JSON groups them: a process's counters under it, the
		// others under a track per layer and key.
		uint64_t parent = m.pid ? tracks.process(m.pid)
					: tracks.child(0, m.key.empty() ? m.layer : m.layer + " " + m.key);
		std::string name = m.pid && !m.key.empty() ? m.name + " " + m.key : m.name;
		Pb ev;
		ev.u(kEvType, kCounter)
			.u(kEvTrackUuid, tracks.child(parent, name, true))
			.u(kEvCategoryIids, seq.category(m.layer));
		// Most are counts: an integer as a varint, not 8 bytes.
		if (m.value == std::trunc(m.value) && std::fabs(m.value) < 9e15 && !std::signbit(m.value))
			ev.u(kEvCounterValue, static_cast<uint64_t>(m.value));
		else
			ev.d(kEvDoubleCounter, m.value);
		seq.event(m.ts_ns, ev);
	}
}

// Events and anomalies, as instants in time order.
void write_instants(const Recording &rec, Sequence &seq, Tracks &tracks)
{
	struct Instant {
		uint64_t ts;
		const Event *e;
		const Anomaly *a;
	};
	std::vector<Instant> all;
	for (const Event &e : rec.events)
		all.push_back({e.ts_ns, &e, nullptr});
	for (const Anomaly &a : rec.anomalies)
		all.push_back({a.ts_ns, nullptr, &a});
	std::stable_sort(all.begin(), all.end(), [](const Instant &x, const Instant &y) { return x.ts < y.ts; });
	for (const Instant &i : all) {
		Pb ev;
		ev.u(kEvType, kInstant);
		if (const Event *e = i.e) {
			ev.u(kEvTrackUuid,
			     e->pid ? tracks.thread(e->pid, e->tid ? e->tid : e->pid) : tracks.child(0, "events"))
				.u(kEvNameIid, seq.name(e->name))
				.u(kEvCategoryIids, seq.category(e->layer));
			if (e->args.is_object())
				for (auto it = e->args.begin(); it != e->args.end(); ++it)
					ev.m(kEvAnnotations, annotation(seq, it.key(), *it));
			if (!e->key.empty())
				ev.m(kEvAnnotations, annotation(seq, "key", e->key));
		} else {
			const Anomaly &a = *i.a;
			ev.u(kEvTrackUuid, tracks.thread(a.pid, a.tid ? a.tid : a.pid))
				.u(kEvNameIid, seq.name("anomaly: " + a.name))
				.u(kEvCategoryIids, seq.category("anomaly"));
			json args = {{"score", a.score}, {"threshold", a.threshold}, {"dur_ns", a.dur_ns},
				     {"layer", a.layer}, {"causes", a.causes},       {"features", a.features}};
			if (!a.causes.empty() && a.causes[0].contains("what"))
				args["cause"] = a.causes[0]["what"];
			for (auto it = args.begin(); it != args.end(); ++it)
				ev.m(kEvAnnotations, annotation(seq, it.key(), *it));
		}
		seq.event(i.ts, ev);
	}
}

Result<void> write_all(const Recording &rec, const SpanFeed &spans, const CollectiveMarks &marks, std::ostream &out)
{
	uint32_t next_seq = 1;
	Sequence descriptors(next_seq++, out);
	Tracks tracks(descriptors, rec, marks);
	for (const Process &p : rec.processes)
		tracks.process(p.pid);
	for (const Thread &t : rec.threads)
		tracks.thread(t.pid, t.tid);
	std::vector<Issue> issues;
	std::unique_ptr<Sequence> seq;
	std::unique_ptr<ThreadWriter> thread;
	std::pair<uint32_t, uint32_t> at{0, 0};
	auto r = spans([&](const Span &s) {
		if (!thread || at != std::pair(s.pid, s.tid)) {
			thread.reset(); // its last slices end first, on its sequence
			seq = std::make_unique<Sequence>(next_seq++, out);
			thread = std::make_unique<ThreadWriter>(*seq, tracks, s.pid, s.tid);
			at = {s.pid, s.tid};
		}
		thread->span(s, marks.find(s), issues);
	});
	thread.reset();
	if (!r)
		return r;
	Sequence counters(next_seq++, out);
	write_counters(rec, counters, tracks);
	Sequence instants(next_seq++, out);
	write_instants(rec, instants, tracks);
	std::stable_sort(issues.begin(), issues.end(), [](const Issue &a, const Issue &b) { return a.ts < b.ts; });
	Sequence issued(next_seq++, out);
	for (const Issue &i : issues)
		issued.event(i.ts,
			     Pb().u(kEvType, kInstant)
				     .u(kEvTrackUuid, tracks.thread(i.pid, i.tid))
				     .u(kEvNameIid, issued.name("issued"))
				     .u(kEvCategoryIids, issued.category("issue"))
				     .fixed(kEvFlowIds, i.flow));
	return {};
}

} // namespace

Result<TraceFormat> trace_format_of(const std::string &path)
{
	auto ends = [&](std::string_view ext) {
		return path.size() > ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0;
	};
	if (ends(".json"))
		return TraceFormat::Json;
	if (ends(".pftrace") || ends(".perfetto-trace") || ends(".pb"))
		return TraceFormat::Proto;
	return make_error(
		ErrorKind::BadInput,
		"cannot tell the trace format of " + path +
			": name it .pftrace (Perfetto's own format, compact) or .json (Chrome's trace-event JSON)");
}

Result<void> write_pftrace(const Recording &rec, const std::string &path, const SpanFeed &spans,
			   const SpanFeed &collectives)
{
	auto marks = collective_marks(collectives);
	if (!marks)
		return marks.error();
	return write_file_atomic(path, [&](std::ostream &out) { return write_all(rec, spans, *marks, out); });
}

} // namespace eacgm
