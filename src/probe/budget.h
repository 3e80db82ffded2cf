// SPDX-License-Identifier: Apache-2.0
// --overhead-budget: keeps what the traced calls cost the threads making
// them under a share of those threads' CPU. Every traced call pays a trap
// into the kernel (about a microsecond here) and the span programs' run (a
// few more with the Python stack behind it); a function
// called hundreds of thousands of times a second costs the job more than any
// budget allows. The hottest functions are then probed in bursts (attached a
// fraction of each second, detached for the rest) and each call seen in a
// burst stands for 1/duty calls, so counts and totals stay estimates of the
// whole while the cost falls with the duty.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "arch/arch.h"
#include "common/result.h"
#include "probe/span_engine.h"

namespace eacgm {

// What one interval looked like, for a decision.
struct BudgetSample {
	double traced_cpu_ns = 0;          // CPU the threads that made the calls used, traps included
	double hit_ns = 0;                 // what one traced call costs them: trap + programs
	std::map<uint32_t, uint64_t> hits; // calls seen per spec (in bursts only, when throttled)
	// What one record costs eacgm's record loop (read, decode, join, score,
	// store), and the interval's length: eacgm's own share of a core. 0:
	// not measured, only the job's side is kept under the budget.
	double agent_ns_per_call = 0;
	double interval_ns = 0;
	// eacgm's CPU in the interval apart from handling the calls (waking up,
	// the collectors, the detector's refits, the sampler's records): the
	// calls get what it leaves of the budget, at least a quarter of it.
	double agent_fixed_ns = 0;
	// eacgm's CPU in the interval that the calling threads gave up for it:
	// what the machine's idle CPU could not cover, in their share of the
	// busy CPU (machine_share_taken). On a node whose every core is busy,
	// eacgm's core time slows the job as surely as a trap does: the calls
	// get the job's budget less this, at least a quarter of it.
	double agent_displaced_ns = 0;
	// What the Python sampler's samples cost the threads they interrupt, a
	// share of those threads' CPU: each sample stands for a period of it
	// (1 / the rate) and costs its program and the interrupt. It comes off
	// the calls' budget too: a traced job pays for both.
	double sampler_share = 0;
	// What the job's step measured per unit of what the job's side counts
	// (the calls, eacgm's displaced CPU, the samples): the job's side is
	// held to the budget divided by it. 1 counts nothing more (the unit
	// tests' decisions); the agent passes kStepPerCounted.
	double step_per_counted = 1;
};

// The step's slowdown per unit the budget counts on the job's side, as
// measured (bench/step_pairs.py, one process, eacgm attached and detached
// in turn, 2-vCPU AMD EPYC KVM, 2026-11-28): ResNet-18 read 1.019x with
// 0.65-0.85% counted (calls 0.45-0.56, samples 0.2-0.3, none displaced)
// and 1.017x with 0.5-0.6% under --overhead-budget 1; GPT 1.038x with 2.0%
// counted (calls 0.7-1.1, displaced 0.5-1.1, samples 0.2-0.3) and 1.016x
// with 1.0% under --overhead-budget 1. What the count misses is spread
// thin (perf of GPT's training thread: returns from traps and interrupts,
// MSR writes and page faults that a VM makes dear, beside the programs the
// count times), so it is taken as a factor rather than as one more term.
// A machine whose traps cost less is held lower than it needs: the safe
// side.
constexpr double kStepPerCounted = 2.0;

struct BudgetDecision {
	std::set<uint32_t> throttled; // specs probed in bursts
	double duty = 1;              // share of each period their probes are attached
	double full_pct = 0;          // what every probe attached all the time would cost, % of the job's CPU
	double expected_pct = 0;      // what this decision should cost
	double throttled_pct = 0;     // what the throttled specs would cost at full rate
	// The same for eacgm's record loop, in % of one core, and what eacgm
	// spent apart from the calls.
	double agent_full_pct = 0;
	double agent_expected_pct = 0;
	double agent_fixed_pct = 0;
	// BudgetSample::agent_displaced_ns, % of the job's CPU.
	double displaced_pct = 0;
	// BudgetSample::sampler_share, in %.
	double sampler_pct = 0;
};

// What a program using `self_ns` of CPU took from the threads that used
// `threads_ns`, over an interval in which the whole machine had `busy_ns`
// of CPU in use (that program's included) and `idle_ns` idle: the part the
// idle CPU could not have covered, shared among the busy by their use (the
// scheduler's fairness). 0 where the machine had idle CPU to spare.
double machine_share_taken(double self_ns, double threads_ns, double busy_ns, double idle_ns);

// What one traced call costs eacgm's record loop, from the loop's CPU over
// the records it read in each interval: a record costs the average, and a
// call makes its span record and, with Python stacks, a stack record (the
// records that are not samples, per call). Only an interval with enough
// calls is trusted: on a GPU ResNet-18 the first one (the import, a few
// dozen calls beside a flush of first-time work) said 1.7 ms a call, which
// throttled every probe to the least duty for the rest of the run. While
// probes are throttled the loop's per-batch work (a transaction, the joins
// of each thread's samples) is shared by fewer calls, so a measure then
// can only overstate the cost (measured: 11% -> 23% of a core a GPT step,
// rising with each decision): it may lower the estimate, never raise it.
class AgentCallCost {
public:
	// The fewest calls in an interval a measure is taken from.
	static constexpr double kMinCalls = 500;
	// One interval: the loop's handling CPU, the records it read (of which
	// call_records made by calls), the calls seen, whether any probe was
	// throttled. Returns the estimate (0: none yet).
	double update(double cpu_ns, double records, double call_records, double calls, bool throttled);
	double ns() const { return ns_; }

private:
	double ns_ = 0;
};

// The decision alone (no side effects, unit-tested). Two budgets of the
// same percentage: the traps and programs, of the calling threads' CPU
// (divided by BudgetSample::step_per_counted), and eacgm's
// handling of the calls, of one core (on a node whose job uses every core,
// eacgm's CPU is taken from the job as surely as a trap is). A spec's
// pressure is the larger of its two shares. Throttles the hottest specs
// until the rest take at most half of either budget, and gives the
// throttled ones the duty that spends what remains of the tighter one. A
// throttled spec stays throttled until everything fits both budgets with
// room (80% of them) again, so the links are not rebuilt back and forth.
// `eligible` are the specs that may be throttled.
BudgetDecision decide_budget(const BudgetSample &s, const BudgetDecision &now, double budget_pct,
			     const std::set<uint32_t> &eligible);

// The Python sampler's rate under the budget. Its samples cost the
// threads they interrupt sample_ns each (the program, timed by itself, and
// the interrupt, measure_sample_interrupt_ns): at `hz` a share of
// sample_ns * hz of their CPU, which may take an eighth of the budget
// (with the sampler alone attached, at 1 kHz, GPT's step ran 1.03x under a
// budget of 2, none of it counted; a quarter let ResNet-18's samples cost
// 0.5-0.6% of its step at 250 Hz, as much as all its calls: a sample costs
// the job 20 us here, four traced calls). And from
// eacgm's whole CPU (every thread: the record loop, the collectors, the
// detector's fits) as a share of one core over the last interval: the
// probes' duty keeps the calls' own cost within the budget; what eacgm
// spends apart from them is mostly the sampler's records, whose rate is
// the other lever. Past the budget the rate falls to a quarter; under
// half of it, it doubles back; never below kMinSampleHz (or what was asked,
// if lower), nor above what was asked or the samples' eighth. A move of
// less than a quarter is the estimates' noise (each change is a line on
// stderr and an event): the rate stays. Each sample then stands for its own
// period, so sampled times stay unbiased, with a wider error.
unsigned decide_sample_hz(unsigned now_hz, unsigned asked_hz, double agent_pct, double budget_pct,
			  double sample_ns = 0);
// The rate stack profilers commonly default to (py-spy, the seeds' host
// telemetry): a 10 ms grain.
constexpr unsigned kMinSampleHz = 100;

// The shortest burst worth attaching for, as a share of the period.
constexpr double kMinDuty = 0.02;

// The share of the job's own progress made while the throttled probes were
// attached, which each call seen stands for the inverse of. While attached
// the job also spends time in their traps (`slowdown`: their cost at full
// rate over the job's own CPU) and makes fewer calls a second than while
// detached; counting that time as coverage would bias the estimate low by
// the overhead itself (measured: -8% at 18% overhead).
double effective_coverage(uint64_t on_ns, uint64_t elapsed_ns, double slowdown);

// Runs the bursts on a thread of its own: attaching takes milliseconds and
// detaching waits for the kernel's grace periods (about 0.1 s), neither of
// which the record loop can afford.
class DutyCycler {
public:
	explicit DutyCycler(SpanEngine &engine, uint64_t period_ns = 1'000'000'000);
	~DutyCycler();
	DutyCycler(const DutyCycler &) = delete;
	DutyCycler &operator=(const DutyCycler &) = delete;

	// Applies a decision: the throttled set (relinking the libraries when it
	// changes) and the duty of the following bursts.
	void apply(const std::set<uint32_t> &throttled, double duty);
	// Since the throttled set or the duty last changed, as measured: the
	// time the throttled probes were attached and the time elapsed (whole
	// periods only; both 0 before the first ends).
	std::pair<uint64_t, uint64_t> coverage_ns() const;
	// An error of a burst or a relink, once (the cycler then stops throttling).
	std::string take_error();
	// The times the throttled probes were detached since the last call,
	// [start, end] each in CLOCK_MONOTONIC ns: the release of a burst or of
	// a relink's old links, which waits for the kernel's grace periods. On
	// kernels whose uretprobes are SRCU-protected (6.12+), each grace period
	// makes a kworker poll for the readers, every traced call still in
	// flight, spinning up to srcutree's srcu_max_nodelay_phase x
	// srcu_retry_check_delay (1000 x 5 us) on a CPU the job may be waiting
	// for: the recording keeps these windows (`probe_detach` events) so that
	// detect charges that kworker's time to eacgm, not to the job's
	// neighbours.
	std::vector<std::pair<uint64_t, uint64_t>> take_detaches();

private:
	void run();
	void wait_for(uint64_t ns, std::unique_lock<std::mutex> &lock);

	SpanEngine &engine_;
	const uint64_t period_ns_;
	mutable std::mutex mu_;
	std::condition_variable cv_;
	bool stop_ = false;
	std::set<uint32_t> want_, have_;
	double duty_ = 1;
	uint64_t since_ns_ = 0, on_ns_ = 0, until_ns_ = 0; // coverage since the set last changed
	std::string error_;
	std::vector<std::pair<uint64_t, uint64_t>> detaches_;
	std::thread thread_;
};

// What the trap is timed on: eacgm_probes_cost_target (src/arch/arch.h), a
// function of eacgm itself that starts as library functions do.

// The trap's cost on this machine now: eacgm's own function probed by the
// engine's programs (eacgm itself is untraced, so they return at once),
// timed against the same calls unprobed. The least of a few rounds, in ns.
// The probed calls count among the engine programs' runs (kTrapTimingCalls).
Result<double> measure_trap_ns(SpanEngine &engine);
constexpr int kTrapTimingCalls = 5 * 1000;

// What a CPU-clock sample's interrupt costs the thread it lands on, apart
// from the program it runs: a loop of eacgm's own thread timed with such
// an event sampling it at `hz` and without, alternately; the median over
// rounds of their difference over the samples, in ns. Not a
// trap's worth: on the 2-vCPU KVM guests here it is 17 us (a timer
// interrupt delivered through the hypervisor) where a uprobe's trap is
// 1.3; a budget that counted the trap took GPT's sampler at 1 kHz for
// 0.5% of the job where it cost 2%. About 0.3 s of CPU, once.
Result<double> measure_sample_interrupt_ns(unsigned hz = 10'000);

} // namespace eacgm
