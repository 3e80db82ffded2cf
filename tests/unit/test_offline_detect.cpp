// SPDX-License-Identifier: Apache-2.0
// eacgm detect on a whole recording (detect/offline.h): every call past its
// function's warm-up is judged, by a model fitted robustly on all of the
// function's calls, or on its layer's pooled calls when it has few; echoes
// of a slow call (its callers, the calls it made late) are folded into it.
#include <fstream>
#include <gtest/gtest.h>

#include <functional>
#include <random>

#include "detect/offline.h"
#include "detect/rootcause.h"
#include "detect/status.h"
#include "export/summary.h"

using namespace eacgm;
using namespace eacgm::detect;

namespace {

constexpr uint64_t kUs = 1'000;

// One thread's training steps: per step, an operator `outer` (softmax)
// calling `inner` (_softmax) and then `after` (linear), 200 us apart;
// durations jitter by about 5%. slow: steps whose inner (and so outer)
// call takes factor x as long.
struct Steps {
	std::vector<Span> spans;
	std::vector<uint64_t> slow_starts; // the slowed inner calls' starts
};

Steps steps(size_t n, const std::set<size_t> &slow, double factor, uint64_t seed = 1)
{
	std::mt19937_64 rng(seed);
	std::normal_distribution<double> jitter(0, 0.05);
	auto span = [](uint64_t t, uint64_t d, const char *name) {
		return Span{.start_ns = t, .dur_ns = d, .pid = 1, .tid = 1, .layer = "torch", .name = name};
	};
	Steps out;
	uint64_t t = 1'000'000'000;
	for (size_t i = 0; i < n; i++) {
		double inner = 4 * kUs * std::exp(jitter(rng)) * (slow.count(i) ? factor : 1);
		// The first two steps warm up: ten times as long, not an anomaly.
		if (i < 2)
			inner *= 10;
		uint64_t d = static_cast<uint64_t>(inner);
		out.spans.push_back(span(t, d + 2 * kUs, "aten::softmax_int"));
		out.spans.push_back(span(t + kUs, d, "aten::_softmax"));
		if (slow.count(i))
			out.slow_starts.push_back(t + kUs);
		t += d + 2 * kUs + 20 * kUs;
		out.spans.push_back(span(t, static_cast<uint64_t>(12 * kUs * std::exp(jitter(rng))), "aten::linear"));
		t += 200 * kUs;
	}
	return out;
}

DetectOptions options()
{
	DetectOptions o;
	o.model.fpr = 1e-4;
	o.worth = {2, 10 * kUs};
	return o;
}

// One rank's all-reduce of a 2-rank round: rank 1 arrives `late` after
// rank 0, which waits for it (its span that much longer).
Span allreduce(uint64_t t, uint64_t dur, uint64_t late, uint32_t rank, uint64_t seq)
{
	return Span{.start_ns = t + (rank ? late : 0),
		    .dur_ns = dur + (rank ? 0 : late),
		    .pid = 100 + rank,
		    .tid = 200 + rank,
		    .layer = "gloo",
		    .name = "allreduce",
		    .bytes = 4000,
		    .args = {{"rank", rank}, {"nranks", 2}, {"seq", seq}}};
}

const KeyStatus &key(const OfflineReport &r, const std::string &k)
{
	for (const KeyStatus &s : r.keys)
		if (s.key == k)
			return s;
	throw std::runtime_error("no key " + k);
}

// One thread's calls of gloo's allreduce, n of them, each about dur_ns
// (log-normal jitter of sd jitter_sd), slow(i) ones factor x as long;
// between them gap_ns, jittered too when jitter_gap.
struct OneFunction {
	Recording rec;
	std::vector<uint64_t> slow_starts;
};

OneFunction allreduces(size_t n, double dur_ns, double jitter_sd, double gap_ns, bool jitter_gap,
		       const std::function<bool(size_t)> &slow, double factor, uint64_t seed)
{
	std::mt19937_64 rng(seed);
	std::normal_distribution<double> jitter(0, jitter_sd);
	OneFunction out;
	uint64_t t = 1'000'000'000;
	for (size_t i = 0; i < n; i++) {
		const auto d = static_cast<uint64_t>(dur_ns * std::exp(jitter(rng)) * (slow(i) ? factor : 1));
		out.rec.spans.push_back(
			Span{.start_ns = t, .dur_ns = d, .pid = 1, .tid = 2, .layer = "gloo", .name = "allreduce"});
		if (slow(i))
			out.slow_starts.push_back(t);
		t += d + static_cast<uint64_t>(jitter_gap ? gap_ns * std::exp(jitter(rng)) : gap_ns);
	}
	return out;
}

// The starts of the anomalies, in their order.
std::vector<uint64_t> starts(const std::vector<Anomaly> &anomalies)
{
	std::vector<uint64_t> out;
	for (const Anomaly &a : anomalies)
		out.push_back(a.ts_ns);
	return out;
}

// One thread's steps of one function (`like` gives its name, layer and
// args): each step after a wait of wait_us (none when 0), `calls` calls,
// call i of step s taking us(s, i) microseconds, gap_us apart; durations,
// waits and gaps jitter by about 5%. slowed(s, i): the calls whose starts
// are kept, in order.
struct StepRun {
	Recording rec;
	std::vector<uint64_t> slow_starts;
};

StepRun step_calls(const Span &like, size_t steps, double wait_us, size_t calls, double gap_us,
		   const std::function<double(size_t, size_t)> &us, const std::function<bool(size_t, size_t)> &slowed,
		   uint64_t seed)
{
	std::mt19937_64 rng(seed);
	std::normal_distribution<double> jitter(0, 0.05);
	StepRun out;
	uint64_t t = 1'000'000'000;
	for (size_t step = 0; step < steps; step++) {
		if (wait_us > 0)
			t += static_cast<uint64_t>(wait_us * kUs * std::exp(jitter(rng)));
		for (size_t i = 0; i < calls; i++) {
			Span s = like;
			s.start_ns = t;
			s.dur_ns = static_cast<uint64_t>(us(step, i) * kUs * std::exp(jitter(rng)));
			out.rec.spans.push_back(s);
			if (slowed(step, i))
				out.slow_starts.push_back(t);
			t += s.dur_ns + static_cast<uint64_t>(gap_us * kUs * std::exp(jitter(rng)));
		}
	}
	return out;
}

} // namespace

// 60 steps, 4 of them with a softmax 30x slower: every slowed call is found
// from the first steps on (no cold start), named by its duration, and
// nothing else is reported: not the warm-up, not the softmax around the
// slowed _softmax, not the linear that came late behind it.
TEST(OfflineDetect, EveryCallIsJudgedAndEchoesAreFolded)
{
	Steps s = steps(60, {3, 20, 41, 53}, 30);
	Recording rec;
	rec.spans = s.spans;
	auto rep = detect_recording(rec, options());
	std::vector<uint64_t> found;
	for (const Anomaly &a : rep.anomalies) {
		EXPECT_EQ(a.name, "aten::_softmax");
		EXPECT_EQ(a.causes[0]["feature"], "log_duration");
		found.push_back(a.ts_ns);
	}
	EXPECT_EQ(found, s.slow_starts);
	const KeyStatus &inner = key(rep, "torch/aten::_softmax");
	EXPECT_TRUE(inner.trained);
	EXPECT_EQ(inner.seen, 60u);
	// All but the 2 warm-up calls and step 2's: the start-up lasts until
	// linear, called last in each step, made its first call past warm-up.
	EXPECT_EQ(inner.scored, 57u);
	EXPECT_EQ(inner.flagged, 4u);
	EXPECT_NE(inner.note.find("fitted on its 57 calls but the"), std::string::npos) << inner.note;
	EXPECT_NE(inner.note.find("3 warm-up calls"), std::string::npos) << inner.note;
	EXPECT_EQ(key(rep, "torch/aten::softmax_int").flagged, 0u); // echo of _softmax
	EXPECT_EQ(key(rep, "torch/aten::linear").flagged, 0u);      // came late behind it
	EXPECT_EQ(rep.spans, 180u);
}

// A step calls softmax in four blocks, the first after the step's long
// backward pass: _softmax has a long-gap mode (block 0) and a short one.
// The first block's softmax slowed 30x is the slow call, not an echo of
// its caller: its gap is long as block 0's always is (measured against the
// gap mode nearest it, not against the short mode it was scored under:
// then the slowed calls looked late by a whole step and went unreported,
// found on a GPT run in make eval).
TEST(OfflineDetect, ASlowedFirstCallOfAStepIsNotLateForItsUsualGap)
{
	std::mt19937_64 rng(3);
	std::normal_distribution<double> jitter(0, 0.05);
	auto span = [](uint64_t t, uint64_t d, const char *name) {
		return Span{.start_ns = t, .dur_ns = d, .pid = 1, .tid = 1, .layer = "torch", .name = name};
	};
	const std::set<size_t> slow = {11, 27, 40, 52, 66, 71};
	Recording rec;
	std::vector<uint64_t> slow_starts;
	uint64_t t = 1'000'000'000;
	for (size_t step = 0; step < 80; step++) {
		for (int block = 0; block < 4; block++) {
			double factor = block == 0 && slow.count(step) ? 30 : 1;
			auto d = static_cast<uint64_t>(20 * kUs * std::exp(jitter(rng)) * factor);
			rec.spans.push_back(span(t, d + 2 * kUs, "aten::softmax_int"));
			rec.spans.push_back(span(t + kUs, d, "aten::_softmax"));
			if (factor > 1)
				slow_starts.push_back(t + kUs);
			t += d + 2 * kUs + static_cast<uint64_t>(100 * kUs * std::exp(jitter(rng)));
		}
		t += static_cast<uint64_t>(5000 * kUs * std::exp(jitter(rng))); // backward, optimizer
	}
	auto rep = detect_recording(rec, options());
	std::vector<uint64_t> found;
	for (const Anomaly &a : rep.anomalies) {
		EXPECT_EQ(a.name, "aten::_softmax") << a.causes.dump();
		EXPECT_EQ(a.causes[0]["feature"], "log_duration") << a.causes.dump();
		found.push_back(a.ts_ns);
	}
	EXPECT_EQ(found, slow_starts);
}

// A data pipeline's Python function, called 8 times a step through map():
// the first call after the step's 100 ms of training, 9 us each time, the
// others 1 to 10 us apart and 2 to 20 us long. On 12 of 160 steps the first
// call spins 2 ms more (make eval's Python fault). Such a call is scored far
// below its threshold under the widely spread short-gap mode (the tight
// first-call mode makes its 2 ms far less likely), with its gap the larger
// share; but the gap is the first call's usual one, and the call is told
// for its duration. Before, only that first share was weighed, found not
// worth telling, and every one of the 500x slower calls went unreported
// (0 of 12 on the tuning seed's gpt-py run of make eval).
TEST(OfflineDetect, ASlowFirstCallOfAStepIsToldForItsDurationWhenItsGapIsUsual)
{
	std::mt19937_64 rng(5);
	std::normal_distribution<double> jitter(0, 0.03), spread(0, 0.5);
	const std::set<size_t> slow = {22, 24, 57, 59, 78, 105, 107, 112, 117, 121, 139, 150};
	Recording rec;
	std::vector<uint64_t> slow_starts;
	uint64_t t = 1'000'000'000;
	for (size_t step = 0; step < 160; step++) {
		for (int i = 0; i < 8; i++) {
			auto d = static_cast<uint64_t>(i == 0 ? 9 * kUs * std::exp(jitter(rng))
							      : 4 * kUs * std::exp(spread(rng)));
			if (i == 0 && slow.count(step)) {
				d += 2000 * kUs;
				slow_starts.push_back(t);
			}
			rec.spans.push_back(Span{
				.start_ns = t, .dur_ns = d, .pid = 1, .tid = 1, .layer = "python", .name = "encode"});
			t += d + static_cast<uint64_t>(3 * kUs * std::exp(spread(rng)));
		}
		t += static_cast<uint64_t>(100'000 * kUs * std::exp(jitter(rng)));
	}
	auto rep = detect_recording(rec, options());
	std::vector<uint64_t> found;
	for (const Anomaly &a : rep.anomalies) {
		if (!std::count(slow_starts.begin(), slow_starts.end(), a.ts_ns))
			continue; // the spread's own tail: not what this test is about
		EXPECT_EQ(a.causes[0]["feature"], "log_duration") << a.causes.dump();
		EXPECT_EQ(a.causes[0]["fault"], "python_slow") << a.causes.dump();
		found.push_back(a.ts_ns);
	}
	EXPECT_EQ(found, slow_starts);
}

// A fault in force for a while slows every call it meets: 2 stretches of
// 15 calls each, 50x slower, among 300. Enough of them to make a mixture
// component of their own, which would be learnt as a mode; they come in
// few stretches of the calls, so they are an episode, flagged, every one.
TEST(OfflineDetect, AnEpisodeOfSlowCallsIsFlaggedNotLearnt)
{
	auto slow = [](size_t i) { return (i >= 100 && i < 115) || (i >= 200 && i < 215); };
	OneFunction f = allreduces(300, 10'000 * kUs, 0.1, 30'000 * kUs, true, slow, 50, 5);
	auto rep = detect_recording(f.rec, options());
	EXPECT_EQ(starts(rep.anomalies), f.slow_starts);
	EXPECT_NE(key(rep, "gloo/allreduce").note.find("but the 30 unusual ones"), std::string::npos)
		<< key(rep, "gloo/allreduce").note;
}

// A slow link in force 8 times for 3 calls: 24 calls of 600 slowed 50x, in
// runs, over 8 of the 50 slices of the run. As many calls spread over it
// would meet 19 slices, so they are not clumped by that measure, and their
// distances recur (1, within a run): learnt as a mode, unless calls that
// come in runs within a quarter of the run are an episode. All 24 found.
TEST(OfflineDetect, AnEpisodeInShortRunsIsFlaggedNotLearnt)
{
	auto slow = [](size_t i) { // 50 slices of 12 calls: in every 6th from the 4th, its calls 2 to 4
		const size_t bin = i / 12, at = i % 12;
		return bin % 6 == 3 && at >= 2 && at < 5;
	};
	OneFunction f = allreduces(600, 100 * kUs, 0.05, kUs * 1000, false, slow, 50, 11);
	auto rep = detect_recording(f.rec, options());
	EXPECT_EQ(starts(rep.anomalies), f.slow_starts);
}

// A function with a true minority mode (each step's last of 8 addmm calls,
// 5x as long: a model's head) and 11 random steps whose first addmm took
// 30x: the slowed calls are 2.3% of the calls, over --min-weight, and made
// a component the first fit would learn as a mode. They do not recur with
// the step (the distances between them differ), the head's calls do:
// every slowed call is found, no head call.
TEST(OfflineDetect, ASporadicSlowdownIsNotLearntARecurringModeIs)
{
	std::mt19937_64 rng(9);
	std::normal_distribution<double> jitter(0, 0.05);
	const std::set<size_t> slow = {3, 4, 6, 9, 13, 18, 24, 31, 39, 48, 58};
	Recording rec;
	std::vector<uint64_t> slow_starts;
	uint64_t t = 1'000'000'000;
	for (size_t step = 0; step < 60; step++)
		for (size_t i = 0; i < 8; i++) {
			const bool slowed = i == 0 && slow.count(step);
			const double base = (i == 7 ? 150 : 30) * kUs * (slowed ? 30 : 1);
			const auto d = static_cast<uint64_t>(base * std::exp(jitter(rng)));
			rec.spans.push_back(Span{.start_ns = t,
						 .dur_ns = d,
						 .pid = 1,
						 .tid = 1,
						 .layer = "torch",
						 .name = "aten::addmm"});
			if (slowed)
				slow_starts.push_back(t);
			t += d + 20 * kUs;
		}
	auto rep = detect_recording(rec, options());
	std::vector<uint64_t> found;
	for (const Anomaly &a : rep.anomalies)
		found.push_back(a.ts_ns);
	EXPECT_EQ(found, slow_starts);
	EXPECT_NE(key(rep, "torch/aten::addmm").note.find("but the 11 unusual ones"), std::string::npos)
		<< key(rep, "torch/aten::addmm").note;
}

// A once-a-step mode too rare for --min-weight (a GPT's Tensor.__hash__:
// the first of each step's 52 calls takes 2.5 us after the step's 80 ms
// wait, 5.7x the others' 0.44 us 3 us apart; 1.9% of the calls) recurs with
// the step and spreads over the run: a mode, none of its calls flagged.
// Twelve steps whose fifth call took 3x are still every one found, though
// half their distances recur (5 steps apart three times, 10 three times).
TEST(OfflineDetect, ARareModeThatRecursWithTheStepIsLearnt)
{
	const std::set<size_t> slow = {10, 15, 20, 25, 35, 45, 55, 70, 90, 110, 135, 160};
	auto slowed = [&](size_t step, size_t i) { return i == 4 && slow.count(step) > 0; };
	StepRun r = step_calls(
		Span{.pid = 1,
		     .tid = 1,
		     .layer = "python",
		     .name = "Tensor.__hash__",
		     .args = {{std::string(kExactArg), true}}},
		200, 80'000, 52, 3,
		[&](size_t step, size_t i) { return (i == 0 ? 2.5 : 0.44) * (slowed(step, i) ? 3 : 1); }, slowed, 4);
	DetectOptions o = options();
	o.worth = {2, kUs / 2};
	auto rep = detect_recording(r.rec, o);
	EXPECT_EQ(starts(rep.anomalies), r.slow_starts);
}

// CPU contention in every fifth 100 ms interval of a 3 s run: stress-ng
// took 85 ms of it from the process (which waited 90 ms to run, 5 ms
// otherwise, eacgm taking the rest), and every call in it took 2.5x. Slowed calls that come back with the run's
// period, so many of them, are a mode to a mixture. What others took says
// they were slowed: every one is reported, named CPU contention; nothing
// else is. Were it every third interval, the process would be
// overcommitted rather than contended now and then: not reported. Nor
// when the one taking the CPU is the recording agent (its pid in meta, or
// an eacgm by name) or the process's own other threads, nor a kworker while
// the agent detached probes (its grace-period poll: offline.cpp's Agent),
// though a kworker is another at any other time.
TEST(OfflineDetect, CallsSlowedWhileOthersTookTheProcesssCPUsAreReported)
{
	constexpr uint64_t kInterval = 100 * kUs * 1000, kStep = 5 * kUs * 1000, kT0 = 2'000'000'000;
	auto run = [&](unsigned every, const std::string &culprit, bool agent_detached = false) {
		std::mt19937_64 rng(3);
		std::normal_distribution<double> jitter(0, 0.05);
		Recording rec;
		rec.meta["agent_pid"] = "77";
		std::vector<uint64_t> slowed;
		for (size_t i = 0; i < 600; i++) {
			const uint64_t t = kT0 + kUs * 1000 + i * kStep;
			const bool in = (t - kT0) / kInterval % every == 2;
			const double d = 200 * kUs * std::exp(jitter(rng)) * (in ? 2.5 : 1);
			rec.spans.push_back(Span{.start_ns = t,
						 .dur_ns = static_cast<uint64_t>(d),
						 .pid = 1,
						 .tid = 1,
						 .layer = "torch",
						 .name = "aten::bmm"});
			if (in)
				slowed.push_back(t);
		}
		for (uint64_t k = 0; k <= 30; k++) {
			const bool contended = k % every == 2;
			const uint64_t ts = kT0 + (k + 1) * kInterval; // the interval (ts - 100 ms, ts]
			rec.metrics.push_back(Metric{ts, "host", "sched_delay_ns", "", 1, contended ? 90e6 : 5e6});
			// who ran on its CPUs meanwhile (the host layer's)
			rec.metrics.push_back(Metric{ts, "host", "interference_ns", "eacgm:77", 1, 5e6});
			if (contended)
				rec.metrics.push_back(Metric{ts, "host", "interference_ns", culprit, 1, 85e6});
			if (contended && agent_detached) {
				Event e;
				e.ts_ns = ts - 60 * kUs * 1000; // 40 to 60 ms into the interval
				e.layer = "eacgm";
				e.name = "probe_detach";
				e.args = {{"end_ns", ts - 40 * kUs * 1000}, {"dur_ns", 20 * kUs * 1000}};
				rec.events.push_back(e);
			}
		}
		return std::make_pair(detect_recording(rec, options()), slowed);
	};
	auto [rep, slowed] = run(5, "stress-ng-cpu:99");
	std::vector<uint64_t> found;
	for (const Anomaly &a : rep.anomalies) {
		found.push_back(a.ts_ns);
		EXPECT_EQ(fault_class(a), "cpu_contention") << a.causes.dump();
		EXPECT_EQ(a.causes[0]["what"],
			  "CPU contention: process 1 waited to run 90.0 ms of each 100 ms around the call (usually "
			  "5.00 ms); other processes took 85.0 ms of it, stress-ng-cpu:99 the most (85.0 ms)");
	}
	EXPECT_EQ(found, slowed);
	EXPECT_TRUE(run(3, "stress-ng-cpu:99").first.anomalies.empty());
	EXPECT_TRUE(run(5, "eacgm-agent:77").first.anomalies.empty()); // the agent, renamed
	EXPECT_TRUE(run(5, "eacgm:78").first.anomalies.empty());       // another eacgm
	EXPECT_TRUE(run(5, "python3:1").first.anomalies.empty());      // itself
	EXPECT_TRUE(run(5, "kworker/1:0:30036", true).first.anomalies.empty());
	EXPECT_EQ(run(5, "kworker/1:0:30036").first.anomalies.size(), slowed.size());
	EXPECT_EQ(run(5, "stress-ng-cpu:99", true).first.anomalies.size(), slowed.size()); // not the agent's
}

// The same recording replayed as the live agent saw it: the first 200
// calls of a function train its model, so 60 are never judged.
TEST(OfflineDetect, ReplayKeepsTheColdStart)
{
	Recording rec;
	rec.spans = steps(60, {3, 20, 41, 53}, 30).spans;
	DetectOptions o = options();
	o.background = false;
	auto rep = detect_recording(rec, o, {}, true);
	EXPECT_TRUE(rep.anomalies.empty());
	EXPECT_EQ(key(rep, "torch/aten::_softmax").scored, 0u);
	EXPECT_EQ(key(rep, "torch/aten::_softmax").note.rfind("too few events", 0), 0u);
}

// A slowdown worth less than Worth says (2x and 10 us here) is not told,
// however clear: a 4 us call taking 7 us.
TEST(OfflineDetect, SmallSlowdownsAreNotWorthTelling)
{
	Steps s = steps(60, {30}, 1.8);
	Recording rec;
	rec.spans = s.spans;
	EXPECT_TRUE(detect_recording(rec, options()).anomalies.empty());
	DetectOptions any = options();
	any.worth = {};
	auto rep = detect_recording(rec, any);
	ASSERT_EQ(rep.anomalies.size(), 1u);
	EXPECT_EQ(rep.anomalies[0].ts_ns, s.slow_starts[0]);
}

// Time the traced calls do not account for (the thread was in Python, or
// stalled) makes every next call late: reported once, by the first.
TEST(OfflineDetect, AStallBetweenCallsIsReportedOnce)
{
	Steps s = steps(60, {}, 1);
	// Step 30 stalls 1 ms before its softmax: every call from there on is
	// 1 ms later.
	const uint64_t stall = s.spans[3 * 30].start_ns;
	for (Span &sp : s.spans)
		if (sp.start_ns >= stall)
			sp.start_ns += 1'000 * kUs;
	Recording rec;
	rec.spans = s.spans;
	auto rep = detect_recording(rec, options());
	ASSERT_EQ(rep.anomalies.size(), 1u);
	const Anomaly &a = rep.anomalies[0];
	EXPECT_EQ(a.ts_ns, s.spans[3 * 30].start_ns);
	EXPECT_EQ(a.causes[0]["feature"], "log_gap");
}

// A function called at two points of each step has two usual gaps before
// it (aten::addmm of two Linear layers: 120 us after the first, 650 us
// after the step's backward), and a duration a little different at each,
// each steady, while the gaps vary. A call with the first point's
// duration but the second point's gap is unusual only in how the two go
// together: its gap is one of the function's usual ones, no stall, though
// the component its duration fits puts it at 5 sd (seen in CI on
// test_detect's log_softmax run: "aten::addmm: log_gap 622 us, typically
// 136 us"). A gap longer than both usual ones is a stall, reported.
TEST(OfflineDetect, AGapAsLongAsTheFunctionsOtherUsualGapIsNoStall)
{
	std::mt19937_64 rng(5);
	std::normal_distribution<double> steady(0, 0.01), varied(0, 0.25);
	auto us = [&](double v, std::normal_distribution<double> &j) {
		return static_cast<uint64_t>(v * kUs * std::exp(j(rng)));
	};
	Recording rec;
	uint64_t t = 1'000'000'000, stalled = 0;
	std::vector<uint64_t> swapped;
	for (size_t step = 0; step < 300; step++) {
		const bool swap = step % 50 == 25; // the second point's duration at the first point
		uint64_t d = us(swap ? 40 : 30, steady);
		if (swap)
			swapped.push_back(t);
		rec.spans.push_back(
			Span{.start_ns = t, .dur_ns = d, .pid = 1, .tid = 1, .layer = "torch", .name = "aten::addmm"});
		t += d + us(120, varied);
		if (step == 200)
			stalled = t += 3'000 * kUs;
		d = us(40, steady);
		rec.spans.push_back(
			Span{.start_ns = t, .dur_ns = d, .pid = 1, .tid = 1, .layer = "torch", .name = "aten::addmm"});
		t += d + us(650, varied);
	}
	ASSERT_EQ(swapped.size(), 6u);
	auto rep = detect_recording(rec, options());
	std::string told;
	for (const Anomaly &a : rep.anomalies)
		told += a.causes[0].value("what", std::string()) + "\n";
	ASSERT_EQ(rep.anomalies.size(), 1u) << told;
	EXPECT_EQ(rep.anomalies[0].ts_ns, stalled);
	EXPECT_EQ(rep.anomalies[0].causes[0]["feature"], "log_gap");
}

// A function called 90 times a step, 2 us apart (an optimizer's generator
// over the parameters), waits the rest of the step before its first call
// of each: 20 ms, a wait too rare among its calls (1 in 90) to be learnt as
// a mode, and full of the step's other calls (a matmul every 100 us).
// Those waits are no stall: its thread ran traced calls through them (45 of
// 77 false alarms of a fault-free GPT run's Python functions in make eval
// were such waits). The same wait in step 40, where the thread ran no
// traced call for 15 ms of it (descheduled, in I/O, in untraced Python), is
// a stall, told once.
TEST(OfflineDetect, AWaitFullOfTheThreadsOtherCallsIsNoStall)
{
	std::mt19937_64 rng(7);
	std::normal_distribution<double> jitter(0, 0.05);
	auto us = [&](double v) { return static_cast<uint64_t>(v * kUs * std::exp(jitter(rng))); };
	auto span = [](uint64_t t, uint64_t d, const char *name) {
		return Span{.start_ns = t, .dur_ns = d, .pid = 1, .tid = 1, .layer = "python", .name = name};
	};
	Recording rec;
	uint64_t t = 1'000'000'000, stalled = 0;
	for (size_t step = 0; step < 120; step++) {
		// The forward and backward: 200 matmuls, 80 us each, 20 us apart;
		// in step 40, the thread is away for 15 ms after the 50th.
		for (int i = 0; i < 200; i++) {
			if (step == 40 && i == 50)
				stalled = t += 15'000 * kUs;
			uint64_t d = us(80);
			rec.spans.push_back(span(t, d, "matmul"));
			t += d + us(20);
		}
		for (int i = 0; i < 90; i++) {
			uint64_t d = us(3);
			rec.spans.push_back(span(t, d, "genexpr"));
			t += d + us(2);
		}
	}
	auto rep = detect_recording(rec, options());
	std::string told;
	for (const Anomaly &a : rep.anomalies)
		told += a.name + " " + a.causes[0].value("what", std::string()) + "\n";
	// The stall, told once: by the first call late for it, the matmul after
	// it (the step's first genexpr, late for the same stall, is its echo).
	ASSERT_EQ(rep.anomalies.size(), 1u) << told;
	EXPECT_EQ(rep.anomalies[0].ts_ns, stalled) << told;
	EXPECT_EQ(rep.anomalies[0].causes[0]["feature"], "log_gap") << told;
}

// Functions called too few times for a model of their own are scored by
// their layer's pooled model, each relative to its own median, and shown in
// their own units; a layer with one such function has no pool.
TEST(OfflineDetect, FewCallsArePooledPerLayer)
{
	std::mt19937_64 rng(3);
	std::normal_distribution<double> jitter(0, 0.05);
	Recording rec;
	uint64_t t = 1'000'000'000, slow_start = 0;
	const char *names[] = {"aten::a", "aten::b", "aten::c", "aten::d", "aten::e", "aten::f"};
	for (size_t round = 0; round < 8; round++)
		for (size_t k = 0; k < 6; k++) {
			double d = (5 + 10 * k) * kUs * std::exp(jitter(rng)); // medians 5 to 55 us
			if (round == 6 && k == 4) {
				d *= 20;
				slow_start = t;
			}
			rec.spans.push_back(Span{.start_ns = t,
						 .dur_ns = static_cast<uint64_t>(d),
						 .pid = 1,
						 .tid = 1,
						 .layer = "torch",
						 .name = names[k]});
			t += static_cast<uint64_t>(d) + 100 * kUs;
		}
	rec.spans.push_back(
		Span{.start_ns = t, .dur_ns = kUs, .pid = 1, .tid = 2, .layer = "cuda", .name = "cudaFree"});
	auto rep = detect_recording(rec, options());
	ASSERT_EQ(rep.anomalies.size(), 1u);
	const Anomaly &a = rep.anomalies[0];
	EXPECT_EQ(a.ts_ns, slow_start);
	EXPECT_EQ(a.name, "aten::e");
	// In aten::e's own units: about 45 us typical, 20x that now.
	double typical = a.features["log_duration"]["typical"];
	EXPECT_NEAR(typical, 45e3, 5e3);
	EXPECT_NEAR(double(a.features["log_duration"]["value"]), double(a.dur_ns), 1.0);
	const KeyStatus &e = key(rep, "torch/aten::e");
	EXPECT_TRUE(e.trained);
	EXPECT_EQ(e.scored, 6u);
	EXPECT_NE(e.note.find("pooled model of 36 calls of 6 functions"), std::string::npos) << e.note;
	const KeyStatus &lone = key(rep, "cuda/cudaFree");
	EXPECT_FALSE(lone.trained);
	EXPECT_EQ(lone.note.rfind("too few events", 0), 0u) << lone.note;
}

// Online detection says what it cannot judge yet: per function in cold
// start its calls so far, 0 once it has a model; the summary says it in
// words.
TEST(DetectStatus, ColdStartFunctionsAreMeasuredAndSummarised)
{
	DetectOptions o;
	o.background = false;
	o.cold_start = 40;
	OnlineDetector det(o);
	StatusCollector status(det, 1000);
	Steps s = steps(30, {}, 1); // 30 calls of each function: all in cold start
	for (const Span &sp : s.spans)
		det.observe(sp);
	std::vector<Metric> m1;
	std::vector<Event> ev;
	status.collect(1000, {}, m1, ev);
	auto value = [](const std::vector<Metric> &ms, const std::string &name, const std::string &key) {
		for (const Metric &m : ms)
			if (m.layer == "detect" && m.name == name && m.key == key)
				return m.value;
		return -1.0;
	};
	EXPECT_EQ(value(m1, "functions_scored", ""), 0);
	EXPECT_EQ(value(m1, "functions_cold_start", ""), 3);
	EXPECT_EQ(value(m1, "cold_start_calls", "torch/aten::_softmax"), 30);
	std::vector<Metric> early;
	status.collect(1500, {}, early, ev); // not due yet
	EXPECT_TRUE(early.empty());
	Steps more = steps(30, {}, 1, 2);
	for (Span sp : more.spans) {
		sp.start_ns += 60'000'000'000ull;
		if (sp.name != "aten::linear") // linear stays in cold start
			det.observe(sp);
	}
	std::vector<Metric> m2;
	status.collect(3000, {}, m2, ev);
	EXPECT_EQ(value(m2, "functions_scored", ""), 2);
	EXPECT_EQ(value(m2, "functions_cold_start", ""), 1);
	EXPECT_EQ(value(m2, "cold_start_calls", "torch/aten::_softmax"), 0); // its gauge goes to 0
	EXPECT_EQ(value(m2, "cold_start_calls", "torch/aten::linear"), 30);

	Recording rec;
	rec.metrics = m1;
	rec.metrics.insert(rec.metrics.end(), m2.begin(), m2.end());
	std::string text = format_summary(rec);
	EXPECT_NE(text.find("online detection: 2 functions scored; 1 not yet (cold start"), std::string::npos) << text;
	EXPECT_NE(text.find("torch/aten::linear (30 calls)"), std::string::npos) << text;
	EXPECT_EQ(text.find("torch/aten::_softmax ("), std::string::npos) << text;
	EXPECT_EQ(text.find("detect metrics"), std::string::npos) << text; // not a table of numbers too
}

// Every anomaly names the fault class its first cause points to.
TEST(FaultClass, OperatorSlowStallAndMemoryPressure)
{
	Steps s = steps(60, {20}, 30);
	Recording rec;
	rec.spans = s.spans;
	auto rep = detect_recording(rec, options());
	ASSERT_EQ(rep.anomalies.size(), 1u);
	EXPECT_EQ(fault_class(rep.anomalies[0]), "operator_slow");
	EXPECT_EQ(fault_name("operator_slow"), "operator slow");

	Steps t = steps(60, {}, 1);
	const uint64_t stall = t.spans[3 * 30].start_ns;
	for (Span &sp : t.spans)
		if (sp.start_ns >= stall)
			sp.start_ns += 1'000 * kUs;
	rec.spans = t.spans;
	// The host layer saw tasks stall on memory for 600 us in the interval
	// around it: the stall's second cause.
	rec.metrics = {{stall - 500 * kUs, "host", "psi_memory_some_stall_us", "", 0, 100},
		       {stall + 100 * kUs, "host", "psi_memory_some_stall_us", "", 0, 600}};
	rep = detect_recording(rec, options());
	ASSERT_EQ(rep.anomalies.size(), 1u);
	const Anomaly &a = rep.anomalies[0];
	EXPECT_EQ(fault_class(a), "stall");
	bool memory = false;
	for (const auto &c : a.causes)
		if (c["fault"] == "memory_pressure") {
			memory = true;
			EXPECT_EQ(c["evidence"]["psi_memory_some_stall_us"], 700.0);
		}
	EXPECT_TRUE(memory) << a.causes.dump(1);
}

// CPU contention goes first when the host layer's interference (others
// running on the CPUs the process waited for) accounts for half the call's
// excess or more, its intervals' share of the call counted; a call slowed
// on its own, with a little interference around, stays operator_slow and
// names the interference second. So does a call that the recording agent's
// interference would account for: the agent's cost is not the job's fault.
TEST(FaultClass, CpuContentionWhenItExplainsTheExcess)
{
	Steps s = steps(60, {20}, 30);
	auto with_interference = [&](double per_ms_us, const std::string &who = "stress-ng:999") {
		Recording rec;
		rec.spans = s.spans;
		for (uint64_t t = s.spans.front().start_ns; t < s.spans.back().start_ns + 2'000 * kUs; t += 1'000 * kUs)
			rec.metrics.push_back({t, "host", "interference_ns", who, 1, per_ms_us * kUs});
		return detect_recording(rec, options());
	};
	auto busy = with_interference(900); // 0.9 ms of every 1 ms
	ASSERT_EQ(busy.anomalies.size(), 1u);
	const Anomaly &a = busy.anomalies[0];
	EXPECT_EQ(fault_class(a), "cpu_contention") << a.causes.dump(1);
	double explained = a.causes[0]["evidence"]["explained_ns"], excess = a.causes[0]["evidence"]["excess_ns"];
	EXPECT_GE(explained, 0.5 * excess);
	EXPECT_NEAR(explained, 0.9 * static_cast<double>(a.dur_ns), 0.05 * static_cast<double>(a.dur_ns));

	auto quiet = with_interference(10); // 10 us of every 1 ms
	ASSERT_EQ(quiet.anomalies.size(), 1u);
	EXPECT_EQ(fault_class(quiet.anomalies[0]), "operator_slow");
	EXPECT_EQ(quiet.anomalies[0].causes[1]["fault"], "cpu_contention") << quiet.anomalies[0].causes.dump(1);

	auto agent = with_interference(900, "eacgm:77");
	ASSERT_EQ(agent.anomalies.size(), 1u);
	EXPECT_EQ(fault_class(agent.anomalies[0]), "operator_slow") << agent.anomalies[0].causes.dump(1);
}

// A collective that waited for the rank that arrived last names it: the
// rank, how long it waited, the sequence number.
TEST(FaultClass, AStragglingRankIsNamed)
{
	std::mt19937_64 rng(5);
	std::normal_distribution<double> jitter(0, 0.05);
	Recording rec;
	uint64_t t = 1'000'000'000;
	for (uint64_t seq = 0; seq < 60; seq++) {
		uint64_t late = seq == 30 ? 50'000 * kUs : 0; // rank 1 arrives 50 ms late
		uint64_t dur = static_cast<uint64_t>(300 * kUs * std::exp(jitter(rng)));
		for (uint32_t rank = 0; rank < 2; rank++)
			rec.spans.push_back(allreduce(t, dur, late, rank, seq));
		t += dur + late + 2'000 * kUs;
	}
	std::stable_sort(rec.spans.begin(), rec.spans.end(),
			 [](const Span &a, const Span &b) { return a.start_ns < b.start_ns; });
	auto rep = detect_recording(rec, options());
	const Anomaly *waited = nullptr;
	for (const Anomaly &a : rep.anomalies)
		if (a.pid == 100)
			waited = &a;
	ASSERT_NE(waited, nullptr) << rep.anomalies.size();
	EXPECT_EQ(fault_class(*waited), "straggling_rank");
	const auto &c = waited->causes[0];
	EXPECT_EQ(c["evidence"]["last_rank"], 1);
	EXPECT_EQ(c["evidence"]["seq"], 30);
	EXPECT_NEAR(c["evidence"]["waited_ns"].get<double>(), 50e6, 1.0);
	EXPECT_NE(c["what"].get<std::string>().find("waited 50.0 ms for rank 1, which arrived last of 2"),
		  std::string::npos)
		<< c["what"];
	EXPECT_EQ(waited->causes[1]["feature"], "log_duration"); // what it measured, second
}

// A rank late again and again: 12 of 200 rounds, spread over the run, a
// mode by weight (6%) that a mixture learns as normal. The rounds' arrival
// says it: each of rank 0's waits is far beyond what nine rounds in ten
// wait, so each is reported, as a straggler, and nothing else is.
TEST(FaultClass, RepeatedStragglerWaitsAreReportedThoughCommon)
{
	std::mt19937_64 rng(7);
	std::normal_distribution<double> jitter(0, 0.05);
	std::uniform_int_distribution<uint64_t> skew(0, 3'000 * kUs);
	const std::set<uint64_t> slow = {12, 29, 41, 57, 70, 88, 103, 121, 140, 155, 171, 190};
	Recording rec;
	std::vector<uint64_t> waited_starts;
	uint64_t t = 1'000'000'000;
	for (uint64_t seq = 0; seq < 200; seq++) {
		uint64_t late = slow.count(seq) ? 80'000 * kUs : skew(rng); // rank 1's arrival after rank 0's
		uint64_t dur = static_cast<uint64_t>(5'000 * kUs * std::exp(jitter(rng)));
		for (uint32_t rank = 0; rank < 2; rank++)
			rec.spans.push_back(allreduce(t, dur, late, rank, seq));
		if (slow.count(seq))
			waited_starts.push_back(t);
		t += dur + late + 20'000 * kUs;
	}
	std::stable_sort(rec.spans.begin(), rec.spans.end(),
			 [](const Span &a, const Span &b) { return a.start_ns < b.start_ns; });
	auto rep = detect_recording(rec, options());
	std::vector<uint64_t> found;
	for (const Anomaly &a : rep.anomalies) {
		EXPECT_EQ(a.pid, 100u);
		EXPECT_EQ(fault_class(a), "straggling_rank") << a.causes.dump();
		found.push_back(a.ts_ns);
	}
	EXPECT_EQ(found, waited_starts);
}

// A call a thousand times its usual duration that also came late (a stall
// before it, told already by the call that came first after it) is
// reported for its duration: no stall makes a call 10x slower. Before, it
// was folded as the stall's echo: found by make eval, where 3 of 12
// slowed Python calls went unreported so.
TEST(FaultClass, AFarSlowerCallIsItsOwnAnomalyThoughLate)
{
	std::mt19937_64 rng(9);
	std::normal_distribution<double> jitter(0, 0.05);
	const std::set<size_t> slow = {15, 33, 47, 62, 78, 91}, stalled = {33, 62, 91};
	Recording rec;
	std::vector<uint64_t> slow_starts, stall_starts;
	uint64_t t = 1'000'000'000;
	auto call = [&](const char *name, double us) {
		auto d = static_cast<uint64_t>(us * kUs * std::exp(jitter(rng)));
		rec.spans.push_back(
			Span{.start_ns = t, .dur_ns = d, .pid = 1, .tid = 1, .layer = "python", .name = name});
		t += d + static_cast<uint64_t>(5 * kUs * std::exp(jitter(rng)));
		return rec.spans.back().start_ns;
	};
	for (size_t step = 0; step < 100; step++) {
		t += static_cast<uint64_t>((stalled.count(step) ? 150'000 : 30'000) * kUs * std::exp(jitter(rng)));
		uint64_t first = call("next_batch", 20);
		if (stalled.count(step))
			stall_starts.push_back(first);
		for (int i = 0; i < 4; i++) {
			bool slowed = i == 0 && slow.count(step);
			uint64_t start = call("encode", slowed ? 2000 : 2);
			if (slowed)
				slow_starts.push_back(start);
		}
	}
	auto rep = detect_recording(rec, options());
	std::vector<uint64_t> slowed, stalls;
	for (const Anomaly &a : rep.anomalies) {
		if (a.name == "encode") {
			EXPECT_EQ(fault_class(a), "python_slow") << a.causes.dump();
			slowed.push_back(a.ts_ns);
		} else {
			EXPECT_EQ(fault_class(a), "stall") << a.causes.dump();
			stalls.push_back(a.ts_ns);
		}
	}
	EXPECT_EQ(slowed, slow_starts);
	EXPECT_EQ(stalls, stall_starts);
}

// A matmul slowed 1000x on every 25th step (tests/e2e/test_detect.py's
// torch_slow), 3 calls a step: its slowed calls recur at one distance and
// spread over the run, as a once-in-25-steps mode would, but a mode so much
// slower is worth telling: every one is found, nothing else.
TEST(OfflineDetect, ARegularFaultFarSlowerThanTheFunctionIsNoMode)
{
	auto slowed = [](size_t step, size_t i) { return i == 1 && step >= 50 && step % 25 == 0; };
	StepRun r = step_calls(
		Span{.pid = 1, .tid = 1, .layer = "torch", .name = "aten::mm"}, 600, 0, 3, 40,
		[&](size_t step, size_t i) { return slowed(step, i) ? 10'000.0 : 10.0; }, slowed, 6);
	auto rep = detect_recording(r.rec, options());
	EXPECT_EQ(starts(rep.anomalies), r.slow_starts);
}

// A function called 8 times a step, its first call after the step's 30 ms
// wait, spinning 2 ms (500x) as the first call of 10 steps (make eval's
// Python fault): the spin's gap is usual for the step's first call, not a
// stall. Each is told for its duration, named python_slow, and nothing else
// is told (RootCause.ASlowDurationIsListedWhateverItsShare: when its gap
// scores most of it).
TEST(FaultClass, ASpinAtTheStepsFirstCallIsNamedForItsDuration)
{
	const std::set<size_t> slow = {12, 25, 31, 44, 58, 63, 77, 86, 92, 99};
	auto slowed = [&](size_t step, size_t i) { return i == 0 && slow.count(step) > 0; };
	StepRun r = step_calls(
		Span{.pid = 1, .tid = 1, .layer = "python", .name = "encode"}, 110, 30'000, 8, 5,
		[&](size_t step, size_t i) { return slowed(step, i) ? 2000.0 : 4.0; }, slowed, 21);
	auto rep = detect_recording(r.rec, options());
	for (const Anomaly &a : rep.anomalies)
		EXPECT_EQ(fault_class(a), "python_slow") << a.causes.dump();
	EXPECT_EQ(starts(rep.anomalies), r.slow_starts);
}

// A job's start-up (here its first 3 steps, all 10x slow) is neither learnt
// nor reported: it lasts until every function called 20 times or more made
// its first call past warm-up. The step-3 slowdown right after it is found.
TEST(OfflineDetect, TheStartUpIsNotJudged)
{
	Steps s = steps(60, {3, 30}, 30);
	for (Span &sp : s.spans)
		if (sp.start_ns < s.spans[9].start_ns && sp.name != "aten::linear")
			sp.dur_ns *= 10; // steps 0-2 (the first 9 calls) slower still
	Recording rec;
	rec.spans = s.spans;
	auto rep = detect_recording(rec, options(), {}, false, true);
	std::vector<uint64_t> found;
	for (const Anomaly &a : rep.anomalies)
		found.push_back(a.ts_ns);
	EXPECT_EQ(found, s.slow_starts);
	for (const FeatureRow &r : rep.rows)
		EXPECT_EQ(r.warmup, r.start_ns < s.spans[8].start_ns) << r.key << " " << r.start_ns;
	ASSERT_EQ(rep.start_ups.size(), 1u);
	EXPECT_EQ(rep.start_ups[0].pid, 1u);
	EXPECT_EQ(rep.start_ups[0].calls, 8u);
	EXPECT_EQ(rep.start_ups[0].of_calls, 180u);
	EXPECT_EQ(rep.start_ups[0].end_ns - rep.start_ups[0].start_ns, s.spans[8].start_ns - s.spans[0].start_ns);

	// A function first called late in the run, 20 times, after a pause in
	// new functions longer than any in the start-up, does not prolong it:
	// its third call would have made nearly all of the run start-up.
	Recording late = rec;
	for (size_t i = 0; i < 20; i++)
		late.spans.push_back(Span{.start_ns = s.spans[60 + 2 * i].start_ns + kUs,
					  .dur_ns = kUs,
					  .pid = 1,
					  .tid = 1,
					  .layer = "torch",
					  .name = "aten::rare"});
	std::sort(late.spans.begin(), late.spans.end(),
		  [](const Span &a, const Span &b) { return a.start_ns < b.start_ns; });
	auto with_late = detect_recording(late, options(), {}, false, true);
	for (const FeatureRow &r : with_late.rows) {
		if (r.key != "torch/aten::rare") {
			EXPECT_EQ(r.warmup, r.start_ns < s.spans[8].start_ns) << r.key << " " << r.start_ns;
		}
	}
}

// A start-up of most of the process's calls (a Python job's imports: 57%
// of its Python calls in a GPT run, new functions all the while) is not
// judged, its slow calls not reported; the loop after it is.
TEST(OfflineDetect, ALongStartUpIsNotJudged)
{
	std::mt19937_64 rng(3);
	std::normal_distribution<double> jitter(0, 0.05);
	Recording rec;
	uint64_t t = 1'000'000'000;
	auto call = [&](const std::string &name, double us) {
		auto d = static_cast<uint64_t>(us * kUs * std::exp(jitter(rng)));
		rec.spans.push_back(
			Span{.start_ns = t, .dur_ns = d, .pid = 1, .tid = 1, .layer = "python", .name = name});
		t += d + 5 * kUs;
		return rec.spans.back().start_ns;
	};
	// Imports: 40 modules, each calling its own function 25 times, one
	// call in 10 slow (a file read), then a loop of 2 functions, 200 times.
	for (int m = 0; m < 40; m++)
		for (int i = 0; i < 25; i++)
			call("import_" + std::to_string(m), i % 10 == 9 ? 400 : 4);
	const uint64_t loop = t;
	std::vector<uint64_t> slow_starts;
	for (size_t step = 0; step < 200; step++) {
		const bool slow = step == 60 || step == 150;
		uint64_t start = call("encode", slow ? 400 : 4);
		if (slow)
			slow_starts.push_back(start);
		call("forward", 30);
		t += 200 * kUs;
	}
	auto rep = detect_recording(rec, options(), {}, false, true);
	std::vector<uint64_t> found;
	for (const Anomaly &a : rep.anomalies)
		found.push_back(a.ts_ns);
	EXPECT_EQ(found, slow_starts);
	ASSERT_EQ(rep.start_ups.size(), 1u);
	// Until forward's first call past warm-up, on the loop's third step.
	EXPECT_EQ(rep.start_ups[0].calls, 1000u + 5u);
	EXPECT_EQ(rep.start_ups[0].of_calls, 1400u);
	for (const FeatureRow &r : rep.rows) {
		if (r.start_ns < loop) {
			EXPECT_TRUE(r.warmup) << r.key;
		}
	}
}

// The feature table: every call once, with its verdict; the warm-up calls
// marked and unscored.
TEST(OfflineDetect, TheFeatureTableHasEveryCallAndItsVerdict)
{
	Steps s = steps(60, {3, 20, 41, 53}, 30);
	Recording rec;
	rec.spans = s.spans;
	auto rep = detect_recording(rec, options(), {}, false, true);
	ASSERT_EQ(rep.rows.size(), rec.spans.size());
	size_t flagged = 0, warm = 0;
	for (const FeatureRow &r : rep.rows) {
		flagged += r.flagged;
		warm += r.warmup;
		EXPECT_EQ(std::isnan(r.score), r.warmup) << r.key;
		EXPECT_NEAR(r.x[kLogDuration], std::log(double(r.dur_ns)), 1e-9);
		if (r.flagged) {
			EXPECT_EQ(r.key, "torch/aten::_softmax");
			EXPECT_LT(r.score, r.threshold);
			EXPECT_EQ(r.fault, "operator_slow");
		} else {
			EXPECT_EQ(r.fault, "");
		}
	}
	EXPECT_EQ(flagged, 4u);
	EXPECT_EQ(warm, 8u); // 3 functions, 2 each, and the 2 calls of step 2 before linear's third
	EXPECT_TRUE(detect_recording(rec, options()).rows.empty()); // only when asked
}

// A Python function the python layer built from the stacks of the torch
// calls it made starts with its first torch call: same process, thread and
// nanosecond. A verdict on the torch call is not one on the Python function
// (9 unslowed backward() calls were flagged in a make eval run, beside the
// nll_loss_backward each began with).
TEST(OfflineDetect, AVerdictIsOnItsCallNotOnAnotherLayersCallStartingWithIt)
{
	Steps s = steps(60, {3, 20, 41, 53}, 30);
	Recording rec;
	rec.spans = s.spans;
	for (const Span &sp : s.spans)
		if (sp.name == "aten::_softmax")
			rec.spans.push_back(Span{.start_ns = sp.start_ns,
						 .dur_ns = 150 * kUs,
						 .pid = sp.pid,
						 .tid = sp.tid,
						 .layer = "python",
						 .name = "backward"});
	std::sort(rec.spans.begin(), rec.spans.end(), [](auto &a, auto &b) { return a.start_ns < b.start_ns; });
	auto rep = detect_recording(rec, options(), {}, false, true);
	const std::set<uint64_t> slowed(s.slow_starts.begin(), s.slow_starts.end());
	size_t softmax_flagged = 0, backward_beside = 0;
	for (const FeatureRow &r : rep.rows) {
		softmax_flagged += r.flagged && r.key == "torch/aten::_softmax";
		if (r.key == "python/backward" && slowed.count(r.start_ns)) {
			backward_beside++;
			EXPECT_FALSE(r.flagged) << r.start_ns << " " << r.fault;
		}
	}
	EXPECT_EQ(softmax_flagged, 4u);
	EXPECT_EQ(backward_beside, 4u);
	for (const Anomaly &a : rep.anomalies) {
		if (slowed.count(a.ts_ns)) {
			EXPECT_EQ(a.layer, "torch") << a.ts_ns;
		}
	}
}

// Each call's own run-queue wait (kRunqArg) tells a call that waited for a
// CPU from one that was slow. Six bmm calls take 2.5x their median, 80% of
// the excess waiting to run, in host intervals where their process waited
// 20 ms of 100 (a fifth of what the intervals alone call contention). When
// another process took most of that wait, the six are CPU contention, the
// call's wait first in the cause; when the recording agent did, they are
// not reported but counted; two more calls as slow that never waited are
// the model's to report either way; a recording without the measure (no
// runq_measured in meta) leaves all eight to the model, and so does a
// process others take a tenth of in most intervals (data-parallel ranks
// sharing their CPUs: waiting for each other is how they run).
TEST(OfflineDetect, ACallsOwnWaitToRunSaysWhetherItWaitedOrWasSlow)
{
	constexpr uint64_t kInterval = 100 * kUs * 1000, kStep = 5 * kUs * 1000, kT0 = 2'000'000'000;
	const std::set<size_t> waited = {100, 180, 260, 340, 420, 500}, slow = {140, 300};
	auto run = [&](const std::string &culprit, bool measured, bool always = false) {
		std::mt19937_64 rng(5);
		std::normal_distribution<double> jitter(0, 0.05);
		Recording rec;
		rec.meta["agent_pid"] = "77";
		if (measured)
			rec.meta["runq_measured"] = "1";
		std::set<uint64_t> busy; // the intervals the six waited in, by end
		for (size_t i = 0; i < 600; i++) {
			const uint64_t t = kT0 + kUs * 1000 + i * kStep;
			const double usual = 200 * kUs * std::exp(jitter(rng));
			const bool w = waited.count(i) != 0, s = slow.count(i) != 0;
			Span sp{.start_ns = t,
				.dur_ns = static_cast<uint64_t>(usual * (w || s ? 2.5 : 1)),
				.pid = 1,
				.tid = 1,
				.layer = "torch",
				.name = "aten::bmm"};
			if (w) {
				sp.args[kRunqArg] = static_cast<uint64_t>(0.8 * 1.5 * usual);
				busy.insert(kT0 + ((t - kT0) / kInterval + 1) * kInterval);
			}
			rec.spans.push_back(sp);
		}
		for (uint64_t k = 0; k <= 30; k++) {
			const uint64_t ts = kT0 + (k + 1) * kInterval; // the interval (ts - 100 ms, ts]
			const bool b = busy.count(ts) != 0;
			rec.metrics.push_back(Metric{ts, "host", "sched_delay_ns", "", 1, b || always ? 20e6 : 5e6});
			rec.metrics.push_back(Metric{ts, "host", "interference_ns", "eacgm:77", 1, 4e6});
			if (b || always)
				rec.metrics.push_back(Metric{ts, "host", "interference_ns", culprit, 1, 15e6});
		}
		return detect_recording(rec, options());
	};
	auto index_of = [&](const Anomaly &a) { return (a.ts_ns - kT0 - kUs * 1000) / kStep; };

	auto rep = run("stress-ng-cpu:99", true);
	std::set<size_t> contended, other;
	for (const Anomaly &a : rep.anomalies) {
		if (fault_class(a) == "cpu_contention") {
			contended.insert(index_of(a));
			EXPECT_TRUE(a.causes[0]["what"].get<std::string>().starts_with(
				"CPU contention: the call waited to run "))
				<< a.causes[0]["what"];
			EXPECT_TRUE(a.causes[0]["what"].get<std::string>().ends_with(
				"; process 1 waited to run 20.0 ms of each 100 ms around the call (usually 5.00 ms); "
				"other "
				"processes took 16.0 ms of it, stress-ng-cpu:99 the most (15.0 ms)"))
				<< a.causes[0]["what"];
		} else {
			other.insert(index_of(a));
		}
	}
	EXPECT_EQ(contended, waited);
	EXPECT_EQ(other, slow);
	EXPECT_EQ(rep.waited_behind_own, 0u);

	rep = run("eacgm-agent:77", true); // the agent, renamed: its pid in meta
	std::set<size_t> reported;
	for (const Anomaly &a : rep.anomalies) {
		reported.insert(index_of(a));
		EXPECT_NE(fault_class(a), "cpu_contention");
	}
	EXPECT_EQ(reported, slow);
	EXPECT_EQ(rep.waited_behind_own, waited.size());

	std::set<size_t> all = waited;
	all.insert(slow.begin(), slow.end());
	for (auto [measured, always] : {std::pair{false, false}, std::pair{true, true}}) {
		rep = run(always ? "python3:2" : "eacgm-agent:77", measured, always);
		reported.clear();
		for (const Anomaly &a : rep.anomalies) {
			reported.insert(index_of(a));
			EXPECT_NE(a.causes[0]["kind"], "run_queue") << always; // not starved()'s verdict
		}
		EXPECT_EQ(reported, all) << always;
		EXPECT_EQ(rep.waited_behind_own, 0u) << always;
	}
}

// A call others slowed without its waiting: a function of two modes, 135
// us and 1.2 ms (the median in the slower), in a process that waits 17 ms
// of every fifth 100 ms interval (usually 2 ms), stress-ng taking 16 ms of
// it. Six of its quicker calls take 3x in two such intervals, their own
// wait to run nil. They are slower than their mode, not than the
// function's median, so starved() does not take them up; the model flags
// them, and they are named CPU contention. Three as slow in a quiet
// interval, and two 100x in a contended one (11x the slower mode: no
// contention makes a call take 10x without its waiting), are the
// operator's; and so are all of them when the agent, not another process,
// took the CPUs.
TEST(OfflineDetect, ACallSlowedInAContendedIntervalWithoutWaitingIsNamedForTheContention)
{
	constexpr uint64_t kInterval = 100 * kUs * 1000, kStep = 5 * kUs * 1000, kT0 = 2'000'000'000;
	// by index (20 calls an interval, the even ones of the quicker mode): 3x
	// in the contended intervals 7 and 17, in the quiet 10, 100x in the
	// contended 22
	const std::set<size_t> contended = {140, 144, 148, 340, 344, 348}, quiet = {200, 204, 208}, far = {442, 446};
	auto run = [&](const std::string &culprit) {
		std::mt19937_64 rng(8);
		std::normal_distribution<double> jitter(0, 0.05);
		Recording rec;
		rec.meta["agent_pid"] = "77";
		rec.meta["runq_measured"] = "1";
		for (size_t i = 0; i < 3000; i++) {
			const double usual = (i % 2 == 0 ? 135 : 1200) * kUs * std::exp(jitter(rng));
			const double factor = far.count(i) ? 100 : contended.count(i) || quiet.count(i) ? 3 : 1;
			Span sp{.start_ns = kT0 + kUs * 1000 + i * kStep,
				.dur_ns = static_cast<uint64_t>(usual * factor),
				.pid = 1,
				.tid = 1,
				.layer = "torch",
				.name = "aten::batch_norm"};
			sp.args[kRunqArg] = 0;
			rec.spans.push_back(sp);
		}
		for (uint64_t k = 0; k <= 150; k++) {
			const uint64_t ts = kT0 + (k + 1) * kInterval; // the interval (ts - 100 ms, ts]
			const bool busy = k % 5 == 2;
			rec.metrics.push_back(Metric{ts, "host", "sched_delay_ns", "", 1, busy ? 17e6 : 2e6});
			rec.metrics.push_back(Metric{ts, "host", "interference_ns", "eacgm:77", 1, 1e6});
			if (busy)
				rec.metrics.push_back(Metric{ts, "host", "interference_ns", culprit, 1, 16e6});
		}
		std::map<size_t, std::string> out; // index -> fault class
		for (const Anomaly &a : detect_recording(rec, options()).anomalies)
			out[(a.ts_ns - kT0 - kUs * 1000) / kStep] = fault_class(a);
		return out;
	};
	std::map<size_t, std::string> want;
	for (size_t i : contended)
		want[i] = "cpu_contention";
	for (const std::set<size_t> &v : {quiet, far})
		for (size_t i : v)
			want[i] = "operator_slow";
	EXPECT_EQ(run("stress-ng-cpu:99"), want);
	for (size_t i : contended)
		want[i] = "operator_slow";
	EXPECT_EQ(run("eacgm:77"), want);
}

// A Python function that the stacks behind other calls reveal (not measured
// at both ends) is unseen while the probes under it are detached: with the
// overhead budget throttling probes, the gap before such a call is not the
// program's, and a 1 ms hole in its calls is no stall. Measured at both
// ends (exact), or with nothing throttled, the same hole is one.
TEST(OfflineDetect, AGapOfAPythonFunctionSeenThroughThrottledProbesIsUnknown)
{
	auto run = [](bool exact, bool throttled) {
		Steps s = steps(60, {}, 1);
		const uint64_t stall = s.spans[3 * 30].start_ns;
		for (Span &sp : s.spans) {
			if (sp.start_ns >= stall)
				sp.start_ns += 1'000 * kUs;
			sp.layer = "python";
			if (exact)
				sp.args[kExactArg] = true;
		}
		Recording rec;
		rec.spans = s.spans;
		if (throttled) {
			Event e;
			e.ts_ns = s.spans[3 * 20].start_ns;
			e.layer = "eacgm";
			e.name = "overhead_budget";
			e.args = {{"throttled", {"torch/aten::linear"}}};
			rec.events.push_back(e);
		}
		return detect_recording(rec, options()).anomalies;
	};
	EXPECT_EQ(run(false, true).size(), 0u);
	ASSERT_EQ(run(true, true).size(), 1u);
	EXPECT_EQ(run(true, true)[0].causes[0]["feature"], "log_gap");
	ASSERT_EQ(run(false, false).size(), 1u);
	EXPECT_EQ(run(false, false)[0].causes[0]["feature"], "log_gap");
}

// The machine stalls a call now and then by a few microseconds (an
// interrupt, a page fault): a 0.5 us Python function measured at both ends
// (exact) then takes 5x its usual. Such functions are the only measure of
// stalls that short, so theirs are taken as the machine's: two of them,
// each stalled in one call of 50 by 2 us, are not told. Built from the
// stacks (not exact), their spans measure nothing and the same calls are
// told.
TEST(OfflineDetect, ExactPythonFunctionsMeasureTheMachinesShortStalls)
{
	auto run = [](bool exact) {
		std::mt19937_64 rng(5);
		std::normal_distribution<double> jitter(0, 0.05);
		std::uniform_int_distribution<int> stall(0, 49);
		Recording rec;
		std::vector<uint64_t> stalled; // past each function's warm-up
		uint64_t t = 1'000'000'000;
		for (size_t i = 0; i < 4000; i++) {
			const char *name = i % 2 ? "genexpr" : "__next__";
			const bool stalls = stall(rng) == 0;
			const double d = 500 * std::exp(jitter(rng)) + (stalls ? 2'000 : 0);
			if (stalls && i >= 2 * kWarmupCalls)
				stalled.push_back(t);
			Span s{.start_ns = t,
			       .dur_ns = static_cast<uint64_t>(d),
			       .pid = 1,
			       .tid = 1,
			       .layer = "python",
			       .name = name};
			if (exact)
				s.args[kExactArg] = true;
			rec.spans.push_back(s);
			t += s.dur_ns + static_cast<uint64_t>(5'000 * std::exp(jitter(rng)));
		}
		DetectOptions o = options();
		o.worth = kWorthTelling;
		return std::make_pair(starts(detect_recording(rec, o).anomalies), stalled);
	};
	EXPECT_EQ(run(true).first, std::vector<uint64_t>{});
	auto [told, stalled] = run(false);
	EXPECT_EQ(stalled.size(), 80u);
	EXPECT_EQ(told, stalled);
}

// The aten::mm calls of a run of tests/e2e/test_detect.py's torch_slow
// (600 steps of 6 matmuls, 4.5 us at the median; the one of every 25th
// step from the 50th on slowed to 17 to 19 ms) in which detect flagged
// none of the 22 slowed calls: its first fit put them in a component of
// 3.3% of the calls with 87 of the function's 1.5x to 6x tail. Each line of
// tests/unit/data/mm_catch_all.txt is a call: its start less the previous
// call's, and its duration, in ns; the first two are the warm-up the run
// had left. The 22, and the two other calls of the run over 1 ms (1.4 and
// 1.9 ms, 300x), are flagged, and nothing else.
TEST(OfflineDetect, FarSlowerCallsInTheTailsComponentAreNoMode)
{
	std::ifstream in(SOURCE_DIR "/tests/unit/data/mm_catch_all.txt");
	ASSERT_TRUE(in.good());
	Recording rec;
	uint64_t t = 1'000'000'000, delta = 0, dur = 0;
	std::vector<uint64_t> slow;
	size_t slowed = 0;
	while (in >> delta >> dur) {
		t += delta;
		rec.spans.push_back(
			Span{.start_ns = t, .dur_ns = dur, .pid = 1, .tid = 1, .layer = "torch", .name = "aten::mm"});
		if (dur > 1'000'000)
			slow.push_back(t);
		slowed += dur > 10'000'000;
	}
	ASSERT_EQ(rec.spans.size(), 3587u);
	ASSERT_EQ(slowed, 22u);
	auto rep = detect_recording(rec, options());
	EXPECT_EQ(starts(rep.anomalies), slow);
}

// A run of tests/e2e/test_detect.py's DetectSlowLogSoftmax (100 steps,
// aten::_log_softmax slowed 7.6x to 12.3x its 3.6 us median on every 13th
// step from the 14th), recorded here, in which detect flagged none of the
// 7 slowed calls but their caller, aten::log_softmax_int, as its
// fold_echoes() rule for a widened model says: the first fit gave them one
// component with 11 calls of the function's tail (1.4x to 3.3x), 18 calls,
// a mode by weight (CI's run, at 10.8x, flagged none of them either). Each line of
// tests/unit/data/log_softmax_catch_all.txt is a torch call of the run's
// one thread: its name, its start less the previous call's and its
// duration, ns (from it alone, without the run's metrics and processes,
// detect flagged neither the 7 nor their caller). The 7 are flagged, as
// the slowed operator, and their caller is not.
TEST(OfflineDetect, SlowedCallsInTheTailsComponentAreNoMode)
{
	std::ifstream in(SOURCE_DIR "/tests/unit/data/log_softmax_catch_all.txt");
	ASSERT_TRUE(in.good());
	Recording rec;
	std::string name;
	uint64_t t = 1'000'000'000, delta = 0, dur = 0;
	std::vector<uint64_t> slowed;
	size_t calls = 0; // of aten::_log_softmax: its first 2 are its warm-up, not judged
	while (in >> name >> delta >> dur) {
		t += delta;
		rec.spans.push_back(
			Span{.start_ns = t, .dur_ns = dur, .pid = 1, .tid = 1, .layer = "torch", .name = name});
		if (name == "aten::_log_softmax" && ++calls > 2 && dur > 25'000)
			slowed.push_back(t);
	}
	ASSERT_EQ(rec.spans.size(), 1704u);
	ASSERT_EQ(slowed.size(), 7u);
	DetectOptions o; // as `eacgm detect` has them
	o.model.fpr = 1e-4;
	o.model.gmm.max_components = 4;
	o.model.gmm.min_weight = 0.02;
	o.worth = kWorthTelling;
	auto rep = detect_recording(rec, o);
	std::vector<uint64_t> inner;
	for (const Anomaly &a : rep.anomalies)
		if (a.name == "aten::_log_softmax")
			inner.push_back(a.ts_ns);
	EXPECT_EQ(inner, slowed);
	EXPECT_EQ(rep.anomalies.size(), 8u); // and one aten::mm, 3.3x its median
	for (const Anomaly &a : rep.anomalies)
		EXPECT_NE(a.name, "aten::log_softmax_int") << a.ts_ns;
}
