// SPDX-License-Identifier: Apache-2.0
// Collectives across ranks (pipeline/collectives.h): rounds matched by
// sequence number with their exact skew and last rank, incomplete rounds,
// the online bounds; and what the summary, the trace and the metrics make
// of them.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "export/metrics.h"
#include "export/perfetto.h"
#include "export/summary.h"
#include "pipeline/collectives.h"
#include "pipeline/intern.h"
#include "recording_writer.h"
#include "sinks/metrics.h"
#include "store/store.h"

using namespace eacgm;
using nlohmann::json;

namespace {

// Rank `rank` of a group of `nranks` in collective `seq`, on its own
// process (pid 100 + rank), from start to start + dur.
Span coll(uint32_t rank, uint64_t seq, uint64_t start, uint64_t dur, uint32_t nranks = 3,
	  const std::string &name = "allreduce")
{
	Span s{.start_ns = start, .dur_ns = dur, .pid = 100 + rank, .tid = 200 + rank, .layer = "gloo", .name = name};
	s.args = {{"rank", rank}, {"nranks", nranks}, {"seq", seq}, {"count", 1000}};
	return s;
}

std::vector<uint32_t> ranks_of(const Round &r)
{
	std::vector<uint32_t> out;
	for (const Arrival &a : r.arrivals)
		out.push_back(a.rank);
	return out;
}

} // namespace

TEST(Collectives, ExactSkewLastRankAndEnds)
{
	CollectiveMatcher m;
	std::vector<Round> done;
	EXPECT_TRUE(m.add(coll(0, 7, 1000, 900), done));
	EXPECT_TRUE(m.add(coll(2, 7, 1500, 410), done));
	EXPECT_TRUE(done.empty()); // rank 1 not seen yet
	EXPECT_TRUE(m.add(coll(1, 7, 1200, 700), done));
	ASSERT_EQ(done.size(), 1u);
	const Round &r = done[0];
	EXPECT_EQ(r.key, (CollectiveKey{.layer = "gloo", .nranks = 3, .seq = 7, .name = "allreduce"}));
	EXPECT_TRUE(r.complete());
	EXPECT_EQ(ranks_of(r), (std::vector<uint32_t>{0, 1, 2})); // by arrival
	EXPECT_EQ(r.skew_ns(), 500u);
	EXPECT_EQ(r.last().rank, 2u);
	EXPECT_EQ(r.last().pid, 102u);
	EXPECT_EQ(r.last().tid, 202u);
	EXPECT_EQ(r.arrivals[0].end_ns, 1900u);
	EXPECT_EQ(r.arrivals[2].end_ns, 1910u);
	EXPECT_EQ(m.open(), 0u);
}

TEST(Collectives, OnlySpansWithARankInAGroupOfTwoOrMore)
{
	CollectiveMatcher m;
	std::vector<Round> done;
	Span no_seq = coll(0, 1, 10, 1);
	no_seq.args.erase("seq");
	Span unknown_rank = coll(0, 1, 10, 1);
	unknown_rank.args["rank"] = -1; // the nccl layer's before its communicator's init
	Span text_seq = coll(0, 1, 10, 1);
	text_seq.args["seq"] = "1";
	for (const Span &s : {no_seq, unknown_rank, text_seq, coll(0, 1, 10, 1, 1), coll(3, 1, 10, 1, 3), Span{}})
		EXPECT_FALSE(m.add(s, done)) << s.args.dump();
	EXPECT_EQ(m.open(), 0u);
	EXPECT_TRUE(done.empty());
}

TEST(Collectives, KeyIsLayerGroupSizeSeqAndName)
{
	// Same seq, another name or group size: other rounds.
	auto rounds = match_collectives({coll(0, 4, 10, 5), coll(1, 4, 20, 5, 3, "broadcast"), coll(0, 4, 30, 5, 2),
					 coll(1, 4, 40, 5, 2), coll(2, 4, 50, 5), coll(1, 4, 60, 5)});
	ASSERT_EQ(rounds.size(), 3u);
	EXPECT_EQ(rounds[0].key.name, "allreduce");
	EXPECT_EQ(rounds[0].key.nranks, 3u);
	EXPECT_EQ(ranks_of(rounds[0]), (std::vector<uint32_t>{0, 2, 1}));
	EXPECT_EQ(rounds[0].skew_ns(), 50u);
	EXPECT_EQ(rounds[1].key.name, "broadcast");
	EXPECT_FALSE(rounds[1].complete());
	EXPECT_EQ(rounds[2].key.nranks, 2u);
	EXPECT_TRUE(rounds[2].complete());
	EXPECT_EQ(rounds[2].last().rank, 1u);
}

TEST(Collectives, IncompleteRoundsComeOutAtTheEnd)
{
	CollectiveMatcher m;
	std::vector<Round> done;
	m.add(coll(1, 0, 100, 5), done);
	m.add(coll(0, 0, 50, 5), done);
	m.add(coll(2, 1, 300, 5), done);
	EXPECT_TRUE(done.empty());
	EXPECT_EQ(m.open(), 2u);
	m.finish(done);
	ASSERT_EQ(done.size(), 2u);
	EXPECT_EQ(done[0].key.seq, 0u); // oldest first
	EXPECT_FALSE(done[0].complete());
	EXPECT_EQ(ranks_of(done[0]), (std::vector<uint32_t>{0, 1}));
	EXPECT_EQ(done[0].skew_ns(), 50u); // of the ranks seen
	EXPECT_EQ(ranks_of(done[1]), (std::vector<uint32_t>{2}));
	EXPECT_EQ(done[1].skew_ns(), 0u);
	EXPECT_EQ(m.open(), 0u);
	EXPECT_EQ(m.evicted(), 0u);
}

TEST(Collectives, ARankSeenAgainOpensAnotherRound)
{
	// Two groups of two, ranks numbered alike, the same seq: two whole
	// rounds, the first rank 1 joining the oldest.
	auto rounds = match_collectives(
		{coll(0, 5, 10, 1, 2), coll(0, 5, 20, 1, 2), coll(1, 5, 30, 1, 2), coll(1, 5, 45, 1, 2)});
	ASSERT_EQ(rounds.size(), 2u);
	EXPECT_TRUE(rounds[0].complete());
	EXPECT_TRUE(rounds[1].complete());
	EXPECT_EQ(rounds[0].skew_ns(), 20u);
	EXPECT_EQ(rounds[1].skew_ns(), 25u);
}

TEST(Collectives, OnlineWindowEvictsRoundsWaitingTooLong)
{
	CollectiveMatcher m({.window_ns = 1000, .max_open = 0});
	std::vector<Round> done;
	m.add(coll(0, 0, 0, 5, 2), done); // rank 1 never comes
	m.add(coll(0, 1, 1000, 5, 2), done);
	EXPECT_TRUE(done.empty()); // 1000 ns old: not past the window
	m.add(coll(1, 1, 1001, 5, 2), done);
	ASSERT_EQ(done.size(), 2u);
	EXPECT_TRUE(done[0].complete()); // seq 1, completed by this span
	EXPECT_EQ(done[1].key.seq, 0u);  // seq 0, 1001 ns old
	EXPECT_FALSE(done[1].complete());
	EXPECT_EQ(m.evicted(), 1u);
	EXPECT_EQ(m.open(), 0u);
}

TEST(Collectives, OnlineCapBoundsTheOpenRounds)
{
	CollectiveMatcher m({.window_ns = 0, .max_open = 3});
	std::vector<Round> done;
	for (uint64_t seq = 0; seq < 10; seq++) {
		m.add(coll(0, seq, seq * 10, 5, 4), done); // ranks 1-3 run elsewhere
		EXPECT_LE(m.open(), 3u);
	}
	ASSERT_EQ(done.size(), 7u);
	for (uint64_t seq = 0; seq < 7; seq++) {
		EXPECT_EQ(done[seq].key.seq, seq); // the oldest go first
		EXPECT_FALSE(done[seq].complete());
	}
	EXPECT_EQ(m.evicted(), 7u);
	m.finish(done);
	EXPECT_EQ(done.size(), 10u);
	EXPECT_EQ(m.evicted(), 7u);
}

TEST(Stragglers, LargestSkewsAndLastCounts)
{
	StragglerTally t(2);
	for (const Round &r : match_collectives({coll(0, 0, 0, 9, 2), coll(1, 0, 300, 9, 2),     // 300, rank 1
						 coll(0, 1, 1000, 9, 2), coll(1, 1, 1100, 9, 2), // 100, rank 1
						 coll(1, 2, 2000, 9, 2), coll(0, 2, 2500, 9, 2), // 500, rank 0
						 coll(0, 3, 3000, 9, 2)}))                       // incomplete
		t.add(r);
	EXPECT_EQ(t.rounds(), 4u);
	EXPECT_EQ(t.complete(), 3u);
	EXPECT_EQ(t.skews(), (std::vector<uint64_t>{100, 300, 500}));
	auto top = t.largest();
	ASSERT_EQ(top.size(), 2u);
	EXPECT_EQ(top[0].key.seq, 2u);
	EXPECT_EQ(top[1].key.seq, 0u);
	EXPECT_EQ(t.last_counts(),
		  (std::map<std::pair<std::string, uint32_t>, uint64_t>{{{"gloo", 0}, 1}, {{"gloo", 1}, 2}}));
}

TEST(Stragglers, SummarySection)
{
	Recording r;
	// seq 0: rank 2 arrives 200 ms after rank 0; seq 1: rank 0 40 µs
	// after the others; seq 2: rank 2 never seen.
	r.spans = {coll(0, 0, 1'000'000, 200'500'000), coll(1, 0, 1'100'000, 200'400'000),
		   coll(2, 0, 201'000'000, 500'000),   coll(1, 1, 300'000'000, 100'000),
		   coll(2, 1, 300'010'000, 90'000),    coll(0, 1, 300'040'000, 60'000),
		   coll(0, 2, 400'000'000, 10'000),    coll(1, 2, 400'000'000, 10'000)};
	std::string text = format_summary(r);
	const std::string want = "\ncollectives across ranks: 3 rounds, 2 with every rank seen; arrival skew p50 "
				 "40.0 µs, max 200 ms\n"
				 "  1 without every rank (ranks this recording does not see: eacgm merge joins the "
				 "recordings of every node)\n"
				 "  largest arrival skew             seq  ranks      skew  last rank\n"
				 "  gloo allreduce                     0      3    200 ms          2\n"
				 "  gloo allreduce                     1      3   40.0 µs          0\n"
				 "  arrived last: gloo rank 0 x1, gloo rank 2 x1\n";
	EXPECT_NE(text.find(want), std::string::npos) << text;
	// Spans of no collective: no section.
	EXPECT_EQ(format_summary(Recording{}).find("collectives across ranks"), std::string::npos);
}

TEST(Stragglers, TraceMarksRoundsAndLinksThemInArrivalOrder)
{
	Recording r;
	r.processes = {{.pid = 100, .comm = "python3"},
		       {.pid = 101, .comm = "python3"},
		       {.pid = 102, .comm = "python3"},
		       {.pid = 300, .comm = "sh"}};
	r.spans = {coll(0, 0, 1000, 3000), coll(2, 0, 1500, 2500), coll(1, 0, 2000, 2000), // all three
		   coll(0, 1, 9000, 100),                                                  // alone: unmarked
		   Span{.start_ns = 1000, .dur_ns = 1, .pid = 100, .tid = 200, .layer = "torch", .name = "x"}};
	json doc = json::parse(perfetto_json(r));
	std::map<std::pair<uint32_t, std::string>, json> x; // (pid, name) -> event
	std::map<uint32_t, std::string> names;
	for (const json &e : doc.at("traceEvents")) {
		if (e.at("ph") == "X" && !(e.at("name") == "allreduce" && e.at("args").at("seq") == 1))
			x[{e.at("pid").get<uint32_t>(), e.at("name").get<std::string>()}] = e;
		if (e.at("ph") == "M" && e.at("name") == "process_name")
			names[e.at("pid").get<uint32_t>()] = e.at("args").at("name");
	}
	const json &r0 = x.at({100, "allreduce"}), &r2 = x.at({102, "allreduce"}), &r1 = x.at({101, "allreduce"});
	for (const json *e : {&r0, &r1, &r2}) {
		EXPECT_EQ(e->at("args").at("arrival_skew_ms"), 0.001);
		EXPECT_EQ(e->at("args").at("last_rank"), 1);
		EXPECT_FALSE(e->at("args").contains("ranks_seen"));
		EXPECT_EQ(e->at("bind_id"), r0.at("bind_id"));
	}
	// rank 0 arrived first, then 2, then 1: out; in and out; in.
	EXPECT_EQ(std::make_pair(r0.value("flow_in", false), r0.value("flow_out", false)), std::make_pair(false, true));
	EXPECT_EQ(std::make_pair(r2.value("flow_in", false), r2.value("flow_out", false)), std::make_pair(true, true));
	EXPECT_EQ(std::make_pair(r1.value("flow_in", false), r1.value("flow_out", false)), std::make_pair(true, false));
	// The torch span starting with rank 0's collective is not marked.
	EXPECT_FALSE(x.at({100, "x"}).contains("bind_id"));
	EXPECT_FALSE(x.at({100, "x"}).at("args").contains("last_rank"));
	EXPECT_EQ(names,
		  (std::map<uint32_t, std::string>{{100, "python3 (100) rank 0"},
						   {101, "python3 (101) rank 1"},
						   {102, "python3 (102) rank 2"},
						   {300, "sh (300)"}}));
}

TEST(Stragglers, MergedProcessesNamedByHostAndOriginalPid)
{
	Recording r;
	r.meta[kProcessOriginsMeta] = R"({"10000101": {"host": "node1", "pid": 101, "input": 1}})";
	r.processes = {{.pid = 100, .comm = "python3"}, {.pid = 10000101, .comm = "python3"}};
	Span one = coll(1, 0, 50, 10, 2);
	one.pid = one.tid = 10000101;
	r.spans = {coll(0, 0, 10, 50, 2), one};
	std::map<uint32_t, std::string> names;
	json doc = json::parse(perfetto_json(r));
	for (const json &e : doc.at("traceEvents"))
		if (e.at("ph") == "M" && e.at("name") == "process_name")
			names[e.at("pid").get<uint32_t>()] = e.at("args").at("name");
	EXPECT_EQ(names,
		  (std::map<uint32_t, std::string>{{100, "python3 (100) rank 0"},
						   {10000101, "python3 (101) node1 rank 1"}}));
}

TEST(Stragglers, Metrics)
{
	MetricsRegistry reg;
	MetricsSink sink(reg);
	SpanBatch b;
	b.spans = {coll(0, 0, 0, 9, 2), coll(1, 0, 3'000'000, 9, 2), // 3 ms, rank 1 last
		   coll(1, 1, 10'000'000, 9, 2)};                    // rank 0 not yet
	ASSERT_TRUE(sink.write(b));
	b.spans = {coll(0, 1, 10'000'020, 9, 2)}; // 20 ns later: rank 0 last
	ASSERT_TRUE(sink.write(b));
	std::string text = reg.render();
	EXPECT_NE(text.find("eacgm_collective_last_arrivals_total{layer=\"gloo\",rank=\"0\"} 1\n"
			    "eacgm_collective_last_arrivals_total{layer=\"gloo\",rank=\"1\"} 1\n"),
		  std::string::npos)
		<< text;
	EXPECT_NE(text.find("eacgm_collective_arrival_skew_seconds_sum{layer=\"gloo\",function=\"allreduce\"} "
			    "0.00300002\n"),
		  std::string::npos)
		<< text;
	EXPECT_NE(text.find("eacgm_collective_arrival_skew_seconds_bucket{layer=\"gloo\",function=\"allreduce\","
			    "le=\"1e-06\"} 1\n"),
		  std::string::npos)
		<< text;
	EXPECT_NE(text.find("eacgm_collective_arrival_skew_seconds_bucket{layer=\"gloo\",function=\"allreduce\","
			    "le=\"0.0025\"} 1\n"),
		  std::string::npos)
		<< text;
	EXPECT_NE(text.find("eacgm_collective_arrival_skew_seconds_count{layer=\"gloo\",function=\"allreduce\"} 2\n"),
		  std::string::npos)
		<< text;
}

TEST(Stragglers, StreamedTraceAndSummaryAsFromMemory)
{
	// A recording's trace and summary from its file (collectives read
	// first, apart: each_span_with_int_args) are those from memory, and
	// the marks are there.
	char tmpl[] = "/tmp/eacgm_collectives_XXXXXX";
	ASSERT_NE(mkdtemp(tmpl), nullptr);
	std::string dir = tmpl, db = dir + "/run.db", trace = dir + "/run.json";
	Recording r;
	r.processes = {{.pid = 100, .comm = "python3"}, {.pid = 101, .comm = "python3"}};
	Span stray = coll(0, 3, 5000, 5, 2);
	stray.args["seq"] = "3"; // not an integer: no collective
	r.spans = {coll(1, 1, 3000, 50, 2),
		   coll(0, 0, 1000, 900, 2),
		   Span{.start_ns = 1000, .pid = 100, .tid = 200},
		   coll(1, 0, 1800, 100, 2),
		   coll(0, 1, 2950, 100, 2),
		   coll(0, 2, 4000, 10, 2),
		   stray};
	test::write_recording(r, db, {{r.spans.begin() + 3, r.spans.end()}, {r.spans.begin(), r.spans.begin() + 3}});
	auto whole = load_recording(db);
	ASSERT_TRUE(whole.ok()) << whole.error().message;

	std::vector<uint64_t> seqs;
	auto reader = RecordingReader::open(db);
	ASSERT_TRUE(reader.ok());
	ASSERT_TRUE(reader->each_span_with_int_args(kCollectiveArgs, [&](const Span &s) {
				  seqs.push_back(s.args.at("seq").get<uint64_t>());
			  }).ok());
	EXPECT_EQ(seqs, (std::vector<uint64_t>{0, 1, 2, 1, 0})); // as stored: the later batch first
	EXPECT_FALSE(reader->each_span_with_int_args({"seq') OR 1 --"}, [](const Span &) {}).ok());

	auto summary = write_trace_and_summary(db, trace);
	ASSERT_TRUE(summary.ok()) << summary.error().message;
	std::ostringstream text;
	text << std::ifstream(trace).rdbuf();
	EXPECT_EQ(text.str(), perfetto_json(*whole));
	EXPECT_EQ(*summary, format_summary(*whole));
	EXPECT_NE(text.str().find("\"arrival_skew_ms\":0.0008,\"count\":1000,\"last_rank\":1"), std::string::npos)
		<< text.str();
	EXPECT_NE(summary->find("collectives across ranks: 3 rounds, 2 with every rank seen"), std::string::npos)
		<< *summary;
	std::filesystem::remove_all(dir);
}

namespace {

std::string text_of(const std::optional<CollectiveSpan> &c)
{
	if (!c)
		return "none";
	return c->key.layer + "/" + c->key.name + " n" + std::to_string(c->key.nranks) + " seq " +
		std::to_string(c->key.seq) + " rank " + std::to_string(c->arrival.rank) + " pid " +
		std::to_string(c->arrival.pid) + " tid " + std::to_string(c->arrival.tid) + " " +
		std::to_string(c->arrival.start_ns) + ".." + std::to_string(c->arrival.end_ns);
}

} // namespace

// A typed span is the collective its Span is (and has its rank), read from
// its slots: over the gloo probes, and a probe that keeps them as other
// types (an enum rank, a u64 seq, no nranks), with values in and out of
// range (negative ranks, groups of one, u64s past int64's range).
TEST(Collectives, TypedSpansAreTheCollectivesTheirSpansAre)
{
	auto gloo = load_builtin_spec("gloo");
	ASSERT_TRUE(gloo) << gloo.error().message;
	auto odd = parse_spec(R"({"layer": "x", "library": "libx.so*", "enums": {"r": {"0": "zero", "1": "one"}},
		"probes": [
		{"function": "enum_rank", "args": [{"name": "rank", "slot": 0, "type": "enum", "enum": "r"},
			{"name": "nranks", "slot": 1, "type": "i32"}, {"name": "seq", "slot": 2, "type": "u64"}]},
		{"function": "wide", "args": [{"name": "seq", "slot": 0, "type": "u64"}, {"name": "rank", "slot": 1,
			"type": "u64"}, {"name": "nranks", "slot": 2, "type": "i64"}, {"name": "rank", "slot": 3, "type": "u32"}]},
		{"function": "no_group", "args": [{"name": "rank", "slot": 0, "type": "i32"},
			{"name": "seq", "slot": 1, "type": "u32"}]}]})",
			      "test", true);
	ASSERT_TRUE(odd) << odd.error().message;
	std::mt19937_64 rng(41);
	const uint64_t values[] = {0, 1, 2, 3, 4, uint64_t(-1), uint64_t(-2), 0xffffffffull, 1ull << 63, 7};
	size_t collectives = 0, ranks = 0, spans = 0;
	for (const SpecSet *specs : {&*gloo, &*odd}) {
		Interner names;
		TypedSpans ts{specs, &names, nullptr, {}, {}};
		for (uint32_t id = 0; id < specs->probes.size(); id++)
			for (int k = 0; k < 200; k++) {
				TypedSpan t{.start_ns = 1000 + uint64_t(k),
					    .dur_ns = 50,
					    .pid = 9,
					    .tid = 10,
					    .spec_id = id};
				for (auto &a : t.args)
					a = values[rng() % std::size(values)];
				ts.push_back(t);
			}
		TypedCollectives typed;
		for (size_t i = 0; i < ts.size(); i++, spans++) {
			const Span s = span_at(ts, i);
			const auto want = collective_of(s);
			ASSERT_EQ(text_of(typed.of(ts, i)), text_of(want)) << s.name << " " << s.args.dump();
			const auto rank = typed.rank(ts, i);
			ASSERT_EQ(rank, int_arg(s, "rank")) << s.name << " " << s.args.dump();
			collectives += want.has_value();
			ranks += rank.has_value();
		}
	}
	EXPECT_GT(collectives, 100u);
	EXPECT_GT(ranks, collectives);
	EXPECT_GT(spans, ranks);
}
