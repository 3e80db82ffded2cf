// SPDX-License-Identifier: Apache-2.0
// Communicator rank and size, learnt from init calls, on later calls.
#include <gtest/gtest.h>

#include "layers/nccl.h"
#include "pipeline/collectives.h"

namespace eacgm {
namespace {

Span nccl(const std::string &name, nlohmann::json args, const std::string &ret = "ncclSuccess", uint32_t pid = 7)
{
	Span s;
	s.layer = "nccl";
	s.name = name;
	s.pid = pid;
	s.args = std::move(args);
	s.ret_name = ret;
	return s;
}

TEST(NcclLayer, RankAndSizeFollowTheCommunicator)
{
	NcclCommunicators c;
	Span init = nccl("ncclCommInitRank", {{"comm", "0xc0"}, {"nranks", 8}, {"rank", 3}});
	c.observe(init);
	Span ar = nccl("ncclAllReduce", {{"comm", "0xc0"}, {"count", 10}});
	c.observe(ar);
	EXPECT_EQ(ar.args["rank"], 3);
	EXPECT_EQ(ar.args["nranks"], 8);
	Span other = nccl("ncclAllReduce", {{"comm", "0xd0"}});
	c.observe(other);
	EXPECT_FALSE(other.args.contains("rank")); // unknown communicator
	Span other_pid = nccl("ncclAllReduce", {{"comm", "0xc0"}}, "ncclSuccess", 8);
	c.observe(other_pid);
	EXPECT_FALSE(other_pid.args.contains("rank")); // pointers are per process

	Span destroy = nccl("ncclCommDestroy", {{"comm", "0xc0"}});
	c.observe(destroy);
	EXPECT_EQ(destroy.args["rank"], 3);
	Span after = nccl("ncclAllReduce", {{"comm", "0xc0"}});
	c.observe(after);
	EXPECT_FALSE(after.args.contains("rank")); // gone with the communicator
}

TEST(NcclLayer, FailedInitsTeachNothing)
{
	NcclCommunicators c;
	Span init =
		nccl("ncclCommInitRankConfig", {{"comm", "0x0"}, {"nranks", 2}, {"rank", 1}}, "ncclInvalidArgument");
	c.observe(init);
	Span ar = nccl("ncclAllReduce", {{"comm", "0x0"}});
	c.observe(ar);
	EXPECT_FALSE(ar.args.contains("rank"));
}

TEST(NcclLayer, InitAllNamesRankZeroOfNdev)
{
	NcclCommunicators c;
	Span init = nccl("ncclCommInitAll", {{"comm", "0xa0"}, {"ndev", 4}});
	c.observe(init);
	Span send = nccl("ncclSend", {{"comm", "0xa0"}, {"peer", 1}});
	c.observe(send);
	EXPECT_EQ(send.args["rank"], 0);
	EXPECT_EQ(send.args["nranks"], 4);
}

// Each collective enqueued on a known communicator is numbered from 0 per
// communicator, as every rank numbers it; sends, receives and failed calls
// are not. Two ranks' numbered collectives match as rounds.
TEST(NcclLayer, CollectivesAreNumberedPerCommunicatorAndMatchAcrossRanks)
{
	NcclCommunicators c;
	std::vector<Span> spans;
	for (uint32_t pid : {7u, 8u}) {
		Span init = nccl("ncclCommInitRank", {{"comm", "0xc0"}, {"nranks", 2}, {"rank", pid - 7}},
				 "ncclSuccess", pid);
		c.observe(init);
		Span sub = nccl("ncclCommInitRank", {{"comm", "0xd0"}, {"nranks", 2}, {"rank", pid - 7}}, "ncclSuccess",
				pid);
		c.observe(sub);
		uint64_t t = 1000 * (pid - 6); // rank 1 enqueues later
		for (auto [name, comm, ret] : std::vector<std::tuple<const char *, const char *, const char *>>{
			     {"ncclAllReduce", "0xc0", "ncclSuccess"},
			     {"ncclSend", "0xc0", "ncclSuccess"},
			     {"ncclBroadcast", "0xc0", "ncclInvalidArgument"},
			     {"ncclAllGather", "0xd0", "ncclSuccess"},
			     {"ncclBroadcast", "0xc0", "ncclInProgress"},
		     }) {
			Span s = nccl(name, {{"comm", comm}}, ret, pid);
			s.tid = pid;
			s.start_ns = t += 10;
			s.dur_ns = 5;
			c.observe(s);
			spans.push_back(s);
		}
	}
	auto seq = [](const Span &s) { return s.args.contains("seq") ? s.args["seq"].get<int64_t>() : -1; };
	for (size_t r = 0; r < 2; r++) {
		const Span *s = &spans[5 * r];
		EXPECT_EQ(seq(s[0]), 0) << "the first collective on 0xc0";
		EXPECT_EQ(seq(s[1]), -1) << "a send";
		EXPECT_EQ(seq(s[2]), -1) << "a failed call enqueued nothing";
		EXPECT_EQ(seq(s[3]), 0) << "its own communicator";
		EXPECT_EQ(seq(s[4]), 1);
	}
	std::vector<Round> rounds = match_collectives(spans);
	ASSERT_EQ(rounds.size(), 3u);
	for (const Round &r : rounds) {
		EXPECT_TRUE(r.complete()) << r.key.name << " " << r.key.seq;
		EXPECT_EQ(r.key.layer, "nccl");
		EXPECT_EQ(r.last().rank, 1u);
	}
}

} // namespace
} // namespace eacgm
