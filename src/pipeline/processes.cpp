// SPDX-License-Identifier: Apache-2.0
#include "pipeline/processes.h"

#include <algorithm>
#include <cstring>

namespace eacgm {

void Processes::discover(Filter wanted)
{
	discover_ = true;
	wanted_ = std::move(wanted);
	table_.forget_ended();
}

void Processes::call_seen(const eacgm_span_event &e)
{
	// Made known after this round's records: reading /proc, its maps and
	// its interpreter here would hold up every record behind this one.
	if (!table_.known(e.tgid) && !table_.ended_call(e.tgid, e.start_ns))
		unseen_.insert(e.tgid);
	table_.note_thread(e.tgid, e.tid, e.start_ns);
}

void Processes::after_read()
{
	for (const eacgm_proc_event &e : std::exchange(records_, {}))
		handle_proc(e);
	table_.name_threads();
}

void Processes::settle(bool end)
{
	adopt_unseen();
	if (!end)
		judge_candidates();
	resolve_forks(end);
	rescan_processes();
	if (!end)
		table_.end_exited(system_.now_ns());
}

// serve: an exited process is handed on whole (its end and exit code, its
// threads) and forgotten, with everything kept about it.
Result<void> Processes::retire(Sink &out)
{
	auto gone = table_.retire(out, system_.now_ns());
	if (!gone)
		return gone.error();
	for (uint32_t pid : *gone) {
		symbolizer_.forget(pid);
		probes_.forget(pid);
		if (python_)
			python_->forget(pid);
		images_gone_.push_back(pid);
	}
	return {};
}

// serve: how long a forked child's records wait for its parent's verdict,
// the calls of a process gone before it was judged for a fork record, and
// an exit read before any call of its process for those calls.
static constexpr uint64_t kForkWaitNs = 1'000'000'000;

Process &Processes::process(uint32_t pid, UniqueFd pidfd)
{
	bool created = false;
	Process &p = table_.get(pid, std::move(pidfd), &created);
	if (created) {
		// Its maps, read once: they say whether it runs Python, and the
		// symbolizer keeps them (a process gone already has none).
		if (auto maps = system_.maps(pid)) {
			watch_python(pid, maps.value());
			symbolizer_.adopt(pid, std::move(maps).value());
		}
		for (auto &w : table_.take_warnings())
			warnings_.add(w);
	}
	return p;
}

void Processes::add_root(uint32_t pid, uint32_t ppid, uint64_t start_ns, UniqueFd pidfd)
{
	Process &p = process(pid, std::move(pidfd));
	if (ppid)
		p.ppid = ppid; // else as /proc says
	p.start_ns = start_ns;
}

void Processes::set_exit(uint32_t pid, int exit_code, uint64_t end_ns)
{
	process(pid);
	table_.set_exit(pid, exit_code, end_ns);
}

// A process runs Python once it maps an interpreter: at start, or after the
// dynamic linker loaded libpython. Registered once; an exec drops the
// registration (handle_proc), and the new program's maps say afresh.
void Processes::watch_python(uint32_t pid, const std::vector<Mapping> &maps)
{
	if (!python_ || python_->processes().count(pid))
		return;
	auto r = python_->add_process(pid, maps);
	// A process that is already gone has nothing left to say.
	if (!r && system_.exists(pid))
		warnings_.add(r.error().message);
	for (auto &w : python_->take_warnings())
		warnings_.add(w);
}

// The name a process record carries (not NUL-terminated when it fills it).
static std::string record_comm(const eacgm_proc_event &e)
{
	return std::string(e.comm, strnlen(e.comm, sizeof(e.comm)));
}

void Processes::handle_proc(const eacgm_proc_event &e)
{
	if (discover_ && held_pids_.count(e.tgid)) {
		held_.push_back(e); // after its fork, which waits for the parent
		return;
	}
	if (discover_ && !table_.known(e.kind == EACGM_PROC_FORK ? e.ppid : e.tgid) && discover_proc(e))
		return;
	switch (e.kind) {
	case EACGM_PROC_FORK: {
		symbolizer_.inherit(e.tgid, e.ppid);
		probes_.inherit(e.tgid, e.ppid);
		if (python_)
			python_->inherit(e.tgid, e.ppid);
		Process &p = process(e.tgid);
		p.ppid = e.ppid;
		p.start_ns = e.ts_ns;
		// A short-lived child may be gone before we look: it runs its
		// parent's program until it execs.
		if (p.comm.empty())
			p.comm = record_comm(e);
		if (const Process *parent = table_.find(e.ppid); p.cmdline.empty() && parent)
			p.cmdline = parent->cmdline;
		break;
	}
	case EACGM_PROC_EXEC: {
		// A new image: the interpreter the process ran (its own, or its
		// parent's until now) is gone; the BPF side dropped it already
		// (python.bpf.c). Before process(): a process first known now is
		// watched as the program it runs now.
		if (python_)
			python_->forget(e.tgid);
		images_gone_.push_back(e.tgid);
		Process &p = process(e.tgid);
		p.comm = record_comm(e);
		p.cmdline = system_.cmdline(e.tgid);
		probes_.forget(e.tgid); // a new image
		symbolizer_.exec(e.tgid);
		table_.renamed(e.tgid); // by its new name
		rescan_.insert(e.tgid);
		break;
	}
	case EACGM_PROC_DLOPEN:
		// A dlopen reports twice (adding, consistent) and an import loads
		// libraries in bursts: one rescan per process per round is enough.
		process(e.tgid);
		rescan_.insert(e.tgid);
		break;
	case EACGM_PROC_EXIT:
		process(e.tgid);
		table_.exit_record(e.tgid, shell_status(e.exit_code), e.ts_ns);
		probes_.forget(e.tgid);
		break;
	}
	for (auto &w : probes_.take_warnings())
		warnings_.add(w);
}

// After an exec or dlopen: probes for what the process maps now, the maps
// kept for symbols, and the interpreter found if it just loaded one.
void Processes::rescan_processes()
{
	for (uint32_t pid : std::exchange(rescan_, {})) {
		if (!table_.live(pid))
			continue; // exited this round: nothing more to attach for it
		auto maps = system_.maps(pid);
		if (!maps)
			continue; // gone: nothing more to attach for it
		Probes::Scan scan = probes_.scan(pid, maps.value());
		for (auto &n : scan.notes)
			notes_.push_back(std::move(n));
		if (scan.interpreter)
			watch_python(pid, maps.value());
		symbolizer_.adopt(pid, std::move(maps).value());
	}
	for (auto &w : probes_.take_warnings())
		warnings_.add(w);
}

// serve: a record about a process the table does not hold. True when it
// is handled here.
bool Processes::discover_proc(const eacgm_proc_event &e)
{
	switch (e.kind) {
	case EACGM_PROC_FORK:            // of a parent the filters excluded, or not judged yet (else it is known)
		excluded_.erase(e.tgid); // a pid reused: a new process
		if (excluded_.count(e.ppid)) {
			excluded_.insert(e.tgid); // the same program until it execs
			return true;
		}
		// The parent's first calls are read in this round or the next: the
		// child (the same program until it execs) follows its verdict.
		held_.push_back(e);
		held_pids_.insert(e.tgid);
		return true;
	case EACGM_PROC_EXEC: // a new program: judged afresh
		excluded_.erase(e.tgid);
		candidates_.insert(e.tgid);
		return true;
	case EACGM_PROC_DLOPEN:
		if (!excluded_.count(e.tgid))
			candidates_.insert(e.tgid);
		return true;
	case EACGM_PROC_EXIT:
		// Still excluded: its last calls may be read after its exit (or held
		// for a fork record); sweep_excluded forgets it later.
		if (excluded_.count(e.tgid))
			return true;
		// A process the kernel traced from its first call, read exiting
		// before it was judged: kept, unjudged (the filters would read a
		// /proc entry about to go, and a reaped process reads as nameless),
		// once its calls are read: in this round, or a later one (another
		// ring).
		if (unseen_.erase(e.tgid))
			keep_ended(e);
		else
			early_exits_.push_back(e);
		return true;
	}
	return false;
}

// serve: a process known from its exit record, with what /proc still says of
// it (a zombie), else with what the record says.
void Processes::keep_ended(const eacgm_proc_event &e)
{
	if (system_.exists(e.tgid)) {
		process(e.tgid);
		table_.exit_record(e.tgid, shell_status(e.exit_code), e.ts_ns);
		return;
	}
	Process p;
	p.pid = e.tgid;
	p.comm = record_comm(e);
	p.exit_code = shell_status(e.exit_code);
	p.end_ns = e.ts_ns;
	table_.add_ended(std::move(p));
}

// serve: the forks (and what followed) of parents not judged when they were
// read, once the parents are: a child of an excluded parent is excluded, of
// an adopted one traced. The parent's first calls can be read a round after
// the fork (another ring): a child waits for them up to a second (`all`: the
// end), then is judged on its own. A child judged on its own once it has
// exited would count as traced whatever its parent was.
void Processes::resolve_forks(bool all)
{
	if (held_.empty())
		return;
	uint64_t now = system_.now_ns();
	held_pids_.clear();
	std::set<uint32_t> waiting;
	for (const eacgm_proc_event &e : std::exchange(held_, {})) {
		bool unknown = !table_.known(e.ppid) && !excluded_.count(e.ppid);
		if (waiting.count(e.tgid) ||
		    (e.kind == EACGM_PROC_FORK && unknown && !all && now < e.ts_ns + kForkWaitNs)) {
			waiting.insert(e.tgid);
			held_.push_back(e);
			continue;
		}
		if (e.kind == EACGM_PROC_FORK && unknown) {
			unseen_.insert(e.tgid);
			continue;
		}
		handle_proc(e);
	}
	held_pids_ = std::move(waiting);
	adopt_unseen();
}

void Processes::adopt_unseen()
{
	for (uint32_t pid : std::exchange(unseen_, {})) {
		if (table_.known(pid) || excluded_.count(pid))
			continue;
		auto early = std::find_if(early_exits_.begin(), early_exits_.end(),
					  [&](const eacgm_proc_event &e) { return e.tgid == pid; });
		if (early == early_exits_.end()) {
			adopt(pid);
			continue;
		}
		keep_ended(*early);
		early_exits_.erase(early);
	}
	// Exits whose calls never came (lost, or cut off by the exit):
	// nothing of them to keep.
	uint64_t now = system_.now_ns();
	std::erase_if(early_exits_, [&](const eacgm_proc_event &e) { return now > e.ts_ns + kForkWaitNs; });
}

bool Processes::adopt(uint32_t pid)
{
	if (discover_) {
		// Gone already: nothing to watch, and a table entry that no exit
		// would ever end.
		if (!system_.exists(pid))
			return false;
		if (wanted_ && !wanted_(pid)) {
			// Reaped while judged: the filters read what was left of it
			// (no name), which is no verdict.
			if (!system_.exists(pid))
				return false;
			excluded_.insert(pid);
			table_.drop_threads(pid);
			return false;
		}
		// Its forks, execs, exit and scheduling are followed from now on.
		if (auto r = probes_.track(pid); !r)
			warnings_.add(r.error().message);
	}
	process(pid);
	return true;
}

// serve: a process that exec'd or loaded a library is adopted once it maps
// what the specs trace or an interpreter; until then it costs nothing more.
void Processes::judge_candidates()
{
	for (uint32_t pid : std::exchange(candidates_, {})) {
		if (table_.known(pid) || excluded_.count(pid))
			continue;
		auto maps = system_.maps(pid);
		if (!maps)
			continue; // gone
		bool traced = false;
		for (const Mapping &m : maps.value())
			if (!m.path.empty() && m.path[0] == '/' &&
			    (probes_.wanted(m.path) || (python_ && names_python_interpreter(m.path)))) {
				traced = true;
				break;
			}
		if (traced && adopt(pid))
			rescan_.insert(pid);
	}
}

// serve: the filters' verdicts on processes that have exited since (their
// exits are not reported: they were never tracked), and the ended
// processes' ends once their last calls must have been read.
void Processes::sweep()
{
	auto now = std::chrono::steady_clock::now();
	if (now - last_sweep_ < std::chrono::seconds(10))
		return;
	last_sweep_ = now;
	table_.sweep(system_.now_ns());
	for (auto it = excluded_.begin(); it != excluded_.end();)
		if (!system_.exists(*it))
			it = excluded_.erase(it);
		else
			++it;
}

// serve: whether a call of a process not judged yet waits for a later
// round: the process is a child whose parent's verdict decides, or it is
// gone and a fork record read later (another ring) may still say whose
// child it was (up to kForkWaitNs after the call; force: never).
bool Processes::awaits_verdict(const eacgm_span_event &e, bool force, uint64_t now_ns) const
{
	if (held_pids_.count(e.tgid))
		return true;
	return !force && !table_.known(e.tgid) && !table_.ended_call(e.tgid, e.start_ns) &&
		now_ns < e.start_ns + e.dur_ns + kForkWaitNs;
}

} // namespace eacgm
