// The one-screen text summary printed after a recording and by `eacgm summary`.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "common/model.h"

namespace eacgm {

struct FunctionStats {
	std::string layer;
	std::string name;
	uint64_t calls = 0;
	uint64_t errors = 0; // see is_error_span()
	uint64_t total_ns = 0;
	uint64_t p50_ns = 0; // nearest-rank percentiles of dur_ns
	uint64_t p99_ns = 0;
	uint64_t bytes = 0; // sum over calls
	// Sampled spans (args "samples", from a stack sampler) are runs, not
	// calls: they count here, not in calls, p50 or p99 (exact calls only).
	// total_ns holds the sum of their samples' periods for them (args
	// sampled_ns; samples x the period in older recordings): their
	// unbiased time.
	uint64_t runs = 0, samples = 0;
	double error_ns = 0; // 2 sd of that estimate: each run's two edges are
			     // off by up to a period (the longest used), sd
			     // period/sqrt(6) a run
	// Calls of a probe throttled by --overhead-budget carry args.weight
	// (the calls each stands for): calls, errors, total_ns and bytes are
	// then weighted sums, estimates; `seen` counts the spans recorded.
	bool estimated = false;
	uint64_t seen = 0;
};

// A span failed when its decoded return names something other than success:
// ret_name is non-empty and does not end in "success", case-insensitively
// (cudaSuccess, ncclSuccess, CUDA_SUCCESS). Spans without a decoded return
// (ret_name empty) count as successes whatever their raw ret.
// "\nerrors: NAME xCOUNT, ..." for the most frequent error names; "" without errors.
std::string errors_line(const std::vector<Span> &spans);
bool is_error_span(const Span &s);

// One entry per (layer, function), sorted by layer, then total time
// descending, then name.
std::vector<FunctionStats> compute_stats(const Recording &rec);

// Header (processes, threads, spans, duration), a table per layer with calls,
// errors, total, mean, p50, p99 and bytes (a layer with sampled functions:
// calls, samples, time, its error, mean, p50, p99), and a "lost records" line. Shows
// the max_rows_per_layer functions with the most total time per layer
// (0: all) and says how many were left out.
std::string format_summary(const Recording &rec, size_t max_rows_per_layer = 20);

// Human units with three significant digits: "850 ns", "12.3 µs", "1.50 ms",
// "2.00 s"; "512 B", "1.50 KiB", "3.00 GiB".
std::string format_duration(double ns);
std::string format_bytes(uint64_t bytes);

} // namespace eacgm
