// SPDX-License-Identifier: Apache-2.0
// The machine's stalls measured in a recording (detect/noise.h), and what
// they make worth telling: a short function slowed more often than the
// machine stalls calls that much is; one call stalled as others are is not.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <random>
#include <set>

#include "detect/noise.h"
#include "detect/offline.h"
#include "detect/online.h"
#include "detect/rootcause.h"

using namespace eacgm;
using namespace eacgm::detect;

namespace {

constexpr double kUs = 1'000;

// n calls of `median` ns, the last `stalled` of them longer by `by`,
// `by` + `spread`, `by` + 2 `spread`, ...
std::vector<double> calls(size_t n, double median, size_t stalled, double by, double spread = 0)
{
	std::vector<double> v(n, median);
	for (size_t i = 0; i < stalled; i++)
		v[n - stalled + i] += by + static_cast<double>(i) * spread;
	return v;
}

// Ten short functions of 1,000 calls, 10 of each stalled by 30 to 75 us
// (1%), a long one whose natural spread is 500 us, and f: 60 calls of
// 6 us, f_slowed of them slowed by f_by.
Noise machine(size_t f_slowed, double f_by)
{
	Noise n;
	for (int i = 0; i < 10; i++)
		n.set("torch/op" + std::to_string(i), calls(1000, (2 + i) * kUs, 10, 30 * kUs, 5 * kUs), {});
	std::vector<double> conv;
	for (int i = 0; i < 1000; i++)
		conv.push_back(5000 * kUs + (i % 2 ? 500 : -500) * kUs);
	n.set("torch/conv", conv, {});
	n.set("torch/f", calls(60, 6 * kUs, f_slowed, f_by), {});
	return n;
}

} // namespace

TEST(Noise, PoissonTail)
{
	EXPECT_DOUBLE_EQ(poisson_tail(0, 3), 1);
	EXPECT_DOUBLE_EQ(poisson_tail(2, 0), 0);
	EXPECT_NEAR(poisson_tail(1, 0.5), 1 - std::exp(-0.5), 1e-12);
	EXPECT_NEAR(poisson_tail(4, 0.5), 1 - std::exp(-0.5) * (1 + 0.5 + 0.125 + 0.125 / 6), 1e-12);
	EXPECT_NEAR(poisson_tail(3, 10), 1 - std::exp(-10) * (1 + 10 + 50), 1e-12);
	// Far in the tail: summed, not 1 - (1 - tiny).
	const double p40 = std::exp(-2 + 40 * std::log(2) - std::lgamma(41));
	EXPECT_NEAR(poisson_tail(40, 2), p40 * (1 + 2.0 / 41 + 4.0 / (41 * 42) + 8.0 / (41 * 42 * 43)), 1e-41);
}

// The rate is measured on the other functions no longer than the stall:
// the 5 ms function's 500 us spread is not a stall of 50 us.
TEST(Noise, StallRateIsMeasuredOnShortFunctions)
{
	Noise n = machine(4, 57 * kUs);
	// Each short function's stalls of 50 us or more: 50, 55, ... 75 (6 of 10).
	EXPECT_DOUBLE_EQ(n.stall_rate("torch/f", false, 50 * kUs), 60.0 / 10000);
	EXPECT_DOUBLE_EQ(n.stall_rate("torch/f", false, 30 * kUs), 100.0 / 10000);
	// op0's own stalls are not its reference: the 9 others' and f's 4 are.
	EXPECT_DOUBLE_EQ(n.stall_rate("torch/op0", false, 50 * kUs), (54.0 + 4) / (9000 + 60));
	EXPECT_TRUE(std::isnan(n.stall_rate("torch/f", false, 1 * kUs))); // no function that short
	EXPECT_TRUE(std::isnan(n.stall_rate("torch/f", true, 50 * kUs))); // no gaps given
}

// A call that runs longer meets more of the machine's stalls: a function
// 5 times as long as the reference's calls on average is stalled 5 times
// as often; a shorter one as often as they are (each call has its traps).
TEST(Noise, ALongerFunctionIsStalledMoreOften)
{
	Noise n = machine(0, 0);
	n.set("torch/long", calls(200, 32.5 * kUs, 0, 0), {});
	// The reference for 50 us: op0..op9 (2 to 11 us, 65 ms of calls in all)
	// and f (60 calls of 6 us): 60 of their 10,060 calls stalled that much,
	// 60 in their 65.36 ms, which hold 2,011 calls of 32.5 us.
	const double exposure = 1000 * 65 * kUs + 60 * 6 * kUs;
	EXPECT_DOUBLE_EQ(n.stall_rate("torch/long", false, 50 * kUs), 60.0 / (exposure / (32.5 * kUs)));
	EXPECT_NEAR(n.stall_rate("torch/long", false, 50 * kUs), 0.0298, 1e-4); // 5x the 0.6% per call
	// op0 (2 us) as the reference's calls are: 54 of the 9,260 of the
	// others (long's 200 among them) per call.
	EXPECT_DOUBLE_EQ(n.stall_rate("torch/op0", false, 50 * kUs), 54.0 / 9260);
}

TEST(Noise, StallRateExtrapolatesPastTheLargest)
{
	Noise n;
	std::vector<double> v(1000, 2 * kUs);
	for (int i = 0; i < 11; i++) // excesses 10, 20, ... 110 us
		v[i] += (10 + 10 * i) * kUs;
	n.set("torch/a", v, {});
	n.set("torch/b", calls(100, 2 * kUs, 0, 0), {});
	// u = 10 us (the 11th largest), the ten above it 10..100 us over it:
	// mean 55 us. 10 of 1000 calls stalled past u.
	const double p_u = 10.0 / 1000, beta = 55 * kUs;
	EXPECT_NEAR(n.stall_rate("torch/b", false, 200 * kUs), p_u * std::exp(-(200 - 10) * kUs / beta), 1e-15);
	// Where ten or more were stalled that much, as measured.
	EXPECT_DOUBLE_EQ(n.stall_rate("torch/b", false, 9 * kUs), 11.0 / 1000);
}

TEST(Noise, SeveralSlowedCallsAreTheFunctionsOwnOneIsNot)
{
	// f: 60 calls, 4 slowed by 57 us, where the machine stalls 1% of short
	// calls by 28.5 us or more (100 of 10,000): lambda = 0.6.
	Noise four = machine(4, 57 * kUs);
	EXPECT_NEAR(four.chance("torch/f", false, 57 * kUs), poisson_tail(4, 0.6), 1e-12);
	EXPECT_LT(four.chance("torch/f", false, 57 * kUs), kWorthTelling.noise_alpha);
	// One: P(X >= 1) = 0.45, the machine's.
	Noise one = machine(1, 57 * kUs);
	EXPECT_NEAR(one.chance("torch/f", false, 57 * kUs), poisson_tail(1, 0.6), 1e-12);
	EXPECT_GT(one.chance("torch/f", false, 57 * kUs), 0.4);
	// A live call not yet in the window counts: 3 in it and this one.
	Noise three = machine(3, 57 * kUs);
	EXPECT_NEAR(three.chance("torch/f", false, 57 * kUs, 1), poisson_tail(4, 61 * 0.01), 1e-12);
	// Unknown, or nothing as short to measure against: nothing says noise.
	EXPECT_EQ(four.chance("torch/g", false, 57 * kUs), 0);
	EXPECT_EQ(four.chance("torch/f", false, 1 * kUs), 0);
}

// Calls slowed about as much as the one asked about are its group; a stall
// far smaller than a function's slowed calls is no part of them.
TEST(Noise, AGroupIsTheCallsSlowedAboutAsMuch)
{
	Noise n;
	for (int i = 0; i < 10; i++)
		n.set("torch/op" + std::to_string(i), calls(1000, (2 + i) * kUs, 10, 30 * kUs, 5 * kUs), {});
	std::vector<double> f = calls(200, 6 * kUs, 0, 0);
	for (int i = 0; i < 5; i++)
		f[i] += (300 + 50 * i) * kUs; // 300 .. 500 us over the median
	f[5] += 40 * kUs;                     // and one stall of 40 us
	n.set("torch/f", f, {});
	// 500 us: the five of 250 us to 1 ms; the machine never stalls by 250 us.
	EXPECT_LT(n.chance("torch/f", false, 500 * kUs), 1e-50);
	// 40 us: itself alone in 20 to 80 us, lambda = 200 * 0.01.
	EXPECT_NEAR(n.chance("torch/f", false, 40 * kUs), poisson_tail(1, 2.0), 1e-12);
}

TEST(Noise, WorthToldNeedsTheRatioTheFloorAndMoreThanNoise)
{
	Noise n = machine(4, 57 * kUs);
	Worth w = kWorthTelling;
	w.noise = &n;
	EXPECT_TRUE(w.told("torch/f", false, 63 * kUs, 6 * kUs));
	EXPECT_FALSE(w.told("torch/f", false, 11 * kUs, 6 * kUs)); // under 2x
	Noise one = machine(1, 57 * kUs);
	w.noise = &one;
	EXPECT_FALSE(w.told("torch/f", false, 63 * kUs, 6 * kUs));
	w.noise_alpha = 0; // no stall test: the ratio alone
	EXPECT_TRUE(w.told("torch/f", false, 63 * kUs, 6 * kUs));
	w.min_excess_ns = 100'000; // a user's floor still holds
	EXPECT_FALSE(w.told("torch/f", false, 63 * kUs, 6 * kUs));
}

// A recording judged with the defaults: five short functions a step, the
// machine stalling one call in 200 by 30 to 80 us, and one of them (4 us)
// slowed to 40 us on 5 of 200 steps, one of those (32 us) in a step that
// came 400 us late. The 5 are told, as the operator's slowness (the late
// one too: its slowdown is worth telling alone); of the stalls, none.
TEST(Noise, OfflineDefaultsFindAShortSlowdownNotTheMachinesStalls)
{
	std::mt19937_64 rng(7);
	std::normal_distribution<double> jitter(0, 0.05);
	std::uniform_real_distribution<double> stall(30 * kUs, 80 * kUs);
	std::bernoulli_distribution stalled(1.0 / 200);
	const std::set<size_t> slow = {40, 77, 120, 151, 190};
	Recording rec;
	std::vector<uint64_t> slowed;
	uint64_t t = 1'000'000'000;
	size_t stalls = 0;
	for (size_t step = 0; step < 200; step++)
		for (int f = 0; f < 5; f++) {
			double d = (4 + 3 * f) * kUs * std::exp(jitter(rng));
			if (f == 0 && slow.count(step)) {
				d = (step == 120 ? 32 : 40) * kUs * std::exp(jitter(rng));
				t += step == 120 ? 400'000 : 0;
				slowed.push_back(t);
			} else if (step > 5 && stalled(rng)) {
				d += stall(rng);
				stalls++;
			}
			rec.spans.push_back(Span{.start_ns = t,
						 .dur_ns = static_cast<uint64_t>(d),
						 .pid = 1,
						 .tid = 1,
						 .layer = "torch",
						 .name = "aten::op" + std::to_string(f)});
			t += static_cast<uint64_t>(d) + 10'000;
		}
	ASSERT_GE(stalls, 3u);
	DetectOptions o;
	o.model.fpr = 1e-4;
	o.worth = kWorthTelling;
	auto rep = detect_recording(rec, o);
	std::vector<uint64_t> found;
	for (const Anomaly &a : rep.anomalies)
		found.push_back(a.ts_ns);
	// Every slowed call; of the stalls, at most one of op0's own (a stall
	// of a function whose calls are slowed about as much is told with them).
	std::vector<uint64_t> others;
	std::set_difference(found.begin(), found.end(), slowed.begin(), slowed.end(), std::back_inserter(others));
	EXPECT_TRUE(std::includes(found.begin(), found.end(), slowed.begin(), slowed.end()));
	for (const Anomaly &a : rep.anomalies) {
		if (std::find(slowed.begin(), slowed.end(), a.ts_ns) == slowed.end()) {
			EXPECT_EQ(a.name, "aten::op0");
		} else {
			EXPECT_EQ(fault_class(a), "operator_slow") << a.ts_ns;
			EXPECT_EQ(a.causes[0]["feature"], "log_duration") << a.ts_ns;
		}
	}
	EXPECT_LE(others.size(), 1u);
	// With no stall test, the machine's stalls are told too.
	o.worth = {2, 0, 0};
	EXPECT_GE(detect_recording(rec, o).anomalies.size(), slowed.size() + 3);
	// Under the old fixed floor (2x and 100 us) the same five went unseen
	// for their duration: the late one is told for its 400 us gap alone.
	o.worth = {2, 100'000, 0};
	auto old = detect_recording(rec, o).anomalies;
	EXPECT_LE(old.size(), 1u);
	for (const Anomaly &a : old)
		EXPECT_EQ(a.causes[0]["feature"], "log_gap");
}

// The live detector reads the machine's stalls from its windows: once its
// windows hold some of a short function's slowed calls, the next ones are
// told; the machine's lone stalls of another function never are.
TEST(Noise, TheLiveDetectorWeighsItsWindowsStalls)
{
	std::mt19937_64 rng(11);
	std::normal_distribution<double> jitter(0, 0.05);
	std::uniform_real_distribution<double> stall(30 * kUs, 80 * kUs);
	std::bernoulli_distribution stalled(1.0 / 200);
	DetectOptions o;
	o.background = false;
	o.refit_every = 200;
	o.worth = kWorthTelling;
	OnlineDetector det(o);
	std::set<uint64_t> slowed, stalls;
	size_t told_slowed = 0, told_stalls = 0, told_other = 0, late = 0;
	uint64_t t = 1'000'000'000;
	for (size_t i = 0; i < 3000; i++)
		for (int f = 0; f < 2; f++) {
			double d = (4 + 3 * f) * kUs * std::exp(jitter(rng));
			if (f == 0 && i >= 500 && i % 100 == 0) {
				d = 40 * kUs * std::exp(jitter(rng));
				slowed.insert(t);
			} else if (f == 1 && stalled(rng)) {
				d += stall(rng);
				stalls.insert(t);
			}
			Span s{.start_ns = t,
			       .dur_ns = static_cast<uint64_t>(d),
			       .pid = 1,
			       .tid = 1,
			       .layer = "torch",
			       .name = f ? "aten::b" : "aten::a"};
			t += s.dur_ns + 10'000;
			auto a = det.observe(s);
			if (!a)
				continue;
			const bool stall_here = stalls.count(s.start_ns) != 0;
			if (slowed.count(s.start_ns))
				told_slowed++;
			else if (a->causes[0]["feature"] == "log_duration" && i >= 400)
				told_stalls += stall_here, told_other += !stall_here;
			else if (a->causes[0]["feature"] == "log_gap")
				late++; // the next call of the other function, made late: live, echoes are told
		}
	std::printf("live: %zu of %zu slowed told, %zu calls late behind them or a stall\n", told_slowed, slowed.size(),
		    late);
	ASSERT_GE(stalls.size(), 10u);
	// Past the first refits (the first window of 200 calls measures little),
	// none of the machine's stalls, and nothing else slow.
	EXPECT_EQ(told_stalls, 0u);
	EXPECT_EQ(told_other, 0u);
	// The first few slowed calls are too few to be more than noise; the
	// window's refits then hold them, and most of the rest are told (13 of
	// 25 here: a refit every 200 calls, the window of 200 to 1,000 calls
	// holding a few of them against the machine's stalls).
	EXPECT_GE(told_slowed, 10u);
}
