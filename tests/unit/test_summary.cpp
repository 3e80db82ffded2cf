// SPDX-License-Identifier: Apache-2.0
#include <gtest/gtest.h>

#include <iterator>
#include <sstream>

#include "export/summary.h"

using namespace eacgm;

namespace {

Span make_span(const std::string &layer, const std::string &name, uint64_t start, uint64_t dur,
	       const std::string &ret_name = "", uint64_t bytes = 0, uint32_t pid = 100, uint32_t tid = 100)
{
	return Span{.start_ns = start,
		    .dur_ns = dur,
		    .pid = pid,
		    .tid = tid,
		    .layer = layer,
		    .name = name,
		    .ret_name = ret_name,
		    .bytes = bytes};
}

Recording summary_sample()
{
	Recording r;
	r.processes = {{.pid = 100, .comm = "python3"}};
	r.threads = {{100, 100, "python3"}, {100, 101, "worker"}};
	// cudaMemcpy: 100 calls of 1..100 us, 1 MiB each; 2 errors.
	for (uint64_t i = 1; i <= 100; i++)
		r.spans.push_back(make_span("cuda", "cudaMemcpy", i * 1'000'000, i * 1000,
					    i <= 2 ? "cudaErrorInvalidValue" : "cudaSuccess", 1 << 20));
	// cudaMalloc: 10, 20, 30 ns.
	for (uint64_t d : {30, 10, 20})
		r.spans.push_back(make_span("cuda", "cudaMalloc", 500, d, "", 0, 100, 101));
	r.spans.push_back(
		make_span("nccl", "ncclAllReduce", 1000, 2'000'000'000, "ncclSystemError", 3ULL << 30, 200, 200));
	r.spans.push_back(make_span("nccl", "ncclBroadcast", 2000, 5, "ncclSuccess"));
	r.drops = {{"cuda", "ringbuf_full", 10},
		   {"host", "ringbuf_full", 2},
		   {"cuda", "unknown_pid", 3},
		   {"gpu", "ringbuf_full", 0}};
	return r;
}

// The summary line for a function, split into whitespace-separated words.
std::vector<std::string> row_words(const std::string &text, const std::string &name)
{
	std::istringstream lines(text);
	for (std::string line; std::getline(lines, line);) {
		if (line.rfind("  " + name + " ", 0) != 0)
			continue;
		std::istringstream in(line);
		std::vector<std::string> words;
		for (std::string w; in >> w;)
			words.push_back(w);
		return words;
	}
	return {};
}

} // namespace

TEST(Summary, ErrorClassification)
{
	auto err = [](const std::string &ret_name, int64_t ret = 0) {
		Span s;
		s.ret_name = ret_name;
		s.ret = ret;
		return is_error_span(s);
	};
	EXPECT_FALSE(err(""));
	EXPECT_FALSE(err("", -1)); // no decoded name: not judged
	EXPECT_FALSE(err("cudaSuccess"));
	EXPECT_FALSE(err("ncclSuccess"));
	EXPECT_FALSE(err("CUDA_SUCCESS"));
	EXPECT_TRUE(err("cudaErrorMemoryAllocation", 2));
	EXPECT_TRUE(err("ncclSystemError"));
	EXPECT_TRUE(err("EAGAIN"));
	EXPECT_TRUE(err("ok"));
}

TEST(Summary, StatsExact)
{
	auto stats = compute_stats(summary_sample());
	ASSERT_EQ(stats.size(), 4u);
	// layer ascending, then total time descending
	EXPECT_EQ(stats[0].name, "cudaMemcpy");
	EXPECT_EQ(stats[1].name, "cudaMalloc");
	EXPECT_EQ(stats[2].name, "ncclAllReduce");
	EXPECT_EQ(stats[3].name, "ncclBroadcast");

	const FunctionStats &memcpy = stats[0];
	EXPECT_EQ(memcpy.layer, "cuda");
	EXPECT_EQ(memcpy.calls, 100u);
	EXPECT_EQ(memcpy.errors, 2u);
	EXPECT_EQ(memcpy.total_ns, 5'050'000u);
	EXPECT_EQ(memcpy.p50_ns, 50'000u); // rank ceil(0.50 * 100) = 50
	EXPECT_EQ(memcpy.p99_ns, 99'000u); // rank ceil(0.99 * 100) = 99
	EXPECT_EQ(memcpy.bytes, 100u << 20);

	const FunctionStats &malloc = stats[1];
	EXPECT_EQ(malloc.calls, 3u);
	EXPECT_EQ(malloc.errors, 0u);
	EXPECT_EQ(malloc.total_ns, 60u);
	EXPECT_EQ(malloc.p50_ns, 20u); // rank ceil(1.5) = 2
	EXPECT_EQ(malloc.p99_ns, 30u); // rank ceil(2.97) = 3
	EXPECT_EQ(malloc.bytes, 0u);

	EXPECT_EQ(stats[2].layer, "nccl");
	EXPECT_EQ(stats[2].calls, 1u);
	EXPECT_EQ(stats[2].errors, 1u);
	EXPECT_EQ(stats[2].p50_ns, 2'000'000'000u);
	EXPECT_EQ(stats[2].p99_ns, 2'000'000'000u);
	EXPECT_EQ(stats[2].bytes, 3ULL << 30);
	EXPECT_EQ(stats[3].errors, 0u);
}

TEST(Summary, HumanUnits)
{
	EXPECT_EQ(format_duration(0), "0 ns");
	EXPECT_EQ(format_duration(850), "850 ns");
	EXPECT_EQ(format_duration(999), "999 ns");
	EXPECT_EQ(format_duration(1500), "1.50 µs");
	EXPECT_EQ(format_duration(12345), "12.3 µs");
	EXPECT_EQ(format_duration(999'999), "1.00 ms");
	EXPECT_EQ(format_duration(50'500), "50.5 µs");
	EXPECT_EQ(format_duration(2e9), "2.00 s");
	EXPECT_EQ(format_duration(1234e9), "1234 s");
	EXPECT_EQ(format_bytes(512), "512 B");
	EXPECT_EQ(format_bytes(1536), "1.50 KiB");
	EXPECT_EQ(format_bytes(1048575), "1.00 MiB");
	EXPECT_EQ(format_bytes(100u << 20), "100 MiB");
	EXPECT_EQ(format_bytes(3ULL << 30), "3.00 GiB");
}

TEST(Summary, TextRows)
{
	std::string text = format_summary(summary_sample());
	SCOPED_TRACE(text);
	EXPECT_EQ(text.rfind("2 processes, 3 threads, 105 spans over 2.00 s\n", 0), 0u);

	using W = std::vector<std::string>;
	EXPECT_EQ(row_words(text, "cudaMemcpy"),
		  W({"cudaMemcpy", "100", "2", "5.05", "ms", "50.5", "µs", "50.0", "µs", "99.0", "µs", "100", "MiB"}));
	EXPECT_EQ(row_words(text, "cudaMalloc"),
		  W({"cudaMalloc", "3", "0", "60", "ns", "20", "ns", "20", "ns", "30", "ns"}));
	EXPECT_EQ(row_words(text, "ncclAllReduce"),
		  W({"ncclAllReduce", "1", "1", "2.00", "s", "2.00", "s", "2.00", "s", "2.00", "s", "3.00", "GiB"}));
	EXPECT_NE(text.find("\ncuda "), std::string::npos);
	EXPECT_NE(text.find("\nnccl "), std::string::npos);
	EXPECT_LT(text.find("cudaMemcpy"), text.find("cudaMalloc"));
	EXPECT_LT(text.find("cudaMalloc"), text.find("ncclAllReduce"));
	EXPECT_NE(text.find("\nlost records: 15 (ring buffer full: 12, unknown pid: 3)\n"), std::string::npos);
}

TEST(Summary, ColumnsLineUp)
{
	std::string text = format_summary(summary_sample());
	// "p99" heading and every p99 value end in the same column (in
	// characters: µ is two bytes).
	auto end_of = [](const std::string &line, const std::string &word) {
		size_t at = line.find(word);
		size_t chars = 0;
		for (size_t i = 0; i < at + word.size(); i++)
			chars += (static_cast<unsigned char>(line[i]) & 0xC0) != 0x80;
		return chars;
	};
	std::istringstream lines(text);
	std::vector<std::string> all;
	for (std::string l; std::getline(lines, l);)
		all.push_back(l);
	auto find_line = [&](const std::string &prefix) {
		for (const auto &l : all)
			if (l.rfind(prefix, 0) == 0)
				return l;
		return std::string();
	};
	size_t col = end_of(find_line("cuda "), "p99");
	EXPECT_EQ(end_of(find_line("  cudaMemcpy "), "99.0 µs"), col);
	EXPECT_EQ(end_of(find_line("  cudaMalloc "), "30 ns"), col);
}

TEST(Summary, RowLimitPerLayer)
{
	std::string text = format_summary(summary_sample(), 1);
	EXPECT_FALSE(row_words(text, "cudaMemcpy").empty());
	EXPECT_TRUE(row_words(text, "cudaMalloc").empty());
	EXPECT_NE(text.find("  ... 1 more functions, 60 ns in total\n"), std::string::npos) << text;
}

TEST(Summary, EmptyRecording)
{
	std::string text = format_summary(Recording{});
	EXPECT_EQ(text,
		  "0 processes, 0 threads, 0 spans over 0 ns\n\nno spans recorded\n\n"
		  "lost records: 0\n");
}

TEST(Summary, NamesTheMostFrequentErrors)
{
	Recording r = summary_sample();
	EXPECT_EQ(errors_line(r.spans), "\nerrors: cudaErrorInvalidValue x2, ncclSystemError x1\n");
	EXPECT_NE(format_summary(r).find("errors: cudaErrorInvalidValue x2, ncclSystemError x1\n"), std::string::npos);
	std::vector<Span> many;
	for (int k = 0; k < 7; k++)
		for (int i = 0; i <= k; i++)
			many.push_back(make_span("cuda", "f", 0, 1, "err" + std::to_string(k)));
	EXPECT_EQ(errors_line(many), "\nerrors: err6 x7, err5 x6, err4 x5, err3 x4, err2 x3, ... 2 more kinds\n");
	EXPECT_EQ(errors_line({make_span("cuda", "f", 0, 1, "cudaSuccess")}), "");
}

TEST(Summary, MetricsAndEvents)
{
	Recording r;
	r.metrics = {
		{.ts_ns = 1, .layer = "gpu", .name = "power_w", .key = "gpu0", .value = 200},
		{.ts_ns = 2, .layer = "gpu", .name = "power_w", .key = "gpu0", .value = 300},
		{.ts_ns = 2, .layer = "host", .name = "sched_delay_ns", .pid = 100, .value = 2e6},
		{.ts_ns = 3, .layer = "host", .name = "sched_delay_ns", .pid = 100, .value = 0},
	};
	r.events = {{.ts_ns = 5, .layer = "gpu", .name = "xid", .key = "gpu0", .args = {{"xid", 79}}}};
	std::string text = format_summary(r);
	EXPECT_NE(text.find("gpu metrics"), std::string::npos) << text;
	auto line_of = [&](const std::string &label) {
		size_t at = text.find("  " + label + " ");
		EXPECT_NE(at, std::string::npos) << label << " in\n" << text;
		return at == std::string::npos ? "" : text.substr(at, text.find('\n', at) - at);
	};
	std::istringstream power(line_of("power_w gpu0"));
	std::vector<std::string> w{std::istream_iterator<std::string>(power), {}};
	EXPECT_EQ(w, (std::vector<std::string>{"power_w", "gpu0", "2", "250", "W", "200", "W", "300", "W"}));
	std::istringstream delay(line_of("sched_delay_ns pid 100"));
	std::vector<std::string> d{std::istream_iterator<std::string>(delay), {}};
	EXPECT_EQ(
		d,
		(std::vector<std::string>{"sched_delay_ns", "pid", "100", "2", "1.00", "ms", "0", "ns", "2.00", "ms"}));
	EXPECT_NE(text.find("gpu xid x1: gpu0 xid=79"), std::string::npos) << text;
	EXPECT_EQ(text.find("no spans recorded"), std::string::npos) << text;
}

// Sampled spans are runs: their time is samples x the recorded period, they
// count no calls, and the error is 2 sd of the edge errors (period/sqrt(6) a run).
TEST(Summary, SampledFunctionsAreEstimates)
{
	Recording r;
	r.meta["python_sample_period_ns"] = "1000000";
	auto span = [](uint64_t start, uint64_t dur, nlohmann::json args) {
		return Span{.start_ns = start,
			    .dur_ns = dur,
			    .pid = 1,
			    .tid = 1,
			    .layer = "python",
			    .name = "step",
			    .args = std::move(args)};
	};
	r.spans = {span(0, 9'000'000, {{"samples", 10}}), span(20'000'000, 4'000'000, {{"samples", 5}}),
		   span(30'000'000, 7'000'000, {{"exact", true}})};
	auto stats = compute_stats(r);
	ASSERT_EQ(stats.size(), 1u);
	EXPECT_EQ(stats[0].calls, 1u); // the measured call only
	EXPECT_EQ(stats[0].runs, 2u);
	EXPECT_EQ(stats[0].samples, 15u);
	EXPECT_EQ(stats[0].total_ns, 15'000'000u + 7'000'000u);
	EXPECT_EQ(stats[0].p50_ns, 7'000'000u); // over measured calls
	EXPECT_NEAR(stats[0].error_ns, 2e6 * std::sqrt(2.0 / 6.0), 1e-6);
	std::string text = format_summary(r);
	EXPECT_NE(text.find("python        calls samples      time    ± 2 sd      mean       p50       p99\n"),
		  std::string::npos)
		<< text;
	EXPECT_NE(text.find("  step            1      15   22.0 ms  ±1.15 ms         -   7.00 ms   7.00 ms\n"),
		  std::string::npos)
		<< text;
}

// A recursive function's runs nest on its thread: each sample counts once,
// in the outermost run, whatever order the runs come in (a live inner run
// ends, and comes, first); its time never exceeds its thread's.
TEST(Summary, ARecursiveFunctionsSamplesCountOnce)
{
	Recording r;
	r.meta["python_sample_period_ns"] = "1000000";
	auto run = [](uint32_t tid, uint64_t start_ms, uint64_t end_ms, uint64_t samples) {
		return Span{.start_ns = start_ms * 1'000'000,
			    .dur_ns = (end_ms - start_ms) * 1'000'000,
			    .pid = 1,
			    .tid = tid,
			    .layer = "python",
			    .name = "walk",
			    .args = {{"samples", samples}}};
	};
	// Thread 1: walk 0-10 ms around walk 1-9 around walk 2-8, then 20-24;
	// thread 2: walk 3-8, at the same time as thread 1's nested ones.
	r.spans = {run(1, 2, 8, 6), run(1, 1, 9, 8), run(2, 3, 8, 5), run(1, 0, 10, 10), run(1, 20, 24, 4)};
	auto stats = compute_stats(r);
	ASSERT_EQ(stats.size(), 1u);
	EXPECT_EQ(stats[0].runs, 5u);
	EXPECT_EQ(stats[0].samples, 10u + 4 + 5);
	EXPECT_EQ(stats[0].total_ns, 19'000'000u);
	EXPECT_NEAR(stats[0].error_ns, 2e6 * std::sqrt(3.0 / 6.0), 1e-6); // three outermost runs
	// With each run's own time (sampled_ns), the outer runs' times.
	for (Span &s : r.spans)
		s.args["sampled_ns"] = s.args["samples"].get<uint64_t>() * 999'000;
	EXPECT_EQ(compute_stats(r)[0].total_ns, 19u * 999'000);
}

// Calls of a probe throttled by --overhead-budget carry args.weight: the
// counts, errors, totals and bytes are weighted sums, marked "~"; p50/p99
// are of the calls seen; the budget's section names the probe.
TEST(Summary, ThrottledCallsAreWeightedEstimates)
{
	Recording r;
	auto span = [](uint64_t dur, nlohmann::json args, int64_t ret = 0) {
		return Span{.start_ns = 1000,
			    .dur_ns = dur,
			    .pid = 1,
			    .tid = 1,
			    .layer = "cuda",
			    .name = "cudaMemcpy",
			    .ret = ret,
			    .ret_name = ret ? "cudaErrorInvalidValue" : "cudaSuccess",
			    .bytes = 100,
			    .args = std::move(args)};
	};
	r.spans = {span(10, {}), span(20, {{"weight", 10.0}}), span(30, {{"weight", 10.0}}, 1)};
	r.meta["overhead_budget_pct"] = "2.000";
	r.meta["overhead_full_pct_max"] = "12.500";
	r.meta["overhead_expected_pct"] = "1.900";
	r.meta["overhead_throttled"] = R"([{"layer":"cuda","function":"cudaMemcpy","coverage":0.1,"now":true}])";
	auto stats = compute_stats(r);
	ASSERT_EQ(stats.size(), 1u);
	EXPECT_TRUE(stats[0].estimated);
	EXPECT_EQ(stats[0].seen, 3u);
	EXPECT_EQ(stats[0].calls, 21u);
	EXPECT_EQ(stats[0].errors, 10u);
	EXPECT_EQ(stats[0].total_ns, 10u + 200u + 300u);
	EXPECT_EQ(stats[0].bytes, 2100u);
	EXPECT_EQ(stats[0].p50_ns, 20u);
	std::string text = format_summary(r);
	EXPECT_NE(text.find("  cudaMemcpy      ~21     ~10    510 ns     24 ns     20 ns     30 ns  2.05 KiB\n"),
		  std::string::npos)
		<< text;
	EXPECT_NE(text.find("overhead budget 2.0%: traced calls would have cost 12.5% of the traced processes' CPU at "
			    "most; the hottest were probed in bursts (about 1.9% now):\n  cuda cudaMemcpy: attached "
			    "10.0% of the time\n"),
		  std::string::npos)
		<< text;
	// Since overhead_share_of, the budget's shares are of the calling
	// threads' CPU; a recording made before it says the processes'.
	r.meta["overhead_share_of"] = "calling_threads";
	text = format_summary(r);
	EXPECT_NE(text.find("traced calls would have cost 12.5% of the calling threads' CPU at most"),
		  std::string::npos)
		<< text;
}
