// SPDX-License-Identifier: Apache-2.0
// A process's job and rank from its launcher's environment: which variable
// wins, and what counts as not given.
#include <gtest/gtest.h>

#include "pipeline/identity.h"

using namespace eacgm;

namespace {
std::string env(std::initializer_list<const char *> entries)
{
	std::string out;
	for (const char *e : entries)
		out += std::string(e) + '\0';
	return out;
}
} // namespace

TEST(JobIdentity, TorchrunsRank)
{
	auto id = job_identity_of(env({"PATH=/bin", "TORCHELASTIC_RUN_ID=abc123", "RANK=11", "LOCAL_RANK=3",
				       "WORLD_SIZE=16", "MASTER_ADDR=10.0.0.1", "MASTER_PORT=29500"}));
	EXPECT_EQ(id.job, "abc123");
	EXPECT_EQ(id.rank, 11);
	EXPECT_EQ(id.local_rank, 3);
	EXPECT_EQ(id.world_size, 16);
}

TEST(JobIdentity, WhichNameWins)
{
	EXPECT_EQ(job_identity_of(env({"SLURM_JOB_ID=77", "EACGM_JOB=mine", "TORCHELASTIC_RUN_ID=t"})).job, "mine");
	EXPECT_EQ(job_identity_of(env({"SLURM_JOB_ID=77", "TORCHELASTIC_RUN_ID=t"})).job, "t");
	// torchrun's default run id when none is given is "none": not a job's name.
	EXPECT_EQ(job_identity_of(env({"SLURM_JOB_ID=77", "TORCHELASTIC_RUN_ID=none"})).job, "slurm-77");
	EXPECT_EQ(job_identity_of(env({"MASTER_ADDR=h1", "MASTER_PORT=29500"})).job, "h1:29500");
	EXPECT_EQ(job_identity_of(env({"MASTER_ADDR=h1"})).job, "");
	EXPECT_EQ(job_identity_of("").job, "");
}

TEST(JobIdentity, NumbersThatDoNotParseAreNotGiven)
{
	auto id = job_identity_of(env({"RANK=x", "LOCAL_RANK=-2", "WORLD_SIZE=4 ", "NOEQUALS"}));
	EXPECT_EQ(id.rank, -1);
	EXPECT_EQ(id.local_rank, -1);
	EXPECT_EQ(id.world_size, -1);
	EXPECT_EQ(job_identity_of(env({"RANK=0"})).rank, 0);
	// The last entry need not end in a NUL; a name is matched whole.
	EXPECT_EQ(job_identity_of(std::string("XRANK=5") + '\0' + "RANK=7").rank, 7);
}
