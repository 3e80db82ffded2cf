// SPDX-License-Identifier: Apache-2.0
// The processes of a recording: the table (process_table.h), what each
// process record does to it (a fork inherits its parent's probes, symbols
// and interpreter; an exec or dlopen has the maps scanned for probes; an
// exit ends it), and, in serve, which processes are adopted at all. Its
// record callback only queues; the records are handled after the round's
// read (after_read), and what discovery needs from /proc after that
// (settle), off every ring callback.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "common/fd.h"
#include "common/model.h"
#include "common/result.h"
#include "common/warnings.h"
#include "pipeline/sink.h"
#include "eacgm/abi/events.h"
#include "layers/python.h"
#include "pipeline/process_table.h"
#include "pipeline/sources.h"
#include "probe/symbolizer.h"

namespace eacgm {

class Processes {
public:
	// python may be null (no Python layer).
	Processes(Probes &probes, System &system, PythonTracer *python)
		: probes_(probes), system_(system), python_(python), symbolizer_(system.proc_root()), table_(system)
	{}

	// The node agent's mode (serve): the span engine traces every process
	// that calls a traced library, and every exec and library load on the
	// node is reported. A process is adopted (its maps, Python, exit
	// watched, tracked for the host layer and its children) when it first
	// makes a call, or when it execs or loads a library and then maps a
	// traced library or an interpreter, and only when `wanted` says so
	// (the configured filters); the others' calls are dropped, counted. An
	// exited process is handed to the sinks and forgotten: the table holds
	// the live ones only.
	using Filter = std::function<bool(uint32_t pid)>;
	void discover(Filter wanted);
	// serve: a process running when the agent starts, judged as one that
	// just exec'd.
	void consider(uint32_t pid) { candidates_.insert(pid); }
	bool discovering() const { return discover_; }

	// A process traced from the start (launched or attached with -p). Its
	// exit is watched through pidfd when given (opened before the process
	// was tracked, so that a pid reused since cannot stand in for it).
	void add_root(uint32_t pid, uint32_t ppid, uint64_t start_ns, UniqueFd pidfd = {});
	void set_exit(uint32_t pid, int exit_code, uint64_t end_ns);

	// In a ring callback, cheap: a process record, queued; a call seen
	// (its process made known after the round, its thread noted).
	void record(const eacgm_proc_event &e) { records_.push_back(e); }
	void call_seen(const eacgm_span_event &e);
	// serve: the filters said no to the process of this call.
	bool excluded(uint32_t pid) const { return excluded_.count(pid) != 0; }
	// serve: whether a call of a process not judged yet waits for a later
	// round (force: never, unless its fork's parent is not judged).
	bool awaits_verdict(const eacgm_span_event &e, bool force, uint64_t now_ns) const;

	// After a round's read: its process records, in order; threads named.
	void after_read();
	// Then: the processes first seen in the round made known (serve:
	// judged), the forks waiting for their parents' verdicts, the maps of
	// those that exec'd or loaded a library scanned. Not `end`: also the
	// candidates judged and the exits the pidfds say (the kernel writes its
	// exit record before the pidfd wakes: one read in this round is handled).
	void settle(bool end);
	// New and renamed processes to the sinks.
	Result<void> announce(Sink &out) { return table_.announce(out); }
	// serve: the ended processes handed on and forgotten.
	Result<void> retire(Sink &out);
	// serve: about every 10 s, forgets verdicts and ends of the gone.
	void sweep();

	ProcessTable &table() { return table_; }
	const ProcessTable &table() const { return table_; }
	// Symbols of the processes' maps (symbol arguments).
	Symbolizer &symbolizer() { return symbolizer_; }
	// The processes whose images went since the last take (an exec, or
	// retired): what joiners read of their memory is stale.
	std::vector<uint32_t> take_images_gone() { return std::exchange(images_gone_, {}); }
	std::vector<std::string> take_warnings() { return warnings_.take(); }
	std::vector<std::string> take_notes() { return std::exchange(notes_, {}); }

private:
	// The table's, made known with its symbols' maps read and its
	// interpreter watched.
	Process &process(uint32_t pid, UniqueFd pidfd = {});
	// maps: the process's, as the System read them.
	void watch_python(uint32_t pid, const std::vector<Mapping> &maps);
	void handle_proc(const eacgm_proc_event &e);
	void rescan_processes();
	bool discover_proc(const eacgm_proc_event &e); // serve: true when handled
	void keep_ended(const eacgm_proc_event &e);
	void resolve_forks(bool all);
	void adopt_unseen();
	bool adopt(uint32_t pid); // false: the filters exclude it
	void judge_candidates();

	Probes &probes_;
	System &system_;
	PythonTracer *python_;
	Symbolizer symbolizer_; // reads the System's /proc
	ProcessTable table_;
	std::vector<eacgm_proc_event> records_; // read in this round, handled after it
	std::set<uint32_t> rescan_;             // exec'd or dlopen'd this round: maps to rescan
	std::vector<uint32_t> images_gone_;     // exec'd or retired, for take_images_gone
	OnceWarnings warnings_;
	std::vector<std::string> notes_;
	bool discover_ = false;
	Filter wanted_;
	std::set<uint32_t> unseen_;     // pids of this round's calls not known yet
	std::set<uint32_t> candidates_; // serve: exec'd or loaded a library, not known yet
	std::set<uint32_t> excluded_;   // serve: the filters said no
	// serve: the records of a child whose parent was not judged yet when
	// its fork was read; they (and its calls) wait, in order, for the
	// parent's verdict (resolve_forks).
	std::vector<eacgm_proc_event> held_;
	std::set<uint32_t> held_pids_;
	// serve: exits read before any call of their process (another ring).
	std::vector<eacgm_proc_event> early_exits_;
	std::chrono::steady_clock::time_point last_sweep_ = std::chrono::steady_clock::now();
};

} // namespace eacgm
