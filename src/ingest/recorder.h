// The ingest loop of the pipeline: takes the records of a source (the BPF
// rings, pipeline/sources.h), decodes spans, keeps the process and thread
// tables, reacts to forks, execs, exits and dlopen, joins Python stacks to
// calls and samples into function spans, and hands everything to the sink
// chain (common/sink.h). It asks the System, never /proc itself, what a
// process is, and the Probes to place probes on what it maps.
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

#include "pipeline/process_table.h"
#include "pipeline/python_join.h"
#include "pipeline/raw_dump.h"
#include "pipeline/sources.h"
#include "pipeline/weights.h"
#include "common/model.h"
#include "common/result.h"
#include "common/sink.h"
#include "eacgm/abi/events.h"
#include "ingest/decode.h"
#include "ingest/issues.h"
#include "layers/nccl.h"
#include "layers/python.h"
#include "probe/symbolizer.h"

namespace eacgm {

class Recorder : public Records {
public:
	// python may be null (no python layer).
	Recorder(Probes &probes, System &system, RecordSource &source, Sink &out, PythonTracer *python = nullptr);
	Recorder(const Recorder &) = delete;
	Recorder &operator=(const Recorder &) = delete;

	void open();
	// A process traced from the start (launched or attached with -p). Its
	// exit is watched through pidfd when given (opened before the process
	// was tracked, so that a pid reused since cannot stand in for it), else
	// through a new one, as for every process from the moment it is seen.
	void add_root(uint32_t pid, uint32_t ppid, uint64_t start_ns, UniqueFd pidfd = {});
	// Waits up to timeout_ms for events or a traced process's exit and
	// handles them. Returns the number of records consumed, or an error (a
	// store write failed).
	Result<int> poll(int timeout_ms);
	// Consumes whatever is left in the buffers.
	Result<void> drain();
	// Traced processes that have not exited yet.
	size_t live_processes() const { return table_.live().size(); }
	bool live(uint32_t pid) const { return table_.live(pid); }
	// Every process of the recording, exited ones included.
	std::set<uint32_t> pids() const { return table_.pids(); }
	bool exited(uint32_t pid) const { return table_.exited(pid); }
	void set_exit(uint32_t pid, int exit_code, uint64_t end_ns);
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
	uint64_t handling_cpu_ns() const { return handling_cpu_ns_; }
	uint64_t samples_read() const { return python_join_.samples_read(); } // of them, Python stack samples
	// Spans read so far per spec id (the budget's hit counts).
	const std::vector<uint64_t> &spans_per_spec() const { return spans_per_spec_; }
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
	// The node agent's mode (serve): the span engine traces every process
	// that calls a traced library, and every exec and library load on the
	// node is reported. A process is adopted (its maps, Python, exit
	// watched, tracked for the host layer and its children) when it first
	// makes a call, or when it execs or loads a library and then maps a
	// traced library or an interpreter, and only when `wanted` says so
	// (the configured filters); the others' calls are dropped, counted. An
	// exited process is handed to the sinks and forgotten: the table holds
	// the live ones only.
	using ProcessFilter = std::function<bool(uint32_t pid)>;
	void discover(ProcessFilter wanted)
	{
		discover_ = true;
		wanted_ = std::move(wanted);
		table_.forget_ended();
	}
	// serve: a process running when the agent starts, judged as one that
	// just exec'd.
	void consider(uint32_t pid) { candidates_.insert(pid); }
	uint64_t filtered_spans() const { return filtered_; }
	size_t known_processes() const { return table_.size(); }
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
	std::vector<std::string> take_notes();

	// Records, as the source reads them (pipeline/sources.h).
	void span(const eacgm_span_event &e) override;
	void proc(const eacgm_proc_event &e) override { procs_.push_back(e); }
	void py(const eacgm_py_stack_event &e, uint32_t nframes) override;

private:
	void watch_python(uint32_t pid);
	void rescan_processes();
	// Discovery, off the ring buffer's callback: the processes seen first
	// in this round's records become known (and, in serve, judged).
	void adopt_unseen();
	void resolve_forks(bool all);
	bool awaits_verdict(const eacgm_span_event &e, bool force, uint64_t now_ns) const;
	bool discover_proc(const eacgm_proc_event &e);
	void keep_ended(const eacgm_proc_event &e);
	// serve: exits read before any call of their process (another ring).
	std::vector<eacgm_proc_event> early_exits_;
	Result<void> announce();
	void judge_candidates();
	bool adopt(uint32_t pid); // false: the filters exclude it
	Result<void> retire_exited();
	void sweep_excluded();
	Span open_span(uint32_t pid, uint32_t tid, uint32_t depth, const eacgm_open_call &c, const ProbeSpec &spec,
		       uint64_t now_ns);
	// Said to the user once, however often it happens.
	void warn_once(const std::string &message);
	void handle_proc(const struct eacgm_proc_event &e);
	// The table's, made known with its symbols' maps read and its
	// interpreter watched.
	Process &process(uint32_t pid, UniqueFd pidfd = {});
	// Decodes what was read; writes to the store when enough has gathered
	// (or force).
	Result<void> flush(bool force = false);

	Probes &probes_;
	System &system_;
	RecordSource &source_;
	Sink &out_;
	Symbolizer symbolizer_; // reads the System's /proc
	Interner names_;        // the recording's strings typed spans carry as ids (kernel names)
	NcclCommunicators nccl_;
	// Joins the work a call issued (torch's enqueue) to the call that ran it
	// (gloo's collective on a worker thread); set by open().
	std::optional<IssueLinker> issues_;
	ProcessTable table_;
	std::set<uint32_t> rescan_;             // exec'd or dlopen'd this round: maps to rescan
	std::vector<eacgm_span_event> pending_; // read, not yet decoded
	std::vector<Span> decoded_;             // decoded, not yet stored
	TypedSpans typed_;                      // decoded, kept typed, not yet stored
	std::vector<bool> typed_ok_;            // stays_typed's, by spec id
	std::chrono::steady_clock::time_point last_store_ = std::chrono::steady_clock::now();
	PythonTracer *python_;
	PythonJoiner python_join_;
	// Process records read in this round, handled after it (read_round).
	std::vector<eacgm_proc_event> procs_;
	Result<int> read_round();
	bool stays_typed(uint32_t spec_id);
	void decode(const eacgm_span_event &e);
	std::vector<std::string> warnings_;
	std::vector<std::string> notes_;
	std::set<std::string> warned_;
	bool discover_ = false;
	ProcessFilter wanted_;
	std::set<uint32_t> unseen_;     // pids of this round's spans not known yet
	std::set<uint32_t> candidates_; // serve: exec'd or loaded a library, not known yet
	std::set<uint32_t> excluded_;   // serve: the filters said no
	// serve: the records of a child whose parent was not judged yet when
	// its fork was read; they (and its calls) wait, in order, for the
	// parent's verdict (resolve_forks).
	std::vector<eacgm_proc_event> held_;
	std::set<uint32_t> held_pids_;
	std::vector<eacgm_span_event> held_spans_;
	uint64_t filtered_ = 0;
	std::chrono::steady_clock::time_point last_drops_;
	std::chrono::steady_clock::time_point last_sweep_ = std::chrono::steady_clock::now();
	uint64_t spans_seen_ = 0;
	uint64_t records_read_ = 0, handling_cpu_ns_ = 0;
	std::vector<uint64_t> spans_per_spec_;
	BudgetHistory budget_;
	TensorFormatter tensors_ = nullptr;
	std::optional<RawDumpWriter> raw_dump_;
};

} // namespace eacgm
