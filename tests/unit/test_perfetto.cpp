// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>

#include "export/perfetto.h"

using namespace eacgm;
using nlohmann::json;

namespace {

Recording trace_sample()
{
	Recording r;
	r.meta = {{"command", "python3 train.py"}};
	r.wall_offset_ns = 1700000000123456789;
	r.processes = {{.pid = 100, .ppid = 1, .comm = "python3"}, {.pid = 200, .ppid = 100, .comm = "worker"}};
	r.threads = {{100, 100, "python3"}, {100, 101, "pt_autograd_0"}};
	// Deliberately out of order: children before parents, threads mixed.
	r.spans = {
		{.start_ns = 5000,
		 .dur_ns = 0,
		 .pid = 100,
		 .tid = 100,
		 .depth = 1,
		 .layer = "cuda",
		 .name = "cudaLaunchKernel",
		 .ret = 0,
		 .ret_name = "cudaSuccess",
		 .args = {{"kernel", "gemm"}}},
		{.start_ns = 1500,
		 .dur_ns = 2000,
		 .pid = 100,
		 .tid = 100,
		 .depth = 1,
		 .layer = "cuda",
		 .name = "cudaMalloc",
		 .ret = 2,
		 .ret_name = "cudaErrorMemoryAllocation",
		 .bytes = 4096,
		 .args = {{"size", 4096}}},
		{.start_ns = 123456789012345,
		 .dur_ns = 1,
		 .pid = 200,
		 .tid = 201,
		 .layer = "nccl",
		 .name = "ncclAllReduce",
		 .ret = -3},
		{.start_ns = 1500,
		 .dur_ns = 10000,
		 .pid = 100,
		 .tid = 100,
		 .depth = 0,
		 .layer = "torch",
		 .name = "aten::matmul"},
		{.start_ns = 1600, .dur_ns = 7, .pid = 100, .tid = 101, .layer = "python", .name = "forward"},
	};
	return r;
}

std::vector<json> events_with_ph(const json &doc, const std::string &ph)
{
	std::vector<json> out;
	for (const json &e : doc.at("traceEvents"))
		if (e.at("ph") == ph)
			out.push_back(e);
	return out;
}

} // namespace

TEST(Perfetto, TopLevelFields)
{
	json doc = json::parse(perfetto_json(trace_sample()));
	ASSERT_TRUE(doc.is_object());
	EXPECT_TRUE(doc.at("traceEvents").is_array());
	EXPECT_EQ(doc.at("displayTimeUnit"), "ns");
	EXPECT_EQ(doc.at("otherData").at("command"), "python3 train.py");
	EXPECT_EQ(doc.at("otherData").at("clock"), "CLOCK_MONOTONIC");
	EXPECT_EQ(doc.at("otherData").at("wall_offset_ns"), "1700000000123456789");
}

TEST(Perfetto, EveryEventHasTheDocumentedFields)
{
	json doc = json::parse(perfetto_json(trace_sample()));
	size_t x = 0, m = 0;
	for (const json &e : doc.at("traceEvents")) {
		SCOPED_TRACE(e.dump());
		ASSERT_TRUE(e.at("name").is_string());
		ASSERT_TRUE(e.at("pid").is_number_unsigned());
		ASSERT_TRUE(e.at("tid").is_number_unsigned());
		ASSERT_TRUE(e.at("args").is_object());
		if (e.at("ph") == "X") {
			x++;
			EXPECT_TRUE(e.at("cat").is_string());
			EXPECT_TRUE(e.at("ts").is_number());
			EXPECT_TRUE(e.at("dur").is_number());
			EXPECT_TRUE(e.at("args").contains("ret"));
		} else {
			m++;
			EXPECT_EQ(e.at("ph"), "M");
			EXPECT_TRUE(e.at("args").at("name").is_string());
		}
	}
	EXPECT_EQ(x, 5u);
	EXPECT_EQ(m, 4u);
}

TEST(Perfetto, MetadataNames)
{
	json doc = json::parse(perfetto_json(trace_sample()));
	auto meta = events_with_ph(doc, "M");
	ASSERT_EQ(meta.size(), 4u);
	EXPECT_EQ(meta[0].at("name"), "process_name");
	EXPECT_EQ(meta[0].at("pid"), 100);
	EXPECT_EQ(meta[0].at("args").at("name"), "python3 (100)");
	EXPECT_EQ(meta[1].at("name"), "process_name");
	EXPECT_EQ(meta[1].at("args").at("name"), "worker (200)");
	EXPECT_EQ(meta[2].at("name"), "thread_name");
	EXPECT_EQ(meta[2].at("pid"), 100);
	EXPECT_EQ(meta[2].at("tid"), 100);
	EXPECT_EQ(meta[2].at("args").at("name"), "python3");
	EXPECT_EQ(meta[3].at("tid"), 101);
	EXPECT_EQ(meta[3].at("args").at("name"), "pt_autograd_0");
}

TEST(Perfetto, SpansExactTimesAndArgs)
{
	json doc = json::parse(perfetto_json(trace_sample()));
	auto x = events_with_ph(doc, "X");
	ASSERT_EQ(x.size(), 5u);
	// Per thread, by (start asc, dur desc): the parent matmul precedes the
	// malloc that starts at the same nanosecond.
	EXPECT_EQ(x[0].at("name"), "aten::matmul");
	EXPECT_EQ(x[0].at("cat"), "torch");
	EXPECT_EQ(x[0].at("ts").get<double>(), 1.5);
	EXPECT_EQ(x[0].at("dur").get<double>(), 10.0);
	EXPECT_EQ(x[0].at("args"), json({{"ret", 0}}));

	EXPECT_EQ(x[1].at("name"), "cudaMalloc");
	EXPECT_EQ(x[1].at("cat"), "cuda");
	EXPECT_EQ(x[1].at("ts").get<double>(), 1.5);
	EXPECT_EQ(x[1].at("dur").get<double>(), 2.0);
	EXPECT_EQ(x[1].at("pid"), 100);
	EXPECT_EQ(x[1].at("tid"), 100);
	EXPECT_EQ(x[1].at("args"), json({{"size", 4096}, {"ret", "cudaErrorMemoryAllocation"}, {"bytes", 4096}}));

	EXPECT_EQ(x[2].at("name"), "cudaLaunchKernel");
	EXPECT_EQ(x[2].at("ts").get<double>(), 5.0);
	EXPECT_EQ(x[2].at("dur").get<double>(), 0.0); // zero-length spans stay
	EXPECT_EQ(x[2].at("args"), json({{"kernel", "gemm"}, {"ret", "cudaSuccess"}}));

	EXPECT_EQ(x[3].at("name"), "forward");
	EXPECT_EQ(x[3].at("tid"), 101);
	EXPECT_EQ(x[3].at("ts").get<double>(), 1.6);
	EXPECT_EQ(x[3].at("dur").get<double>(), 0.007);

	EXPECT_EQ(x[4].at("name"), "ncclAllReduce");
	EXPECT_EQ(x[4].at("pid"), 200);
	EXPECT_EQ(x[4].at("ts").get<double>(), 123456789012.345);
	EXPECT_EQ(x[4].at("dur").get<double>(), 0.001);
	EXPECT_EQ(x[4].at("args"), json({{"ret", -3}}));
}

TEST(Perfetto, TimestampsKeepNanosecondDigits)
{
	std::string text = perfetto_json(trace_sample());
	EXPECT_NE(text.find("\"ts\":123456789012.345}"), std::string::npos);
	EXPECT_NE(text.find("\"dur\":0.001,"), std::string::npos);
	EXPECT_NE(text.find("\"ts\":1.5}"), std::string::npos);
}

TEST(Perfetto, IdenticalSpansOrderedByDepth)
{
	Recording r;
	r.spans = {{.start_ns = 10, .dur_ns = 5, .pid = 1, .tid = 1, .depth = 2, .name = "inner"},
		   {.start_ns = 10, .dur_ns = 5, .pid = 1, .tid = 1, .depth = 1, .name = "outer"}};
	auto x = events_with_ph(json::parse(perfetto_json(r)), "X");
	ASSERT_EQ(x.size(), 2u);
	EXPECT_EQ(x[0].at("name"), "outer");
	EXPECT_EQ(x[1].at("name"), "inner");
}

TEST(Perfetto, EmptyRecordingIsValid)
{
	json doc = json::parse(perfetto_json(Recording{}));
	EXPECT_TRUE(doc.at("traceEvents").empty());
}

TEST(Perfetto, WriteFile)
{
	char tmpl[] = "/tmp/eacgm_perfetto_XXXXXX";
	ASSERT_NE(mkdtemp(tmpl), nullptr);
	std::string dir = tmpl, path = dir + "/trace.json";
	Recording rec = trace_sample();
	auto r = write_perfetto(rec, path);
	ASSERT_TRUE(r.ok()) << r.error().message;
	std::ifstream in(path);
	std::string text((std::istreambuf_iterator<char>(in)), {});
	EXPECT_EQ(text, perfetto_json(rec));

	auto bad = write_perfetto(rec, dir + "/missing/trace.json");
	EXPECT_FALSE(bad.ok());
	std::filesystem::remove_all(dir);
}

TEST(Perfetto, MetricsAsCounterTracksAndEventsAsInstants)
{
	Recording r = trace_sample();
	r.metrics = {
		{.ts_ns = 1000, .layer = "gpu", .name = "power_w", .key = "gpu0", .value = 250},
		{.ts_ns = 2000, .layer = "gpu", .name = "power_w", .key = "gpu0", .value = 300},
		{.ts_ns = 2000, .layer = "gpu", .name = "power_w", .key = "gpu1", .value = 90},
		{.ts_ns = 3000, .layer = "host", .name = "sched_delay_ns", .key = "", .pid = 100, .value = 5e5},
		{.ts_ns = 3000,
		 .layer = "gpu",
		 .name = "proc_mem_used_bytes",
		 .key = "gpu1",
		 .pid = 100,
		 .value = 1024},
	};
	r.events = {{.ts_ns = 2500, .layer = "gpu", .name = "xid", .key = "gpu1", .args = {{"xid", 79}}},
		    {.ts_ns = 2600, .layer = "host", .name = "oom", .pid = 100, .tid = 101}};
	json doc = json::parse(perfetto_json(r));

	// A track group per device, named after it, above any real pid.
	std::map<uint32_t, std::string> names;
	for (const json &m : events_with_ph(doc, "M"))
		if (m.at("name") == "process_name")
			names[m.at("pid").get<uint32_t>()] = m.at("args").at("name");
	auto counters = events_with_ph(doc, "C");
	ASSERT_EQ(counters.size(), 5u);
	EXPECT_EQ(names.at(counters[0].at("pid")), "gpu gpu0");
	EXPECT_EQ(counters[0].at("pid"), counters[1].at("pid"));
	EXPECT_EQ(names.at(counters[2].at("pid")), "gpu gpu1");
	EXPECT_GE(counters[0].at("pid").get<uint32_t>(), 1u << 30);
	EXPECT_EQ(counters[0].at("name"), "power_w");
	EXPECT_DOUBLE_EQ(counters[0].at("ts").get<double>(), 1.0);
	EXPECT_EQ(counters[1].at("args").at("value"), 300);
	// About one process: on that process, the key in the name.
	EXPECT_EQ(counters[3].at("pid"), 100);
	EXPECT_EQ(counters[3].at("name"), "sched_delay_ns");
	EXPECT_EQ(counters[4].at("pid"), 100);
	EXPECT_EQ(counters[4].at("name"), "proc_mem_used_bytes gpu1");

	auto instants = events_with_ph(doc, "i");
	ASSERT_EQ(instants.size(), 2u);
	EXPECT_EQ(instants[0].at("name"), "xid");
	EXPECT_EQ(instants[0].at("s"), "g");
	EXPECT_EQ(instants[0].at("args").at("xid"), 79);
	EXPECT_EQ(instants[0].at("args").at("key"), "gpu1");
	EXPECT_DOUBLE_EQ(instants[0].at("ts").get<double>(), 2.5);
	EXPECT_EQ(instants[1].at("s"), "t");
	EXPECT_EQ(instants[1].at("tid"), 101);
}

// The event's text is what nlohmann would make of the event as an object
// (keys sorted, invalid UTF-8 replaced, its numbers), byte for byte, where
// the span's own args have keys on both sides of those set and some of the
// same names.
TEST(Perfetto, ASpanEventIsTheTextOfItsObject)
{
	auto dump = [](const json &j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); };
	std::vector<Span> spans(4);
	spans[0] = {.start_ns = 1234567,
		    .dur_ns = 1001,
		    .pid = 7,
		    .tid = 8,
		    .layer = "cuda",
		    .name = "cudaMemcpy",
		    .ret = 1,
		    .ret_name = "cudaErrorInvalidValue",
		    .bytes = 4096,
		    .args = {{"a", 1}, {"bytes", "stale"}, {"pz", "x"}, {"ret", 9}, {"zz", {1.5, "y"}}},
		    .py_stack = PyStack{"step (train.py:10)", "<module> (train.py:40)"}};
	spans[1] = {
		.start_ns = 3, .dur_ns = 0, .pid = 1, .tid = 1, .layer = "torch", .name = "bad\xff name", .ret = -5};
	spans[1].args = {{"shape", "[\xfe]"}, {"bytes", 12}}; // kept: the span moved no bytes
	spans[2] = {.start_ns = 999999999999, .dur_ns = 7, .layer = "python", .name = "f"};
	spans[2].args = nullptr;
	spans[3] = {.start_ns = 10, .dur_ns = 20, .layer = "nccl", .name = "ncclAllReduce"};
	spans[3].args = {{"python", "stale"}, {"samples", 3}};
	spans[3].py_stack = PyStack{"g (m.py:1)"};
	for (const Span &s : spans) {
		SCOPED_TRACE(s.name);
		json args = s.args.is_object() ? s.args : json::object();
		args["ret"] = s.ret_name.empty() ? json(s.ret) : json(s.ret_name);
		if (s.bytes)
			args["bytes"] = s.bytes;
		if (!s.py_stack.empty())
			args["python"] = s.py_stack.frames();
		json event = {{"ph", "X"},
			      {"name", s.name},
			      {"cat", s.layer},
			      {"ts", static_cast<double>(s.start_ns) / 1000.0},
			      {"dur", static_cast<double>(s.dur_ns) / 1000.0},
			      {"pid", s.pid},
			      {"tid", s.tid},
			      {"args", args}};
		EXPECT_EQ(span_event_text(s), dump(event));
	}
	EXPECT_EQ(
		span_event_text(spans[2]),
		R"({"args":{"ret":0},"cat":"python","dur":0.007,"name":"f","ph":"X","pid":0,"tid":0,"ts":999999999.999})");
}

// A collective that ran work a caller's enqueue issued (pipeline/issues.h) is
// linked to that call by a flow: "s" on the issuing thread at the issue,
// "f" at the collective's start, one id.
TEST(Perfetto, AnIssuedCallIsLinkedToWhatIssuedIt)
{
	Recording r;
	r.processes = {{.pid = 100, .ppid = 1, .comm = "python3"}};
	r.spans = {{.start_ns = 1000,
		    .dur_ns = 20,
		    .pid = 100,
		    .tid = 100,
		    .layer = "torch",
		    .name = "c10d::ProcessGroupGloo::allreduce"},
		   {.start_ns = 1010,
		    .dur_ns = 5000,
		    .pid = 100,
		    .tid = 107,
		    .layer = "gloo",
		    .name = "allreduce",
		    .args = {{"issued_ns", 1000},
			     {"issued_tid", 100},
			     {"issued_by", "c10d::ProcessGroupGloo::allreduce"}}}};
	json doc = json::parse(perfetto_json(r));
	auto s = events_with_ph(doc, "s"), f = events_with_ph(doc, "f");
	ASSERT_EQ(s.size(), 1u);
	ASSERT_EQ(f.size(), 1u);
	EXPECT_EQ(s[0].at("id"), f[0].at("id"));
	EXPECT_GE(s[0].at("id").get<uint64_t>(), 1ull << 32);
	EXPECT_EQ(s[0].at("cat"), "issue");
	EXPECT_EQ((std::tuple(s[0].at("pid"), s[0].at("tid"), s[0].at("ts"))), std::tuple(100, 100, 1.0));
	EXPECT_EQ((std::tuple(f[0].at("pid"), f[0].at("tid"), f[0].at("ts"))), std::tuple(100, 107, 1.01));
	EXPECT_EQ(f[0].at("bp"), "e");
}
