// SPDX-License-Identifier: Apache-2.0
// `eacgm detect` on a finished recording.
//
// By default every call is judged, from the first: a recording is known
// whole, so each function's model is fitted on all of its calls, robustly,
// and every call is scored against it:
//  1. Features of every call, in start order, with the recording's metrics
//     and events as context (features.h).
//  2. A function's first kWarmupCalls calls in each process are its warm-up
//     and are not scored; nor do they train the model. Nor are the calls of
//     a process's start-up (mark_start_up in offline.cpp).
//  3. A function with at least KeyModel::kMinTrain calls gets its own model,
//     fitted twice: first with any mode allowed and two components to spare,
//     so that a few slowed calls gather in a component of their own rather
//     than widen the normal one;
//     then without the members of components too rare to be a mode (under
//     --min-weight of the calls, or kMinComponentCalls) or that are no
//     mode: an episode (calls 2x the median, all within a few stretches of
//     the run: a fault in force for a while) or a sporadic slowdown (a few
//     calls 4x slower than every mode, not recurring with the job's
//     period), the calls 10x the function's median or more when they are
//     too few together to be a mode, the slowest calls when fewer than
//     kMinComponentCalls are 2x slower than every other (few_apart in
//     offline.cpp), and the calls the first fit flagged,
//     each mode now holding that many at least, the threshold calibrated
//     on the calls fitted (a few slowed calls among 60 would otherwise drag
//     the extrapolated threshold below themselves).
//  4. The functions with fewer calls are pooled per layer: each call's own
//     measures (duration, bytes, bandwidth, gap) relative to its function's
//     median, one model for the layer's pooled calls fitted as in 3, and
//     each function scored by it in its own units (KeyModel::shifted).
//  5. What the online detector would not report is not reported here either
//     (rootcause.h's reportable(): not quicker, not context alone, worth it),
//     but a collective that waited far longer than its rounds usually wait
//     for a straggler is reported whatever its score (the other ranks'
//     arrival says what its duration alone cannot), and so is a call slowed
//     while other processes took its process's CPUs, far beyond what they
//     usually take, in the host intervals around it (starved in
//     offline.cpp: what others took says what a mixture that learnt a long
//     contention as a mode cannot).
//  6. Echoes are folded (fold_echoes in offline.cpp): the caller of a slow
//     call, the calls made late behind it, and every call late for one stall
//     but the first are not told apart from what made them late.
//
// With replay, the recording is instead replayed through the online
// detector in time order with inline refits: the answer the live agent
// gave (cold start, sliding window).
#pragma once
#include <string>
#include <vector>

#include "common/model.h"
#include "detect/online.h"

namespace eacgm::detect {

// One call as the detector saw it: the feature table every detector is
// given (the evaluation's baselines too), with its score and verdict.
struct FeatureRow {
	std::string key; // layer/name
	uint32_t pid = 0, tid = 0;
	uint64_t start_ns = 0, dur_ns = 0;
	bool warmup = false;    // not scored (its function's first calls in the process)
	double score = NAN;     // NaN: not scored (warm-up, or no model)
	double threshold = NAN; // its model's
	bool flagged = false;   // reported as an anomaly (after echoes were folded)
	std::string fault;      // flagged: the fault class its report names (rootcause.h)
	// Its duration or its gap is a slowdown worth telling over its
	// function's median (Worth::told: the ratio, the floor, beyond the
	// machine's stalls), flagged or not: what the evaluation holds every
	// detector's flags to.
	bool worth = false;
	std::string site;                    // the call site (the call_site feature's category)
	std::array<double, kFeatureCount> x; // NaN: the call does not carry it
};

// A process's start-up, not judged (mark_start_up in offline.cpp): its
// first `calls` of `of_calls` (of the layers judged), from start_ns until
// end_ns, when each function it calls steadily had warmed up.
struct StartUp {
	uint32_t pid = 0;
	size_t calls = 0, of_calls = 0;
	uint64_t start_ns = 0, end_ns = 0;
};

struct OfflineReport {
	std::vector<Anomaly> anomalies; // by time
	std::vector<StartUp> start_ups; // by pid
	std::vector<KeyStatus> keys;
	size_t spans = 0; // spans judged (after the layer filter)
	// Calls the model found slow that only waited to run (their own
	// run-queue wait), behind the recording agent, their process's own
	// threads or no other process for long: not reported.
	size_t waited_behind_own = 0;
	std::vector<FeatureRow> rows; // with keep_rows: every call, by key then start
};

// layers: only spans of these layers (empty: all). keep_rows: the feature
// table too (not with replay).
OfflineReport detect_recording(const Recording &rec, DetectOptions opt, const std::vector<std::string> &layers = {},
			       bool replay = false, bool keep_rows = false);

// A function's first calls in a process pay for its set-up (lazy
// initialisation, cold caches and allocators): on Debian's torch 1.13 the
// first call of an operator took 5 to 300 times its median, the second up
// to 3 times. They are its warm-up, not scored.
inline constexpr size_t kWarmupCalls = 2;
// A mixture component of a robust fit holds at least this many calls.
inline constexpr size_t kMinComponentCalls = 10;
// A function needs this many calls (past warm-up) to take part in its
// layer's pooled model: its median must mean something.
inline constexpr size_t kMinPooledCalls = 3;

} // namespace eacgm::detect
