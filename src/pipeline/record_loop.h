// SPDX-License-Identifier: Apache-2.0
// The pipeline's loop: reads the records of a source in rounds
// (pipeline/sources.h), hands the process records to Processes and the
// Python stacks to the PythonJoiner, decodes the calls (typed where no
// joiner needs them), joins the rest (NCCL communicators, issued work,
// Python entries) and hands everything to the sink chain (pipeline/sink.h).
// It asks the System, never /proc itself, what a process is, and the Probes
// to place probes on what it maps.
#pragma once
#include <chrono>
#include <functional>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/model.h"
#include "common/result.h"
#include "common/warnings.h"
#include "eacgm/abi/events.h"
#include "layers/nccl.h"
#include "layers/python.h"
#include "pipeline/decode.h"
#include "pipeline/issues.h"
#include "pipeline/processes.h"
#include "pipeline/python_join.h"
#include "pipeline/raw_dump.h"
#include "pipeline/sink.h"
#include "pipeline/sources.h"
#include "pipeline/weights.h"
#include "probe/symbolizer.h"

namespace eacgm {

class RecordLoop : public Records {
public:
	// python may be null (no python layer).
	RecordLoop(Probes &probes, System &system, RecordSource &source, Sink &out, PythonTracer *python = nullptr);
	RecordLoop(const RecordLoop &) = delete;
	RecordLoop &operator=(const RecordLoop &) = delete;

	void open();
	// A process traced from the start (launched or attached with -p). Its
	// exit is watched through pidfd when given (opened before the process
	// was tracked, so that a pid reused since cannot stand in for it), else
	// through a new one, as for every process from the moment it is seen.
	void add_root(uint32_t pid, uint32_t ppid, uint64_t start_ns, UniqueFd pidfd = {})
	{
		processes_.add_root(pid, ppid, start_ns, std::move(pidfd));
	}
	// Waits up to timeout_ms for events or a traced process's exit and
	// handles them. Returns the number of records consumed, or an error (a
	// store write failed).
	Result<int> poll(int timeout_ms);
	// Consumes whatever is left in the buffers.
	Result<void> drain();
	// Traced processes that have not exited yet.
	size_t live_processes() const { return processes_.table().live().size(); }
	bool live(uint32_t pid) const { return processes_.table().live(pid); }
	// Every process of the recording, exited ones included.
	std::set<uint32_t> pids() const { return processes_.table().pids(); }
	bool exited(uint32_t pid) const { return processes_.table().exited(pid); }
	void set_exit(uint32_t pid, int exit_code, uint64_t end_ns) { processes_.set_exit(pid, exit_code, end_ns); }
	// Writes the process and thread tables and the loss counters.
	Result<void> finish();
	// Records lost or not recorded so far, by layer and reason.
	std::vector<Drop> drops() const;
	uint64_t spans_seen() const { return spans_seen_; }
	// Records read from the ring buffers so far, of every kind (spans,
	// Python stacks and samples, process events), and the CPU time poll()
	// spent reading and handling them (decoding, joining, scoring,
	// storing; not waiting, nor looking for processes): the budget's cost
	// of a record to eacgm.
	uint64_t records_read() const { return records_read_; }
	// The ring reader's thread included: reading the rings is part of a
	// record's cost wherever it runs (the budget weighs it).
	uint64_t handling_cpu_ns() const { return handling_cpu_ns_ + source_.reading_cpu_ns(); }
	uint64_t samples_read() const { return python_join_.samples_read(); } // of them, Python stack samples
	// Spans read so far per spec id (the budget's hit counts).
	const std::vector<uint64_t> &spans_per_spec() const { return spans_per_spec_; }
	// The threads whose calls were read since the last take (tid -> pid):
	// the threads the calls' traps and programs slow, whose CPU the budget
	// weighs their cost against.
	std::map<uint32_t, uint32_t> take_calling_threads()
	{
		last_caller_ = 0;
		return std::exchange(calling_, {});
	}
	// What each call and sample stands for as the overhead budget moves
	// (pipeline/weights.h): its calls' weights, stored with them as
	// args.weight where not 1, and the Python sampler's period (the
	// kernel's sample record keeps the period the event was opened with).
	BudgetHistory &budget_history() { return budget_; }
	// How tensor arguments read (the torch layer's format_tensor).
	void set_tensor_formatter(TensorFormatter f) { tensors_ = f; }
	// Every span record decode sees is also written to `dump`, closed with
	// the probes by finish() (record --raw-dump, pipeline/raw_dump.h).
	void set_raw_dump(RawDumpWriter dump) { raw_dump_.emplace(std::move(dump)); }
	// The Python layer's joining (pipeline/python_join.h): keep every
	// sample to the end (--python-entries), keep the sampled stacks for
	// folded_stacks (--flamegraph; off by default: naming every sample's
	// stack as a line of text cost more than resolving it).
	void keep_python_samples() { python_join_.keep_all_samples(); }
	void keep_folded_stacks() { python_join_.keep_folded_stacks(); }
	std::string folded_stacks() { return python_join_.folded_stacks(); }
	// The node agent's mode (serve; pipeline/processes.h): processes are
	// adopted as the filters say, their calls otherwise dropped, counted.
	using ProcessFilter = Processes::Filter;
	void discover(ProcessFilter wanted) { processes_.discover(std::move(wanted)); }
	// serve: a process running when the agent starts, judged as one that
	// just exec'd.
	void consider(uint32_t pid) { processes_.consider(pid); }
	uint64_t filtered_spans() const { return filtered_; }
	size_t known_processes() const { return processes_.table().size(); }
	// A call in flight, read from the span engine's entry state: its span
	// so far (dur_ns: its age at now_ns, no return value, arguments read at
	// return left out), the Python stack it was made under, and whether its
	// spec says it waits on other processes.
	struct OpenSpan {
		Span span;
		bool waits = false;
	};
	// The calls every live traced thread is inside now; waits_only: those
	// of "waits" specs only (the hang watch's; decoding is skipped for the
	// rest). Defined in open_spans.cpp.
	std::vector<OpenSpan> open_spans(uint64_t now_ns, bool waits_only);
	// Messages for the user (rescans that failed, ...), at most once each.
	std::vector<std::string> take_warnings();
	// What the user should know as it happens (probes attached late, ...).
	std::vector<std::string> take_notes() { return processes_.take_notes(); }

	// Records, as the source reads them (pipeline/sources.h).
	void span(const eacgm_span_event &e) override;
	void proc(const eacgm_proc_event &e) override { processes_.record(e); }
	void py(const eacgm_py_stack_event &e, uint32_t nframes) override;

private:
	Span open_span(uint32_t pid, uint32_t tid, uint32_t depth, const eacgm_open_call &c, const ProbeSpec &spec,
		       uint64_t now_ns);
	// Decodes what was read; writes to the store when enough has gathered
	// (or force).
	Result<void> flush(bool force = false);

	Probes &probes_;
	System &system_;
	RecordSource &source_;
	Sink &out_;
	// The processes and their table, the symbolizer, discovery.
	Processes processes_;
	Interner names_; // the recording's strings typed spans carry as ids (kernel names)
	NcclCommunicators nccl_;
	// Joins the work a call issued (torch's enqueue) to the call that ran it
	// (gloo's collective on a worker thread); set by open().
	std::optional<IssueLinker> issues_;
	std::vector<eacgm_span_event> pending_; // read, not yet decoded
	std::vector<Span> decoded_;             // decoded, not yet stored
	TypedSpans typed_;                      // decoded, kept typed, not yet stored
	// What decode needs of each probe, worked out once per probe (probes
	// are added as libraries load): its plan, and whether its calls stay
	// typed (no joiner changes or holds them).
	struct ProbeFacts {
		DecodePlan plan;
		Joiner joiner = Joiner::none; // its layer's (common/layers.h)
		bool typed = false;           // no joiner changes or holds its calls
	};
	std::vector<ProbeFacts> probe_facts_; // by spec id
	std::chrono::steady_clock::time_point last_store_ = std::chrono::steady_clock::now();
	PythonTracer *python_;
	PythonJoiner python_join_;
	Result<int> read_round();
	const ProbeFacts &facts(uint32_t spec_id);
	void decode(const eacgm_span_event &e);
	OnceWarnings warnings_;
	// serve: calls of processes not judged yet, for a later round.
	std::vector<eacgm_span_event> held_spans_;
	uint64_t filtered_ = 0;
	static constexpr uint64_t kTickNs = 1'000'000'000; // how often the sinks' tick comes
	uint64_t last_tick_ns_ = 0;
	uint64_t spans_seen_ = 0;
	uint64_t records_read_ = 0, handling_cpu_ns_ = 0;
	std::vector<uint64_t> spans_per_spec_;
	std::map<uint32_t, uint32_t> calling_; // tid -> pid, since the last take
	uint32_t last_caller_ = 0;             // a thread's calls come in runs: one lookup per run
	BudgetHistory budget_;
	TensorFormatter tensors_ = nullptr;
	std::optional<RawDumpWriter> raw_dump_;
};

} // namespace eacgm
