// SPDX-License-Identifier: Apache-2.0
// --overhead-budget's decision (probe/budget.h): which probes go to bursts,
// at which duty, and what a call seen in a burst stands for.
#include <gtest/gtest.h>

#include "probe/budget.h"

using namespace eacgm;

namespace {

// 1 s of the job's own CPU plus what the calls cost it at full rate.
BudgetSample sample(std::map<uint32_t, uint64_t> hits, double hit_ns, const BudgetDecision &now = {})
{
	BudgetSample s;
	s.hit_ns = hit_ns;
	s.hits = hits;
	double paid = 0;
	for (auto [id, n] : hits)
		paid += static_cast<double>(n) * hit_ns; // hits as seen: already what was paid
	s.traced_cpu_ns = 1e9 + paid;
	(void)now;
	return s;
}

} // namespace

TEST(Budget, UnderBudgetThrottlesNothing)
{
	// 10,000 calls of 1 us: 1% of the job.
	auto d = decide_budget(sample({{1, 10'000}}, 1000), {}, 2, {1});
	EXPECT_TRUE(d.throttled.empty());
	EXPECT_EQ(d.duty, 1.0);
	EXPECT_NEAR(d.full_pct, 1.0, 1e-9);
	EXPECT_NEAR(d.expected_pct, 1.0, 1e-9);
}

TEST(Budget, HottestGoToBurstsUntilTheRestFitsHalfTheBudget)
{
	// Spec 1: 10% of the job, spec 2: 0.5%, spec 3: 0.4%: only spec 1 goes;
	// the rest (0.9%) fits half of 2%, and spec 1 gets what remains: 1.1%
	// of its 10%.
	auto d = decide_budget(sample({{1, 100'000}, {2, 5'000}, {3, 4'000}}, 1000), {}, 2, {1, 2, 3});
	EXPECT_EQ(d.throttled, (std::set<uint32_t>{1}));
	EXPECT_NEAR(d.duty, 0.11, 1e-9);
	EXPECT_NEAR(d.full_pct, 10.9, 1e-9);
	EXPECT_NEAR(d.expected_pct, 2.0, 1e-9);
	EXPECT_NEAR(d.throttled_pct, 10.0, 1e-9);
}

TEST(Budget, TheJobsSideIsHeldToTheBudgetOverWhatTheStepMeasuredPerCounted)
{
	// The same calls as above with the step measured at twice what is
	// counted: the job's side is held to 1% of a 2% budget. Spec 1 and 2
	// both go (the rest, 0.4%, fits half of 1%), and get the 0.6% left of
	// their 10.5%.
	auto s = sample({{1, 100'000}, {2, 5'000}, {3, 4'000}}, 1000);
	s.step_per_counted = 2;
	auto d = decide_budget(s, {}, 2, {1, 2, 3});
	EXPECT_EQ(d.throttled, (std::set<uint32_t>{1, 2}));
	EXPECT_NEAR(d.duty, 0.6 / 10.5, 1e-9);
	EXPECT_NEAR(d.expected_pct, 1.0, 1e-9);
	// eacgm's own share of a core is measured, not estimated: still 2%.
	// 1,000 calls of spec 1 at 10 us of its loop each are 1% of a core.
	auto a = sample({{1, 1'000}}, 1000);
	a.agent_ns_per_call = 10'000;
	a.interval_ns = 1e9;
	a.step_per_counted = 2;
	EXPECT_TRUE(decide_budget(a, {}, 2, {1}).throttled.empty());
}

TEST(Budget, OnlyEligibleSpecsAreThrottled)
{
	// The hottest may not be throttled: the next ones go instead, and the
	// duty cannot bring the whole under budget (it says so in expected_pct).
	auto d = decide_budget(sample({{1, 100'000}, {2, 30'000}}, 1000), {}, 2, {2});
	EXPECT_EQ(d.throttled, (std::set<uint32_t>{2}));
	EXPECT_EQ(d.duty, kMinDuty);
	EXPECT_NEAR(d.expected_pct, 10.0 + 3.0 * kMinDuty, 1e-9);
}

TEST(Budget, ThrottledHitsAreScaledByTheDutyAndStaySticky)
{
	BudgetDecision now;
	now.throttled = {1};
	now.duty = 0.1;
	// 10,000 seen at duty 0.1: 100,000 at full rate, 10% of the job (its own
	// CPU is what the traced processes ran less what the seen calls cost).
	BudgetSample s;
	s.hit_ns = 1000;
	s.hits = {{1, 10'000}};
	s.traced_cpu_ns = 1e9 + 10'000 * 1000.0;
	auto d = decide_budget(s, now, 2, {1});
	EXPECT_NEAR(d.full_pct, 10.0, 1e-9);
	EXPECT_EQ(d.throttled, (std::set<uint32_t>{1}));
	EXPECT_NEAR(d.duty, 0.2, 1e-9);
	// At 1.9% in full (over 80% of the budget) it stays throttled ...
	s.hits = {{1, 1'900}};
	s.traced_cpu_ns = 1e9 + 1'900 * 1000.0;
	EXPECT_EQ(decide_budget(s, now, 2, {1}).throttled, (std::set<uint32_t>{1}));
	// ... and at 1.5% every probe is attached again.
	s.hits = {{1, 1'500}};
	s.traced_cpu_ns = 1e9 + 1'500 * 1000.0;
	auto back = decide_budget(s, now, 2, {1});
	EXPECT_TRUE(back.throttled.empty());
	EXPECT_EQ(back.duty, 1.0);
}

TEST(Budget, NoBudgetOrNoJobChangesNothing)
{
	BudgetDecision now;
	now.throttled = {3};
	now.duty = 0.5;
	auto d = decide_budget(sample({{3, 100'000}}, 1000), now, 0, {3});
	EXPECT_EQ(d.throttled, now.throttled);
	EXPECT_EQ(d.duty, 0.5);
	BudgetSample idle;
	idle.hit_ns = 1000;
	EXPECT_EQ(decide_budget(idle, now, 2, {3}).duty, 0.5);
}

TEST(Budget, EffectiveCoverageDiscountsTheTrapTimeInBursts)
{
	// Attached 100 ms of 1 s: a coverage of 10% when traps cost nothing.
	EXPECT_NEAR(effective_coverage(100'000'000, 1'000'000'000, 0), 0.1, 1e-12);
	// With traps costing 25% more while attached, 100 ms attached is 80 ms
	// of the job's own progress: 80 / (80 + 900).
	EXPECT_NEAR(effective_coverage(100'000'000, 1'000'000'000, 0.25), 80.0 / 980.0, 1e-12);
	EXPECT_EQ(effective_coverage(0, 0, 0), 1.0);
}

TEST(Budget, EacgmsOwnCpuIsASecondBudget)
{
	// The traps fit (spec 1: 0.5% of the job, spec 2: 0.1%), but eacgm
	// spends 2 us of its record loop on each call: spec 1's 5,000 calls a
	// second take 1% of a core, spec 2's 1,000 calls 0.2%. At a 1% budget
	// spec 1 goes to bursts (the rest, 0.2%, fits half of 1%) with the duty
	// that spends the remaining 0.8% of a core: 0.8 of its 1%.
	auto s = sample({{1, 5'000}, {2, 1'000}}, 1000);
	s.agent_ns_per_call = 2000;
	s.interval_ns = 1e9;
	auto d = decide_budget(s, {}, 1, {1, 2});
	EXPECT_EQ(d.throttled, (std::set<uint32_t>{1}));
	EXPECT_NEAR(d.full_pct, 0.6, 1e-9);
	EXPECT_NEAR(d.agent_full_pct, 1.2, 1e-9);
	EXPECT_NEAR(d.duty, 0.8, 1e-9);
	EXPECT_NEAR(d.agent_expected_pct, 1.0, 1e-9);
	EXPECT_NEAR(d.expected_pct, 0.1 + 0.8 * 0.5, 1e-9);
	// Unmeasured (0), eacgm's side keeps nothing from being traced.
	s.agent_ns_per_call = 0;
	d = decide_budget(s, {}, 1, {1, 2});
	EXPECT_TRUE(d.throttled.empty());
	EXPECT_EQ(d.agent_full_pct, 0.0);
}

TEST(Budget, TheTighterBudgetSetsTheDuty)
{
	// Spec 1 costs the job 10% and eacgm 4% of a core; at 2% the job's side
	// is the tighter: duty 0.2, which leaves eacgm at 0.8%.
	auto s = sample({{1, 100'000}}, 1000);
	s.agent_ns_per_call = 400;
	s.interval_ns = 1e9;
	auto d = decide_budget(s, {}, 2, {1});
	EXPECT_EQ(d.throttled, (std::set<uint32_t>{1}));
	EXPECT_NEAR(d.duty, 0.2, 1e-9);
	EXPECT_NEAR(d.agent_expected_pct, 0.8, 1e-9);
	// At 40 us of eacgm's a call (400% of a core) eacgm's side would need a
	// duty of 0.005: it gets the shortest burst there is.
	s.agent_ns_per_call = 40'000;
	d = decide_budget(s, {}, 2, {1});
	EXPECT_NEAR(d.duty, kMinDuty, 1e-9);
	EXPECT_NEAR(d.agent_expected_pct, 400 * kMinDuty, 1e-9);
}

// The sampler's rate: a quarter past the budget, down to 100 Hz (or the
// rate asked, if lower); doubled back under half the budget, up to the rate
// asked; left alone in between.
TEST(Budget, SamplerRateFollowsEacgmsWholeCpu)
{
	EXPECT_EQ(decide_sample_hz(1000, 1000, 3.0, 2.0), 250u);
	EXPECT_EQ(decide_sample_hz(250, 1000, 3.0, 2.0), 100u);
	EXPECT_EQ(decide_sample_hz(100, 1000, 9.0, 2.0), 100u);
	EXPECT_EQ(decide_sample_hz(50, 50, 9.0, 2.0), 50u);     // asked for less than the floor
	EXPECT_EQ(decide_sample_hz(100, 1000, 1.5, 2.0), 100u); // between half and the whole: stays
	EXPECT_EQ(decide_sample_hz(100, 1000, 0.9, 2.0), 200u);
	EXPECT_EQ(decide_sample_hz(800, 1000, 0.5, 2.0), 1000u);
	EXPECT_EQ(decide_sample_hz(1000, 1000, 0.5, 2.0), 1000u);
	EXPECT_EQ(decide_sample_hz(1000, 1000, 2.0, 2.0), 1000u); // at the budget, not past it
}

// What the samples cost the threads they interrupt caps the rate at an
// eighth of the budget: 10 us a sample under a budget of 2% allows 250 Hz
// (0.25% of the sampled threads' CPU), whatever eacgm's own CPU says.
TEST(Budget, TheSamplesCostToTheJobCapsTheSamplerRate)
{
	EXPECT_EQ(decide_sample_hz(1000, 1000, 0.5, 2.0, 10'000), 250u);
	EXPECT_EQ(decide_sample_hz(250, 1000, 0.5, 2.0, 10'000), 250u);   // not doubled past it
	EXPECT_EQ(decide_sample_hz(1000, 1000, 3.0, 2.0, 5'000), 250u);   // eacgm's CPU lowers it below the cap
	EXPECT_EQ(decide_sample_hz(1000, 1000, 0.5, 2.0, 1'000), 1000u);  // cheap samples: what was asked
	EXPECT_EQ(decide_sample_hz(1000, 1000, 0.5, 2.0, 100'000), 100u); // dear ones: the floor
	// 10% over the cap is the estimate's noise: the rate stays (each
	// change reopens the perf events).
	EXPECT_EQ(decide_sample_hz(275, 1000, 1.5, 2.0, 10'000), 275u);
	// What the samples cost comes off the calls' budget: spec 1's calls,
	// 1.5% of the job, go to bursts at 1/1.5 when the samples take 1%.
	auto s = sample({{1, 15'000}}, 1000);
	s.sampler_share = 0.01;
	auto d = decide_budget(s, {}, 2, {1});
	EXPECT_EQ(d.throttled, (std::set<uint32_t>{1}));
	EXPECT_NEAR(d.sampler_pct, 1.0, 1e-9);
	EXPECT_NEAR(d.duty, 1.0 / 1.5, 1e-9);
}

// What eacgm spends apart from the calls comes out of its side of the
// budget first: the calls get the rest, and never less than a quarter.
TEST(Budget, EacgmsFixedCostsLeaveTheCallsLess)
{
	// Spec 1's 5,000 calls a second at 2 us each: 1% of a core. Budget 2%,
	// eacgm's fixed costs 1.5%: the calls may use 0.5%, so spec 1 (the
	// only one) goes to bursts at duty 0.5, spending 0.5%.
	auto s = sample({{1, 5'000}}, 1000);
	s.agent_ns_per_call = 2000;
	s.interval_ns = 1e9;
	s.agent_fixed_ns = 15e6;
	auto d = decide_budget(s, {}, 2, {1});
	EXPECT_EQ(d.throttled, (std::set<uint32_t>{1}));
	EXPECT_NEAR(d.agent_fixed_pct, 1.5, 1e-9);
	EXPECT_NEAR(d.duty, 0.5, 1e-9);
	EXPECT_NEAR(d.agent_expected_pct, 0.5, 1e-9);
	// Fixed costs past the whole budget leave the calls a quarter of it
	// (0.5% of a core): the same duty.
	s.agent_fixed_ns = 30e6;
	d = decide_budget(s, {}, 2, {1});
	EXPECT_NEAR(d.duty, 0.5, 1e-9);
	// Without them the calls fit: nothing throttled.
	s.agent_fixed_ns = 0;
	d = decide_budget(s, {}, 2, {1});
	EXPECT_TRUE(d.throttled.empty());
}

TEST(Budget, WhatEacgmTookFromTheJobComesOffTheCallsBudget)
{
	// Spec 1: 15,000 calls of 1 us, 1.5% of the job: under a 2% budget.
	auto s = sample({{1, 15'000}}, 1000);
	EXPECT_TRUE(decide_budget(s, {}, 2, {1}).throttled.empty());
	// eacgm took 1% of the job's CPU itself (a machine with no idle core):
	// the calls may spend the other 1%, so spec 1 goes to bursts at 1/1.5.
	s.agent_displaced_ns = 10e6;
	auto d = decide_budget(s, {}, 2, {1});
	EXPECT_EQ(d.throttled, (std::set<uint32_t>{1}));
	EXPECT_NEAR(d.displaced_pct, 1.0, 1e-9);
	EXPECT_NEAR(d.duty, 1.0 / 1.5, 1e-9);
	EXPECT_NEAR(d.expected_pct, 1.0, 1e-9);
	// Past the whole budget, the calls keep a quarter of it (0.5%).
	s.agent_displaced_ns = 30e6;
	d = decide_budget(s, {}, 2, {1});
	EXPECT_NEAR(d.duty, 0.5 / 1.5, 1e-9);
}

TEST(Budget, EacgmTakesFromTheBusyOnlyWhatTheIdleCpuCannotCover)
{
	// 2 s on 2 CPUs, both busy: eacgm's 40 ms came from the running
	// threads, the calling one (2 s of the 4 s busy) gave up half of it.
	EXPECT_DOUBLE_EQ(machine_share_taken(40e6, 2e9, 4e9, 0), 20e6);
	// 10 ms idle covered a quarter of it.
	EXPECT_DOUBLE_EQ(machine_share_taken(40e6, 2e9, 4e9, 10e6), 15e6);
	// Idle CPU enough for all of it: nothing taken.
	EXPECT_DOUBLE_EQ(machine_share_taken(40e6, 2e9, 2.04e9, 1.96e9), 0);
	EXPECT_DOUBLE_EQ(machine_share_taken(0, 2e9, 4e9, 0), 0);
	EXPECT_DOUBLE_EQ(machine_share_taken(40e6, 2e9, 0, 0), 0);
}

TEST(Budget, AgentCallCostTrustsOnlyEnoughCallsAndLowersWhileThrottled)
{
	AgentCallCost c;
	// The import: 40 calls beside a flush of first-time work. Not a measure.
	EXPECT_EQ(c.update(70e6, 80, 80, 40, false), 0);
	// Full rate, 10,000 calls, each a span record and a stack record, 1,000
	// samples beside: 21,000 records for 42 ms, 2 us a record, 4 us a call.
	EXPECT_DOUBLE_EQ(c.update(42e6, 21'000, 20'000, 10'000, false), 4'000);
	// Throttled: the per-batch work is shared by fewer calls, the measure
	// overstates; it does not raise the estimate...
	EXPECT_DOUBLE_EQ(c.update(30e6, 3'000, 2'000, 1'000, true), 4'000);
	// ... but a lower one lowers it (it is still an upper bound).
	EXPECT_DOUBLE_EQ(c.update(3e6, 3'000, 2'000, 1'000, true), 2'000);
	// An estimate first taken while throttled is taken as it is.
	AgentCallCost t;
	EXPECT_DOUBLE_EQ(t.update(3e6, 3'000, 2'000, 1'000, true), 2'000);
	// Full rate again: measured anew, up or down.
	EXPECT_DOUBLE_EQ(c.update(50e6, 10'000, 10'000, 10'000, false), 5'000);
	// Nothing read or no CPU figure: no change.
	EXPECT_DOUBLE_EQ(c.update(50e6, 0, 0, 10'000, false), 5'000);
	EXPECT_DOUBLE_EQ(c.ns(), 5'000);
}
