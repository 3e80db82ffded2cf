// SPDX-License-Identifier: Apache-2.0
// The record loop's side of --overhead-budget: every interval it counts the
// traced calls per probe, reads what the traced processes ran and what the
// span programs cost, decides (probe/budget.h) and hands the decision to
// the duty cycler and the weights to the record loop.
#pragma once
#include <array>
#include <cstdint>
#include <future>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/fs.h"
#include "layers/python.h"
#include "pipeline/record_loop.h"
#include "probe/budget.h"
#include "probe/pid_watch.h"
#include "probe/spec.h"
#include "store/store.h"

namespace eacgm {

class OverheadKeeper {
public:
	// budget_pct > 0. The first decision comes after warmup_s: a short
	// recording keeps every call, and the trap is timed meanwhile.
	// python: the Python layer's tracer when it samples (its rate is the
	// budget's second lever), else null.
	OverheadKeeper(double budget_pct, double warmup_s, SpanEngine &engine, const SpecSet &specs,
		       PythonTracer *python = nullptr);
	// Once per loop round; decides when an interval is due. Messages for
	// the user go to `notes`; each change of what is throttled, as an event
	// (layer "eacgm", name "overhead_budget"), to `events`.
	void tick(RecordLoop &rec, std::vector<std::string> &notes, std::vector<Event> &events);
	// What the budget did, in the recording's meta.
	void write_meta(StoreWriter &store) const;
	// A probe hit's trap as timed after the warm-up (ns); < 0 until then.
	double trap_ns() const { return trap_ns_; }

private:
	void decide(RecordLoop &rec, uint64_t now, std::vector<std::string> &notes, std::vector<Event> &events);
	double calling_cpu_ns(const std::map<uint32_t, uint32_t> &threads, double interval_ns);
	void measure_programs(bool update);
	double agent_ns_per_call(const RecordLoop &rec, const std::map<uint32_t, uint64_t> &hits);
	std::optional<BudgetSample> take_sample(RecordLoop &rec, uint64_t now, std::vector<std::string> &notes);
	Event change_event(const BudgetDecision &d, double hit_ns, uint64_t now) const;
	static Event detach_event(uint64_t from_ns, uint64_t to_ns);
	std::string describe(const BudgetDecision &d) const;
	void set_weights(RecordLoop &rec, const BudgetDecision &d, uint64_t from_ns);
	void steer_sampler(RecordLoop &rec, uint64_t now, double pct, std::vector<std::string> &notes,
			   std::vector<Event> &events);
	// What a sample cost the thread it interrupted over the last interval:
	// the sampler program's own time (EACGM_PY_CNT_SAMPLE_NS) and the
	// interrupt (measure_sample_interrupt_ns, timed after the trap; a
	// trap's worth where it cannot be timed). 0: not known yet.
	double measure_sample_ns();

	const double budget_pct_;
	SpanEngine &engine_;
	const SpecSet &specs_;
	std::set<uint32_t> eligible_; // specs that may be throttled
	std::future<Result<double>> trap_timing_;
	double trap_ns_ = -1;
	uint64_t next_ns_, last_ns_ = 0;
	std::vector<uint64_t> last_hits_;
	// The CPU each thread that made calls lately had used (tid -> its pid,
	// its ns, the interval it last made calls in).
	struct ThreadCpu {
		uint32_t pid = 0;
		uint64_t ns = 0;
		size_t seen = 0;
	};
	std::map<uint32_t, ThreadCpu> thread_cpu_;
	size_t intervals_ = 0;
	// The span programs' timing (their counters at the last interval: entry
	// ns, entries timed, exit ns, exits timed), and their cost per call.
	std::array<uint64_t, 4> last_prog_{};
	double program_ns_ = 0;
	double hit_ns_ = -1; // what a call cost the job at the last decision: trap + programs
	uint64_t last_loop_cpu_ns_ = 0, last_records_ = 0, last_samples_ = 0; // the record loop's CPU, its records
	double max_agent_full_pct_ = 0;
	AgentCallCost agent_call_; // a call's cost to the record loop
	BudgetDecision now_;
	std::optional<DutyCycler> cycler_;
	uint64_t throttled_from_ns_ = 0;
	// For the meta: every spec throttled at some point, its last coverage.
	std::map<uint32_t, double> ever_throttled_;
	double max_full_pct_ = 0;
	size_t decisions_ = 0;
	// The sampler: its tracer (which keeps the lowest rate used), the rate
	// asked for, whether its rate still follows the budget (not after a
	// change failed); eacgm's whole CPU at the last decision.
	PythonTracer *python_;
	unsigned asked_hz_ = 0;
	bool sampler_follows_budget_ = true;
	uint64_t last_py_samples_ = 0, last_py_sample_ns_ = 0;
	double sample_program_ns_ = 0, sample_ns_ = 0;
	double interrupt_ns_ = -1; // a sample's interrupt, timed with the trap
	std::string interrupt_error_;
	uint64_t last_self_cpu_ns_ = 0, last_self_ns_ = 0;
	// The machine's CPU, for what eacgm's own took from the job
	// (BudgetSample::agent_displaced_ns).
	struct MachineDelta {
		double busy_ns, idle_ns;
	};
	std::optional<MachineDelta> read_machine_cpu();
	RereadFile proc_stat_{"/proc/stat"};
	std::optional<MachineCpu> last_machine_;
	double agent_pct_ = -1, agent_pct_max_ = -1; // eacgm's whole CPU, % of a core
};

} // namespace eacgm
