// SPDX-License-Identifier: Apache-2.0
// The one-screen text summary printed after a recording and by `eacgm summary`.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <set>
#include <utility>
#include <string>
#include <vector>

#include "common/model.h"
#include "common/units.h"
#include "pipeline/collectives.h"

namespace eacgm {

struct FunctionStats {
	std::string layer;
	std::string name;
	uint64_t calls = 0;
	uint64_t errors = 0; // see is_error_span (common/model.h)
	uint64_t total_ns = 0;
	uint64_t p50_ns = 0; // nearest-rank percentiles of dur_ns
	uint64_t p99_ns = 0;
	uint64_t bytes = 0; // sum over calls
	// Sampled spans (args "samples", from a stack sampler) are runs, not
	// calls: they count here, not in calls, p50 or p99 (exact calls only).
	// total_ns holds the sum of their samples' periods for them (args
	// sampled_ns; samples x the period in older recordings): their
	// unbiased time. A sample counts once per function however deep it
	// recurses: a run inside another run of the same function on its
	// thread (a recursive call; Module._call_impl around the modules it
	// calls) adds its run, not its samples or time, which the outer
	// run's samples hold already.
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

// "\nerrors: NAME xCOUNT, ..." for the most frequent error names (each
// is_error_span, common/model.h); "" without errors.
std::string errors_line(const std::vector<Span> &spans);

// Stragglers: the rounds of collectives across ranks (pipeline/collectives.h)
// with the largest arrival skew, and per rank how often it arrived last.
// Only complete rounds (every rank seen) have a last rank and a skew that
// is more than a lower bound; the others are counted.
class StragglerTally {
public:
	explicit StragglerTally(size_t keep = 10) : keep_(keep) {}
	void add(const Round &r);
	uint64_t rounds() const { return rounds_; }
	uint64_t complete() const { return skews_.size(); }
	// The complete rounds of the largest skew, largest first (ties: the
	// earlier first), at most `keep`.
	std::vector<Round> largest() const;
	// Skews of the complete rounds, in ns, ascending.
	std::vector<uint64_t> skews() const;
	// (layer, rank) -> complete rounds it arrived last in.
	const std::map<std::pair<std::string, uint32_t>, uint64_t> &last_counts() const { return last_; }

private:
	size_t keep_;
	uint64_t rounds_ = 0;
	std::vector<uint64_t> skews_;
	std::vector<Round> top_; // a heap, the smallest skew on top
	std::map<std::pair<std::string, uint32_t>, uint64_t> last_;
};

// What the summary needs of the spans, gathered one span at a time, so
// that a recording's spans need not be held (RecordingReader::each_span):
// per function its counts and sums and its exact calls' durations (8 bytes
// a call, for exact percentiles), the processes and threads, the extent,
// the error names.
class SpanTally {
public:
	// period_ns: what a sampled span's count of samples is worth where the
	// span does not say (sampled_ns); 0: not known.
	explicit SpanTally(uint64_t period_ns = 0);
	// rec's spans (none when it was read without them), with the period
	// its meta gives (python_sample_period_ns).
	explicit SpanTally(const Recording &rec);
	void add(const Span &s);

	// One entry per (layer, function), sorted by layer, then total time
	// descending, then name.
	std::vector<FunctionStats> stats() const;
	uint64_t spans() const { return spans_; }
	uint64_t first_ns() const { return first_ns_; } // the earliest start, with spans()
	uint64_t last_ns() const { return last_ns_; }   // the latest end
	const std::set<uint32_t> &pids() const { return pids_; }
	const std::set<std::pair<uint32_t, uint32_t>> &threads() const { return tids_; }
	const std::map<std::string, uint64_t> &error_names() const { return errors_; } // see is_error_span
	// The collectives' rounds across ranks, those still open counted as
	// incomplete (matched over the whole recording: a round's ranks may
	// be far apart in the order spans come in).
	StragglerTally stragglers() const;

private:
	// A sampled span, until stats() finds whether it is nested in another
	// of its function (spans come in any order: a live inner run ends, and
	// comes, before the run around it).
	struct Run {
		uint32_t pid = 0, tid = 0;
		uint64_t start_ns = 0, end_ns = 0, samples = 0, ns = 0;
	};
	// What a function's runs not inside another of theirs hold: how many
	// they are, their samples and time.
	struct Outermost {
		uint64_t runs = 0, samples = 0, ns = 0;
	};
	static Outermost outermost(std::vector<Run> &runs);
	struct Acc {
		FunctionStats st;
		mutable std::vector<Run> runs; // stats() sorts them in place (outermost)
		// Exact calls'; stats() sorts them in place (the same values):
		// not copied, they are a summary's one cost per call.
		mutable std::vector<uint64_t> durs;
		// Weighted sums of its exact calls: calls, errors, ns, bytes.
		std::array<double, 4> sums{};
	};
	uint64_t period_;
	uint64_t spans_ = 0, first_ns_ = UINT64_MAX, last_ns_ = 0;
	std::set<uint32_t> pids_;
	std::set<std::pair<uint32_t, uint32_t>> tids_;
	std::map<std::string, uint64_t> errors_;
	std::map<std::pair<std::string, std::string>, Acc> acc_;
	CollectiveMatcher collectives_;
	StragglerTally stragglers_;
	std::vector<Round> rounds_; // reused
};

// SpanTally(rec).stats().
std::vector<FunctionStats> compute_stats(const Recording &rec);

// Header (processes, threads, spans, duration), a table per layer with calls,
// errors, total, mean, p50, p99 and bytes (a layer with sampled functions:
// calls, samples, time, its error, mean, p50, p99), the collectives' rounds
// across ranks with the largest arrival skew and who arrived last, and a
// "lost records" line. Shows
// the max_rows_per_layer functions with the most total time per layer
// (0: all) and says how many were left out.
std::string format_summary(const Recording &rec, size_t max_rows_per_layer = 20);
// The same with the spans from tally (rec.spans unused).
std::string format_summary(const Recording &rec, const SpanTally &tally, size_t max_rows_per_layer = 20);

} // namespace eacgm
