// SPDX-License-Identifier: Apache-2.0
#include "app/overhead.h"

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/layers.h"
#include "common/text.h"
#include "probe/pid_watch.h"

namespace eacgm {

namespace {

// Decisions every 2 s: enough calls and clock ticks (10 ms each) for a
// stable estimate, soon enough to follow a job that changes phase.
constexpr uint64_t kIntervalNs = 2'000'000'000;
// The fewest timed runs of each program the programs' cost is taken from.
constexpr uint64_t kMinTimedRuns = 20;

std::string pct_text(double v)
{
	char buf[32];
	// A budget below a tenth of a percent keeps its digits (0.01%, not 0.0%).
	snprintf(buf, sizeof(buf), v > 0 && v < 0.1 ? "%.2g%%" : v < 10 ? "%.1f%%" : "%.0f%%", v);
	return buf;
}

} // namespace

OverheadKeeper::OverheadKeeper(double budget_pct, double warmup_s, SpanEngine &engine, const SpecSet &specs,
			       PythonTracer *python)
	: budget_pct_(budget_pct), engine_(engine), specs_(specs),
	  next_ns_(mono_ns() + static_cast<uint64_t>(warmup_s * 1e9)), python_(python),
	  asked_hz_(python ? python->sample_hz() : 0)
{
	// The Python layer's entry probes make Python function spans exactly;
	// a scaled estimate of them would mean nothing there: they stay
	// (common/layers.h, Throttle).
	for (uint32_t id = 0; id < specs.probes.size(); id++)
		if (may_throttle(specs.probes[id].layer))
			eligible_.insert(id);
}

// The CPU the threads that made calls in the interval used in it: what the
// calls' cost is a share of. Not their processes' CPU: the trap and the
// programs run on the calling thread and hold it up, whatever the others
// do. On GPT the process ran a second thread (OpenBLAS's worker, busy
// waiting), the calls' cost came out as half its share of the calling
// thread, and the steps slowed by twice the budget. A thread first seen now
// counts what it used since it started, at most the interval.
double OverheadKeeper::calling_cpu_ns(const std::map<uint32_t, uint32_t> &threads, double interval_ns)
{
	intervals_++;
	for (auto [tid, pid] : threads)
		if (auto [it, fresh] = thread_cpu_.try_emplace(tid, ThreadCpu{pid, 0, intervals_}); !fresh)
			it->second.seen = intervals_;
	double sum = 0;
	for (auto it = thread_cpu_.begin(); it != thread_cpu_.end();) {
		ThreadCpu &t = it->second;
		auto ns = thread_cpu_ns(t.pid, it->first);
		// Kept while it made calls in the last few intervals (a throttled
		// probe's thread can miss one), so that its baseline stays fresh.
		if (!ns || intervals_ - t.seen > 4) {
			it = thread_cpu_.erase(it);
			continue;
		}
		if (t.seen == intervals_)
			sum += std::min(interval_ns, static_cast<double>(*ns >= t.ns ? *ns - t.ns : 0));
		t.ns = *ns;
		++it;
	}
	return sum;
}

// What the span programs take of a call, from their own timing of one call
// in EACGM_TIMED_EVERY (the entry's and the return's means). The trap was
// all the budget counted before: 1.2 us of a GPT call whose programs took
// 3 to 4 us more (the Python stack read behind it), and the step slowed by
// 7% under a budget of 2.
void OverheadKeeper::measure_programs(bool update)
{
	auto c = engine_.counters();
	std::array<uint64_t, 4> now = {c[EACGM_CNT_ENTRY_NS], c[EACGM_CNT_ENTRIES_TIMED], c[EACGM_CNT_EXIT_NS],
				       c[EACGM_CNT_EXITS_TIMED]};
	auto mean = [&](int ns, int n) {
		uint64_t runs = now[n] - last_prog_[n];
		return runs ? static_cast<double>(now[ns] - last_prog_[ns]) / static_cast<double>(runs) : 0.0;
	};
	if (update && now[1] - last_prog_[1] >= kMinTimedRuns && now[3] - last_prog_[3] >= kMinTimedRuns)
		program_ns_ = mean(0, 1) + mean(2, 3);
	last_prog_ = now;
}

void OverheadKeeper::tick(RecordLoop &rec, std::vector<std::string> &notes, std::vector<Event> &events)
{
	uint64_t now = mono_ns();
	if (cycler_) {
		if (auto e = cycler_->take_error(); !e.empty())
			notes.push_back("warning: " + e);
		for (auto [from, to] : cycler_->take_detaches())
			events.push_back(detach_event(from, to));
	}
	if (now < next_ns_)
		return;
	next_ns_ = now + kIntervalNs;
	decide(rec, now, notes, events);
}

// The interval since the last call: calls per spec, what a call cost, the
// calling threads' CPU. Nothing on the first call (the counts start there
// and the trap is timed meanwhile) or when the trap cannot be timed.
std::optional<BudgetSample> OverheadKeeper::take_sample(RecordLoop &rec, uint64_t now, std::vector<std::string> &notes)
{
	const auto &hits = rec.spans_per_spec();
	BudgetSample s;
	s.traced_cpu_ns = calling_cpu_ns(rec.take_calling_threads(), static_cast<double>(now - last_ns_));
	// Not from the interval the trap was timed in: its cheap calls of
	// eacgm's own function ran the programs too.
	measure_programs(!trap_timing_.valid());
	for (uint32_t id = 0; id < hits.size(); id++) {
		uint64_t before = id < last_hits_.size() ? last_hits_[id] : 0;
		if (hits[id] > before)
			s.hits[id] = hits[id] - before;
	}
	bool first = last_ns_ == 0;
	s.agent_ns_per_call = agent_ns_per_call(rec, s.hits);
	s.interval_ns = static_cast<double>(now - last_ns_);
	last_hits_ = hits;
	last_ns_ = now;
	if (first) {
		// Timed on a thread, not at start: a recording shorter than the
		// warm-up has nothing to decide, and its start is when the
		// machine is busiest.
		trap_timing_ = std::async(std::launch::async, [this] {
			auto trap = measure_trap_ns(engine_);
			// After the trap, not beside it: two timing loops at once
			// would slow each other. Written before the future is ready,
			// read after get().
			if (python_) {
				auto i = measure_sample_interrupt_ns();
				interrupt_ns_ = i ? i.value() : -1;
				if (!i)
					interrupt_error_ = i.error().message;
			}
			return trap;
		});
		return std::nullopt;
	}
	if (trap_timing_.valid()) {
		auto t = trap_timing_.get();
		if (!t) {
			notes.push_back("warning: overhead budget off: cannot time a uprobe hit (" + t.error().message +
					")");
			next_ns_ = UINT64_MAX;
			return std::nullopt;
		}
		trap_ns_ = t.value();
		if (python_ && interrupt_ns_ < 0)
			notes.push_back("warning: " + interrupt_error_ +
					"; a Python sample is taken to cost the job what a uprobe's trap does");
	}
	// The timed trap ran the span programs too, of a call with nothing to
	// read: counted twice here, a tenth of a microsecond or two, on the
	// side of caution.
	s.hit_ns = hit_ns_ = trap_ns_ + program_ns_;
	return s;
}

// What handling a traced call costs eacgm's record loop, since the last
// interval (AgentCallCost). The loop's fixed costs (waking up, looking for
// processes, the collectors) and the other threads (the detector's refits)
// are left out: spread over the calls, they would make each dearer the
// fewer there are, and throttle more and more.
double OverheadKeeper::agent_ns_per_call(const RecordLoop &rec, const std::map<uint32_t, uint64_t> &hits)
{
	uint64_t cpu = rec.handling_cpu_ns(), records = rec.records_read(), samples = rec.samples_read();
	double d_records = static_cast<double>(records - last_records_);
	double calls = 0;
	for (auto [id, n] : hits)
		calls += static_cast<double>(n);
	double ns = agent_call_.update(static_cast<double>(cpu - last_loop_cpu_ns_), d_records,
				       d_records - static_cast<double>(samples - last_samples_), calls,
				       !now_.throttled.empty());
	last_loop_cpu_ns_ = cpu;
	last_records_ = records;
	last_samples_ = samples;
	return ns;
}

void OverheadKeeper::decide(RecordLoop &rec, uint64_t now, std::vector<std::string> &notes, std::vector<Event> &events)
{
	// eacgm's whole CPU over the interval (none the first time: the count
	// starts there): the sampler's rate follows it, and what the calls did
	// not take of it is the fixed cost the calls' budget makes room for.
	uint64_t cpu = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
	double whole_ns = last_self_ns_ ? static_cast<double>(cpu - last_self_cpu_ns_) : -1;
	double whole_pct = last_self_ns_ ? 100 * whole_ns / static_cast<double>(now - last_self_ns_) : -1;
	last_self_cpu_ns_ = cpu;
	last_self_ns_ = now;
	sample_ns_ = measure_sample_ns();
	if (whole_pct >= 0)
		steer_sampler(rec, now, whole_pct, notes, events);
	auto machine = read_machine_cpu();
	auto s = take_sample(rec, now, notes);
	if (s && whole_ns >= 0) {
		double calls = 0;
		for (auto [id, n] : s->hits)
			calls += static_cast<double>(n);
		s->agent_fixed_ns = std::max(0.0, whole_ns - s->agent_ns_per_call * calls);
		if (machine)
			s->agent_displaced_ns =
				machine_share_taken(whole_ns, s->traced_cpu_ns, machine->busy_ns, machine->idle_ns);
	}
	if (s && python_)
		s->sampler_share = sample_ns_ * python_->sample_hz() / 1e9;
	if (s)
		s->step_per_counted = kStepPerCounted;
	// A job that barely ran says nothing about its cost: no change.
	if (!s || s->traced_cpu_ns < 0.05 * static_cast<double>(kIntervalNs))
		return;
	BudgetDecision d = decide_budget(*s, now_, budget_pct_, eligible_);
	decisions_++;
	max_full_pct_ = std::max(max_full_pct_, d.full_pct);
	max_agent_full_pct_ = std::max(max_agent_full_pct_, d.agent_full_pct);
	bool changed = d.throttled != now_.throttled;
	// A duty that moves by less than a quarter stays: small moves are the
	// estimate's noise, and a new duty starts the coverage's measure again.
	if (changed || std::abs(d.duty - now_.duty) > 0.25 * now_.duty) {
		if (!cycler_)
			cycler_.emplace(engine_);
		cycler_->apply(d.throttled, d.duty);
	} else {
		d.duty = now_.duty;
	}
	set_weights(rec, d, changed ? now : throttled_from_ns_);
	if (changed) {
		throttled_from_ns_ = now;
		notes.push_back(describe(d));
		events.push_back(change_event(d, s->hit_ns, now));
	}
	now_ = d;
}

// The sampler's rate from eacgm's whole CPU over the interval (pct, of a core).
void OverheadKeeper::steer_sampler(RecordLoop &rec, uint64_t now, double pct, std::vector<std::string> &notes,
				   std::vector<Event> &events)
{
	agent_pct_ = pct;
	agent_pct_max_ = std::max(agent_pct_max_, pct);
	if (!python_ || !sampler_follows_budget_)
		return;
	unsigned was = python_->sample_hz();
	unsigned hz = decide_sample_hz(was, asked_hz_, pct, budget_pct_, sample_ns_);
	if (hz == was)
		return;
	if (auto r = python_->set_sample_hz(hz); !r) {
		notes.push_back("warning: " + r.error().message);
		sampler_follows_budget_ = false; // left as it is from here
		return;
	}
	rec.budget_history().set_sample_period(mono_ns(), python_->sample_period_ns());
	char cost[64] = "";
	if (sample_ns_ > 0)
		snprintf(cost, sizeof(cost), ", a sample %.1f us of the job's", sample_ns_ / 1000);
	notes.push_back("overhead budget " + pct_text(budget_pct_) + ": eacgm used " + pct_text(pct) + " of a core" +
			cost + "; Python stacks sampled at " + std::to_string(hz) + " Hz (asked: " +
			std::to_string(asked_hz_) + "); sampled times stay estimates, with a wider error");
	Event e;
	e.ts_ns = now;
	e.layer = "eacgm";
	e.name = "python_sampler";
	e.args = {{"hz", hz},
		  {"was_hz", was},
		  {"asked_hz", asked_hz_},
		  {"agent_pct", pct},
		  {"budget_pct", budget_pct_},
		  {"sample_ns", sample_ns_}};
	events.push_back(std::move(e));
}

double OverheadKeeper::measure_sample_ns()
{
	if (!python_)
		return 0;
	auto c = python_->counters();
	uint64_t n = c[EACGM_PY_CNT_SAMPLES] - last_py_samples_, ns = c[EACGM_PY_CNT_SAMPLE_NS] - last_py_sample_ns_;
	last_py_samples_ = c[EACGM_PY_CNT_SAMPLES];
	last_py_sample_ns_ = c[EACGM_PY_CNT_SAMPLE_NS];
	if (n >= kMinTimedRuns)
		sample_program_ns_ = static_cast<double>(ns) / static_cast<double>(n);
	if (sample_program_ns_ <= 0)
		return 0;
	// interrupt_ns_ is written by the timing thread: read only once its
	// future was taken, which is when trap_ns_ is set.
	if (trap_ns_ < 0)
		return sample_program_ns_;
	return sample_program_ns_ + (interrupt_ns_ >= 0 ? interrupt_ns_ : trap_ns_);
}

// The machine's CPU in use and idle since the last call (nothing the first
// time, or when /proc/stat cannot be read).
std::optional<OverheadKeeper::MachineDelta> OverheadKeeper::read_machine_cpu()
{
	const std::string *text = proc_stat_.read();
	auto now = text ? parse_machine_cpu(*text) : std::nullopt;
	if (!now)
		return std::nullopt;
	auto last = std::exchange(last_machine_, now);
	if (!last || now->busy_ns < last->busy_ns || now->idle_ns < last->idle_ns)
		return std::nullopt;
	return MachineDelta{double(now->busy_ns - last->busy_ns), double(now->idle_ns - last->idle_ns)};
}

Event OverheadKeeper::change_event(const BudgetDecision &d, double hit_ns, uint64_t now) const
{
	Event e;
	e.ts_ns = now;
	e.layer = "eacgm";
	e.name = "overhead_budget";
	e.args = {{"budget_pct", budget_pct_},
		  {"full_pct", d.full_pct},
		  {"expected_pct", d.expected_pct},
		  {"agent_full_pct", d.agent_full_pct},
		  {"agent_expected_pct", d.agent_expected_pct},
		  {"agent_fixed_pct", d.agent_fixed_pct},
		  {"displaced_pct", d.displaced_pct},
		  {"sampler_pct", d.sampler_pct},
		  {"duty", d.duty},
		  {"hit_ns", hit_ns},
		  {"throttled", nlohmann::json::array()}};
	for (uint32_t id : d.throttled)
		e.args["throttled"].push_back(specs_.probes[id].layer + "/" + specs_.probes[id].function);
	return e;
}

// A detach of the throttled probes (DutyCycler::take_detaches says why the
// recording keeps them): detect reads them (offline.cpp, Agent).
Event OverheadKeeper::detach_event(uint64_t from_ns, uint64_t to_ns)
{
	Event e;
	e.ts_ns = from_ns;
	e.layer = "eacgm";
	e.name = "probe_detach";
	e.args = {{"end_ns", to_ns}, {"dur_ns", to_ns - from_ns}};
	return e;
}

// What each call of a throttled probe stands for: the inverse of the
// coverage measured so far at this duty, or of the duty before a period ends.
void OverheadKeeper::set_weights(RecordLoop &rec, const BudgetDecision &d, uint64_t from_ns)
{
	if (d.throttled.empty()) {
		rec.budget_history().set_weights(from_ns, {});
		return;
	}
	auto [on, all] = cycler_->coverage_ns();
	if (!all) // no whole period yet at this duty: as planned
		on = static_cast<uint64_t>(d.duty * 1e9), all = 1'000'000'000;
	double cov = effective_coverage(on, all, d.throttled_pct / 100);
	std::vector<double> w(specs_.probes.size(), 1.0);
	for (uint32_t id : d.throttled)
		if (id < w.size()) {
			w[id] = 1.0 / cov;
			ever_throttled_[id] = cov;
		}
	rec.budget_history().set_weights(from_ns, std::move(w));
}

std::string OverheadKeeper::describe(const BudgetDecision &d) const
{
	std::string head = "overhead budget " + pct_text(budget_pct_) + ": traced calls would cost " +
		pct_text(d.full_pct) + " of the calling threads' CPU and " + pct_text(d.agent_full_pct) +
		" of a core to eacgm" +
		(d.agent_fixed_pct > 0 ? " (beside " + pct_text(d.agent_fixed_pct) + " it spends apart from them)"
				       : "") +
		(d.displaced_pct > 0 ? ", and eacgm took " + pct_text(d.displaced_pct) +
				 " of the calling threads' CPU itself (no idle core to run on)"
				     : "") +
		(d.sampler_pct > 0 ? ", its Python samples " + pct_text(d.sampler_pct) : "");
	if (d.throttled.empty())
		return head + "; every probe is attached again";
	std::vector<std::string> names;
	for (uint32_t id : d.throttled)
		if (names.size() < 5)
			names.push_back(specs_.probes[id].function);
	if (d.throttled.size() > 5)
		names.push_back("...");
	char buf[200];
	snprintf(
		buf, sizeof(buf),
		" (%.2f us a call to the job); probing the %zu hottest functions %.0f%% of the time, about %s and %s: ",
		hit_ns_ / 1000, d.throttled.size(), d.duty * 100, pct_text(d.expected_pct).c_str(),
		pct_text(d.agent_expected_pct).c_str());
	return head + buf + join(names, ", ") + " (their counts are estimates)";
}

void OverheadKeeper::write_meta(StoreWriter &store) const
{
	auto num = [](double v) {
		char buf[32];
		snprintf(buf, sizeof(buf), "%.3f", v);
		return std::string(buf);
	};
	(void)store.set_meta("overhead_budget_pct", num(budget_pct_));
	// What its percentages are of (recordings before it: the processes' CPU).
	(void)store.set_meta("overhead_share_of", "calling_threads");
	// The job's side is held to the budget over this (what is counted).
	(void)store.set_meta("overhead_step_per_counted", num(kStepPerCounted));
	if (trap_ns_ >= 0) {
		(void)store.set_meta("overhead_hit_trap_ns", num(trap_ns_));
		(void)store.set_meta("overhead_hit_program_ns", num(program_ns_));
		// Counted in bpf_runs:span_entry* and span_exit* with the traced calls.
		(void)store.set_meta("overhead_timing_calls", std::to_string(kTrapTimingCalls));
	}
	if (agent_pct_ >= 0) {
		(void)store.set_meta("overhead_agent_pct", num(agent_pct_));
		(void)store.set_meta("overhead_agent_pct_max", num(agent_pct_max_));
	}
	if (asked_hz_) {
		(void)store.set_meta("overhead_sample_ns", num(sample_ns_));
		if (interrupt_ns_ >= 0)
			(void)store.set_meta("overhead_sample_interrupt_ns", num(interrupt_ns_));
		(void)store.set_meta("python_sample_hz_asked", std::to_string(asked_hz_));
		(void)store.set_meta("python_sample_hz_min", std::to_string(python_->lowest_sample_hz()));
	}
	if (!decisions_)
		return;
	(void)store.set_meta("overhead_full_pct", num(now_.full_pct));
	(void)store.set_meta("overhead_full_pct_max", num(max_full_pct_));
	(void)store.set_meta("overhead_expected_pct", num(now_.expected_pct));
	(void)store.set_meta("overhead_agent_full_pct", num(now_.agent_full_pct));
	(void)store.set_meta("overhead_agent_full_pct_max", num(max_agent_full_pct_));
	(void)store.set_meta("overhead_agent_expected_pct", num(now_.agent_expected_pct));
	(void)store.set_meta("overhead_agent_fixed_pct", num(now_.agent_fixed_pct));
	(void)store.set_meta("overhead_displaced_pct", num(now_.displaced_pct));
	(void)store.set_meta("overhead_sampler_pct", num(now_.sampler_pct));
	nlohmann::json throttled = nlohmann::json::array();
	for (auto [id, cov] : ever_throttled_)
		throttled.push_back({{"layer", specs_.probes[id].layer},
				     {"function", specs_.probes[id].function},
				     {"coverage", cov},
				     {"now", now_.throttled.count(id) != 0}});
	(void)store.set_meta("overhead_throttled", throttled.dump());
}

} // namespace eacgm
