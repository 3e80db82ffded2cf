// SPDX-License-Identifier: Apache-2.0
// A recording's trace and summary made from its spans read one at a time
// (RecordingReader::each_span, as `record` and `export` now do) are the same
// bytes as from the whole recording in memory.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "app/commands.h"
#include "export/perfetto.h"
#include "export/summary.h"
#include "store/store.h"
#include "recording_writer.h"

using namespace eacgm;
namespace fs = std::filesystem;

namespace {

class StreamTest : public ::testing::Test {
protected:
	void SetUp() override
	{
		char tmpl[] = "/tmp/eacgm_stream_XXXXXX";
		ASSERT_NE(mkdtemp(tmpl), nullptr);
		dir = tmpl;
	}
	void TearDown() override { fs::remove_all(dir); }
	std::string file(const std::string &name) const { return (fs::path(dir) / name).string(); }
	std::string dir;
};

// Every kind of span a summary or trace treats apart: exact calls with
// errors and bytes, calls weighted by the overhead budget, sampled Python
// runs, spans with stacks, and ties in start time (a parent and its child,
// spans identical in time at two depths) on three threads of two
// processes, stored out of order in several batches.
Recording varied()
{
	Recording r;
	r.meta = {{"command", "python3 train.py"}, {"python_sample_period_ns", "1000000"}};
	r.wall_offset_ns = 1700000000000000000;
	r.processes = {{.pid = 10, .ppid = 1, .comm = "python3", .cmdline = "python3 train.py", .start_ns = 1},
		       {.pid = 20, .ppid = 10, .comm = "worker", .cmdline = "", .start_ns = 2}};
	r.threads = {{10, 10, "python3"}, {10, 11, "pt_autograd_0"}, {20, 20, "worker"}};
	PyStack stack_a{"step (train.py:10)", "<module> (train.py:40)"};
	PyStack stack_b{"forward (model.py:5)", "step (train.py:12)", "<module> (train.py:40)"};
	std::mt19937 rng(7);
	const uint32_t tids[][2] = {{10, 10}, {10, 11}, {20, 20}};
	for (int i = 0; i < 600; i++) {
		Span s;
		auto [pid, tid] = tids[i % 3];
		s.pid = pid;
		s.tid = tid;
		s.start_ns = 1000 + (i / 6) * 100; // two spans of each thread per start
		s.dur_ns = (i % 2) ? 40 : 90 + rng() % 7;
		s.depth = i % 2;
		s.layer = i % 5 == 0 ? "cuda" : "torch";
		s.name = s.layer == "cuda" ? "cudaMemcpy" : "aten::mm" + std::to_string(i % 4);
		if (s.layer == "cuda") {
			s.ret_name = i % 15 == 0 ? "cudaErrorInvalidValue" : "cudaSuccess";
			s.bytes = 4096 + i;
		}
		if (i % 7 == 0)
			s.args["weight"] = 4.0;
		s.py_stack = i % 2 ? stack_a : stack_b;
		r.spans.push_back(s);
	}
	for (int i = 0; i < 20; i++) { // sampled Python runs, one identical in time to another
		Span s{.start_ns = 1000u + 500u * static_cast<uint64_t>(i / 2), .dur_ns = 400, .pid = 10, .tid = 10};
		s.depth = i % 2;
		s.layer = "python";
		s.name = i % 2 ? "forward" : "step";
		s.args = {{"samples", 3 + i}, {"file", "train.py"}, {"line", 10}};
		if (i % 4)
			s.args["sampled_ns"] = 3000000 + i;
		r.spans.push_back(s);
	}
	r.metrics = {{.ts_ns = 1500, .layer = "host", .name = "sched_delay_ns", .pid = 10, .value = 2500}};
	r.events = {{.ts_ns = 1600, .layer = "eacgm", .name = "python_sampler", .args = {{"hz", 250}}}};
	r.drops = {{"torch", "ringbuf_full", 3}};
	return r;
}

// Batches as the record loop writes them, each in the order it was read,
// the later batches first here.
void store(const Recording &rec, const std::string &path)
{
	std::vector<std::vector<Span>> batches;
	for (size_t end = rec.spans.size(); end > 0; end -= std::min<size_t>(end, 150))
		batches.emplace_back(rec.spans.begin() + static_cast<long>(end - std::min<size_t>(end, 150)),
				     rec.spans.begin() + static_cast<long>(end));
	test::write_recording(rec, path, batches);
}

std::string slurp(const std::string &path)
{
	std::ostringstream s;
	s << std::ifstream(path, std::ios::binary).rdbuf();
	return s.str();
}

} // namespace

TEST_F(StreamTest, TraceAndSummaryAreTheSameAsFromMemory)
{
	std::string db = file("run.db"), trace = file("run.json");
	store(varied(), db);
	auto whole = load_recording(db);
	ASSERT_TRUE(whole.ok()) << whole.error().message;
	ASSERT_EQ(whole->spans.size(), 620u);

	uint64_t spans = 0;
	auto summary = write_trace_and_summary(db, trace, &spans);
	ASSERT_TRUE(summary.ok()) << summary.error().message;
	EXPECT_EQ(spans, 620u);
	EXPECT_EQ(slurp(trace), perfetto_json(*whole));
	EXPECT_EQ(*summary, format_summary(*whole));
	// The summary is not an empty match: it holds the counts made above.
	EXPECT_NE(summary->find("2 processes, 3 threads, 620 spans over 10.0 µs\n"), std::string::npos) << *summary;
	EXPECT_NE(summary->find("errors: cudaErrorInvalidValue x40\n"), std::string::npos) << *summary;
}

TEST_F(StreamTest, EachOrderIsTheOrderItPromises)
{
	std::string db = file("run.db");
	store(varied(), db);
	auto reader = RecordingReader::open(db);
	ASSERT_TRUE(reader.ok()) << reader.error().message;
	auto whole = reader->read(true);
	ASSERT_TRUE(whole.ok());
	auto no_spans = reader->read(false);
	ASSERT_TRUE(no_spans.ok());
	EXPECT_TRUE(no_spans->spans.empty());
	EXPECT_EQ(no_spans->processes.size(), 2u);
	EXPECT_EQ(no_spans->drops.size(), 1u);

	std::vector<Span> by_start, as_recorded;
	ASSERT_TRUE(reader->each_span(SpanOrder::by_start, [&](const Span &s) { by_start.push_back(s); }).ok());
	ASSERT_TRUE(reader->each_span(SpanOrder::as_recorded, [&](const Span &s) { as_recorded.push_back(s); }).ok());
	ASSERT_EQ(by_start.size(), whole->spans.size());
	for (size_t i = 0; i < by_start.size(); i++)
		EXPECT_EQ(std::tie(by_start[i].start_ns, by_start[i].tid, by_start[i].name, by_start[i].args),
			  std::tie(whole->spans[i].start_ns, whole->spans[i].tid, whole->spans[i].name,
				   whole->spans[i].args));
	// As stored: the last batch of varied() was written first.
	ASSERT_EQ(as_recorded.size(), 620u);
	EXPECT_EQ(as_recorded.front().start_ns, varied().spans[470].start_ns);
	EXPECT_EQ(as_recorded.front().name, varied().spans[470].name);
}

TEST_F(StreamTest, AFeedThatFailsLeavesNoTrace)
{
	std::string trace = file("run.json");
	Recording rec = varied();
	auto r = write_perfetto(rec, trace, [](const SpanVisit &visit) -> Result<void> {
		visit(Span{.layer = "torch", .name = "aten::mm"});
		return make_error(ErrorKind::Other, "recording run.db is damaged: disk I/O error");
	});
	ASSERT_FALSE(r.ok());
	EXPECT_EQ(r.error().message, "recording run.db is damaged: disk I/O error");
	EXPECT_FALSE(fs::exists(trace));
	EXPECT_TRUE(fs::is_empty(dir)); // nor its temporary file
}
