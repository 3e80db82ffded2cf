// SPDX-License-Identifier: Apache-2.0
// The issue linker (pipeline/issues.h): the call that ran a piece of work
// (gloo's collective on a worker thread) is given what the call that issued
// it knew (torch's enqueue: tensor, reduce op, Python stack), whichever of
// the two is read first.
#include <gtest/gtest.h>

#include "pipeline/issues.h"

namespace eacgm {
namespace {

constexpr uint64_t kMs = 1'000'000;

std::vector<ProbeSpec> issuing_specs()
{
	ProbeSpec p;
	p.layer = "torch";
	p.function = "c10d::ProcessGroupGloo::allreduce";
	p.issues = {IssueRule{"gloo", {"group", "seq"}}, IssueRule{"torch", {"work"}}};
	return {p};
}

// The caller's enqueue of collective `seq` (on its own thread, with a stack).
Span enqueue(uint32_t pid, uint64_t seq, uint64_t start_ns)
{
	return {.start_ns = start_ns,
		.dur_ns = 20'000,
		.pid = pid,
		.tid = pid,
		.layer = "torch",
		.name = "c10d::ProcessGroupGloo::allreduce",
		.args = {{"group", "0x10"},
			 {"seq", seq},
			 {"tensor", "float32[1000]"},
			 {"reduce_op", "sum"},
			 {"work", "0xa0"}},
		.py_stack = PyStack{"all_reduce (distributed_c10d.py:1541)", "<module> (job.py:53)"}};
}

// gloo's run of it on a worker thread.
Span collective(uint32_t pid, uint64_t seq, uint64_t start_ns, const char *group = "0x10")
{
	return {.start_ns = start_ns,
		.dur_ns = 1 * kMs,
		.pid = pid,
		.tid = pid + 7,
		.layer = "gloo",
		.name = "allreduce",
		.bytes = 4000,
		.args = {{"group", group}, {"seq", seq}, {"rank", 0}, {"nranks", 2}, {"count", 1000}}};
}

// The caller's wait on the Work it got.
Span wait_on(uint32_t pid, const char *work, uint64_t start_ns)
{
	return {.start_ns = start_ns,
		.dur_ns = 2 * kMs,
		.pid = pid,
		.tid = pid,
		.layer = "torch",
		.name = "c10d::Work::wait",
		.args = {{"work", work}}};
}

const std::vector<IssueRule> kRules = issuing_specs()[0].issues;
const std::vector<IssueRule> kNone;

TEST(IssueLinker, TheRunningCallAndTheWaitGetWhatTheIssuingCallKnew)
{
	IssueLinker l(issuing_specs());
	ASSERT_TRUE(l.active());
	Span issued = enqueue(100, 3, 10 * kMs), ran = collective(100, 3, 10 * kMs + 5000),
	     wait = wait_on(100, "0xa0", 10 * kMs + 30'000);
	EXPECT_TRUE(l.see(issued, kRules)); // for its collective and for its wait
	EXPECT_TRUE(l.see(ran, kNone));
	EXPECT_TRUE(l.see(wait, kNone));
	EXPECT_EQ(ran.args["tensor"], "float32[1000]");
	EXPECT_EQ(ran.args["reduce_op"], "sum");
	EXPECT_EQ(ran.args["rank"], 0); // its own arguments stay
	EXPECT_EQ(ran.args["issued_ns"], 10 * kMs);
	EXPECT_EQ(ran.args["issued_tid"], 100);
	EXPECT_EQ(ran.args["issued_by"], "c10d::ProcessGroupGloo::allreduce");
	EXPECT_EQ(ran.py_stack, issued.py_stack);
	EXPECT_EQ(wait.args["seq"], 3);
	EXPECT_EQ(wait.args["issued_ns"], 10 * kMs);
	EXPECT_EQ(issued.args.size(), 5u); // the issuing call is left as it was
	// Both ends joined, the issue is done: another wait on its Work finds
	// none, and is held for one (it comes back at the end, as it was).
	Span again = wait_on(100, "0xa0", 12 * kMs);
	EXPECT_FALSE(l.see(again, kNone));
	std::vector<Span> out;
	l.release(out, 13 * kMs, true);
	ASSERT_EQ(out.size(), 1u);
	EXPECT_FALSE(out[0].args.contains("issued_ns"));
}

TEST(IssueLinker, AReusedWorkAddressJoinsEachWaitToTheEnqueueBeforeIt)
{
	// The Work of one collective is freed and the next one's is made at
	// the same address: each wait is read after its own enqueue.
	IssueLinker l(issuing_specs());
	for (uint64_t seq = 0; seq < 3; seq++) {
		Span issued = enqueue(100, seq, (10 + seq) * kMs), wait = wait_on(100, "0xa0", (10 + seq) * kMs + 100);
		EXPECT_TRUE(l.see(issued, kRules));
		EXPECT_TRUE(l.see(issued, kNone)); // an enqueue is not its own wait
		EXPECT_FALSE(issued.args.contains("issued_ns"));
		EXPECT_TRUE(l.see(wait, kNone));
		EXPECT_EQ(wait.args["seq"], seq);
	}
}

TEST(IssueLinker, ARunningCallReadFirstIsHeldUntilItsIssuerIsRead)
{
	IssueLinker l(issuing_specs());
	// The worker finished before the caller's enqueue returned: its span
	// is read first, and held back.
	Span ran = collective(100, 0, 10 * kMs);
	EXPECT_FALSE(l.see(ran, kNone));
	std::vector<Span> out;
	l.release(out, 12 * kMs, false);
	EXPECT_TRUE(out.empty());
	Span issued = enqueue(100, 0, 9 * kMs);
	EXPECT_TRUE(l.see(issued, kRules));
	l.release(out, 13 * kMs, false);
	ASSERT_EQ(out.size(), 1u);
	EXPECT_EQ(out[0].args["tensor"], "float32[1000]");
	EXPECT_EQ(out[0].args["issued_ns"], 9 * kMs);
	out.clear();
	l.release(out, 14 * kMs, true); // nothing else was held
	EXPECT_TRUE(out.empty());
}

TEST(IssueLinker, UnjoinedRunningCallsGoAsTheyAreAfterTheHoldOrAtTheEnd)
{
	IssueLinker l(issuing_specs());
	Span a = collective(100, 0, 10 * kMs), b = collective(100, 1, 20 * kMs);
	EXPECT_FALSE(l.see(a, kNone));
	EXPECT_FALSE(l.see(b, kNone));
	// The first ended (11 ms) kHoldNs before now: it goes; the second waits.
	std::vector<Span> out;
	l.release(out, 11 * kMs + IssueLinker::kHoldNs, false);
	ASSERT_EQ(out.size(), 1u);
	EXPECT_EQ(out[0].args["seq"], 0);
	EXPECT_FALSE(out[0].args.contains("issued_ns"));
	out.clear();
	l.release(out, 22 * kMs, true); // the last write: nothing is held
	ASSERT_EQ(out.size(), 1u);
	EXPECT_EQ(out[0].args["seq"], 1);
	out.clear();
	l.release(out, 23 * kMs, true);
	EXPECT_TRUE(out.empty());
}

TEST(IssueLinker, OnlyTheSameProcessGroupAndSequenceNumberJoin)
{
	IssueLinker l(issuing_specs());
	Span issued = enqueue(100, 5, 10 * kMs);
	l.see(issued, kRules);
	std::vector<Span> others = {collective(100, 5, 11 * kMs, "0x20"), // another group
				    collective(200, 5, 11 * kMs),         // another process
				    collective(100, 6, 11 * kMs)};        // another collective
	for (Span &s : others)
		EXPECT_FALSE(l.see(s, kNone));
	std::vector<Span> out;
	l.release(out, 12 * kMs + IssueLinker::kHoldNs, false);
	ASSERT_EQ(out.size(), 3u);
	for (const Span &s : out)
		EXPECT_FALSE(s.args.contains("issued_ns")) << s.args.dump();
	// Issued work never seen to run is forgotten in time: its collective
	// and its wait, read after that, find no issuer and are held for one.
	out.clear();
	const uint64_t later = 10 * kMs + IssueLinker::kForgetNs + kMs;
	l.release(out, later, false);
	Span ran = collective(100, 5, later), wait = wait_on(100, "0xa0", later);
	EXPECT_FALSE(l.see(ran, kNone));
	EXPECT_FALSE(l.see(wait, kNone));
	l.release(out, later + kMs, true);
	ASSERT_EQ(out.size(), 2u);
	for (const Span &s : out)
		EXPECT_FALSE(s.args.contains("issued_ns")) << s.args.dump();
}

TEST(IssueLinker, ACrowdOfUnjoinedIssuesIsBounded)
{
	// DDP waits on its buckets through futures: their Works are never
	// waited on by Work::wait, and their issues are never joined.
	IssueLinker l(issuing_specs());
	const uint64_t t0 = 100 * IssueLinker::kCrowdedNs;
	for (uint64_t i = 0; i < 3 * IssueLinker::kMaxIssued; i++) {
		Span issued = enqueue(100, i, t0 + i * kMs); // a thousand a second
		issued.args["work"] = "0x" + std::to_string(1000 + i);
		l.see(issued, kRules);
	}
	// Past kMaxIssued, the issues more than kCrowdedNs older than the
	// newest are forgotten, so no more than kMaxIssued are ever kept: a
	// wait on the Work issued kMaxIssued + 100 before the last finds none
	// (held for one; kForgetNs alone would keep it a minute), the newest
	// second's still join.
	const uint64_t last = 3 * IssueLinker::kMaxIssued - 1;
	auto work = [](uint64_t i) { return "0x" + std::to_string(1000 + i); };
	Span old = wait_on(100, work(last - IssueLinker::kMaxIssued - 100).c_str(), t0 + last * kMs + 100);
	EXPECT_FALSE(l.see(old, kNone));
	for (uint64_t i : {last - 900, last}) {
		Span wait = wait_on(100, work(i).c_str(), t0 + last * kMs + 200);
		EXPECT_TRUE(l.see(wait, kNone)) << i;
		EXPECT_EQ(wait.args["seq"], i);
	}
}

TEST(IssueLinker, SpansWithoutTheRulesArgumentsPassAndNothingIsHeldWithoutRules)
{
	IssueLinker l(issuing_specs());
	Span op;
	op.layer = "torch";
	op.name = "aten::mm";
	EXPECT_TRUE(l.see(op, kNone));
	IssueLinker none(std::vector<ProbeSpec>{});
	EXPECT_FALSE(none.active());
	Span ran = collective(100, 0, 10 * kMs);
	EXPECT_TRUE(none.see(ran, kNone));
	std::vector<Span> out;
	none.release(out, 11 * kMs, true);
	EXPECT_TRUE(out.empty());
}

} // namespace
} // namespace eacgm

namespace eacgm {
namespace {

// Which probes the linker looks at over the built-in torch and gloo specs:
// the enqueues (they issue), the waits (they keep `work`) and gloo's
// collectives (group and seq); not the torch operators (aten::*), whose
// calls it passes untouched (the test above) and which may stay typed.
TEST(IssueLinker, InvolvesTheProbesThatIssueOrKeepARulesArguments)
{
	auto torch = load_builtin_spec("torch");
	auto gloo = load_builtin_spec("gloo");
	ASSERT_TRUE(torch && gloo);
	std::vector<ProbeSpec> all = torch->probes;
	all.insert(all.end(), gloo->probes.begin(), gloo->probes.end());
	IssueLinker l(all);
	std::vector<std::string> passed;
	size_t involved = 0;
	for (const ProbeSpec &p : all) {
		if (l.involves(p))
			involved++;
		else
			passed.push_back(p.layer + "/" + p.function);
	}
	EXPECT_EQ(passed, std::vector<std::string>{"torch/aten::$1"});
	EXPECT_EQ(involved, all.size() - 1);
	EXPECT_FALSE(IssueLinker(std::vector<ProbeSpec>{}).involves(all.front()));
}

} // namespace
} // namespace eacgm
