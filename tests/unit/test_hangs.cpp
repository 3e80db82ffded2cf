// SPDX-License-Identifier: Apache-2.0
// The hang watch's judgement over calls in flight (sinks/hangs.h): which
// are hangs, the ranks missing from a hung collective, the Python stack of
// the wait behind it, and each hang told once and once more when it ends.
#include <gtest/gtest.h>

#include <tuple>

#include "pipeline/intern.h"
#include "sinks/hangs.h"

namespace eacgm {
namespace {

constexpr uint64_t kSec = 1'000'000'000;

Span collective(uint32_t pid, uint32_t tid, int rank, int seq, uint64_t start, uint64_t dur)
{
	Span s;
	s.layer = "gloo";
	s.name = "allreduce";
	s.pid = pid;
	s.tid = tid;
	s.start_ns = start;
	s.dur_ns = dur;
	s.args = {{"rank", rank}, {"nranks", 3}, {"seq", seq}};
	return s;
}

// The training thread's wait for its collective (the torch layer's).
Span wait_span(uint32_t pid, uint64_t start, uint64_t dur)
{
	Span s;
	s.layer = "torch";
	s.name = "c10d::Work::wait";
	s.pid = pid;
	s.tid = pid;
	s.start_ns = start;
	s.dur_ns = dur;
	return s;
}

TEST(HangWatch, NamesTheHungCollectiveItsMissingRanksAndThePythonLineThatWaits)
{
	HangWatch w(5 * kSec);
	// Completed: ranks 0 and 1 reached seq 1, rank 2 only seq 0.
	SpanBatch b;
	b.spans = {collective(100, 101, 0, 1, 1 * kSec, 10), collective(200, 201, 1, 1, 1 * kSec, 10),
		   collective(300, 301, 2, 0, 1 * kSec, 10)};
	ASSERT_TRUE(w.write(b));
	Span wait = wait_span(100, 2 * kSec, 8 * kSec);
	wait.py_stack = PyStack{"main (train.py:42)", "<module> (train.py:50)"};
	// Rank 0 in seq 2 for 8 s; rank 1 in seq 2 for 4 s (not yet a hang).
	std::vector<RecordLoop::OpenSpan> open = {{collective(100, 102, 0, 2, 2 * kSec, 8 * kSec), true},
						  {wait, true},
						  {collective(200, 202, 1, 2, 6 * kSec, 4 * kSec), true}};
	std::vector<Event> ev;
	w.check(10 * kSec, open, ev);
	ASSERT_EQ(ev.size(), 1u); // the wait is told by its collective's report
	EXPECT_EQ(ev[0].name, "hang");
	EXPECT_EQ(ev[0].layer, "gloo");
	EXPECT_EQ(ev[0].key, "allreduce");
	EXPECT_EQ(ev[0].pid, 100u);
	EXPECT_EQ(ev[0].args["rank"], 0);
	EXPECT_EQ(ev[0].args["seq"], 2);
	EXPECT_EQ(ev[0].args["missing_ranks"], nlohmann::json({2}));
	EXPECT_EQ(ev[0].args["ranks_not_seen"], nlohmann::json::array());
	EXPECT_DOUBLE_EQ(ev[0].args["age_s"].get<double>(), 8.0);
	EXPECT_EQ(ev[0].args["python_stack"], nlohmann::json({"main (train.py:42)", "<module> (train.py:50)"}));
	auto lines = w.take_warnings();
	ASSERT_EQ(lines.size(), 1u);
	EXPECT_EQ(lines[0],
		  "gloo allreduce in flight for 8.0 s: pid 100 tid 102, rank 0 of 3, seq 2, missing_ranks [2]; "
		  "python: main (train.py:42) <- <module> (train.py:50)");

	// Looked at again: not told twice; rank 1's now past the limit is.
	ev.clear();
	open[0].span.dur_ns = 9 * kSec;
	open[2].span.dur_ns = 5 * kSec;
	w.check(11 * kSec, open, ev);
	ASSERT_EQ(ev.size(), 1u);
	EXPECT_EQ(ev[0].pid, 200u);
	EXPECT_EQ(ev[0].args["missing_ranks"], nlohmann::json({2}));
	(void)w.take_warnings();

	// Rank 2 came and all returned: both told over.
	ev.clear();
	w.check(12 * kSec, {}, ev);
	ASSERT_EQ(ev.size(), 2u);
	EXPECT_EQ(ev[0].name, "hang_over");
	EXPECT_EQ(ev[1].name, "hang_over");
	EXPECT_EQ(w.take_warnings().size(), 2u);
}

// The collectives that completed may come typed (the gloo layer's calls
// do): the watch reads their ranks and sequence numbers from their slots.
TEST(HangWatch, CompletedCollectivesMayComeTyped)
{
	auto gloo = load_builtin_spec("gloo");
	ASSERT_TRUE(gloo) << gloo.error().message;
	const ProbeSpec &spec = gloo->probes[0];
	Interner names;
	SpanBatch b;
	b.typed = {&*gloo, &names, nullptr, {}, {}};
	// Ranks 0 and 1 reached seq 1, rank 2 only seq 0, as in the test above;
	// rank 0 waits in seq 2 alone: 1 and 2 are missing, none unseen.
	for (auto [pid, rank, seq] : {std::tuple{100u, 0, 1}, {200u, 1, 1}, {300u, 2, 0}}) {
		TypedSpan t{.start_ns = 1 * kSec, .dur_ns = 10, .pid = pid, .tid = pid + 1, .spec_id = 0};
		for (size_t i = 0; i < spec.args.size(); i++) {
			const std::string &name = spec.args[i].name;
			t.args[i] = name == "rank" ? uint64_t(rank)
				: name == "nranks" ? 3
				: name == "seq"    ? uint64_t(seq)
						   : 0;
		}
		b.typed.push_back(t);
	}
	HangWatch w(5 * kSec);
	ASSERT_TRUE(w.write(b));
	std::vector<RecordLoop::OpenSpan> open = {{collective(100, 102, 0, 2, 2 * kSec, 8 * kSec), true}};
	std::vector<Event> ev;
	w.check(10 * kSec, open, ev);
	ASSERT_EQ(ev.size(), 1u);
	EXPECT_EQ(ev[0].args["missing_ranks"], nlohmann::json({1, 2}));
	EXPECT_EQ(ev[0].args["ranks_not_seen"], nlohmann::json::array());
}

TEST(HangWatch, AWaitAloneIsAHangWithItsProcesssRankAndUnseenRanksAreSaid)
{
	HangWatch w(1 * kSec);
	SpanBatch b;
	b.spans = {collective(100, 101, 0, 0, 0, 10)};
	ASSERT_TRUE(w.write(b));
	Span wait = wait_span(100, kSec, 2 * kSec);
	std::vector<Event> ev;
	// A call that does not wait is never a hang, however long.
	Span slow = wait;
	slow.name = "aten::mm";
	slow.tid = 105;
	w.check(3 * kSec, {{wait, true}, {slow, false}}, ev);
	ASSERT_EQ(ev.size(), 1u);
	EXPECT_EQ(ev[0].key, "c10d::Work::wait");
	EXPECT_EQ(ev[0].args["rank"], 0);
	EXPECT_EQ(ev[0].args["nranks"], 3);
	EXPECT_FALSE(ev[0].args.contains("missing_ranks"));
	ev.clear();
	// A collective whose group's other ranks are not in the recording.
	w.check(4 * kSec, {{collective(100, 102, 0, 1, kSec, 3 * kSec), true}}, ev);
	ASSERT_EQ(ev.size(), 2u); // the wait is over, the collective hangs
	EXPECT_EQ(ev[0].name, "hang");
	EXPECT_EQ(ev[0].args["missing_ranks"], nlohmann::json::array());
	EXPECT_EQ(ev[0].args["ranks_not_seen"], nlohmann::json({1, 2}));
	EXPECT_EQ(ev[1].name, "hang_over");
}

TEST(HangWatch, LooksAQuarterOfTheLimitApartWithinATenthAndOneSecond)
{
	EXPECT_EQ(HangWatch(2 * kSec).interval_ns(), kSec / 2);
	EXPECT_EQ(HangWatch(kSec / 10).interval_ns(), kSec / 10);
	EXPECT_EQ(HangWatch(300 * kSec).interval_ns(), kSec);
}

} // namespace
} // namespace eacgm
