// Communicator rank and size, learnt from init calls, on later calls.
#include <gtest/gtest.h>

#include "layers/nccl.h"

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

} // namespace
} // namespace eacgm
