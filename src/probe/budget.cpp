// SPDX-License-Identifier: Apache-2.0
#include "probe/budget.h"

#include <algorithm>
#include <cerrno>
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <chrono>
#include <climits>
#include <unistd.h>
#include <vector>

#include "common/clock.h"
#include "common/fd.h"
#include "probe/proc_maps.h"

namespace eacgm {

namespace {

// A cost to the job (ns of its CPU) and to eacgm's record loop (ns of its).
struct Cost {
	double job = 0, agent = 0;
	Cost &operator+=(const Cost &o)
	{
		job += o.job;
		agent += o.agent;
		return *this;
	}
	Cost &operator-=(const Cost &o)
	{
		job -= o.job;
		agent -= o.agent;
		return *this;
	}
};

// The budgets, and a cost's share of the tighter one.
struct Budgets {
	double job = 0, agent = 0; // agent 0: not measured, not kept
	double share(const Cost &c) const { return std::max(c.job / job, agent > 0 ? c.agent / agent : 0.0); }
	// The largest duty at which `rest` plus `duty` of `throttled` fits both.
	double duty(const Cost &rest, const Cost &throttled) const
	{
		double d = 1;
		if (throttled.job > 0)
			d = std::min(d, (job - rest.job) / throttled.job);
		if (agent > 0 && throttled.agent > 0)
			d = std::min(d, (agent - rest.agent) / throttled.agent);
		return std::clamp(d, kMinDuty, 1.0);
	}
};

} // namespace

double machine_share_taken(double self_ns, double threads_ns, double busy_ns, double idle_ns)
{
	if (busy_ns <= 0 || self_ns <= 0)
		return 0;
	double uncovered = std::clamp(self_ns - idle_ns, 0.0, self_ns);
	return uncovered * std::clamp(threads_ns / busy_ns, 0.0, 1.0);
}

double AgentCallCost::update(double cpu_ns, double records, double call_records, double calls, bool throttled)
{
	if (calls < kMinCalls || records <= 0 || call_records <= 0 || cpu_ns < 0)
		return ns_;
	double measured = cpu_ns / records * (call_records / calls);
	if (!throttled || ns_ == 0 || measured < ns_)
		ns_ = measured;
	return ns_;
}

BudgetDecision decide_budget(const BudgetSample &s, const BudgetDecision &now, double budget_pct,
			     const std::set<uint32_t> &eligible)
{
	// Each spec's cost at full rate: a throttled one was seen `duty` of the time.
	std::map<uint32_t, Cost> cost;
	Cost full;
	double paid = 0;
	for (auto [id, n] : s.hits) {
		double seen = now.throttled.count(id) ? now.duty : 1.0;
		Cost c{static_cast<double>(n) * s.hit_ns / seen, static_cast<double>(n) * s.agent_ns_per_call / seen};
		cost[id] = c;
		full += c;
		paid += c.job * seen;
	}
	double job = s.traced_cpu_ns - paid; // the job's own CPU, without the traps it paid
	BudgetDecision d = now;
	if (job <= 0 || budget_pct <= 0)
		return d;
	// eacgm's side: one core's share, less what eacgm spends apart from
	// the calls (they cannot be throttled below a quarter of it: a job
	// whose calls are all eacgm would stop being traced).
	double agent_budget = budget_pct / 100 * s.interval_ns;
	agent_budget = std::max(agent_budget - s.agent_fixed_ns, agent_budget / 4);
	// The job's side: what eacgm's own CPU already took from it comes off
	// first (measured on a 2-vCPU VM with both cores busy, GPT's step ran
	// 1.03-1.07x with the calls held to 2% and eacgm at 2% of a core).
	double job_budget = budget_pct / 100 / std::max(1.0, s.step_per_counted) * job;
	job_budget = std::max(job_budget - s.agent_displaced_ns - s.sampler_share * job, job_budget / 4);
	const Budgets b{job_budget, s.interval_ns > 0 ? agent_budget : 0};
	d.agent_fixed_pct = s.interval_ns > 0 ? 100 * s.agent_fixed_ns / s.interval_ns : 0;
	d.displaced_pct = 100 * s.agent_displaced_ns / job;
	d.sampler_pct = 100 * s.sampler_share;
	auto fill = [&](const Cost &spent) {
		d.expected_pct = 100 * spent.job / job;
		d.agent_expected_pct = s.interval_ns > 0 ? 100 * spent.agent / s.interval_ns : 0;
	};
	d.full_pct = 100 * full.job / job;
	d.agent_full_pct = s.interval_ns > 0 ? 100 * full.agent / s.interval_ns : 0;
	if (b.share(full) <= (now.throttled.empty() ? 1.0 : 0.8)) {
		d.throttled.clear();
		d.duty = 1;
		d.throttled_pct = 0;
		fill(full);
		return d;
	}
	Cost throttled;
	for (uint32_t id : d.throttled)
		if (auto it = cost.find(id); it != cost.end())
			throttled += it->second;
	Cost rest = full;
	rest -= throttled;
	std::vector<std::pair<double, uint32_t>> hottest;
	for (auto [id, c] : cost)
		if (!d.throttled.count(id) && eligible.count(id))
			hottest.push_back({b.share(c), id});
	std::sort(hottest.begin(), hottest.end(), std::greater<>());
	for (auto [share, id] : hottest) {
		if (b.share(rest) <= 0.5)
			break;
		d.throttled.insert(id);
		rest -= cost[id];
		throttled += cost[id];
	}
	d.duty = throttled.job > 0 || throttled.agent > 0 ? b.duty(rest, throttled) : 1.0;
	Cost spent{rest.job + d.duty * throttled.job, rest.agent + d.duty * throttled.agent};
	fill(spent);
	d.throttled_pct = 100 * throttled.job / job;
	return d;
}

DutyCycler::DutyCycler(SpanEngine &engine, uint64_t period_ns)
	: engine_(engine), period_ns_(period_ns), thread_([this] { run(); })
{}

DutyCycler::~DutyCycler()
{
	{
		std::lock_guard<std::mutex> lock(mu_);
		stop_ = true;
	}
	cv_.notify_all();
	thread_.join();
}

void DutyCycler::apply(const std::set<uint32_t> &throttled, double duty)
{
	{
		std::lock_guard<std::mutex> lock(mu_);
		if (throttled == want_ && duty == duty_)
			return;
		want_ = throttled;
		duty_ = duty;
		since_ns_ = 0; // coverage starts again with the new duty
	}
	cv_.notify_all();
}

std::pair<uint64_t, uint64_t> DutyCycler::coverage_ns() const
{
	std::lock_guard<std::mutex> lock(mu_);
	if (have_.empty() || !since_ns_ || until_ns_ <= since_ns_)
		return {0, 0};
	return {on_ns_, until_ns_ - since_ns_};
}

unsigned decide_sample_hz(unsigned now_hz, unsigned asked_hz, double agent_pct, double budget_pct, double sample_ns)
{
	unsigned floor = std::min(asked_hz, kMinSampleHz);
	double cap = asked_hz;
	if (sample_ns > 0)
		cap = std::min(cap, budget_pct / 100 / 8 * 1e9 / sample_ns);
	unsigned ceiling = std::max(floor, static_cast<unsigned>(cap));
	unsigned want = now_hz;
	if (agent_pct > budget_pct)
		want = now_hz / 4;
	else if (agent_pct < budget_pct / 2)
		want = now_hz * 2;
	want = std::clamp(want, floor, ceiling);
	if (4 * static_cast<uint64_t>(want > now_hz ? want - now_hz : now_hz - want) < now_hz && want != asked_hz)
		return now_hz;
	return want;
}

double effective_coverage(uint64_t on_ns, uint64_t elapsed_ns, double slowdown)
{
	double on = static_cast<double>(on_ns) / (1 + std::max(0.0, slowdown));
	double off = static_cast<double>(elapsed_ns > on_ns ? elapsed_ns - on_ns : 0);
	return on + off > 0 ? std::clamp(on / (on + off), kMinDuty / 2, 1.0) : 1.0;
}

std::string DutyCycler::take_error()
{
	std::lock_guard<std::mutex> lock(mu_);
	return std::exchange(error_, {});
}

std::vector<std::pair<uint64_t, uint64_t>> DutyCycler::take_detaches()
{
	std::lock_guard<std::mutex> lock(mu_);
	return std::exchange(detaches_, {});
}

// Waits `ns` or until stopped or told something new.
void DutyCycler::wait_for(uint64_t ns, std::unique_lock<std::mutex> &lock)
{
	auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(ns);
	std::set<uint32_t> want = want_;
	cv_.wait_until(lock, until, [&] { return stop_ || want_ != want; });
}

void DutyCycler::run()
{
	std::unique_lock<std::mutex> lock(mu_);
	while (!stop_) {
		if (want_ != have_) {
			std::set<uint32_t> want = want_;
			lock.unlock();
			auto old = engine_.set_throttled(want);
			lock.lock();
			if (!old) {
				error_ = "overhead budget: cannot relink the probes (" + old.error().message +
					"); every probe stays attached";
				want_ = have_;
				continue;
			}
			have_ = want;
			since_ns_ = 0;
			lock.unlock();
			uint64_t from = mono_ns();
			old.value().reset(); // waits for the kernel's grace periods
			uint64_t to = mono_ns();
			lock.lock();
			detaches_.emplace_back(from, to);
			continue;
		}
		if (have_.empty()) {
			cv_.wait(lock, [&] { return stop_ || want_ != have_; });
			continue;
		}
		// One period: attached for `duty` of it, then detached.
		uint64_t start = mono_ns();
		if (!since_ns_) {
			since_ns_ = until_ns_ = start;
			on_ns_ = 0;
		}
		uint64_t on_for = static_cast<uint64_t>(duty_ * static_cast<double>(period_ns_));
		lock.unlock();
		auto burst = engine_.attach_throttled();
		// A call's span needs the exit probe too, attached last: the burst
		// counts from the moment both are in place.
		uint64_t on_at = mono_ns();
		lock.lock();
		if (!burst) {
			error_ = "overhead budget: cannot attach a burst (" + burst.error().message +
				"); the throttled probes stay detached";
			want_ = have_ = {};
			continue;
		}
		wait_for(on_for, lock);
		uint64_t off_at = mono_ns();
		lock.unlock();
		burst.value().reset(); // the breakpoints go first, then the grace periods pass
		uint64_t now = mono_ns();
		lock.lock();
		detaches_.emplace_back(off_at, now);
		if (now < start + period_ns_)
			wait_for(start + period_ns_ - now, lock);
		// A whole period more, burst and gap together (unless the set or
		// the duty changed meanwhile: then the coverage starts again).
		if (since_ns_ && since_ns_ <= start) {
			on_ns_ += off_at - on_at;
			until_ns_ = mono_ns();
		}
	}
}

Result<double> measure_trap_ns(SpanEngine &engine)
{
	// Where the function lies in eacgm's file, from this process's maps:
	// no symbol table to read.
	auto maps = read_maps(getpid());
	if (!maps)
		return maps.error();
	uint64_t addr = reinterpret_cast<uintptr_t>(&eacgm_probes_cost_target);
	const Mapping *m = mapping_for(maps.value(), addr);
	if (!m || m->path.empty() || m->path[0] != '/')
		return make_error(ErrorKind::NotFound, "cannot find eacgm's own code in /proc/self/maps");
	std::string self = m->path;
	uint64_t offset = addr - m->start + m->offset;
	long (*volatile call)(long) = eacgm_probes_cost_target; // a real call every time
	auto best_ns = [&] {
		const int rounds = 5, calls = kTrapTimingCalls / rounds;
		double best = 1e30;
		for (int round = 0; round < rounds; round++) {
			uint64_t t0 = mono_ns();
			for (long i = 0; i < calls; i++)
				call(i);
			best = std::min(best, static_cast<double>(mono_ns() - t0) / calls);
		}
		return best;
	};
	double probed;
	{
		auto links = engine.attach_apart(self, {{offset, 0}});
		if (!links)
			return links.error();
		probed = best_ns();
	}
	return std::max(0.0, probed - best_ns());
}

namespace {

// A loop of dependent multiplications: its time is its length, with nothing
// the compiler may drop or a cache may change.
double spin_ns(long iterations)
{
	uint64_t t0 = mono_ns(), x = 1;
	for (long i = 0; i < iterations; i++)
		x = x * 6364136223846793005ull + 1442695040888963407ull;
	asm volatile("" ::"r"(x));
	return static_cast<double>(mono_ns() - t0);
}

} // namespace

Result<double> measure_sample_interrupt_ns(unsigned hz)
{
	perf_event_attr attr{};
	attr.size = sizeof(attr);
	attr.type = PERF_TYPE_SOFTWARE;
	attr.config = PERF_COUNT_SW_CPU_CLOCK;
	attr.sample_period = 1'000'000'000ull / hz;
	attr.disabled = 1;
	// This thread only, with no buffer to write to: the interrupt and the
	// event's own handling, which the sampler's events pay too.
	UniqueFd fd(static_cast<int>(syscall(__NR_perf_event_open, &attr, 0, -1, -1, PERF_FLAG_FD_CLOEXEC)));
	if (fd.get() < 0)
		return errno_error(errno, "cannot open a CPU-clock event to time the sampler's interrupt");
	// About 20 ms a loop here: 200 samples at 10 kHz. Each round's loop
	// with the event against the loop just before it without: the median
	// of those differences. The least of each (as the trap is timed) came
	// out at 5 to 19 us from one start to the next on these VMs, against a
	// loss of 17 to 23 us a sample that a sampled program measured.
	const long iterations = 20'000'000;
	std::vector<double> per_sample;
	for (int round = 0; round < 9; round++) {
		double off = spin_ns(iterations);
		if (ioctl(fd.get(), PERF_EVENT_IOC_ENABLE, 0) != 0)
			return errno_error(errno, "cannot enable the timing event");
		double on = spin_ns(iterations);
		(void)ioctl(fd.get(), PERF_EVENT_IOC_DISABLE, 0);
		per_sample.push_back((on - off) / (on / 1e9 * hz));
	}
	std::nth_element(per_sample.begin(), per_sample.begin() + 4, per_sample.end());
	return std::max(0.0, per_sample[4]);
}

} // namespace eacgm
