// SPDX-License-Identifier: Apache-2.0
// eacgm merge (merge/merge.h, app/merge.cpp): host labels, the residual
// clock skew estimated from matched collectives, a merge of two recordings
// whose pids collide and whose wall offset is wrong, and the command's
// errors.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "export/summary.h"
#include "merge/merge.h"
#include "store/store.h"
#include "recording_writer.h"

using namespace eacgm;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

Span coll(uint32_t rank, uint64_t seq, uint64_t start, uint64_t end, uint32_t pid, uint32_t nranks = 2)
{
	Span s{.start_ns = start, .dur_ns = end - start, .pid = pid, .tid = pid, .layer = "gloo", .name = "allreduce"};
	s.args = {{"rank", rank}, {"nranks", nranks}, {"seq", seq}};
	return s;
}

class MergeTest : public ::testing::Test {
protected:
	void SetUp() override
	{
		char tmpl[] = "/tmp/eacgm_merge_XXXXXX";
		ASSERT_NE(mkdtemp(tmpl), nullptr);
		dir = tmpl;
	}
	void TearDown() override { fs::remove_all(dir); }
	std::string file(const std::string &name) const { return (fs::path(dir) / name).string(); }
	std::string dir;
};

constexpr int64_t kMs = 1'000'000;

} // namespace

TEST(Merge, HostLabels)
{
	// Hostnames where they differ; the file's stem without one.
	EXPECT_EQ(host_labels({"node0", "node1", ""}, {"a/r.db", "b/r.db", "x/r2.db"}),
		  (std::vector<std::string>{"node0", "node1", "r2"}));
	// Ranks recorded on one machine: hostname/stem.
	EXPECT_EQ(host_labels({"gpu7", "gpu7", "gpu8"}, {"r0.db", "/tmp/r1.db", "r2.db"}),
		  (std::vector<std::string>{"gpu7/r0", "gpu7/r1", "gpu8"}));
	// Still the same: the path as given.
	EXPECT_EQ(host_labels({"", ""}, {"a/run.db", "b/run.db"}), (std::vector<std::string>{"a/run.db", "b/run.db"}));
}

TEST(Merge, ResidualsFromMatchedCollectives)
{
	// Input 1's clock reads 50 ms late, input 2's 30 ms early; input 2
	// shares no collective with input 0, only with input 1 (another group).
	// Ends jitter by up to 20 µs, and one collective in five ends 300 µs
	// early on one input (a broadcast's root): the median ignores both.
	std::mt19937 rng(3);
	std::uniform_int_distribution<int64_t> jitter(-20'000, 20'000);
	std::vector<std::vector<Span>> in(3);
	for (uint64_t seq = 0; seq < 25; seq++) {
		int64_t t = 1'000 * kMs + static_cast<int64_t>(seq) * 10 * kMs, end = t + 2 * kMs;
		int64_t early = seq % 5 == 0 ? 300'000 : 0;
		in[0].push_back(coll(0, seq, t, end + jitter(rng) - early, 1));
		in[1].push_back(coll(1, seq, t + kMs + 50 * kMs, end + 50 * kMs + jitter(rng), 2));
		in[1].push_back(coll(0, seq, t + 50 * kMs, end + 50 * kMs + jitter(rng), 3, 4));
		for (uint32_t rank : {1u, 2u, 3u})
			in[2].push_back(
				coll(rank, seq, t - 30 * kMs, end - 30 * kMs + jitter(rng) - early, 10 + rank, 4));
	}
	auto res = estimate_residuals(in);
	ASSERT_EQ(res.size(), 3u);
	EXPECT_EQ(res[0].ns, 0);
	EXPECT_EQ(res[0].rounds, 0u);
	EXPECT_EQ(res[1].rounds, 25u);
	EXPECT_EQ(res[2].rounds, 25u);
	EXPECT_LT(std::abs(res[1].ns + 50 * kMs), 50'000) << res[1].ns;
	EXPECT_LT(std::abs(res[2].ns - 30 * kMs), 100'000) << res[2].ns;

	// An input that shares nothing keeps the wall clocks' word.
	in.push_back({coll(0, 0, 5, 9, 1, 8)});
	EXPECT_EQ(estimate_residuals(in)[3].rounds, 0u);
	EXPECT_EQ(estimate_residuals(in)[3].ns, 0);
}

// Two ranks on two machines, each recorded apart: the same pids, machine
// b up 5 s longer than a, and b's wall offset read 50 ms wrong.
TEST_F(MergeTest, TwoMachinesOnOneClock)
{
	const int64_t off_a = 1'700'000'000 * 1'000'000'000LL, off_b = off_a - 5'000 * kMs;
	Recording a, b;
	a.meta = {{"hostname", "node"}, {"python_sample_period_ns", "1000000"}, {"runq_measured", "1"}};
	b.meta = {{"hostname", "node"}, {"runq_measured", "1"}};
	a.wall_offset_ns = off_a;
	b.wall_offset_ns = off_b + 50 * kMs; // wrong by 50 ms
	for (Recording *r : {&a, &b}) {
		r->processes = {{.pid = 42, .ppid = 1, .comm = "python3", .start_ns = 0}};
		r->threads = {{42, 42, "python3"}, {42, 43, "gloo"}};
		r->drops = {{"uprobe", "ring_buffer_full", 1}};
	}
	a.metrics = {{.ts_ns = 10'000 * kMs, .layer = "host", .name = "psi_cpu_some_pct", .key = "", .value = 1}};
	b.metrics = {{.ts_ns = 15'001 * kMs, .layer = "host", .name = "psi_cpu_some_pct", .key = "", .value = 2}};
	// Unix times of the collectives: rank 1 (on b) 2 ms late to each.
	for (uint64_t seq = 0; seq < 5; seq++) {
		int64_t t = 10'000 * kMs + static_cast<int64_t>(seq) * 20 * kMs;
		a.spans.push_back(coll(0, seq, t, t + 3 * kMs, 42));
		b.spans.push_back(coll(1, seq, t + 2 * kMs + 5'000 * kMs, t + 3 * kMs + 5'000 * kMs + 10'000, 42));
	}
	a.spans.push_back({.start_ns = 500, .dur_ns = 5, .pid = 42, .tid = 42, .layer = "torch", .name = "aten::mm"});
	// The enqueue that issued b's first collective (pipeline/issues.h): its
	// thread and time move with the rest of b.
	const uint64_t issued_b = b.spans[0].start_ns - 10'000;
	b.spans[0].args["issued_ns"] = issued_b;
	b.spans[0].args["issued_tid"] = 42;
	std::string pa = file("r0.db"), pb = file("r1.db"), out = file("all.db");
	test::write_recording(a, pa, {a.spans});
	test::write_recording(b, pb, {b.spans});

	auto merged = merge_recordings({pa, pb}, out);
	ASSERT_TRUE(merged.ok()) << merged.error().message;
	ASSERT_EQ(merged->size(), 2u);
	EXPECT_EQ((*merged)[1].host, "node/r1");
	EXPECT_EQ((*merged)[1].pid_offset, kPidStride);
	EXPECT_EQ((*merged)[1].clock_shift_ns, -5'000 * kMs + 50 * kMs);
	EXPECT_EQ((*merged)[1].residual.rounds, 5u);
	EXPECT_LT(std::abs((*merged)[1].residual.ns + 50 * kMs), kMs / 10) << (*merged)[1].residual.ns;

	auto rec = load_recording(out);
	ASSERT_TRUE(rec.ok()) << rec.error().message;
	EXPECT_EQ(rec->wall_offset_ns, off_a);
	ASSERT_EQ(rec->spans.size(), 11u);
	auto rounds = match_collectives(rec->spans);
	ASSERT_EQ(rounds.size(), 5u);
	for (const Round &r : rounds) {
		ASSERT_TRUE(r.complete());
		EXPECT_EQ(r.arrivals[0].pid, 42u);
		EXPECT_EQ(r.arrivals[1].pid, 42u + kPidStride);
		EXPECT_LT(std::llabs(int64_t(r.arrivals[0].end_ns) - int64_t(r.arrivals[1].end_ns)), kMs);
		EXPECT_NEAR(double(r.skew_ns()), 2e6, 1e5); // rank 1's lateness, not the clocks'
		EXPECT_EQ(r.last().rank, 1u);
	}
	const Span *issued = nullptr;
	for (const Span &sp : rec->spans)
		if (sp.args.contains("issued_ns"))
			issued = &sp;
	ASSERT_NE(issued, nullptr);
	EXPECT_EQ(issued->args["issued_tid"], 42u + kPidStride);
	EXPECT_EQ(issued->args["issued_ns"].get<uint64_t>(), issued->start_ns - 10'000);
	ASSERT_EQ(rec->processes.size(), 2u);
	EXPECT_EQ(rec->processes[1].pid, 42u + kPidStride);
	EXPECT_EQ(rec->processes[1].ppid, 1u + kPidStride);
	EXPECT_EQ(rec->processes[1].start_ns, 0u); // not known stays so
	EXPECT_EQ(rec->threads.size(), 4u);
	EXPECT_EQ(rec->threads[3].tid, 43u + kPidStride);
	ASSERT_EQ(rec->metrics.size(), 2u);
	EXPECT_EQ(rec->metrics[0].key, "node/r0"); // each machine's own track
	EXPECT_EQ(rec->metrics[1].key, "node/r1");
	EXPECT_NEAR(double(rec->metrics[1].ts_ns), 10'001e6, 1e5);
	EXPECT_EQ(rec->drops.size(), 2u);
	EXPECT_EQ(rec->meta.at("python_sample_period_ns"), "1000000");
	EXPECT_EQ(rec->meta.at("runq_measured"), "1"); // both inputs measured each call's wait to run

	json origins = json::parse(rec->meta.at(kProcessOriginsMeta));
	EXPECT_EQ(origins, json::parse(R"({"42": {"host": "node/r0", "pid": 42, "input": 0},
					   "10000042": {"host": "node/r1", "pid": 42, "input": 1}})"));
	json from = json::parse(rec->meta.at("merged_from"));
	ASSERT_EQ(from.size(), 2u);
	EXPECT_EQ(from[1].at("file"), pb);
	EXPECT_EQ(from[1].at("wall_offset_ns"), off_b + 50 * kMs);
	EXPECT_EQ(from[1].at("residual_ns"), (*merged)[1].residual.ns);
	EXPECT_EQ(from[1].at("residual_rounds"), 5);
	EXPECT_EQ(from[1].at("meta").at("hostname"), "node");

	// Read as any recording: its summary has the collectives.
	std::string text = format_summary(*rec);
	EXPECT_NE(text.find("collectives across ranks: 5 rounds, 5 with every rank seen"), std::string::npos) << text;
	EXPECT_NE(text.find("arrived last: gloo rank 1 x5"), std::string::npos) << text;
	// A merged file is not merged again.
	auto again = merge_recordings({out, pa}, file("again.db"));
	ASSERT_FALSE(again.ok());
	EXPECT_NE(again.error().message.find("already a merge"), std::string::npos) << again.error().message;
	EXPECT_FALSE(fs::exists(file("again.db")));

	// One input that did not measure each call's wait to run: a span of
	// the merge without runq_ns may not have waited 0.
	b.meta.erase("runq_measured");
	std::string pb2 = file("r1-old.db"), out2 = file("all2.db");
	test::write_recording(b, pb2, {b.spans});
	ASSERT_TRUE(merge_recordings({pa, pb2}, out2).ok());
	auto rec2 = load_recording(out2);
	ASSERT_TRUE(rec2.ok()) << rec2.error().message;
	EXPECT_EQ(rec2->meta.count("runq_measured"), 0u);
}

TEST_F(MergeTest, CommandErrorsNameTheFixAndWriteNothing)
{
	Recording a;
	std::string pa = file("a.db"), pb = file("b.db"), out = file("all.db");
	test::write_recording(a, pa, {});
	test::write_recording(a, pb, {});
	std::ofstream(file("notes.txt")) << "not a recording\n";
	auto run = [&](MergeArgs args) {
		testing::internal::CaptureStderr();
		int rc = run_merge(args);
		return std::make_pair(rc, testing::internal::GetCapturedStderr());
	};
	auto expect = [&](MergeArgs args, int rc, const std::string &says) {
		auto [got, err] = run(args);
		EXPECT_EQ(got, rc) << err;
		EXPECT_NE(err.find(says), std::string::npos) << err;
		EXPECT_FALSE(fs::exists(out));
	};
	expect({.inputs = {pa}, .output = out}, 2, "merge needs two or more recordings, got 1");
	expect({.inputs = {pa, pa}, .output = out}, 2, pa + " is given twice");
	expect({.inputs = {pa, out}, .output = out}, 2, "is also an input");
	expect({.inputs = {pa, file("missing.db")}, .output = out}, 1, "missing.db: No such file or directory");
	expect({.inputs = {pa, file("notes.txt")}, .output = out}, 1, "notes.txt is not an eacgm recording");
	expect({.inputs = {pa, pb}, .output = file("no/dir/all.db")}, 2, "no/dir");

	std::ofstream(out) << "kept";
	auto [rc, err] = run({.inputs = {pa, pb}, .output = out});
	EXPECT_EQ(rc, 2);
	EXPECT_NE(err.find("exists; remove it, choose another -o, or pass --force"), std::string::npos) << err;
	EXPECT_EQ(fs::file_size(out), 4u); // untouched
	testing::internal::CaptureStdout();
	EXPECT_EQ(run({.inputs = {pa, pb}, .output = out, .force = true}).first, 0);
	testing::internal::GetCapturedStdout();
	EXPECT_TRUE(load_recording(out).ok());
}
