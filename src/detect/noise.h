// SPDX-License-Identifier: Apache-2.0
// The machine's own stalls, measured in the recording: whether a slowdown
// is more than the machine does to any call.
//
// A call can take longer for reasons that are not its own: the CPU it runs
// on is taken by an interrupt, the hypervisor (steal), another thread; a
// page fault, a cache flushed by a neighbour. Such a stall adds time to a
// call whatever the call does, so a short function shows it as a large
// slowdown: a 6 us operator stalled by 50 us is 9x its usual. What a stall
// of a given size costs is the machine's, not a number to fix in advance:
// on the AMD EPYC VMs a uprobe trap and the operators take twice what they
// take on the Xeon ones, and a GPU node's 5 us kernel launch slowed to
// 80 us is a fault there, never reported under a fixed 100 us floor.
//
// So each recording (and the live detector's windows) measures it. Every
// function's calls past warm-up give their excess over the function's
// median (duration, and gap before the call). For a slowdown of E ns on
// function f, the machine's stall rate p(E/2) is measured on the other
// functions no longer than E/2 that call no other traced function (for
// which E/2 is a doubling at least, so that a long function's natural
// spread is not taken for stalls; a caller's stalls are its callee's):
// the share of their calls that E/2 or more was added to (of their time,
// counted in calls as long as f's, where f is the longer: a long call is
// hit more often). Where ten or
// more such calls exist it is their share as measured; beyond, the tail is
// extrapolated from the ten largest (peaks over threshold, exponential
// excess, as the score threshold is: threshold.h). Then f's n calls would
// be stalled by E/2 or more lambda = n p(E/2) times by the machine alone,
// and the chance of the k that were slowed by E/2 to 2E (or more) is
// Poisson's tail. A slowdown is the function's own when that chance is
// below the significance asked for (Worth::noise_alpha): four softmax
// calls of 60 slowed by 57 us where the machine stalls one call in a
// hundred by half that much are (chance 0.003, lambda 0.6); one call of 60
// stalled by 57 us is not (0.45).
#pragma once
#include <array>
#include <cmath>
#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "common/layers.h"
#include "detect/features.h"

namespace eacgm::detect {

class Noise {
public:
	// Sets a function's calls past warm-up: their durations and the gaps
	// before them, ns (a gap that is not finite or negative: none).
	// caller: the function's calls hold other traced calls (most of them
	// do). Its calls are then no measure of the machine: a stall inside
	// its callee is its stall too, and a slowed callee (the fault) would
	// count twice, as the machine's stall and as its own slowdown. The
	// machine's stalls are read on the other functions.
	void set(const std::string &key, const std::vector<double> &durations_ns, const std::vector<double> &gaps_ns,
		 bool caller = false);

	// The same from the calls' features (log_duration, log_gap).
	void set(const std::string &key, const std::vector<const Observation *> &rows, bool caller);

	// The chance that the machine's stalls alone slowed as many of the
	// function's calls about as much as excess_ns (within kBand of it
	// either way; duration when gap is false, else gap), counting `extra`
	// more calls so slowed that are not among those set (a live call being
	// judged). About as much, not as much or more: four calls slowed 9 to
	// 10x are a group whichever is asked about, and a stall of 40 us in a
	// function whose slowed calls took 500 us is no part of them. 0 when
	// the machine's stalls cannot be measured (no other function that
	// short) or the function is unknown: nothing says it is noise.
	double chance(const std::string &key, bool gap, double excess_ns, size_t extra = 0) const;

	// The share of `key`'s calls the machine stalls by excess_ns or more:
	// measured on the functions other than `key` no longer than excess_ns,
	// per call, or per ns of their time for a function longer than their
	// calls on average (stall_rate in noise.cpp); NaN: no such function.
	double stall_rate(const std::string &key, bool gap, double excess_ns) const;

	// A function's median duration (gap), ns; NaN: unknown.
	double median(const std::string &key, bool gap) const;

private:
	struct Calls {
		double median = 0;
		std::vector<double> excess; // over the median, ascending
		bool caller = false;
	};
	static Calls calls_of(std::vector<double> v);
	std::map<std::string, std::array<Calls, 2>> keys_; // [0]: durations, [1]: gaps
};

// Whether a function's calls measure the machine's stalls: not the python
// layer's spans that are built from other layers' calls and samples (they
// start with the torch call under them, and a span built around a slowed
// operator is its echo, not a stall of its own). A Python function measured
// at both ends (exact: the eval loop's entry probe) is timed as any traced
// call is, and its calls are the only ones short enough to measure the
// machine's stalls of a microsecond: without them nothing did, and 22 of a
// Python control run's 48 false alarms were AdamW's generator taking 1.6 us
// for its 0.55 (or coming 12 us late for its 0.9).
inline bool measures_machine(const std::string &layer, bool exact) { return !may_be_estimated(layer) || exact; }

// The Poisson upper tail P(X >= k) for mean lambda.
double poisson_tail(size_t k, double lambda);

// Calls of the reference functions stalled by E or more: with at least
// this many the share is read as measured, below it the tail is
// extrapolated from this many largest.
inline constexpr size_t kStallTail = 10;
// Calls slowed "about as much" as another: within this factor of it.
inline constexpr double kBand = 2;

} // namespace eacgm::detect
