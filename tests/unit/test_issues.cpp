// The issue linker (ingest/issues.h): the call that ran a piece of work
// (gloo's collective on a worker thread) is given what the call that issued
// it knew (torch's enqueue: tensor, reduce op, Python stack), whichever of
// the two is read first.
#include <gtest/gtest.h>

#include "ingest/issues.h"

namespace eacgm {
namespace {

constexpr uint64_t kMs = 1'000'000;

std::vector<ProbeSpec> issuing_specs()
{
	ProbeSpec p;
	p.layer = "torch";
	p.function = "c10d::ProcessGroupGloo::allreduce";
	p.issues = IssueRule{"gloo", {"group", "seq"}};
	return {p};
}

Span enqueue(uint32_t pid, uint64_t seq, uint64_t start_ns)
{
	Span s;
	s.pid = pid;
	s.tid = pid;
	s.layer = "torch";
	s.name = "c10d::ProcessGroupGloo::allreduce";
	s.start_ns = start_ns;
	s.dur_ns = 20'000;
	s.args = {{"group", "0x10"}, {"seq", seq}, {"tensor", "float32[1000]"}, {"reduce_op", "sum"}};
	s.py_stack = PyStack{"all_reduce (distributed_c10d.py:1541)", "<module> (job.py:53)"};
	return s;
}

Span collective(uint32_t pid, uint64_t seq, uint64_t start_ns, const char *group = "0x10")
{
	Span s;
	s.pid = pid;
	s.tid = pid + 7;
	s.layer = "gloo";
	s.name = "allreduce";
	s.start_ns = start_ns;
	s.dur_ns = 1 * kMs;
	s.bytes = 4000;
	s.args = {{"group", group}, {"seq", seq}, {"rank", 0}, {"nranks", 2}, {"count", 1000}};
	return s;
}

TEST(IssueLinker, TheRunningCallGetsWhatTheIssuingCallKnew)
{
	IssueLinker l(issuing_specs());
	ASSERT_TRUE(l.active());
	Span issued = enqueue(100, 3, 10 * kMs);
	l.issued(issued, *issuing_specs()[0].issues);
	std::vector<Span> batch = {issued, collective(100, 3, 10 * kMs + 5000)};
	l.link(batch, 20 * kMs, false);
	ASSERT_EQ(batch.size(), 2u);
	const Span &ran = batch[1];
	EXPECT_EQ(ran.args["tensor"], "float32[1000]");
	EXPECT_EQ(ran.args["reduce_op"], "sum");
	EXPECT_EQ(ran.args["rank"], 0); // its own arguments stay
	EXPECT_EQ(ran.args["issued_ns"], 10 * kMs);
	EXPECT_EQ(ran.args["issued_tid"], 100);
	EXPECT_EQ(ran.args["issued_by"], "c10d::ProcessGroupGloo::allreduce");
	EXPECT_EQ(ran.py_stack, issued.py_stack);
	EXPECT_EQ(batch[0].args.size(), 4u); // the issuing call is left as it was
	EXPECT_EQ(l.pending(), 0u);
	EXPECT_EQ(l.held(), 0u);
}

TEST(IssueLinker, ARunningCallReadFirstWaitsForItsIssuerUntilTheNextBatch)
{
	IssueLinker l(issuing_specs());
	// The worker finished before the caller's enqueue returned: its span
	// is read first, and held back.
	std::vector<Span> batch = {collective(100, 0, 10 * kMs)};
	l.link(batch, 12 * kMs, false);
	EXPECT_TRUE(batch.empty());
	EXPECT_EQ(l.held(), 1u);
	Span issued = enqueue(100, 0, 9 * kMs);
	l.issued(issued, *issuing_specs()[0].issues);
	batch = {issued};
	l.link(batch, 200 * kMs, false);
	ASSERT_EQ(batch.size(), 2u);
	EXPECT_EQ(batch[0].layer, "gloo"); // held spans come first
	EXPECT_EQ(batch[0].args["tensor"], "float32[1000]");
	EXPECT_EQ(batch[1].layer, "torch");
	EXPECT_EQ(l.held(), 0u);
}

TEST(IssueLinker, UnjoinedRunningCallsGoAsTheyAreAfterTheHoldOrAtTheEnd)
{
	IssueLinker l(issuing_specs());
	std::vector<Span> batch = {collective(100, 0, 10 * kMs), collective(100, 1, 20 * kMs)};
	// The first ended (11 ms) kHoldNs before now: it goes; the second waits.
	l.link(batch, 11 * kMs + IssueLinker::kHoldNs, false);
	ASSERT_EQ(batch.size(), 1u);
	EXPECT_EQ(batch[0].args["seq"], 0);
	EXPECT_FALSE(batch[0].args.contains("issued_ns"));
	EXPECT_EQ(l.held(), 1u);
	batch.clear();
	l.link(batch, 22 * kMs, true); // the last write: nothing is held
	ASSERT_EQ(batch.size(), 1u);
	EXPECT_EQ(batch[0].args["seq"], 1);
	EXPECT_EQ(l.held(), 0u);
}

TEST(IssueLinker, OnlyTheSameProcessGroupAndSequenceNumberJoin)
{
	IssueLinker l(issuing_specs());
	auto rule = *issuing_specs()[0].issues;
	l.issued(enqueue(100, 5, 10 * kMs), rule);
	std::vector<Span> batch = {collective(100, 5, 11 * kMs, "0x20"), // another group
				   collective(200, 5, 11 * kMs),         // another process
				   collective(100, 6, 11 * kMs)};        // another collective
	l.link(batch, 11 * kMs + 2 * IssueLinker::kHoldNs, false);
	ASSERT_EQ(batch.size(), 3u);
	for (const Span &s : batch)
		EXPECT_FALSE(s.args.contains("issued_ns")) << s.args.dump();
	EXPECT_EQ(l.pending(), 1u);
	// Issued work never seen to run is forgotten in time.
	batch.clear();
	l.link(batch, 10 * kMs + IssueLinker::kForgetNs + kMs, false);
	EXPECT_EQ(l.pending(), 0u);
}

TEST(IssueLinker, WithoutIssuingProbesNothingIsHeld)
{
	IssueLinker l(std::vector<ProbeSpec>{});
	EXPECT_FALSE(l.active());
	std::vector<Span> batch = {collective(100, 0, 10 * kMs)};
	l.link(batch, 10 * kMs, false);
	EXPECT_EQ(batch.size(), 1u);
}

} // namespace
} // namespace eacgm
