// SPDX-License-Identifier: Apache-2.0
// The native Perfetto trace (export/pftrace.h), read back by a decoder of
// this test's own (the protobuf wire format, and Perfetto's rules for
// sequences): every span is one slice with its exact times, names and
// arguments, every metric one counter value, every event and anomaly one
// instant; every packet is on a sequence that cleared its state first,
// every interned id and track is defined before it is used, slices nest on
// their tracks, and each flow begins and ends.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <set>

#include "export/pftrace.h"

using namespace eacgm;
using nlohmann::json;

namespace {

struct Field {
	uint32_t num = 0;
	int wire = 0;
	uint64_t v = 0;         // varint and fixed64
	std::string_view bytes; // length-delimited
};

// The fields of a message; a malformed one fails the test.
std::vector<Field> fields(std::string_view m)
{
	std::vector<Field> out;
	size_t i = 0;
	auto varint = [&](uint64_t &v) {
		v = 0;
		for (int shift = 0; i < m.size() && shift < 64; shift += 7) {
			uint8_t b = m[i++];
			v |= uint64_t(b & 0x7f) << shift;
			if (!(b & 0x80))
				return true;
		}
		return false;
	};
	while (i < m.size()) {
		uint64_t key;
		Field f;
		if (!varint(key)) {
			ADD_FAILURE() << "a truncated key";
			return out;
		}
		f.num = uint32_t(key >> 3);
		f.wire = int(key & 7);
		if (f.wire == 0 && !varint(f.v)) {
			ADD_FAILURE() << "a truncated varint";
			return out;
		} else if (f.wire == 1) {
			if (i + 8 > m.size()) {
				ADD_FAILURE() << "a truncated fixed64";
				return out;
			}
			std::memcpy(&f.v, m.data() + i, 8);
			i += 8;
		} else if (f.wire == 2) {
			uint64_t n;
			if (!varint(n) || i + n > m.size()) {
				ADD_FAILURE() << "a truncated length";
				return out;
			}
			f.bytes = m.substr(i, n);
			i += n;
		} else if (f.wire != 0) {
			ADD_FAILURE() << "wire type " << f.wire;
			return out;
		}
		out.push_back(f);
	}
	return out;
}

const Field *get(const std::vector<Field> &fs, uint32_t num)
{
	for (const Field &f : fs)
		if (f.num == num)
			return &f;
	return nullptr;
}

std::vector<const Field *> all(const std::vector<Field> &fs, uint32_t num)
{
	std::vector<const Field *> out;
	for (const Field &f : fs)
		if (f.num == num)
			out.push_back(&f);
	return out;
}

struct Slice {
	uint64_t track, start, end = 0;
	std::string name, category;
	json args = json::object();
	std::vector<uint64_t> flows, terminating;
};

// What the trace holds, as a reader that keeps Perfetto's rules makes it.
struct Decoded {
	std::vector<Slice> slices, instants;
	std::vector<std::tuple<uint64_t, uint64_t, double>> counters; // track, ts, value
	struct Track {
		uint64_t parent = 0;
		std::string name;
		int64_t pid = -1, tid = -1;
		bool counter = false;
	};
	std::map<uint64_t, Track> tracks;
	size_t sequences = 0;
};

struct SeqState {
	bool cleared = false;
	uint64_t clock = 0;                                           // the sequence clock (id 64), absolute
	std::map<uint32_t, std::map<uint64_t, std::string>> interned; // InternedData field -> iid -> text
	std::map<uint64_t, std::vector<Slice>> open;                  // per track
};

std::string interned(SeqState &st, uint32_t field, uint64_t iid)
{
	auto &m = st.interned[field];
	auto it = m.find(iid);
	EXPECT_NE(it, m.end()) << "interned id " << iid << " (InternedData field " << field << ") used before defined";
	return it == m.end() ? "" : it->second;
}

json annotation_value(SeqState &st, const std::vector<Field> &a)
{
	if (auto *f = get(a, 3))
		return f->v;
	if (auto *f = get(a, 4))
		return int64_t(f->v);
	if (auto *f = get(a, 2))
		return f->v != 0;
	if (auto *f = get(a, 5)) {
		double d;
		std::memcpy(&d, &f->v, 8);
		return d;
	}
	if (auto *f = get(a, 17))
		return interned(st, 29, f->v);
	if (auto *f = get(a, 9))
		return json::parse(f->bytes);
	ADD_FAILURE() << "an annotation without a value";
	return nullptr;
}

void track_event(Decoded &d, SeqState &st, uint64_t ts, const std::vector<Field> &ev)
{
	const Field *type = get(ev, 9), *track = get(ev, 11);
	ASSERT_TRUE(type && track) << "a track event without type or track";
	ASSERT_TRUE(d.tracks.count(track->v)) << "track " << track->v << " used before its descriptor";
	if (type->v == 2) { // end: of the innermost open slice of the track
		auto &open = st.open[track->v];
		ASSERT_FALSE(open.empty()) << "an end without a begin on track " << track->v;
		open.back().end = ts;
		EXPECT_GE(ts, open.back().start);
		d.slices.push_back(std::move(open.back()));
		open.pop_back();
		return;
	}
	if (type->v == 4) {
		double v;
		if (const Field *i = get(ev, 30)) {
			v = double(int64_t(i->v));
		} else {
			const Field *value = get(ev, 44);
			ASSERT_TRUE(value) << "a counter without a value";
			std::memcpy(&v, &value->v, 8);
		}
		EXPECT_TRUE(d.tracks[track->v].counter);
		d.counters.emplace_back(track->v, ts, v);
		return;
	}
	Slice s{track->v, ts};
	if (auto *n = get(ev, 10))
		s.name = interned(st, 2, n->v);
	if (auto *c = get(ev, 3))
		s.category = interned(st, 1, c->v);
	for (const Field *a : all(ev, 4)) {
		auto af = fields(a->bytes);
		const Field *name = get(af, 1);
		ASSERT_TRUE(name) << "an annotation without an interned name";
		s.args[interned(st, 3, name->v)] = annotation_value(st, af);
	}
	for (const Field *f : all(ev, 47))
		s.flows.push_back(f->v);
	for (const Field *f : all(ev, 48))
		s.terminating.push_back(f->v);
	if (type->v == 1)
		st.open[track->v].push_back(std::move(s));
	else
		d.instants.push_back(std::move(s));
}

void packet(Decoded &d, std::map<uint64_t, SeqState> &seqs, std::string_view bytes)
{
	auto p = fields(bytes);
	const Field *seq = get(p, 10);
	ASSERT_TRUE(seq) << "a packet without trusted_packet_sequence_id";
	SeqState &st = seqs[seq->v];
	const Field *flags = get(p, 13);
	if (flags && (flags->v & 1)) {
		st = SeqState{};
		st.cleared = true;
	}
	if (const Field *td = get(p, 60)) { // needs no state
		auto f = fields(td->bytes);
		Decoded::Track t;
		const Field *uuid = get(f, 1);
		ASSERT_TRUE(uuid);
		ASSERT_FALSE(d.tracks.count(uuid->v)) << "track " << uuid->v << " described twice";
		if (auto *x = get(f, 5))
			t.parent = x->v;
		if (auto *x = get(f, 2))
			t.name = std::string(x->bytes);
		if (auto *x = get(f, 3))
			t.pid = int64_t(get(fields(x->bytes), 1)->v);
		if (auto *x = get(f, 4)) {
			auto th = fields(x->bytes);
			t.pid = int64_t(get(th, 1)->v);
			t.tid = int64_t(get(th, 2)->v);
		}
		t.counter = get(f, 8) != nullptr;
		d.tracks[uuid->v] = t;
		return;
	}
	ASSERT_TRUE(st.cleared) << "sequence " << seq->v << " used before it cleared its state";
	ASSERT_TRUE(flags && (flags->v & 2))
		<< "a packet using the sequence's state without SEQ_NEEDS_INCREMENTAL_STATE";
	if (const Field *cs = get(p, 6)) {
		bool incremental = false;
		const auto snapshot = fields(cs->bytes);
		for (const Field *c : all(snapshot, 1)) {
			auto cf = fields(c->bytes);
			if (get(cf, 1)->v == 64) {
				st.clock = get(cf, 2)->v;
				incremental = get(cf, 3) && get(cf, 3)->v;
			}
		}
		EXPECT_TRUE(incremental);
		ASSERT_TRUE(get(p, 59)) << "no defaults naming the sequence's clock";
		EXPECT_EQ(get(fields(get(p, 59)->bytes), 58)->v, 64u);
		return;
	}
	if (const Field *id = get(p, 12))
		for (const Field &entry : fields(id->bytes)) {
			auto e = fields(entry.bytes);
			auto [it, fresh] = st.interned[entry.num].emplace(get(e, 1)->v, std::string(get(e, 2)->bytes));
			EXPECT_TRUE(fresh) << "interned id " << get(e, 1)->v << " defined twice";
		}
	const Field *ts = get(p, 8);
	ASSERT_TRUE(ts);
	ASSERT_FALSE(get(p, 58)) << "an event off the sequence's clock";
	st.clock += ts->v;
	if (const Field *ev = get(p, 11))
		track_event(d, st, st.clock, fields(ev->bytes));
}

Decoded decode(const std::string &trace)
{
	Decoded d;
	std::map<uint64_t, SeqState> seqs;
	for (const Field &f : fields(trace)) {
		EXPECT_EQ(f.num, 1u);
		EXPECT_EQ(f.wire, 2);
		packet(d, seqs, f.bytes);
	}
	for (auto &[id, st] : seqs)
		for (auto &[track, open] : st.open)
			EXPECT_TRUE(open.empty()) << open.size() << " slices never ended on track " << track;
	d.sequences = seqs.size();
	return d;
}

Span span(uint32_t tid, std::string layer, std::string name, uint64_t start, uint64_t dur, json args = json::object())
{
	return Span{.start_ns = start,
		    .dur_ns = dur,
		    .pid = 100,
		    .tid = tid,
		    .layer = std::move(layer),
		    .name = std::move(name),
		    .args = std::move(args)};
}

Recording sample()
{
	Recording rec;
	rec.processes = {{.pid = 100, .ppid = 1, .comm = "python3"}, {.pid = 200, .ppid = 1, .comm = "python3"}};
	rec.threads = {{100, 100, "main"}, {100, 101, "gloo"}};
	// Thread 100: python layer (sampled) overlapping the torch layer at its
	// edge, torch calls nested three deep, two ending together, one of no
	// length; thread 101: a call that ran work thread 100 issued.
	rec.spans = {
		span(100, "python", "step", 1'000, 9'000, {{"samples", 9}}),
		span(100, "torch", "aten::linear", 2'000, 9'500, {{"in0", "float32[8, 32]"}}),
		span(100, "torch", "aten::addmm", 3'000, 9'000, {{"in0", "float32[8, 32]"}, {"alpha", 1.5}}),
		span(100, "torch", "aten::mm", 3'000, 0),
		span(100, "torch", "aten::relu", 12'000, 1'000, {{"x", -3}, {"grid", {1, 2, 3}}}),
		span(101, "gloo", "allreduce", 4'000, 2'000,
		     {{"issued_ns", 2'500}, {"issued_tid", 100}, {"seq", 0}, {"rank", 0}, {"nranks", 1}}),
	};
	rec.spans[1].py_stack = PyStack{"forward (m.py:3)", "<module> (t.py:1)"};
	rec.spans[1].ret_name = "ok";
	rec.spans[2].bytes = 4096;
	rec.spans[2].ret = -1;
	rec.metrics = {{5'000, "host", "cpu_pct", "", 0, 12.5}, // a double, and (below) integers as counts
		       {5'500, "host", "neg", "", 0, -2},
		       {5'000, "host", "rss", "", 100, 1e9},
		       {6'000, "host", "cpu_pct", "", 0, 13.0},
		       {6'000, "gpu", "util", "gpu0", 0, 99}};
	rec.events = {{.ts_ns = 7'000, .layer = "budget", .name = "throttle", .pid = 100, .args = {{"pct", 2}}},
		      {.ts_ns = 8'000, .layer = "host", .name = "note"}};
	rec.anomalies = {{.ts_ns = 3'000,
			  .dur_ns = 8'500,
			  .pid = 100,
			  .tid = 100,
			  .layer = "torch",
			  .name = "aten::addmm",
			  .score = -20,
			  .threshold = -7,
			  .features = {{"log_duration", 9.0}},
			  .causes = json::array({{{"what", "operator_slow"}}})}};
	return rec;
}

std::string write(const Recording &rec, const std::string &name)
{
	const std::string path = testing::TempDir() + "/" + name;
	auto feed = [&](const SpanVisit &v) {
		std::vector<const Span *> order;
		for (const Span &s : rec.spans)
			order.push_back(&s);
		std::stable_sort(order.begin(), order.end(), [](const Span *x, const Span *y) {
			return std::tie(x->pid, x->tid, x->start_ns, y->dur_ns, x->depth) <
				std::tie(y->pid, y->tid, y->start_ns, x->dur_ns, y->depth);
		});
		for (const Span *s : order)
			v(*s);
		return Result<void>();
	};
	auto r = write_pftrace(rec, path, feed, feed);
	EXPECT_TRUE(r) << r.error().message;
	std::ifstream in(path, std::ios::binary);
	return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

} // namespace

TEST(Pftrace, EverySpanIsOneSliceWithItsTimesNamesAndArgs)
{
	const Recording rec = sample();
	Decoded d = decode(write(rec, "sample.pftrace"));
	ASSERT_EQ(d.slices.size(), rec.spans.size());
	// Each slice's track is a layer's under its thread's.
	std::multiset<std::tuple<int64_t, int64_t, std::string, std::string, uint64_t, uint64_t>> got, want;
	for (const Slice &s : d.slices) {
		const auto &layer = d.tracks[s.track];
		const auto &thread = d.tracks[layer.parent];
		EXPECT_EQ(layer.name, s.category);
		got.emplace(thread.pid, thread.tid, layer.name, s.name, s.start, s.end);
	}
	for (const Span &s : rec.spans)
		want.emplace(s.pid, s.tid, s.layer, s.name, s.start_ns,
			     // the torch calls that outlast their parent end with it
			     s.name == "aten::addmm" ? 11'500 : s.start_ns + s.dur_ns);
	EXPECT_EQ(got, want);
	auto find = [&](const std::string &name) {
		return *std::find_if(d.slices.begin(), d.slices.end(), [&](const Slice &s) { return s.name == name; });
	};
	EXPECT_EQ(find("aten::linear").args,
		  json({{"in0", "float32[8, 32]"}, {"ret", "ok"}, {"python", rec.spans[1].py_stack.json()}}));
	EXPECT_EQ(find("aten::addmm").args,
		  json({{"in0", "float32[8, 32]"}, {"alpha", 1.5}, {"ret", -1}, {"bytes", 4096}}));
	EXPECT_EQ(find("aten::relu").args, json({{"x", -3}, {"grid", {1, 2, 3}}})); // a return of 0 is left out
}

TEST(Pftrace, MetricsAreCountersAndEventsInstantsAndFlowsEnd)
{
	const Recording rec = sample();
	Decoded d = decode(write(rec, "sample2.pftrace"));
	std::multiset<std::tuple<std::string, uint64_t, double>> got, want;
	for (auto [track, ts, v] : d.counters)
		got.emplace(d.tracks[track].name, ts, v);
	want = {{"cpu_pct", 5'000, 12.5},
		{"neg", 5'500, -2},
		{"rss", 5'000, 1e9},
		{"cpu_pct", 6'000, 13.0},
		{"util", 6'000, 99}};
	EXPECT_EQ(got, want);
	// The process's counter under its process, the others under their layer (and key).
	for (auto [track, ts, v] : d.counters) {
		const auto &parent = d.tracks[d.tracks[track].parent];
		EXPECT_TRUE(parent.name == "host" || parent.name == "gpu gpu0" || parent.pid == 100) << parent.name;
	}
	// An event, an anomaly, and the issue of the gloo call.
	ASSERT_EQ(d.instants.size(), 4u);
	std::set<std::string> names;
	for (const Slice &s : d.instants)
		names.insert(s.name);
	EXPECT_EQ(names, (std::set<std::string>{"throttle", "note", "anomaly: aten::addmm", "issued"}));
	const Slice &issued =
		*std::find_if(d.instants.begin(), d.instants.end(), [](const Slice &s) { return s.name == "issued"; });
	EXPECT_EQ(issued.start, 2'500u);
	EXPECT_EQ(d.tracks[issued.track].tid, 100);
	const Slice &gloo =
		*std::find_if(d.slices.begin(), d.slices.end(), [](const Slice &s) { return s.name == "allreduce"; });
	ASSERT_EQ(issued.flows.size(), 1u);
	EXPECT_EQ(gloo.terminating, issued.flows);
	// A sequence per thread, the descriptors', the counters', the instants' and the issues'.
	EXPECT_EQ(d.sequences, 2u + 4u);
}

TEST(Pftrace, ACollectiveRoundIsOneFlowInTheOrderTheRanksArrived)
{
	Recording rec;
	rec.processes = {{.pid = 1, .comm = "r0"}, {.pid = 2, .comm = "r1"}, {.pid = 3, .comm = "r2"}};
	for (uint32_t rank = 0; rank < 3; rank++) {
		Span s = span(rank + 1, "gloo", "allreduce", 1'000 + 100 * (2 - rank), 500,
			      {{"seq", 7}, {"rank", rank}, {"nranks", 3}});
		s.pid = rank + 1;
		rec.spans.push_back(s);
	}
	Decoded d = decode(write(rec, "round.pftrace"));
	ASSERT_EQ(d.slices.size(), 3u);
	std::sort(d.slices.begin(), d.slices.end(), [](auto &a, auto &b) { return a.start < b.start; });
	// Rank 2 arrived first, then 1, then 0: the flow goes 2 -> 1 -> 0.
	EXPECT_EQ(d.slices[0].flows.size(), 1u);
	EXPECT_EQ(d.slices[1].flows, d.slices[0].flows);
	EXPECT_EQ(d.slices[2].terminating, d.slices[0].flows);
	EXPECT_TRUE(d.slices[2].flows.empty());
	EXPECT_EQ(d.slices[0].args["last_rank"], 0);
	EXPECT_DOUBLE_EQ(d.slices[0].args["arrival_skew_ms"].get<double>(), 0.0002);
}

TEST(Pftrace, TheFormatFollowsTheExtension)
{
	EXPECT_EQ(trace_format_of("a/b.json").value(), TraceFormat::Json);
	EXPECT_EQ(trace_format_of("run.pftrace").value(), TraceFormat::Proto);
	EXPECT_EQ(trace_format_of("run.perfetto-trace").value(), TraceFormat::Proto);
	auto bad = trace_format_of("run.trace");
	ASSERT_FALSE(bad);
	EXPECT_NE(bad.error().message.find("name it .pftrace"), std::string::npos);
	EXPECT_EQ(bad.error().kind, ErrorKind::BadInput);
	EXPECT_FALSE(trace_format_of(".json"));
}
