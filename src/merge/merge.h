// SPDX-License-Identifier: Apache-2.0
// Recordings of several nodes (or of the ranks of one node, each recorded
// apart) made one recording: one timeline, processes kept apart.
//
// Clocks: every recording keeps its monotonic-to-wall offset (unix =
// mono + wall_offset_ns), so a recording's times move onto the first
// recording's clock by the difference of their offsets. That is as good
// as the machines' wall clocks agree (NTP: a millisecond or worse), and a
// recording whose offset was read while its clock was being stepped is
// off by the step. What is left, the residual, is estimated from the
// collectives both recordings saw (pipeline/collectives.h): a collective
// ends at nearly the same time on every rank, as the last rank to arrive
// releases them all, so the median over the rounds both saw of the
// difference of their ends is the residual (the median: a collective with
// a root, whose root may finish before the others have received, or a
// rank descheduled at its end, moves single rounds, not the median).
//
// Processes: pids of different machines may be the same, so input k's pids
// (and tids) become pid + k * kPidStride (input 0 keeps its own). A pid is
// below 2^22 on Linux, so they cannot collide, and the input is read off
// the pid. Each process's host and original pid are in the merged meta
// (kProcessOriginsMeta); the trace labels processes with them and with
// their rank (export/perfetto.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "common/model.h"
#include "common/result.h"

namespace eacgm {

inline constexpr uint32_t kPidStride = 10'000'000;
// Inputs whose pids fit below the trace's own track pids (1 << 30).
inline constexpr size_t kMaxMergeInputs = 100;

// Each input's host label: its meta hostname, else its file's stem; where
// two inputs would have the same label, "hostname/stem" (the stem alone
// without a hostname), and the path as given where that is not enough.
std::vector<std::string> host_labels(const std::vector<std::string> &hostnames, const std::vector<std::string> &paths);

// One input's residual: what its times, already on the first input's
// clock by wall offsets, still need; from how many rounds of collectives
// it was estimated (0: none in common with the inputs aligned before it,
// residual 0: the wall clocks are all there is).
struct Residual {
	int64_t ns = 0;
	size_t rounds = 0;
};
// Per input, its collective spans (on the common clock, any pids): input
// 0 is the reference; then, again and again, the input with the most
// rounds in common with those aligned so far is aligned to them, so that
// inputs that share no collective with input 0 are still aligned through
// another.
std::vector<Residual> estimate_residuals(const std::vector<std::vector<Span>> &collectives);

// What was done with one input.
struct MergedInput {
	std::string path, host;
	uint32_t pid_offset = 0;
	int64_t wall_offset_ns = 0; // its own
	int64_t clock_shift_ns = 0; // its wall offset less the first input's
	Residual residual;
	size_t processes = 0;
	uint64_t spans = 0;
};

// Reads the inputs (at least two recordings) and writes their merge to
// output (whole or not at all: StoreWriter), its meta telling per input
// what was done (meta merged_from, a JSON array of MergedInput and the
// input's own meta) and per process where it came from
// (kProcessOriginsMeta).
Result<std::vector<MergedInput>> merge_recordings(const std::vector<std::string> &inputs, const std::string &output);

} // namespace eacgm
